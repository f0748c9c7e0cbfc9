//! Sticky addresses: `ipam.sticky`, and the workload identity of an
//! attachment. Stickiness is on when `ipam.delegates` names ipam-da-sticky;
//! then every allocator of the suite ties what it leases to the identity,
//! and releasing it (DEL, GC, a rollback) keeps the address held for the
//! identity for `hold` seconds instead of freeing it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::args::CniArgs;
use crate::config::{keys, NetConf};
use crate::error::{CniError, Result};

/// The delegate whose presence in `ipam.delegates` turns stickiness on.
pub const DELEGATE: &str = "ipam-da-sticky";

/// The keys of `ipam.sticky`.
const KEYS: &[&str] = &["identity", "hold", "shareLive", "kubeconfig"];

/// The CNI_ARGS keys a kubelet passes, whose values name a pod.
const DEFAULT_IDENTITY: [&str; 2] = ["K8S_POD_NAMESPACE", "K8S_POD_NAME"];

/// How long a released address stays held when `hold` is not set.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(600);

/// The longest hold: a year.
const MAX_HOLD_SECS: u64 = 366 * 86_400;

/// An identity longer than this is refused: it is a key in the database and
/// in etcd, and no runtime's names come near it.
pub const MAX_IDENTITY_BYTES: usize = 512;

/// `ipam.sticky`, with its defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Sticky {
    /// CNI_ARGS keys whose values, joined with `/`, are the identity.
    pub identity_keys: Vec<String>,
    /// How long a released identity's address stays held; zero: not at all.
    pub hold: Duration,
    /// Whether two live attachments of one identity may share its address.
    pub share_live: bool,
    /// `"identity": "auto"`: the default keys, except that ipam-delegated
    /// names a KubeVirt VM's `virt-launcher-` pod by its VM (read from the
    /// pod through the API server, passed on as `args.cni.identity`).
    pub auto: bool,
    /// `kubeconfig`: whose credentials `auto` reads the pod with (default:
    /// `ipam.cluster.kubernetes.kubeconfig`).
    pub kubeconfig: Option<PathBuf>,
}

impl Default for Sticky {
    fn default() -> Self {
        Sticky {
            identity_keys: DEFAULT_IDENTITY.iter().map(|k| k.to_string()).collect(),
            hold: DEFAULT_HOLD,
            share_live: false,
            auto: false,
            kubeconfig: None,
        }
    }
}

impl Sticky {
    /// The settings when the stack has ipam-da-sticky; `None` otherwise
    /// (then nothing sticks, whatever `ipam.sticky` says). Bad settings are
    /// error 7 naming the field.
    pub fn of(config: &NetConf) -> Result<Option<Sticky>> {
        let in_stack = config.ipam()?.delegates.as_ref().is_some_and(|d| d.iter().any(|name| name == DELEGATE));
        if !in_stack {
            return Ok(None);
        }
        match config.raw.get("ipam").and_then(|ipam| ipam.get("sticky")) {
            None | Some(Value::Null) => Ok(Some(Sticky::default())),
            Some(value) => Sticky::parse(value).map(Some),
        }
    }

    fn parse(value: &Value) -> Result<Sticky> {
        const FIELD: &str = "ipam.sticky";
        let Value::Object(object) = value else {
            return Err(CniError::config(FIELD, format!("must be an object, got {value}")));
        };
        keys::refuse_unknown(object, KEYS, FIELD)?;
        let mut sticky = Sticky::default();
        if let Some(list) = object.get("identity").filter(|v| v.as_str() != Some("auto")) {
            let field = "ipam.sticky.identity";
            let Value::Array(items) = list else {
                return Err(CniError::config(
                    field,
                    format!("must be an array of CNI_ARGS keys or \"auto\", got {list}"),
                ));
            };
            if items.is_empty() {
                return Err(CniError::config(field, "must name at least one CNI_ARGS key"));
            }
            sticky.identity_keys = items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(key) if !key.is_empty() && !key.contains(['=', ';']) => Ok(key.clone()),
                    other => Err(CniError::config(
                        &format!("{field}[{i}]"),
                        format!("must be a CNI_ARGS key (a non-empty string without '=' or ';'), got {other}"),
                    )),
                })
                .collect::<Result<_>>()?;
        }
        sticky.auto = object.get("identity").and_then(Value::as_str) == Some("auto");
        if let Some(path) = object.get("kubeconfig") {
            match path {
                Value::String(p) if p.starts_with('/') => sticky.kubeconfig = Some(PathBuf::from(p)),
                other => {
                    return Err(CniError::config(
                        "ipam.sticky.kubeconfig",
                        format!("must be an absolute path, got {other}"),
                    ))
                }
            }
        }
        if let Some(hold) = object.get("hold") {
            let secs = whole_seconds(hold).filter(|s| *s <= MAX_HOLD_SECS).ok_or_else(|| {
                CniError::config(
                    "ipam.sticky.hold",
                    format!("must be a whole number of seconds from 0 to {MAX_HOLD_SECS}, got {hold}"),
                )
            })?;
            sticky.hold = Duration::from_secs(secs);
        }
        if let Some(share) = object.get("shareLive") {
            sticky.share_live = share.as_bool().ok_or_else(|| {
                CniError::config("ipam.sticky.shareLive", format!("must be true or false, got {share}"))
            })?;
        }
        Ok(sticky)
    }

    /// The attachment's workload identity: `args.cni.identity` when given,
    /// else the values of the `identity` CNI_ARGS keys joined with `/` when
    /// every one is present and not empty; `None`: not sticky.
    pub fn identity(&self, config: &NetConf, args: &CniArgs) -> Result<Option<String>> {
        if let Some(identity) = config.args_cni::<String>("identity")? {
            return check_identity(identity, "args.cni.identity").map(Some);
        }
        let mut parts = Vec::with_capacity(self.identity_keys.len());
        for key in &self.identity_keys {
            match args.get(key)? {
                Some(value) if !value.is_empty() => parts.push(value),
                _ => return Ok(None),
            }
        }
        check_identity(parts.join("/"), "CNI_ARGS").map(Some)
    }

    /// How long a released lease of an identity stays held; `None`: freed.
    pub fn hold(&self) -> Option<Duration> {
        Some(self.hold).filter(|h| !h.is_zero())
    }
}

/// What releasing does with an identity's address under `config`: the
/// hold when stickiness is on. Release must not fail (DEL, GC), so settings
/// that do not read keep the default hold, with a warning: an address kept
/// a while is a smaller harm than an identity's address given away.
pub fn release_hold(config: &NetConf) -> Option<Duration> {
    match Sticky::of(config) {
        Ok(sticky) => sticky.and_then(|s| s.hold()),
        Err(e) => {
            tracing::warn!("{e}; released addresses of identities stay held for the default {DEFAULT_HOLD:?}");
            Some(DEFAULT_HOLD)
        }
    }
}

/// The warning for `ipam.sticky` without ipam-da-sticky in the stack.
pub fn unused_warning(config: &NetConf) -> Option<String> {
    let ipam = config.raw.get("ipam")?;
    ipam.get("sticky")?;
    let delegates = ipam.get("delegates")?.as_array()?;
    if delegates.iter().any(|d| d.as_str() == Some(DELEGATE)) {
        return None;
    }
    Some(format!(
        "ipam.sticky is set but {DELEGATE} is not in ipam.delegates: no address sticks to an identity; add it \
         before the sequential allocator"
    ))
}

/// A whole number of seconds, written as an integer or as a number whose
/// fraction is zero (`600.0`, as a generator that writes every number as a
/// float does): the same hold.
fn whole_seconds(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let secs = value.as_f64().filter(|s| s.is_finite() && s.fract() == 0.0 && *s >= 0.0)?;
        // The range is checked by the caller: beyond u64 is refused too.
        (secs < u64::MAX as f64).then_some(secs as u64)
    })
}

/// An identity as a key: not empty, at most [`MAX_IDENTITY_BYTES`], no control characters.
fn check_identity(identity: String, source: &str) -> Result<String> {
    let problem = if identity.is_empty() {
        Some("is empty".to_string())
    } else if identity.len() > MAX_IDENTITY_BYTES {
        Some(format!("is {} bytes long, more than {MAX_IDENTITY_BYTES}", identity.len()))
    } else if identity.chars().any(char::is_control) {
        Some("holds a control character".to_string())
    } else {
        None
    };
    match problem {
        None => Ok(identity),
        Some(problem) if source == "CNI_ARGS" => {
            Err(CniError::env("CNI_ARGS", format!("the sticky identity {identity:?} {problem}")))
        }
        Some(problem) => Err(CniError::config(source, format!("the sticky identity {identity:?} {problem}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(ipam: Value) -> NetConf {
        NetConf::parse(json!({"cniVersion": "1.0.0", "name": "n", "ipam": ipam}).to_string().as_bytes()).unwrap()
    }

    const STACK: [&str; 3] = ["ipam-ds-pool", "ipam-da-sticky", "ipam-da-sequential"];

    #[test]
    fn auto_is_the_default_keys_with_a_kubeconfig_to_read_vms_with() {
        let auto = Sticky::of(&conf(json!({"delegates": STACK, "sticky":
            {"identity": "auto", "kubeconfig": "/etc/cni/ipam-delegated/kubeconfig"}})))
        .unwrap()
        .unwrap();
        assert!(auto.auto && auto.identity_keys == Sticky::default().identity_keys);
        assert_eq!(auto.kubeconfig.as_deref(), Some(std::path::Path::new("/etc/cni/ipam-delegated/kubeconfig")));
        let refused = |sticky: Value| Sticky::of(&conf(json!({"delegates": STACK, "sticky": sticky}))).unwrap_err();
        let e = refused(json!({"identity": "pod"})).to_string();
        assert!(e.contains("ipam.sticky.identity") && e.contains("\"auto\""), "{e}");
        let e = refused(json!({"identity": "auto", "kubeconfig": "kubeconfig"})).to_string();
        assert!(e.contains("ipam.sticky.kubeconfig") && e.contains("absolute"), "{e}");
    }

    #[test]
    fn off_without_the_delegate_and_defaults_with_it() {
        assert_eq!(Sticky::of(&conf(json!({"delegates": ["ipam-ds-pool"], "sticky": {"hold": 5}}))).unwrap(), None);
        let on = Sticky::of(&conf(json!({"delegates": STACK}))).unwrap().unwrap();
        assert_eq!(on, Sticky::default());
        assert_eq!(on.hold(), Some(Duration::from_secs(600)));
        let set = Sticky::of(&conf(json!({"delegates": STACK, "sticky":
            {"identity": ["NOMAD_JOB", "NOMAD_GROUP"], "hold": 0, "shareLive": true}})))
        .unwrap()
        .unwrap();
        assert_eq!(set.identity_keys, ["NOMAD_JOB", "NOMAD_GROUP"]);
        assert_eq!((set.hold(), set.share_live), (None, true));
        // An integral hold written as a float is that many seconds.
        let float = Sticky::of(&conf(json!({"delegates": STACK, "sticky": {"hold": 600.0}}))).unwrap().unwrap();
        assert_eq!(float.hold(), Some(Duration::from_secs(600)));
    }

    #[test]
    fn bad_settings_are_error_7_naming_the_field_and_value() {
        let refused = |sticky: Value| Sticky::of(&conf(json!({"delegates": STACK, "sticky": sticky}))).unwrap_err();
        let e = refused(json!({"hold": -1}));
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("ipam.sticky.hold") && e.msg.contains("-1"), "{}", e.msg);
        let e = refused(json!({"hold": 1.5}));
        assert!(e.msg.contains("1.5"), "{}", e.msg);
        let e = refused(json!({"hold": 31_622_401.0}));
        assert!(e.msg.contains("ipam.sticky.hold") && e.msg.contains("31622401"), "{}", e.msg);
        assert_eq!(refused(json!({"hold": -0.5})).code, 7);
        let e = refused(json!({"identity": []}));
        assert!(e.msg.contains("ipam.sticky.identity"), "{}", e.msg);
        let e = refused(json!({"identity": ["A", ""]}));
        assert!(e.msg.contains("ipam.sticky.identity[1]"), "{}", e.msg);
        let e = refused(json!({"shareLife": true}));
        assert!(e.msg.contains("ipam.sticky.shareLife") && e.msg.contains("shareLive"), "{}", e.msg);
        let e = refused(json!({"shareLive": "yes"}));
        assert!(e.msg.contains("ipam.sticky.shareLive") && e.msg.contains("yes"), "{}", e.msg);
        assert_eq!(refused(json!("on")).code, 7);
    }

    #[test]
    fn unused_settings_are_a_warning() {
        let w = unused_warning(&conf(json!({"delegates": ["ipam-ds-pool"], "sticky": {}}))).unwrap();
        assert!(w.contains("ipam.sticky") && w.contains(DELEGATE), "{w}");
        assert_eq!(unused_warning(&conf(json!({"delegates": STACK, "sticky": {}}))), None);
        assert_eq!(unused_warning(&conf(json!({"delegates": ["ipam-ds-pool"]}))), None);
    }

    #[test]
    fn identities_are_checked() {
        assert_eq!(check_identity("prod/db-0".into(), "CNI_ARGS").unwrap(), "prod/db-0");
        assert_eq!(check_identity(String::new(), "args.cni.identity").unwrap_err().code, 7);
        assert_eq!(check_identity("a\nb".into(), "CNI_ARGS").unwrap_err().code, 4);
        assert_eq!(check_identity("x".repeat(513), "args.cni.identity").unwrap_err().code, 7);
    }
}
