//! Counting a call's fsync-family system calls with strace (the durability
//! and sticky scenarios).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::figures::durability::SyncCount;
use crate::harness::{call_env, Env, Plugin};

pub const STRACE: &str = "/usr/bin/strace";

/// Why nothing can be traced here, for the report's note; `None`: strace is
/// installed.
pub fn missing() -> Option<String> {
    (!Path::new(STRACE).is_file()).then(|| "strace is not installed: apt-get install strace".into())
}

/// One call of `plugin` under `strace -f`, as a runtime would start it: the
/// fsync-family calls of its processes (with CNI_ARGS `cni_args`, if any).
/// A call that fails is a bug in the benchmark (panics); strace that cannot
/// trace is an error.
pub fn strace(
    plugin: &Plugin,
    command: &str,
    container: &str,
    cni_args: Option<&str>,
    log: &Path,
) -> Result<SyncCount, String> {
    let _ = fs::remove_file(log);
    let mut strace = Command::new(STRACE);
    strace.args(["-f", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range", "-o"]).arg(log).arg(&plugin.exe);
    let env = Env { command, container, cni_path: &plugin.cni_path, cni_args };
    let mut child = call_env(&mut strace, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start strace: {e}"))?;
    if let Some(mut pipe) = child.stdin.take() {
        let _ = pipe.write_all(&plugin.config);
    }
    let out = child.wait_with_output().map_err(|e| format!("strace: {e}"))?;
    let text = fs::read_to_string(log).unwrap_or_default();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if text.is_empty() && stderr.contains("strace") {
            return Err(format!("strace cannot trace here: {}", stderr.lines().next().unwrap_or("").trim()));
        }
        panic!(
            "{} {command} under strace failed: {}{stderr}",
            plugin.exe.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(SyncCount::of_strace(&text))
}
