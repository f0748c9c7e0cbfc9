//! Cluster mode (ipam-ds-cluster/README.md "What operators and etcd can
//! do"): a block a node claims back keeps the kind it was claimed with. A
//! block of a node's own hands its addresses out from the node database
//! alone, with no etcd record; claimed back as shared, those addresses would
//! look free to every other node, which would be granted them again. So a
//! change of `shareBlocks` never reaches a block already claimed, whether
//! it is claimed back after etcd lost history or after its key was deleted.
//! On a real etcd, every call a real `ipam-delegated` process.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use cluster_harness::*;
use ipam_ds_cluster::etcd::{Op, Txn};
use serde_json::{json, Value};
use stack::ipv4_of;

/// One /28 block of 16 addresses (.16-.31) in a /24.
fn one_block_pool(third: u8) -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": format!("10.71.{third}.0/24"), "rangeStart": format!("10.71.{third}.16"), "rangeEnd": format!("10.71.{third}.31")}], "blockSize": 28}])
}

/// n1 places 12 pods in a block of its own (`shareBlocks: never`): the
/// addresses they got.
fn fill_own_block(c: &mut Cluster) -> BTreeSet<IpAddr> {
    c.share_blocks = Some("never");
    let mut got = BTreeSet::new();
    for i in 0..12 {
        let out = c.add("n1", &format!("own-{i}"));
        assert_eq!(out.status, 0, "n1's pod own-{i}: {}", brief(&out));
        got.insert(ipv4_of(out.result()));
    }
    assert_eq!(c.blocks_of("n1").len(), 1, "n1 claimed one block: {:?}", c.blocks());
    assert!(c.addrs().is_empty(), "a block of n1's own: no address record in etcd: {:?}", c.addrs());
    assert!(!block_is_shared(c), "claimed as n1's own");
    got
}

/// Whether etcd's record of n1's one block says it is shared.
fn block_is_shared(c: &Cluster) -> bool {
    let blocks = c.store.dump(BLOCKS);
    let [(key, value)] = blocks.as_slice() else { panic!("one block record in etcd: {blocks:?}") };
    let record: Value = serde_json::from_str(value).unwrap_or_else(|e| panic!("block {key}: {e}: {value}"));
    assert_eq!(record["node"], "n1", "{key}: {value}");
    record["shared"].as_bool().unwrap_or(false)
}

/// n2 (which shares its blocks, as n1 now would) tries a few ADDs: none may
/// be granted an address n1's pods hold, and no address is held twice.
fn others_never_get(c: &Cluster, held_by_n1: &BTreeSet<IpAddr>) {
    for i in 0..6 {
        let out = c.add("n2", &format!("other-{i}"));
        if out.status == 0 {
            let ip = ipv4_of(out.result());
            assert!(!held_by_n1.contains(&ip), "n2 was granted {ip}, which n1's pod holds: {}", brief(&out));
        }
    }
    held_once(c, &["n1", "n2"]);
}

#[test]
fn a_block_claimed_back_after_etcd_lost_history_keeps_its_kind() {
    let _took = Took::new("a_block_claimed_back_after_etcd_lost_history_keeps_its_kind");
    let mut c = Cluster::new(one_block_pool(0), 2.0);
    c.call_timeout = 1;
    let held_by_n1 = fill_own_block(&mut c);
    // The setting changes to "always", and etcd loses its data.
    c.share_blocks = Some("always");
    c.store.wipe();
    let (code, msg) = failure(&c.add("n1", "after-wipe"));
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("lost history"), "{msg}");
    assert_eq!(c.blocks_of("n1").len(), 1, "n1 claimed its block back: {:?}", c.blocks());
    // After the quarantine (offlineGrace 2 s + 3 × timeout 1 s).
    std::thread::sleep(Duration::from_secs(6));
    others_never_get(&c, &held_by_n1);
    assert!(!block_is_shared(&c), "claimed back as n1's own, as it was claimed: {:?}", c.store.dump(BLOCKS));
    // n1 goes on in its block, around its own leases.
    let out = c.add_within("n1", "after-wipe", Duration::from_secs(10));
    assert_eq!(out.status, 0, "{}", brief(&out));
    assert!(!held_by_n1.contains(&ipv4_of(out.result())), "{}", brief(&out));
    held_once(&c, &["n1", "n2"]);
}

#[test]
fn a_block_claimed_back_after_its_key_was_deleted_keeps_its_kind() {
    let _took = Took::new("a_block_claimed_back_after_its_key_was_deleted_keeps_its_kind");
    let mut c = Cluster::new(one_block_pool(1), 30.0);
    let held_by_n1 = fill_own_block(&mut c);
    c.share_blocks = Some("always");
    // Someone deletes n1's block record (not a loss of history: etcd's
    // revision goes on).
    let [(key, _)] = c.store.dump(BLOCKS).try_into().expect("one block record");
    let txn = Txn { success: vec![Op::Delete { key: key.clone().into_bytes(), range_end: None }], ..Txn::default() };
    c.store.client().txn(&txn).unwrap_or_else(|e| panic!("delete {key}: {e}"));
    // n1's next ADD confirms its block (its last confirmation is no longer
    // fresh), finds it gone with its leases in it, and claims it back.
    std::thread::sleep(Duration::from_millis(2500));
    let out = c.add_within("n1", "after-delete", Duration::from_secs(10));
    assert_eq!(out.status, 0, "{}", brief(&out));
    assert!(!held_by_n1.contains(&ipv4_of(out.result())), "{}", brief(&out));
    assert_eq!(c.blocks_of("n1").len(), 1, "n1 claimed its block back: {:?}", c.blocks());
    others_never_get(&c, &held_by_n1);
    assert!(!block_is_shared(&c), "claimed back as n1's own, as it was claimed: {:?}", c.store.dump(BLOCKS));
}
