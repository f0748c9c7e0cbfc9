//! ipam-da-static: the allocation delegate for addresses asked for by name.
//! The requests come from the first present of `runtimeConfig.ips`,
//! `args.cni.ips`, CNI_ARGS `IP=` and the pools' `requested-ip`; each must be a
//! usable address in the subnet of a candidate pool, and is recorded for this
//! attachment unless another one holds it.

use std::net::IpAddr;
use std::process::ExitCode;

use serde_json::Value;
use shared::addr::parse_cidr;
use shared::pool::Pool;
use shared::{allocator, About, CniError, Code, Reply, Request, Result};

const ABOUT: About = About {
    name: "ipam-da-static",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM allocation delegate: reserves the addresses asked for by name",
};

/// ADD: the addresses asked for by name, each in a candidate pool.
fn add(req: &Request) -> Result<Reply> {
    let (mut result, pools) = allocator::prev_and_pools(req)?;
    let requests = requested_addresses(req, &pools)?;
    if requests.is_empty() {
        return Ok(Reply::Result(result));
    }
    let attachment = req.attachment()?;
    let claims = requests
        .iter()
        .map(|&address| claim_target(&pools, address).map(|pool| (address, pool)))
        .collect::<Result<Vec<_>>>()?;
    let mut store = allocator::open_store(req)?;
    store.write(|tx| {
        for (address, pool) in &claims {
            allocator::register(tx, &attachment.network, pool)?;
            match tx.holder(*address)? {
                Some(lease) if lease.owner == attachment => {
                    tracing::debug!("{address} is already held by this attachment");
                }
                Some(lease) => {
                    return Err(CniError::new(
                        Code::AddressInUse,
                        format!("requested address {address} is in use by another attachment"),
                    )
                    .with_details(format!(
                        "held in network {:?} by container {} ifname {}",
                        lease.owner.network, lease.owner.container_id, lease.owner.ifname
                    )))
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
            allocator::add_address(&mut result, pool, range, *address);
        }
    }
    Ok(Reply::Result(result))
}

/// The addresses asked for, from the first source that has any.
fn requested_addresses(req: &Request, pools: &[Pool]) -> Result<Vec<IpAddr>> {
    let from_list = |field: &str, value: &Value| -> Result<Vec<IpAddr>> {
        let list = value
            .as_array()
            .ok_or_else(|| CniError::config(field, format!("must be an array of addresses, got {value}")))?;
        list.iter().map(|v| parse_request(field, v.as_str().unwrap_or_default(), v)).collect()
    };
    if let Some(v) = req.config.runtime_config("ips") {
        let found = from_list("runtimeConfig.ips", v)?;
        if !found.is_empty() {
            return Ok(found);
        }
    }
    if let Some(v) = req.config.args_cni("ips") {
        let found = from_list("args.cni.ips", v)?;
        if !found.is_empty() {
            return Ok(found);
        }
    }
    if let Some(list) = req.env.args.list("IP") {
        let found = list
            .iter()
            .map(|s| parse_request("CNI_ARGS IP", s, &Value::from(s.as_str())))
            .collect::<Result<Vec<_>>>()?;
        if !found.is_empty() {
            return Ok(found);
        }
    }
    Ok(pools.iter().filter_map(|p| p.requested_ip).collect())
}

/// A bare address or a CIDR (whose prefix the pool decides, but which must be
/// a valid one).
fn parse_request(field: &str, text: &str, raw: &Value) -> Result<IpAddr> {
    let text = text.trim();
    let parsed = if text.contains('/') { parse_cidr(text).map(|net| net.addr()) } else { text.parse().ok() };
    parsed.ok_or_else(|| CniError::config(field, format!("{raw} is not an IP address or CIDR")))
}

/// The first candidate pool in whose subnet `address` may be claimed; 102 otherwise.
fn claim_target(pools: &[Pool], address: IpAddr) -> Result<&Pool> {
    let mut reasons = Vec::new();
    for pool in pools {
        match pool.check_static(address) {
            Ok(_) => return Ok(pool),
            Err(reason) if pool.range_for_subnet_member(address).is_some() => {
                reasons.push(format!("pool {}: {reason}", pool.name))
            }
            Err(_) => {}
        }
    }
    let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let msg = if reasons.is_empty() {
        format!("requested address {address} is outside every candidate pool ({})", names.join(", "))
    } else {
        format!("requested address {address} cannot be handed out: {}", reasons.join("; "))
    };
    Err(CniError::new(Code::AddressNotInPool, msg))
}

fn main() -> ExitCode {
    allocator::run(&ABOUT, add)
}
