//! Blocks: an `IPDBlock` read, checked and kept for the writes that
//! follow, the one read-decide-write step every change of a block goes
//! through ([`KubeStore::change_block`]), and a block as etcd's layout
//! would hold it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use shared::{CniError, Code};

use super::objects::{self, BlockSpec, BlockState, Object, Owner, Record, Time};
use super::requests::not_ours;
use super::shapes::{digest_version, pause, record_key, record_versioned};
use super::{names, KubeStore, ROUNDS};
use crate::datastore::{AddressEntry, Answer, BlockEntry, Error, Version, Versioned};
use crate::records::{to_bytes, BlockRecord};

/// What one round of [`KubeStore::change_block`] decided from the block as
/// read (none: it has no object).
pub(super) enum Step<T> {
    /// Write the block so (created when it has no object), then `T`.
    Write(Box<BlockSpec>, T),
    /// Delete its object, then `T`.
    Delete(T),
    /// Write nothing: `T` (taken only on a fresh read).
    Answer(T),
}

impl KubeStore {
    pub(super) fn block_name(&self, pool: &str, block: IpNet) -> String {
        names::block_name(&self.network, pool, block)
    }

    /// Checks a block read is the one its name says (a hash collision, or
    /// an object made by hand, is refused), and keeps it for later writes;
    /// `consistent`: an answer that is not the API server's cache, which
    /// tells whether history was lost (see `history`).
    pub(super) fn keep_block(&self, object: Object<BlockSpec>, consistent: bool) -> Answer<Object<BlockSpec>> {
        let spec = &object.spec;
        let expected = self.block_name(&spec.pool, spec.cidr);
        if spec.network != self.network || object.metadata.name != expected {
            return Err(not_ours(&object.metadata.name, &format!("{expected} of network {:?}", self.network)));
        }
        if consistent {
            let mine = spec.state.owner().is_some_and(|o| o.node == self.node);
            self.witness("IPDBlock", &object.metadata, mine);
        }
        self.blocks.borrow_mut().insert(object.metadata.name.clone(), (object.clone(), self.now.get()));
        Ok(object)
    }

    pub(super) fn read_block(&self, pool: &str, block: IpNet) -> Answer<Option<Object<BlockSpec>>> {
        let name = self.block_name(pool, block);
        match self.get::<BlockSpec>(&name)? {
            Some(found) => self.keep_block(found, true).map(Some),
            None => {
                self.blocks.borrow_mut().remove(&name);
                Ok(None)
            }
        }
    }

    /// Every block object of `pool` (by label; each checked by its spec).
    /// `from_cache`: the API server's cache, possibly behind (see
    /// [`KubeStore::cached_lists`]); else a consistent list.
    pub(super) fn pool_blocks(&self, pool: &str, from_cache: bool) -> Answer<Vec<Object<BlockSpec>>> {
        let labels = format!(
            "{}={},{}={}",
            objects::LABEL_NETWORK,
            names::text(&self.network),
            objects::LABEL_POOL,
            names::text(pool)
        );
        let found = self.list::<BlockSpec>(&labels, from_cache)?;
        found.into_iter().filter(|b| b.spec.pool == pool).map(|b| self.keep_block(b, !from_cache)).collect()
    }

    /// One read-decide-write step on a block: `decide` sees the block as
    /// last read (or as read now) and the `Date` of that answer. A write
    /// that loses a race (409), or a decision to write nothing taken on an
    /// earlier read, reads the block again and decides again.
    pub(super) fn change_block<T>(
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
                Step::Write(mut spec, answer) => {
                    // Holds ended by this read's Date go with any write:
                    // what is freed so is written at a read after the end
                    // (see identities.rs).
                    spec.records.retain(|_, record| !ended_hold(record, at));
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
                            self.keep_block(now, true)?;
                            self.written.borrow_mut().insert(name.clone());
                            Some(answer)
                        }
                        None => None,
                    }
                }
                Step::Delete(answer) => match &object {
                    Some(o) if self.delete(o)? => {
                        self.blocks.borrow_mut().remove(&name);
                        self.written.borrow_mut().insert(name.clone());
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
    pub(super) fn block_entry(object: &Object<BlockSpec>, now: Time) -> Option<BlockEntry> {
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

    /// The block's address records as the cluster counts them at `now`
    /// (an identity's hold whose end is past is none).
    pub(super) fn address_entries(&self, object: &Object<BlockSpec>, now: Time) -> Vec<AddressEntry> {
        let spec = &object.spec;
        spec.records
            .keys()
            .filter_map(|address| Some((address, record_at(spec, *address, now)?)))
            .map(|(address, record)| AddressEntry {
                key: record_key(&spec.pool, spec.cidr, *address),
                block: spec.cidr,
                address: *address,
                stored: record_versioned(record),
            })
            .collect()
    }

    /// Whether a shared block is marked recovering at `now`: no grant in it
    /// then (see [`KubeStore::mark_recovering`]).
    pub(super) fn recovering_at(object: &Object<BlockSpec>, now: Time) -> bool {
        object.spec.recovering.is_some_and(|until| !until.is_past_at(now))
    }

    /// After lost history, until `until`: every shared block of the network,
    /// and every block with an address lent out, is marked recovering, so
    /// that no grant or borrowing in it takes an address whose record the
    /// store lost (or brought back) before its node has put its records
    /// right (each grant and borrowing is an update of its block, which
    /// compares the mark; the network's `recovery` keeps claims off). One
    /// LIST of the network's blocks, then an update of each marked: rare.
    pub(super) fn mark_recovering(&self, until: Time) -> Answer<()> {
        let labels = format!("{}={}", objects::LABEL_NETWORK, names::text(&self.network));
        for block in self.list::<BlockSpec>(&labels, false)? {
            let block = self.keep_block(block, true)?;
            let shared = block.spec.state.owner().is_some_and(|o| o.shared);
            if !shared && !block.spec.records.values().any(|r| matches!(r, Record::Lent(_))) {
                continue;
            }
            let pool = block.spec.pool.clone();
            self.change_block(&pool, block.spec.cidr, |found, _| match found {
                Some(f) if f.spec.recovering.is_none_or(|r| r < until) => {
                    let mut spec = f.spec.clone();
                    spec.recovering = Some(until);
                    Ok(Step::Write(Box::new(spec), ()))
                }
                _ => Ok(Step::Answer(())),
            })?;
        }
        Ok(())
    }

    /// Whether a block is nobody's: no object, `Unclaimed`, or released
    /// with its end past.
    pub(super) fn nobodys(object: Option<&Object<BlockSpec>>, now: Time) -> bool {
        object.is_none_or(|o| Self::block_entry(o, now).is_none())
    }

    pub(super) fn blank_block(&self, pool: &str, block: IpNet) -> BlockSpec {
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
    pub(super) fn without(object: &Object<BlockSpec>, addresses: &[IpAddr], now: Time) -> Step<()> {
        let mut spec = object.spec.clone();
        for a in addresses {
            spec.records.remove(a);
        }
        Self::written(Some(object), spec, now, ())
    }

    /// The block `found` written as `spec`, then `answer`; an object left
    /// nobody's and without records is deleted rather than kept.
    pub(super) fn written<T>(found: Option<&Object<BlockSpec>>, spec: BlockSpec, now: Time, answer: T) -> Step<T> {
        match found {
            Some(found) if spec.records.is_empty() && Self::nobodys(Some(found), now) => Step::Delete(answer),
            _ => Step::Write(Box::new(spec), answer),
        }
    }
}

/// The record of `address` in `spec` as the cluster counts it at `now`: a
/// hold of an identity whose end is past by then is none.
pub(super) fn record_at(spec: &BlockSpec, address: IpAddr, now: Time) -> Option<&Record> {
    spec.records.get(&address).filter(|record| !ended_hold(record, now))
}

/// Whether `record` is an identity's hold whose end is past at `now`.
pub(super) fn ended_hold(record: &Record, now: Time) -> bool {
    matches!(record, Record::Identity(hold) if hold.held_until.is_some_and(|end| end.is_past_at(now)))
}
