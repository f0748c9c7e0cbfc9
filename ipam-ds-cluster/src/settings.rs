//! `ipam.cluster`: where the datastore is (etcd, or the Kubernetes API),
//! who this node is, and how long it may work without the datastore. Every
//! problem is error 7 naming the field, found before any request, so that
//! bad settings never write anything.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use shared::config::{keys, typed, AbsolutePath, NetConf, Seconds};
use shared::{CniError, Result};

use crate::{etcd, kube};

pub const FIELD: &str = "ipam.cluster";
pub const DEFAULT_PREFIX: &str = "/ipam-delegated";
pub const DEFAULT_ETCD_TIMEOUT: Duration = Duration::from_secs(2);
/// Longer than etcd's: an API server's first write of a kind after it
/// started takes it about 2 s on a small control plane (it builds the
/// kind's validation then), which a first ADD then must not fail on. An
/// API server that does not answer costs an ADD this once (the rest of the
/// call is offline).
pub const DEFAULT_KUBERNETES_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_OFFLINE_GRACE: Duration = Duration::from_secs(300);
pub const DEFAULT_EMPTY_BLOCK_HOLD: Duration = Duration::from_secs(600);
/// The longest a confirmation stands while etcd answers: how late a node
/// learns that a node asks it to lend, or that etcd lost history.
pub const CONFIRMATION_CACHE_MAX: Duration = Duration::from_secs(2);
/// Most bytes read from `passwordFile` or `nodeFile`, which hold one line: a
/// device such as /dev/zero, or a huge file named by mistake, must not keep
/// the call reading until its deadline.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

const CLUSTER_KEYS: &[&str] =
    &["etcd", "kubernetes", "node", "nodeFile", "offlineGrace", "emptyBlockHold", "shareBlocks"];

/// Pools of at most this many blocks share them under `shareBlocks: "auto"`.
pub const AUTO_SHARE_MAX_BLOCKS: u128 = 64;
/// The most addresses of a shared block on the Kubernetes API: its records
/// are one object's, which the schema (deploy/kubernetes/crds.yaml,
/// `maxProperties`) caps at this many.
pub const KUBERNETES_MAX_SHARED_BLOCK: u128 = 2048;

/// `shareBlocks`: whether the blocks this node claims are shared (every
/// address handed out in them recorded in etcd, any node allocating in them)
/// or its own (allocated from its database alone, without etcd writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShareBlocks {
    /// Shared in pools of at most [`AUTO_SHARE_MAX_BLOCKS`] blocks.
    #[default]
    Auto,
    Always,
    Never,
}
const ETCD_KEYS: &[&str] = &["endpoints", "prefix", "timeout", "username", "passwordFile", "tls"];
const TLS_KEYS: &[&str] = &["ca", "cert", "key"];
const KUBERNETES_KEYS: &[&str] = &["kubeconfig", "timeout"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterConf {
    etcd: Option<EtcdConf>,
    kubernetes: Option<KubernetesConf>,
    node: Option<String>,
    node_file: Option<AbsolutePath>,
    offline_grace: Option<GraceSeconds>,
    empty_block_hold: Option<Seconds>,
    share_blocks: Option<ShareBlocks>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EtcdConf {
    endpoints: Option<Vec<String>>,
    prefix: Option<String>,
    timeout: Option<Seconds>,
    username: Option<String>,
    password_file: Option<AbsolutePath>,
    tls: Option<TlsConf>,
}

#[derive(Deserialize)]
struct KubernetesConf {
    kubeconfig: Option<AbsolutePath>,
    timeout: Option<Seconds>,
}

#[derive(Deserialize)]
struct TlsConf {
    ca: Option<AbsolutePath>,
    cert: Option<AbsolutePath>,
    key: Option<AbsolutePath>,
}

/// Seconds that may be zero: `offlineGrace: 0` means never without etcd.
struct GraceSeconds(Duration);

impl<'de> Deserialize<'de> for GraceSeconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        value
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
            .map(|s| GraceSeconds(Duration::from_secs_f64(s)))
            .ok_or_else(|| serde::de::Error::custom(format!("must be a number of seconds in [0, 86400], got {value}")))
    }
}

/// Where the cluster's records are.
#[derive(Debug, Clone)]
pub enum Store {
    Etcd {
        client: etcd::Settings,
        /// Key prefix, without a trailing slash.
        prefix: String,
    },
    Kubernetes(kube::Settings),
}

/// The cluster settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub store: Store,
    /// This node's name in block and address records.
    pub node: String,
    pub offline_grace: Duration,
    pub empty_block_hold: Duration,
    pub share_blocks: ShareBlocks,
    /// `ipam.timeout`: the longest one delegate call may still run, which a
    /// block given back or released waits out three times over.
    pub call_timeout: Duration,
    /// Weak but working setups (a password over http, …), each naming its
    /// setting: warned about by [`Settings::warn_weak`], once per call.
    pub weak: Vec<String>,
}

impl Settings {
    /// The longest one request to the cluster's store may take.
    pub fn request_timeout(&self) -> Duration {
        match &self.store {
            Store::Etcd { client, .. } => client.timeout,
            Store::Kubernetes(kube) => kube.timeout,
        }
    }

    /// How long a block's confirmation stands for ADD with etcd reachable: a
    /// tenth of offlineGrace, at most [`CONFIRMATION_CACHE_MAX`]. Within it an
    /// ADD allocates in the block without asking etcd, as it would offline
    /// (see ipam-ds-cluster's README, "One read per ADD").
    pub fn confirmation_cache(&self) -> Duration {
        (self.offline_grace / 10).min(CONFIRMATION_CACHE_MAX)
    }

    /// Whether a block this node claims in a pool of `blocks` blocks is shared.
    /// `block_len`: the block's addresses. On the Kubernetes API a shared
    /// block holds every record in one object, so a block of more than
    /// [`KUBERNETES_MAX_SHARED_BLOCK`] addresses is never shared there
    /// (`always` with one is refused by [`Settings::check_block_size`]).
    pub fn shares(&self, blocks: u128, block_len: u128) -> bool {
        match self.share_blocks {
            ShareBlocks::Auto => blocks <= AUTO_SHARE_MAX_BLOCKS && self.may_share(block_len),
            ShareBlocks::Always => true,
            ShareBlocks::Never => false,
        }
    }

    fn may_share(&self, block_len: u128) -> bool {
        !matches!(self.store, Store::Kubernetes(_)) || block_len <= KUBERNETES_MAX_SHARED_BLOCK
    }

    /// Error 7 naming pool `pool`'s blockSize when `shareBlocks: "always"`
    /// would share blocks of `block_len` addresses the store cannot hold.
    pub fn check_block_size(&self, pool: &str, block_size: u8, block_len: u128) -> Result<()> {
        if self.share_blocks != ShareBlocks::Always || self.may_share(block_len) {
            return Ok(());
        }
        Err(CniError::config(
            "blockSize",
            format!(
                "pool {pool}: blocks of /{block_size} ({block_len} addresses) cannot be shared on the Kubernetes \
                 datastore, whose shared block holds every record in one object (at most \
                 {KUBERNETES_MAX_SHARED_BLOCK} addresses): use a longer blockSize, or ipam.cluster.shareBlocks \
                 \"auto\" or \"never\""
            ),
        ))
    }

    /// `ipam.cluster` of a configuration; error 7 when it is missing or wrong.
    pub fn from_config(config: &NetConf) -> Result<Settings> {
        let ipam = config.ipam()?;
        let Some(value) = ipam.other.get("cluster") else {
            return Err(CniError::config(
                FIELD,
                "is required by ipam-ds-cluster (an object with at least etcd.endpoints or kubernetes.kubeconfig); see \
                 ipam-ds-cluster's README",
            ));
        };
        let settings = Settings { call_timeout: ipam.delegate_timeout(), ..Settings::from_value(value)? };
        settings.warn_weak();
        Ok(settings)
    }

    /// Warns of each weak setup, on stderr and in the log, once per process
    /// (one CNI call): a call reads the settings more than once (an ADD
    /// rolled back runs DEL too), and one warning is enough.
    pub fn warn_weak(&self) {
        static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for warning in &self.weak {
            if !said.contains(warning) {
                tracing::warn!("{warning}");
                said.push(warning.clone());
            }
        }
    }

    pub fn from_value(value: &Value) -> Result<Settings> {
        let object = as_object(value, FIELD)?;
        keys::refuse_unknown(object, CLUSTER_KEYS, FIELD)?;
        for store in ["etcd", "kubernetes"] {
            if let Some(settings) = object.get(store) {
                as_object(settings, &format!("{FIELD}.{store}"))?;
            }
        }
        let conf: ClusterConf = typed(value, FIELD)?;
        let etcd_field = format!("{FIELD}.etcd");
        let kubernetes_field = format!("{FIELD}.kubernetes");
        let etcd_conf = match (conf.etcd, conf.kubernetes) {
            (Some(_), Some(_)) => {
                return Err(CniError::config(
                    &format!("{etcd_field} and {kubernetes_field}"),
                    "are both set: the cluster's datastore is one of them",
                ))
            }
            (None, None) => {
                return Err(CniError::config(
                    &format!("{etcd_field} or {kubernetes_field}"),
                    "is required: the cluster's datastore, etcd (endpoints) or the Kubernetes API (a kubeconfig)",
                ))
            }
            (None, Some(kubernetes)) => {
                keys::refuse_unknown(
                    as_object(&object["kubernetes"], &kubernetes_field)?,
                    KUBERNETES_KEYS,
                    &kubernetes_field,
                )?;
                return Ok(Settings {
                    store: Store::Kubernetes(kubernetes_settings(kubernetes, &kubernetes_field)?),
                    node: node_name(conf.node, conf.node_file)?,
                    offline_grace: conf.offline_grace.map_or(DEFAULT_OFFLINE_GRACE, |g| g.0),
                    empty_block_hold: conf.empty_block_hold.map_or(DEFAULT_EMPTY_BLOCK_HOLD, |s| s.0),
                    share_blocks: conf.share_blocks.unwrap_or_default(),
                    call_timeout: shared::config::DEFAULT_DELEGATE_TIMEOUT,
                    weak: Vec::new(),
                });
            }
            (Some(etcd), None) => etcd,
        };
        let etcd_object = as_object(&object["etcd"], &etcd_field)?;
        keys::refuse_unknown(etcd_object, ETCD_KEYS, &etcd_field)?;
        if let Some(tls) = etcd_object.get("tls") {
            keys::refuse_unknown(
                as_object(tls, &format!("{etcd_field}.tls"))?,
                TLS_KEYS,
                &format!("{etcd_field}.tls"),
            )?;
        }
        let mut weak = Vec::new();
        let prefix = check_prefix(etcd_conf.prefix.as_deref().unwrap_or(DEFAULT_PREFIX), &etcd_field)?;
        Ok(Settings {
            store: Store::Etcd { client: etcd_settings(etcd_conf, &etcd_field, &mut weak)?, prefix },
            node: node_name(conf.node, conf.node_file)?,
            offline_grace: conf.offline_grace.map_or(DEFAULT_OFFLINE_GRACE, |g| g.0),
            empty_block_hold: conf.empty_block_hold.map_or(DEFAULT_EMPTY_BLOCK_HOLD, |s| s.0),
            share_blocks: conf.share_blocks.unwrap_or_default(),
            call_timeout: shared::config::DEFAULT_DELEGATE_TIMEOUT,
            weak,
        })
    }
}

fn as_object<'v>(value: &'v Value, field: &str) -> Result<&'v Map<String, Value>> {
    value.as_object().ok_or_else(|| CniError::config(field, format!("must be an object, got {value}")))
}

fn etcd_settings(conf: EtcdConf, field: &str, weak: &mut Vec<String>) -> Result<etcd::Settings> {
    let endpoints = conf.endpoints.unwrap_or_default();
    if endpoints.is_empty() {
        return Err(CniError::config(
            &format!("{field}.endpoints"),
            "is required: a non-empty array of etcd client URLs such as \"http://10.0.0.1:2379\"",
        ));
    }
    for (i, endpoint) in endpoints.iter().enumerate() {
        check_endpoint(endpoint, &format!("{field}.endpoints[{i}]"))?;
    }
    let password = match (&conf.username, conf.password_file) {
        (Some(_), Some(AbsolutePath(path))) => {
            let password_field = format!("{field}.passwordFile");
            let password = read_password(&path, &password_field)?;
            weak.extend(readable_by_others(&path, &password_field));
            Some(password)
        }
        (Some(user), None) => {
            return Err(CniError::config(
                &format!("{field}.passwordFile"),
                format!("is required with username {user:?}: the file that holds the password"),
            ))
        }
        (None, Some(_)) => return Err(CniError::config(&format!("{field}.username"), "is required with passwordFile")),
        (None, None) => None,
    };
    if let Some(user) = conf.username.as_deref().filter(|u| u.is_empty() || u.contains(char::is_whitespace)) {
        return Err(CniError::config(&format!("{field}.username"), format!("{user:?} is not a user name")));
    }
    let tls = conf.tls.map_or_else(etcd::TlsFiles::default, |t| etcd::TlsFiles {
        ca: t.ca.map(|p| p.0),
        cert: t.cert.map(|p| p.0),
        key: t.key.map(|p| p.0),
    });
    match (&tls.cert, &tls.key) {
        (Some(_), None) => return Err(CniError::config(&format!("{field}.tls.key"), "is required with tls.cert")),
        (None, Some(_)) => return Err(CniError::config(&format!("{field}.tls.cert"), "is required with tls.key")),
        _ => {}
    }
    for (name, path) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
        if let Some(path) = path {
            if let Err(e) = std::fs::metadata(path) {
                return Err(CniError::config(&format!("{field}.tls.{name}"), format!("{}: {e}", path.display())));
            }
        }
    }
    if tls.ca.is_some() || tls.cert.is_some() {
        if let Some(plain) = endpoints.iter().position(|e| e.starts_with("http://")) {
            return Err(CniError::config(
                &format!("{field}.endpoints[{plain}]"),
                format!("{} is plain http but tls is configured: use https://", endpoints[plain]),
            ));
        }
    }
    let plain: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.starts_with("http://"))
        .map(|(i, e)| format!("{field}.endpoints[{i}] ({e})"))
        .collect();
    if !plain.is_empty() && conf.username.is_some() {
        weak.push(format!(
            "{field}.username: the password and etcd's auth token go unencrypted to plain http:// endpoints: {}; \
             use https://",
            plain.join(", ")
        ));
    }
    if !plain.is_empty() && plain.len() < endpoints.len() {
        weak.push(format!(
            "{}: plain http among https endpoints (and no tls set): requests that fail over to it go unencrypted \
             and unauthenticated; make every endpoint https",
            plain.join(", ")
        ));
    }
    Ok(etcd::Settings {
        endpoints,
        timeout: conf.timeout.map_or(DEFAULT_ETCD_TIMEOUT, |s| s.0),
        username: conf.username,
        password,
        tls,
    })
}

/// The kubeconfig is read and checked (its current context's server, CA
/// and credentials) so that its problems are told now, naming the file.
fn kubernetes_settings(conf: KubernetesConf, field: &str) -> Result<kube::Settings> {
    let Some(AbsolutePath(kubeconfig)) = conf.kubeconfig else {
        return Err(CniError::config(
            &format!("{field}.kubeconfig"),
            "is required: the absolute path of the kubeconfig that gives the API server and this node's credentials",
        ));
    };
    let kubeconfig =
        kube::Kubeconfig::read(&kubeconfig).map_err(|e| CniError::config(&format!("{field}.kubeconfig"), e))?;
    Ok(kube::Settings {
        kubeconfig: kubeconfig.into(),
        timeout: conf.timeout.map_or(DEFAULT_KUBERNETES_TIMEOUT, |s| s.0),
    })
}

/// `http://host:port` or `https://host:port`, nothing after the authority.
fn check_endpoint(endpoint: &str, field: &str) -> Result<()> {
    let rest = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://"));
    let authority = rest.map(|r| r.strip_suffix('/').unwrap_or(r));
    let valid = authority.is_some_and(|a| {
        !a.is_empty()
            && !a.contains(['/', '?', '#', '@', ' '])
            && a.rsplit_once(':').is_none_or(|(host, port)| {
                !host.is_empty() && (port.parse::<u16>().is_ok() || host.ends_with(']') || a.starts_with('['))
            })
    });
    if valid {
        Ok(())
    } else {
        Err(CniError::config(field, format!("{endpoint:?} is not an etcd client URL such as \"http://10.0.0.1:2379\"")))
    }
}

fn check_prefix(prefix: &str, field: &str) -> Result<String> {
    let trimmed = prefix.trim_end_matches('/');
    if !prefix.starts_with('/') || trimmed.is_empty() || prefix.contains(char::is_whitespace) {
        return Err(CniError::config(
            &format!("{field}.prefix"),
            format!(
                "{prefix:?} is not a key prefix: it starts with '/' and names something, such as \"{DEFAULT_PREFIX}\""
            ),
        ));
    }
    Ok(trimmed.to_string())
}

/// One trailing newline is not part of the password: files written by
/// `echo` have one.
fn read_password(path: &Path, field: &str) -> Result<String> {
    let text = read_small(path, field)?;
    let password = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if password.is_empty() {
        return Err(CniError::config(field, format!("{} is empty", path.display())));
    }
    Ok(password.to_string())
}

/// The text of a file of at most [`MAX_FILE_BYTES`].
fn read_small(path: &Path, field: &str) -> Result<String> {
    let bad = |problem: String| CniError::config(field, format!("{}: {problem}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| bad(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(bad(format!("longer than {MAX_FILE_BYTES} bytes, the most that is read")));
    }
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".to_string()))
}

/// A warning when others than the file's owner may read the password.
fn readable_by_others(path: &Path, field: &str) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "{field}: {} is readable by group or others (mode {:o}): make it readable by its owner only (chmod 600)",
            path.display(),
            mode & 0o7777
        )
    })
}

/// `node`, else the file `nodeFile` names, else the host name.
fn node_name(node: Option<String>, node_file: Option<AbsolutePath>) -> Result<String> {
    let (name, field) = match (node, node_file) {
        (Some(name), _) => (name, format!("{FIELD}.node")),
        (None, Some(AbsolutePath(path))) => {
            let field = format!("{FIELD}.nodeFile");
            let text = read_small(&path, &field)?;
            (text.trim().to_string(), field)
        }
        (None, None) => (host_name()?, "the host name (ipam.cluster.node is not set)".to_string()),
    };
    if is_node_name(&name) {
        Ok(name)
    } else {
        Err(CniError::config(
            &field,
            format!("{name:?} is not a node name: letters, digits, '.', '_' and '-', at most 253 characters"),
        ))
    }
}

pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn host_name() -> Result<String> {
    let path = PathBuf::from("/proc/sys/kernel/hostname");
    std::fs::read_to_string(&path).map(|s| s.trim().to_string()).map_err(|e| {
        CniError::config(FIELD, format!("node is not set and the host name is unreadable ({e}): set ipam.cluster.node"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(v: Value) -> String {
        Settings::from_value(&v).unwrap_err().msg
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let s = Settings::from_value(&json!({"etcd": {"endpoints": ["http://127.0.0.1:2379"]}, "node": "n1"})).unwrap();
        let Store::Etcd { client, prefix } = &s.store else { panic!("etcd settings read as {:?}", s.store) };
        assert_eq!(prefix, DEFAULT_PREFIX);
        assert_eq!(s.node, "n1");
        assert_eq!(s.offline_grace, DEFAULT_OFFLINE_GRACE);
        assert_eq!(client.timeout, DEFAULT_ETCD_TIMEOUT);
        assert!(client.username.is_none());
    }

    #[test]
    fn each_bad_setting_is_named() {
        let base = |etcd: Value| json!({"etcd": etcd, "node": "n1"});
        assert!(error(json!({"node": "n1"})).contains("ipam.cluster.etcd or ipam.cluster.kubernetes: is required"));
        assert!(error(base(json!({"endpoints": []}))).contains("ipam.cluster.etcd.endpoints: is required"));
        assert!(error(base(json!({"endpoints": ["127.0.0.1:2379"]}))).contains("ipam.cluster.etcd.endpoints[0]"));
        assert!(error(base(json!({"endpoints": ["http://a:1", "ftp://b"]}))).contains("endpoints[1]"));
        assert!(error(base(json!({"endpoints": ["http://a:1"], "timeout": 0}))).contains("ipam.cluster.etcd.timeout"));
        assert!(error(base(json!({"endpoints": ["http://a:1"], "prefix": "x"}))).contains("ipam.cluster.etcd.prefix"));
        assert!(
            error(base(json!({"endpoints": ["http://a:1"], "username": "u"}))).contains("passwordFile: is required")
        );
        let e = error(base(json!({"endpoints": ["http://a:1"], "tls": {"ca": "/nonexistent/ca.pem"}})));
        assert!(e.contains("ipam.cluster.etcd.tls.ca") && e.contains("/nonexistent/ca.pem"), "{e}");
        let e = error(base(json!({"endpoints": ["http://a:1"], "endpoint": "x"})));
        assert!(e.contains("ipam.cluster.etcd.endpoint: unknown key") && e.contains("endpoints"), "{e}");
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "a/b"}));
        assert!(e.contains("ipam.cluster.node") && e.contains("a/b"), "{e}");
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "n", "offlineGrace": -1}));
        assert!(e.contains("ipam.cluster.offlineGrace"), "{e}");
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "nodeFile": "/nonexistent/node"}));
        assert!(e.contains("ipam.cluster.nodeFile") && e.contains("/nonexistent/node"), "{e}");
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "n", "shareBlocks": "sometimes"}));
        assert!(e.contains("ipam.cluster.shareBlocks") && e.contains("sometimes"), "{e}");
    }

    /// A kubeconfig the kube module reads, with a token.
    fn good_kubeconfig(dir: &tempfile::TempDir) -> PathBuf {
        let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/src/kube/testdata/ca.crt");
        let path = dir.path().join("node.kubeconfig");
        let yaml = format!(
            "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             clusters: [{{name: k, cluster: {{server: 'https://10.0.0.1:6443', certificate-authority: {ca}}}}}]\n\
             users: [{{name: u, user: {{token: abc}}}}]\n"
        );
        std::fs::write(&path, yaml).unwrap();
        path
    }

    #[test]
    fn the_datastore_is_one_of_etcd_and_kubernetes() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = good_kubeconfig(&dir);
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "kubernetes": {"kubeconfig": kubeconfig},
            "node": "n"}));
        assert!(e.contains("ipam.cluster.etcd and ipam.cluster.kubernetes: are both set"), "{e}");
        let e = error(json!({"node": "n"}));
        assert!(e.contains("ipam.cluster.etcd or ipam.cluster.kubernetes: is required"), "{e}");
        let s = Settings::from_value(&json!({"kubernetes": {"kubeconfig": kubeconfig}, "node": "n"})).unwrap();
        let Store::Kubernetes(kube) = &s.store else { panic!("kubernetes settings read as {:?}", s.store) };
        assert_eq!((kube.timeout, s.node.as_str()), (DEFAULT_KUBERNETES_TIMEOUT, "n"));
        assert_eq!(kube.kubeconfig.path, kubeconfig);
        let s = Settings::from_value(&json!({"kubernetes": {"kubeconfig": kubeconfig, "timeout": 5}, "node": "n",
            "offlineGrace": 30, "shareBlocks": "never"}))
        .unwrap();
        let Store::Kubernetes(kube) = &s.store else { panic!("kubernetes settings read as {:?}", s.store) };
        assert_eq!(kube.timeout, Duration::from_secs(5));
        assert_eq!((s.offline_grace, s.share_blocks), (Duration::from_secs(30), ShareBlocks::Never));
    }

    #[test]
    fn each_bad_kubernetes_setting_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = good_kubeconfig(&dir);
        let kube = |k: Value| error(json!({"kubernetes": k, "node": "n"}));
        let e = kube(json!({"kubeconfg": kubeconfig}));
        assert!(e.contains("ipam.cluster.kubernetes.kubeconfg: unknown key") && e.contains("`kubeconfig`"), "{e}");
        let e = kube(json!({}));
        assert!(e.contains("ipam.cluster.kubernetes.kubeconfig: is required"), "{e}");
        let e = kube(json!("/etc/kubeconfig"));
        assert!(e.contains("ipam.cluster.kubernetes: must be an object"), "{e}");
        let e = kube(json!({"kubeconfig": "node.kubeconfig"}));
        assert!(e.contains("ipam.cluster.kubernetes.kubeconfig: must be an absolute path"), "{e}");
        let e = kube(json!({"kubeconfig": kubeconfig, "timeout": 0}));
        assert!(e.contains("ipam.cluster.kubernetes.timeout"), "{e}");
        let e = kube(json!({"kubeconfig": "/nonexistent/node.kubeconfig"}));
        assert!(e.contains("ipam.cluster.kubernetes.kubeconfig: /nonexistent/node.kubeconfig: "), "{e}");
        std::fs::write(&kubeconfig, "current-context: gone\n").unwrap();
        let e = kube(json!({"kubeconfig": kubeconfig}));
        assert!(e.contains(&format!("{}: current-context names context \"gone\"", kubeconfig.display())), "{e}");
        let e = error(json!({"kubernetes": {"kubeconfig": good_kubeconfig(&dir)}, "node": "a/b"}));
        assert!(e.contains("ipam.cluster.node") && e.contains("a/b"), "{e}");
    }

    #[test]
    fn on_the_kubernetes_api_a_shared_block_fits_one_object() {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = good_kubeconfig(&dir);
        let with = |share: &str| {
            Settings::from_value(&json!({"kubernetes": {"kubeconfig": kubeconfig}, "node": "n", "shareBlocks": share}))
                .unwrap()
        };
        let auto = with("auto");
        assert!(auto.shares(16, KUBERNETES_MAX_SHARED_BLOCK), "a /21 block of IPv4 is shared");
        assert!(!auto.shares(16, KUBERNETES_MAX_SHARED_BLOCK * 2), "a /20 block is each node's own");
        assert!(auto.check_block_size("blue", 20, 4096).is_ok(), "auto makes it the node's own: no error");
        let e = with("always").check_block_size("blue", 20, 4096).unwrap_err();
        assert_eq!(e.code, shared::Code::InvalidConfig);
        assert!(e.msg.contains("blockSize") && e.msg.contains("pool blue") && e.msg.contains("2048"), "{}", e.msg);
        assert!(with("always").check_block_size("blue", 21, 2048).is_ok());
    }

    #[test]
    fn blocks_are_shared_in_pools_of_few_blocks_unless_told() {
        let with = |share: Value| {
            Settings::from_value(&json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "n", "shareBlocks": share}))
                .unwrap()
        };
        let auto = Settings::from_value(&json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "n"})).unwrap();
        assert!(auto.shares(4, 64) && auto.shares(AUTO_SHARE_MAX_BLOCKS, 64));
        assert!(!auto.shares(AUTO_SHARE_MAX_BLOCKS + 1, 64), "a pool of many blocks: each node's own");
        assert!(auto.shares(4, 1 << 20), "etcd holds a record per key: any block may be shared");
        assert!(with(json!("always")).shares(1024, 64));
        assert!(!with(json!("never")).shares(1, 64));
        assert!(with(json!("always")).check_block_size("blue", 12, 1 << 20).is_ok());
    }

    #[test]
    fn a_confirmation_stands_a_tenth_of_the_grace_and_at_most_two_seconds() {
        let grace = |g: f64| {
            Settings::from_value(&json!({"etcd": {"endpoints": ["http://a:1"]}, "node": "n", "offlineGrace": g}))
                .unwrap()
                .confirmation_cache()
        };
        assert_eq!(grace(300.0), CONFIRMATION_CACHE_MAX);
        assert_eq!(grace(10.0), Duration::from_secs(1));
        assert_eq!(grace(0.0), Duration::ZERO, "offlineGrace 0: every ADD asks etcd");
    }

    #[test]
    fn a_password_file_loses_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n\n").unwrap();
        let s = Settings::from_value(&json!({"etcd": {"endpoints": ["http://a:1"], "username": "u",
            "passwordFile": file}, "node": "n"}))
        .unwrap();
        let Store::Etcd { client, .. } = &s.store else { panic!("etcd settings read as {:?}", s.store) };
        assert_eq!(client.password.as_deref(), Some("s3cret\n"));
    }

    #[test]
    fn files_are_read_up_to_a_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, "n".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"]}, "nodeFile": big}));
        assert!(e.contains("ipam.cluster.nodeFile") && e.contains("65536 bytes"), "{e}");
        let e = error(json!({"etcd": {"endpoints": ["http://a:1"], "username": "u", "passwordFile": "/dev/zero"},
            "node": "n"}));
        assert!(e.contains("ipam.cluster.etcd.passwordFile") && e.contains("65536 bytes"), "{e}");
    }

    #[test]
    fn weak_setups_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let weak = |etcd: Value| Settings::from_value(&json!({"etcd": etcd, "node": "n"})).unwrap().weak;
        let w = weak(json!({"endpoints": ["http://a:1", "https://b:1"], "username": "u", "passwordFile": file}));
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("ipam.cluster.etcd.passwordFile: ") && w[0].contains("mode 640"), "{w:?}");
        assert!(
            w[1].starts_with("ipam.cluster.etcd.username: ") && w[1].contains("endpoints[0] (http://a:1)"),
            "{w:?}"
        );
        assert!(w[2].starts_with("ipam.cluster.etcd.endpoints[0] (http://a:1): plain http among https"), "{w:?}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(weak(json!({"endpoints": ["https://a:1"], "username": "u", "passwordFile": file})).is_empty());
        assert!(weak(json!({"endpoints": ["http://a:1", "http://b:1"]})).is_empty());
    }
}
