//! ipam-delegated short of processes, and killed: a thread or a process it
//! cannot start is error 11 (try again later), never 999 (a bug); `kill -9`
//! of ipam-delegated takes the delegate's whole process group with it, not
//! only the delegate; and a normal run leaves nothing behind.
//!
//! Every test runs a private copy of ipam-delegated: an unprivileged user can
//! run it whatever the target directory's permissions, and any process still
//! running that file afterwards is one ipam-delegated forked and left behind.

mod support;

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The unprivileged user ("nobody") the limited runs switch to: RLIMIT_NPROC
/// counts the tasks of the real user and does not bind root.
const NOBODY: libc::uid_t = 65534;
const RESULT: &str = r#"{"cniVersion":"1.0.0","ips":[]}"#;
/// How long any one run of ipam-delegated may take here before it is a failure.
const RUN_LIMIT: Duration = Duration::from_secs(60);
/// How long processes that should die may take to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// A temporary directory anyone can read and run from: the copy of
/// ipam-delegated, `fakes/` (its CNI_PATH) and `state/` (writable by anyone,
/// where fakes leave their pids).
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::Builder::new().prefix("ipam-limits-").tempdir().expect("tempdir");
        let tree = Tree { dir };
        std::fs::set_permissions(tree.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for (sub, mode) in [("fakes", 0o755), ("state", 0o777), ("logs", 0o777)] {
            let path = tree.path().join(sub);
            std::fs::create_dir(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::copy(support::suite_bin("ipam-delegated"), tree.exe()).expect("copying ipam-delegated");
        std::fs::set_permissions(tree.exe(), std::fs::Permissions::from_mode(0o755)).unwrap();
        tree
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn exe(&self) -> PathBuf {
        self.path().join("ipam-delegated")
    }

    fn state(&self, name: &str) -> PathBuf {
        self.path().join("state").join(name)
    }

    /// A fake delegate: a shell script. `$PROBE` names a file in `state/` it may write.
    fn fake(&self, name: &str, body: &str) {
        let path = self.path().join("fakes").join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// An ADD through the copy of ipam-delegated with `delegate` as the only
    /// delegate, with nothing of the test's environment but PATH and PROBE=`probe`.
    fn add(&self, delegate: &str, probe: &Path) -> Command {
        let mut cmd = Command::new(self.exe());
        let log = File::create(self.path().join("logs").join(format!("{delegate}.stderr"))).unwrap();
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("PROBE", probe)
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "limits-0123")
            .env("CNI_NETNS", "/var/run/netns/limits")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.path().join("fakes"))
            .current_dir(self.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // A file, not a pipe: a delegate's children inherit ipam-delegated's
            // stderr, and reading a pipe to its end would wait for them.
            .stderr(log);
        cmd
    }

    fn stderr_of(&self, delegate: &str) -> String {
        std::fs::read_to_string(self.path().join("logs").join(format!("{delegate}.stderr"))).unwrap_or_default()
    }
}

fn config(delegates: &[&str]) -> Vec<u8> {
    json!({
        "cniVersion": "1.0.0",
        "name": "limits",
        "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": delegates, "timeout": 20}
    })
    .to_string()
    .into_bytes()
}

/// Gives `child` its stdin and waits for it to finish, at most [`RUN_LIMIT`].
fn finish(mut child: Child, stdin: &[u8]) -> Output {
    let pid = child.id() as libc::pid_t;
    if let Some(mut pipe) = child.stdin.take() {
        // The configuration is far smaller than a pipe's buffer: this never blocks.
        let _ = pipe.write_all(stdin);
    }
    let (done, finished) = mpsc::channel();
    thread::spawn(move || drop(done.send(child.wait_with_output())));
    match finished.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("waiting for ipam-delegated"),
        Err(_) => {
            // SAFETY: a plain syscall on our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("ipam-delegated did not finish within {RUN_LIMIT:?}");
        }
    }
}

/// The state letter of /proc/<pid>/stat ('Z' for a zombie), or None when
/// there is no such process.
fn state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the state follows the last ')'.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Whether `pid` runs no more: gone, or a zombie (reparented to init, which
/// may reap it a moment later).
fn dead(pid: libc::pid_t) -> bool {
    matches!(state(pid), None | Some('Z') | Some('X'))
}

/// Polls until every pid of `pids` is [`dead`], for at most `limit`; the ones still running.
fn wait_dead(pids: &[libc::pid_t], limit: Duration) -> Vec<libc::pid_t> {
    let deadline = Instant::now() + limit;
    loop {
        let alive: Vec<libc::pid_t> = pids.iter().copied().filter(|&p| !dead(p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn describe(pid: libc::pid_t) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    format!("pid {pid} ({}, state {:?})", String::from_utf8_lossy(&cmdline).replace('\0', " ").trim(), state(pid))
}

/// Processes for which `pick(pid, stat fields after the command name)` holds;
/// zombies too if `zombies`.
fn processes(zombies: bool, pick: impl Fn(libc::pid_t, &[&str]) -> bool) -> Vec<libc::pid_t> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if (zombies || !matches!(fields.first(), Some(&"Z") | Some(&"X"))) && pick(pid, &fields) {
            found.push(pid);
        }
    }
    found
}

/// Live processes running the file `exe`: only ipam-delegated itself, or
/// something it forked, runs the test's private copy.
fn running(exe: &Path) -> Vec<libc::pid_t> {
    processes(false, |pid, _| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
}

/// Processes in the process group `pgid`, zombies included.
fn in_group(pgid: libc::pid_t) -> Vec<libc::pid_t> {
    let pgid = pgid.to_string();
    // After the command name: state, ppid, pgrp.
    processes(true, |_, fields| fields.get(2) == Some(&pgid.as_str()))
}

/// Reads the pid a fake wrote into `path`, waiting for it up to `limit`.
fn read_pid(path: &Path, limit: Duration) -> Option<libc::pid_t> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()) {
            return Some(pid);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILLs whatever of `pids` still runs, when the test ends: a failing test
/// must not leave sleeping fakes behind.
struct Reaper(Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for path in &self.0 {
            if let Some(pid) = read_pid(path, Duration::ZERO).filter(|&p| p > 0 && !dead(p)) {
                // SAFETY: a plain syscall; the pid is a fake this test started
                // (written moments ago, so not reused in between).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

// ---------------------------------------------------------------------------
// No thread or process to spare: error 11

/// What one ADD under RLIMIT_NPROC=`limit` gave.
enum Seen {
    /// ipam-delegated itself could not be started (other processes of the user use the budget).
    NotStarted(String),
    Success,
    /// Error 11 saying a thread could not be started.
    NoThread(String),
    /// Error 11 saying a process could not be started.
    NoProcess(String),
    /// Anything else: always a failure of the test.
    Wrong(String),
}

impl Seen {
    fn text(&self) -> String {
        match self {
            Seen::NotStarted(e) => format!("ipam-delegated not started: {e}"),
            Seen::Success => "success".to_string(),
            Seen::NoThread(msg) => format!("error 11, no thread: {msg}"),
            Seen::NoProcess(msg) => format!("error 11, no process: {msg}"),
            Seen::Wrong(what) => format!("WRONG: {what}"),
        }
    }
}

/// The tasks (threads of every process, zombies included) whose real user
/// is `uid`: what RLIMIT_NPROC counts.
fn tasks_of(uid: libc::uid_t) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<libc::pid_t>().is_err() {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field =
            |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next());
        if field("Uid:").and_then(|v| v.parse::<libc::uid_t>().ok()) == Some(uid) {
            count += field("Threads:").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1);
        }
    }
    count
}

/// Waits (up to 15 s) until [`NOBODY`] has at most `baseline` tasks: a
/// process orphaned by an earlier run is a zombie until init reaps it, which
/// here may take a second or more, and it counts against the limit meanwhile.
fn settle(baseline: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = tasks_of(NOBODY);
        if now <= baseline || Instant::now() >= deadline {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs an ADD through `delegate` as [`NOBODY`] with at most `limit` tasks
/// (processes and threads) for that user; with the time it took.
fn add_limited(tree: &Tree, delegate: &str, limit: libc::rlim_t, probe: &Path) -> (Seen, Duration) {
    let mut cmd = tree.add(delegate, probe);
    // SAFETY: setrlimit, setgroups, setgid and setuid are async-signal-safe
    // system calls; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_NPROC, &rlimit) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let child = match cmd.spawn() {
        Ok(child) => child,
        // The exec that follows setuid fails with EAGAIN when the user already
        // has `limit` tasks.
        Err(e) if e.kind() == ErrorKind::WouldBlock => return (Seen::NotStarted(e.to_string()), started.elapsed()),
        Err(e) => panic!("starting ipam-delegated as uid {NOBODY}: {e}"),
    };
    let out = finish(child, &config(&[delegate]));
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json: Option<Value> = serde_json::from_str(&stdout).ok();
    let whole = || match json.as_ref().filter(|j| j.get("code").is_some()) {
        Some(j) => format!("error {}: {}", j["code"], j["msg"].as_str().unwrap_or_default()),
        None => format!("{}: stdout {:?}, stderr {:?}", out.status, stdout.trim(), tree.stderr_of(delegate)),
    };
    let seen = match (out.status.success(), json.as_ref().and_then(|j| j.get("code")).and_then(Value::as_u64)) {
        (true, None) if json.as_ref().is_some_and(|j| j.get("ips").is_some()) => Seen::Success,
        (false, Some(11)) => {
            let msg = json.as_ref().and_then(|j| j["msg"].as_str()).unwrap_or_default().to_string();
            if !msg.contains("try again later") {
                Seen::Wrong(whole())
            } else if msg.contains("cannot start a thread") {
                Seen::NoThread(msg)
            } else if msg.contains("cannot start a process") {
                Seen::NoProcess(msg)
            } else {
                Seen::Wrong(whole())
            }
        }
        _ => Seen::Wrong(whole()),
    };
    (seen, elapsed)
}

#[test]
#[ignore = "needs root (setuid to an unprivileged user): run by scripts/test"]
fn no_thread_or_process_to_spare_is_error_11_never_999() {
    // SAFETY: a plain syscall.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test must run as root: it lowers RLIMIT_NPROC and switches to uid {NOBODY}");
    let tree = Tree::new();
    tree.fake("fast", &format!("printf '%s\\n' '{RESULT}'"));
    // `exec`, not a child: under the limit a fork may be refused. It sleeps
    // far longer than the test allows a run to take: only a kill ends it early.
    tree.fake("slow", &format!("echo $$ > \"$PROBE\"\nprintf '%s\\n' '{RESULT}'\nexec sleep 30"));

    // Every limit from 1 up, until the ADD succeeds: each task ipam-delegated
    // needs (processes, threads; a zombie counts until reaped) is refused at
    // one of them, in the order it starts them.
    let baseline = tasks_of(NOBODY);
    let mut table: Vec<(libc::rlim_t, Seen)> = Vec::new();
    for limit in 1..=16 {
        let others = settle(baseline);
        let (seen, _) = add_limited(&tree, "fast", limit, &tree.state("fast.pid"));
        let success = matches!(seen, Seen::Success);
        if others > 0 {
            eprintln!("RLIMIT_NPROC={limit}: uid {NOBODY} already had {others} tasks");
        }
        table.push((limit, seen));
        if success {
            break;
        }
    }
    let report: String =
        table.iter().map(|(limit, seen)| format!("\n  RLIMIT_NPROC={limit}: {}", seen.text())).collect();
    eprintln!("ADD as uid {NOBODY} by RLIMIT_NPROC:{report}");
    assert!(
        !table.iter().any(|(_, seen)| matches!(seen, Seen::Wrong(_))),
        "every failure to start a thread or process must be error 11 saying so:{report}"
    );
    assert!(matches!(table.last(), Some((_, Seen::Success))), "the ADD never succeeded:{report}");
    let threads: Vec<libc::rlim_t> =
        table.iter().filter(|(_, s)| matches!(s, Seen::NoThread(_))).map(|(l, _)| *l).collect();
    let first_process = table.iter().find(|(_, s)| matches!(s, Seen::NoProcess(_))).map(|(l, _)| *l);
    assert!(!threads.is_empty(), "no limit refused a thread only:{report}");
    // A thread refused at a limit that let every process start: the
    // processes already started must be cleaned up.
    assert!(
        first_process.is_some_and(|p| threads.iter().all(|&t| t > p)),
        "expected the processes to be refused at lower limits than the threads:{report}"
    );

    // The delegate was running when the thread was refused: it is killed,
    // not waited for (it would sleep 30 s), and gone.
    for &limit in &threads {
        let probe = tree.state(&format!("slow.{limit}.pid"));
        let _reaper = Reaper(vec![probe.clone()]);
        settle(baseline);
        let (seen, elapsed) = add_limited(&tree, "slow", limit, &probe);
        assert!(matches!(seen, Seen::NoThread(_)), "RLIMIT_NPROC={limit} with a slow delegate: {}", seen.text());
        assert!(
            elapsed < Duration::from_secs(10),
            "RLIMIT_NPROC={limit}: took {elapsed:?}: the delegate was waited for"
        );
        // The delegate may have been killed before its shell wrote the pid.
        if let Some(pid) = read_pid(&probe, Duration::ZERO) {
            let alive = wait_dead(&[pid], GONE_WITHIN);
            assert!(alive.is_empty(), "RLIMIT_NPROC={limit}: the delegate survived: {}", describe(pid));
        }
    }
}

// ---------------------------------------------------------------------------
// kill -9 of ipam-delegated

#[test]
fn killing_ipam_delegated_kills_the_delegates_children_too() {
    let tree = Tree::new();
    // A third-party delegate that starts a child of its own and waits (as
    // itself, `exec`: every process it started is one of the two pids).
    tree.fake(
        "spawner",
        "sleep 30 &\necho $! > \"$PROBE.child\"\necho $$ > \"$PROBE.tmp\"\nmv \"$PROBE.tmp\" \"$PROBE\"\nexec sleep 30",
    );
    let probe = tree.state("spawner.pid");
    let child_probe = tree.state("spawner.pid.child");
    let _reaper = Reaper(vec![probe.clone(), child_probe.clone()]);

    let mut orchestrator = tree.add("spawner", &probe).spawn().expect("starting ipam-delegated");
    let orchestrator_pid = orchestrator.id() as libc::pid_t;
    if let Some(mut stdin) = orchestrator.stdin.take() {
        let _ = stdin.write_all(&config(&["spawner"]));
    }
    let delegate = read_pid(&probe, Duration::from_secs(20));
    let Some(delegate) = delegate else {
        // SAFETY: a plain syscall on our own child, not yet reaped.
        unsafe { libc::kill(orchestrator_pid, libc::SIGKILL) };
        let out = orchestrator.wait_with_output();
        panic!("the delegate never started: {out:?}; stderr {:?}", tree.stderr_of("spawner"));
    };
    let child = read_pid(&child_probe, Duration::ZERO).expect("the delegate wrote its child's pid first");
    assert!(!dead(delegate) && !dead(child), "{} / {}", describe(delegate), describe(child));

    // SAFETY: a plain syscall on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(orchestrator_pid, libc::SIGKILL) }, 0);
    let killed_at = Instant::now();
    let status = orchestrator.wait().expect("reaping ipam-delegated");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));

    let alive = wait_dead(&[delegate, child], GONE_WITHIN);
    let alive: Vec<String> = alive.into_iter().map(describe).collect();
    assert!(
        alive.is_empty(),
        "{:?} after kill -9 of ipam-delegated, still running: {alive:?} (delegate {delegate}, its child {child})",
        killed_at.elapsed()
    );
    let forked = wait_dead(&running(&tree.exe()), GONE_WITHIN);
    assert!(
        forked.is_empty(),
        "processes of ipam-delegated outlived it: {:?}",
        forked.into_iter().map(describe).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// A normal run leaves nothing behind

#[test]
fn a_normal_run_leaves_no_process_behind() {
    let tree = Tree::new();
    // It appends its process group (the 5th field of its stat: its command
    // name has no space) to $PROBE and succeeds.
    tree.fake(
        "quick",
        &format!("read -r _ _ _ _ pgid _ < /proc/$$/stat\necho \"$pgid\" >> \"$PROBE\"\nprintf '%s\\n' '{RESULT}'"),
    );
    let probe = tree.state("quick.pgid");
    for round in 0..5 {
        let _ = std::fs::remove_file(&probe);
        let started = Instant::now();
        let child = tree.add("quick", &probe).spawn().expect("starting ipam-delegated");
        let out = finish(child, &config(&["quick", "quick", "quick"]));
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "round {round}: {}: {stdout}; {}", out.status, tree.stderr_of("quick"));
        assert!(elapsed < Duration::from_secs(10), "round {round}: ipam-delegated took {elapsed:?}");
        let groups: Vec<libc::pid_t> = std::fs::read_to_string(&probe)
            .expect("the delegates wrote their process groups")
            .lines()
            .map(|l| l.trim().parse().expect("a process group id"))
            .collect();
        assert_eq!(groups.len(), 3, "round {round}: {groups:?}");
        // Right after ipam-delegated exited: nothing it started runs on, and
        // nothing is left for init to reap (it reaped what it started).
        for &pgid in &groups {
            let group = in_group(pgid);
            let forked = running(&tree.exe());
            assert!(
                group.is_empty() && forked.is_empty(),
                "round {round}: after a normal run: in the delegates' group {:?}; forked by ipam-delegated {:?}",
                group.into_iter().map(describe).collect::<Vec<_>>(),
                forked.into_iter().map(describe).collect::<Vec<_>>()
            );
        }
    }
}
