//! Which addresses of a subnet may be used, as numbers in the shared u128
//! order of [`crate::addr`].
//!
//! IPv4 keeps its network and broadcast addresses out of use unless the
//! subnet is a point-to-point /31 or a single /32 (RFC 3021). IPv6 has no
//! broadcast; only the network address (the subnet-router anycast address,
//! RFC 4291) is kept out, again except for /127 (RFC 6164) and /128.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::addr::{from_u128, to_u128, Family, V4_MAPPED_BLOCK};

/// First and last address of the subnet.
pub fn bounds(net: &IpNet) -> (u128, u128) {
    (to_u128(net.network()), to_u128(net.broadcast()))
}

/// Whether two inclusive intervals share an address.
fn intervals_overlap(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Whether the subnets share an address (never across families).
pub fn subnets_overlap(a: &IpNet, b: &IpNet) -> bool {
    Family::of_net(a) == Family::of_net(b) && intervals_overlap(bounds(a), bounds(b))
}

/// An IPv6 subnet that overlaps `::ffff:0:0/96`, whose numbers are IPv4's
/// in [`crate::addr`]'s order.
pub fn overlaps_v4_mapped(net: &IpNet) -> bool {
    matches!(net, IpNet::V6(_)) && intervals_overlap(bounds(net), V4_MAPPED_BLOCK)
}

/// Number of host bits of the subnet.
fn host_bits(net: &IpNet) -> u8 {
    net.max_prefix_len() - net.prefix_len()
}

/// First and last usable address of the subnet (inclusive).
pub fn usable_bounds(net: &IpNet) -> (u128, u128) {
    let (first, last) = bounds(net);
    if host_bits(net) <= 1 {
        return (first, last);
    }
    match net {
        IpNet::V4(_) => (first + 1, last - 1),
        IpNet::V6(_) => (first + 1, last),
    }
}

/// Whether `addr` is in the subnet and usable by an attachment.
pub fn is_usable(net: &IpNet, addr: IpAddr) -> bool {
    if !net.contains(&addr) {
        return false;
    }
    let (lo, hi) = usable_bounds(net);
    (lo..=hi).contains(&to_u128(addr))
}

/// Why an address of the subnet is not usable, or `None` when it is.
/// Assumes `addr` lies in `net`.
pub fn unusable_reason(net: &IpNet, addr: IpAddr) -> Option<String> {
    if is_usable(net, addr) {
        return None;
    }
    let what = if addr == net.network() {
        match net {
            IpNet::V4(_) => "the network address",
            IpNet::V6(_) => "the network (subnet-router anycast) address",
        }
    } else {
        "the broadcast address"
    };
    Some(format!("{addr} is {what} of {net}"))
}

/// The address after the network address, when the subnet has one.
/// For /31 and /127 that is the second of the two, leaving the first usable.
pub fn default_gateway(net: &IpNet) -> Option<IpAddr> {
    if host_bits(net) == 0 {
        return None;
    }
    Some(from_u128(bounds(net).0 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn usable(s: &str) -> (IpAddr, IpAddr) {
        let (lo, hi) = usable_bounds(&net(s));
        (from_u128(lo), from_u128(hi))
    }

    #[test]
    fn usable_bounds_follow_prefix_rules() {
        assert_eq!(usable("10.0.0.0/8"), (ip("10.0.0.1"), ip("10.255.255.254")));
        assert_eq!(usable("10.0.0.0/30"), (ip("10.0.0.1"), ip("10.0.0.2")));
        assert_eq!(usable("10.0.0.4/31"), (ip("10.0.0.4"), ip("10.0.0.5")));
        assert_eq!(usable("10.0.0.9/32"), (ip("10.0.0.9"), ip("10.0.0.9")));
        assert_eq!(usable("fd00::/64"), (ip("fd00::1"), ip("fd00::ffff:ffff:ffff:ffff")));
        assert_eq!(usable("fd00::/127"), (ip("fd00::"), ip("fd00::1")));
        assert_eq!(usable("fd00::7/128"), (ip("fd00::7"), ip("fd00::7")));
    }

    #[test]
    fn default_gateway_is_the_second_address() {
        assert_eq!(default_gateway(&net("10.0.0.0/24")), Some(ip("10.0.0.1")));
        assert_eq!(default_gateway(&net("10.0.0.4/31")), Some(ip("10.0.0.5")));
        assert_eq!(default_gateway(&net("10.0.0.4/32")), None);
        assert_eq!(default_gateway(&net("fd00::/127")), Some(ip("fd00::1")));
        assert_eq!(default_gateway(&net("fd00::/128")), None);
    }

    #[test]
    fn unusable_reasons_name_the_address() {
        assert_eq!(
            unusable_reason(&net("10.0.0.0/24"), ip("10.0.0.0")).unwrap(),
            "10.0.0.0 is the network address of 10.0.0.0/24"
        );
        assert_eq!(
            unusable_reason(&net("10.0.0.0/24"), ip("10.0.0.255")).unwrap(),
            "10.0.0.255 is the broadcast address of 10.0.0.0/24"
        );
        assert_eq!(unusable_reason(&net("10.0.0.0/31"), ip("10.0.0.0")), None);
        assert!(unusable_reason(&net("fd00::/64"), ip("fd00::")).unwrap().contains("subnet-router anycast"));
        assert_eq!(unusable_reason(&net("fd00::/64"), ip("fd00::ffff:ffff:ffff:ffff")), None);
    }

    #[test]
    fn overlap_checks() {
        assert!(subnets_overlap(&net("10.0.0.0/16"), &net("10.0.5.0/24")));
        assert!(!subnets_overlap(&net("10.0.0.0/24"), &net("10.0.1.0/24")));
        // ::ffff:10.0.0.0/120 has the same numbers as 10.0.0.0/24 but is another family.
        assert!(!subnets_overlap(&net("10.0.0.0/24"), &net("::ffff:10.0.0.0/120")));
        assert!(overlaps_v4_mapped(&net("::ffff:10.0.0.0/120")));
        assert!(overlaps_v4_mapped(&net("::/64")));
        assert!(!overlaps_v4_mapped(&net("fd00::/64")));
        assert!(!overlaps_v4_mapped(&net("10.0.0.0/8")));
    }
}
