//! Running a delegated plugin: found by bare name in CNI_PATH only, given the
//! caller's environment and the configuration on stdin, its stdout read with a
//! bound, its stderr passed through, and killed with anything it started at
//! the timeout, or when we die, whoever notices first: the delegate itself
//! (PR_SET_PDEATHSIG) or the watcher process leading its process group.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::config::{read_bounded, STDIN_LIMIT};
use crate::env::{Command, Env};
use crate::error::{CniError, Code, Result};
use crate::plugin::{self, Builtin};

/// A delegate's executable as found: its path, and the file's (device,
/// inode), which tell whether it is the same file as another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub file: (u64, u64),
}

/// The executable file called `name` in the first directory of CNI_PATH
/// holding one; error 106 otherwise.
pub fn find(name: &str, dirs: &[PathBuf]) -> Result<Found> {
    for dir in dirs {
        let path = dir.join(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(Found { path, file: (meta.dev(), meta.ino()) });
            }
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(CniError::new(Code::DelegateNotFound, format!("delegate {name:?} not found or not executable in CNI_PATH"))
        .with_details(format!(
            "searched: {}",
            if searched.is_empty() { "(nothing)".into() } else { searched.join(":") }
        )))
}

/// Runs the plugin at `path` with `CNI_COMMAND=command`. `Ok(None)`: it
/// succeeded and printed nothing; `Ok(Some(json))`: it succeeded with output.
/// A failure is its own error object (its code), error 105 at the timeout,
/// error 6 when it failed without a readable error object or printed something
/// that is not JSON, error 11 when the system has no process or thread to
/// spare for it, and error 106 when it cannot be executed.
pub fn run(
    group: &mut DelegateGroup,
    path: &Path,
    command: Command,
    input: &[u8],
    timeout: Duration,
    vars: &[(&str, String)],
) -> Result<Option<Value>> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let watcher = group.watcher(&name)?;
    let (leader, group) = (watcher.pid, Arc::clone(&watcher.group));
    let mut process = Process::new(path);
    process.env("CNI_COMMAND", command.as_str()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // What the orchestrator tells this delegate, and nothing stale from further up.
    for name in crate::stack_call::ALL {
        process.env_remove(name);
    }
    process.envs(vars.iter().map(|(k, v)| (k, v)));
    // The watcher's process group, so that a timeout, or our death, kills
    // everything the delegate started.
    process.process_group(leader);
    // SAFETY: prctl and getppid are async-signal-safe. They tie the
    // delegate's life to ours: if we are killed, it is too, instead of
    // finishing behind our back — even if we died before prctl took effect.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        process.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                return Err(io::Error::other("ipam-delegated exited before its delegate started"));
            }
            Ok(())
        });
    }
    let mut child = spawn(&mut process).map_err(|e| spawn_error(&name, path, &e))?;

    // Writing from another thread: a delegate that prints before reading all
    // of its stdin must not deadlock against us.
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_vec();
        let writer = thread::Builder::new().spawn(move || {
            // A delegate may exit without reading stdin; that is its business.
            let _ = stdin.write_all(&input);
        });
        if let Err(e) = writer {
            return Err(abandon(child, &group, thread_error(&name, &e)));
        }
    }
    // The reader gets the child only once it runs: should it not start, the
    // child is still ours to kill and reap.
    let (handoff, inbox) = mpsc::channel::<Child>();
    let (done, finished) = mpsc::channel();
    let reader_group = Arc::clone(&group);
    let reader = thread::Builder::new().spawn(move || {
        let Ok(mut child) = inbox.recv() else { return };
        let mut out = Vec::new();
        let read = match child.stdout.take() {
            Some(s) => s.take(STDIN_LIMIT + 1).read_to_end(&mut out).map(|_| ()),
            None => Ok(()),
        };
        if out.len() as u64 > STDIN_LIMIT {
            reader_group.kill();
        }
        let status = child.wait();
        let _ = done.send((read, out, status));
    });
    if let Err(e) = reader {
        return Err(abandon(child, &group, thread_error(&name, &e)));
    }
    if let Err(mpsc::SendError(child)) = handoff.send(child) {
        // Only if the reader died before receiving, which it cannot do.
        return Err(abandon(
            child,
            &group,
            CniError::new(Code::Io, format!("the reader of delegate {name:?} is gone")),
        ));
    }

    let (read, out, status) = match finished.recv_timeout(timeout) {
        Ok(r) => r,
        Err(_) => {
            group.kill();
            return Err(CniError::new(
                Code::DelegateTimeout,
                format!(
                    "delegate {name:?} did not finish {} within {:.1}s and was killed",
                    command.as_str(),
                    timeout.as_secs_f64()
                ),
            ));
        }
    };
    // A delegate SIGKILLed by anyone but us may have gone with its whole
    // group, watcher included, which may still be dying: not reused.
    if matches!(&status, Ok(st) if st.signal() == Some(libc::SIGKILL)) {
        group.killed.store(true, Ordering::Relaxed);
    }
    read.map_err(|e| CniError::io(&format!("reading the output of delegate {name:?}"), e))?;
    let status = status.map_err(|e| CniError::io(&format!("waiting for delegate {name:?}"), e))?;
    interpret(&name, &out, status)
}

/// Runs one of this program's own plugins inside this process, as [`run`]
/// would run its file: with the caller's environment, `CNI_COMMAND` and
/// `vars` set and no stale stack variable; with `input` as its stdin, under
/// the same bound; and its answer read back from the bytes it would have
/// printed, with the exit status it would have had, through the same checks.
pub fn run_in_process(
    builtin: &Builtin,
    command: Command,
    input: &[u8],
    vars: &[(&str, String)],
) -> Result<Option<Value>> {
    let env = Env::in_process(command, vars);
    let stdin = read_bounded(input, "stdin");
    let (answer, success) = plugin::respond(builtin, env, stdin);
    let printed = answer.map(|json| format!("{json}\n")).unwrap_or_default();
    let status = ExitStatus::from_raw(if success { 0 } else { 1 << 8 });
    interpret(builtin.about.name, printed.as_bytes(), status)
}

/// A delegate's answer from what it printed and how it ended: its output
/// (`None` when blank), or its error object, or error 6 or 5 for output
/// that is not JSON or too long, or for a failure without an error object.
fn interpret(name: &str, out: &[u8], status: ExitStatus) -> Result<Option<Value>> {
    if out.len() as u64 > STDIN_LIMIT {
        return Err(CniError::io_problem(
            &format!("output of delegate {name:?}"),
            format!("more than {STDIN_LIMIT} bytes"),
        ));
    }
    let text = String::from_utf8_lossy(out);
    let parsed: Option<Value> =
        if text.trim().is_empty() { None } else { Some(serde_json::from_str(&text).map_err(|e| (e, text.clone()))) }
            .transpose()
            .map_err(|(e, text)| {
                CniError::decode(&format!("output of delegate {name:?}"), e).with_details(excerpt(&text))
            })?;

    if let Some(error) = parsed.as_ref().and_then(CniError::from_json) {
        return Err(error);
    }
    if status.success() {
        return Ok(parsed);
    }
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "failed".to_string(),
    };
    Err(CniError::new(Code::Decode, format!("delegate {name:?} {how} without printing an error object"))
        .with_details(excerpt(&text)))
}

/// Starts the process. An executable that is being written at this moment
/// (an upgrade of the plugins, or another thread's child that inherited the
/// writer's descriptor until its exec) fails with ETXTBSY for a moment only:
/// try again for up to about 100 ms.
fn spawn(process: &mut Process) -> io::Result<Child> {
    let mut attempts = 0;
    loop {
        match process.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 100 => {
                attempts += 1;
                thread::sleep(Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

/// Kills the delegate's group and reaps the delegate, which we cannot serve
/// any more; `error` says why.
fn abandon(mut child: Child, group: &Group, error: CniError) -> CniError {
    group.kill();
    // Its exit status tells nothing more: it was killed.
    let _ = child.wait();
    error
}

/// Why starting a process or a thread failed with `e`, when the cause is a
/// shortage that passes (another attempt may succeed: error 11).
fn shortage(e: &io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        // fork and pthread_create refused under a process limit (EAGAIN), or
        // no memory for the copy, the stack or the kernel's structures.
        libc::EAGAIN | libc::ENOMEM => Some("the system is out of processes or memory; try again later"),
        // The pipes to a delegate, or the watcher's.
        libc::EMFILE | libc::ENFILE => Some("out of file descriptors; try again later"),
        _ => None,
    }
}

/// The delegate's process could not be started: error 11 for a shortage,
/// 106 when the file cannot be executed (gone, not executable, not a format
/// the kernel runs).
fn spawn_error(name: &str, path: &Path, e: &io::Error) -> CniError {
    let error = match shortage(e) {
        Some(why) => {
            CniError::new(Code::TryAgainLater, format!("cannot start a process for delegate {name:?}: {e}: {why}"))
        }
        None => CniError::new(Code::DelegateNotFound, format!("delegate {name:?} could not be started: {e}")),
    };
    error.with_details(path.display().to_string())
}

fn thread_error(name: &str, e: &io::Error) -> CniError {
    match shortage(e) {
        Some(why) => {
            CniError::new(Code::TryAgainLater, format!("cannot start a thread to run delegate {name:?}: {e}: {why}"))
        }
        None => CniError::new(Code::Io, format!("cannot start a thread to run delegate {name:?}: {e}")),
    }
}

/// The process group the delegates join, led by its [`Watcher`].
struct Group {
    /// The watcher's pid, which is the group's id; `None` once the watcher is
    /// reaped. Only an unreaped child's pid cannot have been reused, so the
    /// group is signalled under this lock only.
    leader: Mutex<Option<libc::pid_t>>,
    /// Whether [`Group::kill`] took the watcher with the group.
    killed: AtomicBool,
}

impl Group {
    /// SIGKILL to the whole group: the delegate, what it started, the watcher.
    fn kill(&self) {
        if let Some(leader) = *self.leader.lock().unwrap_or_else(PoisonError::into_inner) {
            self.killed.store(true, Ordering::Relaxed);
            // SAFETY: a plain syscall on the group of our own unreaped child.
            unsafe { libc::kill(-leader, libc::SIGKILL) };
        }
    }
}

/// The process group that one caller's delegates run in, one after another,
/// led by a [`Watcher`]: a caller running several delegates in a row
/// (ipam-delegated's stack, its rollback) forks one watcher, not one per
/// delegate (a fork and its reaping cost about 0.2 ms, a trivial delegate's
/// whole run about 0.8 ms). Its delegates thus share a group: a timeout also
/// kills what earlier ones left running in the background, as our death
/// would. Dropping it kills and reaps the watcher.
#[derive(Default)]
pub struct DelegateGroup {
    watcher: Option<Watcher>,
}

impl DelegateGroup {
    /// The watcher, started anew when there is none or its group was killed.
    fn watcher(&mut self, name: &str) -> Result<&Watcher> {
        // A dead one is reaped here, by its drop.
        let whole = self.watcher.take().filter(Watcher::whole);
        let watcher = match whole {
            Some(watcher) => watcher,
            None => Watcher::start(name)?,
        };
        Ok(self.watcher.insert(watcher))
    }
}

/// A process of ours that leads the delegates' process group and, when we
/// die, kills that group. PR_SET_PDEATHSIG takes the delegate with us, but not
/// what the delegate started; this one notices our death as the end of file
/// on a pipe whose only writer is us (the descriptor is close-on-exec, so no
/// delegate keeps it), whatever kills us. Leading the group, it also keeps
/// the group's id from being reused while we may signal it.
///
/// Dropping it kills and reaps the watcher, then closes the pipe; what
/// delegates left running in the group stays.
struct Watcher {
    pid: libc::pid_t,
    group: Arc<Group>,
    /// The pipe's write end, held for its closing: after the watcher is
    /// reaped (drop order), or when we die. `None` only in a test playing our death.
    _lifeline: Option<OwnedFd>,
}

impl Watcher {
    fn start(name: &str) -> Result<Watcher> {
        let failed = |step: &str, e: io::Error| {
            let what = format!("cannot start a process to watch delegate {name:?}");
            match shortage(&e) {
                Some(why) => CniError::new(Code::TryAgainLater, format!("{what}: {e}: {why}")),
                None => CniError::new(Code::Io, format!("{what}: {e}")),
            }
            .with_details(format!("{step} failed"))
        };
        let mut fds: [RawFd; 2] = [-1, -1];
        // SAFETY: pipe2 fills the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(failed("pipe2", io::Error::last_os_error()));
        }
        // SAFETY: both descriptors are fresh and owned by nothing else.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let highest = highest_fd();
        // SAFETY: the child runs `watch` only, which makes async-signal-safe
        // system calls and never returns: nothing of this multi-threaded
        // process's state (locks, allocator, destructors) is touched in it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            watch(read_end.as_raw_fd(), highest);
        }
        if pid < 0 {
            return Err(failed("fork", io::Error::last_os_error()));
        }
        drop(read_end);
        let group = Group { leader: Mutex::new(Some(pid)), killed: AtomicBool::new(false) };
        let watcher = Watcher { pid, group: Arc::new(group), _lifeline: Some(write_end) };
        // Here too, not only in the watcher: the delegate joins the group as
        // soon as it starts, perhaps before the watcher has run at all.
        // SAFETY: a plain syscall on our own child, which does not exec.
        if unsafe { libc::setpgid(pid, pid) } != 0 {
            // Dropping the watcher kills and reaps it.
            return Err(failed("setpgid", io::Error::last_os_error()));
        }
        Ok(watcher)
    }

    /// Whether it still watches: its group was not killed, and nothing else
    /// (a delegate signalling its own group) killed it.
    fn whole(&self) -> bool {
        if self.group.killed.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: siginfo_t is plain data, valid all zero.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // WNOWAIT: a dead watcher is left for the drop to reap.
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: waitid on our own unreaped child fills the struct it is given.
        let checked = unsafe { libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags) } == 0;
        // SAFETY: waitid set si_pid: 0 when the watcher has not exited.
        checked && unsafe { info.si_pid() } == 0
    }

    /// Plays our death for the watcher (a test cannot die and check).
    #[cfg(test)]
    fn cut_lifeline(&mut self) {
        self._lifeline = None;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let mut leader = self.group.leader.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pid) = leader.take() {
            // SAFETY: plain syscalls on our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
                    && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                {}
            }
        }
    }
}

/// The highest descriptor number the watcher may have to close if the
/// kernel has no close_range (before 5.9): read here, before the fork,
/// because getrlimit is not async-signal-safe.
fn highest_fd() -> libc::c_uint {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if known {
        limit.rlim_cur.min(1 << 16) as libc::c_uint
    } else {
        1024
    }
}

/// The watcher's whole life, in the child of a fork of a multi-threaded
/// process: async-signal-safe system calls only, no allocation, no locks, no
/// return. It leads its own group, holds no descriptor but the pipe's read
/// end (so that it keeps no one else's pipe open, our stdout included), waits
/// for the end of file that our death makes, then kills its group, itself
/// included. Only SIGKILL ends it before: every other signal is blocked, so a
/// delegate signalling its own group does not blind it.
fn watch(lifeline: RawFd, highest: libc::c_uint) -> ! {
    // SAFETY: see above; every call here is a system call on our own state.
    unsafe {
        libc::setpgid(0, 0);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        let keep = lifeline as libc::c_uint;
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0) == 0;
        if !(below && above) {
            for fd in (0..highest).filter(|&fd| fd != keep) {
                libc::close(fd as RawFd);
            }
        }
        let mut byte = 0u8;
        loop {
            match libc::read(lifeline, (&mut byte as *mut u8).cast(), 1) {
                0 => break,
                n if n < 0 && *libc::__errno_location() != libc::EINTR => {
                    // Blind: leave the group alone rather than kill a delegate we still wait for.
                    libc::_exit(1)
                }
                // Nobody writes to it; and an interrupted read is read again.
                _ => {}
            }
        }
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

fn excerpt(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("output: {:?}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn find_looks_only_in_cni_path_and_needs_the_exec_bit() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        script(b.path(), "d", "true");
        std::fs::write(a.path().join("d"), "not executable").unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let found = find("d", &dirs).unwrap();
        assert_eq!(found.path, b.path().join("d"));
        let meta = std::fs::metadata(b.path().join("d")).unwrap();
        assert_eq!(found.file, (meta.dev(), meta.ino()));
        let e = find("missing", &dirs).unwrap_err();
        assert_eq!(e.code, 106);
        assert!(e.details.contains(&a.path().display().to_string()));
        assert_eq!(find("d", &[]).unwrap_err().code, 106);
    }

    #[test]
    fn passes_stdin_and_command_and_reads_json() {
        let dir = tempfile::tempdir().unwrap();
        let d = script(dir.path(), "echo", r#"read -r line; printf '{"got":%s,"cmd":"%s"}' "$line" "$CNI_COMMAND""#);
        let out = run(&mut DelegateGroup::default(), &d, Command::Del, b"{\"a\":1}\n", Duration::from_secs(5), &[])
            .unwrap()
            .unwrap();
        assert_eq!(out, serde_json::json!({"got": {"a": 1}, "cmd": "DEL"}));
        let quiet = script(dir.path(), "quiet", "cat >/dev/null");
        assert_eq!(
            run(&mut DelegateGroup::default(), &quiet, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap(),
            None
        );
    }

    #[test]
    fn failures_keep_the_delegates_code_or_become_6() {
        let dir = tempfile::tempdir().unwrap();
        let own = script(dir.path(), "own", r#"echo '{"cniVersion":"1.0.0","code":101,"msg":"in use"}'; exit 1"#);
        let e = run(&mut DelegateGroup::default(), &own, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (Code::AddressInUse, "in use"));
        let bare = script(dir.path(), "bare", "exit 3");
        let e =
            run(&mut DelegateGroup::default(), &bare, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.msg.contains("exited with status 3"), "{e}");
        let junk = script(dir.path(), "junk", "echo not-json");
        let e =
            run(&mut DelegateGroup::default(), &junk, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.details.contains("not-json"), "{e}");
    }

    #[test]
    fn timeout_kills_the_delegate_and_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let slow = script(dir.path(), "slow", &format!("(sleep 2; touch {}) & sleep 30", marker.display()));
        let start = Instant::now();
        let e = run(&mut DelegateGroup::default(), &slow, Command::Add, b"{}", Duration::from_millis(300), &[])
            .unwrap_err();
        assert_eq!(e.code, 105);
        assert!(start.elapsed() < Duration::from_secs(2));
        thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "a child of the timed-out delegate survived");
    }

    /// The state letter of /proc/<pid>/stat ('Z': a zombie), None when there is no such process.
    fn state(pid: libc::pid_t) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
    }

    /// The processes of the group `pgid` that still run (zombies are done).
    fn members(pgid: libc::pid_t) -> Vec<libc::pid_t> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let Some((_, rest)) = stat.rsplit_once(')') else { continue };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str()) {
                found.push(pid);
            }
        }
        found
    }

    /// Polls `done` for up to 2 s.
    fn within_2s(mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            if done() {
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        done()
    }

    #[test]
    fn a_shortage_is_error_11_and_an_unrunnable_file_106() {
        let path = Path::new("/opt/cni/bin/d");
        for errno in [libc::EAGAIN, libc::ENOMEM, libc::EMFILE, libc::ENFILE] {
            let e = spawn_error("d", path, &io::Error::from_raw_os_error(errno));
            assert!(e.code == 11 && e.msg.starts_with("cannot start a process for delegate \"d\": "), "{e}");
            assert!(e.msg.ends_with("; try again later") && e.details == "/opt/cni/bin/d", "{e}");
            let e = thread_error("d", &io::Error::from_raw_os_error(errno));
            assert!(e.code == 11 && e.msg.starts_with("cannot start a thread to run delegate \"d\": "), "{e}");
        }
        assert_eq!(
            thread_error("d", &io::Error::from_raw_os_error(libc::EAGAIN)).msg,
            "cannot start a thread to run delegate \"d\": Resource temporarily unavailable (os error 11): \
             the system is out of processes or memory; try again later"
        );
        for errno in [libc::ENOENT, libc::EACCES, libc::ENOEXEC, libc::ETXTBSY] {
            let e = spawn_error("d", path, &io::Error::from_raw_os_error(errno));
            assert!(e.code == 106 && e.msg.starts_with("delegate \"d\" could not be started: "), "{e}");
        }
        assert_eq!(thread_error("d", &io::Error::from_raw_os_error(libc::EINVAL)).code, 5);

        // Through `run`: a script whose interpreter is missing, a file gone since it was found.
        let dir = tempfile::tempdir().unwrap();
        let no_interpreter = script(dir.path(), "no-interpreter", "");
        std::fs::write(&no_interpreter, "#!/nonexistent/sh\n").unwrap();
        for d in [no_interpreter, dir.path().join("gone")] {
            let e =
                run(&mut DelegateGroup::default(), &d, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
            assert!(e.code == 106 && e.msg.contains("could not be started"), "{}: {e}", d.display());
        }
    }

    #[test]
    fn a_group_reaps_its_delegates_and_its_watcher_serves_them_all() {
        let dir = tempfile::tempdir().unwrap();
        // Field 5 of its stat is its process group (its command name has no space).
        let d = script(
            dir.path(),
            "pgid",
            r#"read -r _ _ _ _ pgid _ < /proc/$$/stat; printf '{"pid":%s,"pgid":%s}' $$ "$pgid""#,
        );
        let mut group = DelegateGroup::default();
        let mut leaders = Vec::new();
        for _ in 0..3 {
            let out = run(&mut group, &d, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap().unwrap();
            let pid = out["pid"].as_i64().unwrap() as libc::pid_t;
            let pgid = out["pgid"].as_i64().unwrap() as libc::pid_t;
            // The watcher leads the group, not the delegate.
            assert_ne!(pid, pgid);
            // We are the delegate's parent: unreaped, it would be a zombie here.
            assert_eq!(state(pid), None, "the delegate {pid} is still there");
            assert_eq!(state(pgid), Some('S'), "the watcher {pgid} waits for the next run");
            leaders.push(pgid);
        }
        assert!(leaders.windows(2).all(|w| w[0] == w[1]), "one watcher for the group's runs: {leaders:?}");
        drop(group);
        assert_eq!(state(leaders[0]), None, "the watcher outlived its group");
    }

    #[test]
    fn a_delegate_killing_its_own_group_does_not_break_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let mut group = DelegateGroup::default();
        let rude = script(dir.path(), "rude", "kill -9 0");
        let e = run(&mut group, &rude, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.msg.contains("killed by signal 9"), "{e}");
        // The next run's group has a live watcher, not the dead one.
        let fine = script(
            dir.path(),
            "fine",
            r#"read -r _ _ _ _ pgid _ < /proc/$$/stat; read -r _ _ state _ < /proc/$pgid/stat; echo "{\"watcher\":\"$state\"}""#,
        );
        for _ in 0..2 {
            let out = run(&mut group, &fine, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap();
            assert_eq!(out, Some(serde_json::json!({"watcher": "S"})));
        }
    }

    #[test]
    fn the_watcher_kills_its_group_when_we_die_and_only_then() {
        // Dismissed after a normal run: the watcher goes alone.
        let watcher = Watcher::start("alone").unwrap();
        let mut survivor = Process::new("sleep").arg("30").process_group(watcher.pid).spawn().unwrap();
        drop(watcher);
        thread::sleep(Duration::from_millis(100));
        assert!(survivor.try_wait().unwrap().is_none(), "dismissing the watcher killed its group");
        survivor.kill().unwrap();
        survivor.wait().unwrap();

        // Our death (its pipe's end of file): the whole group goes, what the delegate started too.
        let mut watcher = Watcher::start("orphaned").unwrap();
        let mut delegate = Process::new("/bin/sh")
            .args(["-c", "sleep 30 & echo $!; exec sleep 30"])
            .process_group(watcher.pid)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(delegate.stdout.take().unwrap()), &mut line).unwrap();
        let background: libc::pid_t = line.trim().parse().unwrap();
        let group = watcher.pid;
        assert_eq!(members(group).len(), 3, "the watcher, the delegate and its child");
        thread::sleep(Duration::from_millis(100));
        assert!(delegate.try_wait().unwrap().is_none(), "the watcher killed its group on its own");
        watcher.cut_lifeline();
        assert!(within_2s(|| delegate.try_wait().unwrap().is_some()), "the delegate survived us");
        assert_eq!(delegate.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(within_2s(|| members(group).is_empty()), "still running in the group: {:?}", members(group));
        assert!(matches!(state(background), None | Some('Z')), "the delegate's child survived us");
        assert_eq!(state(group), Some('Z'), "the watcher ends once it has killed its group");
    }

    #[test]
    fn oversized_output_is_error_5() {
        let dir = tempfile::tempdir().unwrap();
        let flood = script(dir.path(), "flood", "yes");
        let e =
            run(&mut DelegateGroup::default(), &flood, Command::Add, b"{}", Duration::from_secs(20), &[]).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
    }
}
