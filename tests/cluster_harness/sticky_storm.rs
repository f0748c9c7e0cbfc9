//! The kill -9 storm of workload identities, on any store
//! (tests/cluster_sticky_kill.rs on etcd, tests/cluster_kube_sticky.rs on
//! the Kubernetes API): identities move between three nodes while ADDs and
//! DELs are SIGKILLed at random moments, and what each store's identities
//! and records say is checked after every round; with the helpers the
//! sticky kill tests share (calls of the sticky stack, identities as the
//! store holds them).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{added, brief, failure, held_by, Cluster, Fate, Store, Took};
use crate::stack::ipv4_of;
use crate::support::sticky::pod;
use crate::support::{leftovers, list_leases, Outcome, Rng, CLUSTER_STICKY_STACK};

pub const NODES: [&str; 3] = ["n1", "n2", "n3"];

// ---------------------------------------------------------------------------
// Pods and what etcd says of them

/// How long a released identity's address stays held, unless a test says.
pub const HOLD: u64 = 600;

pub fn sticky_config<S: Store>(c: &Cluster<S>, node: &str, hold: u64) -> Value {
    let mut config = c.config(node);
    config["ipam"]["delegates"] = json!(CLUSTER_STICKY_STACK);
    config["ipam"]["sticky"] = json!({"hold": hold});
    config
}

/// `command` of pod `name` (`None`: a pod without identity, no CNI_ARGS) in
/// `container` on `node`, with `hold` and the variables `extra`.
pub fn call<S: Store>(
    c: &Cluster<S>,
    command: &str,
    node: &str,
    container: &str,
    name: Option<&str>,
    hold: u64,
    extra: &[(&str, &str)],
) -> Outcome {
    let args = name.map(pod);
    let mut env: Vec<(&str, &str)> = args.iter().map(|a| ("CNI_ARGS", a.as_str())).collect();
    env.extend_from_slice(extra);
    c.run(command, container, &sticky_config(c, node, hold), &env)
}

pub fn assert_code(out: &Outcome, code: u64, what: &str) -> String {
    assert_ne!(out.status, 0, "{what} succeeded: {}", brief(out));
    let (got, msg) = failure(out);
    assert_eq!(got, code, "{what}: {}", brief(out));
    msg
}

/// `command` of pod `name` in `container` on `node`, its process group
/// SIGKILLed `kill_after` the spawn when given.
pub fn killable<S: Store>(
    c: &Cluster<S>,
    command: &str,
    node: &str,
    container: &str,
    name: &str,
    kill_after: Option<Duration>,
) -> Fate {
    let args = pod(name);
    c.run_killable(command, container, &sticky_config(c, node, HOLD), &[("CNI_ARGS", args.as_str())], kill_after)
}

/// A call that must not be killed and must succeed.
pub fn done<S: Store>(c: &Cluster<S>, command: &str, node: &str, container: &str, name: &str) -> Outcome {
    match killable(c, command, node, container, name, None) {
        Fate::Done(out) if out.status == 0 => out,
        other => panic!("{command} of {name} ({container}) on {node}: {other:?}"),
    }
}

/// An identity key (`_sticky/eth0/prod/<name>`) as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub node: String,
    pub container: String,
    pub addresses: Vec<IpAddr>,
    /// Unix seconds of the node that made the hold; 0 while live.
    pub until: i64,
}

/// Every identity of network cnet on eth0, by pod name (`prod/<name>`).
pub fn identity_keys<S: Store>(c: &Cluster<S>) -> BTreeMap<String, Key> {
    c.store
        .identities()
        .into_iter()
        .map(|(k, r)| {
            let name = k.strip_prefix("eth0/prod/").unwrap_or_else(|| panic!("{k}"));
            let text = |f: &str| r[f].as_str().unwrap_or_default().to_string();
            let addresses = r["addresses"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()?.parse().ok()).collect())
                .unwrap_or_default();
            let key = Key {
                node: text("node"),
                container: text("container"),
                addresses,
                until: r["until"].as_i64().unwrap_or(0),
            };
            (name.to_string(), key)
        })
        .collect()
}

pub fn identity_key<S: Store>(c: &Cluster<S>, name: &str) -> Option<Key> {
    identity_keys(c).remove(name)
}

/// No address held by two attachments across `nodes`' databases.
pub fn assert_none_twice<S: Store>(c: &Cluster<S>, nodes: &[&str], when: &str) {
    let (_, twice) = held_by(c, nodes);
    assert!(twice.is_empty(), "{when}: addresses held twice across the nodes: {twice:?}");
}

pub fn now_unix() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Processes still running with a container id starting with `tag`.
pub fn assert_no_leftovers(tag: &str) {
    let waited = Instant::now();
    while !leftovers(tag).is_empty() {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "processes of killed calls still run: {:?}",
            leftovers(tag)
        );
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------
// 1. kill -9 at every step while identities move between nodes

/// One pod identity, as the runtime knows it.
#[derive(Debug, Clone, Default)]
pub struct Pod {
    pub name: String,
    /// Where it runs, when its last ADD succeeded: node, container, address.
    pub live: Option<(String, String, IpAddr)>,
    /// The address of its first successful ADD: it keeps it.
    pub first: Option<IpAddr>,
    /// Its calls, for the messages.
    pub history: Vec<String>,
    /// Calls that failed by themselves (not killed).
    pub unexpected: Vec<String>,
    pub seq: usize,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub adds: usize,
    pub dels: usize,
    pub killed: usize,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.adds += o.adds;
        self.dels += o.dels;
        self.killed += o.killed;
    }
}

/// Kills: in `percent` of the calls, at a moment up to `max_delay` after
/// the spawn.
pub struct Killer {
    pub rng: Rng,
    pub percent: usize,
    pub max_delay: Duration,
}

impl Killer {
    fn next(&mut self) -> Option<Duration> {
        let micros = self.max_delay.as_micros() as u64;
        self.rng.percent(self.percent).then(|| Duration::from_micros(self.rng.below(micros + 1)))
    }
}

/// Most attempts of one ADD or DEL before the test gives up on it.
pub const ATTEMPTS: usize = 40;

/// DEL of `pod` in `container` on `node`, killable, until one succeeds: a
/// runtime tries a DEL again until it does.
pub fn del_until_done<S: Store>(
    c: &Cluster<S>,
    tag: &str,
    pod: &mut Pod,
    node: &str,
    container: &str,
    k: &mut Killer,
    n: &mut Counts,
) {
    for _ in 0..ATTEMPTS {
        n.dels += 1;
        match killable(c, "DEL", node, &format!("{tag}{container}"), &pod.name, k.next()) {
            Fate::Killed => {
                n.killed += 1;
                pod.history.push(format!("DEL {container} on {node} killed"));
            }
            Fate::Done(out) if out.status == 0 => {
                pod.history.push(format!("DEL {container} on {node} ok"));
                return;
            }
            Fate::Done(out) => {
                pod.history.push(format!("DEL {container} on {node} failed"));
                pod.unexpected.push(format!("DEL {container} on {node}: {}", brief(&out)));
            }
        }
    }
    panic!(
        "DEL of {} ({container}) on {node} never succeeded: {:?}\nits failures: {:#?}",
        pod.name, pod.history, pod.unexpected
    );
}

/// The pod moves: DEL where it runs, then ADD on `to` in a new container
/// until one succeeds; a killed or failed ADD is followed by its DEL, as a
/// runtime does, and the next attempt is a new container.
pub fn move_pod<S: Store>(c: &Cluster<S>, tag: &str, pod: &mut Pod, to: &str, k: &mut Killer, n: &mut Counts) {
    if let Some((node, container, _)) = pod.live.take() {
        del_until_done(c, tag, pod, &node, &container, k, n);
    }
    for _ in 0..ATTEMPTS {
        pod.seq += 1;
        let container = format!("{}-{}", pod.name, pod.seq);
        n.adds += 1;
        match killable(c, "ADD", to, &format!("{tag}{container}"), &pod.name, k.next()) {
            Fate::Done(out) if out.status == 0 => {
                let ip = ipv4_of(out.result());
                pod.history.push(format!("ADD {container} on {to} ok: {ip}"));
                pod.first.get_or_insert(ip);
                pod.live = Some((to.to_string(), container, ip));
                return;
            }
            Fate::Done(out) => {
                pod.history.push(format!("ADD {container} on {to} failed"));
                pod.unexpected.push(format!("ADD {container} on {to}: {}", brief(&out)));
            }
            Fate::Killed => {
                n.killed += 1;
                pod.history.push(format!("ADD {container} on {to} killed"));
            }
        }
        del_until_done(c, tag, pod, to, &container, k, n);
    }
    panic!("ADD of {} on {to} never succeeded: {:?}\nits failures: {:#?}", pod.name, pod.history, pod.unexpected);
}

/// What every round must leave, all calls done: see [`storm`].
pub fn check_round<S: Store>(c: &Cluster<S>, tag: &str, pods: &[Pod], round: usize) {
    let story = |ip: &IpAddr| -> String {
        let of: Vec<String> = pods
            .iter()
            .filter(|p| p.history.iter().any(|h| h.ends_with(&format!(": {ip}"))))
            .map(|p| format!("{}: {:?}", p.name, p.history))
            .collect();
        of.join("\n    ")
    };
    // No address held by two attachments across the node databases.
    let (held, twice) = held_by(c, &NODES);
    let twice: Vec<String> = twice.iter().map(|t| format!("{t:?}\n    {}", story(&t.0))).collect();
    assert!(twice.is_empty(), "round {round}: addresses held twice across the nodes:\n  {}", twice.join("\n  "));
    // No two live ADD results share an address.
    let mut told: BTreeMap<IpAddr, &str> = BTreeMap::new();
    for p in pods {
        if let Some((_, _, ip)) = &p.live {
            if let Some(other) = told.insert(*ip, &p.name) {
                panic!("round {round}: {} and {other} were both told {ip}\n    {}", p.name, story(ip));
            }
        }
    }
    // Each node leases exactly what its live pods were told (every killed
    // ADD and every DEL was followed by a DEL that succeeded).
    let expected: BTreeMap<IpAddr, (String, String)> = pods
        .iter()
        .filter_map(|p| p.live.as_ref())
        .map(|(node, container, ip)| (*ip, (node.clone(), format!("{tag}{container}"))))
        .collect();
    assert_eq!(held, expected, "round {round}: the node databases' leases are not those of the live pods");
    // etcd: each live identity's key names its node and container, with
    // its address; no other key, and no key held (every pod is live).
    let keys = identity_keys(c);
    for p in pods {
        let (node, container, ip) = p.live.as_ref().expect("every pod is live after a round");
        let want = Key { node: node.clone(), container: format!("{tag}{container}"), addresses: vec![*ip], until: 0 };
        assert_eq!(keys.get(&p.name), Some(&want), "round {round}: etcd's key of {}: {:?}", p.name, p.history);
    }
    let names: BTreeSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    let strays: Vec<&String> = keys.keys().filter(|k| !names.contains(k.as_str())).collect();
    assert!(strays.is_empty(), "round {round}: identity keys of no pod: {strays:?}");
    // Every address record names the live attachment holding its address:
    // none is held for an identity (all are live), none is left over.
    for r in c.addrs() {
        let holder = expected.get(&r.ip);
        assert!(
            !r.node.is_empty() && holder == Some(&(r.node.clone(), r.container.clone())),
            "round {round}: etcd's record {r:?} is not that of the live attachment holding {} ({holder:?})\n    {}",
            r.ip,
            story(&r.ip)
        );
    }
    // The holds the nodes keep (a node holds an identity's address in a
    // block of its own for a while after the identity left): each of a
    // pod's own address, so none stands for another's.
    for node in NODES {
        for h in list_leases(&c.db(node)).as_array().expect("an array").iter() {
            if !matches!(h["state"].as_str(), Some("held" | "expired")) {
                continue;
            }
            let name = h["identity"].as_str().and_then(|i| i.strip_prefix("prod/")).unwrap_or_default();
            let ip: IpAddr = h["address"].as_str().and_then(|a| a.parse().ok()).expect("an address");
            let pod = pods.iter().find(|p| p.name == name);
            assert!(
                pod.is_some_and(|p| p.first == Some(ip)),
                "round {round}: {node} holds {ip} for {name:?}, not its address: {h}"
            );
        }
    }
    // Stickiness survived the kills.
    for p in pods {
        let (_, _, ip) = p.live.as_ref().expect("live");
        assert_eq!(Some(*ip), p.first, "round {round}: {} lost its address: {:?}", p.name, p.history);
    }
    assert_no_leftovers(tag);
}

/// Identities move between three nodes, every ADD and DEL killed at a
/// random moment in 40 % of the calls; after each round every check of
/// [`check_round`]. Why the address survives a kill at every step (with
/// etcd up, within the hold):
///
/// - ADD, before the identity's key is claimed: nothing changed.
/// - ADD, after the claim (the key is live on the killed container): its
///   DEL makes the key held again (or deletes it when the identity never
///   had an address). An identity's first ADD killed after it leased an
///   address: its DEL holds that one, and the next ADD takes it over, so
///   "its address" is that of its first ADD that succeeded. Killed after a
///   grant in a shared block and before the lease: the grant's record names
///   no identity, DEL releases it, and the identity had no address yet.
/// - ADD, taking a held identity over: the lease and a `writing` row are in
///   the node database before the etcd transaction; killed before it, DEL
///   finds the key not live on the container and leaves etcd's hold as is;
///   killed after it, DEL holds the addresses again (the record is the
///   row's). See [`a_take_over_killed_between_etcd_and_the_node_database`].
/// - DEL, killed before the etcd transaction: the next DEL does it; after
///   it and before the lease ends here, the next DEL finds the key held by
///   this node with these addresses and ends the lease.
pub fn storm<S: Store + Sync>(name: &'static str, c: Cluster<S>, tag: &str) {
    let _took = Took::new(name);
    const PODS: usize = 18;
    const ROUNDS: usize = 8;
    const WORKERS: usize = 5;
    // How long an undisturbed call takes here: the kills land within it.
    let t = Instant::now();
    for n in NODES {
        let container = format!("{tag}warm-{n}");
        added(&call(&c, "ADD", n, &container, None, HOLD, &[]), "a pod without identity");
        call(&c, "DEL", n, &container, None, HOLD, &[]).assert_quiet_success();
    }
    let typical = t.elapsed() / (2 * NODES.len() as u32);
    let max_delay = (typical * 3 / 2).max(Duration::from_millis(5));
    let mut pods: Vec<Pod> = (0..PODS).map(|i| Pod { name: format!("sts-{i}"), ..Pod::default() }).collect();
    let total = Mutex::new(Counts::default());
    for round in 0..ROUNDS {
        thread::scope(|s| {
            for (w, chunk) in pods.chunks_mut(PODS.div_ceil(WORKERS)).enumerate() {
                let (c, total) = (&c, &total);
                s.spawn(move || {
                    let seed = 0x5eed_0000 ^ ((round as u64) << 8) ^ w as u64;
                    let mut k = Killer { rng: Rng::new(seed), percent: 40, max_delay };
                    let mut n = Counts::default();
                    for pod in chunk {
                        // Another node than the one it runs on.
                        let from = pod.live.as_ref().map(|(node, _, _)| node.clone());
                        let others: Vec<&str> = NODES.iter().copied().filter(|n| Some(*n) != from.as_deref()).collect();
                        let to = *k.rng.pick(&others);
                        move_pod(c, tag, pod, to, &mut k, &mut n);
                    }
                    *total.lock().unwrap() += n;
                });
            }
        });
        let unexpected: Vec<String> = pods.iter().flat_map(|p| p.unexpected.iter().cloned()).collect();
        let stories: Vec<String> =
            pods.iter().filter(|p| !p.unexpected.is_empty()).map(|p| format!("{}: {:?}", p.name, p.history)).collect();
        assert!(
            unexpected.is_empty(),
            "round {round}: calls that failed by themselves:\n  {}\ntheir pods' calls:\n  {}",
            unexpected.join("\n  "),
            stories.join("\n  ")
        );
        check_round(&c, tag, &pods, round);
    }
    let n = *total.lock().unwrap();
    eprintln!(
        "{name}: {PODS} identities, {ROUNDS} rounds: {} ADDs, {} DELs, {} killed (0-{:.1} ms after the spawn)",
        n.adds,
        n.dels,
        n.killed,
        max_delay.as_secs_f64() * 1000.0
    );
    // Every pod goes: each identity is held in etcd with its address, and
    // no node leases anything.
    for pod in &pods {
        let (node, container, _) = pod.live.clone().expect("live");
        done(&c, "DEL", &node, &format!("{tag}{container}"), &pod.name);
    }
    let (held, _) = held_by(&c, &NODES);
    assert!(held.is_empty(), "leases after every pod went: {held:?}");
    let keys = identity_keys(&c);
    for pod in &pods {
        let key = keys.get(&pod.name).unwrap_or_else(|| panic!("{} has no key", pod.name));
        assert!(key.until > 0 && key.addresses == vec![pod.first.unwrap()], "{}: {key:?}", pod.name);
    }
    assert_no_leftovers(tag);
}
