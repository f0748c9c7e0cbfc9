//! Cluster mode (docs/contract.md "Cluster mode", ipam-ds-cluster/README.md
//! "Why no address is stranded"): a DEL that cannot reach etcd, for an
//! address whose record other nodes must see gone (one handed out in a
//! shared block), fails with 11 so that the runtime tries it again, rather
//! than succeeding and leaving the release to a later call of a node that
//! may never call again. On a real etcd, every call a real `ipam-delegated`
//! process; a node without etcd is one given an endpoint nobody listens on.

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, TcpListener};
use std::time::Duration;

use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::Outcome;

/// 13 addresses (.16-.28) in one /28 block: a pool of one block, so shared.
fn thirteen(third: u8) -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": format!("10.72.{third}.0/24"), "rangeStart": format!("10.72.{third}.16"), "rangeEnd": format!("10.72.{third}.28")}], "blockSize": 28}])
}

fn thirteen_addresses(third: u8) -> BTreeSet<IpAddr> {
    (16..=28).map(|i| format!("10.72.{third}.{i}").parse().expect("an address")).collect()
}

/// An etcd endpoint on 127.0.0.1 that nobody listens on (connection refused).
fn dead_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

/// Cuts `node` off etcd.
fn cut_off(c: &mut Cluster, node: &str) {
    c.set_endpoints(node, vec![dead_endpoint()]);
}

/// Gives `node` etcd back.
fn reconnect(c: &mut Cluster, node: &str) {
    c.node_endpoints.remove(node);
}

/// The DEL of `container` on `node` as a runtime makes it: tried again
/// while it fails (kubelet keeps a pod terminating until its DEL succeeds).
/// Before the first retry, `meanwhile` runs (etcd comes back). The outcomes.
fn del_as_runtime(c: &mut Cluster, node: &str, container: &str, meanwhile: impl FnOnce(&mut Cluster)) -> Vec<Outcome> {
    let mut outcomes = vec![c.del(node, container)];
    if outcomes[0].status != 0 {
        meanwhile(c);
        for _ in 0..20 {
            let out = c.del(node, container);
            let done = out.status == 0;
            outcomes.push(out);
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    outcomes
}

/// `node` places pods (`tag-<i>`) until the pool is full, each ADD retried
/// for a while as a runtime does: the addresses they got.
fn fill(c: &Cluster, node: &str, tag: &str) -> BTreeSet<IpAddr> {
    let mut got = BTreeSet::new();
    for i in 0..20 {
        let out = c.add_within(node, &format!("{tag}-{i}"), Duration::from_secs(3));
        if out.status != 0 {
            let (code, msg) = failure(&out);
            assert_eq!(code, 100, "{node}'s pod {tag}-{i}: {msg}");
            break;
        }
        got.insert(ipv4_of(out.result()));
    }
    got
}

#[test]
fn a_del_that_cannot_reach_etcd_strands_no_address_of_a_shared_block() {
    let _took = Took::new("a_del_that_cannot_reach_etcd_strands_no_address_of_a_shared_block");
    let mut c = Cluster::new(thirteen(0), 30.0);
    let out = c.add("n1", "p");
    assert_eq!(out.status, 0, "{}", brief(&out));
    let x = ipv4_of(out.result());
    assert!(c.addrs().iter().any(|a| a.ip == x && a.kind == "allocated"), "{x} is granted: {:?}", c.addrs());
    // n1 loses etcd; its runtime deletes the pod.
    cut_off(&mut c, "n1");
    let outcomes = del_as_runtime(&mut c, "n1", "p", |c| reconnect(c, "n1"));
    // n1 never calls again: no ADD, DEL, GC or STATUS. n2 fills the pool.
    let got = fill(&c, "n2", "q");
    assert_eq!(
        got,
        thirteen_addresses(0),
        "n2 got every address of the pool, {x} too; n1's DEL: {:?}",
        outcomes.iter().map(brief).collect::<Vec<_>>()
    );
    held_once(&c, &["n1", "n2"]);
    let (code, msg) = failure(&outcomes[0]);
    assert_eq!(code, 11, "a DEL that cannot release {x}'s record in etcd: try again later: {msg}");
    assert!(msg.contains(&x.to_string()), "the message names the address: {msg}");
    let last = outcomes.last().expect("an outcome");
    assert_eq!(last.status, 0, "the runtime's retry, etcd back: {}", brief(last));
}

#[test]
fn a_rollback_that_cannot_reach_etcd_is_finished_by_the_runtimes_del() {
    let _took = Took::new("a_rollback_that_cannot_reach_etcd_is_finished_by_the_runtimes_del");
    let mut c = Cluster::new(thirteen(1), 30.0);
    let out = c.add("n1", "p");
    assert_eq!(out.status, 0, "{}", brief(&out));
    let x = ipv4_of(out.result());
    let added_by = c.table("n1", "SELECT added_by FROM cluster_records");
    let [row] = added_by.as_slice() else { panic!("one record row: {added_by:?}") };
    // An outer orchestrator rolls that ADD back (its stack failed after
    // this one), while n1 cannot reach etcd.
    cut_off(&mut c, "n1");
    let rollback = c.run("DEL", "p", &c.config("n1"), &[("IPAM_DELEGATED_ROLLBACK", row[0].as_str())]);
    let (code, msg) = failure(&rollback);
    assert_eq!(code, 11, "the rollback could not release {x}'s record: {msg}");
    // Nothing half done: the address stays recorded in etcd and journaled
    // on n1 as being released, so that no node is granted it meanwhile.
    assert!(c.addrs().iter().any(|a| a.ip == x), "{x}'s record stays until released: {:?}", c.addrs());
    let rows = c.node_records("n1");
    assert!(rows.iter().all(|r| r[4] == "releasing"), "n1 journals the release: {rows:?}");
    let got = fill(&c, "n2", "early");
    assert!(!got.contains(&x), "n2 was granted {x} while n1's record held it");
    for i in 0..got.len() {
        c.del("n2", &format!("early-{i}")).assert_quiet_success();
    }
    // The runtime deletes the failed ADD's attachment; etcd is back.
    reconnect(&mut c, "n1");
    c.del("n1", "p").assert_quiet_success();
    assert_eq!(c.node_records("n1"), Vec::<Vec<String>>::new(), "n1 released its record");
    assert!(c.leases("n1").is_empty(), "and its lease: {:?}", c.leases("n1"));
    let got = fill(&c, "n2", "q");
    assert_eq!(got, thirteen_addresses(1), "n2 got every address of the pool, {x} too");
}

/// The limit: a node gone for good between its failed DEL and the retry
/// leaves its record in the shared block; `release-node` of it deletes it.
#[test]
fn a_node_gone_after_a_failed_del_is_released_by_release_node() {
    let _took = Took::new("a_node_gone_after_a_failed_del_is_released_by_release_node");
    let mut c = Cluster::new(thirteen(2), 1.0);
    c.call_timeout = 1;
    let out = c.add("n1", "p");
    assert_eq!(out.status, 0, "{}", brief(&out));
    let x = ipv4_of(out.result());
    cut_off(&mut c, "n1");
    let (code, msg) = failure(&c.del("n1", "p"));
    assert_eq!(code, 11, "{msg}");
    // n1's machine is gone: no retry ever comes. Its record keeps x.
    assert!(c.addrs().iter().any(|a| a.ip == x && a.node == "n1"), "{:?}", c.addrs());
    reconnect(&mut c, "n1");
    release_node(&c, "n1", "op");
    assert!(c.addrs().iter().all(|a| a.ip != x), "release-node deleted n1's record of {x}: {:?}", c.addrs());
    // Once the tombstone's lease ends (offlineGrace 1 s + 3 × 1 s), n2 gets
    // every address of the pool.
    std::thread::sleep(Duration::from_secs(5));
    let got = fill(&c, "n2", "q");
    assert_eq!(got, thirteen_addresses(2), "n2 got every address of the pool, {x} too");
}
