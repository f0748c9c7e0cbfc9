//! The shared harness of the cross-executable tests: the suite's executables,
//! freshly built, or installed ones where `IPAM_TEST_BIN_DIR` points; a
//! per-test sandbox with scriptable fake delegates; and a way to run a CNI
//! plugin with exactly the environment a runtime would give.
//!
//! Used by several test files through `mod support;`, so not every item is
//! used by every one of them.
#![allow(dead_code)]

pub mod go;
pub mod kubeconfig;
pub mod manifests;
pub mod markdown;
pub mod sticky;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// How long one plugin run may take before the harness kills it and fails the test.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The suite's six executables (one program under six names).
pub const SUITE_EXECUTABLES: [&str; 6] =
    ["ipam-delegated", "ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"];

/// The delegates' names as the program under test lists them
/// (`ipam-delegated delegates`: its builtin::DELEGATES, the suite's one
/// list), in its order. tests/install_cni.rs checks that
/// [`SUITE_EXECUTABLES`] holds exactly these beside the program.
pub fn suite_delegates() -> Vec<String> {
    let program = suite_bin("ipam-delegated");
    let out = Command::new(&program).arg("delegates").env_remove("CNI_COMMAND").output().expect("run ipam-delegated");
    assert!(out.status.success(), "{} delegates: {}", program.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

/// The stacks of delegates the contract gives, as the tests configure them:
/// node-local allocation, the same with sticky addresses, and cluster mode's
/// of each.
pub const FULL_STACK: [&str; 3] = ["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"];
pub const STICKY_STACK: [&str; 4] = ["ipam-ds-pool", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"];
pub const CLUSTER_STACK: [&str; 4] = ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"];
pub const CLUSTER_STICKY_STACK: [&str; 5] =
    ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"];

/// The repository's root (the workspace's manifest directory).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The text of the repository's file `path` (relative to its root).
pub fn read_repo_file(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `config` with the top-level `key` set to `value`.
pub fn with(config: &Value, key: &str, value: Value) -> Value {
    let mut c = config.clone();
    c[key] = value;
    c
}

/// `config` with `prevResult` set to `prev` (for CHECK and DEL).
pub fn with_prev(config: &Value, prev: &Value) -> Value {
    with(config, "prevResult", prev.clone())
}

/// The environment variable that points the tests at installed executables
/// (e.g. `/usr/lib/cni` after `dpkg -i` of the package) instead of a build.
pub const BIN_DIR_VAR: &str = "IPAM_TEST_BIN_DIR";

/// The path of one of the suite's executables (`ipam-delegated`, `ipam-ds-pool`,
/// `ipam-da-static`, `ipam-da-sequential`) in [`bin_dir`].
pub fn suite_bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Where the suite's executables under test are. When `IPAM_TEST_BIN_DIR` is
/// set (and not empty), that directory as it is: nothing is built, and the
/// six executables must be there (tests/installed.rs checks they are the ones
/// run). Otherwise target/<profile>/cni/, the fast layout that
/// `scripts/install` makes (`ipam-delegated`, and the delegates' names as
/// symlinks to it), of target/<profile>/ipam-delegated after `cargo build
/// --workspace --bins` succeeded: the first call in a process builds it, so
/// that a test never runs a stale binary.
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os(BIN_DIR_VAR).filter(|d| !d.is_empty()) {
            let dir = PathBuf::from(dir);
            assert!(dir.is_absolute(), "{BIN_DIR_VAR}={} must be an absolute path", dir.display());
            for name in SUITE_EXECUTABLES {
                let exe = dir.join(name);
                let mode = std::fs::metadata(&exe)
                    .unwrap_or_else(|e| panic!("{BIN_DIR_VAR}: {}: {e}", exe.display()))
                    .permissions()
                    .mode();
                assert!(mode & 0o111 != 0, "{BIN_DIR_VAR}: {} is not executable", exe.display());
            }
            return dir;
        }
        let built = build();
        let dir = built.join("cni");
        std::fs::create_dir_all(&dir).expect("creating target/<profile>/cni");
        for name in SUITE_EXECUTABLES {
            let to = if name == "ipam-delegated" { "../ipam-delegated" } else { "ipam-delegated" };
            let link = dir.join(name);
            if std::fs::read_link(&link).ok().as_deref() != Some(Path::new(to)) {
                // Made by whichever test process comes first: a link another
                // one made meanwhile is just as good.
                match std::os::unix::fs::symlink(to, &link) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    other => other.unwrap_or_else(|e| panic!("linking {}: {e}", link.display())),
                }
            }
        }
        dir
    })
}

/// A directory where each of the suite's executables is a file of its own,
/// a copy of the program under test: what an administrator who copies the
/// files one by one gets. ipam-delegated then runs every delegate as a
/// process of its own, as it runs third-party ones. target/<profile>/copies/,
/// or, with `IPAM_TEST_BIN_DIR`, target/copies-of-installed/.
pub fn copies_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let program = std::fs::canonicalize(suite_bin("ipam-delegated")).expect("the program under test");
        let dir = match std::env::var_os(BIN_DIR_VAR).filter(|d| !d.is_empty()) {
            Some(_) => target_dir().join("copies-of-installed"),
            None => build().join("copies"),
        };
        std::fs::create_dir_all(&dir).expect("creating the copies' directory");
        // A copy is current when it has the program's size and was made
        // after the program was last built: no need to read either file.
        let built = std::fs::metadata(&program).expect("the program under test");
        let current = |copy: &Path| {
            std::fs::metadata(copy).is_ok_and(|m| m.len() == built.len() && m.modified().ok() >= built.modified().ok())
        };
        for name in SUITE_EXECUTABLES {
            let copy = dir.join(name);
            if !current(&copy) {
                // Written aside and renamed: other test processes may run it meanwhile.
                let aside = dir.join(format!(".{name}.{}", std::process::id()));
                std::fs::copy(&program, &aside).expect("writing a copy");
                std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o755)).unwrap();
                std::fs::rename(&aside, &copy).expect("renaming a copy");
            }
        }
        dir
    })
}

/// The target directory of the running test (target/, or CARGO_TARGET_DIR).
fn target_dir() -> PathBuf {
    // The test runs as target/<profile>/deps/<test>-<hash>.
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| profile.parent().expect("target/<profile>").to_path_buf())
}

/// target/<profile>/, after `cargo build --workspace --bins` succeeded there
/// (once per test process).
fn build() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // The test runs as target/<profile>/deps/<test>-<hash>.
            let exe = std::env::current_exe().expect("current_exe");
            let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
            let mut build = Command::new(env!("CARGO"));
            build
                .args(["build", "--quiet", "--workspace", "--bins", "--manifest-path"])
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
                .env("CARGO_TARGET_DIR", target_dir())
                // Inherited, it differs from the outer build's: ring's build
                // script watches it, and the two builds would keep rebuilding
                // ring and all above it for each other.
                .env_remove("CARGO_MANIFEST_DIR")
                .stdin(Stdio::null());
            if !cfg!(debug_assertions) {
                build.arg("--release");
            }
            let out = build.output().expect("running cargo build");
            assert!(
                out.status.success(),
                "cargo build --workspace --bins failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            dir
        })
        .clone()
}

/// What a plugin run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The exit code; 128+N when killed by signal N.
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    /// stdout parsed as JSON, when it is not blank and parses.
    pub json: Option<Value>,
}

impl Outcome {
    /// The error object of a failed run: asserts a non-zero exit and an error
    /// object with the four keys on stdout, and returns (code, msg, details).
    pub fn error(&self) -> (u64, String, String) {
        assert_ne!(self.status, 0, "expected a failure, got success: {self:#?}");
        let json = self.json.as_ref().unwrap_or_else(|| panic!("no JSON on stdout: {self:#?}"));
        let obj = json.as_object().unwrap_or_else(|| panic!("stdout is not an object: {self:#?}"));
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["cniVersion", "code", "details", "msg"], "error object keys: {self:#?}");
        let text = |k: &str| obj[k].as_str().unwrap_or_else(|| panic!("{k} is not a string: {self:#?}")).to_string();
        let code = obj["code"].as_u64().unwrap_or_else(|| panic!("code is not an integer: {self:#?}"));
        assert!(obj["cniVersion"].is_string(), "cniVersion: {self:#?}");
        (code, text("msg"), text("details"))
    }

    /// The error code of a failed run (see [`Outcome::error`]).
    pub fn code(&self) -> u64 {
        self.error().0
    }

    /// The result of a successful run that printed one.
    pub fn result(&self) -> &Value {
        assert_eq!(self.status, 0, "expected success: {self:#?}");
        self.json.as_ref().unwrap_or_else(|| panic!("no JSON result on stdout: {self:#?}"))
    }

    /// Asserts a success that printed nothing (DEL, CHECK, GC, STATUS).
    pub fn assert_quiet_success(&self) {
        assert_eq!((self.status, self.stdout.as_str()), (0, ""), "expected a silent success: {self:#?}");
    }
}

/// Asserts a failure with `code` (and a CNI error object on stdout) whose msg
/// or details mention each of `words`.
pub fn assert_error(out: &Outcome, code: u64, words: &[&str]) {
    let (got, msg, details) = out.error();
    assert_eq!(got, code, "{out:#?}");
    for w in words {
        assert!(msg.contains(w) || details.contains(w), "error does not mention {w:?}: {out:#?}");
    }
}

/// The addresses of a successful ADD as its result writes them, in order:
/// `ips[].address` (0.3.0 and later, with the prefix length) or `ip4.ip`,
/// `ip6.ip` (0.1.0, 0.2.0).
pub fn addresses(out: &Outcome) -> Vec<String> {
    result_addresses(out.result())
}

/// The addresses of a result, as [`addresses`].
pub fn result_addresses(result: &Value) -> Vec<String> {
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("address in {result}")).to_string();
    match result.get("ips") {
        Some(ips) => {
            ips.as_array().unwrap_or_else(|| panic!("ips in {result}")).iter().map(|ip| text(&ip["address"])).collect()
        }
        None => ["ip4", "ip6"].iter().filter_map(|k| result.get(*k)).map(|ip| text(&ip["ip"])).collect(),
    }
}

/// Runs `exe` with `CNI_COMMAND=command`, the variables `env`, and `stdin`.
/// No CNI_* variable of the test's own environment reaches it.
pub fn run(exe: &Path, command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let mut all = vec![("CNI_COMMAND", command)];
    all.extend_from_slice(env);
    run_env(exe, &all, stdin, None)
}

/// Like [`run`] but with exactly `env` as the CNI_* variables (so CNI_COMMAND
/// may be missing), in the working directory `cwd` if given.
pub fn run_env(exe: &Path, env: &[(&str, &str)], stdin: &[u8], cwd: Option<&Path>) -> Outcome {
    run_args(exe, &[], env, stdin, cwd)
}

/// Runs `ipam-delegated` (the suite under test) with `env` as its only CNI_
/// variables, in `cwd`, in a process group of its own, `stdin` on its input,
/// and SIGKILLs the group `kill_after` the spawn when given: a kill -9 at a
/// moment of the call. `None` when the kill ended it.
pub fn run_killable<K, V>(
    env: impl IntoIterator<Item = (K, V)>,
    cwd: &Path,
    stdin: &[u8],
    kill_after: Option<Duration>,
) -> Option<Outcome>
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let mut cmd = Command::new(suite_bin("ipam-delegated"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env).current_dir(cwd).process_group(0).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().expect("starting ipam-delegated");
    let group = child.id() as libc::pid_t;
    // The configuration is far smaller than a pipe's buffer: this never blocks.
    let mut pipe = child.stdin.take().expect("stdin");
    let _ = pipe.write_all(stdin);
    drop(pipe);
    if let Some(delay) = kill_after {
        if let Some(rest) = delay.checked_sub(started.elapsed()) {
            thread::sleep(rest);
        }
        // SAFETY: a plain syscall on the process group of our own child,
        // not yet reaped, so the id cannot have been reused.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    let out = child.wait_with_output().expect("waiting for ipam-delegated");
    if out.status.signal() == Some(libc::SIGKILL) {
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = if stdout.trim().is_empty() { None } else { serde_json::from_str(&stdout).ok() };
    Some(Outcome {
        status: out.status.code().unwrap_or(-1),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
    })
}

/// Processes still running whose environment holds a variable starting with
/// `var_prefix` (e.g. `CNI_CONTAINERID=crash-123-`): pid and command line.
pub fn processes_with_env(var_prefix: &str) -> Vec<String> {
    let needle = var_prefix.as_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("reading /proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|var| var.starts_with(needle)) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Processes still running of calls whose container ID starts with
/// `container_prefix`: what a killed call must not leave behind.
pub fn leftovers(container_prefix: &str) -> Vec<String> {
    processes_with_env(&format!("CNI_CONTAINERID={container_prefix}"))
}

/// Like [`run_env`], with command-line arguments (the operator's tool).
pub fn run_args(exe: &Path, args: &[&str], env: &[(&str, &str)], stdin: &[u8], cwd: Option<&Path>) -> Outcome {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()));
    let pid = child.id() as libc::pid_t;
    let mut pipe = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    // The plugin may answer before reading everything; that is not our concern.
    let writer = thread::spawn(move || drop(pipe.write_all(&input)));
    let (done, finished) = mpsc::channel();
    thread::spawn(move || drop(done.send(child.wait_with_output())));
    let output = match finished.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("waiting for the plugin"),
        Err(_) => {
            // SAFETY: plain syscall on our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{} did not finish within {RUN_LIMIT:?}", exe.display());
        }
    };
    let _ = writer.join();
    let status = output.status;
    let status = status.code().unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap());
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let json = if stdout.trim().is_empty() { None } else { serde_json::from_str(&stdout).ok() };
    Outcome { status, stdout, stderr: String::from_utf8_lossy(&output.stderr).into_owned(), json }
}

/// What a fake delegate does for one command.
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub stdout: String,
    pub stderr: String,
    pub exit: i32,
    /// Seconds to sleep before answering (fractions allowed); after the sleep
    /// the fake leaves a marker, see [`Sandbox::woke`].
    pub sleep_secs: f64,
}

impl Response {
    /// Exit 0 printing `value`.
    pub fn json(value: &Value) -> Self {
        Response { stdout: value.to_string(), ..Response::default() }
    }

    /// Exit 0 printing `text` as is.
    pub fn text(text: &str) -> Self {
        Response { stdout: text.to_string(), ..Response::default() }
    }

    /// A CNI error object with `code`, `msg` and `details`, and exit 1.
    pub fn error(code: u32, msg: &str) -> Self {
        let obj = serde_json::json!({"cniVersion": "1.0.0", "code": code, "msg": msg, "details": "fake details"});
        Response { stdout: obj.to_string(), exit: 1, ..Response::default() }
    }

    /// Exit `code` printing nothing.
    pub fn exit(code: i32) -> Self {
        Response { exit: code, ..Response::default() }
    }
}

/// One temporary directory per test, removed on drop: fake delegates, their
/// records, a database path and a working directory outside CNI_PATH.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

pub const CONTAINER_ID: &str = "ctr-0123456789";
pub const NETNS: &str = "/var/run/netns/test-ns";
pub const IFNAME: &str = "eth0";

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::Builder::new().prefix("ipam-suite-").tempdir().expect("tempdir");
        for sub in ["fakes", "responses", "records", "work"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("calls.log"), "").unwrap();
        Sandbox { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Where fake delegates live (first in CNI_PATH).
    pub fn fakes_dir(&self) -> PathBuf {
        self.path().join("fakes")
    }

    /// The working directory plugins run in; not part of CNI_PATH.
    pub fn workdir(&self) -> PathBuf {
        self.path().join("work")
    }

    /// The fakes' directory, then the suite's binaries.
    pub fn cni_path(&self) -> String {
        format!("{}:{}", self.fakes_dir().display(), bin_dir().display())
    }

    /// An allocation database path inside the sandbox (not created).
    pub fn db(&self) -> PathBuf {
        self.path().join("db").join("allocations.sqlite")
    }

    /// Writes the fake delegate `name` into the fakes' directory.
    pub fn fake(&self, name: &str) -> PathBuf {
        self.fake_in(&self.fakes_dir(), name)
    }

    /// Writes the fake delegate `name` into `dir`. It appends "<name> <CNI_COMMAND>"
    /// to the calls log, records its stdin and CNI_* environment, then answers
    /// as configured with [`Sandbox::respond`]; by default it exits 0 and, for
    /// ADD, DEL and CHECK, prints the `prevResult` it was given, if any.
    pub fn fake_in(&self, dir: &Path, name: &str) -> PathBuf {
        let script = format!(
            r#"#!/bin/sh
# fake delegate {name}, written by tests/support
dir='{root}'
name='{name}'
tmp=$(mktemp "$dir/records/tmp.XXXXXX")
cat > "$tmp"
{{
  flock 9
  n=$(wc -l < "$dir/calls.log")
  printf '%s %s\n' "$name" "$CNI_COMMAND" >> "$dir/calls.log"
}} 9>>"$dir/calls.lock"
n=$((n + 0))
env -0 | grep -z '^CNI_' | sort -z > "$dir/records/$n.env"
mv "$tmp" "$dir/records/$n.stdin"
r="$dir/responses/$name.$CNI_COMMAND"
if [ -e "$r.sleep" ]; then
  sleep "$(cat "$r.sleep")"
  : > "$dir/records/$n.woke"
fi
if [ -e "$r.exit" ]; then
  cat "$r.stderr" >&2
  cat "$r.stdout"
  exit "$(cat "$r.exit")"
fi
case "$CNI_COMMAND" in
  ADD|DEL|CHECK) exec '{python}' -S -c '
import json, sys
try:
    d = json.load(sys.stdin)
except Exception:
    sys.exit(0)
if isinstance(d, dict) and "prevResult" in d:
    print(json.dumps(d["prevResult"]))
' < "$dir/records/$n.stdin" ;;
esac
exit 0
"#,
            root = self.path().display(),
            python = python().display(),
        );
        let path = dir.join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Sets what the fake `name` does for `command` (ADD, DEL, …).
    pub fn respond(&self, name: &str, command: &str, r: Response) {
        let file = |ext: &str| self.path().join("responses").join(format!("{name}.{command}.{ext}"));
        std::fs::write(file("stdout"), &r.stdout).unwrap();
        std::fs::write(file("stderr"), &r.stderr).unwrap();
        if r.sleep_secs > 0.0 {
            std::fs::write(file("sleep"), r.sleep_secs.to_string()).unwrap();
        } else {
            let _ = std::fs::remove_file(file("sleep"));
        }
        // Written last: the fake takes a configured response once this exists.
        std::fs::write(file("exit"), r.exit.to_string()).unwrap();
    }

    /// The fakes' calls so far, in order: (name, CNI_COMMAND).
    pub fn calls(&self) -> Vec<(String, String)> {
        let log = std::fs::read_to_string(self.path().join("calls.log")).unwrap();
        log.lines()
            .map(|l| {
                let (name, cmd) = l.rsplit_once(' ').unwrap_or((l, ""));
                (name.to_string(), cmd.to_string())
            })
            .collect()
    }

    /// The calls as "name CMD" strings, for compact assertions.
    pub fn call_list(&self) -> Vec<String> {
        self.calls().into_iter().map(|(n, c)| format!("{n} {c}")).collect()
    }

    /// The exact stdin and the CNI_* environment of the fakes' call number `i` (from 0).
    pub fn record(&self, i: usize) -> (Vec<u8>, BTreeMap<String, String>) {
        let base = self.path().join("records");
        let stdin = std::fs::read(base.join(format!("{i}.stdin"))).unwrap_or_else(|e| panic!("record {i}: {e}"));
        let env = std::fs::read(base.join(format!("{i}.env"))).unwrap();
        let env = env
            .split(|&b| b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| {
                let v = String::from_utf8_lossy(v);
                let (k, val) = v.split_once('=').unwrap_or((&v, ""));
                (k.to_string(), val.to_string())
            })
            .collect();
        (stdin, env)
    }

    /// The stdin of call `i`, parsed as JSON.
    pub fn record_json(&self, i: usize) -> Value {
        let (stdin, _) = self.record(i);
        serde_json::from_slice(&stdin).unwrap_or_else(|e| panic!("record {i} is not JSON ({e}): {stdin:?}"))
    }

    /// Whether call `i` finished a configured sleep (it was not killed during it).
    pub fn woke(&self, i: usize) -> bool {
        self.path().join("records").join(format!("{i}.woke")).exists()
    }

    /// The environment a runtime gives: CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS,
    /// CNI_IFNAME and CNI_PATH with the sandbox defaults, each replaced by an
    /// entry of `overrides` with the same key; other entries are added.
    pub fn env(&self, command: &str, overrides: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", CONTAINER_ID.to_string()),
            ("CNI_NETNS", NETNS.to_string()),
            ("CNI_IFNAME", IFNAME.to_string()),
            ("CNI_PATH", self.cni_path()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in overrides {
            match env.iter_mut().find(|(key, _)| key == k) {
                Some(slot) => slot.1 = v.to_string(),
                None => env.push((k.to_string(), v.to_string())),
            }
        }
        env
    }

    /// Runs `command` of ipam-delegated for the attachment (`ctr`, eth0) with
    /// the additional CNI_* variables `extra` (CNI_ARGS, CNI_IFNAME, …).
    pub fn delegated(&self, command: &str, config: &Value, ctr: &str, extra: &[(&str, &str)]) -> Outcome {
        let mut env = vec![("CNI_CONTAINERID", ctr)];
        env.extend_from_slice(extra);
        self.cni("ipam-delegated", command, config, &env)
    }

    /// ADD of the attachment (`ctr`, eth0) through ipam-delegated.
    pub fn add(&self, config: &Value, ctr: &str) -> Outcome {
        self.delegated("ADD", config, ctr, &[])
    }

    /// DEL of the attachment (`ctr`, eth0) through ipam-delegated.
    pub fn del(&self, config: &Value, ctr: &str) -> Outcome {
        self.delegated("DEL", config, ctr, &[])
    }

    /// Runs a suite executable (by name) or any executable (by path) with
    /// `config` on stdin and [`Sandbox::env`], in the sandbox's working directory.
    pub fn cni(&self, exe: &str, command: &str, config: &Value, overrides: &[(&str, &str)]) -> Outcome {
        self.cni_raw(exe, command, config.to_string().as_bytes(), overrides)
    }

    /// [`Sandbox::cni`] with raw stdin bytes.
    pub fn cni_raw(&self, exe: &str, command: &str, stdin: &[u8], overrides: &[(&str, &str)]) -> Outcome {
        let env = self.env(command, overrides);
        self.cni_env(exe, &env, stdin)
    }

    /// Runs `exe` with exactly the variables `env` (see [`Sandbox::env`]), in the
    /// sandbox's working directory.
    pub fn cni_env(&self, exe: &str, env: &[(String, String)], stdin: &[u8]) -> Outcome {
        let exe = if exe.contains('/') { PathBuf::from(exe) } else { suite_bin(exe) };
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        run_env(&exe, &env, stdin, Some(&self.workdir()))
    }
}

/// The real python3 (not a version manager's shim, which is slow to start).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 is needed by the fake delegates");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// SplitMix64: a small deterministic PRNG, so that a failing run can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index into something of length `len` (> 0).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    /// True `p` times in a hundred.
    pub fn percent(&mut self, p: usize) -> bool {
        self.index(100) < p
    }
}

/// Every lease of the database at `db`, as the operator listing prints it
/// (`ipam-delegated list --json`): the view from outside the plugins.
pub fn list_leases(db: &Path) -> Value {
    let out = Command::new(suite_bin("ipam-delegated"))
        .args(["list", "--json", "--database"])
        .arg(db)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .expect("running ipam-delegated list");
    assert!(out.status.success(), "ipam-delegated list on {}: {}", db.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("ipam-delegated list --json prints JSON")
}

/// `f(0..n)` on `workers` threads, each taking the next index when it is
/// done with the last; the results in index order.
pub fn parallel<T: Send>(n: usize, workers: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    thread::scope(|s| {
        for _ in 0..workers.min(n) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let value = f(i);
                results.lock().unwrap()[i] = Some(value);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|v| v.expect("every index ran")).collect()
}
