//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"): a node
//! presumed dead comes back. Simulated nodes, each with a database of its
//! own, share one real etcd (tests/cluster_harness; a missing etcd fails
//! these tests, never skips them); every call is a real `ipam-delegated`
//! process.
//!
//! What is checked: once the operator's `ipam-delegated cluster release-node`
//! hands a node's blocks back (a broken operator tool fails the test),
//! another node takes them over, and the node that comes back with its old
//! database cannot collide: it uses a block it lost only as contested, an
//! address in one only as borrowed with its record in etcd, and never one the
//! new owner holds.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;

#[test]
fn dead_node_returns() {
    let _took = Took::new("dead_node_returns");
    // Four blocks of 16: .0/28 .16/28 .32/28 .48/28 (61 usable addresses).
    // `release-node` keeps a block unclaimable for offlineGrace + 3 ×
    // ipam.timeout: both short here.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/26"}], "blockSize": 28}]), 1.0);
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    c.call_timeout = 3;
    let block = |k: u64| Net4 { start: u32::from(Ipv4Addr::new(10, 50, 0, 0)) + 16 * k as u32, len: 28 };
    // n1 fills a block and starts a second.
    let mut n1_old = Vec::new();
    for i in 0..40 {
        let out = c.add("n1", &format!("n1-old-{i}"));
        n1_old.push(ipv4_of(out.result()));
        if c.blocks_of("n1").len() == 2 {
            break;
        }
    }
    let lost = c.blocks_of("n1");
    assert_eq!(lost.len(), 2, "n1 owns two blocks: {:?}", c.blocks());
    // And a static address outside its blocks.
    let free_block = (0..4).map(block).find(|b| !lost.contains(b)).unwrap();
    let static_ip = free_block.nth(9);
    assert_eq!(ipv4_of(c.add_static("n1", "n1-static", static_ip).result()), static_ip);
    // The node that takes over: one that tries n1's two blocks first, so
    // that a block stays free for n1 when it comes back.
    let n2 = (0..200)
        .map(|i| if i == 0 { "n2".to_string() } else { format!("n2-{i}") })
        .find(|name| {
            let order = claim_order(&c, name);
            assert_eq!(order.len(), 4, "every block of the pool is claimable: {order:?}");
            lost.contains(&order[0]) && lost.contains(&order[1])
        })
        .unwrap_or_else(|| "n2".to_string());
    let n2 = n2.as_str();

    let how = release_node(&c, "n1", n2);
    assert!(c.blocks().iter().all(|b| b.node != "n1" || b.released), "n1 still owns blocks: {:?}", c.blocks());

    // A block the tool leaves `released` becomes claimable once no call of
    // n1 can still allocate in it (a lease ends): wait for that.
    let deadline = Instant::now() + Duration::from_secs(60);
    let waited = Instant::now();
    while c.blocks().iter().any(|b| b.released) {
        assert!(Instant::now() < deadline, "released blocks stay: {:?}", c.blocks());
        thread::sleep(Duration::from_millis(250));
    }
    let released_for = waited.elapsed();

    // n2 takes over until it owns both of n1's former blocks.
    let mut n2_got = Vec::new();
    let mut k = 0;
    while !lost.iter().all(|b| c.blocks_of(n2).contains(b)) {
        assert!(Instant::now() < deadline, "{n2} did not claim n1's former blocks {lost:?}: {:?}", c.blocks());
        let out = c.add(n2, &format!("n2-{k}"));
        k += 1;
        if out.status == 0 {
            n2_got.push(ipv4_of(out.result()));
        } else {
            // Blocks still `released` (the operator tool's lease): wait.
            let (code, msg) = failure(&out);
            assert_eq!(code, 100, "{n2} ADD: {msg}");
            thread::sleep(Duration::from_millis(500));
        }
    }
    let n2_in_lost = n2_got.iter().filter(|ip| lost.iter().any(|b| b.contains(**ip))).count();
    assert!(n2_in_lost > 0, "{n2} allocates in n1's former blocks");
    let unclaimed = 4 - c.blocks().len();

    // n1 comes back with its old database.
    let mut n1_new = Vec::new();
    let mut n1_codes = Vec::new();
    for i in 0..10 {
        let out = c.add("n1", &format!("n1-new-{i}"));
        if out.status == 0 {
            n1_new.push(ipv4_of(out.result()));
        } else {
            let (code, msg) = failure(&out);
            assert_eq!(code, 100, "n1 back: ADD: {msg}");
            n1_codes.push(code);
        }
        // n2 goes on too.
        let out = c.add(n2, &format!("n2-after-{i}"));
        if out.status == 0 {
            n2_got.push(ipv4_of(out.result()));
        } else {
            let (code, msg) = failure(&out);
            assert_eq!(code, 100, "{n2} ADD after n1 came back: {msg}");
        }
    }
    // n1 may still use an address of a block it lost only as any node may
    // use one of another's: borrowed, with its record in etcd.
    let addrs = c.addrs();
    let mut borrowed = 0;
    for ip in &n1_new {
        if lost.iter().any(|b| b.contains(*ip)) {
            let record = addrs.iter().find(|a| a.ip == *ip);
            assert!(
                record.is_some_and(|a| a.node == "n1" && a.kind == "borrowed"),
                "n1 came back and handed out {ip} in a block it lost ({}) without a record in etcd: {record:?}; \
                 etcd blocks {:?}; n1's cluster_blocks {:?}",
                lost.iter().map(Net4::to_string).collect::<Vec<_>>().join(", "),
                c.blocks(),
                c.node_blocks("n1")
            );
            borrowed += 1;
        }
        assert!(!n2_got.contains(ip), "n1 came back and handed out {ip}, which {n2} holds");
    }
    if unclaimed > 0 {
        assert!(!n1_new.is_empty(), "n1 came back, {unclaimed} block(s) were unclaimed, and it got no address");
    }
    // A lost block holding n1's old leases stays in n1's database only as
    // contested: never handed to its allocators.
    let n1_blocks = c.node_blocks("n1");
    assert!(
        !n1_blocks.iter().any(|(b, state)| lost.contains(b) && state != "contested"),
        "n1's database still uses its lost blocks: {n1_blocks:?}"
    );
    // Across both databases, only n1's leases from before its release may
    // coincide with n2's (those containers are presumed dead with it).
    let n2_leases: BTreeSet<IpAddr> = c.leases(n2).iter().map(|r| r.address).collect();
    let n1_rows = c.leases("n1");
    for row in n1_rows.iter().filter(|r| r.container_id.starts_with("n1-new-")) {
        assert!(!n2_leases.contains(&row.address), "{} is in both n1's (new) and {n2}'s databases", row.address);
    }
    let stale: Vec<IpAddr> = n1_rows
        .iter()
        .filter(|r| !r.container_id.starts_with("n1-new-") && n2_leases.contains(&r.address))
        .map(|r| r.address)
        .collect();
    eprintln!(
        "dead node: release by {how} (blocks released for {released_for:.2?}); {n2} got {} addresses \
         ({n2_in_lost} in n1's former blocks); {unclaimed} block(s) unclaimed when n1 came back; n1 back got {} \
         addresses {:?} ({borrowed} borrowed in its former blocks) and {} times 100; n1's old leases that {n2} \
         now holds too (presumed dead): {}",
        n2_got.len(),
        n1_new.len(),
        n1_new,
        n1_codes.len(),
        stale.len()
    );
}
