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

const LEASES: Namespaced = Namespaced {
    resource: Resource { group: "coordination.k8s.io", version: "v1", plural: "leases" },
    namespace: NAMESPACE,
};

/// The Lease of the reaper of `network`: `ipam-delegated-reaper.<network>`.
pub fn lease_name(network: &str) -> String {
    format!("ipam-delegated-reaper.{}", names::text(network))
}

/// Whose the Lease is after a reaper asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// This reaper's until `until` (by the API server's clock): `taken_from`
    /// names the holder whose expired Lease it took over, if any.
    Ours { until: Time, taken_from: Option<String> },
    /// Another reaper's, until `until` (`renewTime + leaseDurationSeconds`);
    /// also when another reaper wrote it between this one's read and write.
    Theirs { holder: String, until: Time },
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
        let spec = found.as_ref().map(|o| &o.0["spec"]);
        let current = spec.map(LeaseSpec::of);
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
        let object = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": "ipam-delegated"}},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": acquired,
                "renewTime": micro_time(now),
                "leaseTransitions": transitions,
            },
        });
        let until = now.plus(Duration::from_secs(seconds));
        let written = match (&found, found.as_ref().and_then(kube::Object::resource_version)) {
            (Some(_), Some(version)) => {
                matches!(client.replace(&LEASES, &name, version, &object)?.outcome, Replaced::Replaced(_))
            }
            _ => matches!(client.create(&LEASES, &object)?.outcome, Created::Created(_)),
        };
        if written {
            return Ok(Holding::Ours { until, taken_from });
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
