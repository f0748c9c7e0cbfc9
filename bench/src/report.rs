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
