//! Candidate selection, as the selector delegate does it: the runtime's
//! `ipRanges` and the configured pools, kept when their `match` holds and
//! narrowed by name on the attachment's request.

use std::collections::hash_map::{Entry, HashMap};

use ipnet::IpNet;

use super::parse::parse_ranges;
use super::{subnet, Pool};
use crate::args::CniArgs;
use crate::config::{NetConf, RangeSpec};
use crate::error::{CniError, Result};

const IP_RANGES: &str = "runtimeConfig.ipRanges";
const POOLS: &str = "ipam.pools";
const ARGS_POOLS: &str = "args.cni.pools";
const CNI_ARGS_POOLS: &str = "CNI_ARGS IPAM_POOL";

/// A pool with the JSON path it came from, for messages.
struct Sourced {
    path: String,
    pool: Pool,
}

impl Sourced {
    fn label(&self) -> String {
        format!("{} (pool {:?})", self.path, self.pool.name)
    }
}

/// The candidate pools of one attachment, in order: `ipRanges` pools first,
/// then the configured pools whose `match` holds, narrowed by name.
pub fn candidates(config: &NetConf, cni_args: &CniArgs) -> Result<Vec<Pool>> {
    let pools = sourced_pools(config)?;
    let narrowing = narrowing(config, cni_args)?;
    if let Some((source, names)) = &narrowing {
        if let Some(unknown) = names.iter().find(|n| !pools.iter().any(|p| &p.pool.name == *n)) {
            return Err(CniError::config(
                source,
                format!("no pool is named {unknown:?} (pools: {})", super::names(pools.iter().map(|p| &p.pool))),
            ));
        }
    }
    let mut kept = Vec::new();
    let mut skipped = Vec::new();
    for p in &pools {
        let why_not = match &narrowing {
            Some((source, names)) if !names.contains(&p.pool.name) => Some(format!("not named by {source}")),
            _ => match_failure(&p.pool, cni_args)?,
        };
        match why_not {
            None => kept.push(p.pool.clone()),
            Some(why) => {
                tracing::debug!("pool {:?} is no candidate: {why}", p.pool.name);
                skipped.push(format!("{:?}: {why}", p.pool.name));
            }
        }
    }
    if kept.is_empty() {
        return Err(CniError::config(POOLS, format!("no pool applies to this attachment ({})", skipped.join("; "))));
    }
    Ok(kept)
}

/// Every pool of the configuration — `ipRanges` pools first, then
/// `ipam.pools` — validated, without `match` or narrowing (for STATUS).
pub fn all_pools(config: &NetConf) -> Result<Vec<Pool>> {
    Ok(sourced_pools(config)?.into_iter().map(|p| p.pool).collect())
}

/// `runtimeConfig.ipRanges`, host-local's list of range sets: each set
/// becomes a pool named `ipRanges-<index>`.
fn ip_range_pools(sets: &[Vec<RangeSpec>]) -> Result<Vec<Sourced>> {
    sets.iter()
        .enumerate()
        .map(|(i, set)| {
            let path = format!("{IP_RANGES}[{i}]");
            for (j, range) in set.iter().enumerate() {
                range.refuse_unknown_keys(&format!("{path}[{j}]"))?;
            }
            let pool = Pool {
                name: format!("ipRanges-{i}"),
                ranges: parse_ranges(set, &path)?,
                exclude: Vec::new(),
                routes: Vec::new(),
                dns: None,
                matches: Default::default(),
                requested_ip: None,
                block_size: None,
            };
            Ok(Sourced { path, pool })
        })
        .collect()
}

/// `ipam.pools`; required and non-empty unless the runtime gave ranges.
fn configured_pools(config: &NetConf, required: bool) -> Result<Vec<Sourced>> {
    const REQUIRED: &str = "is required (a non-empty array of pools), unless the runtime passes \
                            runtimeConfig.ipRanges (the ipRanges capability)";
    let specs = match config.pool_specs()? {
        None if required => return Err(CniError::config(POOLS, REQUIRED)),
        None => return Ok(Vec::new()),
        Some(specs) => specs,
    };
    if specs.is_empty() && required {
        return Err(CniError::config(POOLS, format!("must not be empty: it {REQUIRED}")));
    }
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let path = format!("{POOLS}[{i}]");
            spec.refuse_unknown_keys(&path)?;
            Ok(Sourced { pool: Pool::from_spec(spec, &path)?, path })
        })
        .collect()
}

/// All pools with their sources, checked against each other: names are
/// unique and no two pools share an address, so that an address belongs to
/// one pool. Both checks sort rather than compare every pair: a
/// configuration may hold thousands of pools.
fn sourced_pools(config: &NetConf) -> Result<Vec<Sourced>> {
    let ip_ranges: Option<Vec<Vec<RangeSpec>>> = config.runtime_config("ipRanges")?;
    let mut pools = ip_range_pools(ip_ranges.as_deref().unwrap_or_default())?;
    pools.extend(configured_pools(config, pools.is_empty())?);
    // The conflict reported is the one whose later pool comes first in the
    // configuration, a name before a subnet.
    let overlap = first_overlap(&pools);
    match first_duplicate_name(&pools) {
        Some((later, earlier)) if overlap.as_ref().is_none_or(|o| o.later >= later) => Err(CniError::config(
            &format!("{}.name", pools[later].path),
            format!("{:?} is also the name of {}", pools[later].pool.name, pools[earlier].path),
        )),
        _ => match overlap {
            Some(o) => Err(CniError::config(
                &pools[o.later].label(),
                format!("its subnet {} overlaps {} of {}", o.mine, o.theirs, pools[o.earlier].label()),
            )),
            None => Ok(pools),
        },
    }
}

/// (later, earlier) indexes of the first pool whose name an earlier one has.
fn first_duplicate_name(pools: &[Sourced]) -> Option<(usize, usize)> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(pools.len());
    pools.iter().enumerate().find_map(|(i, p)| match seen.entry(p.pool.name.as_str()) {
        Entry::Occupied(earlier) => Some((i, *earlier.get())),
        Entry::Vacant(slot) => {
            slot.insert(i);
            None
        }
    })
}

/// Two pools sharing an address: `mine` of pool `later`, `theirs` of `earlier`.
struct Overlap {
    later: usize,
    earlier: usize,
    mine: IpNet,
    theirs: IpNet,
}

/// An overlap between two pools, if any (the ranges of one pool were
/// checked apart): subnets sorted by first address, each compared with the
/// one reaching furthest before it. Of the overlaps met, the one whose later
/// pool comes first.
fn first_overlap(pools: &[Sourced]) -> Option<Overlap> {
    let mut subnets: Vec<(u128, u128, usize, IpNet)> = pools
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.pool.ranges.iter().map(move |r| {
                let (first, last) = subnet::bounds(&r.subnet);
                (first, last, i, r.subnet)
            })
        })
        .collect();
    subnets.sort_unstable_by_key(|&(first, last, i, _)| (first, last, i));
    let mut found: Option<Overlap> = None;
    let mut reach: Option<(u128, usize, IpNet)> = None;
    for (first, last, pool, net) in subnets {
        if let Some((end, other, other_net)) = reach {
            if first <= end && other != pool {
                let (later, earlier, mine, theirs) =
                    if pool > other { (pool, other, net, other_net) } else { (other, pool, other_net, net) };
                if found.as_ref().is_none_or(|f| later < f.later) {
                    found = Some(Overlap { later, earlier, mine, theirs });
                }
            }
        }
        if reach.is_none_or(|(end, _, _)| last > end) {
            reach = Some((last, pool, net));
        }
    }
    found
}

/// The names the attachment narrows to, and where they came from:
/// `args.cni.pools` wins over CNI_ARGS `IPAM_POOL`; an empty list narrows nothing.
fn narrowing(config: &NetConf, cni_args: &CniArgs) -> Result<Option<(&'static str, Vec<String>)>> {
    if let Some(names) = config.args_cni::<Vec<String>>("pools")?.filter(|names| !names.is_empty()) {
        return Ok(Some((ARGS_POOLS, names)));
    }
    Ok(cni_args.list("IPAM_POOL")?.filter(|names| !names.is_empty()).map(|names| (CNI_ARGS_POOLS, names)))
}

/// Why the pool's `match` does not hold, or `None` when it does.
fn match_failure(pool: &Pool, cni_args: &CniArgs) -> Result<Option<String>> {
    for (key, want) in &pool.matches {
        match cni_args.get(key)? {
            Some(have) if have == want => {}
            Some(have) => return Ok(Some(format!("match {key}={want} does not hold, CNI_ARGS has {key}={have}"))),
            None => return Ok(Some(format!("match {key}={want} does not hold, CNI_ARGS has no {key}"))),
        }
    }
    Ok(None)
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
