//! Crashes: full-stack ADDs through `ipam-delegated` killed with SIGKILL at
//! random moments (a seeded PRNG, so a failure can be replayed), several at
//! once, some allowed to finish. The orchestrator runs each delegate in the
//! delegate's own process group with PR_SET_PDEATHSIG=SIGKILL
//! (ipam-delegated/src/delegate/), so killing the orchestrator's group takes the
//! delegates with it. Afterwards the database must open, its lock must be
//! free, GC must recover every lease of an attachment whose ADD did not report
//! success, and the pool must fill up exactly.

mod stack;
mod support;

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stack::{address_range, leases, LeaseRow};
use support::Rng;
use support::{leftovers, run_killable, Outcome, Sandbox};

const DELEGATED: &str = "ipam-delegated";
const ATTEMPTS: usize = 300;
const CONCURRENT: usize = 6;
/// One attempt in this many is left to finish.
const LEFT_ALONE_ONE_IN: u64 = 6;
/// The kill comes this many microseconds after the spawn, at most.
const MAX_DELAY_US: u64 = 15_000;
const SEED: u64 = 0x5eed_c4a5_4001;
const NETWORK: &str = "crash-net";

/// What became of one attempt.
#[derive(Debug)]
enum Fate {
    /// Killed before it reported anything.
    Killed,
    /// Reported success with this address (finished before the kill, or left alone).
    Succeeded(IpAddr),
    /// Finished with a failure of its own: never expected here.
    Failed(String),
}

fn container(i: usize) -> String {
    format!("crash-{}-{i}", std::process::id())
}

/// Starts a full-stack ADD in its own process group, kills the group
/// `delay` after the spawn (unless `delay` is None), and says how it ended.
fn attempt(sb: &Sandbox, config: &[u8], id: &str, delay: Option<Duration>) -> Fate {
    let Some(out) = run_killable(sb.env("ADD", &[("CNI_CONTAINERID", id)]), &sb.workdir(), config, delay) else {
        return Fate::Killed;
    };
    match (out.status, &out.json) {
        (0, Some(result)) => Fate::Succeeded(stack::ipv4_of(result)),
        _ => Fate::Failed(format!("exit {}: stdout {:?}, stderr {:?}", out.status, out.stdout, out.stderr)),
    }
}

fn cni(sb: &Sandbox, command: &str, config: &Value, container: &str) -> Outcome {
    sb.cni(DELEGATED, command, config, &[("CNI_CONTAINERID", container)])
}

#[test]
fn killed_adds_leave_a_consistent_database_and_gc_recovers_their_leases() {
    let sb = Sandbox::new();
    // Exactly 400 addresses, 10.64.0.10 to 10.64.1.153, the gateway outside.
    let pools = json!([{"name": "crash", "ranges": [{
        "subnet": "10.64.0.0/23", "rangeStart": "10.64.0.10", "rangeEnd": "10.64.1.153", "gateway": "10.64.0.1"
    }]}]);
    let config = stack::config("1.1.0", NETWORK, "bridge", &sb.db(), pools);
    let range: HashSet<IpAddr> =
        address_range("10.64.0.10".parse().unwrap(), "10.64.1.153".parse().unwrap()).into_iter().collect();
    let capacity = range.len();
    assert_eq!(capacity, 400);
    // The database exists and the pool is registered before the first kill,
    // so that kills also land in the allocators' transactions. The next
    // ADDs, as many at once as later, say how long an undisturbed ADD takes
    // here (the median): the kills are spread over that time, and at least
    // over 0-15 ms.
    let bytes = config.to_string().into_bytes();
    let first = container(ATTEMPTS + CONCURRENT);
    let Fate::Succeeded(first_ip) = attempt(&sb, &bytes, &first, None) else { panic!("the first ADD failed") };
    let calibration: Vec<(String, Fate, Duration)> = thread::scope(|s| {
        let runs: Vec<_> = (0..CONCURRENT)
            .map(|k| {
                let (sb, bytes) = (&sb, &bytes);
                s.spawn(move || {
                    let id = container(ATTEMPTS + k);
                    let t = Instant::now();
                    let fate = attempt(sb, bytes, &id, None);
                    (id, fate, t.elapsed())
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut survivors: Vec<(String, IpAddr)> = vec![(first, first_ip)];
    for (id, fate, _) in &calibration {
        match fate {
            Fate::Succeeded(ip) => survivors.push((id.clone(), *ip)),
            other => panic!("undisturbed ADD {id}: {other:?}"),
        }
    }
    let mut took: Vec<Duration> = calibration.iter().map(|(_, _, took)| *took).collect();
    took.sort();
    let typical = took[took.len() / 2];
    let max_delay_us = MAX_DELAY_US.max(typical.as_micros() as u64);

    let next = AtomicUsize::new(0);
    let fates: Mutex<Vec<Option<Fate>>> = Mutex::new((0..ATTEMPTS).map(|_| None).collect());
    let started = Instant::now();
    thread::scope(|s| {
        for _ in 0..CONCURRENT {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ATTEMPTS {
                    break;
                }
                let mut rng = Rng::new(SEED ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let delay =
                    (rng.below(LEFT_ALONE_ONE_IN) != 0).then(|| Duration::from_micros(rng.below(max_delay_us + 1)));
                let fate = attempt(&sb, &bytes, &container(i), delay);
                fates.lock().unwrap()[i] = Some(fate);
            });
        }
    });
    let crash_time = started.elapsed();
    let fates: Vec<Fate> = fates.into_inner().unwrap().into_iter().map(Option::unwrap).collect();
    let failed: Vec<(usize, &String)> = fates
        .iter()
        .enumerate()
        .filter_map(|(i, f)| if let Fate::Failed(e) = f { Some((i, e)) } else { None })
        .collect();
    assert!(failed.is_empty(), "ADDs that finished with a failure of their own: {failed:#?}");
    survivors.extend(fates.iter().enumerate().filter_map(|(i, f)| {
        if let Fate::Succeeded(ip) = f {
            Some((container(i), *ip))
        } else {
            None
        }
    }));
    let killed = fates.iter().filter(|f| matches!(f, Fate::Killed)).count();

    // No delegate outlives its killed orchestrator for long.
    let waited = Instant::now();
    let mut seen_after_kills = None;
    loop {
        let left = leftovers(&format!("crash-{}-", std::process::id()));
        seen_after_kills.get_or_insert(left.len());
        if left.is_empty() {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "processes of killed ADDs still running after 10 s: {left:#?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let reaped_after = waited.elapsed();

    // The database is intact and opens for the sqlite3 shell.
    assert_eq!(stack::integrity_check(&sb.db()), "ok");
    let before_gc = leases(&sb.db());
    let ids: BTreeSet<&str> = before_gc.iter().map(|r| r.container_id.as_str()).collect();
    let distinct: BTreeSet<IpAddr> = before_gc.iter().map(|r| r.address).collect();
    assert_eq!(distinct.len(), before_gc.len(), "an address is recorded twice");
    for (id, ip) in &survivors {
        let row = before_gc.iter().find(|r| r.address == *ip);
        assert!(row.is_some_and(|r| &r.container_id == id), "{id} was told {ip}, the database says {row:?}");
    }
    let orphans = before_gc.len() - survivors.len();
    assert!(ids.len() == before_gc.len(), "one attachment holds two leases: {before_gc:#?}");

    // The lock is free: an ADD that waits at most 1 s for it succeeds, promptly.
    let mut quick = config.clone();
    quick["ipam"]["lockTimeout"] = json!(1);
    let t = Instant::now();
    let out = cni(&sb, "ADD", &quick, "crash-after-0");
    let quick_took = t.elapsed();
    survivors.push(("crash-after-0".into(), stack::ipv4_of(out.result())));
    assert!(quick_took < Duration::from_secs(5), "ADD with lockTimeout 1 took {quick_took:?}");

    // GC keeps the attachments whose ADD reported success and recovers the rest.
    let valid: Vec<(String, String)> = survivors.iter().map(|(id, _)| (id.clone(), "eth0".to_string())).collect();
    sb.cni(DELEGATED, "GC", &stack::gc_config(&config, &valid), &[]).assert_quiet_success();
    let row = |(id, ip): &(String, IpAddr)| LeaseRow {
        address: *ip,
        pool: "crash".into(),
        network: NETWORK.into(),
        container_id: id.clone(),
        ifname: "eth0".into(),
    };
    let mut expected: Vec<LeaseRow> = survivors.iter().map(row).collect();
    expected.sort();
    assert_eq!(leases(&sb.db()), expected, "after GC only the attachments told of success hold leases");

    // A fresh fill takes exactly the rest of the pool, with unique addresses.
    let fill = capacity - survivors.len();
    let next = AtomicUsize::new(0);
    let filled: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let t = Instant::now();
    thread::scope(|s| {
        for _ in 0..CONCURRENT {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= fill {
                    break;
                }
                let out = cni(&sb, "ADD", &config, &format!("crash-fill-{i}"));
                filled.lock().unwrap().push(out);
            });
        }
    });
    let fill_took = t.elapsed();
    let held: HashSet<IpAddr> = survivors.iter().map(|(_, ip)| *ip).collect();
    let mut fresh = BTreeSet::new();
    for out in filled.into_inner().unwrap() {
        let ip = stack::ipv4_of(out.result());
        assert!(range.contains(&ip), "{ip} is outside rangeStart..rangeEnd");
        assert!(!held.contains(&ip), "{ip} was handed out again while a survivor holds it");
        assert!(fresh.insert(ip), "{ip} was handed out twice in the fill");
    }
    assert_eq!(fresh.len(), fill);
    assert_eq!(cni(&sb, "ADD", &config, "crash-one-too-many").code(), 100, "the pool is exactly full");
    assert_eq!(leases(&sb.db()).len(), capacity);

    eprintln!(
        "crash: an undisturbed ADD took {typical:.2?} (median, {CONCURRENT} at once), so kills came 0-{:.1} ms after the spawn; \
         {ATTEMPTS} ADDs, {CONCURRENT} at a time, in {crash_time:.2?}: {killed} killed, {} reported success; \
         {} processes of killed ADDs seen just after, none after {reaped_after:.2?}; GC recovered {orphans} leases of \
         killed ADDs; ADD with lockTimeout 1 took {quick_took:.2?}; fill of the remaining {fill} addresses took {fill_took:.2?}",
        max_delay_us as f64 / 1000.0,
        fates.len() - killed,
        seen_after_kills.unwrap_or(0),
    );
}

/// Kills while the database is being created (the file, the lock file, WAL
/// mode, the schema): several first ADDs on a fresh database, half of them
/// killed at random moments early in their lives, round after round. Each time the
/// database must be intact and serve the next ADD at once.
#[test]
fn adds_killed_while_the_database_is_created() {
    const ROUNDS: usize = 100;
    const AT_ONCE: usize = 6;
    const EARLY_US: u64 = 25_000;
    let sb = Sandbox::new();
    let mut killed = 0;
    let mut succeeded = 0;
    let mut failed: Vec<String> = Vec::new();
    let started = Instant::now();
    for round in 0..ROUNDS {
        let db = sb.path().join(format!("fresh-{round}")).join("allocations.sqlite");
        let pools = json!([{"name": "fresh", "ranges": [{"subnet": "10.65.0.0/24"}]}]);
        let config = stack::config("1.1.0", NETWORK, "bridge", &db, pools);
        let bytes = config.to_string().into_bytes();
        let fates: Vec<Fate> = thread::scope(|s| {
            let runs: Vec<_> = (0..AT_ONCE)
                .map(|k| {
                    let (sb, bytes) = (&sb, &bytes);
                    s.spawn(move || {
                        let mut rng =
                            Rng::new(SEED ^ ((round * AT_ONCE + k) as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
                        // Half are killed, half left alone to meet what the others left.
                        let delay = (k & 1 == 0).then(|| Duration::from_micros(rng.below(EARLY_US + 1)));
                        attempt(sb, bytes, &container(round * AT_ONCE + k), delay)
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let mut told: Vec<IpAddr> = Vec::new();
        for fate in &fates {
            match fate {
                Fate::Killed => killed += 1,
                Fate::Succeeded(ip) => {
                    succeeded += 1;
                    told.push(*ip);
                }
                Fate::Failed(e) => failed.push(format!("round {round}: {e}")),
            }
        }
        // The next ADD opens the database (recovering what a killed writer
        // left, which the read-only sqlite3 shell cannot) and serves at once.
        let mut quick = config.clone();
        quick["ipam"]["lockTimeout"] = json!(1);
        let out = cni(&sb, "ADD", &quick, &format!("crash-fresh-after-{round}"));
        assert_eq!(out.status, 0, "round {round}: the ADD after the kills: {out:#?}");
        assert_eq!(stack::integrity_check(&db), "ok", "round {round}");
        let after = stack::ipv4_of(out.result());
        let rows = leases(&db);
        let distinct: BTreeSet<IpAddr> = rows.iter().map(|r| r.address).collect();
        assert_eq!(distinct.len(), rows.len(), "round {round}: an address recorded twice: {rows:#?}");
        for ip in told.iter().chain([&after]) {
            assert!(distinct.contains(ip), "round {round}: {ip} was reported but is not recorded: {rows:#?}");
        }
    }
    eprintln!(
        "crash while creating: {ROUNDS} fresh databases, {AT_ONCE} first ADDs, half of them killed 0-{} ms after the spawn, \
         in {:.2?}: {killed} killed, {succeeded} reported success, {} failed on their own; every database intact \
         and serving",
        EARLY_US / 1000,
        started.elapsed(),
        failed.len()
    );
    // An ADD that was not killed must not fail because a sibling was: the
    // lock wait is bounded by ipam.lockTimeout (10 s by default), and error
    // 11 is for a wait past that bound.
    assert!(
        failed.is_empty(),
        "{} ADDs that were not killed failed while siblings were killed during the database's creation; \
         the first: {}",
        failed.len(),
        failed[0]
    );
}
