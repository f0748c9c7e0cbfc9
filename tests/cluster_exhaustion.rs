//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode"):
//! exhaustion, down to the last address. Simulated nodes, each with a
//! database of its own, share one real etcd (tests/cluster_harness; a missing
//! etcd fails these tests, never skips them); every call is a real
//! `ipam-delegated` process.
//!
//! What is checked: every usable address of the pool is used by some node,
//! none twice, nodes without a block get addresses their owners lend
//! (ipam-ds-cluster/README.md "Lending and borrowing"), also once an owner
//! holds more than 128 addresses as lent out, and what a node holds as lent
//! out is recorded so in etcd.

mod cluster_harness;
mod stack;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use cluster_harness::*;
use serde_json::json;
use stack::ipv4_of;
use support::{parallel, Outcome};

#[test]
fn exhaustion_with_borrowing() {
    let _took = Took::new("exhaustion_with_borrowing");
    const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];
    // Four /29 blocks; 29 usable addresses (.2-.30).
    // offlineGrace 0: every ADD reads etcd, so an owner lends at its very next ADD.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.60.0.0/27"}], "blockSize": 29}]), 0.0);
    // Blocks of each node's own, which lend (shared blocks need no lending).
    c.share_blocks = Some("never");
    let usable: BTreeSet<IpAddr> = (2..=30u8).map(|d| IpAddr::from([10, 60, 0, d])).collect();
    let mut got: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut per_node: BTreeMap<&str, usize> = NODES.iter().map(|n| (*n, 0)).collect();
    let mut codes: BTreeMap<u64, usize> = BTreeMap::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds <= 40, "no round where every node got 100 within 40 rounds; got {} addresses", got.len());
        let outs: Vec<Outcome> =
            parallel(NODES.len(), NODES.len(), |k| c.add(NODES[k], &format!("ex-{rounds}-{}", NODES[k])));
        let mut all_full = true;
        for (k, out) in outs.iter().enumerate() {
            if out.status == 0 {
                all_full = false;
                let ip = ipv4_of(out.result());
                assert!(usable.contains(&ip), "{ip} is not a usable address of 10.60.0.0/27");
                if let Some(other) = got.insert(ip, NODES[k].to_string()) {
                    panic!("{ip} handed out twice: to {other} and to {}", NODES[k]);
                }
                *per_node.get_mut(NODES[k]).unwrap() += 1;
            } else {
                let (code, msg) = failure(out);
                *codes.entry(code).or_default() += 1;
                assert_eq!(code, 100, "round {rounds}: {}: {msg}", NODES[k]);
            }
        }
        if all_full {
            break;
        }
    }
    let held = held_once(&c, &NODES);
    assert_eq!(held.len(), got.len(), "the databases hold what was handed out");
    assert_covered(&c, &held);
    // What a node holds as lent out is recorded so in etcd: still lent by
    // it, or borrowed from it by the attachment that holds it.
    let addrs = c.addrs();
    let lent = lent_holds(&c, &NODES);
    for (ip, lender) in &lent {
        let record = addrs.iter().find(|a| a.ip == *ip);
        let ok = match record {
            Some(a) if a.kind == "lent" => &a.node == lender,
            Some(a) if a.kind == "borrowed" => {
                &a.lender == lender && held.get(ip).is_some_and(|(n, ctr)| n == &a.node && ctr == &a.container)
            }
            _ => false,
        };
        assert!(ok, "{lender} holds {ip} as lent out, but etcd says {record:?} and the databases {:?}", held.get(ip));
    }
    let borrowed = addrs.iter().filter(|a| a.kind == "borrowed").count();
    let owners: BTreeSet<String> = c.blocks().into_iter().filter(|b| !b.released).map(|b| b.node).collect();
    let without_block: Vec<&str> = NODES.iter().copied().filter(|n| !owners.contains(*n)).collect();
    eprintln!(
        "exhaustion: {} of 29 addresses in {rounds} rounds; per node {per_node:?}; failures by code {codes:?}; \
         block owners {owners:?}; without a block {without_block:?}; {} held as lent out, {borrowed} borrowed",
        got.len(),
        lent.len()
    );
    let missing: Vec<&IpAddr> = usable.iter().filter(|ip| !got.contains_key(ip)).collect();
    assert_eq!(got.len(), 29, "every usable address is used by some node; never handed out: {missing:?}");
    assert!(!without_block.is_empty(), "six nodes, four blocks: some node owns none");
    for n in &without_block {
        assert!(per_node[n] >= 1, "{n} owns no block and got no address: nobody lent it one (per node {per_node:?})");
    }
}

/// Where the lend path once stopped for good: a lender holding more than
/// 128 addresses for lending (etcd's 128 operations per transaction) got
/// "too many operations" in the lend path's transactions, and kept setting
/// addresses aside that were never offered. Here one node owns a /24 (254
/// usable addresses), the pool's other block is taken, and a node without
/// a block asks again and again (each 100 bumps the pool's `wanted`; the
/// owner lends at its next ADD, up to 16 at a time) until the owner's block
/// is used to the last address: the owner then holds well over 128 addresses
/// as lent out, and after every lending round each of them is offered in
/// etcd (a `lent` record of the owner's) or borrowed from it. Addresses the
/// borrower gives back (DEL) are offered again, and borrowed again.
#[test]
fn a_lender_past_128_lent_addresses_lends_to_the_last_address() {
    let _took = Took::new("a_lender_past_128_lent_addresses_lends_to_the_last_address");
    // Two /24 blocks; unusable: 10.61.0.0 (network), .0.1 (gateway), 10.61.1.255 (broadcast).
    // offlineGrace 0: every ADD reads etcd, so an owner lends at its very next ADD.
    let mut c = Cluster::new(json!([{"name": "blue", "ranges": [{"subnet": "10.61.0.0/23"}], "blockSize": 24}]), 0.0);
    // Blocks of each node's own, which lend (shared blocks need no lending).
    c.share_blocks = Some("never");
    let (lender, borrower) = ("a", "b");
    let big = Net4::cidr("10.61.0.0/24");
    let other = Net4::cidr("10.61.1.0/24");
    // A third node claims the other block first (it is never called again,
    // so it never lends): the lender's is the /24 with 254 usable addresses.
    let taker = (0..200)
        .map(|i| format!("c{i}"))
        .find(|name| claim_order(&c, name).first() == Some(&other))
        .expect("a node name that claims 10.61.1.0/24 first");
    let out = c.add(&taker, "c-0");
    assert_eq!(out.status, 0, "{taker} ADD: {}", brief(&out));
    let out = c.add(lender, "a-0");
    assert_eq!(out.status, 0, "{lender} ADD: {}", brief(&out));
    assert_eq!((c.blocks_of(&taker), c.blocks_of(lender)), (vec![other], vec![big]), "{:?}", c.blocks());
    let unusable: [IpAddr; 2] = [[10, 61, 0, 0].into(), [10, 61, 0, 1].into()];
    let usable: BTreeSet<IpAddr> = (0..big.size()).map(|i| big.nth(i)).filter(|ip| !unusable.contains(ip)).collect();
    assert_eq!(usable.len(), 254);

    // What the lender holds as lent out, each offered in etcd (`lent`, by
    // the lender) or borrowed from it by the borrower's attachment that
    // holds it: the number held, and the problems.
    let offered = |c: &Cluster| -> (usize, Vec<String>) {
        let addrs = c.addrs();
        let held = held_once(c, &[lender, borrower, taker.as_str()]);
        let lent = lent_holds(c, &[lender]);
        let problems = lent
            .iter()
            .filter_map(|(ip, _)| {
                let record = addrs.iter().find(|a| a.ip == *ip);
                let ok = match record {
                    Some(a) if a.kind == "lent" => a.node == lender,
                    Some(a) if a.kind == "borrowed" => {
                        a.lender == lender
                            && a.node == borrower
                            && held.get(ip).is_some_and(|(n, ctr)| n == borrower && ctr == &a.container)
                    }
                    _ => false,
                };
                (!ok).then(|| format!("{ip}: etcd {record:?}, databases {:?}", held.get(ip)))
            })
            .collect();
        (lent.len(), problems)
    };
    // Address records the lender's lending made: lent, or borrowed from it.
    let lent_records =
        |c: &Cluster| c.addrs().iter().filter(|a| (a.kind == "lent" && a.node == lender) || a.lender == lender).count();

    let mut borrowed: BTreeMap<IpAddr, String> = BTreeMap::new();
    let mut lender_adds = 0;
    let mut most_held = 0;
    // Borrowed while the lender held more than 128 addresses as lent out.
    let mut past_128 = 0;
    let mut i = 0;
    loop {
        i += 1;
        assert!(i <= 600, "the borrower made 600 ADDs; borrowed {}", borrowed.len());
        let id = format!("b-{i}");
        let out = c.add(borrower, &id);
        if out.status == 0 {
            let ip = ipv4_of(out.result());
            assert!(big.contains(ip), "{borrower} got {ip}, outside the lender's block {big}");
            if let Some(earlier) = borrowed.insert(ip, id.clone()) {
                panic!("{ip} borrowed twice: by {earlier} and by {id}");
            }
            past_128 += usize::from(most_held > 128);
            continue;
        }
        let (code, msg) = failure(&out);
        assert_eq!(code, 100, "{borrower} ADD {id}: {msg}");
        // The borrower asked: the lender lends at its next ADD, which fails
        // only once its block has no free address left.
        let before = lent_records(&c);
        lender_adds += 1;
        let out = c.add(lender, &format!("a-{lender_adds}"));
        assert!(out.status == 0 || failure(&out).0 == 100, "{lender} ADD a-{lender_adds}: {}", brief(&out));
        let (held, problems) = offered(&c);
        most_held = most_held.max(held);
        assert!(
            problems.is_empty(),
            "after lending round {lender_adds}, {lender} holds {held} addresses as lent out, and these are not \
             offered in etcd:\n  {}\n{lender}'s stderr: {}",
            problems.join("\n  "),
            out.stderr.trim()
        );
        if lent_records(&c) == before {
            break;
        }
    }
    let lender_own: BTreeSet<IpAddr> =
        c.leases(lender).iter().filter(|r| r.network == NETWORK).map(|r| r.address).collect();
    let used: BTreeSet<IpAddr> = lender_own.iter().chain(borrowed.keys()).copied().collect();
    let unused: Vec<&IpAddr> = usable.difference(&used).collect();
    eprintln!(
        "lending past 128: {} borrowed in {i} ADDs of {borrower}, {lender_adds} lending rounds; {lender} holds {} \
         itself and at most {most_held} as lent out; {past_128} borrowed while it held more than 128",
        borrowed.len(),
        lender_own.len()
    );
    assert!(unused.is_empty(), "{lender}'s block was not used to the last address; unused: {unused:?}");
    assert!(most_held > 128, "the lender held only {most_held} addresses as lent out: the test did not get past 128");
    assert!(past_128 > 0, "{borrower} got nothing once {lender} held more than 128 addresses as lent out");

    // The borrower gives one in five back: each is offered again (the
    // lender's hold stays), and borrowed again without the lender lending.
    let given_back: BTreeMap<IpAddr, String> =
        borrowed.iter().enumerate().filter(|(k, _)| k % 5 == 0).map(|(_, (ip, id))| (*ip, id.clone())).collect();
    for id in given_back.values() {
        c.del(borrower, id).assert_quiet_success();
    }
    let (held, problems) = offered(&c);
    assert!(
        held > 128 && problems.is_empty(),
        "{lender} holds {held} as lent out; not offered:\n  {}",
        problems.join("\n  ")
    );
    let again: BTreeSet<IpAddr> =
        c.addrs().into_iter().filter(|a| a.kind == "lent" && a.node == lender).map(|a| a.ip).collect();
    assert_eq!(again, given_back.keys().copied().collect(), "the addresses given back are lent again");
    let mut reborrowed = BTreeSet::new();
    for k in 0..given_back.len() {
        let out = c.add(borrower, &format!("again-{k}"));
        assert_eq!(out.status, 0, "{borrower} ADD again-{k}: {}", brief(&out));
        reborrowed.insert(ipv4_of(out.result()));
    }
    assert_eq!(reborrowed, again, "{borrower} borrowed again what it gave back");
    let out = c.add(borrower, "again-last");
    assert_eq!(failure(&out).0, 100, "{borrower} ADD once everything is used: {}", brief(&out));
    let (_, problems) = offered(&c);
    assert!(problems.is_empty(), "not offered:\n  {}", problems.join("\n  "));
    let held = held_once(&c, &[lender, borrower, taker.as_str()]);
    assert_covered(&c, &held);
}

/// ipam-ds-cluster leases a family's address in the node's blocks itself;
/// when another family then has none (100), the ADD's rollback releases
/// that lease too: the failed ADD holds nothing.
#[test]
fn an_add_refused_for_one_family_holds_no_address_of_the_other() {
    let _took = Took::new("an_add_refused_for_one_family_holds_no_address_of_the_other");
    let mut c = Cluster::new(
        json!([
            {"name": "blue", "ranges": [{"subnet": "10.57.0.0/24"}], "blockSize": 28},
            {"name": "blue6", "ranges": [{"subnet": "fd00:57::/120", "rangeStart": "fd00:57::10", "rangeEnd": "fd00:57::11"}], "blockSize": 127}
        ]),
        300.0,
    );
    c.share_blocks = Some("never");
    for container in ["dual-0", "dual-1"] {
        let out = c.add("n1", container);
        assert_eq!(out.status, 0, "{}", brief(&out));
    }
    let (code, msg) = failure(&c.add("n1", "dual-2"));
    assert_eq!(code, 100, "the IPv6 pool is full: {msg}");
    let leases = c.leases("n1");
    assert!(leases.iter().all(|l| l.container_id != "dual-2"), "the refused ADD holds nothing: {leases:?}");
    assert_eq!(leases.len(), 4, "two of each family for the two placed: {leases:?}");
}
