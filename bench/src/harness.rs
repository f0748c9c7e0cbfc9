//! Running plugins as a runtime would, and timing them: one process per
//! call, its wall time from spawn to reaping, its peak RSS from wait4; the
//! statistics over those times; the progress lines on stderr.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One plugin process: how long from spawn to reaping, what it printed, and
/// from wait4's rusage its peak resident memory and CPU time.
pub struct Run {
    pub wall: Duration,
    pub success: bool,
    pub out: Vec<u8>,
    pub maxrss_kib: i64,
    /// User + system CPU time of the process and the descendants it reaped
    /// (through the `--rusage-of` launcher: the launcher's too).
    pub cpu: Duration,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.out).unwrap_or(Value::Null)
    }

    pub fn first_address(&self) -> Option<IpAddr> {
        let v = self.json();
        let text = v["ips"][0]["address"].as_str()?;
        text.split('/').next()?.parse().ok()
    }

    pub fn expect_ok(self, what: &str) -> Run {
        if !self.success {
            panic!("{what} failed: {}", String::from_utf8_lossy(&self.out));
        }
        self
    }
}

/// An executable with its configuration, run as a runtime would.
#[derive(Clone)]
pub struct Plugin {
    pub exe: PathBuf,
    pub cni_path: PathBuf,
    pub config: Vec<u8>,
}

impl Plugin {
    pub fn run(&self, command: &str, container: &str) -> Run {
        exec(&self.exe, command, container, &self.cni_path, &self.config)
    }

    /// As [`Plugin::run`], with CNI_ARGS set to `cni_args` (as a kubelet
    /// passes the pod's namespace and name).
    pub fn run_args(&self, command: &str, container: &str, cni_args: &str) -> Run {
        spawn(
            &self.exe,
            &[],
            Env { command, container, cni_path: &self.cni_path, cni_args: Some(cni_args) },
            &self.config,
        )
    }

    pub fn run_rss(&self, command: &str, container: &str) -> Run {
        exec_rss(&self.exe, command, container, &self.cni_path, &self.config)
    }

    /// [`Plugin::run_args`] through the `--rusage-of` launcher, as
    /// [`exec_rss`].
    pub fn run_args_rss(&self, command: &str, container: &str, cni_args: &str) -> Run {
        let env = Env { command, container, cni_path: &self.cni_path, cni_args: Some(cni_args) };
        spawn_rss(&self.exe, env, &self.config)
    }
}

pub fn exec(exe: &Path, command: &str, container: &str, cni_path: &Path, stdin: &[u8]) -> Run {
    spawn(exe, &[], Env { command, container, cni_path, cni_args: None }, stdin)
}

/// As [`exec`], through the `--rusage-of` launcher: `maxrss_kib` is then the
/// plugin's own peak RSS (see [`rusage_launcher`]).
pub fn exec_rss(exe: &Path, command: &str, container: &str, cni_path: &Path, stdin: &[u8]) -> Run {
    spawn_rss(exe, Env { command, container, cni_path, cni_args: None }, stdin)
}

fn spawn_rss(exe: &Path, env: Env, stdin: &[u8]) -> Run {
    let me = std::env::current_exe().expect("current exe");
    spawn(&me, &[OsStr::new("--rusage-of"), exe.as_os_str()], env, stdin)
}

/// What `f` returns, or the first line of its panic's message: a part
/// of the benchmark that cannot run (a Go build that fails, say) fails the
/// way a test fails, and the report says why.
pub fn caught<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    std::panic::catch_unwind(f).map_err(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(a panic without a message)");
        why.lines().next().unwrap_or_default().to_string()
    })
}

/// What a runtime tells a plugin about one call: CNI_COMMAND,
/// CNI_CONTAINERID, CNI_PATH and, if any, CNI_ARGS.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub command: &'a str,
    pub container: &'a str,
    pub cni_path: &'a Path,
    pub cni_args: Option<&'a str>,
}

/// Exactly the environment a runtime gives a plugin: CNI_* for the call
/// (CNI_ARGS when it has them), and PATH; nothing of ours.
pub fn call_env<'c>(cmd: &'c mut Command, env: Env) -> &'c mut Command {
    cmd.env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", env.command)
        .env("CNI_CONTAINERID", env.container)
        .env("CNI_NETNS", format!("/var/run/netns/{}", env.container))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", env.cni_path);
    if let Some(args) = env.cni_args {
        cmd.env("CNI_ARGS", args);
    }
    cmd
}

fn spawn(program: &Path, args: &[&OsStr], env: Env, stdin: &[u8]) -> Run {
    let launcher = !args.is_empty();
    let started = Instant::now();
    // Reaped with wait4 below, for its rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = call_env(Command::new(program).args(args), env)
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
    let cpu = timeval(usage.ru_utime) + timeval(usage.ru_stime);
    Run { wall, success, out, maxrss_kib, cpu }
}

fn timeval(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
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

/// `ipam-bench --rusage-of <exe>`: runs `exe` with this process's stdin,
/// stdout and environment, and prints its ru_maxrss (KiB) on stderr.
///
/// Linux records the RSS high-water mark of the address space a process
/// leaves at execve in its ru_maxrss; a child spawned with vfork (as std
/// does) leaves its parent's, so spawning from the benchmark, whose
/// high-water mark is large, would report that. This launcher is small and
/// fresh, and its own figure is reported as the floor of the measurement.
pub fn rusage_launcher(exe: &str) -> ! {
    let child = Command::new(exe).stderr(Stdio::null()).spawn().unwrap_or_else(|e| {
        eprintln!("cannot start {exe}: {e}");
        std::process::exit(127)
    });
    let (status, usage) = wait4(child.id());
    eprintln!("maxrss_kib={}", usage.ru_maxrss);
    std::process::exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 })
}

// ------------------------------------------------------------------ stats

#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub n: usize,
}

/// Call latencies with their 90th percentile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub stats: Stats,
    pub p90_ms: f64,
}

impl Latency {
    pub fn of(samples: &[Duration]) -> Latency {
        Latency { stats: stats(samples), p90_ms: percentile(samples, 0.90) }
    }
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

/// The `q` quantile (0 < q ≤ 1) of the samples in ms, by the rule of
/// [`stats`]' p99: the smallest sample with at least q of them at or below it.
pub fn percentile(samples: &[Duration], q: f64) -> f64 {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    if n == 0 {
        return 0.0;
    }
    ms[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Announces a phase on stderr (with the time and the load) and starts its clock.
pub fn phase(name: &str) -> Instant {
    eprintln!("[{}] {name} (load {})", chrono_now(), loadavg());
    Instant::now()
}

fn chrono_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}
