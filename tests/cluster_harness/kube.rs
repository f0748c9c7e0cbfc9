//! The Kubernetes API as a cluster's store: a real API server
//! (tests/kube_harness) with the CustomResourceDefinitions and the RBAC of
//! deploy/kubernetes/ applied, every node given a kubeconfig of the
//! ServiceAccount the installer DaemonSet runs as (the credentials the
//! DaemonSet gives the plugins, so the tests prove its role is enough), and
//! the tests reading the `IPDBlock` objects back as the cluster's admin.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{AddrRec, BlockRec, Cluster, Net4, Store, NETWORK, POOL};
use crate::support::manifests::deploy_dir;
pub use crate::support::manifests::plugins_account;

#[path = "../kube_harness/mod.rs"]
pub mod api;

pub use api::KubeApi;

/// The suite's kinds: (plural, kind).
const KINDS: [(&str, &str); 4] = [
    ("ipdnetworks", "IPDNetwork"),
    ("ipdblocks", "IPDBlock"),
    ("ipdidentities", "IPDIdentity"),
    ("ipdnodes", "IPDNode"),
];

/// The path of the suite's API group.
pub const GROUP_PATH: &str = "/apis/ipam-delegated.io/v1alpha1";

/// A running API server holding the suite's kinds, and the plugins'
/// credentials on it.
pub struct KubeStore {
    pub api: KubeApi,
    /// The ServiceAccount the plugins run as: (namespace, name).
    pub account: (String, String),
    plugins: PathBuf,
}

impl KubeStore {
    /// The API server's count of `PUT ipdblocks` it refused with 409 (the
    /// block changed since the writer read it), from its `/metrics`.
    pub fn refused_block_writes(&self) -> u64 {
        let (status, metrics) = self.api.request(&self.api.admin_kubeconfig(), "GET", "/metrics", None);
        assert_eq!(status, 200, "/metrics: {metrics}");
        metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                ["code=\"409\"", "resource=\"ipdblocks\"", "verb=\"PUT\""].iter().all(|label| l.contains(label))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Starts an API server, applies namespace.yaml, crds.yaml and
    /// rbac.yaml, and takes a token of the installer DaemonSet's
    /// ServiceAccount.
    pub fn start() -> KubeStore {
        let api = KubeApi::start();
        let deploy = deploy_dir();
        api.apply(&[&deploy.join("namespace.yaml"), &deploy.join("crds.yaml"), &deploy.join("rbac.yaml")]);
        let account = plugins_account();
        let plugins = api.service_account_kubeconfig(&account.0, &account.1);
        let store = KubeStore { api, account, plugins };
        store.warm_up_writes();
        store
    }

    /// The API server's first write of a kind takes it about 2 s (it builds
    /// the kind's validation then), longer than the short `ipam.timeout` of
    /// the tests that wait out a release: each kind is written once here,
    /// as a dry run that the schema refuses (no object is made).
    fn warm_up_writes(&self) {
        for (plural, kind) in KINDS {
            let path = format!("{GROUP_PATH}/{plural}?dryRun=All");
            let body = json!({"apiVersion": "ipam-delegated.io/v1alpha1", "kind": kind,
                              "metadata": {"name": "warm-up"}, "spec": {}});
            let (status, answer) = self.api.request(&self.api.admin_kubeconfig(), "POST", &path, Some(&body));
            assert_eq!(status, 422, "a dry-run {kind} without its fields, as the admin: {answer}");
        }
    }

    /// The kubeconfig every node is given.
    pub fn plugins_kubeconfig(&self) -> &Path {
        &self.plugins
    }

    /// The datastore settings naming `kubeconfig`.
    pub fn settings_with(kubeconfig: &Path) -> Value {
        json!({"kubernetes": {"kubeconfig": kubeconfig, "timeout": 5}})
    }

    /// Kills the API server (its etcd with it), keeping its data.
    pub fn stop(&mut self) {
        self.api.stop();
    }

    /// Starts it again on the same data, port and CA, and returns once it
    /// serves the suite's kinds: a kind's storage answers 429 ("storage is
    /// (re)initializing") for a moment after a start, which the plugins
    /// take for an unavailable server (error 11) and a test's reads must
    /// not meet.
    pub fn restart(&mut self) {
        self.api.restart();
        self.wait_ready();
    }

    /// A backup of the API server's etcd (see [`KubeApi::backup`]).
    pub fn backup(&mut self) -> PathBuf {
        let copy = self.api.backup();
        self.wait_ready();
        copy
    }

    /// The API server's etcd restored from `backup`, the server serving
    /// the suite's kinds again.
    pub fn restore(&mut self, backup: &Path) {
        self.api.restore(backup);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        for (plural, _) in KINDS {
            let path = format!("{GROUP_PATH}/{plural}?limit=1");
            loop {
                let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", &path, None);
                if status == 200 {
                    break;
                }
                assert!(
                    status == 429 && started.elapsed() < Duration::from_secs(60),
                    "GET {path} as the admin after a restart: {status} {body}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.warm_up_writes();
    }

    /// Every `IPDBlock` object as the API server returns it (any network,
    /// any state), read as the admin.
    pub fn block_objects(&self) -> Vec<Value> {
        self.objects("ipdblocks")
    }

    /// Every object of the collection `kind` (plural), read as the admin.
    pub fn objects(&self, kind: &str) -> Vec<Value> {
        let path = format!("{GROUP_PATH}/{kind}");
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", &path, None);
        assert_eq!(status, 200, "listing {kind} as the admin: {body}");
        let list: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("a list of {kind} ({e}): {body}"));
        list["items"].as_array().unwrap_or_else(|| panic!("a list of {kind} without items: {body}")).clone()
    }

    /// The object named `name` of the collection `kind` (plural), read as
    /// the admin; None when absent.
    pub fn object(&self, kind: &str, name: &str) -> Option<Value> {
        let path = format!("{GROUP_PATH}/{kind}/{name}");
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", &path, None);
        match status {
            200 => Some(serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} ({e}): {body}"))),
            404 => None,
            _ => panic!("GET {path} as the admin: {status} {body}"),
        }
    }

    /// Deletes the object named `name` of the collection `kind` (plural) as
    /// the admin (`kubectl delete`), which must exist.
    pub fn delete_object(&self, kind: &str, name: &str) {
        let path = format!("{GROUP_PATH}/{kind}/{name}");
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "DELETE", &path, None);
        assert_eq!(status, 200, "DELETE {path} as the admin: {body}");
    }

    /// The `IPDBlock` objects of pool blue of network cnet.
    pub fn pool_blocks(&self) -> Vec<Value> {
        self.block_objects()
            .into_iter()
            .filter(|b| b["spec"]["network"] == NETWORK && b["spec"]["pool"] == POOL)
            .collect()
    }
}

impl Cluster<KubeStore> {
    /// A cluster of `pools` over a fresh API server.
    pub fn on_kubernetes(pools: Value, grace: f64) -> Cluster<KubeStore> {
        Cluster::over(KubeStore::start(), pools, grace)
    }
}

/// `IPDBlock`'s name of `block` in pool blue of network cnet.
pub fn block_name(block: Net4) -> String {
    format!("{NETWORK}.{POOL}.{}", block.to_string().replace(['.', '/'], "-"))
}

/// `IPDNode`'s name of `node` in network cnet.
pub fn node_object_name(node: &str) -> String {
    format!("{NETWORK}.{node}")
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_else(|| panic!("an object without a name: {object}")).to_string()
}

impl Store for KubeStore {
    fn settings(&self) -> Value {
        KubeStore::settings_with(&self.plugins)
    }

    /// `Owned` and `Claiming` blocks are their owner's, `Released` ones
    /// released; an `Unclaimed` block is no node's (its records count in
    /// [`Store::addrs`]).
    fn blocks(&self) -> Vec<BlockRec> {
        let mut blocks = Vec::new();
        for object in self.pool_blocks() {
            let key = name_of(&object);
            let spec = &object["spec"];
            let released = match spec["state"].as_str() {
                Some("Owned" | "Claiming") => false,
                Some("Released") => true,
                Some("Unclaimed") => continue,
                _ => panic!("IPDBlock {key} in no known state: {object}"),
            };
            let node =
                spec["owner"]["node"].as_str().unwrap_or_else(|| panic!("IPDBlock {key} has no owner: {object}"));
            let cidr = spec["cidr"].as_str().unwrap_or_else(|| panic!("IPDBlock {key} has no cidr: {object}"));
            blocks.push(BlockRec { net: Net4::cidr(cidr), node: node.to_string(), released, key });
        }
        blocks
    }

    fn addrs(&self) -> Vec<AddrRec> {
        let mut addrs = Vec::new();
        for object in self.pool_blocks() {
            let name = name_of(&object);
            let Some(records) = object["spec"]["records"].as_object() else { continue };
            for (ip, record) in records {
                // A hold whose end is past is no record any more.
                if record["heldUntil"].as_str().is_some_and(|t| unix_seconds(t) < now_unix()) {
                    continue;
                }
                let text = |k: &str| record[k].as_str().unwrap_or_default().to_string();
                addrs.push(AddrRec {
                    ip: ip.parse().unwrap_or_else(|e| panic!("IPDBlock {name}: a record of {ip:?} ({e})")),
                    node: text("node"),
                    kind: text("kind"),
                    container: text("container"),
                    lender: text("lender"),
                    key: format!("{name}/{ip}"),
                });
            }
        }
        addrs
    }

    /// Every `IPDIdentity` of network cnet, in etcd's layout.
    fn identities(&self) -> Vec<(String, Value)> {
        let mut found = Vec::new();
        for object in self.objects("ipdidentities") {
            let spec = &object["spec"];
            if spec["network"] != NETWORK {
                continue;
            }
            let text = |k: &str| spec[k].as_str().unwrap_or_default().to_string();
            let mut record = json!({"node": text("node"), "addresses": spec["addresses"].clone()});
            match spec["state"].as_str() {
                Some("Live") => record["container"] = json!(text("container")),
                Some("Held") => record["until"] = json!(unix_seconds(&text("until"))),
                _ => panic!("IPDIdentity in no known state: {object}"),
            }
            if let Some(sharers) = spec.get("sharers") {
                record["sharers"] = sharers.clone();
            }
            found.push((format!("{}/{}", text("ifname"), text("identity")), record));
        }
        found
    }
}

/// Unix seconds of an RFC 3339 time as the API server writes it
/// (`2026-11-28T17:40:05Z`).
pub fn unix_seconds(text: &str) -> i64 {
    let n = |from: usize, to: usize| -> i64 {
        text.get(from..to).and_then(|f| f.parse().ok()).unwrap_or_else(|| panic!("not an RFC 3339 time: {text:?}"))
    };
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    days * 86400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19)
}

fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
