//! Workload identities (ipam-da-sticky) on the Kubernetes API: one
//! `IPDIdentity` per identity and interface, and the records of its
//! addresses in their blocks.
//!
//! etcd changes an identity's key and its addresses' records in one
//! transaction, under one lease for a hold. Here each object is its own
//! compare-and-swap, so [`KubeStore::change_identity_together`] orders
//! them (the blocks one update each, in name order, comparing their
//! records; the identity at the resourceVersion read before), and a
//! refusal puts back what it wrote. The order is the one after which a
//! kill -9 between two writes is settled by the DEL of the attachment the
//! identity names, as the node database's rows already say:
//!
//! - held, passed to a sharer, or let go: the records first. After a kill
//!   they hold the addresses (for the identity, or the sharer) while the
//!   identity still names this attachment, whose repeat DEL writes the
//!   rest; the other order would leave records of an attachment the
//!   identity no longer names, which its DEL releases while the identity's
//!   new holder has the addresses.
//! - taken over (held to live here): the identity first. After a kill its
//!   records still hold the addresses for it, and the attachment, whose
//!   lease and rows are in the node database already, holds it again at
//!   its DEL; the other order would leave records of this attachment under
//!   a held identity, which its DEL releases, and a take-over then never
//!   finds them held.
//!
//! A hold ends with nobody writing anything: the identity and its records
//! carry its end by the API server's clock (`until`, `heldUntil`: the
//! `Date` of the answer the write was decided from plus the hold), and a
//! hold whose end is past by the `Date` of the answer that shows it is read
//! as absent. An address so freed is written again only by an update of
//! its block at a read after the end (which removes the old hold), so of a
//! take-over decided just before the end and a use just after it, one
//! update gets 409. A block owner, whose own addresses have no records,
//! removes the ended holds of its blocks before it counts them free
//! (`KubeStore::confirm`).

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use shared::{CniError, Code};

use super::blocks::{ended_hold, record_at, Step};
use super::objects::{Attachment, BlockSpec, IdentitySpec, IdentityState, Object, Record, Time};
use super::requests::{bug, not_ours};
use super::shapes::{
    address_record, digest_version, identity_record, parse_record_key, record_versioned, same_record,
    IDENTITY_KEY_PREFIX,
};
use super::{names, KubeStore};
use crate::datastore::{Answer, Created, Error, Expect, RecordChange, Then, Version, Versioned};
use crate::records::{to_bytes, AddressRecord, IdentityRecord, Kind};

/// The store's name of identity `identity` on `ifname`: both in clear (an
/// interface name holds no `/`), so that the object's spec can be written
/// from it.
pub(super) fn identity_key(ifname: &str, identity: &str) -> String {
    format!("{IDENTITY_KEY_PREFIX}{ifname}/{identity}")
}

pub(super) fn is_identity_key(key: &str) -> bool {
    key.starts_with(IDENTITY_KEY_PREFIX)
}

fn parse_identity_key(key: &str) -> Answer<(&str, &str)> {
    key.strip_prefix(IDENTITY_KEY_PREFIX)
        .and_then(|rest| rest.split_once('/'))
        .filter(|(ifname, identity)| !ifname.is_empty() && !identity.is_empty())
        .ok_or_else(|| bug(key, "not an identity of the Kubernetes datastore"))
}

/// Whether `object` is gone as the cluster counts it at `now`: held, and
/// its hold past.
pub(super) fn ended(object: &Object<IdentitySpec>, now: Time) -> bool {
    matches!(object.spec.state, IdentityState::Held { until, .. } if until.is_past_at(now))
}

/// The identity as `node/` reads it (etcd's layout), at a version that
/// changes with what it holds and with the object (its `uid`).
pub(super) fn identity_versioned(object: &Object<IdentitySpec>) -> Versioned {
    let value = to_bytes(&identity_record(&object.spec));
    let uid = object.metadata.uid.as_deref().unwrap_or_default();
    Versioned { version: digest_version(&[uid.as_bytes(), &value]), value, created: 0 }
}

/// One block's part of a change of several records: per address, what it
/// was and what this change made it (none: absent).
struct Written {
    pool: String,
    block: IpNet,
    records: Vec<(IpAddr, Option<Record>, Option<Record>)>,
}

impl KubeStore {
    /// The identity named `key` as the server has it (held ones whose end
    /// is past included), checked to be the one its name stands for.
    fn read_identity(&self, key: &str) -> Answer<Option<Object<IdentitySpec>>> {
        let (ifname, identity) = parse_identity_key(key)?;
        let name = names::identity_name(&self.network, ifname, identity);
        let found = self.get::<IdentitySpec>(&name)?;
        if let Some(found) = &found {
            let spec = &found.spec;
            if spec.network != self.network || spec.ifname != ifname || spec.identity != identity {
                return Err(not_ours(&name, &format!("identity {identity:?} on {ifname}")));
            }
            self.witness_identity(found);
        }
        self.saw_identity(&name, found.as_ref());
        Ok(found)
    }

    /// Keeps what this call last read or wrote of the identity `name`.
    fn saw_identity(&self, name: &str, object: Option<&Object<IdentitySpec>>) {
        let mut seen = self.identities_seen.borrow_mut();
        match object {
            Some(object) => seen.insert(name.to_string(), object.clone()),
            None => seen.remove(name),
        };
    }

    /// The identity `key` to change from: as this call last saw it when that
    /// is the version the change expects and the change writes it (its
    /// update or delete compares the resourceVersion), else read now.
    fn identity_to_change(&self, change: &RecordChange) -> Answer<Option<Object<IdentitySpec>>> {
        if let (Expect::At(version), Then::Put(_) | Then::Delete) = (&change.expect, &change.then) {
            let (ifname, identity) = parse_identity_key(&change.key)?;
            let name = names::identity_name(&self.network, ifname, identity);
            let seen = self.identities_seen.borrow().get(&name).cloned();
            if let Some(seen) = seen.filter(|o| identity_versioned(o).version == *version) {
                return Ok(Some(seen));
            }
        }
        self.read_identity(&change.key)
    }

    /// Takes note of an identity a consistent answer showed (see `history`):
    /// this node's when it names this node, live or held from.
    fn witness_identity(&self, object: &Object<IdentitySpec>) {
        let node = match &object.spec.state {
            IdentityState::Live(at) | IdentityState::Held { was: Some(at), .. } => Some(&at.node),
            IdentityState::Held { was: None, .. } => None,
        };
        self.witness("IPDIdentity", &object.metadata, node == Some(&self.node));
    }

    /// The identity named `key` (none: absent, or its hold ended).
    pub(super) fn identity(&self, key: &str) -> Answer<Option<Versioned>> {
        let now = |o: &Object<IdentitySpec>| !ended(o, self.now.get());
        Ok(self.read_identity(key)?.filter(now).as_ref().map(identity_versioned))
    }

    /// Creates the identity named `key` as `value` (an [`IdentityRecord`])
    /// while it is absent or its hold has ended.
    pub(super) fn create_identity(&self, key: &str, value: &[u8]) -> Answer<Created> {
        let record: IdentityRecord = serde_json::from_slice(value).map_err(|e| bug(key, e))?;
        let spec = self.identity_spec(key, &record, None)?;
        for _ in 0..super::ROUNDS {
            let written = match self.read_identity(key)? {
                Some(found) if !ended(&found, self.now.get()) => {
                    return Ok(Created::Exists(Some(identity_versioned(&found))))
                }
                Some(ended) => self.replace(&ended.with_spec(spec.clone()))?,
                None => self.create(&Object::new(spec.clone()))?,
            };
            if let Some(written) = written {
                self.witness_identity(&written);
                self.saw_identity(&written.metadata.name, Some(&written));
                return Ok(Created::Done(identity_versioned(&written).version));
            }
        }
        Err(kept_changing(key))
    }

    /// Deletes the identity named `key` while it is at `version`.
    pub(super) fn delete_identity(&self, key: &str, version: Version) -> Answer<bool> {
        match self.read_identity(key)? {
            Some(found) if identity_versioned(&found).version == version => self.delete(&found),
            _ => Ok(false),
        }
    }

    /// [`crate::datastore::Datastore::change_together`] here: the
    /// identity and each block of its records one update each, in the
    /// order that leaves a kill between them for the attachment's DEL to
    /// settle (see the module's doc); a refusal puts back what was written.
    pub(super) fn change_identity_together(
        &self,
        changes: &[RecordChange],
        hold_seconds: Option<i64>,
    ) -> Answer<Option<Version>> {
        let (identities, records): (Vec<&RecordChange>, Vec<&RecordChange>) =
            changes.iter().partition(|c| is_identity_key(&c.key));
        let [identity] = identities[..] else {
            return Err(bug("change_together", format!("{} identities in one change", identities.len())));
        };
        let read = self.identity_to_change(identity)?;
        let live = read.as_ref().filter(|o| !ended(o, self.now.get()));
        if !expected(&identity.expect, live.map(identity_versioned).as_ref()) {
            return Ok(None);
        }
        let uid = read.as_ref().and_then(|o| o.metadata.uid.clone()).unwrap_or_default();
        let hold = hold_seconds.map(|s| Duration::from_secs(s.max(1) as u64));
        let then: Option<IdentityRecord> = match &identity.then {
            Then::Keep => return self.compare_records(&records, live),
            Then::Delete => None,
            Then::Put(value) => Some(serde_json::from_slice(value).map_err(|e| bug(&identity.key, e))?),
        };
        // A held identity taken over: the identity first. Its records still
        // say "held" after a kill between, and the attachment's DEL (its
        // lease and rows are in the node database already) holds it again;
        // records first would leave them this attachment's under a held
        // identity, which its DEL would release. Every other change: the
        // records first (they keep the addresses taken whoever the
        // identity names, and the DEL of an attachment the identity still
        // names settles them).
        let taken_over = live.is_some_and(|o| matches!(o.spec.state, IdentityState::Held { .. }))
            && then.as_ref().is_some_and(|t| !t.is_held());
        if taken_over {
            let Some(written) = self.write_identity(&identity.key, read.as_ref(), then.as_ref(), hold)? else {
                return Ok(None);
            };
            if self.write_records(&records, &uid, hold)?.is_none() {
                if let (Some(before), Some(written)) = (&read, &written) {
                    let Some(restored) = self.replace(&written.with_spec(before.spec.clone()))? else {
                        return Err(kept_changing(&identity.key));
                    };
                    self.saw_identity(&restored.metadata.name, Some(&restored));
                }
                return Ok(None);
            }
            return Ok(Some(written.as_ref().map_or(Version(0), |o| identity_versioned(o).version)));
        }
        let Some(written_records) = self.write_records(&records, &uid, hold)? else { return Ok(None) };
        match self.write_identity(&identity.key, read.as_ref(), then.as_ref(), hold)? {
            Some(written) => Ok(Some(written.as_ref().map_or(Version(0), |o| identity_versioned(o).version))),
            None => {
                self.put_back(&written_records)?;
                Ok(None)
            }
        }
    }

    /// Writes the identity `key`, read as `read`, as `then` (none: deleted),
    /// held until the `Date` of the latest answer plus `hold` when it holds:
    /// no earlier than its records' end (read before). None: it changed
    /// since `read`; Some(None): deleted.
    #[allow(clippy::option_option)]
    fn write_identity(
        &self,
        key: &str,
        read: Option<&Object<IdentitySpec>>,
        then: Option<&IdentityRecord>,
        hold: Option<Duration>,
    ) -> Answer<Option<Option<Object<IdentitySpec>>>> {
        let Some(record) = then else {
            return Ok(match read {
                Some(read) => {
                    let deleted = self.delete(read)?;
                    if deleted {
                        self.saw_identity(&read.metadata.name, None);
                    }
                    deleted.then_some(None)
                }
                None => Some(None),
            });
        };
        let until = hold.map(|h| self.now.get().plus(h));
        let spec = self.identity_spec(key, record, until)?;
        let answer = match read {
            Some(read) => self.replace(&read.with_spec(spec))?,
            None => self.create(&Object::new(spec))?,
        };
        if let Some(written) = &answer {
            self.witness_identity(written);
            self.saw_identity(&written.metadata.name, Some(written));
        }
        Ok(answer.map(Some))
    }

    /// Only compares `records` (the identity kept as it is): the identity's
    /// version when each is as expected.
    fn compare_records(
        &self,
        records: &[&RecordChange],
        live: Option<&Object<IdentitySpec>>,
    ) -> Answer<Option<Version>> {
        for change in records {
            let now = crate::datastore::Datastore::record(self, &change.key)?;
            if !expected(&change.expect, now.as_ref()) {
                return Ok(None);
            }
        }
        Ok(live.map(|o| identity_versioned(o).version))
    }

    /// Writes `records`, block by block in name order (two changes of the
    /// same blocks meet at the first), each block one update comparing its
    /// records. None: one was not as expected (what was written is put
    /// back).
    fn write_records(
        &self,
        records: &[&RecordChange],
        uid: &str,
        hold: Option<Duration>,
    ) -> Answer<Option<Vec<Written>>> {
        let mut written: Vec<Written> = Vec::new();
        for ((pool, block), of_block) in grouped(records)? {
            let done = self.change_block(&pool, block, |found, now| {
                let mut spec = found.map_or_else(|| self.blank_block(&pool, block), |f| f.spec.clone());
                let mut records = Vec::new();
                for (address, change) in &of_block {
                    let there = found.and_then(|f| record_at(&f.spec, *address, now)).cloned();
                    let as_expected = match &change.expect {
                        Expect::Absent => there.is_none(),
                        Expect::At(version) => there.as_ref().is_some_and(|r| record_versioned(r).version == *version),
                        Expect::Is(value) => there.as_ref().is_some_and(|r| same_record(r, value)),
                    };
                    if !as_expected {
                        return Ok(Step::Answer(None));
                    }
                    let then = match &change.then {
                        Then::Keep => continue,
                        Then::Delete => None,
                        Then::Put(value) => Some(record_to_write(value, &pool, uid, hold.map(|h| now.plus(h)))?),
                    };
                    match &then {
                        Some(record) => spec.records.insert(*address, record.clone()),
                        None => spec.records.remove(address),
                    };
                    records.push((*address, there, then));
                }
                if records.is_empty() {
                    return Ok(Step::Answer(Some(records)));
                }
                Ok(Self::written(found, spec, now, Some(records)))
            })?;
            match done {
                Some(records) => written.push(Written { pool, block, records }),
                None => {
                    self.put_back(&written)?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(written))
    }

    /// Puts back each record a refused change wrote, while it is still as
    /// written. Any error: the caller cannot tell what holds (error 11).
    fn put_back(&self, written: &[Written]) -> Answer<()> {
        for w in written.iter().rev() {
            self.change_block(&w.pool, w.block, |found, now| {
                let mut spec = found.map_or_else(|| self.blank_block(&w.pool, w.block), |f| f.spec.clone());
                let mut changed = false;
                for (address, before, after) in &w.records {
                    if spec.records.get(address) != after.as_ref() {
                        continue;
                    }
                    match before {
                        Some(before) => spec.records.insert(*address, before.clone()),
                        None => spec.records.remove(address),
                    };
                    changed = true;
                }
                Ok(if changed { Self::written(found, spec, now, ()) } else { Step::Answer(()) })
            })?;
        }
        Ok(())
    }

    /// A block of this node's own as it may count its addresses free: the
    /// holds in it that have ended removed first, by an update (see the
    /// module's doc: its addresses have no records of their own, so the
    /// owner hands them out with no write that could meet a take-over).
    pub(super) fn without_ended_holds(&self, pool: &str, found: Object<BlockSpec>) -> Answer<Object<BlockSpec>> {
        let own = found.spec.state.owner().is_some_and(|o| o.node == self.node && !o.shared);
        if !own || !has_ended_holds(&found.spec, self.now.get()) {
            return Ok(found);
        }
        let block = found.spec.cidr;
        let kept = self.change_block(pool, block, |now_found, now| match now_found {
            Some(f) if has_ended_holds(&f.spec, now) => Ok(Step::Write(Box::new(f.spec.clone()), ())),
            _ => Ok(Step::Answer(())),
        });
        kept?;
        let name = self.block_name(pool, block);
        match self.blocks.borrow().get(&name) {
            Some((object, _)) => Ok(object.clone()),
            None => Ok(found),
        }
    }

    /// The object's spec of identity `key` as `record` says (etcd's
    /// layout): live on its attachment, or held until `until` (else the
    /// record's own end).
    fn identity_spec(&self, key: &str, record: &IdentityRecord, until: Option<Time>) -> Answer<IdentitySpec> {
        let (ifname, identity) = parse_identity_key(key)?;
        let attachment = Attachment { node: record.node.clone(), container: record.container.clone() };
        let state = match record.is_held() {
            true => IdentityState::Held {
                was: (!record.node.is_empty()).then_some(attachment),
                until: until.unwrap_or(Time(record.until)),
            },
            false => IdentityState::Live(attachment),
        };
        Ok(IdentitySpec {
            network: self.network.clone(),
            ifname: ifname.to_string(),
            identity: identity.to_string(),
            state,
            addresses: record.addresses.clone(),
            sharers: record
                .sharers
                .iter()
                .map(|s| Attachment { node: s.node.clone(), container: s.container.clone() })
                .collect(),
        })
    }
}

/// A block (its pool and CIDR) and the changes of its records.
type BlockChanges<'c> = ((String, IpNet), Vec<(IpAddr, &'c RecordChange)>);

/// Whether a record (none: absent) is as `expect` says.
fn expected(expect: &Expect, found: Option<&Versioned>) -> bool {
    match expect {
        Expect::Absent => found.is_none(),
        Expect::At(version) => found.is_some_and(|f| f.version == *version),
        Expect::Is(value) => found.is_some_and(|f| f.value == *value),
    }
}

/// The record changes of `changes` by block, blocks in name order (so that
/// two changes of the same blocks meet at the first).
fn grouped<'c>(changes: &[&'c RecordChange]) -> Answer<Vec<BlockChanges<'c>>> {
    let mut by: std::collections::BTreeMap<(String, IpNet), Vec<(IpAddr, &RecordChange)>> = Default::default();
    for change in changes {
        let (pool, block, address) = parse_record_key(&change.key)?;
        by.entry((pool, block)).or_default().push((address, *change));
    }
    Ok(by.into_iter().collect())
}

/// A record `node/` puts as this store holds it: the identity's hold (a
/// `static` record naming the identity and no node, as etcd's layout has
/// it) becomes a record of kind `identity` with its end when it has one.
fn record_to_write(value: &[u8], pool: &str, uid: &str, held_until: Option<Time>) -> Answer<Record> {
    let r: AddressRecord = serde_json::from_slice(value).map_err(|e| bug(pool, e))?;
    if r.kind == Kind::Static && r.node.is_empty() && !r.identity.is_empty() && !uid.is_empty() {
        return Ok(Record::Identity(super::objects::IdentityRecord {
            identity: r.identity,
            identity_uid: uid.to_string(),
            held_until,
            node: None,
        }));
    }
    address_record(value, pool)
}

fn kept_changing(key: &str) -> Error {
    Error::Failed(CniError::new(Code::TryAgainLater, format!("{key} kept changing under this call: try again")))
}

/// Whether `spec` holds, at `now`, a hold of an identity that has ended.
fn has_ended_holds(spec: &BlockSpec, now: Time) -> bool {
    spec.records.values().any(|record| ended_hold(record, now))
}
