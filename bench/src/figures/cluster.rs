//! The cluster-mode figures (the cluster scenario), on etcd and on the
//! Kubernetes API, and the store requests of some calls (also of the sticky
//! scenario in cluster mode).

use std::collections::BTreeMap;
use std::time::Duration;

use ipam_ds_cluster::etcd::RequestCount;
use ipam_ds_cluster::kube;

use crate::harness::{Latency, Stats};

/// The client's count of some calls' requests, that ipam-ds-cluster logged
/// per call at debug level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClientCount {
    /// The sum of "etcd requests: N range, N txn (N writing), N other".
    Etcd(RequestCount),
    /// The sum of "Kubernetes API requests: N (M connection(s))".
    Kubernetes(kube::Counts),
}

impl Default for ClientCount {
    fn default() -> Self {
        ClientCount::Etcd(RequestCount::default())
    }
}

impl ClientCount {
    /// As the figures show it.
    pub fn describe(&self) -> String {
        match self {
            ClientCount::Etcd(k) => {
                format!("{} range, {} txn ({} writing), {} other", k.ranges, k.txns, k.writing_txns, k.other)
            }
            ClientCount::Kubernetes(k) => format!("{} requests, {} connections", k.requests, k.connections),
        }
    }
}

/// The store requests of some calls of one command: the store's own count
/// (etcd's per gRPC method; the API server's per verb and resource), and
/// the client's count that ipam-ds-cluster logged per call.
#[derive(Clone, Debug, Default)]
pub struct StepCount {
    pub calls: usize,
    /// After less before: etcd's `grpc_server_handled_total` per method, or
    /// the API server's `apiserver_request_total` per "VERB resource".
    pub server: BTreeMap<String, u64>,
    pub client: ClientCount,
    /// How many calls logged the client's count.
    pub logged: usize,
}

/// The API server's verbs that write.
const WRITING_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];

impl StepCount {
    fn method(&self, name: &str) -> u64 {
        self.server.get(name).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.server.values().sum()
    }

    /// The API server's count of the verbs that write, answered with
    /// success (a 409 wrote nothing).
    fn api_writes(&self) -> u64 {
        let writing =
            |key: &str| key.split(' ').next().is_some_and(|verb| WRITING_VERBS.contains(&verb)) && !key.ends_with(')');
        self.server.iter().filter(|(key, _)| writing(key)).map(|(_, n)| n).sum()
    }

    /// Whether the writes are told from the reads: on etcd, when every call
    /// logged the client's count, which alone tells a writing txn from a
    /// read-only one; the API server's verbs always tell.
    pub fn split(&self) -> bool {
        match self.client {
            ClientCount::Etcd(_) => self.calls > 0 && self.logged == self.calls,
            ClientCount::Kubernetes(_) => true,
        }
    }

    /// The etcd txns that wrote, per the client (without its count, none:
    /// txns are then taken as reads).
    fn txn_writes(&self) -> u64 {
        match self.client {
            ClientCount::Etcd(k) if self.split() => k.writing_txns.min(self.method("Txn")),
            _ => 0,
        }
    }

    /// etcd: Put + DeleteRange + the txns that wrote; the API server: POST,
    /// PUT, PATCH, DELETE (and APPLY) answered with success.
    pub fn writes(&self) -> u64 {
        match self.client {
            ClientCount::Etcd(_) => self.method("Put") + self.method("DeleteRange") + self.txn_writes(),
            ClientCount::Kubernetes(_) => self.api_writes(),
        }
    }

    /// etcd: Range + the txns that did not write; the API server: the other
    /// requests (GET, LIST, and writes refused: 409 conflicts).
    pub fn reads(&self) -> u64 {
        match self.client {
            ClientCount::Etcd(_) => self.method("Range") + self.method("Txn") - self.txn_writes(),
            ClientCount::Kubernetes(_) => self.total() - self.api_writes(),
        }
    }

    pub fn per_call(&self, n: u64) -> f64 {
        n as f64 / self.calls.max(1) as f64
    }
}

/// The cluster-mode figures: cluster mode against local mode.
pub struct ClusterFigures {
    /// `etcd --version`'s first line.
    pub etcd: String,
    /// Steady state, ADD then DEL of one container, cluster and local interleaved.
    pub add_cluster: Latency,
    pub add_local: Latency,
    pub del_cluster: Latency,
    pub del_local: Latency,
    /// Local mode with ipam-da-static too: the cluster stack less the cluster.
    pub add_local_static: Latency,
    pub del_local_static: Latency,
    pub steady_add: StepCount,
    pub steady_del: StepCount,
    /// The same counts in a pool of few blocks.
    pub tight: TightPool,
    pub fill: ClusterFill,
    /// Pods into as many addresses: one wave, two waves.
    pub waves: [PodWaves; 2],
    /// One etcd request from the client in-process: a range on a kept-alive
    /// connection, the confirming read's txn on a fresh one, a put.
    pub floor_range: Stats,
    pub floor_fresh_txn: Stats,
    pub floor_put: Stats,
    /// The first ADD of fresh nodes (the node registered, its first block
    /// claimed), counted and timed.
    pub first_add: FirstAdds,
    /// ADD and DEL with no confirmation cache (`offlineGrace` 0: every ADD
    /// confirms its block), interleaved with the others, and counted.
    pub add_confirming: Latency,
    pub del_confirming: Latency,
    pub confirming_add: StepCount,
    /// The same figures on the Kubernetes API, measured in the same run
    /// (interleaved with these); None: `kube_note` says why not.
    pub kube: Option<KubeFigures>,
    pub kube_note: Option<String>,
}

/// The first ADD of fresh nodes, each a node name with a database of its
/// own: the node registered, its first block claimed.
#[derive(Clone, Debug, Default)]
pub struct FirstAdds {
    pub latency: Option<Stats>,
    pub count: StepCount,
    /// Blocks claimed by them, as the store holds them afterwards.
    pub claimed: usize,
}

/// Cluster mode on the Kubernetes API: the figures of [`ClusterFigures`]
/// that the benchmark takes of both stores.
pub struct KubeFigures {
    /// The Kubernetes release of the API server.
    pub version: String,
    pub add: Latency,
    pub del: Latency,
    pub add_confirming: Latency,
    pub del_confirming: Latency,
    pub steady_add: StepCount,
    pub steady_del: StepCount,
    pub confirming_add: StepCount,
    pub first_add: FirstAdds,
    /// The tight pool: every block shared (few blocks), so ADD and DEL each
    /// write the block's object.
    pub tight: TightPool,
    pub waves: [PodWaves; 2],
    pub floor: KubeFloor,
}

/// One request from the plugins' client (`ipam_ds_cluster::kube::Client`),
/// in-process, one after the other.
#[derive(Clone, Copy, Debug, Default)]
pub struct KubeFloor {
    /// A GET on a kept-alive connection.
    pub get: Stats,
    /// A GET by a new client (TCP and TLS handshake included).
    pub fresh_get: Stats,
    /// A replace (PUT) at the object's resourceVersion, kept-alive.
    pub put: Stats,
    /// A LIST of the blocks (no resourceVersion: a consistent read) right
    /// after that replace of an object of another resource; and the same
    /// LIST again, nothing written since.
    pub list_after_write: Stats,
    pub list: Stats,
}

/// etcd requests of one node's steady-state ADDs and DELs in a pool of few
/// blocks.
pub struct TightPool {
    pub subnet: &'static str,
    /// The prefix length of its blocks (its `blockSize`).
    pub block_size: u8,
    /// Addresses the pool hands out, and the blocks it is cut into.
    pub usable: u128,
    pub blocks: u128,
    /// Blocks in etcd afterwards (all the node's).
    pub claimed: usize,
    pub add: StepCount,
    pub del: StepCount,
}

/// Pods placed by some nodes in waves into a pool of exactly as many
/// addresses, failed ADDs retried.
pub struct PodWaves {
    /// "one wave", "two waves".
    pub name: &'static str,
    /// The store, as [`crate::cluster_mode::Store::name`] names it.
    pub store: &'static str,
    /// The nodes placing pods, over all waves (numbered from 1).
    pub nodes: usize,
    /// ADDs in flight per node.
    pub threads_per_node: usize,
    /// The pool: its subnet, the range of it handed out (first and last
    /// address) and the prefix length of its blocks.
    pub subnet: &'static str,
    pub range: (&'static str, &'static str),
    pub block_size: u8,
    /// Addresses the pool hands out, and the blocks it is cut into.
    pub usable: u128,
    pub blocks: u128,
    /// How long a failed ADD waited before it was tried again.
    pub retry: Duration,
    /// How long each wave retried at most.
    pub deadline: Duration,
    pub waves: Vec<Wave>,
    /// Failed ADD attempts per error code: how many, the first one's message.
    pub failures: BTreeMap<u64, (usize, String)>,
    /// Addresses answered to more than one placed pod.
    pub duplicates: usize,
    /// Placed pods whose answer held no address.
    pub without_address: usize,
    /// Addresses answered outside the pool's range.
    pub outside: usize,
    /// Blocks in etcd afterwards.
    pub claimed: usize,
    /// The store's count (per etcd method, per API verb and resource) over
    /// every ADD attempt.
    pub server: BTreeMap<String, u64>,
}

/// One wave: its nodes (numbered from 1, inclusive) placing their pods.
pub struct Wave {
    pub nodes: (usize, usize),
    pub pods: usize,
    pub placed: usize,
    /// Failed ADD attempts (each retried until the deadline).
    pub failed: usize,
    /// From its start until every pod was placed or given up.
    pub time: Duration,
}

impl PodWaves {
    pub fn pods(&self) -> usize {
        self.waves.iter().map(|w| w.pods).sum()
    }

    pub fn placed(&self) -> usize {
        self.waves.iter().map(|w| w.placed).sum()
    }

    pub fn failed(&self) -> usize {
        self.waves.iter().map(|w| w.failed).sum()
    }

    pub fn time(&self) -> Duration {
        self.waves.iter().map(|w| w.time).sum()
    }

    /// Every address answered once, inside the pool.
    pub fn sound(&self) -> bool {
        self.duplicates == 0 && self.without_address == 0 && self.outside == 0
    }
}

/// ADDs by the simulated nodes from empty, concurrently, in both modes.
pub struct ClusterFill {
    /// The nodes, and the ADDs each keeps in flight (in both modes).
    pub nodes: usize,
    pub workers_per_node: usize,
    /// ADDs started in each mode.
    pub adds: usize,
    pub cluster_ok: usize,
    pub cluster_failures: Vec<u64>,
    /// The first message of each distinct error code of the failed ADDs.
    pub failure_messages: Vec<(u64, String)>,
    pub cluster_time: Duration,
    pub local_ok: usize,
    pub local_failures: Vec<u64>,
    pub local_time: Duration,
    /// etcd's count per method over the cluster-mode ADDs.
    pub etcd: BTreeMap<String, u64>,
    /// Blocks in etcd afterwards: the claims that succeeded.
    pub blocks: usize,
    /// Addresses answered to more than one successful ADD across the nodes.
    pub duplicates: usize,
    /// Successful ADDs whose answer held no address.
    pub without_address: usize,
}

impl ClusterFill {
    pub fn rate(ok: usize, time: Duration) -> f64 {
        if time.is_zero() {
            0.0
        } else {
            ok as f64 / time.as_secs_f64()
        }
    }

    pub fn requests(&self) -> u64 {
        self.etcd.values().sum()
    }

    pub fn per_add(&self) -> f64 {
        self.requests() as f64 / self.cluster_ok.max(1) as f64
    }
}
