//! `release-node`'s part for workload identities (ipam-da-sticky): each
//! identity live on the released node is held for it, passed to its sharer,
//! or loses the released node as a sharer, at once with its addresses'
//! records, so that the workload comes back with its address elsewhere.

use std::net::IpAddr;

use shared::pool::Pool;
use shared::store::unix_now;
use shared::Result;

use super::CLAIM_ROUNDS;
use crate::blocks::Geometry;
use crate::datastore::{retry, Attempt, Datastore, Expect, RecordChange, Then, Versioned};
use crate::records::{shown, to_bytes, AddressRecord, IdentityRecord, Kind};

/// What `release-node` did with one identity of the released node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRelease {
    pub identity_key: String,
    /// `held until <time>`, `passed to node N`, `no longer shared with it`,
    /// `deleted` (nothing to hold), or why it was left as it is.
    pub outcome: String,
    /// False when the key or its records kept changing while they were
    /// released: nothing of it was changed, and the node's records must not
    /// be deleted (they may be the identity's): run release-node again.
    pub settled: bool,
}

/// What became of one identity key of the released node.
enum Released {
    /// Written: the outcome.
    Done(String),
    /// Not the node's (held, or live elsewhere), or unreadable: left alone.
    Untouched,
    /// The key or a record changed since read: read them again.
    Changed,
}

/// `release-node`'s part for identities: each identity live on `node` (a
/// dead node: its DELs will never come) is held for `hold` from now, its
/// addresses' records held with it under one etcd lease (so that the
/// identity comes back with its address on another node, and whoever
/// claims the dead node's blocks keeps off them meanwhile); one it shares
/// passes to its next attachment, its addresses' records naming that one;
/// a sharer on `node` is dropped. Each change compares the key and each
/// record unchanged since read; what changed is read again, and one that
/// keeps changing is reported unsettled (`settled` false).
pub fn release_node_identities(
    datastore: &dyn Datastore,
    pools: &[Pool],
    node: &str,
    hold: std::time::Duration,
) -> Result<Vec<IdentityRelease>> {
    let geometries: Vec<Geometry> = pools.iter().map(Geometry::of).collect();
    let record_key = |a: IpAddr| {
        geometries
            .iter()
            .find(|g| g.pool.range_for_subnet_member(a).is_some())
            .map(|g| datastore.record_key(&g.pool.name, g.block_of(a), a))
    };
    let mut done = Vec::new();
    for (ifname, identity, stored) in datastore.identities()? {
        let identity_key = datastore.identity_key(&ifname, &identity);
        let mut current = Some(stored);
        let outcome = retry(CLAIM_ROUNDS, || {
            // Gone meanwhile: nothing left to release.
            let Some(stored) = current.take() else { return Ok(Attempt::Done(None)) };
            let released =
                release_identity(datastore, (&identity_key, &stored), (&ifname, &identity), node, hold, &record_key)?;
            Ok(match released {
                Released::Done(said) => Attempt::Done(Some(said)),
                Released::Untouched => Attempt::Done(None),
                Released::Changed => {
                    current = datastore.record(&identity_key)?;
                    Attempt::Conflict
                }
            })
        })?;
        match outcome {
            Some(Some(said)) => done.push(IdentityRelease { identity_key, outcome: said, settled: true }),
            Some(None) => {}
            None => done.push(IdentityRelease {
                identity_key,
                outcome: "kept changing while it was released: left as it is".into(),
                settled: false,
            }),
        }
    }
    Ok(done)
}

/// One identity key of the released `node`, as read: held, passed on or
/// dropped from its sharers, at once with its addresses' records.
fn release_identity(
    datastore: &dyn Datastore,
    (key, stored): (&str, &Versioned),
    (ifname, identity): (&str, &str),
    node: &str,
    hold: std::time::Duration,
    record_key: &dyn Fn(IpAddr) -> Option<String>,
) -> Result<Released> {
    let Ok(record) = serde_json::from_slice::<IdentityRecord>(&stored.value) else { return Ok(Released::Untouched) };
    if record.is_held() || !(record.node == node || record.sharers.iter().any(|s| s.node == node)) {
        return Ok(Released::Untouched);
    }
    let identity_change = |then| RecordChange { key: key.to_string(), expect: Expect::At(stored.version), then };
    let (next, hold_seconds, value, outcome) = if record.node != node {
        let mut next = record.clone();
        next.sharers.retain(|s| s.node != node);
        (next, None, None, "no longer shared with it".to_string())
    } else if let Some(heir) = record.sharers.iter().find(|s| s.node != node).cloned() {
        let next = IdentityRecord {
            node: heir.node.clone(),
            container: heir.container.clone(),
            addresses: record.addresses.clone(),
            sharers: record.sharers.iter().filter(|s| s.node != node && **s != heir).cloned().collect(),
            until: 0,
        };
        // As the heir's node writes the record of its own attachment, so
        // that its DEL finds it its own.
        let value = AddressRecord {
            kind: Kind::Static,
            node: heir.node.clone(),
            container: heir.container.clone(),
            ifname: ifname.to_string(),
            identity: identity.to_string(),
            ..AddressRecord::default()
        };
        (next, None, Some(value), format!("passed to node {}", shown(&heir.node)))
    } else if record.addresses.is_empty() || hold.is_zero() {
        let deleted = datastore.change_together(&[identity_change(Then::Delete)], None, false)?;
        return Ok(match deleted {
            Some(_) => Released::Done("deleted".into()),
            None => Released::Changed,
        });
    } else {
        let secs = i64::try_from(hold.as_secs()).unwrap_or(i64::MAX).max(1);
        let until = unix_now().saturating_add(secs);
        let next =
            IdentityRecord { node: node.to_string(), addresses: record.addresses.clone(), until, ..Default::default() };
        (
            next,
            Some(secs),
            Some(AddressRecord::held_for(identity)),
            format!("held until {}", shared::utc::iso8601(until)),
        )
    };
    let mut changes = vec![identity_change(Then::Put(to_bytes(&next)))];
    if let Some(value) = &value {
        // Each record as read: absent, or the identity's on the dead node;
        // another's is left as it is.
        let keys: Vec<String> = record.addresses.iter().filter_map(|a| record_key(*a)).collect();
        for (k, current) in keys.iter().zip(datastore.records(&keys)?) {
            let expect = match current {
                None => Expect::Absent,
                Some(now) => match serde_json::from_slice::<AddressRecord>(&now.value) {
                    Ok(r) if is_identity_s(&r, &record, (ifname, identity), node) => Expect::At(now.version),
                    _ => continue,
                },
            };
            changes.push(RecordChange { key: k.clone(), expect, then: Then::Put(to_bytes(value)) });
        }
    }
    Ok(match datastore.change_together(&changes, hold_seconds, false)? {
        Some(_) => Released::Done(outcome),
        None => Released::Changed,
    })
}

/// Whether `r`, the record of an address that identity key `live` (live on
/// `node`) lists, is the identity's there: it names the identity and
/// `node`, or (a record of a build that did not name the identity in it: a
/// grant in a shared block, an address asked for by name) the identity's
/// attachment itself.
fn is_identity_s(r: &AddressRecord, live: &IdentityRecord, (ifname, identity): (&str, &str), node: &str) -> bool {
    r.node == node
        && (r.identity == identity || (r.identity.is_empty() && r.container == live.container && r.ifname == ifname))
}
