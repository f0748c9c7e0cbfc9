//! docs/install.md's install command, run as written — with `PREFIX` and
//! `DESTDIR` each set and unset — and then the installed files: the fast
//! layout, one program and the delegates' names as symlinks to it. The
//! program installed is this build's (staged where `scripts/install`
//! looks, `$CARGO_TARGET_DIR/release`), so that no test pays for a release
//! build. Without `DESTDIR` the script writes to /opt and /usr/local: those
//! runs happen in a mount namespace of their own, over empty tmpfs, as root.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{repo, suite_delegates, SUITE_EXECUTABLES as EXES};

/// The command of docs/install.md's "By hand" block that runs scripts/install,
/// without its comment.
fn documented_install_command() -> String {
    let doc = fs::read_to_string(repo().join("docs/install.md")).unwrap();
    let section = doc.split("\n## By hand\n").nth(1).expect("docs/install.md has a '## By hand' section");
    let line = section.lines().find(|l| l.contains("scripts/install")).expect("an install line");
    line.split('#').next().unwrap().trim().to_string()
}

/// A target directory whose <triple>/release/ holds this build's program,
/// where scripts/build leaves it (the triple it builds for: musl where installed).
fn staged_target(dir: &Path) -> PathBuf {
    let out = Command::new("bash").arg(repo().join("scripts/build")).arg("--triple").output().unwrap();
    assert!(out.status.success(), "scripts/build --triple: {}", String::from_utf8_lossy(&out.stderr));
    let triple = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let release = dir.join("target").join(triple).join("release");
    fs::create_dir_all(&release).unwrap();
    fs::copy(support::suite_bin("ipam-delegated"), release.join("ipam-delegated")).unwrap();
    dir.join("target")
}

/// Runs `script` with bash in the repository, in a private mount namespace
/// with empty /opt and /usr/local when `isolated`; answers its stdout.
fn sh(script: &str, env: &[(&str, &str)], isolated: bool) -> String {
    let mut cmd = if isolated {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "bash", "-euc"]);
        c.arg(format!("mount -t tmpfs tmpfs /opt; mount -t tmpfs tmpfs /usr/local; {script}"));
        c
    } else {
        let mut c = Command::new("bash");
        c.args(["-euc", script]);
        c
    };
    cmd.current_dir(repo()).env_remove("PREFIX").env_remove("DESTDIR").env_remove("LINKDIR");
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script}: {}\n{stdout}{stderr}", out.status);
    stdout.into_owned()
}

/// After docs/install.md's command with `prefix` / `destdir` (None: unset): the
/// program and the delegates' links to it, the operator's tool found on
/// PATH, each name answering VERSION and naming itself from where it was
/// installed, then `--uninstall` removing them.
fn install_and_use(prefix: Option<&str>, destdir: Option<&Path>, isolated: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let target = staged_target(tmp.path());
    let target = target.to_str().unwrap();
    let command = documented_install_command();
    let mut env = vec![("CARGO_TARGET_DIR", target)];
    let destdir_text = destdir.map(|d| d.to_str().unwrap().to_string());
    if let Some(p) = prefix {
        env.push(("PREFIX", p));
    }
    if let Some(d) = &destdir_text {
        env.push(("DESTDIR", d));
    }
    let root = destdir_text.clone().unwrap_or_default();
    let bindir = format!("{root}{}/bin", prefix.unwrap_or("/opt/cni"));
    let linkdir = format!("{root}/usr/local/bin");
    let linked = prefix != Some("/usr/local");
    // What a user then does: the tool on PATH (through the link, which names
    // the installed path and so resolves only once installed, i.e. without
    // DESTDIR), the plugins from where they were installed.
    let tool = if destdir.is_none() { "ipam-delegated".to_string() } else { format!("{bindir}/ipam-delegated") };
    let mut checks = format!(
        "{command}\n\
         stat -c '%a %F %n' {bindir}/ipam-delegated\n\
         for exe in {delegates}; do echo \"link $exe -> $(readlink {bindir}/$exe)\"; done\n\
         for exe in {exes}; do test -x {bindir}/$exe; \
           CNI_COMMAND=VERSION {bindir}/$exe </dev/null; echo; {bindir}/$exe 2>&1 </dev/null | head -n 1; done\n\
         PATH={linkdir}:/usr/bin:/bin {tool} --version\n",
        exes = EXES.join(" "),
        delegates = suite_delegates().join(" "),
    );
    if linked {
        checks.push_str(&format!("readlink {linkdir}/ipam-delegated\n"));
    }
    checks.push_str(&format!("{command} --uninstall\ntest ! -e {linkdir}/ipam-delegated\n"));
    let out = sh(&checks, &env, isolated);
    assert!(out.contains(&format!("755 regular file {bindir}/ipam-delegated")), "installed 0755:\n{out}");
    for exe in suite_delegates() {
        assert!(out.contains(&format!("link {exe} -> ipam-delegated\n")), "{exe} is a relative link:\n{out}");
    }
    for exe in EXES {
        // Run with no CNI_COMMAND, each name says which plugin it is.
        let banner = format!("\n{exe} {}: ", env!("CARGO_PKG_VERSION"));
        assert!(out.contains(&banner), "{exe} is itself under its name:\n{out}");
    }
    assert_eq!(out.matches("\"supportedVersions\"").count(), EXES.len(), "each answers VERSION:\n{out}");
    assert!(out.contains(&format!("ipam-delegated {}", env!("CARGO_PKG_VERSION"))), "on PATH:\n{out}");
    if linked {
        let link = format!("{}/bin/ipam-delegated", prefix.unwrap_or("/opt/cni"));
        assert!(out.contains(&format!("\n{link}\n")), "the link names the installed path, not DESTDIR's:\n{out}");
    }
    for exe in EXES {
        assert!(out.contains(&format!("removed '{bindir}/{exe}'")), "--uninstall removes {exe}:\n{out}");
    }
}

#[test]
fn the_documented_command_installs_into_destdir_with_and_without_prefix() {
    assert_eq!(documented_install_command(), "bash scripts/install");
    for prefix in [None, Some("/usr/local")] {
        let root = tempfile::tempdir().unwrap();
        install_and_use(prefix, Some(root.path()), false);
        assert!(!root.path().join("opt/cni/bin/ipam-delegated").exists(), "uninstalled");
    }
}

#[test]
#[ignore = "needs root (a mount namespace over /opt and /usr/local); run by scripts/test"]
fn the_documented_command_installs_without_destdir_with_and_without_prefix() {
    for prefix in [None, Some("/usr/local")] {
        install_and_use(prefix, None, true);
    }
}

/// An install whose program is gone (removed by hand) is still uninstalled:
/// with no program to ask for its delegates' names, the links to it go.
#[test]
fn uninstall_without_the_program_removes_the_links_to_it() {
    let tmp = tempfile::tempdir().unwrap();
    let target = staged_target(tmp.path());
    let root = tempfile::tempdir().unwrap();
    let env = [("CARGO_TARGET_DIR", target.to_str().unwrap()), ("DESTDIR", root.path().to_str().unwrap())];
    sh("bash scripts/install", &env, false);
    let bin = root.path().join("opt/cni/bin");
    fs::remove_file(bin.join("ipam-delegated")).unwrap();
    fs::write(bin.join("host-local"), "not ours").unwrap();
    sh("bash scripts/install --uninstall", &env, false);
    let left: Vec<_> = fs::read_dir(&bin).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["host-local"], "only the links to ipam-delegated are removed");
}

#[test]
fn a_missing_build_is_named_and_an_unknown_argument_is_a_usage_error() {
    let empty = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .args(["scripts/install"])
        .current_dir(repo())
        .env("CARGO_TARGET_DIR", empty.path())
        .env("DESTDIR", root.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run bash scripts/build first"));
    let out = Command::new("bash").args(["scripts/install", "--bogus"]).current_dir(repo()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
