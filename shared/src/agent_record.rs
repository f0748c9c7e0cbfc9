//! What an ADD records for the node agent (`ipam-delegated agent`), which
//! releases the attachments of pods deleted without a DEL: the pod, from
//! the CNI_ARGS that containerd and CRI-O pass (and Multus passes on), and
//! the configuration, so that the agent can run the stack's DEL later as
//! the runtime would have. Recorded only when the runtime names the pod.

use serde_json::Value;

use crate::args::CniArgs;
use crate::env::Command;
use crate::error::Result;
use crate::plugin::Request;
use crate::store::{AgentRecord, Pod};

/// The CNI_ARGS keys that name the pod of an attachment.
pub const POD_NAMESPACE: &str = "K8S_POD_NAMESPACE";
pub const POD_NAME: &str = "K8S_POD_NAME";
pub const POD_UID: &str = "K8S_POD_UID";

/// The configuration's keys that belong to one call, not to the network:
/// the result so far, what the runtime passes per attachment
/// (`runtimeConfig`; `args`, which Multus fills from a pod's `cni-args`),
/// and GC's `cni.dev/valid-attachments`. Kept, they would make every ADD
/// write the configuration again.
fn is_per_call(key: &str) -> bool {
    matches!(key, "prevResult" | "runtimeConfig" | "args") || key.starts_with("cni.dev/")
}

/// What an ADD of `req` records for the agent; `None` for any other
/// command, or when CNI_ARGS do not name the pod (namespace and name, both
/// not empty). A key given twice with two values is error 4 (see
/// [`CniArgs::get`]).
pub fn of(req: &Request) -> Result<Option<AgentRecord>> {
    if req.env.command != Command::Add {
        return Ok(None);
    }
    let Some(pod) = pod_of(&req.env.args)? else { return Ok(None) };
    Ok(Some(AgentRecord { attachment: req.attachment()?, pod, config: network_config(&req.config.raw) }))
}

/// The pod CNI_ARGS name, if they do.
pub fn pod_of(args: &CniArgs) -> Result<Option<Pod>> {
    let given = |key| Ok::<_, crate::CniError>(args.get(key)?.filter(|v| !v.is_empty()).map(String::from));
    let (Some(namespace), Some(name)) = (given(POD_NAMESPACE)?, given(POD_NAME)?) else { return Ok(None) };
    Ok(Some(Pod { namespace, name, uid: given(POD_UID)? }))
}

/// CNI_ARGS naming `pod`, as a runtime passes them (`IgnoreUnknown=1`, as
/// the kubelet's runtimes do, so that a main plugin that reads CNI_ARGS
/// does not refuse them).
pub fn cni_args_of(pod: &Pod) -> String {
    let mut args = format!("IgnoreUnknown=1;{POD_NAMESPACE}={};{POD_NAME}={}", pod.namespace, pod.name);
    if let Some(uid) = &pod.uid {
        args.push_str(&format!(";{POD_UID}={uid}"));
    }
    args
}

/// The network's configuration as JSON: `config` without its per-call keys.
pub fn network_config(config: &Value) -> String {
    match config.as_object() {
        Some(object) => {
            let kept: serde_json::Map<String, Value> =
                object.iter().filter(|(key, _)| !is_per_call(key)).map(|(k, v)| (k.clone(), v.clone())).collect();
            Value::Object(kept).to_string()
        }
        None => config.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pod_is_named_by_namespace_and_name_and_maybe_uid() {
        let args = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0;K8S_POD_UID=u-1").unwrap();
        let pod = pod_of(&args).unwrap().unwrap();
        assert_eq!(pod, Pod { namespace: "prod".into(), name: "db-0".into(), uid: Some("u-1".into()) });
        assert_eq!(pod_of(&CniArgs::parse(&cni_args_of(&pod)).unwrap()).unwrap(), Some(pod));
        let without_uid = pod_of(&CniArgs::parse("K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0").unwrap()).unwrap();
        assert_eq!(without_uid.unwrap().uid, None);
        for not_a_pod in ["", "K8S_POD_NAMESPACE=prod", "K8S_POD_NAMESPACE=prod;K8S_POD_NAME="] {
            assert_eq!(pod_of(&CniArgs::parse(not_a_pod).unwrap()).unwrap(), None, "{not_a_pod}");
        }
        let twice = CniArgs::parse("K8S_POD_NAMESPACE=a;K8S_POD_NAMESPACE=b;K8S_POD_NAME=x").unwrap();
        assert_eq!(pod_of(&twice).unwrap_err().code, 4);
    }

    #[test]
    fn the_network_config_drops_what_belongs_to_one_call() {
        let config = json!({
            "cniVersion": "1.0.0", "name": "blue", "ipam": {"type": "ipam-delegated"},
            "prevResult": {"ips": []}, "runtimeConfig": {"ips": ["10.1.0.5"]},
            "args": {"cni": {"ips": ["10.1.0.5"]}}, "cni.dev/valid-attachments": []
        });
        let kept: Value = serde_json::from_str(&network_config(&config)).unwrap();
        assert_eq!(kept, json!({"cniVersion": "1.0.0", "name": "blue", "ipam": {"type": "ipam-delegated"}}));
    }
}
