//! Per registered pool: its size, use and next address. Computed once here,
//! shown by `pools` (a table or JSON) and exported by `metrics`, so that the
//! two never disagree.
//!
//! A hold for a workload identity (ipam-da-sticky) is a row of `leases`, so
//! it takes its address as a lease does: it counts in `used`, never in
//! `free`, but it is no lease (`leases`), and is counted apart (`holds`). A
//! hold past its end is free: the next allocation drops it before looking,
//! so the figures count it as the plugins will treat it.

use std::net::IpAddr;

use shared::addr::to_u128;
use shared::pool::{LeaseIndex, Pool};
use shared::store::{AllocationStore, Lease, RegisteredPool, Tx};

use super::failure::Failure;

pub struct PoolSurvey {
    pub network: String,
    pub name: String,
    pub subnets: Vec<String>,
    /// Every lease recorded for the pool, static ones outside its
    /// allocatable addresses included (they are not in `used`); holds are
    /// not leases.
    pub leases: u64,
    /// The pool's holds that have not ended, outside its allocatable
    /// addresses included.
    pub holds: u64,
    /// The figures, or why the stored definition no longer reads as a pool.
    pub figures: Result<Figures, String>,
}

pub struct Figures {
    /// The allocatable addresses: the ranges minus excluded addresses and gateways.
    pub size: u128,
    /// The addresses taken among those allocatable addresses, by a lease or
    /// a hold, so never above size.
    pub used: u128,
    /// The address sequential allocation tries next; `None` when full.
    pub next: Option<String>,
}

impl Figures {
    pub fn free(&self) -> u128 {
        self.size.saturating_sub(self.used)
    }
}

/// Every registered pool, in the store's order, read in one transaction.
pub fn survey(store: &mut AllocationStore) -> Result<Vec<PoolSurvey>, Failure> {
    Ok(store.read(|tx| {
        let ended = tx.expired_holds()?;
        tx.registered_pools()?.into_iter().map(|pool| survey_one(tx, pool, &ended)).collect()
    })?)
}

/// Only a database failure is an error; a bad definition is reported in the survey.
fn survey_one(tx: &Tx, registered: RegisteredPool, ended: &[Lease]) -> shared::Result<PoolSurvey> {
    let leases = tx.count_pool_leases(&registered.network, &registered.name)?;
    let ended_here = ended.iter().filter(|h| h.owner.network == registered.network && h.pool == registered.name);
    let holds = tx.count_pool_holds(&registered.network, &registered.name)?.saturating_sub(ended_here.count() as u64);
    let figures =
        match Pool::from_json(&registered.definition, &format!("stored definition of pool {}", registered.name)) {
            Ok(pool) => Ok(figures(tx, &pool, registered.cursor, ended)?),
            Err(e) => Err(e.msg),
        };
    Ok(PoolSurvey {
        subnets: registered.subnets.iter().map(ToString::to_string).collect(),
        network: registered.network,
        name: registered.name,
        leases,
        holds,
        figures,
    })
}

/// next is what the plugins' own search would find.
fn figures(tx: &Tx, pool: &Pool, cursor: Option<IpAddr>, ended: &[Lease]) -> shared::Result<Figures> {
    let mut ended: Vec<u128> = ended.iter().map(|hold| to_u128(hold.address)).collect();
    ended.sort_unstable();
    let index = EndedHoldsFree { tx, ended: &ended };
    let mut used = 0u128;
    for (lo, hi) in pool.allocatable() {
        let taken = u128::from(tx.count_leases(lo, hi)?);
        used += taken.saturating_sub(index.ended_within(lo, hi).len() as u128);
    }
    let next = pool.find_free(cursor, &index)?.map(|ip| ip.to_string());
    Ok(Figures { size: pool.capacity(), used, next })
}

/// The store's lease index, with the addresses of ended holds free, as they
/// are to the next allocation.
struct EndedHoldsFree<'a> {
    tx: &'a Tx<'a>,
    /// Sorted.
    ended: &'a [u128],
}

impl EndedHoldsFree<'_> {
    fn ended_within(&self, lo: IpAddr, hi: IpAddr) -> &[u128] {
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        let start = self.ended.partition_point(|&n| n < lo);
        let end = self.ended.partition_point(|&n| n <= hi);
        &self.ended[start..end.max(start)]
    }
}

impl LeaseIndex for EndedHoldsFree<'_> {
    fn first_unleased(&self, lo: IpAddr, hi: IpAddr) -> shared::Result<Option<IpAddr>> {
        let unleased = self.tx.first_unleased(lo, hi)?;
        let ended = self.ended_within(lo, hi).first().map(|&n| shared::addr::from_u128(n));
        Ok(match (unleased, ended) {
            (Some(a), Some(b)) => Some(if to_u128(a) <= to_u128(b) { a } else { b }),
            (a, b) => a.or(b),
        })
    }
}
