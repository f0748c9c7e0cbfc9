//! The network configuration `--conf` names, read as the plugins read it:
//! the plugin whose ipam is ipam-delegated in cluster mode, with the list's
//! name (the network) and cniVersion, as a runtime hands it over.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipam_ds_cluster::settings::Settings;
use serde_json::{Map, Value};
use shared::pool::{self, Pool};
use shared::{CniError, NetConf};

use super::super::failure::{Failure, FileAction};

pub struct ClusterConf {
    /// As given on the command line, for messages.
    pub path: PathBuf,
    /// The configuration's `name`.
    pub network: String,
    /// The plugin's configuration as the plugins get it.
    pub netconf: NetConf,
    pub settings: Settings,
    /// `ipam.pools`, checked as the selector checks them.
    pub pools: Vec<Pool>,
    /// `ipam.database`, or the default.
    pub database: PathBuf,
    /// `ipam.timeout`, or the default.
    pub call_timeout: Duration,
}

impl ClusterConf {
    pub fn read(path: &Path) -> Result<ClusterConf, Failure> {
        let bytes = std::fs::read(path).map_err(|error| Failure::File {
            action: FileAction::Read,
            path: path.to_path_buf(),
            error,
        })?;
        ClusterConf::parse(path, &bytes)
    }

    /// The configuration `bytes`, `path` naming where it is in messages (the
    /// node agent's: a network's configuration as its last ADD was given it).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<ClusterConf, Failure> {
        let unusable = |problem: String| Failure::ClusterConf { conf: path.to_path_buf(), problem };
        let (network, plugin) = cluster_plugin(bytes).map_err(unusable)?;
        let invalid = |e: CniError| unusable(Failure::from(e).to_string());
        let config = serde_json::to_vec(&Value::Object(plugin)).map_err(|e| Failure::Bug(e.to_string()))?;
        let netconf = NetConf::parse(&config).map_err(invalid)?;
        let ipam = netconf.ipam().map_err(invalid)?;
        let cluster = ipam.other.get("cluster").cloned().unwrap_or_default();
        let settings = Settings::from_value(&cluster).map_err(invalid)?;
        let pools = pool::all_pools(&netconf).map_err(invalid)?;
        let database = netconf.database_path().map_err(invalid)?;
        let call_timeout = ipam.delegate_timeout();
        Ok(ClusterConf { path: path.to_path_buf(), network, netconf, settings, pools, database, call_timeout })
    }
}

/// The network name and the configuration of the first plugin whose ipam
/// is ipam-delegated with `cluster`, with `name` and `cniVersion` added as a
/// runtime adds them. A `.conf` is a list of one.
fn cluster_plugin(bytes: &[u8]) -> Result<(String, Map<String, Value>), String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(top) = value else { return Err("not a JSON object".to_string()) };
    let network = match top.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        Some(other) => return Err(format!("\"name\" (the network name) must be a non-empty string, got {other}")),
        None => return Err("no \"name\" (the network name)".to_string()),
    };
    let plugins: Vec<&Map<String, Value>> = match top.get("plugins") {
        None => vec![&top],
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, p)| p.as_object().ok_or_else(|| format!("plugins[{i}] is not an object")))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("\"plugins\" must be an array, got {other}")),
    };
    let ours = |p: &Map<String, Value>| {
        p.get("ipam").and_then(|ipam| ipam.get("type")).and_then(Value::as_str) == Some("ipam-delegated")
    };
    let in_cluster_mode = |p: &Map<String, Value>| p.get("ipam").is_some_and(|ipam| ipam.get("cluster").is_some());
    let Some(plugin) = plugins.iter().find(|p| ours(p) && in_cluster_mode(p)) else {
        let why = if plugins.iter().any(|p| ours(p)) {
            "its ipam-delegated ipam has no \"cluster\" (it is not in cluster mode)"
        } else {
            "no plugin has an ipam of type ipam-delegated"
        };
        return Err(why.to_string());
    };
    let mut config = (*plugin).clone();
    config.insert("name".to_string(), Value::String(network.clone()));
    if let Some(version) = top.get("cniVersion") {
        config.insert("cniVersion".to_string(), version.clone());
    }
    Ok((network, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(v: Value) -> Result<(String, Map<String, Value>), String> {
        cluster_plugin(v.to_string().as_bytes())
    }

    #[test]
    fn the_first_cluster_plugin_of_a_list_or_a_single_conf() {
        let ipam = json!({"type": "ipam-delegated", "cluster": {}});
        let list = json!({"cniVersion": "1.0.0", "name": "blue-net", "plugins": [
            {"type": "bridge", "ipam": {"type": "host-local"}},
            {"type": "macvlan", "ipam": ipam},
            {"type": "other", "ipam": {"type": "ipam-delegated", "cluster": {"node": "second"}}}]});
        let (network, config) = plugin(list).unwrap();
        assert_eq!(network, "blue-net");
        assert_eq!(config["type"], "macvlan");
        assert_eq!((config["name"].as_str(), config["cniVersion"].as_str()), (Some("blue-net"), Some("1.0.0")));
        let (_, single) = plugin(json!({"name": "n", "type": "bridge", "ipam": ipam})).unwrap();
        assert_eq!(single["type"], "bridge");
    }

    #[test]
    fn what_is_missing_is_said() {
        assert!(plugin(json!([1])).unwrap_err().contains("not a JSON object"));
        assert!(plugin(json!({"plugins": []})).unwrap_err().contains("no \"name\""));
        let none = json!({"name": "n", "plugins": [{"type": "bridge", "ipam": {"type": "host-local"}}]});
        assert_eq!(plugin(none).unwrap_err(), "no plugin has an ipam of type ipam-delegated");
        let local = json!({"name": "n", "type": "bridge", "ipam": {"type": "ipam-delegated"}});
        assert!(plugin(local).unwrap_err().contains("has no \"cluster\""));
        assert!(cluster_plugin(b"{").unwrap_err().starts_with("not JSON"));
    }
}
