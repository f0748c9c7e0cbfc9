//! `ipam.sticky.identity: "auto"`: a pod's identity is its namespace and
//! name, as by default, except that a KubeVirt VM's pod is named by its VM.
//! KubeVirt runs a VM in a pod `virt-launcher-<vm>-<5 random characters>`
//! (its `generateName`), a new one at every start and live migration, and
//! labels it `vm.kubevirt.io/name: <vm>`; keyed by the VM, the VM keeps its
//! address across restarts and migrations with no per-VM `cni-args`.
//!
//! Resolved once per call, here, and handed to every delegate as
//! `args.cni.identity` (which every delegate reads first): ADD and CHECK read
//! the label with one GET of the pod (only for a `virt-launcher-` pod). DEL
//! asks nothing and never fails on it: the leases carry the identity their
//! ADD bound, and for what an ADD left unleased (ipam-ds-cluster lets its
//! identity go) the pod's name tells the VM, as does a pod the API server
//! does not know at ADD: the name without `virt-launcher-` and the random
//! suffix, the label's value unless KubeVirt shortened an over-long VM name.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipam_ds_cluster::kube::{self, Client, Kubeconfig, Namespaced, Resource};
use serde_json::{json, Value};
use shared::sticky::Sticky;
use shared::{CniError, Command, NetConf, Request, Result};

const LAUNCHER_PREFIX: &str = "virt-launcher-";
const VM_LABEL: &str = "vm.kubevirt.io/name";
/// The GET's time, connecting and the TLS handshake included.
const GET_TIMEOUT: Duration = Duration::from_secs(5);
const FIELD: &str = "ipam.sticky.kubeconfig";

const PODS: Resource = Resource { group: "", version: "v1", plural: "pods" };

/// The request as the delegates must get it: with `args.cni.identity` set
/// when `auto` names a VM's pod; `None`: as it came.
pub fn resolved(req: &Request) -> Result<Option<Request>> {
    if req.env.command == Command::Del {
        // A DEL must not fail on settings it does not need.
        return Ok(resolved_for_del(req).ok().flatten());
    }
    let Some(sticky) = Sticky::of(&req.config)?.filter(|s| s.auto) else { return Ok(None) };
    // Told at every call, not at the first VM's.
    let kubeconfig = kubeconfig_path(req, &sticky)?;
    if req.config.args_cni::<String>("identity")?.is_some() {
        return Ok(None);
    }
    let args = &req.env.args;
    let (Some(namespace), Some(pod)) = (args.get("K8S_POD_NAMESPACE")?, args.get("K8S_POD_NAME")?) else {
        return Ok(None);
    };
    if namespace.is_empty() || !pod.starts_with(LAUNCHER_PREFIX) {
        return Ok(None);
    }
    match vm_of_pod(&kubeconfig, namespace, pod)? {
        Some(vm) => with_identity(req, &format!("{namespace}/{vm}")).map(Some),
        None => Ok(None),
    }
}

/// DEL's: the VM by the pod's name, with no request.
fn resolved_for_del(req: &Request) -> Result<Option<Request>> {
    if !Sticky::of(&req.config)?.is_some_and(|s| s.auto) || req.config.args_cni::<String>("identity")?.is_some() {
        return Ok(None);
    }
    let args = &req.env.args;
    let (Some(namespace), Some(pod)) = (args.get("K8S_POD_NAMESPACE")?, args.get("K8S_POD_NAME")?) else {
        return Ok(None);
    };
    match vm_of_name(pod) {
        Some(vm) if !namespace.is_empty() => with_identity(req, &format!("{namespace}/{vm}")).map(Some),
        _ => Ok(None),
    }
}

/// `req` with `args.cni.identity` set to `identity`.
fn with_identity(req: &Request, identity: &str) -> Result<Request> {
    tracing::debug!("the VM's identity: {identity:?}");
    let mut config = req.config.raw.clone();
    config["args"]["cni"]["identity"] = json!(identity);
    let bytes = serde_json::to_vec(&config).map_err(|e| CniError::new(shared::Code::Internal, e.to_string()))?;
    Ok(Request { env: req.env.clone(), config: NetConf::parse(&bytes)? })
}

/// The VM whose pod `pod` is, by its label; none: not a VM's pod.
fn vm_of_pod(kubeconfig: &Path, namespace: &str, pod: &str) -> Result<Option<String>> {
    let kubeconfig = Kubeconfig::read(kubeconfig).map_err(|e| CniError::config(FIELD, e))?;
    let client = Client::new(&kube::Settings { kubeconfig: Arc::new(kubeconfig), timeout: GET_TIMEOUT })
        .map_err(|e| e.to_cni(FIELD))?;
    let found = client.get(&Namespaced { resource: PODS, namespace }, pod).map_err(|e| e.to_cni(FIELD))?;
    Ok(match found.outcome {
        Some(object) => object.0["metadata"]["labels"][VM_LABEL].as_str().map(str::to_string),
        None => {
            tracing::warn!("pod {namespace}/{pod} is not in the API server: its VM is read from its name");
            vm_of_name(pod).map(str::to_string)
        }
    })
}

/// `ipam.sticky.kubeconfig`, else `ipam.cluster.kubernetes.kubeconfig`.
fn kubeconfig_path(req: &Request, sticky: &Sticky) -> Result<PathBuf> {
    if let Some(path) = &sticky.kubeconfig {
        return Ok(path.clone());
    }
    let cluster = &req.config.raw["ipam"]["cluster"]["kubernetes"]["kubeconfig"];
    match cluster {
        Value::String(path) if path.starts_with('/') => Ok(PathBuf::from(path)),
        _ => Err(CniError::config(
            FIELD,
            "is required with \"identity\": \"auto\" (a VM's pod is read from the API server) unless \
             ipam.cluster.kubernetes.kubeconfig is set",
        )),
    }
}

/// `virt-launcher-<vm>-<suffix>`: `<vm>`.
fn vm_of_name(pod: &str) -> Option<&str> {
    let (vm, suffix) = pod.strip_prefix(LAUNCHER_PREFIX)?.rsplit_once('-')?;
    (!vm.is_empty() && suffix.len() == 5).then_some(vm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_pod_s_name_gives_its_vm() {
        assert_eq!(vm_of_name("virt-launcher-fedora-02-jk74x"), Some("fedora-02"));
        assert_eq!(vm_of_name("virt-launcher-db-abcdef"), None, "not a generated suffix");
        assert_eq!(vm_of_name("virt-launcher--jk74x"), None);
        assert_eq!(vm_of_name("web-0"), None);
    }
}
