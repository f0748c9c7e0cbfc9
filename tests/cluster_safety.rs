//! Cluster mode's first promise, tried the way operators and etcd break it:
//! no address is handed out to two attachments. Each test is a case where
//! an earlier build did hand one out twice (docs/contract.md "Cluster
//! mode"; ipam-ds-cluster/README.md "Why no address is handed out twice"):
//! a static address under another cut of the pool, a clock that jumped,
//! two hosts under one node name, a release sized by the wrong settings,
//! and etcd that lost its history. Every call is a real `ipam-delegated`
//! process against a real etcd that the test starts and stops.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::net::IpAddr;

use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;

/// `c`'s configuration of `node` with pool blue's `blockSize` set.
fn with_block_size(c: &Cluster, node: &str, block_size: u8) -> Value {
    let mut config = c.config(node);
    config["ipam"]["pools"][0]["blockSize"] = json!(block_size);
    config
}

#[test]
fn a_static_address_under_another_cut_of_the_pool_is_refused() {
    let _took = Took::new("a_static_address_under_another_cut_of_the_pool_is_refused");
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.97.0.0/22"}], "blockSize": 26}]), 30.0);
    let first = c.add("n1", "c1");
    assert_eq!(first.status, 0, "n1's first ADD: {}", brief(&first));
    let n1_block = c.blocks_of("n1");
    assert_eq!(n1_block.len(), 1, "n1 claimed one block: {:?}", c.blocks());
    // An address of n1's /26 that n1 has not handed out yet, asked for on
    // n2 whose configuration cuts the pool in /28s.
    let wanted = n1_block[0].nth(5);
    let args = format!("IgnoreUnknown=1;IP={wanted}");
    let out = c.run("ADD", "c2", &with_block_size(&c, "n2", 28), &[("CNI_ARGS", args.as_str())]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 7, "n2 asked for {wanted} with blockSize 28 while the cluster cuts /26: {}", brief(&out));
    assert!(msg.contains("blockSize") && msg.contains("blue"), "the message names the pool and its cut: {msg}");
    assert!(c.addrs().is_empty(), "nothing was reserved: {:?}", c.addrs());
    assert!(c.leases("n2").is_empty(), "n2 leased nothing: {:?}", c.leases("n2"));
    // n1 goes on handing out its block's addresses, the asked-for one included, once each.
    for i in 0..8 {
        let out = c.add("n1", &format!("more-{i}"));
        assert_eq!(out.status, 0, "n1 ADD {i}: {}", brief(&out));
    }
    held_once(&c, &["n1", "n2"]);
    // The same request with the cluster's cut is granted.
    let out = c.run("ADD", "c3", &with_block_size(&c, "n2", 26), &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.97.3.7")]);
    assert_eq!(out.status, 0, "n2 with the cluster's cut: {}", brief(&out));
    assert_eq!(ipv4_of(out.result()), "10.97.3.7".parse::<IpAddr>().unwrap());
}
