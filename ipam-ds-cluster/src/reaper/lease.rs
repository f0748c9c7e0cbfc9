//! One reaper at a time per network: a `coordination.k8s.io/v1` Lease in
//! the namespace `ipam-delegated`, held by a node name. A reaper takes it
//! when it is absent or expired, renews it while it is its own, and leaves
//! it alone while another's lasts. Every write is conditioned (a create
//! while absent, an update at the resourceVersion read), so of two reapers
//! deciding from one read, one write wins and the other gets 409.
//!
//! Expiry is judged by the API server's clock: the Lease's `renewTime`
//! is written as the `Date` of the answer the reaper decided from, and the
//! Lease is expired once `renewTime + leaseDurationSeconds` is past by the
//! `Date` of a later answer, never by the reaper's own clock (a node whose
//! clock runs ahead would take a Lease that still holds).
//!
//! The Lease also keeps what the reapers saw between passes, whoever holds
//! it: since when (by the API server's clock) each node holding addresses
//! has been missing from the cluster's Nodes (annotation
//! [`MISSING_ANNOTATION`]), so that a node is released only once it has
//! been missing for its own grace, across passes and holders.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::datastore::kubernetes::names;
use crate::datastore::kubernetes::objects::Time;
use crate::kube::{self, Client, Created, Namespaced, Replaced, Resource};

/// The namespace of the manifests (deploy/kubernetes/namespace.yaml), whose
/// Role lets the ServiceAccount get, create and update its Leases.
pub const NAMESPACE: &str = "ipam-delegated";

/// How long a Lease holds without being renewed: a reaper that died is
/// replaced after at most this long. The agent renews it at each pass, so
/// its interval must be shorter.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(60);

/// The Lease's annotation of the nodes missing from the cluster: a JSON
/// object of node name → when a pass first saw it missing (RFC 3339, the
/// API server's clock).
pub const MISSING_ANNOTATION: &str = "ipam-delegated.io/missing-nodes";

const LEASES: Namespaced<'static> = Namespaced {
    resource: Resource { group: "coordination.k8s.io", version: "v1", plural: "leases" },
    namespace: NAMESPACE,
};

/// The kubelets' heartbeats: each node's Lease, named as the node, which a
/// running kubelet renews every 10 s and makes again when it is deleted.
const KUBELET_LEASES: Namespaced<'static> = Namespaced { resource: LEASES.resource, namespace: "kube-node-lease" };

/// Whether `node`'s kubelet still renews its Lease, by the API server's
/// clock: a node whose Node object is gone while its kubelet runs (deleted
/// by hand, or lost to an etcd restored from a backup older than it) is no
/// dead node, and its addresses are in use.
pub fn kubelet_alive(client: &Client, node: &str) -> Result<bool, kube::Error> {
    let read = client.get(&KUBELET_LEASES, node)?;
    let now = Time::of(read.date);
    Ok(read.outcome.is_some_and(|lease| !LeaseSpec::of(&lease.0["spec"]).until().is_past_at(now)))
}

/// The Lease of the reaper of `network`: `ipam-delegated-reaper.<network>`.
pub fn lease_name(network: &str) -> String {
    format!("ipam-delegated-reaper.{}", names::text(network))
}

/// Whose the Lease is after a reaper asked for it.
#[derive(Debug, Clone, PartialEq)]
pub enum Holding {
    /// This reaper's.
    Ours(HeldLease),
    /// Another reaper's, until `until` (`renewTime + leaseDurationSeconds`);
    /// also when another reaper wrote it between this one's read and write.
    Theirs { holder: String, until: Time },
}

/// The Lease as this reaper wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldLease {
    /// When it ends unless renewed, by the API server's clock.
    pub until: Time,
    /// The holder whose expired Lease this reaper took over, if any.
    pub taken_from: Option<String>,
    /// The `Date` of the answer the reaper decided from: the pass's "now".
    pub now: Time,
    object: kube::Object,
}

impl HeldLease {
    /// Since when each node was seen missing from the cluster, as the
    /// Lease keeps it (an unreadable entry is left out: seen missing now).
    pub fn missing_since(&self) -> BTreeMap<String, Time> {
        let text = self.object.0["metadata"]["annotations"][MISSING_ANNOTATION].as_str().unwrap_or_default();
        let found: BTreeMap<String, String> = serde_json::from_str(text).unwrap_or_default();
        found.into_iter().filter_map(|(node, since)| Some((node, Time::parse(&since)?))).collect()
    }

    /// Keeps `missing` (node → since when) in the Lease, at the version this
    /// reaper wrote: false when another reaper wrote it since (it holds the
    /// Lease now: this pass stops).
    pub fn keep_missing(&mut self, client: &Client, missing: &BTreeMap<String, Time>) -> Result<bool, kube::Error> {
        let text: BTreeMap<&str, String> = missing.iter().map(|(node, t)| (node.as_str(), t.to_string())).collect();
        let text = serde_json::to_string(&text).map_err(|e| kube::Error::Protocol(e.to_string()))?;
        if self.object.0["metadata"]["annotations"][MISSING_ANNOTATION].as_str() == Some(text.as_str()) {
            return Ok(true);
        }
        let mut object = self.object.0.clone();
        object["metadata"]["annotations"][MISSING_ANNOTATION] = json!(text);
        let (Some(name), Some(version)) = (self.object.name(), self.object.resource_version()) else {
            return Err(kube::Error::Protocol("a Lease written without its name or resourceVersion".into()));
        };
        match client.replace(&LEASES, name, version, &object)?.outcome {
            Replaced::Replaced(written) => {
                self.object = written;
                Ok(true)
            }
            Replaced::Conflict | Replaced::NotFound => Ok(false),
        }
    }
}

/// Takes, renews or leaves the Lease of `network`'s reaper as `holder`
/// (a node name), for `duration`. Rounds: a 409 reads again, at most three
/// times; a Lease that keeps changing is another's.
pub fn hold(client: &Client, network: &str, holder: &str, duration: Duration) -> Result<Holding, kube::Error> {
    let name = lease_name(network);
    let seconds = duration.as_secs().max(1);
    let mut last_seen = None;
    for _ in 0..3 {
        let read = client.get(&LEASES, &name)?;
        let now = Time::of(read.date);
        let found = read.outcome;
        let current = found.as_ref().map(|o| LeaseSpec::of(&o.0["spec"]));
        if let Some(current) = &current {
            let until = current.until();
            // One with no holder is nobody's, whatever its times say.
            if !current.holder.is_empty() && current.holder != holder && !until.is_past_at(now) {
                return Ok(Holding::Theirs { holder: current.holder.clone(), until });
            }
            last_seen = Some((current.holder.clone(), until));
        }
        let ours = current.as_ref().is_some_and(|c| c.holder == holder);
        let taken_from = current.as_ref().filter(|c| !ours && !c.holder.is_empty()).map(|c| c.holder.clone());
        let transitions = current.as_ref().map_or(0, |c| c.transitions + i64::from(!ours));
        let acquired = match (&current, ours) {
            (Some(c), true) => c.acquired.clone().unwrap_or_else(|| micro_time(now)),
            _ => micro_time(now),
        };
        let spec = json!({
            "holderIdentity": holder,
            "leaseDurationSeconds": seconds,
            "acquireTime": acquired,
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        });
        let until = now.plus(Duration::from_secs(seconds));
        // As read, its annotations kept (what the reapers saw), the spec this reaper's.
        let written = match found {
            Some(mut object) => {
                let version = object.resource_version().unwrap_or_default().to_string();
                object.0["spec"] = spec;
                match client.replace(&LEASES, &name, &version, &object.0)?.outcome {
                    Replaced::Replaced(object) => Some(object),
                    Replaced::Conflict | Replaced::NotFound => None,
                }
            }
            None => {
                let object = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": name, "namespace": NAMESPACE,
                                 "labels": {"app.kubernetes.io/name": "ipam-delegated"}},
                    "spec": spec,
                });
                match client.create(&LEASES, &object)?.outcome {
                    Created::Created(object) => Some(object),
                    Created::AlreadyExists => None,
                }
            }
        };
        if let Some(object) = written {
            return Ok(Holding::Ours(HeldLease { until, taken_from, now, object }));
        }
    }
    // Another reaper kept writing it: it is theirs (its end unknown, shown
    // as the epoch, when it was never there at a read).
    let (holder, until) = last_seen.unwrap_or((String::new(), Time(0)));
    Ok(Holding::Theirs { holder, until })
}

/// What a Lease's spec says, as far as the reaper needs it.
struct LeaseSpec {
    holder: String,
    renewed: Option<Time>,
    duration: i64,
    acquired: Option<String>,
    transitions: i64,
}

impl LeaseSpec {
    fn of(spec: &Value) -> LeaseSpec {
        LeaseSpec {
            holder: spec["holderIdentity"].as_str().unwrap_or_default().to_string(),
            renewed: spec["renewTime"].as_str().and_then(Time::parse),
            duration: spec["leaseDurationSeconds"].as_i64().unwrap_or(0),
            acquired: spec["acquireTime"].as_str().map(str::to_string),
            transitions: spec["leaseTransitions"].as_i64().unwrap_or(0),
        }
    }

    /// When it ends; one never renewed has ended.
    fn until(&self) -> Time {
        match self.renewed {
            Some(renewed) => Time(renewed.0.saturating_add(self.duration.max(0))),
            None => Time(i64::MIN),
        }
    }
}

/// A `MicroTime` as the API writes it (`2026-11-28T20:51:56.000000Z`).
fn micro_time(t: Time) -> String {
    let text = t.to_string();
    match text.strip_suffix('Z') {
        Some(seconds) => format!("{seconds}.000000Z"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_ends_its_duration_after_its_renewal_and_one_never_renewed_has_ended() {
        let spec =
            json!({"holderIdentity": "n1", "renewTime": "2026-11-28T20:00:00.250000Z", "leaseDurationSeconds": 60});
        let lease = LeaseSpec::of(&spec);
        // A fraction of a second rounds up: the later end is the safe side.
        assert_eq!(lease.until(), Time::parse("2026-11-28T20:01:01Z").unwrap());
        assert!(!lease.until().is_past_at(Time::parse("2026-11-28T20:01:01Z").unwrap()));
        assert!(lease.until().is_past_at(Time::parse("2026-11-28T20:01:02Z").unwrap()));
        let never = LeaseSpec::of(&json!({"holderIdentity": "n1"}));
        assert!(never.until().is_past_at(Time(0)));
    }

    #[test]
    fn the_missing_nodes_read_back_from_the_annotation_and_an_unreadable_one_is_left_out() {
        let held = |annotation: &str| HeldLease {
            until: Time(0),
            taken_from: None,
            now: Time(0),
            object: kube::Object(json!({"metadata": {"annotations": {MISSING_ANNOTATION: annotation}}})),
        };
        let read = held(r#"{"n2": "2026-11-28T20:00:00Z", "n3": "yesterday"}"#).missing_since();
        assert_eq!(read, BTreeMap::from([("n2".to_string(), Time::parse("2026-11-28T20:00:00Z").unwrap())]));
        assert!(held("not JSON").missing_since().is_empty());
        let none = HeldLease { object: kube::Object(json!({"metadata": {}})), ..held("") };
        assert!(none.missing_since().is_empty());
    }

    #[test]
    fn micro_times_are_written_with_six_digits() {
        assert_eq!(micro_time(Time::parse("2026-11-28T20:51:56Z").unwrap()), "2026-11-28T20:51:56.000000Z");
    }

    #[test]
    fn each_network_has_its_lease() {
        assert_eq!(lease_name("cnet"), "ipam-delegated-reaper.cnet");
        assert_ne!(lease_name("a"), lease_name("b"));
        assert!(names::is_subdomain(&lease_name(&"n".repeat(200))));
    }
}
