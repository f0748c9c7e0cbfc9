//! The datastore on the Kubernetes API (docs/kubernetes.md): its objects'
//! names ([`names`]) and shapes ([`objects`]), and each operation of
//! [`Datastore`] as compare-and-swap steps on one object at a time.
//!
//! The API server compares one object per write (its `resourceVersion`,
//! create-if-absent, delete preconditions), so everything an etcd
//! transaction compares at once is folded into the object it concerns: a
//! block's `IPDBlock` carries its owner and every address record of the
//! block, so a claim, a grant, a reservation, a borrowing and a release in
//! one block are writes of one object, and of two racing writes one gets
//! 409 and decides again from what it reads ([`KubeStore::change_block`]).
//! The pool definitions are one `IPDNetwork`, whose entries the schema keeps
//! unchanged once written; who runs as a node name is its `IPDNode`.
//!
//! Versions: a block's record is at `Version(claim)` while its claim stands
//! unchanged (etcd's "not written since its creation"), an address record's
//! version is a digest of what it holds, and an object's `resourceVersion`
//! is compared by the API server itself, never by this code.
//!
//! Not yet on this store (refused with error 7 naming the setting, before
//! anything is written): workload identities (ipam-da-sticky in cluster
//! mode). Not yet detected on it: the API server's etcd restored from an
//! older backup (`marks` has no global revision here; docs/kubernetes.md
//! says what the per-object check will compare).

pub mod names;
pub mod objects;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use ring::digest::{digest, SHA256};
use serde::de::DeserializeOwned;
use shared::store::StoreHandle;
use shared::{CniError, Code};

use super::{
    Answer, BlockClaim, BlockEntry, BlockIs, ConfirmRead, Created, Datastore, Error, GrantRefusal, IndexedPool,
    Outcome, PoolConfirm, PoolIndex, PoolRead, PoolRecords, RecordChange, RecordRelease, Reservation, ReserveRefusal,
    Swap, Unreachable, Version, Versioned,
};
use crate::kube::{self, Client, Preconditions, Resource, Selectors};
use crate::records::{shown, to_bytes, AddressRecord, BlockRecord, IdentityRecord, Kind, NodeEntry, PoolRecord};
use objects::{
    BlockSpec, BlockState, IdentitySpec, IdentityState, Kind as ObjectKind, NetworkSpec, NodeRecord, NodeSpec, Object,
    Owner, PoolDefinition, Record, Time, Wanted,
};

/// How the store is named in messages.
const STORE: &str = "the Kubernetes API server";
/// The setting a refusal of the server (credentials, RBAC, TLS) points at.
const KUBECONFIG_FIELD: &str = "ipam.cluster.kubernetes.kubeconfig";
/// Rounds of read-decide-write on one object before giving up (others keep
/// writing it): error 11. Between rounds a random pause of up to 2^round ms
/// (at most [`MAX_PAUSE_MS`]), so that writers that lost to each other do
/// not meet again at once.
const ROUNDS: u32 = 16;
const MAX_PAUSE_MS: u64 = 64;
/// Owners asked to lend by a node that found no room.
const WANT_OWNERS: usize = 4;

/// One node's calls on one network, on the Kubernetes API.
pub struct KubeStore {
    client: Client,
    network: String,
    node: String,
    /// Objects as last answered, with the `Date` of that answer: a write is
    /// sent at their resourceVersion, and a 409 reads again. A decision not
    /// to write is only ever taken on an object read by this very step.
    blocks: RefCell<HashMap<String, (Object<BlockSpec>, Time)>>,
    network_object: RefCell<Option<Object<NetworkSpec>>>,
    node_object: RefCell<Option<Object<NodeSpec>>>,
    /// The `Date` of the latest answer.
    now: Cell<Time>,
}

/// What one round of [`KubeStore::change_block`] decided from the block as
/// read (none: it has no object).
enum Step<T> {
    /// Write the block so (created when it has no object), then `T`.
    Write(Box<BlockSpec>, T),
    /// Delete its object, then `T`.
    Delete(T),
    /// Write nothing: `T` (taken only on a fresh read).
    Answer(T),
}

impl KubeStore {
    pub fn open(settings: &kube::Settings, cluster: &crate::settings::Settings, network: &str) -> shared::Result<Self> {
        let client = Client::new(settings).map_err(|e| e.to_cni(KUBECONFIG_FIELD))?;
        Ok(KubeStore {
            client,
            network: network.to_string(),
            node: cluster.node.clone(),
            blocks: RefCell::new(HashMap::new()),
            network_object: RefCell::new(None),
            node_object: RefCell::new(None),
            now: Cell::new(Time(0)),
        })
    }

    // ---- requests, typed

    fn answered<T>(&self, answer: kube::Answer<T>) -> T {
        self.now.set(Time::of(answer.date));
        answer.outcome
    }

    fn get<K: ObjectKind>(&self, name: &str) -> Answer<Option<Object<K>>> {
        let found = self.client.get(&resource::<K>(), name).map_err(failure)?;
        self.answered(found).map(|o| typed::<K>(o.0)).transpose()
    }

    fn list<K: ObjectKind>(&self, labels: &str) -> Answer<Vec<Object<K>>> {
        let selectors = Selectors { labels: Some(labels), fields: None };
        let list = self.client.list(&resource::<K>(), &selectors).map_err(failure)?;
        self.answered(list).items.into_iter().map(|o| typed::<K>(o.0)).collect()
    }

    /// Creates `object`; none: one of its name exists.
    fn create<K: ObjectKind>(&self, object: &Object<K>) -> Answer<Option<Object<K>>> {
        let body = serde_json::to_value(object).map_err(|e| bug(&object.metadata.name, e))?;
        let created = self.client.create(&resource::<K>(), &body).map_err(failure)?;
        match self.answered(created) {
            kube::Created::Created(o) => typed::<K>(o.0).map(Some),
            kube::Created::AlreadyExists => Ok(None),
        }
    }

    /// Replaces `object` at the resourceVersion it was read at; none: it
    /// changed or went since.
    fn replace<K: ObjectKind>(&self, object: &Object<K>) -> Answer<Option<Object<K>>> {
        let name = &object.metadata.name;
        let version = object.metadata.resource_version.as_deref().unwrap_or_default();
        let body = serde_json::to_value(object).map_err(|e| bug(name, e))?;
        let replaced = self.client.replace(&resource::<K>(), name, version, &body).map_err(failure)?;
        match self.answered(replaced) {
            kube::Replaced::Replaced(o) => typed::<K>(o.0).map(Some),
            kube::Replaced::Conflict | kube::Replaced::NotFound => Ok(None),
        }
    }

    /// Deletes `object` while it is as read; false: it changed or went since.
    fn delete<K: ObjectKind>(&self, object: &Object<K>) -> Answer<bool> {
        let preconditions = Preconditions {
            uid: object.metadata.uid.as_deref(),
            resource_version: object.metadata.resource_version.as_deref(),
        };
        let deleted = self.client.delete(&resource::<K>(), &object.metadata.name, &preconditions).map_err(failure)?;
        Ok(matches!(self.answered(deleted), kube::Deleted::Deleted))
    }

    // ---- the network, the node

    fn network_name(&self) -> String {
        names::network_name(&self.network)
    }

    fn read_network(&self) -> Answer<Option<Object<NetworkSpec>>> {
        let found = self.get::<NetworkSpec>(&self.network_name())?;
        if let Some(found) = &found {
            if found.spec.network != self.network {
                return Err(not_ours(&found.metadata.name, &format!("network {:?}", self.network)));
            }
        }
        self.network_object.replace(found.clone());
        Ok(found)
    }

    /// The network as read earlier in this call, else read now.
    fn known_network(&self) -> Answer<Option<Object<NetworkSpec>>> {
        let known = self.network_object.borrow().clone();
        match known {
            Some(known) => Ok(Some(known)),
            None => self.read_network(),
        }
    }

    fn definition_of(network: &Object<NetworkSpec>, pool: &str) -> Option<Versioned> {
        let found = network.spec.pools.iter().find(|p| p.name == pool)?;
        let value = to_bytes(&found.cut);
        let uid = network.metadata.uid.as_deref().unwrap_or_default();
        Some(Versioned { version: digest_version(&[uid.as_bytes(), &value]), value, created: 0 })
    }

    fn node_spec_name(&self) -> String {
        names::node_name(&self.network, &self.node)
    }

    fn read_node(&self) -> Answer<Option<Versioned>> {
        let found = self.get::<NodeSpec>(&self.node_spec_name())?;
        if let Some(found) = &found {
            if found.spec.node != self.node || found.spec.network != self.network {
                return Err(not_ours(&found.metadata.name, &format!("node {:?}", self.node)));
            }
        }
        self.node_object.replace(found.clone());
        Ok(found.as_ref().map(node_entry))
    }

    // ---- blocks

    fn block_name(&self, pool: &str, block: IpNet) -> String {
        names::block_name(&self.network, pool, block)
    }

    /// Checks a block read is the one its name says (a hash collision, or
    /// an object made by hand, is refused), and keeps it for later writes.
    fn keep_block(&self, object: Object<BlockSpec>) -> Answer<Object<BlockSpec>> {
        let spec = &object.spec;
        let expected = self.block_name(&spec.pool, spec.cidr);
        if spec.network != self.network || object.metadata.name != expected {
            return Err(not_ours(&object.metadata.name, &format!("{expected} of network {:?}", self.network)));
        }
        self.blocks.borrow_mut().insert(object.metadata.name.clone(), (object.clone(), self.now.get()));
        Ok(object)
    }

    fn read_block(&self, pool: &str, block: IpNet) -> Answer<Option<Object<BlockSpec>>> {
        let name = self.block_name(pool, block);
        match self.get::<BlockSpec>(&name)? {
            Some(found) => self.keep_block(found).map(Some),
            None => {
                self.blocks.borrow_mut().remove(&name);
                Ok(None)
            }
        }
    }

    /// Every block object of `pool` (by label; each checked by its spec).
    fn pool_blocks(&self, pool: &str) -> Answer<Vec<Object<BlockSpec>>> {
        let labels = format!(
            "{}={},{}={}",
            objects::LABEL_NETWORK,
            names::text(&self.network),
            objects::LABEL_POOL,
            names::text(pool)
        );
        let found = self.list::<BlockSpec>(&labels)?;
        found.into_iter().filter(|b| b.spec.pool == pool).map(|b| self.keep_block(b)).collect()
    }

    /// One read-decide-write step on a block: `decide` sees the block as
    /// last read (or as read now) and the `Date` of that answer. A write
    /// that loses a race (409), or a decision to write nothing taken on an
    /// earlier read, reads the block again and decides again.
    fn change_block<T>(
        &self,
        pool: &str,
        block: IpNet,
        mut decide: impl FnMut(Option<&Object<BlockSpec>>, Time) -> Answer<Step<T>>,
    ) -> Answer<T> {
        let name = self.block_name(pool, block);
        let mut current = self.blocks.borrow().get(&name).map(|(o, at)| (Some(o.clone()), *at, false));
        for round in 0..ROUNDS {
            if round > 1 {
                pause(round);
            }
            let (object, at, fresh) = match current.take() {
                Some(known) => known,
                None => (self.read_block(pool, block)?, self.now.get(), true),
            };
            let done = match decide(object.as_ref(), at)? {
                Step::Answer(answer) if fresh => return Ok(answer),
                Step::Answer(_) => None,
                Step::Write(spec, answer) => {
                    let written = match &object {
                        Some(o) => o.with_spec(*spec),
                        None => Object::new(*spec),
                    };
                    if !written.within_limits() {
                        return Err(Error::Failed(CniError::new(
                            Code::TryAgainLater,
                            format!(
                                "IPDBlock {name} would pass {} records or {} bytes: not written",
                                objects::MAX_RECORDS,
                                objects::MAX_OBJECT_BYTES
                            ),
                        )));
                    }
                    let answered = match object {
                        Some(_) => self.replace(&written)?,
                        None => self.create(&written)?,
                    };
                    match answered {
                        Some(now) => {
                            self.keep_block(now)?;
                            Some(answer)
                        }
                        None => None,
                    }
                }
                Step::Delete(answer) => match &object {
                    Some(o) if self.delete(o)? => {
                        self.blocks.borrow_mut().remove(&name);
                        Some(answer)
                    }
                    Some(_) => None,
                    None => Some(answer),
                },
            };
            if let Some(answer) = done {
                return Ok(answer);
            }
        }
        Err(Error::Failed(CniError::new(
            Code::TryAgainLater,
            format!("IPDBlock {name} kept changing under this call ({ROUNDS} tries): try again"),
        )))
    }

    /// The block's record as etcd's layout would hold it (none: nobody's,
    /// or a release whose end is past by `now`, which etcd's lease would
    /// have deleted).
    fn block_entry(object: &Object<BlockSpec>, now: Time) -> Option<BlockEntry> {
        let record = |owner: &Owner, released: bool| BlockRecord {
            node: owner.node.clone(),
            at: owner.since.0,
            released,
            db: owner.db.clone(),
            shared: owner.shared,
        };
        let (value, version, claim) = match &object.spec.state {
            BlockState::Owned(owner) => (to_bytes(&record(owner, false)), Version(owner.claim), owner.claim),
            BlockState::Claiming(owner) => {
                let value = to_bytes(&record(owner, false));
                (value.clone(), digest_version(&[b"claiming", &value]), owner.claim)
            }
            BlockState::Released { owner, until } if !until.is_past_at(now) => {
                let value = to_bytes(&record(owner, true));
                (value.clone(), digest_version(&[b"released", &value, &until.0.to_be_bytes()]), owner.claim)
            }
            BlockState::Released { .. } | BlockState::Unclaimed => return None,
        };
        Some(BlockEntry { block: object.spec.cidr, stored: Versioned { value, version, created: claim } })
    }

    fn address_entries(&self, object: &Object<BlockSpec>) -> Vec<super::AddressEntry> {
        let spec = &object.spec;
        spec.records
            .iter()
            .map(|(address, record)| super::AddressEntry {
                key: record_key(&spec.pool, spec.cidr, *address),
                block: spec.cidr,
                address: *address,
                stored: record_versioned(record),
            })
            .collect()
    }

    /// Whether a block is nobody's: no object, `Unclaimed`, or released
    /// with its end past.
    fn nobodys(object: Option<&Object<BlockSpec>>, now: Time) -> bool {
        object.is_none_or(|o| Self::block_entry(o, now).is_none())
    }

    fn blank_block(&self, pool: &str, block: IpNet) -> BlockSpec {
        BlockSpec {
            network: self.network.clone(),
            pool: pool.to_string(),
            cidr: block,
            state: BlockState::Unclaimed,
            wanted: None,
            recovering: None,
            records: BTreeMap::new(),
        }
    }

    /// The block's spec without its record of `address`: an object left
    /// nobody's and empty is deleted rather than kept.
    fn without(object: &Object<BlockSpec>, addresses: &[IpAddr], now: Time) -> Step<()> {
        let mut spec = object.spec.clone();
        for a in addresses {
            spec.records.remove(a);
        }
        if spec.records.is_empty() && Self::nobodys(Some(object), now) {
            Step::Delete(())
        } else {
            Step::Write(Box::new(spec), ())
        }
    }
}

impl Datastore for KubeStore {
    fn marks(&self) -> Option<(i64, i64)> {
        None
    }

    fn forget_marks(&self) {}

    fn finish(&self, _store: &mut StoreHandle) {
        let counts = self.client.counts();
        tracing::debug!("Kubernetes API requests: {} ({} connection(s))", counts.requests, counts.connections);
    }

    fn reachable(&self) -> Answer<()> {
        self.read_node().map(drop)
    }

    fn node_entry_name(&self) -> String {
        format!("IPDNode {}", self.node_spec_name())
    }

    fn put_node_entry(&self, entry: &NodeEntry, expected: Option<&Versioned>) -> Answer<Swap> {
        let spec = NodeSpec {
            network: self.network.clone(),
            node: self.node.clone(),
            db: entry.db.clone(),
            offline_grace: seconds(entry.offline_grace),
            timeout: seconds(entry.timeout),
        };
        let written = match expected {
            None => self.create(&Object::new(spec))?,
            Some(expected) => {
                let known = self.node_object.borrow().clone();
                let read = match known.filter(|k| node_entry(k).version == expected.version) {
                    Some(known) => Some(known),
                    None => {
                        self.read_node()?;
                        self.node_object.borrow().clone()
                    }
                };
                match read.filter(|r| node_entry(r).version == expected.version) {
                    Some(read) => self.replace(&read.with_spec(spec))?,
                    None => None,
                }
            }
        };
        match written {
            Some(object) => {
                self.node_object.replace(Some(object));
                Ok(Swap::Done)
            }
            None => Ok(Swap::Conflict(self.read_node()?)),
        }
    }

    fn definition_name(&self, pool: &str) -> String {
        format!("IPDNetwork {} pool {pool}", self.network_name())
    }

    fn read_pool(&self, pool: &str) -> Answer<PoolRead> {
        let network = self.read_network()?;
        let definition = network.as_ref().and_then(|n| Self::definition_of(n, pool));
        let now = self.now.get();
        let blocks = self.pool_blocks(pool)?.iter().filter_map(|b| Self::block_entry(b, now)).collect();
        let entry = self.read_node()?;
        Ok(PoolRead { indexed: definition.is_some(), definition, blocks, entry, recovery: None })
    }

    fn read_pool_index(&self, pool: &str) -> Answer<PoolIndex> {
        let network = self.read_network()?;
        let Some(network) = network else {
            return Ok(PoolIndex { definition: None, pools: Vec::new(), at: Version(0) });
        };
        let pools = network
            .spec
            .pools
            .iter()
            .filter_map(|p| {
                Some(IndexedPool {
                    name: p.name.clone(),
                    key: self.definition_name(&p.name),
                    stored: Self::definition_of(&network, &p.name)?,
                })
            })
            .collect();
        let at = digest_version(&[network.metadata.resource_version.as_deref().unwrap_or_default().as_bytes()]);
        Ok(PoolIndex { definition: Self::definition_of(&network, pool), pools, at })
    }

    fn define_pool(
        &self,
        pool: &str,
        definition: &[u8],
        index_at: Version,
        _current: Option<&Versioned>,
    ) -> Answer<bool> {
        let cut: PoolRecord = serde_json::from_slice(definition).map_err(|e| bug(pool, e))?;
        let entry = PoolDefinition { name: pool.to_string(), cut };
        let network = self.network_object.borrow().clone();
        let written = match network {
            None if index_at == Version(0) => {
                let spec = NetworkSpec { network: self.network.clone(), pools: vec![entry], recovery: None };
                self.create(&Object::new(spec))?
            }
            None => None,
            Some(network) => {
                let read_at =
                    digest_version(&[network.metadata.resource_version.as_deref().unwrap_or_default().as_bytes()]);
                if read_at != index_at {
                    return Ok(false);
                }
                if let Some(there) = network.spec.pools.iter().find(|p| p.name == pool) {
                    return Ok(there.cut == entry.cut);
                }
                let mut spec = network.spec.clone();
                spec.pools.push(entry);
                self.replace(&network.with_spec(spec))?
            }
        };
        let defined = written.is_some();
        self.network_object.replace(written);
        Ok(defined)
    }

    fn claim_block(&self, pool: &str, block: IpNet, record: &[u8], definition: &Versioned) -> Answer<BlockClaim> {
        // The definition the caller decided from is the one this call read:
        // the schema keeps a pool's entry unchanged, so only another object
        // under the network's name (deleted and made again) can differ.
        let network = self.known_network()?;
        let current = network.as_ref().and_then(|n| Self::definition_of(n, pool));
        if current.as_ref().map(|c| c.version) != Some(definition.version) {
            return Ok(BlockClaim::Lost {
                definition: self.read_network()?.and_then(|n| Self::definition_of(&n, pool)),
            });
        }
        let record: BlockRecord = serde_json::from_slice(record).map_err(|e| bug(pool, e))?;
        let claim = random_claim()?;
        let claimed = self.change_block(pool, block, |found, now| {
            if !Self::nobodys(found, now) {
                return Ok(Step::Answer(None));
            }
            let mut spec = found.map_or_else(|| self.blank_block(pool, block), |f| f.spec.clone());
            spec.state = BlockState::Owned(Owner {
                node: record.node.clone(),
                db: record.db.clone(),
                claim,
                shared: record.shared,
                since: now,
            });
            spec.wanted = None;
            Ok(Step::Write(Box::new(spec), Some(claim)))
        })?;
        Ok(match claimed {
            Some(created) => {
                let name = self.block_name(pool, block);
                let records = self.blocks.borrow().get(&name).map(|(o, _)| self.address_entries(o)).unwrap_or_default();
                BlockClaim::Claimed { created, records }
            }
            None => BlockClaim::Lost { definition: current },
        })
    }

    fn block_records(&self, pool: &str, block: IpNet) -> Answer<Vec<super::AddressEntry>> {
        Ok(self.read_block(pool, block)?.map(|o| self.address_entries(&o)).unwrap_or_default())
    }

    fn give_back(&self, pool: &str, block: IpNet, created: i64) -> Answer<bool> {
        self.change_block(pool, block, |found, _| {
            let Some(found) = found.filter(|f| matches!(&f.spec.state, BlockState::Owned(o) if o.claim == created))
            else {
                return Ok(Step::Answer(false));
            };
            if found.spec.records.is_empty() {
                return Ok(Step::Delete(true));
            }
            let mut spec = found.spec.clone();
            (spec.state, spec.wanted) = (BlockState::Unclaimed, None);
            Ok(Step::Write(Box::new(spec), true))
        })
    }

    fn confirm(&self, pools: &[(&str, Vec<IpNet>)]) -> Answer<ConfirmRead> {
        // A LIST with no resourceVersion is a consistent read: the API
        // server answers from etcd's quorum (or its cache once it has caught
        // up with it), never from a stale copy.
        let entry = self.read_node()?;
        let labels = format!(
            "{}={},{}={}",
            objects::LABEL_NETWORK,
            names::text(&self.network),
            objects::LABEL_NODE,
            names::text(&self.node)
        );
        let mine: HashMap<String, Object<BlockSpec>> = self
            .list::<BlockSpec>(&labels)?
            .into_iter()
            .map(|b| self.keep_block(b).map(|b| (b.metadata.name.clone(), b)))
            .collect::<Answer<_>>()?;
        let mut read = Vec::with_capacity(pools.len());
        for (pool, blocks) in pools {
            let mut c = PoolConfirm { wanted: 0, blocks: Vec::with_capacity(blocks.len()) };
            for block in blocks {
                // Not among this node's: another's now, or nobody's (one read each, rare).
                let found = match mine.get(&self.block_name(pool, *block)) {
                    Some(found) => Some(found.clone()),
                    None => self.read_block(pool, *block)?,
                };
                let now = self.now.get();
                match found {
                    Some(found) => {
                        let ours = found.spec.state.owner().is_some_and(|o| o.node == self.node);
                        if let (true, Some(wanted)) = (ours, &found.spec.wanted) {
                            c.wanted = c.wanted.max(wanted.at.0);
                        }
                        let entry = Self::block_entry(&found, now).map(|e| e.stored);
                        c.blocks.push((entry, self.address_entries(&found)));
                    }
                    None => c.blocks.push((None, Vec::new())),
                }
            }
            read.push(c);
        }
        Ok(ConfirmRead { entry, pools: read })
    }

    fn record_key(&self, pool: &str, block: IpNet, address: IpAddr) -> String {
        record_key(pool, block, address)
    }

    fn record(&self, key: &str) -> Answer<Option<Versioned>> {
        let (pool, block, address) = parse_record_key(key)?;
        let found = self.read_block(&pool, block)?;
        Ok(found.and_then(|o| o.spec.records.get(&address).map(record_versioned)))
    }

    fn delete_record(&self, key: &str, version: Version) -> Answer<bool> {
        let (pool, block, address) = parse_record_key(key)?;
        self.change_block(&pool, block, |found, now| {
            let Some(found) =
                found.filter(|f| f.spec.records.get(&address).map(|r| record_versioned(r).version) == Some(version))
            else {
                return Ok(Step::Answer(false));
            };
            Ok(match Self::without(found, &[address], now) {
                Step::Write(spec, ()) => Step::Write(spec, true),
                _ => Step::Delete(true),
            })
        })
    }

    fn reserve(&self, r: &Reservation) -> Answer<Outcome<ReserveRefusal>> {
        let cut: PoolRecord = serde_json::from_slice(r.definition).map_err(|e| bug(r.pool, e))?;
        let network = self.known_network()?;
        let definition = network.as_ref().and_then(|n| Self::definition_of(n, r.pool));
        let same_cut = |n: &Object<NetworkSpec>| n.spec.pools.iter().any(|p| p.name == r.pool && p.cut == cut);
        if !network.as_ref().is_some_and(same_cut) {
            let network = self.read_network()?;
            if !network.as_ref().is_some_and(same_cut) {
                let (holder, owner) = self.read_block(r.pool, r.block)?.map_or((None, None), |o| {
                    (o.spec.records.get(&r.address).map(record_versioned), Self::block_entry(&o, self.now.get()))
                });
                let definition = network.and_then(|n| Self::definition_of(&n, r.pool));
                return Ok(Outcome::Refused(ReserveRefusal { holder, owner: owner.map(|o| o.stored), definition }));
            }
        }
        let record = address_record(r.value, r.pool)?;
        self.change_block(r.pool, r.block, |found, now| {
            let holder = found.and_then(|f| f.spec.records.get(&r.address));
            let entry = found.and_then(|f| Self::block_entry(f, now));
            let block_as_read = match r.block_is {
                BlockIs::Claim(created) => found.is_some_and(
                    |f| matches!(&f.spec.state, BlockState::Owned(o) if o.claim == created && o.node == self.node),
                ),
                BlockIs::At(version) => entry.as_ref().is_some_and(|e| e.stored.version == version),
                BlockIs::Unclaimed => entry.is_none(),
            };
            if holder.is_some() || !block_as_read {
                return Ok(Step::Answer(Outcome::Refused(ReserveRefusal {
                    holder: holder.map(record_versioned),
                    owner: entry.map(|e| e.stored),
                    definition: definition.clone(),
                })));
            }
            let mut spec = found.map_or_else(|| self.blank_block(r.pool, r.block), |f| f.spec.clone());
            spec.records.insert(r.address, record.clone());
            Ok(Step::Write(Box::new(spec), Outcome::Done))
        })
    }

    fn take_lent(&self, key: &str, version: Version, value: &[u8]) -> Answer<Outcome<()>> {
        let (pool, block, address) = parse_record_key(key)?;
        let record = address_record(value, &pool)?;
        self.change_block(&pool, block, |found, _| {
            let Some(found) =
                found.filter(|f| f.spec.records.get(&address).map(|r| record_versioned(r).version) == Some(version))
            else {
                return Ok(Step::Answer(Outcome::Refused(())));
            };
            let mut spec = found.spec.clone();
            spec.records.insert(address, record.clone());
            Ok(Step::Write(Box::new(spec), Outcome::Done))
        })
    }

    fn grant(
        &self,
        pool: &str,
        block: IpNet,
        address: IpAddr,
        value: &[u8],
        block_at: Version,
    ) -> Answer<Outcome<GrantRefusal>> {
        let record = address_record(value, pool)?;
        self.change_block(pool, block, |found, now| {
            let entry = found.and_then(|f| Self::block_entry(f, now));
            let free = found.is_some_and(|f| !f.spec.records.contains_key(&address));
            match found {
                Some(found) if free && entry.as_ref().is_some_and(|e| e.stored.version == block_at) => {
                    let mut spec = found.spec.clone();
                    spec.records.insert(address, record.clone());
                    Ok(Step::Write(Box::new(spec), Outcome::Done))
                }
                _ => Ok(Step::Answer(Outcome::Refused(GrantRefusal {
                    block: entry.map(|e| e.stored),
                    records: found.map(|f| self.address_entries(f)).unwrap_or_default(),
                    recovering: false,
                }))),
            }
        })
    }

    fn address_records(&self, pool: &str) -> Answer<Vec<super::AddressEntry>> {
        Ok(self.pool_blocks(pool)?.iter().flat_map(|b| self.address_entries(b)).collect())
    }

    fn pool_records(&self, pool: &str) -> Answer<PoolRecords> {
        let found = self.pool_blocks(pool)?;
        let now = self.now.get();
        Ok(PoolRecords {
            blocks: found.iter().filter_map(|b| Self::block_entry(b, now)).collect(),
            records: found.iter().flat_map(|b| self.address_entries(b)).collect(),
            recovering: false,
        })
    }

    fn missing(&self, keys: &[String]) -> Answer<Vec<String>> {
        let mut missing = Vec::new();
        for ((pool, block), of_block) in by_block(keys)? {
            let found = self.read_block(&pool, block)?;
            for (key, address) in of_block {
                if !found.as_ref().is_some_and(|f| f.spec.records.contains_key(&address)) {
                    missing.push(key);
                }
            }
        }
        Ok(missing)
    }

    fn create_all(&self, keys: &[String], value: &[u8]) -> Answer<usize> {
        let mut created = 0;
        for ((pool, block), of_block) in by_block(keys)? {
            let record = address_record(value, &pool)?;
            created += self.change_block(&pool, block, |found, _| {
                if found.is_some_and(|f| of_block.iter().any(|(_, a)| f.spec.records.contains_key(a))) {
                    return Ok(Step::Answer(0));
                }
                let mut spec = found.map_or_else(|| self.blank_block(&pool, block), |f| f.spec.clone());
                for (_, address) in &of_block {
                    spec.records.insert(*address, record.clone());
                }
                Ok(Step::Write(Box::new(spec), of_block.len()))
            })?;
        }
        Ok(created)
    }

    fn want(&self, pool: &str, _value: &[u8]) -> Answer<()> {
        // No object every owner reads: the asking is written on a few
        // blocks of other nodes' own, which their confirming read shows.
        let now = self.now.get();
        let known: Vec<Object<BlockSpec>> =
            self.blocks.borrow().values().filter(|(o, _)| o.spec.pool == pool).map(|(o, _)| o.clone()).collect();
        let known = if known.is_empty() { self.pool_blocks(pool)? } else { known };
        let mut owners: Vec<(String, IpNet)> = known
            .iter()
            .filter_map(|b| match &b.spec.state {
                BlockState::Owned(o) if !o.shared && o.node != self.node => Some((o.node.clone(), b.spec.cidr)),
                _ => None,
            })
            .collect();
        owners.sort();
        owners.dedup_by(|a, b| a.0 == b.0);
        if !owners.is_empty() {
            let start = spread(&self.node, owners.len());
            owners.rotate_left(start);
        }
        for (_, block) in owners.into_iter().take(WANT_OWNERS) {
            self.change_block(pool, block, |found, at| {
                let Some(found) = found.filter(|f| matches!(f.spec.state, BlockState::Owned(_))) else {
                    return Ok(Step::Answer(()));
                };
                let mut spec = found.spec.clone();
                // Later than any asking before: the owner lends once per mark.
                let after = spec.wanted.as_ref().map_or(Time(0), |w| Time(w.at.0 + 1));
                spec.wanted = Some(Wanted { node: self.node.clone(), at: at.max(now).max(after) });
                Ok(Step::Write(Box::new(spec), ()))
            })?;
        }
        Ok(())
    }

    fn blocks(&self, which: &[(&str, IpNet)]) -> Answer<Vec<Option<Versioned>>> {
        which
            .iter()
            .map(|(pool, block)| {
                let found = self.read_block(pool, *block)?;
                Ok(found.and_then(|f| Self::block_entry(&f, self.now.get())).map(|e| e.stored))
            })
            .collect()
    }

    fn create_record(&self, key: &str, value: &[u8]) -> Answer<Created> {
        if key.starts_with(IDENTITY_KEY_PREFIX) {
            return Err(Error::Failed(crate::sticky_not_on_kubernetes()));
        }
        let (pool, block, address) = parse_record_key(key)?;
        let record = address_record(value, &pool)?;
        self.change_block(&pool, block, |found, _| {
            if let Some(there) = found.and_then(|f| f.spec.records.get(&address)) {
                return Ok(Step::Answer(Created::Exists(Some(record_versioned(there)))));
            }
            let mut spec = found.map_or_else(|| self.blank_block(&pool, block), |f| f.spec.clone());
            spec.records.insert(address, record.clone());
            Ok(Step::Write(Box::new(spec), Created::Done(record_versioned(&record).version)))
        })
    }

    fn reclaim_block(
        &self,
        _pool: &str,
        _block: IpNet,
        _record: &[u8],
        _definition: &[u8],
    ) -> Answer<Option<(i64, Vec<super::AddressEntry>)>> {
        // Only the recovery after lost history claims back, which this
        // store does not detect yet (`marks` is none).
        Err(Error::Failed(CniError::new(
            Code::TryAgainLater,
            "claiming a block back after lost history is not done on the Kubernetes datastore",
        )))
    }

    fn recovery_name(&self) -> String {
        format!("IPDNetwork {} recovery", self.network_name())
    }

    fn quarantine(&self, _record: &crate::records::RecoveryRecord, _ttl_seconds: i64) -> Answer<bool> {
        Err(Error::Failed(CniError::new(
            Code::TryAgainLater,
            "the recovery after lost history is not done on the Kubernetes datastore",
        )))
    }

    fn records(&self, keys: &[String]) -> Answer<Vec<Option<Versioned>>> {
        let mut read: HashMap<(String, IpNet), Option<Object<BlockSpec>>> = HashMap::new();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let (pool, block, address) = parse_record_key(key)?;
            let found = match read.get(&(pool.clone(), block)) {
                Some(found) => found.clone(),
                None => {
                    let found = self.read_block(&pool, block)?;
                    read.insert((pool, block), found.clone());
                    found
                }
            };
            out.push(found.and_then(|f| f.spec.records.get(&address).map(record_versioned)));
        }
        Ok(out)
    }

    fn identity_key(&self, ifname: &str, identity: &str) -> String {
        format!("{IDENTITY_KEY_PREFIX}{}", names::identity_name(&self.network, ifname, identity))
    }

    fn identities(&self) -> Answer<Vec<(String, String, Versioned)>> {
        let labels = format!("{}={}", objects::LABEL_NETWORK, names::text(&self.network));
        let found = self.list::<IdentitySpec>(&labels)?;
        Ok(found
            .into_iter()
            .filter(|i| i.spec.network == self.network)
            .map(|i| {
                let record = identity_record(&i.spec);
                let value = to_bytes(&record);
                let stored = Versioned { version: digest_version(&[&value]), value, created: 0 };
                (i.spec.ifname.clone(), i.spec.identity.clone(), stored)
            })
            .collect())
    }

    fn change_together(
        &self,
        _changes: &[RecordChange],
        _hold_seconds: Option<i64>,
        _not_recovering: bool,
    ) -> Answer<Option<Version>> {
        Err(Error::Failed(crate::sticky_not_on_kubernetes()))
    }

    fn node_entry_of(&self, node: &str) -> Answer<Option<Versioned>> {
        let found = self.get::<NodeSpec>(&names::node_name(&self.network, node))?;
        Ok(found.filter(|f| f.spec.node == node && f.spec.network == self.network).as_ref().map(node_entry))
    }

    fn forget_node(&self, node: &str, read: &Versioned) -> Answer<bool> {
        let found = self.get::<NodeSpec>(&names::node_name(&self.network, node))?;
        match found.filter(|f| node_entry(f).version == read.version) {
            Some(found) => self.delete(&found),
            None => Ok(false),
        }
    }

    fn release_block(&self, pool: &str, block: IpNet, read: &Versioned, wait: Option<Duration>) -> Answer<bool> {
        self.change_block(pool, block, |found, now| {
            let as_read =
                found.and_then(|f| Self::block_entry(f, now)).is_some_and(|e| e.stored.version == read.version);
            let (Some(found), true) = (found, as_read) else { return Ok(Step::Answer(false)) };
            let mut spec = found.spec.clone();
            spec.wanted = None;
            match (wait, spec.state.owner().cloned()) {
                // The end is the API server's time: the Date of the answer
                // this is decided from, plus the wait (rounded up).
                (Some(wait), Some(owner)) => spec.state = BlockState::Released { owner, until: now.plus(wait) },
                (None, _) if spec.records.is_empty() => return Ok(Step::Delete(true)),
                _ => spec.state = BlockState::Unclaimed,
            }
            Ok(Step::Write(Box::new(spec), true))
        })
    }

    fn release(&self, releases: &[RecordRelease]) -> Vec<Answer<bool>> {
        let mut outcomes: Vec<Option<Answer<bool>>> = vec![None; releases.len()];
        let mut by: BTreeMap<(String, IpNet), Vec<(usize, IpAddr)>> = BTreeMap::new();
        for (i, r) in releases.iter().enumerate() {
            match parse_record_key(r.key) {
                Ok((pool, block, address)) => by.entry((pool, block)).or_default().push((i, address)),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        for ((pool, block), of_block) in by {
            // Each record's release is decided alone: one no longer as
            // written is left, and only loses its row.
            let done = self.change_block(&pool, block, |found, now| {
                let Some(found) = found else { return Ok(Step::Answer(vec![false; of_block.len()])) };
                let mut spec = found.spec.clone();
                let mut released = Vec::with_capacity(of_block.len());
                for (i, address) in &of_block {
                    let r = &releases[*i];
                    let as_written = spec.records.get(address).is_some_and(|there| same_record(there, r.value));
                    if as_written {
                        match &r.then {
                            Some(then) => drop(spec.records.insert(*address, address_record(then, &pool)?)),
                            None => drop(spec.records.remove(address)),
                        }
                    }
                    released.push(as_written);
                }
                if !released.iter().any(|r| *r) {
                    return Ok(Step::Answer(released));
                }
                if spec.records.is_empty() && Self::nobodys(Some(found), now) {
                    return Ok(Step::Delete(released));
                }
                Ok(Step::Write(Box::new(spec), released))
            });
            match done {
                Ok(released) => {
                    for ((i, _), r) in of_block.iter().zip(released) {
                        outcomes[*i] = Some(Ok(r));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "{} cluster record(s) of IPDBlock {} stay to be released by a later call: {}",
                        of_block.len(),
                        self.block_name(&pool, block),
                        CniError::from(e.clone())
                    );
                    for (i, _) in &of_block {
                        outcomes[*i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        outcomes.into_iter().map(|o| o.unwrap_or(Ok(false))).collect()
    }
}

const IDENTITY_KEY_PREFIX: &str = "ipdidentities/";
const RECORD_KEY_PREFIX: &str = "ipdblocks/";

/// A record's name in the node database's rows: its pool, block and
/// address in clear (`ipdblocks/blue/10.50.0.0/27/10.50.0.9`).
fn record_key(pool: &str, block: IpNet, address: IpAddr) -> String {
    format!("{RECORD_KEY_PREFIX}{pool}/{block}/{address}")
}

fn parse_record_key(key: &str) -> Answer<(String, IpNet, IpAddr)> {
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

type BlockKeys = Vec<((String, IpNet), Vec<(String, IpAddr)>)>;

/// `keys` grouped by their block, in order.
fn by_block(keys: &[String]) -> Answer<BlockKeys> {
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

fn resource<K: ObjectKind>() -> Resource {
    Resource { group: objects::GROUP, version: objects::VERSION, plural: K::PLURAL }
}

fn typed<K: ObjectKind + DeserializeOwned>(value: serde_json::Value) -> Answer<Object<K>> {
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
    serde_json::from_value(value).map_err(|e| {
        Error::Failed(CniError::new(
            Code::TryAgainLater,
            format!("{} {} does not read as this plugin writes it: {e}", K::KIND, shown(&name)),
        ))
    })
}

fn failure(e: kube::Error) -> Error {
    match e {
        kube::Error::Unavailable(why) => Error::Unavailable(Unreachable { store: STORE, why }),
        e => Error::Failed(e.to_cni(KUBECONFIG_FIELD)),
    }
}

fn bug(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed(CniError::new(Code::Io, format!("{}: {e}", shown(what))))
}

fn not_ours(name: &str, expected: &str) -> Error {
    Error::Failed(CniError::new(
        Code::TryAgainLater,
        format!(
            "object {} is not the one its name stands for ({expected}): a hash collision, or made by hand; remove \
             it",
            shown(name)
        ),
    ))
}

/// A version from the digest of `parts`: equal for equal contents.
fn digest_version(parts: &[&[u8]]) -> Version {
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
fn pause(round: u32) {
    let most = (1u64 << round.min(16)).min(MAX_PAUSE_MS);
    let Ok(random) = random_claim() else { return };
    std::thread::sleep(Duration::from_micros(random as u64 % (most * 1000)));
}

/// A claim's id: a random positive number, as unique as etcd's revisions
/// are for the claims of one block.
fn random_claim() -> Answer<i64> {
    use std::io::Read as _;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Failed(CniError::new(Code::Io, format!("/dev/urandom: {e}"))))?;
    Ok((i64::from_be_bytes(bytes) & i64::MAX).max(1))
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

fn node_entry(object: &Object<NodeSpec>) -> Versioned {
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
fn etcd_record(record: &Record) -> AddressRecord {
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

fn record_versioned(record: &Record) -> Versioned {
    let value = to_bytes(&etcd_record(record));
    Versioned { version: digest_version(&[&value]), value, created: 0 }
}

/// A record's JSON as `node/` writes it, as this store's record.
fn address_record(value: &[u8], pool: &str) -> Answer<Record> {
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
fn same_record(there: &Record, value: &[u8]) -> bool {
    serde_json::from_slice::<AddressRecord>(value).is_ok_and(|written| etcd_record(there) == written)
}

fn identity_record(spec: &IdentitySpec) -> IdentityRecord {
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
fn spread(node: &str, n: usize) -> usize {
    let Version(v) = digest_version(&[node.as_bytes()]);
    (v as u64 % n as u64) as usize
}
