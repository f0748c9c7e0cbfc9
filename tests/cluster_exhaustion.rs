//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"):
//! exhaustion, down to the last address. Simulated nodes, each with a
//! database of its own, share one real etcd (tests/cluster_harness; a missing
//! etcd fails these tests, never skips them); every call is a real
//! `ipam-delegated` process.
//!
//! What is checked: every usable address of the pool is used by some node,
//! none twice, nodes without a block get addresses their owners lend
//! (ipam-ds-cluster/README.md "Lending and borrowing"), and what a node holds
//! as lent out is recorded so in etcd.

mod cluster_harness;
mod stack;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;
use support::{parallel, Outcome};

#[test]
fn exhaustion_with_borrowing() {
    let _took = Took::new("exhaustion_with_borrowing");
    const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];
    // Four /29 blocks; 29 usable addresses (.2-.30).
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.60.0.0/27"}], "blockSize": 29}]), 300.0);
    let usable: BTreeSet<IpAddr> = (2..=30u8).map(|d| IpAddr::from([10, 60, 0, d])).collect();
    let mut got: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut per_node: BTreeMap<&str, usize> = NODES.iter().map(|n| (*n, 0)).collect();
    let mut codes: BTreeMap<u64, usize> = BTreeMap::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 40, "no round where every node got 100 within 40 rounds; got {} addresses", got.len());
        let outs: Vec<Outcome> =
            parallel(NODES.len(), NODES.len(), |k| c.add(NODES[k], &format!("ex-{rounds}-{}", NODES[k])));
        let mut all_full = true;
        for (k, out) in outs.iter().enumerate() {
            if out.status == 0 {
                all_full = false;
                let ip = ipv4_of(out.result());
                assert!(usable.contains(&ip), "{ip} is not a usable address of 10.60.0.0/27");
                if let Some(other) = got.insert(ip, NODES[k].to_string()) {
                    panic!("{ip} handed out twice: to {other} and to {}", NODES[k]);
                }
                *per_node.get_mut(NODES[k]).unwrap() += 1;
            } else {
                let (code, msg) = failure(out);
                *codes.entry(code).or_default() += 1;
                assert_eq!(code, 100, "round {rounds}: {}: {msg}", NODES[k]);
            }
        }
        if all_full {
            break;
        }
    }
    let held = held_once(&c, &NODES);
    assert_eq!(held.len(), got.len(), "the databases hold what was handed out");
    assert_covered(&c, &held);
    // What a node holds as lent out is recorded so in etcd: still lent by
    // it, or borrowed from it by the attachment that holds it.
    let addrs = c.addrs();
    let lent = lent_holds(&c, &NODES);
    for (ip, lender) in &lent {
        let record = addrs.iter().find(|a| a.ip == *ip);
        let ok = match record {
            Some(a) if a.kind == "lent" => &a.node == lender,
            Some(a) if a.kind == "borrowed" => {
                &a.lender == lender && held.get(ip).is_some_and(|(n, ctr)| n == &a.node && ctr == &a.container)
            }
            _ => false,
        };
        assert!(ok, "{lender} holds {ip} as lent out, but etcd says {record:?} and the databases {:?}", held.get(ip));
    }
    let borrowed = addrs.iter().filter(|a| a.kind == "borrowed").count();
    let owners: BTreeSet<String> = c.blocks().into_iter().filter(|b| !b.released).map(|b| b.node).collect();
    let without_block: Vec<&str> = NODES.iter().copied().filter(|n| !owners.contains(*n)).collect();
    eprintln!(
        "exhaustion: {} of 29 addresses in {rounds} rounds; per node {per_node:?}; failures by code {codes:?}; \
         block owners {owners:?}; without a block {without_block:?}; {} held as lent out, {borrowed} borrowed",
        got.len(),
        lent.len()
    );
    let missing: Vec<&IpAddr> = usable.iter().filter(|ip| !got.contains_key(ip)).collect();
    assert_eq!(got.len(), 29, "every usable address is used by some node; never handed out: {missing:?}");
    assert!(!without_block.is_empty(), "six nodes, four blocks: some node owns none");
    for n in &without_block {
        assert!(per_node[n] >= 1, "{n} owns no block and got no address: nobody lent it one (per node {per_node:?})");
    }
}
