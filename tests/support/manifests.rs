//! The Kubernetes manifests of deploy/kubernetes/, parsed: what
//! tests/manifests.rs checks among them and tests/kube_api.rs applies to a
//! real API server.

use std::fs;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use super::repo;

/// deploy/kubernetes/.
pub fn deploy_dir() -> PathBuf {
    repo().join("deploy/kubernetes")
}

/// The manifests (*.yaml), by name.
pub fn files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy_dir())
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/kubernetes");
    files
}

/// Every object of every manifest, with its file's name.
pub fn objects() -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    for file in files() {
        let text = fs::read_to_string(&file).expect("manifest");
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
