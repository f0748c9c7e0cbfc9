//! A kubeconfig's current context: the server, the CA its certificate must
//! chain to, and the credentials (a bearer token, inline or in a file, or a
//! client certificate). Everything is read and checked here, once per
//! client, so that every problem is reported with the file and the entry it
//! is in, before any request. Relative paths are relative to the
//! kubeconfig's directory, as kubectl takes them. Credential plugins (`exec`,
//! `auth-provider`) are not run: a node's plugin gets a token file from its
//! DaemonSet.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

use super::Error;

/// Debian's (and most distributions') bundle of the system's trusted CAs,
/// used when the cluster entry names no CA, as kubectl would.
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The most bytes read from a kubeconfig or a file it names.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The current context's server and credentials, checked.
#[derive(Debug)]
pub struct Kubeconfig {
    pub path: PathBuf,
    pub server: Server,
    /// The name the server's certificate must carry: `tls-server-name`, else
    /// the server's host.
    pub server_name: ServerName<'static>,
    pub ca: Ca,
    /// A bearer token sent with every request.
    pub token: Option<String>,
    /// A client certificate chain and its key, shown in the handshake.
    pub identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

/// `https://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub host: String,
    pub port: u16,
    /// Before every request's path (a proxy's), without a trailing slash.
    pub base_path: String,
}

#[derive(Debug)]
pub struct Ca {
    pub certificates: Vec<CertificateDer<'static>>,
    /// Where they came from, as a message names it: `cluster "c"
    /// certificate-authority (/etc/ca.crt)`.
    pub setting: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    current_context: Option<String>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    entry: Option<T>,
}

#[derive(Deserialize)]
struct ContextEntry {
    cluster: Option<String>,
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    server: Option<String>,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    tls_server_name: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    exec: Option<serde::de::IgnoredAny>,
    auth_provider: Option<serde::de::IgnoredAny>,
}

impl Kubeconfig {
    pub fn read(path: &Path) -> Result<Kubeconfig, Error> {
        let bad = |message: String| Error::Settings { kubeconfig: path.to_path_buf(), message };
        let text = read_small(path).map_err(&bad)?;
        let text = String::from_utf8(text).map_err(|_| bad("not UTF-8 text".into()))?;
        Self::parse(&text, path)
    }

    /// A kubeconfig's `text`, as if read from `path` (which relative file
    /// names are relative to, and which messages name): one made in memory,
    /// such as the in-cluster environment's.
    pub fn parse(text: &str, path: &Path) -> Result<Kubeconfig, Error> {
        let bad = |message: String| Error::Settings { kubeconfig: path.to_path_buf(), message };
        let file: File = serde_yaml_ng::from_str(text).map_err(|e| bad(format!("not a kubeconfig: {e}")))?;
        Self::of(file, path).map_err(bad)
    }

    fn of(file: File, path: &Path) -> Result<Kubeconfig, String> {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let current = file.current_context.filter(|c| !c.is_empty()).ok_or("no current-context")?;
        let context = entry(&file.contexts, &current, "context", "current-context")?;
        let cluster_name = context.cluster.as_deref().ok_or(format!("context {current:?} names no cluster"))?;
        let user_name = context.user.as_deref().ok_or(format!("context {current:?} names no user"))?;
        let cluster = entry(&file.clusters, cluster_name, "cluster", &format!("context {current:?}"))?;
        let user = entry(&file.users, user_name, "user", &format!("context {current:?}"))?;

        let server_text = cluster.server.as_deref().ok_or(format!("cluster {cluster_name:?} has no server"))?;
        let server = parse_server(server_text).map_err(|m| format!("cluster {cluster_name:?} server {m}"))?;
        if cluster.insecure_skip_tls_verify {
            return Err(format!(
                "cluster {cluster_name:?} sets insecure-skip-tls-verify: the server's certificate is always \
                 verified; give its CA (certificate-authority or certificate-authority-data)"
            ));
        }
        let name = cluster.tls_server_name.clone().unwrap_or_else(|| server.host.clone());
        let server_name = ServerName::try_from(name.clone())
            .map_err(|_| format!("cluster {cluster_name:?}: {name:?} is not a server name"))?;
        let ca = cluster_ca(cluster, cluster_name, dir)?;

        let who = format!("user {user_name:?}");
        let token = match (&user.token, &user.token_file) {
            (Some(token), _) if !token.trim().is_empty() => Some(token.trim().to_string()),
            (Some(_), _) => return Err(format!("{who} token is empty")),
            (None, Some(file)) => Some(token_file(&resolve(dir, file)).map_err(|m| format!("{who} tokenFile {m}"))?),
            (None, None) => None,
        };
        let identity = client_identity(user, &who, dir)?;
        if token.is_none() && identity.is_none() && (user.exec.is_some() || user.auth_provider.is_some()) {
            return Err(format!(
                "{who} gets its credentials from a plugin (exec or auth-provider), which is not run: give a token, \
                 tokenFile, or client-certificate and client-key"
            ));
        }
        if token.is_none() && identity.is_none() {
            return Err(format!(
                "{who} has no credentials: give a token, tokenFile, or client-certificate and client-key"
            ));
        }
        Ok(Kubeconfig { path: path.to_path_buf(), server, server_name, ca, token, identity })
    }
}

fn entry<'f, T>(entries: &'f [Named<T>], name: &str, kind: &str, named_by: &str) -> Result<&'f T, String> {
    let found = entries
        .iter()
        .find(|e| e.name == name)
        .ok_or(format!("{named_by} names {kind} {name:?}, which is not in the file"))?;
    found.entry.as_ref().ok_or(format!("{kind} {name:?} is empty"))
}

fn parse_server(text: &str) -> Result<Server, String> {
    let rest = text.strip_prefix("https://").ok_or(format!("{text:?} is not an https:// URL"))?;
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or(format!("{text:?}: an IPv6 address without its ']'"))?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("{text:?}: {p:?} is not a port"))?,
        None => 443,
    };
    if host.is_empty() || authority.contains(['@', '?', '#', ' ']) || path.contains(['?', '#']) {
        return Err(format!("{text:?} is not a server URL such as \"https://10.0.0.1:6443\""));
    }
    let base_path = path.trim_end_matches('/');
    let base_path = if base_path.is_empty() { String::new() } else { format!("/{base_path}") };
    Ok(Server { host: host.to_string(), port, base_path })
}

fn cluster_ca(cluster: &ClusterEntry, name: &str, dir: &Path) -> Result<Ca, String> {
    let (pem, setting) = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) => {
            let setting = format!("cluster {name:?} certificate-authority-data");
            (decoded(data).map_err(|m| format!("{setting}: {m}"))?, setting)
        }
        (None, Some(file)) => {
            let path = resolve(dir, file);
            let setting = format!("cluster {name:?} certificate-authority ({})", path.display());
            (read_small(&path).map_err(|m| format!("{setting}: unreadable: {m}"))?, setting)
        }
        (None, None) => {
            let setting = format!("the system's CA bundle {SYSTEM_CA_BUNDLE} (cluster {name:?} names no CA)");
            (read_small(Path::new(SYSTEM_CA_BUNDLE)).map_err(|m| format!("{setting}: unreadable: {m}"))?, setting)
        }
    };
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{setting}: invalid PEM: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("{setting}: no PEM certificate in it"));
    }
    Ok(Ca { certificates, setting })
}

#[allow(clippy::type_complexity)]
fn client_identity(
    user: &UserEntry,
    who: &str,
    dir: &Path,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
    let pem = |data: &Option<String>, file: &Option<String>, key: &str| -> Result<Option<Vec<u8>>, String> {
        match (data, file) {
            (Some(data), _) => decoded(data).map(Some).map_err(|m| format!("{who} {key}-data: {m}")),
            (None, Some(file)) => {
                let path = resolve(dir, file);
                read_small(&path).map(Some).map_err(|m| format!("{who} {key} ({}): unreadable: {m}", path.display()))
            }
            (None, None) => Ok(None),
        }
    };
    let cert = pem(&user.client_certificate_data, &user.client_certificate, "client-certificate")?;
    let key = pem(&user.client_key_data, &user.client_key, "client-key")?;
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(format!("{who} has a client-certificate but no client-key")),
        (None, Some(_)) => Err(format!("{who} has a client-key but no client-certificate")),
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{who} client-certificate: invalid PEM: {e}"))?;
            if chain.is_empty() {
                return Err(format!("{who} client-certificate: no PEM certificate in it"));
            }
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| format!("{who} client-key: no PEM private key in it ({e})"))?;
            Ok(Some((chain, key)))
        }
    }
}

/// A token file's token: its text without surrounding white space.
fn token_file(path: &Path) -> Result<String, String> {
    let bytes = read_small(path).map_err(|m| format!("({}): unreadable: {m}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("({}): not UTF-8 text", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("({}): empty", path.display()));
    }
    Ok(token.to_string())
}

fn decoded(data: &str) -> Result<Vec<u8>, String> {
    let compact: String = data.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(compact).map_err(|e| format!("not base64: {e}"))
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    dir.join(file)
}

/// A file of at most [`MAX_FILE_BYTES`]: a device or a huge file named by
/// mistake must not keep the call reading.
fn read_small(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("longer than {MAX_FILE_BYTES} bytes, the most that is read"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
