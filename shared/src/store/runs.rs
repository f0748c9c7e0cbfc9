//! The `leased_runs` table: maximal runs of consecutive leased addresses,
//! kept in step with `leases` inside the same transaction. It makes the first
//! free address after any point one index lookup, however long the run of
//! leased addresses in front of it.

use std::net::IpAddr;

use rusqlite::{OptionalExtension, Row};

use super::columns::address_column;
use super::{unusable, InDatabase, Tx};
use crate::addr::{from_u128, to_u128};
use crate::error::Result;

fn key(n: u128) -> [u8; 16] {
    n.to_be_bytes()
}

fn number_column(row: &Row, index: usize) -> rusqlite::Result<u128> {
    address_column(row, index).map(to_u128)
}

/// A run `(first, last)`, inclusive.
type Run = (u128, u128);

impl Tx<'_> {
    /// The first address in `[lo, hi]` that no lease holds.
    pub fn first_unleased(&self, lo: IpAddr, hi: IpAddr) -> Result<Option<IpAddr>> {
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        if lo > hi {
            return Ok(None);
        }
        let candidate = match self.run_at_or_before(lo)? {
            // Runs are maximal, so the address after one is free.
            Some((_, last)) if last >= lo => last.checked_add(1),
            _ => Some(lo),
        };
        Ok(candidate.filter(|&n| n <= hi).map(from_u128))
    }

    /// How many addresses of `[lo, hi]` no lease holds, up to `limit`: the
    /// runs that meet the range are read in one pass, stopping once `limit`
    /// free addresses are counted (where a walk by [`Tx::first_unleased`]
    /// would take a step per free address).
    pub fn count_unleased(&self, lo: IpAddr, hi: IpAddr, limit: usize) -> Result<usize> {
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        let limit = limit as u128;
        if lo > hi || limit == 0 {
            return Ok(0);
        }
        // The first address of the range not accounted for yet; None past the top of the space.
        let mut next = match self.run_at_or_before(lo)? {
            Some((_, last)) if last >= lo => last.checked_add(1),
            _ => Some(lo),
        };
        let mut free = 0u128;
        let mut stmt = self
            .sql
            .prepare_cached("SELECT first, last FROM leased_runs WHERE first > ?1 AND first <= ?2 ORDER BY first")
            .in_db(self.path)?;
        let mut rows = stmt.query([&key(lo)[..], &key(hi)[..]]).in_db(self.path)?;
        while let (Some(from), true) = (next, free < limit) {
            let Some(row) = rows.next().in_db(self.path)? else { break };
            let (first, last) = (number_column(row, 0).in_db(self.path)?, number_column(row, 1).in_db(self.path)?);
            // Runs are disjoint: the gap before this one is free.
            free += first.saturating_sub(from);
            next = last.checked_add(1);
        }
        if let Some(from) = next.filter(|&from| from <= hi && free < limit) {
            free += hi - from + 1;
        }
        Ok(usize::try_from(free.min(limit)).unwrap_or(usize::MAX))
    }

    /// The run with the greatest first address `<= n`.
    fn run_at_or_before(&self, n: u128) -> Result<Option<Run>> {
        let mut stmt = self
            .sql
            .prepare_cached("SELECT first, last FROM leased_runs WHERE first <= ?1 ORDER BY first DESC LIMIT 1")
            .in_db(self.path)?;
        stmt.query_row([&key(n)[..]], |row| Ok((number_column(row, 0)?, number_column(row, 1)?)))
            .optional()
            .in_db(self.path)
    }

    /// The last address of the run starting exactly at `first`.
    fn run_starting_at(&self, first: u128) -> Result<Option<u128>> {
        let mut stmt = self.sql.prepare_cached("SELECT last FROM leased_runs WHERE first = ?1").in_db(self.path)?;
        stmt.query_row([&key(first)[..]], |row| number_column(row, 0)).optional().in_db(self.path)
    }

    fn put_run(&self, (first, last): Run) -> Result<()> {
        let mut stmt = self
            .sql
            .prepare_cached("INSERT INTO leased_runs (first, last) VALUES (?1, ?2) ON CONFLICT (first) DO UPDATE SET last = excluded.last")
            .in_db(self.path)?;
        stmt.execute([&key(first)[..], &key(last)[..]]).in_db(self.path).map(drop)
    }

    fn delete_run(&self, first: u128) -> Result<()> {
        let mut stmt = self.sql.prepare_cached("DELETE FROM leased_runs WHERE first = ?1").in_db(self.path)?;
        stmt.execute([&key(first)[..]]).in_db(self.path).map(drop)
    }
}

/// Records that `[first, last]`, none of it leased before, is now leased,
/// merging with the runs that end just before or start just after it.
pub(super) fn mark_leased(tx: &Tx, first: u128, last: u128) -> Result<()> {
    let before = match tx.run_at_or_before(first)? {
        Some((_, end)) if end >= first => {
            return Err(unusable(tx.path, format!("leased_runs already covers {}", from_u128(first))));
        }
        Some(run) if first.checked_sub(1) == Some(run.1) => Some(run),
        _ => None,
    };
    let after = match last.checked_add(1) {
        Some(next) => tx.run_starting_at(next)?.map(|end| (next, end)),
        None => None,
    };
    if let Some((next, _)) = after {
        tx.delete_run(next)?;
    }
    let merged_first = before.map_or(first, |run| run.0);
    let merged_last = after.map_or(last, |run| run.1);
    tx.put_run((merged_first, merged_last))
}

/// Records that `n`, leased before, is free now, shortening or splitting its run.
pub(super) fn mark_free(tx: &Tx, n: u128) -> Result<()> {
    let (first, last) = match tx.run_at_or_before(n)? {
        Some(run) if run.1 >= n => run,
        _ => return Err(unusable(tx.path, format!("leased_runs does not cover the lease on {}", from_u128(n)))),
    };
    // n - 1 and n + 1 cannot overflow: they lie inside [first, last].
    if first == n {
        tx.delete_run(first)?;
    } else {
        tx.put_run((first, n - 1))?;
    }
    if last > n {
        tx.put_run((n + 1, last))?;
    }
    Ok(())
}

/// The runs as stored, in order (for the integrity check).
pub(super) fn stored_runs(tx: &Tx) -> Result<Vec<Run>> {
    let mut stmt = tx.sql.prepare_cached("SELECT first, last FROM leased_runs ORDER BY first").in_db(tx.path)?;
    let rows = stmt.query_map([], |row| Ok((number_column(row, 0)?, number_column(row, 1)?)));
    rows.and_then(Iterator::collect).in_db(tx.path)
}

#[cfg(test)]
mod tests;
