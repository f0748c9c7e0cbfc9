//! The table, BENCHMARKS.md, and what is recorded about the machine.

pub mod sticky;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ipam_ds_cluster::etcd::RequestCount;

use crate::harness::{stats, Stats};
use crate::scenarios::cluster::{
    BLOCK_SIZE, NODES, RETRY, WAVE_NODES, WAVE_PODS, WAVE_RANGE, WAVE_SUBNET, WAVE_THREADS, WORKERS_PER_NODE,
};
use crate::scenarios::fill_curve::FILL_LEVELS;
use crate::setup::{Counts, HOST_LOCAL};

/// Every figure the report needs, filled in by the scenarios.
#[derive(Default)]
pub struct Figures {
    /// The suite's layout measured, and where it came from.
    pub layout: String,
    pub add: Vec<(String, Stats)>,
    pub del: Vec<(String, Stats)>,
    /// CPU time (user + system) of the latency scenario's calls.
    pub add_cpu: Vec<(String, Stats)>,
    pub del_cpu: Vec<(String, Stats)>,
    /// The first ADD on a fresh node.
    pub first_add: Vec<(String, Stats)>,
    /// The durability probe's counts, per variant and case.
    pub fsyncs: Vec<FsyncProbe>,
    /// Why there are no counts (strace missing or unable to trace).
    pub fsync_note: Option<String>,
    /// A 4 KiB append + fdatasync in the temp dir.
    pub sync_cost: Option<Stats>,
    pub throughput: Vec<(String, (f64, Duration))>,
    pub one_free: Vec<(String, Vec<Duration>)>,
    pub exhausted: Vec<(String, Vec<Duration>)>,
    pub big: Vec<(String, Stats, Duration)>,
    pub fill_curve: Vec<(String, Vec<(f64, Stats)>)>,
    pub rss: Vec<(String, i64)>,
    pub floors: Vec<(String, Stats)>,
    pub loads: Vec<(String, String)>,
    pub counts: Option<Counts>,
    pub lock_wait: Option<LockWait>,
    /// Cluster mode (ipam-ds-cluster on etcd) against local mode.
    pub cluster: Option<ClusterFigures>,
    /// Why cluster mode was not measured.
    pub cluster_note: Option<String>,
    /// Sticky addresses: the suite without and with ipam-da-sticky.
    pub sticky: Option<sticky::StickyFigures>,
    pub sticky_cluster: Option<sticky::StickyClusterFigures>,
    /// Why sticky addresses in cluster mode were not measured.
    pub sticky_cluster_note: Option<String>,
}

/// Call latencies with their 90th percentile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub stats: Stats,
    pub p90_ms: f64,
}

/// The etcd requests of some calls of one command: etcd's own count per
/// gRPC method, and the client's count that ipam-ds-cluster logged per call.
#[derive(Clone, Debug, Default)]
pub struct StepCount {
    pub calls: usize,
    /// etcd's `grpc_server_handled_total` per method, after less before.
    pub etcd: BTreeMap<String, u64>,
    /// The sum of the calls' "etcd requests: …" log lines.
    pub client: RequestCount,
    /// How many calls logged such a line.
    pub logged: usize,
}

impl StepCount {
    fn method(&self, name: &str) -> u64 {
        self.etcd.get(name).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.etcd.values().sum()
    }

    /// Whether every call logged the client's count, which alone tells a
    /// writing txn from a read-only one.
    pub fn split(&self) -> bool {
        self.calls > 0 && self.logged == self.calls
    }

    /// The txns that wrote, per the client (without its count, none: txns
    /// are then taken as reads).
    fn txn_writes(&self) -> u64 {
        if self.split() {
            self.client.writing_txns.min(self.method("Txn"))
        } else {
            0
        }
    }

    /// Put + DeleteRange + the txns that wrote.
    pub fn writes(&self) -> u64 {
        self.method("Put") + self.method("DeleteRange") + self.txn_writes()
    }

    /// Range + the txns that did not write.
    pub fn reads(&self) -> u64 {
        self.method("Range") + self.method("Txn") - self.txn_writes()
    }

    pub fn per_call(&self, n: u64) -> f64 {
        n as f64 / self.calls.max(1) as f64
    }
}

/// The cluster-mode figures: [`crate::scenarios::cluster`].
pub struct ClusterFigures {
    /// `etcd --version`'s first line.
    pub etcd: String,
    /// Steady state, ADD then DEL of one container, cluster and local interleaved.
    pub add_cluster: Latency,
    pub add_local: Latency,
    pub del_cluster: Latency,
    pub del_local: Latency,
    /// Local mode with ipam-da-static too: the cluster stack less the cluster.
    pub add_local_static: Latency,
    pub del_local_static: Latency,
    pub steady_add: StepCount,
    pub steady_del: StepCount,
    /// The same counts in a pool of few blocks.
    pub tight: TightPool,
    pub fill: ClusterFill,
    /// [`WAVE_PODS`] pods into as many addresses: one wave, two waves.
    pub waves: [PodWaves; 2],
    /// One etcd request from the client in-process: a range on a kept-alive
    /// connection, the confirming read's txn on a fresh one, a put.
    pub floor_range: Stats,
    pub floor_fresh_txn: Stats,
    pub floor_put: Stats,
}

/// etcd requests of one node's steady-state ADDs and DELs in a pool of few
/// blocks.
pub struct TightPool {
    pub subnet: &'static str,
    /// Addresses the pool hands out, and the blocks it is cut into.
    pub usable: u128,
    pub blocks: u128,
    /// Blocks in etcd afterwards (all the node's).
    pub claimed: usize,
    pub add: StepCount,
    pub del: StepCount,
}

/// [`WAVE_PODS`] pods placed by [`WAVE_NODES`] nodes in waves into a pool
/// of exactly as many addresses, failed ADDs retried.
pub struct PodWaves {
    /// "one wave", "two waves".
    pub name: &'static str,
    /// Addresses the pool hands out, and the blocks it is cut into.
    pub usable: u128,
    pub blocks: u128,
    /// How long each wave retried at most.
    pub deadline: Duration,
    pub waves: Vec<Wave>,
    /// Failed ADD attempts per error code: how many, the first one's message.
    pub failures: BTreeMap<u64, (usize, String)>,
    /// Addresses answered to more than one placed pod.
    pub duplicates: usize,
    /// Placed pods whose answer held no address.
    pub without_address: usize,
    /// Addresses answered outside the pool's range.
    pub outside: usize,
    /// Blocks in etcd afterwards.
    pub claimed: usize,
    /// etcd's count per method over every ADD attempt.
    pub etcd: BTreeMap<String, u64>,
}

/// One wave: its nodes (numbered from 1, inclusive) placing their pods.
pub struct Wave {
    pub nodes: (usize, usize),
    pub pods: usize,
    pub placed: usize,
    /// Failed ADD attempts (each retried until the deadline).
    pub failed: usize,
    /// From its start until every pod was placed or given up.
    pub time: Duration,
}

impl PodWaves {
    pub fn pods(&self) -> usize {
        self.waves.iter().map(|w| w.pods).sum()
    }

    pub fn placed(&self) -> usize {
        self.waves.iter().map(|w| w.placed).sum()
    }

    pub fn failed(&self) -> usize {
        self.waves.iter().map(|w| w.failed).sum()
    }

    pub fn time(&self) -> Duration {
        self.waves.iter().map(|w| w.time).sum()
    }

    /// Every address answered once, inside the pool.
    pub fn sound(&self) -> bool {
        self.duplicates == 0 && self.without_address == 0 && self.outside == 0
    }
}

/// ADDs by the simulated nodes from empty, concurrently, in both modes.
pub struct ClusterFill {
    /// ADDs started in each mode.
    pub adds: usize,
    pub cluster_ok: usize,
    pub cluster_failures: Vec<u64>,
    /// The first message of each distinct error code of the failed ADDs.
    pub failure_messages: Vec<(u64, String)>,
    pub cluster_time: Duration,
    pub local_ok: usize,
    pub local_failures: Vec<u64>,
    pub local_time: Duration,
    /// etcd's count per method over the cluster-mode ADDs.
    pub etcd: BTreeMap<String, u64>,
    /// Blocks in etcd afterwards: the claims that succeeded.
    pub blocks: usize,
    /// Addresses answered to more than one successful ADD across the nodes.
    pub duplicates: usize,
    /// Successful ADDs whose answer held no address.
    pub without_address: usize,
}

impl ClusterFill {
    pub fn rate(ok: usize, time: Duration) -> f64 {
        if time.is_zero() {
            0.0
        } else {
            ok as f64 / time.as_secs_f64()
        }
    }

    pub fn requests(&self) -> u64 {
        self.etcd.values().sum()
    }

    pub fn per_add(&self) -> f64 {
        self.requests() as f64 / self.cluster_ok.max(1) as f64
    }
}

/// fsync-family system calls of one call, from strace.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SyncCount {
    pub fsync: usize,
    pub fdatasync: usize,
    pub sync_file_range: usize,
}

impl SyncCount {
    /// Counts the calls in an `strace -f -e trace=fsync,fdatasync,sync_file_range`
    /// log (a call interrupted by another process's line is logged as
    /// "fsync(3 <unfinished ...>" and "<... fsync resumed>": counted once).
    pub fn of_strace(text: &str) -> SyncCount {
        let count = |call: &str| text.lines().filter(|l| l.contains(&format!("{call}("))).count();
        SyncCount { fsync: count("fsync"), fdatasync: count("fdatasync"), sync_file_range: count("sync_file_range") }
    }

    pub fn total(&self) -> usize {
        self.fsync + self.fdatasync + self.sync_file_range
    }

    fn add(self, other: SyncCount) -> SyncCount {
        SyncCount {
            fsync: self.fsync + other.fsync,
            fdatasync: self.fdatasync + other.fdatasync,
            sync_file_range: self.sync_file_range + other.sync_file_range,
        }
    }
}

/// The fsync-family calls of some calls of one variant in one case.
pub struct FsyncProbe {
    pub variant: String,
    /// One of [`FsyncProbe::FIRST_ADD`], [`FsyncProbe::ADD`], [`FsyncProbe::DEL`].
    pub case: String,
    pub calls: Vec<SyncCount>,
}

impl FsyncProbe {
    pub const FIRST_ADD: &'static str = "first ADD on a fresh node";
    pub const ADD: &'static str = "ADD, steady state";
    pub const DEL: &'static str = "DEL, steady state";

    pub fn sum(&self) -> SyncCount {
        self.calls.iter().fold(SyncCount::default(), |a, &b| a.add(b))
    }

    pub fn mean(&self) -> f64 {
        self.sum().total() as f64 / self.calls.len().max(1) as f64
    }

    /// The median call's total.
    pub fn median(&self) -> usize {
        let mut totals: Vec<usize> = self.calls.iter().map(SyncCount::total).collect();
        totals.sort_unstable();
        totals.get(totals.len() / 2).copied().unwrap_or(0)
    }

    /// "1" when every call made as many; else "1.25 per call (1 to 4)".
    pub fn per_call(&self) -> String {
        let totals = self.calls.iter().map(SyncCount::total);
        let (lo, hi) = (totals.clone().min().unwrap_or(0), totals.max().unwrap_or(0));
        if lo == hi {
            format!("{lo}")
        } else {
            format!("{:.2} ({lo} to {hi})", self.mean())
        }
    }
}

/// The lock-wait scenario: waits for the database's lock under contention.
pub struct LockWait {
    /// Calls in flight at once.
    pub workers: usize,
    /// ADDs of each of the two runs.
    pub calls: usize,
    /// Per successful call of the logged run: the sum of its lock waits.
    pub wait: Stats,
    /// Per write transaction: how long it held the lock (transaction +
    /// durable commit, as logged).
    pub hold: Stats,
    /// End-to-end time of the logged run's successful calls.
    pub latency_logged: Stats,
    /// End-to-end time of the run without logging's successful calls.
    pub latency: Stats,
    /// The fewest and the most "lock wait" lines a successful call logged.
    pub lines_per_call: (usize, usize),
    /// The error codes of the calls that failed, in both runs.
    pub failures: Vec<u64>,
    /// The logged run, from the workers' common start to the last call's end.
    pub run_time: Duration,
    /// `run_time` over the write transactions: one turn of the lock (a hold
    /// and the hand-over to the next holder), on average.
    pub turn_ms: f64,
    /// Write transactions timed (each one took the lock once).
    pub acquisitions: usize,
    /// Acquisitions passed over: some transaction with a later queue ticket
    /// had its turn before them.
    pub passed_over: usize,
    /// The most turns with later tickets before one waiter's.
    pub most_passed_by: usize,
    /// Acquisitions without a queue ticket (the queue could not be used).
    pub unticketed: usize,
    /// The most hand-overs of the lock during one wait.
    pub most_handovers: usize,
}

impl LockWait {
    /// The longest wait in medians: far above 1 when some waiters are starved.
    pub fn max_over_median(&self) -> f64 {
        if self.wait.median_ms > 0.0 {
            self.wait.max_ms / self.wait.median_ms
        } else {
            0.0
        }
    }
}

/// The machine and versions the figures were taken on.
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub filesystem: String,
    pub date: String,
    pub rustc: String,
    pub host_local: String,
    pub suite: String,
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl Machine {
    pub fn probe(tmp: &Path, workspace: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_string());
        let tmp_s = tmp.to_string_lossy();
        let df = output("df", &["--output=source,fstype,target", &tmp_s]);
        let filesystem = df.lines().nth(1).map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or(df);
        let device = filesystem.split_whitespace().next().and_then(|d| d.strip_prefix("/dev/")).unwrap_or("");
        let rotational = std::fs::read_to_string(format!("/sys/class/block/{device}/queue/rotational"));
        let filesystem = match rotational.as_deref().map(str::trim) {
            Ok("0") => format!("{filesystem}, non-rotational"),
            Ok("1") => format!("{filesystem}, rotational"),
            _ => filesystem,
        };
        let ws = workspace.to_string_lossy();
        let commit = output("git", &["-C", &ws, "rev-parse", "--short", "HEAD"]);
        // The benchmark's own outputs do not make the measured code dirty.
        let status = output(
            "git",
            &["-C", &ws, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!BENCHMARKS.md", ":!benchmarks"],
        );
        let dirty = !status.is_empty();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
            filesystem: format!("{filesystem} (temp dir {})", tmp.parent().unwrap_or(tmp).display()),
            date: output("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"]),
            rustc: output(&std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()), &["--version"]),
            host_local: output("dpkg-query", &["-W", "-f=${Version}", "containernetworking-plugins"]),
            suite: format!(
                "{} (git {commit}{})",
                env!("CARGO_PKG_VERSION"),
                if dirty { ", uncommitted changes" } else { "" }
            ),
        }
    }
}

/// `ipam-delegated --version` of an installed program, and this workspace's
/// version for comparison.
pub fn installed_version(exe: &Path, workspace: &str) -> String {
    let version = output(&exe.to_string_lossy(), &["--version"]);
    format!("{version} (installed: `ipam-delegated --version`; this workspace: {workspace})")
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 && a / b < 0.1 {
        format!("{:.4}× ({:.0}× faster)", a / b, b / a)
    } else if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "—".into()
    }
}

fn yes(met: bool) -> &'static str {
    if met {
        "yes"
    } else {
        "**NO**"
    }
}

fn median(samples: &[Duration]) -> f64 {
    stats(samples).median_ms
}

fn find<'a, T>(list: &'a [(String, T)], prefix: &str) -> Option<&'a T> {
    list.iter().find(|(name, _)| name.starts_with(prefix)).map(|(_, v)| v)
}

const MIB: f64 = 1024.0;

/// The full stack in the measured layout, in the copies layout, the
/// allocator alone, host-local: the prefixes of the variants' names.
const STACK: &str = "suite: ipam-delegated (";
const COPIES: &str = "suite: ipam-delegated, copies";
const SEQUENTIAL: &str = "suite: ipam-da-sequential";
const HOST: &str = "host-local";
/// The no-work process of the suite (the program under a delegate's name).
const SUITE_FLOOR: &str = "ipam-da-sequential, CNI_COMMAND=VERSION";
/// The floor program (bench/floor: the least work of a steady-state ADD),
/// and its build doing nothing.
const FLOOR: &str = "floor: ipam-bench-floor";
const NULL: &str = "ipam-bench-null";

fn fsync_probe<'a>(fig: &'a Figures, variant: &str, case: &str) -> Option<&'a FsyncProbe> {
    fig.fsyncs.iter().find(|p| p.variant.starts_with(variant) && p.case == case)
}

/// The summary table (Markdown, also printed).
pub fn table(fig: &Figures) -> String {
    // Shared by the two ways of writing a row below, each used between the other's uses.
    let t = RefCell::new(String::new());
    t.borrow_mut().push_str("| measurement | suite | host-local | suite / host-local | target | met |\n");
    t.borrow_mut().push_str("|---|---:|---:|---:|---|---|\n");
    let get = |list: &[(String, Stats)], prefix: &str| find(list, prefix).copied().unwrap_or_default();
    let (hl_add, hl_del) = (get(&fig.add, HOST), get(&fig.del, HOST));
    let (stack_add, stack_del) = (get(&fig.add, STACK), get(&fig.del, STACK));
    let (seq_add, seq_del) = (get(&fig.add, SEQUENTIAL), get(&fig.del, SEQUENTIAL));
    let copies_add = get(&fig.add, COPIES);
    let line = |what: &str, suite: String, hl: String, r: String, target: &str, met: Option<bool>| {
        let _ = writeln!(t.borrow_mut(), "| {what} | {suite} | {hl} | {r} | {target} | {} |", met.map_or("", yes));
    };
    let row = |what: &str, suite: f64, hl: Option<f64>, unit: &str, target: &str, met: Option<bool>| {
        let hl_cell = hl.map_or("—".into(), |v| format!("{v:.2} {unit}"));
        let r = hl.map_or("—".into(), |v| ratio(suite, v));
        line(what, format!("{suite:.2} {unit}"), hl_cell, r, target, met);
    };
    let at_most = |suite: f64, hl: f64, k: f64| Some(suite > 0.0 && hl > 0.0 && suite <= k * hl);
    if stack_add.n > 0 {
        let (s, h) = (stack_add.median_ms, hl_add.median_ms);
        row(&format!("ADD median, full stack (n={})", stack_add.n), s, Some(h), "ms", "≤ 0.4×", at_most(s, h, 0.4));
        row("ADD p99, full stack", stack_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
        row(
            "ADD median, full stack, copies layout (each delegate a process)",
            copies_add.median_ms,
            Some(h),
            "ms",
            "(comparison)",
            None,
        );
        let s = seq_add.median_ms;
        row("ADD median, ipam-da-sequential alone", s, Some(h), "ms", "≤ 0.4×", at_most(s, h, 0.4));
        row("ADD p99, ipam-da-sequential alone", seq_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
        let floor_add = get(&fig.add, FLOOR);
        if floor_add.n > 0 {
            let f = floor_add.median_ms;
            row(
                "ADD median, the floor: ipam-bench-floor (the least work of a steady-state ADD as a program of its \
                 own, built as the suite's program is)",
                f,
                Some(hl_add.median_ms),
                "ms",
                "(floor)",
                None,
            );
            row("ADD p99, the floor", floor_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
            let above = |median: f64| format!("{:+.2} ms ({} the floor)", median - f, ratio(median, f));
            line(
                "ADD median above the floor, full stack (its median − the floor's)",
                above(stack_add.median_ms),
                above(hl_add.median_ms),
                "—".into(),
                "(distance)",
                None,
            );
            line(
                "ADD median above the floor, ipam-da-sequential alone",
                above(seq_add.median_ms),
                "—".into(),
                "—".into(),
                "(distance)",
                None,
            );
        }
        let (s, h) = (stack_del.median_ms, hl_del.median_ms);
        row("DEL median, full stack", s, Some(h), "ms", "≤ 0.5×", at_most(s, h, 0.5));
        row("DEL p99, full stack", stack_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
        row("DEL median, ipam-da-sequential alone", seq_del.median_ms, Some(h), "ms", "", None);
        row("DEL p99, ipam-da-sequential alone", seq_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
    }
    if let (Some(s), Some(h)) = (find(&fig.first_add, STACK), find(&fig.first_add, HOST)) {
        row(
            &format!("first ADD on a fresh node, median (n={}; the ADD creates the database)", s.n),
            s.median_ms,
            Some(h.median_ms),
            "ms",
            "≤ 1.0×",
            at_most(s.median_ms, h.median_ms, 1.0),
        );
        row("first ADD on a fresh node, p99", s.p99_ms, Some(h.p99_ms), "ms", "", None);
    }
    if let (Some(s), Some(h)) = (find(&fig.throughput, "suite"), find(&fig.throughput, HOST)) {
        let workers = fig.counts.map_or(0, |c| c.workers);
        row(
            &format!("{workers}-way concurrent ADD throughput"),
            s.0,
            Some(h.0),
            "ADD/s",
            "≥ 2×",
            Some(h.0 > 0.0 && s.0 >= 2.0 * h.0),
        );
    }
    if let (Some(s), Some(h)) = (find(&fig.one_free, "suite"), find(&fig.one_free, HOST)) {
        let (s, h) = (median(s), median(h));
        row(
            "/16, one free address behind the cursor: ADD",
            s,
            Some(h),
            "ms",
            "≤ 10 ms, ≥ 50× faster",
            Some(s <= 10.0 && h >= 50.0 * s),
        );
    }
    if let (Some(s), Some(h)) = (find(&fig.exhausted, "suite"), find(&fig.exhausted, HOST)) {
        let (s, h) = (median(s), median(h));
        row("/16 exhausted: ADD (error)", s, Some(h), "ms", "≤ 10 ms", Some(s <= 10.0));
    }
    for (name, st, _) in &fig.big {
        row(
            &format!("{name}: ADD median (max {:.2} ms)", st.max_ms),
            st.median_ms,
            None,
            "ms",
            "≤ 20 ms",
            Some(st.median_ms <= 20.0),
        );
    }
    if let Some(lw) = &fig.lock_wait {
        let n = lw.workers;
        row(
            &format!("{n}-way contention: lock wait per ADD, median (n={})", lw.wait.n),
            lw.wait.median_ms,
            None,
            "ms",
            "",
            None,
        );
        row(&format!("{n}-way contention: lock wait per ADD, p99"), lw.wait.p99_ms, None, "ms", "", None);
        row(
            &format!(
                "{n}-way contention: lock wait per ADD, max ({:.1}× the median; {} of {} waits passed over by a later \
                 ticket, one by {})",
                lw.max_over_median(),
                lw.passed_over,
                lw.acquisitions,
                lw.most_passed_by
            ),
            lw.wait.max_ms,
            None,
            "ms",
            "served in order: none passed over",
            Some(lw.passed_over == 0),
        );
    }
    let hl_rss = find(&fig.rss, HOST).map(|&k| k as f64 / MIB);
    for (name, kib) in fig.rss.iter().filter(|(n, _)| n != HOST && !n.starts_with("(floor")) {
        let mib = *kib as f64 / MIB;
        row(&format!("peak RSS, one ADD of {name}"), mib, hl_rss, "MiB", "≤ 8 MiB", Some(mib <= 8.0));
    }
    let probes = [
        (STACK, "full stack", FsyncProbe::ADD),
        (STACK, "full stack", FsyncProbe::FIRST_ADD),
        (STACK, "full stack", FsyncProbe::DEL),
        (SEQUENTIAL, "ipam-da-sequential alone", FsyncProbe::ADD),
    ];
    for (variant, label, case) in probes {
        if let Some(s) = fsync_probe(fig, variant, case) {
            let h = fsync_probe(fig, HOST, case).map_or("—".into(), FsyncProbe::per_call);
            let what = format!("fsync-family calls per {case}, {label} (strace -f, n={})", s.calls.len());
            line(&what, s.per_call(), h, "—".into(), "counted", None);
        }
    }
    if let Some(note) = &fig.fsync_note {
        line("fsync-family calls per call", format!("not counted: {note}"), "—".into(), "—".into(), "counted", None);
    }
    t.into_inner()
}

/// What bounds the figures, as far as the benchmark can know it: a Markdown
/// list (also printed).
pub fn bounds(fig: &Figures) -> String {
    let mut s = String::new();
    let get = |list: &[(String, Stats)], prefix: &str| find(list, prefix).copied().filter(|st| st.n > 0);
    let floor = get(&fig.floors, SUITE_FLOOR).map(|f| f.median_ms);
    let true_floor = get(&fig.floors, "/bin/true").map(|f| f.median_ms);
    let sync = fig.sync_cost.map(|st| st.median_ms);
    let syncs = |variant: &str, case: &str| fsync_probe(fig, variant, case).map(FsyncProbe::median);
    let (hl_add, hl_del) = (get(&fig.add, HOST), get(&fig.del, HOST));
    if let (Some(f), Some(h), Some(t)) = (floor, hl_add, true_floor) {
        let _ = writeln!(s, "- **Starting a process.** Through this spawn path /bin/true takes {t:.2} ms and the suite's program doing no work (CNI_COMMAND=VERSION) {f:.2} ms: no call of the suite, which is at least one such process, can take less. Against host-local's ADD median ({:.2} ms) that floor is {}; against its DEL ({:.2} ms), {}. The copies layout starts three such processes per call (ipam-delegated and each delegate): at least {:.2} ms, {} host-local's ADD.", h.median_ms, ratio(f, h.median_ms), hl_del.map_or(0.0, |d| d.median_ms), hl_del.map_or("—".into(), |d| ratio(f, d.median_ms)), 3.0 * f, ratio(3.0 * f, h.median_ms));
    }
    if let Some(c) = sync {
        let mut line = format!("- **Syncing.** One 4 KiB append + fdatasync in the temp dir takes {c:.2} ms (median of 20) on this disk; host-local syncs nothing.");
        let first_hl = get(&fig.first_add, HOST);
        let cases = [
            (STACK, "The full stack's", FsyncProbe::ADD, hl_add),
            (STACK, "The full stack's", FsyncProbe::DEL, hl_del),
            (STACK, "The full stack's", FsyncProbe::FIRST_ADD, first_hl),
            (SEQUENTIAL, "ipam-da-sequential alone's", FsyncProbe::ADD, hl_add),
        ];
        for (variant, whose, case, hl) in cases {
            if let (Some(k), Some(f), Some(h)) = (syncs(variant, case), floor, hl) {
                let least = f + k as f64 * c;
                let _ = write!(line, " {whose} {case}: {k} (median call), so with the process floor at least about {least:.2} ms, {} host-local's median.", ratio(least, h.median_ms));
            }
        }
        let _ = writeln!(s, "{line}");
    }
    let cpu = |prefix: &str| get(&fig.add_cpu, prefix).map(|st| st.median_ms);
    if let (Some(sc), Some(hc)) = (cpu(STACK), cpu(HOST)) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let _ = write!(s, "- **CPU.** One ADD takes {sc:.2} ms of CPU (user + system, median, the process and what it reaped) for the full stack, {hc:.2} ms for host-local");
        if let Some(cc) = cpu(COPIES) {
            let _ = write!(s, ", {cc:.2} ms for the copies layout");
        }
        let _ = write!(s, ". On {cores} cores, if nothing but CPU limited them, concurrent ADDs could reach at most {:.0} ADD/s (suite) and {:.0} ADD/s (host-local), a ratio of {:.2}× (the spawning threads' own CPU and the kernel's work in the parent come on top).", cores * 1e3 / sc, cores * 1e3 / hc, hc / sc);
        if let Some(lw) = &fig.lock_wait {
            let _ = write!(s, " Each ADD also holds the database's lock for one write transaction, {:.2} ms (median, transaction + durable commit, under {}-way contention): however many cores, ADDs on one database cannot exceed about {:.0} ADD/s.", lw.hold.median_ms, lw.workers, 1e3 / lw.hold.median_ms.max(1e-9));
        }
        s.push('\n');
    }
    if let (Some(fl), Some(h)) = (get(&fig.add, FLOOR), hl_add) {
        let f = fl.median_ms;
        let _ = write!(s, "- **The floor.** `ipam-bench-floor` (bench/floor), a minimal program of the benchmark's own built by scripts/build as the suite's program is, does the least work of a steady-state ADD: it reads its configuration on stdin (the fields it needs, found by a scan), opens its database, takes the writers' lock, makes one write transaction (five statements: the attachment's lease looked up, the cursor read, the next free address found, the lease inserted, the cursor moved) committed under synchronous=NORMAL, applies the suite's checkpoint policy (past 64 WAL frames a RESTART checkpoint, which syncs the database file, and a commit that starts the WAL again at its beginning), syncs the WAL once (fdatasync; not after a checkpoint) and prints its answer. Its ADD median is {f:.2} ms (p99 {:.2} ms, CPU {}), {} host-local's ADD median.", fl.p99_ms, cpu(FLOOR).map_or("—".into(), |c| format!("{c:.2} ms")), ratio(f, h.median_ms));
        if let Some(null) = get(&fig.floors, NULL) {
            let n = null.median_ms;
            let _ = write!(s, " The same build doing nothing (`ipam-bench-null`) takes {n:.2} ms: of the floor's {f:.2} ms, {n:.2} ms are starting and ending a process of that build, {:.2} ms the work.", f - n);
            if let Some(v) = floor {
                let _ = write!(s, " The suite's program doing no work (CNI_COMMAND=VERSION) takes {v:.2} ms, {:+.2} ms against `ipam-bench-null`: the start-up of its own, beyond the build's.", v - n);
            }
        }
        for (what, prefix) in [("the full stack", STACK), ("ipam-da-sequential alone", SEQUENTIAL)] {
            if let Some(st) = get(&fig.add, prefix) {
                let _ = write!(
                    s,
                    " The ADD median of {what}, {:.2} ms, is {:+.2} ms above the floor ({} the floor's).",
                    st.median_ms,
                    st.median_ms - f,
                    ratio(st.median_ms, f)
                );
            }
        }
        if let (Some(fd), Some(sd)) = (get(&fig.del, FLOOR), get(&fig.del, STACK)) {
            let _ = write!(s, " A DEL of the floor (one write transaction deleting the attachment's lease, one fdatasync) takes {:.2} ms, the full stack's {:.2} ms: {:+.2} ms above it ({}).", fd.median_ms, sd.median_ms, sd.median_ms - fd.median_ms, ratio(sd.median_ms, fd.median_ms));
        }
        s.push('\n');
    }
    if let Some(c) = &fig.cluster {
        let _ = writeln!(s, "{}", cluster_bound(c));
    }
    if let Some(floor) = fig.rss.iter().find(|(n, _)| n.starts_with("(floor")) {
        let _ = writeln!(s, "- **Memory.** The launcher that measures peak RSS reports {:.2} MiB running /bin/true: no figure can be below it.", floor.1 as f64 / MIB);
    }
    s
}

/// What bounds the cluster-mode figures: one etcd request, seen from the client.
fn cluster_bound(c: &ClusterFigures) -> String {
    let (range, fresh, put) = (c.floor_range.median_ms, c.floor_fresh_txn.median_ms, c.floor_put.median_ms);
    let local = c.add_local.stats.median_ms;
    let least = local + fresh;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "- **etcd (cluster mode).** One request through the plugins' own etcd client, in-process (median of {n}): a \
         range on a kept-alive connection {range:.2} ms; the read-only txn of an ADD's confirming read on a fresh \
         connection, as every CNI process makes it (each call connects anew), {fresh:.2} ms; a put, which etcd syncs \
         to its WAL before it answers, {put:.2} ms. A steady-state ADD in a pool of blocks of the node's own is a \
         local ADD plus, at most every 2 s (while its blocks' confirmation is fresh it asks etcd nothing), that one \
         read: {local:.2} + {fresh:.2} = {least:.2} ms ({}) for the ADD that reads, the local ADD's time for the \
         others (measured median: {:.2} ms, {}); in a pool of shared blocks every ADD and DEL writes one record \
         instead (a txn like the put); an ADD that claims a block adds a read of the pool and a writing txn (at \
         least {put:.2} ms more). The etcd is one member on this machine, on the same {cores} cores as the plugins: \
         under the concurrent load its CPU is taken from theirs.",
        ratio(least, local),
        c.add_cluster.stats.median_ms,
        ratio(c.add_cluster.stats.median_ms, local),
        n = c.floor_range.n,
    )
}

/// The cluster-mode summary (Markdown, also printed): cluster mode against
/// local mode, with the targets.
pub fn cluster_table(fig: &Figures) -> String {
    let mut t = String::new();
    t.push_str("| measurement | cluster mode | local mode | cluster / local | target | met |\n");
    t.push_str("|---|---:|---:|---:|---|---|\n");
    let mut line = |what: &str, cluster: String, local: String, r: String, target: &str, met: Option<bool>| {
        let _ = writeln!(t, "| {what} | {cluster} | {local} | {r} | {target} | {} |", met.map_or("", yes));
    };
    let Some(c) = &fig.cluster else {
        let why = fig.cluster_note.as_deref().unwrap_or("the cluster scenario did not run");
        line("cluster mode", format!("not measured: {why}"), "—".into(), "—".into(), "", None);
        return t;
    };
    let ms = |v: f64| format!("{v:.2} ms");
    let (ca, la) = (c.add_cluster, c.add_local);
    line(
        &format!("ADD median, full stack, steady state (n={}; the node owns a block with room)", ca.stats.n),
        ms(ca.stats.median_ms),
        ms(la.stats.median_ms),
        ratio(ca.stats.median_ms, la.stats.median_ms),
        "≤ 1.2×",
        Some(la.stats.median_ms > 0.0 && ca.stats.median_ms <= 1.2 * la.stats.median_ms),
    );
    line("ADD p90, full stack, steady state", ms(ca.p90_ms), ms(la.p90_ms), ratio(ca.p90_ms, la.p90_ms), "", None);
    let ls = c.add_local_static.stats.median_ms;
    line(
        "ADD median against local mode with ipam-da-static too (the cluster stack less ipam-ds-cluster)",
        ms(ca.stats.median_ms),
        ms(ls),
        ratio(ca.stats.median_ms, ls),
        "(comparison)",
        None,
    );
    let (cd, ld) = (c.del_cluster, c.del_local);
    line(
        "DEL median, full stack, steady state",
        ms(cd.stats.median_ms),
        ms(ld.stats.median_ms),
        ratio(cd.stats.median_ms, ld.stats.median_ms),
        "(comparison)",
        None,
    );
    let a = &c.steady_add;
    let txn_note = if a.split() { "read-only Txn per the calls' logs" } else { "every Txn counted as a read" };
    line(
        &format!("etcd reads per ADD, steady state (etcd's count over {} ADDs: Range + {txn_note})", a.calls),
        format!("{:.2}", a.per_call(a.reads())),
        "0".into(),
        "—".into(),
        "≤ 1",
        Some(a.calls > 0 && a.reads() <= a.calls as u64),
    );
    line(
        "etcd writes per ADD, steady state (Put, DeleteRange, writing Txn)",
        format!("{:.2}", a.per_call(a.writes())),
        "0".into(),
        "—".into(),
        "0",
        Some(a.split() && a.writes() == 0),
    );
    let d = &c.steady_del;
    line(
        &format!("etcd requests per DEL, steady state (etcd's count over {} DELs)", d.calls),
        format!("{:.2}", d.per_call(d.total())),
        "0".into(),
        "—".into(),
        "(counted)",
        None,
    );
    line(
        "etcd writes per DEL, steady state (Put, DeleteRange, writing Txn)",
        format!("{:.2}", d.per_call(d.writes())),
        "0".into(),
        "—".into(),
        "(counted)",
        None,
    );
    let tp = &c.tight;
    let pool = format!("tight pool ({} in {} blocks of /{BLOCK_SIZE}, one node", tp.subnet, tp.blocks);
    let writes_note =
        |step: &StepCount| if step.split() { "" } else { "; not every call logged: every Txn counted as a read" };
    for (command, step, target) in [("ADD", &tp.add, "≤ 1"), ("DEL", &tp.del, "(counted)")] {
        line(
            &format!("etcd requests per {command}, {pool}; etcd's count over {} {command}s)", step.calls),
            format!("{:.2}", step.per_call(step.total())),
            "0".into(),
            "—".into(),
            target,
            (command == "ADD").then_some(step.calls > 0 && step.total() <= step.calls as u64),
        );
        line(
            &format!("etcd writes per {command}, {pool}; Put, DeleteRange, writing Txn{})", writes_note(step)),
            format!("{:.2}", step.per_call(step.writes())),
            "0".into(),
            "—".into(),
            "(counted)",
            None,
        );
    }
    let f = &c.fill;
    line(
        &format!(
            "etcd requests per ADD, {NODES} nodes from empty (etcd's count over {} ADDs, {} blocks claimed; per \
             ADD that succeeded, {})",
            f.adds, f.blocks, f.cluster_ok
        ),
        format!("{:.3}", f.per_add()),
        "0".into(),
        "—".into(),
        "≤ 1.1",
        Some(f.cluster_ok > 0 && f.per_add() <= 1.1),
    );
    let failed = |list: &[u64]| if list.is_empty() { String::new() } else { format!(", {} failed", list.len()) };
    let (cr, lr) = (ClusterFill::rate(f.cluster_ok, f.cluster_time), ClusterFill::rate(f.local_ok, f.local_time));
    line(
        &format!(
            "{NODES} nodes × {WORKERS_PER_NODE}-way concurrent ADD throughput ({} ADDs each way{}{})",
            f.adds,
            failed(&f.cluster_failures),
            if f.local_failures.is_empty() {
                String::new()
            } else {
                format!(", {} failed in local mode", f.local_failures.len())
            }
        ),
        format!("{cr:.1} ADD/s"),
        format!("{lr:.1} ADD/s"),
        ratio(cr, lr),
        "(comparison)",
        None,
    );
    line(
        &format!("addresses handed out twice across the {NODES} nodes"),
        format!("{}", f.duplicates),
        "—".into(),
        "—".into(),
        "0",
        Some(f.duplicates == 0 && f.without_address == 0),
    );
    line(
        &format!("ADDs that failed, {NODES} nodes from empty (a /16 pool: room for every one)"),
        format!("{}", f.cluster_failures.len()),
        format!("{}", f.local_failures.len()),
        "—".into(),
        "0",
        Some(f.cluster_failures.is_empty()),
    );
    for w in &c.waves {
        let what = format!("{} pods into {} addresses, {}", w.pods(), w.usable, wave_shape(w));
        line(
            &format!(
                "{what}: pods placed ({WAVE_NODES} nodes, {} blocks of /{BLOCK_SIZE}, {WAVE_THREADS} ADDs in flight \
                 per node, a failed ADD retried every {:.1} s for at most {} s per wave)",
                w.blocks,
                RETRY.as_secs_f64(),
                w.deadline.as_secs()
            ),
            format!("{} of {}", w.placed(), w.pods()),
            "—".into(),
            "—".into(),
            &format!("{}", w.pods()),
            Some(w.pods() > 0 && w.placed() == w.pods()),
        );
        line(&format!("{what}: wall time to place them"), wave_time(w), "—".into(), "—".into(), "(measured)", None);
        line(
            &format!("{what}: failed ADD attempts"),
            format!("{}", w.failed()),
            "—".into(),
            "—".into(),
            "(counted)",
            None,
        );
        line(
            &format!("{what}: addresses held twice"),
            format!("{}", w.duplicates),
            "—".into(),
            "—".into(),
            "0",
            Some(w.sound()),
        );
    }
    t
}

/// Which nodes placed their pods when: "one wave (nodes 1-10 at once)",
/// "two waves (nodes 1-5, then nodes 6-10)".
fn wave_shape(w: &PodWaves) -> String {
    let each: Vec<String> = w.waves.iter().map(|v| format!("nodes {}-{}", v.nodes.0, v.nodes.1)).collect();
    if each.len() == 1 {
        format!("{} ({} at once)", w.name, each.join(""))
    } else {
        format!("{} ({})", w.name, each.join(", then "))
    }
}

/// The waves' time, each wave's when there are several, and what was given
/// up at the deadline.
fn wave_time(w: &PodWaves) -> String {
    let mut text = format!("{:.2} s", w.time().as_secs_f64());
    if w.waves.len() > 1 {
        let each: Vec<String> = w.waves.iter().map(|v| format!("{:.2}", v.time.as_secs_f64())).collect();
        let _ = write!(text, " ({} s)", each.join(" + "));
    }
    if w.placed() < w.pods() {
        let _ = write!(text, "; {} not placed by the deadline", w.pods() - w.placed());
    }
    text
}

/// The cluster-mode section of BENCHMARKS.md.
fn cluster_section(s: &mut String, fig: &Figures) {
    let _ = writeln!(s, "## Cluster mode: `ipam-ds-cluster` on etcd\n");
    let Some(c) = &fig.cluster else {
        let _ = writeln!(s, "{}", cluster_table(fig));
        return;
    };
    let _ = writeln!(s, "The full stack in cluster mode is `ipam-delegated` with delegates `[\"ipam-ds-pool\", \"ipam-ds-cluster\", \"ipam-da-static\", \"ipam-da-sequential\"]` and `ipam.cluster = {{\"etcd\": {{\"endpoints\": [E]}}, \"node\": N}}`; local mode is the benchmark's full stack (`[\"ipam-ds-pool\", \"ipam-da-sequential\"]`, no cluster) on a database of its own. Pool `bench`, 10.30.0.0/16, default blockSize (/26 blocks). One real etcd ({}, a single member on loopback ports, its data in a temporary directory of the system temp dir) serves every simulated node; a node is a node name with a database of its own. Every call is a real process, as above.\n", c.etcd);
    let _ = writeln!(s, "{}", cluster_table(fig));
    let _ = writeln!(s, "### Latency, steady state\n\nOne node (`node-a`) that already owns a block with room (5 warm-up ADDs, not counted, claimed it), and a local-mode database on the same pool: ADD then DEL of one container, cluster and local interleaved (the order rotating), {} times. A third database, in local mode with the cluster stack's other delegates (`[\"ipam-ds-pool\", \"ipam-da-static\", \"ipam-da-sequential\"]`), is interleaved likewise for comparison: the difference between it and cluster mode is ipam-ds-cluster's own cost.\n", c.add_cluster.stats.n);
    let _ = writeln!(s, "| command, mode | n | median ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|");
    for (name, l) in [
        ("ADD, cluster mode", c.add_cluster),
        ("ADD, local mode", c.add_local),
        ("DEL, cluster mode", c.del_cluster),
        ("DEL, local mode", c.del_local),
        ("ADD, local mode with ipam-da-static", c.add_local_static),
        ("DEL, local mode with ipam-da-static", c.del_local_static),
    ] {
        let st = l.stats;
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            st.n, st.median_ms, l.p90_ms, st.p99_ms, st.max_ms
        );
    }
    let _ = writeln!(s, "\n### etcd requests per call\n\nCounted by etcd itself: `grpc_server_handled_total` per method from its `/metrics`, read before and after each batch (reading the metrics is no gRPC request). The steady-state node was first given room for the counted ADDs ({n} ADDs and {n} DELs, not counted: it keeps the blocks it claimed), then made {n} ADDs and {n} DELs, each batch logging at debug level (`ipam.logFile`, `ipam.logLevel`), where ipam-ds-cluster logs its client's count per call (`etcd requests: N range, N txn (N writing), N other`): etcd does not say whether a txn wrote, the client does. The {NODES} nodes from empty are the concurrent run below (a key prefix of their own in etcd, so the pool starts with no block claimed), not logged: their writes are the block claims (blocks in etcd afterwards), plus claims that lost a race.\n", n = c.steady_add.calls);
    let tp = &c.tight;
    let _ = writeln!(s, "The tight pool is a pool of few blocks: {}, blockSize {BLOCK_SIZE} ({} blocks, {} addresses to hand out), under a key prefix of its own in etcd, used by one node (`node-t`, a database of its own) the same way: room first ({n} ADDs and {n} DELs, not counted), then {n} ADDs and {n} DELs, each batch counted and logged. It claimed {} of the {} blocks.\n", tp.subnet, tp.blocks, tp.usable, tp.claimed, tp.blocks, n = tp.add.calls);
    let _ = writeln!(s, "| calls | n | Range | Txn | Put | DeleteRange | LeaseGrant | Authenticate | per call | the client's count (logs) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let methods = ["Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "Authenticate"];
    let count_row = |s: &mut String, name: &str, n: usize, etcd: &BTreeMap<String, u64>, client: String| {
        let _ = write!(s, "| {name} | {n} |");
        for m in methods {
            let _ = write!(s, " {} |", etcd.get(m).copied().unwrap_or(0));
        }
        let total: u64 = etcd.values().sum();
        let _ = writeln!(s, " {:.3} | {client} |", total as f64 / n.max(1) as f64);
    };
    for (name, step) in [
        ("ADD, steady state", &c.steady_add),
        ("DEL, steady state", &c.steady_del),
        ("ADD, tight pool", &c.tight.add),
        ("DEL, tight pool", &c.tight.del),
    ] {
        let k = step.client;
        let client = format!(
            "{} range, {} txn ({} writing), {} other; {} of {} calls logged",
            k.ranges, k.txns, k.writing_txns, k.other, step.logged, step.calls
        );
        count_row(s, name, step.calls, &step.etcd, client);
    }
    let f = &c.fill;
    count_row(
        s,
        &format!("ADD, {NODES} nodes from empty"),
        f.cluster_ok,
        &f.etcd,
        format!("not logged; {} blocks claimed", f.blocks),
    );
    let (cr, lr) = (ClusterFill::rate(f.cluster_ok, f.cluster_time), ClusterFill::rate(f.local_ok, f.local_time));
    let _ = writeln!(s, "\n### {NODES} nodes, concurrent ADDs from empty\n\n{NODES} nodes, each with {WORKERS_PER_NODE} worker threads that each start ADD processes one after the other ({} in flight at once), from empty: in cluster mode {NODES} fresh node databases sharing the etcd, in local mode {NODES} fresh databases and no cluster; {} ADDs each way, run in two interleaved halves (cluster, local, cluster, local). Rates count the ADDs that succeeded.\n", NODES * WORKERS_PER_NODE, f.adds);
    let _ = writeln!(s, "| mode | ADDs | succeeded | failed (codes) | time | ADD/s |\n|---|---:|---:|---|---:|---:|");
    let codes = |list: &[u64]| {
        let mut by_code: BTreeMap<u64, usize> = BTreeMap::new();
        for &c in list {
            *by_code.entry(c).or_default() += 1;
        }
        let each: Vec<String> = by_code.iter().map(|(c, n)| format!("code {c} × {n}")).collect();
        if list.is_empty() {
            "0".to_string()
        } else {
            format!("{} ({})", list.len(), each.join(", "))
        }
    };
    let _ = writeln!(
        s,
        "| cluster mode | {} | {} | {} | {:.2} s | {cr:.1} |",
        f.adds,
        f.cluster_ok,
        codes(&f.cluster_failures),
        f.cluster_time.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| local mode | {} | {} | {} | {:.2} s | {lr:.1} |",
        f.adds,
        f.local_ok,
        codes(&f.local_failures),
        f.local_time.as_secs_f64()
    );
    let _ = writeln!(s, "\nAcross the nodes in cluster mode, {} address(es) were answered to more than one ADD, and {} successful ADD(s) answered no address.\n", f.duplicates, f.without_address);
    for (code, msg) in &f.failure_messages {
        let _ = writeln!(s, "A cluster-mode ADD that failed with code {code} said: \"{msg}\"\n");
    }
    waves_section(s, &c.waves);
    let _ = writeln!(s, "### One etcd request, from the client\n\nThrough the plugins' own client (`ipam_ds_cluster::etcd::Client`), in the benchmark's process, requests one after the other:\n");
    let _ = writeln!(s, "| request | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    s.push_str(&stats_row("range of one key, kept-alive connection", &c.floor_range));
    s.push_str(&stats_row(
        "read-only txn of 3 ranges (an ADD's confirming read), fresh connection",
        &c.floor_fresh_txn,
    ));
    s.push_str(&stats_row("txn with one put (etcd syncs its WAL), kept-alive connection", &c.floor_put));
    let _ = writeln!(
        s,
        "\nWhat these times put under the cluster figures: the etcd item of \"What bounds the figures\" above."
    );
}

/// The pods placed into a pool of exactly as many addresses, in waves.
fn waves_section(s: &mut String, runs: &[PodWaves]) {
    let Some(first) = runs.first() else { return };
    let _ = writeln!(s, "### {WAVE_PODS} pods into {WAVE_PODS} addresses\n\n{WAVE_NODES} nodes (`node-1` … `node-{WAVE_NODES}`, each a database of its own) place {} pods each into a pool of exactly {} addresses: {WAVE_SUBNET} from {} to {}, blockSize {BLOCK_SIZE} ({} blocks), under a key prefix of its own in etcd per run. Every pod is an ADD process with its own container id; each node places its pods {WAVE_THREADS} at a time ({WAVE_THREADS} threads), and a failed ADD is tried again {:.1} s later (the same container id), as a runtime does, until it succeeds or the wave's deadline ({} s) has passed; pods not placed by then are given up. One wave: all {WAVE_NODES} nodes at once. Two waves: nodes 1-{half} place their pods and are done, then nodes {second}-{WAVE_NODES} place theirs while nodes 1-{half} make no call at all. A wave's time runs from its start until every pod of it is placed or given up. Every address answered is collected: none may be answered twice.\n", WAVE_PODS / WAVE_NODES, first.usable, WAVE_RANGE.0, WAVE_RANGE.1, first.blocks, RETRY.as_secs_f64(), first.deadline.as_secs(), half = WAVE_NODES / 2, second = WAVE_NODES / 2 + 1);
    let _ = writeln!(s, "| run | wave | pods | placed | failed ADD attempts | time |\n|---|---|---:|---:|---:|---:|");
    for w in runs {
        for v in &w.waves {
            let _ = writeln!(
                s,
                "| {} | nodes {}-{} | {} | {} | {} | {:.2} s |",
                w.name,
                v.nodes.0,
                v.nodes.1,
                v.pods,
                v.placed,
                v.failed,
                v.time.as_secs_f64()
            );
        }
    }
    for w in runs {
        let requests: u64 = w.etcd.values().sum();
        let methods: Vec<String> = w.etcd.iter().filter(|(_, n)| **n > 0).map(|(m, n)| format!("{m} {n}")).collect();
        let _ = writeln!(
            s,
            "\n{}: {} of {} pods placed in {}; {} address(es) answered twice, {} placed pod(s) answered no address, {} address(es) outside the pool's range; {} of {} blocks claimed; etcd handled {requests} requests over every ADD attempt ({}).",
            capitalized(w.name),
            w.placed(),
            w.pods(),
            wave_time(w),
            w.duplicates,
            w.without_address,
            w.outside,
            w.claimed,
            w.blocks,
            if methods.is_empty() { "none".to_string() } else { methods.join(", ") }
        );
        for (code, (n, msg)) in &w.failures {
            let _ = writeln!(s, "\n{n} ADD attempt(s) failed with code {code}; the first said: \"{msg}\"");
        }
    }
    s.push('\n');
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

pub fn loads(fig: &Figures) -> String {
    fig.loads.iter().map(|(when, l)| format!("{when}: {l}")).collect::<Vec<_>>().join("; ")
}

fn stats_row(name: &str, s: &Stats) -> String {
    format!("| {name} | {} | {:.2} | {:.2} | {:.2} |\n", s.n, s.median_ms, s.p99_ms, s.max_ms)
}

fn trials(list: &[Duration]) -> String {
    list.iter().map(|d| format!("{:.2}", d.as_secs_f64() * 1e3)).collect::<Vec<_>>().join(", ")
}

/// The durability section: the fsync-family calls counted, and what each
/// side promises.
fn durability_section(s: &mut String, fig: &Figures) {
    let _ = writeln!(s, "\n## Durability\n\nfsync-family system calls (fsync, fdatasync, sync_file_range) per call, counted with `strace -f` (every process of the call), so that the comparison is read knowing what each side promises. The first ADD on a fresh node creates the database / dataDir, and its count includes the syncs of creating the database's files (and their directory); the steady state follows a few ADDs, and its DELs undo its ADDs. \"1.25 (1 to 4)\": the mean per call, and the fewest and most one call made.\n");
    if let Some(note) = &fig.fsync_note {
        let _ = writeln!(s, "Not counted: {note}.\n");
    }
    if !fig.fsyncs.is_empty() {
        let _ = writeln!(s, "| variant | case | calls | per call | fsync | fdatasync | sync_file_range |\n|---|---|---:|---:|---:|---:|---:|");
        for p in &fig.fsyncs {
            let sum = p.sum();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.variant,
                p.case,
                p.calls.len(),
                p.per_call(),
                sum.fsync,
                sum.fdatasync,
                sum.sync_file_range
            );
        }
    }
    if let Some(c) = fig.sync_cost {
        let _ = writeln!(
            s,
            "\nOne 4 KiB append + fdatasync in the temp dir: median {:.2} ms, max {:.2} ms (n={}).",
            c.median_ms, c.max_ms, c.n
        );
    }
    let _ = writeln!(s, "\nThe suite makes each ADD and DEL durable before it answers: its commits go to SQLite's WAL, which is synced before the call answers (in the fast layout one sync for the whole stack, whose delegates share the call's connection; in the copies layout each writing delegate's process syncs its own commits), with the new database file and its directory also synced when the call created the database; every dozen ADDs or so a checkpoint copies the WAL into the database file and starts the WAL again, syncing the WAL, its directory, the database file and the WAL's new header instead of the one sync, which is what lifts a steady-state mean above its median. host-local writes its lease files without any fsync, so a host crash can lose an allocation it reported; its figures do not include that cost.");
}

/// The lock-wait scenario's section: the figures, and what they say about fairness.
fn lock_wait_section(s: &mut String, lw: &LockWait, cores: usize) {
    let (n, ahead) = (lw.workers, lw.workers.saturating_sub(1));
    let lines = match lw.lines_per_call {
        (1, 1) => "one such line".to_string(),
        (a, b) if a == b => format!("{a} such lines"),
        (a, b) => format!("{a} to {b} such lines"),
    };
    let _ = writeln!(s, "\n## Waiting for the lock: {n} ADDs in flight at once\n");
    let _ = writeln!(s, "{} ADDs of the full stack on one database, by {n} threads that start together and each start one ADD process after the other, so that {n} calls are in flight at any time (on {cores} cores). The full stack rather than the allocator alone, because that is what a runtime starts: each call runs `ipam-delegated` with `ipam-ds-pool` (which reads without the lock) and `ipam-da-sequential` (in the fast layout all in one process), whose commit is the call's one write, so the lock sees the arrivals it sees in use. Each call logs at debug level to a file of its own (`ipam.logFile`, `ipam.logLevel: \"debug\"`), where every write transaction logs `lock wait W, transaction T, durable commit C` (shared/src/store): a call's wait is the sum of its W ({lines} per call), the time a transaction held the lock is T + C (a lower bound: the WAL checkpoint every dozen ADDs also runs under the lock). The same run without logging, on a fresh database, gives the calls' end-to-end latencies.\n", lw.calls);
    let _ = writeln!(s, "| measurement | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    s.push_str(&stats_row("lock wait per ADD", &lw.wait));
    s.push_str(&stats_row("lock held per write transaction (transaction + durable commit)", &lw.hold));
    s.push_str(&stats_row("ADD end to end, logging at debug", &lw.latency_logged));
    s.push_str(&stats_row("ADD end to end, no log file", &lw.latency));
    let failures = if lw.failures.is_empty() {
        "No call failed.".to_string()
    } else {
        format!(
            "{} calls failed, with the codes {:?} (11: the lock stayed taken for `ipam.lockTimeout`).",
            lw.failures.len(),
            lw.failures
        )
    };
    let _ = writeln!(s, "\nThe logged run took {:.2} s for {} write transactions: the lock changed hands every {:.2} ms on average (one turn: a hold and the hand-over to the next holder). {failures}\n", lw.run_time.as_secs_f64(), lw.hold.n, lw.turn_ms);
    let _ = write!(s, "**Fairness.** Writers wait in a queue in front of the flock on `<database>.lock` (shared/src/store/queue.rs): a writer takes the next ticket in `<database>.lock-queue` when it asks for the lock, waits for the writer with the ticket before its own, and then takes the flock, which keeps every holder alone. Served in the queue's order, no writer has its turn before one with an earlier ticket, and a wait sees at most {ahead} turns go by (one per call in flight ahead of it). Each transaction logs its line while it still holds the lock, with its ticket, so the lines' timestamps give the order of the turns exactly: {} of {} turns came after a turn with a later ticket (were passed over), one of them after {}; {} had no ticket (the queue could not be used). About when each asked and took the lock (its timestamp − C − T − W and − C − T): one wait saw {} turns go by; the longest wait lasted {:.2} ms, {:.1}× the median of {:.2} ms. ", lw.passed_over, lw.acquisitions, lw.most_passed_by, lw.unticketed, lw.most_handovers, lw.wait.max_ms, lw.max_over_median(), lw.wait.median_ms);
    if lw.passed_over == 0 {
        let _ = writeln!(s, "The waiters were served in the order they asked.");
    } else if lw.most_handovers > ahead {
        let _ = writeln!(s, "So waiters are starved: a wait that sees more than {ahead} turns go by can only have been passed over again and again by calls that came after it, and only the lock timeout bounds it.");
    } else {
        let _ = writeln!(s, "So the order is not kept, though in this run no wait saw more turns go by than an ordered queue would allow ({ahead}).");
    }
}

/// The machine, the versions, the layout measured and the load averages: a
/// Markdown table (also printed by a run of some scenarios).
pub fn machine_table(m: &Machine, fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| date | {} |", m.date);
    let _ = writeln!(s, "| CPU | {} |", m.cpu);
    let _ = writeln!(s, "| cores | {} |", m.cores);
    let _ = writeln!(s, "| kernel | {} |", m.kernel);
    let _ = writeln!(s, "| disk / filesystem | {} |", m.filesystem);
    let _ = writeln!(s, "| rustc | {} |", m.rustc);
    let _ = writeln!(s, "| host-local | containernetworking-plugins {} (Debian) |", m.host_local);
    let _ = writeln!(s, "| suite | {} |", m.suite);
    let _ = writeln!(s, "| suite layout measured | {} |", fig.layout);
    let _ = writeln!(s, "| load average (1, 5, 15 min) | {} |", loads(fig));
    s
}

pub fn markdown(fig: &Figures, m: &Machine, table: &str, elapsed: Duration) -> String {
    let c = fig.counts.expect("counts");
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks: the suite against host-local\n");
    let _ = writeln!(s, "Generated by `cargo run --release -p ipam-bench` (the whole run took {:.0} s). Every call is a real process started with the CNI_* environment a runtime sets (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH) and the configuration on stdin; its time runs from spawn to reaping. The suite and `{HOST_LOCAL}` work on the same subnet, each with a fresh database / dataDir per scenario, and their calls are interleaved.\n", elapsed.as_secs_f64());
    let _ = writeln!(s, "The suite measured: {}. In the fast layout ipam-delegated runs a delegate whose file is its own (the same inode as `/proc/self/exe`) inside its process, so a whole stack is one process with one database connection; the copies layout (each of the four names a copy of the file, as an administrator who copies the files one by one gets) starts every delegate as a process of its own, and is measured for comparison.\n", fig.layout);
    let _ = writeln!(s, "## Machine and versions\n");
    let _ = writeln!(s, "{}", machine_table(m, fig));
    let _ = writeln!(s, "## Summary\n\n{table}");
    let _ = writeln!(s, "### What bounds the figures\n\nWhat the benchmark can measure of the limits below the figures, on this machine:\n\n{}", bounds(fig));
    cluster_section(&mut s, fig);
    let sticky = sticky::section(fig);
    if !sticky.is_empty() {
        let _ = write!(s, "\n{}", sticky.trim_end());
    }
    let _ = writeln!(s, "\n## Latency ({} calls per variant and command)\n", c.latency);
    let _ = writeln!(s, "The full stack is `ipam-delegated` with delegates `[\"ipam-ds-pool\", \"ipam-da-sequential\"]`, in the measured layout and in the copies layout (on a database of its own); `ipam-da-sequential` alone is started as its name in the measured layout and fed the configuration with the `prevResult` that `ipam-ds-pool` printed for it (with `pools`). The floor is `ipam-bench-floor` (bench/floor), a minimal program of the benchmark's own that does the least work of a steady-state ADD (\"The floor\" in \"What bounds the figures\" above), built in the same `scripts/build` as the suite's program, on a database of its own and fed the full stack's configuration. Subnet 10.20.0.0/16. CPU is user + system time from wait4's rusage (the process and the children it reaped).\n");
    let _ = writeln!(
        s,
        "| command, variant | n | median ms | p99 ms | max ms | CPU median ms |\n|---|---:|---:|---:|---:|---:|"
    );
    for (command, list, cpu) in [("ADD", &fig.add, &fig.add_cpu), ("DEL", &fig.del, &fig.del_cpu)] {
        for (name, st) in list {
            let cpu = find(cpu, name).map_or("—".into(), |c| format!("{:.2}", c.median_ms));
            let _ = writeln!(
                s,
                "| {command}, {name} | {} | {:.2} | {:.2} | {:.2} | {cpu} |",
                st.n, st.median_ms, st.p99_ms, st.max_ms
            );
        }
    }
    let _ = writeln!(s, "\nThe cost of a process that does no work, through the same spawn path (interleaved likewise): a call of the full stack is one such process in the fast layout (three in the copies layout), a call of host-local one. `ipam-da-sequential` is the suite's program started under that name; `ipam-bench-null` is the floor program's build doing nothing (the start-up and exit of that build).\n");
    let _ = writeln!(s, "| process | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    for (name, st) in &fig.floors {
        s.push_str(&stats_row(name, st));
    }
    if !fig.first_add.is_empty() {
        let _ = writeln!(s, "\n## The first ADD on a fresh node ({} calls per variant)\n\nEach call in a fresh directory of its own, the variants interleaved: the suite's database does not exist yet (the ADD creates it 0600, sets up its schema and WAL, registers the pool and allocates; the directory exists, as /var/lib/cni would), host-local's dataDir does not either (it creates it). Subnet 10.26.0.0/16.\n", c.first_add);
        let _ = writeln!(s, "| variant | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
        for (name, st) in &fig.first_add {
            s.push_str(&stats_row(name, st));
        }
    }
    let _ = writeln!(s, "\n## Concurrent ADD throughput\n\n{} ADDs per variant, {} worker threads each spawning processes, run in two interleaved halves (suite, host-local, suite, host-local).\n", c.throughput, c.workers);
    let _ = writeln!(s, "| variant | ADD/s | total time |\n|---|---:|---:|");
    for (name, (rate, spent)) in &fig.throughput {
        let _ = writeln!(s, "| {name} | {rate:.1} | {:.2} s |", spent.as_secs_f64());
    }
    if let Some(lw) = &fig.lock_wait {
        lock_wait_section(&mut s, lw, m.cores);
    }
    let _ = writeln!(s, "\n## A /16 with one free address, and exhausted\n\n10.22.0.0/16: every allocatable address leased but one, which lies just behind the allocation cursor, so a sequential search goes round the whole pool. The suite's database is filled through the library (`AllocationStore`, `insert_leases_bulk`, `register_pool` with the selector's `Pool::to_json()`, `set_cursor`); host-local's dataDir gets one file per address and `last_reserved_ip.0`. Then the last address is leased too and ADD must fail. Times of single ADDs (ms), one per trial:\n");
    let _ = writeln!(s, "| case | variant | trials (ms) |\n|---|---|---|");
    for (name, list) in &fig.one_free {
        let _ = writeln!(s, "| one free | {name} | {} |", trials(list));
    }
    for (name, list) in &fig.exhausted {
        let _ = writeln!(s, "| exhausted | {name} | {} |", trials(list));
    }
    let _ = writeln!(s, "\n## Pools with {} leases (suite only)\n\nFilled through the library; the cursor sits on the first lease, so the next free address lies behind the whole run.\n", c.big_fill);
    let _ = writeln!(s, "| pool | ADDs | median ms | p99 ms | max ms | fill time |\n|---|---:|---:|---:|---:|---:|");
    for (name, st, fill) in &fig.big {
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.1} s |",
            st.n,
            st.median_ms,
            st.p99_ms,
            st.max_ms,
            fill.as_secs_f64()
        );
    }
    let _ = writeln!(s, "\n## ADD latency against pool fill\n\n![ADD latency against fill](benchmarks/add-latency-vs-fill.svg)\n\n10.23.0.0/16 filled from its start to each level, the cursor on the last lease (as sequential allocation leaves a pool). Median of the trials at each level (each ADD is undone by a DEL and the cursor reset).\n");
    let _ = write!(s, "| fill |");
    for (name, _) in &fig.fill_curve {
        let _ = write!(s, " {name} (ms) |");
    }
    let _ = write!(s, " ratio |\n|---:|");
    for _ in &fig.fill_curve {
        s.push_str("---:|");
    }
    s.push_str("---:|\n");
    for (i, level) in FILL_LEVELS.iter().enumerate() {
        let _ = write!(s, "| {}% |", level * 100.0);
        let vals: Vec<f64> =
            fig.fill_curve.iter().map(|(_, curve)| curve.get(i).map_or(0.0, |p| p.1.median_ms)).collect();
        for v in &vals {
            let _ = write!(s, " {v:.2} |");
        }
        let _ = writeln!(s, " {} |", if vals.len() == 2 { ratio(vals[0], vals[1]) } else { "—".into() });
    }
    let _ = writeln!(s, "\n## Peak resident memory of one ADD\n\n`ru_maxrss` from `wait4`, the largest of 5 ADDs. Linux starts a child's ru_maxrss at the high-water mark of the address space it replaced at execve, which for a child spawned by vfork (as Rust's std does) is its parent's; so each plugin is started by a small launcher (`ipam-bench --rusage-of <exe>`, a fresh process) that reaps it with wait4 and reports its figure. The launcher's own mark is the floor below which nothing can be measured (first row). For the full stack the figure is the largest of ipam-delegated's process and the delegates it reaped; in the fast layout the delegates run inside its process, so it is that one process's. The delegates' rows are the program started under each delegate's name.\n");
    let _ = writeln!(s, "| executable | peak RSS |\n|---|---:|");
    for (name, kib) in &fig.rss {
        let _ = writeln!(s, "| {name} | {:.2} MiB ({kib} KiB) |", *kib as f64 / MIB);
    }
    durability_section(&mut s, fig);
    let _ = writeln!(s, "\n## Reproduce\n\n```sh\ncargo run --release -p ipam-bench                          # builds, installs the fast layout in a temp dir\ncargo run --release -p ipam-bench -- --bin-dir /usr/lib/cni  # an installed layout (e.g. after dpkg -i)\ncargo run --release -p ipam-bench -- --only sticky,sticky-cluster  # some scenarios: prints their figures, writes nothing\n```\n\nNeeds `{HOST_LOCAL}` (Debian package containernetworking-plugins). `BENCH_TMPDIR` chooses where the temporary databases go; `BENCH_QUICK=1` runs reduced counts and writes nothing. Figures taken while other work runs on the machine are noisy: compare the load averages above.");
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn figures(passed_over: usize, most_handovers: usize) -> Figures {
        let st = |median_ms, p99_ms, max_ms, n| Stats { median_ms, p99_ms, max_ms, n };
        Figures {
            counts: Some(crate::setup::QUICK),
            lock_wait: Some(LockWait {
                workers: 64,
                calls: 320,
                wait: st(180.0, 650.0, 1000.0, 320),
                hold: st(2.3, 9.0, 20.0, 320),
                latency_logged: st(200.0, 700.0, 1050.0, 320),
                latency: st(190.0, 680.0, 1010.0, 320),
                lines_per_call: (1, 1),
                failures: vec![],
                run_time: Duration::from_millis(1200),
                turn_ms: 3.75,
                acquisitions: 320,
                passed_over,
                most_passed_by: passed_over.min(240),
                unticketed: 0,
                most_handovers,
            }),
            ..Default::default()
        }
    }

    pub(super) fn machine() -> Machine {
        let unknown = || "unknown".to_string();
        Machine {
            cpu: unknown(),
            cores: 2,
            kernel: unknown(),
            filesystem: unknown(),
            date: unknown(),
            rustc: unknown(),
            host_local: unknown(),
            suite: unknown(),
        }
    }

    #[test]
    fn the_lock_wait_figures_are_in_the_summary_and_have_a_section() {
        let fig = figures(300, 301);
        let table = table(&fig);
        assert!(table.contains("| 64-way contention: lock wait per ADD, median (n=320) | 180.00 ms |"), "{table}");
        assert!(table.contains("| 64-way contention: lock wait per ADD, p99 | 650.00 ms |"), "{table}");
        assert!(
            table.contains("300 of 320 waits passed over by a later ticket, one by 240) | 1000.00 ms |"),
            "{table}"
        );
        assert!(table.contains("| served in order: none passed over | **NO** |"), "{table}");
        let md = markdown(&fig, &machine(), &table, Duration::from_secs(1));
        assert!(md.contains("## Waiting for the lock: 64 ADDs in flight at once"), "{md}");
        assert!(md.contains("| lock wait per ADD | 320 | 180.00 | 650.00 | 1000.00 |"), "{md}");
        assert!(md.contains("300 of 320 turns came after a turn with a later ticket"), "{md}");
        assert!(md.contains("So waiters are starved"), "{md}");
    }

    #[test]
    fn waiters_served_in_order_are_said_to_be() {
        let fig = figures(0, 63);
        let md = markdown(&fig, &machine(), &table(&fig), Duration::from_secs(1));
        assert!(md.contains("The waiters were served in the order they asked."), "{md}");
        assert!(table(&fig).contains("| served in order: none passed over | yes |"));
    }

    #[test]
    fn the_targets_the_layouts_and_the_bounds_are_reported() {
        let st = |median_ms, n| Stats { median_ms, p99_ms: median_ms * 1.5, max_ms: median_ms * 2.0, n };
        let named = |list: &[(&str, f64)], n| list.iter().map(|&(k, v)| (k.to_string(), st(v, n))).collect::<Vec<_>>();
        let variants = |stack, copies, seq, hl| {
            [
                ("suite: ipam-delegated (ds-pool + da-sequential)", stack),
                ("suite: ipam-delegated, copies layout (each delegate a process)", copies),
                ("suite: ipam-da-sequential alone", seq),
                ("host-local", hl),
            ]
        };
        let one = |fsync, fdatasync| SyncCount { fsync, fdatasync, sync_file_range: 0 };
        let probe = |variant: &str, case: &str, calls: Vec<SyncCount>| FsyncProbe {
            variant: variant.into(),
            case: case.into(),
            calls,
        };
        let stack = "suite: ipam-delegated (ds-pool + da-sequential)";
        let fig = Figures {
            layout: "fast layout (…), installed in /usr/lib/cni (--bin-dir)".into(),
            counts: Some(crate::setup::QUICK),
            add: named(&variants(1.4, 5.0, 1.2, 3.0), 40),
            del: named(&variants(1.6, 4.0, 1.1, 2.8), 40),
            add_cpu: named(&variants(1.0, 4.0, 0.9, 3.2), 40),
            first_add: named(&[(stack, 3.0), ("host-local", 2.5)], 12),
            floors: named(&[("/bin/true", 0.8), ("ipam-da-sequential, CNI_COMMAND=VERSION", 0.9)], 40),
            throughput: vec![
                ("suite: ipam-delegated".into(), (900.0, Duration::ZERO)),
                ("host-local".into(), (430.0, Duration::ZERO)),
            ],
            rss: vec![
                ("(floor: the launcher running /bin/true)".into(), 2755),
                ("ipam-delegated (the full stack)".into(), 4140),
                ("host-local".into(), 3830),
            ],
            fsyncs: vec![
                probe(stack, FsyncProbe::FIRST_ADD, vec![one(9, 1)]),
                probe(stack, FsyncProbe::ADD, vec![one(0, 1), one(0, 1), one(1, 2), one(0, 1)]),
                probe(stack, FsyncProbe::DEL, vec![one(0, 1); 4]),
                probe("host-local", FsyncProbe::ADD, vec![one(0, 0); 4]),
            ],
            sync_cost: Some(st(0.2, 20)),
            ..Default::default()
        };
        let table = table(&fig);
        for row in [
            "| ADD median, full stack (n=40) | 1.40 ms | 3.00 ms | 0.47× | ≤ 0.4× | **NO** |",
            "| ADD median, full stack, copies layout (each delegate a process) | 5.00 ms | 3.00 ms | 1.67× | (comparison) |  |",
            "| ADD median, ipam-da-sequential alone | 1.20 ms | 3.00 ms | 0.40× | ≤ 0.4× | yes |",
            "| DEL median, full stack | 1.60 ms | 2.80 ms | 0.57× | ≤ 0.5× | **NO** |",
            "| first ADD on a fresh node, median (n=12; the ADD creates the database) | 3.00 ms | 2.50 ms | 1.20× | ≤ 1.0× | **NO** |",
            "| 16-way concurrent ADD throughput | 900.00 ADD/s | 430.00 ADD/s | 2.09× | ≥ 2× | yes |",
            "| peak RSS, one ADD of ipam-delegated (the full stack) | 4.04 MiB | 3.74 MiB | 1.08× | ≤ 8 MiB | yes |",
            "| fsync-family calls per ADD, steady state, full stack (strace -f, n=4) | 1.50 (1 to 3) | 0 | — | counted |  |",
            "| fsync-family calls per first ADD on a fresh node, full stack (strace -f, n=1) | 10 | — | — | counted |  |",
            "| fsync-family calls per DEL, steady state, full stack (strace -f, n=4) | 1 | — | — | counted |  |",
        ] {
            assert!(table.contains(row), "{row} missing from\n{table}");
        }
        let bounds = bounds(&fig);
        assert!(bounds.contains("(CNI_COMMAND=VERSION) 0.90 ms"), "{bounds}");
        assert!(bounds.contains("that floor is 0.30×"), "{bounds}");
        assert!(
            bounds.contains(
                "first ADD on a fresh node: 10 (median call), so with the process floor at least about 2.90 ms, 1.16×"
            ),
            "{bounds}"
        );
        let md = markdown(&fig, &machine(), &table, Duration::from_secs(1));
        assert!(
            md.contains("| suite layout measured | fast layout (…), installed in /usr/lib/cni (--bin-dir) |"),
            "{md}"
        );
        assert!(md.contains("## The first ADD on a fresh node (12 calls per variant)"), "{md}");
        assert!(md.contains("| ADD, host-local | 40 | 3.00 | 4.50 | 6.00 | 3.20 |"), "{md}");
        assert!(md.contains(&format!("| {stack} | ADD, steady state | 4 | 1.50 (1 to 3) | 1 | 5 | 0 |")), "{md}");
        assert!(md.contains("### What bounds the figures"), "{md}");
        if std::env::var_os("BENCH_SHOW").is_some() {
            println!("{md}");
        }
    }

    #[test]
    fn the_floor_and_the_suites_distance_to_it_are_reported() {
        let st = |median_ms: f64| Stats { median_ms, p99_ms: median_ms * 1.5, max_ms: median_ms * 2.0, n: 40 };
        let named = |list: &[(&str, f64)]| list.iter().map(|&(k, v)| (k.to_string(), st(v))).collect::<Vec<_>>();
        // The names the latency scenario gives its variants.
        let floor = "floor: ipam-bench-floor (the least work of an ADD)";
        let latency = |stack, seq, floor_ms, hl| {
            named(&[
                ("suite: ipam-delegated (ds-pool + da-sequential)", stack),
                ("suite: ipam-delegated, copies layout (each delegate a process)", 4.0),
                ("suite: ipam-da-sequential alone", seq),
                (floor, floor_ms),
                ("host-local", hl),
            ])
        };
        let fig = Figures {
            counts: Some(crate::setup::QUICK),
            add: latency(1.8, 1.7, 1.2, 3.0),
            del: latency(1.6, 1.5, 1.1, 2.8),
            add_cpu: latency(1.0, 0.9, 0.5, 3.2),
            floors: named(&[
                ("/bin/true", 0.7),
                ("ipam-da-sequential, CNI_COMMAND=VERSION", 0.9),
                ("host-local, CNI_COMMAND=VERSION", 1.0),
                ("ipam-bench-null (the floor program's build, doing nothing)", 0.6),
            ]),
            ..Default::default()
        };
        let t = table(&fig);
        for row in [
            "| ADD median, full stack (n=40) | 1.80 ms | 3.00 ms | 0.60× | ≤ 0.4× | **NO** |",
            "| ADD median, the floor: ipam-bench-floor (the least work of a steady-state ADD as a program of its own, built as the suite's program is) | 1.20 ms | 3.00 ms | 0.40× | (floor) |  |",
            "| ADD p99, the floor | 1.80 ms | 4.50 ms | 0.40× |  |  |",
            "| ADD median above the floor, full stack (its median − the floor's) | +0.60 ms (1.50× the floor) | +1.80 ms (2.50× the floor) | — | (distance) |  |",
            "| ADD median above the floor, ipam-da-sequential alone | +0.50 ms (1.42× the floor) | — | — | (distance) |  |",
        ] {
            assert!(t.contains(row), "{row} missing from\n{t}");
        }
        let b = bounds(&fig);
        for text in [
            "Its ADD median is 1.20 ms (p99 1.80 ms, CPU 0.50 ms), 0.40× host-local's ADD median.",
            "of the floor's 1.20 ms, 0.60 ms are starting and ending a process of that build, 0.60 ms the work.",
            "(CNI_COMMAND=VERSION) takes 0.90 ms, +0.30 ms against `ipam-bench-null`",
            "The ADD median of the full stack, 1.80 ms, is +0.60 ms above the floor (1.50× the floor's).",
            "The ADD median of ipam-da-sequential alone, 1.70 ms, is +0.50 ms above the floor (1.42× the floor's).",
            "takes 1.10 ms, the full stack's 1.60 ms: +0.50 ms above it (1.45×).",
        ] {
            assert!(b.contains(text), "{text} missing from\n{b}");
        }
        let md = markdown(&fig, &machine(), &t, Duration::from_secs(1));
        assert!(md.contains(&format!("| ADD, {floor} | 40 | 1.20 | 1.80 | 2.40 | 0.50 |")), "{md}");
        assert!(md.contains("| ipam-bench-null (the floor program's build, doing nothing) | 40 | 0.60 |"), "{md}");
        // Without the floor measured, no row or sentence claims it.
        let mut without = fig;
        without.add.retain(|(name, _)| name != floor);
        assert!(!table(&without).contains("floor"), "{}", table(&without));
        assert!(!bounds(&without).contains("The floor."), "{}", bounds(&without));
    }

    fn cluster_figures() -> ClusterFigures {
        let lat = |median_ms, p90_ms, n| Latency {
            stats: Stats { median_ms, p99_ms: p90_ms * 1.5, max_ms: p90_ms * 2.0, n },
            p90_ms,
        };
        let methods = |range, txn, put| {
            [("Range", range), ("Txn", txn), ("Put", put), ("DeleteRange", 0), ("LeaseGrant", 0), ("Authenticate", 0)]
                .into_iter()
                .map(|(m, n)| (m.to_string(), n))
                .collect::<BTreeMap<String, u64>>()
        };
        let floor = |median_ms| Stats { median_ms, p99_ms: median_ms * 2.0, max_ms: median_ms * 3.0, n: 200 };
        ClusterFigures {
            etcd: "etcd Version: 3.4.23".into(),
            add_cluster: lat(3.0, 4.0, 300),
            add_local: lat(2.0, 3.0, 300),
            del_cluster: lat(2.2, 3.0, 300),
            del_local: lat(2.0, 2.5, 300),
            add_local_static: lat(2.1, 3.1, 300),
            del_local_static: lat(2.0, 2.5, 300),
            steady_add: StepCount {
                calls: 200,
                etcd: methods(0, 200, 0),
                client: RequestCount { ranges: 0, txns: 200, writing_txns: 0, other: 0 },
                logged: 200,
            },
            steady_del: StepCount { calls: 200, etcd: methods(0, 0, 0), client: RequestCount::default(), logged: 200 },
            tight: TightPool {
                subnet: "10.31.0.0/24",
                usable: 253,
                blocks: 4,
                claimed: 1,
                add: StepCount {
                    calls: 50,
                    etcd: methods(0, 50, 0),
                    client: RequestCount { ranges: 0, txns: 50, writing_txns: 50, other: 0 },
                    logged: 50,
                },
                del: StepCount { calls: 50, etcd: methods(0, 50, 0), client: RequestCount::default(), logged: 49 },
            },
            fill: ClusterFill {
                adds: 2000,
                cluster_ok: 2000,
                cluster_failures: vec![],
                failure_messages: vec![],
                cluster_time: Duration::from_secs(5),
                local_ok: 2000,
                local_failures: vec![],
                local_time: Duration::from_secs(4),
                etcd: methods(0, 2060, 0),
                blocks: 40,
                duplicates: 0,
                without_address: 0,
            },
            waves: [
                pod_waves("one wave", &[(1, 10, 1000, 11.0)]),
                pod_waves("two waves", &[(1, 5, 500, 1.2), (6, 10, 320, 45.0)]),
            ],
            floor_range: floor(0.4),
            floor_fresh_txn: floor(0.7),
            floor_put: floor(0.8),
        }
    }

    /// Waves of (first node, last node, pods placed of 100 per node, seconds).
    fn pod_waves(name: &'static str, waves: &[(usize, usize, usize, f64)]) -> PodWaves {
        let failed = |placed: usize, pods: usize| if placed < pods { 450 } else { 0 };
        let waves: Vec<Wave> = waves
            .iter()
            .map(|&(first, last, placed, secs)| Wave {
                nodes: (first, last),
                pods: 100 * (last - first + 1),
                placed,
                failed: failed(placed, 100 * (last - first + 1)),
                time: Duration::from_secs_f64(secs),
            })
            .collect();
        let stalled = waves.iter().any(|w| w.placed < w.pods);
        PodWaves {
            name,
            usable: 1000,
            blocks: 16,
            deadline: Duration::from_secs(45),
            waves,
            failures: if stalled {
                BTreeMap::from([(100, (450, "no free IPv4 address".into()))])
            } else {
                BTreeMap::new()
            },
            duplicates: 0,
            without_address: 0,
            outside: 0,
            claimed: 16,
            etcd: BTreeMap::from([("Txn".to_string(), 1500)]),
        }
    }

    #[test]
    fn the_tight_pool_and_the_waves_have_their_rows_and_a_section() {
        let fig = Figures { counts: Some(crate::setup::QUICK), cluster: Some(cluster_figures()), ..Default::default() };
        let t = cluster_table(&fig);
        for row in [
            "| etcd writes per DEL, steady state (Put, DeleteRange, writing Txn) | 0.00 | 0 | — | (counted) |  |",
            "| etcd requests per ADD, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; etcd's count over 50 ADDs) | 1.00 | 0 | — | ≤ 1 | yes |",
            "| etcd writes per ADD, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; Put, DeleteRange, writing Txn) | 1.00 | 0 | — | (counted) |  |",
            "| etcd requests per DEL, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; etcd's count over 50 DELs) | 1.00 | 0 | — | (counted) |  |",
            // Not every DEL logged its count: its txns are taken as reads.
            "| etcd writes per DEL, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; Put, DeleteRange, writing Txn; not every call logged: every Txn counted as a read) | 0.00 |",
            "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): pods placed (10 nodes, 16 blocks of /26, 2 ADDs in flight per node, a failed ADD retried every 0.5 s for at most 45 s per wave) | 1000 of 1000 | — | — | 1000 | yes |",
            "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): wall time to place them | 11.00 s | — | — | (measured) |  |",
            "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): failed ADD attempts | 0 | — | — | (counted) |  |",
            "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): pods placed (10 nodes, 16 blocks of /26, 2 ADDs in flight per node, a failed ADD retried every 0.5 s for at most 45 s per wave) | 820 of 1000 | — | — | 1000 | **NO** |",
            "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): wall time to place them | 46.20 s (1.20 + 45.00 s); 180 not placed by the deadline | — | — | (measured) |  |",
            "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): failed ADD attempts | 450 | — | — | (counted) |  |",
            "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): addresses held twice | 0 | — | — | 0 | yes |",
        ] {
            assert!(t.contains(row), "{row} missing from\n{t}");
        }
        let mut c = cluster_figures();
        c.waves[0].duplicates = 1;
        c.tight.add.etcd = methods_txn(60);
        let bad = Figures { cluster: Some(c), ..Default::default() };
        let t = cluster_table(&bad);
        assert!(t.contains("one wave (nodes 1-10 at once): addresses held twice | 1 | — | — | 0 | **NO** |"), "{t}");
        assert!(t.contains("over 50 ADDs) | 1.20 | 0 | — | ≤ 1 | **NO** |"), "{t}");
        let md = markdown(&fig, &machine(), &table(&fig), Duration::from_secs(1));
        for text in [
            "| ADD, tight pool | 50 | 0 | 50 | 0 | 0 | 0 | 0 | 1.000 | 0 range, 50 txn (50 writing), 0 other; 50 of 50 calls logged |",
            "The tight pool is a pool of few blocks: 10.31.0.0/24, blockSize 26 (4 blocks, 253 addresses to hand out)",
            "### 1000 pods into 1000 addresses",
            "| two waves | nodes 6-10 | 500 | 320 | 450 | 45.00 s |",
            "Two waves: 820 of 1000 pods placed in 46.20 s (1.20 + 45.00 s); 180 not placed by the deadline; 0 address(es) answered twice",
            "450 ADD attempt(s) failed with code 100; the first said: \"no free IPv4 address\"",
        ] {
            assert!(md.contains(text), "{text} missing from\n{md}");
        }
    }

    fn methods_txn(txn: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("Txn".to_string(), txn)])
    }

    #[test]
    fn the_cluster_figures_have_their_targets_and_a_section() {
        let fig = Figures { counts: Some(crate::setup::QUICK), cluster: Some(cluster_figures()), ..Default::default() };
        let t = cluster_table(&fig);
        for row in [
            "| ADD median, full stack, steady state (n=300; the node owns a block with room) | 3.00 ms | 2.00 ms | 1.50× | ≤ 1.2× | **NO** |",
            "| ADD p90, full stack, steady state | 4.00 ms | 3.00 ms | 1.33× |  |  |",
            "| etcd reads per ADD, steady state (etcd's count over 200 ADDs: Range + read-only Txn per the calls' logs) | 1.00 | 0 | — | ≤ 1 | yes |",
            "| etcd writes per ADD, steady state (Put, DeleteRange, writing Txn) | 0.00 | 0 | — | 0 | yes |",
            "| etcd requests per ADD, 8 nodes from empty (etcd's count over 2000 ADDs, 40 blocks claimed; per ADD that succeeded, 2000) | 1.030 | 0 | — | ≤ 1.1 | yes |",
            "| 8 nodes × 16-way concurrent ADD throughput (2000 ADDs each way) | 400.0 ADD/s | 500.0 ADD/s | 0.80× | (comparison) |  |",
            "| addresses handed out twice across the 8 nodes | 0 | — | — | 0 | yes |",
            "| ADDs that failed, 8 nodes from empty (a /16 pool: room for every one) | 0 | 0 | — | 0 | yes |",
        ] {
            assert!(t.contains(row), "{row} missing from\n{t}");
        }
        // A writing txn in the steady state is a write, once the logs say so.
        let mut c = cluster_figures();
        c.steady_add.client.writing_txns = 2;
        assert_eq!((c.steady_add.reads(), c.steady_add.writes()), (198, 2));
        c.steady_add.logged = 199;
        assert_eq!((c.steady_add.reads(), c.steady_add.writes()), (200, 0));
        let fig_split = Figures { cluster: Some(c), ..Default::default() };
        assert!(cluster_table(&fig_split).contains("| 0 | — | 0 | **NO** |"), "{}", cluster_table(&fig_split));
        let b = bounds(&fig);
        assert!(b.contains("2.00 + 0.70 = 2.70 ms (1.35×) for the ADD that reads"), "{b}");
        let md = markdown(&fig, &machine(), &table(&fig), Duration::from_secs(1));
        assert!(md.contains("## Cluster mode: `ipam-ds-cluster` on etcd"), "{md}");
        assert!(md.contains("| ADD, steady state | 200 | 0 | 200 | 0 | 0 | 0 | 0 | 1.000 | 0 range, 200 txn (0 writing), 0 other; 200 of 200 calls logged |"), "{md}");
        assert!(md.contains("| cluster mode | 2000 | 2000 | 0 | 5.00 s | 400.0 |"), "{md}");
        let mut c = cluster_figures();
        c.fill.cluster_ok = 1997;
        c.fill.cluster_failures = vec![100, 11, 100];
        c.fill.failure_messages = vec![(100, "no free IPv4 address".into()), (11, "try again".into())];
        let failing = Figures { counts: Some(crate::setup::QUICK), cluster: Some(c), ..Default::default() };
        let md = markdown(&failing, &machine(), &table(&failing), Duration::from_secs(1));
        assert!(md.contains("| cluster mode | 2000 | 1997 | 3 (code 11 × 1, code 100 × 2) |"), "{md}");
        assert!(md.contains("A cluster-mode ADD that failed with code 100 said: \"no free IPv4 address\""), "{md}");
        assert!(cluster_table(&failing).contains("(a /16 pool: room for every one) | 3 | 0 | — | 0 | **NO** |"));
        let missing = Figures { cluster_note: Some("etcd not found in PATH".into()), ..Default::default() };
        assert!(cluster_table(&missing).contains("not measured: etcd not found in PATH"));
        if std::env::var_os("BENCH_SHOW").is_some() {
            println!("{md}");
        }
    }
}
