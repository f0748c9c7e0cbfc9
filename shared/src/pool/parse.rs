//! Pools from their objects ([`PoolSpec`], [`RangeSpec`]): the meaning of
//! each key checked, defaults filled in, and written back complete for the
//! delegate protocol.
//!
//! Every failure is error 7 whose field names the pool and the key, and whose
//! text names the bad value, so that an administrator can find it.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::subnet;
use super::{Pool, Range};
use crate::addr::{from_u128, parse_cidr, to_u128, Family};
use crate::config::{typed, PoolSpec, RangeSpec};
use crate::error::{CniError, Result};

const MAX_NAME_LEN: usize = 64;

impl Pool {
    /// Reads one pool object, full or short form; `field` is its JSON path
    /// (`ipam.pools[2]`) for messages.
    pub fn from_json(value: &Value, field: &str) -> Result<Pool> {
        Pool::from_spec(&typed(value, field)?, field)
    }

    /// The pool a pool object describes. Keys the suite does not read are
    /// ignored, so that newer selectors can add keys.
    pub fn from_spec(spec: &PoolSpec, field: &str) -> Result<Pool> {
        let name = check_name(&spec.name, field)?;
        let label = format!("{field} (pool {name:?})");
        let ranges = pool_ranges(spec, &label)?;
        let family = Family::of_net(&ranges[0].subnet);
        Ok(Pool {
            exclude: parse_exclude(spec.exclude.as_deref().unwrap_or_default(), &label, family)?,
            routes: spec.routes.clone().unwrap_or_default(),
            dns: spec.dns.clone().filter(|d| !d.is_empty()),
            matches: spec.matches.clone().unwrap_or_default(),
            requested_ip: spec.requested_ip.as_deref().map(|s| parse_requested_ip(s, &label)).transpose()?,
            block_size: spec.block_size.map(|size| check_block_size(size, &ranges, &label)).transpose()?,
            name,
            ranges,
        })
    }

    /// The complete pool object of the delegate protocol, defaults filled in.
    /// `match` is left out: the selector has already evaluated it.
    pub fn to_json(&self) -> Value {
        let spec = PoolSpec {
            name: self.name.clone(),
            ranges: Some(self.ranges.iter().map(Range::to_spec).collect()),
            exclude: Some(self.exclude.iter().map(IpNet::to_string).collect()).filter(|e: &Vec<_>| !e.is_empty()),
            routes: Some(self.routes.clone()).filter(|r| !r.is_empty()),
            dns: self.dns.clone().filter(|d| !d.is_empty()),
            requested_ip: self.requested_ip.map(|ip| ip.to_string()),
            block_size: self.block_size,
            ..PoolSpec::default()
        };
        // A struct of strings, lists and maps always serializes.
        serde_json::to_value(spec).unwrap_or_default()
    }
}

impl Range {
    fn to_spec(&self) -> RangeSpec {
        RangeSpec {
            subnet: Some(self.subnet.to_string()),
            range_start: Some(self.range_start.to_string()),
            range_end: Some(self.range_end.to_string()),
            gateway: self.gateway.map(|gw| gw.to_string()),
            ..RangeSpec::default()
        }
    }
}

fn check_name(name: &str, field: &str) -> Result<String> {
    if !is_valid_name(name) {
        return Err(CniError::config(
            &format!("{field}.name"),
            format!(
                "{name:?} is not a valid pool name: it must start with a letter or digit, \
                 then letters, digits, '_', '.' or '-', at most {MAX_NAME_LEN} characters"
            ),
        ));
    }
    Ok(name.to_string())
}

pub(super) fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_NAME_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `ranges`, or the short form's top-level `subnet` as the one range.
fn pool_ranges(spec: &PoolSpec, label: &str) -> Result<Vec<Range>> {
    let ranges_field = format!("{label}.ranges");
    match (&spec.ranges, spec.short_range()) {
        (Some(_), Some(_)) => {
            Err(CniError::config(&format!("{label}.subnet"), "give either ranges or a top-level subnet, not both"))
        }
        (None, Some(short)) => Ok(vec![parse_range(&short, label)?]),
        (None, None) => Err(CniError::config(&ranges_field, "is required (a non-empty array of ranges)")),
        (Some(items), None) => parse_ranges(items, &ranges_field),
    }
}

/// A non-empty list of ranges of one family that do not overlap, so that an
/// address belongs to at most one range; `field` is the list's path.
pub(super) fn parse_ranges(items: &[RangeSpec], field: &str) -> Result<Vec<Range>> {
    if items.is_empty() {
        return Err(CniError::config(field, "must not be empty"));
    }
    let paths: Vec<String> = (0..items.len()).map(|i| format!("{field}[{i}]")).collect();
    let ranges = items.iter().zip(&paths).map(|(item, path)| parse_range(item, path)).collect::<Result<Vec<_>>>()?;
    let first = &ranges[0];
    for (i, range) in ranges.iter().enumerate() {
        let field = format!("{}.subnet", paths[i]);
        let (family, first_family) = (Family::of_net(&range.subnet), Family::of_net(&first.subnet));
        if family != first_family {
            return Err(CniError::config(
                &field,
                format!(
                    "{} is {family} but the pool's first range {} is {first_family}; all ranges of a pool must be \
                     of one family",
                    range.subnet, first.subnet,
                ),
            ));
        }
        // As in host-local, ranges may share a subnet when their
        // rangeStart..rangeEnd do not overlap (cluster mode hands out a
        // pool's blocks so).
        for other in &ranges[..i] {
            if other.subnet == range.subnet {
                let disjoint = to_u128(other.range_end) < to_u128(range.range_start)
                    || to_u128(range.range_end) < to_u128(other.range_start);
                if !disjoint {
                    return Err(CniError::config(
                        &format!("{}.rangeStart", paths[i]),
                        format!(
                            "{}-{} overlaps {}-{}, another range of this pool in subnet {}",
                            range.range_start, range.range_end, other.range_start, other.range_end, range.subnet
                        ),
                    ));
                }
            } else if subnet::subnets_overlap(&other.subnet, &range.subnet) {
                return Err(CniError::config(
                    &field,
                    format!("{} overlaps {}, the subnet of another range of this pool", range.subnet, other.subnet),
                ));
            }
        }
    }
    Ok(ranges)
}

/// One range with defaults filled in; `path` is its JSON path for messages.
fn parse_range(spec: &RangeSpec, path: &str) -> Result<Range> {
    let subnet_field = format!("{path}.subnet");
    let subnet = match &spec.subnet {
        Some(s) => parse_subnet(s, &subnet_field)?,
        None => return Err(CniError::config(&subnet_field, "is required")),
    };
    let (first, last) = subnet::usable_bounds(&subnet);
    let start_field = format!("{path}.rangeStart");
    let range_start = match &spec.range_start {
        Some(s) => parse_usable(s, &subnet, &start_field)?,
        None => from_u128(first),
    };
    let end_field = format!("{path}.rangeEnd");
    let range_end = match &spec.range_end {
        Some(s) => parse_usable(s, &subnet, &end_field)?,
        None => from_u128(last),
    };
    if to_u128(range_start) > to_u128(range_end) {
        return Err(CniError::config(&end_field, format!("{range_end} is before rangeStart {range_start}")));
    }
    let gateway = match &spec.gateway {
        Some(s) => Some(parse_gateway(s, &subnet, &format!("{path}.gateway"))?),
        None => subnet::default_gateway(&subnet),
    };
    Ok(Range { subnet, range_start, range_end, gateway })
}

fn parse_subnet(s: &str, field: &str) -> Result<IpNet> {
    let net: IpNet = match parse_cidr(s).ok_or(()) {
        Ok(net) => net,
        Err(_) if s.parse::<IpAddr>().is_ok() => {
            return Err(CniError::config(field, format!("{s} is an address, not a CIDR: add the prefix length")));
        }
        Err(_) => return Err(CniError::config(field, format!("{s:?} is not a CIDR"))),
    };
    if net.trunc() != net {
        return Err(CniError::config(field, format!("{s} has host bits set: the subnet would be {}", net.trunc())));
    }
    if subnet::overlaps_v4_mapped(&net) {
        return Err(CniError::config(
            field,
            format!("{s} overlaps ::ffff:0:0/96, the IPv4-mapped addresses: use the IPv4 subnet instead"),
        ));
    }
    Ok(net)
}

fn parse_ip(s: &str, field: &str) -> Result<IpAddr> {
    s.parse().map_err(|_| CniError::config(field, format!("{s:?} is not an IP address")))
}

fn parse_in_subnet(s: &str, subnet: &IpNet, field: &str) -> Result<IpAddr> {
    let ip = parse_ip(s, field)?;
    if !subnet.contains(&ip) {
        return Err(CniError::config(field, format!("{ip} is outside subnet {subnet}")));
    }
    Ok(ip)
}

/// rangeStart and rangeEnd: in the subnet and usable.
fn parse_usable(s: &str, subnet: &IpNet, field: &str) -> Result<IpAddr> {
    let ip = parse_in_subnet(s, subnet, field)?;
    match subnet::unusable_reason(subnet, ip) {
        Some(reason) => Err(CniError::config(field, reason)),
        None => Ok(ip),
    }
}

/// A gateway may be IPv6's subnet-router anycast address (some networks use
/// it), but never IPv4's network or broadcast address.
fn parse_gateway(s: &str, subnet: &IpNet, field: &str) -> Result<IpAddr> {
    let ip = parse_in_subnet(s, subnet, field)?;
    if let (IpNet::V4(_), Some(reason)) = (subnet, subnet::unusable_reason(subnet, ip)) {
        return Err(CniError::config(field, reason));
    }
    Ok(ip)
}

/// Bare addresses become /32 or /128; host bits of a CIDR are dropped
/// rather than refused, since what is meant is plain.
fn parse_exclude(items: &[String], label: &str, family: Family) -> Result<Vec<IpNet>> {
    let field = format!("{label}.exclude");
    let mut exclude = Vec::with_capacity(items.len());
    for (i, s) in items.iter().enumerate() {
        let item_field = format!("{field}[{i}]");
        let net = match parse_cidr(s).ok_or(()) {
            Ok(net) => net.trunc(),
            Err(_) => match s.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => return Err(CniError::config(&item_field, format!("{s:?} is not an address or CIDR"))),
            },
        };
        if Family::of_net(&net) != family {
            return Err(CniError::config(&item_field, format!("{s} is not of the pool's family ({family})")));
        }
        exclude.push(net);
    }
    Ok(exclude)
}

/// A block is a part of one subnet: its prefix is at least every range's
/// subnet prefix, and at most the family's address length.
fn check_block_size(size: u8, ranges: &[Range], label: &str) -> Result<u8> {
    let field = format!("{label}.blockSize");
    let max = match ranges[0].subnet {
        IpNet::V4(_) => 32,
        IpNet::V6(_) => 128,
    };
    if size > max {
        return Err(CniError::config(&field, format!("{size} is not a prefix length of the pool's family (0-{max})")));
    }
    if let Some(wide) = ranges.iter().find(|r| r.subnet.prefix_len() > size) {
        return Err(CniError::config(
            &field,
            format!(
                "/{size} blocks are larger than subnet {}: use a prefix length of at least {}",
                wide.subnet,
                wide.subnet.prefix_len()
            ),
        ));
    }
    Ok(size)
}

/// A CIDR is accepted and its address kept: runtimes pass either.
fn parse_requested_ip(s: &str, label: &str) -> Result<IpAddr> {
    match (s.parse::<IpAddr>(), parse_cidr(s).ok_or(())) {
        (Ok(ip), _) => Ok(ip),
        (_, Ok(net)) => Ok(net.addr()),
        _ => Err(CniError::config(&format!("{label}.requested-ip"), format!("{s:?} is not an IP address"))),
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
