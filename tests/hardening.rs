//! The defects found by trying to break the suite, each held down by the
//! test that reproduced it: chained prevResults, pools that change under
//! their leases, repeat ADDs that fail, stacks that run themselves, stuck
//! locks, thousands of pools, other programs' files. Every test drives the
//! real executables on a database of its own.

mod stack;
mod support;

use std::fs::{self, File};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{addresses, assert_error, bin_dir, copies_dir, run_args, suite_bin, Outcome, Response, Sandbox};

/// The full stack on the sandbox's database, `cniVersion` 1.0.0, with `pools`.
fn network(sb: &Sandbox, pools: Value) -> Value {
    stack::config("1.0.0", "hard", "bridge", &sb.db(), pools)
}

fn pool(name: &str, subnet: &str) -> Value {
    json!({"name": name, "ranges": [{"subnet": subnet}]})
}

fn with_ipam(config: &Value, key: &str, value: Value) -> Value {
    let mut c = config.clone();
    c["ipam"][key] = value;
    c
}

/// A lease of the pool `p` of the network `hard` (see [`network`]), as [`stack::leases`] lists it.
fn lease(address: &str, ctr: &str, ifname: &str) -> stack::LeaseRow {
    stack::LeaseRow {
        address: address.parse().expect("an address"),
        pool: "p".into(),
        network: "hard".into(),
        container_id: ctr.into(),
        ifname: ifname.into(),
    }
}

#[test]
fn an_add_with_a_chains_prev_result_allocates_for_its_own_attachment() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.79.0.0/24")]));
    let c1 = sb.add(&config, "c1");
    assert_eq!(addresses(&c1), ["10.79.0.2/24"]);

    // A plugin later in a chain passes its prevResult to IPAM unchanged.
    let c2 = sb.add(&support::with_prev(&config, c1.result()), "c2");
    assert_eq!(addresses(&c2), ["10.79.0.3/24"], "c2 was answered with c1's address");
    let foreign = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.200.0.5/24"}]});
    let c3 = sb.add(&support::with_prev(&config, &foreign), "c3");
    assert_eq!(addresses(&c3), ["10.79.0.4/24"], "c3 was answered with a foreign address");
    assert_eq!(
        stack::leases(&sb.db()),
        [lease("10.79.0.2", "c1", "eth0"), lease("10.79.0.3", "c2", "eth0"), lease("10.79.0.4", "c3", "eth0")]
    );
}

#[test]
fn check_and_del_ignore_the_addresses_of_the_containers_other_interfaces() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.83.0.0/24")]));
    let eth0 = sb.add(&config, "c1");
    let eth1 = sb.delegated("ADD", &config, "c1", &[("CNI_IFNAME", "eth1")]);
    // As the results have them, with the prefix length.
    let cidr = |out: &Outcome| out.result()["ips"][0]["address"].clone();
    let (a0, a1) = (cidr(&eth0), cidr(&eth1));
    assert_ne!(a0, a1);
    // The chain's final result, as a runtime caches it: both interfaces.
    let chain = json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": "/x"}, {"name": "eth1", "sandbox": "/x"}],
        "ips": [{"address": a0, "interface": 0}, {"address": a1, "interface": 1}]});
    let bare = json!({"cniVersion": "1.0.0", "ips": [{"address": a0}, {"address": a1}]});
    for prev in [&chain, &bare] {
        for ifname in ["eth0", "eth1"] {
            let out = sb.delegated("CHECK", &support::with_prev(&config, prev), "c1", &[("CNI_IFNAME", ifname)]);
            out.assert_quiet_success();
        }
    }
    // Another container's address is still a failure.
    let other = sb.add(&config, "c2");
    let theirs = json!({"cniVersion": "1.0.0", "ips": [{"address": a0}, {"address": cidr(&other)}]});
    assert_error(&sb.delegated("CHECK", &support::with_prev(&config, &theirs), "c1", &[]), 104, &["c2"]);

    sb.delegated("DEL", &support::with_prev(&config, &chain), "c1", &[("CNI_IFNAME", "eth1")]).assert_quiet_success();
    assert_eq!(
        stack::leases(&sb.db()).iter().filter(|l| l.container_id == "c1").cloned().collect::<Vec<_>>(),
        [lease(&stack::ipv4_of(eth0.result()).to_string(), "c1", "eth0")]
    );
}

#[test]
fn a_held_address_outside_its_changed_pool_is_not_handed_back() {
    let sb = Sandbox::new();
    let before = network(&sb, json!([pool("p", "10.77.0.0/24")]));
    assert_eq!(addresses(&sb.add(&before, "c1")), ["10.77.0.2/24"]);

    let moved = network(&sb, json!([pool("p", "10.78.0.0/24")]));
    assert_eq!(addresses(&sb.add(&moved, "c1")), ["10.78.0.2/24"]);
    // 0.2.0, whose result has one ip4 object that libcni requires.
    let mut legacy = moved.clone();
    legacy["cniVersion"] = json!("0.2.0");
    assert_eq!(sb.add(&legacy, "c1").result()["ip4"]["ip"], "10.78.0.2/24");

    let six = network(&sb, json!([pool("p", "fd00:78::/64")]));
    assert_eq!(addresses(&sb.add(&six, "c1")), ["fd00:78::2/64"]);
    // The old addresses stay held until DEL: the container may still use them.
    let held: Vec<String> = stack::leases(&sb.db()).into_iter().map(|l| l.address.to_string()).collect();
    assert_eq!(held, ["10.77.0.2", "10.78.0.2", "fd00:78::2"]);
    sb.delegated("DEL", &six, "c1", &[]).assert_quiet_success();
    assert!(stack::leases(&sb.db()).is_empty());
}

#[test]
fn a_held_address_that_became_the_gateway_or_excluded_is_not_handed_back() {
    let sb = Sandbox::new();
    let base = network(&sb, json!([pool("p", "10.80.0.0/24")]));
    assert_eq!(addresses(&sb.add(&base, "c1")), ["10.80.0.2/24"]);
    assert_eq!(addresses(&sb.add(&base, "c2")), ["10.80.0.3/24"]);

    let gateway = network(&sb, json!([{"name": "p", "ranges": [{"subnet": "10.80.0.0/24", "gateway": "10.80.0.2"}]}]));
    let out = sb.add(&gateway, "c1");
    assert_eq!(addresses(&out), ["10.80.0.4/24"]);
    assert_eq!(out.result()["ips"][0]["gateway"], "10.80.0.2");

    let excluded =
        network(&sb, json!([{"name": "p", "ranges": [{"subnet": "10.80.0.0/24"}], "exclude": ["10.80.0.3"]}]));
    assert_eq!(addresses(&sb.add(&excluded, "c2")), ["10.80.0.5/24"]);
}

#[test]
fn a_failed_repeat_add_keeps_the_attachments_lease() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.82.0.0/24")]));
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.82.0.2/24"]);
    assert_eq!(addresses(&sb.add(&config, "c2")), ["10.82.0.3/24"]);

    let taken = sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IP=10.82.0.3")]);
    assert_error(&taken, 101, &["10.82.0.3"]);
    assert_eq!(stack::leases(&sb.db()), [lease("10.82.0.2", "c1", "eth0"), lease("10.82.0.3", "c2", "eth0")]);

    // What the failed ADD itself took is rolled back, and only that.
    let dual = network(&sb, json!([pool("p", "10.82.0.0/24"), pool("p6", "fd00:82::/64")]));
    let with_static = stack::with_static(&dual, &["10.82.0.3".parse().unwrap()]);
    let out = sb.add(&with_static, "c1");
    assert_error(&out, 101, &["10.82.0.3"]);
    assert_eq!(stack::leases(&sb.db()), [lease("10.82.0.2", "c1", "eth0"), lease("10.82.0.3", "c2", "eth0")]);

    // A transient failure: the lock is stuck past lockTimeout, then freed
    // while the rollback runs. The rollback must not take c1's lease.
    let quick = with_ipam(&config, "lockTimeout", json!(0.5));
    let holder = File::open(lock_file(&sb.db())).expect("lock file");
    fs2::FileExt::lock_exclusive(&holder).expect("flock");
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        drop(holder);
    });
    let out = sb.delegated("ADD", &stack::with_static(&quick, &["10.82.0.9".parse().unwrap()]), "c1", &[]);
    releaser.join().expect("releaser");
    assert_error(&out, 11, &["locked"]);
    assert_eq!(stack::leases(&sb.db()), [lease("10.82.0.2", "c1", "eth0"), lease("10.82.0.3", "c2", "eth0")]);
}

fn lock_file(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push(".lock");
    name.into()
}

#[test]
fn a_stack_that_runs_itself_is_error_7_at_once() {
    let sb = Sandbox::new();
    let direct = with_ipam(&network(&sb, json!([pool("p", "10.84.0.0/24")])), "delegates", json!(["ipam-delegated"]));
    let started = Instant::now();
    assert_error(&sb.add(&direct, "c1"), 7, &["ipam.delegates[0]", "ipam-delegated"]);

    // Through a wrapper: the depth carried in the environment ends it.
    let wrapper = sb.fakes_dir().join("wrapper");
    fs::write(&wrapper, format!("#!/bin/sh\nexec {} \"$@\"\n", suite_bin("ipam-delegated").display())).unwrap();
    fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let indirect = with_ipam(&direct, "delegates", json!(["wrapper"]));
    let out = sb.add(&indirect, "c1");
    assert_error(&out, 7, &["ipam.delegates", "nested"]);
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn a_renamed_pool_takes_over_its_subnet_once_the_old_one_holds_nothing() {
    let sb = Sandbox::new();
    let p = network(&sb, json!([pool("p", "10.85.0.0/24")]));
    assert_eq!(addresses(&sb.add(&p, "c1")), ["10.85.0.2/24"]);
    let q = network(&sb, json!([pool("q", "10.85.0.0/24")]));
    let out = sb.add(&q, "c2");
    assert_error(&out, 7, &["pool q", "pool p", "holds 1 lease", "forget-pool --network hard --pool p"]);

    let db = sb.db();
    let args = ["--database", db.to_str().unwrap(), "forget-pool", "--network", "hard", "--pool", "p"];
    let forgot = run_args(&suite_bin("ipam-delegated"), &args, &[], b"", None);
    assert_eq!(forgot.status, 0, "{forgot:#?}");
    assert!(forgot.stdout.contains("released 10.85.0.2") && forgot.stdout.contains("1 lease released"), "{forgot:#?}");
    assert_eq!(addresses(&sb.add(&q, "c2")), ["10.85.0.2/24"]);

    // Without leases the old registration gives way by itself.
    sb.delegated("DEL", &q, "c2", &[]).assert_quiet_success();
    let r = network(&sb, json!([pool("r", "10.85.0.0/23")]));
    assert_eq!(addresses(&sb.add(&r, "c3")), ["10.85.0.2/23"]);
}

#[test]
fn ten_thousand_pools_register_in_one_add() {
    let sb = Sandbox::new();
    let pools: Vec<Value> =
        (0..10_000).map(|i| pool(&format!("p{i}"), &format!("10.{}.{}.0/24", 100 + i / 256, i % 256))).collect();
    let config = network(&sb, Value::Array(pools));
    let started = Instant::now();
    let out = sb.add(&config, "c1");
    let first = started.elapsed();
    assert_eq!(addresses(&out), ["10.100.0.2/24"]);
    let started = Instant::now();
    assert_eq!(addresses(&sb.add(&config, "c2")), ["10.100.0.3/24"]);
    println!("first ADD registering 10,000 pools: {first:?}; the next ADD: {:?}", started.elapsed());
}

#[test]
fn a_stuck_lock_costs_the_call_one_deadline() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.86.0.0/24")]));
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.86.0.2/24"]);
    let holder = File::open(lock_file(&sb.db())).expect("lock file");
    fs2::FileExt::lock_exclusive(&holder).expect("flock");

    // ipam.timeout first: 105, saying the delegate was waiting for the lock.
    let short = with_ipam(&config, "timeout", json!(1.5));
    let started = Instant::now();
    let out = sb.add(&short, "c2");
    let took = started.elapsed();
    assert_error(&out, 105, &["waiting for the lock"]);
    assert!(took < Duration::from_secs(4), "took {took:?}");

    // lockTimeout first: 11 once, not once per delegate and rollback DEL.
    let locked = with_ipam(&config, "lockTimeout", json!(2));
    let started = Instant::now();
    let out = sb.add(&locked, "c2");
    let took = started.elapsed();
    assert_error(&out, 11, &["locked"]);
    assert!(took < Duration::from_millis(4500), "a stuck lock cost {took:?}, more than one lock timeout");
    drop(holder);
}

/// A DEL reaches every delegate, even after one hangs (issue 23): another
/// author's delegate, a real process that sleeps, hangs at DEL before the
/// suite's and after them. The call's deadline passes during the first hang,
/// yet the suite's delegates still run their DEL, each with time of its own,
/// and release the lease; both hanging ones are killed and named, with 105;
/// and the call ends within `ipam.timeout` plus a bounded time per delegate.
/// Both with the suite's delegates in this process and as processes.
#[test]
fn a_del_reaches_every_delegate_even_after_one_hangs() {
    const STACK: [&str; 5] = ["ipam-x-hang", "ipam-ds-pool", "ipam-da-static", "ipam-da-sequential", "ipam-x-hang2"];
    for suite in [bin_dir(), copies_dir()] {
        let sb = Sandbox::new();
        let empty = json!({"cniVersion": "1.0.0", "ips": []});
        for hang in ["ipam-x-hang", "ipam-x-hang2"] {
            sb.fake(hang);
            sb.respond(hang, "DEL", Response { sleep_secs: 30.0, ..Response::text("") });
        }
        // The stack's first delegate gives the selector a result to add to.
        sb.respond("ipam-x-hang", "ADD", Response::json(&empty));
        let mut config = with_ipam(&network(&sb, json!([pool("p", "10.87.0.0/24")])), "timeout", json!(1));
        config["ipam"]["delegates"] = json!(STACK);
        let path = format!("{}:{}", sb.fakes_dir().display(), suite.display());
        let env = [("CNI_PATH", path.as_str())];
        let added = sb.delegated("ADD", &config, "c1", &env);
        assert_eq!(addresses(&added), ["10.87.0.2/24"], "{}", suite.display());
        assert_eq!(stack::leases(&sb.db()), [lease("10.87.0.2", "c1", "eth0")]);

        let started = Instant::now();
        let out = sb.delegated("DEL", &support::with_prev(&config, added.result()), "c1", &env);
        let took = started.elapsed();
        assert_error(&out, 105, &["2 delegates failed DEL", "\"ipam-x-hang\"", "\"ipam-x-hang2\"", "killed"]);
        let (_, _, details) = out.error();
        for suites in &STACK[1..4] {
            assert!(!details.contains(&format!("{suites:?}:")), "{suites} did not fail: {details}");
        }
        let left = stack::leases(&sb.db());
        assert!(left.is_empty(), "a lease outlived the DEL ({}): {left:?}", suite.display());
        // ipam.timeout, then at most a second and the half second's grace per delegate.
        let bound = Duration::from_secs(1) + STACK.len() as u32 * Duration::from_millis(1500);
        assert!(took >= Duration::from_secs(1) && took < bound, "took {took:?}");
    }
}

#[test]
fn someone_elses_sqlite_file_is_error_103_and_left_as_it_was() {
    let sb = Sandbox::new();
    let foreign = sb.path().join("other.sqlite");
    let other = rusqlite::Connection::open(&foreign).unwrap();
    other.execute_batch("CREATE TABLE leases (mac TEXT); INSERT INTO leases VALUES ('aa');").unwrap();
    drop(other);
    let before = fs::read(&foreign).unwrap();
    let config = with_ipam(&network(&sb, json!([pool("p", "10.87.0.0/24")])), "database", json!(foreign));
    assert_error(&sb.add(&config, "c1"), 103, &["another application"]);
    assert_eq!(fs::read(&foreign).unwrap(), before);
    assert!(!sb.path().join("other.sqlite-wal").exists());
}

#[test]
fn a_lock_file_that_cannot_be_opened_is_named() {
    let sb = Sandbox::new();
    fs::create_dir_all(lock_file(&sb.db())).unwrap();
    let out = sb.add(&network(&sb, json!([pool("p", "10.88.0.0/24")])), "c1");
    assert_error(&out, 103, &[&format!("lock file {}", lock_file(&sb.db()).display())]);
}

#[test]
fn del_with_an_odd_prev_result_still_releases_and_succeeds() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.89.0.0/24")]));
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.89.0.2/24"]);
    for odd in [
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.89.0.2/24", "gateway": ""}]}),
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.89.0.2"}]}),
        json!("not a result"),
    ] {
        sb.delegated("DEL", &support::with_prev(&config, &odd), "c1", &[]).assert_quiet_success();
        assert!(stack::leases(&sb.db()).is_empty(), "{odd}");
        sb.add(&config, "c1");
    }
}

#[test]
fn octets_with_leading_zeros_are_refused_in_requests_too() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p", "10.90.0.0/24")]));
    assert_error(&sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IP=10.90.0.050")]), 7, &["CNI_ARGS IP", "050"]);
    assert_error(&sb.delegated("ADD", &config, "c1", &[("CNI_ARGS", "IP=010.90.0.5/24")]), 7, &["CNI_ARGS IP"]);
    let zero = network(&sb, json!([pool("p", "010.90.0.0/24")]));
    assert_error(&sb.add(&zero, "c1"), 7, &["010.90.0.0/24"]);
    assert!(stack::leases(&sb.db()).is_empty());
}

/// Runs an operator command of ipam-delegated on the sandbox's database.
fn operator(sb: &Sandbox, args: &[&str]) -> Outcome {
    let db = sb.db();
    let mut all = vec!["--database", db.to_str().unwrap_or_default()];
    all.extend_from_slice(args);
    run_args(&suite_bin("ipam-delegated"), &all, &[], b"", None)
}

#[test]
fn names_of_any_length_never_crash_the_operator_listing() {
    let sb = Sandbox::new();
    let long = "n".repeat(70_000);
    let config = stack::config("1.0.0", &long, "bridge", &sb.db(), json!([pool("p", "10.91.0.0/24")]));
    assert_eq!(addresses(&sb.add(&config, "c1")), ["10.91.0.2/24"]);
    for args in [&["list"][..], &["pools"], &["list", "--json"], &["pools", "--json"], &["check"]] {
        let out = operator(&sb, args);
        assert_eq!(out.status, 0, "{args:?}: {}", out.stderr);
    }
    let table = operator(&sb, &["list"]).stdout;
    assert!(table.contains(&format!("{}…", "n".repeat(71))) && table.len() < 1000, "{table}");
    assert_eq!(operator(&sb, &["list", "--json"]).json.expect("JSON")[0]["network"], json!(long));
}

#[test]
fn pool_sizes_beyond_2_to_the_53_are_exact_strings_in_json() {
    let sb = Sandbox::new();
    let config = network(&sb, json!([pool("p4", "10.92.0.0/24"), pool("p6", "fd00:92::/64")]));
    sb.add(&config, "c1");
    let pools = operator(&sb, &["pools", "--json"]).json.expect("JSON");
    let by_name = |name: &str| pools.as_array().and_then(|a| a.iter().find(|p| p["name"] == name)).cloned();
    let (p4, p6) = (by_name("p4").expect("p4"), by_name("p6").expect("p6"));
    assert_eq!((p4["size"].clone(), p4["used"].clone(), p4["free"].clone()), (json!(253), json!(1), json!(252)));
    // fd00:92::/64 minus the network address and the gateway.
    assert_eq!(p6["size"], json!("18446744073709551614"));
    assert_eq!(p6["free"], json!("18446744073709551613"));
    assert_eq!(p6["used"], json!(1));
}
