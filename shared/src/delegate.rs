//! Running a delegated plugin: found by bare name in CNI_PATH only, given the
//! caller's environment and the configuration on stdin, its stdout read with a
//! bound, its stderr passed through, and killed (with anything it started) at
//! the timeout.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::config::STDIN_LIMIT;
use crate::env::Command;
use crate::error::{CniError, Code, Result};

/// The directory of CNI_PATH holding an executable file called `name`; error 106 otherwise.
pub fn find(name: &str, dirs: &[PathBuf]) -> Result<PathBuf> {
    for dir in dirs {
        let candidate = dir.join(name);
        let executable =
            std::fs::metadata(&candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
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
/// A failure is its own error object (its code), error 105 at the timeout, or
/// error 6 when it failed without a readable error object or printed something
/// that is not JSON.
pub fn run(path: &Path, command: Command, input: &[u8], timeout: Duration) -> Result<Option<Value>> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut process = Process::new(path);
    process.env("CNI_COMMAND", command.as_str()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // Its own process group, so that a timeout kills everything it started.
    process.process_group(0);
    // SAFETY: prctl and getppid are async-signal-safe. They tie the
    // delegate's life to ours: if we are killed, it is too, instead of
    // finishing behind our back — even if we died before prctl took effect.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        process.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                return Err(std::io::Error::other("ipam-delegated exited before its delegate started"));
            }
            Ok(())
        });
    }
    let mut child = spawn(&mut process).map_err(|e| {
        CniError::new(Code::DelegateNotFound, format!("delegate {name:?} could not be started: {e}"))
            .with_details(path.display().to_string())
    })?;
    let group = child.id() as libc::pid_t;
    let kill_group = move || {
        // SAFETY: plain syscall on a process group we created.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    };

    // Writing from another thread: a delegate that prints before reading all
    // of its stdin must not deadlock against us.
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_vec();
        thread::spawn(move || {
            // A delegate may exit without reading stdin; that is its business.
            let _ = stdin.write_all(&input);
        });
    }
    let mut stdout = child.stdout.take();
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let mut out = Vec::new();
        let read = match stdout.as_mut() {
            Some(s) => s.take(STDIN_LIMIT + 1).read_to_end(&mut out).map(|_| ()),
            None => Ok(()),
        };
        if out.len() as u64 > STDIN_LIMIT {
            kill_group();
        }
        let status = child.wait();
        let _ = done.send((read, out, status));
    });

    let (read, out, status) = match finished.recv_timeout(timeout) {
        Ok(r) => r,
        Err(_) => {
            kill_group();
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
    read.map_err(|e| CniError::io(&format!("reading the output of delegate {name:?}"), e))?;
    let status = status.map_err(|e| CniError::io(&format!("waiting for delegate {name:?}"), e))?;
    if out.len() as u64 > STDIN_LIMIT {
        return Err(CniError::io(&format!("output of delegate {name:?}"), format!("more than {STDIN_LIMIT} bytes")));
    }
    let text = String::from_utf8_lossy(&out);
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
fn spawn(process: &mut Process) -> std::io::Result<std::process::Child> {
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
        assert_eq!(find("d", &dirs).unwrap(), b.path().join("d"));
        let e = find("missing", &dirs).unwrap_err();
        assert_eq!(e.code, 106);
        assert!(e.details.contains(&a.path().display().to_string()));
        assert_eq!(find("d", &[]).unwrap_err().code, 106);
    }

    #[test]
    fn passes_stdin_and_command_and_reads_json() {
        let dir = tempfile::tempdir().unwrap();
        let d = script(dir.path(), "echo", r#"read -r line; printf '{"got":%s,"cmd":"%s"}' "$line" "$CNI_COMMAND""#);
        let out = run(&d, Command::Del, b"{\"a\":1}\n", Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(out, serde_json::json!({"got": {"a": 1}, "cmd": "DEL"}));
        let quiet = script(dir.path(), "quiet", "cat >/dev/null");
        assert_eq!(run(&quiet, Command::Add, b"{}", Duration::from_secs(5)).unwrap(), None);
    }

    #[test]
    fn failures_keep_the_delegates_code_or_become_6() {
        let dir = tempfile::tempdir().unwrap();
        let own = script(dir.path(), "own", r#"echo '{"cniVersion":"1.0.0","code":101,"msg":"in use"}'; exit 1"#);
        let e = run(&own, Command::Add, b"{}", Duration::from_secs(5)).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (101, "in use"));
        let bare = script(dir.path(), "bare", "exit 3");
        let e = run(&bare, Command::Add, b"{}", Duration::from_secs(5)).unwrap_err();
        assert!(e.code == 6 && e.msg.contains("exited with status 3"), "{e}");
        let junk = script(dir.path(), "junk", "echo not-json");
        let e = run(&junk, Command::Add, b"{}", Duration::from_secs(5)).unwrap_err();
        assert!(e.code == 6 && e.details.contains("not-json"), "{e}");
    }

    #[test]
    fn timeout_kills_the_delegate_and_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let slow = script(dir.path(), "slow", &format!("(sleep 2; touch {}) & sleep 30", marker.display()));
        let start = Instant::now();
        let e = run(&slow, Command::Add, b"{}", Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.code, 105);
        assert!(start.elapsed() < Duration::from_secs(2));
        thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "a child of the timed-out delegate survived");
    }

    #[test]
    fn oversized_output_is_error_5() {
        let dir = tempfile::tempdir().unwrap();
        let flood = script(dir.path(), "flood", "yes");
        let e = run(&flood, Command::Add, b"{}", Duration::from_secs(20)).unwrap_err();
        assert_eq!(e.code, 5, "{e}");
    }
}
