//! ipam-da-static: the allocation delegate for addresses asked for by name.
//! The requests come from the first present of `runtimeConfig.ips`,
//! `args.cni.ips`, CNI_ARGS `IP=` and the pools' `requested-ip`; each must be a
//! usable address in the subnet of a candidate pool, and is recorded for this
//! attachment unless another one holds it.

use shared::pool;
use shared::{suite_delegate, About, Builtin, CniError, Code, Reply, Request, Result};

pub const ABOUT: About = About {
    name: "ipam-da-static",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM allocation delegate: reserves the addresses asked for by name",
};

/// ADD: the addresses asked for by name, each in a candidate pool.
fn add(req: &Request) -> Result<Reply> {
    let (mut result, pools) = suite_delegate::prev_and_pools(req)?;
    let requests = suite_delegate::requested_addresses(req, &pools)?;
    if requests.is_empty() {
        const WHY: &str = "found no address asked for by name (runtimeConfig.ips, args.cni.ips, CNI_ARGS IP or a \
                           pool's requested-ip)";
        return suite_delegate::answer_add(req, ABOUT.name, result, WHY);
    }
    let attachment = req.attachment()?;
    let claims = requests
        .iter()
        .map(|&address| pool::static_target(&pools, address).map(|pool| (address, pool)))
        .collect::<Result<Vec<_>>>()?;
    let identity = suite_delegate::identity(req)?;
    suite_delegate::allocate(req, &attachment, identity.as_ref(), |tx| {
        for (address, pool) in &claims {
            suite_delegate::register(tx, &attachment.network, pool)?;
            match tx.holder(*address)? {
                Some(lease) if lease.owner == attachment && !lease.is_hold() => {
                    tracing::debug!("{address} is already held by this attachment");
                }
                // Its own identity's hold: asked for by name, it comes back.
                Some(lease)
                    if lease.is_hold()
                        && identity.as_ref().is_some_and(|i| lease.identity.as_deref() == Some(i.name.as_str()))
                        && lease.owner.network == attachment.network
                        && lease.owner.ifname == attachment.ifname =>
                {
                    tx.take_hold(*address, &attachment)?;
                    tracing::info!("requested address {address} was held for this attachment's identity: taken back");
                }
                Some(lease) if lease.is_hold() => {
                    let (who, until) = (lease.identity.unwrap_or_default(), lease.held_until.unwrap_or_default());
                    return Err(CniError::new(
                        Code::AddressInUse,
                        format!(
                            "requested address {address} is held for identity {who:?} until {} (sticky)",
                            shared::utc::iso8601(until)
                        ),
                    )
                    .with_details(format!(
                        "it was last leased by {}; 'ipam-delegated release --identity {who}' ends the hold",
                        lease.owner
                    )));
                }
                Some(lease) => {
                    return Err(CniError::new(
                        Code::AddressInUse,
                        format!("requested address {address} is in use by another attachment"),
                    )
                    .with_details(format!("held by {}", lease.owner)))
                }
                None => {
                    tx.insert_lease(*address, &pool.name, &attachment)?;
                    tracing::info!("reserved requested address {address} in pool {}", pool.name);
                }
            }
        }
        Ok(())
    })?;
    for (address, pool) in &claims {
        if let Ok(range) = pool.check_static(*address) {
            suite_delegate::add_address(&mut result, pool, range, *address);
        }
    }
    Ok(Reply::Result(result))
}

/// This plugin, as the multicall program runs it by name: an allocator is its ADD.
pub const BUILTIN: Builtin = Builtin { about: ABOUT, plugin: &suite_delegate::Allocator { add } };
