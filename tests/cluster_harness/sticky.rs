//! The cluster's sticky stack as the sticky test files drive it: a node's
//! configuration with `ipam-da-sticky`, and pods of Kubernetes' identity
//! `prod/<name>`, one process per call.

use std::net::IpAddr;

use std::time::Duration;

use serde_json::{json, Value};

use super::{brief, held_by, release_node, Cluster, Store};
pub use crate::support::sticky::pod;
use crate::support::{addresses, assert_error, Outcome, CLUSTER_STICKY_STACK};

/// `node`'s configuration with the sticky stack, `ipam.sticky` being `sticky`.
pub fn sticky_config<S: Store>(c: &Cluster<S>, node: &str, sticky: &Value) -> Value {
    let mut config = c.config(node);
    config["ipam"]["delegates"] = json!(CLUSTER_STICKY_STACK);
    config["ipam"]["sticky"] = sticky.clone();
    config
}

pub fn add<S: Store>(c: &Cluster<S>, node: &str, ctr: &str, name: &str, sticky: &Value) -> Outcome {
    c.run("ADD", ctr, &sticky_config(c, node, sticky), &[("CNI_ARGS", &pod(name))])
}

pub fn del<S: Store>(c: &Cluster<S>, node: &str, ctr: &str, name: &str, sticky: &Value) -> Outcome {
    c.run("DEL", ctr, &sticky_config(c, node, sticky), &[("CNI_ARGS", &pod(name))])
}

/// The addresses of a successful call (it fails the test otherwise).
pub fn ok(out: &Outcome) -> Vec<String> {
    assert_eq!(out.status, 0, "{}", brief(out));
    addresses(out)
}

/// The address of an address with a prefix (`10.0.0.5/24`).
pub fn ip(s: &str) -> IpAddr {
    s.split('/').next().and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("{s:?} is not an address"))
}

/// Every live lease of `nodes`, address → (node, container): each address once.
pub fn assert_no_address_twice<S: Store>(c: &Cluster<S>, nodes: &[&str]) {
    let (_, twice) = held_by(c, nodes);
    assert!(twice.is_empty(), "addresses held twice: {twice:?}");
}

/// The identity of pod `name` on eth0, as the store holds it (etcd's layout).
pub fn identity_of<S: Store>(c: &Cluster<S>, name: &str) -> Value {
    let key = format!("eth0/prod/{name}");
    let all = c.store.identities();
    all.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("no identity {key}: {all:?}"))
}

// ---------------------------------------------------------------------------
// Scenarios run on each store (tests/cluster_sticky.rs on etcd,
// tests/cluster_kube_sticky.rs on the Kubernetes API).

/// db-0 leaves n1 and lands on n2 with its address, in a shared block of
/// pool blue (10.61.0.10-10.61.0.40); n1 never hands it out meanwhile.
pub fn a_pod_re_created_on_another_node_gets_its_address_in_shared_blocks<S: Store>(c: &Cluster<S>) {
    let sticky = json!({});
    let first = ok(&add(c, "n1", "c1", "db-0", &sticky));
    del(c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(c, "n2", "c2", "db-0", &sticky)), first);
    let rec = c.addrs().into_iter().find(|a| a.ip == ip(&first[0])).expect("its record");
    assert_eq!((rec.node.as_str(), rec.container.as_str()), ("n2", "c2"), "{rec:?}");
    for i in 0..3 {
        assert_ne!(ok(&add(c, "n1", &format!("o{i}"), &format!("o-{i}"), &sticky)), first);
    }
    assert_no_address_twice(c, &["n1", "n2"]);
}

/// db-0's address, held for it on n1, has a row of another call of n1 at
/// its take-over: the row of a grant in a shared block (the state of a call
/// whose grant request is in flight), picked from a view of the block read
/// before the hold. The store, which holds the address for db-0, refuses
/// that grant within a request, and the call then drops its row: the
/// take-over waits for that rather than fail. A row that stays (its ADD
/// was killed in flight) is 11 naming its container, until the runtime's
/// DEL of that container; then db-0 gets its address.
pub fn a_take_over_waits_for_a_grant_of_its_address_in_flight<S: Store + Sync>(c: &Cluster<S>) {
    let sticky = json!({});
    let first = ok(&add(c, "n1", "c1", "db-0", &sticky));
    let x = ip(&first[0]);
    let rows = c.node_records("n1");
    let key =
        rows.iter().find(|r| r[1] == x.to_string()).unwrap_or_else(|| panic!("no row of {x}: {rows:?}"))[0].clone();
    let grant_row = |container: &str| {
        let value = json!({"kind": "allocated", "node": "n1", "container": container, "ifname": "eth0"}).to_string();
        let sql = "INSERT INTO cluster_records (key, value, network, pool, address, kind, container_id, ifname, \
                   added_by, state) VALUES (?1, ?2, 'cnet', 'blue', ?3, 'allocated', ?4, 'eth0', NULL, 'writing')";
        assert_eq!(c.execute("n1", sql, (&key, &value, x.to_string(), container)), 1);
    };
    del(c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    // A grant in flight, refused after 300 ms.
    grant_row("g1");
    let started = std::time::Instant::now();
    let refused = std::thread::scope(|s| {
        let refusal = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            c.execute("n1", "DELETE FROM cluster_records WHERE key = ?1 AND container_id = 'g1'", [&key])
        });
        let taken = ok(&add(c, "n1", "c2", "db-0", &sticky));
        assert_eq!(taken, first, "db-0 did not get its address back");
        refusal.join().unwrap()
    });
    assert_eq!(refused, 1, "the take-over wrote over the grant's row");
    assert!(started.elapsed() >= Duration::from_millis(300), "the take-over did not wait for the grant");
    // A grant whose ADD was killed in flight: its row stays.
    del(c, "n1", "c2", "db-0", &sticky).assert_quiet_success();
    grant_row("g2");
    let out = add(c, "n1", "c3", "db-0", &sticky);
    assert_error(&out, 11, &[&format!("{x} of identity \"prod/db-0\" is being granted to container g2")]);
    del(c, "n1", "c3", "db-0", &sticky).assert_quiet_success();
    // The runtime's DEL of the killed ADD.
    del(c, "n1", "g2", "other-0", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(c, "n1", "c4", "db-0", &sticky)), first);
    assert_no_address_twice(c, &["n1"]);
}

/// An ADD of db-0 refused for want of an IPv6 address (pool blue6 of
/// [`dual_stack_pools`], filled by two pods without identity): its rollback
/// leaves db-0 to its next ADD, never live on the refused container (every
/// later ADD of it would be 101 naming that container), and the container
/// holds nothing. Once an IPv6 address is free, db-0's next ADD succeeds.
pub fn a_refused_add_leaves_its_identity_to_the_next<S: Store>(c: &Cluster<S>) {
    let sticky = json!({});
    for filler in ["f0", "f1"] {
        let out = c.add("n1", filler);
        assert_eq!(out.status, 0, "{}", brief(&out));
    }
    assert_error(&add(c, "n1", "c1", "db-0", &sticky), 100, &[]);
    let key = c.store.identities().into_iter().find(|(k, _)| k == "eth0/prod/db-0");
    if let Some((_, record)) = &key {
        assert!(
            record["until"].as_i64().unwrap_or(0) > 0 || record["container"] != "c1",
            "db-0 is left live on the refused container: {record}"
        );
    }
    let leases = c.leases("n1");
    assert!(leases.iter().all(|l| l.container_id != "c1"), "the refused ADD holds addresses: {leases:?}");
    // The runtime's DEL of the refused ADD, then an IPv6 address frees up.
    del(c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    c.del("n1", "f0").assert_quiet_success();
    let got = ok(&add(c, "n1", "c2", "db-0", &sticky));
    assert_eq!(got.len(), 2, "db-0 has an address of each family: {got:?}");
    assert_eq!(identity_of(c, "db-0")["container"], "c2");
    assert_no_address_twice(c, &["n1"]);
}

/// Pools blue (IPv4, room) and blue6 (IPv6, two addresses) of the refused
/// ADD scenario.
pub fn dual_stack_pools() -> Value {
    json!([
        {"name": "blue", "ranges": [{"subnet": "10.76.0.0/24"}], "blockSize": 28},
        {"name": "blue6", "ranges": [{"subnet": "fd00:76::/120", "rangeStart": "fd00:76::10", "rangeEnd": "fd00:76::11"}], "blockSize": 127}
    ])
}

/// Two nodes add one identity at once, four times: one wins, the other is
/// 101 naming the winner.
pub fn two_nodes_adding_one_identity_at_once_give_it_to_one<S: Store + Sync>(c: &Cluster<S>) {
    let sticky = json!({});
    for round in 0..4 {
        let name = format!("racer-{round}");
        let outs: Vec<Outcome> = std::thread::scope(|s| {
            let a = s.spawn(|| add(c, "n1", &format!("a{round}"), &name, &sticky));
            let b = s.spawn(|| add(c, "n2", &format!("b{round}"), &name, &sticky));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let won: Vec<&Outcome> = outs.iter().filter(|o| o.status == 0).collect();
        assert_eq!(won.len(), 1, "round {round}: {:?}", outs.iter().map(brief).collect::<Vec<_>>());
        let lost = outs.iter().find(|o| o.status != 0).unwrap();
        let winner = if outs[0].status == 0 { "n1" } else { "n2" };
        assert_error(lost, 101, &[&format!("node {winner}"), "shareLive"]);
    }
    assert_no_address_twice(c, &["n1", "n2"]);
}

/// shareLive: a VM live on n1 and n2 has its address on both; its source
/// goes and the identity lives on at the target; then held, back on n1.
pub fn share_live_lets_a_migrating_vm_have_its_address_on_both_nodes<S: Store>(c: &Cluster<S>) {
    let sticky = json!({"shareLive": true});
    let source = ok(&add(c, "n1", "src", "vm-1", &sticky));
    assert_eq!(ok(&add(c, "n2", "dst", "vm-1", &sticky)), source);
    del(c, "n1", "src", "vm-1", &sticky).assert_quiet_success();
    let key = identity_of(c, "vm-1");
    assert_eq!(
        (key["node"].as_str(), key["container"].as_str(), key["until"].as_i64()),
        (Some("n2"), Some("dst"), None),
        "{key}"
    );
    for i in 0..4 {
        assert_ne!(ok(&add(c, "n1", &format!("o{i}"), &format!("o-{i}"), &sticky)), source);
    }
    del(c, "n2", "dst", "vm-1", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(c, "n1", "again", "vm-1", &sticky)), source);
}

/// Pool blue of 10.63.0.0/26 in blocks of 32, each node's own, a grace of
/// 1 s: n1 dies with db-0 live and vm-1 shared with n2; release-node holds
/// db-0 and passes vm-1 to n2; n3 then fills both blocks but for their
/// addresses, and db-0 comes back on n2 with its own.
pub fn release_node_holds_a_dead_node_s_identities_so_they_come_back_elsewhere<S: Store>(c: &mut Cluster<S>) {
    c.share_blocks = Some("never");
    c.call_timeout = 1;
    let sticky = json!({});
    let first = ok(&add(c, "n1", "c1", "db-0", &sticky));
    let shared = ok(&add(c, "n1", "c2", "vm-1", &json!({"shareLive": true})));
    assert_eq!(ok(&add(c, "n2", "c3", "vm-1", &json!({"shareLive": true}))), shared);
    // n1 dies: no DEL ever comes. Its identity db-0 is live there (101 elsewhere).
    assert_error(&add(c, "n2", "c4", "db-0", &sticky), 101, &["node n1"]);
    release_node(c, "n1", "n2");
    let db = identity_of(c, "db-0");
    assert!(db["until"].as_i64().unwrap_or(0) > 0, "held: {db}");
    let vm = identity_of(c, "vm-1");
    assert_eq!((vm["node"].as_str(), vm["container"].as_str()), (Some("n2"), Some("c3")), "passed to n2: {vm}");
    // After the tombstone's wait, another node claims n1's block and keeps off both addresses.
    std::thread::sleep(Duration::from_secs(5));
    let mut placed = 0;
    for i in 0..70 {
        let got = add(c, "n3", &format!("o{i}"), &format!("o-{i}"), &sticky);
        if got.status != 0 {
            assert_error(&got, 100, &[]);
            break;
        }
        let got = addresses(&got);
        assert!(got != first && got != shared, "n3 handed out {got:?}");
        placed += 1;
    }
    // 61 usable addresses (.1 the gateway, .63 broadcast), 2 of them the identities'.
    assert_eq!(placed, 59, "n3 filled both blocks but for the identities' addresses: {:?}", c.blocks());
    assert_eq!(ok(&add(c, "n2", "c4", "db-0", &sticky)), first);
    assert_no_address_twice(c, &["n2", "n3"]);
}

/// Pool blue of the shared-block scenario.
pub fn shared_blocks_pools() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.61.0.0/24", "rangeStart": "10.61.0.10", "rangeEnd": "10.61.0.40"}], "blockSize": 27}])
}

/// Pool blue of the release-node scenario (two blocks of 32).
pub fn release_node_pools() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.63.0.0/26"}], "blockSize": 27}])
}
