//! `release`: the operator frees one attachment's leases by hand, e.g. after
//! a runtime lost a container without calling DEL; or, with `--identity`,
//! drops the holds a workload identity has (ipam-da-sticky), e.g. for a
//! StatefulSet scaled down for good. Under the plugins' lock.

use shared::store::AllocationStore;
use shared::utc;
use shared::Attachment;

use super::failure::Failure;
use super::report::Report;

pub fn run(store: &mut AllocationStore, owner: &Attachment) -> Result<Report, Failure> {
    let released = store.write(|tx| tx.release(owner, None))?;
    let who = owner.to_string();
    if released.is_empty() {
        tracing::info!("operator release: {who} held no lease in {}", store.path().display());
        return Ok(Report::fine(format!("nothing released: {who} holds no lease\n")));
    }
    let mut out = String::new();
    for lease in &released {
        tracing::info!(
            "operator release: released {} of pool {} held by {who} in {}",
            lease.address,
            lease.pool,
            store.path().display()
        );
        out.push_str(&format!("released {} (pool {}) held by {who}\n", lease.address, lease.pool));
    }
    Ok(Report::fine(out))
}

/// Drops the holds of `identity` (on `network` only, when given); never a
/// live lease, which is its attachment's to release. What it leaves live is
/// said, so that "nothing released" does not read as "nothing there".
pub fn holds(store: &mut AllocationStore, identity: &str, network: Option<&str>) -> Result<Report, Failure> {
    let dropped = store.write(|tx| tx.drop_holds(&tx.holds_of_identity(network, identity)?))?;
    // Read after the write, so that the plugins do not wait for the scan.
    let filter = shared::store::LeaseFilter { network: network.map(str::to_string), ..Default::default() };
    let live: Vec<_> = store
        .read(|tx| tx.leases(&filter))?
        .into_iter()
        .filter(|lease| !lease.is_hold() && lease.identity.as_deref() == Some(identity))
        .collect();
    let whose = match network {
        Some(network) => format!("identity {identity:?} on network {network:?}"),
        None => format!("identity {identity:?}"),
    };
    let mut out = String::new();
    if dropped.is_empty() {
        tracing::info!("operator release: {whose} had no hold in {}", store.path().display());
        out.push_str(&format!("nothing released: {whose} holds no address\n"));
    }
    for hold in &dropped {
        let until = hold.held_until.map(utc::iso8601).unwrap_or_default();
        tracing::info!(
            "operator release: dropped the hold of {} (pool {}) for {whose} until {until} in {}: the address is free",
            hold.address,
            hold.pool,
            store.path().display()
        );
        out.push_str(&format!(
            "released {} (pool {} of network {:?}) held for identity {identity:?} until {until}\n",
            hold.address, hold.pool, hold.owner.network
        ));
    }
    for lease in &live {
        out.push_str(&format!(
            "kept {} (pool {}): leased by {}, not a hold; release that attachment to free it\n",
            lease.address, lease.pool, lease.owner
        ));
    }
    Ok(Report::fine(out))
}
