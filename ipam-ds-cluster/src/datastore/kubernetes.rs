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
//! 409 and decides again from what it reads (`KubeStore::change_block`).
//! The pool definitions are one `IPDNetwork`, whose entries the schema keeps
//! unchanged once written; who runs as a node name is its `IPDNode`.
//!
//! Versions: a block's record is at `Version(claim)` while its claim stands
//! unchanged (etcd's "not written since its creation"), an address record's
//! version is a digest of what it holds, and an object's `resourceVersion`
//! is compared by the API server itself, never by this code.
//!
//! The parts: `requests` (typed requests, the `Date` as the store's clock,
//! refusals in the protocol's terms), `blocks` (the read-decide-write step
//! on a block, and a block as etcd's layout would hold it), `shapes`
//! (records in the node database's and etcd's terms).
//!
//! and `identities` (workload identities: an `IPDIdentity` each, changed
//! with its addresses' records in an order a kill -9 cannot break).
//!
//! A backup restored under the API server is seen per object (`history`):
//! an object this node knows shown at a lower generation under the same uid.

mod blocks;
mod collect;
mod history;
mod identities;
pub mod names;
pub mod objects;
mod requests;
mod shapes;

pub use collect::EndedIdentity;

use blocks::{record_at, Step};
use identities::{identity_versioned, is_identity_key};
use requests::{bug, not_ours};
use shapes::{
    address_record, by_block, digest_version, node_entry, parse_record_key, random_claim, record_key, record_versioned,
    same_record, seconds, spread,
};

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use shared::store::{StoreHandle, Tx};
use shared::{CniError, Code};

use super::{
    Answer, BlockClaim, BlockIs, ConfirmRead, Created, Datastore, Error, GrantRefusal, IndexedPool, Outcome,
    PoolConfirm, PoolIndex, PoolRead, PoolRecords, RecordChange, RecordRelease, Reservation, ReserveRefusal, Swap,
    Version, Versioned,
};
use crate::kube::{self, Client};
use crate::records::{to_bytes, BlockRecord, NodeEntry, PoolRecord};
use crate::rows::ClusterRows;
use objects::{
    BlockSpec, BlockState, IdentitySpec, NetworkSpec, NodeSpec, Object, Owner, PoolDefinition, Recovery, Time, Wanted,
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
/// A confirming read of at most this many blocks reads each (GET), of more
/// one LIST of the node's blocks (see `confirm`).
const CONFIRM_BY_GET_MAX: usize = 4;
/// Owners asked to lend by a node that found no room.
const WANT_OWNERS: usize = 4;
/// Shared blocks as this node last wrote them are kept in the node
/// database between calls (notes `kube-block:<name>`): the next grant or
/// release in one is a single update at that resourceVersion (a 409 reads
/// the block again), not a read and an update.
const KEPT_BLOCK_NOTE: &str = "kube-block:";

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
    /// The blocks this call wrote or deleted: kept at its end (see
    /// [`KEPT_BLOCK_NOTE`]).
    written: RefCell<BTreeSet<String>>,
    /// Whether the reads of a pool's blocks for a grant in another node's
    /// shared block, a borrowing or a lending request are the API server's
    /// cache (answered at once, possibly behind): everything decided from
    /// them is written by a conditioned update, which a stale read makes a
    /// 409 and a fresh read. The plugins', not the operator's tool (whose
    /// release-node must see every record), nor a claim's read (which
    /// adopts the blocks it shows as this node's).
    cached_lists: bool,
    /// The plugins': what this node saw of its objects (see `history`).
    seen: Option<RefCell<history::Seen>>,
    seen_changed: Cell<bool>,
    /// What showed, in this call, that the store lost history.
    lost: RefCell<Option<String>>,
    /// Whether this call put the network in recovery (or found it so).
    recovering: Cell<bool>,
    /// The identities this call read or wrote, by object name: a change
    /// expected at the version read writes at it without reading it again
    /// (the update's resourceVersion is the compare).
    identities_seen: RefCell<HashMap<String, Object<IdentitySpec>>>,
}

/// A shared block as kept between calls.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptBlock {
    /// The `Date` of the answer that showed it.
    date: i64,
    object: Object<BlockSpec>,
}

impl KubeStore {
    /// The store of `settings`, with the shared blocks an earlier call of
    /// this node kept in `store`; with no store, the operator's tool's
    /// (whose reads are all consistent).
    pub fn open(
        settings: &kube::Settings,
        cluster: &crate::settings::Settings,
        network: &str,
        store: Option<&mut StoreHandle>,
    ) -> shared::Result<Self> {
        let client = Client::new(settings).map_err(|e| e.to_cni(KUBECONFIG_FIELD))?;
        let plugin = store.is_some();
        let (kept, seen) = match store {
            Some(store) => {
                let (kept, seen) = kept_blocks(store, network)?;
                (kept, Some(RefCell::new(seen)))
            }
            None => (Vec::new(), None),
        };
        let kube = KubeStore {
            client,
            network: network.to_string(),
            node: cluster.node.clone(),
            blocks: RefCell::new(HashMap::new()),
            network_object: RefCell::new(None),
            node_object: RefCell::new(None),
            now: Cell::new(Time(0)),
            written: RefCell::new(BTreeSet::new()),
            cached_lists: plugin,
            seen,
            seen_changed: Cell::new(false),
            lost: RefCell::new(None),
            recovering: Cell::new(false),
            identities_seen: RefCell::new(HashMap::new()),
        };
        for KeptBlock { date, object } in kept {
            // One that is not what its name says is left to a fresh read.
            let name = object.metadata.name.clone();
            if kube.block_name(&object.spec.pool, object.spec.cidr) == name && object.spec.network == network {
                kube.blocks.borrow_mut().insert(name, (object, Time(date)));
            }
        }
        Ok(kube)
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
            self.witness("IPDNetwork", &found.metadata, true);
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

    /// The network's recovery while it lasts at `now` (as etcd's
    /// `_recovery` record, for the node's messages).
    fn recovery_at(network: &Object<NetworkSpec>, now: Time) -> Option<Versioned> {
        let r = network.spec.recovery.as_ref().filter(|r| !r.until.is_past_at(now))?;
        let record = crate::records::RecoveryRecord { node: r.node.clone(), at: r.until.0, from: 1, to: 0 };
        let value = to_bytes(&record);
        Some(Versioned { version: digest_version(&[&value]), value, created: 0 })
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
            self.witness("IPDNode", &found.metadata, true);
        }
        self.node_object.replace(found.clone());
        Ok(found.as_ref().map(node_entry))
    }
    /// Makes `block` this node's (`record`: whose, shared or not) while it
    /// is nobody's, with a claim id of its own: the claim id and the
    /// records already in it. None: somebody has it.
    fn claim_if_nobodys(
        &self,
        pool: &str,
        block: IpNet,
        record: &[u8],
    ) -> Answer<Option<(i64, Vec<super::AddressEntry>)>> {
        let record: BlockRecord = serde_json::from_slice(record).map_err(|e| bug(pool, e))?;
        let claim = random_claim()?;
        let claimed = self.change_block(pool, block, |found, now| {
            if !Self::nobodys(found, now) {
                return Ok(Step::Answer(false));
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
            Ok(Step::Write(Box::new(spec), true))
        })?;
        if !claimed {
            return Ok(None);
        }
        let name = self.block_name(pool, block);
        let records = self.blocks.borrow().get(&name).map(|(o, at)| self.address_entries(o, *at)).unwrap_or_default();
        Ok(Some((claim, records)))
    }
}

impl Datastore for KubeStore {
    fn marks(&self) -> Option<(i64, i64)> {
        // See `history`: the node keeps 1 as its watermark; 0 is lost history.
        self.seen.as_ref()?;
        Some((if self.lost.borrow().is_some() { 0 } else { 1 }, 1))
    }

    fn history_loss(&self, _lowest: i64, _seen: i64) -> String {
        let what = self.lost.borrow().clone().unwrap_or_default();
        format!(
            "the Kubernetes API server lost history: {what} (its etcd restored from an older backup, or the object \
             rewritten by hand)"
        )
    }

    fn claims_grow(&self) -> bool {
        false
    }

    fn forget_marks(&self) {}

    fn finish(&self, store: &mut StoreHandle) {
        self.keep_written(store);
        let counts = self.client.counts();
        tracing::debug!("Kubernetes API requests: {} ({} connection(s))", counts.requests, counts.connections);
    }

    fn writes_take_turns(&self) -> bool {
        self.seen.is_some()
    }

    fn resume_blocks_of(&self, store: &mut StoreHandle, keys: &[&str]) {
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|key| parse_record_key(key).ok())
            .map(|(pool, block, _)| self.block_name(&pool, block))
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let note = format!("{KEPT_BLOCK_NOTE}{name}");
            match store.read(|tx| tx.note(&note)) {
                Ok(Some(text)) => {
                    let kept = serde_json::from_str::<KeptBlock>(&text).ok();
                    // Used as any block known but not read by this very step:
                    // written at its resourceVersion, and read again on a 409.
                    if let Some(KeptBlock { date, object }) = kept.filter(|k| k.object.metadata.name == name) {
                        self.blocks.borrow_mut().insert(name, (object, Time(date)));
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::debug!("block {name} as the last call kept it is not read: {e}"),
            }
        }
    }

    fn keep_written(&self, store: &mut StoreHandle) {
        let mut written = self.written.borrow_mut();
        if written.is_empty() && !self.seen_changed.get() {
            return;
        }
        let blocks = self.blocks.borrow();
        // One write: the shared blocks written, kept for the next call,
        // and what this call saw of this node's objects (`history`).
        let keep = |tx: &Tx| {
            for name in written.iter() {
                let note = format!("{KEPT_BLOCK_NOTE}{name}");
                let shared = |o: &&(Object<BlockSpec>, Time)| o.0.spec.state.owner().is_some_and(|o| o.shared);
                match blocks.get(name).filter(shared) {
                    Some((object, at)) => {
                        let kept = KeptBlock { date: at.0, object: object.clone() };
                        tx.set_note(&note, &serde_json::to_string(&kept).unwrap_or_default())?;
                    }
                    None => tx.drop_note(&note)?,
                }
            }
            self.keep_seen(tx)
        };
        match store.write(keep) {
            Ok(seen_kept) => {
                written.clear();
                if seen_kept {
                    self.seen_changed.set(false);
                }
            }
            Err(e) => {
                tracing::warn!("what this call saw and wrote of the cluster's blocks is not kept for the next: {e}")
            }
        }
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
                self.witness("IPDNode", &object.metadata, true);
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
        let recovery = network.as_ref().and_then(|n| Self::recovery_at(n, self.now.get()));
        let now = self.now.get();
        let blocks = self.pool_blocks(pool, false)?.iter().filter_map(|b| Self::block_entry(b, now)).collect();
        let entry = self.read_node()?;
        Ok(PoolRead { indexed: definition.is_some(), definition, blocks, entry, recovery })
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
        if let Some(written) = &written {
            self.witness("IPDNetwork", &written.metadata, true);
        }
        self.network_object.replace(written);
        Ok(defined)
    }

    fn claim_block(&self, pool: &str, block: IpNet, record: &[u8], definition: &Versioned) -> Answer<BlockClaim> {
        // The definition the caller decided from is the one this call read:
        // the schema keeps a pool's entry unchanged, so only another object
        // under the network's name (deleted and made again) can differ.
        let network = self.known_network()?;
        let current = network.as_ref().and_then(|n| Self::definition_of(n, pool));
        // Nodes re-claim their own blocks first after lost history.
        let recovering = network.as_ref().and_then(|n| Self::recovery_at(n, self.now.get())).is_some();
        if recovering || current.as_ref().map(|c| c.version) != Some(definition.version) {
            return Ok(BlockClaim::Lost {
                definition: self.read_network()?.and_then(|n| Self::definition_of(&n, pool)),
            });
        }
        Ok(match self.claim_if_nobodys(pool, block, record)? {
            Some((created, records)) => BlockClaim::Claimed { created, records },
            None => BlockClaim::Lost { definition: current },
        })
    }

    fn block_records(&self, pool: &str, block: IpNet) -> Answer<Vec<super::AddressEntry>> {
        Ok(self.read_block(pool, block)?.map(|o| self.address_entries(&o, self.now.get())).unwrap_or_default())
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
        // Reads with no resourceVersion are consistent: never a stale copy.
        // A GET is served from the API server's etcd at once; a LIST from
        // its cache once that has caught up with etcd, which after a write
        // of anything (in a cluster: all the time) waits for the cache's
        // next progress notification, up to 100 ms. So the few blocks of a
        // node are read one by one, and only many by one LIST.
        let entry = self.read_node()?;
        let asked: usize = pools.iter().map(|(_, blocks)| blocks.len()).sum();
        let mine: HashMap<String, Object<BlockSpec>> = if asked <= CONFIRM_BY_GET_MAX {
            HashMap::new()
        } else {
            let labels = format!(
                "{}={},{}={}",
                objects::LABEL_NETWORK,
                names::text(&self.network),
                objects::LABEL_NODE,
                names::text(&self.node)
            );
            self.list::<BlockSpec>(&labels, false)?
                .into_iter()
                .map(|b| self.keep_block(b, true).map(|b| (b.metadata.name.clone(), b)))
                .collect::<Answer<_>>()?
        };
        let mut read = Vec::with_capacity(pools.len());
        for (pool, blocks) in pools {
            let mut c = PoolConfirm { wanted: 0, blocks: Vec::with_capacity(blocks.len()) };
            for block in blocks {
                // Read alone, or not among this node's listed: another's now,
                // or nobody's.
                let found = match mine.get(&self.block_name(pool, *block)) {
                    Some(found) => Some(found.clone()),
                    None => self.read_block(pool, *block)?,
                };
                let found = match found {
                    Some(found) => Some(self.without_ended_holds(pool, found)?),
                    None => None,
                };
                let now = self.now.get();
                match found {
                    Some(found) => {
                        let ours = found.spec.state.owner().is_some_and(|o| o.node == self.node);
                        if let (true, Some(wanted)) = (ours, &found.spec.wanted) {
                            c.wanted = c.wanted.max(wanted.at.0);
                        }
                        let entry = Self::block_entry(&found, now).map(|e| e.stored);
                        c.blocks.push((entry, self.address_entries(&found, now)));
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
        if is_identity_key(key) {
            return self.identity(key);
        }
        let (pool, block, address) = parse_record_key(key)?;
        let found = self.read_block(&pool, block)?;
        Ok(found.and_then(|o| record_at(&o.spec, address, self.now.get()).map(record_versioned)))
    }

    fn delete_record(&self, key: &str, version: Version) -> Answer<bool> {
        if is_identity_key(key) {
            return self.delete_identity(key, version);
        }
        let (pool, block, address) = parse_record_key(key)?;
        self.change_block(&pool, block, |found, now| {
            let as_read =
                |f: &&Object<BlockSpec>| record_at(&f.spec, address, now).map(|r| record_versioned(r).version);
            let Some(found) = found.filter(|f| as_read(f) == Some(version)) else {
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
                    let now = self.now.get();
                    (record_at(&o.spec, r.address, now).map(record_versioned), Self::block_entry(&o, now))
                });
                let definition = network.and_then(|n| Self::definition_of(&n, r.pool));
                return Ok(Outcome::Refused(ReserveRefusal { holder, owner: owner.map(|o| o.stored), definition }));
            }
        }
        let record = address_record(r.value, r.pool)?;
        self.change_block(r.pool, r.block, |found, now| {
            let holder = found.and_then(|f| record_at(&f.spec, r.address, now));
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
        self.change_block(&pool, block, |found, now| {
            let as_read =
                |f: &&Object<BlockSpec>| record_at(&f.spec, address, now).map(|r| record_versioned(r).version);
            // Not from a block marked recovering (see `mark_recovering`).
            let usable = |f: &&Object<BlockSpec>| as_read(f) == Some(version) && !Self::recovering_at(f, now);
            let Some(found) = found.filter(usable) else {
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
            let free = found.is_some_and(|f| record_at(&f.spec, address, now).is_none());
            if found.is_some_and(|f| Self::recovering_at(f, now)) {
                return Ok(Step::Answer(Outcome::Refused(GrantRefusal {
                    block: entry.map(|e| e.stored),
                    records: Vec::new(),
                    recovering: true,
                })));
            }
            match found {
                Some(found) if free && entry.as_ref().is_some_and(|e| e.stored.version == block_at) => {
                    let mut spec = found.spec.clone();
                    spec.records.insert(address, record.clone());
                    Ok(Step::Write(Box::new(spec), Outcome::Done))
                }
                _ => Ok(Step::Answer(Outcome::Refused(GrantRefusal {
                    block: entry.map(|e| e.stored),
                    records: found.map(|f| self.address_entries(f, now)).unwrap_or_default(),
                    recovering: false,
                }))),
            }
        })
    }

    fn address_records(&self, pool: &str) -> Answer<Vec<super::AddressEntry>> {
        let found = self.pool_blocks(pool, self.cached_lists)?;
        let now = self.now.get();
        Ok(found.iter().flat_map(|b| self.address_entries(b, now)).collect())
    }

    fn pool_records(&self, pool: &str) -> Answer<PoolRecords> {
        let found = self.pool_blocks(pool, self.cached_lists)?;
        let now = self.now.get();
        Ok(PoolRecords {
            blocks: found.iter().filter_map(|b| Self::block_entry(b, now)).collect(),
            records: found.iter().flat_map(|b| self.address_entries(b, now)).collect(),
            recovering: found.iter().any(|b| Self::recovering_at(b, now)),
        })
    }

    fn missing(&self, keys: &[String]) -> Answer<Vec<String>> {
        let mut missing = Vec::new();
        for ((pool, block), of_block) in by_block(keys)? {
            let found = self.read_block(&pool, block)?;
            for (key, address) in of_block {
                if found.as_ref().is_none_or(|f| record_at(&f.spec, address, self.now.get()).is_none()) {
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
            created += self.change_block(&pool, block, |found, now| {
                if found.is_some_and(|f| of_block.iter().any(|(_, a)| record_at(&f.spec, *a, now).is_some())) {
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
        let known = if known.is_empty() { self.pool_blocks(pool, self.cached_lists)? } else { known };
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
        if is_identity_key(key) {
            return self.create_identity(key, value);
        }
        let (pool, block, address) = parse_record_key(key)?;
        let record = address_record(value, &pool)?;
        self.change_block(&pool, block, |found, now| {
            if let Some(there) = found.and_then(|f| record_at(&f.spec, address, now)) {
                return Ok(Step::Answer(Created::Exists(Some(record_versioned(there)))));
            }
            let mut spec = found.map_or_else(|| self.blank_block(&pool, block), |f| f.spec.clone());
            spec.records.insert(address, record.clone());
            Ok(Step::Write(Box::new(spec), Created::Done(record_versioned(&record).version)))
        })
    }

    fn reclaim_block(
        &self,
        pool: &str,
        block: IpNet,
        record: &[u8],
        definition: &[u8],
    ) -> Answer<Option<(i64, Vec<super::AddressEntry>)>> {
        // The block holds this node's leases: claimed back whatever else is
        // going on, as long as the pool is still cut as the node cuts it.
        let cut: PoolRecord = serde_json::from_slice(definition).map_err(|e| bug(pool, e))?;
        let network = self.read_network()?;
        if !network.is_some_and(|n| n.spec.pools.iter().any(|p| p.name == pool && p.cut == cut)) {
            return Ok(None);
        }
        self.claim_if_nobodys(pool, block, record)
    }

    fn recovery_name(&self) -> String {
        format!("IPDNetwork {} recovery", self.network_name())
    }

    fn recovery(&self) -> Answer<Option<Versioned>> {
        // Read now, not as known: a take-over decides from it.
        let network = self.read_network()?;
        Ok(network.and_then(|n| Self::recovery_at(&n, self.now.get())))
    }

    fn quarantine(&self, record: &crate::records::RecoveryRecord, ttl_seconds: i64) -> Answer<bool> {
        let wait = Duration::from_secs(ttl_seconds.max(1) as u64);
        let mut seen: String = self.lost.borrow().clone().unwrap_or_default();
        seen.truncate(seen.floor_char_boundary(1024));
        for _ in 0..ROUNDS {
            // Recovering from here on, whoever wrote it: what this call
            // reads now is the baseline of the next (see `history`).
            let Some(network) = self.read_network()? else {
                self.recovering.set(true);
                return Ok(false);
            };
            let now = self.now.get();
            if let Some(until) = network.spec.recovery.as_ref().map(|r| r.until).filter(|u| !u.is_past_at(now)) {
                self.recovering.set(true);
                self.mark_recovering(until)?;
                return Ok(false);
            }
            let mut spec = network.spec.clone();
            let until = now.plus(wait);
            spec.recovery = Some(Recovery { node: record.node.clone(), seen: seen.clone(), until });
            if let Some(written) = self.replace(&network.with_spec(spec))? {
                self.witness("IPDNetwork", &written.metadata, true);
                self.network_object.replace(Some(written));
                self.recovering.set(true);
                self.mark_recovering(until)?;
                return Ok(true);
            }
        }
        Err(Error::Failed(CniError::new(
            Code::TryAgainLater,
            format!("{} kept changing under this call: try again", self.recovery_name()),
        )))
    }

    fn records(&self, keys: &[String]) -> Answer<Vec<Option<Versioned>>> {
        let mut read: HashMap<(String, IpNet), Option<Object<BlockSpec>>> = HashMap::new();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            if is_identity_key(key) {
                out.push(self.identity(key)?);
                continue;
            }
            let (pool, block, address) = parse_record_key(key)?;
            let found = match read.get(&(pool.clone(), block)) {
                Some(found) => found.clone(),
                None => {
                    let found = self.read_block(&pool, block)?;
                    read.insert((pool, block), found.clone());
                    found
                }
            };
            out.push(found.and_then(|f| record_at(&f.spec, address, self.now.get()).map(record_versioned)));
        }
        Ok(out)
    }

    fn identity_key(&self, ifname: &str, identity: &str) -> String {
        identities::identity_key(ifname, identity)
    }

    fn identities(&self) -> Answer<Vec<(String, String, Versioned)>> {
        let labels = format!("{}={}", objects::LABEL_NETWORK, names::text(&self.network));
        let found = self.list::<IdentitySpec>(&labels, false)?;
        let now = self.now.get();
        Ok(found
            .into_iter()
            .filter(|i| i.spec.network == self.network && !identities::ended(i, now))
            .map(|i| (i.spec.ifname.clone(), i.spec.identity.clone(), identity_versioned(&i)))
            .collect())
    }

    fn change_together(
        &self,
        changes: &[RecordChange],
        hold_seconds: Option<i64>,
        not_recovering: bool,
    ) -> Answer<Option<Version>> {
        // etcd compares `_recovery` absent in the change's transaction; the
        // API server has none across objects, so the network is read just
        // before (a recovery written between the two reads as one written
        // just after the change, which etcd allows as well).
        if not_recovering && (self.recovering.get() || self.recovery()?.is_some()) {
            return Ok(None);
        }
        self.change_identity_together(changes, hold_seconds)
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
                    let as_written =
                        record_at(&found.spec, *address, now).is_some_and(|there| same_record(there, r.value));
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
                Ok(Self::written(Some(found), spec, now, released))
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

/// The shared blocks of `network` an earlier call kept (ones that do not
/// read are left out: they are read afresh when needed), and what earlier
/// calls saw of this node's objects.
fn kept_blocks(store: &mut StoreHandle, network: &str) -> shared::Result<(Vec<KeptBlock>, history::Seen)> {
    // A block's name starts with its network's part and a dot, which no
    // network's part holds.
    let prefix = format!("{KEPT_BLOCK_NOTE}{}.", names::text(network));
    store.read(|tx| {
        let mut kept = Vec::new();
        for name in tx.notes_with_prefix(&prefix)? {
            if let Some(text) = tx.note(&name)? {
                kept.extend(serde_json::from_str::<KeptBlock>(&text).ok());
            }
        }
        Ok((kept, history::seen_before(tx, network)?))
    })
}

#[cfg(test)]
mod tests;
