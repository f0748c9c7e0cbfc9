//! The network configuration read on stdin. It is kept as JSON, so that
//! keys we do not know reach delegates unchanged, and read through typed
//! views ([`IpamConf`], [`PoolSpec`]) whose errors name the field's path.

mod ipam;
pub mod keys;
mod pool_spec;

use std::cell::OnceCell;
use std::collections::HashSet;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

pub use ipam::{AbsolutePath, DatabasePath, IpamConf, LogLevel, Seconds, DEFAULT_DELEGATE_TIMEOUT};
pub use pool_spec::{PoolSpec, RangeSpec};

use crate::error::{CniError, Result};
use crate::result::IpamResult;
use crate::version::SpecVersion;

/// No configuration of ours is anywhere near this; a larger one is a mistake.
pub const STDIN_LIMIT: u64 = 4 << 20;
pub const DEFAULT_DATABASE: &str = "/var/lib/cni/ipam-delegated/allocations.sqlite";

/// Reads all of `input`, at most [`STDIN_LIMIT`] bytes (more is error 5).
pub fn read_bounded(input: impl Read, what: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    input.take(STDIN_LIMIT + 1).read_to_end(&mut buf).map_err(|e| CniError::io(what, e))?;
    if buf.len() as u64 > STDIN_LIMIT {
        return Err(CniError::io_problem(what, format!("more than {STDIN_LIMIT} bytes")));
    }
    Ok(buf)
}

/// The length of `value`'s JSON text (as `to_string` prints it), counted
/// without making the text: for the bounds on what a delegate run in
/// ipam-delegated's own process reads and prints as a value.
pub fn printed_len(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Reads `value` as a `T`; a value of the wrong shape is error 7 naming its
/// path below `field` (`ipam.pools[2].ranges[0].subnet`) and the value.
pub fn typed<T: DeserializeOwned>(value: &Value, field: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = match e.path().to_string() {
            inner if inner == "." => field.to_string(),
            inner if inner.starts_with('[') => format!("{field}{inner}"),
            inner => format!("{field}.{inner}"),
        };
        let problem = e.inner().to_string();
        let wrong_type = problem.strip_prefix("invalid type: ").and_then(|p| p.split_once(", expected "));
        match (wrong_type, value_at(value, e.path())) {
            (Some((_, expected)), Some(found)) => {
                CniError::config(&path, format!("must be {}, got {found}", in_json_words(expected)))
            }
            _ => CniError::config(&path, problem),
        }
    })
}

/// The value at a deserializer's path, to show what was found.
fn value_at<'v>(value: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    path.iter().try_fold(value, |v, segment| match segment {
        Segment::Seq { index } => v.get(index),
        Segment::Map { key } => v.get(key),
        _ => None,
    })
}

/// serde names JSON's types in Rust's words.
fn in_json_words(expected: &str) -> String {
    expected.replace("a sequence", "an array").replace("a map", "an object").replace("a borrowed string", "a string")
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub raw: Value,
    pub version: SpecVersion,
    /// The bytes as received, for a delegate that must get exactly them;
    /// for a configuration handed over as a value, its JSON text, made at
    /// the first use (see [`NetConf::from_value`]).
    bytes: OnceCell<Vec<u8>>,
    /// `ipam`, read at its first use.
    ipam: OnceCell<Result<IpamConf>>,
}

/// `cni.dev/valid-attachments` entries.
#[derive(Deserialize)]
struct ValidAttachment {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}

impl NetConf {
    /// Parses stdin: not a JSON object is error 6; a missing `cniVersion`
    /// means 0.2.0; an unknown or malformed one is error 1.
    pub fn parse(bytes: &[u8]) -> Result<NetConf> {
        let raw: Value = serde_json::from_slice(bytes).map_err(|e| CniError::decode("stdin", e))?;
        let conf = NetConf::from_value(raw)?;
        let _ = conf.bytes.set(bytes.to_vec());
        Ok(conf)
    }

    /// The configuration that these JSON text's bytes would parse to, as
    /// [`NetConf::parse`] reads it: how ipam-delegated hands a delegate that
    /// runs in its own process its input, without printing and parsing it.
    pub fn from_value(raw: Value) -> Result<NetConf> {
        let version = NetConf::version_of(&raw)?;
        Ok(NetConf { raw, version, bytes: OnceCell::new(), ipam: OnceCell::new() })
    }

    /// The spec version of a configuration: error 6 for what is not an
    /// object, 1 for an unknown or malformed `cniVersion`.
    pub fn version_of(raw: &Value) -> Result<SpecVersion> {
        if !raw.is_object() {
            return Err(CniError::decode("stdin", "the network configuration must be a JSON object"));
        }
        match raw.get("cniVersion") {
            None => Ok(SpecVersion::IMPLICIT),
            Some(Value::String(s)) => SpecVersion::parse(s),
            Some(other) => SpecVersion::parse(&other.to_string()),
        }
    }

    /// The configuration's JSON text: the bytes as received.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get_or_init(|| self.raw.to_string().into_bytes())
    }

    /// The `cniVersion` to put in an error object: the configuration's own,
    /// even when unsupported, as the spec asks.
    pub fn error_version(bytes: &[u8]) -> String {
        let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
        match parsed.as_ref().map(|v| v.get("cniVersion")) {
            Some(Some(Value::String(s))) => s.clone(),
            Some(None) => SpecVersion::IMPLICIT.as_str().to_string(),
            _ => SpecVersion::LATEST.as_str().to_string(),
        }
    }

    /// The network name, which scopes every lease.
    pub fn name(&self) -> Result<&str> {
        match self.raw.get("name") {
            Some(Value::String(s)) if !s.is_empty() => Ok(s),
            Some(other) => Err(CniError::config("name", format!("must be a non-empty string, got {other}"))),
            None => Err(CniError::config("name", "missing")),
        }
    }

    /// The `ipam` object's settings.
    pub fn ipam(&self) -> Result<&IpamConf> {
        let read = || match self.raw.get("ipam") {
            Some(value @ Value::Object(_)) => typed(value, "ipam"),
            Some(other) => Err(CniError::config("ipam", format!("must be an object, got {other}"))),
            None => Err(CniError::config("ipam", "missing")),
        };
        self.ipam.get_or_init(read).as_ref().map_err(Clone::clone)
    }

    /// Warnings for `ipam` keys that look like a typo of a key the suite
    /// reads, which is absent: other delegates' keys are legal at this
    /// level, so these cannot be errors.
    pub fn ipam_key_warnings(&self) -> Vec<String> {
        let Some(Value::Object(ipam)) = self.raw.get("ipam") else { return Vec::new() };
        ipam.keys()
            .filter(|key| !keys::IPAM.contains(&key.as_str()))
            .filter_map(|key| {
                let meant = keys::closest(key, keys::IPAM).filter(|meant| !ipam.contains_key(*meant))?;
                Some(format!(
                    "ipam.{key} is not a key the suite reads (did you mean `{meant}`?); it is passed on to the \
                     delegates unread"
                ))
            })
            .collect()
    }

    /// `ipam.pools`, read as pool objects; `None` when absent or null.
    pub fn pool_specs(&self) -> Result<Option<Vec<PoolSpec>>> {
        self.ipam()?;
        match self.raw.get("ipam").and_then(|ipam| ipam.get("pools")) {
            None | Some(Value::Null) => Ok(None),
            Some(pools) => typed(pools, "ipam.pools").map(Some),
        }
    }

    /// `runtimeConfig.<capability>` read as a `T`; `None` when absent or null.
    pub fn runtime_config<T: DeserializeOwned>(&self, capability: &str) -> Result<Option<T>> {
        let value = self.raw.get("runtimeConfig").and_then(|rc| rc.get(capability)).filter(|v| !v.is_null());
        value.map(|v| typed(v, &format!("runtimeConfig.{capability}"))).transpose()
    }

    /// `args.cni.<key>` read as a `T`, the conventions' way to pass
    /// per-attachment arguments; `None` when absent or null. `args` and
    /// `args.cni` that are not objects are error 7 naming them: read as
    /// "no arguments", an attachment would silently lose its identity or
    /// its requested addresses.
    pub fn args_cni<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        let value = self.args_cni_object()?.and_then(|c| c.get(key)).filter(|v| !v.is_null());
        value.map(|v| typed(v, &format!("args.cni.{key}"))).transpose()
    }

    /// `args.cni` (`None` when it or `args` is absent or null).
    fn args_cni_object(&self) -> Result<Option<&serde_json::Map<String, Value>>> {
        let args = match self.raw.get("args") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(args)) => args,
            Some(other) => {
                return Err(CniError::config(
                    "args",
                    format!("must be an object (the runtime's arguments, CNI's under \"cni\"), got {other}"),
                ))
            }
        };
        match args.get("cni") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(cni)) => Ok(Some(cni)),
            Some(other) => Err(CniError::config(
                "args.cni",
                format!("must be an object of per-attachment arguments (ips, pools, identity), got {other}"),
            )),
        }
    }

    /// The `prevResult`, in whatever version it came.
    pub fn prev_result(&self) -> Result<Option<IpamResult>> {
        match self.raw.get("prevResult") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => IpamResult::from_json(v, "prevResult").map(Some),
        }
    }

    /// A copy of the configuration with `prevResult` replaced (or removed).
    pub fn with_prev_result(&self, prev: Option<&Value>) -> Value {
        let mut raw = self.raw.clone();
        if let Some(obj) = raw.as_object_mut() {
            match prev {
                Some(p) => obj.insert("prevResult".into(), p.clone()),
                None => obj.remove("prevResult"),
            };
        }
        raw
    }

    /// `ipam.database`, by default [`DEFAULT_DATABASE`].
    pub fn database_path(&self) -> Result<PathBuf> {
        Ok(self.ipam()?.database.as_ref().map_or_else(|| PathBuf::from(DEFAULT_DATABASE), |d| d.0.clone()))
    }

    /// `ipam.lockTimeout`: how long to wait for the allocation database's lock.
    pub fn lock_timeout(&self) -> Result<Duration> {
        Ok(self.ipam()?.lock_timeout.map_or(crate::store::DEFAULT_LOCK_TIMEOUT, |s| s.0))
    }

    /// GC's `cni.dev/valid-attachments` as (container id, ifname) pairs.
    /// Without it GC must release nothing, so its absence is error 7.
    pub fn valid_attachments(&self) -> Result<HashSet<(String, String)>> {
        const KEY: &str = "cni.dev/valid-attachments";
        let Some(list) = self.raw.get(KEY) else {
            return Err(CniError::config(KEY, "missing: GC without it would release every attachment"));
        };
        let list: Vec<ValidAttachment> = typed(list, KEY)?;
        Ok(list.into_iter().map(|a| (a.container_id, a.ifname)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> NetConf {
        NetConf::parse(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn missing_version_means_020() {
        assert_eq!(conf(json!({"name": "n"})).version, SpecVersion::V0_2_0);
        assert_eq!(NetConf::error_version(b"{}"), "0.2.0");
        assert_eq!(NetConf::error_version(b"nonsense"), "1.1.0");
        assert_eq!(NetConf::error_version(br#"{"cniVersion":"9.9"}"#), "9.9");
    }

    #[test]
    fn bad_versions_are_error_1_and_bad_json_error_6() {
        for bad in [json!({"cniVersion": "0.5.0"}), json!({"cniVersion": 1.0}), json!({"cniVersion": "x"})] {
            assert_eq!(NetConf::parse(bad.to_string().as_bytes()).unwrap_err().code, 1, "{bad}");
        }
        for bad in ["", "[]", "{", "\"text\"", "{\"a\":1}x"] {
            assert_eq!(NetConf::parse(bad.as_bytes()).unwrap_err().code, 6, "{bad}");
        }
    }

    #[test]
    fn stdin_is_bounded() {
        let big = vec![b' '; STDIN_LIMIT as usize + 1];
        assert_eq!(read_bounded(&big[..], "stdin").unwrap_err().code, 5);
        assert_eq!(read_bounded(&big[1..], "stdin").unwrap().len(), STDIN_LIMIT as usize);
    }

    #[test]
    fn typed_views_name_the_field() {
        let c = conf(json!({"cniVersion": "1.0.0", "name": "", "ipam": {"database": "rel/db", "timeout": -1}}));
        assert!(c.name().unwrap_err().msg.contains("name"));
        let e = c.database_path().unwrap_err();
        assert!(e.code == 7 && e.msg.contains("ipam.database") && e.msg.contains("rel/db"), "{e}");
        let e = conf(json!({"name": "n", "ipam": {"timeout": -1}})).ipam().unwrap_err();
        assert_eq!(
            e.msg,
            "invalid network configuration: ipam.timeout: must be a number of seconds in (0, 86400], got -1"
        );
        let e = conf(json!({"name": "n", "ipam": {"database": "/"}})).ipam().unwrap_err();
        assert_eq!(e.msg, "invalid network configuration: ipam.database: / does not name a file");
        let e = conf(json!({"ipam": {"delegates": ["a", 3]}})).ipam().unwrap_err();
        assert_eq!(e.msg, "invalid network configuration: ipam.delegates[1]: must be a string, got 3");
        assert_eq!(conf(json!({"ipam": {}})).database_path().unwrap(), PathBuf::from(DEFAULT_DATABASE));
        assert_eq!(conf(json!({"ipam": {"timeout": 2.5}})).ipam().unwrap().timeout.unwrap().0.as_millis(), 2500);
        assert_eq!(conf(json!({"ipam": 3})).ipam().unwrap_err().code, 7);
    }

    #[test]
    fn prev_result_is_replaced_or_removed() {
        let c = conf(json!({"name": "n", "prevResult": {"ips": []}}));
        assert!(c.prev_result().unwrap().is_some());
        assert_eq!(c.with_prev_result(None), json!({"name": "n"}));
        assert_eq!(c.with_prev_result(Some(&json!({"x": 1})))["prevResult"], json!({"x": 1}));
        assert_eq!(conf(json!({"prevResult": {"ips": 1}})).prev_result().unwrap_err().code, 6);
    }

    #[test]
    fn valid_attachments_are_required_for_gc() {
        let c = conf(json!({"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]}));
        assert!(c.valid_attachments().unwrap().contains(&("a".to_string(), "eth0".to_string())));
        assert_eq!(conf(json!({})).valid_attachments().unwrap_err().code, 7);
        assert_eq!(
            conf(json!({"cni.dev/valid-attachments": [{"containerID": 1}]})).valid_attachments().unwrap_err().code,
            7
        );
    }

    #[test]
    fn runtime_config_and_args() {
        let c = conf(json!({"runtimeConfig": {"ips": ["10.0.0.1"]}, "args": {"cni": {"pools": ["a"]}}}));
        assert_eq!(c.runtime_config::<Vec<String>>("ips").unwrap(), Some(vec!["10.0.0.1".to_string()]));
        assert_eq!(c.args_cni::<Vec<String>>("pools").unwrap(), Some(vec!["a".to_string()]));
        assert_eq!(c.runtime_config::<Vec<String>>("ipRanges").unwrap(), None);
        let e = c.args_cni::<Vec<u8>>("pools").unwrap_err();
        assert_eq!(e.msg, "invalid network configuration: args.cni.pools[0]: must be u8, got \"a\"");
    }

    #[test]
    fn near_misses_of_the_suites_ipam_keys_are_warned_about() {
        let c = conf(json!({"ipam": {"databse": "/x.db", "delegates": ["a"], "rangeStrat": 1, "lockTimout": 2,
                                     "timeout": 1, "timeot": 3, "someOtherPluginsKey": true}}));
        assert_eq!(
            c.ipam_key_warnings(),
            [
                "ipam.databse is not a key the suite reads (did you mean `database`?); it is passed on to the \
                 delegates unread",
                "ipam.lockTimout is not a key the suite reads (did you mean `lockTimeout`?); it is passed on to the \
                 delegates unread",
            ],
            "`timeot` is no warning while `timeout` is present; far keys are other delegates'"
        );
    }
}
