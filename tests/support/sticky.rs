//! The node-local sticky stack as the sticky test files drive it: a network
//! whose IPAM is the whole stack with `ipam-da-sticky`, and pods of
//! Kubernetes' identity `prod/<name>`.

use serde_json::{json, Value};

use super::{addresses, Outcome, Sandbox, STICKY_STACK};

/// Network `sticky-net` of `pools`, its `ipam.sticky` being `sticky`.
pub fn network(sb: &Sandbox, pools: Value, sticky: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "sticky-net",
        "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": STICKY_STACK, "database": sb.db(), "pools": pools, "sticky": sticky}
    })
}

/// The CNI_ARGS Kubernetes passes for pod `prod/<name>`.
pub fn pod(name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME={name}")
}

pub fn add(sb: &Sandbox, config: &Value, ctr: &str, args: &str) -> Outcome {
    sb.delegated("ADD", config, ctr, &[("CNI_ARGS", args)])
}

pub fn del(sb: &Sandbox, config: &Value, ctr: &str, args: &str) -> Outcome {
    sb.delegated("DEL", config, ctr, &[("CNI_ARGS", args)])
}

/// The addresses of a successful ADD (it fails the test otherwise).
pub fn ok_addresses(out: &Outcome) -> Vec<String> {
    out.result();
    addresses(out)
}
