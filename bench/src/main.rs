//! ipam-bench: the suite against Debian's host-local, side by side.
//!
//! `cargo run --release -p ipam-bench` builds the suite's executables in
//! release mode, runs every scenario with real processes (CNI_* environment
//! like a runtime, a fresh database / dataDir per scenario), interleaving the
//! suite and host-local, prints a table, and writes `BENCHMARKS.md` and
//! `benchmarks/add-latency-vs-fill.svg` at the repository root.
//!
//! `BENCH_QUICK=1` runs reduced counts (for development; not for the record).
//! `BENCH_TMPDIR` chooses where the temporary databases go (default: the
//! system temp dir).

mod chart;
mod report;

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use std::{fs, io, thread};

use serde_json::{json, Value};
use shared::addr::{from_u128, to_u128};
use shared::pool::{self, Pool};
use shared::store::AllocationStore;
use shared::{Attachment, CniArgs};

pub const HOST_LOCAL: &str = "/usr/lib/cni/host-local";
const NETWORK: &str = "bench";
const CNI_VERSION: &str = "1.0.0";
const SUITE_EXECUTABLES: [&str; 4] = ["ipam-delegated", "ipam-ds-pool", "ipam-da-sequential", "ipam-da-static"];

/// How much to run.
#[derive(Clone, Copy)]
pub struct Counts {
    pub latency: usize,
    pub throughput: usize,
    pub workers: usize,
    pub big_fill: u128,
    pub big_adds: usize,
    pub trials: usize,
}

const FULL: Counts =
    Counts { latency: 300, throughput: 1000, workers: 16, big_fill: 1_000_000, big_adds: 20, trials: 5 };
const QUICK: Counts = Counts { latency: 40, throughput: 200, workers: 16, big_fill: 100_000, big_adds: 5, trials: 1 };

/// Where things are.
struct Ctx {
    /// The directory holding the suite's executables: CNI_PATH for the suite.
    bins: PathBuf,
    /// A fresh directory per run; every scenario gets its own subdirectory.
    root: PathBuf,
    counts: Counts,
}

impl Ctx {
    fn exe(&self, name: &str) -> PathBuf {
        self.bins.join(name)
    }

    fn scenario_dir(&self, name: &str) -> PathBuf {
        let dir = self.root.join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create scenario dir");
        dir
    }
}

/// One plugin process: how long from spawn to reaping, what it printed, and
/// its peak resident memory from wait4's rusage.
pub struct Run {
    pub wall: Duration,
    pub success: bool,
    pub out: Vec<u8>,
    pub maxrss_kib: i64,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.out).unwrap_or(Value::Null)
    }

    fn first_address(&self) -> Option<IpAddr> {
        let v = self.json();
        let text = v["ips"][0]["address"].as_str()?;
        text.split('/').next()?.parse().ok()
    }

    fn expect_ok(self, what: &str) -> Run {
        if !self.success {
            panic!("{what} failed: {}", String::from_utf8_lossy(&self.out));
        }
        self
    }
}

/// An executable with its configuration, run as a runtime would.
#[derive(Clone)]
struct Plugin {
    exe: PathBuf,
    cni_path: PathBuf,
    config: Vec<u8>,
}

impl Plugin {
    fn run(&self, command: &str, container: &str) -> Run {
        exec(&self.exe, command, container, &self.cni_path, &self.config)
    }

    fn run_rss(&self, command: &str, container: &str) -> Run {
        exec_rss(&self.exe, command, container, &self.cni_path, &self.config)
    }
}

fn exec(exe: &Path, command: &str, container: &str, cni_path: &Path, stdin: &[u8]) -> Run {
    spawn(exe, &[], command, container, cni_path, stdin)
}

/// As [`exec`], through the `--rusage-of` launcher: `maxrss_kib` is then the
/// plugin's own peak RSS (see [`rusage_launcher`]).
fn exec_rss(exe: &Path, command: &str, container: &str, cni_path: &Path, stdin: &[u8]) -> Run {
    let me = std::env::current_exe().expect("current exe");
    let args = [std::ffi::OsStr::new("--rusage-of"), exe.as_os_str()];
    spawn(&me, &args, command, container, cni_path, stdin)
}

fn spawn(
    program: &Path,
    args: &[&std::ffi::OsStr],
    command: &str,
    container: &str,
    cni_path: &Path,
    stdin: &[u8],
) -> Run {
    let launcher = !args.is_empty();
    let started = Instant::now();
    // Reaped with wait4 below, for its rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", format!("/var/run/netns/{container}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if launcher {
            Stdio::piped()
        } else if std::env::var_os("BENCH_STDERR").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    if let Some(mut pipe) = child.stdin.take() {
        // Configurations are far below the pipe buffer: no deadlock.
        let _ = pipe.write_all(stdin);
    }
    let mut out = Vec::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_end(&mut out);
    }
    // The launcher writes stderr only after its child exited.
    let mut err = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut err);
    }
    let (status, usage) = wait4(child.id());
    let wall = started.elapsed();
    let success = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let maxrss_kib = if launcher {
        err.lines().find_map(|l| l.strip_prefix("maxrss_kib=")).and_then(|v| v.parse().ok()).unwrap_or(-1)
    } else {
        usage.ru_maxrss
    };
    Run { wall, success, out, maxrss_kib }
}

/// Reaps `pid` with wait4 for its rusage. On Linux ru_maxrss is the largest
/// of the child and the descendants it waited for.
fn wait4(pid: u32) -> (i32, libc::rusage) {
    let mut status = 0;
    // SAFETY: rusage is plain data; zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own unreaped child; the pointers are valid.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            return (status, usage);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            panic!("wait4({pid}): {err}");
        }
    }
}

// ---------------------------------------------------------------- configs

fn suite_config(db: &Path, subnet: &str) -> Value {
    json!({
        "cniVersion": CNI_VERSION, "name": NETWORK, "type": "bridge",
        "ipam": {
            "type": "ipam-delegated",
            "delegates": ["ipam-ds-pool", "ipam-da-sequential"],
            "database": db,
            "pools": [{ "name": "bench", "ranges": [{ "subnet": subnet }] }]
        }
    })
}

fn host_local_config(data_dir: &Path, subnet: &str) -> Value {
    json!({
        "cniVersion": CNI_VERSION, "name": NETWORK, "type": "bridge",
        "ipam": { "type": "host-local", "dataDir": data_dir, "ranges": [[{ "subnet": subnet }]] }
    })
}

fn bytes(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

impl Ctx {
    fn stack(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: self.exe("ipam-delegated"),
            cni_path: self.bins.clone(),
            config: bytes(&suite_config(db, subnet)),
        }
    }

    fn host_local(&self, data_dir: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: PathBuf::from(HOST_LOCAL),
            cni_path: PathBuf::from("/usr/lib/cni"),
            config: bytes(&host_local_config(data_dir, subnet)),
        }
    }

    /// The configuration an allocator gets inside the stack: the config plus
    /// `prevResult` = what ipam-ds-pool printed for it (so `pools` is there).
    fn selected_config(&self, db: &Path, subnet: &str) -> Value {
        let mut config = suite_config(db, subnet);
        let selector = self.exe("ipam-ds-pool");
        let out = exec(&selector, "ADD", "selector-probe", &self.bins, &bytes(&config)).expect_ok("ipam-ds-pool ADD");
        config["prevResult"] = out.json();
        assert!(config["prevResult"]["pools"].is_array(), "ipam-ds-pool printed no pools");
        config
    }

    fn sequential(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: self.exe("ipam-da-sequential"),
            cni_path: self.bins.clone(),
            config: bytes(&self.selected_config(db, subnet)),
        }
    }
}

// ------------------------------------------------------------------ fills

/// The pool exactly as the selector registers it for this configuration.
fn selector_pool(db: &Path, subnet: &str) -> Pool {
    let config = shared::NetConf::parse(suite_config(db, subnet).to_string().as_bytes()).expect("config");
    let mut pools = pool::candidates(&config, &CniArgs::default()).expect("candidates");
    pools.remove(0)
}

/// The allocatable addresses of a pool, as numbers, in order (gateway and
/// network/broadcast excluded: the same set host-local hands out).
fn allocatable(pool: &Pool, limit: u128) -> Vec<u128> {
    let mut out = Vec::new();
    for (lo, hi) in pool.allocatable() {
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        let mut n = lo;
        while n <= hi && (out.len() as u128) < limit {
            out.push(n);
            n += 1;
        }
    }
    out
}

fn fill_owner(n: u128) -> Attachment {
    Attachment { network: NETWORK.into(), container_id: format!("fill-{n:x}"), ifname: "eth0".into() }
}

/// Records leases on `addrs` through the library, as the selector and the
/// allocator would have, and sets the cursor; then checkpoints.
fn suite_fill(db: &Path, pool: &Pool, addrs: &[u128], cursor: Option<u128>) {
    let mut store = AllocationStore::open(db, Duration::from_secs(60)).expect("open store");
    store
        .write(|tx| {
            tx.register_pool(NETWORK, &pool.name, &pool.subnets(), &pool.to_json())?.expect("no overlap");
            tx.insert_leases_bulk(addrs.iter().map(|&n| (from_u128(n), pool.name.as_str(), fill_owner(n))))?;
            if let Some(c) = cursor {
                tx.set_cursor(NETWORK, &pool.name, from_u128(c))?;
            }
            Ok(())
        })
        .expect("fill store");
    store.checkpoint().expect("checkpoint");
}

fn suite_set_cursor(db: &Path, pool: &Pool, cursor: u128) {
    let mut store = AllocationStore::open(db, Duration::from_secs(60)).expect("open store");
    store.write(|tx| tx.set_cursor(NETWORK, &pool.name, from_u128(cursor))).expect("set cursor");
}

/// host-local's disk backend: `<dataDir>/<network>/<ip>` holding
/// "<container id>\r\n<ifname>", and `last_reserved_ip.<range set>`.
fn host_local_fill(data_dir: &Path, addrs: &[u128], last: Option<u128>) {
    let dir = data_dir.join(NETWORK);
    fs::create_dir_all(&dir).expect("host-local dir");
    for &n in addrs {
        fs::write(dir.join(from_u128(n).to_string()), format!("fill-{n:x}\r\neth0")).expect("host-local lease file");
    }
    if let Some(last) = last {
        host_local_set_last(data_dir, last);
    }
}

fn host_local_set_last(data_dir: &Path, last: u128) {
    fs::write(data_dir.join(NETWORK).join("last_reserved_ip.0"), from_u128(last).to_string()).expect("last ip");
}

// ------------------------------------------------------------------ stats

#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub n: usize,
}

pub fn stats(samples: &[Duration]) -> Stats {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return Stats::default();
    }
    let n = ms.len();
    let median = if n % 2 == 1 { ms[n / 2] } else { (ms[n / 2 - 1] + ms[n / 2]) / 2.0 };
    let p99 = ms[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1];
    Stats { median_ms: median, p99_ms: p99, max_ms: ms[n - 1], n }
}

pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn phase(name: &str) -> Instant {
    eprintln!("[{}] {name} (load {})", chrono_now(), loadavg());
    Instant::now()
}

fn chrono_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

// -------------------------------------------------------------- scenarios

/// Every figure the report needs.
#[derive(Default)]
pub struct Figures {
    pub add: Vec<(String, Stats)>,
    pub del: Vec<(String, Stats)>,
    pub throughput: Vec<(String, (f64, Duration))>,
    pub one_free: Vec<(String, Vec<Duration>)>,
    pub exhausted: Vec<(String, Vec<Duration>)>,
    pub big: Vec<(String, Stats, Duration)>,
    pub fill_curve: Vec<(String, Vec<(f64, Stats)>)>,
    pub rss: Vec<(String, i64)>,
    pub floors: Vec<(String, Stats)>,
    pub loads: Vec<(String, String)>,
    pub counts: Option<Counts>,
}

fn latency(ctx: &Ctx, fig: &mut Figures) {
    let n = ctx.counts.latency;
    let dir = ctx.scenario_dir("latency");
    let subnet = "10.20.0.0/16";
    let variants = [
        ("suite: ipam-delegated (ds-pool + da-sequential)", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        ("suite: ipam-da-sequential alone", ctx.sequential(&dir.join("sequential.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    // Warm-up (page cache, database creation), not counted.
    for (name, p) in &variants {
        for i in 0..5 {
            p.run("ADD", &format!("warm-{i}")).expect_ok(name);
        }
    }
    for (command, out) in [("ADD", &mut fig.add), ("DEL", &mut fig.del)] {
        let started = phase(&format!("latency {command}: {n} calls each, interleaved"));
        let mut samples = vec![Vec::with_capacity(n); variants.len()];
        for i in 0..n {
            for k in 0..variants.len() {
                let v = (i + k) % variants.len();
                let run = variants[v].1.run(command, &format!("lat-{i}")).expect_ok(variants[v].0);
                samples[v].push(run.wall);
            }
        }
        for (v, (name, _)) in variants.iter().enumerate() {
            out.push((name.to_string(), stats(&samples[v])));
        }
        eprintln!("    took {:.1?}", started.elapsed());
    }
    // What a process costs before any work, through the same spawn path.
    let floors = [
        ("/bin/true", PathBuf::from("/bin/true"), "ADD"),
        ("ipam-da-sequential, CNI_COMMAND=VERSION", ctx.exe("ipam-da-sequential"), "VERSION"),
        ("host-local, CNI_COMMAND=VERSION", PathBuf::from(HOST_LOCAL), "VERSION"),
    ];
    let mut samples = vec![Vec::with_capacity(n); floors.len()];
    for i in 0..n {
        for k in 0..floors.len() {
            let v = (i + k) % floors.len();
            let (_, exe, command) = &floors[v];
            let run = exec(exe, command, "floor", &ctx.bins, br#"{"cniVersion":"1.0.0"}"#);
            samples[v].push(run.wall);
        }
    }
    for (v, (name, _, _)) in floors.iter().enumerate() {
        fig.floors.push((name.to_string(), stats(&samples[v])));
    }
    fig.loads.push(("latency".into(), loadavg()));
}

fn throughput(ctx: &Ctx, fig: &mut Figures) {
    let total = ctx.counts.throughput;
    let dir = ctx.scenario_dir("throughput");
    let subnet = "10.21.0.0/16";
    let variants = [
        ("suite: ipam-delegated", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    let started =
        phase(&format!("throughput: {total} ADDs each, {} workers, in two interleaved halves", ctx.counts.workers));
    let mut spent = [Duration::ZERO; 2];
    for half in 0..2 {
        for (v, (name, plugin)) in variants.iter().enumerate() {
            let count = total / 2 + if half == 0 { total % 2 } else { 0 };
            let next = AtomicUsize::new(0);
            let t0 = Instant::now();
            thread::scope(|s| {
                for _ in 0..ctx.counts.workers {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        plugin.run("ADD", &format!("tp-{half}-{i}")).expect_ok(name);
                    });
                }
            });
            spent[v] += t0.elapsed();
        }
    }
    for (v, (name, _)) in variants.iter().enumerate() {
        fig.throughput.push((name.to_string(), (total as f64 / spent[v].as_secs_f64(), spent[v])));
    }
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("throughput".into(), loadavg()));
}

/// A /16 with exactly one free address just behind the cursor (the search
/// wraps around the whole pool), then the same /16 exhausted.
fn nearly_full(ctx: &Ctx, fig: &mut Figures) {
    let dir = ctx.scenario_dir("nearly-full");
    let subnet = "10.22.0.0/16";
    let db = dir.join("stack.sqlite");
    let hl_dir = dir.join("host-local");
    let pool = selector_pool(&db, subnet);
    let all = allocatable(&pool, u128::MAX);
    let free_index = all.len() / 2;
    let free = all[free_index];
    let cursor = all[free_index + 1];
    let leased: Vec<u128> = all.iter().copied().filter(|&n| n != free).collect();
    let started = phase(&format!("one free address: filling {} leases each", leased.len()));
    suite_fill(&db, &pool, &leased, Some(cursor));
    host_local_fill(&hl_dir, &leased, Some(cursor));
    eprintln!("    filled in {:.1?}", started.elapsed());

    let stack = ctx.stack(&db, subnet);
    let host_local = ctx.host_local(&hl_dir, subnet);
    let mut suite_times = Vec::new();
    let mut hl_times = Vec::new();
    for t in 0..ctx.counts.trials {
        let id = format!("one-free-{t}");
        let run = stack.run("ADD", &id).expect_ok("suite ADD, one free");
        assert_eq!(run.first_address(), Some(from_u128(free)), "suite took the free address");
        suite_times.push(run.wall);
        stack.run("DEL", &id).expect_ok("suite DEL");
        suite_set_cursor(&db, &pool, cursor);

        let run = host_local.run("ADD", &id).expect_ok("host-local ADD, one free");
        assert_eq!(run.first_address(), Some(from_u128(free)), "host-local took the free address");
        hl_times.push(run.wall);
        host_local.run("DEL", &id).expect_ok("host-local DEL");
        host_local_set_last(&hl_dir, cursor);
    }
    fig.one_free.push(("suite: ipam-delegated".into(), suite_times));
    fig.one_free.push(("host-local".into(), hl_times));

    let started = phase("exhausted /16");
    suite_fill(&db, &pool, &[free], None);
    host_local_fill(&hl_dir, &[free], None);
    let mut suite_times = Vec::new();
    let mut hl_times = Vec::new();
    for t in 0..ctx.counts.trials {
        let id = format!("exhausted-{t}");
        let run = stack.run("ADD", &id);
        assert!(
            !run.success && run.json()["code"] == 100,
            "suite: expected error 100, got {}",
            String::from_utf8_lossy(&run.out)
        );
        suite_times.push(run.wall);
        let run = host_local.run("ADD", &id);
        assert!(!run.success, "host-local: expected failure, got {}", String::from_utf8_lossy(&run.out));
        hl_times.push(run.wall);
    }
    fig.exhausted.push(("suite: ipam-delegated".into(), suite_times));
    fig.exhausted.push(("host-local".into(), hl_times));
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("nearly full / exhausted".into(), loadavg()));
    remove(&dir);
}

/// A /8 and a /64 each holding `big_fill` leases, the cursor at the start of
/// the leased run so that the next free address lies behind all of them.
fn big_pools(ctx: &Ctx, fig: &mut Figures) {
    for (label, subnet) in [("/8", "10.0.0.0/8"), ("/64", "fd00:20::/64")] {
        let dir = ctx.scenario_dir("big");
        let db = dir.join("stack.sqlite");
        let pool = selector_pool(&db, subnet);
        let leased = allocatable(&pool, ctx.counts.big_fill);
        let started = phase(&format!("{label}: filling {} leases", leased.len()));
        suite_fill(&db, &pool, &leased, Some(leased[0]));
        let fill_time = started.elapsed();
        eprintln!("    filled in {fill_time:.1?}");
        let stack = ctx.stack(&db, subnet);
        let expected = from_u128(leased[leased.len() - 1] + 1);
        let mut times = Vec::new();
        for i in 0..ctx.counts.big_adds {
            let run = stack.run("ADD", &format!("big-{i}")).expect_ok("suite ADD, big pool");
            if i == 0 {
                assert_eq!(run.first_address(), Some(expected), "first free after the run");
            }
            times.push(run.wall);
        }
        fig.big.push((format!("{label} holding {} leases", leased.len()), stats(&times), fill_time));
        fig.loads.push((format!("{label} big pool"), loadavg()));
        remove(&dir);
    }
}

pub const FILL_LEVELS: [f64; 7] = [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 0.9999];

/// ADD latency against pool fill: a /16 filled to each level (leases from
/// the start of the pool, the cursor on the last one, as sequential
/// allocation leaves them).
fn fill_curve(ctx: &Ctx, fig: &mut Figures) {
    let dir = ctx.scenario_dir("fill-curve");
    let subnet = "10.23.0.0/16";
    let db = dir.join("stack.sqlite");
    let hl_dir = dir.join("host-local");
    let pool = selector_pool(&db, subnet);
    let all = allocatable(&pool, u128::MAX);
    let stack = ctx.stack(&db, subnet);
    let host_local = ctx.host_local(&hl_dir, subnet);
    let started = phase("ADD latency against fill");
    let mut filled = 0usize;
    let trials = ctx.counts.trials.max(3);
    let mut suite_curve = Vec::new();
    let mut hl_curve = Vec::new();
    for level in FILL_LEVELS {
        let target = (all.len() as f64 * level).round() as usize;
        let cursor = target.checked_sub(1).map(|i| all[i]);
        suite_fill(&db, &pool, &all[filled..target], cursor);
        host_local_fill(&hl_dir, &all[filled..target], cursor);
        filled = target;
        let (mut s, mut h) = (Vec::new(), Vec::new());
        for t in 0..trials {
            let id = format!("fill-{level}-{t}");
            let run = stack.run("ADD", &id).expect_ok("suite ADD, fill curve");
            s.push(run.wall);
            stack.run("DEL", &id).expect_ok("suite DEL");
            let run = host_local.run("ADD", &id).expect_ok("host-local ADD, fill curve");
            h.push(run.wall);
            host_local.run("DEL", &id).expect_ok("host-local DEL");
            if let Some(c) = cursor {
                suite_set_cursor(&db, &pool, c);
                host_local_set_last(&hl_dir, c);
            }
        }
        suite_curve.push((level, stats(&s)));
        hl_curve.push((level, stats(&h)));
    }
    fig.fill_curve.push(("suite: ipam-delegated".into(), suite_curve));
    fig.fill_curve.push(("host-local".into(), hl_curve));
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("fill curve".into(), loadavg()));
    remove(&dir);
}

/// Peak RSS of one ADD of each executable (the largest of 5 runs).
type RssCase = Box<dyn Fn(usize) -> Run>;

fn memory(ctx: &Ctx, fig: &mut Figures) {
    let dir = ctx.scenario_dir("memory");
    let subnet = "10.24.0.0/16";
    let started = phase("peak RSS");
    let db = dir.join("suite.sqlite");
    let selected = ctx.selected_config(&db, subnet);
    let cases: Vec<(&str, RssCase)> = vec![
        ("ipam-delegated", {
            let p = ctx.stack(&db, subnet);
            Box::new(move |i| p.run_rss("ADD", &format!("rss-stack-{i}")))
        }),
        ("ipam-ds-pool", {
            let p = Plugin {
                exe: ctx.exe("ipam-ds-pool"),
                cni_path: ctx.bins.clone(),
                config: bytes(&suite_config(&db, subnet)),
            };
            Box::new(move |i| p.run_rss("ADD", &format!("rss-selector-{i}")))
        }),
        ("ipam-da-sequential", {
            let p = Plugin { exe: ctx.exe("ipam-da-sequential"), cni_path: ctx.bins.clone(), config: bytes(&selected) };
            Box::new(move |i| p.run_rss("ADD", &format!("rss-sequential-{i}")))
        }),
        ("ipam-da-static", {
            let exe = ctx.exe("ipam-da-static");
            let bins = ctx.bins.clone();
            let base = selected.clone();
            Box::new(move |i| {
                let mut config = base.clone();
                config["args"] = json!({ "cni": { "ips": [format!("10.24.9.{}", i + 10)] } });
                exec_rss(&exe, "ADD", &format!("rss-static-{i}"), &bins, &bytes(&config))
            })
        }),
        ("host-local", {
            let p = ctx.host_local(&dir.join("host-local"), subnet);
            Box::new(move |i| p.run_rss("ADD", &format!("rss-hl-{i}")))
        }),
    ];
    let floor = exec_rss(Path::new("/bin/true"), "ADD", "rss-floor", &ctx.bins, b"").maxrss_kib;
    fig.rss.push(("(floor: the launcher running /bin/true)".into(), floor));
    for (name, f) in &cases {
        let peak = (0..5).map(|i| f(i).expect_ok(name).maxrss_kib).max().unwrap_or(0);
        fig.rss.push((name.to_string(), peak));
    }
    eprintln!("    took {:.1?}", started.elapsed());
    remove(&dir);
}

// ------------------------------------------------------------------- main

/// fsync-family calls of one steady-state ADD of each variant, counted with
/// `strace -f` when strace is installed.
fn count_fsyncs(ctx: &Ctx) -> Vec<(String, String)> {
    let dir = ctx.scenario_dir("fsyncs");
    let subnet = "10.25.0.0/16";
    let variants = [
        ("suite: ipam-delegated (ds-pool + da-sequential)", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        ("suite: ipam-da-sequential alone", ctx.sequential(&dir.join("sequential.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    let mut out = Vec::new();
    for (name, p) in &variants {
        // Not the first ADD: the steady state, where the pool is registered.
        for i in 0..3 {
            p.run("ADD", &format!("fsync-warm-{i}")).expect_ok(name);
        }
        let log = dir.join("strace.log");
        let mut args: Vec<std::ffi::OsString> =
            vec!["-f".into(), "-qq".into(), "-e".into(), "trace=fsync,fdatasync,sync_file_range".into(), "-o".into()];
        args.push(log.clone().into());
        args.push(p.exe.clone().into());
        let strace = Path::new("/usr/bin/strace");
        if !strace.is_file() {
            return vec![("(strace not installed)".into(), "—".into())];
        }
        let mut child = Command::new(strace)
            .args(&args)
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "fsync-probe")
            .env("CNI_NETNS", "/var/run/netns/fsync-probe")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", &p.cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("strace");
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.write_all(&p.config);
        }
        let _ = child.wait();
        let text = fs::read_to_string(&log).unwrap_or_default();
        let count = |call: &str| text.lines().filter(|l| l.contains(&format!("{call}("))).count();
        out.push((
            name.to_string(),
            format!(
                "{} fsync, {} fdatasync, {} sync_file_range",
                count("fsync"),
                count("fdatasync"),
                count("sync_file_range")
            ),
        ));
    }
    remove(&dir);
    out
}

type Scenario = fn(&Ctx, &mut Figures);

/// Removes a scenario's files unless BENCH_KEEP is set (to profile them).
fn remove(dir: &Path) {
    if std::env::var_os("BENCH_KEEP").is_none() {
        let _ = fs::remove_dir_all(dir);
    }
}

fn build_suite(workspace: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace).args(["build", "--release", "--quiet"]);
    for exe in SUITE_EXECUTABLES {
        cmd.args(["-p", exe]);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "cargo build --release of the suite failed");
    let bins = std::env::current_exe().expect("current exe").parent().expect("bin dir").to_path_buf();
    for exe in SUITE_EXECUTABLES {
        assert!(bins.join(exe).is_file(), "{} missing after the build", bins.join(exe).display());
    }
    bins
}

/// `ipam-bench --rusage-of <exe>`: runs `exe` with this process's stdin,
/// stdout and environment, and prints its ru_maxrss (KiB) on stderr.
///
/// Linux records the RSS high-water mark of the address space a process
/// leaves at execve in its ru_maxrss; a child spawned with vfork (as std
/// does) leaves its parent's, so spawning from the benchmark, whose
/// high-water mark is large, would report that. This launcher is small and
/// fresh, and its own figure is reported as the floor of the measurement.
fn rusage_launcher(exe: &str) -> ! {
    let child = Command::new(exe).stderr(Stdio::null()).spawn().unwrap_or_else(|e| {
        eprintln!("cannot start {exe}: {e}");
        std::process::exit(127)
    });
    let (status, usage) = wait4(child.id());
    eprintln!("maxrss_kib={}", usage.ru_maxrss);
    std::process::exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--rusage-of" {
        rusage_launcher(&args[2]);
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: ipam-bench built without --release; run `cargo run --release -p ipam-bench`");
    }
    assert!(Path::new(HOST_LOCAL).is_file(), "{HOST_LOCAL} missing: apt-get install containernetworking-plugins");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let counts = if quick { QUICK } else { FULL };
    let total = phase("building the suite (release)");
    let bins = build_suite(&workspace);
    let tmp_base = std::env::var_os("BENCH_TMPDIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let root = tmp_base.join(format!("ipam-bench-{}", std::process::id()));
    fs::create_dir_all(&root).expect("temp dir");
    let ctx = Ctx { bins, root, counts };
    let mut machine = report::Machine::probe(&ctx.root, &workspace);
    machine.fsyncs = count_fsyncs(&ctx);
    let mut fig = Figures { counts: Some(counts), ..Default::default() };
    fig.loads.push(("start".into(), loadavg()));

    // BENCH_ONLY=latency,memory runs a subset (development; writes nothing).
    let only = std::env::var("BENCH_ONLY").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|list| list.split(',').any(|n| n == name));
    let scenarios: [(&str, Scenario); 6] = [
        ("latency", latency),
        ("throughput", throughput),
        ("nearly-full", nearly_full),
        ("big", big_pools),
        ("fill-curve", fill_curve),
        ("memory", memory),
    ];
    for (name, scenario) in scenarios {
        if wanted(name) {
            scenario(&ctx, &mut fig);
        }
    }
    fig.loads.push(("end".into(), loadavg()));

    remove(&ctx.root);
    let elapsed = total.elapsed();
    let table = report::table(&fig);
    println!("{table}");
    println!("whole run: {elapsed:.1?}; load averages: {}", report::loads(&fig));
    if quick || only.is_some() {
        eprintln!("BENCH_QUICK / BENCH_ONLY: BENCHMARKS.md and the chart are not written");
        return;
    }
    let svg = chart::render(&fig);
    fs::create_dir_all(workspace.join("benchmarks")).expect("benchmarks dir");
    fs::write(workspace.join("benchmarks/add-latency-vs-fill.svg"), svg).expect("write chart");
    fs::write(workspace.join("BENCHMARKS.md"), report::markdown(&fig, &machine, &table, elapsed))
        .expect("write BENCHMARKS.md");
    eprintln!("wrote BENCHMARKS.md and benchmarks/add-latency-vs-fill.svg");
}
