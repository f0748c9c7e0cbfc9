//! The cluster's sticky stack as the sticky test files drive it: a node's
//! configuration with `ipam-da-sticky`, and pods of Kubernetes' identity
//! `prod/<name>`, one process per call.

use std::net::IpAddr;

use serde_json::{json, Value};

use super::{brief, Cluster, Store};
pub use crate::support::sticky::pod;
use crate::support::{addresses, Outcome, CLUSTER_STICKY_STACK};

/// `node`'s configuration with the sticky stack, `ipam.sticky` being `sticky`.
pub fn sticky_config<S: Store>(c: &Cluster<S>, node: &str, sticky: &Value) -> Value {
    let mut config = c.config(node);
    config["ipam"]["delegates"] = json!(CLUSTER_STICKY_STACK);
    config["ipam"]["sticky"] = sticky.clone();
    config
}

pub fn add<S: Store>(c: &Cluster<S>, node: &str, ctr: &str, name: &str, sticky: &Value) -> Outcome {
    c.run("ADD", ctr, &sticky_config(c, node, sticky), &[("CNI_ARGS", &pod(name))])
}

pub fn del<S: Store>(c: &Cluster<S>, node: &str, ctr: &str, name: &str, sticky: &Value) -> Outcome {
    c.run("DEL", ctr, &sticky_config(c, node, sticky), &[("CNI_ARGS", &pod(name))])
}

/// The addresses of a successful call (it fails the test otherwise).
pub fn ok(out: &Outcome) -> Vec<String> {
    assert_eq!(out.status, 0, "{}", brief(out));
    addresses(out)
}

/// The address of an address with a prefix (`10.0.0.5/24`).
pub fn ip(s: &str) -> IpAddr {
    s.split('/').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("{s:?} is not an address"))
}
