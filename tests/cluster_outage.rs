//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"): etcd
//! away, paused or killed. Simulated nodes, each with a database of its own,
//! share one real etcd (tests/cluster_harness; a missing etcd fails these
//! tests, never skips them); every call is a real `ipam-delegated` process.
//!
//! What is checked: ADD from blocks confirmed within offlineGrace while etcd
//! is away and error 11 for the rest (static addresses, a node without a
//! block, offlineGrace 0), each call within a bound; releases journaled by
//! DEL (which fails with 11 for an address outside the node's own blocks)
//! and finished by a later call once etcd is back.

mod cluster_harness;
mod stack;
mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cluster_harness::*;
use stack::ipv4_of;
use support::Outcome;

/// How long one call may take while etcd does not answer: the etcd timeout
/// (1 s) a few times, within the orchestrator's 5 s per delegate.
const OFFLINE_BOUND: Duration = Duration::from_secs(5);

fn timed(f: impl FnOnce() -> Outcome) -> (Outcome, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

/// With etcd paused or killed (`how`): n1's ADDs fit its block, the rest is
/// 11, and the DEL of `pending` (a container with a static address in a
/// block nobody claims, which no other node may use while its record is in
/// etcd) journals the release and fails with 11, for the runtime to try
/// again.
fn while_away(c: &Cluster, how: &str, k: &mut usize, pending: (&str, IpAddr), log: &mut Vec<String>) {
    let n1_block = c.node_blocks("n1");
    for _ in 0..3 {
        *k += 1;
        let id = format!("off-{how}-{k}");
        let (out, took) = timed(|| c.add("n1", &id));
        assert_eq!(
            out.status,
            0,
            "etcd {how}: ADD {id} on n1, which has room in a block confirmed just now: {}",
            brief(&out)
        );
        let ip = ipv4_of(out.result());
        assert!(n1_block.iter().any(|(b, _)| b.contains(ip)), "etcd {how}: {ip} is outside n1's blocks {n1_block:?}");
        assert!(took < OFFLINE_BOUND, "etcd {how}: ADD on n1 took {took:?}");
        log.push(format!("{how}: n1 ADD {took:.2?}"));
    }
    let (out, took) = timed(|| c.add("n2", &format!("off-{how}-n2")));
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "etcd {how}: ADD on n2, which owns no block: {msg}");
    assert!(took < OFFLINE_BOUND, "etcd {how}: the failing ADD on n2 took {took:?}");
    log.push(format!("{how}: n2 ADD (11) {took:.2?}"));
    let (out, took) = timed(|| c.add_static("n1", &format!("off-{how}-static"), "10.50.3.222".parse().unwrap()));
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "etcd {how}: a static ADD: {msg}");
    assert!(took < OFFLINE_BOUND, "etcd {how}: the static ADD took {took:?}");
    log.push(format!("{how}: static ADD (11) {took:.2?}"));
    let (out, took) = timed(|| c.del("n1", pending.0));
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "etcd {how}: DEL of {}: {msg}", pending.0);
    assert!(msg.contains(&pending.1.to_string()), "etcd {how}: the message names the address: {msg}");
    assert!(took < OFFLINE_BOUND, "etcd {how}: DEL of {} took {took:?}", pending.0);
    log.push(format!("{how}: DEL of a static {took:.2?}"));
    let rows = c.node_records("n1");
    assert!(
        rows.iter().any(|r| r[1] == pending.1.to_string() && r[4] == "releasing"),
        "etcd {how}: the release of {} is journaled in n1's cluster_records: {rows:?}",
        pending.1
    );
    assert!(c.leases("n1").iter().all(|r| r.container_id != pending.0), "etcd {how}: DEL released the lease");
}

/// After etcd is back: its record of `ip` is still there until n1's next
/// call, which finishes the release.
fn release_completes(c: &Cluster, how: &str, k: &mut usize, ip: IpAddr) {
    // A paused etcd still receives the delete the DEL gave up on, and may
    // apply it when it resumes; a killed one never got it.
    if how == "killed" {
        assert!(c.addrs().iter().any(|a| a.ip == ip), "etcd {how}: the record of {ip} went while etcd was down?");
    }
    *k += 1;
    let out = c.add("n1", &format!("back-{how}-{k}"));
    assert_eq!(out.status, 0, "etcd {how}, back: ADD on n1: {}", brief(&out));
    assert!(
        c.addrs().iter().all(|a| a.ip != ip),
        "etcd {how}: n1's next call did not finish the release of {ip}: {:?}",
        c.addrs()
    );
    assert_eq!(c.node_records("n1"), Vec::<Vec<String>>::new(), "etcd {how}: n1's cluster_records after the release");
}

#[test]
fn etcd_outage() {
    let _took = Took::new("etcd_outage");
    let mut c = Cluster::blue(30.0);
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    let mut log = Vec::new();
    let mut k = 0;
    // Warm n1: a block with room, and a static address.
    for i in 0..5 {
        let out = c.add("n1", &format!("warm-{i}"));
        assert_eq!(out.status, 0, "warm ADD: {}", brief(&out));
    }
    assert_eq!(c.blocks_of("n1").len(), 1);
    let static1: IpAddr = "10.50.3.200".parse().unwrap();
    let out = c.add_static("n1", "n1-static-1", static1);
    assert_eq!(ipv4_of(out.result()), static1);

    c.store.pause();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        while_away(&c, "paused", &mut k, ("n1-static-1", static1), &mut log)
    }));
    c.store.resume();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
    release_completes(&c, "paused", &mut k, static1);

    let static2: IpAddr = "10.50.3.201".parse().unwrap();
    let out = c.add_static("n1", "n1-static-2", static2);
    assert_eq!(ipv4_of(out.result()), static2);
    c.store.kill();
    while_away(&c, "killed", &mut k, ("n1-static-2", static2), &mut log);
    c.store.restart();
    release_completes(&c, "killed", &mut k, static2);

    // offlineGrace 0: without etcd, not even n1's block.
    c.grace = 0.0;
    let out = c.add("n1", "grace0-up");
    assert_eq!(out.status, 0, "offlineGrace 0 with etcd up: {}", brief(&out));
    c.store.pause();
    let (out, took) = timed(|| c.add("n1", "grace0-down"));
    c.store.resume();
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "offlineGrace 0, etcd paused: ADD on n1: {msg}");
    assert!(took < OFFLINE_BOUND, "offlineGrace 0: the failing ADD took {took:?}");
    log.push(format!("grace 0: n1 ADD (11) {took:.2?}"));
    held_once(&c, &["n1", "n2"]);
    eprintln!("etcd outage: {}", log.join("; "));
}
