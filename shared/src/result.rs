//! The IPAM result: one internal type, rendered in the shape of each spec
//! version and read back from any of them (a `prevResult` may come in any).

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::addr::Family;
use crate::error::{CniError, Result};
use crate::version::SpecVersion;

/// One address of a result (`ips` entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Address with the prefix length of its subnet.
    #[serde(deserialize_with = "crate::addr::deserialize_cidr")]
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<u32>,
}

/// A route; spec 1.1's optional keys (`mtu`, `advmss`, `priority`, `table`,
/// `scope`) and anything newer pass through in `extra`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    #[serde(deserialize_with = "crate::addr::deserialize_cidr")]
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        *self == Dns::default()
    }
}

/// An IPAM result, version-independent. `pools` is the suite's delegate
/// protocol key; `extra` keeps any other key a delegate added so that it
/// passes through the stack.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IpamResult {
    pub interfaces: Vec<Value>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
    pub pools: Option<Vec<Value>>,
    pub extra: Map<String, Value>,
}

const KNOWN_KEYS: [&str; 8] = ["cniVersion", "interfaces", "ips", "routes", "dns", "pools", "ip4", "ip6"];

impl IpamResult {
    /// Reads a result in the shape of any supported version. Not an object,
    /// or a known key of the wrong shape, is error 6 naming `what` and the key.
    pub fn from_json(value: &Value, what: &str) -> Result<Self> {
        let obj = value.as_object().ok_or_else(|| CniError::decode(what, "not a JSON object"))?;
        let field = |key: &str| -> Option<&Value> { obj.get(key).filter(|v| !v.is_null()) };
        let mut result = IpamResult::default();
        if let Some(v) = field("interfaces") {
            result.interfaces = parse_key(what, "interfaces", v)?;
        }
        if let Some(v) = field("ips") {
            let entries: Vec<Map<String, Value>> = parse_key(what, "ips", v)?;
            for mut entry in entries {
                // 0.3.x/0.4.0 tag entries with "version"; the address says it already.
                entry.remove("version");
                result.ips.push(parse_key(what, "ips", &Value::Object(entry))?);
            }
        }
        if let Some(v) = field("routes") {
            result.routes = parse_key(what, "routes", v)?;
        }
        if let Some(v) = field("dns") {
            result.dns = parse_key(what, "dns", v)?;
        }
        if let Some(v) = field("pools") {
            result.pools = Some(parse_key(what, "pools", v)?);
        }
        for key in ["ip4", "ip6"] {
            if let Some(v) = field(key) {
                let legacy: LegacyIp = parse_key(what, key, v)?;
                result.ips.push(IpConfig { address: legacy.ip, gateway: legacy.gateway, interface: None });
                result.routes.extend(legacy.routes);
            }
        }
        result.extra = obj
            .iter()
            .filter(|(k, _)| !KNOWN_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(result)
    }

    /// Renders the result in the shape of `version`.
    pub fn to_json(&self, version: SpecVersion) -> Value {
        let mut out = Map::new();
        out.insert("cniVersion".into(), version.as_str().into());
        if version.has_legacy_result() {
            // 0.1.0/0.2.0 hold one address per family, routes inside the family
            // object: the first address of each family wins, as in libcni.
            for (key, is_v4) in [("ip4", true), ("ip6", false)] {
                if let Some(ip) = self.ips.iter().find(|ip| ip.address.addr().is_ipv4() == is_v4) {
                    let routes: Vec<&Route> = self.routes.iter().filter(|r| r.dst.addr().is_ipv4() == is_v4).collect();
                    let mut family = Map::new();
                    family.insert("ip".into(), Value::String(ip.address.to_string()));
                    if let Some(gw) = ip.gateway {
                        family.insert("gateway".into(), Value::String(gw.to_string()));
                    }
                    if !routes.is_empty() {
                        family.insert("routes".into(), to_value(&routes));
                    }
                    out.insert(key.into(), Value::Object(family));
                }
            }
        } else {
            if !self.interfaces.is_empty() {
                out.insert("interfaces".into(), Value::Array(self.interfaces.clone()));
            }
            let ips = self
                .ips
                .iter()
                .map(|ip| {
                    let mut entry = match to_value(ip) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    if version.tags_ip_version() {
                        let family = if ip.address.addr().is_ipv4() { "4" } else { "6" };
                        entry.insert("version".into(), family.into());
                    }
                    Value::Object(entry)
                })
                .collect();
            out.insert("ips".into(), Value::Array(ips));
            out.insert("routes".into(), to_value(&self.routes));
        }
        out.insert("dns".into(), to_value(&self.dns));
        if let Some(pools) = &self.pools {
            out.insert("pools".into(), Value::Array(pools.clone()));
        }
        for (k, v) in &self.extra {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(out)
    }

    /// The name of the interface an address is on, when the result says
    /// (`ips[].interface` indexes `interfaces`).
    pub fn interface_name(&self, ip: &IpConfig) -> Option<&str> {
        let index = usize::try_from(ip.interface?).ok()?;
        self.interfaces.get(index)?.get("name")?.as_str()
    }

    /// Whether the result already holds an address of this family.
    pub fn has_family(&self, family: Family) -> bool {
        self.ips.iter().any(|ip| Family::of(ip.address.addr()) == family)
    }

    /// Adds a route unless an equal one is present (two pools may share one).
    pub fn add_route(&mut self, route: &Route) {
        if !self.routes.contains(route) {
            self.routes.push(route.clone());
        }
    }

    /// Merges DNS settings, keeping what is there and appending what is new.
    pub fn merge_dns(&mut self, dns: &Dns) {
        let append = |into: &mut Vec<String>, from: &[String]| {
            for s in from {
                if !into.contains(s) {
                    into.push(s.clone());
                }
            }
        };
        append(&mut self.dns.nameservers, &dns.nameservers);
        append(&mut self.dns.search, &dns.search);
        append(&mut self.dns.options, &dns.options);
        if self.dns.domain.is_none() {
            self.dns.domain.clone_from(&dns.domain);
        }
    }
}

/// Deserializes one key of a result, naming it in the error.
fn parse_key<T: serde::de::DeserializeOwned>(what: &str, key: &str, value: &Value) -> Result<T> {
    T::deserialize(value).map_err(|e| CniError::decode(&format!("{what}.{key}"), e))
}

#[derive(Deserialize)]
struct LegacyIp {
    #[serde(deserialize_with = "crate::addr::deserialize_cidr")]
    ip: IpNet,
    #[serde(default)]
    gateway: Option<IpAddr>,
    #[serde(default)]
    routes: Vec<Route>,
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // Serializing these plain structs cannot fail; Null keeps the shape valid regardless.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dual_stack() -> IpamResult {
        IpamResult::from_json(
            &json!({
                "cniVersion": "1.0.0",
                "ips": [
                    {"address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"address": "10.2.0.5/24"},
                    {"address": "fd00::5/64", "gateway": "fd00::1"}
                ],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1", "mtu": 1400}],
                "dns": {"nameservers": ["10.1.0.1"], "search": ["example.org"]}
            }),
            "result",
        )
        .unwrap()
    }

    #[test]
    fn renders_1x_without_version_tags() {
        let v = dual_stack().to_json(SpecVersion::V1_0_0);
        assert_eq!(
            v,
            json!({
                "cniVersion": "1.0.0",
                "ips": [
                    {"address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"address": "10.2.0.5/24"},
                    {"address": "fd00::5/64", "gateway": "fd00::1"}
                ],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1", "mtu": 1400}],
                "dns": {"nameservers": ["10.1.0.1"], "search": ["example.org"]}
            })
        );
        assert_eq!(dual_stack().to_json(SpecVersion::V1_1_0)["cniVersion"], "1.1.0");
    }

    #[test]
    fn renders_03x_04_with_version_tags() {
        for version in [SpecVersion::V0_3_0, SpecVersion::V0_3_1, SpecVersion::V0_4_0] {
            let v = dual_stack().to_json(version);
            assert_eq!(v["cniVersion"], version.as_str());
            assert_eq!(v["ips"][0], json!({"version": "4", "address": "10.1.0.5/16", "gateway": "10.1.0.1"}));
            assert_eq!(v["ips"][2]["version"], "6");
        }
    }

    #[test]
    fn renders_01x_02x_as_ip4_ip6_with_first_address_of_each_family() {
        for version in [SpecVersion::V0_1_0, SpecVersion::V0_2_0] {
            let v = dual_stack().to_json(version);
            assert_eq!(
                v,
                json!({
                    "cniVersion": version.as_str(),
                    "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
                    "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1",
                            "routes": [{"dst": "::/0", "gw": "fd00::1", "mtu": 1400}]},
                    "dns": {"nameservers": ["10.1.0.1"], "search": ["example.org"]}
                })
            );
        }
    }

    #[test]
    fn every_version_reads_back_what_it_wrote() {
        let single_per_family = IpamResult::from_json(
            &json!({"ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}, {"address": "fd00::5/64"}],
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "fd00:1::/48"}],
                    "dns": {"domain": "x"}, "pools": [{"name": "a"}]}),
            "r",
        )
        .unwrap();
        for version in crate::version::SUPPORTED {
            let back = IpamResult::from_json(&single_per_family.to_json(version), "r").unwrap();
            assert_eq!(back, single_per_family, "{version}");
        }
    }

    #[test]
    fn unknown_keys_and_pools_pass_through() {
        let r = IpamResult::from_json(&json!({"ips": [], "pools": [{"name": "p"}], "x-extra": 1}), "r").unwrap();
        assert_eq!(r.pools, Some(vec![json!({"name": "p"})]));
        let out = r.to_json(SpecVersion::V1_0_0);
        assert_eq!(out["x-extra"], 1);
        assert_eq!(out["pools"], json!([{"name": "p"}]));
        assert_eq!(out["ips"], json!([]));
        assert_eq!(out["routes"], json!([]));
        assert_eq!(out["dns"], json!({}));
    }

    #[test]
    fn wrong_shapes_are_error_6_naming_the_key() {
        for (bad, key) in [
            (json!([]), "not a JSON object"),
            (json!({"ips": {}}), "prevResult.ips"),
            (json!({"ips": [{"address": "10.0.0.1"}]}), "prevResult.ips"),
            (json!({"ips": [{"address": "10.0.0.1/24", "gateway": "x"}]}), "prevResult.ips"),
            (json!({"routes": [{"gw": "10.0.0.1"}]}), "prevResult.routes"),
            (json!({"dns": {"nameservers": "10.0.0.1"}}), "prevResult.dns"),
            (json!({"ip4": {"ip": "nonsense"}}), "prevResult.ip4"),
            (json!({"pools": 3}), "prevResult.pools"),
        ] {
            let e = IpamResult::from_json(&bad, "prevResult").unwrap_err();
            assert_eq!(e.code, 6, "{bad}");
            assert!(e.msg.contains(key), "{bad}: {}", e.msg);
        }
    }

    #[test]
    fn merge_helpers_do_not_duplicate() {
        let mut r = IpamResult::default();
        let route = Route { dst: "0.0.0.0/0".parse().unwrap(), gw: None, extra: Map::new() };
        r.add_route(&route);
        r.add_route(&route);
        assert_eq!(r.routes.len(), 1);
        let dns = Dns { nameservers: vec!["10.0.0.1".into()], domain: Some("a".into()), ..Dns::default() };
        r.merge_dns(&dns);
        r.merge_dns(&dns);
        assert_eq!(r.dns, dns);
        assert!(!r.has_family(crate::addr::Family::V4));
    }
}
