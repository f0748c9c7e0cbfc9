//! Sticky addresses: the leases of a workload identity, the holds they
//! become when their attachment goes, and the attachments that share a live
//! identity's lease (`shareLive`).
//!
//! A hold is a row of `leases` whose `held_until` is set: the address stays
//! taken (sequential allocation skips it, a static request for it is 101)
//! until the identity comes back for it or the hold ends.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::params;

use super::columns::{address_column, now_unix, LEASED};
use super::{InDatabase, Lease, Tx};
use crate::addr::to_key;
use crate::args::Attachment;
use crate::error::Result;
use crate::utc::iso8601;

/// When a hold begins and ends, in whole unix seconds as the rows count
/// time. A hold ends once the clock's whole seconds reach its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldSpan {
    pub start: i64,
    pub end: i64,
}

impl HoldSpan {
    /// A hold of `hold` from now (`None` when zero: no hold), lasting at
    /// least `hold` (see [`HoldSpan::starting`]).
    pub fn from_now(hold: Duration) -> Option<HoldSpan> {
        HoldSpan::starting(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(), hold)
    }

    /// A hold of `hold` from `at` (since the epoch): it begins on the whole
    /// second `at` is in and ends on the first whole second at least `hold`
    /// after `at`. Rounded down, the end would cut up to a second off the
    /// hold: a 1-second hold made late in a second would end at once.
    pub fn starting(at: Duration, hold: Duration) -> Option<HoldSpan> {
        if hold.is_zero() {
            return None;
        }
        let whole = |secs: u64| i64::try_from(secs).unwrap_or(i64::MAX);
        let end = at.saturating_add(hold);
        let end = whole(end.as_secs()).saturating_add(i64::from(end.subsec_nanos() > 0));
        Some(HoldSpan { start: whole(at.as_secs()), end })
    }

    /// A hold from now that ends at `end`, which the caller chose (cluster
    /// mode: no later than etcd's lease on the identity's hold).
    pub fn until(end: i64) -> HoldSpan {
        HoldSpan { start: now_unix().min(end), end }
    }
}

/// A second live attachment of an identity, on the address its first one leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub address: IpAddr,
    pub sharer: Attachment,
    pub since: i64,
}

impl Tx<'_> {
    /// Ties the leases `owner` holds to `identity`: when they are released,
    /// they stay held for it. Every allocator calls this in the transaction
    /// that leases, so the identity is recorded with whatever address the
    /// attachment ends up with.
    pub fn bind_identity(&self, owner: &Attachment, identity: &str) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached(&format!(
                "UPDATE leases SET identity = ?4 WHERE network = ?1 AND container_id = ?2 AND ifname = ?3 AND \
                 {LEASED} AND identity IS NOT ?4"
            ))
            .in_db(self.path)?;
        stmt.execute(params![owner.network, owner.container_id, owner.ifname, identity]).in_db(self.path)?;
        Ok(())
    }

    /// A live lease of `identity` (on `owner`'s network and interface) that
    /// another attachment than `owner` holds: the first in address order.
    pub fn identity_live_elsewhere(&self, owner: &Attachment, identity: &str) -> Result<Option<Lease>> {
        let live = self.leases_where(
            &format!("network = ?1 AND identity = ?2 AND ifname = ?3 AND {LEASED} AND container_id IS NOT ?4"),
            params![owner.network, identity, owner.ifname, owner.container_id],
        )?;
        Ok(live.into_iter().next())
    }

    /// The rows of `identity` on interface `ifname` of `network`: its live
    /// leases and its holds, in address order.
    pub fn rows_of_identity(&self, network: &str, identity: &str, ifname: &str) -> Result<Vec<Lease>> {
        self.leases_where("network = ?1 AND identity = ?2 AND ifname = ?3", params![network, identity, ifname])
    }

    /// Turns the hold on `address` into `owner`'s lease, tagged with this
    /// handle's ADD, which keeps the hold's end: a rollback of that ADD
    /// gives the hold back as it was (see [`Tx::give_back_leases`]). False
    /// when there is no hold there any more.
    pub fn take_hold(&self, address: IpAddr, owner: &Attachment) -> Result<bool> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "UPDATE leases SET container_id = ?2, ifname = ?3, since = ?4, added_by = ?5,
                 taken_hold_until = held_until, held_until = NULL
                 WHERE key = ?1 AND network = ?6 AND held_until IS NOT NULL",
            )
            .in_db(self.path)?;
        let changed = stmt
            .execute(params![
                &to_key(address)[..],
                owner.container_id,
                owner.ifname,
                now_unix(),
                self.add_id,
                owner.network
            ])
            .in_db(self.path)?;
        if changed == 1 {
            self.record_for_agent(owner)?;
        }
        Ok(changed == 1)
    }

    /// Ends the rows of `leases`, live leases of attachments being released:
    /// one that another attachment shares passes to that attachment; one of
    /// an identity stays held for it over `span` (when given); any other is
    /// freed.
    pub(super) fn end_leases(&self, leases: &[Lease], span: Option<HoldSpan>) -> Result<()> {
        let mut free = Vec::new();
        for lease in leases {
            let Some(identity) = &lease.identity else {
                free.push(lease.clone());
                continue;
            };
            if self.pass_to_sharer(lease, span.map(|s| s.end))? {
                continue;
            }
            match span {
                Some(span) => {
                    self.hold_over(lease.address, span)?;
                    tracing::info!(
                        "{} stays held for identity {identity:?} until {}",
                        lease.address,
                        iso8601(span.end)
                    );
                }
                None => free.push(lease.clone()),
            }
        }
        self.delete_leases(&free)?;
        self.forget_pods_of(leases.iter().map(|l| &l.owner))
    }

    /// Rolling back a failed ADD: ends the rows of `leases`, the live leases
    /// it took. One it took from its identity's hold is that hold again,
    /// with the end it had; one that another attachment shares passes to
    /// it, as at DEL; any other is freed, even when tied to an identity:
    /// the ADD found it free, and the identity never had it.
    pub(super) fn give_back_leases(&self, leases: &[Lease]) -> Result<()> {
        let mut free = Vec::new();
        for lease in leases {
            let Some(identity) = &lease.identity else {
                free.push(lease.clone());
                continue;
            };
            let taken_hold_until = self.taken_hold_until(lease.address)?;
            if self.pass_to_sharer(lease, taken_hold_until)? {
                continue;
            }
            match taken_hold_until {
                Some(until) => {
                    // The hold begins anew, so that its start says when it
                    // was last made (see `rebase_holds_made_ahead`); its end
                    // is the one it had.
                    self.hold_over(lease.address, HoldSpan::until(until))?;
                    tracing::info!(
                        "{} is held for identity {identity:?} again, until {}, as before the failed ADD",
                        lease.address,
                        iso8601(until)
                    );
                }
                None => free.push(lease.clone()),
            }
        }
        self.delete_leases(&free)?;
        self.forget_pods_of(leases.iter().map(|l| &l.owner))
    }

    /// Makes the row on `address` a hold over `span`.
    fn hold_over(&self, address: IpAddr, span: HoldSpan) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "UPDATE leases SET since = ?2, held_until = ?3, added_by = NULL, taken_hold_until = NULL WHERE key = ?1",
            )
            .in_db(self.path)?;
        stmt.execute(params![&to_key(address)[..], span.start, span.end]).in_db(self.path)?;
        Ok(())
    }

    /// The end of the hold that the ADD of the lease on `address` took it
    /// from; `None` when that ADD leased it from the free addresses.
    fn taken_hold_until(&self, address: IpAddr) -> Result<Option<i64>> {
        let mut stmt =
            self.sql.prepare_cached("SELECT taken_hold_until FROM leases WHERE key = ?1").in_db(self.path)?;
        let mut rows = stmt.query_map([&to_key(address)[..]], |row| row.get(0)).in_db(self.path)?;
        Ok(rows.next().transpose().in_db(self.path)?.flatten())
    }

    /// Ends the holds on `addresses` (their addresses become free) and
    /// returns those that were holds.
    pub fn drop_holds(&self, holds: &[Lease]) -> Result<Vec<Lease>> {
        let holds: Vec<Lease> = holds.iter().filter(|l| l.is_hold()).cloned().collect();
        self.delete_leases(&holds)?;
        Ok(holds)
    }

    /// Ends every hold past its end: the addresses become free as usual.
    /// The allocators call it in the transaction in which they allocate.
    /// Holds made while the clock was ahead are first moved to begin now
    /// (see [`Tx::rebase_holds_made_ahead`]).
    pub fn drop_expired_holds(&self) -> Result<Vec<Lease>> {
        let now = now_unix();
        if !self.holds_to_settle(now)? {
            return Ok(Vec::new());
        }
        self.rebase_holds_made_ahead(now)?;
        let expired = self.ended_holds(now)?;
        self.delete_leases(&expired)?;
        for hold in &expired {
            tracing::info!(
                "the hold of {} for identity {:?} ended: the address is free",
                hold.address,
                hold.identity.as_deref().unwrap_or("")
            );
        }
        Ok(expired)
    }

    /// The holds past their end that no allocation has dropped yet: their
    /// addresses are free at the next one (the operator counts them as free).
    pub fn expired_holds(&self) -> Result<Vec<Lease>> {
        let now = now_unix();
        if !self.holds_to_settle(now)? {
            return Ok(Vec::new());
        }
        self.ended_holds(now)
    }

    /// The holds whose end `now` has reached.
    fn ended_holds(&self, now: i64) -> Result<Vec<Lease>> {
        self.leases_where("held_until IS NOT NULL AND held_until <= ?1", [now])
    }

    /// Whether a hold has ended, or the hold that ends last began after
    /// `now` (the clock went back since it was made).
    fn holds_to_settle(&self, now: i64) -> Result<bool> {
        // Every allocation and every cluster ADD asks, and nearly always
        // nothing has ended: two probes of the held addresses' index (the
        // second reads one row) cost a third of preparing the full read.
        let mut probe = self
            .sql
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM leases WHERE held_until IS NOT NULL AND held_until <= ?1)
                     OR ifnull((SELECT since > ?1 FROM leases WHERE held_until IS NOT NULL
                                ORDER BY held_until DESC LIMIT 1), 0)",
            )
            .in_db(self.path)?;
        probe.query_row([now], |row| row.get(0)).in_db(self.path)
    }

    /// The node's clock went back: a hold that began after `now` was made
    /// while it was ahead, and would last that much longer than its length.
    /// Each such hold is moved to begin now, its length kept: it ends no
    /// later than its length from the moment the node noticed (the time
    /// between its making and now, which the clock no longer tells, is not
    /// taken off: a hold must not end early). Noticed from the hold that
    /// ends last, whenever it began ahead; a hold that began ahead but ends
    /// before a longer one that did not is moved once that one ends or
    /// another begins ahead, and ends no later than that one meanwhile.
    fn rebase_holds_made_ahead(&self, now: i64) -> Result<()> {
        let (moved, latest): (i64, Option<i64>) = self
            .sql
            .prepare_cached("SELECT count(*), max(since) FROM leases WHERE held_until IS NOT NULL AND since > ?1")
            .and_then(|mut stmt| stmt.query_row([now], |row| Ok((row.get(0)?, row.get(1)?))))
            .in_db(self.path)?;
        if moved == 0 {
            return Ok(());
        }
        // SET reads the row as it was: the end moves back by what the start does.
        self.sql
            .prepare_cached(
                "UPDATE leases SET held_until = held_until - (since - ?1), since = ?1
                 WHERE held_until IS NOT NULL AND since > ?1",
            )
            .and_then(|mut stmt| stmt.execute([now]))
            .in_db(self.path)?;
        tracing::warn!(
            "the clock went back: {moved} hold(s) began after now (the latest at {}); each now ends its length \
             from now",
            iso8601(latest.unwrap_or(now))
        );
        Ok(())
    }

    /// The holds of `identity` (of `network`, or of every network), which
    /// the operator's `release --identity` drops.
    pub fn holds_of_identity(&self, network: Option<&str>, identity: &str) -> Result<Vec<Lease>> {
        self.leases_where(
            "identity = ?1 AND held_until IS NOT NULL AND (?2 IS NULL OR network = ?2)",
            params![identity, network],
        )
    }

    /// The holds in pool `name` of `network`, in address order.
    pub fn holds_of_pool(&self, network: &str, name: &str) -> Result<Vec<Lease>> {
        self.leases_where("network = ?1 AND pool = ?2 AND held_until IS NOT NULL", [network, name])
    }

    /// How many holds lie in pool `name` of `network`.
    pub fn count_pool_holds(&self, network: &str, name: &str) -> Result<u64> {
        let mut stmt = self
            .sql
            .prepare_cached("SELECT count(*) FROM leases WHERE network = ?1 AND pool = ?2 AND held_until IS NOT NULL")
            .in_db(self.path)?;
        stmt.query_row([network, name], |row| row.get(0)).in_db(self.path)
    }

    /// Records that `sharer` shares the lease on `address` (no-op when it
    /// does already).
    pub fn share_lease(&self, address: IpAddr, sharer: &Attachment) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "INSERT INTO lease_sharers (network, container_id, ifname, key, since, added_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            )
            .in_db(self.path)?;
        stmt.execute(params![
            sharer.network,
            sharer.container_id,
            sharer.ifname,
            &to_key(address)[..],
            now_unix(),
            self.add_id
        ])
        .in_db(self.path)?;
        self.record_for_agent(sharer)
    }

    /// The leases `sharer` shares with another attachment.
    pub fn shared_by(&self, sharer: &Attachment) -> Result<Vec<Lease>> {
        self.leases_where(
            &format!(
                "key IN (SELECT key FROM lease_sharers WHERE network = ?1 AND container_id = ?2 AND ifname = ?3) \
                 AND {LEASED}"
            ),
            params![sharer.network, sharer.container_id, sharer.ifname],
        )
    }

    /// Every attachment that shares a lease, with the address (the operator's listing).
    pub fn shares(&self) -> Result<Vec<Share>> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "SELECT key, network, container_id, ifname, since FROM lease_sharers ORDER BY key, since, container_id",
            )
            .in_db(self.path)?;
        stmt.query_map([], |row| {
            Ok(Share {
                address: address_column(row, 0)?,
                sharer: Attachment { network: row.get(1)?, container_id: row.get(2)?, ifname: row.get(3)? },
                since: row.get(4)?,
            })
        })
        .and_then(Iterator::collect)
        .in_db(self.path)
    }

    /// A lease being released that another attachment shares becomes that
    /// attachment's (the one sharing longest), as if that attachment's ADD
    /// had taken it from a hold ending at `until`: a rollback of that ADD
    /// holds it for the identity, not frees it. True if it did.
    fn pass_to_sharer(&self, lease: &Lease, until: Option<i64>) -> Result<bool> {
        let key = to_key(lease.address);
        let mut first = self
            .sql
            .prepare_cached(
                "SELECT container_id, ifname, added_by FROM lease_sharers WHERE key = ?1 AND network = ?2
                 ORDER BY since, container_id, ifname LIMIT 1",
            )
            .in_db(self.path)?;
        let next: Option<(String, String, Option<String>)> = first
            .query_map(params![&key[..], lease.owner.network], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .in_db(self.path)?
            .next()
            .transpose()
            .in_db(self.path)?;
        let Some((container_id, ifname, added_by)) = next else { return Ok(false) };
        self.sql
            .prepare_cached(
                "UPDATE leases SET container_id = ?2, ifname = ?3, added_by = ?4, taken_hold_until = ?5
                 WHERE key = ?1 AND held_until IS NULL",
            )
            .and_then(|mut s| s.execute(params![&key[..], container_id, ifname, added_by, until]))
            .in_db(self.path)?;
        self.sql
            .prepare_cached(
                "DELETE FROM lease_sharers WHERE key = ?1 AND network = ?2 AND container_id = ?3 AND ifname = ?4",
            )
            .and_then(|mut s| s.execute(params![&key[..], lease.owner.network, container_id, ifname]))
            .in_db(self.path)?;
        tracing::info!(
            "{} passes from container {} to container {container_id}, which shares it",
            lease.address,
            lease.owner.container_id
        );
        Ok(true)
    }

    /// Ends what `sharer` shares (only what ADD `add_id` recorded, when given).
    pub(super) fn drop_shares_of(&self, sharer: &Attachment, add_id: Option<&str>) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "DELETE FROM lease_sharers WHERE network = ?1 AND container_id = ?2 AND ifname = ?3
                 AND (?4 IS NULL OR added_by = ?4)",
            )
            .in_db(self.path)?;
        stmt.execute(params![sharer.network, sharer.container_id, sharer.ifname, add_id]).in_db(self.path)?;
        self.forget_pods_of([sharer])
    }

    /// Ends every share of the lease on `address` (its pool is forgotten).
    pub(super) fn drop_shares_on(&self, address: IpAddr) -> Result<()> {
        let mut stmt = self.sql.prepare_cached("DELETE FROM lease_sharers WHERE key = ?1").in_db(self.path)?;
        stmt.execute([&to_key(address)[..]]).in_db(self.path)?;
        Ok(())
    }

    /// GC: ends the shares of `network`'s attachments not in `keep`.
    pub(super) fn drop_stale_shares(
        &self,
        network: &str,
        keep: &std::collections::HashSet<(String, String)>,
    ) -> Result<()> {
        for share in self.shares()?.into_iter().filter(|s| s.sharer.network == network) {
            if !keep.contains(&(share.sharer.container_id.clone(), share.sharer.ifname.clone())) {
                self.drop_shares_of(&share.sharer, None)?;
            }
        }
        Ok(())
    }

    /// Whether `sharer` shares the lease on `address` (CHECK).
    pub fn shares_lease(&self, address: IpAddr, sharer: &Attachment) -> Result<bool> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "SELECT count(*) FROM lease_sharers WHERE key = ?1 AND network = ?2 AND container_id = ?3 AND ifname = ?4",
            )
            .in_db(self.path)?;
        let n: i64 = stmt
            .query_row(params![&to_key(address)[..], sharer.network, sharer.container_id, sharer.ifname], |r| r.get(0))
            .in_db(self.path)?;
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests;
