//! Sequential allocation: which addresses of a pool may be handed out, and in
//! which order to look for a free one.
//!
//! The allocatable addresses are a handful of intervals (ranges minus
//! excludes minus gateways), so the search asks persistence one question
//! per interval and its cost does not grow with the number of leases.

use std::net::IpAddr;

use super::{subnet, Pool};
use crate::addr::{from_u128, to_u128};
use crate::error::{CniError, Code, Result};

/// What persistence must answer: the first address in [lo, hi] (inclusive,
/// same family) that no attachment holds.
pub trait LeaseIndex {
    fn first_unleased(&self, lo: IpAddr, hi: IpAddr) -> Result<Option<IpAddr>>;
}

/// An allocatable interval (inclusive), with the index of its range so that
/// a cursor can be placed within its own range.
#[derive(Debug, Clone, Copy)]
struct Interval {
    range: usize,
    lo: u128,
    hi: u128,
}

impl Interval {
    fn contains(&self, n: u128) -> bool {
        self.lo <= n && n <= self.hi
    }

    fn to_ips(self) -> (IpAddr, IpAddr) {
        (from_u128(self.lo), from_u128(self.hi))
    }
}

impl Pool {
    /// Allocatable intervals: each range's [rangeStart, rangeEnd] minus the
    /// excluded CIDRs minus that range's gateway, in range order.
    pub fn allocatable(&self) -> Vec<(IpAddr, IpAddr)> {
        self.intervals().into_iter().map(Interval::to_ips).collect()
    }

    /// Round robin: the intervals to search, starting just after `cursor`
    /// (the pool's last handed-out address) and wrapping around to end at
    /// the cursor itself. Without a cursor, from the first range's start.
    /// A cursor outside every interval (its address was since excluded, or
    /// the pool was redefined) resumes at the next interval after it.
    pub fn search_order(&self, cursor: Option<IpAddr>) -> Vec<(IpAddr, IpAddr)> {
        let intervals = self.intervals();
        let Some(cursor_ip) = cursor else {
            return intervals.into_iter().map(Interval::to_ips).collect();
        };
        let cursor = to_u128(cursor_ip);
        let mut order = Vec::with_capacity(intervals.len() + 1);
        if let Some(k) = intervals.iter().position(|i| i.contains(cursor)) {
            let current = intervals[k];
            if cursor < current.hi {
                order.push(Interval { lo: cursor + 1, ..current });
            }
            order.extend_from_slice(&intervals[k + 1..]);
            order.extend_from_slice(&intervals[..k]);
            order.push(Interval { hi: cursor, ..current });
        } else {
            let start = self.resume_index(&intervals, cursor_ip).unwrap_or(0);
            order.extend_from_slice(&intervals[start..]);
            order.extend_from_slice(&intervals[..start]);
        }
        order.into_iter().map(Interval::to_ips).collect()
    }

    /// The next free address after `cursor`, or `None` when the pool is full.
    /// One `first_unleased` call per searched interval at most.
    pub fn find_free(&self, cursor: Option<IpAddr>, index: &impl LeaseIndex) -> Result<Option<IpAddr>> {
        for (lo, hi) in self.search_order(cursor) {
            if let Some(found) = index.first_unleased(lo, hi)? {
                // An answer outside the interval could be a gateway or an
                // excluded address: refuse it rather than hand it out.
                if found.is_ipv4() != lo.is_ipv4() || !(to_u128(lo)..=to_u128(hi)).contains(&to_u128(found)) {
                    return Err(CniError::new(
                        Code::Internal,
                        format!("lease index answered {found} for the interval {lo}-{hi} of pool {:?}", self.name),
                    ));
                }
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Whether sequential allocation may hand out `address` in this pool:
    /// inside a range, not excluded, not a gateway. (An identity's hold
    /// comes back only so.)
    pub fn hands_out(&self, address: IpAddr) -> bool {
        let n = to_u128(address);
        self.intervals().iter().any(|i| i.contains(n) && from_u128(i.lo).is_ipv4() == address.is_ipv4())
    }

    /// The families of `pools` that `result` has no address of yet, in
    /// pool order: what an allocator that adds one per family must find.
    pub fn families_missing<'p>(
        pools: impl IntoIterator<Item = &'p Pool>,
        result: &crate::result::IpamResult,
    ) -> Vec<crate::addr::Family> {
        let mut families = Vec::new();
        for pool in pools {
            if !result.has_family(pool.family()) && !families.contains(&pool.family()) {
                families.push(pool.family());
            }
        }
        families
    }

    /// Number of allocatable addresses, for statistics.
    pub fn capacity(&self) -> u128 {
        self.intervals().iter().fold(0u128, |sum, i| sum.saturating_add(i.hi - i.lo).saturating_add(1))
    }

    fn intervals(&self) -> Vec<Interval> {
        let mut out = Vec::new();
        for (index, range) in self.ranges.iter().enumerate() {
            let is_ipv4 = range.subnet.network().is_ipv4();
            // Clamped to the usable addresses so that a hand-built pool cannot
            // hand out a network or broadcast address either.
            let (first, last) = subnet::usable_bounds(&range.subnet);
            let lo = to_u128(range.range_start).max(first);
            let hi = to_u128(range.range_end).min(last);
            if lo > hi || range.range_start.is_ipv4() != is_ipv4 || range.range_end.is_ipv4() != is_ipv4 {
                continue;
            }
            let mut holes: Vec<(u128, u128)> = self
                .exclude
                .iter()
                .filter(|net| net.network().is_ipv4() == is_ipv4)
                .map(subnet::bounds)
                .chain(range.gateway.filter(|gw| gw.is_ipv4() == is_ipv4).map(|gw| (to_u128(gw), to_u128(gw))))
                .collect();
            holes.sort_unstable();
            out.extend(subtract(lo, hi, &holes).into_iter().map(|(lo, hi)| Interval { range: index, lo, hi }));
        }
        out
    }

    /// Where to resume when the cursor lies in no interval: after it within
    /// its own range when it is in a range's subnet, else at the first
    /// interval that starts after it.
    fn resume_index(&self, intervals: &[Interval], cursor_ip: IpAddr) -> Option<usize> {
        let cursor = to_u128(cursor_ip);
        match self.ranges.iter().position(|r| r.subnet.contains(&cursor_ip)) {
            Some(own) => intervals.iter().position(|i| (i.range == own && i.lo > cursor) || i.range > own),
            None => intervals.iter().position(|i| i.lo > cursor),
        }
    }
}

/// [lo, hi] minus the holes (sorted by start, may overlap), as intervals.
fn subtract(lo: u128, hi: u128, holes: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    let mut next = lo;
    for &(hole_lo, hole_hi) in holes {
        if hole_hi < next {
            continue;
        }
        if hole_lo > hi {
            break;
        }
        if hole_lo > next {
            out.push((next, hole_lo - 1));
        }
        if hole_hi >= hi {
            return out;
        }
        next = hole_hi + 1;
    }
    out.push((next, hi));
    out
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
