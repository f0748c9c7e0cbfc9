//! The names of the Kubernetes store's objects (docs/kubernetes.md,
//! "Names"): the parts of what an object stands for, each encoded as a
//! DNS-1123 name part, joined by `.`. The clear text is always in the
//! object's `spec`; a name only has to be unique and valid, and decodes
//! back only where the encoding keeps the text (a CIDR, a kept text part).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use ring::digest::{digest, SHA256};

/// The longest object name the API server accepts (a DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// The longest encoded part: a label value's limit, so that a part is also
/// the value of the label that selects by it.
pub const MAX_PART: usize = 63;
/// What starts a hashed text part; a kept part never holds `---`.
const HASHED: &str = "h---";
/// Hex digits of SHA-256 kept in a hashed part (128 bits).
const HASH_DIGITS: usize = 32;

/// `IPDNetwork`: `<network>`.
pub fn network_name(network: &str) -> String {
    text(network)
}

/// `IPDBlock`: `<network>.<pool>.<cidr>`.
pub fn block_name(network: &str, pool: &str, block: IpNet) -> String {
    format!("{}.{}.{}", text(network), text(pool), cidr(block))
}

/// `IPDIdentity`: `<network>.<ifname>.<identity>`.
pub fn identity_name(network: &str, ifname: &str, identity: &str) -> String {
    format!("{}.{}.{}", text(network), text(ifname), text(identity))
}

/// `IPDNode`: `<network>.<node>`.
pub fn node_name(network: &str, node: &str) -> String {
    format!("{}.{}", text(network), text(node))
}

/// A CIDR as a name part: its address's fields and its prefix length joined
/// by `-`; IPv4 in decimal octets (`10-22-5-0-26`), IPv6 in all eight
/// groups of four lower-case hex digits, so that each CIDR has one text.
pub fn cidr(net: IpNet) -> String {
    match net.addr() {
        IpAddr::V4(a) => {
            let [a0, a1, a2, a3] = a.octets();
            format!("{a0}-{a1}-{a2}-{a3}-{}", net.prefix_len())
        }
        IpAddr::V6(a) => {
            let groups: Vec<String> = a.segments().iter().map(|g| format!("{g:04x}")).collect();
            format!("{}-{}", groups.join("-"), net.prefix_len())
        }
    }
}

/// The CIDR a [`cidr`] part stands for: only a part [`cidr`] writes (five
/// fields are IPv4, nine IPv6, each in its one spelling).
pub fn decode_cidr(part: &str) -> Option<IpNet> {
    let fields: Vec<&str> = part.split('-').collect();
    let (address, prefix) = fields.split_last().map(|(p, a)| (a, *p))?;
    let prefix = decimal(prefix, 128)? as u8;
    let ip = match address.len() {
        4 => {
            let mut octets = [0u8; 4];
            for (octet, field) in octets.iter_mut().zip(address) {
                *octet = decimal(field, 255)? as u8;
            }
            IpAddr::V4(Ipv4Addr::from(octets))
        }
        8 => {
            let mut groups = [0u16; 8];
            for (group, field) in groups.iter_mut().zip(address) {
                let four_hex =
                    field.len() == 4 && field.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                *group = if four_hex { u16::from_str_radix(field, 16).ok()? } else { return None };
            }
            IpAddr::V6(Ipv6Addr::from(groups))
        }
        _ => return None,
    };
    IpNet::new(ip, prefix).ok()
}

/// A decimal number as [`cidr`] writes it (no sign, no leading zero), at most `max`.
fn decimal(field: &str, max: u32) -> Option<u32> {
    let canonical = !field.is_empty() && field.len() <= 3 && field.bytes().all(|b| b.is_ascii_digit());
    if !canonical || (field.len() > 1 && field.starts_with('0')) {
        return None;
    }
    field.parse().ok().filter(|n| *n <= max)
}

/// A text (network, pool, node, interface, identity) as a name part: kept,
/// each `.` written `--`, when it is a lower-case DNS-1123 subdomain with
/// no `--` that so written fits [`MAX_PART`]; any other text is `h---` and
/// the first 32 hex digits of the SHA-256 of its UTF-8 bytes.
pub fn text(text: &str) -> String {
    let kept = text.replace('.', "--");
    if is_subdomain(text) && !text.contains("--") && kept.len() <= MAX_PART {
        return kept;
    }
    let hash = digest(&SHA256, text.as_bytes());
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{HASHED}{}", &hex[..HASH_DIGITS])
}

/// What a [`text`] part says of its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextPart {
    /// Kept: the text itself.
    Clear(String),
    /// Hashed: the text is only in the object's `spec`.
    Hashed,
}

/// The text a [`text`] part stands for, when it was kept; None for a part
/// [`text`] never writes.
pub fn decode_text(part: &str) -> Option<TextPart> {
    if let Some(hex) = part.strip_prefix(HASHED) {
        let hashed = hex.len() == HASH_DIGITS && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        return hashed.then_some(TextPart::Hashed);
    }
    if part.contains("---") || part.contains('.') || part.len() > MAX_PART {
        return None;
    }
    let clear = part.replace("--", ".");
    (is_subdomain(&clear) && !clear.contains("--")).then_some(TextPart::Clear(clear))
}

/// A lower-case DNS-1123 subdomain (RFC 1123 as Kubernetes checks names):
/// labels of `a-z`, `0-9` and `-`, each starting and ending with a letter
/// or digit, joined by `.`, at most 253 characters in all.
pub fn is_subdomain(name: &str) -> bool {
    name.len() <= MAX_NAME && name.split('.').all(is_label)
}

fn is_label(label: &str) -> bool {
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = label.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alphanumeric(first) && alphanumeric(last) && bytes.iter().all(|&b| alphanumeric(b) || b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().expect("a CIDR")
    }

    /// A label value as Kubernetes checks one (what the selecting labels hold).
    fn is_label_value(value: &str) -> bool {
        let ok = |b: u8| b.is_ascii_alphanumeric();
        let bytes = value.as_bytes();
        value.len() <= 63
            && bytes.first().is_some_and(|&b| ok(b))
            && bytes.last().is_some_and(|&b| ok(b))
            && bytes.iter().all(|&b| ok(b) || b == b'-' || b == b'_' || b == b'.')
    }

    #[test]
    fn the_docs_examples() {
        assert_eq!(cidr(net("10.22.5.0/26")), "10-22-5-0-26");
        assert_eq!(cidr(net("fd00:80::a5c7:3088:1e32:d4c0/122")), "fd00-0080-0000-0000-a5c7-3088-1e32-d4c0-122");
        assert_eq!(text("ip-10-0-0-1.ec2.internal"), "ip-10-0-0-1--ec2--internal");
        assert_eq!(text("prod/db-0"), "h---e42cefb0a292e1b0f9922877cb50ec87");
        assert_eq!(network_name("cluster-net"), "cluster-net");
        assert_eq!(
            block_name("cluster-net", "cluster4", net("10.80.212.192/26")),
            "cluster-net.cluster4.10-80-212-192-26"
        );
        assert_eq!(
            block_name("cluster-net", "cluster6", net("fd00:80::a5c7:3088:1e32:d4c0/122")),
            "cluster-net.cluster6.fd00-0080-0000-0000-a5c7-3088-1e32-d4c0-122"
        );
        assert_eq!(
            identity_name("cluster-net", "net1", "prod/db-0"),
            "cluster-net.net1.h---e42cefb0a292e1b0f9922877cb50ec87"
        );
        assert_eq!(node_name("cluster-net", "ip-10-0-0-1.ec2.internal"), "cluster-net.ip-10-0-0-1--ec2--internal");
        let hashed_node = node_name("cluster-net", "Node_A");
        assert!(hashed_node.starts_with("cluster-net.h---") && hashed_node.len() == "cluster-net.h---".len() + 32);
    }

    #[test]
    fn cidrs_decode_to_themselves_at_every_edge() {
        for text in [
            "10.22.5.0/26",
            "0.0.0.0/0",
            "10.255.255.255/32",
            "10.0.0.0/8",
            "::/0",
            "::/128",
            "fd00::/8",
            "fd00::1/128",
            "fd00:0:0:1::/64",
            "fd00::a:0:0:0/80",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
            "::ffff:10.0.0.0/104",
            "fd00:80::a5c7:3088:1e32:d4c0/122",
        ] {
            let block = net(text);
            let part = cidr(block);
            assert_eq!(decode_cidr(&part), Some(block), "{text} as {part}");
            assert!(is_subdomain(&part) && is_label_value(&part), "{part}");
        }
        assert_eq!(cidr(net("::/0")), "0000-0000-0000-0000-0000-0000-0000-0000-0", "zero runs in full");
        assert_eq!(cidr(net("fd00::/128")).len(), 43, "the longest CIDR part");
    }

    #[test]
    fn a_cidr_part_decodes_only_as_written() {
        for part in [
            "010-22-5-0-26",          // leading zero
            "10-22-5-0-026",          // leading zero in the prefix
            "10-22-5-256-26",         // octet too large
            "10-22-5-0-33",           // prefix too long for IPv4
            "10-22-5-26",             // three octets
            "fd00-80-0-0-0-0-0-0-64", // short groups
            "FD00-0000-0000-0000-0000-0000-0000-0000-64",
            "fd00-0000-0000-0000-0000-0000-0000-0000-129",
            "fd00-0000-0000-0000-0000-0000-0000-64",
            "",
            "-",
            "+1-0-0-0-8",
        ] {
            assert_eq!(decode_cidr(part), None, "{part:?}");
        }
    }

    #[test]
    fn kept_texts_decode_and_others_are_hashed() {
        for kept in ["cluster-net", "net1", "node-a", "a", "0", "ip-10-0-0-1.ec2.internal", "a.b.c"] {
            let part = text(kept);
            assert!(!part.starts_with(HASHED), "{kept}");
            assert_eq!(decode_text(&part), Some(TextPart::Clear(kept.to_string())), "{kept}");
        }
        let long = "a".repeat(1000);
        let sixty_three = "a".repeat(63);
        let dotted_over = format!("{}.{}", "a".repeat(31), "b".repeat(31)); // 63 as text, 64 written
        for hashed in [
            "Node_A",
            "prod/db-0",
            "UPPER",
            "eth0.100_x",
            "a--b",
            "a---b",
            "h---e42cefb0a292e1b0f9922877cb50ec87",
            "-a",
            "a-",
            "a..b",
            ".a",
            "",
            "ünïcode",
            "名前",
            "a b",
            long.as_str(),
            dotted_over.as_str(),
        ] {
            let part = text(hashed);
            assert!(part.starts_with(HASHED) && part.len() == HASHED.len() + HASH_DIGITS, "{hashed:?} as {part}");
            assert_eq!(decode_text(&part), Some(TextPart::Hashed), "{hashed:?}");
            assert!(is_subdomain(&part) && is_label_value(&part), "{part}");
        }
        assert_eq!(text(&sixty_three), sixty_three, "63 characters are kept");
        assert!(text(&format!("{sixty_three}a")).starts_with(HASHED), "64 are not");
    }

    #[test]
    fn no_kept_text_meets_a_hashed_one() {
        // A kept part holds no `---` (its dots stand between letters or
        // digits, and a text with `--` is hashed), every hashed one does.
        for kept in ["h", "h-a", "h.a", "h-e42cefb0a292e1b0f9922877cb50ec87", "a-b.c-d"] {
            assert!(!text(kept).contains("---"), "{kept}");
        }
        assert_eq!(decode_text("h--a"), Some(TextPart::Clear("h.a".into())));
        // What `text` never writes does not decode.
        for part in ["a---b", "h---e42c", "h---E42CEFB0A292E1B0F9922877CB50EC87", "a----b", "-a", "A", "a.b"] {
            assert_eq!(decode_text(part), None, "{part}");
        }
        // Distinct texts, distinct parts, kept or hashed.
        let texts = ["a.b", "a-b", "a--b", "A.b", "a_b", "ab", "a/b"];
        let parts: std::collections::BTreeSet<String> = texts.iter().map(|t| text(t)).collect();
        assert_eq!(parts.len(), texts.len());
    }

    #[test]
    fn every_name_is_a_subdomain_within_the_limits_and_splits_back_into_its_parts() {
        let longest = "x".repeat(MAX_PART); // kept: the longest a part is
        let hashed = "x".repeat(500);
        let names = [
            network_name(&longest),
            block_name(&longest, &longest, net("fd00::/128")),
            block_name("Net", "pool.v4", net("0.0.0.0/0")),
            identity_name(&longest, &longest, &longest),
            identity_name(&hashed, "eth0", "prod/db-0"),
            node_name(&longest, "Node_A"),
        ];
        for name in &names {
            assert!(is_subdomain(name), "{name}");
            assert!(name.len() <= 3 * MAX_PART + 2, "{name}: {}", name.len());
            assert!(name.split('.').all(is_label_value), "{name}");
        }
        assert_eq!(names[3].len(), 191, "an identity's three longest parts");
        assert_eq!(names[1].len(), 171, "a block's longest name");
        let parts: Vec<&str> = names[2].split('.').collect();
        assert_eq!(parts.len(), 3, "a kept text's dots are `--`: {}", names[2]);
        assert_eq!(decode_text(parts[1]), Some(TextPart::Clear("pool.v4".into())));
        assert_eq!(decode_cidr(parts[2]), Some(net("0.0.0.0/0")));
    }
}
