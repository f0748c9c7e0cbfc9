//! The stack in cluster mode (the cluster and sticky-cluster scenarios): its
//! configuration on a test etcd, and what etcd counts.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{json, Value};

/// The cluster stack: ipam-ds-cluster between the selector and the
/// allocators.
pub const DELEGATES: [&str; 4] = ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"];

/// `config` (a stack's, as `Ctx::stack_config` makes it) in cluster mode: the
/// cluster stack, for `node` on the etcd at `endpoint`.
pub fn in_cluster(mut config: Value, endpoint: &str, node: &str) -> Value {
    config["ipam"]["delegates"] = json!(DELEGATES);
    config["ipam"]["cluster"] = json!({ "etcd": { "endpoints": [endpoint] }, "node": node });
    config
}

/// A configuration made for another pool: `pool` (an `ipam.pools` entry, as
/// the suite reads it) under the key prefix `prefix` in etcd, so that it
/// shares no key with the other steps' pool of the same name.
pub fn in_pool(config: &mut Value, pool: Value, prefix: &str) {
    config["ipam"]["pools"] = json!([pool]);
    config["ipam"]["cluster"]["etcd"]["prefix"] = json!(prefix);
}

/// The requests of some calls, as etcd counted them per method.
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
