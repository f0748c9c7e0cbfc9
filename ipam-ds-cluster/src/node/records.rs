//! Address records this node writes for its attachments: addresses asked
//! for by name, lent and borrowed ones; the record protocol (row first, etcd
//! second) and releasing.

use super::*;
use crate::datastore::{BlockIs, Outcome, RecordRelease, Reservation, ReserveRefusal};

/// Most addresses an owner lends at once.
const LEND_MAX: usize = 16;

/// What became of writing an address record (see [`Node::write_record`]).
pub(super) enum RecordWrite<R> {
    Written,
    /// The store refused it: what it has instead.
    Refused(R),
    /// Another attachment of this node has a row at the key.
    Busy,
}

impl Node<'_> {
    /// Reserves `address` cluster-wide for `who`: its record is created in
    /// etcd if absent, and only while its block is this node's or nobody's.
    /// Error 101 names the attachment or node that holds it.
    pub(super) fn reserve_static(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        address: IpAddr,
        who: &Attachment,
    ) -> Result<()> {
        // Not in a cluster pool: ipam-da-static reports it (102).
        let Some(g) = geometries.iter().find(|g| g.pool.check_static(address).is_ok()) else { return Ok(()) };
        let block = g.block_of(address);
        let key = self.record_key(&g.pool.name, &block, address);
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
            identity: String::new(),
        });
        let mut own_block = store.read(|tx| {
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
        let mut block_is = match &own_block {
            Some(b) => BlockIs::Claim(b.revision),
            None => BlockIs::Unclaimed,
        };
        // The pool's cut is compared as a claim compares it: an address
        // reserved under another cut would lie in another node's block as
        // that node cuts the pool, where it never looks for records. A pool
        // not yet in etcd is defined first.
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let definition_name = self.datastore.definition_name(&g.pool.name);
        let mut defined = false;
        let mut in_shared = false;
        let mut known_again = false;
        let (holder, owner) = loop {
            let reservation = Reservation {
                pool: &g.pool.name,
                block,
                address,
                value: value.as_bytes(),
                block_is,
                definition: &definition,
            };
            let refusal = match self.write_record(store, &row, || self.datastore.reserve(&reservation))? {
                RecordWrite::Written => {
                    tracing::info!("reserved {address} of pool {} cluster-wide", g.pool.name);
                    return Ok(());
                }
                RecordWrite::Busy => {
                    return Err(CniError::new(
                        Code::AddressInUse,
                        format!("requested address {address} is in use: on this node, by another attachment"),
                    )
                    .with_details(format!("network {:?}, pool {}", self.network, g.pool.name)))
                }
                RecordWrite::Refused(refusal) => refusal,
            };
            let ReserveRefusal { holder, owner, definition: theirs } = refusal;
            let mut again = false;
            let refused = match theirs {
                Some(stored) => check_definition(&stored, &definition, g, &definition_name).err(),
                None if !defined => {
                    (defined, again) = (true, true);
                    self.define(g).err()
                }
                None => None,
            };
            if let Some(e) = refused {
                return Err(e);
            }
            // Free in another node's shared block: granted as any address
            // of it is, while the block's record is as read.
            if let (None, Some(kv), None, false) = (&holder, &owner, &own_block, in_shared) {
                if serde_json::from_slice::<BlockRecord>(&kv.value).is_ok_and(|r| r.shared && !r.released) {
                    block_is = BlockIs::At(kv.version);
                    (in_shared, again) = (true, true);
                }
            }
            // The block is this node's claim, which this call did not know
            // when it read the node's blocks: another call of this node
            // claimed it meanwhile, or a call killed after its claim left
            // it unrecorded. Not a conflict with anyone: reserved again, as
            // in a block of this node's own, once the claim is known (once).
            if let (None, Some(kv), false) = (&holder, &owner, known_again) {
                let stale = own_block.as_ref().is_none_or(|b| b.revision != kv.created);
                if stale {
                    if let Some(b) = self.own_claim(store, g, block, kv)? {
                        block_is = BlockIs::Claim(b.revision);
                        (own_block, known_again, again) = (Some(b), true, true);
                    }
                }
            }
            if again {
                continue;
            }
            break (holder, owner);
        };
        if let Some(kv) = &holder {
            if kv.value == value.as_bytes() {
                // Written by an earlier ADD of this attachment killed before
                // it wrote its row down as held.
                tracing::debug!("{address} is already reserved for this attachment");
                let held = NodeRecord { state: RecordState::Held, ..row };
                return store.write(|tx| tx.put_node_record(&held));
            }
            // Lent out by its block's owner: free there, so it can be ours,
            // atomically; DEL gives it back to the lender.
            let is_lent = serde_json::from_slice::<AddressRecord>(&kv.value).is_ok_and(|r| r.kind == Kind::Lent);
            if is_lent && self.take_lent(store, &key, kv, &row)? {
                tracing::info!("reserved {address} of pool {} cluster-wide, lent by its block's owner", g.pool.name);
                return Ok(());
            }
        }
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
                Err(_) => format!("{key} holds it"),
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
    pub(super) fn lend(&self, store: &mut StoreHandle, g: &Geometry, blocks: &[NodeBlock], wanted: i64) -> Result<()> {
        let note = format!("lent:{}/{}", self.network, g.pool.name);
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
        let keyed: Vec<String> = held.iter().map(|&a| self.record_key(&g.pool.name, &g.block_of(a), a)).collect();
        let missing = self.datastore.missing(&keyed)?;
        if missing.is_empty() {
            return Ok(());
        }
        let record =
            to_bytes(&AddressRecord { kind: Kind::Lent, node: self.settings.node.clone(), ..AddressRecord::default() });
        // Each key is written only if absent, on its own: the steps need not be one.
        let lent = self.datastore.create_all(&missing, &record)?;
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
    pub(super) fn borrow(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        mine: &[NodeBlock],
        who: &Attachment,
    ) -> Result<Option<IpAddr>> {
        let lent: Vec<(datastore::AddressEntry, AddressRecord)> = self
            .datastore
            .address_records(&g.pool.name)?
            .into_iter()
            .filter_map(|r| {
                let record: AddressRecord = serde_json::from_slice(&r.stored.value).ok()?;
                (record.kind == Kind::Lent).then_some((r, record))
            })
            .collect();
        // Our own first: taking one back costs no other node anything.
        let ours = lent.iter().find(|(r, a)| a.node == self.settings.node && mine.iter().any(|b| b.block == r.block));
        if let Some((r, _)) = ours {
            if self.datastore.delete_record(&r.key, r.stored.version)? {
                let holder = lend_holder(&self.network);
                let address = r.address;
                store.write(|tx| tx.release_address(address, &holder).map(drop))?;
                tracing::info!("took back {address} of pool {}, which this node had lent out", g.pool.name);
                return Ok(Some(address));
            }
        }
        for (r, record) in lent.iter().filter(|(_, a)| a.node != self.settings.node) {
            let address = &r.address;
            let row = NodeRecord {
                key: r.key.clone(),
                value: to_text(&AddressRecord {
                    kind: Kind::Borrowed,
                    node: self.settings.node.clone(),
                    container: who.container_id.clone(),
                    ifname: who.ifname.clone(),
                    lender: String::new(),
                    identity: String::new(),
                }),
                pool: g.pool.name.clone(),
                address: *address,
                kind: Kind::Borrowed,
                owner: who.clone(),
                added_by: None,
                state: RecordState::Writing,
            };
            if self.take_lent(store, &r.key, &r.stored, &row)? {
                tracing::info!("borrowed {address} of pool {} from node {}", g.pool.name, shown(&record.node));
                return Ok(Some(*address));
            }
        }
        let want = AddressRecord { kind: Kind::Lent, node: self.settings.node.clone(), ..AddressRecord::default() };
        self.datastore.want(&g.pool.name, &to_bytes(&want))?;
        tracing::info!("pool {}: nothing is lent out; asked the nodes with room to lend", g.pool.name);
        Ok(None)
    }

    /// Makes a lent address `row`'s (a static reservation or a borrowing),
    /// by compare-and-swap on the lent record: the record names its lender,
    /// to whom releasing it gives it back. False when another node was first.
    pub(super) fn take_lent(
        &self,
        store: &mut StoreHandle,
        key: &str,
        lent: &Versioned,
        row: &NodeRecord,
    ) -> Result<bool> {
        let Ok(lent_record) = serde_json::from_slice::<AddressRecord>(&lent.value) else { return Ok(false) };
        let Ok(mut record) = serde_json::from_str::<AddressRecord>(&row.value) else { return Ok(false) };
        record.lender = lent_record.node;
        let row = NodeRecord { value: to_text(&record), state: RecordState::Writing, ..row.clone() };
        let written =
            self.write_record(store, &row, || self.datastore.take_lent(key, lent.version, row.value.as_bytes()))?;
        Ok(matches!(written, RecordWrite::Written))
    }

    /// The record protocol, for a record this node writes for an attachment:
    /// its row is written `writing` before etcd has the record (a kill after
    /// the etcd write leaves a row that DEL and GC release), then `held`
    /// when etcd took it, dropped when etcd refused it, and left to be
    /// released when etcd's answer did not come (it may have taken it).
    pub(super) fn write_record<R>(
        &self,
        store: &mut StoreHandle,
        row: &NodeRecord,
        write: impl FnOnce() -> datastore::Answer<Outcome<R>>,
    ) -> Result<RecordWrite<R>> {
        let ours = store.write(|tx| match tx.node_record(&row.key)? {
            // Another attachment's row: its write may have reached etcd.
            Some(r) if r.owner != row.owner => Ok(false),
            _ => tx.put_node_record(row).map(|()| true),
        })?;
        if !ours {
            return Ok(RecordWrite::Busy);
        }
        match write() {
            Ok(Outcome::Done) => {
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
                self.release(store, std::slice::from_ref(&releasing)).map(drop)?;
                Err(CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "{} was released by a GC or DEL of this attachment while it was being recorded: try again",
                        row.address
                    ),
                ))
            }
            Ok(Outcome::Refused(refusal)) => {
                store.write(|tx| tx.drop_node_record_if(&row.key, &row.value))?;
                Ok(RecordWrite::Refused(refusal))
            }
            Err(e) => {
                release_later(store, &row.key)?;
                Err(e.into())
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
    /// on etcd: the records it could not release there are returned, each
    /// with etcd's error (see [`Node::strands`] for what a DEL makes of them).
    pub fn release(&self, store: &mut StoreHandle, records: &[NodeRecord]) -> Result<Vec<Unreleased>> {
        if records.is_empty() {
            return Ok(Vec::new());
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
        let releases: Vec<RecordRelease> = records.iter().map(record_release).collect();
        let keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
        let turn = self.block_turn(store, &keys);
        let outcomes = self.datastore.release(&releases);
        self.end_turn(store, turn);
        let mut done: Vec<&NodeRecord> = Vec::new();
        let mut left: Vec<Unreleased> = Vec::new();
        for (r, outcome) in records.iter().zip(outcomes) {
            match outcome {
                Ok(released) => {
                    if !released {
                        tracing::warn!("{} is no longer this node's record for {}: left as it is", r.key, r.address);
                    }
                    done.push(r);
                }
                Err(e) => {
                    let e = CniError::from(e);
                    tracing::debug!("{} stays to be released when the cluster's store answers: {e}", r.key);
                    left.push(Unreleased { record: r.clone(), why: e });
                }
            }
        }
        // Only the rows released: another call may have released one of
        // them too meanwhile, and handed its address out again.
        store.write(|tx| done.iter().try_for_each(|r| tx.drop_node_record_if(&r.key, &r.value)))?;
        for r in done {
            tracing::info!("released {} ({}) of pool {} in the cluster", r.address, r.kind.as_str(), r.pool);
        }
        Ok(left)
    }

    /// DEL's answer when releases in etcd stayed undone (`left`, by
    /// [`Node::release`]): an error when one of them, still undone, keeps
    /// an address from the other nodes (see [`Node::strands`]). Only this
    /// node can release its records, and a node whose pods are gone may
    /// never call again: the runtime tries a failed DEL again (kubelet keeps
    /// the pod terminating until it succeeds), which a success would stop.
    /// The error is etcd's (11 when unreachable); what stays is journaled,
    /// so any later call of this node finishes it too. The rest (addresses of
    /// the node's own blocks, which no other node hands out) waits for a
    /// later call, and the DEL succeeds.
    pub fn finish_releases(&self, store: &mut StoreHandle, left: &[Unreleased]) -> Result<()> {
        let stranded = store.read(|tx| {
            let blocks = tx.network_blocks(&self.network)?;
            let mut stranded = Vec::new();
            for u in left {
                // Released meanwhile (by the same call's settle) is done.
                let still = tx.node_record(&u.record.key)?.is_some_and(|now| now.value == u.record.value);
                if still && strands(&blocks, &u.record) {
                    stranded.push(u);
                }
            }
            Ok(stranded)
        })?;
        let Some(first) = stranded.first() else { return Ok(()) };
        let addresses: Vec<String> = stranded
            .iter()
            .map(|u| format!("{} ({}, pool {})", u.record.address, kind_name(u.record.kind), u.record.pool))
            .collect();
        Err(CniError::new(
            first.why.code,
            format!(
                "the release of {} did not reach etcd, and no other node may use {} until it does: try DEL again \
                 ({})",
                addresses.join(", "),
                if stranded.len() == 1 { "it" } else { "them" },
                first.why.msg
            ),
        )
        .with_details(
            "the release is journaled in the node database: this DEL tried again, or any later call of this node, \
             finishes it once etcd answers",
        ))
    }
}

/// A release [`Node::release`] could not make in etcd, with etcd's error.
pub struct Unreleased {
    pub record: NodeRecord,
    pub why: CniError,
}

/// Whether record `r`, left in etcd, keeps its address from every other
/// node: it lies outside this node's blocks of its own (`blocks`: this
/// node's blocks of the network), in a shared block (an `allocated` record
/// always does), a block nobody claims, another node's block (borrowed), or
/// a block of another node that this node contests. Only in a block of its
/// own does no other node hand out addresses, whatever the record says.
fn strands(blocks: &[NodeBlock], r: &NodeRecord) -> bool {
    let own_alone = |b: &NodeBlock| {
        !b.shared
            && b.pool == r.pool
            && matches!(b.state, BlockState::Owned | BlockState::Releasing)
            && b.block.contains(&r.address)
    };
    r.kind == Kind::Allocated || !blocks.iter().any(own_alone)
}

/// After a write whose outcome etcd did not tell (a timeout may come after
/// the commit): the row stays, to be released, so that a record etcd did
/// take is not left without its row. Releasing compares the value, so a
/// write that did not happen costs one request later.
pub(super) fn release_later(store: &mut StoreHandle, key: &str) -> Result<()> {
    store.write(|tx| tx.set_node_record_state(key, RecordState::Releasing))
}

/// What releasing a record does in the store (see [`AddressRecord::released`]).
fn record_release(r: &NodeRecord) -> RecordRelease<'_> {
    let then =
        serde_json::from_str::<AddressRecord>(&r.value).ok().and_then(|a| a.released()).map(|lent| to_bytes(&lent));
    RecordRelease { key: &r.key, value: r.value.as_bytes(), then }
}

pub(super) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Static => "asked for by name",
        Kind::Borrowed => "borrowed",
        Kind::Lent => "lent",
        Kind::Allocated => "allocated in a shared block",
    }
}
