//! The API server's etcd restored from an older backup, seen per object.
//!
//! etcd's protocol sees lost history in its global revision going back; a
//! `resourceVersion` may not be compared, and the API server's own writes
//! carry it past what the nodes saw anyway (docs/kubernetes.md). What only
//! grows over an object's continuous history is its `metadata.generation`
//! (bumped at every change of `spec`) under one `metadata.uid` (new at each
//! creation). So a node keeps, in its database (note `kube-seen:<network>`),
//! the uid and highest generation of every object of the network a
//! consistent answer showed it, and an object shown again with the same uid
//! and a lower generation is the store's older state: the node recovers as
//! on etcd (quarantine on the `IPDNetwork`, its blocks and records put back),
//! through [`crate::datastore::Datastore::marks`]: `(0, 1)` after such an
//! answer, `(1, 1)` otherwise, against the watermark 1 the node keeps.
//!
//! Only consistent answers count: a read from the API server's cache
//! (`resourceVersion=0`) may be behind, which is no loss.

use std::collections::BTreeMap;

use shared::store::Tx;

use crate::rows::ClusterRows;

use super::objects::ObjectMeta;
use super::KubeStore;

const SEEN_NOTE: &str = "kube-seen:";

/// What this node saw of the network's objects: name → (uid, generation).
pub(super) type Seen = BTreeMap<String, (String, i64)>;

fn seen_note(network: &str) -> String {
    format!("{SEEN_NOTE}{}", super::names::text(network))
}

/// What earlier calls of this node saw (a note that does not read is
/// nothing seen).
pub(super) fn seen_before(tx: &Tx, network: &str) -> shared::Result<Seen> {
    Ok(tx.note(&seen_note(network))?.and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default())
}

impl KubeStore {
    /// Takes note of an object a consistent answer showed, when it is
    /// `relevant` to this node (its own `IPDNode`, blocks and identities, the
    /// network) or was before: a lower generation of an object seen before
    /// under the same uid is lost history.
    pub(super) fn witness(&self, kind: &str, meta: &ObjectMeta, relevant: bool) {
        let (Some(seen), Some(uid), Some(generation)) = (&self.seen, &meta.uid, meta.generation) else { return };
        let mut seen = seen.borrow_mut();
        match seen.get(&meta.name) {
            Some((before_uid, before)) if before_uid == uid && generation == *before => return,
            Some((before_uid, before)) if before_uid == uid && generation < *before => {
                let what = format!(
                    "{kind} {} is at generation {generation}, which this node saw at generation {before} (uid {uid})",
                    meta.name
                );
                tracing::error!("the Kubernetes API server lost history: {what}");
                self.lost.borrow_mut().get_or_insert(what);
            }
            Some(_) => {}
            None if !relevant => return,
            None => {}
        }
        seen.insert(meta.name.clone(), (uid.clone(), generation));
        self.seen_changed.set(true);
    }

    /// Writes down what this call saw, merged with what other calls of this
    /// node wrote meanwhile (the higher generation of each object), unless
    /// this call saw history lost and did not start the recovery: then the
    /// next call sees it again. Once the recovery started, what the store
    /// shows now is the new baseline.
    /// Whether it wrote (what it saw is kept, until it sees more).
    pub(super) fn keep_seen(&self, tx: &Tx) -> shared::Result<bool> {
        let Some(seen) = &self.seen else { return Ok(false) };
        let lost = self.lost.borrow().is_some();
        if !self.seen_changed.get() || (lost && !self.recovering.get()) {
            return Ok(false);
        }
        let mut merged = if lost { Seen::new() } else { seen_before(tx, &self.network)? };
        for (name, (uid, generation)) in seen.borrow().iter() {
            match merged.get(name) {
                Some((u, g)) if u == uid && g > generation && !lost => {}
                _ => drop(merged.insert(name.clone(), (uid.clone(), *generation))),
            }
        }
        tx.set_note(&seen_note(&self.network), &serde_json::to_string(&merged).unwrap_or_default())?;
        Ok(true)
    }
}
