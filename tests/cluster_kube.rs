//! Cluster mode on the Kubernetes API (`"cluster": {"kubernetes": {...}}`,
//! ipam-ds-cluster/docs/kubernetes.md): the etcd store's scenarios on a real
//! API server (tests/cluster_harness/kube.rs: kube-apiserver over a real
//! etcd, RBAC enforced, the CRDs and RBAC of deploy/kubernetes/ applied),
//! every node calling with a token of the ServiceAccount the installer
//! DaemonSet runs as. Simulated nodes, each with a database of its own;
//! every call a real `ipam-delegated` process.
//!
//! Here: two nodes' ADD, DEL and STATUS, and the objects they leave;
//! addresses asked for by name; the API server stopped and started again,
//! and restarted between ADDs; a second host under one node name;
//! credentials the server refuses.

mod cluster_harness;
mod stack;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use cluster_harness::kube::{block_name, node_object_name, KubeStore};
use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::kubeconfig::forged_token;
use support::Outcome;

/// Two blocks of 16, shared (`shareBlocks` auto: a pool of at most 64
/// blocks): 10.66.0.0/28 and 10.66.0.16/28.
fn two_blocks() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.66.0.0/27"}], "blockSize": 28}])
}

/// The addresses of [`two_blocks`] a node hands out: all but the network
/// address, the gateway and the broadcast address.
const TWO_BLOCKS_USABLE: usize = 29;

/// What the plugins do on the four kinds, and the kinds, as RBAC names them.
const VERBS: [&str; 6] = ["get", "list", "create", "update", "patch", "delete"];
const RESOURCES: [&str; 4] = ["ipdnetworks", "ipdblocks", "ipdidentities", "ipdnodes"];

/// How long one call may take while the API server is away: a refused
/// connection is at once; the orchestrator's 5 s per delegate bounds it.
const OFFLINE_BOUND: Duration = Duration::from_secs(5);

fn timed(f: impl FnOnce() -> Outcome) -> (Outcome, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

/// `node`'s configuration with `ipam.cluster.shareBlocks` set to `share`.
fn sharing(c: &Cluster<KubeStore>, node: &str, share: &str) -> Value {
    let mut config = c.config(node);
    config["ipam"]["cluster"]["shareBlocks"] = json!(share);
    config
}

/// `node`'s configuration with its credentials in `kubeconfig`.
fn with_kubeconfig(c: &Cluster<KubeStore>, node: &str, kubeconfig: &Path) -> Value {
    let mut config = c.config(node);
    config["ipam"]["cluster"]["kubernetes"]["kubeconfig"] = json!(kubeconfig);
    config
}

/// The words of a message (letters, digits and `-`), to find a verb in it.
fn words(msg: &str) -> Vec<&str> {
    msg.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-')).filter(|w| !w.is_empty()).collect()
}

#[test]
fn two_nodes_add_in_blocks_of_their_own_and_a_del_frees_its_address_for_every_node() {
    let _took = Took::new("two_nodes_add_in_blocks_of_their_own_and_a_del_frees_its_address_for_every_node");
    let c = Cluster::on_kubernetes(two_blocks(), 30.0);
    let a = added(&c.add("n1", "a0"), "n1's first ADD");
    let b = added(&c.add("n2", "b0"), "n2's first ADD");
    assert_ne!(a, b, "two nodes were given one address");
    let (n1_blocks, n2_blocks) = (c.blocks_of("n1"), c.blocks_of("n2"));
    assert_eq!((n1_blocks.len(), n2_blocks.len()), (1, 1), "a block each: {:?}", c.blocks());
    assert_ne!(n1_blocks[0], n2_blocks[0], "one block owned by two nodes: {:?}", c.blocks());
    assert!(n1_blocks[0].contains(a) && n2_blocks[0].contains(b), "{a} and {b} in {n1_blocks:?} and {n2_blocks:?}");

    // The objects, as `kubectl get ipdblocks,ipdnodes` shows them.
    for (node, block) in [("n1", n1_blocks[0]), ("n2", n2_blocks[0])] {
        let name = block_name(block);
        let found = c.store.object("ipdblocks", &name).unwrap_or_else(|| panic!("no IPDBlock {name} for {node}"));
        let spec = &found["spec"];
        assert_eq!(spec["state"], "Owned", "{found}");
        assert_eq!(spec["owner"]["node"], node, "{found}");
        assert_eq!(spec["owner"]["shared"], true, "a pool of two blocks shares them: {found}");
        assert_eq!(found["metadata"]["labels"]["ipam-delegated.io/node"], node, "{found}");
        let db = spec["owner"]["db"].as_str().unwrap_or_else(|| panic!("no owner.db: {found}"));
        let entry = c
            .store
            .object("ipdnodes", &node_object_name(node))
            .unwrap_or_else(|| panic!("no IPDNode {}", node_object_name(node)));
        assert_eq!(entry["spec"]["node"], node, "{entry}");
        assert_eq!(entry["spec"]["db"], db, "the node's entry names the database that claimed its block: {entry}");
    }
    // In a shared block every address handed out has its record.
    let addrs = c.addrs();
    for (ip, node, container) in [(a, "n1", "a0"), (b, "n2", "b0")] {
        let record = addrs.iter().find(|r| r.ip == ip);
        let record = record.unwrap_or_else(|| panic!("no record of {ip} in its shared block: {addrs:?}"));
        assert_eq!((record.node.as_str(), record.container.as_str()), (node, container), "{record:?}");
    }
    for node in ["n1", "n2"] {
        let out = c.status(node);
        assert_eq!(out.status, 0, "STATUS on {node}: {}", brief(&out));
    }

    // n1 fills the pool: its block, then the free addresses of n2's.
    let mut placed = vec![a, b];
    for k in 1.. {
        let out = c.add("n1", &format!("a{k}"));
        if out.status != 0 {
            let (code, msg) = failure(&out);
            assert_eq!(code, 100, "n1's ADD a{k}, {} of {TWO_BLOCKS_USABLE} addresses placed: {msg}", placed.len());
            break;
        }
        placed.push(ipv4_of(out.result()));
        assert!(placed.len() <= TWO_BLOCKS_USABLE, "more addresses than the pool has: {placed:?}");
    }
    assert_eq!(placed.len(), TWO_BLOCKS_USABLE, "100 before the pool was full: {placed:?}");
    let held = held_once(&c, &["n1", "n2"]);
    assert_eq!(held.len(), TWO_BLOCKS_USABLE);
    assert_covered(&c, &held);

    // DEL of one of n1's pods in n2's block: the address is free for n2.
    let (freed, container) = held
        .iter()
        .find(|(ip, (node, _))| node == "n1" && n2_blocks[0].contains(**ip))
        .map(|(ip, (_, container))| (*ip, container.clone()))
        .unwrap_or_else(|| panic!("n1 was granted no address of n2's shared block: {held:?}"));
    c.del("n1", &container).assert_quiet_success();
    assert!(c.leases("n1").iter().all(|r| r.address != freed), "n1's database still leases {freed}");
    assert!(c.addrs().iter().all(|r| r.ip != freed), "the record of {freed} outlived its DEL: {:?}", c.addrs());
    let again = added(&c.add("n2", "b1"), "n2's ADD after n1's DEL");
    assert_eq!(again, freed, "the one free address is the one n1's DEL freed");
    held_once(&c, &["n1", "n2"]);
}

#[test]
fn an_address_asked_for_by_name_is_granted_in_a_shared_block_and_refused_in_another_nodes_own() {
    let _took = Took::new("an_address_asked_for_by_name_is_granted_in_a_shared_block_and_refused_in_another_nodes_own");
    // 32 blocks of 32: shared (auto) unless a node says never.
    let c = Cluster::on_kubernetes(blue_pools(), 30.0);
    let first = added(&c.add("n1", "a0"), "n1's first ADD");
    let [shared] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    let wanted = shared.nth(20);
    assert_ne!(wanted, first);
    let out = c.add_static("n2", "s2", wanted);
    assert_eq!(out.status, 0, "{wanted}, free in n1's shared block, asked for on n2: {}", brief(&out));
    assert_eq!(ipv4_of(out.result()), wanted);
    let record = c.addrs().into_iter().find(|r| r.ip == wanted);
    let record = record.unwrap_or_else(|| panic!("no record of {wanted} in n1's shared block: {:?}", c.addrs()));
    assert_eq!((record.node.as_str(), record.container.as_str()), ("n2", "s2"), "{record:?}");
    let (code, msg) = failure(&c.add_static("n3", "s3", wanted));
    assert_eq!(code, 101, "{wanted}, held by n2, asked for on n3: {msg}");
    assert!(msg.contains("n2"), "the message names the holder n2: {msg}");

    // A block of n4's own: what it holds and what it has free are n4's.
    let own = sharing(&c, "n4", "never");
    let n4_holds = added(&c.run("ADD", "d4", &own, &[]), "n4's first ADD");
    let [block] = c.blocks_of("n4")[..] else { panic!("n4 claimed one block: {:?}", c.blocks()) };
    let found = c.store.object("ipdblocks", &block_name(block)).expect("n4's IPDBlock");
    assert_eq!(found["spec"]["owner"]["shared"], false, "{found}");
    let free = block.nth(20);
    assert_ne!(free, n4_holds);
    for ip in [n4_holds, free] {
        let (code, msg) = failure(&c.add_static("n2", &format!("x-{ip}"), ip));
        assert_eq!(code, 101, "{ip}, in n4's own block, asked for on n2: {msg}");
        assert!(msg.contains("n4"), "the message names n4: {msg}");
        assert!(c.leases("n2").iter().all(|r| r.address != ip), "n2 keeps a lease of {ip}");
        assert!(c.addrs().iter().all(|r| r.ip != ip || r.node == "n4"), "a record of {ip}: {:?}", c.addrs());
    }
    // On n4 itself, granted.
    let out = c.run("ADD", "s4", &own, &[("CNI_ARGS", &format!("IgnoreUnknown=1;IP={free}"))]);
    assert_eq!(out.status, 0, "{free} asked for on its block's owner: {}", brief(&out));
    assert_eq!(ipv4_of(out.result()), free);
    let held = held_once(&c, &["n1", "n2", "n3", "n4"]);
    assert_covered(&c, &held);
}

#[test]
fn with_the_api_server_stopped_own_blocks_serve_within_the_grace_the_rest_is_11_and_all_works_again() {
    let _took =
        Took::new("with_the_api_server_stopped_own_blocks_serve_within_the_grace_the_rest_is_11_and_all_works_again");
    let mut c = Cluster::on_kubernetes(blue_pools(), 30.0);
    c.share_blocks = Some("never");
    for i in 0..3 {
        added(&c.add("n1", &format!("warm-{i}")), "n1's warm-up ADD");
    }
    let [own] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    added(&c.run("ADD", "s-warm", &sharing(&c, "n3", "always"), &[]), "n3's first ADD, in a shared block");
    let mut log = Vec::new();

    c.store.stop();
    for i in 0..3 {
        let (out, took) = timed(|| c.add("n1", &format!("off-{i}")));
        let ip = added(&out, "n1's ADD in its own block, confirmed moments ago, the API server stopped");
        assert!(own.contains(ip), "{ip} is outside n1's block {own}");
        assert!(took < OFFLINE_BOUND, "n1's ADD took {took:?}");
        log.push(format!("own block {took:.2?}"));
    }
    let refused: [(&str, (Outcome, Duration)); 3] = [
        ("n3's ADD in its shared block", timed(|| c.run("ADD", "s-off", &sharing(&c, "n3", "always"), &[]))),
        ("n2's first ADD", timed(|| c.add("n2", "first"))),
        ("n1's static ADD", timed(|| c.add_static("n1", "static-off", "10.50.3.222".parse().unwrap()))),
    ];
    for (what, (out, took)) in &refused {
        let (code, msg) = failure(out);
        assert_eq!(code, 11, "{what}, the API server stopped: {}", brief(out));
        assert!(msg.contains("unreachable"), "{what}: the message says the server is unreachable: {msg}");
        assert!(*took < OFFLINE_BOUND, "{what} took {took:?}");
        log.push(format!("{what}: 11 in {took:.2?}"));
    }
    c.store.restart();

    let back = [
        ("n1", c.add("n1", "back")),
        ("n2", c.add("n2", "first")),
        ("n3", c.run("ADD", "s-back", &sharing(&c, "n3", "always"), &[])),
    ];
    for (node, out) in &back {
        added(out, &format!("{node}'s ADD after the restart"));
    }
    let out = c.add_static("n1", "static-back", "10.50.3.222".parse().unwrap());
    assert_eq!(out.status, 0, "the static ADD after the restart: {}", brief(&out));
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
    eprintln!("API server stopped: {}", log.join("; "));
}

/// Every object of the suite's kinds, by kind and name, with the spec the
/// plugins wrote (not the server's metadata).
fn specs(store: &KubeStore) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for kind in ["ipdnetworks", "ipdnodes", "ipdblocks"] {
        for object in store.objects(kind) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            all.push((kind.to_string(), name, object["spec"].clone()));
        }
    }
    all.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
    all
}

#[test]
fn the_api_server_restarted_between_adds_loses_nothing_and_allocation_goes_on() {
    let _took = Took::new("the_api_server_restarted_between_adds_loses_nothing_and_allocation_goes_on");
    let mut c = Cluster::on_kubernetes(two_blocks(), 30.0);
    // n1 in a block shared (a pool of two blocks), n3 in one of its own.
    let own = sharing(&c, "n3", "never");
    let mut pods: Vec<(&str, String)> = Vec::new();
    for i in 0..3 {
        added(&c.add("n1", &format!("a{i}")), "n1's ADD before the restart");
        pods.push(("n1", format!("a{i}")));
        added(&c.run("ADD", &format!("c{i}"), &own, &[]), "n3's ADD before the restart");
        pods.push(("n3", format!("c{i}")));
    }
    // n2, with no block, asks by name for a free address of n1's block.
    let [shared] = c.blocks_of("n1")[..] else { panic!("n1 claimed one block: {:?}", c.blocks()) };
    added(&c.add_static("n2", "b-static", shared.nth(9)), "n2's static ADD in n1's shared block");
    pods.push(("n2", "b-static".to_string()));
    let before = specs(&c.store);
    let held_before = held_once(&c, &["n1", "n2", "n3"]);

    c.store.restart();
    assert_eq!(specs(&c.store), before, "the objects the plugins wrote, after the API server's restart");

    // Allocation goes on: every node's next ADD, none given an address held.
    let mut after = Vec::new();
    for (node, config) in [("n1", c.config("n1")), ("n2", c.config("n2")), ("n3", own.clone())] {
        let ip =
            added(&c.run("ADD", &format!("{node}-after"), &config, &[]), &format!("{node}'s ADD after the restart"));
        assert!(!held_before.contains_key(&ip), "{node} was given {ip}, held before the restart: {held_before:?}");
        after.push(ip);
    }
    // A DEL of a pod from before the restart frees its address for every node.
    let (freed, _) = held_before.iter().find(|(_, (node, container))| node == "n1" && container == "a1").expect("a1");
    c.del("n1", "a1").assert_quiet_success();
    assert!(c.addrs().iter().all(|r| r.ip != *freed), "the record of {freed} outlived its DEL: {:?}", c.addrs());
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
    for (node, container) in pods.iter().filter(|(_, container)| container != "a1") {
        assert!(
            held.values().any(|(n, ctr)| n == node && ctr == container),
            "{node}'s pod {container} lost its address: {held:?}"
        );
    }
}

#[test]
fn a_second_host_under_one_node_name_is_refused_naming_the_node() {
    let _took = Took::new("a_second_host_under_one_node_name_is_refused_naming_the_node");
    let c = Cluster::on_kubernetes(blue_pools(), 30.0);
    // Two hosts, a database each, both calling themselves "twin".
    let database = |host: &str| c.dir.path().join(host).join("allocations.sqlite");
    let host = |name: &str| {
        let mut config = c.config("twin");
        config["ipam"]["database"] = json!(database(name));
        config
    };
    let mut given = Vec::new();
    for round in 0..3 {
        given.push(added(&c.run("ADD", &format!("a{round}"), &host("host-a"), &[]), "host-a's ADD"));
        let b = c.run("ADD", &format!("b{round}"), &host("host-b"), &[]);
        let (code, msg) = failure(&b);
        assert_eq!(code, 7, "round {round}: host-b runs under host-a's node name: {}", brief(&b));
        assert!(msg.contains("twin"), "the message names the node: {msg}");
    }
    assert!(stack::leases(&database("host-b")).is_empty(), "host-b handed out an address");
    // Under a name of its own, host-b works.
    let mut own = host("host-b");
    own["ipam"]["cluster"]["node"] = json!("twin-b");
    let b = added(&c.run("ADD", "b-own", &own, &[]), "host-b under a name of its own");
    assert!(!given.contains(&b), "{b} was host-a's");
}

#[test]
fn credentials_the_api_server_refuses_are_error_7_naming_what_was_refused() {
    let _took = Took::new("credentials_the_api_server_refuses_are_error_7_naming_what_was_refused");
    let c = Cluster::on_kubernetes(blue_pools(), 30.0);
    let (namespace, _) = &c.store.account;
    c.store.api.apply_yaml(&format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: unbound\n  namespace: {namespace}\n"
    ));

    // Authenticated, bound to nothing: 403, which names a verb and a kind.
    let unbound = c.store.api.service_account_kubeconfig(namespace, "unbound");
    let out = c.run("ADD", "u1", &with_kubeconfig(&c, "n1", &unbound), &[]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 7, "ADD with an account RBAC grants nothing: {}", brief(&out));
    let said = words(&msg);
    assert!(
        VERBS.iter().any(|v| said.contains(v)) && RESOURCES.iter().any(|r| msg.contains(r)),
        "the message names the verb and the resource RBAC refused: {msg}"
    );
    let out = c.run("STATUS", "status", &status_config(&with_kubeconfig(&c, "n1", &unbound)), &[]);
    assert_eq!(failure(&out).0, 7, "STATUS with an account RBAC grants nothing: {}", brief(&out));

    // A token the server never issued: 401, which names the kubeconfig.
    let forged = forged_token(c.store.plugins_kubeconfig(), c.dir.path());
    let out = c.run("ADD", "f1", &with_kubeconfig(&c, "n1", &forged), &[]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 7, "ADD with a forged token: {}", brief(&out));
    assert!(
        msg.contains(&forged.display().to_string()),
        "the message names the kubeconfig {}: {msg}",
        forged.display()
    );

    assert!(c.leases_if_created("n1").is_empty(), "refused calls handed out {:?}", c.leases_if_created("n1"));
    assert!(c.blocks().is_empty() && c.addrs().is_empty(), "refused calls wrote {:?} {:?}", c.blocks(), c.addrs());
    // The DaemonSet's account may.
    added(&c.add("n1", "ok"), "ADD with the plugins' account");
}

/// `config` for STATUS (spec 1.1).
fn status_config(config: &Value) -> Value {
    let mut config = config.clone();
    config["cniVersion"] = json!("1.1.0");
    config
}
