//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"): six
//! nodes race, and one node's ADDs race at its headroom. Simulated nodes,
//! each with a database of its own, share one real etcd
//! (tests/cluster_harness; a missing etcd fails these tests, never skips
//! them); every call is a real `ipam-delegated` process, from many threads at
//! once.
//!
//! What is checked is what the cluster promises under concurrent ADDs and
//! DELs: no address held twice across the nodes, every address inside a block
//! its node owns in etcd (or recorded for it there), few blocks per node,
//! never one block owned by two nodes.

mod cluster_harness;
mod stack;
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;
use support::{parallel, Outcome};

/// The failed ADDs among `outs` (index `first + k`), one line each, and
/// the addresses of the others by index.
fn sort_adds(outs: &[Outcome], first: usize, what: impl Fn(usize) -> String) -> (Vec<String>, Vec<(usize, IpAddr)>) {
    let mut failed = Vec::new();
    let mut ok = Vec::new();
    for (k, out) in outs.iter().enumerate() {
        if out.status == 0 {
            ok.push((first + k, ipv4_of(out.result())));
        } else {
            let (code, msg) = failure(out);
            failed.push(format!("{}: code {code}: {msg}", what(first + k)));
        }
    }
    (failed, ok)
}

#[test]
fn six_nodes_race_600_adds() {
    let _took = Took::new("six_nodes_race_600_adds");
    const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];
    let c = Cluster::blue(300.0);
    let node = |i: usize| NODES[i % NODES.len()];
    let id = |i: usize| format!("race-{i}");
    let what = |i: usize| format!("ADD {} on {}", id(i), node(i));
    let started = Instant::now();
    // ADDs that failed: reported at the end, after every other check ran
    // on the ADDs that succeeded.
    let mut failed: Vec<String> = Vec::new();

    // 600 ADDs, 12 at a time, each node's from two threads on average.
    let t = Instant::now();
    let first: Vec<Outcome> = parallel(600, 12, |i| c.add(node(i), &id(i)));
    let add_time = t.elapsed();
    let (bad, ok) = sort_adds(&first, 0, what);
    failed.extend(bad);
    let mut told: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (i, ip) in ok {
        if let Some(j) = told.insert(ip, i) {
            panic!("{ip} was handed to {} on {} and to {} on {}", id(j), node(j), id(i), node(i));
        }
    }
    let held = held_once(&c, &NODES);
    assert_eq!(held.len(), told.len(), "the node databases hold what the ADDs reported");
    for (ip, i) in &told {
        assert_eq!(held.get(ip), Some(&(node(*i).to_string(), id(*i))), "{ip} in the node databases");
    }
    assert_covered(&c, &held);
    let mut peak: HashMap<String, usize> = HashMap::new();
    for (n, _) in held.values() {
        *peak.entry(n.clone()).or_default() += 1;
    }
    assert_few_blocks(&c, &NODES, &peak, 30);

    // DEL half of them, half of each node's: rounds of six alternate.
    let gone = |i: usize| i < 600 && (i / 6) & 1 == 0;
    let halves: Vec<usize> = (0..600).filter(|i| gone(*i)).collect();
    let t = Instant::now();
    let dels: Vec<Outcome> = parallel(halves.len(), 12, |k| c.del(node(halves[k]), &id(halves[k])));
    let del_time = t.elapsed();
    for out in &dels {
        out.assert_quiet_success();
    }
    let held = held_once(&c, &NODES);
    told.retain(|_, i| !gone(*i));
    assert_eq!(held.len(), told.len());

    // 300 more.
    let t = Instant::now();
    let second: Vec<Outcome> = parallel(300, 12, |k| c.add(node(600 + k), &id(600 + k)));
    let add2_time = t.elapsed();
    let (bad, ok) = sort_adds(&second, 600, what);
    failed.extend(bad);
    for (i, ip) in ok {
        if let Some(j) = told.insert(ip, i) {
            panic!("{ip} was handed to {} on {} while {} on {} holds it", id(i), node(i), id(j), node(j));
        }
    }
    let held = held_once(&c, &NODES);
    assert_eq!(held.len(), told.len());
    for (ip, i) in &told {
        assert_eq!(held.get(ip), Some(&(node(*i).to_string(), id(*i))), "{ip} in the node databases");
    }
    assert_covered(&c, &held);
    let mut now: HashMap<String, usize> = HashMap::new();
    for (n, _) in held.values() {
        *now.entry(n.clone()).or_default() += 1;
    }
    for (n, count) in now {
        let p = peak.entry(n).or_default();
        *p = (*p).max(count);
    }
    assert_few_blocks(&c, &NODES, &peak, 30);
    // Two nodes never own one block.
    let blocks = c.blocks();
    let distinct: BTreeSet<Net4> = blocks.iter().map(|b| b.net).collect();
    assert_eq!(distinct.len(), blocks.len(), "a block recorded twice: {blocks:?}");

    // DEL everything (a DEL of an attachment whose ADD failed succeeds too).
    let left: Vec<usize> = (0..900).filter(|i| !gone(*i)).collect();
    let dels: Vec<Outcome> = parallel(left.len(), 12, |k| c.del(node(left[k]), &id(left[k])));
    for out in &dels {
        out.assert_quiet_success();
    }
    for n in NODES {
        assert_eq!(c.leases(n), Vec::new(), "{n} holds leases after DEL of everything");
        assert_eq!(c.node_records(n), Vec::<Vec<String>>::new(), "{n} keeps cluster records");
    }
    assert!(c.addrs().is_empty(), "etcd keeps address records: {:?}", c.addrs());
    eprintln!(
        "six nodes: 600 ADDs in {add_time:.2?}, 300 DELs in {del_time:.2?}, 300 ADDs in {add2_time:.2?}, {} blocks \
         claimed in all, {} of 900 ADDs failed; whole test {:.2?}",
        blocks.len(),
        failed.len(),
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{} of 900 ADDs failed (the pool has {} free addresses at any time and every other check held):\n  {}",
        failed.len(),
        1021 - 600,
        failed.join("\n  ")
    );
}

/// What the race above found now and then, made likely: several ADDs of one
/// node at once when its blocks are nearly full. ipam-ds-cluster answers
/// before the allocators take their addresses, so it claims the next block
/// once a node's free addresses fall to its headroom (a quarter of a block,
/// here 4): eight ADDs at once at that point must all succeed while the pool
/// has room.
#[test]
fn concurrent_adds_of_one_node_that_is_nearly_full() {
    let _took = Took::new("concurrent_adds_of_one_node_that_is_nearly_full");
    const AT_ONCE: usize = 8;
    const HEADROOM: usize = 4;
    const ROUNDS: usize = 6;
    // 64 blocks of 16.
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/22"}], "blockSize": 28}]), 300.0);
    // Not the network address, the gateway or the broadcast address.
    let unusable: [IpAddr; 3] = [[10, 50, 0, 0].into(), [10, 50, 0, 1].into(), [10, 50, 3, 255].into()];
    let usable = |b: &Net4| (0..b.size()).map(|i| b.nth(i)).filter(|ip| !unusable.contains(ip)).count();
    let mut k = 0;
    let mut failed = Vec::new();
    for round in 0..ROUNDS {
        // Fill n1's blocks until their free addresses are the headroom.
        loop {
            let owned = c.blocks_of("n1");
            let room: usize = owned.iter().map(usable).sum();
            // None before n1's first ADD.
            let used = c.leases_if_created("n1").len();
            if !owned.is_empty() && room <= used + HEADROOM {
                break;
            }
            let out = c.add("n1", &format!("fill-{k}"));
            assert_eq!(out.status, 0, "{}", brief(&out));
            k += 1;
        }
        let barrier = Barrier::new(AT_ONCE);
        let outs: Vec<Outcome> = thread::scope(|s| {
            let runs: Vec<_> = (0..AT_ONCE)
                .map(|j| {
                    let (c, barrier) = (&c, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        c.add("n1", &format!("last-{round}-{j}"))
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (j, out) in outs.iter().enumerate() {
            if out.status != 0 {
                let (code, msg) = failure(out);
                failed.push(format!("round {round}, ADD {j}: code {code}: {msg}"));
            }
        }
    }
    held_once(&c, &["n1"]);
    assert!(
        failed.is_empty(),
        "{} of {} ADDs racing at n1's headroom failed, with the pool mostly free:\n  {}",
        failed.len(),
        AT_ONCE * ROUNDS,
        failed.join("\n  ")
    );
}

/// Past the headroom: more ADDs of one node at once than its blocks of its
/// own have room for. ipam-ds-cluster leases each ADD's address itself, under the
/// node database's lock, so no two count on the same free address: an ADD
/// that finds the node's room taken claims the next block, and every pod
/// is placed at its first ADD, each address once (before, those that found
/// the blocks handed on already taken by the others were told to try
/// again, 11).
#[test]
fn a_burst_on_one_node_past_its_headroom_places_every_pod_at_its_first_add() {
    let _took = Took::new("a_burst_on_one_node_past_its_headroom_places_every_pod_at_its_first_add");
    // 64 blocks of 16, each the node's own: a burst of 48 needs at least 4
    // of them.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.51.0.0/22"}], "blockSize": 28}]), 300.0);
    c.share_blocks = Some("never");
    burst_places_every_pod_at_its_first_add(&c, 48);
}

/// The same burst into shared blocks, where each address is granted in the
/// store: the calls of one node pass over the addresses the others are
/// being granted, and one that claims a block reserves its address in the
/// claim, so none finds every address it looked at taken and is told to try
/// again (before, 2 of 48 were: 11). Then their DELs at once: each releases
/// its record.
#[test]
fn a_burst_into_shared_blocks_places_every_pod_at_its_first_add_and_its_dels_release_all() {
    let _took = Took::new("a_burst_into_shared_blocks_places_every_pod_at_its_first_add_and_its_dels_release_all");
    // 16 blocks of 16: shared (shareBlocks auto).
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.52.0.0/24"}], "blockSize": 28}]), 300.0);
    burst_places_every_pod_at_its_first_add(&c, 48);
    burst_of_dels_releases_every_address(&c, 48);
}
