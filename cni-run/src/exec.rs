//! Finding a plugin in CNI_PATH and running it.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

/// The plugin executable `name` in the first directory of `cni_path` that has it.
pub fn find(name: &str, cni_path: &str) -> Result<PathBuf, String> {
    cni_path
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .ok_or_else(|| format!("plugin {name:?} not found in CNI_PATH {cni_path}"))
}

/// How a plugin run ended other than in success.
#[derive(Debug)]
pub struct Failed {
    /// "exit status 1", "killed by signal 9", or why it could not start.
    pub how: String,
    pub stdout: Vec<u8>,
}

/// Runs `exe` with our environment plus `set` and without `unset`, `stdin` on
/// its stdin; its stderr goes to ours. Returns its stdout on exit status 0.
/// Like libcni, retries a few times while the file is being written ("text
/// file busy").
pub fn run(exe: &PathBuf, set: &[(&str, &str)], unset: &[&str], stdin: &[u8]) -> Result<Vec<u8>, Failed> {
    let spawn = || {
        let mut cmd = Command::new(exe);
        for key in unset {
            cmd.env_remove(key);
        }
        cmd.envs(set.iter().copied()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        cmd.spawn()
    };
    let mut tries = 0;
    let mut child = loop {
        match spawn() {
            Err(e) if e.raw_os_error() == Some(26) && tries < 5 => {
                tries += 1;
                thread::sleep(Duration::from_secs(1));
            }
            Err(e) => {
                return Err(Failed { how: format!("could not start {}: {e}", exe.display()), stdout: Vec::new() })
            }
            Ok(child) => break child,
        }
    };
    // The plugin may exit before reading all of it; that is its business.
    if let Some(mut pipe) = child.stdin.take() {
        let input = stdin.to_vec();
        thread::spawn(move || drop(pipe.write_all(&input)));
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Failed { how: format!("waiting for {}: {e}", exe.display()), stdout: Vec::new() })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let how = match (out.status.code(), out.status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => out.status.to_string(),
    };
    Err(Failed { how, stdout: out.stdout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn the_first_executable_file_in_cni_path_wins() {
        let (a, b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
        let plain = a.path().join("p");
        fs::write(&plain, "not executable").expect("write");
        let exe = b.path().join("p");
        fs::write(&exe, "#!/bin/sh\ncat\n").expect("write");
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = format!("{}::{}", a.path().display(), b.path().display());
        assert_eq!(find("p", &path), Ok(exe.clone()));
        assert!(find("q", &path).unwrap_err().contains("not found in CNI_PATH"));
        assert_eq!(run(&exe, &[], &[], b"hello").map_err(|f| f.how), Ok(b"hello".to_vec()));
    }
}
