//! The operator's cluster commands (`ipam-delegated cluster --conf CONFLIST
//! blocks | release-node [--gone] NODE`) on the Kubernetes API: a real API
//! server (tests/cluster_harness/kube.rs), blocks claimed by the real plugin
//! stack on simulated nodes (a database each), every call a real
//! `ipam-delegated` process; the objects read back as the cluster's admin.
//! The etcd side of the same scenarios: tests/cluster_operator.rs and
//! tests/cluster_dead_node.rs.

mod cluster_harness;
mod stack;
mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cluster_harness::kube::{block_name, node_object_name, KubeStore};
use cluster_harness::*;
use serde_json::{json, Value};
use support::Outcome;

/// Two blocks of 16: 10.70.0.0/28 and 10.70.0.16/28 (29 usable addresses).
fn two_blocks() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.70.0.0/27"}], "blockSize": 28}])
}

/// `node`'s configuration with `ipam.cluster.shareBlocks` set to `share`.
fn sharing(c: &Cluster<KubeStore>, node: &str, share: &str) -> Value {
    let mut config = c.config(node);
    config["ipam"]["cluster"]["shareBlocks"] = json!(share);
    config
}

/// The operator's configuration: n1's, with a shorter offlineGrace than the
/// nodes run with, so that the wait release-node keeps is the node's own.
fn operator(c: &Cluster<KubeStore>) -> Value {
    let mut config = c.config("n1");
    config["ipam"]["cluster"]["offlineGrace"] = json!(0.5);
    config
}

/// release-node's wait in the first test: n2's offlineGrace 1 s + 3 × its
/// ipam.timeout 2 s.
const WAIT: Duration = Duration::from_secs(7);
/// How much sooner than [`WAIT`] a block may become claimable: the API
/// server's `Date`, which times it, counts whole seconds.
const DATE_STEP: Duration = Duration::from_secs(1);

/// The tool's stdout, which must have succeeded quietly.
fn success(out: &Outcome, what: &str) -> String {
    assert_eq!(out.status, 0, "{what}: {}", brief(out));
    out.stdout.clone()
}

fn json_of(out: &Outcome, what: &str) -> Value {
    let text = success(out, what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"))
}

/// The blocks of `blocks --json`'s only pool.
fn pool_blocks(document: &Value) -> &Vec<Value> {
    document["pools"][0]["blocks"].as_array().unwrap_or_else(|| panic!("no blocks in {document:#}"))
}

fn block_of(document: &Value, block: Net4) -> &Value {
    let text = block.to_string();
    pool_blocks(document)
        .iter()
        .find(|b| b["block"] == text)
        .unwrap_or_else(|| panic!("no block {text} in {document:#}"))
}

/// The table row of `block` in `blocks`' text, split on blanks.
fn row(text: &str, block: Net4) -> Vec<&str> {
    let name = block.to_string();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .unwrap_or_else(|| panic!("no row for {name} in\n{text}"));
    line.split_whitespace().collect()
}

#[test]
fn blocks_show_both_nodes_and_release_node_hands_a_nodes_blocks_back_after_its_wait() {
    let _took = Took::new("blocks_show_both_nodes_and_release_node_hands_a_nodes_blocks_back_after_its_wait");
    let mut c = Cluster::on_kubernetes(two_blocks(), 1.0);
    c.call_timeout = 2;
    // n1's blocks are shared, n2's its own.
    let n1 = sharing(&c, "n1", "always");
    let n2 = sharing(&c, "n2", "never");
    let add = |config: &Value, container: &str| c.run("ADD", container, config, &[]);
    let first = added(&add(&n1, "a0"), "n1's first ADD");
    let n2_pods: Vec<IpAddr> = (0..2).map(|i| added(&add(&n2, &format!("b{i}")), "n2's ADD")).collect();
    let ([a], [b]) = (&c.blocks_of("n1")[..], &c.blocks_of("n2")[..]) else { panic!("a block each: {:?}", c.blocks()) };
    let (a, b) = (*a, *b);
    assert!(a.contains(first) && n2_pods.iter().all(|ip| b.contains(*ip)), "{first} in {a}, {n2_pods:?} in {b}");
    // n2 reserves an address by name in n1's shared block: its record there.
    let fixed = a.nth(9);
    let args = format!("IgnoreUnknown=1;IP={fixed}");
    added(&c.run("ADD", "b-static", &n2, &[("CNI_ARGS", args.as_str())]), "n2's static ADD in n1's shared block");
    // n1 fills its block: 16 addresses but the network's and the gateway, one of them n2's.
    let n1_pods = fill_until_100(&c, &n1, vec![first], 13);
    assert_eq!(n1_pods.len(), 13, "n1 filled its block around n2's reservation: {n1_pods:?}");

    // blocks, as n1 sees them: both nodes' blocks, n1's with its use.
    let text = success(&cluster_tool(&c, &n1, &["blocks"]), "blocks");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "pool blue of network cnet, blocks of /28:", "{text}");
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header, ["BLOCK", "NODE", "STATE", "SINCE", "USED", "SIZE", "STATIC", "BORROWED", "LENT", "ALLOCATED"]);
    assert_eq!(lines.last(), Some(&"2 of 2 blocks claimed; this node (n1) owns 1"), "{text}");
    assert_eq!(row(&text, a)[1..3], ["n1", "owned"], "{text}");
    assert_eq!(row(&text, a)[4..], ["13", "14", "1", "0", "0", "13"], "n1's use, and the records of its block: {text}");
    assert_eq!(row(&text, b)[1..3], ["n2", "owned"], "{text}");
    assert_eq!(row(&text, b)[4..], ["-", "-", "0", "0", "0", "0"], "n2's block of its own has no records: {text}");
    let document = json_of(&cluster_tool(&c, &n1, &["blocks", "--json"]), "blocks --json");
    assert_eq!((document["network"].as_str(), document["node"].as_str()), (Some(NETWORK), Some("n1")), "{document}");
    let pool = &document["pools"][0];
    assert_eq!(
        [
            &pool["name"],
            &pool["block_size"],
            &pool["blocks_total"],
            &pool["blocks_claimed"],
            &pool["blocks_released"],
            &pool["blocks_of_node"]
        ],
        [&json!("blue"), &json!(28), &json!(2), &json!(2), &json!(0), &json!(1)],
        "{document:#}"
    );
    assert_eq!(pool_blocks(&document).len(), 2, "{document:#}");
    for (block, node) in [(a, "n1"), (b, "n2")] {
        let shown = block_of(&document, block);
        assert_eq!((&shown["node"], &shown["state"]), (&json!(node), &json!("owned")), "{shown}");
        let since = shown["since"].as_str().unwrap_or_else(|| panic!("no since: {shown}"));
        assert_eq!(row(&text, block)[3], since, "the table agrees with --json: {text}");
    }
    let shown = block_of(&document, a);
    assert_eq!((&shown["used"], &shown["size"]), (&json!(13), &json!(14)), "{shown}");
    assert_eq!(shown["records"], json!({"static": 1, "borrowed": 0, "lent": 0, "allocated": 13}), "{shown}");
    let shown = block_of(&document, b);
    assert_eq!((&shown["used"], &shown["size"]), (&Value::Null, &Value::Null), "another node's block: {shown}");
    // As n2 sees them: its own block's use.
    let as_n2 = json_of(&cluster_tool(&c, &n2, &["blocks", "--json"]), "blocks --json as n2");
    let shown = block_of(&as_n2, b);
    assert_eq!((&shown["used"], &shown["size"]), (&json!(2), &json!(15)), "{shown}");
    assert_eq!(as_n2["pools"][0]["blocks_of_node"], 1, "{as_n2:#}");

    // n2 is declared dead, by an operator whose own grace is shorter.
    let released_at = Instant::now();
    let report = success(&cluster_tool(&c, &operator(&c), &["release-node", "n2"]), "release-node n2");
    eprintln!("{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 3, "{report}");
    assert!(lines[0].starts_with(&format!("released block {b} of pool blue (node n2's since ")), "{report}");
    assert_eq!(
        lines[1],
        format!("deleted the static record of {fixed} (pool blue, container b-static interface eth0)")
    );
    let (when, rest) = lines[2]
        .strip_prefix(
            "released 1 block and 1 address record of node n2 in network cnet; its blocks can be claimed again in 7 \
             s, at ",
        )
        .and_then(|rest| rest.split_once(' '))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(when.len() == 20 && when.ends_with('Z'), "when the blocks are claimable, UTC: {when:?}");
    assert_eq!(
        rest,
        "(n2's own offlineGrace 1 s + 3 × timeout 2 s), the time n2 could still be allocating in them if it is alive \
         (if it can never run again: release-node --gone)"
    );
    // The store: n2's block Released, its record in n1's block and its IPDNode gone.
    let object = c.store.object("ipdblocks", &block_name(b)).unwrap_or_else(|| panic!("n2's IPDBlock is gone"));
    assert_eq!((&object["spec"]["state"], &object["spec"]["owner"]["node"]), (&json!("Released"), &json!("n2")));
    assert!(object["spec"]["released"]["until"].is_string(), "a release without its end: {object}");
    assert!(c.addrs().iter().all(|r| r.node != "n2"), "n2's records outlived its release: {:?}", c.addrs());
    assert!(c.store.object("ipdnodes", &node_object_name("n2")).is_none(), "n2's IPDNode outlived its release");
    assert!(c.store.object("ipdnodes", &node_object_name("n1")).is_some(), "n1's IPDNode went with n2's");
    let document = json_of(&cluster_tool(&c, &n1, &["blocks", "--json"]), "blocks --json after the release");
    assert_eq!((&block_of(&document, b)["node"], &block_of(&document, b)["state"]), (&json!("n2"), &json!("released")));
    assert_eq!(document["pools"][0]["blocks_released"], 1, "{document:#}");
    assert_eq!(block_of(&document, a)["records"]["static"], 0, "{document:#}");
    let text = success(&cluster_tool(&c, &n1, &["blocks"]), "blocks after the release");
    assert_eq!(row(&text, b)[1..3], ["n2", "released"], "{text}");
    assert_eq!(text.lines().last(), Some("2 of 2 blocks claimed, 1 of them released; this node (n1) owns 1"), "{text}");
    let again = success(&cluster_tool(&c, &operator(&c), &["release-node", "n2"]), "release-node n2 again");
    assert_eq!(again, "node n2 holds no block and no address record in network cnet: nothing released\n");

    // The address n2 had reserved is free again, asked of n3: n1, whose
    // block it lies in, keeps it among the addresses it saw taken by others
    // (`cluster_blocks.taken`) and fails with 100, on etcd as here (not this
    // test's subject). n2's block is nobody's yet.
    let n3 = sharing(&c, "n3", "always");
    assert_eq!(added(&add(&n3, "c-freed"), "n3's ADD after the release"), fixed, "n2's reservation was freed");
    let early = add(&n1, "a-wait");
    assert!(released_at.elapsed() < WAIT - DATE_STEP, "too slow to see the release live: {:?}", released_at.elapsed());
    assert_eq!(failure(&early).0, 100, "n2's released block is not claimable yet: {}", brief(&early));
    // n2, back (it was alive after all), uses its released block no more.
    let back = add(&n2, "b-back");
    assert!(released_at.elapsed() < WAIT - DATE_STEP, "too slow to see the release live: {:?}", released_at.elapsed());
    assert_eq!(
        failure(&back).0,
        100,
        "n2 after its release, the pool full but for its released block: {}",
        brief(&back)
    );
    let object = c.store.object("ipdblocks", &block_name(b)).unwrap_or_else(|| panic!("n2's IPDBlock is gone"));
    assert_eq!(object["spec"]["state"], "Released", "n2's ADD after its release took its block back: {object}");

    // Once the wait is over, n1 claims the block.
    let (claimed, waited) = claimed_after_wait(&c, &n1, released_at, WAIT);
    assert!(waited >= WAIT - DATE_STEP, "n2's released block was claimed after {waited:.2?}, before its wait");
    assert!(b.contains(claimed), "{claimed} is not in n2's former block {b}");
    assert_eq!(c.blocks_of("n1"), vec![a, b], "n1 owns both blocks: {:?}", c.blocks());
    // n2's pods of before its release are presumed dead with it: their
    // addresses are the new owner's to hand out. Their DEL (n2's kubelet
    // cleaning up) gives back nothing of n1's.
    let n2_old = ["b0", "b1", "b-static"];
    let (_, twice) = held_by(&c, &["n1", "n2", "n3"]);
    for (ip, first, second) in &twice {
        let stale = |h: &Holder| h.0 == "n2" && n2_old.contains(&h.1.as_str());
        assert!(stale(first) || stale(second), "{ip} held twice: by {first:?} and {second:?}");
    }
    for container in n2_old {
        c.run("DEL", container, &n2, &[]).assert_quiet_success();
    }
    let records = c.addrs();
    for (ip, node, container) in [(claimed, "n1", "a-wait"), (fixed, "n3", "c-freed")] {
        assert!(
            records.iter().any(|r| r.ip == ip && r.node == node && r.container == container),
            "n2's DEL of its old pods took {node}'s record of {ip}: {records:?}"
        );
    }
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
    eprintln!(
        "release-node: n2's block claimable after {waited:.2?}; n1 got {claimed} in it; {} held twice before n2's DEL; \
         records in it then: {:?}",
        twice.len(),
        records.iter().filter(|r| b.contains(r.ip)).collect::<Vec<_>>()
    );
}

#[test]
fn release_node_gone_makes_a_nodes_blocks_claimable_at_once() {
    let _took = Took::new("release_node_gone_makes_a_nodes_blocks_claimable_at_once");
    // A long grace: --gone waits none of it.
    let c = Cluster::on_kubernetes(two_blocks(), 300.0);
    let n1 = sharing(&c, "n1", "always");
    let n2 = sharing(&c, "n2", "never");
    let add = |config: &Value, container: &str| c.run("ADD", container, config, &[]);
    let n2_pod = added(&add(&n2, "b0"), "n2's ADD");
    let [b] = c.blocks_of("n2")[..] else { panic!("n2 claimed a block: {:?}", c.blocks()) };
    fill_until_100(&c, &n1, Vec::new(), 14);

    let document = json_of(&cluster_tool(&c, &c.config("n1"), &["release-node", "--gone", "n2", "--json"]), "--gone");
    assert_eq!(
        (&document["gone"], &document["claimable_in_seconds"], &document["node"]),
        (&json!(true), &json!(0), &json!("n2")),
        "{document:#}"
    );
    assert_eq!(document["blocks"].as_array().map(Vec::len), Some(1), "{document:#}");
    assert_eq!(document["blocks"][0]["block"], b.to_string(), "{document:#}");
    assert!(c.store.object("ipdblocks", &block_name(b)).is_none(), "n2's IPDBlock, holding no record, is deleted");
    assert!(c.store.object("ipdnodes", &node_object_name("n2")).is_none(), "n2's IPDNode outlived its release");
    // Without waiting out n2's grace, n1 takes its former block.
    let took_over = added(&add(&n1, "a-over"), "n1's ADD at once after release-node --gone");
    assert!(b.contains(took_over), "{took_over} is not in n2's former block {b}");
    assert_eq!(c.blocks_of("n1").len(), 2, "{:?}", c.blocks());
    c.run("DEL", "b0", &n2, &[]).assert_quiet_success();
    assert!(c.addrs().iter().any(|r| r.ip == took_over && r.node == "n1"), "n2's DEL of {n2_pod}: {:?}", c.addrs());
    assert_covered(&c, &held_once(&c, &["n1", "n2"]));
}
