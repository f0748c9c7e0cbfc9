//! The store's records in the protocol's terms: names of address records
//! in the node database's rows, records as etcd's layout holds them (what
//! `node/` reads and writes), versions as digests of what is compared.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use ring::digest::{digest, SHA256};
use shared::{CniError, Code};

use super::objects::{IdentitySpec, IdentityState, NodeRecord, NodeSpec, Object, Record};
use super::requests::bug;
use super::MAX_PAUSE_MS;
use crate::datastore::{Answer, Error, Version, Versioned};
use crate::records::{shown, to_bytes, AddressRecord, IdentityRecord, Kind, NodeEntry};

pub(super) const IDENTITY_KEY_PREFIX: &str = "ipdidentities/";
pub(super) const RECORD_KEY_PREFIX: &str = "ipdblocks/";

/// A record's name in the node database's rows: its pool, block and
/// address in clear (`ipdblocks/blue/10.50.0.0/27/10.50.0.9`).
pub(super) fn record_key(pool: &str, block: IpNet, address: IpAddr) -> String {
    format!("{RECORD_KEY_PREFIX}{pool}/{block}/{address}")
}

pub(super) fn parse_record_key(key: &str) -> Answer<(String, IpNet, IpAddr)> {
    let parsed = (|| {
        let rest = key.strip_prefix(RECORD_KEY_PREFIX)?;
        let mut parts = rest.rsplitn(4, '/');
        let address: IpAddr = parts.next()?.parse().ok()?;
        let prefix = parts.next()?;
        let net = parts.next()?;
        let pool = parts.next()?;
        let block: IpNet = format!("{net}/{prefix}").parse().ok()?;
        Some((pool.to_string(), block, address))
    })();
    parsed.ok_or_else(|| {
        Error::Failed(CniError::new(
            Code::Io,
            format!("{} does not name a record of the Kubernetes datastore", shown(key)),
        ))
    })
}

pub(super) type BlockKeys = Vec<((String, IpNet), Vec<(String, IpAddr)>)>;

/// `keys` grouped by their block, in order.
pub(super) fn by_block(keys: &[String]) -> Answer<BlockKeys> {
    let mut grouped: BlockKeys = Vec::new();
    for key in keys {
        let (pool, block, address) = parse_record_key(key)?;
        match grouped.iter_mut().find(|(b, _)| b.0 == pool && b.1 == block) {
            Some((_, of_block)) => of_block.push((key.clone(), address)),
            None => grouped.push(((pool, block), vec![(key.clone(), address)])),
        }
    }
    Ok(grouped)
}

/// A version from the digest of `parts`: equal for equal contents.
pub(super) fn digest_version(parts: &[&[u8]]) -> Version {
    let mut all = Vec::new();
    for p in parts {
        all.extend_from_slice(&(p.len() as u64).to_be_bytes());
        all.extend_from_slice(p);
    }
    let hash = digest(&SHA256, &all);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_ref()[..8]);
    Version((i64::from_be_bytes(first) & i64::MAX).max(1))
}

/// Sleeps a random time of up to 2^`round` ms, at most [`MAX_PAUSE_MS`].
pub(super) fn pause(round: u32) {
    let most = (1u64 << round.min(16)).min(MAX_PAUSE_MS);
    let Ok(random) = random_claim() else { return };
    std::thread::sleep(Duration::from_micros(random as u64 % (most * 1000)));
}

/// A claim's id: a random positive number, as unique as etcd's revisions
/// are for the claims of one block.
pub(super) fn random_claim() -> Answer<i64> {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Failed(CniError::new(Code::Io, format!("/dev/urandom: {e}"))))?;
    Ok((i64::from_be_bytes(bytes) & i64::MAX).max(1))
}

pub(super) fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

pub(super) fn node_entry(object: &Object<NodeSpec>) -> Versioned {
    let entry = NodeEntry {
        db: object.spec.db.clone(),
        offline_grace: object.spec.offline_grace.as_secs_f64(),
        timeout: object.spec.timeout.as_secs_f64(),
    };
    let value = to_bytes(&entry);
    Versioned {
        version: digest_version(&[object.metadata.uid.as_deref().unwrap_or_default().as_bytes(), &value]),
        value,
        created: 0,
    }
}

/// An address record as etcd's layout holds it.
pub(super) fn etcd_record(record: &Record) -> AddressRecord {
    let of = |kind: Kind, r: &NodeRecord| AddressRecord {
        kind,
        node: r.node.clone(),
        container: r.container.clone().unwrap_or_default(),
        ifname: r.ifname.clone().unwrap_or_default(),
        lender: r.lender.clone().unwrap_or_default(),
        identity: r.identity.clone().unwrap_or_default(),
    };
    match record {
        Record::Static(r) => of(Kind::Static, r),
        Record::Lent(r) => of(Kind::Lent, r),
        Record::Borrowed(r) => of(Kind::Borrowed, r),
        Record::Allocated(r) => of(Kind::Allocated, r),
        Record::Identity(r) => AddressRecord::held_for(&r.identity),
    }
}

pub(super) fn record_versioned(record: &Record) -> Versioned {
    let value = to_bytes(&etcd_record(record));
    Versioned { version: digest_version(&[&value]), value, created: 0 }
}

/// A record's JSON as `node/` writes it, as this store's record.
pub(super) fn address_record(value: &[u8], pool: &str) -> Answer<Record> {
    let r: AddressRecord = serde_json::from_slice(value).map_err(|e| bug(pool, e))?;
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let node = NodeRecord {
        node: r.node.clone(),
        container: text(&r.container),
        ifname: text(&r.ifname),
        lender: text(&r.lender),
        identity: text(&r.identity),
    };
    Ok(match r.kind {
        Kind::Static => Record::Static(node),
        Kind::Lent => Record::Lent(node),
        Kind::Borrowed => Record::Borrowed(node),
        Kind::Allocated => Record::Allocated(node),
    })
}

/// Whether the block's record is the one written as `value`.
pub(super) fn same_record(there: &Record, value: &[u8]) -> bool {
    serde_json::from_slice::<AddressRecord>(value).is_ok_and(|written| etcd_record(there) == written)
}

pub(super) fn identity_record(spec: &IdentitySpec) -> IdentityRecord {
    let sharers =
        spec.sharers.iter().map(|s| crate::records::Sharer { node: s.node.clone(), container: s.container.clone() });
    match &spec.state {
        IdentityState::Live(at) => IdentityRecord {
            node: at.node.clone(),
            container: at.container.clone(),
            addresses: spec.addresses.clone(),
            until: 0,
            sharers: sharers.collect(),
        },
        IdentityState::Held { was, until } => IdentityRecord {
            node: was.as_ref().map(|w| w.node.clone()).unwrap_or_default(),
            container: String::new(),
            addresses: spec.addresses.clone(),
            until: until.0.max(1),
            sharers: Vec::new(),
        },
    }
}

/// A place in `0..n` that depends on the node's name: nodes asking at once
/// ask different owners first.
pub(super) fn spread(node: &str, n: usize) -> usize {
    let Version(v) = digest_version(&[node.as_bytes()]);
    (v as u64 % n as u64) as usize
}
