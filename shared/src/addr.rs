//! Addresses as numbers, so that ranges, cursors and the database index share
//! one order. IPv4 maps into IPv6's `::ffff:0:0/96`, which keeps the two
//! families apart and each in numeric order.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

const V4_MAPPED: u128 = 0xffff_0000_0000;

/// The address as a number (IPv4 as its IPv4-mapped IPv6 value).
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => V4_MAPPED | u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The inverse of [`to_u128`]: numbers inside `::ffff:0:0/96` are IPv4.
pub fn from_u128(n: u128) -> IpAddr {
    if n >> 32 == V4_MAPPED >> 32 {
        IpAddr::V4(Ipv4Addr::from(n as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(n))
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
