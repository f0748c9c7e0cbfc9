//! The allocation delegates through the real stack: ipam-delegated running
//! ipam-ds-pool, ipam-da-static and ipam-da-sequential on one allocation
//! database. Each test asserts the exact addresses a user gets, the error
//! codes of the contract, and what the database holds afterwards — through
//! the plugins' own interface where it can show it, else by reading the
//! SQLite file read-only with the `sqlite3` shell, as an administrator would.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::{addresses, assert_error, with, Outcome, Sandbox, FULL_STACK};

const DELEGATED: &str = "ipam-delegated";

/// A network configuration named `name` whose IPAM is the suite's real stack
/// on the sandbox's database with `pools`.
fn network(sb: &Sandbox, version: &str, name: &str, pools: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": name,
        "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": FULL_STACK, "database": sb.db(), "pools": pools}
    })
}

/// The one address of a successful single-family ADD.
fn address(out: &Outcome) -> String {
    let all = addresses(out);
    assert_eq!(all.len(), 1, "one address expected: {out:#?}");
    all.into_iter().next().unwrap()
}

/// Runs a query on the database with `sqlite3 -readonly`; one string per row,
/// columns joined by `|`.
fn sql(db: &Path, query: &str) -> Vec<String> {
    let out = Command::new("sqlite3").arg("-readonly").arg(db).arg(query).output().expect("running sqlite3");
    assert!(out.status.success(), "sqlite3 {query:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect()
}

/// Every lease as "address|pool|network|container|ifname", in address order.
fn leases(sb: &Sandbox) -> Vec<String> {
    sql(&sb.db(), "select address, pool, network, container_id, ifname from leases order by key")
}

/// Every pool row with its round-robin cursor, and every lease: what a failed
/// ADD must leave exactly as it was.
fn db_state(sb: &Sandbox) -> Vec<String> {
    let mut state = sql(&sb.db(), "select name, subnets, definition, cursor from pools order by name");
    state.extend(leases(sb));
    state
}

fn rows(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn v4_pool(name: &str, subnet: &str) -> Value {
    json!({"name": name, "ranges": [{"subnet": subnet}]})
}

// ---------------------------------------------------------------------------
// Dynamic allocation

/// The pools of the dual-stack tests: gateways, routes and DNS of their own.
fn dual_stack_pools() -> Value {
    json!([
        {
            "name": "blue4",
            "ranges": [{"subnet": "10.10.0.0/24", "gateway": "10.10.0.254"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.10.0.53"], "search": ["blue.test"]}
        },
        {
            "name": "blue6",
            "ranges": [{"subnet": "fd00:10::/64"}],
            "routes": [{"dst": "::/0", "gw": "fd00:10::1"}],
            "dns": {"nameservers": ["fd00:10::53"]}
        }
    ])
}

#[test]
fn dual_stack_gives_one_address_per_family_in_the_shape_of_each_version() {
    let sb = Sandbox::new();
    let routes = json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00:10::1"}]);
    let dns = json!({"nameservers": ["10.10.0.53", "fd00:10::53"], "search": ["blue.test"]});

    // 1.0.0: ips without "version". rangeStart defaults to the first usable
    // address (the gateway is elsewhere); IPv6's default gateway ::1 is skipped.
    let out = sb.add(&network(&sb, "1.0.0", "blue", dual_stack_pools()), "c10");
    let expected = json!({
        "cniVersion": "1.0.0",
        "ips": [
            {"address": "10.10.0.1/24", "gateway": "10.10.0.254"},
            {"address": "fd00:10::2/64", "gateway": "fd00:10::1"}
        ],
        "routes": routes,
        "dns": dns
    });
    assert_eq!(out.result(), &expected, "{out:#?}");

    // 0.4.0: ips tagged with "version".
    let out = sb.add(&network(&sb, "0.4.0", "blue", dual_stack_pools()), "c04");
    let expected = json!({
        "cniVersion": "0.4.0",
        "ips": [
            {"version": "4", "address": "10.10.0.2/24", "gateway": "10.10.0.254"},
            {"version": "6", "address": "fd00:10::3/64", "gateway": "fd00:10::1"}
        ],
        "routes": routes,
        "dns": dns
    });
    assert_eq!(out.result(), &expected, "{out:#?}");

    // 0.2.0: ip4 and ip6 objects, each with its family's routes.
    let out = sb.add(&network(&sb, "0.2.0", "blue", dual_stack_pools()), "c02");
    let expected = json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.10.0.3/24", "gateway": "10.10.0.254", "routes": [{"dst": "0.0.0.0/0"}]},
        "ip6": {"ip": "fd00:10::4/64", "gateway": "fd00:10::1", "routes": [{"dst": "::/0", "gw": "fd00:10::1"}]},
        "dns": dns
    });
    assert_eq!(out.result(), &expected, "{out:#?}");

    assert_eq!(
        leases(&sb),
        rows(&[
            "10.10.0.1|blue4|blue|c10|eth0",
            "10.10.0.2|blue4|blue|c04|eth0",
            "10.10.0.3|blue4|blue|c02|eth0",
            "fd00:10::2|blue6|blue|c10|eth0",
            "fd00:10::3|blue6|blue|c04|eth0",
            "fd00:10::4|blue6|blue|c02|eth0",
        ])
    );
}

#[test]
fn sequential_order_skips_gateway_and_excludes_and_goes_round_robin() {
    let sb = Sandbox::new();
    // Allocatable: .10 .11 .13 .15 .20 (gateway .12, excluded .14 and .16-.19).
    let pools = json!([{
        "name": "seq",
        "ranges": [{"subnet": "10.11.0.0/24", "rangeStart": "10.11.0.10", "rangeEnd": "10.11.0.20",
                    "gateway": "10.11.0.12"}],
        "exclude": ["10.11.0.14", "10.11.0.16/30"]
    }]);
    let config = network(&sb, "1.0.0", "seq-net", pools);
    for (ctr, want) in [("c0", "10.11.0.10/24"), ("c1", "10.11.0.11/24"), ("c2", "10.11.0.13/24")] {
        assert_eq!(address(&sb.add(&config, ctr)), want, "{ctr}");
    }
    sb.del(&config, "c0").assert_quiet_success();
    // Round robin: after the last handed-out .13, not back to the freed .10.
    assert_eq!(address(&sb.add(&config, "c3")), "10.11.0.15/24");
    assert_eq!(address(&sb.add(&config, "c4")), "10.11.0.20/24");
    // The end is reached: wraps around to the freed .10.
    assert_eq!(address(&sb.add(&config, "c5")), "10.11.0.10/24");
    assert_error(&sb.add(&config, "c6"), 100, &["IPv4", "seq"]);
    sb.del(&config, "c2").assert_quiet_success();
    assert_eq!(address(&sb.add(&config, "c7")), "10.11.0.13/24");
    assert_eq!(
        leases(&sb),
        rows(&[
            "10.11.0.10|seq|seq-net|c5|eth0",
            "10.11.0.11|seq|seq-net|c1|eth0",
            "10.11.0.13|seq|seq-net|c7|eth0",
            "10.11.0.15|seq|seq-net|c3|eth0",
            "10.11.0.20|seq|seq-net|c4|eth0",
        ])
    );
}

#[test]
fn a_full_pool_spills_over_into_the_next_pool_of_its_family() {
    let sb = Sandbox::new();
    // A /30 has .1 and .2 usable, .1 is its default gateway: one address.
    let pools = json!([
        v4_pool("small", "10.12.0.0/30"),
        {"name": "small6", "ranges": [{"subnet": "fd00:12::/64", "rangeStart": "fd00:12::5", "rangeEnd": "fd00:12::5"}]},
        v4_pool("big", "10.12.1.0/24"),
        {"name": "big6", "ranges": [{"subnet": "fd00:12:1::/64"}]}
    ]);
    let config = network(&sb, "1.0.0", "spill", pools);
    assert_eq!(addresses(&sb.add(&config, "c0")), ["10.12.0.2/30", "fd00:12::5/64"]);
    let out = sb.add(&config, "c1");
    assert_eq!(
        out.result()["ips"],
        json!([
            {"address": "10.12.1.2/24", "gateway": "10.12.1.1"},
            {"address": "fd00:12:1::2/64", "gateway": "fd00:12:1::1"}
        ])
    );
    // Freed room in the first pool is used first again.
    sb.del(&config, "c0").assert_quiet_success();
    assert_eq!(addresses(&sb.add(&config, "c2")), ["10.12.0.2/30", "fd00:12::5/64"]);
    assert_eq!(addresses(&sb.add(&config, "c3")), ["10.12.1.3/24", "fd00:12:1::3/64"]);
}

#[test]
fn a_pool_of_several_ranges_hands_them_out_in_order_with_each_ranges_prefix_and_gateway() {
    let sb = Sandbox::new();
    // 10.24.0.2-.6 (the /29's gateway .1 is skipped), then 10.24.1.10-.11.
    let pools = json!([{"name": "multi", "ranges": [
        {"subnet": "10.24.0.0/29"},
        {"subnet": "10.24.1.0/28", "rangeStart": "10.24.1.10", "rangeEnd": "10.24.1.11"}
    ]}]);
    let config = network(&sb, "1.0.0", "multi", pools);
    let mut got = Vec::new();
    for i in 0..7 {
        let out = sb.add(&config, &format!("c{i}"));
        let ip = &out.result()["ips"][0];
        got.push(format!("{} via {}", ip["address"].as_str().unwrap(), ip["gateway"].as_str().unwrap()));
    }
    assert_eq!(
        got,
        [
            "10.24.0.2/29 via 10.24.0.1",
            "10.24.0.3/29 via 10.24.0.1",
            "10.24.0.4/29 via 10.24.0.1",
            "10.24.0.5/29 via 10.24.0.1",
            "10.24.0.6/29 via 10.24.0.1",
            "10.24.1.10/28 via 10.24.1.1",
            "10.24.1.11/28 via 10.24.1.1",
        ]
    );
    assert_error(&sb.add(&config, "c7"), 100, &["IPv4", "multi"]);
    // Round robin wraps from the last range to the first.
    sb.del(&config, "c1").assert_quiet_success();
    assert_eq!(address(&sb.add(&config, "c8")), "10.24.0.3/29");
}

#[test]
fn exhaustion_is_error_100_naming_the_family_and_leaves_nothing_half_allocated() {
    let sb = Sandbox::new();
    let pools = json!([
        {"name": "one4", "ranges": [{"subnet": "10.13.0.0/24", "rangeStart": "10.13.0.5", "rangeEnd": "10.13.0.5"}]},
        {"name": "many6", "ranges": [{"subnet": "fd00:13::/120"}]}
    ]);
    let config = network(&sb, "1.0.0", "exhaust", pools);
    assert_eq!(addresses(&sb.add(&config, "c0")), ["10.13.0.5/24", "fd00:13::2/120"]);
    // A full pool does not stop the holder's repeated ADD.
    assert_eq!(addresses(&sb.add(&config, "c0")), ["10.13.0.5/24", "fd00:13::2/120"]);
    let before = db_state(&sb);

    // IPv4 is full, IPv6 has room: error 100 about IPv4, and no IPv6 lease
    // (nor cursor move) for c1.
    let out = sb.add(&config, "c1");
    assert_error(&out, 100, &["IPv4", "one4"]);
    assert!(!out.stdout.contains("fd00"), "{out:#?}");
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");

    // Freeing IPv4: the next ADD gets the IPv6 address after c0's, which c1
    // would have taken had it been left leased or the cursor moved.
    sb.del(&config, "c0").assert_quiet_success();
    assert_eq!(addresses(&sb.add(&config, "c2")), ["10.13.0.5/24", "fd00:13::3/120"]);
    assert_eq!(leases(&sb), rows(&["10.13.0.5|one4|exhaust|c2|eth0", "fd00:13::3|many6|exhaust|c2|eth0"]));

    // The other family: IPv6 full, IPv4 has room.
    let pools = json!([
        v4_pool("room4", "10.13.1.0/24"),
        {"name": "one6", "ranges": [{"subnet": "fd00:13:1::/64", "rangeStart": "fd00:13:1::9", "rangeEnd": "fd00:13:1::9"}]}
    ]);
    let config = network(&sb, "1.0.0", "exhaust6", pools);
    assert_eq!(addresses(&sb.add(&config, "d0")), ["10.13.1.2/24", "fd00:13:1::9/64"]);
    let before = db_state(&sb);
    assert_error(&sb.add(&config, "d1"), 100, &["IPv6", "one6"]);
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");
}

#[test]
fn a_pool_with_match_serves_only_attachments_whose_cni_args_carry_it() {
    let sb = Sandbox::new();
    let pools = json!([
        {"name": "prod", "match": {"K8S_POD_NAMESPACE": "prod"}, "ranges": [{"subnet": "10.14.0.0/24"}]},
        v4_pool("general", "10.14.1.0/24")
    ]);
    let config = network(&sb, "1.0.0", "matching", pools);
    let prod = sb.delegated("ADD", &config, "c0", &[("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod")]);
    assert_eq!(address(&prod), "10.14.0.2/24");
    let dev = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "K8S_POD_NAMESPACE=dev")]);
    assert_eq!(address(&dev), "10.14.1.2/24");
    assert_eq!(address(&sb.add(&config, "c2")), "10.14.1.3/24");
    // Nor can a non-matching attachment claim a prod address by name.
    let out = sb.delegated("ADD", &config, "c9", &[("CNI_ARGS", "K8S_POD_NAMESPACE=dev;IP=10.14.0.9")]);
    assert_error(&out, 102, &["10.14.0.9"]);

    // Only a match pool, and the attachment does not match: an error, no lease.
    let only = network(
        &sb,
        "1.0.0",
        "only-prod",
        json!([{"name": "prod2", "match": {"K8S_POD_NAMESPACE": "prod"},
        "ranges": [{"subnet": "10.14.2.0/24"}]}]),
    );
    let before = leases(&sb);
    sb.delegated("ADD", &only, "c3", &[("CNI_ARGS", "K8S_POD_NAMESPACE=dev")]).error();
    assert_eq!(leases(&sb), before);
}

#[test]
fn attachments_narrow_pools_by_name_and_args_wins_over_cni_args() {
    let sb = Sandbox::new();
    let pools = json!([v4_pool("a", "10.15.0.0/24"), v4_pool("b", "10.15.1.0/24"), v4_pool("c", "10.15.2.0/24")]);
    let config = network(&sb, "1.0.0", "narrow", pools);
    assert_eq!(address(&sb.add(&config, "c0")), "10.15.0.2/24");
    assert_eq!(address(&sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IPAM_POOL=b")])), "10.15.1.2/24");
    let args_c = with(&config, "args", json!({"cni": {"pools": ["c"]}}));
    assert_eq!(address(&sb.add(&args_c, "c2")), "10.15.2.2/24");
    assert_eq!(address(&sb.delegated("ADD", &args_c, "c3", &[("CNI_ARGS", "IPAM_POOL=b")])), "10.15.2.3/24");
    // A list of names keeps the configured order: a before c.
    assert_eq!(address(&sb.delegated("ADD", &config, "c4", &[("CNI_ARGS", "IPAM_POOL=c,a")])), "10.15.0.3/24");

    let before = db_state(&sb);
    let out = sb.delegated("ADD", &config, "c5", &[("CNI_ARGS", "IPAM_POOL=b,zzz")]);
    assert_error(&out, 7, &["IPAM_POOL", "\"zzz\""]);
    let out = sb.add(&with(&config, "args", json!({"cni": {"pools": ["nope"]}})), "c6");
    assert_error(&out, 7, &["args.cni.pools", "\"nope\""]);
    assert_eq!(db_state(&sb), before);
}

#[test]
fn runtime_ip_ranges_come_before_the_configured_pools() {
    let sb = Sandbox::new();
    let pools = json!([v4_pool("conf4", "10.16.0.0/24"), {"name": "conf6", "ranges": [{"subnet": "fd00:16::/64"}]}]);
    let ranges = json!({"ipRanges": [[{"subnet": "10.16.5.0/24", "rangeStart": "10.16.5.100"}]]});
    let config = with(&network(&sb, "1.0.0", "ranges", pools), "runtimeConfig", ranges);
    let out = sb.add(&config, "c0");
    assert_eq!(
        out.result()["ips"],
        json!([
            {"address": "10.16.5.100/24", "gateway": "10.16.5.1"},
            {"address": "fd00:16::2/64", "gateway": "fd00:16::1"}
        ])
    );
    assert_eq!(leases(&sb), rows(&["10.16.5.100|ipRanges-0|ranges|c0|eth0", "fd00:16::2|conf6|ranges|c0|eth0"]));
}

/// Two networks whose runtimes pass different `ipRanges` share the default
/// database, and both get a pool named `ipRanges-0`. A third network's pool
/// overlapping the first network's live range must still be refused, and
/// the first network, whose configuration never changed, must keep working.
#[test]
fn ip_ranges_pools_of_two_networks_do_not_erase_each_other() {
    let sb = Sandbox::new();
    let ranged = |name: &str, subnet: &str| {
        let mut c = network(&sb, "1.0.0", name, Value::Null);
        c["ipam"].as_object_mut().unwrap().remove("pools");
        with(&c, "runtimeConfig", json!({"ipRanges": [[{"subnet": subnet}]]}))
    };
    let net_a = ranged("net-a", "10.26.0.0/24");
    let net_b = ranged("net-b", "10.26.1.0/24");
    assert_eq!(address(&sb.add(&net_a, "a0")), "10.26.0.2/24");
    // Each network's `ipRanges-0` is its own pool, and net-b's range overlaps
    // none: accepted, without making net-a's range unregistered.
    assert_eq!(address(&sb.add(&net_b, "b0")), "10.26.1.2/24");
    let net_c = network(&sb, "1.0.0", "net-c", json!([v4_pool("c", "10.26.0.0/24")]));
    assert_error(&sb.add(&net_c, "c0"), 7, &["10.26.0.0/24"]);
    assert_eq!(address(&sb.add(&net_a, "a1")), "10.26.0.3/24");
}

// ---------------------------------------------------------------------------
// Static requests

/// One IPv4 pool with a dynamic range .100-.110 inside a /24, an excluded
/// .105, and an IPv6 pool.
fn static_pools() -> Value {
    json!([
        {
            "name": "st4",
            "ranges": [{"subnet": "10.17.0.0/24", "rangeStart": "10.17.0.100", "rangeEnd": "10.17.0.110",
                        "gateway": "10.17.0.1"}],
            "exclude": ["10.17.0.105"]
        },
        {"name": "st6", "ranges": [{"subnet": "fd00:17::/64"}]}
    ])
}

#[test]
fn static_requests_come_from_runtime_config_then_args_then_cni_args() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", json!([static_pools()[0]]));
    let rc = |ips: Value| json!({"ips": ips});
    let args = |ips: Value| json!({"cni": {"ips": ips}});

    // Each source alone; a CIDR or a bare address, outside the dynamic range.
    let out = sb.add(&with(&config, "runtimeConfig", rc(json!(["10.17.0.50/24"]))), "c0");
    assert_eq!(out.result()["ips"], json!([{"address": "10.17.0.50/24", "gateway": "10.17.0.1"}]));
    assert_eq!(address(&sb.add(&with(&config, "args", args(json!(["10.17.0.51"]))), "c1")), "10.17.0.51/24");
    assert_eq!(address(&sb.delegated("ADD", &config, "c2", &[("CNI_ARGS", "IP=10.17.0.52")])), "10.17.0.52/24");

    // Precedence: runtimeConfig over args over CNI_ARGS; the others are not claimed.
    let all = with(&with(&config, "runtimeConfig", rc(json!(["10.17.0.60"]))), "args", args(json!(["10.17.0.61/24"])));
    assert_eq!(address(&sb.delegated("ADD", &all, "c3", &[("CNI_ARGS", "IP=10.17.0.62")])), "10.17.0.60/24");
    let both = with(&config, "args", args(json!(["10.17.0.61"])));
    assert_eq!(address(&sb.delegated("ADD", &both, "c4", &[("CNI_ARGS", "IP=10.17.0.62")])), "10.17.0.61/24");
    assert_eq!(address(&sb.delegated("ADD", &config, "c5", &[("CNI_ARGS", "IP=10.17.0.62")])), "10.17.0.62/24");

    // A static address inside the dynamic range is skipped by sequential allocation.
    let rs = sb.delegated("ADD", &config, "c8", &[("CNI_ARGS", "IP=10.17.0.100")]);
    assert_eq!(address(&rs), "10.17.0.100/24");
    // An excluded address may be claimed by name.
    assert_eq!(address(&sb.delegated("ADD", &config, "c6", &[("CNI_ARGS", "IP=10.17.0.105")])), "10.17.0.105/24");
    // Dynamic allocation was not moved by any of them, and skips the held rangeStart.
    assert_eq!(address(&sb.add(&config, "c7")), "10.17.0.101/24");

    assert_eq!(
        leases(&sb),
        rows(&[
            "10.17.0.50|st4|static|c0|eth0",
            "10.17.0.51|st4|static|c1|eth0",
            "10.17.0.52|st4|static|c2|eth0",
            "10.17.0.60|st4|static|c3|eth0",
            "10.17.0.61|st4|static|c4|eth0",
            "10.17.0.62|st4|static|c5|eth0",
            "10.17.0.100|st4|static|c8|eth0",
            "10.17.0.101|st4|static|c7|eth0",
            "10.17.0.105|st4|static|c6|eth0",
        ])
    );
}

#[test]
fn requested_ip_of_a_pool_object_is_claimed_by_the_static_allocator() {
    let sb = Sandbox::new();
    let pool = |requested: &str| {
        json!({"name": "req", "ranges": [{"subnet": "10.20.0.0/24", "rangeStart": "10.20.0.2",
            "rangeEnd": "10.20.0.254", "gateway": "10.20.0.1"}], "requested-ip": requested})
    };
    let config = |requested: &str| {
        json!({
            "cniVersion": "1.0.0", "name": "requested", "type": "bridge",
            "ipam": {"type": "ipam-delegated", "database": sb.db()},
            "prevResult": {"cniVersion": "1.0.0", "ips": [], "routes": [], "dns": {}, "pools": [pool(requested)]}
        })
    };
    let out = sb.cni("ipam-da-static", "ADD", &config("10.20.0.77"), &[("CNI_CONTAINERID", "c0")]);
    assert_eq!(out.result()["ips"], json!([{"address": "10.20.0.77/24", "gateway": "10.20.0.1"}]), "{out:#?}");
    assert_eq!(out.result()["pools"], json!([pool("10.20.0.77")]), "pools pass through");

    // Sequential after it adds nothing for a family that has an address.
    let next = with(&config("10.20.0.77"), "prevResult", out.result().clone());
    let seq = sb.cni("ipam-da-sequential", "ADD", &next, &[("CNI_CONTAINERID", "c0")]);
    assert_eq!(seq.result()["ips"], out.result()["ips"], "{seq:#?}");

    // A CIDR form; and CNI_ARGS IP= comes before requested-ip.
    let out = sb.cni("ipam-da-static", "ADD", &config("10.20.0.78/24"), &[("CNI_CONTAINERID", "c1")]);
    assert_eq!(address(&out), "10.20.0.78/24");
    let out = sb.cni(
        "ipam-da-static",
        "ADD",
        &config("10.20.0.79"),
        &[("CNI_CONTAINERID", "c2"), ("CNI_ARGS", "IP=10.20.0.80")],
    );
    assert_eq!(address(&out), "10.20.0.80/24");

    assert_eq!(
        leases(&sb),
        rows(&[
            "10.20.0.77|req|requested|c0|eth0",
            "10.20.0.78|req|requested|c1|eth0",
            "10.20.0.80|req|requested|c2|eth0"
        ])
    );
}

#[test]
fn unusable_or_foreign_static_requests_are_error_102() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", static_pools());
    assert_eq!(addresses(&sb.add(&config, "c0")), ["10.17.0.100/24", "fd00:17::2/64"]);
    let before = db_state(&sb);
    for (ip, why) in [
        ("10.99.0.5", "outside every candidate pool"),
        ("10.17.0.1", "gateway"),
        ("10.17.0.0", "network address"),
        ("10.17.0.255", "broadcast"),
        ("fd00:17::1", "gateway"),
        ("fd00:17::", "network"),
        ("fd00:99::5", "outside every candidate pool"),
    ] {
        let out = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", &format!("IP={ip}"))]);
        assert_error(&out, 102, &[ip, why]);
    }
    // Outside every pool: each is named, with its subnets.
    let out = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IP=10.99.0.5")]);
    assert_error(&out, 102, &["(st4 10.17.0.0/24; st6 fd00:17::/64)"]);
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");
}

#[test]
fn a_static_request_that_is_not_an_address_or_cidr_is_error_7_naming_its_source() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", static_pools());
    sb.add(&config, "c0").result();
    let before = db_state(&sb);
    for bad in ["10.17.0.50/", "10.17.0", "nonsense", "10.17.0.50/33", "fd00:17::50/129"] {
        let out = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", &format!("IP={bad}"))]);
        assert_error(&out, 7, &["CNI_ARGS IP", bad]);
        let out = sb.add(&with(&config, "runtimeConfig", json!({"ips": [bad]})), "c1");
        assert_error(&out, 7, &["runtimeConfig.ips", bad]);
        let out = sb.add(&with(&config, "args", json!({"cni": {"ips": [bad]}})), "c1");
        assert_error(&out, 7, &["args.cni.ips", bad]);
    }
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");
}

#[test]
fn a_static_address_held_by_another_attachment_is_error_101_and_rolls_back() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", static_pools());
    let ip50 = [("CNI_ARGS", "IP=10.17.0.50")];
    let first = sb.delegated("ADD", &config, "c0", &ip50);
    assert_eq!(addresses(&first), ["10.17.0.50/24", "fd00:17::2/64"]);
    // The same attachment asking again: the same addresses, no second lease.
    assert_eq!(sb.delegated("ADD", &config, "c0", &ip50).result(), first.result());
    let before = db_state(&sb);
    assert_eq!(before[2..], rows(&["10.17.0.50|st4|static|c0|eth0", "fd00:17::2|st6|static|c0|eth0"]));

    // Another attachment: 101 naming the address, and nothing for it —
    // neither the free address it asked for first nor an IPv6 one.
    let out = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IP=10.17.0.53,10.17.0.50")]);
    assert_error(&out, 101, &["10.17.0.50", "c0"]);
    let out = sb.delegated("ADD", &config, "c1", &ip50);
    assert_error(&out, 101, &["10.17.0.50"]);
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");

    // Static succeeds, sequential fails (IPv6 full): the rollback's DEL
    // releases what ipam-da-static had recorded.
    let pools = json!([
        v4_pool("r4", "10.17.1.0/24"),
        {"name": "r6", "ranges": [{"subnet": "fd00:17:1::/64", "rangeStart": "fd00:17:1::7", "rangeEnd": "fd00:17:1::7"}]}
    ]);
    let full6 = network(&sb, "1.0.0", "full6", pools);
    assert_eq!(addresses(&sb.add(&full6, "d0")), ["10.17.1.2/24", "fd00:17:1::7/64"]);
    let before = db_state(&sb);
    let out = sb.delegated("ADD", &full6, "d1", &[("CNI_ARGS", "IP=10.17.1.40")]);
    assert_error(&out, 100, &["IPv6", "ipam-da-sequential"]);
    assert_eq!(db_state(&sb), before, "the rollback left a lease");
    // And 10.17.1.40 is claimable by someone else (narrowed to IPv4 only).
    let only4 = with(&full6, "args", json!({"cni": {"pools": ["r4"]}}));
    assert_eq!(address(&sb.delegated("ADD", &only4, "d2", &[("CNI_ARGS", "IP=10.17.1.40")])), "10.17.1.40/24");
}

#[test]
fn a_static_ipv4_request_in_dual_stack_gets_only_ipv6_from_sequential() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", static_pools());
    let out = sb.delegated("ADD", &config, "c0", &[("CNI_ARGS", "IP=10.17.0.7")]);
    assert_eq!(
        out.result()["ips"],
        json!([
            {"address": "10.17.0.7/24", "gateway": "10.17.0.1"},
            {"address": "fd00:17::2/64", "gateway": "fd00:17::1"}
        ])
    );
    assert_eq!(leases(&sb), rows(&["10.17.0.7|st4|static|c0|eth0", "fd00:17::2|st6|static|c0|eth0"]));
    // The IPv4 cursor did not move: the next dynamic ADD starts at rangeStart.
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.17.0.100/24", "fd00:17::3/64"]);
}

// ---------------------------------------------------------------------------
// ADD and DEL are idempotent; CHECK

#[test]
fn add_twice_gives_the_same_addresses_and_del_releases_everything() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "blue", dual_stack_pools());
    let first = sb.add(&config, "c0");
    assert_eq!(addresses(&first), ["10.10.0.1/24", "fd00:10::2/64"]);
    assert_eq!(sb.add(&config, "c0").result(), first.result());
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.10.0.2/24", "fd00:10::3/64"]);
    // Another interface of the same container is another attachment.
    assert_eq!(
        addresses(&sb.delegated("ADD", &config, "c0", &[("CNI_IFNAME", "net1")])),
        ["10.10.0.3/24", "fd00:10::4/64"]
    );
    assert_eq!(
        sql(&sb.db(), "select container_id, ifname, count(*) from leases group by 1, 2 order by 1, 2"),
        rows(&["c0|eth0|2", "c0|net1|2", "c1|eth0|2"])
    );

    // DEL without prevResult, twice; DEL of an unknown attachment.
    sb.del(&config, "c0").assert_quiet_success();
    sb.del(&config, "c0").assert_quiet_success();
    sb.del(&config, "never-added").assert_quiet_success();
    assert_eq!(
        sql(&sb.db(), "select container_id, ifname, count(*) from leases group by 1, 2 order by 1, 2"),
        rows(&["c0|net1|2", "c1|eth0|2"])
    );
    // c0's former addresses are claimable by another attachment.
    let claim = with(&config, "runtimeConfig", json!({"ips": ["10.10.0.1", "fd00:10::2"]}));
    assert_eq!(addresses(&sb.add(&claim, "c2")), ["10.10.0.1/24", "fd00:10::2/64"]);
}

#[test]
fn del_with_the_adds_result_as_prev_result_releases_it() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "blue", dual_stack_pools());
    let out = sb.add(&config, "c0");
    sb.del(&with(&config, "prevResult", out.result().clone()), "c0").assert_quiet_success();
    assert_eq!(leases(&sb), Vec::<String>::new());
}

#[test]
fn del_releases_everything_even_without_pools_in_the_configuration() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "blue", dual_stack_pools());
    sb.add(&config, "c0").result();
    sb.add(&config, "c1").result();
    let mut bare = config.clone();
    bare["ipam"].as_object_mut().unwrap().remove("pools");
    sb.del(&bare, "c0").assert_quiet_success();
    assert_eq!(leases(&sb), rows(&["10.10.0.2|blue4|blue|c1|eth0", "fd00:10::3|blue6|blue|c1|eth0"]));
}

#[test]
fn del_releases_only_the_attachment_of_its_own_network() {
    let sb = Sandbox::new();
    let net_a = network(&sb, "1.0.0", "net-a", json!([v4_pool("pa", "10.25.0.0/24")]));
    let net_b = network(&sb, "1.0.0", "net-b", json!([v4_pool("pb", "10.25.1.0/24")]));
    sb.add(&net_a, "c0").result();
    sb.add(&net_b, "c0").result();
    sb.del(&net_a, "c0").assert_quiet_success();
    assert_eq!(leases(&sb), rows(&["10.25.1.2|pb|net-b|c0|eth0"]));
}

#[test]
fn static_requests_of_both_families_leave_nothing_to_sequential() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "static", static_pools());
    let both = with(&config, "runtimeConfig", json!({"ips": ["fd00:17::99/64", "10.17.0.99/24"]}));
    let out = sb.add(&both, "c0");
    assert_eq!(
        out.result()["ips"],
        json!([
            {"address": "fd00:17::99/64", "gateway": "fd00:17::1"},
            {"address": "10.17.0.99/24", "gateway": "10.17.0.1"}
        ])
    );
    assert_eq!(leases(&sb), rows(&["10.17.0.99|st4|static|c0|eth0", "fd00:17::99|st6|static|c0|eth0"]));
}

#[test]
fn check_passes_after_add_and_fails_with_104_after_del() {
    let sb = Sandbox::new();
    let config = network(&sb, "1.0.0", "blue", dual_stack_pools());
    let out = sb.add(&config, "c0");
    let checked = with(&config, "prevResult", out.result().clone());
    sb.delegated("CHECK", &checked, "c0", &[]).assert_quiet_success();
    // Another attachment presenting c0's result is not recorded.
    assert_error(&sb.delegated("CHECK", &checked, "c1", &[]), 104, &["10.10.0.1"]);

    sb.del(&config, "c0").assert_quiet_success();
    assert_error(&sb.delegated("CHECK", &checked, "c0", &[]), 104, &["10.10.0.1"]);

    // An address outside every pool of this database is not ours to check.
    let foreign = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.200.0.5/24"}], "routes": [], "dns": {}});
    sb.delegated("CHECK", &with(&config, "prevResult", foreign), "c0", &[]).assert_quiet_success();
}

// ---------------------------------------------------------------------------
// GC and STATUS

#[test]
fn gc_releases_only_stale_attachments_of_its_own_network() {
    let sb = Sandbox::new();
    let net_a = network(&sb, "1.1.0", "net-a", json!([v4_pool("pa", "10.18.0.0/24")]));
    let net_b = network(&sb, "1.1.0", "net-b", json!([v4_pool("pb", "10.18.1.0/24")]));
    for ctr in ["a0", "a1", "shared"] {
        sb.add(&net_a, ctr).result();
    }
    sb.delegated("ADD", &net_a, "a0", &[("CNI_IFNAME", "net1")]).result();
    for ctr in ["b0", "shared"] {
        sb.add(&net_b, ctr).result();
    }
    let all = rows(&[
        "10.18.0.2|pa|net-a|a0|eth0",
        "10.18.0.3|pa|net-a|a1|eth0",
        "10.18.0.4|pa|net-a|shared|eth0",
        "10.18.0.5|pa|net-a|a0|net1",
        "10.18.1.2|pb|net-b|b0|eth0",
        "10.18.1.3|pb|net-b|shared|eth0",
    ]);
    assert_eq!(leases(&sb), all);

    // Without cni.dev/valid-attachments: 7, nothing released.
    assert_error(&sb.cni(DELEGATED, "GC", &net_a, &[]), 7, &["cni.dev/valid-attachments"]);
    assert_eq!(leases(&sb), all);

    let valid = json!([{"containerID": "a0", "ifname": "eth0"}, {"containerID": "b0", "ifname": "eth0"}]);
    sb.cni(DELEGATED, "GC", &with(&net_a, "cni.dev/valid-attachments", valid), &[]).assert_quiet_success();
    assert_eq!(
        leases(&sb),
        rows(&["10.18.0.2|pa|net-a|a0|eth0", "10.18.1.2|pb|net-b|b0|eth0", "10.18.1.3|pb|net-b|shared|eth0"])
    );
}

#[test]
fn status_is_50_when_a_family_is_full_or_the_database_is_unusable() {
    let sb = Sandbox::new();
    let pools = json!([v4_pool("tiny", "10.21.0.0/30"), {"name": "six", "ranges": [{"subnet": "fd00:21::/64"}]}]);
    let config = network(&sb, "1.1.0", "status", pools);
    sb.cni(DELEGATED, "STATUS", &config, &[]).assert_quiet_success();
    sb.add(&config, "c0").result();
    assert_error(&sb.cni(DELEGATED, "STATUS", &config, &[]), 50, &["IPv4", "tiny"]);
    sb.del(&config, "c0").assert_quiet_success();
    sb.cni(DELEGATED, "STATUS", &config, &[]).assert_quiet_success();

    // Spillover room counts: a full first pool with a second one is ready.
    let pools = json!([v4_pool("tiny", "10.21.0.0/30"), v4_pool("more", "10.21.1.0/24")]);
    let spill = network(&sb, "1.1.0", "status", pools);
    sb.add(&spill, "c1").result();
    sb.cni(DELEGATED, "STATUS", &spill, &[]).assert_quiet_success();

    // The database's directory cannot exist: its parent is a regular file.
    let file = sb.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let mut broken = config.clone();
    broken["ipam"]["database"] = json!(file.join("allocations.sqlite"));
    assert_error(&sb.cni(DELEGATED, "STATUS", &broken, &[]), 50, &[]);
}

// ---------------------------------------------------------------------------
// The delegate protocol, direct

#[test]
fn sequential_accepts_the_short_pool_form_of_the_readme() {
    let sb = Sandbox::new();
    let pools = json!([{"name": "local-pool", "subnet": "10.68.0.0/24", "gateway": "10.68.0.1"}]);
    let config = json!({
        "cniVersion": "1.0.0", "name": "short", "type": "bridge",
        "ipam": {"type": "ipam-delegated", "database": sb.db()},
        "prevResult": {"cniVersion": "1.0.0", "ips": [], "routes": [], "dns": {}, "pools": pools}
    });
    let out = sb.cni("ipam-da-sequential", "ADD", &config, &[]);
    assert_eq!(out.result()["ips"], json!([{"address": "10.68.0.2/24", "gateway": "10.68.0.1"}]), "{out:#?}");
    let out = sb.cni("ipam-da-sequential", "ADD", &config, &[("CNI_CONTAINERID", "other")]);
    assert_eq!(address(&out), "10.68.0.3/24");
    assert_eq!(leases(&sb).len(), 2);
}

#[test]
fn allocators_without_pools_in_prev_result_ask_for_a_selector() {
    let sb = Sandbox::new();
    let bare = json!({
        "cniVersion": "1.0.0", "name": "nosel", "type": "bridge",
        "ipam": {"type": "ipam-delegated", "database": sb.db(), "pools": [v4_pool("p", "10.22.0.0/24")]}
    });
    let no_pools = with(&bare, "prevResult", json!({"cniVersion": "1.0.0", "ips": [], "routes": [], "dns": {}}));
    for exe in ["ipam-da-static", "ipam-da-sequential"] {
        for config in [&bare, &no_pools] {
            assert_error(&sb.cni(exe, "ADD", config, &[]), 7, &["selector"]);
        }
    }
    // Through the orchestrator, with the selector left out.
    let mut config = network(&sb, "1.0.0", "nosel", json!([v4_pool("p", "10.22.0.0/24")]));
    config["ipam"]["delegates"] = json!(["ipam-da-static", "ipam-da-sequential"]);
    assert_error(&sb.add(&config, "c0"), 7, &["selector"]);
}

// ---------------------------------------------------------------------------
// Configuration errors, files

#[test]
fn invalid_configurations_are_error_7_naming_the_field() {
    let sb = Sandbox::new();
    let mut relative = network(&sb, "1.0.0", "bad", json!([v4_pool("p", "10.19.0.0/24")]));
    relative["ipam"]["database"] = json!("relative/allocations.sqlite");
    assert_error(&sb.add(&relative, "c0"), 7, &["ipam.database"]);
    assert!(!sb.workdir().join("relative").exists(), "a relative database was created");

    let bad_cidr = network(&sb, "1.0.0", "bad", json!([v4_pool("p", "10.19.0.0/33")]));
    assert_error(&sb.add(&bad_cidr, "c0"), 7, &["ipam.pools[0]", "subnet", "10.19.0.0/33"]);

    let overlapping =
        network(&sb, "1.0.0", "bad", json!([v4_pool("wide", "10.19.0.0/16"), v4_pool("narrow", "10.19.5.0/24")]));
    assert_error(&sb.add(&overlapping, "c0"), 7, &["ipam.pools[1]", "narrow", "10.19.5.0/24", "10.19.0.0/16"]);

    // Another network's configuration registered 10.19.0.0/16 in this database.
    let first = network(&sb, "1.0.0", "first", json!([v4_pool("wide", "10.19.0.0/16")]));
    assert_eq!(address(&sb.add(&first, "c0")), "10.19.0.2/16");
    let before = db_state(&sb);
    let second = network(&sb, "1.0.0", "second", json!([v4_pool("inner", "10.19.128.0/24")]));
    assert_error(&sb.add(&second, "c1"), 7, &["inner", "10.19.128.0/24", "10.19.0.0/16", "wide"]);
    assert_eq!(db_state(&sb), before, "a failed ADD changed the database");
}

#[test]
fn database_directory_is_0700_and_its_files_0600() {
    let sb = Sandbox::new();
    let db = sb.db();
    let dir = db.parent().unwrap();
    assert!(!dir.exists());
    let config = network(&sb, "1.0.0", "modes", json!([v4_pool("p", "10.23.0.0/24")]));
    sb.add(&config, "c0").result();
    let mode = |p: &Path| {
        std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o7777
    };
    assert_eq!(mode(dir), 0o700, "directory");
    assert_eq!(mode(&db), 0o600, "database");
    assert_eq!(mode(&dir.join("allocations.sqlite.lock")), 0o600, "lock file");
    // Whatever else SQLite left beside it (-wal, -shm) is private too.
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path) & 0o077, 0, "{} is readable by others", path.display());
    }
}
