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
use shared::store::{unix_now, BlockState, Lease, LeaseFilter, NodeBlock, NodeRecord, RecordState, StoreHandle, Tx};
use shared::{CniError, Code, Result};

use crate::blocks::Geometry;
use crate::clock::{BootClock, BOOT_NOTE};
use crate::etcd::{self, Compare, Kv, Op, OpResponse, RangeRequest, Txn};
use crate::layout::{
    shown, shown_bytes, to_bytes, to_text, AddressRecord, BlockRecord, Kind, NetworkKeys, NodeEntry, PoolKeys,
    PoolRecord, RecoveryRecord,
};
use crate::settings::Settings;

mod sharing;

/// How many unclaimed blocks one call tries before reading the pool again.
const CLAIM_ATTEMPTS: usize = 4;
/// How many times a call reads the pool's blocks while others claim them.
const CLAIM_ROUNDS: usize = 3;
/// The identity of this node database, made with it: what etcd's entry of
/// the node name and the node's block records carry.
const DB_NOTE: &str = "node-db";

/// The note of the highest etcd revision this node saw for `network`: an
/// answer below it means etcd lost history.
fn revision_note(network: &str) -> String {
    format!("etcd-revision:{network}")
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
    pub etcd: etcd::Client,
    /// The auth token the call started with, to save a new one once.
    cached_token: Option<String>,
    /// The clock that times confirmations, read at first need (DEL, GC
    /// and CHECK never need it).
    clock: OnceCell<BootClock>,
    /// This node database's identity ([`DB_NOTE`]).
    pub db: String,
    /// Where that token is kept: one per endpoints, user and password.
    token_note: Option<String>,
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

/// Every claimed block of a pool, with its record and key.
type Owners = HashMap<IpNet, (BlockRecord, Kv)>;

/// What etcd said of this node's blocks of one pool.
struct Confirmed {
    /// Blocks still ours, with what others hold in them.
    ours: Vec<NodeBlock>,
    /// Blocks etcd no longer shows as ours.
    lost: Vec<(NodeBlock, String, Option<Kv>)>,
    /// The mod_revision of the pool's `wanted` key: a node found no room.
    wanted: i64,
    /// Lent records in our blocks that name another node: lent by a former
    /// owner (given back by a borrower after the block changed hands).
    stale: Vec<Kv>,
}

/// What became of writing an address record (see [`Node::write_record`]).
enum RecordWrite {
    Written,
    /// etcd's compares failed: the transaction's failure responses.
    Refused(Vec<OpResponse>),
    /// Another attachment of this node has a row at the key.
    Busy,
}

/// Most addresses an owner lends at once.
const LEND_MAX: usize = 16;

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
        let token_note = settings.etcd.token_note();
        let (cached_token, db) = store.read(|tx| {
            let token = match &token_note {
                Some(note) => tx.note(note)?,
                None => None,
            };
            Ok((token, tx.note(DB_NOTE)?))
        })?;
        let db = match db {
            Some(db) => db,
            // Once in the database's life.
            None => {
                let made = new_db_id()?;
                store.write(|tx| match tx.note(DB_NOTE)? {
                    Some(db) => Ok(db),
                    None => tx.set_note(DB_NOTE, &made).map(|()| made.clone()),
                })?
            }
        };
        let etcd = etcd::Client::new(settings.etcd.clone()).map_err(etcd_error)?.with_token(cached_token.clone());
        Ok(Node { settings, network: network.to_string(), etcd, cached_token, token_note, clock: OnceCell::new(), db })
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
    fn register(&self, mut found: Option<Kv>) -> Result<()> {
        let key = self.net_keys().node(&self.settings.node);
        let entry = self.entry();
        for _ in 0..CLAIM_ROUNDS {
            let compare = match &found {
                Some(kv) => match serde_json::from_slice::<NodeEntry>(&kv.value) {
                    Ok(theirs) if theirs == entry => return Ok(()),
                    Ok(theirs) if theirs.db != self.db => return Err(self.another_database(&theirs.db, &key)),
                    // Our entry with other settings, or one that does not read.
                    _ => Compare::mod_revision_is(key.clone(), kv.mod_revision),
                },
                None => Compare::absent(key.clone()),
            };
            let txn = Txn {
                compare: vec![compare],
                success: vec![Op::Put { key: key.clone().into_bytes(), value: to_bytes(&entry), lease: 0 }],
                failure: vec![Op::Range(RangeRequest::key(key.clone()))],
            };
            let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
            if answer.succeeded {
                tracing::info!("node {} is this node database's in etcd ({key})", self.settings.node);
                return Ok(());
            }
            found = match answer.responses.into_iter().next() {
                Some(OpResponse::Range(r)) => r.kvs.into_iter().next(),
                _ => None,
            };
        }
        Err(CniError::new(Code::TryAgainLater, format!("etcd's entry {key} of this node keeps changing: try again")))
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

    /// The keys of this node's network that belong to no pool.
    fn net_keys(&self) -> NetworkKeys {
        NetworkKeys::new(&self.settings.prefix, &self.network)
    }

    pub fn keys(&self, pool: &str) -> PoolKeys {
        PoolKeys::new(&self.settings.prefix, &self.network, pool)
    }

    /// Saves a new auth token for the next call (authenticating is slow).
    pub fn finish(&self, store: &mut StoreHandle) {
        let token = self.etcd.token();
        let changed = token != self.cached_token;
        if let (Some(token), Some(note), true) = (&token, &self.token_note, changed) {
            // One token kept: those of earlier credentials are of no use.
            let keep = |tx: &Tx| {
                tx.drop_notes_with_prefix(etcd::TOKEN_NOTE_PREFIX, note)?;
                tx.set_note(note, token)
            };
            if let Err(e) = store.write(keep) {
                tracing::warn!("the etcd token is not kept for the next call: {e}");
            }
        }
        let count = self.etcd.requests();
        tracing::debug!(
            "etcd requests: {} range, {} txn ({} writing), {} other",
            count.ranges,
            count.txns,
            count.writing_txns,
            count.other
        );
    }

    /// ADD's part: reserves the addresses asked for by name, makes sure each
    /// family that needs an address has room in some pool (claiming a block
    /// when this node's are full), and returns the pools as this node's
    /// allocators must see them.
    pub fn add(
        &self,
        store: &mut StoreHandle,
        pools: &[Pool],
        who: &Attachment,
        requests: &[IpAddr],
        prev: &IpamResult,
    ) -> Result<Vec<Pool>> {
        let geometries: Vec<Geometry> = pools.iter().map(Geometry::of).collect();
        // Only blocks with room are handed to the allocators, and so
        // confirmed: a full block needs no confirming, and the confirming
        // read stays one request however many blocks the node has.
        let (owned, mut blocks, mut shared, records, held, notes) = store.read(|tx| {
            let mut owned = Vec::with_capacity(pools.len());
            let mut with_room = Vec::with_capacity(pools.len());
            let mut shared = Vec::with_capacity(pools.len());
            for g in &geometries {
                let all: Vec<NodeBlock> = tx
                    .node_blocks(&self.network, &g.pool.name)?
                    .into_iter()
                    .filter(|b| b.state == BlockState::Owned)
                    .collect();
                with_room.push(blocks_with_room(tx, g, &all)?);
                shared.push(all.iter().filter(|b| b.shared).cloned().collect::<Vec<_>>());
                owned.push(all);
            }
            let watermark = tx.note(&revision_note(&self.network))?.and_then(|n| n.parse::<i64>().ok());
            let notes = (tx.note(BOOT_NOTE)?, watermark, self.offline_window(tx)?);
            Ok((owned, with_room, shared, tx.node_records_of(who)?, tx.leases_of(who)?, notes))
        })?;
        let (boot, watermark, offline_window) = notes;
        let needed = needed_families(pools, prev, requests, &held);
        // Only answers given after the watermark was read count against it
        // (settle, before this, may have heard etcd at an earlier revision
        // while another process of this node wrote a later one down).
        self.etcd.forget_revisions();
        let skipped = self.needs_no_confirmation(pools, &blocks, &shared, &needed, boot.as_deref());
        let confirmation = (!skipped).then(|| self.confirm(&geometries, &blocks));
        let offline = match confirmation {
            // Every block this ADD may use was confirmed moments ago.
            None => None,
            Some(Ok((confirmed, entry))) => {
                // Before anything is decided from what etcd said.
                self.check_history(store, &geometries, watermark, &confirmed)?;
                self.register(entry)?;
                let wanted: Vec<i64> = confirmed.iter().map(|c| c.wanted).collect();
                let stale: Vec<Kv> = confirmed.iter().flat_map(|c| c.stale.iter().cloned()).collect();
                self.drop_stale_lent(&stale);
                self.record_confirmed(store, &geometries, &mut blocks, confirmed, boot.as_deref())?;
                for (i, &revision) in wanted.iter().enumerate().filter(|(_, r)| **r > 0) {
                    if let Err(e) = self.lend(store, &geometries[i], &blocks[i], revision) {
                        tracing::warn!("pool {}: lending to nodes without room failed: {e}", pools[i].name);
                    }
                }
                None
            }
            Some(Err(etcd::Error::Unavailable(why))) => {
                for pool_blocks in &mut blocks {
                    pool_blocks.retain(|b| offline_window.allows(b));
                }
                tracing::warn!(
                    "etcd is unreachable ({why}): allocating only in blocks confirmed within offlineGrace ({}s)",
                    self.settings.offline_grace.as_secs()
                );
                Some(why)
            }
            Some(Err(e)) => return Err(etcd_error(e)),
        };
        for &address in requests {
            self.reserve_static(store, &geometries, address, who)?;
        }
        // Addresses this call got published for `who`: in a shared block, or
        // lent by another node. The allocators get each as a single address.
        let mut granted: Vec<(String, IpAddr)> = Vec::new();
        let singles = |pool: &Pool, granted: &[(String, IpAddr)]| -> Vec<IpAddr> {
            let mut singles: Vec<IpAddr> = records
                .iter()
                .filter(|r| r.pool == pool.name && r.state != RecordState::Releasing)
                .map(|r| r.address)
                .collect();
            singles.extend(granted.iter().filter(|(p, _)| *p == pool.name).map(|(_, a)| *a));
            singles.extend(held.iter().filter(|l| l.pool == pool.name).map(|l| l.address));
            singles.extend(requests.iter().filter(|a| pool.range_for_subnet_member(**a).is_some()));
            singles
        };
        let history = |store: &mut StoreHandle| self.check_history(store, &geometries, watermark, &[]);
        let pool_view = |i: usize, blocks: &[Vec<NodeBlock>], granted: &[(String, IpAddr)]| -> Option<Pool> {
            view(&geometries[i], &blocks[i], &singles(geometries[i].pool, granted))
        };
        for family in needed {
            let of_family: Vec<usize> = (0..pools.len()).filter(|&i| pools[i].family() == family).collect();
            // An address an earlier ADD of this attachment got published and
            // then did not lease (killed in between): it is in the view.
            let mut found = records.iter().any(|r| {
                r.kind == Kind::Allocated
                    && r.state == RecordState::Held
                    && of_family.iter().any(|&i| pools[i].name == r.pool)
            });
            // Room in any pool of the family first: in this node's own
            // blocks (no etcd request), then in its shared ones (one), so
            // that a node with room never claims; then a new block, then
            // room in another node's shared block or a lent address, each in
            // pool order.
            let mut running_low = None;
            for &i in &of_family {
                if found {
                    break;
                }
                if let Some(v) = view(&geometries[i], &blocks[i], &[]) {
                    let headroom = headroom(&geometries[i]);
                    let free = store.read(|tx| free_addresses(tx, &v, headroom + 1))?.len();
                    if free > 0 {
                        found = true;
                        running_low = (free <= headroom).then_some(i);
                    }
                }
            }
            let online = offline.is_none();
            for &i in &of_family {
                if found || !online {
                    break;
                }
                if let Some(address) = self.grant_in_own(store, &geometries[i], &mut shared[i], who, &history)? {
                    granted.push((pools[i].name.clone(), address));
                    found = true;
                }
            }
            // Nearly full: claim the next block now. The allocators take
            // their address after this call, so concurrent ADDs of this node
            // that all saw its last free address would otherwise all but
            // one fail with 100 while blocks are left. (A shared block needs
            // none: each ADD's address is published before it returns.)
            if let (Some(i), true) = (running_low, online) {
                match self.claim(store, &geometries[i], &owned[i]) {
                    Ok(new) => file_new_blocks(new, &mut blocks[i], &mut shared[i]),
                    Err(e) => tracing::warn!("pool {}: claiming a block ahead of need failed: {e}", pools[i].name),
                }
            }
            for &i in &of_family {
                if found || !online {
                    break;
                }
                let new = self.claim(store, &geometries[i], &owned[i])?;
                let exclusive = new.iter().any(|b| !b.shared);
                file_new_blocks(new, &mut blocks[i], &mut shared[i]);
                if exclusive {
                    found = true;
                } else if let Some(address) = self.grant_in_own(store, &geometries[i], &mut shared[i], who, &history)? {
                    granted.push((pools[i].name.clone(), address));
                    found = true;
                }
            }
            for &i in &of_family {
                if found || !online {
                    break;
                }
                if let Some(address) = self.grant_in_others(store, &geometries[i], who, &history)? {
                    granted.push((pools[i].name.clone(), address));
                    found = true;
                }
            }
            for &i in &of_family {
                if found || !online {
                    break;
                }
                if let Some(address) = self.borrow(store, &geometries[i], &owned[i], who)? {
                    granted.push((pools[i].name.clone(), address));
                    found = true;
                }
            }
            if !found {
                let names = shared::pool::names(pools.iter().filter(|p| p.family() == family));
                return Err(match &offline {
                    Some(why) => CniError::new(
                        Code::TryAgainLater,
                        format!(
                            "etcd is unreachable and no {family} block of this node confirmed within offlineGrace \
                             has a free address (cluster pools {names}; shared blocks are used only with etcd): {why}"
                        ),
                    ),
                    None => CniError::new(
                        Code::NoFreeAddress,
                        format!(
                            "no free {family} address in the cluster pools ({names}): this node's blocks are full, \
                             no block is left to claim, no shared block has room and no node has an address lent \
                             out; nodes with room of their own lend some at their next ADD"
                        ),
                    ),
                });
            }
        }
        // Without a confirming read, the answers of this call's other
        // requests tell whether etcd lost history.
        if skipped {
            self.check_history(store, &geometries, watermark, &[])?;
        }
        Ok((0..pools.len()).filter_map(|i| pool_view(i, &blocks, &granted)).collect())
    }

    /// Whether this ADD may skip the confirming read:
    /// - every block of its own with room was confirmed within
    ///   [`Settings::confirmation_cache`] and each family it needs has one.
    ///   Safe as offline allocation is, within a tenth of its window: a block
    ///   confirmed ours stays ours for offlineGrace at least (`release-node`
    ///   waits that out, and nothing else takes a block from its owner), and
    ///   nobody else writes in it but where its owner lent (see the README,
    ///   "Why no address is handed out twice");
    /// - or it has no block of its own with room, and shared blocks in each
    ///   family it needs: their addresses are granted by transactions that
    ///   compare the block unchanged, which confirms it.
    fn needs_no_confirmation(
        &self,
        pools: &[Pool],
        blocks: &[Vec<NodeBlock>],
        shared: &[Vec<NodeBlock>],
        needed: &[Family],
        boot: Option<&str>,
    ) -> bool {
        let has =
            |of: &[Vec<NodeBlock>], f: &Family| pools.iter().zip(of).any(|(p, b)| p.family() == *f && !b.is_empty());
        if blocks.iter().all(Vec::is_empty) {
            return !needed.is_empty() && needed.iter().all(|f| has(shared, f));
        }
        let cache = self.settings.confirmation_cache();
        !cache.is_zero()
            && needed.iter().all(|f| has(blocks, f))
            && blocks.iter().flatten().all(|b| self.clock().within(boot, b.confirmed, cache))
    }

    /// One etcd read for every block this node uses: its record (still
    /// ours?) and the addresses others hold in it. More blocks than one
    /// transaction holds are read in several, each block's two reads in one.
    fn confirm(
        &self,
        geometries: &[Geometry],
        blocks: &[Vec<NodeBlock>],
    ) -> std::result::Result<(Vec<Confirmed>, Option<Kv>), etcd::Error> {
        // Linearizable reads (etcd's default): the member answers only once
        // the leader has confirmed, with a quorum, that the member has
        // applied everything committed before the read. A member cut off
        // from its quorum keeps a copy that stays stale for as long as it is
        // cut off (it never shows a `release-node` tombstone written on the
        // majority side, nor another node's claim after it): its "yes, still
        // yours" is no confirmation. It answers "no leader", or nothing
        // within etcd.timeout, both Unavailable: the node treats etcd as
        // unreachable, and only offlineGrace applies, counted from the last
        // confirmation by a quorum. The node's entry is always read, so that
        // every ADD that reaches etcd learns whether etcd lost history and
        // whether another database runs under the node's name.
        let entry_key = self.net_keys().node(&self.settings.node);
        let mut reads: Vec<Vec<Op>> = vec![vec![Op::Range(RangeRequest::key(entry_key))]];
        for (g, pool_blocks) in geometries.iter().zip(blocks) {
            let keys = self.keys(&g.pool.name);
            if !pool_blocks.is_empty() {
                reads.push(vec![Op::Range(RangeRequest::key(keys.wanted()).keys_only())]);
            }
            for b in pool_blocks {
                reads.push(vec![
                    Op::Range(RangeRequest::key(keys.block(&b.block))),
                    Op::Range(RangeRequest::prefix(keys.block_addresses(&b.block))),
                ]);
            }
        }
        let mut responses = self.etcd.read_in_txns(reads)?.into_iter();
        let Some(OpResponse::Range(entry)) = responses.next() else {
            return Err(not_ranges());
        };
        let mut confirmed = Vec::with_capacity(blocks.len());
        for (g, pool_blocks) in geometries.iter().zip(blocks) {
            let keys = self.keys(&g.pool.name);
            let mut c = Confirmed { ours: Vec::new(), lost: Vec::new(), wanted: 0, stale: Vec::new() };
            if !pool_blocks.is_empty() {
                let Some(OpResponse::Range(wanted)) = responses.next() else {
                    return Err(not_ranges());
                };
                c.wanted = wanted.kvs.first().map_or(0, |kv| kv.mod_revision);
            }
            for b in pool_blocks {
                let (Some(OpResponse::Range(record)), Some(OpResponse::Range(addresses))) =
                    (responses.next(), responses.next())
                else {
                    return Err(not_ranges());
                };
                match self.ours(record.kvs.first(), b.revision) {
                    Ok(revision) => {
                        let taken = self.taken(&keys, &addresses.kvs);
                        c.stale.extend(addresses.kvs.iter().filter(|kv| self.stale_lent(kv)).cloned());
                        c.ours.push(NodeBlock { revision, taken, ..b.clone() });
                    }
                    Err(why) => c.lost.push((b.clone(), why, record.kvs.first().cloned())),
                }
            }
            confirmed.push(c);
        }
        Ok((confirmed, entry.kvs.into_iter().next()))
    }

    /// Whether etcd lost history since this node last wrote down what it
    /// saw: an answer at a revision below it (etcd restored from an older
    /// backup, or its data wiped). Then the node recovers its blocks (see
    /// [`Node::recover`]) and the call fails with 11, to be tried again.
    fn check_history(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        watermark: Option<i64>,
        confirmed: &[Confirmed],
    ) -> Result<()> {
        let Some((lowest, _)) = self.etcd.revisions() else { return Ok(()) };
        // A key's create revision only grows over a continuous history: a
        // block key of ours created before our own claim of it is etcd's
        // older state, whatever the revisions it answers at now (other
        // nodes' writes since the restore may have carried them past ours).
        let older_claim = confirmed
            .iter()
            .flat_map(|c| &c.lost)
            .filter_map(|(b, _, kv)| kv.as_ref().filter(|kv| kv.create_revision < b.revision).map(|_| b.revision))
            .max();
        let Some(seen) = watermark.filter(|w| lowest < *w).or(older_claim) else { return Ok(()) };
        tracing::error!(
            "etcd lost history: it answers at revision {lowest}, but this node saw revision {seen} before, or a claim \
             older than this node's own of the same block (etcd restored from an older backup, or its data wiped); \
             re-claiming this node's blocks"
        );
        self.recover(store, geometries, seen, lowest)?;
        Err(CniError::new(
            Code::TryAgainLater,
            format!(
                "etcd lost history (revision {lowest}, this node saw {seen}): this node re-claimed its blocks of \
                 network {:?} where it could; try again",
                self.network
            ),
        ))
    }

    /// After etcd lost history, puts what this node holds back as it was, as
    /// far as etcd allows, without ever taking an address another node may
    /// hold:
    /// - for offlineGrace + 3 × ipam.timeout no node claims or adopts any
    ///   other block of the network, nor takes a lent address (`_recovery`),
    ///   so that nodes re-claim their own first;
    /// - every block of the network it holds, in any pool (not only this
    ///   call's): one still ours stays (at its claim's revision); one etcd
    ///   lost that holds our leases is claimed again (contested when its
    ///   pool is not among this call's, whose cut it needs); one another node
    ///   owns that holds our leases is contested (see [`Node::contest`]); one
    ///   without our leases is dropped;
    /// - every address record it holds is written again where etcd lost it
    ///   (an address held twice is logged), and records etcd shows as this
    ///   node's that it does not hold (released, or lent and taken back,
    ///   before the loss) are deleted, so nobody borrows them.
    fn recover(&self, store: &mut StoreHandle, geometries: &[Geometry], seen: i64, now_at: i64) -> Result<()> {
        self.quarantine(seen, now_at)?;
        let rows: Vec<(NodeBlock, Vec<Lease>)> = store.read(|tx| {
            let mut rows = Vec::new();
            for b in tx.all_node_blocks()?.into_iter().filter(|b| b.network == self.network) {
                if b.state != BlockState::Releasing {
                    let held = self.leases_in(tx, &b)?;
                    rows.push((b, held));
                }
            }
            Ok(rows)
        })?;
        let reads =
            rows.iter().map(|(b, _)| vec![Op::Range(RangeRequest::key(self.keys(&b.pool).block(&b.block)))]).collect();
        let answers = self.etcd.read_in_txns(reads).map_err(etcd_error)?;
        for ((b, held), answer) in rows.iter().zip(answers) {
            let kv = match answer {
                OpResponse::Range(r) => r.kvs.into_iter().next(),
                _ => None,
            };
            let g = geometries.iter().find(|g| g.pool.name == b.pool);
            self.take_back(store, g, b, held, kv.as_ref())?;
        }
        self.rewrite_records(store, None)?;
        let highest = self.etcd.revisions().map_or(now_at, |(_, high)| high);
        store.write(|tx| tx.set_note(&revision_note(&self.network), &highest.to_string()))
    }

    /// After etcd lost history: this node's address records as its database
    /// holds them, in every pool of the network, or only in one block (one
    /// etcd lost and this node claimed back).
    fn rewrite_records(&self, store: &mut StoreHandle, only: Option<&NodeBlock>) -> Result<()> {
        let within = |pool: &str, address: IpAddr| only.is_none_or(|b| b.pool == pool && b.block.contains(&address));
        let (rows, lent) =
            store.read(|tx| Ok((tx.node_records(&self.network)?, tx.leases_of(&lend_holder(&self.network))?)))?;
        let rows: Vec<NodeRecord> = rows.into_iter().filter(|r| within(&r.pool, r.address)).collect();
        let lent: Vec<Lease> = lent.into_iter().filter(|l| within(&l.pool, l.address)).collect();
        let mut pools: Vec<&str> = rows.iter().map(|r| r.pool.as_str()).collect();
        pools.extend(lent.iter().map(|l| l.pool.as_str()));
        pools.extend(only.map(|b| b.pool.as_str()));
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            let keys = self.keys(pool);
            let prefix = match only {
                Some(b) => keys.block_addresses(&b.block),
                None => keys.addresses(),
            };
            let found = self.etcd.range(&RangeRequest::prefix(prefix)).map_err(etcd_error)?;
            for r in rows.iter().filter(|r| r.pool == pool && r.state == RecordState::Held) {
                let theirs = found.kvs.iter().find(|kv| kv.key == r.key.as_bytes());
                match theirs {
                    Some(kv) if kv.value == r.value.as_bytes() => {}
                    Some(kv) => tracing::error!(
                        "{} is held here by container {} interface {} and, since etcd lost history, in the cluster \
                         too ({}): an address held twice",
                        r.address,
                        shown(&r.owner.container_id),
                        shown(&r.owner.ifname),
                        shown_bytes(&kv.value)
                    ),
                    None => {
                        let txn = Txn {
                            compare: vec![Compare::absent(r.key.clone())],
                            success: vec![Op::Put {
                                key: r.key.clone().into_bytes(),
                                value: r.value.clone().into_bytes(),
                                lease: 0,
                            }],
                            failure: Vec::new(),
                        };
                        if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
                            tracing::warn!("{} of pool {pool}: its record, lost by etcd, is written again", r.address);
                        }
                    }
                }
            }
            // Records that name this node but that it does not hold.
            for kv in &found.kvs {
                let Ok(record) = serde_json::from_slice::<AddressRecord>(&kv.value) else { continue };
                let Some((_, address)) = keys.parse_address(&kv.key) else { continue };
                let ours = record.node == self.settings.node;
                let held = match record.kind {
                    Kind::Lent => lent.iter().any(|l| l.address == address),
                    _ => rows.iter().any(|r| r.key.as_bytes() == kv.key.as_slice()),
                };
                if ours && !held {
                    let txn = Txn {
                        compare: vec![Compare::mod_revision_is(kv.key.clone(), kv.mod_revision)],
                        success: vec![Op::Delete { key: kv.key.clone(), range_end: None }],
                        failure: Vec::new(),
                    };
                    if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
                        tracing::warn!("{address} of pool {pool}: a record of this node that it no longer holds, shown again by etcd, is deleted");
                    }
                }
            }
        }
        Ok(())
    }

    /// What becomes of block `b`, which holds this node's leases `held`, when
    /// etcd shows it as `kv` (none: absent). `g`: its pool, when this call
    /// has it (claiming the block back needs its cut).
    fn take_back(
        &self,
        store: &mut StoreHandle,
        g: Option<&Geometry>,
        b: &NodeBlock,
        held: &[Lease],
        kv: Option<&Kv>,
    ) -> Result<()> {
        let keys = self.keys(&b.pool);
        let record = kv.and_then(|kv| serde_json::from_slice::<BlockRecord>(&kv.value).ok());
        match (kv, &record) {
            (Some(kv), Some(r)) if self.is_ours(r) => {
                tracing::warn!(
                    "block {} of pool {} is this node's in etcd at revision {}",
                    b.block,
                    b.pool,
                    kv.create_revision
                );
                let kept = NodeBlock { state: BlockState::Owned, revision: kv.create_revision, ..b.clone() };
                store.write(|tx| tx.put_node_block(&kept))?;
                // Claimed again (by this node's own recovery, killed before it
                // wrote the block down): what it recorded in it may be gone.
                if kv.create_revision != b.revision {
                    self.rewrite_records(store, Some(b))?;
                }
                Ok(())
            }
            _ if held.is_empty() => {
                tracing::warn!("block {} of pool {} holds no lease here: left to the cluster", b.block, b.pool);
                store.write(|tx| self.drop_block(tx, b))
            }
            (None, _) => match g {
                Some(g) if self.reclaim(store, &keys, g, b)? => Ok(()),
                Some(_) => self.contest(store, &keys, b, held, "another node claimed it first"),
                None => self.contest(store, &keys, b, held, "etcd lost it (claimed back when its pool is used)"),
            },
            (Some(_), r) => {
                let holder =
                    r.as_ref().map_or("an unreadable record".to_string(), |r| format!("node {}", shown(&r.node)));
                self.contest(store, &keys, b, held, &format!("etcd shows it {holder}'s"))
            }
        }
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

    /// Claims `b` again after etcd lost it (the quarantine does not apply:
    /// its leases are this node's), reading what others hold in it. False
    /// when another node has it.
    fn reclaim(&self, store: &mut StoreHandle, keys: &PoolKeys, g: &Geometry, b: &NodeBlock) -> Result<bool> {
        self.define(keys, g)?;
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let record = self.block_record(g);
        let txn = Txn {
            compare: vec![Compare::absent(keys.block(&b.block)), Compare::value_is(keys.definition(), definition)],
            success: vec![
                Op::Put { key: keys.block(&b.block).into_bytes(), value: to_bytes(&record), lease: 0 },
                Op::Range(RangeRequest::prefix(keys.block_addresses(&b.block))),
            ],
            failure: Vec::new(),
        };
        let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
        if answer.succeeded {
            tracing::warn!("block {} of pool {} was gone from etcd: claimed again", b.block, b.pool);
            let taken = match answer.responses.get(1) {
                Some(OpResponse::Range(addresses)) => self.taken(keys, &addresses.kvs),
                _ => Vec::new(),
            };
            let again = self.owned_block(g, b.block, answer.revision, taken, record.shared);
            store.write(|tx| {
                self.stamp_boot(tx)?;
                tx.put_node_block(&NodeBlock { since: b.since, ..again })
            })?;
            // What this node recorded in the block went with it.
            self.rewrite_records(store, Some(b))?;
        }
        Ok(answer.succeeded)
    }

    /// A block that holds leases of this node but is another's in etcd (or
    /// that etcd lost, and this call cannot claim back): it is never handed
    /// to the allocators again, and each lease is published as this node's
    /// address record in it, so that its owner's allocators skip the address
    /// (they read the block's records at each ADD). Marked first and
    /// published after: [`Node::settle`] publishes what a kill or an etcd
    /// failure left unpublished, at every later call. An address another
    /// attachment already holds in the cluster is logged as held twice.
    fn contest(
        &self,
        store: &mut StoreHandle,
        keys: &PoolKeys,
        b: &NodeBlock,
        held: &[Lease],
        why: &str,
    ) -> Result<()> {
        if b.state != BlockState::Contested {
            tracing::error!(
                "block {} of pool {} holds {} lease(s) of this node but {why}: their addresses are published as \
                 this node's, and the block is not used again",
                b.block,
                b.pool,
                held.len()
            );
            store.write(|tx| {
                tx.put_node_block(&NodeBlock { state: BlockState::Contested, since: unix_now(), ..b.clone() })
            })?;
        }
        for lease in held {
            let key = keys.address(&b.block, lease.address);
            match store.read(|tx| tx.node_record(&key))? {
                Some(r) if r.state == RecordState::Writing && r.owner == lease.owner => {}
                Some(_) => continue,
                None => {}
            }
            let value = to_text(&AddressRecord {
                kind: Kind::Static,
                node: self.settings.node.clone(),
                container: lease.owner.container_id.clone(),
                ifname: lease.owner.ifname.clone(),
                lender: String::new(),
            });
            let row = NodeRecord {
                key: key.clone(),
                value: value.clone(),
                pool: b.pool.clone(),
                address: lease.address,
                kind: Kind::Static,
                owner: lease.owner.clone(),
                added_by: Some(RECOVERED.to_string()),
                state: RecordState::Writing,
            };
            store.write(|tx| tx.put_node_record(&row))?;
            let txn = Txn {
                compare: vec![Compare::absent(key.clone())],
                success: vec![Op::Put { key: key.clone().into_bytes(), value: value.clone().into_bytes(), lease: 0 }],
                failure: vec![Op::Range(RangeRequest::key(key.clone()))],
            };
            // Unsure (no answer): the row stays `writing`, and publishing is
            // tried again (create if absent: a write that did happen is
            // found as ours). Never `releasing`: releasing a record releases
            // its lease, which a running container holds.
            let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
            let theirs = match answer.responses.into_iter().next() {
                Some(OpResponse::Range(r)) => r.kvs.into_iter().next(),
                _ => None,
            };
            if answer.succeeded || theirs.as_ref().is_some_and(|kv| kv.value == value.as_bytes()) {
                store.write(|tx| tx.set_node_record_state(&key, RecordState::Held))?;
            } else {
                store.write(|tx| tx.drop_node_record(&key))?;
                tracing::error!(
                    "{} is leased here to container {} interface {} and held in the cluster too ({}): an address \
                     held twice",
                    lease.address,
                    shown(&lease.owner.container_id),
                    shown(&lease.owner.ifname),
                    theirs.map_or(String::new(), |kv| shown_bytes(&kv.value))
                );
            }
        }
        Ok(())
    }

    /// Keeps the network's nodes from claiming or adopting blocks while they
    /// re-claim their own, for as long as a node may allocate unconfirmed.
    fn quarantine(&self, seen: i64, now_at: i64) -> Result<()> {
        let key = self.net_keys().recovery();
        let window = self.settings.offline_grace + self.settings.call_timeout * 3;
        let ttl = (window.as_secs_f64().ceil() as i64).max(1);
        let lease = self.etcd.lease_grant(ttl).map_err(etcd_error)?;
        let record = RecoveryRecord { node: self.settings.node.clone(), at: unix_now(), from: seen, to: now_at };
        let txn = Txn {
            compare: vec![Compare::absent(key.clone())],
            success: vec![Op::Put { key: key.clone().into_bytes(), value: to_bytes(&record), lease }],
            failure: Vec::new(),
        };
        if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
            tracing::warn!("no block of network {:?} is claimed by any node for {ttl}s ({key})", self.network);
        }
        Ok(())
    }

    /// The revision of our claim if `kv` (a block key) shows the block ours;
    /// otherwise why not.
    fn ours(&self, kv: Option<&Kv>, revision: i64) -> std::result::Result<i64, String> {
        let Some(kv) = kv else { return Err("it is no longer claimed (released by an operator?)".into()) };
        match serde_json::from_slice::<BlockRecord>(&kv.value) {
            Ok(r) if r.released => Err(format!("it was released ({} at unix time {})", shown(&r.node), r.at)),
            Ok(r) if r.node != self.settings.node => Err(format!("node {} owns it now", shown(&r.node))),
            Ok(_) if revision != 0 && kv.create_revision != revision => {
                Err(format!("it was claimed again (revision {} instead of {revision})", kv.create_revision))
            }
            Ok(_) => Ok(kv.create_revision),
            Err(e) => Err(format!("its record does not read ({e})")),
        }
    }

    /// Whether `kv`, an address record of one of our blocks, is a lent
    /// record of another node: its lender no longer owns the block.
    fn stale_lent(&self, kv: &Kv) -> bool {
        serde_json::from_slice::<AddressRecord>(&kv.value)
            .is_ok_and(|r| r.kind == Kind::Lent && r.node != self.settings.node)
    }

    /// Deletes lent records left by a block's former owner, so that their
    /// addresses are free again in the block (from the next call on).
    fn drop_stale_lent(&self, stale: &[Kv]) {
        for kv in stale {
            let txn = Txn {
                compare: vec![Compare::mod_revision_is(kv.key.clone(), kv.mod_revision)],
                success: vec![Op::Delete { key: kv.key.clone(), range_end: None }],
                failure: Vec::new(),
            };
            match self.etcd.txn(&txn) {
                Ok(_) => tracing::info!("dropped {}: lent by a former owner of the block", shown_bytes(&kv.key)),
                Err(e) => tracing::warn!("{} stays for now: {e}", shown_bytes(&kv.key)),
            }
        }
    }

    /// Addresses of a block that other nodes (or other attachments through
    /// records) hold: every address record not written by this node.
    fn taken(&self, keys: &PoolKeys, kvs: &[Kv]) -> Vec<IpAddr> {
        kvs.iter()
            .filter_map(|kv| {
                let record: AddressRecord = serde_json::from_slice(&kv.value).ok()?;
                let (_, address) = keys.parse_address(&kv.key)?;
                (record.node != self.settings.node).then_some(address)
            })
            .collect()
    }

    /// Writes what the confirmation changed: lost blocks go, and a block's
    /// confirmation time is refreshed when it has aged a tenth of
    /// offlineGrace (so the steady state rarely writes).
    fn record_confirmed(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        blocks: &mut [Vec<NodeBlock>],
        confirmed: Vec<Confirmed>,
        boot: Option<&str>,
    ) -> Result<()> {
        let now = self.clock().now_ms;
        // Written down as often as the cache needs it: a tenth of
        // offlineGrace at most, so that offline the node still has 0.9 of it.
        let refresh = i64::try_from(self.settings.confirmation_cache().as_millis()).unwrap_or(i64::MAX).max(1000);
        let same_boot = boot == Some(self.clock().boot_id.as_str());
        let mut changes: Vec<NodeBlock> = Vec::new();
        let mut lost: Vec<(&Geometry, NodeBlock, String, Option<Kv>)> = Vec::new();
        for ((pool_blocks, c), g) in blocks.iter_mut().zip(confirmed).zip(geometries) {
            let mut ours = c.ours;
            for b in &mut ours {
                let before = pool_blocks.iter().find(|p| p.block == b.block);
                let changed = !same_boot
                    || before.is_none_or(|p| {
                        !(0..refresh).contains(&(now - p.confirmed)) || p.taken != b.taken || p.revision != b.revision
                    });
                // Confirmed now; written down only when it has aged (or changed).
                b.confirmed = now;
                if changed {
                    changes.push(b.clone());
                }
            }
            lost.extend(c.lost.into_iter().map(|(b, why, kv)| (g, b, why, kv)));
            *pool_blocks = ours;
        }
        if changes.is_empty() && lost.is_empty() {
            return Ok(());
        }
        type Held<'g> = (&'g Geometry<'g>, NodeBlock, String, Option<Kv>, Vec<Lease>);
        let held: Vec<Held> = store.write(|tx| {
            self.stamp(tx)?;
            for b in &changes {
                tx.put_node_block(b)?;
                // Another node's record for an address leased here: one
                // address, two attachments (etcd lost history, or this node
                // came back after release-node). Only the operator can choose.
                for &address in &b.taken {
                    if let Some(lease) = tx.holder(address)?.filter(|l| l.owner.network == self.network) {
                        tracing::error!(
                            "{address} is leased here to container {} interface {} and recorded in the cluster for \
                             another node: an address held twice (block {} of pool {})",
                            shown(&lease.owner.container_id),
                            shown(&lease.owner.ifname),
                            b.block,
                            b.pool
                        );
                    }
                }
            }
            let mut held = Vec::new();
            for (g, b, why, kv) in &lost {
                let leases = self.leases_in(tx, b)?;
                if leases.is_empty() {
                    tracing::warn!(
                        "block {} of pool {} is no longer this node's: {why}; it is not used again",
                        b.block,
                        b.pool
                    );
                    self.drop_block(tx, b)?;
                } else {
                    held.push((*g, b.clone(), why.clone(), kv.clone(), leases));
                }
            }
            Ok(held)
        })?;
        // A lost block with our leases in it is not forgotten: claimed back
        // when etcd has no owner for it, else its owner must learn which of
        // its addresses are ours.
        for (g, b, why, kv, leases) in held {
            tracing::warn!("block {} of pool {} holds leases of this node but {why}", b.block, b.pool);
            self.take_back(store, Some(g), &b, &leases, kv.as_ref())?;
        }
        Ok(())
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
        if let Some((_, high)) = self.etcd.revisions() {
            let note = revision_note(&self.network);
            if tx.note(&note)?.and_then(|n| n.parse::<i64>().ok()).is_none_or(|seen| seen < high) {
                tx.set_note(&note, &high.to_string())?;
            }
        }
        Ok(())
    }

    /// Claims a block of `g`'s pool for this node, unless another process of
    /// this node has just done so: claims are made holding the node
    /// database's lock, so concurrent ADDs of one node claim one block, not
    /// one each. The blocks the node has that `known` lacks (none: no block
    /// is left to claim).
    fn claim(&self, store: &mut StoreHandle, g: &Geometry, known: &[NodeBlock]) -> Result<Vec<NodeBlock>> {
        let keys = self.keys(&g.pool.name);
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let network = self.network.clone();
        let claimed = store.write(|tx| {
            let now_mine: Vec<NodeBlock> =
                tx.node_blocks(&network, &g.pool.name)?.into_iter().filter(|b| b.state == BlockState::Owned).collect();
            let new: Vec<NodeBlock> =
                now_mine.iter().filter(|b| !known.iter().any(|k| k.block == b.block)).cloned().collect();
            if !new.is_empty() {
                let blocks: Vec<IpNet> = new.iter().map(|b| b.block).collect();
                let taken: Vec<IpAddr> = new.iter().flat_map(|b| b.taken.iter().copied()).collect();
                if let Some(view) = g.node_view(&blocks, &[], &taken) {
                    if !free_addresses(tx, &view, 1)?.is_empty() {
                        tracing::debug!("another call of this node claimed a block of pool {} meanwhile", g.pool.name);
                        return Ok(Some(new));
                    }
                }
            }
            for _ in 0..CLAIM_ROUNDS {
                let (definition_kv, owners, indexed) = self.read_pool(&keys, &definition, g)?;
                let Some(definition_kv) = definition_kv.filter(|_| indexed) else {
                    self.define(&keys, g)?;
                    continue;
                };
                let adopted: Vec<(IpNet, i64)> = owners
                    .iter()
                    .filter(|(block, (r, _))| self.is_ours(r) && !now_mine.iter().any(|b| b.block == **block))
                    .map(|(block, (_, kv))| (*block, kv.create_revision))
                    .collect();
                let (adopted, given_back): (Vec<_>, Vec<_>) = adopted
                    .into_iter()
                    .partition(|(block, revision)| !gave_back(tx, &network, &g.pool.name, block, *revision));
                // A claim this node gave back, shown again by an etcd
                // restored from an older backup: another node may have
                // claimed the block meanwhile and may hold its addresses, and
                // giving it back again would let anyone claim it before that
                // node notices. Left as it is for the operator (release-node).
                for (block, revision) in given_back {
                    tracing::warn!(
                        "block {block} of pool {} shows as this node's claim at revision {revision}, which it gave \
                         back (etcd restored from an older backup?): not used; another node may hold its addresses",
                        g.pool.name
                    );
                }
                if let Some(&(block, revision)) = adopted.first() {
                    // Claimed by a call of this node killed before it wrote
                    // it down: the node takes it back (its addresses are read
                    // at the next confirmation, before any is handed out).
                    tracing::warn!(
                        "block {block} of pool {} is this node's in etcd but was not recorded: adopted",
                        g.pool.name
                    );
                    let taken = self.block_addresses(&keys, &block)?;
                    let shared = owners.get(&block).is_some_and(|(r, _)| r.shared);
                    let b = self.owned_block(g, block, revision, taken, shared);
                    self.stamp(tx)?;
                    tx.put_node_block(&b)?;
                    return Ok(Some(vec![b]));
                }
                let free: Vec<IpNet> = g
                    .claim_order(&self.settings.node)
                    .filter(|b| !owners.contains_key(b))
                    .take(CLAIM_ATTEMPTS)
                    .collect();
                if free.is_empty() {
                    return Ok(None);
                }
                for block in free {
                    if let Some(b) = self.claim_one(&keys, g, block, &definition, &definition_kv)? {
                        self.stamp(tx)?;
                        tx.put_node_block(&b)?;
                        tracing::info!("claimed block {block} of pool {}", g.pool.name);
                        return Ok(Some(vec![b]));
                    }
                    tracing::debug!("block {block} of pool {} was claimed by another node first", g.pool.name);
                }
            }
            Err(CniError::new(
                Code::TryAgainLater,
                format!(
                    "pool {}: every block this node tried was claimed by another node first: try again",
                    g.pool.name
                ),
            ))
        })?;
        // The new ones (claimed by this call, or by another call of this
        // node just now): confirmed at their claim.
        Ok(claimed.unwrap_or_default())
    }

    /// The pool's definition in etcd (refusing one that differs from ours:
    /// nodes cutting a pool differently would hand out overlapping blocks)
    /// and every block with its owner.
    fn read_pool(&self, keys: &PoolKeys, definition: &[u8], g: &Geometry) -> Result<(Option<Kv>, Owners, bool)> {
        let net = self.net_keys();
        let txn = Txn {
            success: vec![
                Op::Range(RangeRequest::key(keys.definition())),
                Op::Range(RangeRequest::prefix(keys.blocks())),
                Op::Range(RangeRequest::key(net.node(&self.settings.node))),
                Op::Range(RangeRequest::key(net.pool(&g.pool.name)).keys_only()),
                Op::Range(RangeRequest::key(net.recovery())),
            ],
            ..Txn::default()
        };
        let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
        let mut responses = answer.responses.into_iter();
        let (
            Some(OpResponse::Range(def)),
            Some(OpResponse::Range(blocks)),
            Some(OpResponse::Range(entry)),
            Some(OpResponse::Range(indexed)),
            Some(OpResponse::Range(recovery)),
        ) = (responses.next(), responses.next(), responses.next(), responses.next(), responses.next())
        else {
            return Err(etcd_error(not_ranges()));
        };
        if let Some(kv) = recovery.kvs.first() {
            let what = serde_json::from_slice::<RecoveryRecord>(&kv.value).map_or_else(
                |_| String::new(),
                |r| format!(" (node {} saw its revision go back from {} to {})", shown(&r.node), r.from, r.to),
            );
            return Err(CniError::new(
                Code::TryAgainLater,
                format!(
                    "etcd lost history{what}: while the nodes of network {:?} re-claim their blocks, no block is \
                     claimed (for at most offlineGrace + 3 × ipam.timeout): try again later",
                    self.network
                ),
            ));
        }
        // Before any claim or adoption: this node name is this database's.
        self.register(entry.kvs.into_iter().next())?;
        let definition_kv = def.kvs.into_iter().next();
        if let Some(kv) = &definition_kv {
            check_definition(kv, definition, g, &keys.definition())?;
        }
        let owners = blocks
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let block = keys.parse_block(&kv.key)?;
                let record = serde_json::from_slice::<BlockRecord>(&kv.value).ok()?;
                Some((block, (record, kv)))
            })
            .collect();
        Ok((definition_kv, owners, !indexed.kvs.is_empty()))
    }

    /// Defines the pool in etcd, in one transaction: its cut (which every
    /// claim and static reservation compares) and its entry in the
    /// network's index of pools, only while no pool of the index overlaps
    /// it and the index is as read. Two names over one range (a pool renamed
    /// on some nodes) would each hand out its addresses: error 7 naming
    /// both. A pool defined by an older build gets its index entry here too.
    fn define(&self, keys: &PoolKeys, g: &Geometry) -> Result<()> {
        let net = self.net_keys();
        let ours = PoolRecord::of(g.pool, g.block_size);
        let definition = to_bytes(&ours);
        for _ in 0..CLAIM_ROUNDS {
            let read = Txn {
                success: vec![
                    Op::Range(RangeRequest::key(keys.definition())),
                    Op::Range(RangeRequest::prefix(net.pools())),
                ],
                ..Txn::default()
            };
            let answer = self.etcd.txn(&read).map_err(etcd_error)?;
            let revision = answer.revision;
            let mut responses = answer.responses.into_iter();
            let (Some(OpResponse::Range(def)), Some(OpResponse::Range(index))) = (responses.next(), responses.next())
            else {
                return Err(etcd_error(not_ranges()));
            };
            let def = def.kvs.into_iter().next();
            if let Some(kv) = &def {
                check_definition(kv, &definition, g, &keys.definition())?;
            }
            let mut indexed = false;
            for kv in &index.kvs {
                match net.parse_pool(&kv.key) {
                    Some(name) if name == g.pool.name => indexed = true,
                    Some(name) => {
                        let Ok(theirs) = serde_json::from_slice::<PoolRecord>(&kv.value) else { continue };
                        if let Some((mine, other)) = ours.overlap(&theirs) {
                            return Err(CniError::config(
                                &format!("pool {}", g.pool.name),
                                format!(
                                    "its range {mine} overlaps range {} of pool {} of the same network in the \
                                     cluster (etcd key {}): two pools over one range would each hand out its \
                                     addresses. Give each range one pool name on every node",
                                    shown(other),
                                    shown(name),
                                    shown_bytes(&kv.key)
                                ),
                            ));
                        }
                    }
                    None => {}
                }
            }
            if def.is_some() && indexed {
                return Ok(());
            }
            let mut txn = Txn {
                compare: vec![Compare::UnchangedSince { prefix: net.pools().into_bytes(), revision }],
                success: vec![Op::Put {
                    key: net.pool(&g.pool.name).into_bytes(),
                    value: definition.clone(),
                    lease: 0,
                }],
                failure: Vec::new(),
            };
            match &def {
                Some(kv) => txn.compare.push(Compare::mod_revision_is(keys.definition(), kv.mod_revision)),
                None => {
                    txn.compare.push(Compare::absent(keys.definition()));
                    txn.success.push(Op::Put {
                        key: keys.definition().into_bytes(),
                        value: definition.clone(),
                        lease: 0,
                    });
                }
            }
            if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
                tracing::info!("pool {} is defined in the cluster ({})", g.pool.name, keys.definition());
                return Ok(());
            }
        }
        Err(CniError::new(
            Code::TryAgainLater,
            format!("pool {}: the network's pools kept changing while it was defined: try again", g.pool.name),
        ))
    }

    /// One claim: the block key created if absent, with the pool's
    /// definition unchanged since `known` (read by [`Node::read_pool`]);
    /// reads the addresses others already hold in it in the same transaction.
    fn claim_one(
        &self,
        keys: &PoolKeys,
        g: &Geometry,
        block: IpNet,
        definition: &[u8],
        known: &Kv,
    ) -> Result<Option<NodeBlock>> {
        let record = self.block_record(g);
        let txn = Txn {
            compare: vec![
                Compare::absent(keys.block(&block)),
                Compare::mod_revision_is(keys.definition(), known.mod_revision),
                Compare::absent(self.net_keys().recovery()),
            ],
            success: vec![
                Op::Put { key: keys.block(&block).into_bytes(), value: to_bytes(&record), lease: 0 },
                Op::Range(RangeRequest::prefix(keys.block_addresses(&block))),
            ],
            failure: vec![Op::Range(RangeRequest::key(keys.definition()))],
        };
        let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
        if !answer.succeeded {
            if let Some(OpResponse::Range(def)) = answer.responses.first() {
                if let Some(kv) = def.kvs.first() {
                    check_definition(kv, definition, g, &keys.definition())?;
                }
            }
            return Ok(None);
        }
        let taken = match answer.responses.get(1) {
            Some(OpResponse::Range(addresses)) => self.taken(keys, &addresses.kvs),
            _ => Vec::new(),
        };
        Ok(Some(self.owned_block(g, block, answer.revision, taken, record.shared)))
    }

    fn owned_block(&self, g: &Geometry, block: IpNet, revision: i64, taken: Vec<IpAddr>, shared: bool) -> NodeBlock {
        NodeBlock {
            shared,
            network: self.network.clone(),
            pool: g.pool.name.clone(),
            block,
            state: BlockState::Owned,
            revision,
            confirmed: self.clock().now_ms,
            taken,
            since: unix_now(),
        }
    }

    /// The record of a claim of this node, shared as its settings say for `g`.
    fn block_record(&self, g: &Geometry) -> BlockRecord {
        BlockRecord {
            node: self.settings.node.clone(),
            at: unix_now(),
            released: false,
            db: self.db.clone(),
            shared: self.settings.shares(g.block_count()),
        }
    }

    fn block_addresses(&self, keys: &PoolKeys, block: &IpNet) -> Result<Vec<IpAddr>> {
        let answer = self.etcd.range(&RangeRequest::prefix(keys.block_addresses(block))).map_err(etcd_error)?;
        Ok(self.taken(keys, &answer.kvs))
    }

    /// Reserves `address` cluster-wide for `who`: its record is created in
    /// etcd if absent, and only while its block is this node's or nobody's.
    /// Error 101 names the attachment or node that holds it.
    fn reserve_static(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        address: IpAddr,
        who: &Attachment,
    ) -> Result<()> {
        // Not in a cluster pool: ipam-da-static reports it (102).
        let Some(g) = geometries.iter().find(|g| g.pool.check_static(address).is_ok()) else { return Ok(()) };
        let keys = self.keys(&g.pool.name);
        let block = g.block_of(address);
        let key = keys.address(&block, address);
        // Reserved by an earlier ADD of this attachment: nothing to do (and
        // its row keeps that ADD's id, so a failed repeat ADD's rollback
        // leaves it).
        match store.read(|tx| tx.node_record(&key))? {
            Some(r) if r.owner == *who && r.state == RecordState::Held => {
                tracing::debug!("{address} is already reserved for this attachment");
                return Ok(());
            }
            // Another attachment of this node holds it (or is releasing it):
            // its row is not to be touched.
            Some(r) if r.owner != *who => {
                return Err(CniError::new(
                    Code::AddressInUse,
                    format!(
                        "requested address {address} is in use: on this node ({}) by container {} interface {}{}",
                        self.settings.node,
                        r.owner.container_id,
                        r.owner.ifname,
                        if r.state == RecordState::Releasing { ", being released" } else { "" }
                    ),
                )
                .with_details(format!("network {:?}, pool {}", self.network, g.pool.name)))
            }
            _ => {}
        }
        let value = to_text(&AddressRecord {
            kind: Kind::Static,
            node: self.settings.node.clone(),
            container: who.container_id.clone(),
            ifname: who.ifname.clone(),
            lender: String::new(),
        });
        let own_block = store.read(|tx| {
            Ok(tx
                .node_blocks(&self.network, &g.pool.name)?
                .into_iter()
                .find(|b| b.block == block && b.state == BlockState::Owned))
        })?;
        let row = NodeRecord {
            key: key.clone(),
            value: value.clone(),
            pool: g.pool.name.clone(),
            address,
            kind: Kind::Static,
            owner: who.clone(),
            added_by: None,
            state: RecordState::Writing,
        };
        // Written down before etcd has it: a kill after the etcd write leaves
        // a row that DEL and GC release.
        store.write(|tx| tx.put_node_record(&row))?;
        let mut block_compare = match &own_block {
            Some(b) => Compare::CreateRevision {
                key: keys.block(&block).into_bytes(),
                cmp: etcd::Cmp::Equal,
                revision: b.revision,
            },
            None => Compare::absent(keys.block(&block)),
        };
        // The pool's cut is compared as a claim compares it: an address
        // reserved under another cut would lie in another node's block as
        // that node cuts the pool, where it never looks for records. A pool
        // not yet in etcd is defined first.
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let recovery_key = self.net_keys().recovery();
        let mut defined = false;
        let mut in_shared = false;
        let (holder, owner) = loop {
            let txn = Txn {
                compare: [
                    Compare::absent(key.clone()),
                    block_compare.clone(),
                    Compare::value_is(keys.definition(), definition.clone()),
                ]
                .into_iter()
                // In a block nobody claims, not while nodes re-claim theirs
                // after etcd lost history: it may be one of them.
                .chain(own_block.is_none().then(|| Compare::absent(recovery_key.clone())))
                .collect(),
                success: vec![Op::Put { key: key.clone().into_bytes(), value: value.clone().into_bytes(), lease: 0 }],
                failure: vec![
                    Op::Range(RangeRequest::key(key.clone())),
                    Op::Range(RangeRequest::key(keys.block(&block))),
                    Op::Range(RangeRequest::key(keys.definition())),
                ],
            };
            let answer = match self.etcd.txn(&txn) {
                Ok(answer) => answer,
                Err(e) => {
                    release_later(store, &key)?;
                    return Err(etcd_error(e));
                }
            };
            if answer.succeeded {
                tracing::info!("reserved {address} of pool {} cluster-wide", g.pool.name);
                return store.write(|tx| tx.set_node_record_state(&key, RecordState::Held));
            }
            let mut failure = answer.responses.into_iter().map(|r| match r {
                OpResponse::Range(r) => r.kvs.into_iter().next(),
                _ => None,
            });
            let (holder, owner, theirs) =
                (failure.next().flatten(), failure.next().flatten(), failure.next().flatten());
            let mut again = false;
            let refused = match theirs {
                Some(kv) => check_definition(&kv, &definition, g, &keys.definition()).err(),
                None if !defined => {
                    (defined, again) = (true, true);
                    self.define(&keys, g).err()
                }
                None => None,
            };
            if let Some(e) = refused {
                store.write(|tx| tx.drop_node_record(&key))?;
                return Err(e);
            }
            // Free in another node's shared block: granted as any address
            // of it is, while the block's record is as read.
            if let (None, Some(kv), None, false) = (&holder, &owner, &own_block, in_shared) {
                if serde_json::from_slice::<BlockRecord>(&kv.value).is_ok_and(|r| r.shared && !r.released) {
                    block_compare = Compare::mod_revision_is(keys.block(&block), kv.mod_revision);
                    (in_shared, again) = (true, true);
                }
            }
            if again {
                continue;
            }
            break (holder, owner);
        };
        if let Some(kv) = &holder {
            if kv.value == value.as_bytes() {
                tracing::debug!("{address} is already reserved for this attachment");
                return store.write(|tx| tx.set_node_record_state(&key, RecordState::Held));
            }
            // Lent out by its block's owner: free there, so it can be ours,
            // atomically; DEL gives it back to the lender.
            let is_lent = serde_json::from_slice::<AddressRecord>(&kv.value).is_ok_and(|r| r.kind == Kind::Lent);
            if is_lent && self.take_lent(store, kv, &row)? {
                tracing::info!("reserved {address} of pool {} cluster-wide, lent by its block's owner", g.pool.name);
                return Ok(());
            }
        }
        store.write(|tx| tx.drop_node_record(&key))?;
        let why = match (holder, owner) {
            (Some(kv), _) => match serde_json::from_slice::<AddressRecord>(&kv.value) {
                Ok(r) if r.kind == Kind::Lent => format!("node {} has lent it out", shown(&r.node)),
                Ok(r) => format!(
                    "it is held ({}) on node {} by container {} interface {}",
                    kind_name(r.kind),
                    shown(&r.node),
                    shown(&r.container),
                    shown(&r.ifname)
                ),
                Err(_) => format!("etcd key {key} holds it"),
            },
            (None, Some(kv)) => match serde_json::from_slice::<BlockRecord>(&kv.value) {
                Ok(r) if r.node == self.settings.node => {
                    return Err(CniError::new(
                        Code::TryAgainLater,
                        format!(
                            "block {block} of pool {} changed while {address} was being reserved: try again",
                            g.pool.name
                        ),
                    ))
                }
                Ok(r) => format!("it lies in block {block}, which node {} owns", shown(&r.node)),
                Err(_) => format!("it lies in block {block}, which another node owns"),
            },
            (None, None) => {
                return Err(CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "block {block} of pool {} changed while {address} was being reserved: try again",
                        g.pool.name
                    ),
                ))
            }
        };
        Err(CniError::new(
            Code::AddressInUse,
            format!("requested address {address} is in use elsewhere in the cluster: {why}"),
        )
        .with_details(format!("network {:?}, pool {}", self.network, g.pool.name)))
    }

    /// Lends up to half of the free addresses of this node's blocks of a
    /// pool (at most [`LEND_MAX`]) when a node found no room since this node
    /// last lent. They are held in the node database first (under
    /// [`lent_network`]), then recorded in etcd as `lent`: a kill between the
    /// two leaves them held here, and they are recorded at the next request.
    fn lend(&self, store: &mut StoreHandle, g: &Geometry, blocks: &[NodeBlock], wanted: i64) -> Result<()> {
        let note = format!("lent:{}/{}", self.network, g.pool.name);
        let keys = self.keys(&g.pool.name);
        let holder = lend_holder(&self.network);
        let own: Vec<IpNet> = blocks.iter().map(|b| b.block).collect();
        let Some(view) = view(g, blocks, &[]) else { return Ok(()) };
        let held = store.write(|tx| {
            if tx.note(&note)?.and_then(|n| n.parse::<i64>().ok()).is_some_and(|seen| seen >= wanted) {
                return Ok(None);
            }
            let free = free_addresses(tx, &view, 2 * LEND_MAX)?;
            for &address in free.iter().take(free.len().div_ceil(2)) {
                tx.insert_lease(address, &g.pool.name, &holder)?;
            }
            tx.set_note(&note, &wanted.to_string())?;
            // Every address held for lending, so that one a kill left
            // without its record is recorded now.
            let held: Vec<IpAddr> = tx
                .leases_of(&holder)?
                .into_iter()
                .map(|l| l.address)
                .filter(|a| own.iter().any(|b| b.contains(a)))
                .collect();
            Ok(Some(held))
        })?;
        let Some(held) = held.filter(|h| !h.is_empty()) else { return Ok(()) };
        let keyed: Vec<String> = held.iter().map(|&a| keys.address(&g.block_of(a), a)).collect();
        let present = self
            .etcd
            .read_in_txns(keyed.iter().map(|k| vec![Op::Range(RangeRequest::key(k.clone()).keys_only())]).collect())
            .map_err(etcd_error)?;
        let missing: Vec<&String> = keyed
            .iter()
            .zip(&present)
            .filter(|(_, r)| matches!(r, OpResponse::Range(r) if r.kvs.is_empty()))
            .map(|(k, _)| k)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let record =
            to_bytes(&AddressRecord { kind: Kind::Lent, node: self.settings.node.clone(), ..AddressRecord::default() });
        // Each key is written only if absent, on its own: the transactions
        // need not be one.
        let mut lent = 0;
        for chunk in missing.chunks(etcd::MAX_TXN_OPS) {
            let txn = Txn {
                compare: chunk.iter().map(|k| Compare::absent((*k).clone())).collect(),
                success: chunk
                    .iter()
                    .map(|k| Op::Put { key: (*k).clone().into_bytes(), value: record.clone(), lease: 0 })
                    .collect(),
                failure: Vec::new(),
            };
            if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
                lent += chunk.len();
            }
        }
        if lent > 0 {
            tracing::info!("lent {lent} address(es) of pool {} to nodes without room", g.pool.name);
        }
        Ok(())
    }

    /// An address for `who` from one lent out in the pool: this node's own
    /// (taken back: its record goes and its hold is released, so that it is
    /// free in its block again) or another node's (its record becomes
    /// `borrowed` by `who`, by compare-and-swap). With none lent, the pool's
    /// `wanted` key is bumped so that nodes with room lend.
    fn borrow(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        mine: &[NodeBlock],
        who: &Attachment,
    ) -> Result<Option<IpAddr>> {
        let keys = self.keys(&g.pool.name);
        let answer = self.etcd.range(&RangeRequest::prefix(keys.addresses())).map_err(etcd_error)?;
        let lent: Vec<(Kv, AddressRecord, IpNet, IpAddr)> = answer
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let record: AddressRecord = serde_json::from_slice(&kv.value).ok()?;
                let (block, address) = keys.parse_address(&kv.key)?;
                (record.kind == Kind::Lent).then_some((kv, record, block, address))
            })
            .collect();
        // Our own first: taking one back costs no other node anything.
        let ours =
            lent.iter().find(|(_, r, block, _)| r.node == self.settings.node && mine.iter().any(|b| b.block == *block));
        if let Some((kv, _, _, address)) = ours {
            let txn = Txn {
                compare: vec![Compare::mod_revision_is(kv.key.clone(), kv.mod_revision)],
                success: vec![Op::Delete { key: kv.key.clone(), range_end: None }],
                failure: Vec::new(),
            };
            if self.etcd.txn(&txn).map_err(etcd_error)?.succeeded {
                let holder = lend_holder(&self.network);
                let address = *address;
                store.write(|tx| tx.release_address(address, &holder).map(drop))?;
                tracing::info!("took back {address} of pool {}, which this node had lent out", g.pool.name);
                return Ok(Some(address));
            }
        }
        for (kv, record, _, address) in lent.iter().filter(|(_, r, _, _)| r.node != self.settings.node) {
            let row = NodeRecord {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                value: to_text(&AddressRecord {
                    kind: Kind::Borrowed,
                    node: self.settings.node.clone(),
                    container: who.container_id.clone(),
                    ifname: who.ifname.clone(),
                    lender: String::new(),
                }),
                pool: g.pool.name.clone(),
                address: *address,
                kind: Kind::Borrowed,
                owner: who.clone(),
                added_by: None,
                state: RecordState::Writing,
            };
            if self.take_lent(store, kv, &row)? {
                tracing::info!("borrowed {address} of pool {} from node {}", g.pool.name, shown(&record.node));
                return Ok(Some(*address));
            }
        }
        let want = AddressRecord { kind: Kind::Lent, node: self.settings.node.clone(), ..AddressRecord::default() };
        let txn = Txn {
            success: vec![Op::Put { key: keys.wanted().into_bytes(), value: to_bytes(&want), lease: 0 }],
            ..Txn::default()
        };
        self.etcd.txn(&txn).map_err(etcd_error)?;
        tracing::info!("pool {}: nothing is lent out; asked the nodes with room to lend", g.pool.name);
        Ok(None)
    }

    /// Makes a lent address `row`'s (a static reservation or a borrowing),
    /// by compare-and-swap on the lent record: the record names its lender,
    /// to whom releasing it gives it back. False when another node was first.
    fn take_lent(&self, store: &mut StoreHandle, kv: &Kv, row: &NodeRecord) -> Result<bool> {
        let Ok(lent) = serde_json::from_slice::<AddressRecord>(&kv.value) else { return Ok(false) };
        let Ok(mut record) = serde_json::from_str::<AddressRecord>(&row.value) else { return Ok(false) };
        record.lender = lent.node;
        let row = NodeRecord { value: to_text(&record), state: RecordState::Writing, ..row.clone() };
        let txn = Txn {
            // Not while nodes re-claim after etcd lost history: the lent
            // record may be one its lender has taken back since the backup.
            compare: vec![
                Compare::mod_revision_is(kv.key.clone(), kv.mod_revision),
                Compare::absent(self.net_keys().recovery()),
            ],
            success: vec![Op::Put { key: kv.key.clone(), value: row.value.clone().into_bytes(), lease: 0 }],
            failure: Vec::new(),
        };
        Ok(matches!(self.write_record(store, &row, &txn)?, RecordWrite::Written))
    }

    /// The record protocol, for a record this node writes for an attachment:
    /// its row is written `writing` before etcd has the record (a kill after
    /// the etcd write leaves a row that DEL and GC release), then `held`
    /// when etcd took it, dropped when etcd refused it, and left to be
    /// released when etcd's answer did not come (it may have taken it).
    fn write_record(&self, store: &mut StoreHandle, row: &NodeRecord, txn: &Txn) -> Result<RecordWrite> {
        let ours = store.write(|tx| match tx.node_record(&row.key)? {
            // Another attachment's row: its write may have reached etcd.
            Some(r) if r.owner != row.owner => Ok(false),
            _ => tx.put_node_record(row).map(|()| true),
        })?;
        if !ours {
            return Ok(RecordWrite::Busy);
        }
        match self.etcd.txn(txn) {
            Ok(answer) if answer.succeeded => {
                let kept = store.write(|tx| match tx.node_record(&row.key)? {
                    Some(now) if now.value == row.value => {
                        tx.set_node_record_state(&row.key, RecordState::Held)?;
                        self.stamp(tx).map(|()| true)
                    }
                    _ => Ok(false),
                })?;
                if kept {
                    return Ok(RecordWrite::Written);
                }
                // A GC that did not list the attachment released its row
                // while the record was being written: the record must go too.
                let releasing = NodeRecord { state: RecordState::Releasing, ..row.clone() };
                store.write(|tx| tx.put_node_record(&releasing))?;
                self.release(store, std::slice::from_ref(&releasing))?;
                Err(CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "{} was released by a GC or DEL of this attachment while it was being recorded: try again",
                        row.address
                    ),
                ))
            }
            Ok(answer) => {
                store.write(|tx| tx.drop_node_record_if(&row.key, &row.value))?;
                Ok(RecordWrite::Refused(answer.responses))
            }
            Err(e) => {
                release_later(store, &row.key)?;
                Err(etcd_error(e))
            }
        }
    }

    /// Deletes these records from etcd (each only while it is still ours)
    /// and then from the node database. In one local transaction first, each
    /// is marked `releasing` and its attachment's lease on the address is
    /// released: ipam-da-static, after this delegate in the stack, would
    /// release it too, but a DEL killed in between would leave the address
    /// free in the cluster and still held here. When etcd cannot be reached
    /// the records stay `releasing`, and a later call finishes. Never fails
    /// on etcd: a DEL must succeed.
    pub fn release(&self, store: &mut StoreHandle, records: &[NodeRecord]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        // Only the rows still as read: another call may have released one
        // meanwhile and handed its address out again, under a row of the
        // same key that is not this call's to release.
        let records: Vec<NodeRecord> = store.write(|tx| {
            let mut current = Vec::with_capacity(records.len());
            for r in records {
                if tx.node_record(&r.key)?.is_none_or(|now| now.value != r.value) {
                    continue;
                }
                tx.set_node_record_state(&r.key, RecordState::Releasing)?;
                if tx.release_address(r.address, &r.owner)? {
                    tracing::info!("released {} of pool {}", r.address, r.pool);
                }
                current.push(r.clone());
            }
            Ok(current)
        })?;
        // In transactions etcd takes (a GC after a reboot, or the releases
        // an outage left, can be hundreds): each record's release stands alone.
        let mut done: Vec<&NodeRecord> = Vec::new();
        for chunk in records.chunks(etcd::MAX_TXN_OPS) {
            let all = Txn {
                compare: chunk.iter().map(|r| Compare::value_is(r.key.clone(), r.value.clone())).collect(),
                success: chunk.iter().map(release_op).collect(),
                failure: Vec::new(),
            };
            match self.etcd.txn(&all) {
                Ok(answer) if answer.succeeded => done.extend(chunk),
                // One of them is no longer as we wrote it: one by one.
                Ok(_) => done.extend(chunk.iter().filter(|r| self.release_one(r))),
                Err(e) => {
                    let e = etcd_error(e);
                    tracing::warn!("{} cluster record(s) stay to be released by a later call: {e}", chunk.len());
                }
            }
        }
        // Only the rows released: another call may have released one of
        // them too meanwhile, and handed its address out again.
        store.write(|tx| done.iter().try_for_each(|r| tx.drop_node_record_if(&r.key, &r.value)))?;
        for r in done {
            tracing::info!("released {} ({}) of pool {} in the cluster", r.address, r.kind.as_str(), r.pool);
        }
        Ok(())
    }

    /// True when the record is gone from etcd, or is no longer ours to delete.
    fn release_one(&self, r: &NodeRecord) -> bool {
        let txn = Txn {
            compare: vec![Compare::value_is(r.key.clone(), r.value.clone())],
            success: vec![release_op(r)],
            failure: Vec::new(),
        };
        match self.etcd.txn(&txn) {
            Ok(answer) => {
                if !answer.succeeded {
                    tracing::warn!("{} is no longer this node's record for {}: left as it is", r.key, r.address);
                }
                true
            }
            Err(e) => {
                tracing::warn!("{} stays to be released when etcd answers: {e}", r.key);
                false
            }
        }
    }

    /// Finishes what earlier calls could not: releases that did not reach
    /// etcd, and blocks being given back once no call can still be
    /// allocating in them. Best effort: a failure waits for the next call.
    pub fn settle(&self, store: &mut StoreHandle) {
        let pending = store.read(|tx| {
            let records: Vec<NodeRecord> = tx
                .unsettled_node_records()?
                .into_iter()
                .filter(|r| r.state == RecordState::Releasing && r.owner.network == self.network)
                .collect();
            let (mut blocks, mut contested) = (Vec::new(), Vec::new());
            for b in tx.all_node_blocks()?.into_iter().filter(|b| b.network == self.network) {
                match b.state {
                    BlockState::Releasing => blocks.push(b),
                    BlockState::Contested => {
                        // Leases still unpublished (a kill, or etcd away, during
                        // its contest), or none left: nothing of this node in it.
                        let held = self.leases_in(tx, &b)?;
                        let keys = self.keys(&b.pool);
                        let mut unpublished = false;
                        for l in &held {
                            let row = tx.node_record(&keys.address(&b.block, l.address))?;
                            unpublished |= row.is_none_or(|r| r.state == RecordState::Writing);
                        }
                        if held.is_empty() || unpublished {
                            contested.push((b, held));
                        }
                    }
                    _ => {}
                }
            }
            Ok((records, blocks, contested))
        });
        let (records, blocks, contested) = match pending {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!("cannot read what is left to settle with etcd: {e}");
                return;
            }
        };
        if let Err(e) = self.release(store, &records) {
            tracing::warn!("releases left for a later call: {e}");
        }
        for (b, held) in contested {
            let done = if held.is_empty() {
                tracing::info!("contested block {} of pool {} holds no lease of this node any more", b.block, b.pool);
                store.write(|tx| self.drop_block(tx, &b))
            } else {
                self.contest(store, &self.keys(&b.pool), &b, &held, "")
            };
            if let Err(e) = done {
                tracing::warn!("contested block {} of pool {} is settled later: {e}", b.block, b.pool);
            }
        }
        // While a block being given back waits, an ADD that saw it as this
        // node's may still be allocating in it.
        let due = unix_now() - (self.settings.call_timeout * 3).as_secs() as i64;
        for b in blocks.into_iter().filter(|b| b.since <= due) {
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
            let records = tx.node_records(&network)?;
            for mut b in
                tx.all_node_blocks()?.into_iter().filter(|b| b.network == network && b.state == BlockState::Owned)
            {
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
                    tx.put_node_block(&b)?;
                }
            }
            Ok(())
        })
    }

    /// Deletes a `releasing` block from etcd (only our claim of it), unless a
    /// lease appeared in it meanwhile, which makes it owned again.
    fn give_back(&self, store: &mut StoreHandle, b: &NodeBlock) -> Result<()> {
        let keys = self.keys(&b.pool);
        store.write(|tx| {
            if tx.count_leases(b.block.network(), b.block.broadcast())? > 0 {
                tracing::info!("block {} of pool {} holds a lease again: kept", b.block, b.pool);
                return tx.put_node_block(&NodeBlock { state: BlockState::Owned, since: unix_now(), ..b.clone() });
            }
            let txn = Txn {
                compare: vec![Compare::CreateRevision {
                    key: keys.block(&b.block).into_bytes(),
                    cmp: etcd::Cmp::Equal,
                    revision: b.revision,
                }],
                success: vec![Op::Delete { key: keys.block(&b.block).into_bytes(), range_end: None }],
                failure: Vec::new(),
            };
            let answer = self.etcd.txn(&txn).map_err(etcd_error)?;
            // So that this claim is never adopted again, should an etcd
            // restored from an older backup show it once more.
            tx.set_note(&gave_back_note(&b.network, &b.pool, &b.block), &b.revision.to_string())?;
            if answer.succeeded {
                tracing::info!("gave block {} of pool {} back to the cluster", b.block, b.pool);
            } else {
                tracing::warn!("block {} of pool {} was no longer this node's claim", b.block, b.pool);
            }
            tx.drop_node_block(&b.network, &b.pool, &b.block)
        })
    }

    /// STATUS: whether etcd answers (a one-key read).
    pub fn reachable(&self) -> std::result::Result<(), etcd::Error> {
        let probe = RangeRequest { limit: 1, ..RangeRequest::prefix(format!("{}/", self.settings.prefix)).keys_only() };
        self.etcd.range(&probe).map(drop)
    }
}

fn gave_back_note(network: &str, pool: &str, block: &IpNet) -> String {
    format!("gave-back:{network}/{pool}/{block}")
}

/// Whether this node gave back its claim of `block` at `revision`.
fn gave_back(tx: &Tx, network: &str, pool: &str, block: &IpNet, revision: i64) -> bool {
    tx.note(&gave_back_note(network, pool, block)).ok().flatten().is_some_and(|n| n == revision.to_string())
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

/// After a write whose outcome etcd did not tell (a timeout may come after
/// the commit): the row stays, to be released, so that a record etcd did
/// take is not left without its row. Releasing compares the value, so a
/// write that did not happen costs one request later.
fn release_later(store: &mut StoreHandle, key: &str) -> Result<()> {
    store.write(|tx| tx.set_node_record_state(key, RecordState::Releasing))
}

/// What releasing a record does in etcd (see [`AddressRecord::released`]).
fn release_op(r: &NodeRecord) -> Op {
    match serde_json::from_str::<AddressRecord>(&r.value).ok().and_then(|a| a.released()) {
        Some(lent) => Op::Put { key: r.key.clone().into_bytes(), value: to_bytes(&lent), lease: 0 },
        None => Op::Delete { key: r.key.clone().into_bytes(), range_end: None },
    }
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
    let mut free = Vec::new();
    for (lo, hi) in view.allocatable() {
        let mut from = lo;
        while free.len() < limit {
            let Some(address) = tx.first_unleased(from, hi)? else { break };
            free.push(address);
            if address == hi {
                break;
            }
            from = shared::addr::from_u128(shared::addr::to_u128(address) + 1);
        }
    }
    Ok(free)
}

fn not_ranges() -> etcd::Error {
    etcd::Error::Protocol("a txn of ranges answered with other responses".into())
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
    let mut with_room = Vec::new();
    for b in blocks.iter().filter(|b| !b.shared) {
        if with_room.len() == MAX_IN_VIEW {
            break;
        }
        if let Some(view) = view(g, std::slice::from_ref(b), &[]) {
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

fn check_definition(kv: &Kv, ours: &[u8], g: &Geometry, key: &str) -> Result<()> {
    if kv.value == ours {
        return Ok(());
    }
    let theirs = shown_bytes(&kv.value);
    Err(CniError::config(
        &format!("pool {}", g.pool.name),
        format!(
            "its ranges or blockSize ({}) differ from the cluster's ({theirs}, etcd key {key}): every node must \
             configure a cluster pool alike, or their blocks would overlap",
            String::from_utf8_lossy(ours)
        ),
    ))
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Static => "asked for by name",
        Kind::Borrowed => "borrowed",
        Kind::Lent => "lent",
        Kind::Allocated => "allocated in a shared block",
    }
}

/// etcd's failures in the contract's codes: unreachable is 11 (try again
/// later); refused credentials, a user without the rights, a certificate
/// that does not verify and unusable settings are 7 (a setting to fix,
/// which trying again does not). The one mapping, the operator's tool's too.
pub fn etcd_error(e: etcd::Error) -> CniError {
    match e {
        etcd::Error::Unavailable(why) => CniError::new(Code::TryAgainLater, format!("etcd is unreachable: {why}")),
        etcd::Error::Refused { code: 3, message } if message.contains("authentication failed") => CniError::config(
            "ipam.cluster.etcd.passwordFile",
            format!(
                "etcd refused the user (ipam.cluster.etcd.username) or the password in this file: {}",
                shown(&message)
            ),
        ),
        etcd::Error::Refused { code: 3, message } if message.contains("user name is empty") => CniError::config(
            "ipam.cluster.etcd.username",
            format!("etcd requires authentication: set username and passwordFile ({})", shown(&message)),
        ),
        etcd::Error::Refused { code: 7, message } => CniError::config(
            "ipam.cluster.etcd.username",
            format!(
                "etcd denied this user the request: it needs read and write on the keys under ipam.cluster.etcd.prefix \
                 ({})",
                shown(&message)
            ),
        ),
        etcd::Error::Refused { code: 16, message } => {
            CniError::config("ipam.cluster.etcd.username", format!("etcd refused the credentials: {}", shown(&message)))
        }
        etcd::Error::Refused { code, message } => {
            CniError::new(Code::TryAgainLater, format!("etcd refused the request (code {code}): {}", shown(&message)))
        }
        etcd::Error::Settings { field, message } => CniError::config(&format!("ipam.cluster.etcd.{field}"), message),
        etcd::Error::Protocol(why) => {
            CniError::new(Code::TryAgainLater, format!("etcd answered something unexpected: {why}"))
        }
    }
}
