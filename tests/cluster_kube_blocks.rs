//! Cluster mode on the Kubernetes API: every address of a pool stays usable
//! by some node. Idle owners of shared blocks strand none of their free
//! addresses; owners of blocks of their own lend to a node that found none
//! (`wanted` on their `IPDBlock`s); a block an admin deletes while its node
//! holds leases in it is claimed back by that node with its records. On a
//! real API server (tests/cluster_harness/kube.rs), every call a real
//! `ipam-delegated` process. The etcd side of the same scenarios:
//! tests/cluster_sharing.rs, tests/cluster_exhaustion.rs,
//! tests/cluster_recovery_kind.rs.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use cluster_harness::kube::{block_name, KubeStore};
use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::Outcome;

#[test]
fn idle_owners_of_shared_blocks_strand_no_address() {
    let _took = Took::new("idle_owners_of_shared_blocks_strand_no_address");
    // Exactly 40 addresses in three blocks of 16 (a pool of few blocks: shared).
    let c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.72.0.0/26", "rangeStart": "10.72.0.6", "rangeEnd": "10.72.0.45"}], "blockSize": 28}]),
        30.0,
    );
    // n1 places 3 pods and then makes no call ever again.
    place(&c, "n1", "idle", 3);
    let [idle_block] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    // n2 and n3 place the other 37 between them, at once.
    std::thread::scope(|s| {
        for (node, count) in [("n2", 19), ("n3", 18)] {
            let c = &c;
            s.spawn(move || place(c, node, node, count));
        }
    });
    let nodes = ["n1", "n2", "n3"];
    let held = held_once(&c, &nodes);
    let addresses: BTreeSet<IpAddr> = held.keys().copied().collect();
    assert_eq!(addresses, v4_range("10.72.0", 6, 45), "every address of the pool is held, each once");
    // Every address of idle n1's block but its 3 is another node's.
    let in_idle: Vec<(&IpAddr, &String)> =
        held.iter().filter(|(ip, _)| idle_block.contains(**ip)).map(|(ip, (node, _))| (ip, node)).collect();
    let by_others = in_idle.iter().filter(|(_, node)| *node != "n1").count();
    assert_eq!(by_others, in_idle.len() - 3, "others took the free addresses of idle n1's block: {in_idle:?}");
    assert!(by_others > 0, "n1's block {idle_block} had free addresses: {in_idle:?}");
    assert_covered(&c, &held);
    let (code, msg) = failure(&c.add("n2", "one-too-many"));
    assert_eq!(code, 100, "the pool is full: {msg}");
}

#[test]
fn owners_of_blocks_of_their_own_lend_to_a_node_that_found_none_and_get_it_back() {
    let _took = Took::new("owners_of_blocks_of_their_own_lend_to_a_node_that_found_none_and_get_it_back");
    // Two blocks of 16 (.2-.15 and .16-.30 usable); offlineGrace 0: every
    // ADD reads the store, so an owner lends at its very next ADD.
    let mut c =
        Cluster::on_kubernetes(json!([{"name": "blue", "ranges": [{"subnet": "10.73.0.0/27"}], "blockSize": 28}]), 0.0);
    c.share_blocks = Some("never");
    place(&c, "n1", "p", 1);
    place(&c, "n2", "q", 1);
    let ([a], [b]) = (&c.blocks_of("n1")[..], &c.blocks_of("n2")[..]) else { panic!("a block each: {:?}", c.blocks()) };
    let (a, b) = (*a, *b);
    // n3 finds no block, no shared room and nothing lent: 100, and asks.
    let (code, msg) = failure(&c.add("n3", "r"));
    assert_eq!(code, 100, "n3 with every block owned by others: {msg}");
    for block in [a, b] {
        let object = c.store.object("ipdblocks", &block_name(block)).expect("an owned block's IPDBlock");
        assert!(object["spec"]["wanted"].is_object(), "n3's 100 asks {block}'s owner to lend: {object}");
    }
    // The owners' next ADD sees the asking and lends.
    place(&c, "n1", "p-next", 1);
    place(&c, "n2", "q-next", 1);
    let lent: Vec<AddrRec> = c.addrs().into_iter().filter(|r| r.kind == "lent").collect();
    assert!(!lent.is_empty(), "the owners lent nothing: {:?}", c.addrs());
    for r in &lent {
        let block = if a.contains(r.ip) { a } else { b };
        let owner = if block == a { "n1" } else { "n2" };
        assert!(block.contains(r.ip) && r.node == owner, "{r:?} is lent by another than its block's owner");
    }
    let borrowed = ipv4_of(c.add("n3", "r").result());
    let record = c.addrs().into_iter().find(|r| r.ip == borrowed);
    let record = record.unwrap_or_else(|| panic!("n3 got {borrowed} without a record: {:?}", c.addrs()));
    let lender = if a.contains(borrowed) { "n1" } else { "n2" };
    assert_eq!(
        (record.kind.as_str(), record.node.as_str(), record.container.as_str(), record.lender.as_str()),
        ("borrowed", "n3", "r", lender),
        "{record:?}"
    );
    assert!(lent_holds(&c, &[lender]).iter().any(|(ip, _)| *ip == borrowed), "{lender} holds {borrowed} as lent out");
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);

    // n3's DEL gives it back: lent by its owner again, borrowed again.
    c.del("n3", "r").assert_quiet_success();
    let record = c.addrs().into_iter().find(|r| r.ip == borrowed);
    let record = record.unwrap_or_else(|| panic!("no record of {borrowed} after n3's DEL: {:?}", c.addrs()));
    assert_eq!(
        (record.kind.as_str(), record.node.as_str(), record.container.as_str()),
        ("lent", lender, ""),
        "{borrowed} goes back to {lender} as lent: {record:?}"
    );
    assert!(c.leases("n3").iter().all(|r| r.address != borrowed), "n3's database keeps {borrowed}");
    let again = ipv4_of(c.add("n3", "r2").result());
    assert!(c.addrs().iter().any(|r| r.ip == again && r.kind == "borrowed" && r.node == "n3"), "{:?}", c.addrs());
    held_once(&c, &["n1", "n2", "n3"]);
}

/// n1's leases with their address records in its block `block`, and the
/// `owner.shared` of its `IPDBlock`.
fn records_in(c: &Cluster<KubeStore>, block: Net4, node: &str) -> BTreeSet<(IpAddr, String)> {
    c.addrs().into_iter().filter(|r| block.contains(r.ip) && r.node == node).map(|r| (r.ip, r.container)).collect()
}

fn shared_flag(c: &Cluster<KubeStore>, block: Net4) -> Value {
    let object = c.store.object("ipdblocks", &block_name(block)).unwrap_or_else(|| panic!("no IPDBlock for {block}"));
    object["spec"]["owner"]["shared"].clone()
}

#[test]
fn a_block_deleted_by_hand_is_claimed_back_by_its_node_with_its_records_and_its_kind() {
    let _took = Took::new("a_block_deleted_by_hand_is_claimed_back_by_its_node_with_its_records_and_its_kind");
    // Two blocks of 16; a grace of 5 s: a confirmation stands 0.5 s.
    let c =
        Cluster::on_kubernetes(json!([{"name": "blue", "ranges": [{"subnet": "10.74.0.0/27"}], "blockSize": 28}]), 5.0);
    let config = |node: &str, share: &str| {
        let mut config = c.config(node);
        config["ipam"]["cluster"]["shareBlocks"] = json!(share);
        config
    };
    let add = |node: &str, share: &str, container: &str| c.run("ADD", container, &config(node, share), &[]);
    // n1 shares its block, n3 keeps its own: 3 pods each.
    let mut held_before = BTreeSet::new();
    for i in 0..3 {
        for (node, share) in [("n1", "always"), ("n3", "never")] {
            held_before.insert(added(&add(node, share, &format!("{node}-{i}")), "a pod before the deletion"));
        }
    }
    let ([shared], [own]) = (&c.blocks_of("n1")[..], &c.blocks_of("n3")[..]) else {
        panic!("a block each: {:?}", c.blocks())
    };
    let (shared, own) = (*shared, *own);
    let n1_records = records_in(&c, shared, "n1");
    assert_eq!(n1_records.len(), 3, "a shared block records its addresses: {:?}", c.addrs());
    assert_eq!((shared_flag(&c, shared), shared_flag(&c, own)), (json!(true), json!(false)));

    // An admin deletes n1's IPDBlock, then n3's, each node's next ADD
    // between (a block deleted by hand takes the records of other nodes in
    // it along, which their nodes do not write again); n3's setting has
    // changed to "always" meanwhile.
    let mut refused = Vec::new();
    for (node, block) in [("n1", shared), ("n3", own)] {
        c.store.delete_object("ipdblocks", &block_name(block));
        assert!(c.blocks_of(node).is_empty(), "{node}'s block deleted: {:?}", c.blocks());
        assert!(records_in(&c, block, node).is_empty(), "{node}'s records went with its block: {:?}", c.addrs());
        // Past the 0.5 s a confirmation stands: the next ADD reads the store.
        std::thread::sleep(Duration::from_millis(600));
        let container = format!("{node}-after");
        // Tried again as a runtime does: the ADD that claims the block back
        // does not allocate in it (another free block, room in a shared
        // one, else 100 "this node's blocks are full"; on etcd too), the
        // next one does.
        let deadline = Instant::now() + PLACE_RETRY_FOR;
        let out = loop {
            let out = c.run("ADD", &container, &config(node, "always"), &[]);
            if out.status == 0 || Instant::now() > deadline {
                break out;
            }
            refused.push(format!("{node}: {}", failure(&out).1));
            std::thread::sleep(Duration::from_millis(200));
        };
        let got = added(&out, &format!("{node}'s ADD after its block was deleted"));
        assert!(!held_before.contains(&got), "{node} was granted {got}, which a pod held before: {}", brief(&out));
        assert_eq!(c.blocks_of(node), vec![block], "{node} claimed its block back: {:?}", c.blocks());
    }
    eprintln!("block deleted by hand: ADDs refused before the block was used again: {refused:?}");
    let mut expected = n1_records.clone();
    expected.extend(records_in(&c, shared, "n1").into_iter().filter(|(_, container)| container == "n1-after"));
    assert_eq!(records_in(&c, shared, "n1"), expected, "n1's records are written again in its block");
    assert_eq!(expected.len(), 4, "{expected:?}");
    assert_eq!(
        (shared_flag(&c, shared), shared_flag(&c, own)),
        (json!(true), json!(false)),
        "each block is claimed back as it was claimed, whatever the setting now says"
    );
    // n2 takes what is free, never an address the pods hold.
    for i in 0..4 {
        let out = add("n2", "always", &format!("n2-{i}"));
        if out.status == 0 {
            let ip = ipv4_of(out.result());
            assert!(!held_before.contains(&ip), "n2 was granted {ip}, which a pod holds: {}", brief(&out));
        } else {
            assert_eq!(failure(&out).0, 100, "{}", brief(&out));
        }
    }
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
}

/// A node's ADDs at once in its shared block take turns at writing its
/// `IPDBlock`, each at the version the one before it kept: the API server
/// refuses none of them (without turns, every one sent at the version
/// another had just written was refused, read again and sent again).
#[test]
fn a_nodes_adds_at_once_in_its_shared_block_write_it_without_a_refusal() {
    let _took = Took::new("a_nodes_adds_at_once_in_its_shared_block_write_it_without_a_refusal");
    // Four blocks of 16: shared (shareBlocks auto).
    let c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.74.0.0/26"}], "blockSize": 28}]),
        30.0,
    );
    let first = added(&c.add("n1", "first"), "n1's first ADD");
    let [block] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    let before = c.store.refused_block_writes();
    let outs: Vec<Outcome> = std::thread::scope(|s| {
        let c = &c;
        let adds: Vec<_> = (0..8).map(|i| s.spawn(move || c.add("n1", &format!("at-once-{i}")))).collect();
        adds.into_iter().map(|a| a.join().expect("an ADD thread")).collect()
    });
    let mut addresses: BTreeSet<IpAddr> = outs.iter().map(|out| added(out, "an ADD at once")).collect();
    assert_eq!(addresses.len(), 8, "8 addresses, each once: {addresses:?}");
    addresses.insert(first);
    assert!(addresses.iter().all(|a| block.contains(*a)), "all in n1's block {block}: {addresses:?}");
    assert_eq!(c.blocks_of("n1"), vec![block], "n1 needed no other block");
    assert_eq!(c.store.refused_block_writes() - before, 0, "writes of n1's block refused by the API server");
}

/// A shared block's `IPDBlock` holds its records and no list of who wrote
/// each field: the API server would otherwise keep every record's fields
/// again in `metadata.managedFields` (about doubling the object, which
/// every grant sends, stores and sends back) and work them out at every
/// write.
#[test]
fn a_shared_blocks_object_keeps_no_field_owners_beside_its_records() {
    let _took = Took::new("a_shared_blocks_object_keeps_no_field_owners_beside_its_records");
    let c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.75.0.0/26"}], "blockSize": 28}]),
        30.0,
    );
    for i in 0..3 {
        added(&c.add("n1", &format!("pod-{i}")), "an ADD in n1's shared block");
    }
    let [block] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    let object = c.store.object("ipdblocks", &block_name(block)).unwrap_or_else(|| panic!("no IPDBlock for {block}"));
    assert_eq!(object["spec"]["owner"]["shared"], json!(true), "{object}");
    assert_eq!(object["spec"]["records"].as_object().map(|r| r.len()), Some(3), "{object}");
    assert_eq!(object["metadata"]["managedFields"], Value::Null, "{object}");
}
