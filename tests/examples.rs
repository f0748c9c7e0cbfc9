//! Every example of examples/ run as a runtime would run it, so that the
//! examples cannot rot: the IPAM plugin `ipam-delegated` called directly (as
//! the main plugin calls it) with the suite's executables in CNI_PATH, and,
//! as root with Debian's containernetworking-plugins, the real main plugin in
//! a network namespace, run itself in a namespace that plays the host, so
//! that the machine's own is left as it was.
//!
//! A new example without a case here fails [`every_example_has_a_case`].

mod netns;
mod support;

use std::path::{Path, PathBuf};

use ipam_ds_cluster::etcd::testing::TestEtcd;
use netns::{leaving_the_host_as_found, prerequisites, unique, veth_master_in, Netns, PLUGINS};
use serde_json::{json, Value};
use support::sticky::pod;
use support::{addresses, assert_error, bin_dir, list_leases as leases, Sandbox};

const DELEGATED: &str = "ipam-delegated";

/// The examples that have a case below, by file stem.
const CASES: [&str; 9] =
    ["bridge", "cluster", "dual-stack", "ip-ranges", "macvlan", "per-namespace", "spillover", "static", "sticky"];

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The stems of examples/*.conflist, sorted.
fn example_stems() -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("reading examples/")
        .map(|entry| entry.expect("examples/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "conflist"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

/// One example, read as a runtime reads it from /etc/cni/net.d/.
struct Example {
    stem: String,
    conflist: Value,
}

impl Example {
    fn load(stem: &str) -> Example {
        let path = examples_dir().join(format!("{stem}.conflist"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let conflist = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        Example { stem: stem.to_string(), conflist }
    }

    /// The one plugin of the list whose IPAM is ipam-delegated.
    fn plugin(&self) -> &Value {
        let plugins: Vec<&Value> = self.conflist["plugins"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no plugins array", self.stem))
            .iter()
            .filter(|p| p["ipam"]["type"] == DELEGATED)
            .collect();
        assert_eq!(plugins.len(), 1, "{}: expected one plugin with ipam-delegated", self.stem);
        plugins[0]
    }

    /// The plugin's network configuration as a runtime builds it: the plugin
    /// object with the list's `cniVersion` and `name`, and `runtimeConfig`
    /// (each key must be a capability the plugin declares), with
    /// `ipam.database` replaced by `db`.
    fn config(&self, db: &Path, runtime_config: Option<Value>) -> Value {
        let plugin = self.plugin();
        let mut config = plugin.clone();
        config["cniVersion"] = self.conflist["cniVersion"].clone();
        config["name"] = self.conflist["name"].clone();
        config["ipam"]["database"] = json!(db.to_str().unwrap());
        if let Some(rc) = runtime_config {
            for key in rc.as_object().expect("runtimeConfig is an object").keys() {
                assert_eq!(
                    plugin["capabilities"][key],
                    json!(true),
                    "{}: the plugin does not declare the capability {key:?}, so a runtime would not pass it",
                    self.stem
                );
            }
            config["runtimeConfig"] = rc;
        }
        config
    }
}

/// The operator's lease listing of `db` as JSON.
#[test]
fn every_example_has_a_case() {
    assert_eq!(example_stems(), CASES, "every examples/*.conflist needs a case in tests/examples.rs, and only those");
    let readme = std::fs::read_to_string(examples_dir().join("README.md")).expect("examples/README.md");
    for stem in CASES {
        assert!(readme.contains(&format!("`{stem}.conflist`")), "examples/README.md does not describe {stem}.conflist");
    }
}

/// One pool: the first address is rangeStart (usable in a /16), the excluded
/// /28 is skipped once the addresses before it are taken, and the result
/// carries the pool's gateway, route and DNS.
#[test]
fn bridge() {
    let sb = Sandbox::new();
    let config = Example::load("bridge").config(&sb.db(), None);
    let first = sb.add(&config, "ex-0");
    assert_eq!(
        first.result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.22.1.0/16", "gateway": "10.22.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.22.0.1"]}
        })
    );
    for i in 1..128 {
        let out = sb.add(&config, &format!("ex-{i}"));
        assert_eq!(addresses(&out), [format!("10.22.1.{i}/16")], "ADD number {i}");
    }
    // 10.22.1.128/28 is excluded: after 10.22.1.127 comes 10.22.1.144.
    let past = sb.add(&config, "ex-128");
    assert_eq!(addresses(&past), ["10.22.1.144/16"]);
    let again = sb.add(&config, "ex-129");
    assert_eq!(addresses(&again), ["10.22.1.145/16"]);
}

/// One address space across two nodes (two node names, two databases, one
/// real etcd): each node's first ADD claims a block of each pool, the nodes'
/// addresses differ, each lies in a block its node owns, and DEL leaves no
/// lease and no address record.
#[test]
fn cluster() {
    let etcd = TestEtcd::start();
    let example = Example::load("cluster");
    let nodes: Vec<(Sandbox, Value)> = ["node-a", "node-b"]
        .into_iter()
        .map(|node| {
            let sb = Sandbox::new();
            let mut config = example.config(&sb.db(), None);
            config["ipam"]["cluster"]["etcd"]["endpoints"] = json!([etcd.endpoint()]);
            config["ipam"]["cluster"]["node"] = json!(node);
            (sb, config)
        })
        .collect();
    let mut seen: Vec<String> = Vec::new();
    for (i, (sb, config)) in nodes.iter().enumerate() {
        for c in 0..3 {
            let got = addresses(&sb.add(config, &format!("ex-{i}-{c}")));
            assert_eq!(got.len(), 2, "one IPv4 and one IPv6 address: {got:?}");
            assert!(got[0].starts_with("10.80.") && got[0].ends_with("/16"), "{got:?}");
            assert!(got[1].starts_with("fd00:80:") && got[1].ends_with("/64"), "{got:?}");
            for address in got {
                assert!(!seen.contains(&address), "{address} handed out twice");
                seen.push(address);
            }
        }
    }
    let blocks = etcd.dump("/ipam-delegated/v1/cluster-net/cluster4/blocks/");
    let owners: Vec<&str> =
        blocks.iter().map(|(_, v)| if v.contains("\"node-a\"") { "node-a" } else { "node-b" }).collect();
    assert_eq!(owners.len(), 2, "one IPv4 block per node: {blocks:?}");
    assert!(owners.contains(&"node-a") && owners.contains(&"node-b"), "{blocks:?}");
    for (i, (sb, config)) in nodes.iter().enumerate() {
        for c in 0..3 {
            let out = sb.cni(DELEGATED, "DEL", config, &[("CNI_CONTAINERID", &format!("ex-{i}-{c}"))]);
            assert_eq!((out.status, out.stdout.trim()), (0, ""), "{out:#?}");
        }
        assert_eq!(leases(&sb.db()), json!([]), "leases after DEL");
    }
    assert_eq!(etcd.dump("/ipam-delegated/v1/cluster-net/cluster4/addrs/"), Vec::new());
}

/// Part of the LAN's subnet: the dynamic range starts at 10.30.0.100; the
/// route names its gateway.
#[test]
fn macvlan() {
    let sb = Sandbox::new();
    let config = Example::load("macvlan").config(&sb.db(), None);
    assert_eq!(
        sb.add(&config, "ex-0").result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.30.0.100/24", "gateway": "10.30.0.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.30.0.1"}],
            "dns": {}
        })
    );
    assert_eq!(addresses(&sb.add(&config, "ex-1")), ["10.30.0.101/24"]);
}

/// One IPv4 and one IPv6 address per attachment, each after its pool's gateway.
#[test]
fn dual_stack() {
    let sb = Sandbox::new();
    let config = Example::load("dual-stack").config(&sb.db(), None);
    assert_eq!(
        sb.add(&config, "ex-0").result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [
                {"address": "10.50.0.2/24", "gateway": "10.50.0.1"},
                {"address": "fd00:50::2/64", "gateway": "fd00:50::1"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dns": {}
        })
    );
    assert_eq!(addresses(&sb.add(&config, "ex-1")), ["10.50.0.3/24", "fd00:50::3/64"]);
}

/// The /29 has five addresses to hand out (.2-.6; .1 is the gateway); the
/// sixth attachment spills over into the overflow pool, and an address freed
/// in the small pool is used again before the overflow pool.
#[test]
fn spillover() {
    let sb = Sandbox::new();
    let config = Example::load("spillover").config(&sb.db(), None);
    for i in 2..=6 {
        assert_eq!(addresses(&sb.add(&config, &format!("ex-{i}"))), [format!("10.40.0.{i}/29")]);
    }
    assert_eq!(
        sb.add(&config, "ex-7").result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.41.0.2/24", "gateway": "10.41.0.1"}],
            "routes": [],
            "dns": {}
        })
    );
    assert_eq!(addresses(&sb.add(&config, "ex-8")), ["10.41.0.3/24"]);
    sb.cni(DELEGATED, "DEL", &config, &[("CNI_CONTAINERID", "ex-4")]).assert_quiet_success();
    assert_eq!(addresses(&sb.add(&config, "ex-9")), ["10.40.0.4/29"]);
}

/// The pod's namespace (CNI_ARGS K8S_POD_NAMESPACE) picks the pool; any
/// other namespace, or none, gets the shared pool.
#[test]
fn per_namespace() {
    let sb = Sandbox::new();
    let config = Example::load("per-namespace").config(&sb.db(), None);
    let ns = |name: &str| format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={name};K8S_POD_NAME=web");
    assert_eq!(addresses(&sb.delegated("ADD", &config, "ex-0", &[("CNI_ARGS", &ns("prod"))])), ["10.24.0.2/24"]);
    assert_eq!(addresses(&sb.delegated("ADD", &config, "ex-1", &[("CNI_ARGS", &ns("prod"))])), ["10.24.0.3/24"]);
    assert_eq!(addresses(&sb.delegated("ADD", &config, "ex-2", &[("CNI_ARGS", &ns("staging"))])), ["10.25.0.2/24"]);
    assert_eq!(addresses(&sb.delegated("ADD", &config, "ex-3", &[("CNI_ARGS", &ns("dev"))])), ["10.26.0.2/24"]);
    assert_eq!(addresses(&sb.add(&config, "ex-4")), ["10.26.0.3/24"]);
}

/// Each request source yields exactly the address asked for (outside the
/// dynamic range 10.60.0.100-199), the first present source wins, and the
/// IPv6 address comes from sequential allocation.
#[test]
fn static_addresses() {
    let sb = Sandbox::new();
    let example = Example::load("static");
    let plain = example.config(&sb.db(), None);
    let with_ips = |ips: &[&str]| example.config(&sb.db(), Some(json!({"ips": ips})));
    let with_args = |config: &Value, ips: &[&str]| {
        let mut config = config.clone();
        config["args"] = json!({"cni": {"ips": ips}});
        config
    };

    let from_capability = sb.add(&with_ips(&["10.60.0.7/24"]), "ex-0");
    assert_eq!(
        from_capability.result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [
                {"address": "10.60.0.7/24", "gateway": "10.60.0.1"},
                {"address": "fd00:60::2/64", "gateway": "fd00:60::1"}
            ],
            "routes": [],
            "dns": {}
        })
    );
    let from_args = sb.add(&with_args(&plain, &["10.60.0.8"]), "ex-1");
    assert_eq!(addresses(&from_args), ["10.60.0.8/24", "fd00:60::3/64"]);
    let from_cni_args = sb.delegated("ADD", &plain, "ex-2", &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.60.0.9")]);
    assert_eq!(addresses(&from_cni_args), ["10.60.0.9/24", "fd00:60::4/64"]);

    // Precedence: runtimeConfig.ips, then args.cni.ips, then CNI_ARGS IP.
    let all_three = sb.delegated(
        "ADD",
        &with_args(&with_ips(&["10.60.0.10"]), &["10.60.0.11"]),
        "ex-3",
        &[("CNI_ARGS", "IP=10.60.0.12")],
    );
    assert_eq!(addresses(&all_three), ["10.60.0.10/24", "fd00:60::5/64"]);
    let two = sb.delegated("ADD", &with_args(&plain, &["10.60.0.11"]), "ex-4", &[("CNI_ARGS", "IP=10.60.0.12")]);
    assert_eq!(addresses(&two), ["10.60.0.11/24", "fd00:60::6/64"]);

    // Without a request, both families are sequential.
    assert_eq!(addresses(&sb.add(&plain, "ex-5")), ["10.60.0.100/24", "fd00:60::7/64"]);
    // An address already held is error 101, and nothing of the ADD stays.
    let taken = sb.delegated("ADD", &plain, "ex-6", &[("CNI_ARGS", "IP=10.60.0.7")]);
    assert_eq!(taken.code(), 101);
    let listed = leases(&sb.db());
    let mut holders: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|l| l["container_id"].as_str()).collect();
    holders.sort_unstable();
    holders.dedup();
    assert_eq!(holders, ["ex-0", "ex-1", "ex-2", "ex-3", "ex-4", "ex-5"], "the failed ADD must leave no lease");
    assert_eq!(listed.as_array().unwrap().len(), 12);
}

/// The pod prod/db-0 deleted and created again under a new container id
/// gets its address back; meanwhile the address is held for it: another pod
/// gets another one, and a static request for it is 101 naming the
/// identity. An attachment without identity is not sticky.
#[test]
fn sticky() {
    let sb = Sandbox::new();
    let config = Example::load("sticky").config(&sb.db(), None);
    assert_eq!(
        sb.delegated("ADD", &config, "ex-0", &[("CNI_ARGS", &pod("db-0"))]).result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.45.0.10/24", "gateway": "10.45.0.1"}],
            "routes": [],
            "dns": {}
        })
    );
    sb.cni(DELEGATED, "DEL", &config, &[("CNI_CONTAINERID", "ex-0")]).assert_quiet_success();
    let listed = leases(&sb.db());
    assert_eq!(
        (&listed[0]["address"], &listed[0]["state"], &listed[0]["identity"]),
        (&json!("10.45.0.10"), &json!("held"), &json!("prod/db-0")),
        "{listed}"
    );
    assert_eq!(addresses(&sb.delegated("ADD", &config, "ex-1", &[("CNI_ARGS", &pod("db-1"))])), ["10.45.0.11/24"]);
    let asked = format!("{};IP=10.45.0.10", pod("web-0"));
    assert_error(&sb.delegated("ADD", &config, "ex-2", &[("CNI_ARGS", &asked)]), 101, &["prod/db-0"]);
    assert_eq!(
        addresses(&sb.delegated("ADD", &config, "ex-3", &[("CNI_ARGS", &pod("db-0"))])),
        ["10.45.0.10/24"],
        "db-0 re-created"
    );
    assert_eq!(addresses(&sb.add(&config, "ex-4")), ["10.45.0.12/24"], "no identity");
}

/// The runtime hands out the range (`ipRanges` capability) and it becomes
/// the pool `ipRanges-0`; without it the example has no pool at all.
#[test]
fn ip_ranges() {
    let sb = Sandbox::new();
    let example = Example::load("ip-ranges");
    let ranges =
        json!({"ipRanges": [[{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.50", "rangeEnd": "10.70.0.60"}]]});
    let given = sb.add(&example.config(&sb.db(), Some(ranges)), "ex-0");
    assert_eq!(
        given.result(),
        &json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.70.0.50/24", "gateway": "10.70.0.1"}],
            "routes": [],
            "dns": {}
        })
    );
    let listed = leases(&sb.db());
    assert_eq!((&listed[0]["pool"], &listed[0]["address"]), (&json!("ipRanges-0"), &json!("10.70.0.50")));

    let (code, msg, _) = sb.add(&example.config(&sb.db(), None), "ex-1").error();
    assert_eq!(code, 7);
    assert!(msg.contains("ipam.pools"), "{msg}");
}

// ---------------------------------------------------------------------------
// Through Debian's real main plugins

/// What a real-plugin run of an example asks for and must get.
struct RealCase {
    runtime_config: Option<Value>,
    cni_args: Option<&'static str>,
    addresses: &'static [&'static str],
    /// How many addresses DEL leaves held for the attachment's identity.
    held: usize,
}

fn real_case(stem: &str) -> Option<RealCase> {
    let plain = |addresses| RealCase { runtime_config: None, cni_args: None, addresses, held: 0 };
    Some(match stem {
        "bridge" => plain(&["10.22.1.0/16"]),
        "macvlan" => plain(&["10.30.0.100/24"]),
        "dual-stack" => plain(&["10.50.0.2/24", "fd00:50::2/64"]),
        "spillover" => plain(&["10.40.0.2/29"]),
        "per-namespace" => {
            RealCase { cni_args: Some("IgnoreUnknown=1;K8S_POD_NAMESPACE=staging"), ..plain(&["10.25.0.2/24"]) }
        }
        "static" => RealCase {
            runtime_config: Some(json!({"ips": ["10.60.0.7/24"]})),
            ..plain(&["10.60.0.7/24", "fd00:60::2/64"])
        },
        // It needs an etcd reachable from the namespace that plays the host:
        // tests/walkthrough.rs's example_cluster starts one there and runs the
        // example through Debian's bridge; tests/cluster_e2e.rs's end-to-end
        // test runs two nodes.
        "cluster" => return None,
        "ip-ranges" => RealCase {
            runtime_config: Some(json!({"ipRanges": [[{"subnet": "10.70.0.0/24", "rangeStart": "10.70.0.50"}]]})),
            ..plain(&["10.70.0.50/24"])
        },
        "sticky" => RealCase {
            cni_args: Some("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0"),
            held: 1,
            ..plain(&["10.45.0.10/24"])
        },
        other => panic!("no real-plugin case for examples/{other}.conflist"),
    })
}

/// Each example through its real main plugin (bridge, or macvlan on a veth
/// made for it) in a namespace of its own: the IPAM result's addresses are
/// on eth0 in the namespace, and DEL leaves no lease behind.
///
/// The main plugin runs as a runtime runs it, but in a network namespace that
/// plays the host ([`Netns::host`], through `ip netns exec`), not in the
/// machine's own: the bridge, the host ends of the veths, the macvlan master
/// (a veth pair made there) and the forwarding that `isGateway` turns on stay
/// in it and go with it. The test checks that they did: forwarding is on in
/// the host namespace after an `isGateway` example, and the machine's own
/// forwarding sysctls, links and `ip netns` entries are as before
/// ([`leaving_the_host_as_found`]). The bridge name is made unique and
/// `ipMasq` is turned off (no iptables); no traffic is sent.
#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn through_the_real_main_plugin() {
    prerequisites();
    leaving_the_host_as_found("tests/examples.rs through_the_real_main_plugin", || {
        for (i, stem) in example_stems().iter().enumerate() {
            through_the_real_main_plugin_in_a_host_namespace(i, stem);
        }
    });
}

fn through_the_real_main_plugin_in_a_host_namespace(i: usize, stem: &str) {
    let Some(case) = real_case(stem) else { return };
    let example = Example::load(stem);
    let sb = Sandbox::new();
    let host = Netns::host();
    let netns = Netns::new();
    let mut config = example.config(&sb.db(), case.runtime_config);
    let plugin_type = config["type"].as_str().expect("type").to_string();
    match plugin_type.as_str() {
        "bridge" => {
            // Made by the plugin inside the host namespace; goes with it.
            config["bridge"] = json!(unique("ib"));
            if config.get("ipMasq").is_some() {
                config["ipMasq"] = json!(false);
            }
        }
        "macvlan" => config["master"] = json!(veth_master_in(&host)),
        other => panic!("{stem}: no real-plugin setup for main plugin type {other:?}"),
    }
    let exe = Path::new(PLUGINS).join(&plugin_type);
    let netns_path = netns.path();
    let cni_path = format!("{}:{PLUGINS}", bin_dir().display());
    let container = format!("real-{i}");
    let mut overrides = vec![
        ("CNI_NETNS", netns_path.as_str()),
        ("CNI_PATH", cni_path.as_str()),
        ("CNI_CONTAINERID", container.as_str()),
    ];
    if let Some(args) = case.cni_args {
        overrides.push(("CNI_ARGS", args));
    }
    let run = |command: &str| {
        let env = sb.env(command, &overrides);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        host.run(&exe, &[], &env, config.to_string().as_bytes(), Some(&sb.workdir()))
    };

    let added = run("ADD");
    assert_eq!(added.status, 0, "{stem}: ADD through {plugin_type} in {}: {added:#?}", host.name);
    let got = addresses(&added);
    assert_eq!(got, case.addresses, "{stem}: the result's addresses");
    let on_eth0: Vec<String> = netns.addresses("eth0").iter().map(|(a, p)| format!("{a}/{p}")).collect();
    for address in &got {
        assert!(on_eth0.contains(address), "{stem}: {address} is not on eth0 in {}: {on_eth0:?}", netns.name);
    }
    assert_eq!(leases(&sb.db()).as_array().unwrap().len(), got.len(), "{stem}: leases after ADD");
    // isGateway turns forwarding on (IPv6 too for an IPv6 pool), where the
    // plugin ran: in the host namespace.
    let gateway = config["isGateway"] == true;
    let ipv6 = got.iter().any(|a| a.contains(':'));
    let on = |yes: bool| if yes { "1" } else { "0" }.to_string();
    assert_eq!(host.forwarding(), [on(gateway), on(gateway && ipv6)], "{stem}: forwarding in {}", host.name);

    let deleted = run("DEL");
    assert_eq!((deleted.status, deleted.stdout.trim()), (0, ""), "{stem}: DEL through {plugin_type}: {deleted:#?}");
    // No lease stays; a sticky example's address stays held for its identity.
    let left = leases(&sb.db());
    let states: Vec<&Value> = left.as_array().unwrap().iter().map(|row| &row["state"]).collect();
    assert_eq!(states, vec![&json!("held"); case.held], "{stem}: what DEL leaves: {left}");
}
