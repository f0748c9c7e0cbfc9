//! Workload identities across the cluster (ipam-da-sticky): an identity's
//! addresses follow it to whatever node it lands on.
//!
//! etcd holds one key per identity and interface (`_sticky/<ifname>/<id>`,
//! an [`IdentityRecord`]): live on one node's attachment, or held for the
//! identity until its hold ends. While live, its addresses are the node's
//! as any other (an address of a block of the node's own has no record);
//! held, each has a record of kind `static` naming the identity and no
//! node, under one etcd lease with the key, so etcd ends the hold whatever
//! the nodes do. Every node's block view counts such a record as taken, so
//! nobody hands the address out; the identity takes it over on any node by
//! one transaction that compares the key and each record unchanged. The
//! identity's records change only together with its key.
//!
//! The rule of the node database holds: a record this node writes for an
//! attachment has its row first (`writing`), and a row goes only after etcd
//! no longer has the record as this node wrote it (a held record is the
//! identity's, no node's). And the node's allocators, which see only the
//! node database, find the address taken whenever etcd has it as the
//! identity's: a take-over leases it here before etcd's records name this
//! node (its blocks stop counting it taken then), and a release in a block
//! of the node's own holds it here too, for ADDs whose view of the block
//! was read before the release counted it taken.

use std::collections::BTreeMap;

use shared::sticky::Sticky;
use shared::suite_delegate::StickyIdentity;

use super::*;
use crate::datastore::{Created, Expect, RecordChange, Then, Version};
use crate::records::{IdentityRecord, Sharer};

/// A workload identity this ADD or release is about.
pub struct Sticking<'a> {
    pub identity: &'a str,
    pub settings: &'a Sticky,
    /// The families this ADD asks addresses for by name: those win over
    /// the identity's held ones, which stay held.
    pub asked_families: Vec<shared::addr::Family>,
}

impl Sticking<'_> {
    /// The identity as the allocators tie leases to it.
    pub fn bound(&self) -> StickyIdentity {
        StickyIdentity { name: self.identity.to_string(), share_live: self.settings.share_live }
    }
}

/// The note that an identity's release could not reach etcd: a later call
/// publishes its hold (see [`Node::settle_identities`]).
fn pending_note(network: &str, ifname: &str, identity: &str) -> String {
    format!("{PENDING_PREFIX}{network}\n{ifname}\n{identity}")
}

const PENDING_PREFIX: &str = "sticky-pending:";

/// How long a request of a killed process may still take to reach the
/// store (see [`Node::hold_identities`]).
const IN_FLIGHT_WRITE: std::time::Duration = std::time::Duration::from_millis(500);

/// How often a take-over looks again at a row another call of this node is
/// writing (see [`Node::take_over`]).
const ROW_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// An identity key as read: its record (`None` when it does not read: it is
/// overwritten) and its version.
pub(super) struct Found {
    record: Option<IdentityRecord>,
    version: Version,
}

impl Node<'_> {
    fn identity_key(&self, ifname: &str, identity: &str) -> String {
        self.datastore.identity_key(ifname, identity)
    }

    /// ADD, before anything is allocated: makes the identity `who`'s in
    /// etcd. Absent: it is created live on this node (one transaction that
    /// reads it when it is there). Held: its addresses in the candidate
    /// pools are taken over (one transaction comparing the key and each
    /// record) and leased here to `who`. Live on another attachment: 101
    /// naming it, or shared with `shareLive` (its addresses leased here
    /// too). Needs etcd: 11 without it. Returns the key as it now is, when
    /// `who` is its first attachment, for [`Node::record_identity_addresses`].
    pub(super) fn claim_identity(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        who: &Attachment,
        s: &Sticking,
        history: &dyn Fn(&mut StoreHandle) -> Result<()>,
    ) -> Result<Option<Found>> {
        let key = self.identity_key(&who.ifname, s.identity);
        let me = &self.settings.node;
        let fresh = IdentityRecord { node: me.clone(), container: who.container_id.clone(), ..Default::default() };
        let now = |record: &IdentityRecord, version: Version| {
            Attempt::Done(Some(Found { record: Some(record.clone()), version }))
        };
        let claimed = retry(CLAIM_ROUNDS, || {
            let found = match self.datastore.create_record(&key, &to_bytes(&fresh))? {
                Created::Done(version) => {
                    tracing::info!("identity {:?} is live on this node ({key})", s.identity);
                    return Ok(now(&fresh, version));
                }
                Created::Exists(found) => found,
            };
            // Nothing is decided from an etcd that lost history.
            history(store)?;
            let Some(stored) = found else { return Ok(Attempt::Conflict) };
            let found = Found { record: serde_json::from_slice(&stored.value).ok(), version: stored.version };
            let Some(record) = &found.record else {
                tracing::warn!("identity key {key} does not read: it is replaced");
                return Ok(match self.replace_identity(&key, &found, &fresh, Vec::new())? {
                    Some(version) => now(&fresh, version),
                    None => Attempt::Conflict,
                });
            };
            if record.live_on(me, &who.container_id) {
                let first = record.node == *me && record.container == who.container_id;
                return Ok(if first { now(record, found.version) } else { Attempt::Done(None) });
            }
            if record.is_held() {
                return Ok(match self.take_over(store, geometries, who, s, (&key, &found), record)? {
                    Some(taken) => Attempt::Done(Some(taken)),
                    None => Attempt::Conflict,
                });
            }
            // Live on an attachment of this node whose DEL could not reach
            // etcd: the identity's addresses are held in this node's
            // database, and ipam-da-sticky hands them back.
            if record.node == *me && record.sharers.is_empty() && self.gone_here(store, who, s, &record.container)? {
                let again = IdentityRecord { addresses: record.addresses.clone(), ..fresh.clone() };
                return Ok(match self.replace_identity(&key, &found, &again, Vec::new())? {
                    Some(version) => {
                        store.write(|tx| tx.drop_note(&pending_note(&self.network, &who.ifname, s.identity)))?;
                        now(&again, version)
                    }
                    None => Attempt::Conflict,
                });
            }
            if !s.settings.share_live {
                return Err(CniError::new(
                    Code::AddressInUse,
                    format!(
                        "identity {:?} is live on node {} in container {}: two live attachments of one identity share \
                         its address only with ipam.sticky.shareLive",
                        s.identity,
                        shown(&record.node),
                        shown(&record.container)
                    ),
                )
                .with_details(format!("{key}; DEL of that container releases it")));
            }
            Ok(match self.share(store, geometries, who, s, (&key, &found), record)? {
                true => Attempt::Done(None),
                false => Attempt::Conflict,
            })
        })?;
        claimed
            .ok_or_else(|| CniError::new(Code::TryAgainLater, format!("identity key {key} keeps changing: try again")))
    }

    /// shareLive: `who` becomes a sharer of the identity live on another
    /// attachment, and leases its addresses here too. An address of a block
    /// of the first node's own has no record: it gets one naming that
    /// attachment, so that a later owner of the block keeps off it while
    /// this node shares it (its DEL or release-node passes or holds it).
    /// False when the key changed meanwhile.
    fn share(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        who: &Attachment,
        s: &Sticking,
        (key, found): (&str, &Found),
        live: &IdentityRecord,
    ) -> Result<bool> {
        let mut shared = live.clone();
        shared.sharers.push(Sharer { node: self.settings.node.clone(), container: who.container_id.clone() });
        let addresses = in_pools(geometries, &live.addresses);
        let first = Attachment { container_id: live.container.clone(), ..who.clone() };
        let value = to_bytes(&AddressRecord { node: live.node.clone(), ..self.live_record(&first, s.identity) });
        let record_keys: Vec<String> =
            addresses.iter().map(|(g, a)| self.record_key(&g.pool.name, &g.block_of(*a), *a)).collect();
        let present = self.datastore.records(&record_keys)?;
        let records = record_keys
            .into_iter()
            .zip(present)
            .filter(|(_, now)| now.is_none())
            .map(|(key, _)| RecordChange { key, expect: Expect::Absent, then: Then::Put(value.clone()) })
            .collect();
        if self.replace_identity(key, found, &shared, records)?.is_none() {
            return Ok(false);
        }
        store.write(|tx| {
            addresses.iter().try_for_each(|(g, address)| lease_here(tx, *address, &g.pool.name, who, s.identity))
        })?;
        tracing::info!(
            "identity {:?} is live on node {} too: its addresses are shared here (shareLive)",
            s.identity,
            shown(&live.node)
        );
        Ok(true)
    }

    /// Whether `container`'s attachment of the identity on this node is
    /// gone: a DEL of it could not reach etcd (its note), and it holds no
    /// lease here any more. (An ADD of it still running holds no lease yet
    /// either, but has no such note.)
    fn gone_here(&self, store: &mut StoreHandle, who: &Attachment, s: &Sticking, container: &str) -> Result<bool> {
        let them = Attachment { container_id: container.to_string(), ..who.clone() };
        let note = pending_note(&self.network, &who.ifname, s.identity);
        store.read(|tx| Ok(tx.note(&note)?.is_some() && tx.leases_of(&them)?.is_empty()))
    }

    /// Replaces the identity key as `found`, with `records` changed at
    /// once: the key's new version, or `None` when something changed
    /// meanwhile.
    fn replace_identity(
        &self,
        key: &str,
        found: &Found,
        with: &IdentityRecord,
        records: Vec<RecordChange>,
    ) -> Result<Option<Version>> {
        let identity =
            RecordChange { key: key.to_string(), expect: Expect::At(found.version), then: Then::Put(to_bytes(with)) };
        let changes: Vec<RecordChange> = std::iter::once(identity).chain(records).collect();
        Ok(self.datastore.change_together(&changes, None, false)?)
    }

    /// Takes over a held identity's addresses that lie in the candidate
    /// pools, for `who`: rows and leases here first, then one transaction
    /// (the key and each record as read), then the rows held. The key as it
    /// now is; `None` when it changed meanwhile (read it again), the leases
    /// undone.
    ///
    /// Leased before etcd's records name this node: from then on this
    /// node's blocks no longer count the addresses taken (a record of its
    /// own), and its allocators must find them leased, also after a kill
    /// between the two writes; the runtime's DEL holds them again.
    fn take_over(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        who: &Attachment,
        s: &Sticking,
        (key, found): (&str, &Found),
        held: &IdentityRecord,
    ) -> Result<Option<Found>> {
        let asked = |a: &IpAddr| s.asked_families.contains(&shared::addr::Family::of(*a));
        let taken: Vec<_> = in_pools(geometries, &held.addresses).into_iter().filter(|(_, a)| !asked(a)).collect();
        let held_value = to_text(&AddressRecord::held_for(s.identity));
        let live_value = to_text(&self.live_record(who, s.identity));
        let rows: Vec<NodeRecord> = taken
            .iter()
            .map(|(g, address)| NodeRecord {
                key: self.record_key(&g.pool.name, &g.block_of(*address), *address),
                value: live_value.clone(),
                pool: g.pool.name.clone(),
                address: *address,
                kind: Kind::Static,
                owner: who.clone(),
                added_by: None,
                state: RecordState::Writing,
            })
            .collect();
        // What each address was here before: its lease is undone to that.
        let mut before: Vec<Option<Lease>> = Vec::new();
        let deadline = std::time::Instant::now() + self.settings.request_timeout();
        let busy = loop {
            // Another attachment's row at one of the keys: nothing is written.
            let busy = store.write(|tx| {
                for row in &rows {
                    if let Some(r) = tx.node_record(&row.key)?.filter(|r| r.owner != row.owner) {
                        return Ok(Some(r));
                    }
                }
                for row in &rows {
                    tx.put_node_record(row)?;
                    before.push(tx.holder(row.address)?);
                    lease_here(tx, row.address, &row.pool, who, s.identity)?;
                }
                Ok(None)
            })?;
            match busy {
                // Another call of this node is being granted the address in
                // a shared block, picked from a view read before this
                // identity's hold counted there: the store, which holds it
                // for the identity, refuses that grant within a request.
                // Watched with reads, which take no lock.
                Some(r) if r.state == RecordState::Writing && std::time::Instant::now() < deadline => {
                    let still = |tx: &Tx| {
                        let now = tx.node_record(&r.key)?;
                        Ok(now.is_some_and(|now| now.owner == r.owner && now.state == RecordState::Writing))
                    };
                    while std::time::Instant::now() < deadline && store.read(still)? {
                        std::thread::sleep(ROW_POLL);
                    }
                }
                busy => break busy,
            }
        };
        if let Some(r) = busy {
            let doing = match r.state {
                RecordState::Writing => "being granted to",
                RecordState::Releasing => "being released by",
                RecordState::Held => "recorded here for",
            };
            return Err(CniError::new(
                Code::TryAgainLater,
                format!(
                    "{} of identity {:?} is {doing} container {} on this node: try again",
                    r.address,
                    s.identity,
                    shown(&r.owner.container_id)
                ),
            ));
        }
        let live = IdentityRecord {
            node: self.settings.node.clone(),
            container: who.container_id.clone(),
            addresses: taken.iter().map(|(_, a)| *a).collect(),
            ..Default::default()
        };
        let identity =
            RecordChange { key: key.to_string(), expect: Expect::At(found.version), then: Then::Put(to_bytes(&live)) };
        let changes: Vec<RecordChange> = std::iter::once(identity)
            .chain(rows.iter().map(|r| RecordChange {
                key: r.key.clone(),
                expect: Expect::Is(held_value.clone().into_bytes()),
                then: Then::Put(r.value.clone().into_bytes()),
            }))
            .collect();
        // Not while nodes re-claim after the store lost history: the hold may
        // be the restored backup's, its address another's since.
        let version = match self.datastore.change_together(&changes, None, true) {
            Ok(Some(version)) => version,
            Ok(None) => {
                store.write(|tx| {
                    for (row, before) in rows.iter().zip(&before) {
                        tx.drop_node_record_if(&row.key, &row.value)?;
                        match before {
                            None => drop(tx.release_address(row.address, who)?),
                            // Held again as it was: to the end etcd still holds it.
                            Some(Lease { held_until: Some(until), .. }) => {
                                tx.hold_address_until(row.address, who, *until)?;
                            }
                            Some(_) => {}
                        }
                    }
                    Ok(())
                })?;
                if let Some(stored) = self.datastore.recovery()? {
                    let refused =
                        format!("held identity {:?} is not taken over (its hold may be a backup's)", s.identity);
                    return Err(self.recovering(Some(&stored), &refused));
                }
                return Ok(None);
            }
            Err(e) => {
                // etcd may have taken it: the rows are released later, by
                // value, as after any unsure write.
                for row in &rows {
                    records::release_later(store, &row.key)?;
                }
                return Err(e.into());
            }
        };
        store.write(|tx| {
            for row in &rows {
                tx.set_node_record_state(&row.key, RecordState::Held)?;
                // In a block of this node's own it was counted taken (its
                // record was another's); the record is this node's now, and
                // the lease keeps it.
                self.count_taken(tx, row.address, false)?;
            }
            self.stamp(tx)
        })?;
        for (_, address) in &taken {
            tracing::info!(
                "{address} was held for identity {:?} (last on node {}): taken over for this attachment",
                s.identity,
                shown(&held.node)
            );
        }
        Ok(Some(Found { record: Some(live), version }))
    }

    /// ADD, once this node's part is decided: the identity's key lists the
    /// addresses `who` holds now, so that a node sharing it (`shareLive`)
    /// and `release-node` know them. `known` is the key as the claim left
    /// it: one transaction when it is still so, none when it lists them
    /// already. Best effort: a release collects them from the node database
    /// anyway.
    pub(super) fn record_identity_addresses(
        &self,
        who: &Attachment,
        s: &Sticking,
        addresses: &[IpAddr],
        mut known: Option<Found>,
    ) {
        let key = self.identity_key(&who.ifname, s.identity);
        let warn =
            |e: CniError| tracing::warn!("identity {:?}: its addresses are recorded at its release: {e}", s.identity);
        let recorded = retry(CLAIM_ROUNDS, || {
            let found = match known.take() {
                Some(found) => found,
                None => match self.datastore.record(&key)? {
                    Some(stored) => {
                        Found { record: serde_json::from_slice(&stored.value).ok(), version: stored.version }
                    }
                    None => return Ok(Attempt::Done(())),
                },
            };
            let Some(mut record) = found.record.clone() else { return Ok(Attempt::Done(())) };
            let first = record.node == self.settings.node && record.container == who.container_id;
            if !first || record.is_held() || record.addresses == addresses {
                return Ok(Attempt::Done(()));
            }
            record.addresses = addresses.to_vec();
            Ok(match self.replace_identity(&key, &found, &record, Vec::new())? {
                Some(_) => Attempt::Done(()),
                None => Attempt::Conflict,
            })
        });
        if let Err(e) = recorded {
            warn(e);
        }
    }

    /// DEL, GC, a rollback: the identity addresses of `who` stay the
    /// identity's. Its key is live here on `who`: with a sharer left it
    /// passes to it; else it becomes held for `hold`, and every address gets
    /// its held record under one new etcd lease. Then, here, the leases and
    /// rows go (the records are the identity's now) and each address of a
    /// block of this node's own is counted taken in it. Returns the keys of
    /// `who`'s rows this handled, which the ordinary release must not
    /// touch. Without etcd nothing is handled: the allocators hold the
    /// addresses in the node database, and a later call publishes the hold.
    pub fn hold_identities(
        &self,
        store: &mut StoreHandle,
        who: &Attachment,
        asked: Option<&str>,
        hold: std::time::Duration,
        rollback_of: Option<&str>,
    ) -> Result<Vec<String>> {
        let (leases, rows) = store.read(|tx| Ok((tx.leases_of(who)?, tx.node_records_of(who)?)))?;
        if rollback_of.is_some_and(|add_id| {
            rows.iter().any(|r| r.added_by.as_deref() != Some(add_id))
                || leases.iter().any(|l| l.added_by.as_deref() != Some(add_id))
        }) {
            // A failed repeat ADD: the attachment lives on with what it had.
            return Ok(Vec::new());
        }
        let mut by_identity: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for lease in &leases {
            if let Some(identity) = &lease.identity {
                by_identity.entry(identity.clone()).or_default().push(lease.address);
            }
        }
        // The identity the call names, which may hold nothing here (an ADD
        // that failed before it leased): its key must not stay live.
        if let Some(identity) = asked {
            by_identity.entry(identity.to_string()).or_default();
        }
        // Taken over by an ADD killed before it leased them here. (A grant
        // in a shared block names the identity too; one its ADD never
        // leased is released as any other.)
        for r in &rows {
            let Ok(record) = serde_json::from_str::<AddressRecord>(&r.value) else { continue };
            if !record.identity.is_empty() && record.kind != Kind::Allocated {
                let addresses = by_identity.entry(record.identity).or_default();
                if !addresses.contains(&r.address) {
                    addresses.push(r.address);
                }
            }
        }
        let mut handled = Vec::new();
        for (identity, addresses) in by_identity {
            match self.hold_identity(store, who, &identity, &addresses, &rows, hold) {
                Ok(keys) => handled.extend(keys),
                Err(e) => {
                    tracing::warn!("identity {identity:?} is held on this node until the cluster's store answers: {e}");
                    store.write(|tx| tx.set_note(&pending_note(&self.network, &who.ifname, &identity), "1"))?;
                    // Its records stay the identity's until a later call
                    // publishes its hold or passes it on: released, they
                    // would free an address a sharer on another node uses.
                    handled.extend(
                        rows.iter()
                            .filter(|r| addresses.contains(&r.address) && r.kind != Kind::Borrowed)
                            .map(|r| r.key.clone()),
                    );
                }
            }
        }
        Ok(handled)
    }

    fn hold_identity(
        &self,
        store: &mut StoreHandle,
        who: &Attachment,
        identity: &str,
        addresses: &[IpAddr],
        rows: &[NodeRecord],
        hold: std::time::Duration,
    ) -> Result<Vec<String>> {
        let key = self.identity_key(&who.ifname, identity);
        let me = self.settings.node.clone();
        // Borrowed addresses go back to their lender, as ever.
        let borrowed = |a: &IpAddr| rows.iter().any(|r| r.address == *a && r.kind == Kind::Borrowed);
        let addresses: Vec<IpAddr> = addresses.iter().copied().filter(|a| !borrowed(a)).collect();
        let rows: Vec<&NodeRecord> = rows.iter().filter(|r| addresses.contains(&r.address)).collect();
        let keyed = self.address_keys(store, &addresses, &rows)?;
        // What a record of `who`'s may say now: its row's value, or what
        // another node wrote for it (passing the identity on, shareLive).
        let live_here = to_text(&self.live_record(who, identity));
        // As `release-node` of an earlier build wrote it, passing the
        // identity here: without the interface.
        let passed_before = to_text(&AddressRecord { ifname: String::new(), ..self.live_record(who, identity) });
        // Or held for it already: a hold whose change of the identity a kill
        // cut short (a store that writes them one at a time), done again.
        let held_here = to_text(&AddressRecord::held_for(identity));
        let ours = |value: &[u8], row_value: Option<&[u8]>| {
            Some(value) == row_value
                || value == live_here.as_bytes()
                || value == passed_before.as_bytes()
                || value == held_here.as_bytes()
        };
        let reads: Vec<String> = std::iter::once(key.clone()).chain(keyed.iter().map(|(_, k)| k.clone())).collect();
        let waited = std::cell::Cell::new(false);
        let held = retry(CLAIM_ROUNDS, || {
            let mut found = self.datastore.records(&reads)?.into_iter();
            let Some(stored) = found.next().flatten() else { return Ok(Attempt::Done(Vec::new())) };
            let Ok(record) = serde_json::from_slice::<IdentityRecord>(&stored.value) else {
                return Ok(Attempt::Done(Vec::new()));
            };
            let identity_found = Found { record: None, version: stored.version };
            // Held here already (a DEL killed before it finished here).
            if record.is_held() && record.node == me && addresses.iter().all(|a| record.addresses.contains(a)) {
                return self.let_go_here(store, who, &addresses, &rows, record.until).map(Attempt::Done);
            }
            if !record.live_on(&me, &who.container_id) {
                // A take-over by this attachment killed with its write to
                // the store in flight (its rows still `writing`): the store
                // may apply that write after this read, a process's request
                // outliving it. Read again once, a moment later, so that an
                // identity made live on this attachment is held again here
                // rather than left live on an attachment that is gone.
                if !waited.get() && rows.iter().any(|r| r.state == RecordState::Writing) {
                    waited.set(true);
                    std::thread::sleep(IN_FLIGHT_WRITE);
                    return Ok(Attempt::Conflict);
                }
                return Ok(Attempt::Done(Vec::new()));
            }
            if !(record.node == me && record.container == who.container_id) {
                // A sharer goes; the identity lives on where it was.
                let mut next = record.clone();
                next.sharers.retain(|s| !(s.node == me && s.container == who.container_id));
                if self.replace_identity(&key, &identity_found, &next, Vec::new())?.is_none() {
                    return Ok(Attempt::Conflict);
                }
                tracing::info!("identity {identity:?} stays live on node {}", shown(&record.node));
                store.write(|tx| addresses.iter().try_for_each(|&a| tx.release_address(a, who).map(drop)))?;
                return Ok(Attempt::Done(Vec::new()));
            }
            // Each record as read: absent, or `who`'s; another's is not ours
            // to change. Rowless: a record of `who` that another node wrote
            // (sharing or passing the identity), which no row of this node
            // releases.
            let mut kept: Vec<(IpAddr, String, Expect, bool)> = Vec::new();
            for ((address, record_key), current) in keyed.iter().zip(found) {
                let row_value = rows.iter().find(|r| r.address == *address).map(|r| r.value.as_bytes());
                let (expect, rowless) = match current {
                    None => (Expect::Absent, false),
                    Some(now) if ours(&now.value, row_value) => (Expect::At(now.version), row_value.is_none()),
                    Some(now) => {
                        tracing::warn!(
                            "{address} of identity {identity:?} is recorded for another ({}): not held",
                            shown_bytes(&now.value)
                        );
                        continue;
                    }
                };
                kept.push((*address, record_key.clone(), expect, rowless));
            }
            let identity_change =
                |then| RecordChange { key: key.clone(), expect: Expect::At(identity_found.version), then };
            let held_addresses: Vec<IpAddr> = kept.iter().map(|(a, ..)| *a).collect();
            if (held_addresses.is_empty() || hold.is_zero()) && record.sharers.is_empty() {
                // Nothing to hold (or no holding): the identity is nobody's,
                // and its addresses are released as any others (those
                // without a row here, with the key).
                let changes: Vec<RecordChange> = std::iter::once(identity_change(Then::Delete))
                    .chain(kept.iter().map(|(_, k, expect, rowless)| RecordChange {
                        key: k.clone(),
                        expect: expect.clone(),
                        then: if *rowless { Then::Delete } else { Then::Keep },
                    }))
                    .collect();
                if self.datastore.change_together(&changes, None, false)?.is_none() {
                    return Ok(Attempt::Conflict);
                }
                tracing::info!("identity {identity:?} is no attachment's: {key} is deleted");
                return Ok(Attempt::Done(Vec::new()));
            }
            let (next, hold_seconds, record_value) = match record.sharers.first() {
                // The first sharer becomes its attachment.
                Some(heir) => {
                    let next = IdentityRecord {
                        node: heir.node.clone(),
                        container: heir.container.clone(),
                        addresses: held_addresses.clone(),
                        sharers: record.sharers[1..].to_vec(),
                        until: 0,
                    };
                    let heir = Attachment { container_id: heir.container.clone(), ..who.clone() };
                    let value = AddressRecord { node: next.node.clone(), ..self.live_record(&heir, identity) };
                    (next, None, to_bytes(&value))
                }
                None => {
                    let secs = i64::try_from(hold.as_secs()).unwrap_or(i64::MAX).max(1);
                    // Read before the hold starts in the store, rounded
                    // down: the hold's end as the node counts it comes no
                    // later than the store's (see `let_go_here`).
                    let granted = unix_now();
                    let next = IdentityRecord {
                        node: me.clone(),
                        addresses: held_addresses.clone(),
                        until: granted.saturating_add(secs),
                        ..Default::default()
                    };
                    (next, Some(secs), to_bytes(&AddressRecord::held_for(identity)))
                }
            };
            let changes: Vec<RecordChange> = std::iter::once(identity_change(Then::Put(to_bytes(&next))))
                .chain(kept.iter().map(|(_, k, expect, _)| RecordChange {
                    key: k.clone(),
                    expect: expect.clone(),
                    then: Then::Put(record_value.clone()),
                }))
                .collect();
            if self.datastore.change_together(&changes, hold_seconds, false)?.is_none() {
                return Ok(Attempt::Conflict);
            }
            match next.is_held() {
                true => tracing::info!(
                    "identity {identity:?}: {} held for it until {}",
                    list(&held_addresses),
                    shared::utc::iso8601(next.until)
                ),
                false => tracing::info!("identity {identity:?} passes to node {} (shareLive)", shown(&next.node)),
            }
            let until = match next.is_held() {
                true => next.until,
                false => unix_now().saturating_add(i64::try_from(hold.as_secs()).unwrap_or(i64::MAX)),
            };
            self.let_go_here(store, who, &held_addresses, &rows, until).map(Attempt::Done)
        })?;
        held.ok_or_else(|| CniError::new(Code::TryAgainLater, format!("identity key {key} keeps changing")))
    }

    /// The record of an identity's address live on `who` of this node.
    fn live_record(&self, who: &Attachment, identity: &str) -> AddressRecord {
        AddressRecord {
            kind: Kind::Static,
            node: self.settings.node.clone(),
            container: who.container_id.clone(),
            ifname: who.ifname.clone(),
            lender: String::new(),
            identity: identity.to_string(),
        }
    }

    /// GC: identities live on attachments of this node that are gone and
    /// hold nothing here (an ADD killed before it leased, a DEL never made)
    /// are let go, as their DEL would (what they hold was held already by
    /// [`Node::hold_identities`]). Reads every identity key of the network:
    /// GC is rare.
    pub fn forget_gone_identities(
        &self,
        store: &mut StoreHandle,
        valid: &std::collections::HashSet<(String, String)>,
    ) -> Result<()> {
        let me = &self.settings.node;
        for (ifname, identity, stored) in self.datastore.identities()? {
            let Ok(record) = serde_json::from_slice::<IdentityRecord>(&stored.value) else { continue };
            if record.is_held() {
                continue;
            }
            let ours = std::iter::once(Sharer { node: record.node.clone(), container: record.container.clone() })
                .chain(record.sharers.iter().cloned())
                .filter(|s| s.node == *me && !valid.contains(&(s.container.clone(), ifname.clone())));
            for gone in ours.collect::<Vec<_>>() {
                let who =
                    Attachment { network: self.network.clone(), container_id: gone.container, ifname: ifname.clone() };
                // A DEL without etcd left its hold to publish: settled there.
                let pending = pending_note(&self.network, &ifname, &identity);
                let (leases, rows, noted) = store
                    .read(|tx| Ok((tx.leases_of(&who)?, tx.node_records_of(&who)?, tx.note(&pending)?.is_some())))?;
                if leases.is_empty() && !(noted && who.container_id == record.container) {
                    tracing::info!(
                        "GC: identity {identity:?} was live on container {}, which is gone",
                        who.container_id
                    );
                    // Its first attachment passes it on with its addresses
                    // (a sharer leases them all); a sharer just goes.
                    let first = who.container_id == record.container;
                    let addresses = if first { record.addresses.clone() } else { Vec::new() };
                    self.hold_identity(store, &who, &identity, &addresses, &rows, std::time::Duration::ZERO)?;
                }
            }
        }
        Ok(())
    }

    /// The record key of each of `addresses`: its row's, or else that of
    /// the block of this node it lies in, or else of its block as the pool's
    /// definition in etcd cuts it (the pool: its lease's here). One whose
    /// block cannot be told is left out, with a warning.
    fn address_keys(
        &self,
        store: &mut StoreHandle,
        addresses: &[IpAddr],
        rows: &[&NodeRecord],
    ) -> Result<Vec<(IpAddr, String)>> {
        let (blocks, pools) = store.read(|tx| {
            let blocks: Vec<NodeBlock> = tx.network_blocks(&self.network)?;
            let pools: Vec<Option<String>> =
                addresses.iter().map(|&a| Ok(tx.holder(a)?.map(|l| l.pool))).collect::<Result<_>>()?;
            Ok((blocks, pools))
        })?;
        let mut keyed = Vec::new();
        for (&address, pool) in addresses.iter().zip(pools) {
            if let Some(r) = rows.iter().find(|r| r.address == address) {
                keyed.push((address, r.key.clone()));
            } else if let Some(b) = blocks.iter().find(|b| b.block.contains(&address)) {
                keyed.push((address, self.record_key(&b.pool, &b.block, address)));
            } else if let Some(block) = pool.as_deref().map(|p| self.block_in_etcd(p, address)).transpose()?.flatten() {
                let pool = pool.unwrap_or_default();
                keyed.push((address, self.record_key(&pool, &block, address)));
            } else {
                tracing::warn!("the block of {address} is not known here: it is not held in the cluster");
            }
        }
        Ok(keyed)
    }

    /// The block of `address` as pool `pool`'s definition in etcd cuts it.
    fn block_in_etcd(&self, pool: &str, address: IpAddr) -> Result<Option<IpNet>> {
        let found = self.datastore.record(&self.datastore.definition_name(pool))?;
        let Some(definition) = found.and_then(|stored| serde_json::from_slice::<PoolRecord>(&stored.value).ok()) else {
            return Ok(None);
        };
        Ok(IpNet::new(address, definition.block_size).ok().map(|n| n.trunc()))
    }

    /// Counts `address` taken (or no longer) in the block of this node that
    /// holds it, as the block's next confirming read will.
    fn count_taken(&self, tx: &Tx, address: IpAddr, taken: bool) -> Result<()> {
        let blocks = tx.all_node_blocks()?;
        for mut b in blocks.into_iter().filter(|b| b.network == self.network && b.block.contains(&address)) {
            if b.taken.contains(&address) != taken {
                b.taken.retain(|a| *a != address);
                if taken {
                    b.taken.push(address);
                }
                tx.put_node_block(&b)?;
            }
        }
        Ok(())
    }

    /// After etcd holds an identity's addresses (or passed them on): here
    /// the attachment lets them go. Its leases and rows on them go, and an
    /// address in a block of this node's own is counted taken there, so that
    /// this node does not hand it out before its next confirming read.
    ///
    /// In a block of this node's own the lease becomes a hold here too
    /// (until `until`), not free: an ADD of this node whose view of the
    /// block was read before this call counts the address free there, and
    /// its allocators lease whatever is neither leased nor held. It ends no
    /// later than etcd's hold: `until` is the identity's end in etcd, read
    /// before its lease was granted, so that the ADD just after etcd ended
    /// the hold finds the address free here too.
    fn let_go_here(
        &self,
        store: &mut StoreHandle,
        who: &Attachment,
        addresses: &[IpAddr],
        rows: &[&NodeRecord],
        until: i64,
    ) -> Result<Vec<String>> {
        store.write(|tx| {
            let own: Vec<IpNet> = tx
                .all_node_blocks()?
                .into_iter()
                .filter(|b| b.network == self.network && !b.shared)
                .map(|b| b.block)
                .collect();
            for &address in addresses {
                match own.iter().any(|b| b.contains(&address)) {
                    true => tx.hold_address_until(address, who, until)?,
                    false => tx.release_address(address, who)?,
                };
                self.count_taken(tx, address, true)?;
            }
            for r in rows {
                tx.drop_node_record_if(&r.key, &r.value)?;
            }
            Ok(())
        })?;
        Ok(rows.iter().map(|r| r.key.clone()).collect())
    }

    /// What DELs without etcd left: an identity still live in etcd on an
    /// attachment of this node that is gone. Its addresses held in the node
    /// database are published as the identity's hold, for what is left of
    /// it, or it passes to its sharer (shareLive); none left: the key goes.
    /// A note goes only once that is done (or the identity is no longer
    /// this node's to settle). Best effort.
    pub(super) fn settle_identities(&self, store: &mut StoreHandle) {
        let prefix = format!("{PENDING_PREFIX}{}\n", self.network);
        let pending = match store.read(|tx| tx.notes_with_prefix(&prefix)) {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!("cannot read the identities left to publish: {e}");
                return;
            }
        };
        for name in pending {
            let Some((ifname, identity)) = name.strip_prefix(&prefix).and_then(|rest| rest.split_once('\n')) else {
                continue;
            };
            match self.publish_hold(store, ifname, identity) {
                Ok(true) => {
                    if let Err(e) = store.write(|tx| tx.drop_note(&name)) {
                        tracing::warn!("{e}");
                    }
                }
                Ok(false) => tracing::info!("identity {identity:?} changed meanwhile: it is published later"),
                Err(e) => tracing::warn!("identity {identity:?} is published later: {e}"),
            }
        }
    }

    /// One identity of a DEL without etcd (see [`Node::settle_identities`]):
    /// whether its note is done with.
    fn publish_hold(&self, store: &mut StoreHandle, ifname: &str, identity: &str) -> Result<bool> {
        let key = self.identity_key(ifname, identity);
        let Some(stored) = self.datastore.record(&key)? else { return Ok(true) };
        let Ok(record) = serde_json::from_slice::<IdentityRecord>(&stored.value) else { return Ok(true) };
        // Held, or taken over or passed on meanwhile: not this node's to settle.
        if record.is_held() || record.node != self.settings.node {
            return Ok(true);
        }
        let who =
            Attachment { network: self.network.clone(), container_id: record.container.clone(), ifname: ifname.into() };
        let now = unix_now();
        let (holds, rows, live) = store.read(|tx| {
            let holds: Vec<Lease> = tx
                .rows_of_identity(&self.network, identity, ifname)?
                .into_iter()
                .filter(|l| l.is_hold() && l.held_until.is_some_and(|t| t > now))
                .collect();
            Ok((holds, tx.node_records_of(&who)?, !tx.leases_of(&who)?.is_empty()))
        })?;
        // Its attachment is live here again (an ADD of it since).
        if live {
            return Ok(true);
        }
        let until = holds.iter().filter_map(|l| l.held_until).min();
        let mut addresses: Vec<IpAddr> = holds.iter().map(|l| l.address).collect();
        if !record.sharers.is_empty() {
            // It passes to its sharer with every address it has, as the DEL
            // would have done: the sharer leases them all.
            addresses.extend(record.addresses.iter().filter(|a| !addresses.contains(a)).collect::<Vec<_>>());
        }
        let (kept, left): (Vec<NodeRecord>, Vec<NodeRecord>) =
            rows.into_iter().partition(|r| addresses.contains(&r.address) && r.kind != Kind::Borrowed);
        let hold = until.map_or(std::time::Duration::ZERO, |t| std::time::Duration::from_secs((t - now).max(1) as u64));
        if hold.is_zero() && record.sharers.is_empty() {
            if !self.datastore.delete_record(&key, stored.version)? {
                return Ok(false);
            }
            tracing::info!("identity {identity:?} holds nothing any more: {key} is deleted");
            self.release(store, &kept)?;
        } else {
            // Held for what is left of its hold here, or passed on; then
            // here its rows go and its addresses count taken.
            self.hold_identity(store, &who, identity, &addresses, &kept, hold)?;
        }
        // Records of what is no longer the identity's (its hold here ended).
        self.release(store, &left)?;
        Ok(true)
    }
}

/// Leases `address` here to `who` for `identity`: a hold of the identity on
/// it becomes the lease; a lease of `who` stays.
fn lease_here(tx: &Tx, address: IpAddr, pool: &str, who: &Attachment, identity: &str) -> Result<()> {
    match tx.holder(address)? {
        None => tx.insert_lease(address, pool, who)?,
        Some(l) if l.is_hold() && l.identity.as_deref() == Some(identity) => {
            tx.take_hold(address, who)?;
        }
        Some(l) if l.owner == *who && !l.is_hold() => {}
        Some(l) if !l.is_hold() && l.identity.as_deref() == Some(identity) => tx.share_lease(address, who)?,
        Some(l) => {
            tracing::error!(
                "{address} of identity {identity:?} is leased here to container {} interface {}: an address held twice",
                shown(&l.owner.container_id),
                shown(&l.owner.ifname)
            );
            return Err(CniError::new(
                Code::TryAgainLater,
                format!("{address} of identity {identity:?} is held here by another attachment"),
            ));
        }
    }
    tx.bind_identity(who, identity)
}

/// The addresses among `addresses` that a candidate pool hands out now,
/// with its geometry.
fn in_pools<'g, 'p>(geometries: &'g [Geometry<'p>], addresses: &[IpAddr]) -> Vec<(&'g Geometry<'p>, IpAddr)> {
    addresses.iter().filter_map(|&a| geometries.iter().find(|g| g.pool.hands_out(a)).map(|g| (g, a))).collect()
}

fn list(addresses: &[IpAddr]) -> String {
    addresses.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}
