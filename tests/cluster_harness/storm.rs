//! The kill -9 storm, on any store (tests/cluster_kill.rs on etcd,
//! tests/cluster_kube_race.rs on the Kubernetes API): ADDs and DELs of three
//! nodes from many threads at once, half of them SIGKILLed (their process
//! group) a random few milliseconds after their spawn; then what a runtime
//! does after (its DEL of an ADD that did not answer success, GC), every
//! claim a kill left adopted by its node, and DEL and GC of everything.
//!
//! What is checked, through the store's readers ([`Store::blocks`],
//! [`Store::addrs`]): no address held twice across the nodes, every address
//! held covered in the store (but a lease left by a killed DEL, for the next
//! DEL or GC), the runtime's DELs and GC leave exactly the pods told of
//! success, every claim a kill left adopted at its node's next claim, and
//! nothing left behind (lease, node record, address record) once every
//! container is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{added, brief, held_by, held_once, uncovered, Cluster, Fate, Holder, Store, Took};
use crate::stack::ipv4_of;
use crate::support::{leftovers, Rng};

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// The node whose runtime never DELs an ADD that did not answer success:
/// GC cleans after those (the others' runtimes DEL them first).
const NO_DEL_AFTER_FAILED_ADD: &str = "n3";
const WORKERS: usize = 6;
const STORM: Duration = Duration::from_secs(8);

/// The storm's pool: 32 blocks of 16 (the addresses asked for by name are
/// drawn from 10.50.0.0/23).
pub fn pools() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/23"}], "blockSize": 28}])
}

#[derive(Default, Debug)]
struct Tally {
    adds: usize,
    statics: usize,
    dels: usize,
    killed: usize,
    static_refused: usize,
    unexpected: Vec<String>,
    /// Pods whose ADD did not answer success (killed, or failed).
    unfinished: Vec<(String, String)>,
    /// What each container went through.
    history: BTreeMap<String, Vec<String>>,
}

/// The storm on a cluster of [`pools`] that `cluster` makes (`Cluster::new`,
/// `Cluster::on_kubernetes`), blocks shared as `share_blocks` says.
pub fn storm<S: Store + Sync>(
    name: &'static str,
    share_blocks: Option<&'static str>,
    cluster: impl FnOnce(Value, f64) -> Cluster<S>,
) {
    let _took = Took::new(name);
    let mut c = cluster(pools(), 300.0);
    c.share_blocks = share_blocks;
    let tag = format!("ks-{}-", std::process::id());
    let mut warm = Vec::new();
    for n in NODES {
        let id = format!("{tag}warm-{n}");
        let ip = added(&c.add(n, &id), "a warm-up ADD");
        warm.push((n.to_string(), id, ip));
    }
    // How long an undisturbed ADD takes here once a node has its block (not
    // its first, which registers the node and claims): the kills land
    // within it.
    let t = Instant::now();
    for n in NODES {
        added(&c.add(n, &format!("{tag}timed-{n}")), "a timed ADD");
        c.del(n, &format!("{tag}timed-{n}")).assert_quiet_success();
    }
    let typical = t.elapsed() / (2 * NODES.len() as u32);
    let max_delay_us = (typical.as_micros() as u64 * 3 / 2).max(5_000);
    // (node, container, address told) of every pod whose ADD answered success.
    let live: Mutex<Vec<(String, String, IpAddr)>> = Mutex::new(warm);
    let tally = Mutex::new(Tally::default());
    let counter = AtomicUsize::new(0);
    let deadline = Instant::now() + STORM;
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (c, live, tally, counter, tag) = (&c, &live, &tally, &counter, &tag);
            s.spawn(move || {
                let mut rng = Rng::new(0x005e_edc1_u64 ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                while Instant::now() < deadline {
                    let node = NODES[w % NODES.len()];
                    let kill = rng.percent(50).then(|| Duration::from_micros(rng.below(max_delay_us + 1)));
                    let victim = {
                        let mut l = live.lock().unwrap();
                        let mine: Vec<usize> = (0..l.len()).filter(|i| l[*i].0 == node).collect();
                        (!mine.is_empty() && rng.percent(35)).then(|| l.remove(mine[rng.index(mine.len())]))
                    };
                    if let Some((_, id, _)) = victim {
                        let fate = c.run_killable("DEL", &id, &c.config(node), &[], kill);
                        let mut t = tally.lock().unwrap();
                        t.dels += 1;
                        let event = match fate {
                            Fate::Killed => {
                                t.killed += 1;
                                "DEL killed".to_string()
                            }
                            Fate::Done(out) if out.status == 0 => "DEL ok".to_string(),
                            Fate::Done(out) => {
                                t.unexpected.push(format!("DEL {id} on {node}: {}", brief(&out)));
                                "DEL failed".to_string()
                            }
                        };
                        t.history.entry(id).or_default().push(event);
                        continue;
                    }
                    let id = format!("{tag}{}", counter.fetch_add(1, Ordering::Relaxed));
                    let wanted = rng
                        .percent(20)
                        .then(|| IpAddr::from(Ipv4Addr::new(10, 50, rng.below(2) as u8, 2 + rng.below(250) as u8)));
                    let args = wanted.map(|ip| format!("IgnoreUnknown=1;IP={ip}"));
                    let extra: Vec<(&str, &str)> = args.iter().map(|a| ("CNI_ARGS", a.as_str())).collect();
                    let fate = c.run_killable("ADD", &id, &c.config(node), &extra, kill);
                    let mut t = tally.lock().unwrap();
                    t.adds += 1;
                    t.statics += usize::from(wanted.is_some());
                    let asked = wanted.map_or(String::new(), |ip| format!(" of {ip}"));
                    let event = match fate {
                        Fate::Killed => {
                            t.killed += 1;
                            t.unfinished.push((node.to_string(), id.clone()));
                            format!("ADD{asked} on {node} killed")
                        }
                        Fate::Done(out) if out.status == 0 => {
                            let ip = ipv4_of(out.result());
                            live.lock().unwrap().push((node.to_string(), id.clone(), ip));
                            format!("ADD{asked} on {node} ok: {ip}")
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
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "{name}: processes of killed calls still run: {:?}",
            leftovers(&tag)
        );
        thread::sleep(Duration::from_millis(20));
    }
    let tally = tally.into_inner().unwrap();
    let live = live.into_inner().unwrap();
    eprintln!(
        "{name}: {} ADDs ({} static, {} refused 101), {} DELs, {} killed (0-{:.1} ms after the spawn), {} live",
        tally.adds,
        tally.statics,
        tally.static_refused,
        tally.dels,
        tally.killed,
        max_delay_us as f64 / 1000.0,
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

    // No address held twice; each held one covered in the store, except
    // those of a killed DEL: DEL releases the store's record
    // (ipam-ds-cluster) before the lease (ipam-da-static, next in the
    // stack), so a DEL killed between the two leaves a lease to the
    // runtime's next DEL or GC.
    let (held, twice) = held_by(&c, &NODES);
    let stories: Vec<String> = twice.iter().map(|(ip, a, b)| story(ip, a, b)).collect();
    assert!(twice.is_empty(), "{name}: held twice after the storm:\n  {}", stories.join("\n  "));
    for (node, id, ip) in &live {
        assert_eq!(held.get(ip), Some(&(node.clone(), id.clone())), "{name}: {id} on {node} was told {ip}");
    }
    let del_killed = |id: &str| tally.history.get(id).is_some_and(|h| h.iter().any(|e| e == "DEL killed"));
    let checked: BTreeMap<IpAddr, Holder> =
        held.iter().filter(|(_, (_, id))| !del_killed(id)).map(|(ip, v)| (*ip, v.clone())).collect();
    let after_killed_del = held.len() - checked.len();
    let problems: Vec<String> = uncovered(&c, &checked)
        .into_iter()
        .map(|p| {
            let id = checked.values().map(|(_, id)| id).find(|id| p.contains(&format!("(container {id})")));
            format!("{p}\n    its history: {:?}", id.and_then(|id| tally.history.get(id)))
        })
        .collect();
    assert!(problems.is_empty(), "{name}: {}", problems.join("\n"));
    eprintln!("{name}: {after_killed_del} lease(s) left by killed DELs, not checked against the store before GC");

    // The runtime's DEL of every pod whose ADD did not answer success (but
    // on the node whose runtime leaves them to GC).
    for (node, id) in tally.unfinished.iter().filter(|(node, _)| node != NO_DEL_AFTER_FAILED_ADD) {
        let out = c.del(node, id);
        assert_eq!(
            out.status,
            0,
            "{name}: the runtime's DEL of {id} on {node} ({:?}): {}",
            tally.history.get(id),
            brief(&out)
        );
    }
    // GC on each node keeping the pods told of success.
    for n in NODES {
        let keep: Vec<String> = live.iter().filter(|(node, _, _)| node == n).map(|(_, id, _)| id.clone()).collect();
        c.gc(n, &keep).assert_quiet_success();
        let mut rows: Vec<(String, IpAddr)> = c.leases(n).into_iter().map(|r| (r.container_id, r.address)).collect();
        rows.sort();
        let mut expected: Vec<(String, IpAddr)> =
            live.iter().filter(|(node, _, _)| node == n).map(|(_, id, ip)| (id.clone(), *ip)).collect();
        expected.sort();
        assert_eq!(rows, expected, "{name}: {n} after the DELs and GC: only the pods told of success hold leases");
    }
    let (held, twice) = held_by(&c, &NODES);
    let stories: Vec<String> = twice.iter().map(|(ip, a, b)| story(ip, a, b)).collect();
    assert!(twice.is_empty(), "{name}: held twice after DEL and GC:\n  {}", stories.join("\n  "));
    super::assert_covered(&c, &held);
    let holders: BTreeSet<Holder> = held.values().cloned().collect();
    let stray: Vec<String> = c
        .addrs()
        .into_iter()
        .filter(|r| !r.container.is_empty() && !holders.contains(&(r.node.clone(), r.container.clone())))
        .map(|r| format!("{r:?}: {} went through {:?}", r.container, tally.history.get(&r.container)))
        .collect();
    assert!(stray.is_empty(), "{name}: records name containers no node holds:\n  {}", stray.join("\n  "));

    // Every claim in the store is its node's, known to its database or
    // adopted at its next claim (a kill between a claim's write in the store
    // and its row in the node database leaves a claim the database does not
    // know).
    let mut adopted = Vec::new();
    for b in c.blocks().into_iter().filter(|b| !b.released) {
        assert!(NODES.contains(&b.node.as_str()), "{name}: {b:?}");
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
    let held = held_once(&c, &NODES);
    super::assert_covered(&c, &held);

    // DEL of every pod told of success, GC of every container: nothing is
    // left that names one.
    for (node, id, _) in &live {
        c.del(node, id).assert_quiet_success();
    }
    for n in NODES {
        c.gc(n, &[]).assert_quiet_success();
        assert_eq!(c.leases(n), Vec::new(), "{name}: {n} holds leases after DEL and GC of everything");
        assert_eq!(
            c.node_records(n),
            Vec::<Vec<String>>::new(),
            "{name}: {n} keeps cluster records after DEL and GC of everything"
        );
    }
    let left: Vec<String> = c
        .addrs()
        .iter()
        .map(|r| format!("{r:?}: {} went through {:?}", r.container, tally.history.get(&r.container)))
        .collect();
    assert!(
        left.is_empty(),
        "{name}: the store keeps address records after DEL and GC of everything, which no node database names:\n  {}",
        left.join("\n  ")
    );
    assert!(tally.unexpected.is_empty(), "{name}: calls that failed on their own: {:#?}", tally.unexpected);
}
