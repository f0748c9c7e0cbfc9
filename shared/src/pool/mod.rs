//! The pool model: what a pool is, how its JSON is read and written, which
//! addresses sequential allocation may hand out, and which pools are the
//! candidates of an attachment.
//!
//! This is policy only. Persistence answers one question — the first unleased
//! address in an interval (see [`search::LeaseIndex`]) — and everything else
//! is decided here.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::addr::Family;
use crate::args::CniArgs;
use crate::result::{Dns, Route};

mod parse;
pub mod search;
pub mod select;
pub mod subnet;

pub use search::LeaseIndex;
pub use select::{all_pools, candidates};

/// A named set of ranges of one IP family, with what results from it carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    pub ranges: Vec<Range>,
    /// Never handed out by sequential allocation (a static request may claim them).
    pub exclude: Vec<IpNet>,
    pub routes: Vec<Route>,
    pub dns: Option<Dns>,
    /// CNI_ARGS key → value that must all hold for the pool to be a candidate.
    pub matches: BTreeMap<String, String>,
    pub requested_ip: Option<IpAddr>,
    /// Cluster mode: the prefix length of the blocks nodes claim (at least
    /// every range's subnet prefix); `None` is the default of the family.
    pub block_size: Option<u8>,
}

/// One subnet of a pool and the part of it that is allocated dynamically.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub subnet: IpNet,
    pub range_start: IpAddr,
    /// Inclusive.
    pub range_end: IpAddr,
    pub gateway: Option<IpAddr>,
}

impl Pool {
    /// The family of the pool; a pool has at least one range, and its
    /// ranges are validated to share one family.
    pub fn family(&self) -> Family {
        self.ranges.first().map_or(Family::V4, |r| Family::of_net(&r.subnet))
    }

    /// The subnets of the ranges, each once (ranges may share a subnet).
    pub fn subnets(&self) -> Vec<IpNet> {
        let mut subnets: Vec<IpNet> = Vec::with_capacity(self.ranges.len());
        for range in &self.ranges {
            if !subnets.contains(&range.subnet) {
                subnets.push(range.subnet);
            }
        }
        subnets
    }

    /// The range whose subnet contains `addr`.
    pub fn range_for_subnet_member(&self, addr: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|r| r.subnet.contains(&addr))
    }

    /// Whether a static request may claim `addr` in this pool: it must be a
    /// usable address of some range's subnet and not that range's gateway.
    /// Unlike sequential allocation it may lie outside rangeStart..rangeEnd
    /// and may be excluded — the administrator asked for it by name.
    /// The error says why not, for the caller's message.
    pub fn check_static(&self, addr: IpAddr) -> Result<&Range, String> {
        let Some(range) = self.range_for_subnet_member(addr) else {
            let subnets = comma_list(self.ranges.iter().map(|r| r.subnet));
            return Err(format!("{addr} is outside the subnets of pool {:?} ({subnets})", self.name));
        };
        if let Some(reason) = subnet::unusable_reason(&range.subnet, addr) {
            return Err(reason);
        }
        if range.gateway == Some(addr) {
            return Err(format!("{addr} is the gateway of {}", range.subnet));
        }
        Ok(range)
    }

    /// Whether sequential allocation may answer a repeat ADD with `addr`, an
    /// address the attachment already holds in this pool: as for a static
    /// request, and not excluded. The pool may have changed since the
    /// address was taken (another subnet, gateway or exclude), and then it
    /// must not be handed back. The error says why not, for the log.
    pub fn check_held(&self, addr: IpAddr) -> Result<&Range, String> {
        let range = self.check_static(addr)?;
        match self.exclude.iter().find(|net| net.contains(&addr)) {
            Some(net) => Err(format!("{addr} is excluded ({net})")),
            None => Ok(range),
        }
    }

    /// Whether every `match` key is present in CNI_ARGS with an equal value
    /// (error 4 when one is given twice with two values).
    pub fn matches_args(&self, args: &CniArgs) -> crate::error::Result<bool> {
        for (key, value) in &self.matches {
            if args.get(key)? != Some(value.as_str()) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The first of `pools` in which a static request may claim `address`;
/// otherwise error 102 naming the address and why: what makes it unusable
/// in the pools whose subnet holds it (network or broadcast address,
/// gateway), or that it is outside every pool, naming each with its subnets.
pub fn static_target(pools: &[Pool], address: IpAddr) -> crate::error::Result<&Pool> {
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
    let msg = if !reasons.is_empty() {
        format!("requested address {address} cannot be handed out: {}", reasons.join("; "))
    } else if pools.is_empty() {
        format!("requested address {address} is outside every candidate pool: there is no candidate pool")
    } else {
        let each = pools.iter().map(|p| format!("{} {}", p.name, comma_list(p.subnets().iter())));
        format!("requested address {address} is outside every candidate pool ({})", each.collect::<Vec<_>>().join("; "))
    };
    Err(crate::error::CniError::new(crate::error::Code::AddressNotInPool, msg))
}

/// The pools' names, for messages: `blue, green`.
pub fn names<'a>(pools: impl IntoIterator<Item = &'a Pool>) -> String {
    comma_list(pools.into_iter().map(|p| &p.name))
}

fn comma_list<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|item| item.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(v: serde_json::Value) -> Pool {
        Pool::from_json(&v, "ipam.pools[0]").unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn check_static_allows_outside_range_and_excluded_but_not_reserved() {
        let p = pool(json!({"name": "blue", "ranges": [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.0",
            "rangeEnd": "10.22.1.255"}], "exclude": ["10.22.1.128/28"]}));
        assert_eq!(p.check_static(ip("10.22.5.5")).unwrap().subnet.to_string(), "10.22.0.0/16");
        assert!(p.check_static(ip("10.22.1.130")).is_ok());
        assert_eq!(p.check_static(ip("10.22.0.1")).unwrap_err(), "10.22.0.1 is the gateway of 10.22.0.0/16");
        assert_eq!(p.check_static(ip("10.22.0.0")).unwrap_err(), "10.22.0.0 is the network address of 10.22.0.0/16");
        assert_eq!(
            p.check_static(ip("10.22.255.255")).unwrap_err(),
            "10.22.255.255 is the broadcast address of 10.22.0.0/16"
        );
        assert_eq!(
            p.check_static(ip("10.23.0.5")).unwrap_err(),
            "10.23.0.5 is outside the subnets of pool \"blue\" (10.22.0.0/16)"
        );
        assert!(p.check_static(ip("fd00::5")).is_err());
    }

    #[test]
    fn check_static_on_small_subnets() {
        let p31 = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.4/31"}]}));
        assert!(p31.check_static(ip("10.0.0.4")).is_ok());
        assert!(p31.check_static(ip("10.0.0.5")).is_err(), "the default gateway");
        let p32 = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.4/32"}]}));
        assert!(p32.check_static(ip("10.0.0.4")).is_ok());
        let p6 = pool(json!({"name": "p", "ranges": [{"subnet": "fd00::/64"}]}));
        assert!(p6.check_static(ip("fd00::")).is_err());
        assert!(p6.check_static(ip("fd00::ffff:ffff:ffff:ffff")).is_ok());
    }

    #[test]
    fn family_subnets_and_names() {
        let a = pool(json!({"name": "a", "ranges": [{"subnet": "10.0.0.0/24"}, {"subnet": "10.1.0.0/24"}]}));
        let b = pool(json!({"name": "b", "ranges": [{"subnet": "10.1.0.128/25"}]}));
        let c = pool(json!({"name": "c", "ranges": [{"subnet": "10.2.0.0/24"}]}));
        let v6 = pool(json!({"name": "v6", "ranges": [{"subnet": "fd00::/64"}]}));
        assert_eq!(a.family(), Family::V4);
        assert_eq!(v6.family(), Family::V6);
        assert_eq!(a.subnets(), vec!["10.0.0.0/24".parse::<IpNet>().unwrap(), "10.1.0.0/24".parse().unwrap()]);
        assert_eq!(names([&a, &b, &c]), "a, b, c");
        assert_eq!(a.range_for_subnet_member(ip("10.1.0.200")).unwrap().subnet.to_string(), "10.1.0.0/24");
        assert_eq!(a.range_for_subnet_member(ip("10.3.0.1")), None);
    }

    #[test]
    fn static_target_names_the_address_and_why_not() {
        let blue = pool(json!({"name": "blue", "ranges": [{"subnet": "10.0.0.0/24", "gateway": "10.0.0.9"},
            {"subnet": "10.1.0.0/24"}]}));
        let blue6 = pool(json!({"name": "blue6", "ranges": [{"subnet": "fd00::/64"}]}));
        let pools = [blue, blue6];
        assert_eq!(static_target(&pools, ip("10.1.0.7")).unwrap().name, "blue");
        assert_eq!(static_target(&pools, ip("fd00::7")).unwrap().name, "blue6");
        let refused = |a: &str| {
            let e = static_target(&pools, ip(a)).unwrap_err();
            assert_eq!(e.code, crate::error::Code::AddressNotInPool);
            e.msg
        };
        assert_eq!(
            refused("10.0.0.0"),
            "requested address 10.0.0.0 cannot be handed out: pool blue: 10.0.0.0 is the network address of 10.0.0.0/24"
        );
        assert!(refused("10.0.0.255").contains("10.0.0.255 is the broadcast address of 10.0.0.0/24"));
        assert!(refused("10.0.0.9").contains("10.0.0.9 is the gateway of 10.0.0.0/24"));
        assert_eq!(
            refused("10.9.0.1"),
            "requested address 10.9.0.1 is outside every candidate pool (blue 10.0.0.0/24, 10.1.0.0/24; blue6 fd00::/64)"
        );
        let e = static_target(&[], ip("10.9.0.1")).unwrap_err();
        assert_eq!(e.msg, "requested address 10.9.0.1 is outside every candidate pool: there is no candidate pool");
    }

    #[test]
    fn matches_args_needs_every_key_with_equal_value() {
        let p =
            pool(json!({"name": "prod", "match": {"NS": "prod", "TIER": "db"}, "ranges": [{"subnet": "10.0.0.0/24"}]}));
        assert!(p.matches_args(&CniArgs::parse("NS=prod;TIER=db;X=1").unwrap()).unwrap());
        assert!(!p.matches_args(&CniArgs::parse("NS=prod").unwrap()).unwrap());
        assert!(!p.matches_args(&CniArgs::parse("NS=dev;TIER=db").unwrap()).unwrap());
        let any = pool(json!({"name": "any", "ranges": [{"subnet": "10.0.0.0/24"}]}));
        assert!(any.matches_args(&CniArgs::default()).unwrap());
    }
}
