//! Kubeconfigs made from others, for the tests of who the API server lets in.

use std::path::{Path, PathBuf};

/// A copy of `kubeconfig` (a ServiceAccount's) whose token is not one the
/// server issued: the same claims' shape, another signature.
pub fn forged_token(kubeconfig: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("the ServiceAccount's kubeconfig");
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text).expect("a kubeconfig");
    let user = &mut config["users"][0]["user"];
    let token = user["token"].as_str().expect("a bearer token").to_string();
    let (signed, _) = token.rsplit_once('.').expect("a JWT");
    user["token"] = serde_yaml::Value::from(format!("{signed}.bm90LXRoZS1zZXJ2ZXJzLXNpZ25hdHVyZQ"));
    let forged = dir.join("forged.kubeconfig");
    std::fs::write(&forged, serde_yaml::to_string(&config).expect("YAML")).expect("writing the forged kubeconfig");
    forged
}
