//! The Kubernetes manifests of deploy/kubernetes/, parsed: what
//! tests/manifests.rs checks among them and tests/kube_api.rs applies to a
//! real API server. The default set is the directory's own files, what
//! `kubectl apply -f deploy/kubernetes/` applies (it does not descend into
//! subdirectories); each of [`OPTIONS`] is a subdirectory applied on its own.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::repo;

/// The subdirectories of deploy/kubernetes/, each applied on its own: the
/// optional etcd, and the removal.
pub const OPTIONS: [&str; 2] = ["etcd", "uninstall"];

/// deploy/kubernetes/.
pub fn deploy_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// The default set's manifests (*.yaml), in name order: kubectl's order.
pub fn files() -> Vec<PathBuf> {
    yaml_files(&deploy_dir())
}

/// The manifests of the option `name` (one of [`OPTIONS`]), in name order.
pub fn option_files(name: &str) -> Vec<PathBuf> {
    yaml_files(&deploy_dir().join(name))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    files
}

/// Every object of the default set, with its file's name.
pub fn objects() -> Vec<(String, Value)> {
    objects_of(&files())
}

/// Every object of the default set and of every option, with its file's
/// name (an option's as `etcd/FILE`).
pub fn all_objects() -> Vec<(String, Value)> {
    let mut all = objects();
    for option in OPTIONS {
        let of_option = objects_of(&option_files(option));
        all.extend(of_option.into_iter().map(|(file, object)| (format!("{option}/{file}"), object)));
    }
    all
}

/// Every object of `files`, with its file's name.
pub fn objects_of(files: &[PathBuf]) -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).expect("manifest");
        let name = file.file_name().expect("name").to_string_lossy().into_owned();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
            if value.is_null() {
                continue;
            }
            for key in ["apiVersion", "kind", "metadata"] {
                assert!(value.get(key).is_some(), "{name}: an object without {key}: {value}");
            }
            objects.push((name.clone(), value));
        }
    }
    objects
}

/// The ServiceAccount the installer DaemonSet of the default set runs as,
/// whose token the installer gives the plugins on each node: (namespace,
/// name; `default` when the DaemonSet names none).
pub fn plugins_account() -> (String, String) {
    let all = objects();
    let (_, ds) = all
        .iter()
        .find(|(_, o)| o["kind"] == "DaemonSet" && o["metadata"]["name"] == "ipam-delegated")
        .expect("the installer DaemonSet ipam-delegated in deploy/kubernetes/");
    let namespace = ds["metadata"]["namespace"].as_str().expect("the DaemonSet's namespace").to_string();
    let account = ds["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap_or("default").to_string();
    (namespace, account)
}
