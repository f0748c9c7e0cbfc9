//! The network configuration read on stdin. It is kept as JSON so that keys we
//! do not know reach delegates unchanged; typed views are read from it.

use std::collections::HashSet;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

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
        return Err(CniError::io(what, format!("more than {STDIN_LIMIT} bytes")));
    }
    Ok(buf)
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub raw: Value,
    pub version: SpecVersion,
    /// The bytes as received, for a delegate that must get exactly them.
    pub bytes: Vec<u8>,
}

impl NetConf {
    /// Parses stdin: not a JSON object is error 6; a missing `cniVersion`
    /// means 0.2.0; an unknown or malformed one is error 1.
    pub fn parse(bytes: &[u8]) -> Result<NetConf> {
        let raw: Value = serde_json::from_slice(bytes).map_err(|e| CniError::decode("stdin", e))?;
        if !raw.is_object() {
            return Err(CniError::decode("stdin", "the network configuration must be a JSON object"));
        }
        let version = match raw.get("cniVersion") {
            None => SpecVersion::IMPLICIT,
            Some(Value::String(s)) => SpecVersion::parse(s)?,
            Some(other) => SpecVersion::parse(&other.to_string())?,
        };
        Ok(NetConf { raw, version, bytes: bytes.to_vec() })
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

    pub fn ipam(&self) -> Result<&Map<String, Value>> {
        match self.raw.get("ipam") {
            Some(Value::Object(m)) => Ok(m),
            Some(other) => Err(CniError::config("ipam", format!("must be an object, got {other}"))),
            None => Err(CniError::config("ipam", "missing")),
        }
    }

    /// `ipam.<key>` if present and not null.
    pub fn ipam_key(&self, key: &str) -> Result<Option<&Value>> {
        Ok(self.ipam()?.get(key).filter(|v| !v.is_null()))
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

    /// `ipam.database`: an absolute path, by default [`DEFAULT_DATABASE`].
    pub fn database_path(&self) -> Result<PathBuf> {
        match self.ipam_key("database")? {
            None => Ok(PathBuf::from(DEFAULT_DATABASE)),
            Some(Value::String(s)) if s.starts_with('/') => Ok(PathBuf::from(s)),
            Some(other) => Err(CniError::config("ipam.database", format!("must be an absolute path, got {other}"))),
        }
    }

    /// `ipam.<key>` as a positive number of seconds.
    pub fn ipam_seconds(&self, key: &str, default: Duration) -> Result<Duration> {
        match self.ipam_key(key)? {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    CniError::config(
                        &format!("ipam.{key}"),
                        format!("must be a number of seconds in (0, 86400], got {v}"),
                    )
                }),
        }
    }

    /// `ipam.lockTimeout`: how long to wait for the allocation database's lock.
    pub fn lock_timeout(&self) -> Result<Duration> {
        self.ipam_seconds("lockTimeout", crate::store::DEFAULT_LOCK_TIMEOUT)
    }

    /// `runtimeConfig.<capability>`, as the runtime passed it.
    pub fn runtime_config(&self, capability: &str) -> Option<&Value> {
        self.raw.get("runtimeConfig")?.get(capability).filter(|v| !v.is_null())
    }

    /// `args.cni.<key>`, the conventions' way to pass per-attachment arguments.
    pub fn args_cni(&self, key: &str) -> Option<&Value> {
        self.raw.get("args")?.get("cni")?.get(key).filter(|v| !v.is_null())
    }

    /// GC's `cni.dev/valid-attachments` as (container id, ifname) pairs.
    /// Without it GC must release nothing, so its absence is error 7.
    pub fn valid_attachments(&self) -> Result<HashSet<(String, String)>> {
        const KEY: &str = "cni.dev/valid-attachments";
        let list = match self.raw.get(KEY) {
            Some(Value::Array(list)) => list,
            Some(other) => return Err(CniError::config(KEY, format!("must be an array, got {other}"))),
            None => return Err(CniError::config(KEY, "missing: GC without it would release every attachment")),
        };
        list.iter()
            .enumerate()
            .map(|(i, entry)| {
                let text = |k: &str| entry.get(k).and_then(Value::as_str).map(String::from);
                match (text("containerID"), text("ifname")) {
                    (Some(c), Some(i)) => Ok((c, i)),
                    _ => Err(CniError::config(
                        &format!("{KEY}[{i}]"),
                        format!("must be {{\"containerID\", \"ifname\"}} strings, got {entry}"),
                    )),
                }
            })
            .collect()
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
        let e = c.ipam_seconds("timeout", Duration::from_secs(30)).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("ipam.timeout"), "{e}");
        assert_eq!(conf(json!({"ipam": {}})).database_path().unwrap(), PathBuf::from(DEFAULT_DATABASE));
        assert_eq!(
            conf(json!({"ipam": {"timeout": 2.5}})).ipam_seconds("timeout", Duration::ZERO).unwrap().as_millis(),
            2500
        );
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
        assert_eq!(c.runtime_config("ips"), Some(&json!(["10.0.0.1"])));
        assert_eq!(c.args_cni("pools"), Some(&json!(["a"])));
        assert_eq!(c.runtime_config("ipRanges"), None);
    }
}
