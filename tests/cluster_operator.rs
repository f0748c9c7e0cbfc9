//! The operator's cluster commands (`ipam-delegated cluster --conf CONFLIST
//! blocks | release-node NODE`) against a real etcd, over blocks claimed by
//! the real plugin stack on two nodes (two databases, one etcd).

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipam_ds_cluster::etcd::testing::TestEtcd;
use serde_json::{json, Value};
use tempfile::TempDir;

mod support;

use support::{bin_dir, run_args, suite_bin, Outcome, CLUSTER_STACK};

const NETWORK: &str = "blue-net";
const PREFIX: &str = "/ipam-delegated/";
/// offlineGrace 1 s + 3 × ipam.timeout 1 s.
const TTL: Duration = Duration::from_secs(4);

/// One node: its configuration file (pointing at its own database) in a
/// directory of its own.
struct Node {
    name: &'static str,
    dir: TempDir,
    conf: String,
}

impl Node {
    fn new(name: &'static str, endpoint: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("blue-net.conflist").into_os_string().into_string().expect("UTF-8 path");
        let node = Node { name, dir, conf };
        std::fs::write(&node.conf, conflist(name, endpoint, &node.db()).to_string()).expect("writing the conflist");
        node
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("allocations.sqlite")
    }

    /// A real ADD through the stack, as the bridge plugin would call it.
    fn add(&self, container: &str, cni_args: &str) -> Outcome {
        let list: Value = serde_json::from_slice(&std::fs::read(&self.conf).expect("the conflist")).expect("JSON");
        let mut config = list["plugins"][0].clone();
        config["name"] = list["name"].clone();
        config["cniVersion"] = list["cniVersion"].clone();
        let env = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", "/proc/self/ns/net"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", bin_dir().to_str().expect("UTF-8 path")),
            ("CNI_ARGS", cni_args),
        ];
        run_args(&suite_bin("ipam-delegated"), &[], &env, config.to_string().as_bytes(), None)
    }

    /// The address an ADD that must succeed got.
    fn add_address(&self, container: &str, cni_args: &str) -> Ipv4Addr {
        let out = self.add(container, cni_args);
        assert_eq!(out.status, 0, "ADD {container} on {}: {out:#?}", self.name);
        address_of(out.result())
    }

    /// `ipam-delegated cluster --conf <this node's conflist> ARGS`.
    fn cluster(&self, args: &[&str]) -> Outcome {
        let mut all = vec!["cluster", "--conf", self.conf.as_str()];
        all.extend_from_slice(args);
        tool(&all)
    }
}

fn conflist(node: &str, endpoint: &str, db: &Path) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": "cni-blue",
             "ipam": {
                "type": "ipam-delegated",
                "delegates": CLUSTER_STACK,
                "database": db,
                "timeout": 1,
                // Three blocks of eight: 10.40.0.8/29, .16/29 and .24/29.
                "pools": [{"name": "blue", "blockSize": 29,
                           "ranges": [{"subnet": "10.40.0.0/24", "rangeStart": "10.40.0.8", "rangeEnd": "10.40.0.31"}]}],
                "cluster": {"etcd": {"endpoints": [endpoint], "timeout": 1}, "node": node, "offlineGrace": 1,
                            "shareBlocks": "never"}
             }},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

fn tool(args: &[&str]) -> Outcome {
    run_args(&suite_bin("ipam-delegated"), args, &[], b"", None)
}

fn address_of(result: &Value) -> Ipv4Addr {
    let text = result["ips"][0]["address"].as_str().unwrap_or_else(|| panic!("no address in {result}"));
    text.split('/').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("address {text:?}"))
}

/// The addresses of a block given as `a.b.c.d/len`.
fn block_addresses(block: &str) -> (Ipv4Addr, Ipv4Addr) {
    let (base, len) = block.split_once('/').expect("a CIDR");
    let base: Ipv4Addr = base.parse().expect("an IPv4 block");
    let len: u32 = len.parse().expect("a prefix length");
    let last = u32::from(base) + (1u32 << (32 - len)) - 1;
    (base, Ipv4Addr::from(last))
}

fn inside(address: Ipv4Addr, block: &str) -> bool {
    let (first, last) = block_addresses(block);
    first <= address && address <= last
}

fn success(out: &Outcome) -> &str {
    assert_eq!((out.status, out.stderr.as_str()), (0, ""), "{out:#?}");
    &out.stdout
}

fn json_of(out: &Outcome) -> Value {
    serde_json::from_str(success(out)).unwrap_or_else(|e| panic!("not JSON ({e}): {out:#?}"))
}

/// A failure: exit `status`, nothing on stdout, one line on stderr, returned.
fn failure_line(out: &Outcome, status: i32) -> String {
    assert_eq!(out.status, status, "{out:#?}");
    assert_eq!(out.stdout, "", "{out:#?}");
    assert_eq!(out.stderr.lines().count(), 1, "one error line: {out:#?}");
    assert!(out.stderr.starts_with("ipam-delegated: "), "{out:#?}");
    out.stderr.trim_end().to_string()
}

/// The blocks of `blocks --json`'s only pool, as (block, node, state).
fn owners(document: &Value) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    document["pools"][0]["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| (text(&b["block"]), text(&b["node"]), text(&b["state"])))
        .collect()
}

fn block_of<'d>(document: &'d Value, block: &str) -> &'d Value {
    document["pools"][0]["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["block"] == block)
        .unwrap_or_else(|| panic!("no block {block} in {document:#}"))
}

/// The table row of `block` in `blocks`' text, split on blanks.
fn row<'t>(text: &'t str, block: &str) -> Vec<&'t str> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(block))
        .unwrap_or_else(|| panic!("no row for {block} in\n{text}"));
    line.split_whitespace().collect()
}

#[test]
fn blocks_show_both_nodes_and_release_node_hands_a_dead_nodes_blocks_back() {
    let etcd = TestEtcd::start();
    let endpoint = etcd.endpoint();
    let (n1, n2) = (Node::new("n1", &endpoint), Node::new("n2", &endpoint));

    // n1 and n2 claim a block each; n2 also reserves an address by name.
    let first = n1.add_address("c-n1-0", "");
    n2.add_address("c-n2-0", "");
    let seen_by_n2 = json_of(&n2.cluster(&["blocks", "--json"]));
    let n2_block = owners(&seen_by_n2).into_iter().find(|(_, node, _)| node == "n2").expect("a block of n2").0;
    let fixed = block_addresses(&n2_block).1;
    assert_eq!(n2.add_address("c-n2-1", &format!("IP={fixed}")), fixed);
    // n1 fills its block, claims the last free one and fills it too: then
    // the cluster has no room for it (n2's block is n2's).
    let mut n1_addresses = vec![first];
    let full = loop {
        let out = n1.add(&format!("c-n1-{}", n1_addresses.len()), "");
        if out.status != 0 {
            break out;
        }
        n1_addresses.push(address_of(out.result()));
        assert!(n1_addresses.len() <= 16, "n1 got more than its two blocks: {n1_addresses:?}");
    };
    assert_eq!(full.code(), 100, "{full:#?}");
    assert_eq!(n1_addresses.len(), 16, "two blocks of eight: {n1_addresses:?}");
    assert!(n1_addresses.iter().all(|a| !inside(*a, &n2_block)), "n1 used n2's block {n2_block}: {n1_addresses:?}");

    // blocks, as n1 sees them: both nodes' blocks, n1's with their use.
    let text = success(&n1.cluster(&["blocks"])).to_string();
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "pool blue of network blue-net, blocks of /29:");
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header, ["BLOCK", "NODE", "STATE", "SINCE", "USED", "SIZE", "STATIC", "BORROWED", "LENT", "ALLOCATED"]);
    assert_eq!(lines.last(), Some(&"3 of 3 blocks claimed; this node (n1) owns 2"));
    let document = json_of(&n1.cluster(&["blocks", "--json"]));
    assert_eq!((document["network"].as_str(), document["node"].as_str()), (Some(NETWORK), Some("n1")));
    let pool = &document["pools"][0];
    assert_eq!(
        (&pool["name"], &pool["block_size"], &pool["blocks_total"], &pool["blocks_claimed"], &pool["blocks_of_node"]),
        (&json!("blue"), &json!(29), &json!(3), &json!(3), &json!(2))
    );
    let blocks = owners(&document);
    let expected_blocks: Vec<&str> = vec!["10.40.0.8/29", "10.40.0.16/29", "10.40.0.24/29"];
    assert_eq!(blocks.iter().map(|(b, _, _)| b.as_str()).collect::<Vec<_>>(), expected_blocks, "address order");
    for (block, node, state) in &blocks {
        assert_eq!(state, "owned");
        assert_eq!(node, if *block == n2_block { "n2" } else { "n1" }, "{block}");
        let b = block_of(&document, block);
        let cells = row(&text, block);
        assert_eq!((cells[1], cells[2]), (node.as_str(), "owned"), "the table agrees with --json: {cells:?}");
        assert!(b["since"].as_str().is_some_and(|s| s.ends_with('Z') && cells[3] == s), "{b} {cells:?}");
        if node == "n1" {
            assert_eq!((&b["used"], &b["size"]), (&json!(8), &json!(8)), "{b}");
            assert_eq!(&cells[4..], ["8", "8", "0", "0", "0", "0"]);
        } else {
            assert_eq!((&b["used"], &b["size"]), (&Value::Null, &Value::Null), "{b}");
            assert_eq!(b["records"], json!({"static": 1, "borrowed": 0, "lent": 0, "allocated": 0}));
            assert_eq!(&cells[4..], ["-", "-", "1", "0", "0", "0"]);
        }
    }
    // As n2 sees them: its own block's use (one dynamic lease, one static).
    let n2_view = json_of(&n2.cluster(&["blocks", "--json"]));
    assert_eq!(
        (&block_of(&n2_view, &n2_block)["used"], &block_of(&n2_view, &n2_block)["size"]),
        (&json!(2), &json!(8))
    );
    assert_eq!(n2_view["pools"][0]["blocks_of_node"], 1);

    // n2 is declared dead.
    let released_at = Instant::now();
    let out = n1.cluster(&["release-node", "n2"]);
    let report = success(&out).to_string();
    eprintln!("{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 3, "{report}");
    assert!(lines[0].starts_with(&format!("released block {n2_block} of pool blue (node n2's since ")), "{report}");
    assert_eq!(lines[1], format!("deleted the static record of {fixed} (pool blue, container c-n2-1 interface eth0)"));
    let (when, rest) = lines[2]
        .strip_prefix(
            "released 1 block and 1 address record of node n2 in network blue-net; its blocks can be claimed again \
             in 4 s, at ",
        )
        .and_then(|rest| rest.split_once(' '))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(when.len() == 20 && when.ends_with('Z'), "when the blocks are claimable, UTC: {when:?}");
    assert_eq!(
        rest,
        "(offlineGrace 1 s + 3 × timeout 1 s), the time n2 could still be allocating in them if it is alive (if it \
         can never run again: release-node --gone)"
    );
    let dump = etcd.dump(PREFIX);
    let tombstone = dump
        .iter()
        .find(|(key, _)| key.ends_with(&format!("/blocks/{}", n2_block.replace('/', "-"))))
        .unwrap_or_else(|| panic!("n2's block key is gone: {dump:?}"));
    assert!(tombstone.1.contains("\"released\":true") && tombstone.1.contains("\"node\":\"n2\""), "{tombstone:?}");
    assert!(!dump.iter().any(|(key, value)| key.contains("/addrs/") && value.contains("\"n2\"")), "{dump:?}");
    // While the tombstone lives, n2's block is nobody's to claim.
    let still = n1.add("c-n1-wait", "");
    assert!(released_at.elapsed() < TTL, "too slow to see the tombstone live: {:?}", released_at.elapsed());
    assert_eq!(still.code(), 100, "n2's block is not claimable yet: {still:#?}");
    let document = json_of(&n1.cluster(&["blocks", "--json"]));
    assert_eq!(block_of(&document, &n2_block)["state"], "released");
    assert_eq!(
        block_of(&document, &n2_block)["records"],
        json!({"static": 0, "borrowed": 0, "lent": 0, "allocated": 0})
    );
    assert_eq!(document["pools"][0]["blocks_released"], 1);
    let text = success(&n1.cluster(&["blocks"])).to_string();
    assert_eq!(row(&text, &n2_block)[1..3], ["n2", "released"]);
    assert_eq!(text.lines().last(), Some("3 of 3 blocks claimed, 1 of them released; this node (n1) owns 2"));
    // n2 holds nothing more.
    let again = n1.cluster(&["release-node", "n2", "--json"]);
    assert_eq!(
        json_of(&again),
        json!({"network": NETWORK, "node": "n2", "blocks": [], "records": [],
               "claimable_in_seconds": null, "claimable_at": null, "gone": false})
    );
    assert_eq!(
        success(&n1.cluster(&["release-node", "n2"])),
        "node n2 holds no block and no address record in network blue-net: nothing released\n"
    );

    // Once the lease ends, n1 claims the block.
    let deadline = released_at + TTL + Duration::from_secs(10);
    let claimed = loop {
        let out = n1.add("c-n1-wait", "");
        if out.status == 0 {
            break address_of(out.result());
        }
        assert_eq!(out.code(), 100, "{out:#?}");
        assert!(Instant::now() < deadline, "n2's block was not claimable {:?} after its release", TTL);
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(released_at.elapsed() >= TTL - Duration::from_millis(500), "claimed after {:?}", released_at.elapsed());
    assert!(inside(claimed, &n2_block), "{claimed} is not in n2's former block {n2_block}");
    let document = json_of(&n1.cluster(&["blocks", "--json"]));
    let b = block_of(&document, &n2_block);
    assert_eq!((&b["node"], &b["state"], &b["used"]), (&json!("n1"), &json!("owned"), &json!(1)), "{b}");
    assert_eq!(document["pools"][0]["blocks_of_node"], 3);

    // metrics: n1's blocks and records from its database alone.
    let metrics = success(&tool(&["metrics", "--database", n1.db().to_str().expect("UTF-8")])).to_string();
    let samples: Vec<&str> = metrics.lines().filter(|l| l.starts_with("ipam_delegated_cluster_")).collect();
    assert_eq!(
        samples,
        [
            "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"owned\"} 3",
            "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"releasing\"} 0",
            "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"contested\"} 0",
        ]
    );
}

#[test]
fn release_node_gone_frees_a_nodes_blocks_at_once() {
    let etcd = TestEtcd::start();
    let endpoint = etcd.endpoint();
    let (n1, n2) = (Node::new("n1", &endpoint), Node::new("n2", &endpoint));
    // n2 takes the block of the pool that n1 would claim last.
    n2.add_address("c-n2-0", "");
    let n2_block = owners(&json_of(&n2.cluster(&["blocks", "--json"])))
        .into_iter()
        .find(|(_, node, _)| node == "n2")
        .expect("a block of n2")
        .0;
    let out = n1.cluster(&["release-node", "--gone", "n2", "--json"]);
    let document = json_of(&out);
    assert_eq!((&document["gone"], &document["claimable_in_seconds"]), (&json!(true), &json!(0)), "{document}");
    assert!(!etcd.dump(PREFIX).iter().any(|(key, _)| key.contains("/blocks/")), "no block record, no tombstone");
    // Without waiting out n2's grace, n1 fills the whole pool, n2's former block included.
    let mut got = Vec::new();
    loop {
        let out = n1.add(&format!("c-n1-{}", got.len()), "");
        if out.status != 0 {
            assert_eq!(out.code(), 100, "{out:#?}");
            break;
        }
        got.push(address_of(out.result()));
        assert!(got.len() <= 24, "more than the pool: {got:?}");
    }
    assert!(got.iter().any(|a| inside(*a, &n2_block)), "n1 got nothing of n2's former block {n2_block}: {got:?}");
    let text = success(&n1.cluster(&["release-node", "--gone", "n1"])).to_string();
    assert!(text.ends_with("as gone for good: its blocks can be claimed at once\n"), "{text}");
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a loopback port").port()
}

#[test]
fn a_bad_conflist_or_an_unreachable_etcd_is_one_line_and_exit_1() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let node = Node::new("n1", &endpoint);
    for args in [&["blocks"][..], &["blocks", "--json"], &["release-node", "n2"]] {
        let line = failure_line(&node.cluster(args), 1);
        assert!(line.contains("etcd is unreachable") && line.contains(&endpoint), "{args:?}: {line}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.conflist");
    let missing = missing.to_str().expect("UTF-8");
    let line = failure_line(&tool(&["cluster", "--conf", missing, "blocks"]), 1);
    assert!(line.contains(&format!("cannot read {missing}")), "{line}");
    let cases: [(&str, &str); 4] = [
        ("{", "not JSON"),
        (
            r#"{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge", "ipam": {"type": "host-local"}}]}"#,
            "no plugin has an ipam of type ipam-delegated",
        ),
        (r#"{"name": "n", "type": "bridge", "ipam": {"type": "ipam-delegated", "pools": []}}"#, "no \"cluster\""),
        (
            r#"{"name": "n", "type": "bridge", "ipam": {"type": "ipam-delegated", "cluster": {"node": "n1"}}}"#,
            "ipam.cluster.etcd or ipam.cluster.kubernetes: is required",
        ),
    ];
    for (text, part) in cases {
        let file = dir.path().join("bad.conflist");
        std::fs::write(&file, text).expect("writing");
        let line = failure_line(&tool(&["cluster", "--conf", file.to_str().expect("UTF-8"), "blocks"]), 1);
        assert!(line.contains(part) && line.contains("bad.conflist"), "{text}: {line}");
    }
    // Usage errors are clap's (exit 2): no --conf, a NODE that is no node name.
    let out = tool(&["cluster", "blocks"]);
    assert_eq!(out.status, 2, "{out:#?}");
    assert!(out.stderr.contains("--conf <CONFLIST>"), "{out:#?}");
    let out = node.cluster(&["release-node", "a/b"]);
    assert_eq!(out.status, 2, "{out:#?}");
    assert!(out.stderr.contains("invalid value 'a/b'") && out.stderr.contains("not a node name"), "{out:#?}");
    // --conf after the command is the same.
    let line = failure_line(&tool(&["cluster", "blocks", "--conf", &node.conf]), 1);
    assert!(line.contains("etcd is unreachable"), "{line}");
}

#[test]
fn help_man_pages_and_completions_know_the_cluster_commands() {
    let help = success(&tool(&["cluster", "--help"])).to_string();
    for part in ["blocks", "release-node", "--conf <CONFLIST>", "ipam.cluster"] {
        assert!(help.contains(part), "{part} in {help}");
    }
    let help = success(&tool(&["cluster", "blocks", "--help"])).to_string();
    assert!(help.contains("--json") && help.contains("owner node") && help.contains("--conf"), "{help}");
    let help = success(&tool(&["cluster", "release-node", "--help"])).to_string();
    assert!(help.contains("<NODE>") && help.contains("offlineGrace + 3 x") && help.contains("lease"), "{help}");
    let bash = success(&tool(&["completions", "bash"])).to_string();
    assert!(bash.contains("release-node") && bash.contains("--conf"), "the completion knows the commands");
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = success(&tool(&["man", dir.path().to_str().expect("UTF-8")])).to_string();
    assert!(pages.contains("ipam-delegated-cluster.1"), "{pages}");
    let page = std::fs::read_to_string(dir.path().join("ipam-delegated-cluster.1")).expect("the cluster page");
    assert!(page.contains("release\\-node") && page.contains("blocks"), "{page}");
}
