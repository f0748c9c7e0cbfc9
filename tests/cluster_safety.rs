//! Cluster mode's first promise, tried the way operators and etcd break it:
//! no address is handed out to two attachments. Each test is a case where
//! an earlier build did hand one out twice (docs/contract.md "Cluster
//! mode"; ipam-ds-cluster/README.md "Why no address is handed out twice"):
//! a static address under another cut of the pool, a clock that jumped,
//! two hosts under one node name, a release sized by the wrong settings,
//! and etcd that lost its history. Every call is a real `ipam-delegated`
//! process against a real etcd that the test starts and stops.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;

/// `c`'s configuration of `node` with pool blue's `blockSize` set.
fn with_block_size(c: &Cluster, node: &str, block_size: u8) -> Value {
    let mut config = c.config(node);
    config["ipam"]["pools"][0]["blockSize"] = json!(block_size);
    config
}

#[test]
fn a_static_address_under_another_cut_of_the_pool_is_refused() {
    let _took = Took::new("a_static_address_under_another_cut_of_the_pool_is_refused");
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.97.0.0/22"}], "blockSize": 26}]), 30.0);
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    let first = c.add("n1", "c1");
    assert_eq!(first.status, 0, "n1's first ADD: {}", brief(&first));
    let n1_block = c.blocks_of("n1");
    assert_eq!(n1_block.len(), 1, "n1 claimed one block: {:?}", c.blocks());
    // An address of n1's /26 that n1 has not handed out yet, asked for on
    // n2 whose configuration cuts the pool in /28s.
    let wanted = n1_block[0].nth(5);
    let args = format!("IgnoreUnknown=1;IP={wanted}");
    let out = c.run("ADD", "c2", &with_block_size(&c, "n2", 28), &[("CNI_ARGS", args.as_str())]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 7, "n2 asked for {wanted} with blockSize 28 while the cluster cuts /26: {}", brief(&out));
    assert!(msg.contains("blockSize") && msg.contains("blue"), "the message names the pool and its cut: {msg}");
    assert!(c.addrs().is_empty(), "nothing was reserved: {:?}", c.addrs());
    assert!(c.leases("n2").is_empty(), "n2 leased nothing: {:?}", c.leases("n2"));
    // n1 goes on handing out its block's addresses, the asked-for one included, once each.
    for i in 0..8 {
        let out = c.add("n1", &format!("more-{i}"));
        assert_eq!(out.status, 0, "n1 ADD {i}: {}", brief(&out));
    }
    held_once(&c, &["n1", "n2"]);
    // The same request with the cluster's cut is granted.
    let out = c.run("ADD", "c3", &with_block_size(&c, "n2", 26), &[("CNI_ARGS", "IgnoreUnknown=1;IP=10.97.3.7")]);
    assert_eq!(out.status, 0, "n2 with the cluster's cut: {}", brief(&out));
    assert_eq!(ipv4_of(out.result()), "10.97.3.7".parse::<IpAddr>().unwrap());
}

/// Debian's libfaketime (package faketime): a process that believes the
/// wall clock reads something else.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[test]
fn a_confirmation_stamped_by_a_clock_ahead_is_no_confirmation() {
    let _took = Took::new("a_confirmation_stamped_by_a_clock_ahead_is_no_confirmation");
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (the test needs a process whose clock is a day ahead)"
    );
    // One block (a /28 cut in one /28), a short grace and timeout: a
    // released block is claimable again after 2 + 3 × 1 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.96.0.0/28"}], "blockSize": 28}]), 2.0);
    // A block of n1's own: only such a block is used offline (a shared one
    // never is, so with one the offline ADDs below fail whatever the clock).
    c.share_blocks = Some("never");
    c.call_timeout = 1;
    let out = c.add("n1", "c1");
    assert_eq!(out.status, 0, "n1's first ADD: {}", brief(&out));
    // The same node with its clock a day ahead for one call: that call
    // confirms the block, as it should; what it must not leave behind is a
    // confirmation that still counts a day later.
    let ahead = c.run("ADD", "c2", &c.config("n1"), &[("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", "+1d")]);
    assert_eq!(ahead.status, 0, "n1's ADD with the clock a day ahead: {}", brief(&ahead));
    for container in ["c1", "c2"] {
        let out = c.del("n1", container);
        assert_eq!(out.status, 0, "n1 DEL {container}: {}", brief(&out));
    }
    // The operator declares n1 dead; once the tombstone is gone n2 claims the block.
    release_node(&c, "n1", "op");
    for i in 0..3 {
        let out = c.add_within("n2", &format!("n2-{i}"), Duration::from_secs(20));
        assert_eq!(out.status, 0, "n2 never got the released block: {}", brief(&out));
    }
    // n1, with the right clock again and etcd out of reach, must not
    // allocate in the block it lost: its last confirmation is not "a day
    // from now".
    // (Stopped, so that each ADD learns it at once, well inside ipam.timeout.)
    c.store.kill();
    let outs: Vec<_> = (0..3).map(|i| c.add("n1", &format!("offline-{i}"))).collect();
    c.store.restart();
    for (i, out) in outs.iter().enumerate() {
        let (code, msg) = failure(out);
        assert_eq!(code, 11, "n1's offline ADD {i} with etcd stopped: {msg}");
    }
    held_once(&c, &["n1", "n2"]);
}

#[test]
fn two_hosts_under_one_node_name_are_refused() {
    let _took = Took::new("two_hosts_under_one_node_name_are_refused");
    let c = Cluster::blue(30.0);
    // Two hosts, each with a database of its own, both calling themselves "n"
    // (cloned VMs, or the host-name fallback of one image).
    let database = |host: &str| c.dir.path().join(host).join("allocations.sqlite");
    let host = |name: &str| {
        let mut config = c.config("n");
        config["ipam"]["database"] = json!(database(name));
        config
    };
    let mut given = Vec::new();
    for round in 0..10 {
        let a = c.run("ADD", &format!("a{round}"), &host("host-a"), &[]);
        assert_eq!(a.status, 0, "round {round}: host-a's ADD: {}", brief(&a));
        given.push(ipv4_of(a.result()));
        let b = c.run("ADD", &format!("b{round}"), &host("host-b"), &[]);
        let (code, msg) = failure(&b);
        assert_eq!(code, 7, "round {round}: host-b runs under host-a's node name: {}", brief(&b));
        assert!(
            msg.contains("\"n\"") && msg.contains("ipam.cluster.node") && msg.contains("release-node"),
            "the message names the node name, the setting and the way out: {msg}"
        );
    }
    let b_leases = stack::leases(&database("host-b"));
    assert!(b_leases.is_empty(), "host-b handed out nothing: {b_leases:?}");
    given.sort();
    given.dedup();
    assert_eq!(given.len(), 10, "host-a's addresses are distinct");
    // The way out the message gives: host-b under a name of its own works.
    let mut own = host("host-b");
    own["ipam"]["cluster"]["node"] = json!("n-b");
    let b = c.run("ADD", "b-own", &own, &[]);
    assert_eq!(b.status, 0, "host-b under its own name: {}", brief(&b));
    assert!(!given.contains(&ipv4_of(b.result())));
}

#[test]
fn release_node_waits_out_the_nodes_own_grace() {
    let _took = Took::new("release_node_waits_out_the_nodes_own_grace");
    // One block; the operator's conflist says offlineGrace 0, the node runs
    // with 8 s: its block must stay unclaimable for 8 + 3 × 1 s, not 3 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.95.0.0/28"}], "blockSize": 28}]), 0.0);
    c.call_timeout = 1;
    let mut n1 = c.config("n1");
    n1["ipam"]["cluster"]["offlineGrace"] = json!(8);
    let out = c.run("ADD", "c1", &n1, &[]);
    assert_eq!(out.status, 0, "n1's ADD: {}", brief(&out));
    let released = Instant::now();
    release_node(&c, "n1", "op");
    // n1, cut off from etcd, could allocate in its block for 8 s: nobody else may.
    let mut attempts = 0;
    while released.elapsed() < Duration::from_secs(7) {
        let out = c.add("n2", &format!("early-{attempts}"));
        assert_ne!(
            out.status,
            0,
            "n2 got an address of n1's block {:.1?} after release-node, within n1's offlineGrace: {}",
            released.elapsed(),
            brief(&out)
        );
        attempts += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    // And after it, the block is claimable again.
    let out = c.add_within("n2", "late", Duration::from_secs(25));
    assert_eq!(out.status, 0, "n2 never got the block: {}", brief(&out));
    assert!(released.elapsed() >= Duration::from_secs(11), "claimed after {:?}", released.elapsed());
}

#[test]
fn two_pool_names_over_one_range_are_refused() {
    let _took = Took::new("two_pool_names_over_one_range_are_refused");
    // One block's worth of addresses, so that both names would claim the same block.
    let c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.94.0.0/26"}], "blockSize": 26}]), 30.0);
    let out = c.add("n1", "c1");
    assert_eq!(out.status, 0, "n1 with pool blue: {}", brief(&out));
    let blue = ipv4_of(out.result());
    // n2's configuration calls the same range "green" (renamed on some nodes).
    let mut green = c.config("n2");
    green["ipam"]["pools"][0]["name"] = json!("green");
    for (what, extra) in [("an ADD", None), ("a static request", Some("IgnoreUnknown=1;IP=10.94.0.20"))] {
        let env: Vec<(&str, &str)> = extra.map(|args| ("CNI_ARGS", args)).into_iter().collect();
        let out = c.run("ADD", "c2", &green, &env);
        let (code, msg) = failure(&out);
        assert_eq!(code, 7, "{what} of n2 in pool green over blue's range: {}", brief(&out));
        assert!(msg.contains("green") && msg.contains("blue"), "the message names both pools: {msg}");
    }
    assert!(c.leases("n2").is_empty(), "n2 handed out nothing: {:?}", c.leases("n2"));
    let green_keys = c.store.dump("/ipam-delegated/v1/cnet/green/");
    assert!(green_keys.is_empty(), "nothing of pool green was written: {green_keys:?}");
    // A range beside blue's under another name is a pool of its own.
    let mut beside = green.clone();
    beside["ipam"]["pools"][0]["ranges"] = json!([{"subnet": "10.94.0.64/26"}]);
    let out = c.run("ADD", "c3", &beside, &[]);
    assert_eq!(out.status, 0, "pool green beside blue: {}", brief(&out));
    assert_ne!(ipv4_of(out.result()), blue);
}

/// The block of pool blue that etcd shows as `node`'s (exactly one).
fn only_block_of(c: &Cluster, node: &str) -> Net4 {
    let blocks = c.blocks_of(node);
    assert_eq!(blocks.len(), 1, "{node} owns one block: {:?}", c.blocks());
    blocks[0]
}

#[test]
fn etcd_wiped_blocks_are_claimed_back_by_their_nodes_first() {
    let _took = Took::new("etcd_wiped_blocks_are_claimed_back_by_their_nodes_first");
    // Two blocks of 16; a quarantine of 2 + 3 × 1 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.92.0.0/27"}], "blockSize": 28}]), 2.0);
    // Blocks of each node's own (what this test is about), not shared.
    c.share_blocks = Some("never");
    c.call_timeout = 1;
    for i in 0..3 {
        for node in ["n1", "n2"] {
            let out = c.add(node, &format!("{node}-{i}"));
            assert_eq!(out.status, 0, "{node} ADD {i}: {}", brief(&out));
        }
    }
    let (x, y) = (only_block_of(&c, "n1"), only_block_of(&c, "n2"));
    assert_ne!(x, y);
    // And an address of its block that n1 reserved by name: a record in etcd.
    let fixed = x.nth(12);
    let out = c.add_static("n1", "n1-static", fixed);
    assert_eq!(out.status, 0, "n1's static ADD: {}", brief(&out));
    // etcd loses its data and comes back on the same URL.
    c.store.wipe();
    assert!(c.store.dump("/").is_empty(), "etcd is empty");
    // Past the confirmation cache (a tenth of offlineGrace), within which an
    // ADD asks etcd nothing and so cannot notice.
    std::thread::sleep(Duration::from_millis(300));
    // n2 notices at its next ADD (etcd answers at a revision below the
    // ones it saw), claims its block back and tells the cluster to wait.
    let out = c.add("n2", "n2-after");
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "n2's first ADD after the wipe: {msg}");
    assert!(msg.contains("lost history"), "{msg}");
    assert_eq!(c.blocks_of("n2"), vec![y], "n2 claimed its block back");
    // A new node, which never saw the old etcd, claims nothing meanwhile:
    // n1's block holds n1's addresses, and n1 has not claimed it back yet.
    let out = c.add("n3", "n3-0");
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "n3's ADD while the nodes re-claim: {msg}");
    assert!(msg.contains("re-claim"), "{msg}");
    // n1 notices too and claims its block back; then both go on as before.
    let out = c.add_within("n1", "n1-after", Duration::from_secs(2));
    assert_eq!(out.status, 0, "n1 after the wipe: {}", brief(&out));
    assert_eq!(c.blocks_of("n1"), vec![x], "n1 claimed its block back");
    assert!(
        c.addrs().iter().any(|a| a.ip == fixed && a.node == "n1" && a.container == "n1-static"),
        "n1 wrote its static record again: {:?}",
        c.addrs()
    );
    let out = c.add_within("n2", "n2-after", Duration::from_secs(2));
    assert_eq!(out.status, 0, "n2 after the wipe: {}", brief(&out));
    // Once the quarantine is over n3 gets nothing of n1's or n2's: the
    // pool's two blocks are theirs.
    std::thread::sleep(Duration::from_secs(6));
    let out = c.add("n3", "n3-1");
    assert_ne!(out.status, 0, "n3 after the quarantine: every block is n1's or n2's: {}", brief(&out));
    let held = held_once(&c, &["n1", "n2", "n3"]);
    assert_covered(&c, &held);
}

#[test]
fn etcd_restored_from_an_older_backup_is_noticed_and_no_claim_is_adopted_again() {
    let _took = Took::new("etcd_restored_from_an_older_backup_is_noticed_and_no_claim_is_adopted_again");
    // One block, given back quickly: emptyBlockHold 1 s, then 3 × 1 s.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.91.0.0/28"}], "blockSize": 28}]), 2.0);
    c.call_timeout = 1;
    let config = |c: &Cluster, node: &str| {
        let mut config = c.config(node);
        config["ipam"]["cluster"]["emptyBlockHold"] = json!(1);
        config
    };
    let out = c.run("ADD", "c1", &config(&c, "n1"), &[]);
    assert_eq!(out.status, 0, "n1's ADD: {}", brief(&out));
    let x = only_block_of(&c, "n1");
    let out = c.run("DEL", "c1", &config(&c, "n1"), &[]);
    assert_eq!(out.status, 0, "n1's DEL: {}", brief(&out));
    // The backup: the block is n1's.
    let backup = c.dir.path().join("etcd.backup");
    c.store.snapshot(&backup);
    // n1 gives the empty block back; n2 claims it and hands out addresses.
    let gc = |c: &Cluster, node: &str| {
        let config = stack::gc_config(&config(c, node), &[]);
        c.run("GC", "gc", &config, &[])
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.blocks_of("n1").is_empty() {
        assert!(Instant::now() < deadline, "n1 never gave its empty block back: {:?}", c.blocks());
        std::thread::sleep(Duration::from_millis(700));
        let out = gc(&c, "n1");
        assert_eq!(out.status, 0, "n1's GC: {}", brief(&out));
    }
    let mut n2_holds = Vec::new();
    for i in 0..3 {
        let out = c.run("ADD", &format!("n2-{i}"), &config(&c, "n2"), &[]);
        assert_eq!(out.status, 0, "n2 ADD {i}: {}", brief(&out));
        n2_holds.push(ipv4_of(out.result()));
    }
    assert_eq!(c.blocks_of("n2"), vec![x]);
    // etcd is restored from the backup: the block is n1's again there.
    c.store.restore(&backup);
    assert_eq!(c.blocks_of("n1"), vec![x], "the restored etcd shows the block as n1's");
    // n1 must not take back a claim it gave back: none of n2's addresses.
    // The pool is that one block, so n1 has no address of its own to give:
    // the contract allows 100 (no block left to claim), 11 (etcd lost
    // history, or `_recovery` holds claims off), or an address another node
    // lent it, never one n2 holds.
    for i in 0..3 {
        let out = c.run("ADD", &format!("n1-after-{i}"), &config(&c, "n1"), &[]);
        if out.status == 0 {
            let got = ipv4_of(out.result());
            assert!(!n2_holds.contains(&got), "n1 handed out {got}, which n2 holds");
        } else {
            let (code, msg) = failure(&out);
            assert!(
                matches!(code, 100 | 11),
                "n1's ADD {i} after the restore failed with {code}, not 100 or 11: {msg}"
            );
        }
    }
    // n2 notices that etcd went back, and publishes what it holds in the
    // block, so that whoever owns it skips those addresses.
    let out = c.run("ADD", "n2-after", &config(&c, "n2"), &[]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 11, "n2's first ADD after the restore: {msg}");
    assert!(msg.contains("lost history"), "{msg}");
    let published: Vec<IpAddr> = c.addrs().iter().filter(|a| a.node == "n2").map(|a| a.ip).collect();
    for ip in &n2_holds {
        assert!(published.contains(ip), "n2's {ip} is published in etcd: {:?}", c.addrs());
    }
    held_once(&c, &["n1", "n2"]);
}
