//! The operator's invariant check: SQLite's own, then ours.

use std::collections::HashMap;

use rusqlite::Row;

use super::columns::address_column;
use super::{runs, InDatabase, Tx};
use crate::addr::{from_u128, to_key, to_u128};
use crate::error::Result;

/// Past this many problems of one kind the rest are summarized: a broken
/// million-lease database should not print a million lines.
const REPORTED_PER_KIND: usize = 20;

struct Problems {
    list: Vec<String>,
}

impl Problems {
    /// Records one problem of a kind counted by `seen`.
    fn add(&mut self, seen: &mut usize, problem: impl FnOnce() -> String) {
        *seen += 1;
        if *seen <= REPORTED_PER_KIND {
            self.list.push(problem());
        }
    }

    fn summarize(&mut self, seen: usize, kind: &str) {
        if seen > REPORTED_PER_KIND {
            self.list.push(format!("... {seen} {kind} in all"));
        }
    }
}

impl Tx<'_> {
    /// Problems found (empty when healthy): SQLite's integrity check, every
    /// lease inside a subnet of its registered pool, its text address
    /// matching its key, `leased_runs` agreeing with `leases`, every hold
    /// naming its identity, every sharer sharing a live lease, and every
    /// attachment's pod (what the node agent reads) of an attachment that
    /// holds or shares a lease.
    pub fn integrity_problems(&self) -> Result<Vec<String>> {
        let mut problems = Problems { list: Vec::new() };
        let mut stmt = self.sql.prepare("PRAGMA integrity_check").in_db(self.path)?;
        let sqlite_says: Vec<String> =
            stmt.query_map([], |row| row.get(0)).and_then(Iterator::collect).in_db(self.path)?;
        if sqlite_says != ["ok"] {
            problems.list.extend(sqlite_says.into_iter().map(|s| format!("sqlite: {s}")));
            // Our own checks would read through the damage.
            return Ok(problems.list);
        }
        self.check_leases(&mut problems)?;
        self.check_pool_index(&mut problems)?;
        self.check_sticky(&mut problems)?;
        self.check_attachment_pods(&mut problems)?;
        Ok(problems.list)
    }

    /// A pod kept for an attachment that holds nothing would have the node
    /// agent run a DEL for nothing, pass after pass.
    fn check_attachment_pods(&self, problems: &mut Problems) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare(
                "SELECT network, container_id, ifname FROM attachment_pods p
                 WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.network = p.network
                     AND l.container_id = p.container_id AND l.ifname = p.ifname AND l.held_until IS NULL)
                 AND NOT EXISTS (SELECT 1 FROM lease_sharers s WHERE s.network = p.network
                     AND s.container_id = p.container_id AND s.ifname = p.ifname)",
            )
            .in_db(self.path)?;
        let orphans: Vec<(String, String, String)> = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .and_then(Iterator::collect)
            .in_db(self.path)?;
        let mut seen = 0;
        for (network, container_id, ifname) in orphans {
            problems.add(&mut seen, || {
                format!(
                    "attachment_pods names container {container_id} interface {ifname} of network {network:?}, \
                     which holds no lease"
                )
            });
        }
        problems.summarize(seen, "pods of attachments without leases");
        Ok(())
    }

    fn check_leases(&self, problems: &mut Problems) -> Result<()> {
        let pools: HashMap<(String, String), _> =
            self.registered_pools()?.into_iter().map(|pool| ((pool.network, pool.name), pool.subnets)).collect();
        let mut stmt =
            self.sql.prepare("SELECT key, address, pool, network FROM leases ORDER BY key").in_db(self.path)?;
        let mut rows = stmt.query([]).in_db(self.path)?;
        let (mut misplaced, mut mislabelled) = (0, 0);
        let mut derived_runs: Vec<(u128, u128)> = Vec::new();
        while let Some(row) = rows.next().in_db(self.path)? {
            let (address, label, pool) = lease_row(row).in_db(self.path)?;
            if label != address.to_string() {
                problems.add(&mut mislabelled, || format!("lease on {address} has address text {label:?}"));
            }
            let (network, name) = &pool;
            match pools.get(&pool) {
                Some(subnets) if subnets.iter().any(|s| s.contains(&address)) => {}
                Some(_) => problems.add(&mut misplaced, || {
                    format!("lease on {address} lies outside its pool {name} of network {network:?}")
                }),
                None => problems.add(&mut misplaced, || {
                    format!("lease on {address} names unregistered pool {name} of network {network:?}")
                }),
            }
            let n = to_u128(address);
            match derived_runs.last_mut() {
                Some(run) if run.1.checked_add(1) == Some(n) => run.1 = n,
                _ => derived_runs.push((n, n)),
            }
        }
        problems.summarize(mislabelled, "leases with wrong address text");
        problems.summarize(misplaced, "leases outside their pools");

        let stored_runs = runs::stored_runs(self)?;
        if stored_runs != derived_runs {
            let first_difference = stored_runs.iter().zip(&derived_runs).position(|(a, b)| a != b);
            let at = first_difference.unwrap_or(stored_runs.len().min(derived_runs.len()));
            let show = |runs: &[(u128, u128)]| {
                runs.get(at).map_or("nothing".to_string(), |&(a, b)| format!("{}-{}", from_u128(a), from_u128(b)))
            };
            problems.list.push(format!(
                "leased_runs disagrees with leases: {} runs stored, {} derived; run #{at} is {} but should be {}",
                stored_runs.len(),
                derived_runs.len(),
                show(&stored_runs),
                show(&derived_runs)
            ));
        }
        Ok(())
    }
}

impl Tx<'_> {
    /// `pool_subnets` must list exactly the registered pools' subnets, or a
    /// new pool's overlap check would miss one.
    fn check_pool_index(&self, problems: &mut Problems) -> Result<()> {
        let mut derived: Vec<(Vec<u8>, Vec<u8>, String, String)> = Vec::new();
        for pool in self.registered_pools()? {
            for subnet in &pool.subnets {
                let (first, last) = (to_key(subnet.network()).to_vec(), to_key(subnet.broadcast()).to_vec());
                derived.push((first, last, pool.network.clone(), pool.name.clone()));
            }
        }
        derived.sort();
        let mut stmt = self
            .sql
            .prepare("SELECT first, last, network, name FROM pool_subnets ORDER BY first, network, name")
            .in_db(self.path)?;
        let stored: Vec<(Vec<u8>, Vec<u8>, String, String)> = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
            .and_then(Iterator::collect)
            .in_db(self.path)?;
        if stored != derived {
            let missing = derived.iter().filter(|d| !stored.contains(d)).count();
            let extra = stored.iter().filter(|s| !derived.contains(s)).count();
            problems.list.push(format!(
                "pool_subnets disagrees with pools: {missing} registered subnets missing, {extra} stale entries"
            ));
        }
        Ok(())
    }
}

impl Tx<'_> {
    /// Sticky addresses: a hold is kept for an identity, so one without
    /// any is an address nobody can get back and nobody else may take until
    /// it ends; a `lease_sharers` row shares a live lease of its network,
    /// or it would hand its attachment an address that is free or held.
    fn check_sticky(&self, problems: &mut Problems) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare(
                "SELECT key, pool, network FROM leases WHERE held_until IS NOT NULL AND identity IS NULL ORDER BY key",
            )
            .in_db(self.path)?;
        let mut rows = stmt.query([]).in_db(self.path)?;
        let mut anonymous = 0;
        while let Some(row) = rows.next().in_db(self.path)? {
            let address = address_column(row, 0).in_db(self.path)?;
            let (pool, network): (String, String) = (row.get(1).in_db(self.path)?, row.get(2).in_db(self.path)?);
            problems.add(&mut anonymous, || {
                format!("hold on {address} (pool {pool} of network {network:?}) names no identity")
            });
        }
        problems.summarize(anonymous, "holds without identity");

        // The lease row of the shared address, if any: its network and whether it is a hold.
        let mut stmt = self
            .sql
            .prepare(
                "SELECT s.key, s.network, s.container_id, s.ifname, l.network, l.held_until IS NOT NULL
                 FROM lease_sharers s LEFT JOIN leases l ON l.key = s.key
                 ORDER BY s.key, s.network, s.container_id, s.ifname",
            )
            .in_db(self.path)?;
        let mut rows = stmt.query([]).in_db(self.path)?;
        let mut orphaned = 0;
        while let Some(row) = rows.next().in_db(self.path)? {
            let address = address_column(row, 0).in_db(self.path)?;
            let sharer = crate::args::Attachment {
                network: row.get(1).in_db(self.path)?,
                container_id: row.get(2).in_db(self.path)?,
                ifname: row.get(3).in_db(self.path)?,
            };
            let lease: (Option<String>, Option<bool>) = (row.get(4).in_db(self.path)?, row.get(5).in_db(self.path)?);
            let what = match lease {
                (Some(network), Some(false)) if network == sharer.network => continue,
                (Some(network), Some(false)) => format!("a lease of network {network:?}"),
                (Some(_), Some(true)) => "a hold".to_string(),
                _ => "free".to_string(),
            };
            problems.add(&mut orphaned, || format!("{sharer} shares {address}, which has no live lease: it is {what}"));
        }
        problems.summarize(orphaned, "sharers without a live lease");
        Ok(())
    }
}

/// Address, address text, pool and network of a lease.
fn lease_row(row: &Row) -> rusqlite::Result<(std::net::IpAddr, String, (String, String))> {
    Ok((address_column(row, 0)?, row.get(1)?, (row.get(3)?, row.get(2)?)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ip, owner, temp_store};
    use serde_json::json;

    #[test]
    fn a_healthy_database_has_no_problems_and_damage_is_named() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store
            .write(|tx| {
                tx.register_pool("net", "p", &["10.0.0.0/24".parse().unwrap()], &json!({}))?.unwrap();
                for last in [1, 2, 3, 7] {
                    tx.insert_lease(ip(&format!("10.0.0.{last}")), "p", &a)?;
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap(), Vec::<String>::new());
        store.write(|tx| Ok(tx.sql.execute("DELETE FROM pool_subnets", []).unwrap())).unwrap();
        let problems = store.read(|tx| tx.integrity_problems()).unwrap();
        assert!(
            problems == ["pool_subnets disagrees with pools: 1 registered subnets missing, 0 stale entries"],
            "{problems:?}"
        );
        store.write(|tx| tx.register_pool("net", "p", &["10.0.0.0/25".parse().unwrap()], &json!({}))).unwrap().unwrap();
        store.write(|tx| tx.register_pool("net", "p", &["10.0.0.0/24".parse().unwrap()], &json!({}))).unwrap().unwrap();
        assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap(), Vec::<String>::new());

        store.write(|tx| tx.insert_lease(ip("10.9.0.1"), "p", &a)).unwrap();
        store.write(|tx| tx.insert_lease(ip("10.0.0.9"), "ghost", &a)).unwrap();
        store
            .write(|tx| {
                tx.sql
                    .execute("DELETE FROM leased_runs WHERE first = ?1", [&crate::addr::to_key(ip("10.0.0.7"))[..]])
                    .unwrap();
                tx.sql.execute("UPDATE leases SET address = 'x' WHERE address = '10.0.0.2'", []).unwrap();
                Ok(())
            })
            .unwrap();
        let problems = store.read(|tx| tx.integrity_problems()).unwrap();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems[0].contains("10.0.0.2") && problems[0].contains("\"x\""), "{}", problems[0]);
        assert!(problems[1].contains("10.0.0.9") && problems[1].contains("ghost"), "{}", problems[1]);
        assert!(problems[2].contains("10.9.0.1") && problems[2].contains("outside"), "{}", problems[2]);
        assert!(problems[3].contains("leased_runs") && problems[3].contains("10.0.0.7-10.0.0.7"), "{}", problems[3]);
    }

    #[test]
    fn a_hold_without_identity_and_a_sharer_without_a_live_lease_are_named() {
        let (_dir, mut store) = temp_store();
        let (first, second, gone) =
            (owner("net", "c1", "eth0"), owner("net", "c2", "eth0"), owner("net", "c0", "eth0"));
        store
            .write(|tx| {
                tx.register_pool("net", "p", &["10.0.0.0/24".parse().unwrap()], &json!({}))?.unwrap();
                tx.register_pool("other", "q", &["10.1.0.0/24".parse().unwrap()], &json!({}))?.unwrap();
                tx.insert_lease(ip("10.0.0.1"), "p", &first)?;
                tx.bind_identity(&first, "prod/vm-1")?;
                tx.share_lease(ip("10.0.0.1"), &second)?;
                tx.insert_lease(ip("10.0.0.2"), "p", &gone)?;
                tx.bind_identity(&gone, "prod/db-0")?;
                tx.release(&gone, Some(std::time::Duration::from_secs(600)))?;
                tx.insert_lease(ip("10.1.0.1"), "q", &owner("other", "c9", "eth0"))
            })
            .unwrap();
        assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap(), Vec::<String>::new(), "a hold and a share");

        store
            .write(|tx| {
                tx.sql.execute("UPDATE leases SET identity = NULL WHERE address = '10.0.0.2'", []).unwrap();
                // Sharing a hold, a free address and another network's lease.
                tx.share_lease(ip("10.0.0.2"), &owner("net", "c3", "eth0"))?;
                tx.share_lease(ip("10.0.0.9"), &owner("net", "c4", "eth0"))?;
                tx.share_lease(ip("10.1.0.1"), &owner("net", "c5", "eth0"))
            })
            .unwrap();
        let problems = store.read(|tx| tx.integrity_problems()).unwrap();
        assert_eq!(
            problems,
            [
                "hold on 10.0.0.2 (pool p of network \"net\") names no identity",
                "container c3 interface eth0 of network \"net\" shares 10.0.0.2, which has no live lease: it is a hold",
                "container c4 interface eth0 of network \"net\" shares 10.0.0.9, which has no live lease: it is free",
                "container c5 interface eth0 of network \"net\" shares 10.1.0.1, which has no live lease: it is a \
                 lease of network \"other\"",
            ]
        );
    }

    #[test]
    fn a_pod_kept_for_an_attachment_without_leases_is_named() {
        let (_dir, mut store) = temp_store();
        let kept = owner("net", "c1", "eth0");
        store.set_agent_record(Some(super::super::AgentRecord {
            attachment: kept.clone(),
            pod: super::super::Pod { namespace: "prod".into(), name: "db-0".into(), uid: None },
            config: "{}".into(),
        }));
        store
            .write(|tx| {
                tx.register_pool("net", "p", &["10.0.0.0/24".parse().unwrap()], &json!({}))?.unwrap();
                tx.insert_lease(ip("10.0.0.1"), "p", &kept)
            })
            .unwrap();
        assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap(), Vec::<String>::new());
        // Its lease deleted behind the store's back: the pod row stays.
        store.write(|tx| Ok(tx.sql.execute("DELETE FROM leases", []).unwrap())).unwrap();
        store.write(|tx| Ok(tx.sql.execute("DELETE FROM leased_runs", []).unwrap())).unwrap();
        let problems = store.read(|tx| tx.integrity_problems()).unwrap();
        assert_eq!(
            problems,
            ["attachment_pods names container c1 interface eth0 of network \"net\", which holds no lease"]
        );
    }
}
