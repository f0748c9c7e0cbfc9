//! Tests of reading and writing pool objects.

use std::collections::BTreeMap;

use super::*;
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn parse(v: Value) -> Pool {
    Pool::from_json(&v, "ipam.pools[1]").unwrap()
}

/// The message of the error 7 that `v` gives; fails on any other outcome.
fn error(v: Value) -> String {
    let e = Pool::from_json(&v, "ipam.pools[1]").unwrap_err();
    assert_eq!(e.code, 7, "{}", e.msg);
    e.msg
}

const PREFIX: &str = "invalid network configuration: ipam.pools[1] (pool \"blue\")";
/// Shape errors come before the pool's name is known, and name the path alone.
const SHAPE: &str = "invalid network configuration: ipam.pools[1]";

/// A pool "blue" with one range built from `range`.
fn blue(range: Value) -> Value {
    json!({"name": "blue", "ranges": [range]})
}

fn range(start: &str, end: &str, gateway: Option<&str>) -> (IpAddr, IpAddr, Option<IpAddr>) {
    (ip(start), ip(end), gateway.map(ip))
}

fn defaults_of(subnet: &str) -> (IpAddr, IpAddr, Option<IpAddr>) {
    let p = parse(blue(json!({"subnet": subnet})));
    let r = &p.ranges[0];
    assert_eq!(r.subnet, net(subnet));
    (r.range_start, r.range_end, r.gateway)
}

#[test]
fn reads_the_full_form() {
    let p = parse(json!({
        "name": "blue",
        "ranges": [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.0", "rangeEnd": "10.22.1.255",
                    "gateway": "10.22.0.1"}],
        "exclude": ["10.22.1.128/28", "10.22.1.7"],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.99.0.0/16", "gw": "10.22.0.254"}],
        "dns": {"nameservers": ["10.22.0.1"]},
        "match": {"K8S_POD_NAMESPACE": "prod"},
        "requested-ip": "10.22.3.4",
        "comment": "unknown keys are ignored"
    }));
    assert_eq!(p.name, "blue");
    assert_eq!(
        p.ranges,
        vec![Range {
            subnet: net("10.22.0.0/16"),
            range_start: ip("10.22.1.0"),
            range_end: ip("10.22.1.255"),
            gateway: Some(ip("10.22.0.1")),
        }]
    );
    assert_eq!(p.exclude, vec![net("10.22.1.128/28"), net("10.22.1.7/32")]);
    assert_eq!(p.routes.len(), 2);
    assert_eq!(p.routes[0].dst, net("0.0.0.0/0"));
    assert_eq!(p.routes[1].gw, Some(ip("10.22.0.254")));
    assert_eq!(p.dns.unwrap().nameservers, vec!["10.22.0.1"]);
    assert_eq!(p.matches.get("K8S_POD_NAMESPACE").map(String::as_str), Some("prod"));
    assert_eq!(p.requested_ip, Some(ip("10.22.3.4")));
}

#[test]
fn fills_in_defaults_per_prefix_length() {
    assert_eq!(defaults_of("10.0.0.0/8"), range("10.0.0.1", "10.255.255.254", Some("10.0.0.1")));
    assert_eq!(defaults_of("10.22.0.0/16"), range("10.22.0.1", "10.22.255.254", Some("10.22.0.1")));
    assert_eq!(defaults_of("10.22.3.0/24"), range("10.22.3.1", "10.22.3.254", Some("10.22.3.1")));
    assert_eq!(defaults_of("10.22.3.4/30"), range("10.22.3.5", "10.22.3.6", Some("10.22.3.5")));
    assert_eq!(defaults_of("10.22.3.4/31"), range("10.22.3.4", "10.22.3.5", Some("10.22.3.5")));
    assert_eq!(defaults_of("10.22.3.4/32"), range("10.22.3.4", "10.22.3.4", None));
    assert_eq!(defaults_of("fd00:22::/64"), range("fd00:22::1", "fd00:22::ffff:ffff:ffff:ffff", Some("fd00:22::1")));
    assert_eq!(defaults_of("fd00:22::/127"), range("fd00:22::", "fd00:22::1", Some("fd00:22::1")));
    assert_eq!(defaults_of("fd00:22::9/128"), range("fd00:22::9", "fd00:22::9", None));
}

#[test]
fn reads_the_short_form() {
    let p = parse(json!({"name": "blue", "subnet": "10.1.0.0/24", "gateway": "10.1.0.254"}));
    assert_eq!(
        p.ranges,
        vec![Range {
            subnet: net("10.1.0.0/24"),
            range_start: ip("10.1.0.1"),
            range_end: ip("10.1.0.254"),
            gateway: Some(ip("10.1.0.254")),
        }]
    );
    let p = parse(json!({"name": "blue", "subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10", "rangeEnd": "10.1.0.20"}));
    assert_eq!(p.ranges[0].range_start, ip("10.1.0.10"));
    assert_eq!(p.ranges[0].range_end, ip("10.1.0.20"));
    assert_eq!(p.ranges[0].gateway, Some(ip("10.1.0.1")));
    // Short-form errors name the top-level key.
    assert_eq!(
        error(json!({"name": "blue", "subnet": "10.1.0.0/24", "rangeEnd": "10.2.0.1"})),
        format!("{PREFIX}.rangeEnd: 10.2.0.1 is outside subnet 10.1.0.0/24")
    );
}

#[test]
fn to_json_is_complete_and_round_trips() {
    let source = json!({
        "name": "blue",
        "ranges": [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.0", "rangeEnd": "10.22.1.255"},
                   {"subnet": "10.23.0.0/32"}],
        "exclude": ["10.22.1.128/28", "10.22.1.7"],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1", "mtu": 1400}],
        "dns": {"nameservers": ["10.22.0.1"], "search": ["example.com"]},
        "match": {"NS": "prod"},
        "requested-ip": "10.22.3.4/16"
    });
    let p = parse(source);
    let out = p.to_json();
    assert_eq!(
        out,
        json!({
            "name": "blue",
            "ranges": [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.0", "rangeEnd": "10.22.1.255",
                        "gateway": "10.22.0.1"},
                       {"subnet": "10.23.0.0/32", "rangeStart": "10.23.0.0", "rangeEnd": "10.23.0.0"}],
            "exclude": ["10.22.1.128/28", "10.22.1.7/32"],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.22.0.1", "mtu": 1400}],
            "dns": {"nameservers": ["10.22.0.1"], "search": ["example.com"]},
            "requested-ip": "10.22.3.4"
        })
    );
    let back = Pool::from_json(&out, "prevResult.pools[0]").unwrap();
    assert_eq!(back, Pool { matches: BTreeMap::new(), ..p });

    let minimal = parse(json!({"name": "blue6", "ranges": [{"subnet": "fd00::/64"}], "dns": {}}));
    assert_eq!(minimal.dns, None);
    let out = minimal.to_json();
    assert_eq!(
        out,
        json!({"name": "blue6", "ranges": [{"subnet": "fd00::/64", "rangeStart": "fd00::1",
               "rangeEnd": "fd00::ffff:ffff:ffff:ffff", "gateway": "fd00::1"}]})
    );
    assert_eq!(Pool::from_json(&out, "x").unwrap(), minimal);
}

#[test]
fn null_is_absent_and_excludes_are_normalized() {
    let p = parse(json!({"name": "blue", "ranges": [{"subnet": "10.0.0.0/24", "gateway": null}],
                         "exclude": ["10.0.0.77/30"], "routes": null, "dns": null, "match": null}));
    assert_eq!(p.ranges[0].gateway, Some(ip("10.0.0.1")));
    assert_eq!(p.exclude, vec![net("10.0.0.76/30")]);
    let p6 =
        parse(json!({"name": "blue", "ranges": [{"subnet": "fd00::/64"}], "exclude": ["fd00::5", "fd00::1:0/112"]}));
    assert_eq!(p6.exclude, vec![net("fd00::5/128"), net("fd00::1:0/112")]);
}

#[test]
fn pool_object_and_name_errors() {
    assert_eq!(error(json!(5)), "invalid network configuration: ipam.pools[1]: must be a pool object, got 5");
    assert_eq!(
        error(json!({"ranges": [{"subnet": "10.0.0.0/24"}]})),
        "invalid network configuration: ipam.pools[1]: missing field `name`"
    );
    assert_eq!(
        error(json!({"name": 3, "ranges": []})),
        "invalid network configuration: ipam.pools[1].name: must be a string, got 3"
    );
    for bad in ["-blue", "", "blue pool", "blé", "_x", &"a".repeat(65)] {
        let msg = error(json!({"name": bad, "ranges": [{"subnet": "10.0.0.0/24"}]}));
        assert!(
            msg.starts_with(&format!(
                "invalid network configuration: ipam.pools[1].name: {bad:?} is not a valid pool name"
            )),
            "{msg}"
        );
    }
    for good in ["blue", "0", "a.b-c_d", &"a".repeat(64)] {
        assert_eq!(parse(json!({"name": good, "subnet": "10.0.0.0/24"})).name, good);
    }
}

#[test]
fn ranges_errors() {
    assert_eq!(error(json!({"name": "blue"})), format!("{PREFIX}.ranges: is required (a non-empty array of ranges)"));
    assert_eq!(error(json!({"name": "blue", "ranges": []})), format!("{PREFIX}.ranges: must not be empty"));
    assert_eq!(
        error(json!({"name": "blue", "ranges": {"subnet": "10.0.0.0/24"}})),
        format!("{SHAPE}.ranges: must be an array, got {{\"subnet\":\"10.0.0.0/24\"}}")
    );
    assert_eq!(
        error(json!({"name": "blue", "ranges": ["10.0.0.0/24"]})),
        format!("{SHAPE}.ranges[0]: must be a range object, got \"10.0.0.0/24\"")
    );
    assert_eq!(
        error(json!({"name": "blue", "ranges": [{"subnet": "10.0.0.0/24"}], "subnet": "10.1.0.0/24"})),
        format!("{PREFIX}.subnet: give either ranges or a top-level subnet, not both")
    );
    assert_eq!(
        error(json!({"name": "blue", "ranges": [{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]})),
        format!(
            "{PREFIX}.ranges[1].subnet: fd00::/64 is IPv6 but the pool's first range 10.0.0.0/24 is IPv4; \
             all ranges of a pool must be of one family"
        )
    );
    assert_eq!(
        error(json!({"name": "blue", "ranges": [{"subnet": "10.0.0.0/24"}, {"subnet": "10.1.0.0/24"},
                                                {"subnet": "10.0.0.128/25"}]})),
        format!(
            "{PREFIX}.ranges[2].subnet: 10.0.0.128/25 overlaps 10.0.0.0/24, the subnet of another range of this pool"
        )
    );
}

#[test]
fn subnet_errors() {
    assert_eq!(error(blue(json!({"rangeStart": "10.0.0.1"}))), format!("{PREFIX}.ranges[0].subnet: is required"));
    assert_eq!(error(blue(json!({"subnet": 10}))), format!("{SHAPE}.ranges[0].subnet: must be a string, got 10"));
    assert_eq!(
        error(blue(json!({"subnet": "10.0.0.0/33"}))),
        format!("{PREFIX}.ranges[0].subnet: \"10.0.0.0/33\" is not a CIDR")
    );
    assert_eq!(
        error(blue(json!({"subnet": "10.0.0.0"}))),
        format!("{PREFIX}.ranges[0].subnet: 10.0.0.0 is an address, not a CIDR: add the prefix length")
    );
    assert_eq!(
        error(blue(json!({"subnet": "10.0.0.5/24"}))),
        format!("{PREFIX}.ranges[0].subnet: 10.0.0.5/24 has host bits set: the subnet would be 10.0.0.0/24")
    );
    assert_eq!(
        error(blue(json!({"subnet": "::ffff:10.0.0.0/120"}))),
        format!(
            "{PREFIX}.ranges[0].subnet: ::ffff:10.0.0.0/120 overlaps ::ffff:0:0/96, the IPv4-mapped addresses: \
             use the IPv4 subnet instead"
        )
    );
    assert!(error(blue(json!({"subnet": "::/64"}))).contains("::/64 overlaps ::ffff:0:0/96"));
}

#[test]
fn range_start_and_end_errors() {
    let e = |r: Value| error(blue(r));
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeStart": "10.22.x"})),
        format!("{PREFIX}.ranges[0].rangeStart: \"10.22.x\" is not an IP address")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeEnd": "10.23.0.0"})),
        format!("{PREFIX}.ranges[0].rangeEnd: 10.23.0.0 is outside subnet 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeStart": "fd00::1"})),
        format!("{PREFIX}.ranges[0].rangeStart: fd00::1 is outside subnet 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeStart": "10.22.0.0"})),
        format!("{PREFIX}.ranges[0].rangeStart: 10.22.0.0 is the network address of 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeEnd": "10.22.255.255"})),
        format!("{PREFIX}.ranges[0].rangeEnd: 10.22.255.255 is the broadcast address of 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "fd00::/64", "rangeStart": "fd00::"})),
        format!("{PREFIX}.ranges[0].rangeStart: fd00:: is the network (subnet-router anycast) address of fd00::/64")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeStart": "10.22.2.0", "rangeEnd": "10.22.1.255"})),
        format!("{PREFIX}.ranges[0].rangeEnd: 10.22.1.255 is before rangeStart 10.22.2.0")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "rangeStart": 7})),
        format!("{SHAPE}.ranges[0].rangeStart: must be a string, got 7")
    );
    // The example of the brief, at a later range.
    assert_eq!(
        error(json!({"name": "blue", "ranges": [{"subnet": "10.21.0.0/16"},
                                                {"subnet": "10.22.0.0/16", "rangeEnd": "10.23.2.0"}]})),
        format!("{PREFIX}.ranges[1].rangeEnd: 10.23.2.0 is outside subnet 10.22.0.0/16")
    );
    // A /31 uses both addresses, so they are valid range ends.
    let p = parse(blue(json!({"subnet": "10.0.0.0/31", "rangeStart": "10.0.0.0", "rangeEnd": "10.0.0.1"})));
    assert_eq!(p.ranges[0].range_start, ip("10.0.0.0"));
}

#[test]
fn gateway_errors() {
    let e = |r: Value| error(blue(r));
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "gateway": "10.23.0.1"})),
        format!("{PREFIX}.ranges[0].gateway: 10.23.0.1 is outside subnet 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "gateway": "10.22.0.0"})),
        format!("{PREFIX}.ranges[0].gateway: 10.22.0.0 is the network address of 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "gateway": "10.22.255.255"})),
        format!("{PREFIX}.ranges[0].gateway: 10.22.255.255 is the broadcast address of 10.22.0.0/16")
    );
    assert_eq!(
        e(json!({"subnet": "10.22.0.0/16", "gateway": "gw"})),
        format!("{PREFIX}.ranges[0].gateway: \"gw\" is not an IP address")
    );
    // A gateway inside the dynamic range is allowed (it is skipped); so is IPv6's anycast address.
    assert_eq!(
        parse(blue(json!({"subnet": "10.0.0.0/24", "gateway": "10.0.0.9"}))).ranges[0].gateway,
        Some(ip("10.0.0.9"))
    );
    assert_eq!(parse(blue(json!({"subnet": "fd00::/64", "gateway": "fd00::"}))).ranges[0].gateway, Some(ip("fd00::")));
}

#[test]
fn other_key_errors() {
    let with = |key: &str, value: Value| {
        let mut v = blue(json!({"subnet": "10.0.0.0/24"}));
        v[key] = value;
        error(v)
    };
    assert_eq!(with("exclude", json!("10.0.0.5")), format!("{SHAPE}.exclude: must be an array, got \"10.0.0.5\""));
    assert_eq!(with("exclude", json!(["10.0.0.5", 6])), format!("{SHAPE}.exclude[1]: must be a string, got 6"));
    assert_eq!(
        with("exclude", json!(["10.0.0.x"])),
        format!("{PREFIX}.exclude[0]: \"10.0.0.x\" is not an address or CIDR")
    );
    assert_eq!(
        with("exclude", json!(["fd00::1"])),
        format!("{PREFIX}.exclude[0]: fd00::1 is not of the pool's family (IPv4)")
    );
    let msg = with("routes", json!([{"dst": "0.0.0.0/0"}, {"gw": "10.0.0.1"}]));
    assert_eq!(msg, format!("{SHAPE}.routes[1]: missing field `dst`"));
    assert_eq!(with("routes", json!({})), format!("{SHAPE}.routes: must be an array, got {{}}"));
    let msg = with("dns", json!({"nameservers": "10.0.0.1"}));
    assert_eq!(msg, format!("{SHAPE}.dns.nameservers: must be an array, got \"10.0.0.1\""));
    assert_eq!(with("match", json!(["NS"])), format!("{SHAPE}.match: must be an object, got [\"NS\"]"));
    assert_eq!(with("match", json!({"NS": 1})), format!("{SHAPE}.match.NS: must be a string, got 1"));
    assert_eq!(
        with("requested-ip", json!("10.0.0")),
        format!("{PREFIX}.requested-ip: \"10.0.0\" is not an IP address")
    );
    assert_eq!(
        with("requested-ip", json!(["10.0.0.5"])),
        format!("{SHAPE}.requested-ip: must be a string, got [\"10.0.0.5\"]")
    );
}

#[test]
fn octets_with_leading_zeros_are_refused_everywhere() {
    // Go's parser, which every other plugin of a chain uses, refuses them;
    // read as decimal here they would name another address than there.
    for bad in [
        blue(json!({"subnet": "010.135.0.0/16"})),
        blue(json!({"subnet": "10.135.0.0/016"})),
        blue(json!({"subnet": "10.135.0.0/16", "rangeStart": "10.135.0.050"})),
        blue(json!({"subnet": "10.135.0.0/16", "gateway": "10.135.0.01"})),
        json!({"name": "blue", "ranges": [{"subnet": "10.135.0.0/16"}], "exclude": ["10.135.0.050"]}),
        json!({"name": "blue", "ranges": [{"subnet": "10.135.0.0/16"}], "exclude": ["10.135.000.0/24"]}),
        json!({"name": "blue", "ranges": [{"subnet": "10.135.0.0/16"}], "requested-ip": "10.135.0.050/16"}),
        json!({"name": "blue", "ranges": [{"subnet": "10.135.0.0/16"}], "routes": [{"dst": "010.0.0.0/8"}]}),
    ] {
        let msg = error(bad.clone());
        assert!(
            msg.contains("010") || msg.contains("050") || msg.contains("01") || msg.contains("000"),
            "{bad}: {msg}"
        );
    }
    assert_eq!(parse(blue(json!({"subnet": "10.135.0.0/16"}))).ranges[0].subnet, net("10.135.0.0/16"));
}
