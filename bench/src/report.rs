//! The table, BENCHMARKS.md, and what is recorded about the machine.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{stats, Stats};
use crate::scenarios::fill_curve::FILL_LEVELS;
use crate::setup::{Counts, HOST_LOCAL};

/// Every figure the report needs, filled in by the scenarios.
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
    pub lock_wait: Option<LockWait>,
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
    /// Acquisitions passed over: some transaction that asked for the lock
    /// after them (by more than 1 ms) took it before them.
    pub passed_over: usize,
    /// The most later askers that took the lock before one waiter.
    pub most_passed_by: usize,
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
    pub fsyncs: Vec<(String, String)>,
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
            fsyncs: Vec::new(),
        }
    }
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

/// The summary table (Markdown, also printed).
pub fn table(fig: &Figures) -> String {
    let mut t = String::new();
    t.push_str("| measurement | suite | host-local | suite / host-local | target | met |\n");
    t.push_str("|---|---:|---:|---:|---|---|\n");
    let hl_add = find(&fig.add, "host-local").copied().unwrap_or_default();
    let hl_del = find(&fig.del, "host-local").copied().unwrap_or_default();
    let stack_add = find(&fig.add, "suite: ipam-delegated").copied().unwrap_or_default();
    let seq_add = find(&fig.add, "suite: ipam-da-sequential").copied().unwrap_or_default();
    let stack_del = find(&fig.del, "suite: ipam-delegated").copied().unwrap_or_default();
    let seq_del = find(&fig.del, "suite: ipam-da-sequential").copied().unwrap_or_default();
    let mut row = |what: &str, suite: f64, hl: Option<f64>, unit: &str, target: &str, met: Option<bool>| {
        let hl_cell = hl.map_or("—".into(), |v| format!("{v:.2} {unit}"));
        let r = hl.map_or("—".into(), |v| ratio(suite, v));
        let _ = writeln!(t, "| {what} | {suite:.2} {unit} | {hl_cell} | {r} | {target} | {} |", met.map_or("", yes));
    };
    let n = stack_add.n;
    row(
        &format!("ADD median, full stack (n={n})"),
        stack_add.median_ms,
        Some(hl_add.median_ms),
        "ms",
        "≤ 0.8×",
        Some(stack_add.median_ms <= 0.8 * hl_add.median_ms),
    );
    row("ADD p99, full stack", stack_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
    row(
        "ADD median, ipam-da-sequential alone",
        seq_add.median_ms,
        Some(hl_add.median_ms),
        "ms",
        "≤ 0.4×",
        Some(seq_add.median_ms <= 0.4 * hl_add.median_ms),
    );
    row("ADD p99, ipam-da-sequential alone", seq_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
    row("DEL median, full stack", stack_del.median_ms, Some(hl_del.median_ms), "ms", "", None);
    row("DEL p99, full stack", stack_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
    row("DEL median, ipam-da-sequential alone", seq_del.median_ms, Some(hl_del.median_ms), "ms", "", None);
    row("DEL p99, ipam-da-sequential alone", seq_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
    if let (Some(s), Some(h)) = (find(&fig.throughput, "suite"), find(&fig.throughput, "host-local")) {
        let workers = fig.counts.map_or(0, |c| c.workers);
        row(
            &format!("{workers}-way concurrent ADD throughput"),
            s.0,
            Some(h.0),
            "ADD/s",
            "≥ 1.5×",
            Some(s.0 >= 1.5 * h.0),
        );
    }
    if let (Some(s), Some(h)) = (find(&fig.one_free, "suite"), find(&fig.one_free, "host-local")) {
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
    if let (Some(s), Some(h)) = (find(&fig.exhausted, "suite"), find(&fig.exhausted, "host-local")) {
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
                 asker, one by {})",
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
    let hl_rss = find(&fig.rss, "host-local").map(|&k| k as f64 / MIB);
    for (name, kib) in fig.rss.iter().filter(|(n, _)| n != "host-local" && !n.starts_with("(floor")) {
        let mib = *kib as f64 / MIB;
        row(&format!("peak RSS, one ADD of {name}"), mib, hl_rss, "MiB", "≤ 8 MiB", Some(mib <= 8.0));
    }
    t
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

/// The lock-wait scenario's section: the figures, and what they say about fairness.
fn lock_wait_section(s: &mut String, lw: &LockWait, cores: usize) {
    let (n, ahead) = (lw.workers, lw.workers.saturating_sub(1));
    let lines = match lw.lines_per_call {
        (1, 1) => "one such line".to_string(),
        (a, b) if a == b => format!("{a} such lines"),
        (a, b) => format!("{a} to {b} such lines"),
    };
    let _ = writeln!(s, "\n## Waiting for the lock: {n} ADDs in flight at once\n");
    let _ = writeln!(s, "{} ADDs of the full stack on one database, by {n} threads that start together and each start one ADD process after the other, so that {n} calls are in flight at any time (on {cores} cores). The full stack rather than the allocator alone, because that is what a runtime starts: each call runs `ipam-delegated`, `ipam-ds-pool` (which reads without the lock) and `ipam-da-sequential`, whose commit is the call's one write, so the lock sees the arrivals it sees in use. Each call logs at debug level to a file of its own (`ipam.logFile`, `ipam.logLevel: \"debug\"`), where every write transaction logs `lock wait W, transaction T, durable commit C` (shared/src/store): a call's wait is the sum of its W ({lines} per call), the time a transaction held the lock is T + C (a lower bound: the WAL checkpoint every dozen ADDs also runs under the lock). The same run without logging, on a fresh database, gives the calls' end-to-end latencies.\n", lw.calls);
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
    let _ = write!(s, "**Fairness.** The lock is flock(2) on `<database>.lock`, and flock keeps no queue: when the holder unlocks, the kernel wakes every waiter and whichever is scheduled first takes the lock, and a process that asks just then (the suite first tries without waiting) may take it before all of them. Nothing orders the waiters, so a waiter can be passed over any number of times; what bounds its wait is `ipam.lockTimeout` (10 s by default), after which it answers 11 (try again later) and the runtime retries. Served in order, no waiter would be passed over by one that asked after it, and a wait would see at most {ahead} hand-overs of the lock (one per call in flight ahead of it). Measured from the log lines' timestamps (each is taken just after the commit, so a transaction asked for the lock at its timestamp − C − T − W and took it at its timestamp − C − T; a later asker counts only when it asked more than 1 ms later, since a process may be preempted between reading the clock and asking): {} of {} waits were passed over by a later asker, one of them by {}; one wait saw {} hand-overs; the longest wait lasted {:.2} ms, {:.1}× the median of {:.2} ms. ", lw.passed_over, lw.acquisitions, lw.most_passed_by, lw.most_handovers, lw.wait.max_ms, lw.max_over_median(), lw.wait.median_ms);
    if lw.passed_over == 0 {
        let _ = writeln!(s, "In this run the waiters were served in order, though flock does not promise it; a fair lock (below) would.\n");
    } else if lw.most_handovers > ahead {
        let _ = writeln!(s, "So waiters are starved: a wait that sees more than {ahead} hand-overs can only have been passed over again and again by calls that came after it, and only the lock timeout bounds it.\n");
    } else {
        let _ = writeln!(s, "So the order is not kept, though in this run no wait saw more hand-overs than an ordered queue would allow ({ahead}).\n");
    }
    let _ = writeln!(s, "A fair lock keeps the flock for mutual exclusion (it goes when its holder dies, and executables of an older version keep using it) and puts a ticket queue in front of it, in a file of its own: a caller takes the next ticket (a counter in that file, read and incremented under a lock held for microseconds), holds an OFD byte-range lock on its ticket's byte while it waits and while it holds the flock, and waits only for the byte of the ticket before its own, whose only waiter it is; then it takes the flock, which its predecessor released first. Waiters are then served in the order they asked, and a dead or timed-out waiter's byte lock goes with it, so the one behind it moves on to the flock, which still keeps every holder alone.");
}

pub fn markdown(fig: &Figures, m: &Machine, table: &str, elapsed: Duration) -> String {
    let c = fig.counts.expect("counts");
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks: the suite against host-local\n");
    let _ = writeln!(s, "Generated by `cargo run --release -p ipam-bench` (the whole run took {:.0} s). Every call is a real process started with the CNI_* environment a runtime sets (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH) and the configuration on stdin; its time runs from spawn to reaping. The suite and `{HOST_LOCAL}` work on the same subnet, each with a fresh database / dataDir per scenario, and their calls are interleaved.\n", elapsed.as_secs_f64());
    let _ = writeln!(s, "## Machine and versions\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| date | {} |", m.date);
    let _ = writeln!(s, "| CPU | {} |", m.cpu);
    let _ = writeln!(s, "| cores | {} |", m.cores);
    let _ = writeln!(s, "| kernel | {} |", m.kernel);
    let _ = writeln!(s, "| disk / filesystem | {} |", m.filesystem);
    let _ = writeln!(s, "| rustc | {} |", m.rustc);
    let _ = writeln!(s, "| host-local | containernetworking-plugins {} (Debian) |", m.host_local);
    let _ = writeln!(s, "| suite | {} |", m.suite);
    let _ = writeln!(s, "| load average (1, 5, 15 min) | {} |\n", loads(fig));
    let _ = writeln!(s, "## Summary\n\n{table}");
    let _ = writeln!(s, "## Latency ({} calls per variant and command)\n", c.latency);
    let _ = writeln!(s, "The full stack is `ipam-delegated` with delegates `[\"ipam-ds-pool\", \"ipam-da-sequential\"]`; `ipam-da-sequential` alone is fed the configuration with the `prevResult` that `ipam-ds-pool` printed for it (with `pools`). Subnet 10.20.0.0/16.\n");
    let _ = writeln!(s, "| command, variant | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    for (name, st) in &fig.add {
        s.push_str(&stats_row(&format!("ADD, {name}"), st));
    }
    for (name, st) in &fig.del {
        s.push_str(&stats_row(&format!("DEL, {name}"), st));
    }
    let _ = writeln!(s, "\nThe cost of a process that does no work, through the same spawn path (interleaved likewise): the full stack is three processes, host-local one.\n");
    let _ = writeln!(s, "| process | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    for (name, st) in &fig.floors {
        s.push_str(&stats_row(name, st));
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
    let _ = writeln!(s, "\n## Peak resident memory of one ADD\n\n`ru_maxrss` from `wait4`, the largest of 5 ADDs. Linux starts a child's ru_maxrss at the high-water mark of the address space it replaced at execve, which for a child spawned by vfork (as Rust's std does) is its parent's; so each plugin is started by a small launcher (`ipam-bench --rusage-of <exe>`, a fresh process) that reaps it with wait4 and reports its figure. The launcher's own mark is the floor below which nothing can be measured (first row). For `ipam-delegated` the figure is the largest of the process and the delegates it reaped.\n");
    let _ = writeln!(s, "| executable | peak RSS |\n|---|---:|");
    for (name, kib) in &fig.rss {
        let _ = writeln!(s, "| {name} | {:.2} MiB ({kib} KiB) |", *kib as f64 / MIB);
    }
    let _ = writeln!(s, "\n## Durability\n\nfsync-family system calls of one ADD (strace -f), so that the comparison is read knowing what each side promises:\n");
    let _ = writeln!(s, "| variant | fsync / fdatasync calls |\n|---|---|");
    for (name, count) in &m.fsyncs {
        let _ = writeln!(s, "| {name} | {count} |");
    }
    let _ = writeln!(s, "\nThe suite commits each ADD durably (SQLite WAL, `synchronous=FULL`: the WAL is fsynced at commit) before it answers: in the steady state a writing delegate syncs the WAL at commit and, SQLite's rule for a connection's first commit, the WAL's directory (the selector only reads and syncs nothing); every ~64 WAL pages (about a dozen ADDs) a truncating checkpoint also syncs the database file. host-local writes its lease files without any fsync, so a host crash can lose an allocation it reported; its figures do not include that cost.");
    let _ = writeln!(s, "\n## Reproduce\n\n```sh\ncargo run --release -p ipam-bench\n```\n\nNeeds `{HOST_LOCAL}` (Debian package containernetworking-plugins). `BENCH_TMPDIR` chooses where the temporary databases go; `BENCH_QUICK=1` runs reduced counts and writes nothing. Figures taken while other work runs on the machine are noisy: compare the load averages above.");
    s
}

#[cfg(test)]
mod tests {
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
                most_handovers,
            }),
            ..Default::default()
        }
    }

    fn machine() -> Machine {
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
            fsyncs: Vec::new(),
        }
    }

    #[test]
    fn the_lock_wait_figures_are_in_the_summary_and_have_a_section() {
        let fig = figures(300, 301);
        let table = table(&fig);
        assert!(table.contains("| 64-way contention: lock wait per ADD, median (n=320) | 180.00 ms |"), "{table}");
        assert!(table.contains("| 64-way contention: lock wait per ADD, p99 | 650.00 ms |"), "{table}");
        assert!(table.contains("300 of 320 waits passed over by a later asker, one by 240) | 1000.00 ms |"), "{table}");
        assert!(table.contains("| served in order: none passed over | **NO** |"), "{table}");
        let md = markdown(&fig, &machine(), &table, Duration::from_secs(1));
        assert!(md.contains("## Waiting for the lock: 64 ADDs in flight at once"), "{md}");
        assert!(md.contains("| lock wait per ADD | 320 | 180.00 | 650.00 | 1000.00 |"), "{md}");
        assert!(md.contains("300 of 320 waits were passed over"), "{md}");
        assert!(md.contains("So waiters are starved"), "{md}");
        assert!(md.contains("ticket queue"), "{md}");
    }

    #[test]
    fn waiters_served_in_order_are_said_to_be() {
        let fig = figures(0, 63);
        let md = markdown(&fig, &machine(), &table(&fig), Duration::from_secs(1));
        assert!(md.contains("In this run the waiters were served in order"), "{md}");
        assert!(table(&fig).contains("| served in order: none passed over | yes |"));
    }
}
