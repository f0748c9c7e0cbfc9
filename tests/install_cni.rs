//! `ipam-delegated install-cni`, the installer the Kubernetes DaemonSet runs
//! (deploy/kubernetes/), as real processes writing into a temporary "host"
//! tree: the fast layout, the node name, etcd's Secret and a conflist; a
//! second run that changes nothing; a new build replacing a program that is
//! running; a foreign file refused without --force; the wait that SIGTERM
//! ends with 0; and --uninstall, which removes exactly what was installed.
//! The plugins' kubeconfig (`--kubeconfig`), made from a ServiceAccount
//! volume laid out as the kubelet lays it out: written private, written
//! again when the kubelet refreshes the token, removed by --uninstall; and
//! used by real plugin calls against a real API server
//! (tests/cluster_harness/kube.rs), whose refusal of a token is error 7
//! naming the kubeconfig.

mod cluster_harness;
mod stack;
mod support;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine as _;
use cluster_harness::kube::plugins_account;
use cluster_harness::{added, blue_pools, brief, failure, Cluster};
use ipam_ds_cluster::kube::Kubeconfig;
use serde_json::json;
use support::kubeconfig::forged_token;

const MANIFEST: &str = ".ipam-delegated-installed";

/// How often the installer reads the pod's token (install_cni/watch.rs).
const TOKEN_POLL: Duration = Duration::from_secs(2);

/// The tests' list of the suite's executables is the program's: the
/// program and the delegates it lists (`ipam-delegated delegates`).
#[test]
fn the_tests_know_every_delegate_the_program_is() {
    let mut listed = vec!["ipam-delegated".to_string()];
    listed.extend(support::suite_delegates());
    assert_eq!(listed, support::SUITE_EXECUTABLES, "tests/support/mod.rs: SUITE_EXECUTABLES");
}

/// The program under test, its real file (not a link to it).
fn program() -> PathBuf {
    fs::canonicalize(support::suite_bin("ipam-delegated")).expect("the program under test")
}

/// A "host" as the DaemonSet's container sees it: the host's directories
/// under `root`.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("host");
        fs::create_dir_all(root.join("opt/cni/bin")).expect("bin dir");
        fs::create_dir_all(root.join("etc/cni/net.d")).expect("conf dir");
        Host { root, _dir: dir }
    }

    fn bin(&self) -> PathBuf {
        self.root.join("opt/cni/bin")
    }

    fn conf_dir(&self) -> PathBuf {
        self.root.join("etc/cni/net.d")
    }

    fn node_file(&self) -> PathBuf {
        self.root.join("etc/cni/ipam-delegated/node-name")
    }

    fn etcd_dir(&self) -> PathBuf {
        self.root.join("etc/cni/ipam-delegated/etcd")
    }

    fn kubeconfig(&self) -> PathBuf {
        self.root.join("etc/cni/ipam-delegated/kubeconfig")
    }

    /// A scratch directory beside the host tree (sources, other builds).
    fn scratch(&self, name: &str) -> PathBuf {
        let dir = self.root.parent().expect("tempdir").join(name);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    /// The installer's arguments for this tree, then `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "install-cni".to_string(),
            format!("--bin-dir={}", self.bin().display()),
            format!("--node-file={}", self.node_file().display()),
            format!("--conf-dir={}", self.conf_dir().display()),
            format!("--etcd-dir={}", self.etcd_dir().display()),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    fn command(&self, exe: &Path, extra: &[&str]) -> Command {
        let mut command = Command::new(exe);
        command.args(self.args(extra)).env_remove("CNI_COMMAND").env("NODE_NAME", "node-a");
        // Outside a pod unless a test says otherwise (these tests may run in one).
        command.env_remove("KUBERNETES_SERVICE_HOST").env_remove("KUBERNETES_SERVICE_PORT");
        command
    }

    /// The installer with `--kubeconfig` made from the ServiceAccount volume
    /// `account`, in the in-cluster environment of an API server at
    /// `host`:`port`, then `extra`.
    fn with_kubeconfig(&self, account: &Path, host: &str, port: u16, extra: &[&str]) -> Command {
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig().display()),
            format!("--service-account-dir={}", account.display()),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = self.command(&program(), &args);
        command.env("KUBERNETES_SERVICE_HOST", host).env("KUBERNETES_SERVICE_PORT", port.to_string());
        command
    }

    /// Runs the installer with --once and returns its output.
    fn run(&self, exe: &Path, extra: &[&str]) -> Output {
        let mut extra = extra.to_vec();
        extra.push("--once");
        output(&mut self.command(exe, &extra))
    }

    /// Every path under the host tree, with what it is: the tree's state.
    fn tree(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            let mut entries: Vec<_> = fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry").path()).collect();
            entries.sort();
            for path in entries {
                let meta = fs::symlink_metadata(&path).expect("lstat");
                let name = path.strip_prefix(root).expect("under root").display().to_string();
                if meta.file_type().is_symlink() {
                    out.push(format!("{name} -> {}", fs::read_link(&path).expect("readlink").display()));
                } else if meta.is_dir() {
                    out.push(format!("{name}/"));
                    walk(&path, root, out);
                } else {
                    out.push(format!("{name} {:o} {} bytes", meta.permissions().mode() & 0o7777, meta.len()));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out
    }
}

/// Runs a command to its end. A program file just written may be briefly
/// "text file busy" while another test thread forks (the child holds the
/// writer's descriptor until its exec): tried again then.
fn output(command: &mut Command) -> Output {
    for _ in 0..100 {
        match command.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => thread::sleep(Duration::from_millis(20)),
            other => return other.expect("running the installer"),
        }
    }
    panic!("{command:?}: text file busy, again and again")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    );
}

/// A Secret or a projected volume (the ServiceAccount's token and CA) as the
/// kubelet mounts it: each key a symlink into `..data`, itself a symlink to
/// a timestamped directory. Called again on the same `dir`, the kubelet's
/// update: a new timestamped directory, `..data` renamed over to it at once.
fn kubelet_volume(dir: &Path, files: &[(&str, &str)]) {
    static UPDATES: AtomicU32 = AtomicU32::new(0);
    let stamp = format!("..2026_11_25_08_00_00.{:09}", UPDATES.fetch_add(1, Ordering::Relaxed));
    fs::create_dir_all(dir.join(&stamp)).expect("volume dir");
    for (name, contents) in files {
        fs::write(dir.join(&stamp).join(name), contents).expect("volume file");
        if fs::symlink_metadata(dir.join(name)).is_err() {
            symlink(format!("..data/{name}"), dir.join(name)).expect("volume key link");
        }
    }
    symlink(&stamp, dir.join("..data_tmp")).expect("..data_tmp");
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("..data");
}

/// A pod's ServiceAccount volume holding `token` and the CA `ca`.
fn service_account(dir: &Path, token: &str, ca: &str) {
    kubelet_volume(dir, &[("token", token), ("ca.crt", ca), ("namespace", "ipam-delegated")]);
}

/// The bearer token of a kubeconfig.
fn token_of(kubeconfig: &Path) -> String {
    let text = fs::read_to_string(kubeconfig).unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    let config: serde_yaml::Value = serde_yaml::from_str(&text).expect("a kubeconfig");
    config["users"][0]["user"]["token"].as_str().expect("a bearer token").to_string()
}

/// Waits until the kubeconfig holds `token`; how long that took.
fn wait_for_token(kubeconfig: &Path, token: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if fs::read_to_string(kubeconfig).is_ok_and(|_| token_of(kubeconfig) == token) {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{} still without the new token after {limit:?}", kubeconfig.display());
        thread::sleep(Duration::from_millis(50));
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn conflist(dir: &Path, name: &str, network: &str) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        r#"{{"cniVersion": "1.0.0", "name": "{network}", "plugins": [{{"type": "macvlan", "master": "eth0",
  "ipam": {{"type": "ipam-delegated", "delegates": ["ipam-ds-pool", "ipam-da-sequential"],
            "pools": [{{"name": "p", "ranges": [{{"subnet": "10.9.0.0/24"}}]}}]}}}}]}}
"#
    );
    fs::write(&path, text).expect("conflist");
    path
}

#[test]
fn installs_the_fast_layout_node_name_secret_and_conflist_and_a_second_run_changes_nothing() {
    let host = Host::new();
    let secret = host.scratch("secret");
    kubelet_volume(&secret, &[("ca.crt", "CA\n"), ("tls.crt", "CERT\n"), ("tls.key", "KEY\n"), ("password", "pw\n")]);
    let source = conflist(&host.scratch("config"), "macvlan-cluster.conflist", "macvlan-cluster");
    let secret_arg = format!("--etcd-secret={}", secret.display());
    let conflist_arg = format!("--conflist={}", source.display());
    let first = host.run(&program(), &[&secret_arg, &conflist_arg]);
    assert_success(&first);

    // The program, whole and executable, and the delegates' names linked to it.
    let installed = host.bin().join("ipam-delegated");
    assert_eq!(fs::read(&installed).expect("installed program"), fs::read(program()).expect("program"));
    assert_eq!(fs::metadata(&installed).expect("stat").permissions().mode() & 0o777, 0o755);
    for delegate in support::suite_delegates() {
        assert_eq!(fs::read_link(host.bin().join(&delegate)).ok(), Some(PathBuf::from("ipam-delegated")), "{delegate}");
    }
    // It runs, and as each delegate (VERSION through the link).
    let version = Command::new(&installed).arg("--version").output().expect("run the installed program");
    assert_success(&version);
    assert!(stdout(&version).starts_with("ipam-delegated "), "{}", stdout(&version));
    let pool = Command::new(host.bin().join("ipam-ds-pool"))
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::null())
        .output()
        .expect("run ipam-ds-pool");
    assert_success(&pool);
    assert!(stdout(&pool).contains("supportedVersions"), "{}", stdout(&pool));

    // The node name, as ipam.cluster.nodeFile reads it.
    assert_eq!(fs::read_to_string(host.node_file()).expect("node file"), "node-a\n");
    // The Secret's keys, private, and nothing of its ..data layout.
    let mut etcd: Vec<_> =
        fs::read_dir(host.etcd_dir()).expect("etcd dir").map(|e| e.expect("entry").file_name()).collect();
    etcd.sort();
    assert_eq!(etcd, ["ca.crt", "password", "tls.crt", "tls.key"]);
    assert_eq!(fs::read_to_string(host.etcd_dir().join("tls.key")).expect("key"), "KEY\n");
    assert_eq!(fs::metadata(host.etcd_dir().join("tls.key")).expect("stat").permissions().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(host.etcd_dir()).expect("stat").permissions().mode() & 0o777, 0o700);
    // The conflist, byte for byte, under its own name.
    assert_eq!(
        fs::read(host.conf_dir().join("macvlan-cluster.conflist")).expect("copied conflist"),
        fs::read(&source).expect("source")
    );
    assert!(host.bin().join(MANIFEST).is_file(), "{:?}", host.tree());
    // No temporary file left anywhere.
    assert!(!host.tree().iter().any(|p| p.contains(".install-cni-")), "{:?}", host.tree());

    // Again: nothing to do, nothing rewritten (same inodes and times).
    let before = host.tree();
    let inode = fs::metadata(&installed).expect("stat").ino();
    let manifest_inode = fs::metadata(host.bin().join(MANIFEST)).expect("stat").ino();
    let second = host.run(&program(), &[&secret_arg, &conflist_arg]);
    assert_success(&second);
    let out = stdout(&second);
    assert!(!out.contains("installed ") && !out.contains("wrote ") && !out.contains("linked "), "{out}");
    assert!(out.contains(&format!("unchanged {}", installed.display())), "{out}");
    assert_eq!(host.tree(), before);
    assert_eq!(fs::metadata(&installed).expect("stat").ino(), inode);
    assert_eq!(fs::metadata(host.bin().join(MANIFEST)).expect("stat").ino(), manifest_inode);
}

/// Reads the child's stdout lines on a thread; waits for a line containing `what`.
fn wait_for_line(child: &mut Child, what: &str) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (send, receive) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match receive.recv_timeout(left) {
            Ok(line) if line.contains(what) => return receive,
            Ok(line) => seen.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("no line with {what:?} ({e}); saw {seen:?}; status {:?}", child.try_wait());
            }
        }
    }
}

/// Waits, within `limit`, for the next line of `lines` that contains
/// `what`; the lines before it.
fn line_with(lines: &mpsc::Receiver<String>, what: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut before = Vec::new();
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains(what) => return before,
            Ok(line) => before.push(line),
            Err(e) => panic!("no line with {what:?} within {limit:?} ({e}); saw {before:?}"),
        }
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill {pid}");
}

fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_and_sigint_end_the_wait_with_status_0() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let host = Host::new();
        let mut child = host.command(&program(), &[]).stdout(Stdio::piped()).spawn().expect("start the installer");
        let _lines = wait_for_line(&mut child, "waiting for SIGTERM");
        // Installed before it waits.
        assert!(host.bin().join("ipam-delegated").is_file());
        thread::sleep(Duration::from_millis(200));
        assert!(child.try_wait().expect("try_wait").is_none(), "it must wait, not exit");
        signal(&child, sig);
        let status = wait_with_limit(&mut child, Duration::from_secs(30));
        assert_eq!(status.code(), Some(0), "signal {sig}: {status:?}");

        // --uninstall waits the same way (the uninstalling DaemonSet's pods
        // stay, ready, once their node is clean).
        let mut child =
            host.command(&program(), &["--uninstall"]).stdout(Stdio::piped()).spawn().expect("start the uninstaller");
        let _lines = wait_for_line(&mut child, "waiting for SIGTERM");
        assert!(!host.bin().join("ipam-delegated").exists(), "{:?}", host.tree());
        signal(&child, sig);
        assert_eq!(wait_with_limit(&mut child, Duration::from_secs(30)).code(), Some(0));
    }
}

#[test]
fn a_new_build_replaces_a_running_program_which_keeps_running() {
    let host = Host::new();
    assert_success(&host.run(&program(), &[]));
    let installed = host.bin().join("ipam-delegated");
    let old = fs::read(&installed).expect("installed");

    // A process running from the installed file: the installed program's
    // own install-cni, waiting, into another tree.
    let other = Host::new();
    let mut running =
        other.command(&installed, &[]).stdout(Stdio::piped()).spawn().expect("start the installed program");
    let _lines = wait_for_line(&mut running, "waiting for SIGTERM");
    let pid = running.id();
    let exe_before = fs::read_link(format!("/proc/{pid}/exe")).expect("/proc/pid/exe");
    assert_eq!(exe_before, installed);

    // Another build: the same program with other bytes at its end (the
    // marker is still in it). Writing into the running file in place would
    // fail with ETXTBSY; the installer writes beside it and renames.
    let new_build = host.scratch("new-build").join("ipam-delegated");
    let mut bytes = old.clone();
    bytes.extend_from_slice(b"\0another build\0");
    fs::write(&new_build, &bytes).expect("new build");
    fs::set_permissions(&new_build, fs::Permissions::from_mode(0o755)).expect("chmod");
    let upgrade = host.run(&new_build, &[]);
    assert_success(&upgrade);
    assert!(stdout(&upgrade).contains(&format!("installed {}", installed.display())), "{}", stdout(&upgrade));

    // The new file is complete, and the old process still runs from the old inode.
    assert_eq!(fs::read(&installed).expect("installed"), bytes);
    assert!(running.try_wait().expect("try_wait").is_none(), "the running program was ended");
    let exe_after = fs::read_link(format!("/proc/{pid}/exe")).expect("/proc/pid/exe");
    assert!(exe_after.display().to_string().ends_with("(deleted)"), "{}", exe_after.display());
    signal(&running, libc::SIGTERM);
    assert_eq!(wait_with_limit(&mut running, Duration::from_secs(30)).code(), Some(0));

    // And the old build installs back over the new one: builds of ours are
    // replaced without --force.
    assert_success(&host.run(&program(), &[]));
    assert_eq!(fs::read(&installed).expect("installed"), old);
}

#[test]
fn a_foreign_file_is_refused_and_nothing_changes_unless_force() {
    let host = Host::new();
    let foreign = host.bin().join("ipam-ds-pool");
    fs::write(&foreign, "#!/bin/sh\necho another plugin\n").expect("foreign plugin");
    fs::set_permissions(&foreign, fs::Permissions::from_mode(0o755)).expect("chmod");
    let before = host.tree();
    let refused = host.run(&program(), &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains(&foreign.display().to_string()) && err.contains("--force"), "{err}");
    assert!(err.contains("not an ipam-delegated build"), "{err}");
    assert_eq!(host.tree(), before, "a refused install changes nothing");

    // A conflist of the same name with other contents is refused too.
    let source = conflist(&host.scratch("config"), "net.conflist", "net");
    fs::write(host.conf_dir().join("net.conflist"), "{\"name\": \"someone else's\"}").expect("foreign conflist");
    let refused = host.run(&program(), &[&format!("--conflist={}", source.display())]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&host.conf_dir().join("net.conflist").display().to_string()),
        "{}",
        stderr(&refused)
    );

    // --force replaces them.
    let forced = host.run(&program(), &["--force", &format!("--conflist={}", source.display())]);
    assert_success(&forced);
    assert_eq!(fs::read_link(&foreign).ok(), Some(PathBuf::from("ipam-delegated")));
    assert_eq!(fs::read(host.conf_dir().join("net.conflist")).expect("conflist"), fs::read(&source).expect("source"));
}

/// The DaemonSet mounts the Secret of the optional etcd as optional: absent,
/// its volume is an empty directory, and nothing is copied; a directory
/// that is not there at all is a mistake.
#[test]
fn an_empty_etcd_secret_copies_nothing_and_a_missing_one_is_refused() {
    let host = Host::new();
    let empty = host.scratch("secret");
    let out = host.run(&program(), &[&format!("--etcd-secret={}", empty.display())]);
    assert_success(&out);
    assert!(stdout(&out).contains(&format!("no etcd files: {} is empty", empty.display())), "{}", stdout(&out));
    assert!(!host.etcd_dir().exists(), "{:?}", host.tree());

    let missing = host.root.join("no-such-secret");
    let out = host.run(&program(), &[&format!("--etcd-secret={}", missing.display())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(&missing.display().to_string()), "{}", stderr(&out));
}

#[test]
fn node_name_must_be_set_and_a_name() {
    let host = Host::new();
    let missing = output(host.command(&program(), &["--once"]).env_remove("NODE_NAME"));
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("NODE_NAME is not set"), "{}", stderr(&missing));
    let bad = output(host.command(&program(), &["--once"]).env("NODE_NAME", "a node"));
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("is not a node name"), "{}", stderr(&bad));
    assert!(!host.bin().join("ipam-delegated").exists(), "{:?}", host.tree());

    // A new name (the node file is ours) is written over the old one.
    assert_success(&host.run(&program(), &[]));
    let renamed = output(host.command(&program(), &["--once"]).env("NODE_NAME", "node-b"));
    assert_success(&renamed);
    assert_eq!(fs::read_to_string(host.node_file()).expect("node file"), "node-b\n");
}

#[test]
fn a_conflist_must_be_a_network_configuration_libcni_loads() {
    let host = Host::new();
    let config = host.scratch("config");
    fs::write(config.join("net.yaml"), "{}").expect("write");
    fs::write(config.join("broken.conflist"), "{\"name\": ").expect("write");
    for (file, reason) in
        [("net.yaml", "*.conflist"), ("broken.conflist", "not JSON"), ("missing.conf", "missing.conf")]
    {
        let path = config.join(file);
        let out = host.run(&program(), &[&format!("--conflist={}", path.display())]);
        assert_eq!(out.status.code(), Some(1), "{file}");
        assert!(
            stderr(&out).contains(&path.display().to_string()) && stderr(&out).contains(reason),
            "{}",
            stderr(&out)
        );
    }
    // Two sources of one name would be one file.
    let other = host.scratch("other");
    let (a, b) = (conflist(&config, "net.conflist", "a"), conflist(&other, "net.conflist", "b"));
    let out = host.run(&program(), &[&format!("--conflist={}", a.display()), &format!("--conflist={}", b.display())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("one file name, net.conflist"), "{}", stderr(&out));
    assert!(!host.bin().join("ipam-delegated").exists(), "nothing installed: {:?}", host.tree());

    let usage = output(Command::new(program()).args(["install-cni", "--bin-dir=relative/bin", "--once"]));
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
    assert!(stderr(&usage).contains("expected an absolute path"), "{}", stderr(&usage));
}

#[test]
fn uninstall_removes_exactly_what_was_installed() {
    let host = Host::new();
    // The host's own files, which must stay.
    fs::write(host.bin().join("bridge"), "a plugin of the host").expect("bridge");
    fs::write(host.conf_dir().join("00-multus.conf"), "{}").expect("multus conf");
    let before = host.tree();

    let secret = host.scratch("secret");
    kubelet_volume(&secret, &[("ca.crt", "CA\n")]);
    let config = host.scratch("config");
    let kept = conflist(&config, "edited.conflist", "edited");
    let removed = conflist(&config, "net.conflist", "net");
    let args = [
        format!("--etcd-secret={}", secret.display()),
        format!("--conflist={}", kept.display()),
        format!("--conflist={}", removed.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_success(&host.run(&program(), &args));
    // An administrator edits one of the installed files: it is no longer ours.
    fs::write(host.conf_dir().join("edited.conflist"), "{\"name\": \"edited by hand\"}").expect("edit");

    let out = host.run(&program(), &["--uninstall"]);
    assert_success(&out);
    let text = stdout(&out);
    assert!(text.contains(&format!("kept {}", host.conf_dir().join("edited.conflist").display())), "{text}");
    let mut expected = before.clone();
    expected.push("etc/cni/net.d/edited.conflist 644 26 bytes".to_string());
    expected.sort();
    let mut after = host.tree();
    after.sort();
    assert_eq!(after, expected, "{text}");

    // Again: nothing left to remove, and that is no error.
    let again = host.run(&program(), &["--uninstall"]);
    assert_success(&again);
    assert!(stdout(&again).contains("nothing to remove"), "{}", stdout(&again));
}

#[test]
fn a_build_of_ours_in_place_is_taken_over_and_a_foreign_symlink_is_not() {
    let host = Host::new();
    // scripts/install's layout of an older build, but for one delegate copied
    // file by file, and one name a symlink elsewhere (a package's file).
    let mut older = fs::read(program()).expect("program");
    older.extend_from_slice(b"\0an older build\0");
    fs::write(host.bin().join("ipam-delegated"), &older).expect("older build");
    fs::write(host.bin().join("ipam-ds-pool"), &older).expect("a copy");
    symlink("ipam-delegated", host.bin().join("ipam-ds-cluster")).expect("link");
    symlink("/usr/lib/cni/ipam-delegated", host.bin().join("ipam-da-static")).expect("foreign link");
    let before = host.tree();
    let refused = host.run(&program(), &[]);
    assert_eq!(refused.status.code(), Some(1));
    let err = stderr(&refused);
    assert!(err.contains("ipam-da-static is a symbolic link (to /usr/lib/cni/ipam-delegated)"), "{err}");
    assert!(!err.contains("ipam-ds-pool"), "a copy of ours is ours: {err}");
    assert_eq!(host.tree(), before);

    fs::remove_file(host.bin().join("ipam-da-static")).expect("remove the foreign link");
    assert_success(&host.run(&program(), &[]));
    assert_eq!(fs::read(host.bin().join("ipam-delegated")).expect("program"), fs::read(program()).expect("program"));
    for delegate in support::suite_delegates() {
        assert_eq!(fs::read_link(host.bin().join(&delegate)).ok(), Some(PathBuf::from("ipam-delegated")), "{delegate}");
    }
    // Taken over: --uninstall removes them too.
    assert_success(&host.run(&program(), &["--uninstall"]));
    assert_eq!(fs::read_dir(host.bin()).expect("bin").count(), 0, "{:?}", host.tree());
}

/// A CA certificate (the kube client's test data): the plugins' reader
/// parses the CA it is given.
fn test_ca() -> String {
    let path = support::repo().join("ipam-ds-cluster/src/kube/testdata/ca.crt");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_kubeconfig_is_the_pods_credentials_private_and_follows_the_refreshed_token_until_uninstalled() {
    let host = Host::new();
    let before = host.tree();
    let account = host.scratch("serviceaccount");
    let ca = test_ca();
    service_account(&account, "token-1\n", &ca);
    let mut child =
        host.with_kubeconfig(&account, "10.96.0.1", 443, &[]).stdout(Stdio::piped()).spawn().expect("the installer");
    let lines = wait_for_line(&mut child, "waiting for SIGTERM");

    // Private, and what the plugins' own reader takes: the in-cluster
    // server, the pod's CA and token.
    let kubeconfig = host.kubeconfig();
    assert_eq!(mode(&kubeconfig), 0o600, "{:?}", host.tree());
    let read = Kubeconfig::read(&kubeconfig).unwrap_or_else(|e| panic!("the plugins' reader: {e}"));
    assert_eq!((read.server.host.as_str(), read.server.port), ("10.96.0.1", 443));
    assert_eq!(read.token.as_deref(), Some("token-1"));
    assert_eq!(read.ca.certificates.len(), 1, "{}", read.ca.setting);
    let text = fs::read_to_string(&kubeconfig).expect("kubeconfig");
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let embedded = yaml["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("the CA, embedded");
    let embedded = base64::engine::general_purpose::STANDARD.decode(embedded).expect("base64");
    assert_eq!(String::from_utf8_lossy(&embedded), ca, "the pod's ca.crt, byte for byte");

    // The kubelet refreshes the token in the pod: the host's file follows
    // within a poll, replaced whole (a new inode), still private.
    let inode = fs::metadata(&kubeconfig).expect("stat").ino();
    service_account(&account, "token-2\n", &ca);
    let took = wait_for_token(&kubeconfig, "token-2", TOKEN_POLL * 5);
    eprintln!("the refreshed token reached the host's kubeconfig in {took:?}");
    assert_ne!(fs::metadata(&kubeconfig).expect("stat").ino(), inode);
    assert_eq!(mode(&kubeconfig), 0o600);
    let said = line_with(&lines, "token or CA changed", Duration::from_secs(10));
    assert!(said.is_empty(), "the installer said, before the token changed: {said:?}");
    assert!(!host.tree().iter().any(|p| p.contains(".install-cni-")), "{:?}", host.tree());

    // A token file the kubelet is midway through (empty) is said, and the
    // host keeps the last good kubeconfig.
    service_account(&account, "", &ca);
    thread::sleep(TOKEN_POLL * 2);
    assert_eq!(token_of(&kubeconfig), "token-2");
    service_account(&account, "token-3", &ca);
    wait_for_token(&kubeconfig, "token-3", TOKEN_POLL * 5);
    signal(&child, libc::SIGTERM);
    assert_eq!(wait_with_limit(&mut child, Duration::from_secs(30)).code(), Some(0));

    // Started again (a restarted container): the file of the token before
    // is ours, and replaced.
    service_account(&account, "token-4", &ca);
    let again = output(&mut host.with_kubeconfig(&account, "fd00::1", 6443, &["--once"]));
    assert_success(&again);
    let read = Kubeconfig::read(&kubeconfig).unwrap_or_else(|e| panic!("the plugins' reader: {e}"));
    assert_eq!((read.server.host.as_str(), read.server.port), ("fd00::1", 6443), "an IPv6 service address");
    assert_eq!(read.token.as_deref(), Some("token-4"));

    // --uninstall removes it with the rest: the host is as before.
    let out = host.run(&program(), &["--uninstall"]);
    assert_success(&out);
    assert!(stdout(&out).contains(&format!("removed {}", kubeconfig.display())), "{}", stdout(&out));
    assert_eq!(host.tree(), before, "{}", stdout(&out));
}

#[test]
fn without_the_in_cluster_environment_or_a_token_nothing_is_installed() {
    let host = Host::new();
    let before = host.tree();
    let account = host.scratch("serviceaccount");
    service_account(&account, "token-1", &test_ca());
    let args = [
        format!("--kubeconfig={}", host.kubeconfig().display()),
        format!("--service-account-dir={}", account.display()),
        "--once".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outside = output(&mut host.command(&program(), &args));
    assert_eq!(outside.status.code(), Some(1), "{}", stderr(&outside));
    assert!(stderr(&outside).contains("KUBERNETES_SERVICE_HOST is not set"), "{}", stderr(&outside));

    let bad_port = output(&mut host.with_kubeconfig(&account, "10.96.0.1", 0, &["--once"]));
    assert_eq!(bad_port.status.code(), Some(1));
    assert!(stderr(&bad_port).contains("KUBERNETES_SERVICE_PORT \"0\""), "{}", stderr(&bad_port));

    service_account(&account, " \n", &test_ca());
    let empty = output(&mut host.with_kubeconfig(&account, "10.96.0.1", 443, &["--once"]));
    assert_eq!(empty.status.code(), Some(1));
    let err = stderr(&empty);
    assert!(err.contains(&account.join("token").display().to_string()) && err.contains("empty"), "{err}");

    service_account(&account, "token-1", "not a certificate\n");
    let no_ca = output(&mut host.with_kubeconfig(&account, "10.96.0.1", 443, &["--once"]));
    assert_eq!(no_ca.status.code(), Some(1));
    let err = stderr(&no_ca);
    assert!(err.contains(&account.join("ca.crt").display().to_string()) && err.contains("no PEM certificate"), "{err}");
    assert_eq!(host.tree(), before, "a refused install changes nothing");
}

/// The plugins on the host call a real API server (RBAC enforced, the
/// manifests' role) with the kubeconfig the installer wrote from the pod's
/// token; a token the server refuses reaches the host too, and every call
/// then fails with error 7 naming the kubeconfig, having handed out
/// nothing; the kubelet's next token makes the calls work again.
#[test]
fn plugins_call_the_api_server_with_the_installers_kubeconfig_and_a_refused_token_is_error_7_naming_it() {
    let c = Cluster::on_kubernetes(blue_pools(), 30.0);
    let port: u16 = c.store.api.server().rsplit(':').next().and_then(|p| p.parse().ok()).expect("the server's port");
    let ca = fs::read_to_string(c.store.api.ca_file()).expect("the API server's CA");
    let host = Host::new();
    let account = host.scratch("serviceaccount");
    service_account(&account, &token_of(c.store.plugins_kubeconfig()), &ca);
    let mut child =
        host.with_kubeconfig(&account, "127.0.0.1", port, &[]).stdout(Stdio::piped()).spawn().expect("the installer");
    let _lines = wait_for_line(&mut child, "waiting for SIGTERM");
    let kubeconfig = host.kubeconfig();
    let mut config = c.config("n1");
    config["ipam"]["cluster"]["kubernetes"] = json!({"kubeconfig": kubeconfig, "timeout": 5});

    let first = added(&c.run("ADD", "p1", &config, &[]), "an ADD with the installer's kubeconfig");
    assert!(c.blocks_of("n1").iter().any(|b| b.contains(first)), "{first} in none of n1's blocks: {:?}", c.blocks());

    // A token the server does not accept (another signature).
    let refused = token_of(&forged_token(c.store.plugins_kubeconfig(), c.dir.path()));
    service_account(&account, &refused, &ca);
    wait_for_token(&kubeconfig, &refused, TOKEN_POLL * 5);
    let out = c.run("ADD", "p2", &config, &[]);
    let (code, msg) = failure(&out);
    assert_eq!(code, 7, "{}", brief(&out));
    assert!(msg.contains(&kubeconfig.display().to_string()), "the message names the kubeconfig: {msg}");
    assert!(msg.contains("does not accept these credentials"), "{msg}");
    assert_eq!(c.attached("n1").len(), 1, "the refused ADD handed out nothing: {:?}", c.attached("n1"));

    // The kubelet's next token: the calls work again.
    let (namespace, name) = plugins_account();
    let fresh = token_of(&c.store.api.service_account_kubeconfig(&namespace, &name));
    service_account(&account, &fresh, &ca);
    wait_for_token(&kubeconfig, &fresh, TOKEN_POLL * 5);
    let second = added(&c.run("ADD", "p2", &config, &[]), "an ADD after the refresh");
    assert_ne!(first, second);
    signal(&child, libc::SIGTERM);
    assert_eq!(wait_with_limit(&mut child, Duration::from_secs(30)).code(), Some(0));
}

/// In a container the installer is PID 1, for which the kernel drops
/// signals that have no handler: the wait must still end on SIGTERM.
#[test]
#[ignore = "needs root: runs the installer as PID 1 of a PID namespace (unshare); scripts/test runs it with the end-to-end tests"]
fn sigterm_ends_the_wait_of_pid_1_in_a_pid_namespace() {
    let host = Host::new();
    let mut command = Command::new("unshare");
    command.args(["--pid", "--fork", "--kill-child"]).arg(program()).args(host.args(&[]));
    command.env_remove("CNI_COMMAND").env("NODE_NAME", "node-a").stdout(Stdio::piped());
    let mut unshare = command.spawn().expect("unshare (util-linux), as root");
    let _lines = wait_for_line(&mut unshare, "waiting for SIGTERM");
    let children = fs::read_to_string(format!("/proc/{}/task/{}/children", unshare.id(), unshare.id()))
        .expect("unshare's children");
    let pid: libc::pid_t =
        children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("the installer's pid");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).expect("NSpid");
    assert!(nspid.split_whitespace().last() == Some("1"), "not PID 1 in its namespace: {nspid}");
    // SAFETY: kill only sends a signal to our own grandchild.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert_eq!(wait_with_limit(&mut unshare, Duration::from_secs(30)).code(), Some(0));
}
