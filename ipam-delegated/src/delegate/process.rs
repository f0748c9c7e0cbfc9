//! A delegate run as a process of its own: found by bare name in CNI_PATH
//! only, given the caller's environment and the configuration on stdin, its
//! stdout read with a bound, its stderr passed through, and killed with
//! anything it started at the deadline, or when we die, whoever notices
//! first: the delegate itself (PR_SET_PDEATHSIG) or the [`super::watcher`]
//! leading its process group.

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitStatus, Stdio};
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use shared::config::STDIN_LIMIT;
use shared::{CniError, Code, Command, Result};

use super::answer::interpret;
use super::runner::{Call, Runner};
use super::start_errors::{spawn_error, thread_error};
use super::watcher::{DelegateGroup, Group};

/// A delegate of this suite that reaches its deadline while it waits for the
/// database lock says so itself: its process is killed only this much later.
const GRACE: Duration = Duration::from_millis(500);

/// An executable run as a process, in the process group of its stack's
/// delegates (one watcher for them all).
pub struct Exec {
    name: String,
    path: PathBuf,
    group: Rc<DelegateGroup>,
}

impl Exec {
    pub fn new(name: &str, path: PathBuf, group: Rc<DelegateGroup>) -> Exec {
        Exec { name: name.to_string(), path, group }
    }
}

impl Runner for Exec {
    fn run(&self, call: Call) -> Result<Option<Value>> {
        tracing::trace!("{} runs as a process: {}", self.name, self.path.display());
        let timeout = call.deadline.saturating_duration_since(Instant::now()) + GRACE;
        run(&self.group, &self.path, call.command, &call.input.text(), timeout, call.vars)
    }
}

/// How a delegate's process ended, as its reader saw it.
struct Ended {
    /// Reading its stdout.
    read: io::Result<()>,
    /// Its stdout, up to one byte past the bound.
    out: Vec<u8>,
    status: io::Result<ExitStatus>,
}

/// Runs the plugin at `path` with `CNI_COMMAND=command`. `Ok(None)`: it
/// succeeded and printed nothing; `Ok(Some(json))`: it succeeded with output.
/// A failure is its own error object (its code), error 105 at the timeout,
/// error 6 when it failed without a readable error object or printed something
/// that is not JSON, error 11 when the system has no process or thread to
/// spare for it, and error 106 when it cannot be executed.
pub(super) fn run(
    group: &DelegateGroup,
    path: &Path,
    command: Command,
    input: &[u8],
    timeout: Duration,
    vars: &[(&str, String)],
) -> Result<Option<Value>> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (leader, group) = group.watcher(&name)?;
    let mut process = prepare(path, command, vars, leader);
    let mut child = spawn(&mut process).map_err(|e| spawn_error(&name, path, &e))?;
    if let Err(e) = feed_stdin(&mut child, input) {
        return Err(abandon(child, &group, thread_error(&name, &e)));
    }
    let finished = match hand_to_reader(child, &group, &name) {
        Ok(finished) => finished,
        Err((child, error)) => return Err(abandon(child, &group, error)),
    };
    let Ok(ended) = finished.recv_timeout(timeout) else {
        group.kill();
        return Err(CniError::new(
            Code::DelegateTimeout,
            format!(
                "delegate {name:?} did not finish {} within {:.1}s and was killed",
                command.as_str(),
                timeout.as_secs_f64()
            ),
        ));
    };
    answer(&name, ended, &group)
}

/// The process to start: `CNI_COMMAND` and `vars` set over the caller's
/// environment, stdin and stdout ours, stderr the caller's; in the group led
/// by `leader`, and tied to our life.
fn prepare(path: &Path, command: Command, vars: &[(&str, String)], leader: libc::pid_t) -> Process {
    let mut process = Process::new(path);
    process.env("CNI_COMMAND", command.as_str()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // What the orchestrator tells this delegate, and nothing stale from further up.
    for name in shared::stack_call::ALL {
        process.env_remove(name);
    }
    process.envs(vars.iter().map(|(k, v)| (k, v)));
    // The watcher's process group, so that a timeout, or our death, kills
    // everything the delegate started.
    process.process_group(leader);
    die_with_us(&mut process);
    process
}

/// The delegate gets SIGKILL when we die (PR_SET_PDEATHSIG): if we are
/// killed, it is too, instead of finishing behind our back — even if we died
/// before prctl took effect.
fn die_with_us(process: &mut Process) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl and getppid are async-signal-safe.
    unsafe {
        process.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                return Err(io::Error::other("ipam-delegated exited before its delegate started"));
            }
            Ok(())
        });
    }
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

/// Writes `input` to the child's stdin from a thread of its own: a delegate
/// that prints before reading all of its stdin must not deadlock against us.
/// The error is that the thread could not be started.
fn feed_stdin(child: &mut Child, input: &[u8]) -> io::Result<()> {
    let Some(mut stdin) = child.stdin.take() else { return Ok(()) };
    let input = input.to_vec();
    thread::Builder::new()
        .spawn(move || {
            // A delegate may exit without reading stdin; that is its business.
            let _ = stdin.write_all(&input);
        })
        .map(drop)
}

/// Hands the child to a reader thread, which reads its stdout (killing the
/// group past the bound), reaps it and sends how it ended. The reader gets
/// the child only once it runs: should it not start, the child is given
/// back, still ours to kill and reap.
fn hand_to_reader(
    child: Child,
    group: &Arc<Group>,
    name: &str,
) -> std::result::Result<Receiver<Ended>, (Child, CniError)> {
    let (handoff, inbox) = mpsc::channel::<Child>();
    let (done, finished) = mpsc::channel();
    let reader_group = Arc::clone(group);
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
        let _ = done.send(Ended { read, out, status });
    });
    if let Err(e) = reader {
        return Err((child, thread_error(name, &e)));
    }
    match handoff.send(child) {
        Ok(()) => Ok(finished),
        // Only if the reader died before receiving, which it cannot do.
        Err(mpsc::SendError(child)) => {
            Err((child, CniError::new(Code::Io, format!("the reader of delegate {name:?} is gone"))))
        }
    }
}

/// The answer of a delegate that ended by itself (not at the timeout).
fn answer(name: &str, ended: Ended, group: &Group) -> Result<Option<Value>> {
    let Ended { read, out, status } = ended;
    // A delegate SIGKILLed by anyone but us may have gone with its whole
    // group, watcher included, which may still be dying: not reused.
    if matches!(&status, Ok(st) if st.signal() == Some(libc::SIGKILL)) {
        group.note_killed();
    }
    read.map_err(|e| CniError::io(&format!("reading the output of delegate {name:?}"), e))?;
    let status = status.map_err(|e| CniError::io(&format!("waiting for delegate {name:?}"), e))?;
    interpret(name, &out, status)
}

/// Kills the delegate's group and reaps the delegate, which we cannot serve
/// any more; `error` says why.
fn abandon(mut child: Child, group: &Group, error: CniError) -> CniError {
    group.kill();
    // Its exit status tells nothing more: it was killed.
    let _ = child.wait();
    error
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::testing::{script, state};
    use super::*;

    #[test]
    fn passes_stdin_and_command_and_reads_json() {
        let dir = tempfile::tempdir().unwrap();
        let d = script(dir.path(), "echo", r#"read -r line; printf '{"got":%s,"cmd":"%s"}' "$line" "$CNI_COMMAND""#);
        let out = run(&DelegateGroup::default(), &d, Command::Del, b"{\"a\":1}\n", Duration::from_secs(5), &[])
            .unwrap()
            .unwrap();
        assert_eq!(out, serde_json::json!({"got": {"a": 1}, "cmd": "DEL"}));
        let quiet = script(dir.path(), "quiet", "cat >/dev/null");
        assert_eq!(
            run(&DelegateGroup::default(), &quiet, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap(),
            None
        );
    }

    #[test]
    fn failures_keep_the_delegates_code_or_become_6() {
        let dir = tempfile::tempdir().unwrap();
        let own = script(dir.path(), "own", r#"echo '{"cniVersion":"1.0.0","code":101,"msg":"in use"}'; exit 1"#);
        let e = run(&DelegateGroup::default(), &own, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (Code::AddressInUse, "in use"));
        let bare = script(dir.path(), "bare", "exit 3");
        let e = run(&DelegateGroup::default(), &bare, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.msg.contains("exited with status 3"), "{e}");
        let junk = script(dir.path(), "junk", "echo not-json");
        let e = run(&DelegateGroup::default(), &junk, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.details.contains("not-json"), "{e}");
    }

    #[test]
    fn timeout_kills_the_delegate_and_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let slow = script(dir.path(), "slow", &format!("(sleep 2; touch {}) & sleep 30", marker.display()));
        let start = Instant::now();
        let e =
            run(&DelegateGroup::default(), &slow, Command::Add, b"{}", Duration::from_millis(300), &[]).unwrap_err();
        assert_eq!(e.code, 105);
        assert!(start.elapsed() < Duration::from_secs(2));
        thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "a child of the timed-out delegate survived");
    }

    #[test]
    fn a_file_that_cannot_be_run_is_106() {
        // Through `run`: a script whose interpreter is missing, a file gone since it was found.
        let dir = tempfile::tempdir().unwrap();
        let no_interpreter = script(dir.path(), "no-interpreter", "");
        std::fs::write(&no_interpreter, "#!/nonexistent/sh\n").unwrap();
        for d in [no_interpreter, dir.path().join("gone")] {
            let e = run(&DelegateGroup::default(), &d, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
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
        let group = DelegateGroup::default();
        let mut leaders = Vec::new();
        for _ in 0..3 {
            let out = run(&group, &d, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap().unwrap();
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
        let group = DelegateGroup::default();
        let rude = script(dir.path(), "rude", "kill -9 0");
        let e = run(&group, &rude, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap_err();
        assert!(e.code == 6 && e.msg.contains("killed by signal 9"), "{e}");
        // The next run's group has a live watcher, not the dead one.
        let fine = script(
            dir.path(),
            "fine",
            r#"read -r _ _ _ _ pgid _ < /proc/$$/stat; read -r _ _ state _ < /proc/$pgid/stat; echo "{\"watcher\":\"$state\"}""#,
        );
        for _ in 0..2 {
            let out = run(&group, &fine, Command::Add, b"{}", Duration::from_secs(5), &[]).unwrap();
            // Alive: waiting, or still running on a loaded machine; a dead
            // watcher is a zombie (Z) or gone (no state).
            let state = out.as_ref().and_then(|o| o["watcher"].as_str()).unwrap_or_default().to_string();
            assert!(matches!(state.as_str(), "S" | "R"), "the group's watcher is not alive: {out:?}");
        }
    }

    #[test]
    fn oversized_output_is_error_5() {
        let dir = tempfile::tempdir().unwrap();
        let flood = script(dir.path(), "flood", "yes");
        let e = run(&DelegateGroup::default(), &flood, Command::Add, b"{}", Duration::from_secs(20), &[]).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
    }
}
