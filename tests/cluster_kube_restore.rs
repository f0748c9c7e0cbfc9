//! The API server's etcd restored from an older backup, under nodes that
//! keep running (ipam-ds-cluster/src/datastore/kubernetes/history.rs): a
//! real kube-apiserver whose etcd data directory is copied while it is
//! stopped, then put back after more writes. What a node detects (an
//! object of its own at a lower generation than it saw), what it does (the
//! network's `recovery` on its `IPDNetwork`, its records written again, the
//! call refused with 11), and what the others are refused meanwhile (a
//! claim, until the recovery ends).

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use cluster_harness::kube::{block_name, KubeStore};
use cluster_harness::sticky::{self, ip, ok};
use cluster_harness::sticky_storm::identity_key;
use cluster_harness::*;
use serde_json::{json, Value};
use support::Outcome;

/// Four blocks of 16.
fn pools() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.75.0.0/26"}], "blockSize": 28}])
}

fn add(c: &Cluster<KubeStore>, node: &str, share: &str, container: &str) -> Outcome {
    let mut config = c.config(node);
    config["ipam"]["cluster"]["shareBlocks"] = json!(share);
    c.run("ADD", container, &config, &[])
}

/// The addresses pods of `node` hold by its database.
fn held(c: &Cluster<KubeStore>, node: &str) -> BTreeSet<IpAddr> {
    held_by(c, &[node]).0.into_keys().collect()
}

#[test]
fn a_node_that_sees_its_block_go_back_recovers_and_keeps_the_others_off_until_it_has() {
    let _took = Took::new("a_node_that_sees_its_block_go_back_recovers_and_keeps_the_others_off_until_it_has");
    // A grace of 2 s and ipam.timeout 1 s: the recovery lasts 5 s.
    let mut c = Cluster::on_kubernetes(pools(), 2.0);
    c.call_timeout = 1;
    // n1 shares its block: each address it hands out is a write of it.
    for i in 0..2 {
        added(&add(&c, "n1", "always", &format!("p{i}")), "a pod before the backup");
    }
    let [block] = c.blocks_of("n1")[..] else { panic!("one block of n1: {:?}", c.blocks()) };
    let backup = c.store.backup();
    for i in 2..4 {
        added(&add(&c, "n1", "always", &format!("p{i}")), "a pod after the backup");
    }
    let before = c.store.object("ipdblocks", &block_name(block)).expect("n1's block");
    c.store.restore(&backup);
    let restored = c.store.object("ipdblocks", &block_name(block)).expect("n1's block, restored");
    assert!(
        restored["metadata"]["generation"].as_i64() < before["metadata"]["generation"].as_i64()
            && restored["metadata"]["uid"] == before["metadata"]["uid"],
        "the restore took the block back to an older generation of the same object: {before} / {restored}"
    );
    assert_eq!(c.addrs().len(), 2, "the restore lost the records of p2 and p3: {:?}", c.addrs());

    // n1's next ADD meets its block at the older generation: it recovers,
    // and the call is refused (11), to be tried again.
    let out = add(&c, "n1", "always", "p4");
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "{}", brief(&out));
    assert!(msg.contains("lost history") && msg.contains(&block_name(block)), "{msg}");
    let network = c.store.object("ipdnetworks", NETWORK).expect("the IPDNetwork");
    assert_eq!(network["spec"]["recovery"]["node"], "n1", "{network}");
    // Its records are written again: every address its pods hold is
    // recorded in the cluster.
    let recorded: BTreeSet<IpAddr> = c.addrs().iter().filter(|a| a.node == "n1").map(|a| a.ip).collect();
    assert_eq!(recorded, held(&c, "n1"), "n1's records after its recovery: {:?}", c.addrs());

    // Meanwhile no node claims a block (n2 keeps blocks of its own), and
    // no node is granted an address in a shared block (n3).
    let out = add(&c, "n2", "never", "q0");
    let (code, msg) = failure(&out);
    assert!(code == 11 && msg.contains("lost history"), "n2's claim during the recovery: {}", brief(&out));
    let out = add(&c, "n3", "always", "r0");
    let (code, msg) = failure(&out);
    assert!(code == 11 && msg.contains("lost history"), "n3's grant during the recovery: {}", brief(&out));
    let marked = c.store.object("ipdblocks", &block_name(block)).expect("n1's block");
    assert!(marked["spec"]["recovering"]["until"].is_string(), "the shared block is marked recovering: {marked}");

    // After the recovery all goes on (the loss is seen once), and nobody
    // is handed an address a pod holds.
    std::thread::sleep(Duration::from_secs(6));
    added(&add(&c, "n1", "always", "p4"), "n1 after the recovery");
    added(&add(&c, "n2", "never", "q0"), "n2 after the recovery");
    for i in 0..3 {
        added(&add(&c, "n3", "always", &format!("r{i}")), "n3 in a shared block");
    }
    let (_, twice) = held_by(&c, &["n1", "n2", "n3"]);
    assert!(twice.is_empty(), "addresses held twice: {twice:?}");
    assert_eq!(held(&c, "n1").len(), 5);
}

/// A held identity is not taken over while a recovery stands: the hold
/// may be the restored backup's, its address another's since (etcd's
/// take-over compares `_recovery` absent in its transaction; the API
/// server has none, so the store reads the network's `recovery` just
/// before it writes the identity).
#[test]
fn a_held_identity_is_not_taken_over_while_the_network_recovers() {
    let _took = Took::new("a_held_identity_is_not_taken_over_while_the_network_recovers");
    let mut c = Cluster::on_kubernetes(pools(), 2.0);
    c.call_timeout = 1;
    c.share_blocks = Some("always");
    let sticky = json!({"hold": 600});
    let first = ok(&sticky::add(&c, "n1", "c1", "db-0", &sticky));
    sticky::del(&c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    let held = identity_key(&c, "db-0").expect("db-0's identity");
    assert!(held.until > 0 && held.addresses == [ip(&first[0])], "db-0 is held: {held:?}");
    let backup = c.store.backup();
    // In a shared block each address handed out is a write of it.
    added(&add(&c, "n1", "always", "p0"), "a pod after the backup");
    c.store.restore(&backup);
    let out = add(&c, "n1", "always", "p1");
    let (code, msg) = failure(&out);
    assert!(code == 11 && msg.contains("lost history"), "n1 sees the loss: {}", brief(&out));
    let network = c.store.object("ipdnetworks", NETWORK).expect("the IPDNetwork");
    assert_eq!(network["spec"]["recovery"]["node"], "n1", "{network}");

    // n2's take-over of db-0 is refused while the recovery stands, and the
    // identity stays held on n1 with its address.
    let out = sticky::add(&c, "n2", "c2", "db-0", &sticky);
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "a take-over during the recovery: {}", brief(&out));
    assert!(msg.contains("lost history") && msg.contains("\"prod/db-0\" is not taken over"), "{msg}");
    let still = identity_key(&c, "db-0").expect("db-0's identity");
    assert!(still.node == "n1" && still.until > 0 && still.addresses == held.addresses, "still held: {still:?}");

    // After the recovery db-0 lands on n2 with its address, held once.
    std::thread::sleep(Duration::from_secs(6));
    let moved = ok(&sticky::add(&c, "n2", "c2", "db-0", &sticky));
    assert_eq!(moved, first, "db-0 keeps its address on n2");
    let (_, twice) = held_by(&c, &["n1", "n2"]);
    assert!(twice.is_empty(), "addresses held twice: {twice:?}");
}
