//! Pool objects as JSON: read and validated from `ipam.pools`,
//! `prevResult.pools` or `runtimeConfig.ipRanges`, and written back complete
//! for the delegate protocol.
//!
//! Every failure is error 7 whose field names the pool and the key, and whose
//! text names the bad value, so that an administrator can find it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{json, Map, Value};

use super::subnet;
use super::{Pool, Range};
use crate::addr::{from_u128, parse_cidr, to_u128};
use crate::error::{CniError, Result};
use crate::result::{Dns, Route};

const MAX_NAME_LEN: usize = 64;

impl Pool {
    /// Reads one pool object, full or short form; `field` is its JSON path
    /// (`ipam.pools[2]`) for messages. Unknown keys are ignored so that
    /// newer selectors can add keys.
    pub fn from_json(value: &Value, field: &str) -> Result<Pool> {
        let obj =
            value.as_object().ok_or_else(|| CniError::config(field, format!("must be an object, got {value}")))?;
        let name = parse_name(obj, field)?;
        let label = format!("{field} (pool {name:?})");
        let ranges = parse_ranges(value, obj, &label)?;
        let is_ipv4 = ranges.first().is_some_and(|r| r.subnet.network().is_ipv4());
        Ok(Pool {
            exclude: parse_exclude(obj, &label, is_ipv4)?,
            routes: parse_routes(obj, &label)?,
            dns: parse_dns(obj, &label)?,
            matches: parse_match(obj, &label)?,
            requested_ip: parse_requested_ip(obj, &label)?,
            name,
            ranges,
        })
    }

    /// The complete pool object of the delegate protocol, defaults filled in.
    /// `match` is left out: the selector has already evaluated it.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("name".into(), json!(self.name));
        out.insert("ranges".into(), Value::Array(self.ranges.iter().map(range_to_json).collect()));
        if !self.exclude.is_empty() {
            out.insert("exclude".into(), self.exclude.iter().map(|n| json!(n.to_string())).collect());
        }
        if !self.routes.is_empty() {
            out.insert("routes".into(), json!(self.routes));
        }
        if let Some(dns) = self.dns.as_ref().filter(|d| !d.is_empty()) {
            out.insert("dns".into(), json!(dns));
        }
        if let Some(ip) = self.requested_ip {
            out.insert("requested-ip".into(), json!(ip.to_string()));
        }
        Value::Object(out)
    }
}

fn range_to_json(range: &Range) -> Value {
    let mut out = Map::new();
    out.insert("subnet".into(), json!(range.subnet.to_string()));
    out.insert("rangeStart".into(), json!(range.range_start.to_string()));
    out.insert("rangeEnd".into(), json!(range.range_end.to_string()));
    if let Some(gw) = range.gateway {
        out.insert("gateway".into(), json!(gw.to_string()));
    }
    Value::Object(out)
}

/// A key's value, with JSON `null` read as absent.
fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// An optional string key.
fn get_str<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<Option<&'a str>> {
    match get(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(CniError::config(field, format!("must be a string, got {other}"))),
    }
}

/// An optional array key.
fn get_array<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a [Value]> {
    match get(obj, key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(CniError::config(field, format!("must be an array, got {other}"))),
    }
}

fn parse_name(obj: &Map<String, Value>, field: &str) -> Result<String> {
    let name_field = format!("{field}.name");
    let name = get_str(obj, "name", &name_field)?.ok_or_else(|| CniError::config(&name_field, "is required"))?;
    if !is_valid_name(name) {
        return Err(CniError::config(
            &name_field,
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
fn parse_ranges(value: &Value, obj: &Map<String, Value>, label: &str) -> Result<Vec<Range>> {
    let ranges_field = format!("{label}.ranges");
    match (get(obj, "ranges"), get(obj, "subnet")) {
        (Some(_), Some(_)) => {
            Err(CniError::config(&format!("{label}.subnet"), "give either ranges or a top-level subnet, not both"))
        }
        (None, Some(_)) => Ok(vec![parse_range(value, label)?]),
        (None, None) => Err(CniError::config(&ranges_field, "is required (a non-empty array of ranges)")),
        (Some(_), None) => {
            let items = get_array(obj, "ranges", &ranges_field)?;
            if items.is_empty() {
                return Err(CniError::config(&ranges_field, "must not be empty"));
            }
            let paths: Vec<String> = (0..items.len()).map(|i| format!("{ranges_field}[{i}]")).collect();
            let ranges =
                items.iter().zip(&paths).map(|(item, path)| parse_range(item, path)).collect::<Result<Vec<_>>>()?;
            check_ranges(&ranges, &paths)?;
            Ok(ranges)
        }
    }
}

/// One range object (`subnet`, `rangeStart`, `rangeEnd`, `gateway`) with
/// defaults filled in; `path` is its JSON path for messages.
pub(super) fn parse_range(value: &Value, path: &str) -> Result<Range> {
    let obj = value.as_object().ok_or_else(|| CniError::config(path, format!("must be an object, got {value}")))?;
    let subnet_field = format!("{path}.subnet");
    let subnet = match get_str(obj, "subnet", &subnet_field)? {
        Some(s) => parse_subnet(s, &subnet_field)?,
        None => return Err(CniError::config(&subnet_field, "is required")),
    };
    let (first, last) = subnet::usable_bounds(&subnet);
    let start_field = format!("{path}.rangeStart");
    let range_start = match get_str(obj, "rangeStart", &start_field)? {
        Some(s) => parse_usable(s, &subnet, &start_field)?,
        None => from_u128(first),
    };
    let end_field = format!("{path}.rangeEnd");
    let range_end = match get_str(obj, "rangeEnd", &end_field)? {
        Some(s) => parse_usable(s, &subnet, &end_field)?,
        None => from_u128(last),
    };
    if to_u128(range_start) > to_u128(range_end) {
        return Err(CniError::config(&end_field, format!("{range_end} is before rangeStart {range_start}")));
    }
    let gateway_field = format!("{path}.gateway");
    let gateway = match get_str(obj, "gateway", &gateway_field)? {
        Some(s) => Some(parse_gateway(s, &subnet, &gateway_field)?),
        None => subnet::default_gateway(&subnet),
    };
    Ok(Range { subnet, range_start, range_end, gateway })
}

/// The ranges of one pool must share a family and must not overlap, so
/// that an address belongs to at most one range. `paths[i]` names `ranges[i]`.
pub(super) fn check_ranges(ranges: &[Range], paths: &[String]) -> Result<()> {
    let family = |r: &Range| if r.subnet.network().is_ipv4() { "IPv4" } else { "IPv6" };
    let Some(first) = ranges.first() else { return Ok(()) };
    for (i, range) in ranges.iter().enumerate() {
        let field = format!("{}.subnet", paths.get(i).map_or("", String::as_str));
        if family(range) != family(first) {
            return Err(CniError::config(
                &field,
                format!(
                    "{} is {} but the pool's first range {} is {}; all ranges of a pool must be of one family",
                    range.subnet,
                    family(range),
                    first.subnet,
                    family(first)
                ),
            ));
        }
        if let Some(other) = ranges[..i].iter().find(|o| subnet::subnets_overlap(&o.subnet, &range.subnet)) {
            return Err(CniError::config(
                &field,
                format!("{} overlaps {}, the subnet of another range of this pool", range.subnet, other.subnet),
            ));
        }
    }
    Ok(())
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
fn parse_exclude(obj: &Map<String, Value>, label: &str, is_ipv4: bool) -> Result<Vec<IpNet>> {
    let field = format!("{label}.exclude");
    let mut exclude = Vec::new();
    for (i, item) in get_array(obj, "exclude", &field)?.iter().enumerate() {
        let item_field = format!("{field}[{i}]");
        let Value::String(s) = item else {
            return Err(CniError::config(&item_field, format!("must be an address or CIDR string, got {item}")));
        };
        let net = match parse_cidr(s).ok_or(()) {
            Ok(net) => net.trunc(),
            Err(_) => match s.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => return Err(CniError::config(&item_field, format!("{s:?} is not an address or CIDR"))),
            },
        };
        if net.network().is_ipv4() != is_ipv4 {
            let family = if is_ipv4 { "IPv4" } else { "IPv6" };
            return Err(CniError::config(&item_field, format!("{s} is not of the pool's family ({family})")));
        }
        exclude.push(net);
    }
    Ok(exclude)
}

fn parse_routes(obj: &Map<String, Value>, label: &str) -> Result<Vec<Route>> {
    let field = format!("{label}.routes");
    get_array(obj, "routes", &field)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value(item.clone())
                .map_err(|e| CniError::config(&format!("{field}[{i}]"), format!("{item} is not a route: {e}")))
        })
        .collect()
}

/// An empty `dns` object is the same as none, so that the pool round-trips.
fn parse_dns(obj: &Map<String, Value>, label: &str) -> Result<Option<Dns>> {
    let Some(value) = get(obj, "dns") else { return Ok(None) };
    let dns: Dns = serde_json::from_value(value.clone())
        .map_err(|e| CniError::config(&format!("{label}.dns"), format!("{value} is not a DNS object: {e}")))?;
    Ok(Some(dns).filter(|d| !d.is_empty()))
}

fn parse_match(obj: &Map<String, Value>, label: &str) -> Result<BTreeMap<String, String>> {
    let field = format!("{label}.match");
    let entries = match get(obj, "match") {
        None => return Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => entries,
        Some(other) => return Err(CniError::config(&field, format!("must be an object of strings, got {other}"))),
    };
    entries
        .iter()
        .map(|(key, value)| match value {
            Value::String(s) => Ok((key.clone(), s.clone())),
            other => Err(CniError::config(&format!("{field}.{key}"), format!("must be a string, got {other}"))),
        })
        .collect()
}

/// A CIDR is accepted and its address kept: runtimes pass either.
fn parse_requested_ip(obj: &Map<String, Value>, label: &str) -> Result<Option<IpAddr>> {
    let field = format!("{label}.requested-ip");
    let Some(s) = get_str(obj, "requested-ip", &field)? else { return Ok(None) };
    match (s.parse::<IpAddr>(), parse_cidr(s).ok_or(())) {
        (Ok(ip), _) => Ok(Some(ip)),
        (_, Ok(net)) => Ok(Some(net.addr())),
        _ => Err(CniError::config(&field, format!("{s:?} is not an IP address"))),
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
