//! End to end: Debian's `bridge` and `macvlan` plugins (containernetworking-
//! plugins, in /usr/lib/cni) run as a runtime runs them, in real network
//! namespaces, with `ipam-delegated` and the real delegates as their IPAM.
//! ADD must configure the address the result names inside the namespace,
//! CHECK must pass, DEL must remove the interface and free the lease.
//!
//! These need root, `ip` (iproute2) and the plugins, so they are
//! `#[ignore]`d: a plain `cargo test` lists them as ignored, and scripts/test
//! runs them with `--ignored` where it can (and must, in CI). Each one checks
//! its prerequisites first and fails loudly when one is missing. Everything a
//! test creates (namespaces, bridges, links) is removed by guards, also when
//! it fails; names carry the test process's id and a counter, so tests run in
//! parallel. Addresses stay in 10.0.0.0/8 and fd00::/8; no traffic is sent.

mod netns;
mod stack;
mod support;

use std::net::IpAddr;

use netns::{prerequisites, subnet_tag, unique, veth_master, Link, Netns, PLUGINS};
use serde_json::{json, Value};
use stack::addresses;
use support::{bin_dir, Outcome, Sandbox};

/// The spec versions covered one by one; CHECK exists from 0.4.0 on.
const COVERED: [&str; 3] = ["1.0.0", "0.4.0", "0.3.1"];
/// What the suite speaks (docs/contract.md).
const SUITE_VERSIONS: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Runs the main plugin `plugin` of /usr/lib/cni as a runtime would, for the
/// container `container` in `netns` with CNI_IFNAME=eth0 and CNI_PATH =
/// /usr/lib/cni, then the suite's binaries.
fn main_plugin(
    sb: &Sandbox,
    plugin: &str,
    command: &str,
    config: &Value,
    container: &str,
    netns: &Netns,
    extra: &[(&str, &str)],
) -> Outcome {
    let cni_path = format!("{PLUGINS}:{}", bin_dir().display());
    let netns_path = netns.path();
    let mut overrides = vec![
        ("CNI_CONTAINERID", container),
        ("CNI_NETNS", netns_path.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", cni_path.as_str()),
    ];
    overrides.extend_from_slice(extra);
    let env = sb.env(command, &overrides);
    sb.cni_env(&format!("{PLUGINS}/{plugin}"), &env, config.to_string().as_bytes())
}

/// The spec versions a plugin says it speaks.
fn supported_versions(plugin: &str) -> Vec<String> {
    let sb = Sandbox::new();
    let out = sb.cni_raw(&format!("{PLUGINS}/{plugin}"), "VERSION", br#"{"cniVersion": "1.0.0"}"#, &[]);
    let versions = &out.result()["supportedVersions"];
    versions
        .as_array()
        .unwrap_or_else(|| panic!("{plugin} VERSION: {out:#?}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn at_least_0_4_0(version: &str) -> bool {
    !matches!(version, "0.1.0" | "0.2.0" | "0.3.0" | "0.3.1")
}

/// One pool for IPv4, and with `dual` one for IPv6, on subnets unique to the scenario.
fn pools(dual: bool) -> (Value, Vec<ipnet_lite::Net>) {
    let tag = subnet_tag();
    let v4 = format!("10.70.{tag}.0/24");
    let v6 = format!("fd00:70:{tag:x}::/64");
    let mut pools = vec![json!({"name": "e2e4", "ranges": [{"subnet": v4}]})];
    let mut nets = vec![ipnet_lite::Net::parse(&v4)];
    if dual {
        pools.push(json!({"name": "e2e6", "ranges": [{"subnet": v6}]}));
        nets.push(ipnet_lite::Net::parse(&v6));
    }
    (Value::Array(pools), nets)
}

/// The main plugin's part of a scenario: what to add to the configuration,
/// and what must exist for it (kept alive for the scenario).
struct Main {
    plugin: &'static str,
    fields: Value,
    _links: Vec<Link>,
}

fn bridge() -> Main {
    let name = unique("ib");
    Main {
        plugin: "bridge",
        fields: json!({"bridge": name, "isGateway": false, "ipMasq": false}),
        _links: vec![Link { name }],
    }
}

/// macvlan on one end of a veth pair (this kernel has no dummy links).
fn macvlan() -> Main {
    let master = veth_master();
    Main { plugin: "macvlan", fields: json!({"master": master.name, "mode": "bridge"}), _links: vec![master] }
}

/// ADD, CHECK (from 0.4.0 on), DEL through the main plugin, then a static
/// ADD of another container for the freed addresses.
fn lifecycle(main: Main, version: &str, dual: bool) {
    let sb = Sandbox::new();
    let (pools, nets) = pools(dual);
    let network = format!("e2e-{}-{}", main.plugin, unique("n"));
    let mut config = stack::config(version, &network, main.plugin, &sb.db(), pools);
    for (k, v) in main.fields.as_object().unwrap() {
        config[k] = v.clone();
    }
    let what = format!("{} {version} {}", main.plugin, if dual { "dual-stack" } else { "IPv4" });

    // ADD: the result's addresses are configured on eth0 in the namespace.
    let first = Netns::new();
    let add = main_plugin(&sb, main.plugin, "ADD", &config, "e2e-first", &first, &[]);
    assert_eq!(add.status, 0, "{what}: ADD: {add:#?}");
    let result = add.result().clone();
    let ips = addresses(&result);
    assert_eq!(ips.len(), nets.len(), "{what}: one address per family: {result}");
    for (ip, net) in ips.iter().zip(&nets) {
        assert!(net.contains(*ip), "{what}: {ip} is not in {net:?}: {result}");
    }
    assert_configured(&first, &ips, &nets, &format!("{what}: after ADD"));
    let rows = stack::leases(&sb.db());
    assert_eq!(rows.len(), ips.len(), "{what}: the database after ADD: {rows:?}");
    assert!(rows.iter().all(|r| r.container_id == "e2e-first" && r.ifname == "eth0" && ips.contains(&r.address)));

    // CHECK, which the spec has from 0.4.0 on.
    let with_prev = support::with_prev(&config, &result);
    if at_least_0_4_0(version) {
        let check = main_plugin(&sb, main.plugin, "CHECK", &with_prev, "e2e-first", &first, &[]);
        assert_eq!((check.status, check.stdout.as_str()), (0, ""), "{what}: CHECK: {check:#?}");
    }

    // DEL: the interface is gone and so is the lease.
    let del = main_plugin(&sb, main.plugin, "DEL", &with_prev, "e2e-first", &first, &[]);
    assert_eq!((del.status, del.stdout.as_str()), (0, ""), "{what}: DEL: {del:#?}");
    assert!(!first.has_link("eth0"), "{what}: eth0 is still in {} after DEL", first.name);
    assert_eq!(stack::leases(&sb.db()), Vec::new(), "{what}: a lease is left after DEL");

    // Another container asks for exactly the freed addresses and gets them:
    // through CNI_ARGS IP= (with IgnoreUnknown=1 for the main plugin) for
    // 0.3.1, through args.cni.ips otherwise.
    let second = Netns::new();
    let list: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    let cni_args = format!("IgnoreUnknown=1;IP={}", list.join(","));
    let again = if version == "0.3.1" {
        main_plugin(&sb, main.plugin, "ADD", &config, "e2e-second", &second, &[("CNI_ARGS", cni_args.as_str())])
    } else {
        main_plugin(&sb, main.plugin, "ADD", &stack::with_static(&config, &ips), "e2e-second", &second, &[])
    };
    assert_eq!(again.status, 0, "{what}: static ADD of the freed {list:?}: {again:#?}");
    assert_eq!(addresses(again.result()), ips, "{what}: static ADD of the freed addresses: {again:#?}");
    assert_configured(&second, &ips, &nets, &format!("{what}: after the static ADD"));
    let del =
        main_plugin(&sb, main.plugin, "DEL", &support::with_prev(&config, again.result()), "e2e-second", &second, &[]);
    assert_eq!(del.status, 0, "{what}: DEL of the second container: {del:#?}");
    assert_eq!(stack::leases(&sb.db()), Vec::new(), "{what}: a lease is left after the second DEL");
}

/// Each of `ips` is on eth0 in `netns` with its subnet's prefix length (an
/// IPv6 address may still be tentative: its flags do not matter).
fn assert_configured(netns: &Netns, ips: &[IpAddr], nets: &[ipnet_lite::Net], what: &str) {
    let configured = netns.addresses("eth0");
    for (ip, net) in ips.iter().zip(nets) {
        assert!(
            configured.contains(&(*ip, net.prefix)),
            "{what}: {ip}/{} is not on eth0 in {}; it has {configured:?}",
            net.prefix,
            netns.name
        );
    }
}

/// Just enough of an IP network for these checks.
mod ipnet_lite {
    use std::net::IpAddr;

    #[derive(Debug, Clone, Copy)]
    pub struct Net {
        pub addr: IpAddr,
        pub prefix: u64,
    }

    impl Net {
        pub fn parse(cidr: &str) -> Net {
            let (addr, prefix) = cidr.split_once('/').unwrap();
            Net { addr: addr.parse().unwrap(), prefix: prefix.parse().unwrap() }
        }

        pub fn contains(&self, ip: IpAddr) -> bool {
            let bits = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => (u32::from(v4) as u128) << 96,
                IpAddr::V6(v6) => u128::from(v6),
            };
            if ip.is_ipv4() != self.addr.is_ipv4() {
                return false;
            }
            // IPv4 sits in the top 32 bits, so the prefix counts from the top either way.
            let shift = 128 - self.prefix as u32;
            let mask = if shift >= 128 { 0 } else { u128::MAX << shift };
            bits(ip) & mask == bits(self.addr) & mask
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn the_plugins_speak_the_versions_covered_here() {
    prerequisites();
    for plugin in ["bridge", "macvlan"] {
        let versions = supported_versions(plugin);
        for v in COVERED {
            assert!(versions.iter().any(|s| s == v), "{plugin} does not speak {v}: {versions:?}");
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn bridge_1_0_0_ipv4_and_dual_stack() {
    prerequisites();
    lifecycle(bridge(), "1.0.0", false);
    lifecycle(bridge(), "1.0.0", true);
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn bridge_0_4_0_ipv4_and_dual_stack() {
    prerequisites();
    lifecycle(bridge(), "0.4.0", false);
    lifecycle(bridge(), "0.4.0", true);
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn bridge_0_3_1_ipv4_and_dual_stack() {
    prerequisites();
    lifecycle(bridge(), "0.3.1", false);
    lifecycle(bridge(), "0.3.1", true);
}

/// Every other version both the bridge and the suite speak (0.1.0, 0.2.0 and
/// 0.3.0 with Debian's 1.1.1): the legacy result shapes through a real plugin.
#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn bridge_every_other_common_version() {
    prerequisites();
    let others: Vec<String> = supported_versions("bridge")
        .into_iter()
        .filter(|v| SUITE_VERSIONS.contains(&v.as_str()) && !COVERED.contains(&v.as_str()))
        .collect();
    eprintln!("bridge: also covering {others:?}");
    for version in &others {
        lifecycle(bridge(), version, false);
        lifecycle(bridge(), version, true);
    }
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn macvlan_on_a_veth_master() {
    prerequisites();
    lifecycle(macvlan(), "1.0.0", false);
    lifecycle(macvlan(), "1.0.0", true);
    lifecycle(macvlan(), "0.4.0", false);
}
