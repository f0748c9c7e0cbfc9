//! The stack in cluster mode (the cluster and sticky-cluster scenarios): its
//! configuration on each datastore the benchmark runs (a test etcd, a real
//! Kubernetes API server), and what each store counts of the calls.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ipam_ds_cluster::datastore::etcd::layout::PoolKeys;
use ipam_ds_cluster::datastore::kubernetes::names;
use ipam_ds_cluster::datastore::kubernetes::objects::{BlockSpec, BlockState, Object, LABEL_NETWORK};
use ipam_ds_cluster::etcd::testing::TestEtcd;
use serde_json::{json, Value};

use crate::debug_log::{etcd_client_counts, kube_client_counts};
use crate::figures::cluster::{ClientCount, StepCount};
use crate::harness::caught;
use crate::kube_harness::KubeApi;

/// The cluster stack: ipam-ds-cluster between the selector and the
/// allocators.
pub const DELEGATES: [&str; 4] = ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"];

/// The Kubernetes release tests/kube builds (its go.mod pins k8s.io/kubernetes).
pub const KUBERNETES: &str = "Kubernetes v1.36.3 (kube-apiserver and its etcd in one process, tests/kube)";

/// The API group of the CustomResourceDefinitions (deploy/kubernetes/crds.yaml).
pub const GROUP: &str = "ipam-delegated.io";
pub const VERSION: &str = "v1alpha1";
const BLOCKS_PATH: &str = "/apis/ipam-delegated.io/v1alpha1/ipdblocks";
const CRDS: &str = "deploy/kubernetes/crds.yaml";
/// How long the API server may answer 429 ("storage is (re)initializing")
/// after the CRDs were applied.
const CRDS_READY_LIMIT: Duration = Duration::from_secs(60);

/// `config` (a stack's, as `Ctx::stack_config` makes it) in cluster mode: the
/// cluster stack, for `node` on the etcd at `endpoint`.
fn in_cluster(mut config: Value, endpoint: &str, node: &str) -> Value {
    config["ipam"]["delegates"] = json!(DELEGATES);
    config["ipam"]["cluster"] = json!({ "etcd": { "endpoints": [endpoint] }, "node": node });
    config
}

/// A configuration made for another pool: `pool` (an `ipam.pools` entry, as
/// the suite reads it) under the key prefix `prefix` in etcd, so that it
/// shares no key with the other steps' pool of the same name.
fn in_pool(config: &mut Value, pool: Value, prefix: &str) {
    config["ipam"]["pools"] = json!([pool]);
    config["ipam"]["cluster"]["etcd"]["prefix"] = json!(prefix);
}

/// The requests of some calls, as the store counted them per method (etcd)
/// or per verb and resource (the API server).
pub fn difference(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(method, n)| (method.clone(), n.saturating_sub(before.get(method).copied().unwrap_or(0))))
        .collect()
}

/// `etcd --version`'s first line, of the etcd in PATH (the one the test etcd
/// runs).
pub fn etcd_version() -> String {
    Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_else(|| "etcd (version unknown)".into())
}

/// A datastore of cluster mode, running for the benchmark. A step's pool is
/// kept apart from the others' by a *space* of its own: a key prefix in etcd,
/// a network name (the `IPDNetwork` and the objects labelled with it) on
/// the API server.
pub enum Store {
    Etcd(TestEtcd),
    Kubernetes(KubeStore),
}

/// The tests' API server with the CRDs applied; the plugins talk to it as the
/// cluster's admin (a client certificate): deploy/kubernetes/ has no
/// ClusterRole for the CRDs yet.
pub struct KubeStore {
    pub api: KubeApi,
    kubeconfig: PathBuf,
}

impl Store {
    /// How the figures name it.
    pub fn name(&self) -> &'static str {
        match self {
            Store::Etcd(_) => "etcd",
            Store::Kubernetes(_) => "Kubernetes API",
        }
    }

    /// `config` (a stack's, as `Ctx::stack_config` makes it) in cluster mode
    /// on this store, for `node`.
    pub fn configured(&self, config: Value, node: &str) -> Value {
        match self {
            Store::Etcd(etcd) => in_cluster(config, &etcd.endpoint(), node),
            Store::Kubernetes(kube) => {
                let mut config = config;
                config["ipam"]["delegates"] = json!(DELEGATES);
                config["ipam"]["cluster"] =
                    json!({ "kubernetes": { "kubeconfig": kube.kubeconfig, "timeout": 5 }, "node": node });
                config
            }
        }
    }

    /// `config` (one of [`Store::configured`]) for `pool` in the space
    /// `space` of its own ("/name": a key prefix, or the network "name").
    pub fn in_space(&self, config: &mut Value, pool: Value, space: &str) {
        match self {
            Store::Etcd(_) => in_pool(config, pool, space),
            Store::Kubernetes(_) => {
                config["ipam"]["pools"] = json!([pool]);
                config["name"] = json!(network_of(space));
            }
        }
    }

    /// The store's own count of the requests it served so far: etcd's
    /// `grpc_server_handled_total` per method; the API server's
    /// `apiserver_request_total` of the CRDs' group per "VERB resource",
    /// "VERB resource (CODE)" for the answers that are no success (a 409:
    /// the object changed since it was read; a 404).
    pub fn counted(&self) -> BTreeMap<String, u64> {
        match self {
            Store::Etcd(etcd) => etcd.handled(),
            Store::Kubernetes(kube) => api_requests(&kube.metrics()),
        }
    }

    /// Blocks of the pool `pool` claimed in the space `space` (see
    /// [`Store::in_space`]; `network`: the configuration's name), as the
    /// store holds them.
    pub fn claimed_blocks(&self, space: &str, network: &str, pool: &str) -> usize {
        match self {
            Store::Etcd(etcd) => {
                let keys = PoolKeys::new(space, network, pool);
                etcd.dump(&keys.blocks()).iter().filter(|(key, _)| keys.parse_block(key.as_bytes()).is_some()).count()
            }
            Store::Kubernetes(kube) => {
                let selector = format!("{LABEL_NETWORK}={}", names::text(&network_of(space)));
                let path = format!("{BLOCKS_PATH}?labelSelector={}", selector.replace('/', "%2F"));
                let (status, body) = kube.api.request(&kube.api.admin_kubeconfig(), "GET", &path, None);
                assert_eq!(status, 200, "GET {path}: {body}");
                let list: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"));
                let blocks = list["items"].as_array().cloned().unwrap_or_default();
                blocks
                    .into_iter()
                    .filter_map(|item| serde_json::from_value::<Object<BlockSpec>>(item).ok())
                    .filter(|block| block.spec.pool == pool && matches!(block.spec.state, BlockState::Owned(_)))
                    .count()
            }
        }
    }

    /// The client's count that ipam-ds-cluster logged at debug level, per
    /// call, summed over the log `log`; and how many calls logged it.
    pub fn client_counts(&self, log: &str) -> (ClientCount, usize) {
        match self {
            Store::Etcd(_) => {
                let (count, lines) = etcd_client_counts(log);
                (ClientCount::Etcd(count), lines)
            }
            Store::Kubernetes(_) => {
                let (count, lines) = kube_client_counts(log);
                (ClientCount::Kubernetes(count), lines)
            }
        }
    }

    /// The store's version, as the figures say it.
    pub fn version(&self) -> String {
        match self {
            Store::Etcd(_) => etcd_version(),
            Store::Kubernetes(_) => KUBERNETES.into(),
        }
    }

    /// The requests of `n` calls that `calls` makes, logging at debug level
    /// to `log`: the store's own count (read before and after) and the
    /// client's count from that log. Also what `calls` answers.
    pub fn count_calls<T>(&self, n: usize, log: &Path, calls: impl FnOnce() -> T) -> (StepCount, T) {
        let before = self.counted();
        let answer = calls();
        let after = self.counted();
        let (client, logged) = self.client_counts(&fs::read_to_string(log).unwrap_or_default());
        (StepCount { calls: n, server: difference(&before, &after), client, logged }, answer)
    }
}

impl KubeStore {
    /// [`KubeStore::start`], or why not (no Go to build the server, say: the
    /// builder fails the way a test fails, by a panic), for the figures to
    /// say instead of the store's.
    pub fn try_start(dir: &Path) -> Result<KubeStore, String> {
        caught(|| KubeStore::start(dir))
    }

    /// Builds kube-test-server if needed (as the tests do), starts it,
    /// applies deploy/kubernetes/crds.yaml, and waits until the collection
    /// of each of its resources answers 200: right after a CRD is
    /// established the server answers 429 ("storage is (re)initializing")
    /// for a moment, which a plugin takes for an unreachable server (11).
    pub fn start(dir: &Path) -> KubeStore {
        let api = KubeApi::start();
        let crds = crate::support::repo().join(CRDS);
        let deploy = crate::support::repo().join("deploy/kubernetes");
        api.apply(&[&deploy.join("namespace.yaml"), &crds, &deploy.join("rbac.yaml")]);
        let admin = api.admin_kubeconfig();
        let text = fs::read_to_string(&crds).unwrap_or_else(|e| panic!("{CRDS}: {e}"));
        // Each CRD's `plural:` line names its collection.
        let plurals: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("plural:")).map(str::trim).collect();
        assert!(!plurals.is_empty(), "{CRDS} names no resource (no `plural:` line)");
        let started = Instant::now();
        for plural in plurals {
            let path = format!("/apis/{GROUP}/{VERSION}/{plural}");
            loop {
                let (status, body) = api.request(&admin, "GET", &path, None);
                if status == 200 {
                    break;
                }
                assert!(started.elapsed() < CRDS_READY_LIMIT, "GET {path} still answers {status}: {body}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // The plugins' credentials as the DaemonSet gives them: a token of
        // its ServiceAccount, bound to rbac.yaml's role (valid for an hour).
        let token = api.service_account_kubeconfig("ipam-delegated", "ipam-delegated");
        let kubeconfig = dir.join("plugins.kubeconfig");
        fs::copy(&token, &kubeconfig).unwrap_or_else(|e| panic!("copying {}: {e}", token.display()));
        KubeStore { api, kubeconfig }
    }

    /// The API server's `/metrics` text, read as the admin.
    pub fn metrics(&self) -> String {
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", "/metrics", None);
        assert_eq!(status, 200, "GET /metrics of the API server: {body}");
        body
    }

    /// The kubeconfig the plugins are given (the DaemonSet's ServiceAccount's).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
}

/// The network of a space: "/ipam-bench-tight" → "ipam-bench-tight".
fn network_of(space: &str) -> String {
    space.trim_start_matches('/').to_string()
}

/// `apiserver_request_total` of the CRDs' group in a `/metrics` text, summed
/// per "VERB resource" over the other labels (scopes, …), the answers that
/// are no success (not 2xx) apart, per "VERB resource (CODE)".
pub fn api_requests(metrics: &str) -> BTreeMap<String, u64> {
    api_requests_in(metrics, &[GROUP])
}

/// As [`api_requests`], of the API groups `groups` ("" the core group).
pub fn api_requests_in(metrics: &str, groups: &[&str]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let label =
            |name: &str| labels.split(',').find_map(|l| l.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'));
        if !label("group").is_some_and(|group| groups.contains(&group)) {
            continue;
        }
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else { continue };
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        let key = match label("code") {
            Some(code) if !code.starts_with('2') => format!("{verb} {resource} ({code})"),
            _ => format!("{verb} {resource}"),
        };
        *counts.entry(key).or_default() += n;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_count_of_the_crds_requests() {
        let metrics = "# HELP apiserver_request_total [STABLE] Counter of apiserver requests\n\
            apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"ipam-delegated.io\",resource=\"ipdblocks\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1alpha1\"} 7\n\
            apiserver_request_total{code=\"404\",component=\"apiserver\",dry_run=\"\",group=\"ipam-delegated.io\",resource=\"ipdblocks\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1alpha1\"} 2\n\
            apiserver_request_total{code=\"409\",component=\"apiserver\",dry_run=\"\",group=\"ipam-delegated.io\",resource=\"ipdblocks\",scope=\"resource\",subresource=\"\",verb=\"PUT\",version=\"v1alpha1\"} 1\n\
            apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"namespaces\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 40\n\
            apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"ipam-delegated.io\",resource=\"ipdnodes\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1alpha1\"} 3e+00\n";
        let counts = api_requests(metrics);
        let expected: BTreeMap<String, u64> =
            [("GET ipdblocks", 7), ("GET ipdblocks (404)", 2), ("PUT ipdblocks (409)", 1), ("POST ipdnodes", 3)]
                .map(|(k, n)| (k.to_string(), n))
                .into();
        assert_eq!(counts, expected);
    }
}
