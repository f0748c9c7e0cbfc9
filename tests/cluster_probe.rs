//! Cluster mode where issue 35's probe did not reach, tried on a real etcd
//! as an adversarial tester would, every call a real `ipam-delegated`
//! process of a node (a node name with a database of its own):
//!
//! 1. the confirmation of a node's blocks of its own (its cache, 2 s at
//!    most, and offlineGrace, which count from it) under a wall clock that
//!    jumps, kill -9 in the middle of confirming, and an etcd restart within
//!    the cache's window while other nodes lend, borrow and take over;
//! 2. a 3-member etcd with the member of two nodes cut off from the others
//!    while shared blocks, blocks of a node's own and held identities exist;
//! 3. GC giving a shared block back while another node holds grants in it.
//!
//! What every test asserts in the end: no address on two live attachments
//! across the nodes, and no confirmation used past what it proves (a node
//! cut off from etcd allocates only in blocks of its own a quorum confirmed
//! within offlineGrace, as the boot-time clock counts it).

mod cluster_harness;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::*;
use ipam_ds_cluster::etcd::testing::{TestEtcd, TestEtcdCluster};
use serde_json::{json, Value};
use stack::ipv4_of;
use support::{bin_dir, run_killable, Outcome, Rng, CLUSTER_STICKY_STACK};

/// Debian's libfaketime (package faketime).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How long one call may take while its etcd does not answer: the etcd
/// timeout (1 s) a few times.
const OFFLINE_BOUND: Duration = Duration::from_secs(5);

fn assert_libfaketime() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (the test moves a call's wall clock)"
    );
}

/// The variables that move a call's wall clock (CLOCK_REALTIME) by
/// `offset` (libfaketime's "+1d", "-7s"), as NTP, an administrator or a VM
/// restore moves a host's: its boot-time clock (CLOCK_BOOTTIME), which no
/// one can set, is left as it is.
fn wall_clock(offset: &str) -> [(&'static str, String); 3] {
    [
        ("LD_PRELOAD", LIBFAKETIME.to_string()),
        ("FAKETIME", offset.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ]
}

/// `command` of `container` with `config`, and the variables `extra`.
fn call<E: Etcd>(c: &Cluster<E>, command: &str, container: &str, config: &Value, extra: &[(&str, String)]) -> Outcome {
    let env: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    c.run(command, container, config, &env)
}

/// The code of a failed run, with its message; asserts it failed.
fn failed(out: &Outcome, what: &str) -> (u64, String) {
    assert_ne!(out.status, 0, "{what} succeeded: {}", brief(out));
    failure(out)
}

/// etcd's count of the requests that read or write keys (Range and Txn).
fn key_requests(etcd: &TestEtcd) -> u64 {
    let handled = etcd.handled();
    handled["Range"] + handled["Txn"]
}

/// ADD of `container` with `config` and `extra`, and how many key requests
/// etcd handled meanwhile (the test's own reads are not made meanwhile).
fn add_counting(c: &Cluster, container: &str, config: &Value, extra: &[(&str, String)]) -> (IpAddr, u64) {
    let before = key_requests(&c.store);
    let out = call(c, "ADD", container, config, extra);
    let requests = key_requests(&c.store) - before;
    (added(&out, &format!("ADD {container}")), requests)
}

/// `command` of `container` with `config`, its process group SIGKILLed
/// `kill_after` the spawn when given: `None` when it was killed.
fn killable(
    c: &Cluster,
    command: &str,
    container: &str,
    config: &Value,
    kill_after: Option<Duration>,
) -> Option<Outcome> {
    let bin = bin_dir().display().to_string();
    let env = [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", container),
        ("CNI_NETNS", NETNS_PATH),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", bin.as_str()),
    ];
    run_killable(env, c.dir.path(), config.to_string().as_bytes(), kill_after)
}

// ---------------------------------------------------------------------------
// 1. The confirmation of a node's blocks of its own

/// The cache lets an ADD skip the confirming read for 2 s after one (a
/// tenth of offlineGrace, at most 2 s). It is counted on the boot-time
/// clock: a wall clock a day ahead does not void it, and a wall clock set
/// back after it does not stretch it.
///
/// What would break it: a confirmation timed by the wall clock. The ADD
/// 2.5 s after the confirmation, its wall clock set back 2.3 s, would then
/// find the confirmation 0.2 s old and make no request (the assertion that
/// it made one fails); the ADD a day ahead would find it a day old and read
/// (the assertion that it made none, which also shows that the counting
/// sees the cache at work, fails).
#[test]
fn the_confirmation_cache_counts_on_the_boot_clock_whatever_the_wall_clock_does() {
    let _took = Took::new("the_confirmation_cache_counts_on_the_boot_clock_whatever_the_wall_clock_does");
    assert_libfaketime();
    // offlineGrace 30 s: the cache is 2 s. Blocks of the node's own (the
    // cache is theirs: a shared block is confirmed by each grant).
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.60.0.0/24"}], "blockSize": 26}]), 30.0);
    c.share_blocks = Some("never");
    let config = c.config("n1");
    // The claim confirms the block.
    let (first, _) = add_counting(&c, "c0", &config, &[]);
    let confirmed = Instant::now();
    let (ahead, requests) = add_counting(&c, "c1", &config, &wall_clock("+1d"));
    assert!(confirmed.elapsed() < Duration::from_millis(1500), "the machine is too slow for this test");
    assert_eq!(requests, 0, "an ADD 0.x s after a confirmation, its wall clock a day ahead, read etcd");
    thread::sleep(Duration::from_millis(2500).saturating_sub(confirmed.elapsed()));
    let set_back = format!("-{:.1}s", confirmed.elapsed().as_secs_f64() - 0.2);
    let (back, requests) = add_counting(&c, "c2", &config, &wall_clock(&set_back));
    assert!(
        requests >= 1,
        "an ADD {:.1?} after the last confirmation, its wall clock set back {set_back}, used the 2 s cache",
        confirmed.elapsed()
    );
    let got: BTreeSet<IpAddr> = [first, ahead, back].into();
    assert_eq!(got.len(), 3, "three ADDs, three addresses: {got:?}");
    held_once(&c, &["n1"]);
}

/// offlineGrace counts from the last confirmation by the same clock, and
/// there a confirmation used past what it proves hands out another node's
/// addresses: the operator releases n1, n2 claims its former block once the
/// tombstone (offlineGrace + 3 × ipam.timeout) is gone, and n1, etcd out of
/// reach and its wall clock set back to a second after its last
/// confirmation, must not allocate in the block it lost.
///
/// What would break it: offlineGrace timed by the wall clock (n1's offline
/// ADD would find its confirmation a second old and hand out an address n2
/// holds, or would lease one in n2's block: `held_once` fails), or a
/// confirmation voided by a wall clock ahead (the first offline ADD fails).
#[test]
fn a_wall_clock_set_back_does_not_stretch_offline_grace() {
    let _took = Took::new("a_wall_clock_set_back_does_not_stretch_offline_grace");
    assert_libfaketime();
    // One block of 16; offlineGrace 3 s and ipam.timeout 1 s: the block is
    // claimable 3 + 3 × 1 s after release-node.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.62.0.0/28"}], "blockSize": 28}]), 3.0);
    c.share_blocks = Some("never");
    c.call_timeout = 1;
    let config = c.config("n1");
    added(&call(&c, "ADD", "c1", &config, &[]), "n1's first ADD");
    let confirmed = Instant::now();
    // Offline within offlineGrace, the wall clock a day ahead: served from
    // the block (the wall clock does not void the confirmation either).
    c.store.kill();
    let out = call(&c, "ADD", "c2", &config, &wall_clock("+1d"));
    let within = confirmed.elapsed();
    c.store.restart();
    assert!(within < Duration::from_millis(2500), "the machine is too slow for this test ({within:?})");
    added(&out, "n1's ADD with etcd stopped, 1 s after its confirmation, its wall clock a day ahead");
    for container in ["c1", "c2"] {
        call(&c, "DEL", container, &config, &[]).assert_quiet_success();
    }
    release_node(&c, "n1", "op");
    let n2: BTreeSet<IpAddr> = (0..3)
        .map(|i| added(&c.add_within("n2", &format!("n2-{i}"), Duration::from_secs(20)), "n2 in n1's former block"))
        .collect();
    // n1, etcd stopped, its wall clock set back to a second after its
    // last confirmation (and then right again).
    let set_back = format!("-{}s", confirmed.elapsed().as_secs().saturating_sub(1));
    c.store.kill();
    let outs =
        [call(&c, "ADD", "offline-0", &config, &wall_clock(&set_back)), call(&c, "ADD", "offline-1", &config, &[])];
    c.store.restart();
    for (i, out) in outs.iter().enumerate() {
        let (code, msg) =
            failed(out, &format!("n1's offline ADD {i} {:.1?} after its last confirmation", confirmed.elapsed()));
        assert_eq!(code, 11, "n1's offline ADD {i} (wall clock set back {set_back}): {msg}");
    }
    held_once(&c, &["n1", "n2"]);
    assert!(c.attached("n1").is_empty(), "n1 leased nothing: {:?} (n2 holds {n2:?})", c.attached("n1"));
}

/// kill -9 of ADDs in the middle of confirming, on a node whose block was
/// released by the operator and claimed by another node: the ADD is killed
/// while etcd (paused) owes it the confirming read, then at random moments
/// while etcd answers. A killed confirmation confirms nothing: the node's
/// next ADD with etcd paused finds its last confirmation past offlineGrace
/// (11), and once etcd answers, the node learns the block is lost and
/// allocates in another.
///
/// What would break it: a confirmation time written before etcd answered
/// (the ADD with etcd paused would hand out an address of the lost block,
/// which n2 holds), or a lost block kept by a kill between the read and its
/// write-down (a later ADD would allocate in it): the assertions on n1's
/// addresses and `held_once` fail.
#[test]
fn an_add_killed_while_confirming_confirms_nothing() {
    let _took = Took::new("an_add_killed_while_confirming_confirms_nothing");
    // Two blocks of 16; offlineGrace 2 s, ipam.timeout 1 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.63.0.0/27"}], "blockSize": 28}]), 2.0);
    c.share_blocks = Some("never");
    c.call_timeout = 1;
    let config = c.config("n1");
    added(&call(&c, "ADD", "c0", &config, &[]), "n1's first ADD");
    call(&c, "DEL", "c0", &config, &[]).assert_quiet_success();
    let lost = c.blocks_of("n1");
    assert_eq!(lost.len(), 1, "n1 owns one block: {:?}", c.blocks());
    let lost = lost[0];
    // The node that takes over tries that block first.
    let n2 = (0..500)
        .map(|i| format!("n2-{i}"))
        .find(|name| claim_order(&c, name).first() == Some(&lost))
        .expect("a node name whose first block is n1's");
    release_node(&c, "n1", "op");
    // Once the tombstone is gone (offlineGrace + 3 × ipam.timeout).
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.blocks().iter().any(|b| b.released) {
        assert!(Instant::now() < deadline, "released blocks stay: {:?}", c.blocks());
        thread::sleep(Duration::from_millis(200));
    }
    let n2_got: BTreeSet<IpAddr> = (0..4)
        .map(|i| added(&c.add_within(&n2, &format!("n2-{i}"), Duration::from_secs(20)), "n2 in n1's former block"))
        .collect();
    assert_eq!(c.blocks_of(&n2), vec![lost], "{n2} claimed n1's former block: {:?}", c.blocks());

    // etcd paused: the ADD waits for its confirming read (etcd.timeout 1 s)
    // and is killed meanwhile.
    c.store.pause();
    let killed = killable(&c, "ADD", "killed-paused", &config, Some(Duration::from_millis(500)));
    assert!(killed.is_none(), "the ADD with etcd paused ended before the kill: {killed:?}");
    let out = call(&c, "ADD", "paused", &config, &[]);
    c.store.resume();
    let (code, msg) = failed(&out, "n1's ADD with etcd paused, after a killed confirmation");
    assert_eq!(code, 11, "n1's ADD with etcd paused, its last confirmation past offlineGrace: {msg}");

    // etcd answering: kills at random moments of the ADD, confirming read
    // and what it writes down included.
    let mut rng = Rng::new(35);
    let mut n1_got = Vec::new();
    for i in 0..10 {
        let delay = Duration::from_millis(5 + rng.below(60));
        if let Some(out) = killable(&c, "ADD", &format!("killed-{i}"), &config, Some(delay)) {
            n1_got.push(added(&out, &format!("n1's ADD killed-{i}, not killed after all")));
        }
    }
    for i in 0..3 {
        n1_got.push(added(&call(&c, "ADD", &format!("after-{i}"), &config, &[]), "n1's ADD after the kills"));
    }
    let twice: Vec<&IpAddr> = n1_got.iter().filter(|a| n2_got.contains(a) || lost.contains(**a)).collect();
    assert!(twice.is_empty(), "n1 allocated {twice:?} in its lost block {lost} ({n2} holds {n2_got:?})");
    held_once(&c, &["n1", &n2]);
    let n1_blocks: Vec<Net4> = c.node_blocks("n1").into_iter().map(|(b, _)| b).collect();
    assert!(!n1_blocks.contains(&lost), "n1 still lists its lost block {lost}: {n1_blocks:?}");
}

/// An etcd restart (same data) within the cache's window while the other
/// node borrows what n1 lent and n1 goes on allocating: every address of
/// the pool ends up once, n1 keeps off what it lent, and nothing is lost.
///
/// What would break it: a cached view that forgets lent addresses (n1
/// would hand out one n2 borrowed), an ADD during the restart served from
/// outside what was confirmed, or lent addresses stranded by the restart
/// (n1 could not fill the pool): `held_once` and the count fail.
#[test]
fn an_etcd_restart_within_the_cache_while_another_node_borrows() {
    let _took = Took::new("an_etcd_restart_within_the_cache_while_another_node_borrows");
    // Two blocks of 16 (.0, the gateway .1 and .31 are not handed out: 29
    // addresses);
    // offlineGrace 20 s: the cache is 2 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.64.0.0/27"}], "blockSize": 28}]), 20.0);
    c.share_blocks = Some("never");
    let n1 = c.config("n1");
    let mut n1_got = vec![added(&call(&c, "ADD", "a-0", &n1, &[]), "n1's first ADD")];
    // n2 fills the other block, and asks for more (100: nobody lent yet).
    let mut n2_got = Vec::new();
    let full = loop {
        let out = c.add("n2", &format!("b-{}", n2_got.len()));
        if out.status != 0 {
            break out;
        }
        n2_got.push(ipv4_of(out.result()));
    };
    assert_eq!(failed(&full, "n2 past its block").0, 100, "{}", brief(&full));
    assert_eq!(n2_got.len(), 15, "n2 filled its block: {n2_got:?}");
    // n1 confirms (past the cache of its first ADD) and lends.
    thread::sleep(Duration::from_millis(2100));
    n1_got.push(added(&call(&c, "ADD", "a-1", &n1, &[]), "n1's confirming ADD"));
    let confirmed = Instant::now();
    let lent = lent_holds(&c, &["n1"]);
    assert!(!lent.is_empty(), "n1 lent nothing to n2, which found no room");
    // etcd restarts: n1 allocates meanwhile (cache, then offlineGrace).
    c.store.kill();
    n1_got.push(added(&call(&c, "ADD", "a-2", &n1, &[]), "n1's ADD with etcd stopped"));
    c.store.restart();
    // n2 borrows, n1 allocates, as soon as etcd is back.
    for i in 0..3 {
        n2_got.push(added(&c.add("n2", &format!("borrow-{i}")), "n2 borrowing"));
        n1_got.push(added(&call(&c, "ADD", &format!("a-{}", n1_got.len()), &n1, &[]), "n1 after the restart"));
    }
    let window = confirmed.elapsed();
    // n1 fills what is left of the pool (its own, and what it lent and
    // nobody borrowed, taken back).
    loop {
        let out = call(&c, "ADD", &format!("a-{}", n1_got.len()), &n1, &[]);
        if out.status != 0 {
            assert_eq!(failed(&out, "n1 filling the pool").0, 100, "{}", brief(&out));
            break;
        }
        n1_got.push(ipv4_of(out.result()));
        assert!(n1_got.len() <= 29, "n1 got more addresses than the pool has: {n1_got:?}");
    }
    held_once(&c, &["n1", "n2"]);
    let all: BTreeSet<IpAddr> = n1_got.iter().chain(&n2_got).copied().collect();
    assert_eq!(all.len(), n1_got.len() + n2_got.len(), "an address twice: n1 {n1_got:?}, n2 {n2_got:?}");
    assert_eq!(all.len(), 29, "every address of the pool handed out once: n1 {n1_got:?}, n2 {n2_got:?}");
    eprintln!("etcd restart: n1's 3 ADDs after it within {window:.2?} of its confirmation; lent {}", lent.len());
}

// ---------------------------------------------------------------------------
// 2. A member cut off from its quorum, with shared blocks, blocks of a
//    node's own and held identities

/// Every identity key of network cnet: pod name → (node, container,
/// addresses, held).
fn identities<E: Etcd>(c: &Cluster<E>) -> Vec<(String, String, String, Vec<IpAddr>, bool)> {
    const KEYS: &str = "/ipam-delegated/v1/cnet/_sticky/eth0/prod/";
    c.store
        .dump(KEYS)
        .into_iter()
        .map(|(k, v)| {
            let r: Value = serde_json::from_str(&v).unwrap_or_else(|e| panic!("identity key {k}: {e}: {v}"));
            let addresses = r["addresses"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
                .unwrap_or_default();
            let text = |f: &str| r[f].as_str().unwrap_or_default().to_string();
            let held = r["until"].as_i64().unwrap_or(0) != 0;
            (k.strip_prefix(KEYS).unwrap_or(&k).to_string(), text("node"), text("container"), addresses, held)
        })
        .collect()
}

#[test]
#[ignore = "needs root and iptables (a member cut off by firewall rules): run by scripts/test"]
fn nodes_behind_a_cut_off_member_hand_out_only_what_a_quorum_confirmed() {
    let _took = Took::new("nodes_behind_a_cut_off_member_hand_out_only_what_a_quorum_confirmed");
    // Four blocks of 16, shared by default (auto: a pool of 4 blocks);
    // n1 claims blocks of its own (shareBlocks never) with offlineGrace 4 s.
    // n1 and n3 talk to member 0 only, n2 to members 1 and 2.
    let pools = json!([{"name": "blue", "ranges": [{"subnet": "10.65.0.0/26"}], "blockSize": 28}]);
    let mut c = Cluster::over(TestEtcdCluster::start(3), pools, 30.0);
    c.set_endpoints("n1", vec![c.store.endpoint(0)]);
    c.set_endpoints("n3", vec![c.store.endpoint(0)]);
    c.set_endpoints("n2", vec![c.store.endpoint(1), c.store.endpoint(2)]);
    const N1_GRACE: u64 = 4;
    let config = |node: &str| {
        let mut v = c.config(node);
        v["ipam"]["delegates"] = json!(CLUSTER_STICKY_STACK);
        v["ipam"]["sticky"] = json!({"hold": 600});
        if node == "n1" {
            v["ipam"]["cluster"]["shareBlocks"] = json!("never");
            v["ipam"]["cluster"]["offlineGrace"] = json!(N1_GRACE);
        }
        v
    };
    let run = |command: &str, node: &str, container: &str, pod: Option<&str>| -> Outcome {
        let args: Vec<(&str, String)> = pod.map(|p| ("CNI_ARGS", support::sticky::pod(p))).into_iter().collect();
        call(&c, command, container, &config(node), &args)
    };
    let eventually = |node: &str, container: &str, pod: Option<&str>| -> IpAddr {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = run("ADD", node, container, pod);
            if out.status == 0 || Instant::now() >= deadline {
                return added(&out, &format!("ADD {container} on {node}"));
            }
            thread::sleep(Duration::from_millis(200));
        }
    };

    // Before the cut: n1 in a block of its own, n3 and n2 in shared blocks;
    // db-1 held in n1's block, db-0 in n3's shared block.
    let p1 = eventually("n1", "p1-0", None);
    let x1 = eventually("n1", "d1", Some("db-1"));
    run("DEL", "n1", "d1", Some("db-1")).assert_quiet_success();
    let p3: Vec<IpAddr> = (0..2).map(|i| eventually("n3", &format!("p3-{i}"), None)).collect();
    let x0 = eventually("n3", "d0", Some("db-0"));
    run("DEL", "n3", "d0", Some("db-0")).assert_quiet_success();
    eventually("n2", "p2-0", None);
    let blocks = c.blocks();
    let n1_block = *c.blocks_of("n1").first().unwrap_or_else(|| panic!("n1 owns a block: {blocks:?}"));
    assert!(n1_block.contains(p1) && n1_block.contains(x1), "n1's addresses lie in its block {n1_block}");
    assert!(c.addrs().iter().any(|a| a.ip == p3[0] && a.kind == "allocated"), "n3's grants are recorded");
    let held: Vec<_> = identities(&c).into_iter().filter(|i| i.4).map(|i| (i.0, i.3)).collect();
    assert_eq!(held, vec![("db-0".to_string(), vec![x0]), ("db-1".to_string(), vec![x1])], "both identities held");
    // n1 confirms its block just before the cut.
    let confirmed = Instant::now();
    let mut n1_offline = vec![eventually("n1", "p1-1", None)];

    c.store.partition(0);
    // n3: a grant is a write, which a member without a quorum cannot
    // commit; so is a take-over. Its DEL of an address of a shared block
    // fails with 11 (the runtime tries it again), keeps its release for
    // later, and etcd keeps the address taken meanwhile.
    for (container, pod) in [("p3-new", None), ("d0-n3", Some("db-0"))] {
        let t = Instant::now();
        let out = run("ADD", "n3", container, pod);
        let (code, msg) = failed(&out, &format!("ADD {container} on n3 behind the cut-off member"));
        assert_eq!(code, 11, "ADD {container} on n3 behind the cut-off member: {msg}");
        assert!(t.elapsed() < OFFLINE_BOUND, "ADD {container} on n3 took {:?}", t.elapsed());
    }
    let out = run("DEL", "n3", "p3-1", None);
    assert_eq!(failed(&out, "DEL p3-1 on n3 behind the cut-off member").0, 11, "{}", brief(&out));
    assert!(
        c.addrs().iter().any(|a| a.ip == p3[1] && a.node == "n3"),
        "n3's release behind the cut-off member must not free {} in etcd before it is done: {:?}",
        p3[1],
        c.addrs()
    );
    // n1: its own block, confirmed by a quorum within offlineGrace, serves
    // plain ADDs (never db-1's address); db-1 needs etcd.
    let out = run("ADD", "n1", "d1-n1", Some("db-1"));
    assert_eq!(failed(&out, "db-1 on n1 behind the cut-off member").0, 11, "{}", brief(&out));
    // The majority side: n2 takes both identities over, and is granted in
    // the shared blocks.
    assert_eq!(eventually("n2", "d0-n2", Some("db-0")), x0, "db-0 keeps its address on n2");
    assert_eq!(eventually("n2", "d1-n2", Some("db-1")), x1, "db-1 keeps its address on n2");
    let n2_plain: Vec<IpAddr> = (0..8).map(|i| eventually("n2", &format!("p2-{}", i + 1), None)).collect();
    assert!(!n2_plain.contains(&p3[1]), "n2 was granted {}, which n3 released only behind the cut", p3[1]);
    // n1 again, within its grace: still never db-1's address, now n2's.
    while confirmed.elapsed() + Duration::from_millis(500) < Duration::from_secs(N1_GRACE * 9 / 10) {
        let out = run("ADD", "n1", &format!("p1-{}", n1_offline.len() + 1), None);
        n1_offline.push(added(&out, "n1 within offlineGrace behind the cut-off member"));
        if n1_offline.len() >= 4 {
            break;
        }
    }
    assert!(
        n1_offline.iter().all(|a| n1_block.contains(*a) && *a != x1),
        "n1 served {n1_offline:?}: only its block, never {x1}"
    );
    // Past its grace: nothing.
    thread::sleep((Duration::from_secs(N1_GRACE + 1)).saturating_sub(confirmed.elapsed()));
    let out = run("ADD", "n1", "p1-late", None);
    assert_eq!(failed(&out, "n1 past offlineGrace behind the cut-off member").0, 11, "{}", brief(&out));
    held_once(&c, &["n1", "n2", "n3"]);

    c.store.heal(0);
    // Everything consistent again once each node made a call.
    eventually("n1", "p1-healed", None);
    eventually("n3", "p3-healed", None);
    // The runtime's retry of the DEL that failed behind the cut.
    run("DEL", "n3", "p3-1", None).assert_quiet_success();
    let nodes = ["n1", "n2", "n3"];
    let held = held_once(&c, &nodes);
    assert_covered(&c, &held);
    assert!(
        !c.addrs().iter().any(|a| a.container == "p3-1"),
        "n3's release of {} (p3-1) was finished once etcd had a quorum again: {:?}",
        p3[1],
        c.addrs()
    );
    let live: Vec<_> = identities(&c).into_iter().map(|i| (i.0, i.1, i.3, i.4)).collect();
    assert_eq!(
        live,
        vec![
            ("db-0".to_string(), "n2".to_string(), vec![x0], false),
            ("db-1".to_string(), "n2".to_string(), vec![x1], false)
        ],
        "both identities live on n2 with their addresses"
    );
    for (ip, (node, container)) in &held {
        if [x0, x1].contains(ip) {
            assert_eq!(node, "n2", "{ip} is held by {node} ({container}), not by n2, which took its identity over");
        }
    }
}

// ---------------------------------------------------------------------------
// 3. GC giving a shared block back while another node holds grants in it

/// It happens: GC counts the node's own leases and records in a block, not
/// the grants other nodes hold in a shared block of its, so a block whose
/// owner's attachments are gone is given back (its key deleted) with n2's
/// grants in it. It is safe: a grant's record lives under the block's
/// addresses, not under its key, and stays until n2 releases it; whoever
/// claims the block next reads its records in the claim's transaction and
/// keeps off them, and gets the address once n2's DEL deletes the record.
///
/// What would break it: a give-back that deleted the block's records, or a
/// claim that did not read them (n3, claiming the block as its own, would
/// hand out n2's addresses: the assertions on n3's addresses and
/// `held_once` fail), or a record left after n2's DEL (n3 never gets the
/// address back).
#[test]
fn gc_gives_a_shared_block_back_with_others_grants_in_it_and_they_stay_theirs() {
    let _took = Took::new("gc_gives_a_shared_block_back_with_others_grants_in_it_and_they_stay_theirs");
    // One block of 16 (.0, the gateway .1 and .15 are not handed out: 13):
    // shared (auto).
    // emptyBlockHold 1 s; given back 3 × ipam.timeout (1 s) after that.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.66.0.0/28"}], "blockSize": 28}]), 30.0);
    c.call_timeout = 1;
    let config = |node: &str| {
        let mut v = c.config(node);
        v["ipam"]["cluster"]["emptyBlockHold"] = json!(1);
        v
    };
    let gc = |node: &str| {
        let out = call(&c, "GC", "gc", &stack::gc_config(&config(node), &[]), &[]);
        assert_eq!(out.status, 0, "GC on {node}: {}", brief(&out));
    };
    let a = added(&call(&c, "ADD", "a-0", &config("n1"), &[]), "n1's first ADD");
    let block = c.blocks();
    assert!(block.len() == 1 && block[0].node == "n1", "n1 claimed the pool's block: {block:?}");
    let block = block[0].net;
    // n2 finds no block to claim: granted in n1's shared block.
    let mut n2_got: Vec<IpAddr> = (0..2)
        .map(|i| added(&call(&c, "ADD", &format!("b-{i}"), &config("n2"), &[]), "n2 granted in n1's block"))
        .collect();
    assert!(n2_got.iter().all(|ip| block.contains(*ip) && *ip != a), "n2's grants {n2_got:?} lie in {block}");
    // n1's attachment goes; its GC finds the block empty of its own.
    call(&c, "DEL", "a-0", &config("n1"), &[]).assert_quiet_success();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.node_blocks("n1").iter().any(|(_, state)| state == "releasing") {
        assert!(Instant::now() < deadline, "n1's GC never retired its block: {:?}", c.node_blocks("n1"));
        gc("n1");
        thread::sleep(Duration::from_millis(300));
    }
    // Retired on n1, still n1's in etcd: n2 is granted once more meanwhile.
    n2_got.push(added(&call(&c, "ADD", "b-2", &config("n2"), &[]), "n2 granted in n1's block being given back"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !c.blocks().is_empty() {
        assert!(Instant::now() < deadline, "n1's GC never gave its block back: {:?}", c.blocks());
        gc("n1");
        thread::sleep(Duration::from_millis(300));
    }
    let records: BTreeSet<IpAddr> = c.addrs().into_iter().filter(|r| r.node == "n2").map(|r| r.ip).collect();
    assert_eq!(records, n2_got.iter().copied().collect(), "n2's grants keep their records: {:?}", c.addrs());
    // n3 claims the block as its own (no records of its own there: it
    // keeps off n2's by what the claim read) and fills it.
    let mut n3 = c.config("n3");
    n3["ipam"]["cluster"]["shareBlocks"] = json!("never");
    let mut n3_got = Vec::new();
    loop {
        let out = call(&c, "ADD", &format!("c-{}", n3_got.len()), &n3, &[]);
        if out.status != 0 {
            assert_eq!(failed(&out, "n3 filling the block").0, 100, "{}", brief(&out));
            break;
        }
        n3_got.push(ipv4_of(out.result()));
        assert!(n3_got.len() <= 13, "n3 got more addresses than the block has: {n3_got:?}");
    }
    assert_eq!(c.blocks_of("n3"), vec![block], "n3 claimed the block given back: {:?}", c.blocks());
    let twice: Vec<&IpAddr> = n3_got.iter().filter(|ip| n2_got.contains(ip)).collect();
    assert!(twice.is_empty(), "n3 was handed {twice:?}, which n2 holds by grants in the block n1 gave back");
    assert_eq!(n3_got.len(), 13 - n2_got.len(), "n3 got every other address: {n3_got:?}, n2 holds {n2_got:?}");
    held_once(&c, &["n1", "n2", "n3"]);
    // n2's DEL releases its record; n3 gets the address at its next
    // confirming read (its cache is 2 s).
    call(&c, "DEL", "b-1", &config("n2"), &[]).assert_quiet_success();
    let back = added(&c.add_within("n3", "c-back", Duration::from_secs(5)), "n3 once n2 released b-1");
    assert_eq!(back, n2_got[1], "the address n2 released is n3's to hand out");
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
}

/// GC retires a block that stayed empty (`releasing`), and a later call
/// gives it back once 3 × ipam.timeout have passed: the longest an ADD
/// that read it as the node's own may still be allocating in it. That wait
/// is counted on the boot-time clock, as confirmations are: a call whose
/// wall clock is an hour ahead does not give the block back early (an ADD
/// in flight would lease in a block that is nobody's in etcd, and another
/// node could claim it and hand the address out), and a block retired by a
/// call whose wall clock ran a day ahead is not kept from the cluster for
/// that day.
///
/// What would break it: the wait timed by the wall clock (it was, by the
/// block's `since`, in unix seconds): the block is gone from etcd right
/// after the GC an hour ahead, and the block retired a day ahead stays
/// `releasing` past the deadline.
#[test]
fn a_wall_clock_jump_neither_hastens_nor_delays_giving_a_block_back() {
    let _took = Took::new("a_wall_clock_jump_neither_hastens_nor_delays_giving_a_block_back");
    assert_libfaketime();
    // ipam.timeout 2 s: a block is given back 6 s after GC retired it.
    const WAIT: Duration = Duration::from_secs(6);
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.67.0.0/27"}], "blockSize": 28}]), 30.0);
    c.share_blocks = Some("never");
    c.call_timeout = 2;
    let mut config = c.config("n1");
    config["ipam"]["cluster"]["emptyBlockHold"] = json!(1);
    let gc = |extra: &[(&str, String)]| {
        let out = call(&c, "GC", "gc", &stack::gc_config(&config, &[]), extra);
        assert_eq!(out.status, 0, "GC on n1: {}", brief(&out));
    };
    let releasing =
        || c.node_blocks("n1").into_iter().filter(|(_, s)| s == "releasing").map(|(b, _)| b).collect::<Vec<_>>();
    // Retires n1's block (empty since its DEL), with the wall clock `extra` says.
    let retire = |container: &str, extra: &[(&str, String)]| -> (Net4, Instant) {
        added(&call(&c, "ADD", container, &config, &[]), "n1's ADD");
        call(&c, "DEL", container, &config, &[]).assert_quiet_success();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            gc(extra);
            if let [block] = releasing()[..] {
                return (block, Instant::now());
            }
            assert!(Instant::now() < deadline, "n1's GC never retired its block: {:?}", c.node_blocks("n1"));
            thread::sleep(Duration::from_millis(300));
        }
    };
    // Given back by GCs on time, within the wait and a few seconds.
    let given_back = |block: Net4, retired: Instant| {
        while c.blocks_of("n1").contains(&block) {
            assert!(
                retired.elapsed() < WAIT + Duration::from_secs(4),
                "block {block}, retired {:.1?} ago, is not given back: n1's blocks {:?}",
                retired.elapsed(),
                c.node_blocks("n1")
            );
            gc(&[]);
            thread::sleep(Duration::from_millis(300));
        }
        assert!(
            retired.elapsed() + Duration::from_millis(300) >= WAIT,
            "given back {:.1?} after GC retired it",
            retired.elapsed()
        );
    };

    let (block, retired) = retire("a", &[]);
    gc(&wall_clock("+1h"));
    assert!(retired.elapsed() < WAIT, "the machine is too slow for this test");
    assert!(
        c.blocks_of("n1").contains(&block),
        "a GC whose wall clock is an hour ahead gave block {block} back {:.1?} after it was retired (the wait is {WAIT:?})",
        retired.elapsed()
    );
    given_back(block, retired);

    let (block, retired) = retire("b", &wall_clock("+1d"));
    given_back(block, retired);
}
