//! The API server's side of a pass: ONE consistent LIST of the pods bound
//! to this node (`fieldSelector=spec.nodeName=NODE`), with the suite's own
//! Kubernetes client. The credentials are read again at every pass: a
//! ServiceAccount's projected token is refreshed by the kubelet.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipam_ds_cluster::kube::{Client, Kubeconfig, Resource, Selectors, Settings};

use super::decide::PodsOnNode;
use crate::operator::install_cni::in_cluster_kubeconfig;

/// The core group's pods.
const PODS: Resource = Resource { group: "", version: "v1", plural: "pods" };

/// Per request, connecting included: an API server that does not answer
/// fails the pass, which then releases nothing.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the agent's credentials come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Credentials {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// The pod's own: KUBERNETES_SERVICE_HOST and _PORT, and the
    /// ServiceAccount's token and CA in this directory.
    InCluster(PathBuf),
}

impl Credentials {
    fn kubeconfig(&self) -> Result<Kubeconfig, String> {
        match self {
            Credentials::Kubeconfig(path) => Kubeconfig::read(path).map_err(|e| e.to_string()),
            Credentials::InCluster(dir) => {
                let text = in_cluster_kubeconfig(dir).map_err(|e| e.to_string())?;
                let text = String::from_utf8(text).map_err(|_| "the in-cluster kubeconfig is not UTF-8".to_string())?;
                Kubeconfig::parse(&text, &dir.join("token")).map_err(|e| e.to_string())
            }
        }
    }
}

/// The pods the API server has bound to `node`, by namespace and name.
pub fn on_node(credentials: &Credentials, node: &str) -> Result<PodsOnNode, String> {
    let settings = Settings { kubeconfig: Arc::new(credentials.kubeconfig()?), timeout: REQUEST_TIMEOUT };
    let client = Client::new(&settings).map_err(|e| e.to_string())?;
    let fields = format!("spec.nodeName={node}");
    // Consistent (not from the cache): a pod created just before is in it.
    let selectors = Selectors { fields: Some(&fields), ..Selectors::default() };
    let list = client.list(&PODS, &selectors).map_err(|e| e.to_string())?.outcome;
    list.items
        .iter()
        .map(|pod| {
            let metadata = &pod.0["metadata"];
            match (metadata["namespace"].as_str(), pod.name(), pod.uid()) {
                (Some(namespace), Some(name), Some(uid)) => {
                    Ok(((namespace.to_string(), name.to_string()), uid.to_string()))
                }
                _ => Err(format!("the API server listed a pod without namespace, name or uid: {metadata}")),
            }
        })
        .collect()
}

/// Where the node's name comes from: the argument, NODE_NAME (the Downward
/// API's spec.nodeName), or the node file install-cni writes.
pub fn node_name(given: Option<&str>, node_file: &Path) -> Result<String, String> {
    let name = match (given, std::env::var("NODE_NAME")) {
        (Some(name), _) => name.to_string(),
        (None, Ok(name)) if !name.is_empty() => name,
        _ => std::fs::read_to_string(node_file)
            .map_err(|e| format!("no --node, no NODE_NAME, and the node file {}: {e}", node_file.display()))?
            .trim()
            .to_string(),
    };
    match ipam_ds_cluster::settings::is_node_name(&name) {
        true => Ok(name),
        false => Err(format!("{name:?} is not a node name")),
    }
}
