//! Sticky identities whose addresses lie in shared blocks, or are shared
//! between nodes (`shareLive`), when their node dies (`release-node`) or
//! their DEL could not reach etcd: the address stays the identity's, never
//! handed to another workload while the identity has it (issue 35, cases
//! 1, 3 and 4). On a real etcd; every call is a real `ipam-delegated`
//! process.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::net::IpAddr;
use std::time::Duration;

use cluster_harness::sticky::*;
use cluster_harness::*;
use serde_json::{json, Value};
use support::{addresses, assert_error};

/// The key of identity `prod/<name>` on eth0, as etcd holds it.
fn identity_key(c: &Cluster, name: &str) -> Option<Value> {
    let key = format!("/ipam-delegated/v1/cnet/_sticky/eth0/prod/{name}");
    c.store.dump(&key).into_iter().find(|(k, _)| *k == key).map(|(_, v)| serde_json::from_str(&v).expect("a key"))
}

fn assert_no_address_twice(c: &Cluster, nodes: &[&str]) {
    let (_, twice) = held_by(c, nodes);
    assert!(twice.is_empty(), "addresses held by two live attachments: {twice:?}");
}

/// A pool of two /27 blocks, shared (64 addresses: 61 usable, .1 the
/// gateway, .0 and .63 the subnet's own), with a tombstone of
/// `release-node` lasting 1 + 3 × 1 s.
fn two_shared_blocks(subnet: &str) -> Cluster {
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": subnet}], "blockSize": 27}]), 1.0);
    c.call_timeout = 1;
    c
}

/// `node` takes every address it can get (other workloads), each ADD
/// tried again as a runtime would until the pool has none (100): the
/// addresses it got.
fn fill(c: &Cluster, node: &str, sticky: &Value) -> Vec<IpAddr> {
    let mut got = Vec::new();
    for i in 0..80 {
        let out = add(c, node, &format!("fill-{i}"), &format!("fill-{i}"), sticky);
        if out.status != 0 {
            assert_error(&out, 100, &[]);
            return got;
        }
        got.extend(addresses(&out).iter().map(|a| ip(a)));
    }
    panic!("{node} got {} addresses from a pool of 61", got.len());
}

/// Case 1: a shareLive identity lives on n1 with X granted in n1's shared
/// block, and n2 shares it. `release-node n1` passes it to n2; X must stay
/// recorded for n2's container, so that no node is granted X while n2
/// uses it.
#[test]
fn release_node_passes_a_share_live_identity_on_with_its_address_in_a_shared_block() {
    let c = two_shared_blocks("10.66.0.0/26");
    let sticky = json!({"shareLive": true});
    let x = ok(&add(&c, "n1", "src", "vm-1", &sticky));
    assert_eq!(ok(&add(&c, "n2", "dst", "vm-1", &sticky)), x, "n2 shares vm-1's address");
    // n1 dies: no DEL ever comes.
    let said = release_node_saying(&c, "n1", "n2");
    assert!(said.contains("prod/vm-1: passed to node n2"), "{said}");
    let key = identity_key(&c, "vm-1").expect("vm-1's key");
    assert_eq!((key["node"].as_str(), key["container"].as_str()), (Some("n2"), Some("dst")), "{key}");
    let x = ip(&x[0]);
    // Once n1's block is claimable again, n3 takes the whole pool but X.
    std::thread::sleep(Duration::from_secs(5));
    let got = fill(&c, "n3", &json!({}));
    assert!(!got.contains(&x), "n3 was granted {x}, which n2's container dst still uses");
    assert_eq!(got.len(), 60, "every usable address but {x}: {got:?}");
    let record = c.addrs().into_iter().find(|a| a.ip == x);
    assert!(
        record.as_ref().is_some_and(|r| (r.node.as_str(), r.container.as_str()) == ("n2", "dst")),
        "{x} is n2's container's now, and its record says so: {record:?}"
    );
    assert_no_address_twice(&c, &["n2", "n3"]);
    // n2's DEL holds vm-1 with X, and it comes back with it.
    del(&c, "n2", "dst", "vm-1", &sticky).assert_quiet_success();
    let key = identity_key(&c, "vm-1").expect("vm-1 is held");
    assert!(key["until"].as_i64().unwrap_or(0) > 0 && key["addresses"] == json!([x]), "held with {x}: {key}");
    assert_eq!(ok(&add(&c, "n2", "again", "vm-1", &sticky)), [format!("{x}/26")]);
    assert_no_address_twice(&c, &["n2", "n3"]);
}

/// Case 4: identity db-0 is granted X in n1's shared block; `release-node
/// n1` holds it. X's record must be held with it: nobody else gets X once
/// n1's block is claimable again, and db-0 comes back with X on n2.
#[test]
fn release_node_holds_an_identity_s_address_in_a_shared_block() {
    let c = two_shared_blocks("10.67.0.0/26");
    let sticky = json!({});
    let x = ok(&add(&c, "n1", "c1", "db-0", &sticky));
    let said = release_node_saying(&c, "n1", "n2");
    assert!(said.contains("prod/db-0: held until"), "{said}");
    let x = ip(&x[0]);
    std::thread::sleep(Duration::from_secs(5));
    let got = fill(&c, "n3", &sticky);
    assert!(!got.contains(&x), "n3 was granted {x}, held for identity prod/db-0");
    assert_eq!(got.len(), 60, "every usable address but {x}: {got:?}");
    let record = c.addrs().into_iter().find(|a| a.ip == x);
    assert!(
        record.as_ref().is_some_and(|r| r.node.is_empty() && r.kind == "static"),
        "{x} is held for db-0, and its record says so: {record:?}"
    );
    // db-0 re-created on n2: its address, at the first try.
    assert_eq!(ok(&add(&c, "n2", "c2", "db-0", &sticky)), [format!("{x}/26")]);
    assert_no_address_twice(&c, &["n2", "n3"]);
}

/// n1 adds shareLive identity vm-1 in its own block (three addresses),
/// then its DEL finds etcd stopped, and n2 shares vm-1 once etcd is back:
/// the cluster, and vm-1's address.
fn shared_after_a_del_without_etcd(sticky: &Value) -> (Cluster, IpAddr) {
    let mut c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.68.0.0/24", "rangeStart": "10.68.0.10", "rangeEnd": "10.68.0.12"}], "blockSize": 27}]),
        30.0,
    );
    c.share_blocks = Some("never");
    let x = ok(&add(&c, "n1", "src", "vm-1", sticky));
    c.store.pause();
    del(&c, "n1", "src", "vm-1", sticky).assert_quiet_success();
    c.store.resume();
    assert_eq!(ok(&add(&c, "n2", "dst", "vm-1", sticky)), x, "n2 shares vm-1's address");
    (c, ip(&x[0]))
}

/// n1's other workloads once n1's own hold of `x` has ended: each gets
/// another address, until the pool has none.
fn n1_keeps_off(c: &Cluster, x: IpAddr) {
    std::thread::sleep(Duration::from_secs(3));
    let mut got = Vec::new();
    for i in 0..3 {
        let out = add(c, "n1", &format!("o{i}"), &format!("other-{i}"), &json!({"hold": 2}));
        if out.status != 0 {
            assert_error(&out, 100, &[]);
            break;
        }
        got.extend(addresses(&out).iter().map(|a| ip(a)));
    }
    assert!(!got.contains(&x), "n1 handed {x} to another workload while n2's container dst shares it: {got:?}");
    assert_eq!(got.len(), 2, "the pool's two other addresses: {got:?}");
    assert_no_address_twice(c, &["n1", "n2"]);
}

/// Case 3: the identity passes to n2 at n1's next call, which must not
/// hand X to another workload of n1; then it is held at n2's DEL and comes
/// back with X.
#[test]
fn a_share_live_identity_shared_after_a_del_without_etcd_passes_to_its_sharer() {
    let sticky = json!({"shareLive": true, "hold": 2});
    let (c, x) = shared_after_a_del_without_etcd(&sticky);
    n1_keeps_off(&c, x);
    let key = identity_key(&c, "vm-1").expect("vm-1's key");
    assert_eq!(
        (key["node"].as_str(), key["container"].as_str(), &key["addresses"]),
        (Some("n2"), Some("dst"), &json!([x])),
        "vm-1 passed to n2 at n1's next call: {key}"
    );
    del(&c, "n2", "dst", "vm-1", &sticky).assert_quiet_success();
    let key = identity_key(&c, "vm-1").expect("vm-1 is held");
    assert!(key["until"].as_i64().unwrap_or(0) > 0, "held: {key}");
    assert_eq!(ok(&add(&c, "n1", "again", "vm-1", &sticky)), [format!("{x}/24")]);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

/// Case 3 on a node whose note of the DEL is gone (a build before this one
/// dropped it): X's record names n1's gone container, which n1's database
/// does not back, so n1 counts X taken; its GC passes the identity to n2.
#[test]
fn a_record_naming_this_node_that_its_database_does_not_back_keeps_the_address_taken() {
    let sticky = json!({"shareLive": true, "hold": 2});
    let (c, x) = shared_after_a_del_without_etcd(&sticky);
    let db = rusqlite::Connection::open(c.db("n1")).expect("n1's database");
    let dropped = db.execute("DELETE FROM cluster_notes WHERE name LIKE 'sticky-pending:%'", []).expect("notes");
    assert_eq!(dropped, 1, "the DEL without etcd left its note");
    drop(db);
    n1_keeps_off(&c, x);
    assert_eq!(
        identity_key(&c, "vm-1").map(|k| (k["node"].clone(), k["container"].clone())),
        Some((json!("n1"), json!("src"))),
        "without the note, vm-1 stays on n1's gone container until n1's GC"
    );
    let live: Vec<String> = (0..2).map(|i| format!("o{i}")).collect();
    c.run("GC", "gc", &stack::gc_config(&sticky_config(&c, "n1", &sticky), &valid(&live)), &[]).assert_quiet_success();
    let key = identity_key(&c, "vm-1").expect("vm-1's key");
    assert_eq!(
        (key["node"].as_str(), key["container"].as_str(), &key["addresses"]),
        (Some("n2"), Some("dst"), &json!([x])),
        "n1's GC passed vm-1 to n2 with its address: {key}"
    );
    del(&c, "n2", "dst", "vm-1", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(&c, "n2", "again", "vm-1", &sticky)), [format!("{x}/24")]);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

fn valid(containers: &[String]) -> Vec<(String, String)> {
    containers.iter().map(|c| (c.clone(), "eth0".to_string())).collect()
}

/// Case 3 in a shared block: X has an `allocated` record of n1's, which
/// n1's DEL without etcd must not release at a later call while n2 shares
/// the identity: neither n1 nor n3 is granted X, and vm-1 passes to n2.
#[test]
fn a_share_live_identity_in_a_shared_block_keeps_its_record_through_a_del_without_etcd() {
    let c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.69.0.0/24", "rangeStart": "10.69.0.10", "rangeEnd": "10.69.0.14"}], "blockSize": 27}]),
        30.0,
    );
    let sticky = json!({"shareLive": true, "hold": 2});
    let x = ok(&add(&c, "n1", "src", "vm-1", &sticky));
    c.store.pause();
    del(&c, "n1", "src", "vm-1", &sticky).assert_quiet_success();
    c.store.resume();
    assert_eq!(ok(&add(&c, "n2", "dst", "vm-1", &sticky)), x, "n2 shares vm-1's address");
    let x = ip(&x[0]);
    std::thread::sleep(Duration::from_secs(3));
    // n1's next call settles what its DEL left; then n3 takes what is left.
    let mine = ok(&add(&c, "n1", "o0", "other-0", &sticky));
    assert_ne!(ip(&mine[0]), x, "n1 handed {x} to another workload while n2's container dst shares it");
    let got = fill(&c, "n3", &sticky);
    assert!(!got.contains(&x), "n3 was granted {x}, which n2's container dst shares");
    assert_eq!(got.len(), 3, "the pool's other free addresses: {got:?}");
    assert_no_address_twice(&c, &["n1", "n2", "n3"]);
    let key = identity_key(&c, "vm-1").expect("vm-1's key");
    assert_eq!((key["node"].as_str(), key["container"].as_str()), (Some("n2"), Some("dst")), "{key}");
}
