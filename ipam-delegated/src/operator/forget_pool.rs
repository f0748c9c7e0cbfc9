//! `forget-pool`: the operator releases a pool that is gone from the
//! configuration but still holds leases, so that its subnets can be
//! registered by another pool. Under the plugins' lock.

use shared::store::AllocationStore;

use super::failure::Failure;
use super::report::Report;

pub fn run(store: &mut AllocationStore, network: &str, pool: &str) -> Result<Report, Failure> {
    let (released, was_registered) = store.write(|tx| tx.forget_pool(network, pool))?;
    let which = format!("pool {pool:?} of network {network:?}");
    if !was_registered && released.is_empty() {
        return Err(Failure::UnknownPool {
            network: network.to_string(),
            pool: pool.to_string(),
            database: store.path().to_path_buf(),
        });
    }
    let mut out = String::new();
    for lease in &released {
        tracing::info!(
            "operator forget-pool: released {} of {which} held by {} in {}",
            lease.address,
            lease.owner,
            store.path().display()
        );
        out.push_str(&format!("released {} held by {}\n", lease.address, lease.owner));
    }
    tracing::info!("operator forget-pool: forgot {which} in {}", store.path().display());
    out.push_str(&format!(
        "forgot {which}: {} lease{} released{}\n",
        released.len(),
        if released.len() == 1 { "" } else { "s" },
        if was_registered { ", registration dropped" } else { " (it was no longer registered)" }
    ));
    Ok(Report::fine(out))
}
