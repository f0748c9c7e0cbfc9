//! Many real processes at once: `ipam-delegated` running the real delegates
//! (`ipam-ds-pool`, `ipam-da-static`, `ipam-da-sequential`) on one database,
//! from many threads that each start processes one after the other. Checks
//! what the contract promises under contention: every ADD that succeeds has an
//! address nobody else holds, a full pool says 100 and nothing else, DEL and
//! GC leak nothing, and the database says what the plugins said.
//!
//! # Code 11, and retries
//!
//! A plugin that waited `ipam.lockTimeout` (10 s) for the database's lock
//! answers 11, "try again later", and a runtime retries it. On a busy machine
//! (load 12 on 2 cores) some of 1000 contending ADDs do wait that long, so the
//! tests judge what users depend on: every call succeeds once its retries
//! are done. Each call here is retried on code 11 only, after a short backoff
//! that grows, at most [`MAX_RETRIES`] times; any other failure counts at
//! once. Each test prints how many retries it needed in total and the most
//! one call needed (with `--nocapture`, and in its assertion messages).

mod stack;
mod support;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stack::{address_range, addresses, leases, LeaseRow};
use support::Rng;
use support::{parallel, Outcome, Sandbox};

const DELEGATED: &str = "ipam-delegated";
const VERSION: &str = "1.1.0";

/// "Try again later": the lock stayed taken for `ipam.lockTimeout`.
const TRY_AGAIN_LATER: u64 = 11;
/// How often one call is retried on code 11 before its 11 counts as a failure.
const MAX_RETRIES: u32 = 20;

/// Runs `command` through ipam-delegated for the attachment (`container`,
/// `ifname`), as a runtime does: again after a backoff while it answers 11.
fn cni(sb: &Sandbox, retries: &Retries, command: &str, config: &Value, container: &str, ifname: &str) -> Outcome {
    call(sb, retries, command, config, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", ifname)])
}

/// Runs `command` through ipam-delegated with `overrides` of the runtime's
/// environment; retries it on code 11 (only), at most [`MAX_RETRIES`] times,
/// and records how often in `retries`.
fn call(sb: &Sandbox, retries: &Retries, command: &str, config: &Value, overrides: &[(&str, &str)]) -> Outcome {
    let mut attempt = 0;
    loop {
        let out = sb.cni(DELEGATED, command, config, overrides);
        let try_again = out.status != 0 && out.json.as_ref().and_then(|j| j["code"].as_u64()) == Some(TRY_AGAIN_LATER);
        if !try_again || attempt == MAX_RETRIES {
            retries.record(command, attempt, try_again);
            return out;
        }
        attempt += 1;
        thread::sleep(backoff(attempt, overrides));
    }
}

/// 20 ms, doubling up to 640 ms, plus up to half as much again, spread by
/// the attachment (deterministic) so that the retries of calls that failed
/// together do not all come back together.
fn backoff(attempt: u32, overrides: &[(&str, &str)]) -> Duration {
    let base = 20u64 << (attempt - 1).min(5);
    let mut hasher = DefaultHasher::new();
    (overrides, attempt).hash(&mut hasher);
    Duration::from_millis(base + hasher.finish() % (base / 2 + 1))
}

/// The retries on code 11 of one test, by command.
#[derive(Default)]
struct Retries {
    by_command: Mutex<BTreeMap<String, RetryCount>>,
}

#[derive(Default, Clone, Copy)]
struct RetryCount {
    calls: usize,
    /// Calls that needed at least one retry.
    retried: usize,
    retries: u64,
    /// The most retries one call needed.
    max: u32,
    /// Calls still answering 11 after [`MAX_RETRIES`] retries.
    gave_up: usize,
}

impl Retries {
    fn record(&self, command: &str, retries: u32, gave_up: bool) {
        let mut map = self.by_command.lock().unwrap();
        let count = map.entry(command.to_string()).or_default();
        count.calls += 1;
        count.retried += usize::from(retries > 0);
        count.retries += u64::from(retries);
        count.max = count.max.max(retries);
        count.gave_up += usize::from(gave_up);
    }

    /// E.g. "retries on code 11: ADD 42 in total (for 30 of 2000 calls, at
    /// most 3 for one); DEL none (1000 calls)".
    fn summary(&self) -> String {
        let map = self.by_command.lock().unwrap();
        let parts: Vec<String> = map
            .iter()
            .map(|(command, c)| {
                let gave_up = if c.gave_up > 0 {
                    format!(", {} still 11 after {MAX_RETRIES} retries", c.gave_up)
                } else {
                    String::new()
                };
                if c.retries == 0 {
                    format!("{command} none ({} call{})", c.calls, if c.calls == 1 { "" } else { "s" })
                } else {
                    format!(
                        "{command} {} in total (for {} of {} calls, at most {} for one{gave_up})",
                        c.retries, c.retried, c.calls, c.max
                    )
                }
            })
            .collect();
        format!("retries on code 11: {}", if parts.is_empty() { "no calls".into() } else { parts.join("; ") })
    }
}

/// Asserts that every outcome is a successful ADD (once its retries were
/// done) with exactly one IPv4 address, all of them distinct and in `pool`;
/// returns them in order.
fn unique_ipv4s(outcomes: &[Outcome], pool: &HashSet<IpAddr>, what: &str, retries: &Retries) -> Vec<IpAddr> {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.status != 0).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} ADDs failed ({}); the first: {:#?}",
        failed.len(),
        outcomes.len(),
        retries.summary(),
        failed[0]
    );
    let ips: Vec<IpAddr> = outcomes.iter().map(|o| stack::ipv4_of(o.result())).collect();
    let distinct: BTreeSet<IpAddr> = ips.iter().copied().collect();
    assert_eq!(distinct.len(), ips.len(), "{what}: an address was handed out twice");
    let outside: Vec<&IpAddr> = ips.iter().filter(|ip| !pool.contains(ip)).collect();
    assert!(outside.is_empty(), "{what}: addresses outside the pool's usable range: {outside:?}");
    ips
}

/// The leases the database should hold: (address, container) pairs.
fn expected_rows(network: &str, ifname: &str, owners: &[(String, IpAddr)]) -> Vec<LeaseRow> {
    let mut rows: Vec<LeaseRow> = owners
        .iter()
        .map(|(id, ip)| LeaseRow {
            address: *ip,
            pool: "bulk".into(),
            network: network.into(),
            container_id: id.clone(),
            ifname: ifname.into(),
        })
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_thousand_adds_from_64_processes_then_all_dels_then_a_thousand_more() {
    const WORKERS: usize = 64;
    const TOTAL: usize = 1000;
    let sb = Sandbox::new();
    let network = "bulk-net";
    // A /22: 1022 usable addresses less the gateway, 1021, room for 1000.
    let pools = json!([{"name": "bulk", "ranges": [{"subnet": "10.61.0.0/22", "gateway": "10.61.0.1"}]}]);
    let config = stack::config(VERSION, network, "bridge", &sb.db(), pools);
    let pool: HashSet<IpAddr> =
        address_range("10.61.0.2".parse().unwrap(), "10.61.3.254".parse().unwrap()).into_iter().collect();
    let retries = Retries::default();

    // Round 1: 1000 ADDs, 64 at a time.
    let started = Instant::now();
    let first = parallel(TOTAL, WORKERS, |i| cni(&sb, &retries, "ADD", &config, &format!("bulk-a{i}"), "eth0"));
    let add1 = started.elapsed();
    eprintln!("bulk: round 1 of {TOTAL} ADDs done in {add1:.2?}; {}", retries.summary());
    let ips1 = unique_ipv4s(&first, &pool, "round 1", &retries);
    let owners1: Vec<(String, IpAddr)> = ips1.iter().enumerate().map(|(i, ip)| (format!("bulk-a{i}"), *ip)).collect();
    assert_eq!(
        leases(&sb.db()),
        expected_rows(network, "eth0", &owners1),
        "the database after round 1 ({})",
        retries.summary()
    );

    // Every DEL at once, each with its ADD's result, as a runtime does it.
    let started = Instant::now();
    let dels = parallel(TOTAL, WORKERS, |i| {
        cni(&sb, &retries, "DEL", &support::with_prev(&config, first[i].result()), &format!("bulk-a{i}"), "eth0")
    });
    let del = started.elapsed();
    eprintln!("bulk: {TOTAL} DELs done in {del:.2?}; {}", retries.summary());
    for (i, out) in dels.iter().enumerate() {
        assert!(out.status == 0 && out.stdout.is_empty(), "DEL of bulk-a{i} ({}): {out:#?}", retries.summary());
    }
    assert_eq!(leases(&sb.db()), Vec::new(), "every lease is gone after the DELs ({})", retries.summary());

    // Round 2: nothing leaked, so 1000 new attachments fit again (the
    // round-robin cursor now wraps around the end of the pool).
    let started = Instant::now();
    let second = parallel(TOTAL, WORKERS, |i| cni(&sb, &retries, "ADD", &config, &format!("bulk-b{i}"), "eth0"));
    let add2 = started.elapsed();
    eprintln!("bulk: round 2 of {TOTAL} ADDs done in {add2:.2?}; {}", retries.summary());
    let ips2 = unique_ipv4s(&second, &pool, "round 2", &retries);
    let owners2: Vec<(String, IpAddr)> = ips2.iter().enumerate().map(|(i, ip)| (format!("bulk-b{i}"), *ip)).collect();
    assert_eq!(
        leases(&sb.db()),
        expected_rows(network, "eth0", &owners2),
        "the database after round 2 ({})",
        retries.summary()
    );
    let reused = ips2.iter().filter(|ip| ips1.contains(ip)).count();

    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    eprintln!(
        "bulk: {TOTAL} ADDs by {WORKERS} workers in {add1:.2?} ({:.0} ADDs/s); {TOTAL} DELs in {del:.2?} ({:.0} DELs/s); \
         {TOTAL} more ADDs in {add2:.2?} ({:.0} ADDs/s), {reused} of them reusing a round-1 address; {}",
        rate(TOTAL, add1),
        rate(TOTAL, del),
        rate(TOTAL, add2),
        retries.summary()
    );
}

#[test]
fn a_pool_of_100_addresses_and_150_simultaneous_adds() {
    const CONTENDERS: usize = 150;
    let sb = Sandbox::new();
    let network = "scarce-net";
    // Exactly 100 addresses, 10.62.0.10 to 10.62.0.109; the gateway is outside the range.
    let pools = json!([{"name": "scarce", "ranges": [{
        "subnet": "10.62.0.0/25", "rangeStart": "10.62.0.10", "rangeEnd": "10.62.0.109", "gateway": "10.62.0.1"
    }]}]);
    let config = stack::config(VERSION, network, "bridge", &sb.db(), pools);
    let range: HashSet<IpAddr> =
        address_range("10.62.0.10".parse().unwrap(), "10.62.0.109".parse().unwrap()).into_iter().collect();
    assert_eq!(range.len(), 100);
    let retries = Retries::default();

    // All 150 start together.
    let gate = Barrier::new(CONTENDERS);
    let started = Instant::now();
    let outcomes = parallel(CONTENDERS, CONTENDERS, |i| {
        gate.wait();
        cni(&sb, &retries, "ADD", &config, &format!("scarce-{i}"), "eth0")
    });
    let took = started.elapsed();
    eprintln!("scarce: {CONTENDERS} simultaneous ADDs done in {took:.2?}; {}", retries.summary());

    let mut won: Vec<(String, IpAddr)> = Vec::new();
    let mut full = 0;
    let mut other = Vec::new();
    for (i, out) in outcomes.iter().enumerate() {
        if out.status == 0 {
            won.push((format!("scarce-{i}"), stack::ipv4_of(out.result())));
        } else if out.json.is_some() && out.code() == 100 {
            full += 1;
        } else {
            other.push(out);
        }
    }
    assert!(
        other.is_empty(),
        "outcomes other than success or 100: {} of them ({}); the first: {:#?}",
        other.len(),
        retries.summary(),
        other[0]
    );
    assert_eq!((won.len(), full), (100, 50), "successes and code-100 errors ({})", retries.summary());
    let ips: BTreeSet<IpAddr> = won.iter().map(|(_, ip)| *ip).collect();
    assert_eq!(ips.len(), 100, "an address was handed out twice");
    assert!(ips.iter().all(|ip| range.contains(ip)), "an address outside rangeStart..rangeEnd: {ips:?}");

    // The losers hold nothing; the winners hold exactly what they were told.
    let mut expected: Vec<LeaseRow> = won
        .iter()
        .map(|(id, ip)| LeaseRow {
            address: *ip,
            pool: "scarce".into(),
            network: network.into(),
            container_id: id.clone(),
            ifname: "eth0".into(),
        })
        .collect();
    expected.sort();
    assert_eq!(leases(&sb.db()), expected);

    // The stack says it cannot serve another ADD, and it cannot.
    assert_eq!(cni(&sb, &retries, "STATUS", &config, "scarce-status", "eth0").code(), 50);
    assert_eq!(cni(&sb, &retries, "ADD", &config, "scarce-late", "eth0").code(), 100);
    eprintln!(
        "scarce: {CONTENDERS} simultaneous ADDs into 100 addresses in {took:.2?}: 100 succeeded, {full} got 100; {}",
        retries.summary()
    );
}

// ---------------------------------------------------------------------------
// Churn

const CHURN_WORKERS: usize = 16;
/// Attachments per worker: slot pairs share a container id (eth0 and net1),
/// even slots ask for their IPv6 address by name.
const SLOTS: usize = 8;
const CHURN_TIME: Duration = Duration::from_secs(20);
const CHURN_MAX_OPS_PER_WORKER: usize = 150;
const CHURN_SEED: u64 = 0x00c0_ffee_2026;

/// One attachment of a worker, as the worker last left it.
#[derive(Default)]
struct Slot {
    /// Bumped when the attachment is abandoned: the next one is a new container.
    generation: u32,
    /// The result of the last successful ADD while the attachment is added.
    live: Option<Value>,
}

fn slot_id(worker: usize, slot: usize, generation: u32) -> (String, &'static str) {
    (format!("churn-w{worker}-c{}-g{generation}", slot / 2), if slot & 1 == 0 { "eth0" } else { "net1" })
}

/// The IPv6 address an even slot asks for by name: in fd00:63:0:0:1::/80,
/// which sequential allocation never hands out (it is excluded).
fn static_v6(worker: usize, slot: usize, generation: u32) -> IpAddr {
    format!("fd00:63::1:{worker:x}:{slot:x}:{generation:x}").parse().unwrap()
}

/// What the workers leave behind.
#[derive(Default)]
struct ChurnLog {
    ops: BTreeMap<&'static str, usize>,
    adds_time: Duration,
    /// Attachments forgotten without DEL (a container that vanished): GC's work.
    abandoned: Vec<((String, String), Vec<IpAddr>)>,
    /// Addresses given back by a DEL.
    deleted: Vec<IpAddr>,
    failures: Vec<String>,
}

#[test]
fn churn_of_add_del_check_by_16_workers_then_gc() {
    let sb = Sandbox::new();
    let network = "churn-net";
    let pools = json!([
        // 254 addresses for sequential allocation: 10.63.1.0/24 is excluded.
        {"name": "churn4", "ranges": [{"subnet": "10.63.0.0/23"}], "exclude": ["10.63.1.0/24"]},
        {"name": "churn6", "ranges": [{"subnet": "fd00:63::/64"}], "exclude": ["fd00:63:0:0:1::/80"]}
    ]);
    let config = stack::config(VERSION, network, "bridge", &sb.db(), pools);
    let log = Mutex::new(ChurnLog::default());
    let retries = Retries::default();
    let slots: Vec<Mutex<Vec<Slot>>> =
        (0..CHURN_WORKERS).map(|_| Mutex::new((0..SLOTS).map(|_| Slot::default()).collect())).collect();

    let started = Instant::now();
    thread::scope(|s| {
        for (worker, mine) in slots.iter().enumerate() {
            let (sb, config, log, retries) = (&sb, &config, &log, &retries);
            s.spawn(move || {
                let mut rng = Rng::new(CHURN_SEED ^ (worker as u64).wrapping_mul(0x9E37_79B9));
                let mut mine = mine.lock().unwrap();
                let mut ops = 0;
                while ops < CHURN_MAX_OPS_PER_WORKER && started.elapsed() < CHURN_TIME {
                    ops += 1;
                    let slot = rng.below(SLOTS as u64) as usize;
                    let state = &mut mine[slot];
                    let (id, ifname) = slot_id(worker, slot, state.generation);
                    let wanted = (slot & 1 == 0).then(|| static_v6(worker, slot, state.generation));
                    let add_config = match wanted {
                        Some(ip) => stack::with_static(config, &[ip]),
                        None => config.clone(),
                    };
                    let dice = rng.below(100);
                    let op = match (&state.live, dice) {
                        (None, _) => "ADD",
                        (Some(_), 0..=39) => "CHECK",
                        (Some(_), 40..=69) => "DEL",
                        (Some(_), 70..=97) => "re-ADD",
                        (Some(_), _) => "abandon",
                    };
                    let mut failure = None;
                    let t = Instant::now();
                    match op {
                        "ADD" | "re-ADD" => {
                            let out = cni(sb, retries, "ADD", &add_config, &id, ifname);
                            log.lock().unwrap().adds_time += t.elapsed();
                            if out.status != 0 {
                                failure = Some(format!("{op} {id}/{ifname}: {out:#?}"));
                            } else {
                                let got = out.result().clone();
                                let ips = addresses(&got);
                                let families = (
                                    ips.iter().filter(|i| i.is_ipv4()).count(),
                                    ips.iter().filter(|i| i.is_ipv6()).count(),
                                );
                                if families != (1, 1) || wanted.is_some_and(|w| !ips.contains(&w)) {
                                    failure = Some(format!(
                                        "{op} {id}/{ifname}: wanted {wanted:?}, one address per family, got {got}"
                                    ));
                                } else if let Some(before) = state.live.as_ref().filter(|b| {
                                    addresses(b).into_iter().collect::<BTreeSet<_>>() != ips.iter().copied().collect()
                                }) {
                                    failure = Some(format!(
                                        "re-ADD {id}/{ifname} changed the addresses: {before} then {got}"
                                    ));
                                }
                                state.live = Some(got);
                            }
                        }
                        "CHECK" => {
                            let prev = state.live.as_ref().unwrap();
                            let out = cni(sb, retries, "CHECK", &support::with_prev(config, prev), &id, ifname);
                            if out.status != 0 || !out.stdout.is_empty() {
                                failure = Some(format!("CHECK {id}/{ifname} with {prev}: {out:#?}"));
                            }
                        }
                        "DEL" => {
                            let prev = state.live.take().unwrap();
                            let out = cni(sb, retries, "DEL", &support::with_prev(config, &prev), &id, ifname);
                            if out.status != 0 || !out.stdout.is_empty() {
                                failure = Some(format!("DEL {id}/{ifname}: {out:#?}"));
                            }
                            log.lock().unwrap().deleted.extend(addresses(&prev));
                        }
                        _ => {
                            let prev = state.live.take().unwrap();
                            state.generation += 1;
                            log.lock().unwrap().abandoned.push(((id.clone(), ifname.to_string()), addresses(&prev)));
                        }
                    }
                    let mut log = log.lock().unwrap();
                    *log.ops.entry(op).or_default() += 1;
                    log.failures.extend(failure);
                }
            });
        }
    });
    let churn_time = started.elapsed();
    let log = log.into_inner().unwrap();
    eprintln!("churn: the churn took {churn_time:.2?}; {}", retries.summary());
    assert!(
        log.failures.is_empty(),
        "{} operations failed during the churn ({}); the first ones:\n{}",
        log.failures.len(),
        retries.summary(),
        log.failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n")
    );

    // The live attachments and what their last ADD said.
    let mut live: Vec<((String, String), Value)> = Vec::new();
    for (worker, mine) in slots.iter().enumerate() {
        for (slot, state) in mine.lock().unwrap().iter().enumerate() {
            if let Some(result) = &state.live {
                let (id, ifname) = slot_id(worker, slot, state.generation);
                live.push(((id, ifname.to_string()), result.clone()));
            }
        }
    }
    let row = |owner: &(String, String), ip: IpAddr| LeaseRow {
        address: ip,
        pool: if ip.is_ipv4() { "churn4" } else { "churn6" }.into(),
        network: network.into(),
        container_id: owner.0.clone(),
        ifname: owner.1.clone(),
    };
    let live_rows: Vec<LeaseRow> =
        live.iter().flat_map(|(owner, result)| addresses(result).into_iter().map(|ip| row(owner, ip))).collect();
    let abandoned_rows: Vec<LeaseRow> =
        log.abandoned.iter().flat_map(|(owner, ips)| ips.iter().map(|ip| row(owner, *ip))).collect();

    // The database holds exactly the live and the abandoned attachments'
    // addresses, each with one owner.
    let mut expected: Vec<LeaseRow> = live_rows.iter().chain(&abandoned_rows).cloned().collect();
    expected.sort();
    let on_record = leases(&sb.db());
    let distinct: BTreeSet<IpAddr> = on_record.iter().map(|r| r.address).collect();
    assert_eq!(distinct.len(), on_record.len(), "an address is recorded twice");
    assert_eq!(
        on_record,
        expected,
        "the database after the churn (live + abandoned attachments; {})",
        retries.summary()
    );

    // Every live attachment passes CHECK with its last ADD result.
    let checks = parallel(live.len(), CHURN_WORKERS, |i| {
        let ((id, ifname), result) = &live[i];
        cni(&sb, &retries, "CHECK", &support::with_prev(&config, result), id, ifname)
    });
    for (out, (owner, _)) in checks.iter().zip(&live) {
        assert!(out.status == 0 && out.stdout.is_empty(), "final CHECK of {owner:?} ({}): {out:#?}", retries.summary());
    }

    // GC keeps exactly the live ones.
    let valid: Vec<(String, String)> = live.iter().map(|(owner, _)| owner.clone()).collect();
    call(&sb, &retries, "GC", &stack::gc_config(&config, &valid), &[]).assert_quiet_success();
    let mut expected = live_rows.clone();
    expected.sort();
    assert_eq!(leases(&sb.db()), expected, "the database after GC: the live attachments only");

    // What dead attachments held is free again: a fresh attachment gets each
    // such address by asking for it (every IPv4 one, every abandoned IPv6 one,
    // and the first 100 IPv6 ones given back by DEL).
    let held: HashSet<IpAddr> = live_rows.iter().map(|r| r.address).collect();
    let abandoned: BTreeSet<IpAddr> = log.abandoned.iter().flat_map(|(_, ips)| ips.iter().copied()).collect();
    let deleted: BTreeSet<IpAddr> = log.deleted.iter().copied().collect();
    let mut probes: BTreeSet<IpAddr> =
        abandoned.iter().chain(deleted.iter().filter(|ip| ip.is_ipv4())).copied().collect();
    probes.extend(deleted.iter().filter(|ip| ip.is_ipv6()).take(100));
    let probes: Vec<IpAddr> = probes.into_iter().filter(|ip| !held.contains(ip)).collect();
    let claims = parallel(probes.len(), CHURN_WORKERS, |i| {
        let ip = probes[i];
        let pool = if ip.is_ipv4() { "churn4" } else { "churn6" };
        let claim = stack::with_pools(&stack::with_static(&config, &[ip]), &[pool]);
        cni(&sb, &retries, "ADD", &claim, &format!("churn-probe-{i}"), "eth0")
    });
    for (out, ip) in claims.iter().zip(&probes) {
        assert_eq!(out.status, 0, "claiming {ip}, which a dead attachment held ({}): {out:#?}", retries.summary());
        assert_eq!(addresses(out.result()), vec![*ip], "claiming {ip}: {out:#?}");
    }
    assert_eq!(leases(&sb.db()).len(), live_rows.len() + probes.len());

    let total: usize = log.ops.values().sum();
    let adds = log.ops.get("ADD").copied().unwrap_or(0) + log.ops.get("re-ADD").copied().unwrap_or(0);
    eprintln!(
        "churn: {total} operations by {CHURN_WORKERS} workers in {churn_time:.2?} ({:.0} ops/s) {:?}; \
         ADD latency {:.1?} on average; then {} live attachments checked, GC released {} leases of {} abandoned \
         attachments, {} freed addresses claimed again ({} IPv4); {}",
        total as f64 / churn_time.as_secs_f64(),
        log.ops,
        log.adds_time / adds.max(1) as u32,
        live.len(),
        abandoned_rows.len(),
        log.abandoned.len(),
        probes.len(),
        probes.iter().filter(|ip| ip.is_ipv4()).count(),
        retries.summary()
    );
}
