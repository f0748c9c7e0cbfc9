//! Address records this node writes for its attachments: addresses asked
//! for by name, lent and borrowed ones; the record protocol (row first, etcd
//! second) and releasing.

use super::*;

/// Most addresses an owner lends at once.
const LEND_MAX: usize = 16;

/// What became of writing an address record (see [`Node::write_record`]).
pub(super) enum RecordWrite {
    Written,
    /// etcd's compares failed: the transaction's failure responses.
    Refused(Vec<OpResponse>),
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
        let mut known_again = false;
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
            let responses = match self.write_record(store, &row, &txn)? {
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
                RecordWrite::Refused(responses) => responses,
            };
            let [holder, owner, theirs] = ranges(responses)?.map(|kvs| kvs.into_iter().next());
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
            // The block is this node's claim, which this call did not know
            // when it read the node's blocks: another call of this node
            // claimed it meanwhile, or a call killed after its claim left
            // it unrecorded. Not a conflict with anyone: reserved again, as
            // in a block of this node's own, once the claim is known (once).
            if let (None, Some(kv), false) = (&holder, &owner, known_again) {
                let stale = own_block.as_ref().is_none_or(|b| b.revision != kv.create_revision);
                if stale {
                    if let Some(b) = self.own_claim(store, g, block, kv)? {
                        block_compare = Compare::CreateRevision {
                            key: keys.block(&block).into_bytes(),
                            cmp: etcd::Cmp::Equal,
                            revision: b.revision,
                        };
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
            if is_lent && self.take_lent(store, kv, &row)? {
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
    pub(super) fn lend(&self, store: &mut StoreHandle, g: &Geometry, blocks: &[NodeBlock], wanted: i64) -> Result<()> {
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
    pub(super) fn borrow(
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
                    identity: String::new(),
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
    pub(super) fn take_lent(&self, store: &mut StoreHandle, kv: &Kv, row: &NodeRecord) -> Result<bool> {
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
    pub(super) fn write_record(&self, store: &mut StoreHandle, row: &NodeRecord, txn: &Txn) -> Result<RecordWrite> {
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
                self.release(store, std::slice::from_ref(&releasing)).map(drop)?;
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
        // In transactions etcd takes (a GC after a reboot, or the releases
        // an outage left, can be hundreds): each record's release stands alone.
        let mut done: Vec<&NodeRecord> = Vec::new();
        let mut left: Vec<Unreleased> = Vec::new();
        for chunk in records.chunks(etcd::MAX_TXN_OPS) {
            let all = Txn {
                compare: chunk.iter().map(|r| Compare::value_is(r.key.clone(), r.value.clone())).collect(),
                success: chunk.iter().map(release_op).collect(),
                failure: Vec::new(),
            };
            match self.etcd.txn(&all) {
                Ok(answer) if answer.succeeded => done.extend(chunk),
                // One of them is no longer as we wrote it: one by one.
                Ok(_) => {
                    for r in chunk {
                        match self.release_one(r) {
                            Ok(()) => done.push(r),
                            Err(why) => left.push(Unreleased { record: r.clone(), why }),
                        }
                    }
                }
                Err(e) => {
                    let e = etcd_error(e);
                    tracing::warn!("{} cluster record(s) stay to be released by a later call: {e}", chunk.len());
                    left.extend(chunk.iter().map(|r| Unreleased { record: r.clone(), why: e.clone() }));
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

    /// Ok when the record is gone from etcd, or is no longer ours to
    /// delete; etcd's error when it could not be asked.
    pub(super) fn release_one(&self, r: &NodeRecord) -> std::result::Result<(), CniError> {
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
                Ok(())
            }
            Err(e) => {
                let e = etcd_error(e);
                tracing::warn!("{} stays to be released when etcd answers: {e}", r.key);
                Err(e)
            }
        }
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

/// What releasing a record does in etcd (see [`AddressRecord::released`]).
pub(super) fn release_op(r: &NodeRecord) -> Op {
    match serde_json::from_str::<AddressRecord>(&r.value).ok().and_then(|a| a.released()) {
        Some(lent) => Op::Put { key: r.key.clone().into_bytes(), value: to_bytes(&lent), lease: 0 },
        None => Op::Delete { key: r.key.clone().into_bytes(), range_end: None },
    }
}

pub(super) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Static => "asked for by name",
        Kind::Borrowed => "borrowed",
        Kind::Lent => "lent",
        Kind::Allocated => "allocated in a shared block",
    }
}
