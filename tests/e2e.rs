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

mod stack;
mod support;

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};
use stack::addresses;
use support::{bin_dir, Outcome, Sandbox};

const PLUGINS: &str = "/usr/lib/cni";
/// The spec versions covered one by one; CHECK exists from 0.4.0 on.
const COVERED: [&str; 3] = ["1.0.0", "0.4.0", "0.3.1"];
/// What the suite speaks (CONTRACT.md).
const SUITE_VERSIONS: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Fails the test, naming what is missing, unless it runs as root with the
/// plugins and `ip` at hand. Never lets a test pass without doing its work.
fn prerequisites() {
    let mut missing = Vec::new();
    // SAFETY: a plain syscall.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        missing.push(format!("root (running as uid {uid})"));
    }
    for plugin in ["bridge", "macvlan"] {
        let path = Path::new(PLUGINS).join(plugin);
        let executable = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !executable {
            missing.push(format!("{} (apt-get install containernetworking-plugins)", path.display()));
        }
    }
    if !Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
        missing.push("the ip command (apt-get install iproute2)".to_string());
    }
    assert!(
        missing.is_empty(),
        "this end-to-end test cannot run; missing: {}. Run it as root with containernetworking-plugins and iproute2 \
         installed (bash scripts/test does).",
        missing.join(", ")
    );
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name unique to this process and call, at most 15 characters for a
/// 2-character prefix (the kernel's limit for link names).
fn unique(prefix: &str) -> String {
    format!("{prefix}{}x{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A number unique to this process's scenarios, for their subnets.
fn subnet_tag() -> usize {
    100 + COUNTER.fetch_add(1, Ordering::Relaxed) % 150
}

fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).stdin(Stdio::null()).output().expect("running ip")
}

fn ip_ok(args: &[&str]) {
    let out = ip(args);
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// A network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        let name = format!("ipam-e2e-{}", unique("n"));
        ip_ok(&["netns", "add", &name]);
        Netns { name }
    }

    fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// The addresses on `dev` inside the namespace, with their prefix lengths.
    fn addresses(&self, dev: &str) -> Vec<(IpAddr, u64)> {
        let out = ip(&["-n", &self.name, "-j", "addr", "show", "dev", dev]);
        assert!(
            out.status.success(),
            "ip -n {} addr show dev {dev}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let links: Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
        links
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| Some((a["local"].as_str()?.parse().ok()?, a["prefixlen"].as_u64()?)))
            .collect()
    }

    fn has_link(&self, dev: &str) -> bool {
        ip(&["-n", &self.name, "link", "show", dev]).status.success()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A link in the root namespace (a bridge the plugin makes, a veth pair we
/// make), deleted on drop if it exists.
struct Link {
    name: String,
}

impl Drop for Link {
    fn drop(&mut self) {
        if ip(&["link", "show", &self.name]).status.success() {
            let _ = ip(&["link", "del", &self.name]);
        }
    }
}

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

/// macvlan on one end of a veth pair (this kernel has no dummy links); the
/// pair goes with the guard of its first end.
fn macvlan() -> Main {
    let (master, peer) = (unique("mv"), unique("mp"));
    let guard = Link { name: master.clone() };
    ip_ok(&["link", "add", &master, "type", "veth", "peer", "name", &peer]);
    // Both ends up: with no carrier, IPv6 duplicate address detection never
    // ends and the plugin waits 10 s for the address to settle.
    ip_ok(&["link", "set", &master, "up"]);
    ip_ok(&["link", "set", &peer, "up"]);
    Main { plugin: "macvlan", fields: json!({"master": master, "mode": "bridge"}), _links: vec![guard] }
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
    let with_prev = stack::with_prev(&config, &result);
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
        main_plugin(&sb, main.plugin, "DEL", &stack::with_prev(&config, again.result()), "e2e-second", &second, &[]);
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
