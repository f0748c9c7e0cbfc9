//! Which attachments a pass releases: pure, no I/O, so that every rule is
//! tested without a server. An attachment is a candidate when the API
//! server's pods of this node have no pod of its namespace and name, or
//! one with another UID (a pod created again under the same name). It is
//! released only once it has been a candidate for `grace` (since an
//! earlier pass) and its ADD is older than `grace`: a LIST may be answered
//! just before a pod that is being added appears, and an ADD may still be
//! in flight.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use shared::store::AttachmentPod;
use shared::Attachment;

/// A pod as the API server lists it: (namespace, name) → UID.
pub type PodsOnNode = HashMap<(String, String), String>;

/// An attachment of one database.
type Key = (PathBuf, Attachment);

/// What the passes remember: since when (unix seconds) each attachment has
/// been a candidate, pass after pass.
#[derive(Debug, Default)]
pub struct Candidates {
    since: BTreeMap<Key, i64>,
}

/// Whether the pod an attachment's ADD named is gone from the node.
fn is_gone(recorded: &AttachmentPod, pods: &PodsOnNode) -> bool {
    let pod = &recorded.pod;
    match pods.get(&(pod.namespace.clone(), pod.name.clone())) {
        None => true,
        // A runtime that passed no UID: the name is all there is to go by.
        Some(uid) => pod.uid.as_ref().is_some_and(|recorded_uid| recorded_uid != uid),
    }
}

impl Candidates {
    /// One pass at `now` over every attachment with a pod (`attachments`,
    /// each of its database), against the pods the API server listed:
    /// returns those to release. The candidates remembered are this pass's
    /// only: an attachment released meanwhile, or whose pod is back, starts
    /// over.
    pub fn pass(
        &mut self,
        attachments: Vec<(PathBuf, AttachmentPod)>,
        pods: &PodsOnNode,
        now: i64,
        grace: i64,
    ) -> Vec<(PathBuf, AttachmentPod)> {
        let mut kept = BTreeMap::new();
        let mut release = Vec::new();
        for (database, recorded) in attachments {
            if !is_gone(&recorded, pods) {
                continue;
            }
            let key = (database, recorded.attachment.clone());
            let since = self.since.get(&key).copied().unwrap_or(now);
            if now - since >= grace && now - recorded.added >= grace {
                release.push((key.0.clone(), recorded));
            }
            kept.insert(key, since);
        }
        self.since = kept;
        release
    }

    /// How many attachments are candidates now.
    pub fn len(&self) -> usize {
        self.since.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::store::Pod;

    const GRACE: i64 = 300;

    fn recorded(container: &str, pod: &str, uid: Option<&str>, added: i64) -> (PathBuf, AttachmentPod) {
        let attachment = Attachment { network: "blue".into(), container_id: container.into(), ifname: "net1".into() };
        let pod = Pod { namespace: "prod".into(), name: pod.into(), uid: uid.map(String::from) };
        (PathBuf::from("/db"), AttachmentPod { attachment, pod, added })
    }

    fn pods(list: &[(&str, &str)]) -> PodsOnNode {
        list.iter().map(|(name, uid)| (("prod".to_string(), name.to_string()), uid.to_string())).collect()
    }

    fn released(keys: Vec<(PathBuf, AttachmentPod)>) -> Vec<String> {
        keys.into_iter().map(|(_, a)| a.attachment.container_id).collect()
    }

    #[test]
    fn a_gone_pods_attachment_is_released_only_after_grace_since_an_earlier_pass() {
        let mut candidates = Candidates::default();
        let gone = || vec![recorded("c1", "db-0", Some("u1"), 0)];
        assert!(candidates.pass(gone(), &pods(&[]), 1000, GRACE).is_empty(), "a first sighting releases nothing");
        assert_eq!(candidates.len(), 1);
        assert!(candidates.pass(gone(), &pods(&[]), 1000 + GRACE - 1, GRACE).is_empty());
        assert_eq!(released(candidates.pass(gone(), &pods(&[]), 1000 + GRACE, GRACE)), ["c1"]);
    }

    #[test]
    fn an_existing_pod_is_never_released_and_its_return_starts_the_wait_over() {
        let mut candidates = Candidates::default();
        let att = || vec![recorded("c1", "db-0", Some("u1"), 0)];
        for now in [1000, 5000, 100_000] {
            assert!(candidates.pass(att(), &pods(&[("db-0", "u1")]), now, GRACE).is_empty());
        }
        assert_eq!(candidates.len(), 0);
        candidates.pass(att(), &pods(&[]), 200_000, GRACE);
        // Back in the next list (a LIST that missed it): the wait starts over.
        candidates.pass(att(), &pods(&[("db-0", "u1")]), 200_100, GRACE);
        assert!(candidates.pass(att(), &pods(&[]), 200_000 + GRACE, GRACE).is_empty());
    }

    #[test]
    fn a_pod_created_again_under_the_same_name_is_another_pod() {
        let mut candidates = Candidates::default();
        let att = || vec![recorded("c1", "db-0", Some("u1"), 0)];
        candidates.pass(att(), &pods(&[("db-0", "u2")]), 1000, GRACE);
        assert_eq!(released(candidates.pass(att(), &pods(&[("db-0", "u2")]), 1000 + GRACE, GRACE)), ["c1"]);
        // Without a recorded UID the name is all there is: kept.
        let no_uid = || vec![recorded("c2", "db-0", None, 0)];
        let mut candidates = Candidates::default();
        candidates.pass(no_uid(), &pods(&[("db-0", "u2")]), 1000, GRACE);
        assert!(candidates.pass(no_uid(), &pods(&[("db-0", "u2")]), 1000 + GRACE, GRACE).is_empty());
    }

    #[test]
    fn an_add_younger_than_grace_is_not_released_whatever_the_list_says() {
        let mut candidates = Candidates::default();
        let young = || vec![recorded("c1", "db-0", Some("u1"), 1000)];
        candidates.pass(young(), &pods(&[]), 900, GRACE);
        assert!(candidates.pass(young(), &pods(&[]), 1000 + GRACE - 1, GRACE).is_empty());
        assert_eq!(released(candidates.pass(young(), &pods(&[]), 1000 + GRACE, GRACE)), ["c1"]);
    }

    #[test]
    fn an_attachment_gone_from_the_database_is_forgotten() {
        let mut candidates = Candidates::default();
        candidates.pass(vec![recorded("c1", "db-0", Some("u1"), 0)], &pods(&[]), 1000, GRACE);
        candidates.pass(Vec::new(), &pods(&[]), 1100, GRACE);
        assert_eq!(candidates.len(), 0);
        // Seen again later (a new ADD of the same ids): its wait starts again.
        let again = || vec![recorded("c1", "db-0", Some("u1"), 0)];
        assert!(candidates.pass(again(), &pods(&[]), 1000 + GRACE, GRACE).is_empty());
    }
}
