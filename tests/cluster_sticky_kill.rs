//! Sticky addresses across nodes (ipam-da-sticky with ipam-ds-cluster,
//! ipam-ds-cluster/src/node/sticky.rs), tried as etcd's own authors would:
//! kill -9 at any step of ADD and DEL while identities move between nodes,
//! a kill aimed between etcd's write and the node database's, a release
//! racing the node's other ADDs, an etcd member cut off from its quorum, and
//! a node whose wall clock is a day ahead. Real etcd that the test starts,
//! real `ipam-delegated` processes with the stack
//! `["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sticky",
//! "ipam-da-sequential"]`, pods named by CNI_ARGS K8S_POD_NAMESPACE and
//! K8S_POD_NAME as kubelet passes them.
//!
//! What is promised, and checked: no address is held by two attachments
//! across the nodes, etcd's identity keys and address records say where
//! each live identity is, and an identity keeps its address through any
//! kill (see [`storm`] for why every step keeps it).

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::sticky_storm::*;
use cluster_harness::*;
use ipam_ds_cluster::etcd::testing::TestEtcdCluster;
use serde_json::json;
use stack::ipv4_of;
use support::{Outcome, Rng};

#[test]
fn kill_storm_over_blocks_of_a_nodes_own() {
    // 8 blocks of 32, each node's own.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.55.0.0/24"}], "blockSize": 27}]), 30.0);
    c.share_blocks = Some("never");
    storm("kill_storm_over_blocks_of_a_nodes_own", c, &format!("sko-{}-", std::process::id()));
}

#[test]
fn kill_storm_over_shared_blocks() {
    // 8 blocks of 32: shared (the default, auto, on a pool this small).
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.56.0.0/24"}], "blockSize": 27}]), 30.0);
    storm("kill_storm_over_shared_blocks", c, &format!("sks-{}-", std::process::id()));
}

/// The kill the storm hits only by chance, aimed: an ADD taking a held
/// identity over on the node whose block holds its address, killed after
/// etcd committed the take-over and before the node database marked it
/// done (its row still `writing`). Then, before the runtime's DEL, the node
/// serves other pods: none may get the identity's address, which etcd now
/// records as this node's own (so its block no longer counts it taken);
/// after the DEL the identity lands on another node with its address, held
/// once.
///
/// Each try takes a fresh identity whose address lies in n1's block and
/// that was last released on n2, long enough ago that n1 holds nothing for
/// it (a node holds an identity's address in its own block for the hold
/// after releasing it there). Kills are aimed by bisection between "etcd
/// has not got it" and "the node database has it".
#[test]
fn a_take_over_killed_between_etcd_and_the_node_database() {
    let _took = Took::new("a_take_over_killed_between_etcd_and_the_node_database");
    const TRIES: usize = 40;
    // n1's block of 64; offlineGrace 5 s: a confirmation stands 0.5 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.51.0.0/24"}], "blockSize": 26}]), 5.0);
    c.share_blocks = Some("never");
    let tag = format!("tk-{}-", std::process::id());
    let ctr = |s: &str| format!("{tag}{s}");
    // Each x-i: on n1 (an address of n1's block), released there with a
    // hold of 1 s, taken over by n2 within it, released on n2 (held 600 s).
    let mut address = Vec::new();
    for i in 0..TRIES {
        let (name, first) = (format!("x-{i}"), ctr(&format!("x-{i}-n1")));
        address.push(added(&done(&c, "ADD", "n1", &first, &name), "x on n1"));
        call(&c, "DEL", "n1", &first, Some(&name), 1, &[]).assert_quiet_success();
        let on_n2 = ctr(&format!("x-{i}-n2"));
        assert_eq!(added(&done(&c, "ADD", "n2", &on_n2, &name), "x on n2"), address[i]);
        done(&c, "DEL", "n2", &on_n2, &name);
    }
    // n1's holds of 1 s end (its next ADD drops them).
    thread::sleep(Duration::from_millis(2100));
    added(&call(&c, "ADD", "n1", &ctr("plain"), None, HOLD, &[]), "a pod without identity on n1");
    let holds_on_n1 = support::list_leases(&c.db("n1")).to_string();
    assert!(!holds_on_n1.contains("\"held\""), "n1 still holds addresses: {holds_on_n1}");
    // How long an undisturbed take-over on n1 takes.
    let t = Instant::now();
    done(&c, "ADD", "n1", &ctr("x-0-measure"), "x-0");
    let whole = t.elapsed();
    let row_state = |container: &str, a: IpAddr| -> Option<String> {
        c.node_records("n1").into_iter().find(|r| r[3] == container && r[1] == a.to_string()).map(|r| r[4].clone())
    };
    let mut rng = Rng::new(0x7a4e);
    let (mut lo, mut hi) = (Duration::ZERO, whole);
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut hit = None;
    for (i, &a) in address.iter().enumerate().skip(1) {
        let (name, victim) = (format!("x-{i}"), ctr(&format!("x-{i}-try")));
        let d = lo + hi.saturating_sub(lo).mul_f64(rng.below(1001) as f64 / 1000.0);
        let fate = killable(&c, "ADD", "n1", &victim, &name, Some(d));
        let key = identity_key(&c, &name).expect("x's key");
        let taken_over = key.until == 0 && key.container == victim;
        let class = match (&fate, taken_over, row_state(&victim, a).as_deref()) {
            (Fate::Done(_), _, _) => "finished",
            (_, false, _) => "before etcd",
            (_, true, Some("writing")) => "between",
            (_, true, _) => "after",
        };
        *tally.entry(class).or_default() += 1;
        match class {
            "before etcd" => lo = d,
            "between" => {
                hit = Some((name, victim, a));
                break;
            }
            _ => hi = d,
        }
        // Timing varies: widen a window that closed.
        if hi <= lo + Duration::from_micros(300) {
            lo = lo.saturating_sub(Duration::from_micros(700));
            hi += Duration::from_micros(700);
        }
    }
    let Some((name, victim, a)) = hit else {
        panic!(
            "no kill landed between etcd's write and the node database's in {TRIES} tries (kills: {tally:?}, \
             window {lo:?}..{hi:?} of an ADD of {whole:?})"
        )
    };
    eprintln!("take-over of {whole:?}; kills: {tally:?}; the hit at {lo:?}..{hi:?}");
    // Past the block's confirmation (0.5 s): the next ADDs read etcd,
    // where the address is this node's record, not another's.
    thread::sleep(Duration::from_millis(800));
    let others: Vec<IpAddr> = (0..3)
        .map(|i| added(&done(&c, "ADD", "n1", &ctr(&format!("p-{i}")), &format!("p-{i}")), "another pod on n1"))
        .collect();
    assert!(!others.contains(&a), "n1 handed out {a} to another pod while etcd records it as {name}'s: {others:?}");
    // The runtime's DEL of the killed ADD; the identity lands on n2 with its address.
    done(&c, "DEL", "n1", &victim, &name);
    let moved = added(&done(&c, "ADD", "n2", &ctr(&format!("{name}-back")), &name), "x on n2");
    assert_none_twice(&c, &["n1", "n2"], "after the identity moved to n2");
    assert_eq!(moved, a, "{name} kept its address through the kill");
    assert_no_leftovers(&tag);
}

/// A DEL of an identity on its node while the node serves other pods: an
/// ADD whose view of the node's block was read before the DEL must not
/// lease the address the DEL has made the identity's hold in etcd. No kill
/// needed: the ADDs start spread over the DEL's run, round after round.
#[test]
fn a_release_racing_adds_on_its_node_keeps_the_address_the_identity_s() {
    let _took = Took::new("a_release_racing_adds_on_its_node_keeps_the_address_the_identity_s");
    // offlineGrace 0: every ADD reads etcd (no confirmation stands), as an
    // ADD does on a node whose last confirmation has aged.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.52.0.0/24"}], "blockSize": 26}]), 0.0);
    c.share_blocks = Some("never");
    const ADDS: usize = 6;
    let tag = format!("rr-{}-", std::process::id());
    let ctr = |s: &str| format!("{tag}{s}");
    let a = added(&done(&c, "ADD", "n1", &ctr("x-0"), "x"), "x's first ADD");
    let t = Instant::now();
    done(&c, "DEL", "n1", &ctr("x-0"), "x");
    let del_takes = t.elapsed();
    added(&done(&c, "ADD", "n1", &ctr("x-1"), "x"), "x back");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut rounds = 0;
    for round in 1.. {
        if Instant::now() >= deadline && rounds >= 5 {
            break;
        }
        rounds += 1;
        let got: Vec<(String, IpAddr)> = thread::scope(|s| {
            let adds: Vec<_> = (0..ADDS)
                .map(|j| {
                    let (c, name) = (&c, format!("p-{round}-{j}"));
                    let container = ctr(&name);
                    let start = del_takes.mul_f64(0.8 * j as f64 / ADDS as f64);
                    s.spawn(move || {
                        thread::sleep(start);
                        let ip = added(&done(c, "ADD", "n1", &container, &name), "another pod on n1");
                        (name, ip)
                    })
                })
                .collect();
            done(&c, "DEL", "n1", &ctr(&format!("x-{round}")), "x");
            adds.into_iter().map(|h| h.join().unwrap()).collect()
        });
        if let Some((name, _)) = got.iter().find(|(_, ip)| *ip == a) {
            // What that leads to: x lands on n2 with its held address.
            let moved = added(&done(&c, "ADD", "n2", &ctr("x-n2"), "x"), "x on n2");
            let (_, twice) = held_by(&c, &["n1", "n2"]);
            panic!(
                "round {round}: pod {name} on n1 got {a} while x's DEL made it x's hold in etcd; x then got {moved} \
                 on n2; held twice: {twice:?}"
            );
        }
        // The other pods go for good (hold 0), so that the block does not fill.
        for (name, _) in &got {
            call(&c, "DEL", "n1", &ctr(name), Some(name), 0, &[]).assert_quiet_success();
        }
        assert_none_twice(&c, &["n1"], &format!("round {round}"));
        let again = added(&done(&c, "ADD", "n1", &ctr(&format!("x-{}", round + 1)), "x"), "x back on n1");
        assert_eq!(again, a, "round {round}: x back on n1");
    }
    eprintln!("{rounds} rounds of a DEL of x ({del_takes:?}) racing {ADDS} ADDs on its node");
    assert_no_leftovers(&tag);
}

/// After a release in its own block a node holds the identity's address
/// for a while (see above), also once another node took the identity over:
/// its confirming reads, which see that node's record for the address,
/// must not log it as held twice (what operators look for after an etcd
/// disaster).
#[test]
fn a_node_s_hold_of_an_identity_live_elsewhere_is_not_an_address_held_twice() {
    let _took = Took::new("a_node_s_hold_of_an_identity_live_elsewhere_is_not_an_address_held_twice");
    // offlineGrace 5 s: a confirmation stands 0.5 s, and is written down
    // again once it is a second old.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.59.0.0/24"}], "blockSize": 27}]), 5.0);
    c.share_blocks = Some("never");
    let a = added(&done(&c, "ADD", "n1", "x-1", "x"), "x on n1");
    done(&c, "DEL", "n1", "x-1", "x");
    assert_eq!(added(&done(&c, "ADD", "n2", "x-2", "x"), "x on n2"), a);
    for i in 0..2 {
        thread::sleep(Duration::from_millis(1200));
        let out = call(&c, "ADD", "n1", &format!("plain-{i}"), None, HOLD, &[]);
        assert_ne!(added(&out, "a pod on n1"), a);
        assert!(!out.stderr.contains("held twice"), "n1 ADD plain-{i}: {}", brief(&out));
    }
    assert_none_twice(&c, &["n1", "n2"], "x on n2");
}

// ---------------------------------------------------------------------------
// 2. An etcd member cut off from its quorum

#[test]
#[ignore = "needs root and iptables (a member cut off by firewall rules): run by scripts/test"]
fn a_node_behind_a_cut_off_member_cannot_take_an_identity_over() {
    let _took = Took::new("a_node_behind_a_cut_off_member_cannot_take_an_identity_over");
    let pools = json!([{"name": "blue", "ranges": [{"subnet": "10.57.0.0/24"}], "blockSize": 27}]);
    let mut c = Cluster::over(TestEtcdCluster::start(3), pools, 30.0);
    // Blocks of each node's own: n1 still serves pods without identity
    // from its block while its member is cut off (offlineGrace 30 s).
    c.share_blocks = Some("never");
    c.set_endpoints("n1", vec![c.store.endpoint(0)]);
    c.set_endpoints("n2", vec![c.store.endpoint(1)]);
    let add_within = |node: &str, container: &str, name: Option<&str>| -> Outcome {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = call(&c, "ADD", node, container, name, HOLD, &[]);
            if out.status == 0 || Instant::now() >= deadline {
                return out;
            }
            thread::sleep(Duration::from_millis(200));
        }
    };
    // db-0 ran on n1 (its address in n1's block) and went: held in etcd.
    let a = added(&add_within("n1", "db-a", Some("db-0")), "db-0 on n1");
    added(&add_within("n1", "plain-0", None), "a pod without identity on n1");
    call(&c, "DEL", "n1", "db-a", Some("db-0"), HOLD, &[]).assert_quiet_success();
    assert!(identity_key(&c, "db-0").is_some_and(|k| k.until > 0), "db-0 is held: {:?}", identity_keys(&c));

    c.store.partition(0);
    // n1, behind member 0, cannot take db-0 over: the claim is a write.
    let msg = assert_code(&call(&c, "ADD", "n1", "db-b", Some("db-0"), HOLD, &[]), 11, "db-0 on n1 behind member 0");
    assert!(msg.contains("etcd"), "{msg}");
    assert!(c.attached("n1").iter().all(|l| l.container_id != "db-b"), "n1 leased to db-b: {:?}", c.attached("n1"));
    // On the majority side, n2 takes it over, with its address.
    let moved = added(&add_within("n2", "db-c", Some("db-0")), "db-0 on n2, through member 1");
    assert_eq!(moved, a, "db-0 kept its address on n2");
    // n1 serves pods without identity from its block, offline (confirmed
    // within offlineGrace), until the block is full: never db-0's address.
    let mut served = Vec::new();
    for i in 1..=32 {
        let out = call(&c, "ADD", "n1", &format!("plain-{i}"), None, HOLD, &[]);
        if out.status != 0 {
            assert_code(&out, 11, "a pod without identity on n1, cut off, its block full");
            break;
        }
        served.push(ipv4_of(out.result()));
    }
    assert!(!served.is_empty(), "n1 served nothing from its block while cut off");
    assert!(!served.contains(&a), "n1, cut off, handed out db-0's address {a}, live on n2: {served:?}");
    // Tried again while cut off: still 11, and nothing leased.
    assert_code(&call(&c, "ADD", "n1", "db-b", Some("db-0"), HOLD, &[]), 11, "db-0 on n1 again");
    assert_none_twice(&c, &["n1", "n2"], "while member 0 is cut off");

    c.store.heal(0);
    // Healed: n1 sees db-0 live on n2 (101 naming it), once member 0 has a
    // leader again (11 until then).
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = call(&c, "ADD", "n1", "db-d", Some("db-0"), HOLD, &[]);
        if out.status == 0 || failure(&out).0 != 11 || Instant::now() >= deadline {
            break out;
        }
        thread::sleep(Duration::from_millis(200));
    };
    let msg = assert_code(&out, 101, "db-0 on n1 after the heal");
    assert!(msg.contains("node n2") && msg.contains("db-c"), "101 names n2 and its container: {msg}");
    let key = identity_key(&c, "db-0").expect("db-0's key");
    assert_eq!(
        key,
        Key { node: "n2".into(), container: "db-c".into(), addresses: vec![a], until: 0 },
        "no write of n1's cut-off attempts landed after the heal"
    );
    assert!(c.attached("n1").iter().all(|l| l.address != a), "n1 leases db-0's address: {:?}", c.attached("n1"));
    assert_none_twice(&c, &["n1", "n2"], "after the heal");
    eprintln!("member 0 cut off: n1 served {} pods without identity from its block, never {a}", served.len());
}

// ---------------------------------------------------------------------------
// 3. A node whose wall clock is a day ahead

/// Debian's libfaketime (package faketime): a process that believes the
/// wall clock reads something else.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The variables that put a call a day ahead.
const DAY_AHEAD: [(&str, &str); 2] = [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", "+1d")];

/// Waits until etcd no longer has `name`'s key: how long after `since`.
fn hold_ended<E: Etcd>(c: &Cluster<E>, name: &str, since: Instant, within: Duration) -> Duration {
    while identity_key(c, name).is_some() {
        assert!(since.elapsed() < within, "{name}'s hold still stands {:?} after its DEL", since.elapsed());
        thread::sleep(Duration::from_millis(100));
    }
    since.elapsed()
}

#[test]
fn a_node_a_day_ahead_holds_and_takes_over_by_etcd_s_lease() {
    let _took = Took::new("a_node_a_day_ahead_holds_and_takes_over_by_etcd_s_lease");
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (the test needs a process whose clock is a day ahead)"
    );
    // One block of four addresses, n1's (the node a day ahead); holds of 3 s.
    const HOLD_SECS: u64 = 3;
    let mut c = Cluster::new(
        json!([{"name": "blue", "ranges": [{"subnet": "10.58.0.0/24", "rangeStart": "10.58.0.2", "rangeEnd": "10.58.0.5"}], "blockSize": 28}]),
        30.0,
    );
    c.share_blocks = Some("never");
    let ahead = |command: &str, container: &str, name: Option<&str>| {
        call(&c, command, "n1", container, name, HOLD_SECS, &DAY_AHEAD)
    };
    let on_n2 =
        |command: &str, container: &str, name: Option<&str>| call(&c, command, "n2", container, name, HOLD_SECS, &[]);
    let both = ["n1", "n2"];

    // x on n1, released there: the hold's end as n1's clock reads it is a
    // day ahead, and etcd's lease ends it all the same.
    let a = added(&ahead("ADD", "x-1", Some("x")), "x on n1");
    ahead("DEL", "x-1", Some("x")).assert_quiet_success();
    let key = identity_key(&c, "x").expect("x is held");
    assert!(key.until > now_unix() + 20 * 3600, "n1's clock is a day ahead: {key:?}");
    // n2, on time, takes it over within the hold.
    assert_eq!(added(&on_n2("ADD", "x-2", Some("x")), "x on n2"), a, "x kept its address across the clocks");
    assert_none_twice(&c, &both, "x on n2");
    // y on n1 too (n1's block), moved to n2 and released there on time.
    let b = added(&ahead("ADD", "y-1", Some("y")), "y on n1");
    ahead("DEL", "y-1", Some("y")).assert_quiet_success();
    assert_eq!(added(&on_n2("ADD", "y-2", Some("y")), "y on n2"), b);
    on_n2("DEL", "y-2", Some("y")).assert_quiet_success();
    let y_released = Instant::now();
    // n1 fills its block: its clock is a day past y's hold, which must
    // not end by it (nor x's, live on n2).
    let mut filled = Vec::new();
    for i in 0..4 {
        let out = ahead("ADD", &format!("fill-{i}"), None);
        // n1 still holds x's and y's addresses for a moment (it released
        // them last): holds, which are no attachment's, not held twice.
        assert!(!out.stderr.contains("held twice"), "n1 fill-{i}: {}", brief(&out));
        if out.status != 0 {
            assert_code(&out, 100, "n1 filling its block");
            break;
        }
        filled.push(ipv4_of(out.result()));
    }
    assert!(y_released.elapsed() < Duration::from_secs(HOLD_SECS), "filling took too long to say anything");
    assert!(!filled.contains(&a) && !filled.contains(&b), "n1 handed out x's or y's address: {filled:?} ({a}, {b})");
    assert_eq!(filled.len(), 2, "n1 got the two addresses neither x nor y holds: {filled:?}");
    assert_none_twice(&c, &both, "n1 filled its block");
    // y's hold ends when etcd's lease does: not before, not a day later.
    let took = hold_ended(&c, "y", y_released, Duration::from_secs(HOLD_SECS + 5));
    assert!(took >= Duration::from_secs(HOLD_SECS - 1), "y's hold ended after {took:?} of {HOLD_SECS} s");
    assert_eq!(added(&ahead("ADD", "fill-y", None), "n1 once y's hold ended"), b);
    assert_none_twice(&c, &both, "y's address reused");

    // x goes from n2 back to n1 (a day ahead), which releases it: its hold
    // ends with etcd's lease, although n1 stamps it a day ahead.
    on_n2("DEL", "x-2", Some("x")).assert_quiet_success();
    assert_eq!(added(&ahead("ADD", "x-3", Some("x")), "x back on n1"), a);
    ahead("DEL", "x-3", Some("x")).assert_quiet_success();
    let x_released = Instant::now();
    assert_code(&ahead("ADD", "fill-x0", None), 100, "n1 while x's address is held");
    let took = hold_ended(&c, "x", x_released, Duration::from_secs(HOLD_SECS + 5));
    assert!(took >= Duration::from_secs(HOLD_SECS - 1), "x's hold ended after {took:?} of {HOLD_SECS} s");
    assert!(c.addrs().is_empty(), "records left after the holds ended: {:?}", c.addrs());
    // And n1 hands x's address out again, once.
    thread::sleep(Duration::from_millis(1100));
    assert_eq!(added(&ahead("ADD", "fill-x1", None), "n1 once x's hold ended"), a);
    assert_none_twice(&c, &both, "at the end");
}
