//! ipam-da-sticky: the allocation delegate that gives a workload identity
//! back its address. For each IP family of the candidate pools that has no
//! address in `prevResult` yet, it returns the address the identity holds in
//! one of those pools (held since its last attachment was released), and
//! the hold becomes this attachment's lease. Another live attachment of the
//! identity is 101, unless `ipam.sticky.shareLive` lets both have the address.

use std::net::IpAddr;

use shared::addr::Family;
use shared::pool::Pool;
use shared::sticky::Sticky;
use shared::store::Lease;
use shared::suite_delegate::{self, StickyIdentity};
use shared::{About, Builtin, Reply, Request, Result};

pub const ABOUT: About = About {
    name: "ipam-da-sticky",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM allocation delegate: gives a workload identity back the address it held",
};

/// ADD: the identity's held addresses, one per family that has none yet.
fn add(req: &Request) -> Result<Reply> {
    let (mut result, pools) = suite_delegate::prev_and_pools(req)?;
    let sticky = Sticky::of(&req.config)?.unwrap_or_default();
    let Some(identity) = sticky.identity(&req.config, &req.env.args)? else {
        tracing::debug!("no identity (args.cni.identity, CNI_ARGS {}): not sticky", sticky.identity_keys.join(", "));
        return suite_delegate::answer_add(req, ABOUT.name, result, "found no identity to give an address back to");
    };
    let bound = StickyIdentity { name: identity.clone(), share_live: sticky.share_live };
    let families = Pool::families_missing(&pools, &result);
    let attachment = req.attachment()?;
    let chosen = suite_delegate::allocate(req, &attachment, Some(&bound), |tx| {
        let rows = tx.rows_of_identity(&attachment.network, &identity, &attachment.ifname)?;
        let live: Vec<&Lease> = rows.iter().filter(|l| !l.is_hold() && l.owner != attachment).collect();
        let chosen = match live.first() {
            Some(other) if !sticky.share_live => return Err(suite_delegate::identity_live_elsewhere(&identity, other)),
            Some(_) => {
                let shared = pick(&families, &pools, &live);
                for (address, _) in &shared {
                    tx.share_lease(*address, &attachment)?;
                    tracing::info!("{address} of identity {identity:?} is shared with the live attachment (shareLive)");
                }
                shared
            }
            None => {
                // Its own: a repeat ADD, or taken over for it on this node
                // by ipam-ds-cluster from another node's hold.
                let own: Vec<&Lease> = rows.iter().filter(|l| !l.is_hold() && l.owner == attachment).collect();
                let mut back = pick(&families, &pools, &own);
                let families: Vec<Family> =
                    families.iter().copied().filter(|f| !back.iter().any(|(a, _)| Family::of(*a) == *f)).collect();
                let holds: Vec<&Lease> = rows.iter().filter(|l| l.is_hold()).collect();
                for gone in unusable(&pools, &holds) {
                    tracing::warn!(
                        "{} held for identity {identity:?} is not handed back: pool {} no longer hands it out; the \
                         hold is dropped and an address is allocated as usual",
                        gone.address,
                        gone.pool
                    );
                    tx.drop_holds(std::slice::from_ref(gone))?;
                }
                let from_holds = pick(&families, &pools, &holds);
                for (address, _) in &from_holds {
                    tx.take_hold(*address, &attachment)?;
                    tracing::info!("{address} was held for identity {identity:?}: handed back");
                }
                back.extend(from_holds);
                back
            }
        };
        Ok(chosen)
    })?;
    for (address, pool) in chosen {
        if let Some(range) = pool.range_for_subnet_member(address) {
            suite_delegate::add_address(&mut result, pool, range, address);
        }
    }
    Ok(Reply::Result(result))
}

/// For each family, the first of `rows` (in candidate pool order) that its
/// pool would hand out now.
fn pick<'p>(families: &[Family], pools: &'p [Pool], rows: &[&Lease]) -> Vec<(IpAddr, &'p Pool)> {
    let mut chosen = Vec::new();
    for &family in families {
        let found = pools.iter().filter(|p| p.family() == family).find_map(|pool| {
            rows.iter().find(|l| l.pool == pool.name && pool.hands_out(l.address)).map(|l| (l.address, pool))
        });
        chosen.extend(found);
    }
    chosen
}

/// The holds in a candidate pool that would not hand them out now (the
/// range moved, the address was excluded): they end.
fn unusable<'l>(pools: &[Pool], holds: &[&'l Lease]) -> Vec<&'l Lease> {
    holds
        .iter()
        .filter(|l| {
            let of_pool: Vec<&Pool> = pools.iter().filter(|p| p.name == l.pool).collect();
            !of_pool.is_empty() && !of_pool.iter().any(|p| p.hands_out(l.address))
        })
        .copied()
        .collect()
}

/// This plugin, as the multicall program runs it by name: an allocator is its ADD.
pub const BUILTIN: Builtin = Builtin { about: ABOUT, plugin: &suite_delegate::Allocator { add } };
