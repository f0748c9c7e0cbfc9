//! Cluster mode on the Kubernetes API (ipam-ds-cluster/docs/kubernetes.md):
//! concurrent nodes and kill -9, on a real API server
//! (tests/cluster_harness/kube.rs), every node calling with the installer
//! DaemonSet's ServiceAccount token, every call a real `ipam-delegated`
//! process from many threads at once.
//!
//! What is checked is what the cluster promises: no address held twice
//! across the nodes; every held address inside a block its node owns, or
//! recorded for it in a block's `records`; no failure but the documented
//! ones (100 when the pool is full, 11); and, after a storm of ADDs killed
//! at random moments, the runtime's DELs and GC leave no record naming a
//! container that no node holds.

mod cluster_harness;
mod stack;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cluster_harness::kube::KubeStore;
use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::{bin_dir, leftovers, run_killable, Outcome, Rng};

const NODES: [&str; 6] = ["n1", "n2", "n3", "n4", "n5", "n6"];

/// Four blocks of 16: a /26 in /28 blocks.
fn four_blocks() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.67.0.0/26"}], "blockSize": 28}])
}

/// The addresses of [`four_blocks`] handed out: all but the network
/// address, the gateway and the broadcast address.
const FOUR_BLOCKS_USABLE: usize = 61;

/// Each node's pods: `counts[k]` for `NODES[k]`, two threads a node, all
/// nodes at once. Each ADD is tried once, or, with `retry`, again every
/// 200 ms as a runtime does until it succeeds or `retry` has passed.
/// (node, container, last outcome, failed attempts) of each.
fn race(
    c: &Cluster<KubeStore>,
    counts: &[usize],
    retry: Option<Duration>,
) -> Vec<(String, String, Outcome, Vec<String>)> {
    let barrier = Barrier::new(counts.len() * 2);
    thread::scope(|s| {
        let mut runs = Vec::new();
        for (k, count) in counts.iter().enumerate() {
            for half in 0..2 {
                let (barrier, node) = (&barrier, NODES[k]);
                runs.push(s.spawn(move || {
                    barrier.wait();
                    let mut done = Vec::new();
                    for i in (half..*count).step_by(2) {
                        let container = format!("{node}-{i}");
                        let deadline = Instant::now() + retry.unwrap_or_default();
                        let mut failed = Vec::new();
                        let out = loop {
                            let out = c.add(node, &container);
                            if out.status == 0 || Instant::now() >= deadline {
                                break out;
                            }
                            let (code, msg) = failure(&out);
                            failed.push(format!("{code}: {msg}"));
                            thread::sleep(Duration::from_millis(200));
                        };
                        done.push((node.to_string(), container, out, failed));
                    }
                    done
                }));
            }
        }
        runs.into_iter().flat_map(|r| r.join().expect("a racing thread")).collect()
    })
}

/// The checks every race ends with: what the ADDs answered is what the node
/// databases hold, none twice, each covered by the store, no block twice;
/// every failure (the last one of a pod, and every failed attempt) is 100
/// or 11. Returns the pods placed.
fn check(c: &Cluster<KubeStore>, what: &str, outs: &[(String, String, Outcome, Vec<String>)]) -> usize {
    let mut told: BTreeMap<IpAddr, (String, String)> = BTreeMap::new();
    let mut unexpected = Vec::new();
    let mut codes: BTreeMap<u64, usize> = BTreeMap::new();
    for (node, container, out, attempts) in outs {
        for attempt in attempts {
            let code: u64 = attempt.split(':').next().and_then(|c| c.parse().ok()).unwrap_or(0);
            *codes.entry(code).or_default() += 1;
            if code != 100 && code != 11 {
                unexpected.push(format!("{what}: an attempt of {container} on {node}: {attempt}"));
            }
        }
        if out.status == 0 {
            let ip = ipv4_of(out.result());
            if let Some((n, ctr)) = told.insert(ip, (node.clone(), container.clone())) {
                panic!("{what}: {ip} was handed to {ctr} on {n} and to {container} on {node}");
            }
        } else {
            let (code, msg) = failure(out);
            *codes.entry(code).or_default() += 1;
            if code != 100 && code != 11 {
                unexpected.push(format!("{what}: ADD {container} on {node}: {code}: {msg}"));
            }
        }
    }
    let held = held_once(c, &NODES);
    assert_eq!(held, told, "{what}: the node databases hold what the ADDs answered");
    assert_covered(c, &held);
    let blocks = c.blocks();
    let distinct: BTreeSet<Net4> = blocks.iter().map(|b| b.net).collect();
    assert_eq!(distinct.len(), blocks.len(), "{what}: a block owned twice: {blocks:?}");
    eprintln!("{what}: {} placed, failures by code {codes:?}, {} blocks: {blocks:?}", told.len(), blocks.len());
    assert!(unexpected.is_empty(), "failures other than 100 and 11:\n  {}", unexpected.join("\n  "));
    told.len()
}

/// Shared blocks (`share` auto or always): six nodes place exactly as many
/// pods as the pool has addresses, each ADD retried as a runtime does: all
/// are placed, and the pool is then full (100 on every node).
fn six_nodes_fill_a_pool_of_shared_blocks(name: &'static str, share: Option<&'static str>) {
    let _took = Took::new(name);
    let mut c = Cluster::on_kubernetes(four_blocks(), 300.0);
    c.share_blocks = share;
    let counts = [11, 10, 10, 10, 10, 10];
    assert_eq!(counts.iter().sum::<usize>(), FOUR_BLOCKS_USABLE);
    let outs = race(&c, &counts, Some(Duration::from_secs(30)));
    let placed = check(&c, name, &outs);
    assert_eq!(placed, FOUR_BLOCKS_USABLE, "{name}: pods not placed in a pool with room for each");
    for node in NODES {
        let (code, msg) = failure(&c.add(node, &format!("{node}-extra")));
        assert_eq!(code, 100, "{name}: ADD on {node} in a full pool: {msg}");
    }
    for object in c.store.pool_blocks() {
        assert_eq!(object["spec"]["owner"]["shared"], true, "{name}: {object}");
    }
    // DEL of everything leaves no record and no lease.
    let dels: Vec<Outcome> = support::parallel(outs.len(), 6, |i| c.del(&outs[i].0, &outs[i].1));
    for out in &dels {
        out.assert_quiet_success();
    }
    assert!(c.addrs().is_empty(), "{name}: records after DEL of every pod: {:?}", c.addrs());
    for node in NODES {
        assert!(c.leases(node).is_empty(), "{name}: {node} holds leases after DEL of every pod");
    }
}

#[test]
fn six_nodes_fill_four_shared_blocks_by_default() {
    six_nodes_fill_a_pool_of_shared_blocks("six_nodes_fill_four_shared_blocks_by_default", None);
}

#[test]
fn six_nodes_fill_four_blocks_shared_always() {
    six_nodes_fill_a_pool_of_shared_blocks("six_nodes_fill_four_blocks_shared_always", Some("always"));
}

/// Blocks of each node's own (`shareBlocks` never): six nodes, four blocks.
/// A node with no block and nothing lent gets 100 (its owners lend at their
/// next call that reads the store: ipam-ds-cluster/README.md, "Lending and
/// borrowing"), so each ADD is tried once; what is checked is that nothing
/// is handed out twice or outside its node's blocks and records, and that
/// the owners placed every pod of theirs their blocks had room for.
#[test]
fn six_nodes_race_for_four_blocks_of_their_own() {
    let name = "six_nodes_race_for_four_blocks_of_their_own";
    let _took = Took::new(name);
    let mut c = Cluster::on_kubernetes(four_blocks(), 300.0);
    c.share_blocks = Some("never");
    let outs = race(&c, &[8; 6], None);
    let placed = check(&c, name, &outs);
    let owners: BTreeSet<String> = c.blocks().into_iter().map(|b| b.node).collect();
    assert!(!owners.is_empty(), "{name}: no block claimed");
    for object in c.store.pool_blocks() {
        assert_eq!(object["spec"]["owner"]["shared"], false, "{name}: {object}");
    }
    // An owner's pods fit its block (8 of at least 14): none failed.
    let failed_owners: Vec<String> = outs
        .iter()
        .filter(|(node, _, out, _)| out.status != 0 && owners.contains(node))
        .map(|(node, container, out, _)| format!("{container} on {node}: {}", brief(out)))
        .collect();
    assert!(
        failed_owners.is_empty(),
        "{name}: ADDs of nodes that own a block failed:\n  {}",
        failed_owners.join("\n  ")
    );
    eprintln!("{name}: {placed} placed; owners {owners:?}");
}

#[derive(Debug)]
enum Fate {
    Killed,
    Done(Outcome),
}

/// `command` of `container` on `node` (eth0), CNI_ARGS in `extra`, killed
/// `kill_after` the spawn when given (see [`run_killable`]).
fn killable(
    c: &Cluster<KubeStore>,
    command: &str,
    node: &str,
    container: &str,
    extra: &[(&str, &str)],
    kill_after: Option<Duration>,
) -> Fate {
    let bin = bin_dir().display().to_string();
    let mut env = vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", container),
        ("CNI_NETNS", NETNS_PATH),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", bin.as_str()),
    ];
    env.extend_from_slice(extra);
    match run_killable(env, c.dir.path(), c.config(node).to_string().as_bytes(), kill_after) {
        Some(out) => Fate::Done(out),
        None => Fate::Killed,
    }
}

/// The storm over shared blocks (32 blocks: auto shares them), where every
/// address handed out is a compare-and-swap of its block's object.
#[test]
fn kill_storm_over_shared_blocks() {
    storm("kill_storm_over_shared_blocks", None);
}

/// The storm over blocks of each node's own: claims (Claiming, then
/// Owned), adoption of a claim a kill left, addresses from the node
/// database.
#[test]
fn kill_storm_over_blocks_of_a_nodes_own() {
    storm("kill_storm_over_blocks_of_a_nodes_own", Some("never"));
}

/// ADD processes of three nodes (and DELs of their pods), half of them
/// SIGKILLed a random few milliseconds after their spawn, then the
/// runtime's DEL of every pod whose ADD did not answer success, GC on each
/// node keeping the pods that did, every claim a kill left adopted by its
/// node, and GC of every container.
fn storm(name: &'static str, share_blocks: Option<&'static str>) {
    let _took = Took::new(name);
    const STORM_NODES: [&str; 3] = ["n1", "n2", "n3"];
    const WORKERS: usize = 6;
    const STORM: Duration = Duration::from_secs(8);
    // 32 blocks of 16.
    let mut c = Cluster::on_kubernetes(
        json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/23"}], "blockSize": 28}]),
        300.0,
    );
    c.share_blocks = share_blocks;
    let tag = format!("ks-{}-", std::process::id());
    for n in STORM_NODES {
        added(&c.add(n, &format!("{tag}warm-{n}")), "a warm-up ADD");
    }
    // How long an undisturbed ADD takes here once a node has its block
    // (not its first, which registers the node and claims): the kills
    // land within it.
    let t = Instant::now();
    for n in STORM_NODES {
        added(&c.add(n, &format!("{tag}timed-{n}")), "a timed ADD");
        c.del(n, &format!("{tag}timed-{n}")).assert_quiet_success();
    }
    let typical = t.elapsed() / (2 * STORM_NODES.len() as u32);
    let max_delay_us = (typical.as_micros() as u64 * 3 / 2).max(5_000);
    let live: Mutex<Vec<(String, String)>> =
        Mutex::new(STORM_NODES.iter().map(|n| (n.to_string(), format!("{tag}warm-{n}"))).collect());
    #[derive(Default)]
    struct Tally {
        adds: usize,
        killed: usize,
        static_refused: usize,
        unexpected: Vec<String>,
        /// Pods whose ADD did not answer success (killed, or failed): the
        /// runtime DELs them.
        unfinished: Vec<(String, String)>,
        /// What each container went through.
        history: BTreeMap<String, Vec<String>>,
    }
    let tally = Mutex::new(Tally::default());
    let counter = AtomicUsize::new(0);
    let deadline = Instant::now() + STORM;
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (c, live, tally, counter, tag) = (&c, &live, &tally, &counter, &tag);
            s.spawn(move || {
                let mut rng = Rng::new(0x0c1b_e5ee_d000_u64 ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                while Instant::now() < deadline {
                    let node = STORM_NODES[w % STORM_NODES.len()];
                    // A DEL of a live pod, now and then, to free room (not killed).
                    let victim = {
                        let mut l = live.lock().unwrap();
                        let mine: Vec<usize> = (0..l.len()).filter(|i| l[*i].0 == node).collect();
                        (!mine.is_empty() && rng.percent(25)).then(|| l.remove(mine[rng.index(mine.len())]))
                    };
                    if let Some((_, id)) = victim {
                        let out = c.del(node, &id);
                        let mut t = tally.lock().unwrap();
                        if out.status != 0 {
                            t.unexpected.push(format!("DEL {id} on {node}: {}", brief(&out)));
                        }
                        t.history.entry(id).or_default().push(format!("DEL exit {}", out.status));
                        continue;
                    }
                    let kill = rng.percent(50).then(|| Duration::from_micros(rng.below(max_delay_us + 1)));
                    let id = format!("{tag}{}", counter.fetch_add(1, Ordering::Relaxed));
                    let wanted = rng
                        .percent(20)
                        .then(|| IpAddr::from(Ipv4Addr::new(10, 50, rng.below(2) as u8, 2 + rng.below(250) as u8)));
                    let args = wanted.map(|ip| format!("IgnoreUnknown=1;IP={ip}"));
                    let extra: Vec<(&str, &str)> = args.iter().map(|a| ("CNI_ARGS", a.as_str())).collect();
                    let fate = killable(c, "ADD", node, &id, &extra, kill);
                    let mut t = tally.lock().unwrap();
                    t.adds += 1;
                    let asked = wanted.map_or(String::new(), |ip| format!(" of {ip}"));
                    let event = match fate {
                        Fate::Killed => {
                            t.killed += 1;
                            t.unfinished.push((node.to_string(), id.clone()));
                            format!("ADD{asked} on {node} killed")
                        }
                        Fate::Done(out) if out.status == 0 => {
                            live.lock().unwrap().push((node.to_string(), id.clone()));
                            format!("ADD{asked} on {node} ok: {}", ipv4_of(out.result()))
                        }
                        Fate::Done(out) => {
                            let code = out.json.as_ref().and_then(|j| j["code"].as_u64());
                            t.unfinished.push((node.to_string(), id.clone()));
                            // A static address held elsewhere, or in another node's own block.
                            if wanted.is_some() && code == Some(101) {
                                t.static_refused += 1;
                            } else {
                                t.unexpected.push(format!("ADD {id} on {node} ({wanted:?}): {}", brief(&out)));
                            }
                            format!("ADD{asked} on {node} failed {code:?}")
                        }
                    };
                    t.history.entry(id).or_default().push(event);
                }
            });
        }
    });
    let waited = Instant::now();
    while !leftovers(&tag).is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(10), "killed calls still run: {:?}", leftovers(&tag));
        thread::sleep(Duration::from_millis(20));
    }
    let tally = tally.into_inner().unwrap();
    let live = live.into_inner().unwrap();
    eprintln!(
        "{name}: {} ADDs, {} killed (0-{:.1} ms after the spawn), {} static refused with 101, {} live",
        tally.adds,
        tally.killed,
        max_delay_us as f64 / 1000.0,
        tally.static_refused,
        live.len()
    );
    let story = |ip: &IpAddr, (n1, c1): &Holder, (n2, c2): &Holder| {
        format!(
            "{ip} is held by {n1} (container {c1}: {:?}) and by {n2} (container {c2}: {:?}); records: {:?}",
            tally.history.get(c1),
            tally.history.get(c2),
            c.addrs().into_iter().filter(|a| a.ip == *ip).collect::<Vec<_>>()
        )
    };
    let (_, twice) = held_by(&c, &STORM_NODES);
    let stories: Vec<String> = twice.iter().map(|(ip, a, b)| story(ip, a, b)).collect();
    assert!(twice.is_empty(), "{name}: held twice after the storm:\n  {}", stories.join("\n  "));

    // The runtime's DEL of every pod whose ADD did not answer success.
    for (node, id) in &tally.unfinished {
        let out = c.del(node, id);
        assert_eq!(
            out.status,
            0,
            "{name}: the runtime's DEL of {id} on {node} ({:?}): {}",
            tally.history.get(id),
            brief(&out)
        );
    }
    // GC on each node keeping its live pods.
    for n in STORM_NODES {
        let keep: Vec<String> = live.iter().filter(|(node, _)| node == n).map(|(_, id)| id.clone()).collect();
        c.gc(n, &keep).assert_quiet_success();
        let mut held: Vec<String> = c.attached(n).into_iter().map(|r| r.container_id).collect();
        held.sort();
        let mut expected = keep.clone();
        expected.sort();
        assert_eq!(held, expected, "{name}: {n} after the DELs and GC: only the pods told of success hold leases");
    }
    let (held, twice) = held_by(&c, &STORM_NODES);
    let stories: Vec<String> = twice.iter().map(|(ip, a, b)| story(ip, a, b)).collect();
    assert!(twice.is_empty(), "{name}: held twice after DEL and GC:\n  {}", stories.join("\n  "));
    assert_covered(&c, &held);
    let holders: BTreeSet<(String, String)> = held.values().cloned().collect();
    let stray: Vec<String> = c
        .addrs()
        .into_iter()
        .filter(|r| !r.container.is_empty() && !holders.contains(&(r.node.clone(), r.container.clone())))
        .map(|r| format!("{r:?}: {} went through {:?}", r.container, tally.history.get(&r.container)))
        .collect();
    assert!(stray.is_empty(), "{name}: records name containers no node holds:\n  {}", stray.join("\n  "));

    // Every claim in the store is its node's, known to its database or
    // adopted at its next claim (a kill between a claim's create and its
    // row leaves a Claiming or Owned block the database does not know).
    let mut adopted = Vec::new();
    for b in c.blocks().into_iter().filter(|b| !b.released) {
        assert!(STORM_NODES.contains(&b.node.as_str()), "{name}: {b:?}");
        let mut k = 0;
        while !c.node_blocks(&b.node).iter().any(|(net, _)| *net == b.net) {
            assert!(k < 400, "{name}: block {} is {}'s in the store, and {} did not adopt it", b.net, b.node, b.node);
            added(
                &c.add(&b.node, &format!("{tag}adopt-{}-{k}", b.net.start)),
                "an ADD driving a node to its next claim",
            );
            k += 1;
        }
        if k > 0 {
            adopted.push(format!("{} by {} after {k} ADDs", b.net, b.node));
        }
    }
    eprintln!("{name}: claims adopted: {adopted:?}");
    let held = held_once(&c, &STORM_NODES);
    assert_covered(&c, &held);

    // GC of every container: nothing is left that names one.
    for n in STORM_NODES {
        c.gc(n, &[]).assert_quiet_success();
        assert!(c.attached(n).is_empty(), "{name}: {n} holds leases after GC of everything: {:?}", c.attached(n));
    }
    let left: Vec<AddrRec> = c.addrs().into_iter().filter(|r| !r.container.is_empty()).collect();
    assert!(left.is_empty(), "{name}: records naming containers after GC of every container: {left:?}");
    assert!(tally.unexpected.is_empty(), "{name}: calls that failed on their own: {:#?}", tally.unexpected);
}
