//! The plugins' kubeconfig on the host (`--kubeconfig`): the credentials of
//! cluster mode's Kubernetes store (`ipam.cluster.kubernetes.kubeconfig`).
//! The plugins run on the host, started by Multus, where the pod's
//! ServiceAccount files are not: the installer writes what they need into
//! one file, mode 0600 — the API server's address from the in-cluster
//! environment (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`, the
//! `kubernetes` Service, which kube-proxy answers on the host too), the
//! cluster's CA (the pod's `ca.crt`, embedded) and the pod's token.
//!
//! The kubelet refreshes the projected token inside the pod, never on the
//! host, so the file is made again from the pod's files whenever they change
//! ([`super::watch`]); what is read here is compared as the whole file it
//! makes.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::super::failure::Failure;
use super::sources::read_small;

/// Where the kubelet mounts a pod's ServiceAccount token and CA.
pub const DEFAULT_SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

const HOST_VARIABLE: &str = "KUBERNETES_SERVICE_HOST";
const PORT_VARIABLE: &str = "KUBERNETES_SERVICE_PORT";

/// The kubeconfig's text, made from the environment and the ServiceAccount
/// files in `service_account_dir`.
pub fn contents(service_account_dir: &Path) -> Result<Vec<u8>, Failure> {
    let server = server()?;
    let ca_path = service_account_dir.join("ca.crt");
    let ca = read_small(&ca_path)?;
    if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
        return Err(Failure::ServiceAccount { path: ca_path, problem: "holds no PEM certificate".into() });
    }
    let token = token(&service_account_dir.join("token"))?;
    Ok(text(&server, &ca, &token).into_bytes())
}

/// `https://HOST:PORT` of the in-cluster environment (an IPv6 address in brackets).
fn server() -> Result<String, Failure> {
    let variable = |name: &'static str| -> Result<String, Failure> {
        let value = std::env::var_os(name).ok_or(Failure::NotInCluster(name))?;
        value.into_string().map_err(|value| Failure::BadInCluster { variable: name, value })
    };
    let host = variable(HOST_VARIABLE)?;
    let host_is_a_name = host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
    if host.is_empty() || !host_is_a_name {
        return Err(Failure::BadInCluster { variable: HOST_VARIABLE, value: host.into() });
    }
    let port = variable(PORT_VARIABLE)?;
    if !port.parse::<u16>().is_ok_and(|p| p > 0) {
        return Err(Failure::BadInCluster { variable: PORT_VARIABLE, value: port.into() });
    }
    Ok(if host.contains(':') { format!("https://[{host}]:{port}") } else { format!("https://{host}:{port}") })
}

/// The token, without the white space around it; printable ASCII without
/// quotes or backslashes (a JWT is base64url and dots), so that it is
/// written into the YAML as it is.
fn token(path: &Path) -> Result<String, Failure> {
    let bad = |problem: &str| Failure::ServiceAccount { path: PathBuf::from(path), problem: problem.into() };
    let bytes = read_small(path)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8 text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(bad("empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\') {
        return Err(bad("not a token (printable ASCII, without quotes or backslashes)"));
    }
    Ok(token.to_string())
}

/// How every kubeconfig the installer writes starts: an earlier one it
/// wrote is recognised by it (see `plan::DataFile::rewritten_from`).
pub const HEADER: &str = "# The plugins' credentials on the Kubernetes API (ipam.cluster.kubernetes.kubeconfig):
# the ServiceAccount token of ipam-delegated install-cni's pod, written by it
# and written again whenever the kubelet refreshes the token. Do not edit.
";

fn text(server: &str, ca: &[u8], token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        "{HEADER}apiVersion: v1
kind: Config
clusters:
  - name: in-cluster
    cluster:
      server: {server}
      certificate-authority-data: {ca}
users:
  - name: ipam-delegated
    user:
      token: \"{token}\"
contexts:
  - name: ipam-delegated
    context:
      cluster: in-cluster
      user: ipam-delegated
current-context: ipam-delegated
"
    )
}
