//! Registered pools: each pool's subnets and definition as last configured,
//! and its cursor (the last address handed out) for round-robin allocation.
//! A pool is named within its network: the same name in two networks is two
//! pools, which must not overlap like any two pools of one database.

use std::net::IpAddr;

use ipnet::IpNet;
use rusqlite::{params, Row};
use serde_json::Value;

use super::{unusable, InDatabase, Tx};
use crate::error::{CniError, Code, Result};

/// A pool as recorded in the database.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredPool {
    pub network: String,
    pub name: String,
    pub subnets: Vec<IpNet>,
    pub definition: Value,
    pub cursor: Option<IpAddr>,
}

/// The row's text columns, parsed outside rusqlite so that a bad value names
/// its pool in the error.
struct PoolRow {
    network: String,
    name: String,
    subnets: String,
    definition: String,
    cursor: Option<String>,
}

impl RegisteredPool {
    /// Whether this is the record of a pool with these subnets and definition.
    pub fn is(&self, subnets: &[IpNet], definition: &Value) -> bool {
        self.subnets == subnets && self.definition == *definition
    }
}

fn pool_row(row: &Row) -> rusqlite::Result<PoolRow> {
    Ok(PoolRow {
        network: row.get(0)?,
        name: row.get(1)?,
        subnets: row.get(2)?,
        definition: row.get(3)?,
        cursor: row.get(4)?,
    })
}

impl Tx<'_> {
    pub fn registered_pool(&self, network: &str, name: &str) -> Result<Option<RegisteredPool>> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "SELECT network, name, subnets, definition, cursor FROM pools WHERE network = ?1 AND name = ?2",
            )
            .in_db(self.path)?;
        let mut rows = stmt.query_map([network, name], pool_row).in_db(self.path)?;
        rows.next().transpose().in_db(self.path)?.map(|row| self.parse_pool(row)).transpose()
    }

    /// Every registered pool, by network and name.
    pub fn registered_pools(&self) -> Result<Vec<RegisteredPool>> {
        let mut stmt = self
            .sql
            .prepare_cached("SELECT network, name, subnets, definition, cursor FROM pools ORDER BY network, name")
            .in_db(self.path)?;
        let rows: Vec<PoolRow> = stmt.query_map([], pool_row).and_then(Iterator::collect).in_db(self.path)?;
        rows.into_iter().map(|row| self.parse_pool(row)).collect()
    }

    /// Records a pool's subnets and definition and returns its cursor. Writes
    /// nothing when they are already recorded as given, so the common case
    /// stays read-only. Error 7 when a subnet overlaps one of another pool (of
    /// any network); a changed definition replaces the old one and keeps the cursor.
    pub fn register_pool(
        &self,
        network: &str,
        name: &str,
        subnets: &[IpNet],
        definition: &Value,
    ) -> Result<Option<IpAddr>> {
        let known = self.registered_pool(network, name)?;
        if let Some(known) = known.as_ref().filter(|k| k.is(subnets, definition)) {
            return Ok(known.cursor);
        }
        for other in self
            .registered_pools()?
            .iter()
            .filter(|other| (other.network.as_str(), other.name.as_str()) != (network, name))
        {
            for mine in subnets {
                if let Some(theirs) = other.subnets.iter().find(|theirs| overlap(mine, theirs)) {
                    return Err(CniError::config(
                        &format!("pool {name}"),
                        format!(
                            "subnet {mine} overlaps subnet {theirs} of pool {} of network {:?}, recorded in allocation database {}",
                            other.name,
                            other.network,
                            self.path.display()
                        ),
                    ));
                }
            }
        }
        let mut stmt = self
            .sql
            .prepare_cached(
                "INSERT INTO pools (network, name, family, subnets, definition) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (network, name) DO UPDATE SET
                     family = excluded.family, subnets = excluded.subnets, definition = excluded.definition",
            )
            .in_db(self.path)?;
        let subnet_list: Vec<String> = subnets.iter().map(IpNet::to_string).collect();
        stmt.execute(params![network, name, family(subnets), subnet_list.join(","), definition.to_string()])
            .in_db(self.path)?;
        Ok(known.and_then(|k| k.cursor))
    }

    /// Records `last` as the pool's last handed-out address.
    pub fn set_cursor(&self, network: &str, pool: &str, last: IpAddr) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached("UPDATE pools SET cursor = ?3 WHERE network = ?1 AND name = ?2")
            .in_db(self.path)?;
        if stmt.execute(params![network, pool, last.to_string()]).in_db(self.path)? == 0 {
            return Err(CniError::new(Code::Internal, format!("bug: cursor set for unregistered pool {pool}")));
        }
        Ok(())
    }

    fn parse_pool(&self, row: PoolRow) -> Result<RegisteredPool> {
        let corrupt =
            |what: &str, err: &dyn std::fmt::Display| unusable(self.path, format!("pool {}: {what}: {err}", row.name));
        let subnets = row
            .subnets
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<std::result::Result<Vec<IpNet>, _>>()
            .map_err(|e| corrupt("subnets", &e))?;
        let definition = serde_json::from_str(&row.definition).map_err(|e| corrupt("definition", &e))?;
        let cursor = row.cursor.as_deref().map(str::parse).transpose().map_err(|e| corrupt("cursor", &e))?;
        Ok(RegisteredPool { network: row.network, name: row.name, subnets, definition, cursor })
    }
}

fn overlap(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// For people reading the table: which families the subnets cover.
fn family(subnets: &[IpNet]) -> &'static str {
    let v4 = subnets.iter().any(|s| matches!(s, IpNet::V4(_)));
    let v6 = subnets.iter().any(|s| matches!(s, IpNet::V6(_)));
    match (v4, v6) {
        (true, true) => "ipv4,ipv6",
        (false, true) => "ipv6",
        _ => "ipv4",
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ip, temp_store};
    use super::super::{AllocationStore, DEFAULT_LOCK_TIMEOUT};
    use super::*;
    use serde_json::json;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn overlapping_subnets_of_another_pool_are_error_7_naming_both() {
        let (_dir, mut store) = temp_store();
        store.write(|tx| tx.register_pool("n", "a", &nets(&["10.0.0.0/16", "fd00::/64"]), &json!({"n": 1}))).unwrap();
        for (mine, theirs) in
            [("10.0.3.0/24", "10.0.0.0/16"), ("10.0.0.0/8", "10.0.0.0/16"), ("fd00::/48", "fd00::/64")]
        {
            let e =
                store.write(|tx| tx.register_pool("n", "b", &nets(&["10.200.0.0/24", mine]), &json!({}))).unwrap_err();
            assert_eq!(e.code, 7);
            for part in ["pool b", mine, theirs, "pool a"] {
                assert!(e.msg.contains(part), "{part} in {}", e.msg);
            }
        }
        assert_eq!(store.read(|tx| tx.registered_pool("n", "b")).unwrap(), None);
        store.write(|tx| tx.register_pool("n", "b", &nets(&["10.1.0.0/16", "fd01::/64"]), &json!({}))).unwrap();
        let names: Vec<String> = store.read(|tx| tx.registered_pools()).unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn identical_registration_writes_nothing_and_a_changed_one_keeps_the_cursor() {
        let (_dir, mut store) = temp_store();
        let subnets = nets(&["10.0.0.0/24"]);
        store.write(|tx| tx.register_pool("n", "a", &subnets, &json!({"range": [1, 2]}))).unwrap();
        store.write(|tx| tx.set_cursor("n", "a", ip("10.0.0.7"))).unwrap();

        let writes = |tx: &Tx| tx.sql.total_changes();
        let changes = store
            .write(|tx| Ok((writes(tx), tx.register_pool("n", "a", &subnets, &json!({"range": [1, 2]}))?, writes(tx))));
        let (before, cursor, after) = changes.unwrap();
        assert_eq!(before, after, "identical re-registration must not write");
        assert_eq!(cursor, Some(ip("10.0.0.7")), "registration answers the cursor");

        // Shrinking the pool is also a change of subnets on the same name: allowed.
        let cursor =
            store.write(|tx| tx.register_pool("n", "a", &nets(&["10.0.0.0/25"]), &json!({"range": [1, 3]}))).unwrap();
        assert_eq!(cursor, Some(ip("10.0.0.7")));
        let pool = store.read(|tx| tx.registered_pool("n", "a")).unwrap().unwrap();
        assert_eq!(pool.subnets, nets(&["10.0.0.0/25"]));
        assert_eq!(pool.definition, json!({"range": [1, 3]}));
        assert_eq!(pool.cursor, Some(ip("10.0.0.7")));
    }

    #[test]
    fn the_cursor_survives_reopening() {
        let (dir, mut store) = temp_store();
        store
            .write(|tx| {
                tx.register_pool("n", "v6", &nets(&["fd00::/64"]), &json!(null))?;
                tx.set_cursor("n", "v6", ip("fd00::42"))
            })
            .unwrap();
        drop(store);
        let mut store = AllocationStore::open(&dir.path().join("ipam.db"), DEFAULT_LOCK_TIMEOUT).unwrap();
        let pool = store.read(|tx| tx.registered_pool("n", "v6")).unwrap().unwrap();
        assert_eq!(pool.cursor, Some(ip("fd00::42")));
        assert_eq!(store.write(|tx| tx.set_cursor("n", "missing", ip("fd00::1"))).unwrap_err().code, 999);
    }
}
