//! The suite in cluster mode and whereabouts side by side on one API server
//! (the whereabouts scenario).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::harness::{Latency, Stats};

/// What the scenario measured of both plugins, and how.
pub struct WhereaboutsFigures {
    /// The Kubernetes release of the API server.
    pub kubernetes: String,
    /// The whereabouts release built ("v0.9.2").
    pub whereabouts: String,
    /// Pods into as many addresses: how many, on how many nodes, how many
    /// ADDs in flight per node, the retry and the deadline of each wave.
    pub pods: usize,
    pub nodes: usize,
    pub threads_per_node: usize,
    pub retry: Duration,
    pub deadline: Duration,
    /// The burst's pods, all started at once on one node.
    pub burst_pods: usize,
    /// The suite's, then whereabouts'.
    pub plugins: Vec<PluginFigures>,
}

/// One plugin's figures.
pub struct PluginFigures {
    /// As the tables name it.
    pub name: String,
    /// Its configuration, in a sentence.
    pub configured: String,
    /// The pool of the pods in waves: subnet, first and last address.
    pub wave_pool: (String, String, String),
    pub one_wave: Placement,
    pub two_waves: Placement,
    /// Steady state, one call at a time, interleaved with the other plugin.
    pub add: Latency,
    pub del: Latency,
    /// The API server's count of some steady-state calls, one at a time.
    pub add_requests: Requests,
    pub del_requests: Requests,
    pub burst: Placement,
    /// Peak RSS of one call (the largest of a few), KiB.
    pub rss_add_kib: i64,
    pub rss_del_kib: i64,
}

/// The API server's count (`apiserver_request_total`) over some calls, of
/// the API groups the plugin uses, per "VERB resource" ("VERB resource
/// (CODE)" for an answer that is no success).
#[derive(Clone, Debug, Default)]
pub struct Requests {
    pub calls: usize,
    pub server: BTreeMap<String, u64>,
    /// How long the calls took, one after the other.
    pub time: Duration,
}

impl Requests {
    pub fn total(&self) -> u64 {
        self.server.values().sum()
    }

    pub fn per_call(&self) -> f64 {
        self.total() as f64 / self.calls.max(1) as f64
    }

    /// The verbs that wrote and were answered with success.
    pub fn writes(&self) -> u64 {
        let writing = |key: &str| {
            key.split(' ').next().is_some_and(|verb| ["POST", "PUT", "PATCH", "DELETE", "APPLY"].contains(&verb))
                && !key.ends_with(')')
        };
        self.server.iter().filter(|(key, _)| writing(key)).map(|(_, n)| n).sum()
    }
}

/// Pods placed in waves (or a burst): each pod an ADD process with a
/// container id and a pod name of its own, a failed ADD retried after
/// the retry time until it succeeds or the wave's deadline has passed.
#[derive(Default)]
pub struct Placement {
    pub waves: Vec<WaveRun>,
    /// Addresses answered to more than one placed pod.
    pub held_twice: usize,
    /// Placed pods whose answer held no address.
    pub without_address: usize,
    /// Addresses answered outside the pool's range.
    pub outside: usize,
    /// Failed ADD attempts per error code: how many, the first one's message.
    pub failures: BTreeMap<u64, (usize, String)>,
    /// The API server's count over every attempt, of the plugin's groups.
    pub server: BTreeMap<String, u64>,
    /// Its count of requests to Leases (`coordination.k8s.io`) over the
    /// waves: the API server's own (it renews Leases of its own), and the
    /// plugin's if it takes one.
    pub leases: u64,
    /// The wall time of the ADDs that placed a pod.
    pub placing_add: Stats,
}

/// One wave: its nodes (numbered from 1, inclusive) placing their pods.
pub struct WaveRun {
    pub nodes: (usize, usize),
    pub pods: usize,
    pub placed: usize,
    /// Failed ADD attempts.
    pub failed: usize,
    /// From the wave's start to the answer of the last pod placed.
    pub last_placed: Duration,
    /// From its start until every call returned (pods placed or given up).
    pub time: Duration,
}

impl Placement {
    pub fn pods(&self) -> usize {
        self.waves.iter().map(|w| w.pods).sum()
    }

    pub fn placed(&self) -> usize {
        self.waves.iter().map(|w| w.placed).sum()
    }

    pub fn failed(&self) -> usize {
        self.waves.iter().map(|w| w.failed).sum()
    }

    /// The time to the last pod placed, over the waves (each wave's).
    pub fn to_last_placed(&self) -> Duration {
        self.waves.iter().map(|w| w.last_placed).sum()
    }

    /// Pods placed per second until the last placed.
    pub fn rate(&self) -> f64 {
        let t = self.to_last_placed().as_secs_f64();
        if t > 0.0 {
            self.placed() as f64 / t
        } else {
            0.0
        }
    }

    pub fn requests(&self) -> u64 {
        self.server.values().sum()
    }

    /// The waves' time, until every call returned.
    pub fn time(&self) -> Duration {
        self.waves.iter().map(|w| w.time).sum()
    }

    /// Every address answered once, inside the pool.
    pub fn sound(&self) -> bool {
        self.held_twice == 0 && self.without_address == 0 && self.outside == 0
    }
}
