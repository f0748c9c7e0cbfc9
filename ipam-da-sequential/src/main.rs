//! ipam-da-sequential: the allocation delegate that hands out the next free
//! address. For each IP family of the candidate pools that has no address in
//! `prevResult` yet, it takes the first pool of that family with room and the
//! next free address after the last one it handed out there (round robin).

use std::net::IpAddr;
use std::process::ExitCode;

use shared::pool::Pool;
use shared::{allocator, About, CniError, Code, Reply, Request, Result};

const ABOUT: About = About {
    name: "ipam-da-sequential",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM allocation delegate: hands out the next free address of a pool",
};

/// ADD: an address for each family of the candidate pools that has none yet.
fn add(req: &Request) -> Result<Reply> {
    let (mut result, pools) = allocator::prev_and_pools(req)?;
    let mut families: Vec<bool> = Vec::new();
    for pool in &pools {
        if !result.has_family(pool.is_ipv4()) && !families.contains(&pool.is_ipv4()) {
            families.push(pool.is_ipv4());
        }
    }
    if families.is_empty() {
        return Ok(Reply::Result(result));
    }
    let attachment = req.attachment()?;
    let mut store = allocator::open_store(req)?;
    // All families in one transaction: an exhausted family leaves nothing
    // half-allocated.
    let chosen = store.write(|tx| {
        let held = tx.leases_of(&attachment)?;
        families
            .iter()
            .map(|&ipv4| {
                let family: Vec<&Pool> = pools.iter().filter(|p| p.is_ipv4() == ipv4).collect();
                if let Some(lease) = held.iter().find(|l| family.iter().any(|p| p.name == l.pool)) {
                    tracing::debug!("{} is already held by this attachment in pool {}", lease.address, lease.pool);
                    return Ok((lease.address, lease.pool.clone()));
                }
                for pool in &family {
                    let cursor = allocator::register(tx, &attachment.network, pool)?;
                    if let Some(address) = pool.find_free(cursor, tx)? {
                        tx.insert_lease(address, &pool.name, &attachment)?;
                        tx.set_cursor(&attachment.network, &pool.name, address)?;
                        match cursor {
                        Some(last) => tracing::info!(
                            "allocated {address} from pool {}: the first free address after {last}, the last one handed out",
                            pool.name
                        ),
                        None => tracing::info!("allocated {address} from pool {}: the first free address", pool.name),
                    }
                        return Ok((address, pool.name.clone()));
                    }
                    tracing::debug!("pool {} is full", pool.name);
                }
                Err(exhausted(ipv4, &family))
            })
            .collect::<Result<Vec<(IpAddr, String)>>>()
    })?;
    for (address, pool_name) in chosen {
        let pool = pools.iter().find(|p| p.name == pool_name);
        if let Some((pool, range)) = pool.and_then(|p| p.range_for_subnet_member(address).map(|r| (p, r))) {
            allocator::add_address(&mut result, pool, range, address);
        }
    }
    Ok(Reply::Result(result))
}

fn exhausted(ipv4: bool, family: &[&Pool]) -> CniError {
    let names: Vec<&str> = family.iter().map(|p| p.name.as_str()).collect();
    CniError::new(
        Code::NoFreeAddress,
        format!("no free {} address in the candidate pools ({})", if ipv4 { "IPv4" } else { "IPv6" }, names.join(", ")),
    )
}

fn main() -> ExitCode {
    allocator::run(&ABOUT, add)
}
