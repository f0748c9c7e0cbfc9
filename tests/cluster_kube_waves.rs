//! Cluster mode on the Kubernetes API: 1000 pods into exactly 1000
//! addresses on 10 nodes, in two waves (the benchmark's shape,
//! bench/src/scenarios/cluster.rs, "pods_in_waves", on a real API server:
//! tests/cluster_harness/kube.rs). Nodes 1-5 place their pods and are done;
//! then nodes 6-10 place theirs while nodes 1-5 make no call at all, so the
//! second wave needs every address the first left in its blocks. Every pod
//! is an ADD process with its own container id, 2 in flight per node; a
//! failed ADD is tried again 0.5 s later, as a runtime does.
//!
//! What is checked: every pod placed, no address answered twice, the node
//! databases hold exactly what was answered, each address covered by the
//! store.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;

const PODS: usize = 1000;
const NODES: usize = 10;
/// ADDs in flight per node.
const THREADS: usize = 2;
/// How long a failed ADD waits before it is tried again.
const RETRY: Duration = Duration::from_millis(500);
/// How long a wave may take before its pods are given up (and the test fails).
const WAVE_DEADLINE: Duration = Duration::from_secs(150);

#[test]
fn a_thousand_pods_into_a_thousand_addresses_in_two_waves() {
    let _took = Took::new("a_thousand_pods_into_a_thousand_addresses_in_two_waves");
    // Exactly 1000 addresses: 10.32.0.2-10.32.3.233 of a /22 in /26 blocks
    // (16 blocks, shared: shareBlocks auto).
    let pools = json!([{"name": "blue", "ranges": [{"subnet": "10.32.0.0/22", "rangeStart": "10.32.0.2", "rangeEnd": "10.32.3.233"}], "blockSize": 26}]);
    let c = Cluster::on_kubernetes(pools, 300.0);
    let nodes: Vec<String> = (1..=NODES).map(|k| format!("node-{k}")).collect();
    let per_node = PODS / NODES;
    let answered: Mutex<BTreeMap<IpAddr, String>> = Mutex::new(BTreeMap::new());
    let twice: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let failures: Mutex<BTreeMap<u64, (usize, String)>> = Mutex::new(BTreeMap::new());
    let mut times = Vec::new();
    for wave in [0..NODES / 2, NODES / 2..NODES] {
        let placed = AtomicUsize::new(0);
        let next: Vec<AtomicUsize> = wave.clone().map(|_| AtomicUsize::new(0)).collect();
        let t0 = Instant::now();
        let end = t0 + WAVE_DEADLINE;
        thread::scope(|s| {
            for (k, next) in wave.clone().zip(&next) {
                for _ in 0..THREADS {
                    let (c, node, placed, answered, twice, failures) =
                        (&c, &nodes[k], &placed, &answered, &twice, &failures);
                    s.spawn(move || 'pods: loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= per_node {
                            break;
                        }
                        let container = format!("pod-{}-{i}", k + 1);
                        loop {
                            let out = c.add(node, &container);
                            if out.status == 0 {
                                placed.fetch_add(1, Ordering::Relaxed);
                                let ip = ipv4_of(out.result());
                                let holder = format!("{container} on {node}");
                                if let Some(other) = answered.lock().unwrap().insert(ip, holder.clone()) {
                                    twice.lock().unwrap().push(format!("{ip}: {other} and {holder}"));
                                }
                                break;
                            }
                            let (code, msg) = failure(&out);
                            failures.lock().unwrap().entry(code).or_insert((0, msg)).0 += 1;
                            if Instant::now() + RETRY >= end {
                                break 'pods;
                            }
                            thread::sleep(RETRY);
                        }
                    });
                }
            }
        });
        let placed = placed.into_inner();
        let took = t0.elapsed();
        eprintln!(
            "wave of nodes {}-{}: {placed} of {} pods placed in {took:.1?}; {} blocks claimed",
            wave.start + 1,
            wave.end,
            per_node * wave.len(),
            c.blocks().len()
        );
        times.push(took);
    }
    let failures = failures.into_inner().unwrap();
    for (code, (n, msg)) in &failures {
        eprintln!("{n} ADD attempt(s) failed with code {code}, the first: {msg}");
    }
    let twice = twice.into_inner().unwrap();
    assert!(twice.is_empty(), "addresses answered twice:\n  {}", twice.join("\n  "));
    let answered = answered.into_inner().unwrap();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let held = held_once(&c, &names);
    assert_eq!(held.len(), answered.len(), "the node databases hold what the ADDs answered");
    assert_covered(&c, &held);
    eprintln!("1000 pods in two waves: {times:.1?}");
    assert_eq!(answered.len(), PODS, "pods placed of {PODS}, into exactly {PODS} addresses; failures {failures:?}");
}
