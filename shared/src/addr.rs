//! Addresses as numbers, so that ranges, cursors and the database index share
//! one order. IPv4 maps into IPv6's `::ffff:0:0/96`, which keeps the two
//! families apart and each in numeric order.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    pub fn of_net(net: &IpNet) -> Family {
        Family::of(net.network())
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// `::ffff:0:0/96`, where IPv4 addresses are numbered: first and last.
pub const V4_MAPPED_BLOCK: (u128, u128) =
    (Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().to_bits(), Ipv4Addr::BROADCAST.to_ipv6_mapped().to_bits());

/// The address as a number (IPv4 as its IPv4-mapped IPv6 value).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// The inverse of [`to_u128`]: numbers inside `::ffff:0:0/96` are IPv4.
pub fn from_u128(n: u128) -> IpAddr {
    let v6 = Ipv6Addr::from_bits(n);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The 16-byte big-endian database key: byte order is numeric order.
pub fn to_key(ip: IpAddr) -> [u8; 16] {
    to_u128(ip).to_be_bytes()
}

/// Reads a database key; `None` unless it is 16 bytes.
pub fn from_key(key: &[u8]) -> Option<IpAddr> {
    let bytes: [u8; 16] = key.try_into().ok()?;
    Some(from_u128(u128::from_be_bytes(bytes)))
}

/// Parses a CIDR as Go's `net.ParseCIDR` does, which is what every other
/// plugin of a chain reads: ipnet's own parser reads an octet with leading
/// zeros (`010.135.0.0/16`) as decimal, where others refuse it or read octal,
/// and so would two plugins disagree on one address. Host bits are kept.
pub fn parse_cidr(text: &str) -> Option<IpNet> {
    let (address, prefix) = text.split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let canonical = prefix.len() == 1 || !prefix.starts_with('0');
    if !canonical || prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    IpNet::new(address, prefix.parse().ok()?).ok()
}

/// serde's `deserialize_with` for a CIDR read by [`parse_cidr`].
pub fn deserialize_cidr<'de, D: serde::Deserializer<'de>>(de: D) -> Result<IpNet, D::Error> {
    let text = <std::borrow::Cow<str> as serde::Deserialize>::deserialize(de)?;
    parse_cidr(&text).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a CIDR")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_are_read_as_go_reads_them() {
        assert_eq!(parse_cidr("10.1.2.3/24"), Some("10.1.2.3/24".parse().unwrap()));
        assert_eq!(parse_cidr("fd00::1/64"), Some("fd00::1/64".parse().unwrap()));
        assert_eq!(parse_cidr("10.0.0.0/0"), Some("10.0.0.0/0".parse().unwrap()));
        for bad in [
            "010.135.0.0/16",
            "10.135.0.050/32",
            "10.0.0.0/024",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/33",
            "10.0.0.0",
            "fd00::/129",
        ] {
            assert_eq!(parse_cidr(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trips_and_keeps_order() {
        for s in [
            "0.0.0.0",
            "10.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fd00::1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(from_u128(to_u128(ip)), ip);
            assert_eq!(from_key(&to_key(ip)), Some(ip));
        }
        let a: IpAddr = "10.0.0.255".parse().unwrap();
        let b: IpAddr = "10.0.1.0".parse().unwrap();
        assert_eq!(to_u128(a) + 1, to_u128(b));
        assert!(to_key(a) < to_key(b));
        assert_eq!(from_key(&[0; 4]), None);
    }
}
