//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"): bad
//! settings. Simulated nodes, each with a database of its own, share one real
//! etcd (tests/cluster_harness; a missing etcd fails these tests, never skips
//! them); every call is a real `ipam-delegated` process.
//!
//! What is checked: every bad `ipam.cluster` setting (and a blockSize the
//! pool cannot take) is error 7 naming the field, before any etcd write or
//! lease, the Kubernetes datastore's settings included; the same ADD with
//! good settings does write.

mod cluster_harness;
mod stack;
mod support;

use cluster_harness::*;
use serde_json::{json, Value};

#[test]
fn bad_settings_are_7_and_write_nothing() {
    let _took = Took::new("bad_settings_are_7_and_write_nothing");
    let c = Cluster::blue(30.0);
    let endpoint = c.store.endpoint();
    let dir = c.dir.path().to_path_buf();
    type Change = Box<dyn Fn(&mut Value)>;
    let cluster = |v: Value| -> Change { Box::new(move |conf: &mut Value| conf["ipam"]["cluster"] = v.clone()) };
    let etcd = |v: Value| -> Change { Box::new(move |conf: &mut Value| conf["ipam"]["cluster"]["etcd"] = v.clone()) };
    let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ipam-ds-cluster/src/kube/testdata/ca.crt");
    let kubeconfig = dir.join("node.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             clusters: [{{name: k, cluster: {{server: 'https://10.0.0.1:6443', certificate-authority: '{}'}}}}]\n\
             users: [{{name: u, user: {{tokenFile: /nonexistent/token}}}}]\n",
            ca.display()
        ),
    )
    .unwrap();
    let good_kubeconfig = dir.join("good.kubeconfig");
    std::fs::write(
        &good_kubeconfig,
        std::fs::read_to_string(&kubeconfig).unwrap().replace("tokenFile: /nonexistent/token", "token: abc"),
    )
    .unwrap();
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "etcd and kubernetes",
            cluster(json!({"etcd": {"endpoints": [endpoint]}, "kubernetes": {"kubeconfig": good_kubeconfig},
                "node": "n1"})),
            "ipam.cluster.etcd and ipam.cluster.kubernetes: are both set",
        ),
        (
            "kubernetes: typo kubeconfig",
            cluster(json!({"kubernetes": {"kubeconfg": good_kubeconfig}, "node": "n1"})),
            "ipam.cluster.kubernetes.kubeconfg: unknown key `kubeconfg`: did you mean `kubeconfig`?",
        ),
        (
            "kubernetes: a token file missing",
            cluster(json!({"kubernetes": {"kubeconfig": kubeconfig}, "node": "n1"})),
            "user \"u\" tokenFile (/nonexistent/token): unreadable",
        ),
        (
            "no cluster",
            Box::new(|conf: &mut Value| drop(conf["ipam"].as_object_mut().unwrap().remove("cluster"))),
            "ipam.cluster",
        ),
        ("no datastore", cluster(json!({"node": "n1"})), "ipam.cluster.etcd or ipam.cluster.kubernetes: is required"),
        ("no endpoints", etcd(json!({"endpoints": []})), "ipam.cluster.etcd.endpoints"),
        (
            "endpoint not a URL",
            etcd(json!({"endpoints": [endpoint.trim_start_matches("http://")]})),
            "ipam.cluster.etcd.endpoints[0]",
        ),
        (
            "second endpoint not a URL",
            etcd(json!({"endpoints": [endpoint, "ftp://10.0.0.1:2379"]})),
            "ipam.cluster.etcd.endpoints[1]",
        ),
        ("typo endpoint", etcd(json!({"endpoint": [endpoint]})), "ipam.cluster.etcd.endpoint"),
        ("timeout 0", etcd(json!({"endpoints": [endpoint], "timeout": 0})), "ipam.cluster.etcd.timeout"),
        (
            "negative offlineGrace",
            cluster(json!({"etcd": {"endpoints": [endpoint]}, "node": "n1", "offlineGrace": -1})),
            "ipam.cluster.offlineGrace",
        ),
        (
            "typo offlinegrace",
            cluster(json!({"etcd": {"endpoints": [endpoint]}, "node": "n1", "offlinegrace": 5})),
            "ipam.cluster.offlinegrace",
        ),
        ("node with a slash", cluster(json!({"etcd": {"endpoints": [endpoint]}, "node": "n1/x"})), "ipam.cluster.node"),
        (
            "username without passwordFile",
            etcd(json!({"endpoints": [endpoint], "username": "u"})),
            "ipam.cluster.etcd.passwordFile",
        ),
        (
            "tls.ca missing",
            etcd(
                json!({"endpoints": [endpoint.replace("http://", "https://")], "tls": {"ca": dir.join("no-such-ca.pem")}}),
            ),
            "ipam.cluster.etcd.tls.ca",
        ),
        (
            "prefix not a key prefix",
            etcd(json!({"endpoints": [endpoint], "prefix": "ipam"})),
            "ipam.cluster.etcd.prefix",
        ),
        (
            "blockSize 20 for a /22",
            Box::new(|conf: &mut Value| conf["ipam"]["pools"][0]["blockSize"] = json!(20)),
            "blockSize",
        ),
    ];
    let mut seen = Vec::new();
    for (i, (what, change, field)) in cases.iter().enumerate() {
        let mut config = c.config("bad");
        change(&mut config);
        let out = c.run("ADD", &format!("bad-{i}"), &config, &[]);
        let (code, msg) = failure(&out);
        assert_eq!(code, 7, "{what}: {msg}");
        assert!(msg.contains(field), "{what}: the message must name {field}: {msg}");
        assert!(out.stderr.lines().all(|l| !l.contains("panicked")), "{what}: {}", out.stderr);
        seen.push(format!("{what}: {msg}"));
        let written = c.store.dump("/");
        assert!(written.is_empty(), "{what}: etcd was written: {written:?}");
        assert_eq!(c.leases_if_created("bad"), Vec::new(), "{what}: a lease was left");
    }
    // The same ADD with good settings does write: the checks above could see it.
    let out = c.add("bad", "good");
    assert_eq!(out.status, 0, "good settings: {}", brief(&out));
    assert!(!c.store.dump(POOL_KEYS).is_empty(), "a good ADD writes its block to etcd");
    eprintln!("bad settings:\n  {}", seen.join("\n  "));
}
