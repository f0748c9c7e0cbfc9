//! The cluster's reaper (`ipam-delegated cluster --conf CONFLIST reap`) on
//! a real API server (tests/cluster_harness/kube.rs), every call a real
//! process with the ServiceAccount kubeconfig of deploy/kubernetes/ (so
//! its RBAC is proved enough): the Lease that lets one reaper at a time
//! act, the release of a node deleted from the cluster after its own
//! grace, and the collection of identities whose hold ended. Node objects
//! are created and deleted by the test as the cluster's admin.

mod cluster_harness;
mod stack;
mod support;

use std::time::{Duration, Instant};

use cluster_harness::kube::{block_name, node_object_name, KubeStore};
use cluster_harness::sticky::{add, del, ok};
use cluster_harness::*;
use serde_json::{json, Value};
use support::Outcome;

/// Two blocks of 16: 10.71.0.0/28 and 10.71.0.16/28.
fn two_blocks() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.71.0.0/27"}], "blockSize": 28}])
}

/// n2's wait: its offlineGrace 1 s + 3 × its ipam.timeout 2 s.
const WAIT: Duration = Duration::from_secs(7);
/// The API server's `Date`, which times the wait, counts whole seconds.
const DATE_STEP: Duration = Duration::from_secs(1);

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ipam-delegated/leases/ipam-delegated-reaper.cnet";

/// `node`'s configuration with `ipam.cluster.shareBlocks` set to `share`.
fn sharing(c: &Cluster<KubeStore>, node: &str, share: &str) -> Value {
    let mut config = c.config(node);
    config["ipam"]["cluster"]["shareBlocks"] = json!(share);
    config
}

/// `cluster reap ARGS` as `node` (its configuration's node name), with a
/// conflist of the node's own, so that reapers of several nodes may run at
/// once (`cluster_tool` writes one file).
fn reap_with(c: &Cluster<KubeStore>, node: &str, args: &[&str]) -> Outcome {
    let mut plugin = c.config(node);
    if let Some(plugin) = plugin.as_object_mut() {
        plugin.remove("cniVersion");
        plugin.remove("name");
    }
    let list = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [plugin]});
    let conflist = c.dir.path().join(format!("reap-{node}.conflist"));
    std::fs::write(&conflist, serde_json::to_vec_pretty(&list).expect("JSON")).expect("writing the conflist");
    let mut all = vec!["cluster", "--conf", conflist.to_str().expect("a UTF-8 path"), "reap"];
    all.extend_from_slice(args);
    support::run_args(&support::suite_bin("ipam-delegated"), &all, &[], b"", None)
}

/// `cluster reap --json` as `node`.
fn reap(c: &Cluster<KubeStore>, node: &str) -> Value {
    json_of(&reap_with(c, node, &["--json"]), &format!("reap as {node}"))
}

fn json_of(out: &Outcome, what: &str) -> Value {
    assert_eq!(out.status, 0, "{what}: {}", brief(out));
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", out.stdout))
}

/// Creates Node objects `names` as the admin.
fn create_nodes(c: &Cluster<KubeStore>, names: &[&str]) {
    let yaml: Vec<String> =
        names.iter().map(|n| format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n")).collect();
    c.store.api.apply_yaml(&yaml.join("---\n"));
}

/// `node`'s kubelet Lease in kube-node-lease, renewed now (by this
/// machine's clock, the API server's too), as a running kubelet keeps it.
fn kubelet_lease(c: &Cluster<KubeStore>, node: &str) {
    let now = std::process::Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"]).output().expect("date");
    let now = String::from_utf8_lossy(&now.stdout).trim().to_string();
    c.store.api.apply_yaml(&format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {node}\n  namespace: kube-node-lease\n\
         spec:\n  holderIdentity: {node}\n  leaseDurationSeconds: 40\n  renewTime: \"{now}\"\n"
    ));
}

fn delete_node(c: &Cluster<KubeStore>, name: &str) {
    let admin = c.store.api.admin_kubeconfig();
    let (status, body) = c.store.api.request(&admin, "DELETE", &format!("/api/v1/nodes/{name}"), None);
    assert_eq!(status, 200, "deleting Node {name}: {body}");
}

fn lease(c: &Cluster<KubeStore>) -> Value {
    let (status, body) = c.store.api.request(&c.store.api.admin_kubeconfig(), "GET", LEASE_PATH, None);
    assert_eq!(status, 200, "the reaper's Lease: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("the Lease ({e}): {body}"))
}

fn block_state(c: &Cluster<KubeStore>, block: Net4) -> (Value, Value) {
    let object = c.store.object("ipdblocks", &block_name(block)).unwrap_or_else(|| panic!("no IPDBlock of {block}"));
    (object["spec"]["state"].clone(), object["spec"]["owner"]["node"].clone())
}

#[test]
fn a_deleted_node_is_released_after_its_grace_by_the_one_reaper_holding_the_lease() {
    let _took = Took::new("a_deleted_node_is_released_after_its_grace_by_the_one_reaper_holding_the_lease");
    let mut c = Cluster::on_kubernetes(two_blocks(), 1.0);
    c.call_timeout = 2;
    let n1 = sharing(&c, "n1", "never");
    let n2 = sharing(&c, "n2", "never");
    let add = |config: &Value, container: &str| c.run("ADD", container, config, &[]);
    let n2_pods: Vec<_> = (0..2).map(|i| added(&add(&n2, &format!("b{i}")), "n2's ADD")).collect();
    fill_until_100(&c, &n1, Vec::new(), 14);
    let ([a], [b]) = (&c.blocks_of("n1")[..], &c.blocks_of("n2")[..]) else { panic!("a block each: {:?}", c.blocks()) };
    let (a, b) = (*a, *b);
    assert!(n2_pods.iter().all(|ip| b.contains(*ip)), "{n2_pods:?} in {b}");
    create_nodes(&c, &["n1", "n2"]);

    // Two reapers at once, the first of the network: one takes the Lease
    // and acts, the other does nothing. Both nodes exist: nothing released.
    let (first, second) = std::thread::scope(|s| {
        let one = s.spawn(|| reap(&c, "n1"));
        let three = s.spawn(|| reap(&c, "n3"));
        (one.join().expect("n1's reap"), three.join().expect("n3's reap"))
    });
    let held: Vec<&Value> = [&first, &second].into_iter().filter(|r| r["lease"]["held"] == true).collect();
    assert_eq!(held.len(), 1, "one reaper holds the Lease: {first:#}\n{second:#}");
    let (winner, loser) = if first["lease"]["held"] == true { ("n1", "n3") } else { ("n3", "n1") };
    let lost = if winner == "n1" { &second } else { &first };
    assert_eq!(lost["lease"]["holder"], winner, "the other names the holder: {lost:#}");
    for r in [&first, &second] {
        assert_eq!(r["released_nodes"], json!([]), "both nodes exist: {r:#}");
    }
    let leased = lease(&c);
    assert_eq!(
        (&leased["spec"]["holderIdentity"], &leased["spec"]["leaseDurationSeconds"]),
        (&json!(winner), &json!(60))
    );
    assert_eq!(
        (block_state(&c, a), block_state(&c, b)),
        ((json!("Owned"), json!("n1")), (json!("Owned"), json!("n2")))
    );

    // n2 is deleted from the cluster. The reaper not holding the Lease does nothing.
    delete_node(&c, "n2");
    let idle = reap(&c, loser);
    assert_eq!((&idle["lease"]["held"], &idle["released_nodes"]), (&json!(false), &json!([])), "{idle:#}");
    assert_eq!(block_state(&c, b), (json!("Owned"), json!("n2")), "released by the reaper without the Lease");
    let text = reap_with(&c, loser, &[]);
    assert_eq!(text.status, 0, "{}", brief(&text));
    assert!(
        text.stdout.starts_with(&format!("the reaper's Lease ipam-delegated-reaper.cnet is held by {winner} until ")),
        "{}",
        text.stdout
    );

    // The holder notes n2 missing, and releases it (not n1, whose Node
    // exists) once it has been missing for n2's own grace; its block then
    // stays unclaimable for that grace again, and n1 claims it.
    let noted = reap(&c, winner);
    assert_eq!((&noted["lease"]["held"], &noted["released_nodes"]), (&json!(true), &json!([])), "{noted:#}");
    assert_eq!(noted["waiting_nodes"][0]["node"], "n2", "{noted:#}");
    assert_eq!(noted["waiting_nodes"].as_array().map(Vec::len), Some(1), "{noted:#}");
    let since = lease(&c)["metadata"]["annotations"]["ipam-delegated.io/missing-nodes"].clone();
    assert!(since.as_str().is_some_and(|s| s.contains("\"n2\"")), "n2 noted missing in the Lease: {since}");
    // n2's Node back (re-registered): forgotten; deleted again: noted anew.
    create_nodes(&c, &["n2"]);
    let back = reap(&c, winner);
    assert_eq!((&back["released_nodes"], &back["waiting_nodes"]), (&json!([]), &json!([])), "{back:#}");
    assert_eq!(lease(&c)["metadata"]["annotations"]["ipam-delegated.io/missing-nodes"], "{}");
    delete_node(&c, "n2");
    let first_seen = Instant::now();
    let noted = reap(&c, winner);
    assert_eq!(noted["waiting_nodes"][0]["node"], "n2", "{noted:#}");
    let pass = loop {
        let pass = reap(&c, winner);
        if pass["released_nodes"] != json!([]) {
            break pass;
        }
        assert_eq!(block_state(&c, b), (json!("Owned"), json!("n2")), "released while waiting: {pass:#}");
        assert!(first_seen.elapsed() < WAIT + Duration::from_secs(10), "n2 not released after its grace: {pass:#}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let missing_for = first_seen.elapsed();
    assert!(missing_for >= WAIT - DATE_STEP, "n2 was released {missing_for:.2?} after it went, before its grace");
    let released_at = Instant::now();
    assert_eq!(pass["lease"]["held"], true, "{pass:#}");
    let released = pass["released_nodes"].as_array().unwrap_or_else(|| panic!("{pass:#}"));
    assert_eq!(released.len(), 1, "{pass:#}");
    assert_eq!((&released[0]["node"], &released[0]["gone"]), (&json!("n2"), &json!(false)), "{pass:#}");
    assert_eq!(released[0]["claimable_in_seconds"], json!(WAIT.as_secs()), "n2's own wait: {pass:#}");
    assert_eq!(block_state(&c, b), (json!("Released"), json!("n2")));
    assert_eq!(block_state(&c, a), (json!("Owned"), json!("n1")), "n1, whose Node exists, is kept");
    assert!(c.store.object("ipdnodes", &node_object_name("n2")).is_none(), "n2's IPDNode outlived its release");
    assert!(c.store.object("ipdnodes", &node_object_name("n1")).is_some(), "n1's IPDNode went");
    let early = add(&n1, "a-wait");
    assert!(released_at.elapsed() < WAIT - DATE_STEP, "too slow to see the wait: {:?}", released_at.elapsed());
    assert_eq!(failure(&early).0, 100, "n2's block is not claimable before its grace: {}", brief(&early));
    // A pass meanwhile releases nothing more: n2 holds nothing now, and is
    // no longer noted missing.
    let again = reap(&c, winner);
    assert_eq!((&again["released_nodes"], &again["waiting_nodes"]), (&json!([]), &json!([])), "{again:#}");
    assert_eq!(lease(&c)["metadata"]["annotations"]["ipam-delegated.io/missing-nodes"], "{}");
    let (claimed, waited) = claimed_after_wait(&c, &n1, released_at, WAIT);
    assert!(waited >= WAIT - DATE_STEP, "n2's block was claimed after {waited:.2?}, before its grace");
    assert!(b.contains(claimed), "{claimed} is not in n2's former block {b}");
    assert_eq!(c.blocks_of("n1"), vec![a, b], "{:?}", c.blocks());

    // An expired Lease (renewed an hour ago by the API server's clock) is
    // taken over by the other reaper.
    let mut expired = lease(&c);
    expired["spec"]["renewTime"] = json!("2000-01-01T00:00:00.000000Z");
    let admin = c.store.api.admin_kubeconfig();
    let (status, body) = c.store.api.request(&admin, "PUT", LEASE_PATH, Some(&expired));
    assert_eq!(status, 200, "the Lease made expired: {body}");
    let taken = reap(&c, loser);
    assert_eq!(
        (&taken["lease"]["held"], &taken["lease"]["taken_from"]),
        (&json!(true), &json!(winner)),
        "an expired Lease is taken over: {taken:#}"
    );
    let leased = lease(&c);
    assert_eq!((&leased["spec"]["holderIdentity"], &leased["spec"]["leaseTransitions"]), (&json!(loser), &json!(1)));
    let refused = reap(&c, winner);
    assert_eq!((&refused["lease"]["held"], &refused["lease"]["holder"]), (&json!(false), &json!(loser)), "{refused:#}");
}

#[test]
fn ended_identities_are_collected_and_held_and_live_ones_kept() {
    let _took = Took::new("ended_identities_are_collected_and_held_and_live_ones_kept");
    let c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.72.0.0/26"}], "blockSize": 32}]),
        30.0,
    );
    create_nodes(&c, &["n1", "n2"]);
    let (short, long) = (json!({"hold": 1}), json!({"hold": 600}));
    ok(&add(&c, "n1", "c0", "db-0", &short));
    del(&c, "n1", "c0", "db-0", &short).assert_quiet_success();
    let kept = ok(&add(&c, "n1", "c1", "db-1", &long));
    del(&c, "n1", "c1", "db-1", &long).assert_quiet_success();
    ok(&add(&c, "n1", "c2", "db-2", &long));
    let identities = |c: &Cluster<KubeStore>| -> Vec<String> {
        let mut all: Vec<String> = c
            .store
            .objects("ipdidentities")
            .iter()
            .map(|o| o["spec"]["identity"].as_str().unwrap_or_default().to_string())
            .collect();
        all.sort();
        all
    };
    assert_eq!(identities(&c), ["prod/db-0", "prod/db-1", "prod/db-2"]);
    // db-0's hold of 1 s ends by the API server's clock.
    std::thread::sleep(Duration::from_secs(3));
    let pass = reap(&c, "n2");
    assert_eq!(pass["lease"]["held"], true, "{pass:#}");
    assert_eq!(pass["released_nodes"], json!([]), "n1 exists: {pass:#}");
    let ended = pass["ended_identities"].as_array().unwrap_or_else(|| panic!("{pass:#}"));
    assert_eq!(ended.len(), 1, "{pass:#}");
    assert_eq!(
        (&ended[0]["identity"], &ended[0]["ifname"], &ended[0]["deleted"]),
        (&json!("prod/db-0"), &json!("eth0"), &json!(true)),
        "{pass:#}"
    );
    assert_eq!(identities(&c), ["prod/db-1", "prod/db-2"], "the held and the live identity are kept");
    // The kept hold still works: db-1 comes back on n2 with its address.
    assert_eq!(ok(&add(&c, "n2", "c3", "db-1", &long)), kept);
    let again = reap(&c, "n2");
    assert_eq!(again["ended_identities"], json!([]), "{again:#}");
}

/// The node agent (`ipam-delegated agent`, docs/agent.md) does the reaper's
/// pass for each network in cluster mode on the Kubernetes API that an ADD
/// on its node was given (the configuration the ADD recorded): n2, whose
/// Node is gone, is released after its grace with no `cluster reap` run by
/// hand. The agent lists pods with the manifests' ServiceAccount too.
#[test]
fn the_node_agent_releases_a_deleted_node_through_its_cluster_duties() {
    let _took = Took::new("the_node_agent_releases_a_deleted_node_through_its_cluster_duties");
    let mut c = Cluster::on_kubernetes(two_blocks(), 1.0);
    c.call_timeout = 2;
    let pod = |name: &str| format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME={name};K8S_POD_UID=u-{name}");
    // n1's ADD names its pod: the network's configuration is recorded for the agent.
    added(&c.run("ADD", "a0", &sharing(&c, "n1", "never"), &[("CNI_ARGS", &pod("a0"))]), "n1's ADD");
    added(&c.run("ADD", "b0", &sharing(&c, "n2", "never"), &[]), "n2's ADD");
    let [b] = c.blocks_of("n2")[..] else { panic!("a block of n2: {:?}", c.blocks()) };
    create_nodes(&c, &["n1"]);

    let log = c.dir.path().join("agent.log");
    let mut agent = std::process::Command::new(support::suite_bin("ipam-delegated"))
        .args(["agent", "--node", "n1", "--interval", "1", "--grace", "600"])
        .arg("--kubeconfig")
        .arg(c.store.plugins_kubeconfig())
        .arg("--database")
        .arg(c.db("n1"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("agent.log"))
        .spawn()
        .expect("starting the agent");
    let started = Instant::now();
    let released = loop {
        if block_state(&c, b) != (json!("Owned"), json!("n2")) {
            break block_state(&c, b);
        }
        if started.elapsed() > WAIT + Duration::from_secs(60) {
            let _ = agent.kill();
            panic!("the agent did not release n2: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let waited = started.elapsed();
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(waited >= WAIT - DATE_STEP, "n2 released {waited:?} after the agent started, before its grace");
    assert_eq!(released.0, json!("Released"), "n2's block released by the agent: {released:?}");
    assert_eq!(lease(&c)["spec"]["holderIdentity"], "n1", "the agent held the reaper's Lease");
}

/// A node with no Node object whose kubelet still renews its Lease in
/// kube-node-lease runs (its Node deleted by hand, or lost to an etcd
/// restored from an older backup): its pods use their addresses, and it is
/// neither noted missing nor released, however long the passes go on. Once
/// its kubelet stops (the Lease gone), it is released after its grace.
#[test]
fn a_node_whose_kubelet_still_beats_is_not_released_without_its_node_object() {
    let _took = Took::new("a_node_whose_kubelet_still_beats_is_not_released_without_its_node_object");
    let mut c = Cluster::on_kubernetes(two_blocks(), 1.0);
    c.call_timeout = 2;
    added(&c.run("ADD", "b0", &sharing(&c, "n2", "never"), &[]), "n2's ADD");
    let [b] = c.blocks_of("n2")[..] else { panic!("a block of n2: {:?}", c.blocks()) };
    create_nodes(&c, &["n1"]);
    kubelet_lease(&c, "n2");
    let until = Instant::now() + WAIT + Duration::from_secs(2);
    while Instant::now() < until {
        let pass = reap(&c, "n1");
        assert_eq!((&pass["released_nodes"], &pass["waiting_nodes"]), (&json!([]), &json!([])), "{pass:#}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(block_state(&c, b), (json!("Owned"), json!("n2")), "n2's kubelet beats: its block stays");

    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2";
    let (status, body) = c.store.api.request(&c.store.api.admin_kubeconfig(), "DELETE", path, None);
    assert_eq!(status, 200, "DELETE {path}: {body}");
    let stopped = Instant::now();
    loop {
        let pass = reap(&c, "n1");
        if pass["released_nodes"] != json!([]) {
            assert_eq!(pass["released_nodes"][0]["node"], "n2", "{pass:#}");
            break;
        }
        assert!(stopped.elapsed() < WAIT + Duration::from_secs(10), "n2 not released after its grace: {pass:#}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(stopped.elapsed() >= WAIT - DATE_STEP, "n2 released {:?} after its kubelet stopped", stopped.elapsed());
    assert_eq!(block_state(&c, b).0, json!("Released"));
}
