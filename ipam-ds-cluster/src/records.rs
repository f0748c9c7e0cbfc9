//! The records of the cluster's datastore, whichever store holds them:
//! plain structs written as JSON (see the store's layout for where each
//! lives), and how text read from the store is shown.

use std::net::IpAddr;

/// An address record's kind: the node database's own.
pub use crate::rows::RecordKind as Kind;
use serde::{Deserialize, Serialize};
use shared::pool::Pool;

/// `blocks/<block>`: whose block it is. A block given back by `release-node`
/// stays `released` (under an etcd lease) for as long as its former node
/// may still allocate in it, and is claimable once the lease ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRecord {
    pub node: String,
    /// Unix seconds of the claim (or of the release).
    pub at: i64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// The node database that claimed it (see [`NodeEntry`]); empty in
    /// records of builds before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub db: String,
    /// A shared block: every address handed out in it has its record, and
    /// any node may allocate in it (an `allocated` record, created if absent
    /// while this record is unchanged). Earlier builds never write it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// `_recovery`: which node saw etcd's revision go back from `from` to `to`,
/// at unix time `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryRecord {
    pub node: String,
    pub at: i64,
    pub from: i64,
    pub to: i64,
}

/// `_nodes/<node>`: the node database that runs under a node name, and the
/// settings `release-node` must wait out before that node's blocks are free:
/// the node's own, not the operator's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeEntry {
    /// The identity of the node database (a random id made with it): a
    /// second database under the same node name is a second host.
    pub db: String,
    /// Seconds.
    pub offline_grace: f64,
    /// `ipam.timeout`, seconds.
    pub timeout: f64,
}

/// `addrs/<block>/<ip>`: one address held apart from its block's owner.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AddressRecord {
    pub kind: Kind,
    pub node: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ifname: String,
    /// Of a borrowed address: the node that lent it, to which DEL gives it back.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lender: String,
    /// Of a workload identity's address (ipam-da-sticky): the identity. A
    /// record of kind `static`, so that builds before it keep off the
    /// address too, or `allocated` (granted in a shared block to an ADD of
    /// the identity). Held for the identity (no attachment has it): `node`
    /// is empty, and the record lives under the etcd lease that ends the
    /// hold. Once it is the identity's, it changes only together with the
    /// identity's key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
}

impl AddressRecord {
    /// The record of `identity`'s address held for it, no attachment's.
    pub fn held_for(identity: &str) -> AddressRecord {
        AddressRecord { kind: Kind::Static, identity: identity.to_string(), ..AddressRecord::default() }
    }
}

/// `_sticky/<ifname>/<identity>`: where a workload identity's addresses
/// are. Live: `node` and `container` are its attachment's (and `sharers`
/// the other live ones, with `shareLive`); the addresses are the ones its
/// ADD recorded. Held: `until` is when the hold ends, the key and the
/// addresses' records live under one etcd lease that ends it, and `node` is
/// the node that last had it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IdentityRecord {
    pub node: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// Unix seconds; 0 while live.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub until: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sharers: Vec<Sharer>,
}

/// Another live attachment of an identity (`shareLive`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sharer {
    pub node: String,
    pub container: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl IdentityRecord {
    pub fn is_held(&self) -> bool {
        self.until != 0
    }

    /// Whether `node`'s `container` has it live, first or sharing.
    pub fn live_on(&self, node: &str, container: &str) -> bool {
        !self.is_held()
            && ((self.node == node && self.container == container)
                || self.sharers.iter().any(|s| s.node == node && s.container == container))
    }
}

impl AddressRecord {
    /// What the record becomes when its holder releases the address (DEL, GC,
    /// `release-node`): one another node lent goes back to that node as
    /// `lent`, since the lender still holds it for lending; anything else is
    /// deleted (`None`).
    pub fn released(&self) -> Option<AddressRecord> {
        (!self.lender.is_empty() && self.lender != self.node).then(|| AddressRecord {
            kind: Kind::Lent,
            node: self.lender.clone(),
            ..AddressRecord::default()
        })
    }
}

/// The value of a record; records are plain structs, which always serialize.
pub fn to_text<T: Serialize>(record: &T) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

/// `pool`: what every node must agree on, or their blocks would overlap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRecord {
    pub ranges: Vec<String>,
    pub block_size: u8,
}

impl PoolRecord {
    pub fn of(pool: &Pool, block_size: u8) -> PoolRecord {
        PoolRecord {
            ranges: pool.ranges.iter().map(|r| format!("{} {}-{}", r.subnet, r.range_start, r.range_end)).collect(),
            block_size,
        }
    }
}

impl PoolRecord {
    /// The address intervals of its ranges; a range that does not read
    /// (written by hand) is none.
    fn intervals(&self) -> Vec<(u128, u128, &str)> {
        self.ranges
            .iter()
            .filter_map(|r| {
                let (_, span) = r.split_once(' ')?;
                let (start, end) = span.split_once('-')?;
                let (start, end) = (start.parse::<IpAddr>().ok()?, end.parse::<IpAddr>().ok()?);
                Some((shared::addr::to_u128(start), shared::addr::to_u128(end), r.as_str()))
            })
            .collect()
    }

    /// A range of this pool and one of `other` that share addresses, if any.
    pub fn overlap<'r>(&'r self, other: &'r PoolRecord) -> Option<(&'r str, &'r str)> {
        let theirs = other.intervals();
        self.intervals().into_iter().find_map(|(lo, hi, ours)| {
            theirs.iter().find(|(l, h, _)| lo <= *h && *l <= hi).map(|(_, _, their)| (ours, *their))
        })
    }
}

/// A record's JSON; records are plain structs, which always serialize.
pub fn to_bytes<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).unwrap_or_default()
}

/// Most characters of text read from etcd that a message or the operator's
/// output shows: more than any valid node name (253), so that none is cut.
pub const SHOWN_CHARS: usize = 256;

/// Text read from etcd, fit for a message, a log line or a terminal: etcd
/// holds whatever anyone with write access put there, and a value of a
/// megabyte or a terminal escape must not reach them as it is. Control and
/// bidirectional-formatting characters are escaped (`\u{1b}`), and past
/// [`SHOWN_CHARS`] characters the rest is left out, saying how long it was.
pub fn shown(text: &str) -> String {
    bounded(text, text.len())
}

/// [`shown`] of bytes (a key or value), invalid UTF-8 replaced.
pub fn shown_bytes(bytes: &[u8]) -> String {
    bounded(&String::from_utf8_lossy(bytes), bytes.len())
}

/// `text` shown; `len` is what the original measured in bytes.
fn bounded(text: &str, len: usize) -> String {
    let mut out = String::with_capacity(len.min(SHOWN_CHARS));
    for (n, c) in text.chars().enumerate() {
        if n == SHOWN_CHARS {
            out.push_str(&format!("… ({len} bytes)"));
            break;
        }
        let hidden =
            matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || hidden {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_overlap_by_their_ranges_not_their_subnets() {
        let record =
            |ranges: &[&str]| PoolRecord { ranges: ranges.iter().map(|r| r.to_string()).collect(), block_size: 26 };
        let a = record(&["10.80.0.0/16 10.80.0.1-10.80.0.99"]);
        let b = record(&["10.80.0.0/16 10.80.0.100-10.80.0.200"]);
        let c = record(&["10.81.0.0/16 10.81.0.1-10.81.0.9", "10.80.0.0/24 10.80.0.50-10.80.0.60"]);
        assert_eq!(a.overlap(&b), None, "one subnet, ranges apart");
        assert_eq!(a.overlap(&c), Some(("10.80.0.0/16 10.80.0.1-10.80.0.99", "10.80.0.0/24 10.80.0.50-10.80.0.60")));
        assert_eq!(c.overlap(&a).map(|(ours, _)| ours), Some("10.80.0.0/24 10.80.0.50-10.80.0.60"));
        let v6 = record(&["fd00:80::/64 fd00:80::1-fd00:80::ffff"]);
        assert_eq!(a.overlap(&v6), None);
    }

    #[test]
    fn records_are_small_json() {
        let r = AddressRecord { kind: Kind::Lent, node: "n1".into(), ..AddressRecord::default() };
        assert_eq!(String::from_utf8(to_bytes(&r)).unwrap(), r#"{"kind":"lent","node":"n1"}"#);
        let b = BlockRecord { node: "n1".into(), at: 5, released: false, db: String::new(), shared: false };
        assert_eq!(String::from_utf8(to_bytes(&b)).unwrap(), r#"{"node":"n1","at":5}"#);
    }

    #[test]
    fn shown_text_is_bounded_and_escaped() {
        assert_eq!(shown("node-a"), "node-a");
        assert_eq!(shown("a\u{1b}[2Jb\n\u{7}"), "a\\u{1b}[2Jb\\n\\u{7}");
        assert_eq!(shown("x\u{202e}y"), "x\\u{202e}y");
        let long = "é".repeat(1000);
        let cut = shown(&long);
        assert!(cut.starts_with(&"é".repeat(SHOWN_CHARS)) && cut.ends_with("… (2000 bytes)"), "{cut}");
        assert_eq!(shown(&"n".repeat(253)), "n".repeat(253));
        let bytes = [&[0xffu8][..], "z".repeat(300).as_bytes()].concat();
        assert!(shown_bytes(&bytes).ends_with("… (301 bytes)"), "{}", shown_bytes(&bytes));
        assert_eq!(shown_bytes(b"ok\x1b"), "ok\\u{1b}");
    }
}
