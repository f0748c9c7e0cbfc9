//! A real etcd for tests, one per test: its own loopback ports and temporary
//! data directory, so tests run in parallel and leave nothing behind. It is
//! the Debian etcd from PATH; a missing etcd fails the test rather than
//! skipping it, so a machine without etcd cannot pass by testing nothing.

use std::collections::{BTreeMap, HashSet};
use std::fs::OpenOptions;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod certs;
mod cluster;

pub use cluster::TestEtcdCluster;

use super::{Client, Error, RangeRequest, Settings, TlsFiles};

/// A single member elects itself in about a second; the rest is slack for a
/// loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The methods the benchmark compares with the client's own counts.
const HANDLED_METHODS: [&str; 6] = ["Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "Authenticate"];

pub struct TestEtcd {
    dir: tempfile::TempDir,
    member: Member,
    /// Root's credentials once `enable_auth` ran, for `client` and `dump`.
    root: Mutex<Option<(String, String)>>,
}

impl TestEtcd {
    pub fn start() -> TestEtcd {
        TestEtcd::start_with(false)
    }

    /// The client must present a certificate signed by the test CA, as a
    /// hardened cluster would require.
    pub fn start_tls() -> TestEtcd {
        TestEtcd::start_with(true)
    }

    fn start_with(tls: bool) -> TestEtcd {
        let etcd = etcd_path();
        let dir = temp_dir("test-etcd-");
        if tls {
            certs::make(dir.path());
        }
        let member = Member::new("t", etcd, dir.path().to_path_buf(), tls);
        let mut t = TestEtcd { dir, member, root: Mutex::new(None) };
        // Another process may take a port between our probe and etcd's bind:
        // then new ports and a fresh data dir, a few times.
        for attempt in 1.. {
            let initial_cluster = t.member.initial_cluster_entry();
            let extra = t.tls_args();
            t.member.spawn(&initial_cluster, &extra);
            match t.member.wait_ready(&t.settings()) {
                Ok(()) => return t,
                Err(why) if attempt < 3 && t.member.port_taken() => {
                    t.member.stop();
                    eprintln!("test etcd: {why}; trying other ports");
                    t.member.new_ports();
                }
                Err(why) => t.member.fail(&why),
            }
        }
        unreachable!()
    }

    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    pub fn tls_files(&self) -> TlsFiles {
        if !self.member.tls {
            return TlsFiles::default();
        }
        let file = |name: &str| Some(self.dir.path().join(name));
        TlsFiles { ca: file("ca.crt"), cert: file("client.crt"), key: file("client.key") }
    }

    /// Settings for a client of this etcd, without credentials.
    pub fn settings(&self) -> Settings {
        Settings { tls: self.tls_files(), ..settings(vec![self.endpoint()]) }
    }

    /// A client with root's credentials once auth is enabled.
    pub fn client(&self) -> Client {
        let mut settings = self.settings();
        if let Some((user, password)) = self.root.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            settings.username = Some(user);
            settings.password = Some(password);
        }
        Client::new(settings).expect("client of the test etcd")
    }

    /// SIGSTOP: etcd keeps its sockets, so connections are accepted by the
    /// kernel and never answered, the hardest case for a timeout.
    pub fn pause(&self) {
        self.member.pause();
    }

    pub fn resume(&self) {
        self.member.resume();
    }

    pub fn kill(&mut self) {
        self.member.stop();
    }

    /// Same ports and data: what a cluster member coming back looks like.
    pub fn restart(&mut self) {
        self.member.stop();
        let initial_cluster = self.member.initial_cluster_entry();
        let extra = self.tls_args();
        self.member.spawn(&initial_cluster, &extra);
        if let Err(why) = self.member.wait_ready(&self.settings()) {
            self.member.fail(&why);
        }
    }

    /// Same ports, empty data: etcd after its data was lost.
    pub fn wipe(&mut self) {
        self.member.stop();
        std::fs::remove_dir_all(self.member.data_dir()).expect("remove the test etcd's data");
        self.restart();
    }

    /// A snapshot of etcd's data now (`etcdctl snapshot save`).
    pub fn snapshot(&self, file: &std::path::Path) {
        self.etcdctl(&["snapshot", "save", &file.display().to_string()]);
    }

    /// Same ports, the data of `file` (`etcdctl snapshot restore`): etcd
    /// restored from an older backup.
    pub fn restore(&mut self, file: &std::path::Path) {
        self.member.stop();
        std::fs::remove_dir_all(self.member.data_dir()).expect("remove the test etcd's data");
        self.etcdctl(&[
            "snapshot",
            "restore",
            &file.display().to_string(),
            "--name=t",
            &format!("--data-dir={}", self.member.data_dir().display()),
            &format!("--initial-cluster={}", self.member.initial_cluster_entry()),
            &format!("--initial-advertise-peer-urls={}", self.member.peer_url()),
        ]);
        self.restart();
    }

    /// Root gets `password` when `user` is root, else a password of its own.
    pub fn enable_auth(&self, user: &str, password: &str) {
        let root_password = if user == "root" { password } else { "root-password" };
        self.etcdctl(&["user", "add", &format!("root:{root_password}")]);
        if user != "root" {
            self.etcdctl(&["user", "add", &format!("{user}:{password}")]);
            self.etcdctl(&["role", "add", "readwrite"]);
            self.etcdctl(&["role", "grant-permission", "readwrite", "--prefix=true", "readwrite", ""]);
            self.etcdctl(&["user", "grant-role", user, "readwrite"]);
        }
        self.etcdctl(&["auth", "enable"]);
        *self.root.lock().unwrap_or_else(|e| e.into_inner()) = Some(("root".into(), root_password.into()));
    }

    /// etcd's Prometheus metrics, from the plain-HTTP metrics URL it is
    /// started with (the client one speaks gRPC to the client under test).
    pub fn metrics(&self) -> String {
        http_get(self.member.metrics_port, "/metrics").unwrap_or_else(|e| panic!("GET /metrics: {e}"))
    }

    /// etcd's own count of requests per gRPC method, whatever their outcome.
    pub fn handled(&self) -> BTreeMap<String, u64> {
        handled(&self.metrics())
    }

    pub fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        dump(&self.client(), prefix)
    }

    fn tls_args(&self) -> Vec<String> {
        if !self.member.tls {
            return Vec::new();
        }
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        vec![
            format!("--cert-file={}", path("server.crt")),
            format!("--key-file={}", path("server.key")),
            format!("--trusted-ca-file={}", path("ca.crt")),
            "--client-cert-auth".into(),
        ]
    }

    fn etcdctl(&self, args: &[&str]) {
        let etcdctl = find_in_path("etcdctl")
            .unwrap_or_else(|| panic!("etcdctl not found in PATH: install Debian's etcd-client"));
        let mut cmd = Command::new(etcdctl);
        scrub_env(&mut cmd, "ETCDCTL");
        cmd.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", self.endpoint()));
        if let TlsFiles { ca: Some(ca), cert: Some(cert), key: Some(key) } = self.tls_files() {
            cmd.arg(format!("--cacert={}", ca.display()))
                .arg(format!("--cert={}", cert.display()))
                .arg(format!("--key={}", key.display()));
        }
        let out = cmd.args(args).stdin(Stdio::null()).output().expect("etcdctl runs");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.member.stop();
    }
}

/// One etcd process, of a `TestEtcd` or a `TestEtcdCluster`: its ports, its
/// directory (data and log) and the process itself.
struct Member {
    name: String,
    etcd: PathBuf,
    dir: PathBuf,
    tls: bool,
    client_port: u16,
    peer_port: u16,
    /// Plain HTTP whatever the client URLs, for `metrics`.
    metrics_port: u16,
    /// Runs as a user (and group) of its own, with its directory chowned
    /// to it, so that firewall rules can tell its packets apart
    /// (`--uid-owner`): see `uid`.
    own_uid: bool,
    child: Option<Child>,
    paused: AtomicBool,
}

impl Member {
    fn new(name: &str, etcd: PathBuf, dir: PathBuf, tls: bool) -> Member {
        Member {
            name: name.into(),
            etcd,
            dir,
            tls,
            client_port: free_port(),
            peer_port: free_port(),
            metrics_port: free_port(),
            own_uid: false,
            child: None,
            paused: AtomicBool::new(false),
        }
    }

    fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// Its own user, when it runs as one: no account, a number made from its
    /// client port (unique on this machine while the member runs).
    fn uid(&self) -> Option<u32> {
        const UID_BASE: u32 = 2_100_000_000;
        self.own_uid.then(|| UID_BASE + u32::from(self.client_port))
    }

    /// `name=peer-url`, as `--initial-cluster` lists members.
    fn initial_cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// After a port was taken under us: other ports, and no data.
    fn new_ports(&mut self) {
        self.client_port = free_port();
        self.peer_port = free_port();
        self.metrics_port = free_port();
        let _ = std::fs::remove_dir_all(self.data_dir());
    }

    fn spawn(&mut self, initial_cluster: &str, extra: &[String]) {
        let url = self.endpoint();
        let peer = self.peer_url();
        let mut log = OpenOptions::new().create(true).append(true).open(self.log_path()).expect("etcd log file");
        writeln!(log, "--- starting etcd {} on {url}", self.name).expect("etcd log file");
        let data = self.data_dir();
        let mut cmd = Command::new(&self.etcd);
        cmd.arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg(format!("--listen-metrics-urls=http://127.0.0.1:{}", self.metrics_port))
            .args(["--logger=zap", "--log-outputs=stderr", "--log-level=error"])
            .args(extra);
        if let Some(uid) = self.uid() {
            std::os::unix::fs::chown(&self.dir, Some(uid), Some(uid)).expect("chown the member's directory");
            // std drops the supplementary groups too when it changes the uid.
            cmd.uid(uid).gid(uid);
        }
        // etcd reads ETCD_* as flags: the caller's environment must not change this etcd.
        scrub_env(&mut cmd, "ETCD");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.etcd.display()));
        self.child = Some(child);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Until this member answers a (linearizable) read, so has a leader.
    fn wait_ready(&mut self, settings: &Settings) -> Result<(), String> {
        let client = Client::new(Settings {
            endpoints: vec![self.endpoint()],
            timeout: Duration::from_secs(1),
            ..settings.clone()
        })
        .map_err(|e| format!("client settings: {e}"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("not tried");
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd {} exited: {status}", self.name));
                }
            }
            // Refused (auth enabled, no credentials) is an answer too.
            match client.range(&RangeRequest::key("test-etcd-ready")) {
                Ok(_) | Err(Error::Refused { .. }) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("etcd {} gave no answer within {START_TIMEOUT:?}: {last}", self.name))
    }

    /// Lost the race for one of its ports to another process.
    fn port_taken(&self) -> bool {
        self.log_tail().contains("address already in use")
    }

    fn fail(&mut self, why: &str) -> ! {
        self.stop();
        panic!("test etcd did not come up: {why}\n--- {} (tail) ---\n{}", self.log_path().display(), self.log_tail())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Returns once every thread of etcd is stopped: kill(2) only queues
    /// SIGSTOP, and on a loaded machine a thread of etcd could still answer a
    /// request sent just after it (seen once: a range answered "paused").
    fn pause(&self) {
        self.signal(libc::SIGSTOP);
        self.paused.store(true, Ordering::SeqCst);
        let Some(child) = self.child.as_ref() else { return };
        let tasks = PathBuf::from(format!("/proc/{}/task", child.id()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_stopped(&tasks) {
            assert!(Instant::now() < deadline, "etcd {} did not stop within 10 s of SIGSTOP", self.name);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn resume(&self) {
        self.signal(libc::SIGCONT);
        self.paused.store(false, Ordering::SeqCst);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("test etcd is not running");
        send_signal(child, signal);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.paused.swap(false, Ordering::SeqCst) {
                send_signal(&child, libc::SIGCONT);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn etcd_path() -> PathBuf {
    find_in_path("etcd").unwrap_or_else(|| panic!("etcd not found in PATH: install Debian's etcd-server"))
}

fn temp_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().expect("temporary directory for etcd")
}

/// Client settings without credentials or TLS.
fn settings(endpoints: Vec<String>) -> Settings {
    Settings { endpoints, timeout: Duration::from_secs(5), username: None, password: None, tls: TlsFiles::default() }
}

/// etcd reads `ETCD_*` (etcdctl `ETCDCTL_*`) as flags: the caller's
/// environment must not change the etcd under test.
fn scrub_env(cmd: &mut Command, prefix: &str) {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with(prefix) {
            cmd.env_remove(name);
        }
    }
}

fn dump(client: &Client, prefix: &str) -> Vec<(String, String)> {
    let r = client.range(&RangeRequest::prefix(prefix)).unwrap_or_else(|e| panic!("dump {prefix:?}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    r.kvs.iter().map(|kv| (text(&kv.key), text(&kv.value))).collect()
}

/// Whether every thread under `tasks` (`/proc/PID/task`) is stopped: its
/// state in `stat`, after the parenthesised command name, is `T`.
fn all_stopped(tasks: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(tasks) else { return false };
    entries.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
    })
}

fn send_signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: kill(2) has no memory effects; the pid is our child's, not yet
    // waited for (`Child::wait` takes it out of TestEtcd first), so not reused.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal}): {}", std::io::Error::last_os_error());
}

/// The body of a 200 answer to a GET on the loopback, over HTTP/1.0 (so the
/// server closes the connection after the body, which is not chunked).
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("not HTTP: {answer:.200}"))?;
    match head.lines().next() {
        Some(status) if status.split(' ').nth(1) == Some("200") => Ok(body.to_string()),
        status => Err(format!("answered {status:?}")),
    }
}

/// Sums `grpc_server_handled_total` over the codes, per method of interest.
fn handled(metrics: &str) -> BTreeMap<String, u64> {
    let mut sums: BTreeMap<String, u64> = HANDLED_METHODS.iter().map(|m| (m.to_string(), 0)).collect();
    for line in metrics.lines().filter(|l| l.starts_with("grpc_server_handled_total{")) {
        let method = line.split("grpc_method=\"").nth(1).and_then(|rest| rest.split('"').next());
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(sum), Some(value)) = (method.and_then(|m| sums.get_mut(m)), value) {
            *sum += value as u64;
        }
    }
    sums
}

/// Ports handed out by this process, never twice: tests start etcds in
/// parallel, and a port probed free is free only until someone binds it.
static PORTS: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

fn free_port() -> u16 {
    let mut ports = PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let ports = ports.get_or_insert_with(HashSet::new);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("bound address").port();
        if ports.insert(port) {
            return port;
        }
    }
}

/// The executable `name` in PATH, if any.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn handled_sums_codes_per_method() {
        let metrics = "# TYPE grpc_server_handled_total counter\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 5\n\
            grpc_server_handled_total{grpc_code=\"Unavailable\",grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 3\n\
            grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 9\n\
            grpc_server_started_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 7\n";
        let h = super::handled(metrics);
        assert_eq!((h["Range"], h["Txn"], h["Put"], h.get("Watch")), (7, 3, 0, None));
    }
}
