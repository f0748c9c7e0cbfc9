//! The network configuration list, and what a runtime hands each plugin of it.

use serde_json::{Map, Value};

/// A network configuration list (a single `.conf` becomes a list of one).
#[derive(Debug, Clone)]
pub struct NetList {
    pub name: String,
    pub cni_version: String,
    pub disable_check: bool,
    pub plugins: Vec<Map<String, Value>>,
    /// The file's bytes, as libcni keeps them in its cache.
    pub bytes: Vec<u8>,
}

impl NetList {
    /// Parses a `.conflist` (an object with `plugins`) or a single plugin's
    /// `.conf` (an object with `type`).
    pub fn parse(bytes: &[u8]) -> Result<NetList, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(top) = value else { return Err("not a JSON object".into()) };
        let text = |key: &str| match top.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None => Err(format!("no \"{key}\"")),
            Some(other) => Err(format!("\"{key}\" is not a string: {other}")),
        };
        let (name, cni_version) = (text("name")?, text("cniVersion")?);
        version(&cni_version).ok_or_else(|| format!("\"cniVersion\" {cni_version:?} is not a version like 1.0.0"))?;
        let plugins = match top.get("plugins") {
            None => vec![top.clone()],
            Some(Value::Array(list)) if !list.is_empty() => list
                .iter()
                .enumerate()
                .map(|(i, p)| p.as_object().cloned().ok_or_else(|| format!("plugins[{i}] is not an object")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("\"plugins\" is not a non-empty array".into()),
        };
        for (i, plugin) in plugins.iter().enumerate() {
            match plugin.get("type") {
                Some(Value::String(t)) if !t.is_empty() && !t.contains('/') => {}
                _ => return Err(format!("plugins[{i}]: \"type\" is missing or not a plugin name")),
            }
        }
        let disable_check = match top.get("disableCheck") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(format!("\"disableCheck\" is not a boolean: {other}")),
        };
        Ok(NetList { name, cni_version, disable_check, plugins, bytes: bytes.to_vec() })
    }

    /// Whether the list's cniVersion is at least `min` (e.g. "0.4.0").
    pub fn at_least(&self, min: &str) -> bool {
        version(&self.cni_version) >= version(min)
    }
}

/// "1.0.0" as (1, 0, 0); None for anything else.
pub fn version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => Some((a, b, c)),
        _ => None,
    }
}

/// The plugin's `type`.
pub fn plugin_type(plugin: &Map<String, Value>) -> &str {
    plugin.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The configuration one plugin gets on stdin, built as libcni builds it: the
/// plugin's object with the list's `name` and `cniVersion`, `prevResult` when
/// there is one, and `runtimeConfig` holding those of `capability_args` that
/// the plugin declares in its `capabilities` (none: no `runtimeConfig` added).
pub fn plugin_config(
    list: &NetList,
    plugin: &Map<String, Value>,
    prev_result: Option<&Value>,
    capability_args: &Map<String, Value>,
) -> Value {
    let mut config = plugin.clone();
    config.insert("name".into(), Value::String(list.name.clone()));
    config.insert("cniVersion".into(), Value::String(list.cni_version.clone()));
    if let Some(prev) = prev_result {
        config.insert("prevResult".into(), prev.clone());
    }
    let declared = plugin.get("capabilities").and_then(Value::as_object);
    let runtime_config: Map<String, Value> = declared
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .filter_map(|(cap, _)| Some((cap.clone(), capability_args.get(cap)?.clone())))
        .collect();
    if !runtime_config.is_empty() {
        config.insert("runtimeConfig".into(), Value::Object(runtime_config));
    }
    Value::Object(config)
}

/// CNI_ARGS `K=V;K2=V2` as pairs, as libcni keeps them.
pub fn parse_cni_args(args: &str) -> Result<Vec<(String, String)>, String> {
    args.split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(format!("CNI_ARGS: {kv:?} is not KEY=VALUE")),
        })
        .collect()
}

/// A container ID or network name as libcni accepts it: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
pub fn valid_id(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// An interface name as libcni accepts it: 1 to 15 bytes, not `.` or `..`,
/// without `/`, `:` or white space.
pub fn valid_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(v: Value) -> NetList {
        NetList::parse(v.to_string().as_bytes()).expect("a valid list")
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_single_conf_is_a_list_of_one() {
        let l = list(json!({"cniVersion": "0.4.0", "name": "n", "type": "bridge"}));
        assert_eq!((l.name.as_str(), l.cni_version.as_str(), l.plugins.len()), ("n", "0.4.0", 1));
        assert_eq!(plugin_type(&l.plugins[0]), "bridge");
        assert!(l.at_least("0.4.0") && !l.at_least("1.0.0"));
    }

    #[test]
    fn broken_lists_are_refused_with_a_reason() {
        for (bad, why) in [
            (json!({"cniVersion": "1.0.0", "plugins": [{"type": "x"}]}), "no \"name\""),
            (json!({"name": "n", "plugins": [{"type": "x"}]}), "no \"cniVersion\""),
            (json!({"cniVersion": "one", "name": "n", "type": "x"}), "not a version"),
            (json!({"cniVersion": "1.0.0", "name": "n", "plugins": []}), "non-empty array"),
            (json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "../x"}]}), "plugins[0]"),
        ] {
            let err = NetList::parse(bad.to_string().as_bytes()).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        assert!(NetList::parse(b"{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn name_and_version_are_injected_and_prev_result_added() {
        let l = list(json!({"cniVersion": "1.0.0", "name": "net", "plugins": [
            {"type": "a", "name": "other", "cniVersion": "0.3.1", "x": 1}
        ]}));
        let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.2/24"}]});
        let config = plugin_config(&l, &l.plugins[0], Some(&prev), &Map::new());
        assert_eq!(config, json!({"type": "a", "name": "net", "cniVersion": "1.0.0", "x": 1, "prevResult": prev}));
        let first = plugin_config(&l, &l.plugins[0], None, &Map::new());
        assert!(first.get("prevResult").is_none());
    }

    #[test]
    fn runtime_config_holds_only_declared_capabilities_the_runtime_was_given() {
        let l = list(json!({"cniVersion": "1.0.0", "name": "net", "plugins": [
            {"type": "a", "capabilities": {"ips": true, "ipRanges": false, "mac": true}},
            {"type": "b"}
        ]}));
        let given =
            obj(json!({"ips": ["10.22.1.5/16"], "ipRanges": [[{"subnet": "10.70.0.0/24"}]], "portMappings": []}));
        let a = plugin_config(&l, &l.plugins[0], None, &given);
        assert_eq!(a["runtimeConfig"], json!({"ips": ["10.22.1.5/16"]}));
        let b = plugin_config(&l, &l.plugins[1], None, &given);
        assert!(b.get("runtimeConfig").is_none(), "b declares no capability: {b}");
        let none_given = plugin_config(&l, &l.plugins[0], None, &Map::new());
        assert!(none_given.get("runtimeConfig").is_none());
    }

    #[test]
    fn cni_args_and_names() {
        let pairs = parse_cni_args("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;;IP=10.0.0.1,10.0.0.2").unwrap();
        assert_eq!(pairs[1], ("K8S_POD_NAMESPACE".to_string(), "prod".to_string()));
        assert_eq!(pairs.len(), 3);
        assert!(parse_cni_args("IgnoreUnknown").is_err());
        assert!(parse_cni_args("").unwrap().is_empty());
        assert!(valid_id("c1") && valid_id("blue-net.v_2") && !valid_id("-x") && !valid_id("a/b") && !valid_id(""));
        assert!(
            valid_ifname("eth0")
                && !valid_ifname("..")
                && !valid_ifname("a:b")
                && !valid_ifname("x".repeat(16).as_str())
        );
    }
}
