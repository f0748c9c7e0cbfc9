//! Cluster mode on the Kubernetes API (ipam-ds-cluster/docs/kubernetes.md):
//! concurrent nodes and kill -9, on a real API server
//! (tests/cluster_harness/kube.rs), every node calling with the installer
//! DaemonSet's ServiceAccount token, every call a real `ipam-delegated`
//! process from many threads at once.
//!
//! What is checked is what the cluster promises: no address held twice
//! across the nodes; every held address inside a block its node owns, or
//! recorded for it in a block's `records`; no failure but the documented
//! ones (100 when the pool is full, 11); and, after a storm of ADDs killed
//! at random moments, the runtime's DELs and GC leave no record naming a
//! container that no node holds (the storm: tests/cluster_harness/storm.rs,
//! the same on etcd in tests/cluster_kill.rs).

mod cluster_harness;
mod stack;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::kube::KubeStore;
use cluster_harness::storm::storm;
use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::Outcome;

const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];

/// Four blocks of 16: a /26 in /28 blocks.
fn four_blocks() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.67.0.0/26"}], "blockSize": 28}])
}

/// The addresses of [`four_blocks`] handed out: all but the network
/// address, the gateway and the broadcast address.
const FOUR_BLOCKS_USABLE: usize = 61;

/// Each node's pods: `counts[k]` for `NODES[k]`, two threads a node, all
/// nodes at once. Each ADD is tried once, or, with `retry`, again every
/// 200 ms as a runtime does until it succeeds or `retry` has passed.
/// (node, container, last outcome, failed attempts) of each.
fn race(
    c: &Cluster<KubeStore>,
    counts: &[usize],
    retry: Option<Duration>,
) -> Vec<(String, String, Outcome, Vec<String>)> {
    let barrier = Barrier::new(counts.len() * 2);
    thread::scope(|s| {
        let mut runs = Vec::new();
        for (k, count) in counts.iter().enumerate() {
            for half in 0..2 {
                let (barrier, node) = (&barrier, NODES[k]);
                runs.push(s.spawn(move || {
                    barrier.wait();
                    let mut done = Vec::new();
                    for i in (half..*count).step_by(2) {
                        let container = format!("{node}-{i}");
                        let deadline = Instant::now() + retry.unwrap_or_default();
                        let mut failed = Vec::new();
                        let out = loop {
                            let out = c.add(node, &container);
                            if out.status == 0 || Instant::now() >= deadline {
                                break out;
                            }
                            let (code, msg) = failure(&out);
                            failed.push(format!("{code}: {msg}"));
                            thread::sleep(Duration::from_millis(200));
                        };
                        done.push((node.to_string(), container, out, failed));
                    }
                    done
                }));
            }
        }
        runs.into_iter().flat_map(|r| r.join().expect("a racing thread")).collect()
    })
}

/// The checks every race ends with: what the ADDs answered is what the node
/// databases hold, none twice, each covered by the store, no block twice;
/// every failure (the last one of a pod, and every failed attempt) is 100
/// or 11. Returns the pods placed.
fn check(c: &Cluster<KubeStore>, what: &str, outs: &[(String, String, Outcome, Vec<String>)]) -> usize {
    let mut told: BTreeMap<IpAddr, (String, String)> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut codes: BTreeMap<u64, usize> = BTreeMap::new();
    for (node, container, out, attempts) in outs {
        for attempt in attempts {
            let code: u64 = attempt.split(':').next().and_then(|c| c.parse().ok()).unwrap_or(0);
            *codes.entry(code).or_default() += 1;
            if code != 100 && code != 11 {
                unexpected.push(format!("{what}: an attempt of {container} on {node}: {attempt}"));
            }
        }
        if out.status == 0 {
            let ip = ipv4_of(out.result());
            if let Some((n, ctr)) = told.insert(ip, (node.clone(), container.clone())) {
                panic!("{what}: {ip} was handed to {ctr} on {n} and to {container} on {node}");
            }
        } else {
            let (code, msg) = failure(out);
            *codes.entry(code).or_default() += 1;
            if code != 100 && code != 11 {
                unexpected.push(format!("{what}: ADD {container} on {node}: {code}: {msg}"));
            }
        }
    }
    let held = held_once(c, &NODES);
    assert_eq!(held, told, "{what}: the node databases hold what the ADDs answered");
    assert_covered(c, &held);
    let blocks = c.blocks();
    let distinct: BTreeSet<Net4> = blocks.iter().map(|b| b.net).collect();
    assert_eq!(distinct.len(), blocks.len(), "{what}: a block owned twice: {blocks:?}");
    eprintln!("{what}: {} placed, failures by code {codes:?}, {} blocks: {blocks:?}", told.len(), blocks.len());
    assert!(unexpected.is_empty(), "failures other than 100 and 11:\n  {}", unexpected.join("\n  "));
    told.len()
}

/// Shared blocks (`share` auto or always): six nodes place exactly as many
/// pods as the pool has addresses, each ADD retried as a runtime does: all
/// are placed, and the pool is then full (100 on every node).
fn six_nodes_fill_a_pool_of_shared_blocks(name: &'static str, share: Option<&'static str>) {
    let _took = Took::new(name);
    let mut c = Cluster::on_kubernetes(four_blocks(), 300.0);
    c.share_blocks = share;
    let counts = [11, 10, 10, 10, 10, 10];
    assert_eq!(counts.iter().sum::<usize>(), FOUR_BLOCKS_USABLE);
    let outs = race(&c, &counts, Some(Duration::from_secs(30)));
    let placed = check(&c, name, &outs);
    assert_eq!(placed, FOUR_BLOCKS_USABLE, "{name}: pods not placed in a pool with room for each");
    for node in NODES {
        let (code, msg) = failure(&c.add(node, &format!("{node}-extra")));
        assert_eq!(code, 100, "{name}: ADD on {node} in a full pool: {msg}");
    }
    for object in c.store.pool_blocks() {
        assert_eq!(object["spec"]["owner"]["shared"], true, "{name}: {object}");
    }
    // DEL of everything leaves no record and no lease.
    let dels: Vec<Outcome> = support::parallel(outs.len(), 6, |i| c.del(&outs[i].0, &outs[i].1));
    for out in &dels {
        out.assert_quiet_success();
    }
    assert!(c.addrs().is_empty(), "{name}: records after DEL of every pod: {:?}", c.addrs());
    for node in NODES {
        assert!(c.leases(node).is_empty(), "{name}: {node} holds leases after DEL of every pod");
    }
}

#[test]
fn six_nodes_fill_four_shared_blocks_by_default() {
    six_nodes_fill_a_pool_of_shared_blocks("six_nodes_fill_four_shared_blocks_by_default", None);
}

#[test]
fn six_nodes_fill_four_blocks_shared_always() {
    six_nodes_fill_a_pool_of_shared_blocks("six_nodes_fill_four_blocks_shared_always", Some("always"));
}

/// Blocks of each node's own (`shareBlocks` never): six nodes, four blocks.
/// A node with no block and nothing lent gets 100 (its owners lend at their
/// next call that reads the store: ipam-ds-cluster/README.md, "Lending and
/// borrowing"), so each ADD is tried once; what is checked is that nothing
/// is handed out twice or outside its node's blocks and records, and that
/// the owners placed every pod of theirs their blocks had room for.
#[test]
fn six_nodes_race_for_four_blocks_of_their_own() {
    let name = "six_nodes_race_for_four_blocks_of_their_own";
    let _took = Took::new(name);
    let mut c = Cluster::on_kubernetes(four_blocks(), 300.0);
    c.share_blocks = Some("never");
    let outs = race(&c, &[8; 6], None);
    let placed = check(&c, name, &outs);
    let owners: BTreeSet<String> = c.blocks().into_iter().map(|b| b.node).collect();
    assert!(!owners.is_empty(), "{name}: no block claimed");
    for object in c.store.pool_blocks() {
        assert_eq!(object["spec"]["owner"]["shared"], false, "{name}: {object}");
    }
    // An owner's pods fit its block (8 of at least 14): none failed.
    let failed_owners: Vec<String> = outs
        .iter()
        .filter(|(node, _, out, _)| out.status != 0 && owners.contains(node))
        .map(|(node, container, out, _)| format!("{container} on {node}: {}", brief(out)))
        .collect();
    assert!(
        failed_owners.is_empty(),
        "{name}: ADDs of nodes that own a block failed:\n  {}",
        failed_owners.join("\n  ")
    );
    eprintln!("{name}: {placed} placed; owners {owners:?}");
}

/// The storm over shared blocks (32 blocks: auto shares them), where every
/// address handed out is a compare-and-swap of its block's object.
#[test]
fn kill_storm_over_shared_blocks() {
    storm("kill_storm_over_shared_blocks", None, Cluster::on_kubernetes);
}

/// The storm over blocks of each node's own: claims (each one create of an
/// `Owned` block), adoption of a claim a kill left, addresses from the node
/// database.
#[test]
fn kill_storm_over_blocks_of_a_nodes_own() {
    storm("kill_storm_over_blocks_of_a_nodes_own", Some("never"), Cluster::on_kubernetes);
}

/// A burst of one node's ADDs into shared blocks, each address granted in
/// its block's `IPDBlock`: every pod placed at its first ADD, each at its
/// own address; then their DELs at once, which take turns at writing the
/// blocks as the grants do: none is refused by the API server (before the
/// turns, 304 writes of 48 DELs were) and no record is left (the same on
/// etcd: tests/cluster_race.rs).
#[test]
fn a_burst_into_shared_blocks_places_every_pod_at_its_first_add_and_its_dels_release_all() {
    let _took = Took::new("a_burst_into_shared_blocks_places_every_pod_at_its_first_add_and_its_dels_release_all");
    // 16 blocks of 16: shared (shareBlocks auto).
    let c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.53.0.0/24"}], "blockSize": 28}]),
        300.0,
    );
    burst_places_every_pod_at_its_first_add(&c, 48);
    let before = c.store.refused_block_writes();
    burst_of_dels_releases_every_address(&c, 48);
    assert_eq!(c.store.refused_block_writes() - before, 0, "writes of n1's blocks refused by the API server");
}
