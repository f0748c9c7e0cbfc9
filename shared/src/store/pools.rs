//! Registered pools: each pool's subnets and definition as last configured,
//! and its cursor (the last address handed out) for round-robin allocation.
//! A pool is named within its network: the same name in two networks is two
//! pools, which must not overlap like any two pools of one database.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use rusqlite::{params, Row};
use serde_json::Value;

use super::{unusable, InDatabase, Lease, Tx};
use crate::addr::{from_key, to_key, to_u128};
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

/// A registered pool that holds leases or holds that have not ended on a
/// subnet overlapping one of a pool being registered: `subnet` (the new
/// pool's) overlaps `theirs` of `pool` of `network`. It reads as the way
/// out, for the operator.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolOverlap {
    pub subnet: IpNet,
    pub theirs: IpNet,
    pub network: String,
    pub pool: String,
    /// How many attachments' leases it holds.
    pub leases: u64,
    /// The identities' holds in it that have not ended (ipam-da-sticky).
    pub holds: Vec<Lease>,
    pub database: PathBuf,
}

/// How many holds a message names one by one; the rest are counted.
const HOLDS_NAMED: usize = 3;

impl PoolOverlap {
    /// `holds 2 leases and has 10.0.0.5 held for identity "prod/db-0" until …`.
    fn what_it_holds(&self) -> String {
        let mut what = Vec::new();
        if self.leases > 0 {
            what.push(format!("holds {} lease{}", self.leases, if self.leases == 1 { "" } else { "s" }));
        }
        if !self.holds.is_empty() {
            let mut named: Vec<String> = self.holds.iter().take(HOLDS_NAMED).map(hold_words).collect();
            if self.holds.len() > HOLDS_NAMED {
                named.push(format!("{} more holds", self.holds.len() - HOLDS_NAMED));
            }
            what.push(format!("has {}", named.join(", ")));
        }
        what.join(" and ")
    }

    /// The commands that end what it holds: the attachments' DEL, the
    /// release of each named hold's identity, forgetting the pool.
    fn ways_out(&self) -> Vec<String> {
        let PoolOverlap { network, pool, database, .. } = self;
        let db = database.display();
        let mut ways = Vec::new();
        if self.leases > 0 {
            ways.push("release the leases (DEL the attachments)".to_string());
        }
        let mut identities: Vec<&str> = Vec::new();
        for identity in self.holds.iter().take(HOLDS_NAMED).filter_map(|h| h.identity.as_deref()) {
            if !identities.contains(&identity) {
                identities.push(identity);
            }
        }
        for identity in identities {
            ways.push(format!(
                "end the holds of identity {identity:?} ('ipam-delegated --database {db} release --identity {} \
                 --network {network}')",
                shell_word(identity)
            ));
        }
        ways.push(format!(
            "or forget the pool ('ipam-delegated --database {db} forget-pool --network {network} --pool {pool}')"
        ));
        ways
    }
}

impl fmt::Display for PoolOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PoolOverlap { subnet, theirs, network, pool, database, .. } = self;
        write!(
            f,
            "subnet {subnet} overlaps subnet {theirs} of pool {pool} of network {network:?}, which still {} in \
             allocation database {}: {}",
            self.what_it_holds(),
            database.display(),
            self.ways_out().join(", ")
        )
    }
}

/// `10.0.0.5 held for identity "prod/db-0" until 2026-01-02T03:04:05Z`.
fn hold_words(hold: &Lease) -> String {
    let until = hold.held_until.map(crate::utc::iso8601).unwrap_or_default();
    format!("{} held for identity {:?} until {until}", hold.address, hold.identity.as_deref().unwrap_or_default())
}

/// `word` as one word of a shell command: as it is when nothing in it is
/// special to a shell, else in double quotes (the command is shown in
/// single quotes).
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:@%+=,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    let mut quoted = String::from('"');
    for c in word.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
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
    /// stays read-only; a changed definition replaces the old one and keeps
    /// the cursor. Another pool (of any network) registered on an
    /// overlapping subnet gives way when it holds no lease and no hold that
    /// has not ended (its record is dropped; holds past their end are
    /// dropped first, as an allocation would); while it holds any, nothing
    /// is written and the answer is that [`PoolOverlap`], for the caller to
    /// report.
    pub fn register_pool(
        &self,
        network: &str,
        name: &str,
        subnets: &[IpNet],
        definition: &Value,
    ) -> Result<Result<Option<IpAddr>, PoolOverlap>> {
        let known = self.registered_pool(network, name)?;
        if let Some(known) = known.as_ref().filter(|k| k.is(subnets, definition)) {
            return Ok(Ok(known.cursor));
        }
        let mut gave_way: Vec<(String, String)> = Vec::new();
        let mut ended_dropped = false;
        for mine in subnets {
            for (theirs, other_network, other_name) in self.overlapping_subnets(mine, network, name)? {
                if gave_way.iter().any(|(n, p)| (n, p) == (&other_network, &other_name)) {
                    continue;
                }
                // A hold that ended keeps nothing: dropped here as the next
                // allocation would (once, and only when a pool overlaps).
                if !ended_dropped {
                    self.drop_expired_holds()?;
                    ended_dropped = true;
                }
                // An identity's hold keeps its pool too: the address comes
                // back from that pool.
                let leases = self.count_pool_leases(&other_network, &other_name)?;
                let holds = self.holds_of_pool(&other_network, &other_name)?;
                if leases > 0 || !holds.is_empty() {
                    return Ok(Err(PoolOverlap {
                        subnet: *mine,
                        theirs,
                        network: other_network,
                        pool: other_name,
                        leases,
                        holds,
                        database: self.path.to_path_buf(),
                    }));
                }
                self.unregister_pool(&other_network, &other_name)?;
                tracing::info!(
                    "pool {other_name} of network {other_network:?} ({theirs}) held no lease and gave way to pool \
                     {name} of network {network:?} ({mine})"
                );
                gave_way.push((other_network, other_name));
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
        if known.as_ref().is_none_or(|k| k.subnets != subnets) {
            self.index_subnets(network, name, subnets)?;
        }
        Ok(Ok(known.and_then(|k| k.cursor)))
    }

    /// The registered subnets of other pools that share an address with
    /// `subnet`, as (their subnet, network, pool). Registered subnets do not
    /// overlap each other, so walking down from the last one that starts
    /// within `subnet` can stop at the first that ends before it.
    fn overlapping_subnets(&self, subnet: &IpNet, network: &str, name: &str) -> Result<Vec<(IpNet, String, String)>> {
        let (first, last) = (to_key(subnet.network()), to_key(subnet.broadcast()));
        let mut stmt = self
            .sql
            .prepare_cached("SELECT first, last, network, name FROM pool_subnets WHERE first <= ?1 ORDER BY first DESC")
            .in_db(self.path)?;
        let mut rows = stmt.query([&last[..]]).in_db(self.path)?;
        let mut found = Vec::new();
        while let Some(row) = rows.next().in_db(self.path)? {
            let (their_first, their_last): (Vec<u8>, Vec<u8>) =
                (row.get(0).in_db(self.path)?, row.get(1).in_db(self.path)?);
            if their_last.as_slice() < &first[..] {
                break;
            }
            let (other_network, other_name): (String, String) =
                (row.get(2).in_db(self.path)?, row.get(3).in_db(self.path)?);
            if (other_network.as_str(), other_name.as_str()) == (network, name) {
                continue;
            }
            let theirs = subnet_of(&their_first, &their_last)
                .ok_or_else(|| unusable(self.path, format!("pool {other_name}: a subnet key that is not a subnet")))?;
            found.push((theirs, other_network, other_name));
        }
        Ok(found)
    }

    /// Replaces the pool's rows of the subnet index.
    fn index_subnets(&self, network: &str, name: &str, subnets: &[IpNet]) -> Result<()> {
        self.sql
            .prepare_cached("DELETE FROM pool_subnets WHERE network = ?1 AND name = ?2")
            .and_then(|mut stmt| stmt.execute([network, name]))
            .in_db(self.path)?;
        let mut insert = self
            .sql
            .prepare_cached("INSERT INTO pool_subnets (first, last, network, name) VALUES (?1, ?2, ?3, ?4)")
            .in_db(self.path)?;
        for subnet in subnets {
            insert
                .execute(params![&to_key(subnet.network())[..], &to_key(subnet.broadcast())[..], network, name])
                .in_db(self.path)?;
        }
        Ok(())
    }

    /// Drops a pool's record (its leases, if any, stay: see [`Tx::forget_pool`]).
    /// Returns whether it was registered.
    fn unregister_pool(&self, network: &str, name: &str) -> Result<bool> {
        self.index_subnets(network, name, &[])?;
        let deleted = self
            .sql
            .prepare_cached("DELETE FROM pools WHERE network = ?1 AND name = ?2")
            .and_then(|mut stmt| stmt.execute([network, name]))
            .in_db(self.path)?;
        Ok(deleted > 0)
    }

    /// The operator's way out for a pool that is gone from the configuration
    /// but still holds leases: releases every lease of the pool and drops its
    /// record, so that its subnets can be registered again. Returns the
    /// released leases and whether the pool was registered.
    pub fn forget_pool(&self, network: &str, name: &str) -> Result<(Vec<Lease>, bool)> {
        let released = self.release_pool_leases(network, name)?;
        let was_registered = self.unregister_pool(network, name)?;
        Ok((released, was_registered))
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

/// The subnet whose first and last address keys these are.
fn subnet_of(first: &[u8], last: &[u8]) -> Option<IpNet> {
    let (first, last) = (from_key(first)?, from_key(last)?);
    let host_bits = (to_u128(first) ^ to_u128(last)).count_ones() as u8;
    let max = if first.is_ipv4() { 32 } else { 128 };
    IpNet::new(first, max - host_bits).ok()
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
    use super::super::testing::{ip, owner, temp_store};
    use super::super::{AllocationStore, DEFAULT_LOCK_TIMEOUT};
    use super::*;
    use serde_json::json;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn overlapping_subnets_of_a_pool_with_leases_are_error_7_naming_both_and_the_way_out() {
        let (_dir, mut store) = temp_store();
        store
            .write(|tx| tx.register_pool("n", "a", &nets(&["10.0.0.0/16", "fd00::/64"]), &json!({"n": 1})))
            .unwrap()
            .unwrap();
        store.write(|tx| tx.insert_lease(ip("10.0.9.9"), "a", &owner("n", "c", "eth0"))).unwrap();
        store.write(|tx| tx.insert_lease(ip("fd00::9"), "a", &owner("n", "c", "eth0"))).unwrap();
        for (mine, theirs) in
            [("10.0.3.0/24", "10.0.0.0/16"), ("10.0.0.0/8", "10.0.0.0/16"), ("fd00::/48", "fd00::/64")]
        {
            let e = store
                .write(|tx| tx.register_pool("m", "b", &nets(&["10.200.0.0/24", mine]), &json!({})))
                .unwrap()
                .unwrap_err()
                .to_string();
            for part in [mine, theirs, "pool a", "holds 2 leases", "forget-pool --network n --pool a"] {
                assert!(e.contains(part), "{part} in {e}");
            }
        }
        assert_eq!(store.read(|tx| tx.registered_pool("m", "b")).unwrap(), None);
        store
            .write(|tx| tx.register_pool("n", "b", &nets(&["10.1.0.0/16", "fd01::/64"]), &json!({})))
            .unwrap()
            .unwrap();
        let names: Vec<String> = store.read(|tx| tx.registered_pools()).unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_registration_without_leases_gives_way_and_forget_pool_releases_one_with_leases() {
        let (_dir, mut store) = temp_store();
        // Renamed: p becomes q on the same subnet, p holding nothing.
        store.write(|tx| tx.register_pool("n", "p", &nets(&["10.7.0.0/24"]), &json!({}))).unwrap().unwrap();
        store.write(|tx| tx.register_pool("n", "q", &nets(&["10.7.0.0/24"]), &json!({}))).unwrap().unwrap();
        // Moved to another network and merged into one larger pool.
        store.write(|tx| tx.register_pool("n", "r", &nets(&["10.8.0.0/25"]), &json!({}))).unwrap().unwrap();
        store
            .write(|tx| tx.register_pool("other", "all", &nets(&["10.7.0.0/23", "10.8.0.0/24"]), &json!({})))
            .unwrap()
            .unwrap();
        let names: Vec<(String, String)> =
            store.read(|tx| tx.registered_pools()).unwrap().into_iter().map(|p| (p.network, p.name)).collect();
        assert_eq!(names, [("other".to_string(), "all".to_string())]);

        // Leases hold a registration in place until the operator forgets it.
        store.write(|tx| tx.insert_lease(ip("10.7.0.5"), "all", &owner("other", "c1", "eth0"))).unwrap();
        store.write(|tx| tx.insert_lease(ip("10.8.0.5"), "all", &owner("other", "c2", "eth0"))).unwrap();
        let e = store
            .write(|tx| tx.register_pool("n", "p", &nets(&["10.7.0.0/24"]), &json!({})))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds 2 leases"), "{e}");
        let (released, was_registered) = store.write(|tx| tx.forget_pool("other", "all")).unwrap();
        assert!(was_registered);
        assert_eq!(released.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("10.7.0.5"), ip("10.8.0.5")]);
        store.write(|tx| tx.register_pool("n", "p", &nets(&["10.7.0.0/24"]), &json!({}))).unwrap().unwrap();
        assert_eq!(store.read(|tx| tx.holder(ip("10.7.0.5"))).unwrap(), None);
        assert_eq!(store.write(|tx| tx.forget_pool("other", "all")).unwrap(), (vec![], false));
    }

    #[test]
    fn a_hold_keeps_a_pool_registered_until_it_ends_and_is_named_as_a_hold() {
        let (_dir, mut store) = temp_store();
        let c1 = owner("n", "c1", "eth0");
        store.write(|tx| tx.register_pool("n", "blue", &nets(&["10.9.0.0/24"]), &json!({}))).unwrap().unwrap();
        store
            .write(|tx| {
                tx.insert_lease(ip("10.9.0.5"), "blue", &c1)?;
                tx.bind_identity(&c1, "prod/db 0")?;
                tx.release(&c1, Some(std::time::Duration::from_secs(3600))).map(drop)
            })
            .unwrap();
        // Renamed over the same subnet while the hold lasts: refused, naming
        // the hold, its identity and end, and how to end it.
        let e = store
            .write(|tx| tx.register_pool("n", "green", &nets(&["10.9.0.0/24"]), &json!({})))
            .unwrap()
            .unwrap_err()
            .to_string();
        for part in [
            "pool blue",
            "10.9.0.5 held for identity \"prod/db 0\" until 20",
            "release --identity \"prod/db 0\" --network n",
            "forget-pool --network n --pool blue",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
        assert!(!e.contains(" lease") && !e.contains("DEL the attachments"), "a hold is not a lease: {e}");
        // With a lease too: both, each with its way out.
        store.write(|tx| tx.insert_lease(ip("10.9.0.6"), "blue", &owner("n", "c2", "eth0"))).unwrap();
        let e = store
            .write(|tx| tx.register_pool("n", "green", &nets(&["10.9.0.0/24"]), &json!({})))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("which still holds 1 lease and has 10.9.0.5 held for identity"), "{e}");
        assert!(e.contains("DEL the attachments") && e.contains("release --identity"), "{e}");
        store.write(|tx| tx.release(&owner("n", "c2", "eth0"), None)).unwrap();

        // Once the hold ended (list shows it expired), nothing keeps the
        // pool: it gives way on the first registration, and the hold goes.
        store
            .write(|tx| {
                let now = super::super::unix_now();
                tx.sql.execute("UPDATE leases SET held_until = ?1 WHERE address = '10.9.0.5'", [now]).unwrap();
                Ok(())
            })
            .unwrap();
        store.write(|tx| tx.register_pool("n", "green", &nets(&["10.9.0.0/24"]), &json!({}))).unwrap().unwrap();
        let names: Vec<String> = store.read(|tx| tx.registered_pools()).unwrap().into_iter().map(|p| p.name).collect();
        assert_eq!(names, ["green"]);
        assert_eq!(store.read(|tx| tx.holder(ip("10.9.0.5"))).unwrap(), None, "the ended hold was dropped");
    }

    #[test]
    fn identical_registration_writes_nothing_and_a_changed_one_keeps_the_cursor() {
        let (_dir, mut store) = temp_store();
        let subnets = nets(&["10.0.0.0/24"]);
        store.write(|tx| tx.register_pool("n", "a", &subnets, &json!({"range": [1, 2]}))).unwrap().unwrap();
        store.write(|tx| tx.set_cursor("n", "a", ip("10.0.0.7"))).unwrap();

        let writes = |tx: &Tx| tx.sql.total_changes();
        let changes = store
            .write(|tx| Ok((writes(tx), tx.register_pool("n", "a", &subnets, &json!({"range": [1, 2]}))?, writes(tx))));
        let (before, cursor, after) = changes.unwrap();
        assert_eq!(before, after, "identical re-registration must not write");
        assert_eq!(cursor, Ok(Some(ip("10.0.0.7"))), "registration answers the cursor");

        // Shrinking the pool is also a change of subnets on the same name: allowed.
        let cursor = store
            .write(|tx| tx.register_pool("n", "a", &nets(&["10.0.0.0/25"]), &json!({"range": [1, 3]})))
            .unwrap()
            .unwrap();
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
                tx.register_pool("n", "v6", &nets(&["fd00::/64"]), &json!(null))?.unwrap();
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
