//! Sticky addresses under churn, through the real stack (ipam-delegated
//! running ipam-ds-pool, ipam-da-static, ipam-da-sticky and
//! ipam-da-sequential on one database): 200 pods, each a workload identity
//! (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME), re-created again and again by
//! 64 workers at once, each time under a new container id, with kill -9 at
//! random moments of ADDs and DELs. A killed call is retried as a runtime
//! would: a killed DEL is run again; a killed ADD's container is DELeted and
//! the pod added again under another new container id.
//!
//! Afterwards every pod is back on the address it first had, no address is
//! on two attachments, and nothing leaked: the database holds one live lease
//! per pod, no hold and no sharer, and the rest of the pool is free.

mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stack::LeaseRow;
use support::{leftovers, parallel, run_args, run_killable, suite_bin, Outcome, Rng, Sandbox, STICKY_STACK};

const NETWORK: &str = "churn-net";
const POOL: &str = "churn";
const PODS: usize = 200;
/// Addresses of the pool beyond one per pod.
const SLACK: usize = 30;
const WORKERS: usize = 64;
/// How often each pod is re-created: 1000 re-creations, about 10 s on two
/// idle cores, and well under a minute with the load of a parallel build.
const ROUNDS: usize = 5;
/// Of the ADDs and DELs, the share killed at a random moment.
const KILL_PERCENT: usize = 20;
/// Kills come at most this long after the spawn, or the median time of an
/// undisturbed ADD at the same concurrency, whichever is longer.
const MIN_KILL_WINDOW: Duration = Duration::from_millis(15);
/// Attempts of one DEL, or ADDs of one pod, before the test gives up on it:
/// with one in five killed, 25 kills in a row do not happen.
const MAX_ATTEMPTS: usize = 25;
/// "Try again later": a call that waited ipam.lockTimeout for the lock.
const TRY_AGAIN_LATER: u64 = 11;
const MAX_RETRIES_ON_11: u32 = 20;
const SEED: u64 = 0x5717_c4a2_2022;

/// Container ids of this test run, for finding its processes.
fn prefix() -> String {
    format!("sticky-churn-{}-", std::process::id())
}

fn container(pod: usize, generation: u32) -> String {
    format!("{}{pod}-g{generation}", prefix())
}

fn cni_args(pod: usize) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=churn;K8S_POD_NAME=pod-{pod}")
}

fn identity(pod: usize) -> String {
    format!("churn/pod-{pod}")
}

/// What became of one call.
enum Fate {
    /// The kill came first.
    Killed,
    /// It finished (after its retries on code 11).
    Done(Outcome),
}

/// A pod as the runtime knows it: its live attachment and what its ADD said.
struct Pod {
    /// The address of its first ADD, which it must keep.
    original: IpAddr,
    generation: u32,
    container: String,
    result: Value,
}

#[derive(Default)]
struct Counts {
    adds: AtomicUsize,
    dels: AtomicUsize,
    killed_adds: AtomicUsize,
    killed_dels: AtomicUsize,
    retries_on_11: AtomicUsize,
    max_call_us: AtomicU64,
}

struct Churn<'a> {
    sb: &'a Sandbox,
    config: Value,
    kill_window: Duration,
    counts: Counts,
}

impl Churn<'_> {
    /// Runs `command` for `pod`'s attachment `ctr` (with `prev` as prevResult),
    /// killed `kill` after the spawn when given; again after a backoff while
    /// it answers 11, as a runtime does.
    fn call(&self, command: &str, pod: usize, ctr: &str, prev: Option<&Value>, kill: Option<Duration>) -> Fate {
        let mut config = self.config.clone();
        if let Some(prev) = prev {
            config["prevResult"] = prev.clone();
        }
        let stdin = config.to_string().into_bytes();
        let env = self.sb.env(command, &[("CNI_CONTAINERID", ctr), ("CNI_ARGS", &cni_args(pod))]);
        let mut retries = 0;
        loop {
            let started = Instant::now();
            let out = run_killable(env.clone(), &self.sb.workdir(), &stdin, kill);
            self.counts.max_call_us.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            let Some(out) = out else { return Fate::Killed };
            let try_again =
                out.status != 0 && out.json.as_ref().and_then(|j| j["code"].as_u64()) == Some(TRY_AGAIN_LATER);
            if !try_again || retries == MAX_RETRIES_ON_11 {
                return Fate::Done(out);
            }
            retries += 1;
            self.counts.retries_on_11.fetch_add(1, Ordering::Relaxed);
            thread::sleep(Duration::from_millis(20 << (retries - 1).min(5)));
        }
    }

    /// A kill moment for the next call, for [`KILL_PERCENT`] of the calls.
    fn maybe_kill(&self, rng: &mut Rng) -> Option<Duration> {
        let window = self.kill_window.as_micros() as u64;
        rng.percent(KILL_PERCENT).then(|| Duration::from_micros(rng.below(window + 1)))
    }

    /// DEL of `ctr` until one run of it is not killed; that one must succeed.
    fn del(&self, pod: usize, ctr: &str, prev: Option<&Value>, rng: &mut Rng) -> Result<(), String> {
        for _ in 0..MAX_ATTEMPTS {
            self.counts.dels.fetch_add(1, Ordering::Relaxed);
            match self.call("DEL", pod, ctr, prev, self.maybe_kill(rng)) {
                Fate::Killed => {
                    self.counts.killed_dels.fetch_add(1, Ordering::Relaxed);
                }
                Fate::Done(out) if out.status == 0 && out.stdout.trim().is_empty() => return Ok(()),
                Fate::Done(out) => return Err(format!("DEL of pod-{pod}'s {ctr}: {out:#?}")),
            }
        }
        Err(format!("DEL of pod-{pod}'s {ctr} was killed {MAX_ATTEMPTS} times in a row"))
    }

    /// The pod is deleted and created again under a new container id; a
    /// killed ADD's container is DELeted and the pod added under yet
    /// another. Every ADD that reports success must give the pod its address.
    fn re_create(&self, number: usize, pod: &mut Pod, rng: &mut Rng) -> Result<(), String> {
        self.del(number, &pod.container.clone(), Some(&pod.result.clone()), rng)?;
        for _ in 0..MAX_ATTEMPTS {
            pod.generation += 1;
            let ctr = container(number, pod.generation);
            self.counts.adds.fetch_add(1, Ordering::Relaxed);
            match self.call("ADD", number, &ctr, None, self.maybe_kill(rng)) {
                Fate::Killed => {
                    self.counts.killed_adds.fetch_add(1, Ordering::Relaxed);
                    self.del(number, &ctr, None, rng)?;
                }
                Fate::Done(out) if out.status == 0 => {
                    let result = out.result().clone();
                    let got = stack::addresses(&result);
                    if got != [pod.original] {
                        return Err(format!(
                            "pod-{number} re-created as {ctr} got {got:?} instead of its address {}",
                            pod.original
                        ));
                    }
                    pod.container = ctr;
                    pod.result = result;
                    return Ok(());
                }
                Fate::Done(out) => return Err(format!("ADD of pod-{number} as {ctr}: {out:#?}")),
            }
        }
        Err(format!("the ADDs of pod-{number} were killed {MAX_ATTEMPTS} times in a row"))
    }
}

/// One row of `leases` as the sqlite3 shell reads it, holds included.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    address: IpAddr,
    container_id: String,
    ifname: String,
    identity: Option<String>,
    held_until: Option<i64>,
}

/// `sql` through `sqlite3 -readonly -json`: what an administrator reads.
fn query(db: &Path, sql: &str) -> Vec<Value> {
    let out = Command::new("sqlite3")
        .args(["-readonly", "-json"])
        .arg(db)
        .arg(sql)
        .stdin(Stdio::null())
        .output()
        .expect("the sqlite3 shell is needed to read the database (apt-get install sqlite3)");
    assert!(out.status.success(), "sqlite3 {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // An empty result prints nothing at all.
    if text.trim().is_empty() {
        return Vec::new();
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("sqlite3 -json printed {text:?}: {e}"))
}

fn rows(db: &Path) -> Vec<Row> {
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_else(|| panic!("{k} in {v}")).to_string();
    query(db, "SELECT address, container_id, ifname, identity, held_until FROM leases ORDER BY key")
        .iter()
        .map(|v| Row {
            address: text(v, "address").parse().unwrap_or_else(|e| panic!("address in {v}: {e}")),
            container_id: text(v, "container_id"),
            ifname: text(v, "ifname"),
            identity: v["identity"].as_str().map(str::to_string),
            held_until: v["held_until"].as_i64(),
        })
        .collect()
}

#[test]
fn sixty_four_workers_re_create_200_pods_with_kill_9_and_each_keeps_its_address() {
    let sb = Sandbox::new();
    let (first, last) = ("10.66.0.10".parse().unwrap(), "10.66.0.239".parse().unwrap());
    let range: BTreeSet<IpAddr> = stack::address_range(first, last).into_iter().collect();
    assert_eq!(range.len(), PODS + SLACK);
    let config = json!({
        "cniVersion": "1.1.0",
        "name": NETWORK,
        "type": "bridge",
        "ipam": {
            "type": "ipam-delegated",
            "delegates": STICKY_STACK,
            "database": sb.db(),
            "pools": [{"name": POOL, "ranges": [{
                "subnet": "10.66.0.0/24", "rangeStart": first, "rangeEnd": last, "gateway": "10.66.0.1"
            }]}],
            // Far longer than the test: no hold ends during it.
            "sticky": {"hold": 3600}
        }
    });
    let mut churn = Churn { sb: &sb, config, kill_window: MIN_KILL_WINDOW, counts: Counts::default() };

    // Every pod is added once, undisturbed, 64 at a time: its address, and
    // how long an ADD takes at this concurrency (the build of the suite's
    // executables, on the first call, not counted).
    support::bin_dir();
    let started = Instant::now();
    let firsts = parallel(PODS, WORKERS, |i| {
        let t = Instant::now();
        let fate = churn.call("ADD", i, &container(i, 0), None, None);
        (fate, t.elapsed())
    });
    let first_adds = started.elapsed();
    let mut took: Vec<Duration> = firsts.iter().map(|(_, t)| *t).collect();
    took.sort();
    churn.kill_window = MIN_KILL_WINDOW.max(took[took.len() / 2]);
    let pods: Vec<Mutex<Pod>> = firsts
        .into_iter()
        .enumerate()
        .map(|(i, (fate, _))| {
            let Fate::Done(out) = fate else { unreachable!("nothing is killed yet") };
            let result = out.result().clone();
            let original = stack::ipv4_of(&result);
            Mutex::new(Pod { original, generation: 0, container: container(i, 0), result })
        })
        .collect();
    let originals: BTreeSet<IpAddr> = pods.iter().map(|p| p.lock().unwrap().original).collect();
    assert_eq!(originals.len(), PODS, "two pods got one address");
    assert!(originals.is_subset(&range), "an address outside the range: {originals:?}");

    // The churn: every pod re-created ROUNDS times, 64 pods at a time. A
    // worker takes the next (round, pod); the pod's lock keeps one pod's
    // calls in order, as one runtime's are.
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = Instant::now();
    parallel(ROUNDS * PODS, WORKERS, |task| {
        let number = task % PODS;
        let mut rng = Rng::new(SEED ^ (task as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut pod = pods[number].lock().unwrap();
        if let Err(e) = churn.re_create(number, &mut pod, &mut rng) {
            failures.lock().unwrap().push(e);
        }
    });
    let churn_time = started.elapsed();
    let counts = &churn.counts;
    let summary = format!(
        "{PODS} first ADDs in {first_adds:.2?} (median {:.1?}, so kills came 0-{:.1?} after the spawn); \
         {ROUNDS} rounds of re-creation by {WORKERS} workers in {churn_time:.2?}: {} ADDs ({} killed), {} DELs \
         ({} killed), {} retries on code 11, the longest call {:.2?}",
        took[took.len() / 2],
        churn.kill_window,
        counts.adds.load(Ordering::Relaxed),
        counts.killed_adds.load(Ordering::Relaxed),
        counts.dels.load(Ordering::Relaxed),
        counts.killed_dels.load(Ordering::Relaxed),
        counts.retries_on_11.load(Ordering::Relaxed),
        Duration::from_micros(counts.max_call_us.load(Ordering::Relaxed)),
    );
    eprintln!("sticky churn: {summary}");
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} re-creations failed ({summary}); the first ones:\n{}",
        failures.len(),
        ROUNDS * PODS,
        failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(counts.killed_adds.load(Ordering::Relaxed) > 0 && counts.killed_dels.load(Ordering::Relaxed) > 0);

    // No process of a killed call outlives it for long.
    let waited = Instant::now();
    loop {
        let left = leftovers(&prefix());
        if left.is_empty() {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(10), "processes of killed calls still running: {left:#?}");
        thread::sleep(Duration::from_millis(20));
    }

    // The runtime's view: every pod's live attachment has its first address,
    // and no two live attachments were given one address.
    let pods: Vec<Pod> = pods.into_iter().map(|p| p.into_inner().unwrap()).collect();
    let told: Vec<IpAddr> = pods.iter().flat_map(|p| stack::addresses(&p.result)).collect();
    assert_eq!(told.iter().collect::<BTreeSet<_>>().len(), PODS, "two live attachments were given one address");
    for (i, pod) in pods.iter().enumerate() {
        assert_eq!(stack::addresses(&pod.result), [pod.original], "pod-{i}'s last ADD");
    }

    // The operator's view (which also opens the database after the kills).
    let mut listed: Vec<LeaseRow> = pods
        .iter()
        .map(|p| LeaseRow {
            address: p.original,
            pool: POOL.into(),
            network: NETWORK.into(),
            container_id: p.container.clone(),
            ifname: "eth0".into(),
        })
        .collect();
    listed.sort();
    assert_eq!(stack::leases(&sb.db()), listed, "the listing: one lease per pod, its live attachment's ({summary})");
    let check =
        run_args(&suite_bin("ipam-delegated"), &["--database", sb.db().to_str().unwrap(), "check"], &[], b"", None);
    assert_eq!((check.status, check.stdout.as_str()), (0, "ok\n"), "ipam-delegated check: {check:#?}");

    // The database's own rows, holds included: exactly one live lease per
    // pod, tied to its identity, on its first address; no hold of a killed
    // container left, and nobody shares anything.
    let mut expected: Vec<Row> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Row {
            address: p.original,
            container_id: p.container.clone(),
            ifname: "eth0".into(),
            identity: Some(identity(i)),
            held_until: None,
        })
        .collect();
    expected.sort();
    assert_eq!(rows(&sb.db()), expected, "the rows of leases ({summary})");
    assert_eq!(query(&sb.db(), "SELECT count(*) AS n FROM lease_sharers"), [json!({"n": 0})]);
    assert_eq!(stack::integrity_check(&sb.db()), "ok");

    // The rest of the pool is free: exactly SLACK new pods fit, none of them
    // on a pod's address, and the next one is 100.
    let newcomers = parallel(SLACK + 1, WORKERS, |i| {
        let Fate::Done(out) = churn.call("ADD", PODS + i, &format!("{}new-{i}", prefix()), None, None) else {
            unreachable!("nothing is killed")
        };
        out
    });
    let mut fresh = BTreeSet::new();
    let mut full = 0;
    for out in &newcomers {
        if out.status == 0 {
            let ip = stack::ipv4_of(out.result());
            assert!(range.contains(&ip) && !originals.contains(&ip) && fresh.insert(ip), "a newcomer got {ip}");
        } else {
            assert_eq!(out.code(), 100, "{out:#?}");
            full += 1;
        }
    }
    assert_eq!((fresh.len(), full), (SLACK, 1), "the pool had room for exactly {SLACK} more pods");
}
