//! The machine and versions the figures were taken on.

use std::path::Path;
use std::process::Command;

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
