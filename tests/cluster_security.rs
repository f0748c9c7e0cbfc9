//! Cluster mode's security and its answers to wrong credentials and
//! certificates, against a real etcd (`TestEtcd`, Debian's etcd from PATH),
//! every call a real `ipam-delegated` process:
//!
//! - the cached etcd auth token belongs to one set of endpoints, user and
//!   password, never to another network's;
//! - a wrong password is error 7 naming `passwordFile`, on every command;
//! - weak setups (a password over http, http mixed with https, a password
//!   file others can read) are warned about, once per call;
//! - text read from etcd reaches messages and the operator's output bounded
//!   and with its control characters escaped;
//! - `passwordFile` and `nodeFile` are read up to a limit;
//! - a certificate the node cannot verify is error 7 naming `tls.ca`, never
//!   "unreachable" (which would let ADD go on offline).

mod cluster_harness;
mod stack;
mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cluster_harness::*;
use ipam_ds_cluster::etcd::testing::{find_in_path, TestEtcd};
use ipam_ds_cluster::etcd::{Op, Txn};
use serde_json::{json, Value};
use support::{run_args, suite_bin, Outcome};

/// A file holding `text`, with `mode`.
fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// `config` with etcd credentials; authenticating (bcrypt) on a loaded
/// machine may take more than the harness's 1 s.
fn with_user(mut config: Value, user: &str, password_file: &Path) -> Value {
    config["ipam"]["cluster"]["etcd"]["username"] = json!(user);
    config["ipam"]["cluster"]["etcd"]["passwordFile"] = json!(password_file);
    config["ipam"]["cluster"]["etcd"]["timeout"] = json!(5);
    config
}

/// `config` as another network of the node, whose pool must not overlap
/// the first one's in the node's database.
fn another_network(mut config: Value, name: &str) -> Value {
    config["name"] = json!(name);
    config["ipam"]["pools"] = json!([{"name": "blue", "ranges": [{"subnet": "10.60.0.0/22"}], "blockSize": 27}]);
    config
}

/// etcdctl as root on a test etcd whose auth is on (root's password is
/// `root-password`, as `TestEtcd::enable_auth` sets it for another user).
fn etcdctl(etcd: &TestEtcd, args: &[&str]) {
    let etcdctl = find_in_path("etcdctl").expect("etcdctl in PATH: install Debian's etcd-client");
    let out = Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .arg("--user=root:root-password")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl runs");
    assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn put(etcd: &TestEtcd, key: &str, value: &[u8]) {
    let txn = Txn { success: vec![Op::Put { key: key.into(), value: value.to_vec(), lease: 0 }], ..Txn::default() };
    etcd.client().txn(&txn).unwrap_or_else(|e| panic!("put {key}: {e}"));
}

fn delete(etcd: &TestEtcd, key: &str) {
    let txn = Txn { success: vec![Op::Delete { key: key.into(), range_end: None }], ..Txn::default() };
    etcd.client().txn(&txn).unwrap_or_else(|e| panic!("delete {key}: {e}"));
}

fn status(c: &Cluster, config: &Value) -> Outcome {
    let mut config = config.clone();
    config["cniVersion"] = json!("1.1.0");
    c.run("STATUS", "status", &config, &[])
}

fn gc(c: &Cluster, config: &Value, keep: &[&str]) -> Outcome {
    let valid: Vec<(String, String)> = keep.iter().map(|k| (k.to_string(), "eth0".to_string())).collect();
    c.run("GC", "gc", &stack::gc_config(config, &valid), &[])
}

/// Asserts error 7 whose message names every one of `names`.
fn assert_7(what: &str, out: &Outcome, names: &[&str]) -> String {
    let (code, msg) = failure(out);
    assert_eq!(code, 7, "{what}: {msg}");
    for name in names {
        assert!(msg.contains(name), "{what}: the message must name {name}: {msg}");
    }
    msg
}

/// The operator's `cluster --conf … ARGS` with `config` as the network's plugin.
fn operator(c: &Cluster, config: &Value, args: &[&str]) -> Outcome {
    let conflist = c.dir.path().join("operator.conflist");
    let mut plugin = config.clone();
    let name = plugin["name"].clone();
    plugin.as_object_mut().unwrap().remove("name");
    plugin.as_object_mut().unwrap().remove("cniVersion");
    let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]});
    std::fs::write(&conflist, list.to_string()).unwrap();
    let mut all = vec!["cluster", "--conf", conflist.to_str().unwrap()];
    all.extend_from_slice(args);
    run_args(&suite_bin("ipam-delegated"), &all, &[], b"", None)
}

// ---------------------------------------------------------------------------
// The auth token

#[test]
fn the_cached_token_is_per_user_password_and_endpoints_and_a_wrong_password_is_7() {
    let _took = Took::new("the_cached_token_is_per_user_password_and_endpoints_and_a_wrong_password_is_7");
    let c = Cluster::blue(300.0);
    c.store.enable_auth("alice", "secret");
    // bob may only touch his own prefix.
    etcdctl(&c.store, &["user", "add", "bob:bob-secret"]);
    etcdctl(&c.store, &["role", "add", "bob-role"]);
    etcdctl(&c.store, &["role", "grant-permission", "bob-role", "--prefix=true", "readwrite", "/bob/"]);
    etcdctl(&c.store, &["user", "grant-role", "bob", "bob-role"]);
    let dir = c.dir.path();
    let alice = file(dir, "alice.pw", "secret\n", 0o600);
    let bob = file(dir, "bob.pw", "bob-secret\n", 0o600);
    let wrong = file(dir, "wrong.pw", "not-the-password\n", 0o600);

    // bob's network first, on node n1's database.
    let mut bobs = another_network(with_user(c.config("n1"), "bob", &bob), "bob-net");
    bobs["ipam"]["cluster"]["etcd"]["prefix"] = json!("/bob");
    let out = c.run("ADD", "b1", &bobs, &[]);
    assert_eq!(out.status, 0, "bob's ADD: {}", brief(&out));

    // Then alice's, on the same database: her own token, not bob's.
    let alices = with_user(c.config("n1"), "alice", &alice);
    let out = c.run("ADD", "a1", &alices, &[]);
    assert_eq!(out.status, 0, "alice's ADD after bob's on the same database: {}", brief(&out));
    let out = c.run("ADD", "a-static", &alices, &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.50.3.3")]);
    assert_eq!(out.status, 0, "alice's static ADD: {}", brief(&out));

    // A wrong password is refused, whatever token an earlier call kept.
    let wrongs = with_user(c.config("n1"), "alice", &wrong);
    let add = c.run("ADD", "a2", &wrongs, &[]);
    let msg = assert_7("ADD with a wrong password", &add, &["ipam.cluster.etcd.passwordFile"]);
    assert!(!msg.contains("not-the-password"), "the password is in the message: {msg}");
    assert_7("STATUS with a wrong password", &status(&c, &wrongs), &["ipam.cluster.etcd.passwordFile"]);
    let mut check = wrongs.clone();
    check["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.50.3.3/22"}]});
    let out = c.run("CHECK", "a-static", &check, &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.50.3.3")]);
    assert_7("CHECK with a wrong password", &out, &["ipam.cluster.etcd.passwordFile"]);
    assert_7("GC with a wrong password", &gc(&c, &wrongs, &["a1"]), &["ipam.cluster.etcd.passwordFile"]);
    // DEL of an address no other node may use until etcd has its release
    // fails (the contract: the runtime tries it again), naming the address
    // and etcd's refusal, and keeps the release for a later call.
    let out = c.del_with(&wrongs, "a-static");
    let msg = assert_7("DEL with a wrong password", &out, &["ipam.cluster.etcd.passwordFile", "10.50.3.3"]);
    assert!(msg.contains("try DEL again"), "DEL's error: {msg}");
    assert!(
        c.addrs().iter().any(|a| a.ip.to_string() == "10.50.3.3"),
        "the record stays in etcd until a call with the right password"
    );
    let out = c.del_with(&alices, "a-static");
    assert_eq!(out.status, 0, "DEL with the right password: {}", brief(&out));
    assert!(c.addrs().iter().all(|a| a.ip.to_string() != "10.50.3.3"), "released: {:?}", c.addrs());

    // Another user, even with no rights at all, does not ride on alice's token.
    let mallory = file(dir, "mallory.pw", "x\n", 0o600);
    let out = c.run("ADD", "m1", &with_user(c.config("n1"), "mallory", &mallory), &[]);
    assert_7("ADD as an unknown user", &out, &["ipam.cluster.etcd.passwordFile"]);

    // What is kept names no password.
    let notes = c.table("n1", "SELECT name, value FROM cluster_notes");
    assert!(notes.iter().any(|n| n[0].starts_with("etcd-token")), "tokens are kept: {notes:?}");
    for n in &notes {
        for secret in ["secret", "bob-secret", "not-the-password"] {
            assert!(!n[0].contains(secret) && !n[1].contains(secret), "a password is kept in the database: {n:?}");
        }
    }
}

impl Cluster {
    fn del_with(&self, config: &Value, container: &str) -> Outcome {
        self.run("DEL", container, config, &[])
    }
}

#[test]
fn a_token_goes_only_to_the_etcd_it_came_from() {
    let _took = Took::new("a_token_goes_only_to_the_etcd_it_came_from");
    let c = Cluster::blue(300.0);
    c.store.enable_auth("alice", "secret");
    let other = TestEtcd::start();
    other.enable_auth("alice", "secret");
    let alice = file(c.dir.path(), "alice.pw", "secret\n", 0o600);
    let out = c.add_with(&with_user(c.config("n1"), "alice", &alice), "a1");
    assert_eq!(out.status, 0, "ADD on the first etcd: {}", brief(&out));

    // Another network of the node, on another etcd, same user and password.
    let mut elsewhere = another_network(with_user(c.config("n1"), "alice", &alice), "elsewhere");
    elsewhere["ipam"]["cluster"]["etcd"]["endpoints"] = json!([other.endpoint()]);
    let out = c.add_with(&elsewhere, "e1");
    assert_eq!(out.status, 0, "ADD on the other etcd: {}", brief(&out));
    let metrics = other.metrics();
    let sent_a_token: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains("grpc_code=\"Unauthenticated\""))
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    assert!(sent_a_token.is_empty(), "the first etcd's token was sent to the other one: {sent_a_token:?}");
}

impl Cluster {
    fn add_with(&self, config: &Value, container: &str) -> Outcome {
        self.run("ADD", container, config, &[])
    }
}

// ---------------------------------------------------------------------------
// Weak setups

/// Lines of stderr that contain every one of `words`.
fn lines_with<'a>(stderr: &'a str, words: &[&str]) -> Vec<&'a str> {
    stderr.lines().filter(|l| words.iter().all(|w| l.contains(w))).collect()
}

#[test]
fn weak_setups_are_warned_about_once_per_call() {
    let _took = Took::new("weak_setups_are_warned_about_once_per_call");
    let c = Cluster::blue(300.0);
    c.store.enable_auth("alice", "secret");
    let readable = file(c.dir.path(), "alice.pw", "secret\n", 0o644);
    let config = with_user(c.config("n1"), "alice", &readable);
    // An ADD that fails after ipam-ds-cluster (102: outside every pool) and
    // is rolled back: ipam-ds-cluster's settings are read twice in the call.
    let out = c.run("ADD", "w1", &config, &[("CNI_ARGS", "IgnoreUnknown=1;IP=192.0.2.9")]);
    assert_eq!(failure(&out).0, 102, "{}", brief(&out));
    let readable_warnings = lines_with(&out.stderr, &["ipam.cluster.etcd.passwordFile", "readable"]);
    assert_eq!(readable_warnings.len(), 1, "one warning of a readable password file: {}", out.stderr);
    let http_warnings = lines_with(&out.stderr, &["ipam.cluster.etcd.username", "http://"]);
    assert_eq!(http_warnings.len(), 1, "one warning of a password over http: {}", out.stderr);

    // A private file over http: only the http warning.
    let private = file(c.dir.path(), "private.pw", "secret\n", 0o600);
    let out = c.add_with(&with_user(c.config("n1"), "alice", &private), "w2");
    assert_eq!(out.status, 0, "{}", brief(&out));
    assert!(lines_with(&out.stderr, &["ipam.cluster.etcd.passwordFile"]).is_empty(), "{}", out.stderr);
    assert_eq!(lines_with(&out.stderr, &["ipam.cluster.etcd.username", "http://"]).len(), 1, "{}", out.stderr);

    // http mixed with https, without tls.
    let plain = Cluster::blue(300.0);
    let mut mixed = plain.config("n2");
    mixed["ipam"]["cluster"]["etcd"]["endpoints"] = json!([plain.store.endpoint(), "https://127.0.0.1:1"]);
    let out = plain.add_with(&mixed, "m1");
    assert_eq!(out.status, 0, "{}", brief(&out));
    let mixed_warnings = lines_with(&out.stderr, &["ipam.cluster.etcd.endpoints[0]", "https"]);
    assert_eq!(mixed_warnings.len(), 1, "one warning of http mixed with https: {}", out.stderr);

    // The operator's tool warns too.
    let out = operator(&c, &config, &["blocks"]);
    assert_eq!(out.status, 0, "{}", brief(&out));
    assert_eq!(lines_with(&out.stderr, &["ipam.cluster.etcd.passwordFile", "readable"]).len(), 1, "{}", out.stderr);
}

// ---------------------------------------------------------------------------
// Untrusted text from etcd

/// Text fit for a terminal and a log line: no control character, not long.
fn assert_tame(what: &str, text: &str, most: usize) {
    assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "{what}: control characters pass through: {text:?}");
    assert!(text.len() <= most, "{what}: {} bytes, more than {most}: {:.300}…", text.len(), text);
}

#[test]
fn text_from_etcd_is_bounded_and_escaped() {
    let _took = Took::new("text_from_etcd_is_bounded_and_escaped");
    let c = Cluster::blue(300.0);
    let evil = "\u{1b}[2J\u{1b}]0;owned\u{7}";
    // A pool definition of 1.4 MB, with terminal escapes.
    let definition = format!("{{\"ranges\":[\"{evil}{}\"],\"blockSize\":27}}", "A".repeat(1_400_000));
    put(&c.store, &format!("{POOL_KEYS}pool"), definition.as_bytes());
    let out = c.add("n1", "c1");
    let msg = assert_7("a pool definition that differs", &out, &["blockSize"]);
    assert_tame("ADD's message", &msg, 2000);
    assert_tame("ADD's stderr", &out.stderr, 4000);
    delete(&c.store, &format!("{POOL_KEYS}pool"));

    // Another node's static record with a hostile container and node name.
    let record = json!({"kind": "static", "node": format!("n9{evil}"), "container": format!("{evil}{}", "C".repeat(50_000)),
                        "ifname": evil});
    put(&c.store, &format!("{ADDRS}10.50.0.0-27/10.50.0.5"), record.to_string().as_bytes());
    let out = c.add_static("n1", "c2", "10.50.0.5".parse().unwrap());
    let (code, msg) = failure(&out);
    assert_eq!(code, 101, "{msg}");
    assert_tame("101's message", &msg, 2000);
    assert_tame("101's stderr", &out.stderr, 4000);

    // A block of a node whose name is hostile, and a record of node n9 (a
    // valid name) with a hostile container: the operator's output.
    put(
        &c.store,
        &format!("{BLOCKS}10.50.1.0-27"),
        json!({"node": format!("x{evil}"), "at": 1}).to_string().as_bytes(),
    );
    let record = json!({"kind": "static", "node": "n9", "container": format!("{evil}{}", "C".repeat(50_000)),
                        "ifname": "eth0", "lender": format!("{evil}")});
    put(&c.store, &format!("{ADDRS}10.50.2.0-27/10.50.2.7"), record.to_string().as_bytes());
    put(&c.store, &format!("{POOL_KEYS}pool"), definition.as_bytes());
    let out = operator(&c, &c.config("n1"), &["blocks"]);
    assert_tame("blocks' stdout", &out.stdout, 8000);
    assert_tame("blocks' stderr", &out.stderr, 8000);
    delete(&c.store, &format!("{POOL_KEYS}pool"));
    let out = operator(&c, &c.config("n1"), &["release-node", "n9"]);
    assert_eq!(out.status, 0, "{}", brief(&out));
    assert_tame("release-node's stdout", &out.stdout, 8000);
    assert_tame("release-node's stderr", &out.stderr, 8000);
}

// ---------------------------------------------------------------------------
// Files read

#[test]
fn password_and_node_files_are_read_up_to_a_limit() {
    let _took = Took::new("password_and_node_files_are_read_up_to_a_limit");
    let c = Cluster::blue(300.0);
    let big = file(c.dir.path(), "big", &"n".repeat(64 * 1024 + 1), 0o600);
    let from_file = |path: &Path| {
        let mut config = c.config("n1");
        let cluster = config["ipam"]["cluster"].as_object_mut().unwrap();
        cluster.remove("node");
        cluster.insert("nodeFile".into(), json!(path));
        config
    };
    for (what, config, field) in [
        ("a big nodeFile", from_file(&big), "ipam.cluster.nodeFile"),
        ("a big passwordFile", with_user(c.config("n1"), "alice", &big), "ipam.cluster.etcd.passwordFile"),
        ("nodeFile /dev/zero", from_file(Path::new("/dev/zero")), "ipam.cluster.nodeFile"),
        (
            "passwordFile /dev/zero",
            with_user(c.config("n1"), "alice", Path::new("/dev/zero")),
            "ipam.cluster.etcd.passwordFile",
        ),
    ] {
        let out = c.add_with(&config, "f1");
        assert_7(what, &out, &[field, "65536 bytes"]);
    }
    assert!(c.store.dump("/").is_empty(), "nothing is written with such files");
}

// ---------------------------------------------------------------------------
// Certificates

/// A CA of its own (not the test etcd's), in `dir`.
fn another_ca(dir: &Path) -> PathBuf {
    let openssl = find_in_path("openssl").expect("openssl in PATH");
    let ca = dir.join("other-ca.crt");
    let out = Command::new(openssl)
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-keyout", "other-ca.key", "-out", "other-ca.crt", "-days", "2", "-subj", "/CN=another-ca"])
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    ca
}

#[test]
fn a_certificate_the_node_cannot_verify_is_7_not_unreachable() {
    let _took = Took::new("a_certificate_the_node_cannot_verify_is_7_not_unreachable");
    let c = Cluster::over(
        TestEtcd::start_tls(),
        json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/22"}], "blockSize": 27}]),
        300.0,
    );
    let tls = c.store.tls_files();
    let with_tls = |ca: &Path| {
        let mut config = c.config("n1");
        config["ipam"]["cluster"]["etcd"]["tls"] =
            json!({"ca": ca, "cert": tls.cert.as_ref().unwrap(), "key": tls.key.as_ref().unwrap()});
        config
    };
    let good = with_tls(tls.ca.as_ref().unwrap());
    let out = c.add_with(&good, "c1");
    assert_eq!(out.status, 0, "ADD with the right CA: {}", brief(&out));
    status(&c, &good).assert_quiet_success();

    // The node's blocks were confirmed just now: an unreachable etcd would
    // let ADD go on from them. A certificate it cannot verify must not.
    let other = another_ca(c.dir.path());
    let bad = with_tls(&other);
    let out = c.add_with(&bad, "c2");
    assert_7("ADD with another CA", &out, &["ipam.cluster.etcd.tls.ca", "UnknownIssuer"]);
    assert_7("STATUS with another CA", &status(&c, &bad), &["ipam.cluster.etcd.tls.ca", "UnknownIssuer"]);
    let out = operator(&c, &bad, &["blocks"]);
    assert_eq!(out.status, 1, "{}", brief(&out));
    assert!(out.stderr.contains("ipam.cluster.etcd.tls.ca"), "{}", out.stderr);
}
