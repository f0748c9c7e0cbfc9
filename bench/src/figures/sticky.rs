//! The sticky-address figures (the sticky and sticky-cluster scenarios):
//! each variant's times, its calls' write transactions and syncs, and in
//! cluster mode the store's count, on etcd and on the Kubernetes API.

use std::time::Duration;

use super::cluster::StepCount;
use super::durability::FsyncProbe;
use crate::harness::{Latency, Stats};

/// The variants' names, as the scenarios record them and the report finds
/// and shows them.
pub const HOST_LOCAL: &str = "host-local";
pub const WITHOUT: &str = "suite, no stickiness";
pub const NEW_IDENTITY: &str = "suite, sticky: a new identity";
pub const RETURNING: &str = "suite, sticky: the identity returns (hold taken back)";
pub const RETURNING_ELSEWHERE: &str = "suite, sticky: the identity returns on another node";

/// One variant's ADD and DEL times over the rounds.
pub struct VariantTimes {
    pub name: &'static str,
    pub add: Latency,
    pub del: Latency,
    /// CPU time (user + system) of the calls.
    pub add_cpu: Stats,
    pub del_cpu: Stats,
}

/// Some calls of one command of one variant, logged at debug level (and,
/// in local mode, under strace).
pub struct CallProbe {
    pub variant: &'static str,
    pub command: &'static str,
    pub calls: usize,
    /// The "lock wait …, transaction …, durable commit …" lines: one per
    /// write transaction.
    pub write_txns: usize,
    /// Their transaction + durable commit times, summed.
    pub lock_held: Duration,
    /// fsync-family calls per call (strace -f), when counted.
    pub syncs: Option<FsyncProbe>,
}

impl CallProbe {
    pub fn write_txns_per_call(&self) -> f64 {
        self.write_txns as f64 / self.calls.max(1) as f64
    }

    pub fn lock_held_per_call_ms(&self) -> f64 {
        self.lock_held.as_secs_f64() * 1e3 / self.calls.max(1) as f64
    }
}

/// Local mode: host-local, the suite without and with stickiness.
pub struct StickyFigures {
    /// The delegates of the suite without and with stickiness.
    pub plain_delegates: &'static [&'static str],
    pub sticky_delegates: &'static [&'static str],
    /// CNI_ARGS of every call, for pod `<pod>` in container `<container id>`.
    pub cni_args: String,
    pub subnet: &'static str,
    pub rounds: usize,
    pub variants: Vec<VariantTimes>,
    pub probes: Vec<CallProbe>,
    /// Why the fsync-family calls were not counted.
    pub fsync_note: Option<String>,
}

/// Cluster mode: the cluster stack without and with stickiness, on each
/// store measured.
pub struct StickyClusterFigures {
    /// The delegates of the cluster stack without and with stickiness.
    pub plain_delegates: &'static [&'static str],
    pub sticky_delegates: &'static [&'static str],
    pub subnet: &'static str,
    pub rounds: usize,
    /// etcd's figures, then the Kubernetes API's when it was measured (in
    /// the same rounds, interleaved).
    pub stores: Vec<StickyStore>,
    /// Why the Kubernetes API was not measured.
    pub kube_note: Option<String>,
}

/// The variants' figures on one store.
pub struct StickyStore {
    /// As [`crate::cluster_mode::Store::name`] names it.
    pub store: &'static str,
    /// Its version (`etcd --version`'s first line, the Kubernetes release).
    pub version: String,
    pub variants: Vec<VariantTimes>,
    /// Per variant: the store requests of its counted ADDs and DELs.
    pub counts: Vec<(&'static str, StepCount, StepCount)>,
    pub probes: Vec<CallProbe>,
}
