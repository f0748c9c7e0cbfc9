//! A real Kubernetes API server for the tests: kube-apiserver over a real
//! etcd, both in one process (`kube-test-server serve`, built from the Go
//! module tests/kube, which pins k8s.io/kubernetes, once per change by
//! `support::go`), on a free 127.0.0.1 port and a temporary directory of
//! its own. Node and RBAC authorization are enforced, as in a real cluster;
//! ServiceAccount tokens are issued. No controller-manager runs: nothing
//! creates a namespace's `default` ServiceAccount, schedules a pod or
//! collects garbage.
//!
//! The process (and whatever it starts) is killed, as a group, when the
//! `KubeApi` is dropped: at the end of a test and when it panics.
//!
//! Used by several test files through `mod kube_harness;`, so not every
//! item is used by every one of them.
#![allow(dead_code)]

use std::fs::{self, File};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

/// How long a start may take before the test fails (the server's own
/// bootstrap takes a few seconds; a busy 2-core machine, more).
const START_LIMIT: Duration = Duration::from_secs(180);

/// Headers of a request other than the client's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub accept: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

/// A running API server and its directory (certificates, etcd's data, the
/// kubeconfigs, the log `server.log`).
pub struct KubeApi {
    exe: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl KubeApi {
    /// Builds the server if needed, starts it, and waits until its /readyz
    /// answers ok (the bootstrap RBAC roles are in place by then).
    pub fn start() -> KubeApi {
        let exe = support::go::build("tests/kube", "kube-test", "kube-test-server");
        // Another process may take the port between our probe and the
        // server's bind: then another port, in a fresh directory.
        for attempt in 1.. {
            let dir = tempfile::Builder::new().prefix("ipam-kube-").tempdir().expect("tempdir");
            let mut api = KubeApi { exe: exe.clone(), dir, port: free_port(), child: None };
            match api.spawn() {
                Ok(()) => return api,
                Err(why) if attempt < 3 && why.contains("address already in use") => {
                    eprintln!("kube-test-server: a port was taken; trying others");
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!()
    }

    /// The server's URL, https://127.0.0.1:PORT.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The directory of the server's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kubeconfig of the cluster's admin (group system:masters, by a
    /// client certificate).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// The PEM of the CA that signed the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("pki/ca.crt")
    }

    /// Applies the objects of `files`, in order, as the admin (server-side
    /// apply; a CustomResourceDefinition is established before the objects
    /// after it, and its objects are served when this returns). Returns the list of what was applied, "applied KIND [NS/]NAME" a line.
    pub fn apply(&self, files: &[&Path]) -> String {
        let mut args = vec!["apply".into(), "--kubeconfig".into(), path_arg(&self.admin_kubeconfig())];
        args.extend(files.iter().map(|f| path_arg(f)));
        let applied = self.client(&args);
        for crd in applied.lines().filter_map(|l| l.strip_prefix("applied CustomResourceDefinition ")) {
            self.wait_until_served(crd.trim());
        }
        applied
    }

    /// Waits until the objects of the CustomResourceDefinition `name` are
    /// served: an established CRD's storage may still answer 429 ("storage
    /// is (re)initializing") for a moment, which a test's first request
    /// must not meet.
    fn wait_until_served(&self, name: &str) {
        let admin = self.admin_kubeconfig();
        let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}");
        let (status, body) = self.request(&admin, "GET", &path, None);
        assert_eq!(status, 200, "the CustomResourceDefinition {name}, just applied: {body}");
        let crd: serde_json::Value = serde_json::from_str(&body).expect("a CustomResourceDefinition");
        let spec = &crd["spec"];
        let versions = spec["versions"].as_array().into_iter().flatten();
        let served: Vec<&str> = versions.filter(|v| v["served"] == true).filter_map(|v| v["name"].as_str()).collect();
        let started = Instant::now();
        for version in served {
            let list = format!(
                "/apis/{}/{version}/{}?limit=1",
                spec["group"].as_str().unwrap_or_default(),
                spec["names"]["plural"].as_str().unwrap_or_default()
            );
            loop {
                let (status, body) = self.request(&admin, "GET", &list, None);
                if status == 200 {
                    break;
                }
                assert!(
                    status == 429 && started.elapsed() < START_LIMIT,
                    "GET {list} as the admin, after applying {name}: {status} {body}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Applies `yaml` (one or more objects) as the admin.
    pub fn apply_yaml(&self, yaml: &str) -> String {
        let file = tempfile::Builder::new().suffix(".yaml").tempfile_in(self.dir.path()).expect("temp file");
        fs::write(file.path(), yaml).expect("writing a manifest");
        self.apply(&[file.path()])
    }

    /// A kubeconfig with which the ServiceAccount `namespace`/`name` (which
    /// must exist) talks to this server: the server, its CA and a token
    /// issued for the account (TokenRequest, valid for an hour), as the
    /// kubelet gives one to a pod.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let out = self.dir.path().join(format!("sa-{namespace}-{name}.kubeconfig"));
        self.client(&[
            "token".into(),
            "--kubeconfig".into(),
            path_arg(&self.admin_kubeconfig()),
            format!("--namespace={namespace}"),
            format!("--service-account={name}"),
            format!("--out={}", out.display()),
        ]);
        out
    }

    /// One HTTP request with the credentials of `kubeconfig`; the status
    /// code and the body.
    pub fn request(
        &self,
        kubeconfig: &Path,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> (u16, String) {
        self.request_with(kubeconfig, method, path, body, Headers::default())
    }

    /// [`KubeApi::request`] with `headers`: an `Accept` (a server-side
    /// Table, say) rather than the server's default, a body's
    /// `Content-Type` other than `application/json` (a merge patch's).
    pub fn request_with(
        &self,
        kubeconfig: &Path,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: Headers,
    ) -> (u16, String) {
        let mut args = vec!["request".into(), "--kubeconfig".into(), path_arg(kubeconfig)];
        if let Some(accept) = headers.accept {
            args.push(format!("--accept={accept}"));
        }
        if let Some(content_type) = headers.content_type {
            args.push(format!("--content-type={content_type}"));
        }
        args.extend([method.into(), path.into()]);
        let body_file = body.map(|b| {
            let file = tempfile::Builder::new().suffix(".json").tempfile_in(self.dir.path()).expect("temp file");
            fs::write(file.path(), b.to_string()).expect("writing a request body");
            file
        });
        if let Some(file) = &body_file {
            args.push(path_arg(file.path()));
        }
        let out = self.client(&args);
        let (status, body) = out.split_once('\n').unwrap_or((&out, ""));
        let status = status.parse().unwrap_or_else(|_| panic!("request {method} {path}: no status code in {out:?}"));
        (status, body.trim_end().to_string())
    }

    /// Whether the user of `kubeconfig` may `verb` `resource` (as kubectl
    /// names it: RESOURCE[.GROUP][/SUBRESOURCE]) in `namespace` (None:
    /// cluster-wide), by the API server's own answer to a
    /// SelfSubjectAccessReview.
    pub fn can_i(&self, kubeconfig: &Path, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
        let mut args = vec!["can-i".into(), "--kubeconfig".into(), path_arg(kubeconfig)];
        if let Some(ns) = namespace {
            args.push(format!("--namespace={ns}"));
        }
        args.extend([verb.to_string(), resource.to_string()]);
        let out = self.client(&args);
        match out.split_whitespace().next() {
            Some("yes") => true,
            Some("no") => false,
            _ => panic!("can-i {verb} {resource}: {out:?}"),
        }
    }

    /// Kills the server (the whole process group, as `kill -9`), keeping
    /// its directory and port for [`KubeApi::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: a plain syscall, on the group the child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// A backup of the server's etcd, as an operator takes one: the server
    /// stopped (kill -9), its etcd data directory copied, the server
    /// started again. The copy's path, for [`KubeApi::restore`].
    pub fn backup(&mut self) -> PathBuf {
        self.stop();
        let copy = self.dir.path().join(format!("etcd-backup-{}", free_port()));
        copy_dir(&self.dir.path().join("etcd"), &copy);
        self.restart();
        copy
    }

    /// The server's etcd restored from `backup` (see [`KubeApi::backup`]):
    /// stopped, its etcd data replaced by the copy, started again.
    pub fn restore(&mut self, backup: &Path) {
        self.stop();
        let data = self.dir.path().join("etcd");
        fs::remove_dir_all(&data).unwrap_or_else(|e| panic!("{}: {e}", data.display()));
        copy_dir(backup, &data);
        self.restart();
    }

    /// Starts the server again on the same directory and port: the same
    /// etcd data, CA, and signing key (tokens issued before stay valid).
    pub fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.spawn() {
            panic!("{why}");
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join("server.log");
        let log = File::options().create(true).append(true).open(&log_path).expect("server.log");
        // The previous run's, if any: the server writes it anew once ready.
        let ready = self.dir.path().join("ready");
        match fs::remove_file(&ready) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{}: {e}", ready.display()),
            _ => {}
        }
        let child = Command::new(&self.exe)
            .arg("serve")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg(format!("--port={}", self.port))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("server.log"))
            .stderr(log)
            // A group of its own, killed as one.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.exe.display()));
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if ready.is_file() {
                return Ok(());
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!(
                    "kube-test-server serve on port {} exited ({status}) before it was ready; its log:\n{}",
                    self.port,
                    tail(&log_path)
                ));
            }
            if started.elapsed() > START_LIMIT {
                self.stop();
                return Err(format!(
                    "kube-test-server serve on port {} was not ready within {START_LIMIT:?}; its log:\n{}",
                    self.port,
                    tail(&log_path)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs one client command of kube-test-server; its stdout.
    fn client(&self, args: &[String]) -> String {
        let out = Command::new(&self.exe)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.exe.display()));
        assert!(
            out.status.success(),
            "kube-test-server {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.stop();
    }
}

fn path_arg(path: &Path) -> String {
    path.to_str().unwrap_or_else(|| panic!("a path that is not UTF-8: {}", path.display())).to_string()
}

/// A port on 127.0.0.1 free when asked.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("binding 127.0.0.1:0").port()
}

/// The last lines of a log.
fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// `cp -a FROM TO`.
fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp").arg("-a").arg(from).arg(to).output().expect("cp");
    assert!(
        out.status.success(),
        "cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
