//! The Kubernetes store's objects as deploy/kubernetes/crds.yaml defines
//! them (docs/kubernetes.md, "The objects"): what a request sends and an
//! answer holds, with no I/O. Each kind's rules that the schema checks (a
//! block has an owner unless `Unclaimed`, `recordCount` is the number of
//! records, a held identity has an end, …) are the shape of these types, so
//! what they serialize is what the API server accepts; the derived fields
//! (`poolNames`, `recordCount`) and the labels are written from what they
//! derive from, never kept beside it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::names;
use crate::records::PoolRecord;

pub const GROUP: &str = "ipam-delegated.io";
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every object.
pub const API_VERSION: &str = "ipam-delegated.io/v1alpha1";

/// The labels a LIST selects by (each value an encoded name part, which
/// fits a label value; a reader checks `spec`, never trusts a label).
pub const LABEL_NETWORK: &str = "ipam-delegated.io/network";
pub const LABEL_POOL: &str = "ipam-delegated.io/pool";
pub const LABEL_NODE: &str = "ipam-delegated.io/node";
pub const LABEL_KIND: &str = "ipam-delegated.io/kind";

/// What the kinds have in common: their names in the API, the object name
/// and the labels their `spec` gives them.
pub trait Kind: Serialize + DeserializeOwned {
    const KIND: &'static str;
    const PLURAL: &'static str;
    /// The object's name (see [`names`]).
    fn name(&self) -> String;
    fn labels(&self) -> BTreeMap<String, String>;
}

/// The path of the kind's collection, under which `/<name>` is an object.
pub fn collection<K: Kind>() -> String {
    format!("/apis/{GROUP}/{VERSION}/{}", K::PLURAL)
}

/// A time of the API server's clock (`format: date-time`), in whole Unix
/// seconds, written `2026-11-23T19:28:52Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub i64);

impl Time {
    /// RFC 3339 as `format: date-time` admits it. A fraction of a second
    /// rounds up: the times are deadlines, and a later one is the safe side.
    pub fn parse(text: &str) -> Option<Time> {
        let b = text.as_bytes();
        let digits = |from: usize, to: usize| -> Option<i64> {
            let field = text.get(from..to)?;
            field.bytes().all(|c| c.is_ascii_digit()).then(|| field.parse().ok())?
        };
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || !matches!(b[10], b'T' | b't')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let (year, month, day) = (digits(0, 4)?, digits(5, 7)?, digits(8, 10)?);
        let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 {
            return None;
        }
        // 60: a leap second, which Unix time folds into the next.
        if second > 60 {
            return None;
        }
        let mut rest = &text[19..];
        let mut fraction = false;
        if let Some(after_dot) = rest.strip_prefix('.') {
            let end = after_dot.find(|c: char| !c.is_ascii_digit()).unwrap_or(after_dot.len());
            if end == 0 {
                return None;
            }
            fraction = after_dot[..end].bytes().any(|c| c != b'0');
            rest = &after_dot[end..];
        }
        let offset = match rest.as_bytes() {
            [b'Z' | b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let field = |a: u8, b: u8| -> Option<i64> {
                    (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
                };
                let (h, m) = (field(*h1, *h2)?, field(*m1, *m2)?);
                if h > 23 || m > 59 {
                    return None;
                }
                if *sign == b'+' {
                    h * 3600 + m * 60
                } else {
                    -(h * 3600 + m * 60)
                }
            }
            _ => return None,
        };
        let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
        Some(Time(seconds + i64::from(fraction)))
    }

    /// The time of an answer's `Date` (whole seconds, as HTTP dates are).
    pub fn of(date: SystemTime) -> Time {
        match date.duration_since(UNIX_EPOCH) {
            Ok(after) => Time(i64::try_from(after.as_secs()).unwrap_or(i64::MAX)),
            Err(before) => {
                let before = before.duration();
                let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
                Time(-whole - i64::from(before.subsec_nanos() > 0))
            }
        }
    }

    /// Whether this deadline is past by an answer whose `Date` is `date`:
    /// a `Date` is whole seconds, so only from the second after it.
    pub fn is_past_at(self, date: Time) -> bool {
        date.0 > self.0
    }

    pub fn plus(self, d: Duration) -> Time {
        let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        Time(self.0.saturating_add(whole).saturating_add(i64::from(d.subsec_nanos() > 0)))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shared::utc::iso8601(self.0))
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Time, D::Error> {
        let text = String::deserialize(input)?;
        Time::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {text:?}")))
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`, the inverse of `shared::utc`'s `civil_from_days`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// An object's `metadata`: what the protocol writes (`name`, `labels`, and
/// `resourceVersion` on an update) and what the server sets.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    /// New at every creation of an object under the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Opaque: equal or not, never older or newer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Bumped by the server at every change of `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One object of kind `K`: `apiVersion` and `kind` are `K`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct Object<K> {
    pub metadata: ObjectMeta,
    pub spec: K,
}

impl<K: Kind> Object<K> {
    /// A new object of `spec`, named and labelled by it (for a create).
    pub fn new(spec: K) -> Object<K> {
        Object { metadata: ObjectMeta { name: spec.name(), labels: spec.labels(), ..ObjectMeta::default() }, spec }
    }

    /// The object with `spec` changed to `spec` (for an update at the
    /// resourceVersion read): the labels follow the spec, the rest of the
    /// metadata is as read.
    pub fn with_spec(&self, spec: K) -> Object<K> {
        let labels = spec.labels();
        Object { metadata: ObjectMeta { labels, ..self.metadata.clone() }, spec }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectOut<'a, K> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    spec: &'a K,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectIn<K> {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: K,
}

impl<K: Kind> Serialize for Object<K> {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        ObjectOut { api_version: API_VERSION, kind: K::KIND, metadata: &self.metadata, spec: &self.spec }.serialize(out)
    }
}

impl<'de, K: Kind> Deserialize<'de> for Object<K> {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Object<K>, D::Error> {
        let read = ObjectIn::<K>::deserialize(input)?;
        if read.api_version != API_VERSION || read.kind != K::KIND {
            return Err(serde::de::Error::custom(format!(
                "{} {:?} is not an {API_VERSION} {}",
                read.api_version,
                read.metadata.name,
                K::KIND
            )));
        }
        Ok(Object { metadata: read.metadata, spec: read.spec })
    }
}

/// `IPDNetwork`: a network's cluster pools and, while it lasts, the recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "NetworkWire", from = "NetworkWire")]
pub struct NetworkSpec {
    pub network: String,
    /// Each pool's entry never changes once written.
    pub pools: Vec<PoolDefinition>,
    pub recovery: Option<Recovery>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDefinition {
    pub name: String,
    /// Its ranges and `blockSize`, as the etcd layout writes a pool.
    #[serde(flatten)]
    pub cut: PoolRecord,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    pub node: String,
    pub seen: String,
    pub until: Time,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkWire {
    network: String,
    pools: Vec<PoolDefinition>,
    /// For `kubectl get`; the schema checks they are the pools' names.
    pool_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovery: Option<Recovery>,
}

impl From<NetworkSpec> for NetworkWire {
    fn from(spec: NetworkSpec) -> NetworkWire {
        let pool_names = spec.pools.iter().map(|p| p.name.clone()).collect();
        NetworkWire { network: spec.network, pools: spec.pools, pool_names, recovery: spec.recovery }
    }
}

impl From<NetworkWire> for NetworkSpec {
    fn from(wire: NetworkWire) -> NetworkSpec {
        NetworkSpec { network: wire.network, pools: wire.pools, recovery: wire.recovery }
    }
}

impl Kind for NetworkSpec {
    const KIND: &'static str = "IPDNetwork";
    const PLURAL: &'static str = "ipdnetworks";

    fn name(&self) -> String {
        names::network_name(&self.network)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(LABEL_NETWORK.to_string(), names::text(&self.network))])
    }
}

/// `IPDBlock`: a block, whose it is, and every address record in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "BlockWire", try_from = "BlockWire")]
pub struct BlockSpec {
    pub network: String,
    pub pool: String,
    pub cidr: IpNet,
    pub state: BlockState,
    /// A node found no room in the pool and asks the owner to lend.
    pub wanted: Option<Wanted>,
    /// Grants in this shared block wait until then (the store lost history).
    pub recovering: Option<Time>,
    pub records: BTreeMap<IpAddr, Record>,
}

/// At most this many records in a block (the schema's `maxProperties`).
pub const MAX_RECORDS: usize = crate::settings::KUBERNETES_MAX_SHARED_BLOCK as usize;
/// At most this many bytes of JSON in a block's object: under the 1.5 MiB
/// that the API server's etcd takes in one request, with room for metadata.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

impl Object<BlockSpec> {
    /// Whether the block may be written as it is: at most [`MAX_RECORDS`]
    /// records and [`MAX_OBJECT_BYTES`] of JSON. A write that would pass
    /// either is refused before it is sent (docs/kubernetes.md).
    pub fn within_limits(&self) -> bool {
        self.spec.records.len() <= MAX_RECORDS
            && serde_json::to_vec(self).is_ok_and(|json| json.len() <= MAX_OBJECT_BYTES)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockState {
    /// Created by a claim not yet checked against the network: nobody
    /// allocates in it.
    Claiming(Owner),
    Owned(Owner),
    /// A release-node tombstone, claimable once `until` is past.
    Released {
        owner: Owner,
        until: Time,
    },
    /// Nobody's, kept for the records it holds.
    Unclaimed,
}

impl BlockState {
    pub fn owner(&self) -> Option<&Owner> {
        match self {
            BlockState::Claiming(owner) | BlockState::Owned(owner) | BlockState::Released { owner, .. } => Some(owner),
            BlockState::Unclaimed => None,
        }
    }

    fn word(&self) -> StateWord {
        match self {
            BlockState::Claiming(_) => StateWord::Claiming,
            BlockState::Owned(_) => StateWord::Owned,
            BlockState::Released { .. } => StateWord::Released,
            BlockState::Unclaimed => StateWord::Unclaimed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub node: String,
    /// The identity of the node database that claimed it (32 hex digits).
    pub db: String,
    /// A random positive number the claim drew (etcd's create revision).
    pub claim: i64,
    pub shared: bool,
    /// The API server's time of the claim.
    pub since: Time,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    pub node: String,
    pub at: Time,
}

/// An address held in the cluster, by its `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Record {
    /// Asked for by name.
    Static(NodeRecord),
    /// Offered by the block's owner to a node with no room.
    Lent(NodeRecord),
    Borrowed(NodeRecord),
    /// Granted in a shared block.
    Allocated(NodeRecord),
    /// Held for a workload identity: its `IPDIdentity` says by whom.
    Identity(IdentityRecord),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// A borrowed address's lender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lender: Option<String>,
    /// A grant's workload identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdentityRecord {
    pub identity: String,
    /// The uid of the `IPDIdentity` the address is held for.
    #[serde(rename = "identityUID")]
    pub identity_uid: String,
    /// Written by a hold: a hint, never later than the identity's `until`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum StateWord {
    Claiming,
    Owned,
    Released,
    Unclaimed,
}

#[derive(Serialize, Deserialize)]
struct Until {
    until: Time,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockWire {
    network: String,
    pool: String,
    cidr: IpNet,
    state: StateWord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<Owner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    released: Option<Until>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wanted: Option<Wanted>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovering: Option<Until>,
    /// For `kubectl get`; the schema checks it is the number of records.
    record_count: usize,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    records: BTreeMap<IpAddr, Record>,
}

impl From<BlockSpec> for BlockWire {
    fn from(spec: BlockSpec) -> BlockWire {
        let state = spec.state.word();
        let (owner, released) = match spec.state {
            BlockState::Claiming(owner) | BlockState::Owned(owner) => (Some(owner), None),
            BlockState::Released { owner, until } => (Some(owner), Some(Until { until })),
            BlockState::Unclaimed => (None, None),
        };
        BlockWire {
            network: spec.network,
            pool: spec.pool,
            cidr: spec.cidr,
            state,
            owner,
            released,
            wanted: spec.wanted,
            recovering: spec.recovering.map(|until| Until { until }),
            record_count: spec.records.len(),
            records: spec.records,
        }
    }
}

impl TryFrom<BlockWire> for BlockSpec {
    type Error = String;

    fn try_from(wire: BlockWire) -> Result<BlockSpec, String> {
        let state = match (wire.state, wire.owner, wire.released) {
            (StateWord::Claiming, Some(owner), None) => BlockState::Claiming(owner),
            (StateWord::Owned, Some(owner), None) => BlockState::Owned(owner),
            (StateWord::Released, Some(owner), Some(Until { until })) => BlockState::Released { owner, until },
            (StateWord::Unclaimed, None, None) => BlockState::Unclaimed,
            (word, owner, released) => {
                return Err(format!(
                    "block {}: state {word:?} with{} owner and with{} released.until",
                    wire.cidr,
                    if owner.is_some() { "" } else { "out" },
                    if released.is_some() { "" } else { "out" }
                ))
            }
        };
        Ok(BlockSpec {
            network: wire.network,
            pool: wire.pool,
            cidr: wire.cidr,
            state,
            wanted: wire.wanted,
            recovering: wire.recovering.map(|r| r.until),
            records: wire.records,
        })
    }
}

impl Kind for BlockSpec {
    const KIND: &'static str = "IPDBlock";
    const PLURAL: &'static str = "ipdblocks";

    fn name(&self) -> String {
        names::block_name(&self.network, &self.pool, self.cidr)
    }

    /// Network and pool; while it has an owner, the owner's node and
    /// whether the block is `own` or `shared`.
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (LABEL_NETWORK.to_string(), names::text(&self.network)),
            (LABEL_POOL.to_string(), names::text(&self.pool)),
        ]);
        if let Some(owner) = self.state.owner() {
            labels.insert(LABEL_NODE.to_string(), names::text(&owner.node));
            labels.insert(LABEL_KIND.to_string(), if owner.shared { "shared" } else { "own" }.to_string());
        }
        labels
    }
}

/// `IPDIdentity`: a workload identity's addresses on one interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "IdentityWire", try_from = "IdentityWire")]
pub struct IdentitySpec {
    pub network: String,
    pub ifname: String,
    /// In clear (`prod/db-0`).
    pub identity: String,
    pub state: IdentityState,
    pub addresses: Vec<IpAddr>,
    /// Further live attachments (`shareLive`).
    pub sharers: Vec<Attachment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityState {
    /// On a node's attachment.
    Live(Attachment),
    /// Held until a time of the API server's clock; `was` the attachment
    /// it was held from, when known.
    Held { was: Option<Attachment>, until: Time },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub node: String,
    pub container: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum IdentityWord {
    Live,
    Held,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityWire {
    network: String,
    ifname: String,
    identity: String,
    state: IdentityWord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container: Option<String>,
    addresses: Vec<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sharers: Vec<Attachment>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<Time>,
}

impl From<IdentitySpec> for IdentityWire {
    fn from(spec: IdentitySpec) -> IdentityWire {
        let (state, attachment, until) = match spec.state {
            IdentityState::Live(at) => (IdentityWord::Live, Some(at), None),
            IdentityState::Held { was, until } => (IdentityWord::Held, was, Some(until)),
        };
        let (node, container) = attachment.map_or((None, None), |a| (Some(a.node), Some(a.container)));
        IdentityWire {
            network: spec.network,
            ifname: spec.ifname,
            identity: spec.identity,
            state,
            node,
            container,
            addresses: spec.addresses,
            sharers: spec.sharers,
            until,
        }
    }
}

impl TryFrom<IdentityWire> for IdentitySpec {
    type Error = String;

    fn try_from(wire: IdentityWire) -> Result<IdentitySpec, String> {
        let attachment = match (wire.node, wire.container) {
            (Some(node), Some(container)) => Some(Attachment { node, container }),
            _ => None,
        };
        let state = match (wire.state, attachment, wire.until) {
            (IdentityWord::Live, Some(at), None) => IdentityState::Live(at),
            (IdentityWord::Held, was, Some(until)) => IdentityState::Held { was, until },
            (IdentityWord::Live, _, _) => {
                return Err(format!("identity {:?}: live without a node and container, or with an end", wire.identity))
            }
            (IdentityWord::Held, _, None) => return Err(format!("identity {:?}: held without an end", wire.identity)),
        };
        Ok(IdentitySpec {
            network: wire.network,
            ifname: wire.ifname,
            identity: wire.identity,
            state,
            addresses: wire.addresses,
            sharers: wire.sharers,
        })
    }
}

impl Kind for IdentitySpec {
    const KIND: &'static str = "IPDIdentity";
    const PLURAL: &'static str = "ipdidentities";

    fn name(&self) -> String {
        names::identity_name(&self.network, &self.ifname, &self.identity)
    }

    /// Network; the node of its attachment, live or held from.
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(LABEL_NETWORK.to_string(), names::text(&self.network))]);
        let node = match &self.state {
            IdentityState::Live(at) | IdentityState::Held { was: Some(at), .. } => Some(&at.node),
            IdentityState::Held { was: None, .. } => None,
        };
        if let Some(node) = node {
            labels.insert(LABEL_NODE.to_string(), names::text(node));
        }
        labels
    }
}

/// `IPDNode`: which node database runs under a node's name, and the
/// durations release-node waits out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    pub network: String,
    pub node: String,
    pub db: String,
    #[serde(with = "seconds")]
    pub offline_grace: Duration,
    /// `ipam.timeout`.
    #[serde(with = "seconds")]
    pub timeout: Duration,
}

impl Kind for NodeSpec {
    const KIND: &'static str = "IPDNode";
    const PLURAL: &'static str = "ipdnodes";

    fn name(&self) -> String {
        names::node_name(&self.network, &self.node)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_NETWORK.to_string(), names::text(&self.network)),
            (LABEL_NODE.to_string(), names::text(&self.node)),
        ])
    }
}

/// A duration as a number of seconds (`type: number`).
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, out: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() == 0 {
            out.serialize_u64(d.as_secs())
        } else {
            out.serialize_f64(d.as_secs_f64())
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Duration, D::Error> {
        let seconds = f64::deserialize(input)?;
        Duration::try_from_secs_f64(seconds).map_err(serde::de::Error::custom)
    }
}

/// A network of two pools, one IPv4 and one IPv6, that the unit tests and
/// the API server's schema test (tests/kube_objects.rs) both round-trip.
#[cfg(any(test, feature = "testing"))]
pub fn sample_network() -> NetworkSpec {
    NetworkSpec {
        network: "cluster-net".into(),
        pools: vec![
            PoolDefinition {
                name: "cluster4".into(),
                cut: PoolRecord { ranges: vec!["10.80.0.0/16 10.80.0.1-10.80.255.254".into()], block_size: 26 },
            },
            PoolDefinition {
                name: "cluster6".into(),
                cut: PoolRecord {
                    ranges: vec!["fd00:80::/64 fd00:80::1-fd00:80::ffff:ffff:ffff:ffff".into()],
                    block_size: 122,
                },
            },
        ],
        recovery: None,
    }
}

#[cfg(test)]
mod tests;
