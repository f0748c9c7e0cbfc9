//! The README's install command, run as written — with `PREFIX` and
//! `DESTDIR` each set and unset — and then the installed files. The
//! executables installed are this build's (staged where `scripts/install`
//! looks, `$CARGO_TARGET_DIR/release`), so that no test pays for a release
//! build. Without `DESTDIR` the script writes to /opt and /usr/local: those
//! runs happen in a mount namespace of their own, over empty tmpfs, as root.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXES: [&str; 4] = ["ipam-delegated", "ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The command of the README's "By hand" block that runs scripts/install,
/// without its comment.
fn readme_install_command() -> String {
    let readme = fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme.split("### By hand").nth(1).expect("README has a '### By hand' section");
    let line = section.lines().find(|l| l.contains("scripts/install")).expect("an install line");
    line.split('#').next().unwrap().trim().to_string()
}

/// A target directory whose release/ holds this build's executables.
fn staged_target(dir: &Path) -> PathBuf {
    let release = dir.join("target/release");
    fs::create_dir_all(&release).unwrap();
    for exe in EXES {
        fs::copy(support::suite_bin(exe), release.join(exe)).unwrap();
    }
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

/// After the README's command with `prefix` / `destdir` (None: unset): the
/// executables, the operator's tool found on PATH, each executable answering
/// VERSION from where it was installed, then `--uninstall` removing them.
fn install_and_use(prefix: Option<&str>, destdir: Option<&Path>, isolated: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let target = staged_target(tmp.path());
    let target = target.to_str().unwrap();
    let command = readme_install_command();
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
         for exe in {exes}; do test -x {bindir}/$exe; stat -c '%a %n' {bindir}/$exe; \
           CNI_COMMAND=VERSION {bindir}/$exe </dev/null; echo; done\n\
         PATH={linkdir}:/usr/bin:/bin {tool} --version\n",
        exes = EXES.join(" "),
    );
    if linked {
        checks.push_str(&format!("readlink {linkdir}/ipam-delegated\n"));
    }
    checks.push_str(&format!("{command} --uninstall\ntest ! -e {linkdir}/ipam-delegated\n"));
    let out = sh(&checks, &env, isolated);
    for exe in EXES {
        assert!(out.contains(&format!("755 {bindir}/{exe}")), "{exe} installed 0755:\n{out}");
    }
    assert_eq!(out.matches("\"supportedVersions\"").count(), 4, "each answers VERSION:\n{out}");
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
fn the_readme_command_installs_into_destdir_with_and_without_prefix() {
    assert_eq!(readme_install_command(), "bash scripts/install");
    for prefix in [None, Some("/usr/local")] {
        let root = tempfile::tempdir().unwrap();
        install_and_use(prefix, Some(root.path()), false);
        assert!(!root.path().join("opt/cni/bin/ipam-delegated").exists(), "uninstalled");
    }
}

#[test]
#[ignore = "needs root (a mount namespace over /opt and /usr/local); run by scripts/test"]
fn the_readme_command_installs_without_destdir_with_and_without_prefix() {
    for prefix in [None, Some("/usr/local")] {
        install_and_use(prefix, None, true);
    }
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("run cargo build --release first"));
    let out = Command::new("bash").args(["scripts/install", "--bogus"]).current_dir(repo()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
