//! whereabouts (github.com/k8snetworkplumbingwg/whereabouts), the IPAM
//! plugin most Multus users run, as the whereabouts scenario runs it beside
//! the suite: built from its Go module at the release bench/whereabouts/go.mod
//! pins (its plugin, the package `cmd`, a `tool` of that module), by the
//! tests' Go builder (tests/support/go.rs: once per change, into
//! target/whereabouts/), and installed on the tests' API server as its own
//! manifests say: its CRDs (doc/crds of the module, from Go's module cache),
//! and of doc/crds/daemonset-install.yaml the ServiceAccount
//! `kube-system/whereabouts`, the ClusterRole `whereabouts-cni` and their
//! binding; not the DaemonSet, whose work on a node (writing the kubeconfig
//! and `whereabouts.conf`, copying the plugin) is done here.
//!
//! What the plugin reads (its pkg/config and pkg/storage/kubernetes at that
//! release): the flat file `whereabouts.conf` (required: without one the
//! plugin fails; found at `ipam.configuration_path`), holding the datastore
//! and the kubeconfig as the DaemonSet's install-cni.sh writes them; the
//! range from the network's configuration; K8S_POD_NAME and
//! K8S_POD_NAMESPACE from CNI_ARGS (the pod's reference its reservation is
//! keyed by; an ADD without a pod name fails). An ADD or DEL does not read
//! the Pod object (only its reconciler, not run here, does), so no Pod is
//! created. Every call takes the Lease `whereabouts` of the kubeconfig's
//! namespace (kube-system: its context names none) by leader election
//! before it reads and patches the range's IPPool.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::harness::Plugin;
use crate::kube_harness::KubeApi;
use crate::support::go;

/// The Go module that pins whereabouts (relative to the repository).
const MODULE: &str = "bench/whereabouts";
/// Its module path, and the package of its CNI plugin.
const DEPENDENCY: &str = "github.com/k8snetworkplumbingwg/whereabouts";
const PACKAGE: &str = "github.com/k8snetworkplumbingwg/whereabouts/cmd";
/// Its CRDs (the plugin's: not the node-slice controller's), in the module.
const CRDS: [&str; 2] = [
    "doc/crds/whereabouts.cni.cncf.io_ippools.yaml",
    "doc/crds/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml",
];
/// Its DaemonSet manifest, whose ServiceAccount and RBAC are applied.
const INSTALL: &str = "doc/crds/daemonset-install.yaml";
const RBAC_KINDS: [&str; 3] = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"];
/// The DaemonSet's namespace and ServiceAccount.
pub const NAMESPACE: &str = "kube-system";
const ACCOUNT: &str = "whereabouts";
/// The API groups its calls use: its CRDs', and the Lease's.
pub const GROUPS: [&str; 2] = ["whereabouts.cni.cncf.io", "coordination.k8s.io"];
const CNI_VERSION: &str = "1.0.0";

/// whereabouts built and installed on an API server.
pub struct Whereabouts {
    exe: PathBuf,
    /// "v0.9.2", as go.mod pins it.
    pub version: String,
    /// The flat configuration file (`whereabouts.conf`).
    flat_file: PathBuf,
}

impl Whereabouts {
    /// Builds the plugin if needed, applies its CRDs, ServiceAccount and
    /// RBAC to `api`, and writes into `dir` what its DaemonSet writes on a
    /// node: a kubeconfig with a token of its ServiceAccount, and
    /// `whereabouts.conf` naming it.
    pub fn install(api: &KubeApi, dir: &Path) -> Whereabouts {
        let exe = go::build_package(MODULE, PACKAGE, "whereabouts", "whereabouts");
        let source = go::module_dir(MODULE, DEPENDENCY);
        let crds: Vec<PathBuf> = CRDS.iter().map(|crd| source.join(crd)).collect();
        api.apply(&crds.iter().map(PathBuf::as_path).collect::<Vec<_>>());
        let install = fs::read_to_string(source.join(INSTALL)).unwrap_or_else(|e| panic!("{INSTALL}: {e}"));
        let rbac = rbac_of(&install);
        assert!(!rbac.is_empty(), "{INSTALL} has no {RBAC_KINDS:?}");
        api.apply_yaml(&rbac.join("\n---\n"));
        let token = api.service_account_kubeconfig(NAMESPACE, ACCOUNT);
        let kubeconfig = dir.join("whereabouts.kubeconfig");
        fs::copy(&token, &kubeconfig).unwrap_or_else(|e| panic!("copying {}: {e}", token.display()));
        let flat_file = dir.join("whereabouts.conf");
        let flat = json!({ "datastore": "kubernetes", "kubernetes": { "kubeconfig": kubeconfig } });
        fs::write(&flat_file, flat.to_string()).unwrap_or_else(|e| panic!("{}: {e}", flat_file.display()));
        Whereabouts { exe, version: pinned_version(), flat_file }
    }

    /// The plugin with the configuration of the network `network` (as a
    /// NetworkAttachmentDefinition of its README has it) handing out
    /// `subnet`, from `range`'s first to last address if given.
    pub fn plugin(&self, network: &str, subnet: &str, range: Option<(&str, &str)>) -> Plugin {
        let mut ipam = json!({ "type": "whereabouts", "range": subnet, "configuration_path": self.flat_file });
        if let Some((first, last)) = range {
            ipam["range_start"] = json!(first);
            ipam["range_end"] = json!(last);
        }
        let config: Value =
            json!({ "cniVersion": CNI_VERSION, "name": network, "type": "macvlan", "master": "eth0", "ipam": ipam });
        let cni_path = self.exe.parent().expect("target/whereabouts").to_path_buf();
        Plugin { exe: self.exe.clone(), cni_path, config: crate::setup::bytes(&config) }
    }
}

/// The documents of a multi-document manifest whose kind is one of
/// [`RBAC_KINDS`].
fn rbac_of(manifest: &str) -> Vec<&str> {
    manifest
        .split("\n---")
        .filter(|doc| doc.lines().any(|l| l.strip_prefix("kind:").is_some_and(|k| RBAC_KINDS.contains(&k.trim()))))
        .collect()
}

/// The version of whereabouts that bench/whereabouts/go.mod pins.
fn pinned_version() -> String {
    let go_mod = crate::support::repo().join(MODULE).join("go.mod");
    let text = fs::read_to_string(&go_mod).unwrap_or_else(|e| panic!("{}: {e}", go_mod.display()));
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{DEPENDENCY} "))?.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| panic!("{}: no requirement of {DEPENDENCY}", go_mod.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rbac_of_the_daemonset_manifest() {
        let manifest = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: whereabouts\n---\n\
            kind: ClusterRoleBinding\nmetadata:\n  name: whereabouts\n---\n\
            apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: whereabouts-config\n---\n\
            apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: whereabouts\n";
        let kept = rbac_of(manifest);
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept[0].contains("kind: ServiceAccount") && kept[1].contains("kind: ClusterRoleBinding"));
    }

    #[test]
    fn the_pinned_release() {
        let version = pinned_version();
        assert!(version.starts_with('v') && version.contains('.'), "{version}");
    }
}
