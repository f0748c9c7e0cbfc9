//! Sticky addresses across nodes, on a real etcd: a workload identity gets
//! its address on whatever node it lands (a pod re-created elsewhere, a VM
//! migrated), two nodes adding one identity at once give it to one, a hold
//! ends when etcd's lease does, and taking over an address needs etcd.
//! Every call is a real `ipam-delegated` process.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::time::Duration;

use cluster_harness::sticky::*;
use cluster_harness::*;
use serde_json::{json, Value};
use support::assert_error;

fn identity_keys(c: &Cluster) -> Vec<(String, Value)> {
    c.store
        .dump("/ipam-delegated/v1/cnet/_sticky/")
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_str(&v).expect("an identity record")))
        .collect()
}

#[test]
fn a_pod_re_created_on_another_node_gets_its_address_in_blocks_of_their_own() {
    let mut c = Cluster::blue(30.0);
    c.share_blocks = Some("never");
    let sticky = json!({"hold": 600});
    let first = ok(&add(&c, "n1", "c1", "db-0", &sticky));
    // n2 has a block of its own too.
    ok(&add(&c, "n2", "w1", "web-0", &sticky));
    del(&c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    let keys = identity_keys(&c);
    assert_eq!(keys.len(), 2, "{keys:?}");
    let held = &keys.iter().find(|(k, _)| k.ends_with("/eth0/prod/db-0")).expect("db-0's key").1;
    assert!(held["until"].as_i64().unwrap() > 0 && held["addresses"] == json!([ip(&first[0])]), "{held}");
    // The held address has its record: no node hands it out, its owner n1 neither.
    for i in 0..5 {
        let got = ok(&add(&c, "n1", &format!("o{i}"), &format!("other-{i}"), &sticky));
        assert_ne!(got, first, "n1 handed out db-0's held address");
    }
    // db-0 lands on n2: the same address, in n1's block.
    let moved = ok(&add(&c, "n2", "c2", "db-0", &sticky));
    assert_eq!(moved, first);
    assert!(c.blocks_of("n1").iter().any(|b| b.contains(ip(&first[0]))), "it lies in n1's block");
    assert_no_address_twice(&c, &["n1", "n2"]);
    // n1, which owns the block, still never hands it out while n2 has it.
    for i in 5..9 {
        let got = ok(&add(&c, "n1", &format!("o{i}"), &format!("other-{i}"), &sticky));
        assert_ne!(got, first);
    }
    // And back to n1 after a DEL on n2.
    del(&c, "n2", "c2", "db-0", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(&c, "n1", "c3", "db-0", &sticky)), first);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

#[test]
fn a_pod_re_created_on_another_node_gets_its_address_in_shared_blocks() {
    cluster_harness::sticky::a_pod_re_created_on_another_node_gets_its_address_in_shared_blocks(&Cluster::new(
        shared_blocks_pools(),
        30.0,
    ));
}

#[test]
fn a_take_over_waits_for_a_grant_of_its_address_in_flight() {
    cluster_harness::sticky::a_take_over_waits_for_a_grant_of_its_address_in_flight(&Cluster::new(
        shared_blocks_pools(),
        30.0,
    ));
}

#[test]
fn a_refused_add_leaves_its_identity_to_the_next() {
    cluster_harness::sticky::a_refused_add_leaves_its_identity_to_the_next(&Cluster::new(dual_stack_pools(), 30.0));
}

#[test]
fn two_nodes_adding_one_identity_at_once_give_it_to_one() {
    cluster_harness::sticky::two_nodes_adding_one_identity_at_once_give_it_to_one(&Cluster::blue(30.0));
}

#[test]
fn share_live_lets_a_migrating_vm_have_its_address_on_both_nodes() {
    cluster_harness::sticky::share_live_lets_a_migrating_vm_have_its_address_on_both_nodes(&Cluster::blue(30.0));
}

#[test]
fn a_hold_ends_when_etcd_s_lease_does_and_the_address_is_free_again() {
    let mut c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.62.0.0/24", "rangeStart": "10.62.0.10", "rangeEnd": "10.62.0.10"}], "blockSize": 27}]),
        30.0,
    );
    c.share_blocks = Some("never");
    let sticky = json!({"hold": 2});
    assert_eq!(ok(&add(&c, "n1", "c1", "db-0", &sticky)), ["10.62.0.10/24"]);
    del(&c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    assert_error(&add(&c, "n1", "w1", "web-0", &sticky), 100, &[]);
    std::thread::sleep(Duration::from_secs(4));
    assert!(identity_keys(&c).is_empty(), "etcd ended the hold: {:?}", identity_keys(&c));
    assert!(c.addrs().is_empty(), "{:?}", c.addrs());
    assert_eq!(ok(&add(&c, "n1", "w1", "web-0", &sticky)), ["10.62.0.10/24"]);
}

/// n1 adds db-0 in a block of its own, then etcd stops answering and
/// db-0's DEL comes (it succeeds): the cluster, still paused, and db-0's
/// address.
fn deleted_without_etcd(sticky: &Value) -> (Cluster, Vec<String>) {
    let mut c = Cluster::blue(30.0);
    c.share_blocks = Some("never");
    let first = ok(&add(&c, "n1", "c1", "db-0", sticky));
    c.store.pause();
    del(&c, "n1", "c1", "db-0", sticky).assert_quiet_success();
    (c, first)
}

#[test]
fn taking_over_needs_etcd_and_a_del_without_etcd_is_published_later() {
    let sticky = json!({});
    // DEL always succeeds; an ADD of the identity needs etcd (11).
    let (c, first) = deleted_without_etcd(&sticky);
    assert_error(&add(&c, "n2", "c2", "db-0", &sticky), 11, &["etcd"]);
    assert_error(&add(&c, "n1", "c3", "db-0", &sticky), 11, &["etcd"]);
    c.store.resume();
    // n1's next call publishes the hold; then db-0 lands on n2 with its address.
    ok(&add(&c, "n1", "w1", "web-0", &sticky));
    let key = identity_keys(&c).into_iter().find(|(k, _)| k.ends_with("db-0")).expect("db-0's key").1;
    assert!(key["until"].as_i64().unwrap_or(0) > 0, "held: {key}");
    assert_eq!(ok(&add(&c, "n2", "c2", "db-0", &sticky)), first);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

#[test]
fn release_node_holds_a_dead_node_s_identities_so_they_come_back_elsewhere() {
    cluster_harness::sticky::release_node_holds_a_dead_node_s_identities_so_they_come_back_elsewhere(
        &mut Cluster::new(release_node_pools(), 1.0),
    );
}

#[test]
fn after_a_del_without_etcd_the_identity_comes_back_on_its_own_node() {
    let sticky = json!({});
    let (c, first) = deleted_without_etcd(&sticky);
    c.store.resume();
    // The first call after the outage is the identity's own ADD, on n1.
    assert_eq!(ok(&add(&c, "n1", "c2", "db-0", &sticky)), first);
    let key = identity_keys(&c).into_iter().find(|(k, _)| k.ends_with("db-0")).expect("db-0's key").1;
    assert_eq!((key["node"].as_str(), key["container"].as_str()), (Some("n1"), Some("c2")), "{key}");
    // Nothing held any more, in etcd or on n1.
    assert!(c.addrs().iter().all(|a| a.ip != ip(&first[0]) || a.node == "n1"), "{:?}", c.addrs());
    assert_no_address_twice(&c, &["n1"]);
}
