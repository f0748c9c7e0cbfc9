//! Per registered pool: its size, use and next address. Computed once here,
//! shown by `pools` (a table or JSON) and exported by `metrics`, so that the
//! two never disagree.

use shared::pool::Pool;
use shared::store::{AllocationStore, RegisteredPool, Tx};

use super::Failure;

pub struct PoolSurvey {
    pub network: String,
    pub name: String,
    pub subnets: Vec<String>,
    /// Every lease recorded for the pool, static ones outside its
    /// allocatable addresses included (they are not in `used`).
    pub leases: u64,
    /// The figures, or why the stored definition no longer reads as a pool.
    pub figures: Result<Figures, String>,
}

pub struct Figures {
    /// The allocatable addresses: the ranges minus excluded ones and gateways.
    pub size: u128,
    /// The leases among those allocatable addresses, so never above size.
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
    Ok(store.read(|tx| tx.registered_pools()?.into_iter().map(|pool| survey_one(tx, pool)).collect())?)
}

/// Only a database failure is an error; a bad definition is reported in the survey.
fn survey_one(tx: &Tx, registered: RegisteredPool) -> shared::Result<PoolSurvey> {
    let leases = tx.count_pool_leases(&registered.network, &registered.name)?;
    let figures =
        match Pool::from_json(&registered.definition, &format!("stored definition of pool {}", registered.name)) {
            Ok(pool) => Ok(figures(tx, &pool, registered.cursor)?),
            Err(e) => Err(e.msg),
        };
    Ok(PoolSurvey {
        subnets: registered.subnets.iter().map(ToString::to_string).collect(),
        network: registered.network,
        name: registered.name,
        leases,
        figures,
    })
}

/// next is what the plugins' own search would find.
fn figures(tx: &Tx, pool: &Pool, cursor: Option<std::net::IpAddr>) -> shared::Result<Figures> {
    let mut used = 0u128;
    for (lo, hi) in pool.allocatable() {
        used += u128::from(tx.count_leases(lo, hi)?);
    }
    let next = pool.find_free(cursor, tx)?.map(|ip| ip.to_string());
    Ok(Figures { size: pool.capacity(), used, next })
}
