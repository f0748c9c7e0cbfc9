//! Shared blocks: every address handed out in one has its `allocated`
//! record in etcd, written before the address is handed out, so that any
//! node may allocate in it and no address is stranded by an owner that
//! stops calling (see the README, "Shared blocks").
//!
//! An address is granted by one transaction: its record created if absent,
//! while the block's record is unchanged since read (still claimed, still
//! shared, not released) and etcd is not recovering lost history. So two
//! grants of one address cannot both succeed, and none succeeds in a block
//! that changed hands. The grant is the confirmation: a shared block needs
//! no confirming read, and is never used without etcd.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use shared::args::Attachment;
use shared::store::{StoreHandle, Turn};
use shared::{Code, Result};

use super::{Node, RecordWrite};
use crate::blocks::{fnv1a, Geometry};
use crate::datastore::{retry, AddressEntry, Attempt, GrantRefusal, Version, Versioned};
use crate::records::{to_text, AddressRecord, BlockRecord, Kind};
use crate::rows::{ClusterRows, NodeBlock, NodeRecord, RecordState};

/// How many times one block is tried while others take the addresses picked.
const GRANT_ROUNDS: usize = 4;
/// Among how many free addresses a node picks, so that nodes granting in one
/// block at once seldom pick the same one.
const GRANT_CHOICES: usize = 16;
/// How many other nodes' shared blocks one call tries.
const OTHERS_TRIED: usize = 8;
/// The turn of this node's calls at writing a shared block (see
/// [`Node::block_turn`]): `<database>.block-writes.lock`.
const BLOCK_WRITES_TURN: &str = "block-writes";

/// Whom an address is granted to: an attachment, and the workload identity
/// (ipam-da-sticky) its ADD is for, if any. The record names both, so that
/// whatever passes the identity on or holds it (its DEL, GC, `release-node`)
/// knows the address for the identity's.
#[derive(Clone, Copy)]
pub(super) struct Grantee<'a> {
    pub who: &'a Attachment,
    pub identity: Option<&'a str>,
}

/// What became of a grant in one block.
pub(super) enum Grant {
    Granted(IpAddr),
    /// No free address (or every one picked was taken first).
    Full,
    /// The block is no longer what it was read as: its record now (none:
    /// deleted).
    Changed(Option<Versioned>),
    /// Nodes are re-claiming their blocks after etcd lost history.
    Recovering,
}

impl Node<'_> {
    /// An address for `who` in one of this node's shared blocks of `g`'s
    /// pool. A block found no longer this node's is dealt with as a lost
    /// block is (dropped, claimed back or contested) and left out.
    /// `history` runs before anything is decided from a block that changed:
    /// etcd may have lost history (see [`Node::check_history`]).
    pub(super) fn grant_in_own(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        own: &mut Vec<NodeBlock>,
        who: Grantee,
        history: &dyn Fn(&mut StoreHandle) -> Result<()>,
    ) -> Result<Option<IpAddr>> {
        let mut i = 0;
        while i < own.len() {
            let b = own[i].clone();
            let unchanged = Version::unwritten_since(b.revision);
            match self.grant_in(store, g, b.block, unchanged, &b.taken, who, true)? {
                Grant::Granted(address) => return Ok(Some(address)),
                Grant::Full => i += 1,
                // This node may have lost history too: it recovers first.
                Grant::Recovering => {
                    history(store)?;
                    return Err(self.recovering(None, "no address is granted in a shared block"));
                }
                Grant::Changed(kv) => {
                    history(store)?;
                    own.remove(i);
                    tracing::warn!("shared block {} of pool {} is no longer this node's claim", b.block, b.pool);
                    let held = store.read(|tx| self.leases_in(tx, &b))?;
                    match held.is_empty() {
                        true => store.write(|tx| self.drop_block(tx, &b))?,
                        false => self.take_back(store, Some(g), &b, &held, kv.as_ref())?,
                    }
                }
            }
        }
        Ok(None)
    }

    /// An address for `who` in another node's shared block of `g`'s pool
    /// (one read of the pool's blocks and records, then a grant).
    pub(super) fn grant_in_others(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        who: Grantee,
        history: &dyn Fn(&mut StoreHandle) -> Result<()>,
    ) -> Result<Option<IpAddr>> {
        let read = self.datastore.pool_records(&g.pool.name)?;
        if read.recovering {
            history(store)?;
            return Err(self.recovering(None, "no address is granted in a shared block"));
        }
        let mut records: HashMap<IpNet, Vec<AddressEntry>> = HashMap::new();
        for r in read.records {
            records.entry(r.block).or_default().push(r);
        }
        // Others' records: this node's own addresses are its leases and rows.
        let mut taken: HashMap<IpNet, Vec<IpAddr>> = HashMap::new();
        for (block, of_block) in &records {
            taken.insert(*block, self.taken_in(store, of_block)?);
        }
        let mut candidates: Vec<(IpNet, Versioned)> = read
            .blocks
            .into_iter()
            .filter_map(|b| {
                let record = serde_json::from_slice::<BlockRecord>(&b.stored.value).ok()?;
                (record.shared && !record.released && record.node != self.settings.node).then_some((b.block, b.stored))
            })
            .collect();
        // The fullest last; among the others, from a place of this node's own.
        candidates.sort_by_key(|(b, _)| taken.get(b).map_or(0, Vec::len));
        let roomy = candidates.len().min(OTHERS_TRIED);
        if roomy > 0 {
            candidates[..roomy].rotate_left(spread(&self.settings.node, roomy));
        }
        for (block, stored) in candidates.into_iter().take(OTHERS_TRIED) {
            let none = Vec::new();
            let taken = taken.get(&block).unwrap_or(&none);
            match self.grant_in(store, g, block, stored.version, taken, who, false)? {
                Grant::Granted(address) => {
                    tracing::info!("granted {address} of pool {} in another node's shared block {block}", g.pool.name);
                    return Ok(Some(address));
                }
                Grant::Recovering => {
                    history(store)?;
                    return Err(self.recovering(None, "no address is granted in a shared block"));
                }
                Grant::Full | Grant::Changed(_) => {}
            }
        }
        Ok(None)
    }

    /// Grants `who` a free address of `block`, whose record is at
    /// `version`, with `taken` held in it as last read.
    /// `own`: the block is this node's claim (which it then must stay).
    #[allow(clippy::too_many_arguments)]
    fn grant_in(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        block: IpNet,
        mut version: Version,
        taken: &[IpAddr],
        who: Grantee,
        own: bool,
    ) -> Result<Grant> {
        let mut taken = taken.to_vec();
        let granted = retry(GRANT_ROUNDS, || {
            // Free in the node database too: its own leases, and in a block
            // of its own what it counted taken since `taken` was read (an
            // identity's address a DEL of this node held meanwhile).
            let free = store.read(|tx| {
                let mut taken = taken.clone();
                if own {
                    let counted = tx.node_blocks(&self.network, &g.pool.name)?.into_iter().find(|b| b.block == block);
                    taken.extend(counted.into_iter().flat_map(|b| b.taken));
                }
                let Some(view) = g.node_view(&[block], &[], &taken) else { return Ok(Vec::new()) };
                self.free_to_grant(tx, g, &view, GRANT_CHOICES, Some(who.who))
            })?;
            if free.is_empty() {
                return Ok(Attempt::Done(Grant::Full));
            }
            // The owner from the bottom, others each from a place of their own.
            let mut candidates = free;
            if !own {
                let start = spread(&self.settings.node, candidates.len());
                candidates.rotate_left(start);
            }
            let mut candidates = candidates.into_iter();
            let refusal = loop {
                // Every one picked was taken first: read the block again.
                let Some(address) = candidates.next() else { return Ok(Attempt::Conflict) };
                match self.grant_one(store, g, block, version, address, who)? {
                    RecordWrite::Written => return Ok(Attempt::Done(Grant::Granted(address))),
                    // Another call of this node is writing it: the next one.
                    RecordWrite::Busy => continue,
                    RecordWrite::Refused(refusal) => break refusal,
                }
            };
            let GrantRefusal { block: record, records, recovering } = refusal;
            // A block of this node's that changed first: after etcd lost
            // history it is claimed back whatever `_recovery` says.
            let still = record.as_ref().is_some_and(|stored| {
                serde_json::from_slice::<BlockRecord>(&stored.value).ok().is_some_and(|r| {
                    r.shared && !r.released && (!own || (self.is_ours(&r) && stored.version == version))
                })
            });
            match (still, own) {
                (false, true) => return Ok(Attempt::Done(Grant::Changed(record))),
                _ if recovering => return Ok(Attempt::Done(Grant::Recovering)),
                (false, false) => return Ok(Attempt::Done(Grant::Full)),
                (true, _) => {}
            }
            let Some(stored) = record else { return Ok(Attempt::Done(Grant::Full)) };
            version = stored.version;
            // Others' records: this node's own addresses are its leases and rows.
            taken = self.taken_in(store, &records)?;
            if own {
                // What others hold in it, for the next pick without a read.
                let mut known = store.read(|tx| tx.node_blocks(&self.network, &g.pool.name))?;
                if let Some(b) = known.iter_mut().find(|b| b.block == block) {
                    b.taken.clone_from(&taken);
                    let b = b.clone();
                    store.write(|tx| tx.put_node_block(&b))?;
                }
            }
            Ok(Attempt::Conflict)
        })?;
        Ok(granted.unwrap_or(Grant::Full))
    }

    /// One grant: `address`'s `allocated` record for `who`, created if
    /// absent while `block`'s record is at `version` and etcd is not
    /// recovering lost history. Refused: the block's record, its addresses
    /// and `_recovery` as etcd has them.
    fn grant_one(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        block: IpNet,
        version: Version,
        address: IpAddr,
        to: Grantee,
    ) -> Result<RecordWrite<GrantRefusal>> {
        let row = self.grant_row(g, address, to);
        let grant = || self.datastore.grant(&g.pool.name, block, address, row.value.as_bytes(), version);
        let turn = self.block_turn(store, &[&row.key]);
        let written = self.write_record(store, &row, grant);
        self.end_turn(store, turn);
        written.map_err(|mut e| {
            if e.code == Code::TryAgainLater {
                e.msg = format!(
                    "{} (block {block} of pool {} is shared: its addresses are handed out only through the cluster's datastore)",
                    e.msg, g.pool.name
                );
            }
            e
        })
    }

    /// The row of a grant of `address` to `to`, `writing` until the store
    /// has its record.
    pub(super) fn grant_row(&self, g: &Geometry, address: IpAddr, to: Grantee) -> NodeRecord {
        let who = to.who;
        let value = to_text(&AddressRecord {
            kind: Kind::Allocated,
            node: self.settings.node.clone(),
            container: who.container_id.clone(),
            ifname: who.ifname.clone(),
            lender: String::new(),
            identity: to.identity.unwrap_or_default().to_string(),
        });
        NodeRecord {
            key: self.record_key(&g.pool.name, &g.block_of(address), address),
            value,
            pool: g.pool.name.clone(),
            address,
            kind: Kind::Allocated,
            owner: who.clone(),
            added_by: None,
            state: RecordState::Writing,
        }
    }

    /// This node's turn at writing the blocks of the records of `keys`, where
    /// the store keeps a block as one object
    /// ([`crate::datastore::Datastore::writes_take_turns`]): its calls
    /// granting or releasing in a block at once would otherwise all send
    /// their writes at the version they read, and all but one be refused and
    /// sent again. At its turn a call writes at the version the call before
    /// it kept ([`Node::end_turn`] keeps what it wrote). Waited for at most a
    /// store request's timeout, after which the call goes on without: a turn
    /// only orders the writes, each is still conditioned.
    pub(super) fn block_turn(&self, store: &mut StoreHandle, keys: &[&str]) -> Option<Turn> {
        if !self.datastore.writes_take_turns() {
            return None;
        }
        let turn = match store.take_turn(BLOCK_WRITES_TURN, self.settings.request_timeout()) {
            Ok(Some(turn)) => Some(turn),
            Ok(None) => {
                tracing::debug!("another call of this node kept its turn at writing a shared block: writing without");
                None
            }
            // A turn only orders the writes: without one, the write is sent all the same.
            Err(e) => {
                tracing::warn!("no turn at writing a shared block ({e}): writing without");
                None
            }
        };
        self.datastore.resume_blocks_of(store, keys);
        turn
    }

    /// The end of a turn (none: the call had none): the blocks written are
    /// kept for the next call before the turn passes on.
    pub(super) fn end_turn(&self, store: &mut StoreHandle, turn: Option<Turn>) {
        if turn.is_some() {
            self.datastore.keep_written(store);
        }
        drop(turn);
    }
}

/// A place in `0..len` that depends on this node's name.
fn spread(node: &str, len: usize) -> usize {
    usize::try_from(fnv1a(node.as_bytes()) % len.max(1) as u64).unwrap_or(0)
}
