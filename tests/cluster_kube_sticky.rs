//! Sticky addresses across nodes on the Kubernetes API (an `IPDIdentity`
//! per identity, ipam-ds-cluster/src/datastore/kubernetes/identities.rs),
//! on a real API server with RBAC enforced, every node calling with the
//! installer DaemonSet's ServiceAccount token: a workload identity gets its
//! address on whatever node it lands, in blocks of a node's own and in
//! shared ones; two nodes adding one identity at once give it to one;
//! `shareLive`; a hold ends by the API server's clock, whatever a node's
//! says; release-node holds a dead node's identities; and kill -9 at every
//! step while identities move (the storm of tests/cluster_sticky_kill.rs).

mod cluster_harness;
mod stack;
mod support;

use std::time::Duration;

use cluster_harness::kube::{block_name, KubeStore};
use cluster_harness::sticky::*;
use cluster_harness::sticky_storm::{identity_keys, storm, Key};
use cluster_harness::*;
use serde_json::{json, Value};
use support::{assert_error, Outcome};

/// Debian's libfaketime (package faketime): moves a call's wall clock.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn kube(pools: Value) -> Cluster<KubeStore> {
    Cluster::on_kubernetes(pools, 30.0)
}

fn blue() -> Cluster<KubeStore> {
    kube(blue_pools())
}

fn key(c: &Cluster<KubeStore>, name: &str) -> Key {
    identity_keys(c).remove(name).unwrap_or_else(|| panic!("no IPDIdentity of {name}: {:?}", identity_keys(c)))
}

/// `command` of pod `name` in `ctr` on `node` with the node's wall clock
/// moved by `offset` (libfaketime's `+1d`), its boot-time clock not.
fn at_clock(
    c: &Cluster<KubeStore>,
    command: &str,
    node: &str,
    ctr: &str,
    name: &str,
    sticky: &Value,
    offset: &str,
) -> Outcome {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (the test moves a call's wall clock)"
    );
    let args = pod(name);
    let env = [
        ("CNI_ARGS", args.as_str()),
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", offset),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    c.run(command, ctr, &sticky_config(c, node, sticky), &env)
}

#[test]
fn a_pod_re_created_on_another_node_gets_its_address_in_blocks_of_their_own() {
    let mut c = blue();
    c.share_blocks = Some("never");
    let sticky = json!({"hold": 600});
    let first = ok(&add(&c, "n1", "c1", "db-0", &sticky));
    ok(&add(&c, "n2", "w1", "web-0", &sticky));
    let live = key(&c, "db-0");
    assert_eq!((live.node.as_str(), live.container.as_str(), live.until), ("n1", "c1", 0), "{live:?}");
    del(&c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    let held = key(&c, "db-0");
    assert!(held.until > 0 && held.addresses == [ip(&first[0])], "db-0 is held with its address: {held:?}");
    // Its address has a record of kind identity in n1's block, naming the
    // IPDIdentity's uid, with the hold's end.
    let block = c.blocks_of("n1").into_iter().find(|b| b.contains(ip(&first[0]))).expect("it lies in n1's block");
    let object = c.store.object("ipdblocks", &block_name(block)).expect("n1's block");
    let record = &object["spec"]["records"][ip(&first[0]).to_string()];
    assert!(
        record["kind"] == "identity" && record["identity"] == "prod/db-0" && record["heldUntil"].is_string(),
        "{record}"
    );
    for i in 0..5 {
        let got = ok(&add(&c, "n1", &format!("o{i}"), &format!("other-{i}"), &sticky));
        assert_ne!(got, first, "n1 handed out db-0's held address");
    }
    // db-0 lands on n2: the same address, in n1's block.
    assert_eq!(ok(&add(&c, "n2", "c2", "db-0", &sticky)), first);
    let moved = key(&c, "db-0");
    assert_eq!((moved.node.as_str(), moved.container.as_str(), moved.until), ("n2", "c2", 0), "{moved:?}");
    assert_no_address_twice(&c, &["n1", "n2"]);
    for i in 5..9 {
        assert_ne!(ok(&add(&c, "n1", &format!("o{i}"), &format!("other-{i}"), &sticky)), first);
    }
    // And back to n1 after a DEL on n2.
    del(&c, "n2", "c2", "db-0", &sticky).assert_quiet_success();
    assert_eq!(ok(&add(&c, "n1", "c3", "db-0", &sticky)), first);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

#[test]
fn a_pod_re_created_on_another_node_gets_its_address_in_shared_blocks() {
    cluster_harness::sticky::a_pod_re_created_on_another_node_gets_its_address_in_shared_blocks(&kube(
        shared_blocks_pools(),
    ));
}

#[test]
fn a_take_over_waits_for_a_grant_of_its_address_in_flight() {
    cluster_harness::sticky::a_take_over_waits_for_a_grant_of_its_address_in_flight(&kube(shared_blocks_pools()));
}

#[test]
fn a_refused_add_leaves_its_identity_to_the_next() {
    cluster_harness::sticky::a_refused_add_leaves_its_identity_to_the_next(&kube(dual_stack_pools()));
}

#[test]
fn two_nodes_adding_one_identity_at_once_give_it_to_one() {
    cluster_harness::sticky::two_nodes_adding_one_identity_at_once_give_it_to_one(&blue());
}

#[test]
fn share_live_lets_a_migrating_vm_have_its_address_on_both_nodes() {
    cluster_harness::sticky::share_live_lets_a_migrating_vm_have_its_address_on_both_nodes(&blue());
}

#[test]
fn a_hold_ends_by_the_api_server_s_clock_not_a_node_s() {
    let mut c = kube(
        json!([{"name": "blue", "ranges": [{"subnet": "10.62.0.0/24", "rangeStart": "10.62.0.10", "rangeEnd": "10.62.0.11"}], "blockSize": 27}]),
    );
    c.share_blocks = Some("never");
    let sticky = json!({"hold": 4});
    let a = ok(&add(&c, "n1", "c1", "db-0", &sticky));
    let b = ok(&add(&c, "n1", "c2", "db-1", &sticky));
    del(&c, "n1", "c1", "db-0", &sticky).assert_quiet_success();
    // n1 a day ahead: the hold has not ended for the API server.
    assert_error(&at_clock(&c, "ADD", "n1", "w1", "web-0", &sticky, "+1d"), 100, &[]);
    // n2 a day ahead takes db-0 over with its address, in n1's block.
    assert_eq!(ok(&at_clock(&c, "ADD", "n2", "c3", "db-0", &sticky, "+1d")), a);
    del(&c, "n2", "c3", "db-0", &sticky).assert_quiet_success();
    del(&c, "n1", "c2", "db-1", &sticky).assert_quiet_success();
    let held = key(&c, "db-1");
    assert!(held.until > 0, "{held:?}");
    // Both held: nothing for web-0 on n1, a day ahead.
    assert_error(&at_clock(&c, "ADD", "n1", "w1", "web-0", &sticky, "+1d"), 100, &[]);
    std::thread::sleep(Duration::from_secs(6));
    // Ended by the server's clock: n1 hands both out again, and no record
    // of either hold is left in its block. (A node whose clock went back
    // keeps its own holds of the addresses longer: the safe side.)
    let mut got: Vec<String> =
        (0..2).flat_map(|i| ok(&add(&c, "n1", &format!("w{i}"), &format!("web-{i}"), &sticky))).collect();
    got.sort();
    let mut both = [a[0].clone(), b[0].clone()];
    both.sort();
    assert_eq!(got, both, "the two addresses whose holds ended");
    assert!(c.addrs().is_empty(), "records left: {:?}", c.addrs());
    let objects = c.store.pool_blocks();
    assert!(
        objects.iter().all(|o| o["spec"]["records"].as_object().is_none_or(|r| r.is_empty())),
        "a hold's record is left in {objects:?}"
    );
    // db-0 and db-1 come back with other addresses (none left: 100).
    assert_error(&add(&c, "n2", "c4", "db-0", &sticky), 100, &[]);
    assert_no_address_twice(&c, &["n1", "n2"]);
}

#[test]
fn release_node_holds_a_dead_node_s_identities_so_they_come_back_elsewhere() {
    cluster_harness::sticky::release_node_holds_a_dead_node_s_identities_so_they_come_back_elsewhere(
        &mut Cluster::on_kubernetes(release_node_pools(), 1.0),
    );
}

#[test]
fn kill_storm_over_blocks_of_a_nodes_own() {
    let mut c = kube(json!([{"name": "blue", "ranges": [{"subnet": "10.55.0.0/24"}], "blockSize": 27}]));
    c.share_blocks = Some("never");
    storm("kill_storm_over_blocks_of_a_nodes_own on Kubernetes", c, &format!("kso-{}-", std::process::id()));
}

#[test]
fn kill_storm_over_shared_blocks() {
    let c = kube(json!([{"name": "blue", "ranges": [{"subnet": "10.56.0.0/24"}], "blockSize": 27}]));
    storm("kill_storm_over_shared_blocks on Kubernetes", c, &format!("kss-{}-", std::process::id()));
}

/// A KubeVirt VM's pod, `virt-launcher-<vm>-<suffix>` with the label
/// `vm.kubevirt.io/name`, in namespace prod on `node`.
fn vm_pod(c: &Cluster<KubeStore>, pod: &str, vm: &str) {
    c.store.api.apply_yaml(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: prod\n  labels:\n    kubevirt.io: \
         virt-launcher\n    vm.kubevirt.io/name: {vm}\nspec:\n  containers:\n    - name: compute\n      image: \
         example.invalid/virt-launcher\n"
    ));
}

/// `"identity": "auto"`: a VM keeps its address when KubeVirt re-creates
/// its pod under a new `virt-launcher-` name on another node (a restart, a
/// migration), with no `cni-args`; any other pod is its namespace/name.
/// The plugins read the pod's label with the DaemonSet's ServiceAccount.
#[test]
fn a_vm_keeps_its_address_when_its_pod_is_re_created_under_a_new_name() {
    let mut c = blue();
    c.share_blocks = Some("never");
    let sticky = json!({"identity": "auto", "hold": 600});
    // No controller manager makes the namespace's default ServiceAccount.
    c.store.api.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod\n---\napiVersion: v1\nkind: ServiceAccount\n\
         metadata:\n  name: default\n  namespace: prod\n",
    );
    // A VM name as long as KubeVirt's pod names cut it (the generateName
    // "virt-launcher-<vm>-" kept to 58 characters, then 5 random ones): only
    // the pod's label tells the VM, not its name.
    const VM: &str = "analytics-warehouse-replica-primary-zone-a-0001";
    let launcher = |suffix: &str| format!("virt-launcher-{}{suffix}", &VM[..44]);
    let (pod1, pod2) = (launcher("x7k2p"), launcher("q9w4z"));
    vm_pod(&c, &pod1, VM);
    let first = ok(&add(&c, "n1", "c1", &pod1, &sticky));
    let live = key(&c, VM);
    assert_eq!((live.node.as_str(), live.container.as_str()), ("n1", "c1"), "keyed by the VM: {live:?}");
    del(&c, "n1", "c1", &pod1, &sticky).assert_quiet_success();
    assert!(key(&c, VM).until > 0, "the VM's address is held once its pod is gone");
    let path = format!("/api/v1/namespaces/prod/pods/{pod1}");
    let (status, body) = c.store.api.request(&c.store.api.admin_kubeconfig(), "DELETE", &path, None);
    assert_eq!(status, 200, "DELETE {path}: {body}");
    vm_pod(&c, &pod2, VM);
    // Another pod on n2 meanwhile does not get it.
    let other = ok(&add(&c, "n2", "c2", "web-0", &sticky));
    assert_ne!(other, first);
    assert!(identity_keys(&c).contains_key("web-0"), "a pod not a VM's is its namespace/name");
    let again = ok(&add(&c, "n2", "c3", &pod2, &sticky));
    assert_eq!(again, first, "the VM's new pod on n2 gets its address");
    assert_no_address_twice(&c, &["n1", "n2"]);

    // Without a kubeconfig to read pods with, "auto" is error 7 naming it.
    let mut config = sticky_config(&c, "n1", &sticky);
    config["ipam"]["cluster"] = json!(null);
    config["ipam"]["delegates"] = json!(["ipam-ds-pool", "ipam-da-sticky", "ipam-da-sequential"]);
    let out = c.run("ADD", "c4", &config, &[("CNI_ARGS", &pod("web-1"))]);
    assert_error(&out, 7, &["ipam.sticky.kubeconfig"]);
    // A DEL asks the API server nothing and never fails on it.
    c.run("DEL", "c4", &config, &[("CNI_ARGS", &pod(&launcher("x7k2p")))]).assert_quiet_success();
}
