//! Cluster mode's second promise: every usable address of a pool can be used
//! by some node, whatever the other nodes do (docs/contract.md "Cluster
//! mode"; ipam-ds-cluster/README.md "Shared blocks"). In a pool of few
//! blocks, blocks are shared: every address handed out has its record in
//! etcd, so a node takes the free addresses of a block whose owner has
//! stopped calling. Each test fills a pool of exactly as many addresses as
//! pods while some owners make no call at all, on a real etcd, every call a
//! real `ipam-delegated` process.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;

/// Pods placed by several nodes at once, each node two at a time.
fn place_together(c: &Cluster, nodes: &[&str], per_node: usize) {
    std::thread::scope(|s| {
        for node in nodes {
            for half in 0..2 {
                let c = &c;
                s.spawn(move || place(c, node, &format!("{node}-{half}"), per_node / 2));
            }
        }
    });
}

fn held_addresses(c: &Cluster, nodes: &[&str]) -> BTreeSet<IpAddr> {
    held_once(c, nodes).into_keys().collect()
}

#[test]
fn an_owner_that_never_calls_again_strands_no_address() {
    let _took = Took::new("an_owner_that_never_calls_again_strands_no_address");
    // Exactly 100 addresses, 4 blocks of /27: a pool of few blocks, so they are shared.
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.60.0.0/24", "rangeStart": "10.60.0.14", "rangeEnd": "10.60.0.113"}], "blockSize": 27}]),
        30.0,
    );
    // n1 places 3 pods and then makes no call ever again: no ADD, DEL, GC or STATUS.
    place(&c, "n1", "idle", 3);
    assert_eq!(c.blocks_of("n1").len(), 1, "n1 claimed one block: {:?}", c.blocks());
    // n2, n3 and n4 place the other 97 between them, at once.
    std::thread::scope(|s| {
        for (node, count) in [("n2", 33), ("n3", 32), ("n4", 32)] {
            let c = &c;
            s.spawn(move || place(c, node, node, count));
        }
    });
    let nodes = ["n1", "n2", "n3", "n4"];
    let held = held_addresses(&c, &nodes);
    assert_eq!(held, v4_range("10.60.0", 14, 113), "every address of the pool is held, each once");
    let in_n1_block: Vec<&IpAddr> = held.iter().filter(|ip| c.blocks_of("n1")[0].contains(**ip)).collect();
    assert!(in_n1_block.len() > 3, "others took the free addresses of idle n1's block: {in_n1_block:?}");
    assert_covered(&c, &held_once(&c, &nodes));
    // Full: the next pod anywhere gets 100, not 11 and not a duplicate.
    let (code, msg) = failure(&c.add("n2", "one-too-many"));
    assert_eq!(code, 100, "the pool is full: {msg}");
}

#[test]
fn a_second_deployment_on_other_nodes_gets_every_address_the_first_left() {
    let _took = Took::new("a_second_deployment_on_other_nodes_gets_every_address_the_first_left");
    // Exactly 60 addresses in blocks of 16: 60 pods, in two waves of 30.
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.62.0.0/24", "rangeStart": "10.62.0.2", "rangeEnd": "10.62.0.61"}], "blockSize": 28}]),
        30.0,
    );
    let started = Instant::now();
    // Wave one lands on n1..n3, finishes, and those nodes make no call again.
    place_together(&c, &["n1", "n2", "n3"], 10);
    // Wave two lands on n4..n6, which own nothing yet.
    place_together(&c, &["n4", "n5", "n6"], 10);
    let nodes = ["n1", "n2", "n3", "n4", "n5", "n6"];
    assert_eq!(held_addresses(&c, &nodes), v4_range("10.62.0", 2, 61), "every address held, each once");
    assert_covered(&c, &held_once(&c, &nodes));
    eprintln!("60 pods in two waves placed in {:?}", started.elapsed());
    let (code, _) = failure(&c.add("n6", "one-too-many"));
    assert_eq!(code, 100);
}

#[test]
fn idle_owners_of_several_pools_strand_nothing_in_either_family() {
    let _took = Took::new("idle_owners_of_several_pools_strand_nothing_in_either_family");
    // Two IPv4 pools (32 + 16 addresses, used in order) and one IPv6 pool
    // of 48: each pod gets one address of each family.
    let c = Cluster::new(
        json!([
            {"name": "blue", "ranges": [{"subnet": "10.61.0.0/24", "rangeStart": "10.61.0.8", "rangeEnd": "10.61.0.39"}], "blockSize": 29},
            {"name": "green", "ranges": [{"subnet": "10.61.1.0/24", "rangeStart": "10.61.1.8", "rangeEnd": "10.61.1.23"}], "blockSize": 29},
            {"name": "six", "ranges": [{"subnet": "fd00:61::/120", "rangeStart": "fd00:61::10", "rangeEnd": "fd00:61::3f"}], "blockSize": 125}
        ]),
        30.0,
    );
    place(&c, "n1", "idle", 3);
    place(&c, "n2", "idle", 2);
    // n3 and n4 take the other 43 pods; n1 and n2 never call again.
    std::thread::scope(|s| {
        for (node, count) in [("n3", 22), ("n4", 21)] {
            let c = &c;
            s.spawn(move || place(c, node, node, count));
        }
    });
    let nodes = ["n1", "n2", "n3", "n4"];
    let held = held_addresses(&c, &nodes);
    let mut every: BTreeSet<IpAddr> = v4_range("10.61.0", 8, 39);
    every.extend(v4_range("10.61.1", 8, 23));
    every.extend((0x10..=0x3f_u16).map(|i| format!("fd00:61::{i:x}").parse::<IpAddr>().expect("an address")));
    assert_eq!(held, every, "every address of the three pools is held, each once");
    let (code, msg) = failure(&c.add("n3", "one-too-many"));
    assert_eq!(code, 100, "both families are full: {msg}");
}

#[test]
fn a_failed_dual_stack_add_gives_back_the_address_it_was_granted() {
    let _took = Took::new("a_failed_dual_stack_add_gives_back_the_address_it_was_granted");
    // Room for 8 IPv4 pods but 2 IPv6 ones.
    let c = Cluster::new(
        json!([
            {"name": "blue", "ranges": [{"subnet": "10.68.0.0/24", "rangeStart": "10.68.0.8", "rangeEnd": "10.68.0.15"}], "blockSize": 29},
            {"name": "six", "ranges": [{"subnet": "fd00:68::/120", "rangeStart": "fd00:68::10", "rangeEnd": "fd00:68::11"}], "blockSize": 127}
        ]),
        30.0,
    );
    place(&c, "n1", "p", 2);
    // The IPv4 address is granted first, then IPv6 has none: the ADD fails
    // and its rollback deletes the IPv4 record it was granted.
    let (code, msg) = failure(&c.add("n2", "third"));
    assert_eq!(code, 100, "{msg}");
    let left: Vec<(String, String)> =
        c.store.dump("/ipam-delegated/v1/cnet/").into_iter().filter(|(_, v)| v.contains("\"third\"")).collect();
    assert!(left.is_empty(), "the failed ADD left records: {left:?}");
    assert!(c.node_records("n2").is_empty(), "and rows: {:?}", c.node_records("n2"));
    assert!(c.leases("n2").is_empty(), "and leases: {:?}", c.leases("n2"));
}

#[test]
fn a_shared_block_is_never_used_without_etcd() {
    let _took = Took::new("a_shared_block_is_never_used_without_etcd");
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.63.0.0/26"}], "blockSize": 28}]), 300.0);
    let first = c.add("n1", "c1");
    assert_eq!(first.status, 0, "{}", brief(&first));
    let ip = ipv4_of(first.result());
    assert!(c.addrs().iter().any(|a| a.ip == ip && a.node == "n1"), "the address is recorded: {:?}", c.addrs());
    c.store.kill();
    // Others may take any address of the block while etcd is away from
    // this node: handing one out from the node database alone could collide.
    let (code, msg) = failure(&c.add("n1", "c2"));
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("etcd is unreachable") && msg.contains("shared"), "{msg}");
    let status = c.status("n1");
    assert_eq!(failure(&status).0, 50, "STATUS is not ready: {}", brief(&status));
    // With blocks of its own (shareBlocks never), the node works on alone.
    c.store.restart();
    c.share_blocks = Some("never");
    let out = c.add("n9", "c1");
    assert_eq!(out.status, 0, "{}", brief(&out));
    c.store.kill();
    let out = c.add("n9", "c2");
    assert_eq!(out.status, 0, "an ADD in n9's own block confirmed moments ago: {}", brief(&out));
    c.store.restart();
}

#[test]
fn deleted_pods_free_their_address_for_every_node() {
    let _took = Took::new("deleted_pods_free_their_address_for_every_node");
    // 16 addresses, one block: n1 fills it, deletes two pods and stops calling.
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.64.0.0/24", "rangeStart": "10.64.0.16", "rangeEnd": "10.64.0.31"}], "blockSize": 28}]),
        30.0,
    );
    let got = place(&c, "n1", "p", 16);
    let freed: BTreeSet<IpAddr> = [got[3], got[9]].into();
    for i in [3, 9] {
        let out = c.del("n1", &format!("p-{i}"));
        assert_eq!(out.status, 0, "{}", brief(&out));
    }
    assert!(c.addrs().iter().all(|a| !freed.contains(&a.ip)), "DEL deleted their records: {:?}", c.addrs());
    let again: BTreeSet<IpAddr> = place(&c, "n2", "q", 2).into_iter().collect();
    assert_eq!(again, freed, "n2 got exactly the two addresses n1's pods left");
    held_once(&c, &["n1", "n2"]);
}

#[test]
fn an_address_asked_for_by_name_in_another_nodes_shared_block_is_granted_once() {
    let _took = Took::new("an_address_asked_for_by_name_in_another_nodes_shared_block_is_granted_once");
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.65.0.0/24", "rangeStart": "10.65.0.16", "rangeEnd": "10.65.0.31"}], "blockSize": 28}]),
        30.0,
    );
    place(&c, "n1", "p", 2);
    let wanted: IpAddr = "10.65.0.25".parse().unwrap();
    assert!(c.blocks_of("n1")[0].contains(wanted), "{wanted} lies in n1's block");
    let out = c.add_static("n2", "s", wanted);
    assert_eq!(out.status, 0, "a free address of n1's shared block, asked for on n2: {}", brief(&out));
    assert_eq!(ipv4_of(out.result()), wanted);
    // Asked again on n3: held.
    let (code, msg) = failure(&c.add_static("n3", "t", wanted));
    assert_eq!(code, 101, "{msg}");
    assert!(msg.contains("n2"), "the message names the holder: {msg}");
    // n1 fills its block around it: 16 addresses, 2 + 13 more, never the asked-for one.
    place(&c, "n1", "more", 13);
    held_once(&c, &["n1", "n2", "n3"]);
    let (code, _) = failure(&c.add("n1", "full"));
    assert_eq!(code, 100);
}

#[test]
fn etcd_wiped_shared_blocks_are_claimed_back_with_their_records() {
    let _took = Took::new("etcd_wiped_shared_blocks_are_claimed_back_with_their_records");
    // 32 addresses in two blocks of 16; a quarantine of 2 + 3 × 1 s.
    let mut c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.16", "rangeEnd": "10.66.0.47"}], "blockSize": 28}]),
        2.0,
    );
    c.call_timeout = 1;
    place(&c, "n1", "a", 3);
    place(&c, "n2", "b", 3);
    let before = held_addresses(&c, &["n1", "n2"]);
    let (x, y) = (c.blocks_of("n1"), c.blocks_of("n2"));
    assert_eq!((x.len(), y.len()), (1, 1), "a block each: {:?}", c.blocks());
    c.store.wipe();
    // n1's next grant finds its block gone and etcd behind what n1 saw: it
    // claims its block back, writes its records again and fails with 11.
    let (code, msg) = failure(&c.add("n1", "a-after"));
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("lost history"), "{msg}");
    assert_eq!(c.blocks_of("n1"), x, "n1 claimed its block back");
    // Meanwhile nobody is granted anything in a shared block, nor claims.
    let (code, msg) = failure(&c.add("n3", "c-0"));
    assert_eq!(code, 11, "n3 while the nodes re-claim: {msg}");
    // n2 notices too at its next ADD.
    let (code, _) = failure(&c.add("n2", "b-after"));
    assert_eq!(code, 11);
    assert_eq!(c.blocks_of("n2"), y, "n2 claimed its block back");
    let recorded: BTreeSet<IpAddr> = c.addrs().iter().map(|a| a.ip).collect();
    assert_eq!(recorded, before, "every address held before the wipe is recorded again");
    // After the quarantine, every other address of the pool is handed out
    // once, around the ones held.
    std::thread::sleep(Duration::from_secs(5));
    std::thread::scope(|s| {
        for (node, count) in [("n3", 13), ("n1", 13)] {
            let c = &c;
            s.spawn(move || place(c, node, &format!("{node}-more"), count));
        }
    });
    assert_eq!(held_addresses(&c, &["n1", "n2", "n3"]), v4_range("10.66.0", 16, 47));
}

/// A call killed after it wrote its row down and before etcd had the record
/// leaves a `writing` row whose address nobody holds in the cluster: the
/// attachment's next ADD (a runtime repeating it) must not hand that address
/// out, since any node may be granted it meanwhile.
#[test]
fn an_address_whose_record_may_not_be_in_etcd_is_never_handed_out() {
    let _took = Took::new("an_address_whose_record_may_not_be_in_etcd_is_never_handed_out");
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.67.0.0/24", "rangeStart": "10.67.0.16", "rangeEnd": "10.67.0.31"}], "blockSize": 28}]),
        30.0,
    );
    let first = place(&c, "n1", "p", 1);
    assert_eq!(first[0], "10.67.0.16".parse::<IpAddr>().unwrap());
    // c2's grant of .17, killed before the etcd transaction: its row only.
    let key = "/ipam-delegated/v1/cnet/blue/addrs/10.67.0.16-28/10.67.0.17";
    let value = r#"{"kind":"allocated","node":"n1","container":"c2","ifname":"eth0"}"#;
    let conn = rusqlite::Connection::open(c.db("n1")).unwrap();
    conn.execute(
        "INSERT INTO cluster_records (key, value, network, pool, address, kind, container_id, ifname, added_by, state) \
         VALUES (?1, ?2, 'cnet', 'blue', '10.67.0.17', 'allocated', 'c2', 'eth0', NULL, 'writing')",
        [key, value],
    )
    .unwrap();
    drop(conn);
    assert!(c.addrs().iter().all(|a| a.ip.to_string() != "10.67.0.17"), "etcd has no record of .17");
    // The runtime repeats c2's ADD: whatever it gets is recorded in etcd for it.
    let out = c.add("n1", "c2");
    assert_eq!(out.status, 0, "{}", brief(&out));
    let got = ipv4_of(out.result());
    assert!(
        c.addrs().iter().any(|a| a.ip == got && a.container == "c2"),
        "c2 got {got}, which etcd does not record for it: {:?}",
        c.addrs()
    );
    assert_covered(&c, &held_once(&c, &["n1"]));
}
