//! ipam-da-sequential: the allocation delegate that hands out the next free
//! address. For each IP family of the candidate pools that has no address in
//! `prevResult` yet, it takes the first pool of that family with room and the
//! next free address after the last one it handed out there (round robin).

use std::net::IpAddr;

use shared::pool::{self, Pool};
use shared::store::Lease;
use shared::{suite_delegate, About, Builtin, CniError, Code, Reply, Request, Result};

pub const ABOUT: About = About {
    name: "ipam-da-sequential",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM allocation delegate: hands out the next free address of a pool",
};

/// ADD: an address for each family of the candidate pools that has none yet.
fn add(req: &Request) -> Result<Reply> {
    let (mut result, pools) = suite_delegate::prev_and_pools(req)?;
    let families = Pool::families_missing(&pools, &result);
    if families.is_empty() {
        return Ok(Reply::Result(result));
    }
    let attachment = req.attachment()?;
    let identity = suite_delegate::identity(req)?;
    let cluster = req.config.ipam()?.is_cluster();
    // All families in one transaction: an exhausted family leaves nothing
    // half-allocated.
    let chosen = suite_delegate::allocate(req, &attachment, identity.as_ref(), |tx| {
        let held = tx.leases_of(&attachment)?;
        families
            .iter()
            .map(|&family| {
                let of_family: Vec<&Pool> = pools.iter().filter(|p| p.family() == family).collect();
                if let Some(found) = held_address(&held, &of_family) {
                    return Ok(found);
                }
                for &pool in &of_family {
                    if let Some(address) = suite_delegate::lease_next(tx, pool, &attachment)? {
                        return Ok((address, pool));
                    }
                    tracing::debug!("pool {} is full", pool.name);
                }
                let names = pool::names(of_family);
                Err(match cluster {
                    // ipam-ds-cluster leases the family's address itself
                    // (it answers 100 when the cluster has none left); a
                    // view with no room is one it handed on unleased (an
                    // address an earlier ADD got published): other ADDs of
                    // this node took it meanwhile.
                    true => CniError::new(
                        Code::TryAgainLater,
                        format!(
                            "this node's blocks of the cluster pools ({names}) filled up while this ADD ran (other \
                             ADDs of this node took their last {family} addresses): try again, the next ADD claims \
                             another block"
                        ),
                    ),
                    false => CniError::new(
                        Code::NoFreeAddress,
                        format!("no free {family} address in the candidate pools ({names})"),
                    ),
                })
            })
            .collect::<Result<Vec<(IpAddr, &Pool)>>>()
    })?;
    for (address, pool) in chosen {
        // Every chosen address lies in a range of its pool (found there, or
        // checked by held_address): an ADD never answers without it.
        let range = pool.check_held(address).map_err(|why| {
            CniError::new(Code::Internal, format!("bug: chose {address} of pool {} but {why}", pool.name))
        })?;
        suite_delegate::add_address(&mut result, pool, range, address);
    }
    Ok(Reply::Result(result))
}

/// A repeat ADD answers with the address the attachment already holds in
/// one of the family's pools, if that pool may still hand it out. One it
/// may not (the pool's subnet, gateway or exclude changed) stays held until
/// DEL, as the container may still use it, and a new one is allocated.
fn held_address<'p>(held: &[Lease], family: &[&'p Pool]) -> Option<(IpAddr, &'p Pool)> {
    for lease in held {
        let Some(&pool) = family.iter().find(|p| p.name == lease.pool) else { continue };
        match pool.check_held(lease.address) {
            Ok(_) => {
                tracing::debug!("{} is already held by this attachment in pool {}", lease.address, pool.name);
                return Some((lease.address, pool));
            }
            Err(why) => tracing::warn!(
                "{} held by this attachment in pool {} is not handed back: {why}; a new address is allocated",
                lease.address,
                pool.name
            ),
        }
    }
    None
}

/// This plugin, as the multicall program runs it by name: an allocator is its ADD.
pub const BUILTIN: Builtin = Builtin { about: ABOUT, plugin: &suite_delegate::Allocator { add } };
