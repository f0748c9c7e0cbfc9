//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"):
//! addresses asked for by name. Simulated nodes, each with a database of its
//! own, share one real etcd (tests/cluster_harness; a missing etcd fails
//! these tests, never skips them); every call is a real `ipam-delegated`
//! process, two nodes at once where they race.
//!
//! What is checked: a static address is granted to exactly one node (the
//! loser gets 101 naming the winner's node and container, and keeps nothing),
//! and one inside a block another node owns is refused naming the owner, or,
//! if granted, never handed out by the owner.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Barrier;
use std::thread;

use cluster_harness::*;
use stack::ipv4_of;
use support::Outcome;

#[test]
fn static_race_one_wins() {
    let _took = Took::new("static_race_one_wins");
    const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
    let c = Cluster::blue(300.0);
    let mut wins: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..10usize {
        let ip: IpAddr = format!("10.50.1.{}", 70 + round).parse().unwrap();
        let (a, b) = (NODES[round % 4], NODES[(round + 1 + round / 4) % 4]);
        let pair = [a, b];
        let barrier = Barrier::new(2);
        let outs: Vec<Outcome> = thread::scope(|s| {
            let runs: Vec<_> = pair
                .iter()
                .map(|n| {
                    let (c, barrier) = (&c, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        c.add_static(n, &format!("st-{round}-{n}"), ip)
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..2).filter(|k| outs[*k].status == 0).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: {ip} asked by {a} and {b} at once: exactly one must win: {a}: {}; {b}: {}",
            brief(&outs[0]),
            brief(&outs[1])
        );
        let (w, l) = (winners[0], 1 - winners[0]);
        assert_eq!(ipv4_of(outs[w].result()), ip, "round {round}: the winner got what it asked for");
        let (code, msg) = failure(&outs[l]);
        let winner_container = format!("st-{round}-{}", pair[w]);
        assert_eq!(code, 101, "round {round}: the loser {}: {msg}", pair[l]);
        assert!(
            msg.contains(&format!("node {}", pair[w])) && msg.contains(&winner_container),
            "round {round}: the loser's message must name the winner's node {} and container: {msg}",
            pair[w]
        );
        *wins.entry(pair[w].to_string()).or_default() += 1;
        // etcd: one record, the winner's; the loser keeps nothing.
        let records: Vec<AddrRec> = c.addrs().into_iter().filter(|r| r.ip == ip).collect();
        assert_eq!(records.len(), 1, "round {round}: {records:?}");
        assert_eq!((records[0].node.as_str(), records[0].kind.as_str()), (pair[w], "static"));
        assert_eq!(records[0].container, winner_container);
        assert!(c.leases(pair[l]).iter().all(|r| r.address != ip), "round {round}: the loser holds {ip}");
        assert!(
            c.node_records(pair[l]).iter().all(|r| r[1] != ip.to_string()),
            "round {round}: the loser keeps a cluster record of {ip}: {:?}",
            c.node_records(pair[l])
        );
    }
    let held = held_once(&c, &NODES);
    assert_eq!(held.len(), 10);
    assert!(c.blocks().is_empty(), "static ADDs claim no block: {:?}", c.blocks());

    // A static address inside a block another node owns.
    let owner_out = c.add("n3", "dyn-n3");
    let owned_ip = ipv4_of(owner_out.result());
    let block = c.blocks_of("n3");
    assert_eq!(block.len(), 1, "n3 claimed one block: {:?}", c.blocks());
    let block = block[0];
    assert!(block.contains(owned_ip));
    // One n3 holds: 101 naming n3, whatever else.
    let out = c.add_static("n4", "steal-held", owned_ip);
    let (code, msg) = failure(&out);
    assert_eq!(code, 101, "{owned_ip}, held by n3 in its block, asked on n4: {msg}");
    assert!(msg.contains("node n3"), "the message names the owner node n3: {msg}");
    // One n3 has free in its block: 101 naming n3 (the contract also allows
    // a success if the reservation is atomic; then n3 must never hand it out).
    let free_ip = block.nth(block.size() - 3);
    let out = c.add_static("n4", "steal-free", free_ip);
    if out.status == 0 {
        eprintln!("static: {free_ip}, free in n3's block {block}, was granted to n4; checking n3 never hands it out");
        let mut got = Vec::new();
        for k in 0..block.size() {
            let o = c.add("n3", &format!("fill-n3-{k}"));
            if o.status != 0 {
                break;
            }
            got.push(ipv4_of(o.result()));
        }
        assert!(!got.contains(&free_ip), "n3 handed out {free_ip}, which n4 reserved: {got:?}");
        held_once(&c, &NODES);
    } else {
        let (code, msg) = failure(&out);
        assert_eq!(code, 101, "{free_ip}, free in n3's block {block}, asked on n4: {msg}");
        assert!(msg.contains("node n3"), "the message names the owner node n3: {msg}");
    }
    eprintln!("static race: winners per node {wins:?}");
}
