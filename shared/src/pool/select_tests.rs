//! Tests of candidate selection.

use serde_json::{json, Value};

use super::*;

fn conf(config: &Value) -> NetConf {
    NetConf::parse(config.to_string().as_bytes()).unwrap()
}

fn candidates(config: &Value, cni_args: &CniArgs) -> Result<Vec<Pool>> {
    super::candidates(&conf(config), cni_args)
}

fn all_pools(config: &Value) -> Result<Vec<Pool>> {
    super::all_pools(&conf(config))
}

/// The pools of `runtimeConfig.ipRanges` alone.
fn from_ip_ranges(ip_ranges: &Value) -> Result<Vec<Pool>> {
    all_pools(&json!({"runtimeConfig": {"ipRanges": ip_ranges}, "ipam": {}}))
}

/// The contract's example configuration.
fn config() -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": "blue-net",
        "type": "bridge",
        "ipam": {
            "type": "ipam-delegated",
            "pools": [
                {"name": "blue", "ranges": [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.0",
                 "rangeEnd": "10.22.1.255", "gateway": "10.22.0.1"}], "exclude": ["10.22.1.128/28"],
                 "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.22.0.1"]}},
                {"name": "blue-overflow", "ranges": [{"subnet": "10.23.0.0/24"}]},
                {"name": "blue6", "ranges": [{"subnet": "fd00:22::/64"}]},
                {"name": "prod", "match": {"K8S_POD_NAMESPACE": "prod"}, "ranges": [{"subnet": "10.24.0.0/24"}]}
            ]
        }
    })
}

fn args(raw: &str) -> CniArgs {
    CniArgs::parse(raw).unwrap()
}

fn names(pools: &[Pool]) -> Vec<&str> {
    pools.iter().map(|p| p.name.as_str()).collect()
}

fn chosen(config: &Value, raw_args: &str) -> Vec<String> {
    names(&candidates(config, &args(raw_args)).unwrap()).into_iter().map(String::from).collect()
}

fn error(config: &Value, raw_args: &str) -> String {
    let e = candidates(config, &args(raw_args)).unwrap_err();
    assert_eq!(e.code, 7, "{}", e.msg);
    e.msg
}

const INVALID: &str = "invalid network configuration: ";

#[test]
fn match_keeps_pools_whose_args_hold() {
    let c = config();
    assert_eq!(chosen(&c, ""), ["blue", "blue-overflow", "blue6"]);
    assert_eq!(chosen(&c, "K8S_POD_NAMESPACE=dev"), ["blue", "blue-overflow", "blue6"]);
    assert_eq!(chosen(&c, "K8S_POD_NAMESPACE=prod"), ["blue", "blue-overflow", "blue6", "prod"]);
    let blue = &candidates(&c, &args("")).unwrap()[0];
    assert_eq!(blue.exclude, vec!["10.22.1.128/28".parse::<ipnet::IpNet>().unwrap()]);
}

#[test]
fn narrowing_keeps_configured_order() {
    let c = config();
    assert_eq!(chosen(&c, "IPAM_POOL=blue6,blue"), ["blue", "blue6"]);
    assert_eq!(chosen(&c, "IPAM_POOL= blue-overflow "), ["blue-overflow"]);
    assert_eq!(chosen(&c, "IPAM_POOL="), ["blue", "blue-overflow", "blue6"], "an empty list narrows nothing");
    assert_eq!(chosen(&c, "IPAM_POOL=prod;K8S_POD_NAMESPACE=prod"), ["prod"]);

    let mut with_args = config();
    with_args["args"] = json!({"cni": {"pools": ["blue6", "blue-overflow"]}});
    assert_eq!(chosen(&with_args, ""), ["blue-overflow", "blue6"]);
    // args.cni.pools wins over IPAM_POOL, even when IPAM_POOL names an unknown pool.
    assert_eq!(chosen(&with_args, "IPAM_POOL=nosuch"), ["blue-overflow", "blue6"]);
    with_args["args"]["cni"]["pools"] = json!([]);
    assert_eq!(chosen(&with_args, "IPAM_POOL=blue"), ["blue"]);
}

#[test]
fn unknown_names_are_error_7_naming_the_source() {
    let c = config();
    assert_eq!(
        error(&c, "IPAM_POOL=blue,green"),
        format!("{INVALID}CNI_ARGS IPAM_POOL: no pool is named \"green\" (pools: blue, blue-overflow, blue6, prod)")
    );
    let mut with_args = config();
    with_args["args"] = json!({"cni": {"pools": ["red"]}});
    assert_eq!(
        error(&with_args, ""),
        format!("{INVALID}args.cni.pools: no pool is named \"red\" (pools: blue, blue-overflow, blue6, prod)")
    );
    with_args["args"]["cni"]["pools"] = json!("blue");
    assert_eq!(error(&with_args, ""), format!("{INVALID}args.cni.pools: must be an array, got \"blue\""));
    with_args["args"]["cni"]["pools"] = json!(["blue", 3]);
    assert_eq!(error(&with_args, ""), format!("{INVALID}args.cni.pools[1]: must be a string, got 3"));
}

#[test]
fn no_candidate_says_why_for_each_pool() {
    let c = config();
    assert_eq!(
        error(&c, "IPAM_POOL=prod;K8S_POD_NAMESPACE=dev"),
        format!(
            "{INVALID}ipam.pools: no pool applies to this attachment (\"blue\": not named by CNI_ARGS IPAM_POOL; \
             \"blue-overflow\": not named by CNI_ARGS IPAM_POOL; \"blue6\": not named by CNI_ARGS IPAM_POOL; \
             \"prod\": match K8S_POD_NAMESPACE=prod does not hold, CNI_ARGS has K8S_POD_NAMESPACE=dev)"
        )
    );
    let only_prod = json!({"ipam": {"pools": [
        {"name": "prod", "match": {"NS": "prod"}, "ranges": [{"subnet": "10.24.0.0/24"}]}]}});
    assert_eq!(
        error(&only_prod, ""),
        format!(
            "{INVALID}ipam.pools: no pool applies to this attachment \
             (\"prod\": match NS=prod does not hold, CNI_ARGS has no NS)"
        )
    );
}

#[test]
fn ip_ranges_come_first_named_by_index() {
    let mut c = config();
    c["runtimeConfig"] = json!({"ipRanges": [
        [{"subnet": "10.30.0.0/24", "rangeStart": "10.30.0.10", "rangeEnd": "10.30.0.20"}, {"subnet": "10.31.0.0/24"}],
        [{"subnet": "fd00:30::/64", "gateway": "fd00:30::fffe"}]
    ]});
    assert_eq!(chosen(&c, ""), ["ipRanges-0", "ipRanges-1", "blue", "blue-overflow", "blue6"]);
    assert_eq!(chosen(&c, "IPAM_POOL=blue,ipRanges-1"), ["ipRanges-1", "blue"]);
    let pools = candidates(&c, &args("")).unwrap();
    assert_eq!(
        pools[0].subnets(),
        vec!["10.30.0.0/24".parse().unwrap(), "10.31.0.0/24".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(pools[0].ranges[0].range_start.to_string(), "10.30.0.10");
    assert_eq!(pools[0].ranges[0].gateway.map(|g| g.to_string()).as_deref(), Some("10.30.0.1"));
    assert_eq!(pools[1].ranges[0].gateway.map(|g| g.to_string()).as_deref(), Some("fd00:30::fffe"));
    assert_eq!(pools[0].to_json()["name"], "ipRanges-0");

    // ipRanges alone is enough.
    let alone =
        json!({"ipam": {"type": "ipam-delegated"}, "runtimeConfig": {"ipRanges": [[{"subnet": "10.30.0.0/24"}]]}});
    assert_eq!(chosen(&alone, ""), ["ipRanges-0"]);
    assert_eq!(names(&from_ip_ranges(&json!([[{"subnet": "10.30.0.0/24"}]])).unwrap()), ["ipRanges-0"]);
}

#[test]
fn ip_ranges_errors_name_the_path() {
    let e = |v: Value| {
        let err = from_ip_ranges(&v).unwrap_err();
        assert_eq!(err.code, 7);
        err.msg
    };
    assert_eq!(
        e(json!([[{"subnet": "10.30.0.0/24"}], [{"subnet": "10.31.0.1/24"}]])),
        format!("{INVALID}runtimeConfig.ipRanges[1][0].subnet: 10.31.0.1/24 has host bits set: the subnet would be 10.31.0.0/24")
    );
    assert_eq!(e(json!({})), format!("{INVALID}runtimeConfig.ipRanges: must be an array, got {{}}"));
    assert_eq!(e(json!([[]])), format!("{INVALID}runtimeConfig.ipRanges[0]: must not be empty"));
    assert_eq!(
        e(json!([{"subnet": "10.30.0.0/24"}])),
        format!("{INVALID}runtimeConfig.ipRanges[0]: must be an array, got {{\"subnet\":\"10.30.0.0/24\"}}")
    );
    assert_eq!(
        e(json!([[{"subnet": "10.30.0.0/24"}, {"subnet": "fd00::/64"}]])),
        format!(
            "{INVALID}runtimeConfig.ipRanges[0][1].subnet: fd00::/64 is IPv6 but the pool's first range 10.30.0.0/24 \
             is IPv4; all ranges of a pool must be of one family"
        )
    );
    // Through candidates, too.
    let c = json!({"runtimeConfig": {"ipRanges": [[{"subnet": "10.30.0.0/24", "rangeEnd": "10.30.1.0"}]]}});
    assert_eq!(
        error(&c, ""),
        format!("{INVALID}runtimeConfig.ipRanges[0][0].rangeEnd: 10.30.1.0 is outside subnet 10.30.0.0/24")
    );
}

#[test]
fn pools_list_is_required_without_ip_ranges() {
    assert_eq!(
        error(&json!({"ipam": {}}), ""),
        format!("{INVALID}ipam.pools: is required (a non-empty array of pools), unless the runtime passes runtimeConfig.ipRanges (the ipRanges capability)")
    );
    assert_eq!(error(&json!({}), ""), format!("{INVALID}ipam: missing"));
    assert_eq!(error(&json!({"ipam": {"pools": []}}), ""), format!("{INVALID}ipam.pools: must not be empty: it is required (a non-empty array of pools), unless the runtime passes runtimeConfig.ipRanges (the ipRanges capability)"));
    assert_eq!(
        error(&json!({"ipam": {"pools": {"name": "a"}}}), ""),
        format!("{INVALID}ipam.pools: must be an array, got {{\"name\":\"a\"}}")
    );
    // A bad pool is named by its index and name.
    let c = json!({"ipam": {"pools": [{"name": "a", "subnet": "10.0.0.0/24"}, {"name": "b", "ranges": [{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.0"}]}]}});
    assert_eq!(
        error(&c, ""),
        format!(
            "{INVALID}ipam.pools[1] (pool \"b\").ranges[0].rangeStart: 10.1.0.0 is the network address of 10.1.0.0/24"
        )
    );
}

#[test]
fn duplicate_names_and_overlaps_are_error_7() {
    let c = json!({"ipam": {"pools": [
        {"name": "a", "subnet": "10.0.0.0/24"},
        {"name": "b", "subnet": "10.1.0.0/24"},
        {"name": "a", "subnet": "10.2.0.0/24"}]}});
    assert_eq!(error(&c, ""), format!("{INVALID}ipam.pools[2].name: \"a\" is also the name of ipam.pools[0]"));
    let c = json!({"ipam": {"pools": [
        {"name": "a", "subnet": "10.0.0.0/16"},
        {"name": "six", "subnet": "fd00::/64"},
        {"name": "b", "ranges": [{"subnet": "10.9.0.0/24"}, {"subnet": "10.0.7.0/24"}]}]}});
    assert_eq!(
        error(&c, ""),
        format!("{INVALID}ipam.pools[2] (pool \"b\"): its subnet 10.0.7.0/24 overlaps 10.0.0.0/16 of ipam.pools[0] (pool \"a\")")
    );
    let c = json!({"runtimeConfig": {"ipRanges": [[{"subnet": "10.0.0.0/24"}]]},
                   "ipam": {"pools": [{"name": "ipRanges-0", "subnet": "10.5.0.0/24"}]}});
    assert_eq!(
        error(&c, ""),
        format!("{INVALID}ipam.pools[0].name: \"ipRanges-0\" is also the name of runtimeConfig.ipRanges[0]")
    );
    let c = json!({"runtimeConfig": {"ipRanges": [[{"subnet": "10.0.0.0/24"}]]},
                   "ipam": {"pools": [{"name": "a", "subnet": "10.0.0.0/25"}]}});
    assert_eq!(
        error(&c, ""),
        format!(
            "{INVALID}ipam.pools[0] (pool \"a\"): its subnet 10.0.0.0/25 overlaps 10.0.0.0/24 of \
             runtimeConfig.ipRanges[0] (pool \"ipRanges-0\")"
        )
    );
}

#[test]
fn all_pools_ignores_match_and_narrowing() {
    let mut c = config();
    c["args"] = json!({"cni": {"pools": ["blue"]}});
    c["runtimeConfig"] = json!({"ipRanges": [[{"subnet": "10.30.0.0/24"}]]});
    assert_eq!(names(&all_pools(&c).unwrap()), ["ipRanges-0", "blue", "blue-overflow", "blue6", "prod"]);
    assert_eq!(all_pools(&json!({"ipam": {"pools": []}})).unwrap_err().code, 7);
}

#[test]
fn unknown_keys_in_the_configurations_pools_are_error_7_with_a_guess() {
    let with_pool = |pool: Value| json!({"ipam": {"pools": [{"name": "a", "subnet": "10.0.0.0/24"}, pool]}});
    let cases = [
        (json!({"name": "b", "subnet": "10.1.0.0/24", "exlude": ["10.1.0.5"]}), "ipam.pools[1].exlude: unknown key `exlude`: did you mean `exclude`?"),
        (
            json!({"name": "b", "ranges": [{"subnet": "10.1.0.0/24", "rangeStrat": "10.1.0.9"}]}),
            "ipam.pools[1].ranges[0].rangeStrat: unknown key `rangeStrat`: did you mean `rangeStart`?",
        ),
        (
            json!({"name": "b", "subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gateway": "10.1.0.1"}]}),
            "ipam.pools[1].routes[0].gateway: unknown key `gateway`: the keys are dst, gw, mtu, advmss, priority, table, scope",
        ),
    ];
    for (pool, expected) in cases {
        assert_eq!(error(&with_pool(pool), ""), format!("{INVALID}{expected}"));
    }
    // A route's spec 1.1 keys are known.
    let fine = with_pool(json!({"name": "b", "subnet": "10.1.0.0/24", "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]}));
    assert_eq!(chosen(&fine, ""), ["a", "b"]);
    let ranges =
        json!({"runtimeConfig": {"ipRanges": [[{"subnet": "10.30.0.0/24", "gatway": "10.30.0.9"}]]}, "ipam": {}});
    assert_eq!(
        error(&ranges, ""),
        format!("{INVALID}runtimeConfig.ipRanges[0][0].gatway: unknown key `gatway`: did you mean `gateway`?")
    );
}
