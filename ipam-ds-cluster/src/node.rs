//! This node in the cluster: its blocks and address records, kept in step
//! between etcd (what the cluster holds) and the node database (what this
//! node holds inside its blocks, and which etcd records are its own).
//!
//! The rule that makes a kill -9 harmless: a node database row names every
//! etcd record of this node before etcd has it (an address record is written
//! `writing` first) or is recovered from etcd (a block claimed just before a
//! kill is adopted at the next claim, which reads every block's owner); a row
//! goes only after its etcd record is deleted. So nothing in etcd is this
//! node's without the node knowing, and DEL, GC and `release-node` find it.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use shared::addr::Family;
use shared::args::Attachment;
use shared::pool::Pool;
use shared::result::IpamResult;
use shared::store::{unix_now, Lease, LeaseFilter, StoreHandle, Tx};
use shared::{suite_delegate, CniError, Code, Result};

use crate::blocks::Geometry;
use crate::clock::{BootClock, BOOT_NOTE};
use crate::datastore::etcd::EtcdStore;
use crate::datastore::kubernetes::KubeStore;
use crate::datastore::{self, retry, Attempt, BlockClaim, Datastore, Swap, Versioned};
use crate::records::{
    shown, shown_bytes, to_bytes, to_text, AddressRecord, BlockRecord, Kind, NodeEntry, PoolRecord, RecoveryRecord,
};
use crate::rows::{BlockState, ClusterRows, NodeBlock, NodeRecord, RecordState};
use crate::settings::{Settings, Store};

// The impl of Node is split by concern; each part sees this module's imports
// and items (`use super::*`).
mod add;
mod claims;
mod confirm;
mod plan;
mod records;
mod recovery;
mod release_node;
mod sharing;
mod sticky;
#[cfg(test)]
mod tests;

pub use release_node::{release_node_identities, IdentityRelease};
pub use sticky::Sticking;

use claims::{check_definition, gave_back_note};
use plan::{PoolFacts, Step};
use records::RecordWrite;

/// How many unclaimed blocks one call tries before reading the pool again.
const CLAIM_ATTEMPTS: usize = 4;
/// How many times a call reads the pool's blocks while others claim them.
const CLAIM_ROUNDS: usize = 3;
/// How long a pool found with no block left to claim is taken as claimed
/// out: only the order of the search changes (see [`plan::plan`]).
const CLAIMED_OUT_FOR: Duration = Duration::from_secs(10);
/// The identity of this node database, made with it: what etcd's entry of
/// the node name and the node's block records carry.
const DB_NOTE: &str = "node-db";

/// The note of the highest etcd revision this node saw for `network`: an
/// answer below it means etcd lost history.
fn revision_note(network: &str) -> String {
    format!("etcd-revision:{network}")
}

/// The note of when (boot id and boot-time milliseconds) a claim of this
/// node last found no block of `pool` of `network` left to claim.
fn claimed_out_note(network: &str, pool: &str) -> String {
    format!("claimed-out:{network}:{pool}")
}

/// The note of the offlineGrace (milliseconds) this node last registered in
/// etcd for `network`.
fn grace_note(network: &str) -> String {
    format!("registered-grace:{network}")
}

/// Who a published lease's record says added it: no ADD's rollback releases it.
const RECOVERED: &str = "recovered";

/// A node of the cluster, for one call on one network.
pub struct Node<'s> {
    pub settings: &'s Settings,
    pub network: String,
    datastore: Box<dyn Datastore + 's>,
    /// The clock that times confirmations, read at first need (DEL, GC
    /// and CHECK never need it).
    clock: OnceCell<BootClock>,
    /// This node database's identity ([`DB_NOTE`]).
    pub db: String,
}

/// One call of this node on the cluster: the node, and its database for
/// the call. It finishes however the verb returns (not on a panic): what the next call
/// can reuse (the datastore's auth token) is kept and what the call cost
/// the datastore is logged, when it is dropped.
pub struct Session<'s> {
    pub node: Node<'s>,
    pub store: &'s mut StoreHandle,
}

impl<'s> Session<'s> {
    /// The node on the datastore its settings name.
    pub fn open(settings: &'s Settings, network: &str, store: &'s mut StoreHandle) -> Result<Session<'s>> {
        let node = Node::new(settings, network, store)?;
        Ok(Session { node, store })
    }

    /// The node over `datastore` (tests: a store in memory).
    pub fn over(
        settings: &'s Settings,
        network: &str,
        store: &'s mut StoreHandle,
        datastore: Box<dyn Datastore + 's>,
    ) -> Result<Session<'s>> {
        let node = Node::on(settings, network, store, datastore)?;
        Ok(Session { node, store })
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // Not while a panic unwinds (the plugin turns it into an error
        // object): nothing is written then, and a second panic here would
        // abort before that answer.
        if !std::thread::panicking() {
            self.node.finish(self.store);
        }
    }
}

/// See [`Node::offline_window`].
pub struct OfflineWindow<'n> {
    clock: &'n BootClock,
    boot: Option<String>,
    grace: Duration,
}

impl OfflineWindow<'_> {
    pub fn allows(&self, b: &NodeBlock) -> bool {
        // A shared block is never used without etcd: what others hand out in
        // it is known only there.
        b.state == BlockState::Owned && !b.shared && self.clock.within(self.boot.as_deref(), b.confirmed, self.grace)
    }
}

/// Every claimed block of a pool, with its record as read.
type Owners = HashMap<IpNet, (BlockRecord, Versioned)>;

/// What etcd said of this node's blocks of one pool.
struct Confirmed {
    /// Blocks still ours, with what others hold in them.
    ours: Vec<NodeBlock>,
    /// Blocks etcd no longer shows as ours.
    lost: Vec<(NodeBlock, String, Option<Versioned>)>,
    /// The mark of the pool's `wanted` request: a node found no room.
    wanted: i64,
    /// Lent records in our blocks that name another node: lent by a former
    /// owner (given back by a borrower after the block changed hands).
    stale: Vec<datastore::AddressEntry>,
}

/// Addresses lent out are held in the lender's database under this
/// network (no real network has a '/'), so that its allocators skip them
/// and a GC of the real network does not free them.
pub fn lent_network(network: &str) -> String {
    format!("{network}/lent")
}

fn lend_holder(network: &str) -> Attachment {
    Attachment { network: lent_network(network), container_id: "cluster".into(), ifname: "lent".into() }
}

impl<'s> Node<'s> {
    /// The client, with the auth token an earlier call saved.
    pub fn new(settings: &'s Settings, network: &str, store: &mut StoreHandle) -> Result<Node<'s>> {
        let db = database_id(store)?;
        let datastore: Box<dyn Datastore> = match &settings.store {
            Store::Etcd { client, prefix } => Box::new(EtcdStore::open(client, prefix, settings, network, store)?),
            Store::Kubernetes(kube) => Box::new(KubeStore::open(kube, settings, network, Some(store))?),
        };
        Ok(Node { settings, network: network.to_string(), datastore, clock: OnceCell::new(), db })
    }

    /// The node over `datastore`.
    fn on(
        settings: &'s Settings,
        network: &str,
        store: &mut StoreHandle,
        datastore: Box<dyn Datastore + 's>,
    ) -> Result<Node<'s>> {
        let db = database_id(store)?;
        Ok(Node { settings, network: network.to_string(), datastore, clock: OnceCell::new(), db })
    }

    /// Which blocks may be allocated in without etcd: confirmed in this boot
    /// within offlineGrace, the smaller of this call's and the one last
    /// registered in etcd (a grace raised while etcd is away is not what
    /// `release-node` waits out).
    pub fn offline_window(&self, tx: &Tx) -> Result<OfflineWindow<'_>> {
        let registered = tx.note(&grace_note(&self.network))?.and_then(|n| n.parse::<u64>().ok());
        let grace = registered
            .map_or(self.settings.offline_grace, |ms| Duration::from_millis(ms).min(self.settings.offline_grace));
        Ok(OfflineWindow { clock: self.clock(), boot: tx.note(BOOT_NOTE)?, grace })
    }

    /// What etcd's entry of this node name must say.
    fn entry(&self) -> NodeEntry {
        NodeEntry {
            db: self.db.clone(),
            offline_grace: self.settings.offline_grace.as_secs_f64(),
            timeout: self.settings.call_timeout.as_secs_f64(),
        }
    }

    /// Makes etcd's entry of this node name this database's, with this
    /// call's settings (`found`: the entry as just read). Error 7 when
    /// another node database runs under the name.
    fn register(&self, found: Option<Versioned>) -> Result<()> {
        let key = self.datastore.node_entry_name();
        let entry = self.entry();
        let mut found = found;
        let registered = retry(CLAIM_ROUNDS, || {
            if let Some(stored) = &found {
                match serde_json::from_slice::<NodeEntry>(&stored.value) {
                    Ok(theirs) if theirs == entry => return Ok(Attempt::Done(())),
                    Ok(theirs) if theirs.db != self.db => return Err(self.another_database(&theirs.db, &key)),
                    // Our entry with other settings, or one that does not read.
                    _ => {}
                }
            }
            match self.datastore.put_node_entry(&entry, found.as_ref())? {
                Swap::Done => {
                    tracing::info!(
                        "node {} is this node database's in the cluster's store ({key})",
                        self.settings.node
                    );
                    Ok(Attempt::Done(()))
                }
                Swap::Conflict(now) => {
                    found = now;
                    Ok(Attempt::Conflict)
                }
            }
        })?;
        registered.ok_or_else(|| {
            CniError::new(Code::TryAgainLater, format!("this node's entry {key} keeps changing: try again"))
        })
    }

    /// Two node databases under one node name would share blocks and hand
    /// out the same addresses: cloned hosts, or a host name every image has.
    fn another_database(&self, theirs: &str, key: &str) -> CniError {
        let node = &self.settings.node;
        CniError::config(
            "ipam.cluster.node",
            format!(
                "node name {node:?} is in use by another node database ({}, etcd key {key}; this one is {}): two \
                 hosts run under this name, or this host's database was replaced. Give each host a name of its own \
                 (ipam.cluster.node or nodeFile); if this host's database was replaced, first run \
                 'ipam-delegated cluster --conf <conflist> release-node {node}'",
                shown(theirs),
                self.db
            ),
        )
    }

    fn clock(&self) -> &BootClock {
        self.clock.get_or_init(BootClock::read)
    }

    /// Saves a new auth token for the next call (authenticating is slow),
    /// and logs what the call cost the datastore (see [`Session`]).
    fn finish(&self, store: &mut StoreHandle) {
        self.datastore.finish(store);
    }

    /// The store's name of the record of `address` in `block` of `pool`.
    fn record_key(&self, pool: &str, block: &IpNet, address: IpAddr) -> String {
        self.datastore.record_key(pool, *block, address)
    }

    /// Up to `limit` free addresses of `view` (of `g`'s pool) that no other
    /// call of this node is being granted (no record row at them), first
    /// those reserved for `to` (a row of its being written: see
    /// [`Node::claim_leasing`]). In a burst, the node's calls pass over the
    /// addresses the others are being granted in a shared block, rather than
    /// count them as room.
    fn free_to_grant(
        &self,
        tx: &Tx,
        g: &Geometry,
        view: &Pool,
        limit: usize,
        to: Option<&Attachment>,
    ) -> Result<Vec<IpAddr>> {
        let mut reserved = Vec::new();
        let free = free_addresses_where(tx, view, limit, |address| {
            match tx.node_record(&self.record_key(&g.pool.name, &g.block_of(address), address))? {
                None => Ok(true),
                Some(row) if Some(&row.owner) == to && row.state == RecordState::Writing => {
                    reserved.push(address);
                    Ok(false)
                }
                Some(_) => Ok(false),
            }
        })?;
        reserved.extend(free);
        Ok(reserved)
    }

    /// CHECK: the attachment's records in the datastore must still be as
    /// this node wrote them (error 104 naming the first that is not).
    pub fn check_records(&self, records: &[NodeRecord]) -> Result<()> {
        for r in records {
            let found = self.datastore.record(&r.key)?;
            if found.map(|stored| stored.value) != Some(r.value.clone().into_bytes()) {
                return Err(CniError::new(
                    Code::NotRecorded,
                    format!("address {} is not recorded for this attachment in the cluster", r.address),
                )
                .with_details(r.key.clone()));
            }
        }
        Ok(())
    }

    /// What `who` holds here that its view must hand back: its leases and,
    /// with an identity, the identity's other rows in blocks of this node's
    /// own (what a node holds elsewhere in the cluster is governed by
    /// etcd's records).
    fn held_for(
        &self,
        tx: &Tx,
        owned: &[Vec<NodeBlock>],
        who: &Attachment,
        sticking: Option<&Sticking>,
    ) -> Result<Vec<Lease>> {
        let mut held = tx.leases_of(who)?;
        if let Some(identity) = sticking.map(|s| s.identity) {
            let own = |l: &Lease| owned.iter().flatten().any(|b| !b.shared && b.block.contains(&l.address));
            held.extend(
                tx.rows_of_identity(&self.network, identity, &who.ifname)?
                    .into_iter()
                    .filter(|l| l.owner != *who && own(l)),
            );
        }
        Ok(held)
    }

    /// An address for `who` in this node's blocks of its own with room,
    /// leased under the node database's lock, so that concurrent ADDs of
    /// the node never count on the same room: an identity's the lowest free
    /// (bound to it in the same transaction), any other attachment's the
    /// next free, as ipam-da-sequential picks it ([`lease_next`]). None:
    /// other ADDs of this node took the last addresses.
    fn lease_in_blocks(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        blocks: &[NodeBlock],
        who: &Attachment,
        sticking: Option<&Sticking>,
    ) -> Result<Option<IpAddr>> {
        let Some(v) = view(g, blocks, &[]) else { return Ok(None) };
        let Some(s) = sticking else { return store.write(|tx| lease_next(tx, &v, who)) };
        store.write(|tx| {
            suite_delegate::begin_allocating(tx)?;
            let Some(&address) = free_addresses(tx, &v, 1)?.first() else { return Ok(None) };
            tx.insert_lease(address, &g.pool.name, who)?;
            suite_delegate::bind_identity(tx, who, Some(&s.bound()))?;
            tracing::info!("allocated {address} of pool {} for identity {:?}", g.pool.name, s.identity);
            Ok(Some(address))
        })
    }

    /// Forgets block `b`, with the addresses held in it for lending (nobody
    /// borrows from a block that is not ours).
    fn drop_block(&self, tx: &Tx, b: &NodeBlock) -> Result<()> {
        let holder = lend_holder(&self.network);
        for lent in tx.leases_of(&holder)?.into_iter().filter(|l| b.block.contains(&l.address)) {
            tx.release_address(lent.address, &holder)?;
        }
        tx.drop_node_block(&b.network, &b.pool, &b.block)
    }

    /// A block record that names this node and this database (or none: a
    /// claim of a build that did not record it).
    fn is_ours(&self, r: &BlockRecord) -> bool {
        r.node == self.settings.node && !r.released && (r.db.is_empty() || r.db == self.db)
    }

    /// This network's leases inside block `b`.
    fn leases_in(&self, tx: &Tx, b: &NodeBlock) -> Result<Vec<Lease>> {
        let filter =
            LeaseFilter { network: Some(self.network.clone()), pool: Some(b.pool.clone()), ..Default::default() };
        Ok(tx.leases(&filter)?.into_iter().filter(|l| b.block.contains(&l.address)).collect())
    }

    /// Before a confirmation of this boot is written: those of another boot
    /// (or of a build that stamped them by the wall clock) are voided.
    fn stamp_boot(&self, tx: &Tx) -> Result<()> {
        if tx.note(BOOT_NOTE)?.as_deref() != Some(self.clock().boot_id.as_str()) {
            tx.void_block_confirmations()?;
            tx.set_note(BOOT_NOTE, &self.clock().boot_id)?;
        }
        Ok(())
    }

    /// With every write of what etcd said: confirmations of another boot
    /// (or of a build that stamped them by the wall clock) are voided, and
    /// the highest revision etcd answered at is kept, the mark below which
    /// an answer means etcd lost history.
    fn stamp(&self, tx: &Tx) -> Result<()> {
        self.stamp_boot(tx)?;
        // The grace etcd's entry of this node now says (it was registered
        // before any write of what etcd said): offline, the node never
        // allocates longer than release-node, reading that entry, waits.
        let grace = self.settings.offline_grace.as_millis().to_string();
        let grace_note = grace_note(&self.network);
        if tx.note(&grace_note)?.as_deref() != Some(grace.as_str()) {
            tx.set_note(&grace_note, &grace)?;
        }
        if let Some((_, high)) = self.datastore.marks() {
            let note = revision_note(&self.network);
            if tx.note(&note)?.and_then(|n| n.parse::<i64>().ok()).is_none_or(|seen| seen < high) {
                tx.set_note(&note, &high.to_string())?;
            }
        }
        Ok(())
    }

    /// Finishes what earlier calls could not: releases that did not reach
    /// etcd, and blocks being given back once no call can still be
    /// allocating in them. Best effort: a failure waits for the next call.
    pub fn settle(&self, store: &mut StoreHandle) {
        let pending = store.read(|tx| {
            let boot = tx.note(BOOT_NOTE)?;
            let records: Vec<NodeRecord> = tx
                .unsettled_node_records()?
                .into_iter()
                .filter(|r| r.state == RecordState::Releasing && r.owner.network == self.network)
                .collect();
            let (mut blocks, mut contested) = (Vec::new(), Vec::new());
            for b in tx.network_blocks(&self.network)? {
                match b.state {
                    BlockState::Releasing => blocks.push(b),
                    BlockState::Contested => {
                        // Leases still unpublished (a kill, or etcd away, during
                        // its contest), or none left: nothing of this node in it.
                        let held = self.leases_in(tx, &b)?;
                        let mut unpublished = false;
                        for l in &held {
                            let row = tx.node_record(&self.record_key(&b.pool, &b.block, l.address))?;
                            unpublished |= row.is_none_or(|r| r.state == RecordState::Writing);
                        }
                        if held.is_empty() || unpublished {
                            contested.push((b, held));
                        }
                    }
                    _ => {}
                }
            }
            Ok((records, blocks, contested, boot))
        });
        let (records, blocks, contested, boot) = match pending {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!("cannot read what is left to settle with the cluster's store: {e}");
                return;
            }
        };
        if let Err(e) = self.release(store, &records) {
            tracing::warn!("releases left for a later call: {e}");
        }
        self.settle_identities(store);
        for (b, held) in contested {
            let done = if held.is_empty() {
                tracing::info!("contested block {} of pool {} holds no lease of this node any more", b.block, b.pool);
                store.write(|tx| self.drop_block(tx, &b))
            } else {
                self.contest(store, &b, &held, "")
            };
            if let Err(e) = done {
                tracing::warn!("contested block {} of pool {} is settled later: {e}", b.block, b.pool);
            }
        }
        // While a block being given back waits, an ADD that saw it as this
        // node's may still be allocating in it. Counted on the boot-time
        // clock from its retirement (see `retire_empty_blocks`), as
        // confirmations are: a wall clock ahead would give it back under
        // such an ADD, one behind would keep it from the cluster. No ADD of
        // an earlier boot still runs.
        let wait = self.settings.call_timeout * 3;
        for b in blocks.into_iter().filter(|b| !self.clock().within(boot.as_deref(), b.confirmed, wait)) {
            if let Err(e) = self.give_back(store, &b) {
                tracing::warn!("block {} of pool {} is given back later: {e}", b.block, b.pool);
            }
        }
    }

    /// GC's part for blocks: a block with no lease in it for
    /// `empty_block_hold` stops being handed to the allocators
    /// (`releasing`); [`Node::settle`] gives it back later.
    pub fn retire_empty_blocks(&self, store: &mut StoreHandle) -> Result<()> {
        let now = unix_now();
        let hold = self.settings.empty_block_hold.as_secs() as i64;
        let network = self.network.clone();
        store.write(|tx| {
            // A retired block's `confirmed` is when it was retired, on this
            // boot's clock: what [`Node::settle`] counts its wait from.
            self.stamp_boot(tx)?;
            let records = tx.node_records(&network)?;
            for mut b in tx.network_blocks(&network)?.into_iter().filter(|b| b.state == BlockState::Owned) {
                let leases = tx.count_leases(b.block.network(), b.block.broadcast())?;
                if leases > 0 || records.iter().any(|r| b.block.contains(&r.address)) {
                    if now - b.since >= 1 {
                        b.since = now;
                        tx.put_node_block(&b)?;
                    }
                } else if now - b.since >= hold {
                    tracing::info!("block {} of pool {} has been empty for {hold}s: it is given back", b.block, b.pool);
                    b.state = BlockState::Releasing;
                    b.since = now;
                    b.confirmed = self.clock().now_ms;
                    tx.put_node_block(&b)?;
                }
            }
            Ok(())
        })
    }

    /// Deletes a `releasing` block from etcd (only our claim of it), unless a
    /// lease appeared in it meanwhile, which makes it owned again.
    fn give_back(&self, store: &mut StoreHandle, b: &NodeBlock) -> Result<()> {
        // A lease appearing meanwhile must keep the block.
        holding_lock_over_etcd(store, |tx| {
            if tx.count_leases(b.block.network(), b.block.broadcast())? > 0 {
                tracing::info!("block {} of pool {} holds a lease again: kept", b.block, b.pool);
                // Its `confirmed` is when it was retired, which no etcd
                // read confirmed: the next ADD confirms it.
                let kept = NodeBlock { state: BlockState::Owned, since: unix_now(), confirmed: 0, ..b.clone() };
                return tx.put_node_block(&kept);
            }
            let given_back = self.datastore.give_back(&b.pool, b.block, b.revision)?;
            // So that this claim is never adopted again, should an etcd
            // restored from an older backup show it once more.
            tx.set_note(&gave_back_note(&b.network, &b.pool, &b.block), &b.revision.to_string())?;
            if given_back {
                tracing::info!("gave block {} of pool {} back to the cluster", b.block, b.pool);
            } else {
                tracing::warn!("block {} of pool {} was no longer this node's claim", b.block, b.pool);
            }
            tx.drop_node_block(&b.network, &b.pool, &b.block)
        })
    }

    /// STATUS: whether etcd answers (a one-key read).
    pub fn reachable(&self) -> datastore::Answer<()> {
        self.datastore.reachable()
    }
}

/// A node database write transaction that makes etcd requests: the node's
/// other calls wait for its lock meanwhile (up to `ipam.lockTimeout`). That is
/// what it is for (a claim, or giving a block back, decided from the node's
/// rows as they stay until etcd has answered), and what it costs: while etcd
/// is slow, every call of the node waits. Only claims and giving back do it.
fn holding_lock_over_etcd<T>(store: &mut StoreHandle, f: impl FnOnce(&Tx) -> Result<T>) -> Result<T> {
    store.write(f)
}

/// This node database's identity ([`DB_NOTE`]), made once in its life.
fn database_id(store: &mut StoreHandle) -> Result<String> {
    if let Some(db) = store.read(|tx| tx.note(DB_NOTE))? {
        return Ok(db);
    }
    let made = new_db_id()?;
    store.write(|tx| match tx.note(DB_NOTE)? {
        Some(db) => Ok(db),
        None => tx.set_note(DB_NOTE, &made).map(|()| made.clone()),
    })
}

/// A node database's identity: 16 random bytes in hex.
fn new_db_id() -> Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).map_err(|e| {
        CniError::new(Code::TryAgainLater, format!("cannot read /dev/urandom for the node database's identity: {e}"))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// In a write transaction: the next free address of `view`, leased for
/// `who` as ipam-da-sequential leases ([`suite_delegate::lease_next`]).
/// None: `view` is full.
fn lease_next(tx: &Tx, view: &Pool, who: &Attachment) -> Result<Option<IpAddr>> {
    suite_delegate::begin_allocating(tx)?;
    suite_delegate::lease_next(tx, view, who)
}

/// Files blocks just claimed: shared ones apart from those handed whole to
/// the allocators.
fn file_new_blocks(new: Vec<NodeBlock>, blocks: &mut Vec<NodeBlock>, shared: &mut Vec<NodeBlock>) {
    for b in new {
        let list = if b.shared { &mut *shared } else { &mut *blocks };
        if !list.iter().any(|m| m.block == b.block) {
            list.push(b);
        }
    }
}

/// The families among the pools that the allocators still have to find an
/// address for: none yet in the result, none asked for by name, none held.
fn needed_families(
    pools: &[Pool],
    prev: &IpamResult,
    requests: &[IpAddr],
    held: &[shared::store::Lease],
) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for pool in pools {
        let family = pool.family();
        let satisfied = prev.has_family(family)
            || requests.iter().any(|a| Family::of(*a) == family)
            || held.iter().any(|l| Family::of(l.address) == family && pools.iter().any(|p| p.name == l.pool));
        if !satisfied && !families.contains(&family) {
            families.push(family);
        }
    }
    families
}

/// Up to `limit` free addresses of `view`, in address order.
fn free_addresses(tx: &Tx, view: &Pool, limit: usize) -> Result<Vec<IpAddr>> {
    free_addresses_where(tx, view, limit, |_| Ok(true))
}

/// As [`free_addresses`], of those for which `keep` holds.
fn free_addresses_where(
    tx: &Tx,
    view: &Pool,
    limit: usize,
    mut keep: impl FnMut(IpAddr) -> Result<bool>,
) -> Result<Vec<IpAddr>> {
    let mut free = Vec::new();
    for (lo, hi) in view.allocatable() {
        let mut from = lo;
        while free.len() < limit {
            let Some(address) = tx.first_unleased(from, hi)? else { break };
            if keep(address)? {
                free.push(address);
            }
            if address == hi {
                break;
            }
            from = shared::addr::from_u128(shared::addr::to_u128(address) + 1);
        }
    }
    Ok(free)
}

/// How many free addresses `view` has, counting no further than `limit`.
fn count_free(tx: &Tx, view: &Pool, limit: usize) -> Result<usize> {
    view.allocatable().into_iter().try_fold(0, |free, (lo, hi)| match limit.checked_sub(free) {
        Some(left) if left > 0 => Ok(free + tx.count_unleased(lo, hi, left)?),
        _ => Ok(free),
    })
}

/// The pool as the allocators see it with `blocks` (and their addresses
/// held elsewhere in the cluster) and `singles`.
pub fn view(g: &Geometry, blocks: &[NodeBlock], singles: &[IpAddr]) -> Option<Pool> {
    let own: Vec<IpNet> = blocks.iter().map(|b| b.block).collect();
    let taken: Vec<IpAddr> = blocks.iter().flat_map(|b| b.taken.iter().copied()).collect();
    g.node_view(&own, singles, &taken)
}

/// Most blocks of one pool handed to the allocators in one call, so that
/// one pool's confirming reads (two per block) fit one transaction; with
/// several pools they may take several (see `Client::read_in_txns`).
const MAX_IN_VIEW: usize = 32;

/// The blocks among `blocks` that are this node's alone (not shared) and
/// have a free address, at most [`MAX_IN_VIEW`].
pub fn blocks_with_room(tx: &Tx, g: &Geometry, blocks: &[NodeBlock]) -> Result<Vec<NodeBlock>> {
    blocks_with_room_counting(tx, g, blocks, true)
}

/// The blocks an ADD confirms: [`blocks_with_room`], where what others hold
/// in a block does not count: it can end (an identity's hold ends with its
/// etcd lease), and only a confirming read of the block tells.
fn blocks_to_confirm(tx: &Tx, g: &Geometry, blocks: &[NodeBlock]) -> Result<Vec<NodeBlock>> {
    blocks_with_room_counting(tx, g, blocks, false)
}

fn blocks_with_room_counting(tx: &Tx, g: &Geometry, blocks: &[NodeBlock], taken: bool) -> Result<Vec<NodeBlock>> {
    let mut with_room = Vec::new();
    for b in blocks.iter().filter(|b| !b.shared) {
        if with_room.len() == MAX_IN_VIEW {
            break;
        }
        let counted = NodeBlock { taken: if taken { b.taken.clone() } else { Vec::new() }, ..b.clone() };
        if let Some(view) = view(g, std::slice::from_ref(&counted), &[]) {
            if !free_addresses(tx, &view, 1)?.is_empty() {
                with_room.push(b.clone());
            }
        }
    }
    Ok(with_room)
}

/// How few free addresses in a node's blocks of a pool make it claim the
/// next block ahead of need: a quarter of a block (16 of a /26), at most 64.
/// ADDs of one node in flight at once beyond this many can still find its
/// blocks full for a moment (error 100) while blocks are left.
fn headroom(g: &Geometry) -> usize {
    usize::try_from((g.block_len() / 4).min(64)).unwrap_or(64)
}
