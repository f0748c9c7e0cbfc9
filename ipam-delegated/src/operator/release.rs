//! `release`: the operator frees one attachment's leases by hand, e.g. after
//! a runtime lost a container without calling DEL. Under the plugins' lock.

use shared::store::AllocationStore;
use shared::Attachment;

use super::{Failure, Report};

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
