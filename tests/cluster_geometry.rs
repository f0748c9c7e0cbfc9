//! Cluster mode with pool geometries and settings that used to fail for
//! good or answer wrongly: many small blocks in several pools (the
//! confirming read over etcd's 128 operations per transaction), a lender
//! holding more than 128 lent addresses, pools whose blocks hold no usable
//! address (excluded, gateway, network or broadcast only), and addresses
//! asked for by name that no pool can hand out. Each runs real
//! `ipam-delegated` processes against a real etcd (tests/cluster_harness).

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;

use cluster_harness::*;
use serde_json::json;
use support::parallel;

/// The addresses (every family) of a successful ADD.
fn addresses(out: &support::Outcome) -> Vec<IpAddr> {
    out.result()["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("no ips: {}", brief(out)))
        .iter()
        .map(|ip| {
            let cidr = ip["address"].as_str().unwrap_or_default();
            cidr.split('/').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("address {cidr}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Settings that failed for good

/// Two pools cut into blocks of four addresses: once the node has room in
/// more than 32 blocks of each, the confirming read is more than etcd's 128
/// operations per transaction, and has to be split, not refused for good.
#[test]
fn many_small_blocks_in_two_pools_keep_add_working() {
    let _took = Took::new("many_small_blocks_in_two_pools_keep_add_working");
    let c = Cluster::new(
        json!([
            {"name": "blue", "ranges": [{"subnet": "10.50.0.0/22"}], "blockSize": 30},
            {"name": "blue6", "ranges": [{"subnet": "fd00:50::/64"}], "blockSize": 126}
        ]),
        300.0,
    );
    let id = |i: usize| format!("small-{i}");
    let outs = parallel(140, 1, |i| c.add("n1", &id(i)));
    let mut blocks_of: Vec<(usize, u128, u128)> = Vec::new();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.status, 0, "ADD {}: {}", id(i), brief(out));
        let ips = addresses(out);
        assert_eq!(ips.len(), 2, "ADD {}: dual-stack", id(i));
        // The /30 and the /126 each address lies in.
        let block = |ip: &IpAddr| match ip {
            IpAddr::V4(v4) => u128::from(u32::from(*v4) >> 2),
            IpAddr::V6(v6) => u128::from(*v6) >> 2,
        };
        blocks_of.push((i, block(&ips[0]), block(&ips[1])));
    }
    // One DEL in as many blocks of each pool as can be: every fourth ADD
    // when the blocks filled in order.
    let (mut freed4, mut freed6) = (BTreeSet::new(), BTreeSet::new());
    for (i, b4, b6) in blocks_of {
        if !freed4.contains(&b4) && !freed6.contains(&b6) {
            freed4.insert(b4);
            freed6.insert(b6);
            c.del("n1", &id(i)).assert_quiet_success();
        }
    }
    // More than 32 blocks with room per pool is more than one transaction's
    // worth of confirming reads (32 blocks per pool are read, 2 reads each).
    assert!(freed4.len() >= 32 && freed6.len() >= 32, "blocks with room: {} and {}", freed4.len(), freed6.len());
    let mut seen: BTreeSet<IpAddr> = BTreeSet::new();
    for i in 140..160 {
        let out = c.add("n1", &id(i));
        assert_eq!(out.status, 0, "ADD {} after the DELs: {}", id(i), brief(&out));
        for ip in addresses(&out) {
            assert!(seen.insert(ip), "{ip} handed out twice");
        }
    }
    held_once(&c, &["n1"]);
    let mut config = c.config("n1");
    config["cniVersion"] = json!("1.1.0");
    c.run("STATUS", "status", &config, &[]).assert_quiet_success();
}

/// The first half of the range is excluded: no block of it has an address
/// to hand out, and claiming one (and answering 100) is claiming for nothing.
#[test]
fn blocks_without_a_usable_address_are_never_claimed() {
    let _took = Took::new("blocks_without_a_usable_address_are_never_claimed");
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.54.0.0/22"}], "blockSize": 27,
                "exclude": ["10.54.0.0/23"]}]),
        300.0,
    );
    let nodes = ["n1", "n2", "n3", "n4"];
    for k in 0..10 {
        for n in nodes {
            let out = c.add(n, &format!("{n}-{k}"));
            assert_eq!(out.status, 0, "ADD {n}-{k}: {}; blocks: {:?}", brief(&out), c.blocks());
        }
    }
    let excluded = Net4::cidr("10.54.0.0/23");
    for b in c.blocks() {
        assert!(!excluded.contains(b.net.nth(0)), "block {} (node {}) is wholly excluded, yet claimed", b.net, b.node);
    }
    held_once(&c, &nodes);
}

// ---------------------------------------------------------------------------
// Wrong answers

/// An address asked for by name that the pool never hands out (its subnet's
/// network or broadcast address, its gateway) is 102 naming it and why, in
/// cluster mode as on one node; nothing is written to etcd.
#[test]
fn unusable_static_addresses_are_error_102_naming_why() {
    let _took = Took::new("unusable_static_addresses_are_error_102_naming_why");
    let mut c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.55.0.0/22", "gateway": "10.55.0.1"}], "blockSize": 27}]),
        300.0,
    );
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    let cases = [
        ("10.55.0.0", "network address of 10.55.0.0/22"),
        ("10.55.3.255", "broadcast address of 10.55.0.0/22"),
        ("10.55.0.1", "gateway of 10.55.0.0/22"),
    ];
    // Before the node has a block of the pool, and after.
    for round in ["no-block", "with-block"] {
        for (ip, why) in cases {
            let out = c.add_static("n1", &format!("{round}-{ip}"), ip.parse().unwrap());
            let (code, msg) = failure(&out);
            assert_eq!((code, msg.contains(ip) && msg.contains(why)), (102, true), "{round}, IP={ip}: {msg}");
        }
        assert!(c.addrs().is_empty(), "{round}: a refused request wrote to etcd: {:?}", c.addrs());
        if round == "no-block" {
            assert_eq!(c.add("n1", "plain").status, 0);
        }
    }
}

/// An address asked for by name outside every pool names the pools and
/// their subnets, whether or not this node has a block of them.
#[test]
fn a_static_address_outside_every_pool_names_the_pools() {
    let _took = Took::new("a_static_address_outside_every_pool_names_the_pools");
    let c = Cluster::new(
        json!([
            {"name": "blue", "ranges": [{"subnet": "10.56.0.0/22"}], "blockSize": 27},
            {"name": "blue6", "ranges": [{"subnet": "fd00:56::/64"}]}
        ]),
        300.0,
    );
    for round in ["no-block", "with-block"] {
        let out = c.add_static("n1", &format!("{round}-outside"), "10.99.0.5".parse().unwrap());
        let (code, msg) = failure(&out);
        assert_eq!(code, 102, "{round}: {msg}");
        for part in ["10.99.0.5", "blue", "10.56.0.0/22", "blue6", "fd00:56::/64"] {
            assert!(msg.contains(part), "{round}: the message names {part}: {msg}");
        }
        if round == "no-block" {
            assert_eq!(c.add("n1", "plain").status, 0);
        }
    }
}

/// As ipam-ds-cluster/README.md says: an address free in another node's
/// block is refused (101 naming the block and its owner) unless the owner
/// has lent it out; a lent one is granted.
#[test]
fn a_static_address_in_another_nodes_block_is_granted_only_when_lent() {
    let _took = Took::new("a_static_address_in_another_nodes_block_is_granted_only_when_lent");
    // offlineGrace 0: every ADD reads etcd, so an owner lends at its very next ADD.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.57.0.0/24"}], "blockSize": 24}]), 0.0);
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    assert_eq!(c.add("n1", "a-0").status, 0);
    let free: IpAddr = "10.57.0.200".parse().unwrap();
    let (code, msg) = failure(&c.add_static("n2", "s-free", free));
    assert_eq!(code, 101, "{msg}");
    assert!(msg.contains("it lies in block 10.57.0.0/24, which node n1 owns"), "{msg}");
    // n2 finds no room (100) and asks; n1 lends at its next ADD.
    assert_eq!(failure(&c.add("n2", "b-0")).0, 100);
    assert_eq!(c.add("n1", "a-1").status, 0);
    let lent = c.addrs().into_iter().find(|a| a.kind == "lent").expect("n1 lent addresses");
    let out = c.add_static("n2", "s-lent", lent.ip);
    assert_eq!(out.status, 0, "{}: {}", lent.ip, brief(&out));
    let record = c.addrs().into_iter().find(|a| a.ip == lent.ip).expect("its record");
    assert_eq!((record.kind.as_str(), record.node.as_str(), record.lender.as_str()), ("static", "n2", "n1"));
    held_once(&c, &["n1", "n2"]);
}

/// A GC after the containers went (a reboot) releases every address record
/// of the node, however many: more than etcd's 128 operations per
/// transaction are released in several, not left for good.
#[test]
fn gc_releases_more_than_128_address_records() {
    let _took = Took::new("gc_releases_more_than_128_address_records");
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.58.0.0/22"}], "blockSize": 24}]), 300.0);
    let ip = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 58, 1, 0)) + i));
    let outs = parallel(140, 2, |i| c.add_static("n1", &format!("s-{i}"), ip(i as u32 + 2)));
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.status, 0, "static ADD s-{i}: {}", brief(out));
    }
    assert_eq!(c.addrs().len(), 140);
    c.gc("n1", &[]).assert_quiet_success();
    assert_eq!(c.addrs().len(), 0, "records left in etcd: {:?}", c.addrs().iter().take(3).collect::<Vec<_>>());
    assert!(c.node_records("n1").is_empty(), "the node's rows: {:?}", c.node_records("n1").len());
}
