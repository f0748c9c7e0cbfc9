//! Leases: which attachment holds which address.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use rusqlite::{params, Row};

use super::columns::{address_column, now_unix, LEASED};
use super::holds::HoldSpan;
use super::{runs, InDatabase, Tx};
use crate::addr::{to_key, to_u128};
use crate::args::Attachment;
use crate::error::{CniError, Code, Result};

/// One address held by one attachment, or, once that attachment is gone,
/// held for the workload identity it had (see [`Lease::held_until`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub address: IpAddr,
    pub pool: String,
    /// The attachment that holds it; of a hold, the one that last held it.
    pub owner: Attachment,
    /// Unix seconds: when `owner` leased it; of a hold, when the hold began.
    pub since: i64,
    /// The workload identity the address sticks to (ipam-da-sticky).
    pub identity: Option<String>,
    /// `None`: leased by `owner`. Else held for `identity` until then
    /// (unix seconds), and no attachment's.
    pub held_until: Option<i64>,
    /// The ipam-delegated ADD that leased it, if any.
    pub added_by: Option<String>,
}

impl Lease {
    pub fn is_hold(&self) -> bool {
        self.held_until.is_some()
    }
}

/// Which leases the operator listing shows; `None` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseFilter {
    pub network: Option<String>,
    pub pool: Option<String>,
    pub container_id: Option<String>,
}

pub(super) const LEASE_COLUMNS: &str =
    "key, pool, network, container_id, ifname, since, identity, held_until, added_by";

pub(super) fn lease_from_row(row: &Row) -> rusqlite::Result<Lease> {
    let (since, held_until) = as_the_clock_reads(row.get(5)?, row.get(7)?, now_unix);
    Ok(Lease {
        address: address_column(row, 0)?,
        pool: row.get(1)?,
        owner: Attachment { network: row.get(2)?, container_id: row.get(3)?, ifname: row.get(4)? },
        since,
        identity: row.get(6)?,
        held_until,
        added_by: row.get(8)?,
    })
}

/// A row's `since` and `held_until` as the clock reads them now: a hold
/// that begins after now was made while the clock was ahead (it went back
/// since), and is read as beginning now, its length kept, so that it ends
/// no later than its length from now (the next allocation rewrites it so:
/// [`Tx::drop_expired_holds`]). A lease is read as it is.
pub(super) fn as_the_clock_reads(since: i64, held_until: Option<i64>, now: impl Fn() -> i64) -> (i64, Option<i64>) {
    let Some(until) = held_until else { return (since, None) };
    let now = now();
    match since > now {
        true => (now, Some(until.saturating_sub(since - now))),
        false => (since, Some(until)),
    }
}

/// How messages name who has an address: an attachment, or an identity's hold.
fn holder_words(lease: &Lease) -> String {
    match (&lease.identity, lease.held_until) {
        (Some(identity), Some(until)) => {
            format!("a hold for identity {identity:?} until {}", crate::utc::iso8601(until))
        }
        _ => lease.owner.to_string(),
    }
}

impl Tx<'_> {
    /// The leases matching `condition` (an SQL expression over `leases`), in
    /// address order.
    pub(super) fn leases_where(&self, condition: &str, values: impl rusqlite::Params) -> Result<Vec<Lease>> {
        let mut stmt = self
            .sql
            .prepare_cached(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE {condition} ORDER BY key"))
            .in_db(self.path)?;
        stmt.query_map(values, lease_from_row).and_then(Iterator::collect).in_db(self.path)
    }

    /// The lease or hold on `address`, if any.
    pub fn holder(&self, address: IpAddr) -> Result<Option<Lease>> {
        let mut stmt =
            self.sql.prepare_cached(&format!("SELECT {LEASE_COLUMNS} FROM leases WHERE key = ?1")).in_db(self.path)?;
        let mut rows = stmt.query_map([&to_key(address)[..]], lease_from_row).in_db(self.path)?;
        rows.next().transpose().in_db(self.path)
    }

    /// Records a lease, tagged with the ADD of this handle (see
    /// [`super::AllocationStore::set_add_id`]); error 101 if the address is
    /// already held by anyone.
    pub fn insert_lease(&self, address: IpAddr, pool: &str, owner: &Attachment) -> Result<()> {
        self.insert_lease_row(address, pool, owner, now_unix())?;
        let n = to_u128(address);
        runs::mark_leased(self, n, n)
    }

    /// Records many leases at once, each as [`Tx::insert_lease`] would, but
    /// updating the runs once per run of consecutive new addresses rather than
    /// once per address. Returns how many were recorded.
    pub fn insert_leases_bulk<'p>(
        &self,
        leases: impl IntoIterator<Item = (IpAddr, &'p str, Attachment)>,
    ) -> Result<usize> {
        let since = now_unix();
        let mut numbers = Vec::new();
        for (address, pool, owner) in leases {
            self.insert_lease_row(address, pool, &owner, since)?;
            numbers.push(to_u128(address));
        }
        numbers.sort_unstable();
        let mut rest = numbers.as_slice();
        while let Some(&first) = rest.first() {
            // Distinct (the inserts succeeded) and sorted: a run is where n - i is constant.
            let len = rest.iter().enumerate().take_while(|&(i, &n)| n - first == i as u128).count();
            runs::mark_leased(self, first, rest[len - 1])?;
            rest = &rest[len..];
        }
        Ok(numbers.len())
    }

    fn insert_lease_row(&self, address: IpAddr, pool: &str, owner: &Attachment, since: i64) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "INSERT INTO leases (key, address, pool, network, container_id, ifname, since, added_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (key) DO NOTHING",
            )
            .in_db(self.path)?;
        let key = to_key(address);
        let inserted = stmt
            .execute(params![
                &key[..],
                address.to_string(),
                pool,
                owner.network,
                owner.container_id,
                owner.ifname,
                since,
                self.add_id
            ])
            .in_db(self.path)?;
        if inserted == 0 {
            let held_by = match self.holder(address)? {
                Some(lease) => holder_words(&lease),
                None => "another attachment".to_string(),
            };
            return Err(CniError::new(Code::AddressInUse, format!("address {address} is already held by {held_by}")));
        }
        self.record_for_agent(owner)
    }

    /// The leases of one attachment, in address order.
    pub fn leases_of(&self, owner: &Attachment) -> Result<Vec<Lease>> {
        self.leases_where(
            &format!("network = ?1 AND container_id = ?2 AND ifname = ?3 AND {LEASED}"),
            params![owner.network, owner.container_id, owner.ifname],
        )
    }

    /// Releases every lease of `owner` (none is fine) and returns them. With
    /// `hold`, an address of a workload identity stays held for it that long
    /// instead (see [`Tx::end_leases`]).
    pub fn release(&self, owner: &Attachment, hold: Option<Duration>) -> Result<Vec<Lease>> {
        let leases = self.leases_of(owner)?;
        self.end_leases(&leases, hold.and_then(HoldSpan::from_now))?;
        self.drop_shares_of(owner, None)?;
        Ok(leases)
    }

    /// Releases the lease on `address` if `owner` holds it; true if it did.
    pub fn release_address(&self, address: IpAddr, owner: &Attachment) -> Result<bool> {
        match self.holder(address)? {
            Some(lease) if lease.owner == *owner && !lease.is_hold() => {
                self.end_leases(std::slice::from_ref(&lease), None)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// [`Tx::release_address`], except that an address of a workload
    /// identity stays held for it for `hold` (see [`Tx::end_leases`]).
    pub fn hold_address(&self, address: IpAddr, owner: &Attachment, hold: Duration) -> Result<bool> {
        self.hold_address_over(address, owner, HoldSpan::from_now(hold))
    }

    /// [`Tx::hold_address`] until `end` (unix seconds), which the caller
    /// chose: cluster mode holds an address here no longer than etcd's
    /// lease holds it for the identity.
    pub fn hold_address_until(&self, address: IpAddr, owner: &Attachment, end: i64) -> Result<bool> {
        self.hold_address_over(address, owner, Some(HoldSpan::until(end)))
    }

    fn hold_address_over(&self, address: IpAddr, owner: &Attachment, span: Option<HoldSpan>) -> Result<bool> {
        match self.holder(address)? {
            Some(lease) if lease.owner == *owner && !lease.is_hold() => {
                self.end_leases(std::slice::from_ref(&lease), span)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Rolling back a failed ADD: releases the leases of `owner` that the ADD
    /// `add_id` took, and only those. What the attachment held before that
    /// ADD (a repeat ADD that failed) stays held. What the ADD took from
    /// free is free again, what it took from a hold is that hold again (see
    /// [`Tx::give_back_leases`]): a failed ADD leaves no hold behind.
    pub fn release_added_by(&self, owner: &Attachment, add_id: &str) -> Result<Vec<Lease>> {
        let leases = self.leases_where(
            &format!("network = ?1 AND container_id = ?2 AND ifname = ?3 AND added_by = ?4 AND {LEASED}"),
            params![owner.network, owner.container_id, owner.ifname, add_id],
        )?;
        self.give_back_leases(&leases)?;
        self.drop_shares_of(owner, Some(add_id))?;
        Ok(leases)
    }

    /// How many leases the pool `name` of `network` holds (holds not counted).
    pub fn count_pool_leases(&self, network: &str, name: &str) -> Result<u64> {
        let mut stmt = self
            .sql
            .prepare_cached(&format!("SELECT count(*) FROM leases WHERE network = ?1 AND pool = ?2 AND {LEASED}"))
            .in_db(self.path)?;
        stmt.query_row([network, name], |row| row.get(0)).in_db(self.path)
    }

    /// Releases every lease of the pool `name` of `network`.
    pub(super) fn release_pool_leases(&self, network: &str, name: &str) -> Result<Vec<Lease>> {
        let leases = self.leases_where("network = ?1 AND pool = ?2", [network, name])?;
        self.delete_leases(&leases)?;
        for lease in &leases {
            self.drop_shares_on(lease.address)?;
        }
        self.forget_pods_of(leases.iter().map(|l| &l.owner))?;
        Ok(leases)
    }

    /// Releases every lease of `network` whose (container id, interface) is
    /// not in `keep` (with `hold` as [`Tx::release`]); other networks'
    /// leases are untouched, and so are holds.
    pub fn gc(&self, network: &str, keep: &HashSet<(String, String)>, hold: Option<Duration>) -> Result<Vec<Lease>> {
        let all = self.leases_where(&format!("network = ?1 AND {LEASED}"), [network])?;
        // Clones only to probe the set, whose keys are owned pairs.
        let stale: Vec<Lease> = all
            .into_iter()
            .filter(|l| !keep.contains(&(l.owner.container_id.clone(), l.owner.ifname.clone())))
            .collect();
        // Shares first: a stale lease passes to a sharer only if that one is kept.
        self.drop_stale_shares(network, keep)?;
        self.end_leases(&stale, hold.and_then(HoldSpan::from_now))?;
        Ok(stale)
    }

    /// Frees the rows of `leases`: the addresses become free.
    pub(super) fn delete_leases(&self, leases: &[Lease]) -> Result<()> {
        if leases.is_empty() {
            // Preparing the statement is most of the cost of deleting nothing.
            return Ok(());
        }
        let mut stmt = self.sql.prepare_cached("DELETE FROM leases WHERE key = ?1").in_db(self.path)?;
        for lease in leases {
            stmt.execute([&to_key(lease.address)[..]]).in_db(self.path)?;
            runs::mark_free(self, to_u128(lease.address))?;
        }
        Ok(())
    }

    /// All leases matching `filter`, in address order (the operator listing).
    pub fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>> {
        self.leases_where(
            "(?1 IS NULL OR network = ?1) AND (?2 IS NULL OR pool = ?2) AND (?3 IS NULL OR container_id = ?3)",
            params![filter.network, filter.pool, filter.container_id],
        )
    }

    /// How many leases lie in `[lo, hi]` (pool statistics).
    pub fn count_leases(&self, lo: IpAddr, hi: IpAddr) -> Result<u64> {
        let mut stmt =
            self.sql.prepare_cached("SELECT count(*) FROM leases WHERE key BETWEEN ?1 AND ?2").in_db(self.path)?;
        stmt.query_row([&to_key(lo)[..], &to_key(hi)[..]], |row| row.get(0)).in_db(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ip, owner, temp_store};
    use super::*;

    #[test]
    fn insert_then_holder_then_release() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store
            .write(|tx| {
                tx.insert_lease(ip("10.0.0.2"), "p", &a)?;
                tx.insert_lease(ip("fd00::2"), "p6", &a)
            })
            .unwrap();
        let held = store.read(|tx| tx.holder(ip("10.0.0.2"))).unwrap().unwrap();
        assert_eq!((held.address, held.pool.as_str(), &held.owner), (ip("10.0.0.2"), "p", &a));
        assert!(held.since > 1_600_000_000);
        assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.3"))).unwrap(), None);
        let mine: Vec<IpAddr> = store.read(|tx| tx.leases_of(&a)).unwrap().iter().map(|l| l.address).collect();
        assert_eq!(mine, vec![ip("10.0.0.2"), ip("fd00::2")]);

        let released = store.write(|tx| tx.release(&a, None)).unwrap();
        assert_eq!(released.len(), 2);
        assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.2"))).unwrap(), None);
        assert!(store.read(|tx| tx.leases_of(&a)).unwrap().is_empty());
    }

    #[test]
    fn releasing_an_unknown_owner_is_ok_and_empty() {
        let (_dir, mut store) = temp_store();
        assert!(store.write(|tx| tx.release(&owner("net", "nobody", "eth0"), None)).unwrap().is_empty());
    }

    #[test]
    fn a_held_address_is_error_101_for_anyone_and_the_transaction_rolls_back() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &a)).unwrap();
        for other in [a.clone(), owner("net", "c2", "eth0"), owner("other", "c1", "eth0")] {
            let e = store
                .write(|tx| {
                    tx.insert_lease(ip("10.0.0.3"), "p", &other)?;
                    tx.insert_lease(ip("10.0.0.2"), "p", &other)
                })
                .unwrap_err();
            assert_eq!(e.code, 101);
            assert!(e.msg.contains("10.0.0.2") && e.msg.contains("c1"), "{}", e.msg);
            assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.3"))).unwrap(), None, "rolled back");
        }
        let bulk = store.write(|tx| tx.insert_leases_bulk([(ip("10.0.0.2"), "p", owner("net", "c3", "eth0"))]));
        assert_eq!(bulk.unwrap_err().code, 101);
    }

    #[test]
    fn gc_releases_only_stale_attachments_of_its_network() {
        let (_dir, mut store) = temp_store();
        let kept = owner("blue", "c1", "eth0");
        let stale = owner("blue", "c2", "eth0");
        let stale_ifname = owner("blue", "c1", "eth1");
        let other_network = owner("red", "c2", "eth0");
        store
            .write(|tx| {
                tx.insert_lease(ip("10.0.0.1"), "p", &kept)?;
                tx.insert_lease(ip("10.0.0.2"), "p", &stale)?;
                tx.insert_lease(ip("10.0.0.3"), "p", &stale_ifname)?;
                tx.insert_lease(ip("10.1.0.2"), "q", &other_network)
            })
            .unwrap();
        let keep: HashSet<(String, String)> = [("c1".to_string(), "eth0".to_string())].into();
        let released = store.write(|tx| tx.gc("blue", &keep, None)).unwrap();
        let released: Vec<IpAddr> = released.iter().map(|l| l.address).collect();
        assert_eq!(released, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
        let left: Vec<IpAddr> =
            store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap().iter().map(|l| l.address).collect();
        assert_eq!(left, vec![ip("10.0.0.1"), ip("10.1.0.2")]);
    }

    #[test]
    fn listing_filters_and_counts() {
        let (_dir, mut store) = temp_store();
        store
            .write(|tx| {
                tx.insert_lease(ip("10.0.0.9"), "p", &owner("blue", "c1", "eth0"))?;
                tx.insert_lease(ip("10.0.0.1"), "p", &owner("blue", "c2", "eth0"))?;
                tx.insert_lease(ip("10.1.0.1"), "q", &owner("red", "c1", "eth0"))?;
                tx.insert_lease(ip("fd00::1"), "p6", &owner("red", "c1", "eth0"))
            })
            .unwrap();
        let mut list = |filter: LeaseFilter| -> Vec<IpAddr> {
            store.read(|tx| tx.leases(&filter)).unwrap().iter().map(|l| l.address).collect()
        };
        assert_eq!(
            list(LeaseFilter::default()),
            vec![ip("10.0.0.1"), ip("10.0.0.9"), ip("10.1.0.1"), ip("fd00::1")],
            "address order, IPv4 first"
        );
        assert_eq!(list(LeaseFilter { network: Some("red".into()), ..Default::default() }).len(), 2);
        assert_eq!(list(LeaseFilter { pool: Some("p".into()), ..Default::default() }).len(), 2);
        assert_eq!(
            list(LeaseFilter { network: Some("blue".into()), container_id: Some("c1".into()), pool: None }),
            vec![ip("10.0.0.9")]
        );
        assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.255.255"))).unwrap(), 2);
        assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.1"), ip("10.0.0.1"))).unwrap(), 1);
        assert_eq!(store.read(|tx| tx.count_leases(ip("fd00::"), ip("fd00::ffff"))).unwrap(), 1);
    }
}
