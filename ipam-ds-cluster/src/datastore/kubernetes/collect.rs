//! The reaper's collection of ended identities: an `IPDIdentity` whose hold
//! ended is read as absent by every node (`identities::ended`), but stays
//! in the API server until something deletes it. The reaper deletes each
//! one that is `Held`, shared with no attachment, and whose `until` is past
//! by the `Date` of the LIST that showed it, with the delete's
//! preconditions on its `uid` and resourceVersion: a take-over or a new
//! hold written since changes the resourceVersion, the delete gets 409, and
//! the identity stays as they wrote it. Its addresses' `identity` records
//! carry the hold's end themselves (`heldUntil`) and are read as absent
//! already; block owners remove them as before.

use super::identities::ended;
use super::objects::{IdentitySpec, IdentityState, LABEL_NETWORK};
use super::{names, KubeStore};
use crate::datastore::Answer;
use crate::kube::Client;

/// What the collection did with one ended identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedIdentity {
    pub ifname: String,
    pub identity: String,
    /// When its hold ended, UTC.
    pub held_until: String,
    /// False: it changed between the LIST and the delete (taken over, or
    /// held again): kept as it is now.
    pub deleted: bool,
}

impl KubeStore {
    /// The client, for the reaper's requests beside the store's (its Lease,
    /// the cluster's nodes).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Deletes the network's identities whose hold ended (see the module's
    /// doc); every other identity is kept.
    pub fn collect_ended_identities(&self) -> Answer<Vec<EndedIdentity>> {
        let labels = format!("{LABEL_NETWORK}={}", names::text(&self.network));
        let found = self.list::<IdentitySpec>(&labels, false)?;
        let now = self.now.get();
        let mut collected = Vec::new();
        for identity in found {
            let spec = &identity.spec;
            if spec.network != self.network || !spec.sharers.is_empty() || !ended(&identity, now) {
                continue;
            }
            let IdentityState::Held { until, .. } = spec.state else { continue };
            let deleted = self.delete(&identity)?;
            collected.push(EndedIdentity {
                ifname: spec.ifname.clone(),
                identity: spec.identity.clone(),
                held_until: until.to_string(),
                deleted,
            });
        }
        Ok(collected)
    }
}
