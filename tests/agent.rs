//! The node agent (`ipam-delegated agent`, docs/agent.md) against a real
//! kube-apiserver (tests/kube_harness) with RBAC enforced, listing pods
//! with the token of rbac.yaml's ServiceAccount (so the manifests' grant is
//! proven enough), and the real `ipam-delegated` as processes: the ADDs a
//! runtime makes with the pod's CNI_ARGS, and the agent itself. Pods are
//! API objects bound to a node by `spec.nodeName` (no kubelet runs): what
//! the agent reads is what the API server says.

mod kube_harness;
mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube_harness::KubeApi;
use serde_json::{json, Value};
use support::{run_args, suite_bin, Sandbox, FULL_STACK, STICKY_STACK};

const NODE: &str = "node-a";
/// Seconds: a pod must be gone this long, and its ADD this old.
const GRACE: u64 = 4;
/// How long a release may take past its due time on a busy machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn network(name: &str, sb: &Sandbox, delegates: &[&str], subnet: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "macvlan",
        "ipam": {"type": "ipam-delegated", "delegates": delegates, "database": sb.db(),
                 "pools": [{"name": "p", "ranges": [{"subnet": subnet}]}]}
    })
}

/// CNI_ARGS naming pod `prod/<name>` of `uid` as containerd passes them.
fn pod_args(name: &str, uid: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME={name};K8S_POD_UID={uid};K8S_POD_INFRA_CONTAINER_ID=x")
}

fn add(sb: &Sandbox, config: &Value, ctr: &str, args: Option<&str>) {
    let env: Vec<(&str, &str)> = args.map(|a| ("CNI_ARGS", a)).into_iter().collect();
    sb.delegated("ADD", config, ctr, &env).result();
}

/// The Pod `prod/<name>` on NODE; its uid.
fn create_pod(api: &KubeApi, name: &str) -> String {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "example.invalid/main"}]}
    });
    let (status, body) = api.request(&api.admin_kubeconfig(), "POST", "/api/v1/namespaces/prod/pods", Some(&pod));
    assert_eq!(status, 201, "creating pod {name}: {body}");
    let created: Value = serde_json::from_str(&body).expect("a pod");
    created["metadata"]["uid"].as_str().expect("its uid").to_string()
}

/// Deleted at once, as a force delete does (no kubelet would confirm it).
fn delete_pod(api: &KubeApi, name: &str) {
    let now = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
    let path = format!("/api/v1/namespaces/prod/pods/{name}");
    let (status, body) = api.request(&api.admin_kubeconfig(), "DELETE", &path, Some(&now));
    assert_eq!(status, 200, "deleting pod {name}: {body}");
}

/// (container id, state, identity) of every row of the database.
fn rows(db: &Path) -> Vec<(String, String, Option<String>)> {
    let db = db.display().to_string();
    let out = run_args(&suite_bin("ipam-delegated"), &["list", "--json", "--database", &db], &[], b"", None);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let list: Vec<Value> = serde_json::from_str(&out.stdout).expect("list --json");
    list.iter()
        .map(|r| {
            let text = |key: &str| r[key].as_str().map(String::from);
            (text("container_id").unwrap_or_default(), text("state").unwrap_or_default(), text("identity"))
        })
        .collect()
}

fn leased(db: &Path, ctr: &str) -> bool {
    rows(db).iter().any(|(c, state, _)| c == ctr && state == "leased")
}

/// Waits for `done`; past [`PATIENCE`], fails saying `what` and `context()`.
fn wait_until(what: &str, context: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "{what}: not within {PATIENCE:?}; {}", context());
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("its address").port()
}

struct Agent {
    child: Child,
    metrics: String,
    log: PathBuf,
}

impl Agent {
    fn start(kubeconfig: &Path, db: &Path, dir: &Path) -> Agent {
        let metrics = format!("127.0.0.1:{}", free_port());
        let log = dir.join("agent.log");
        let child = Command::new(suite_bin("ipam-delegated"))
            .args(["agent", "--node", NODE, "--interval", "1", "--grace", &GRACE.to_string()])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--database")
            .arg(db)
            .args(["--metrics-address", &metrics])
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("agent.log"))
            .spawn()
            .expect("starting the agent");
        let agent = Agent { child, metrics, log };
        wait_until("the agent's metrics", || agent.log(), || agent.try_scrape().is_some());
        agent
    }

    fn try_scrape(&self) -> Option<String> {
        let mut stream = TcpStream::connect(&self.metrics).ok()?;
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// The value of an unlabelled sample.
    fn sample(&self, name: &str) -> f64 {
        let text = self.try_scrape().expect("the agent answers /metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
        line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no sample {name} in {text}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every rule of a pass, on one API server: a deleted pod's attachment is
/// released after the grace and not before; a pod created again under its
/// name (another UID) is another pod; a pod that exists and an attachment
/// without pod fields are kept; a sticky identity's address goes to its
/// hold; with the API server down nothing is released and the errors are
/// counted, and the pass after its restart releases; SIGTERM ends it.
#[test]
fn the_agent_releases_the_attachments_of_pods_gone_from_its_node_and_nothing_else() {
    let mut api = KubeApi::start();
    let deploy = support::manifests::deploy_dir();
    let applied = api.apply(&[&deploy.join("namespace.yaml"), &deploy.join("rbac.yaml")]);
    assert!(applied.contains("applied ClusterRoleBinding ipam-delegated"), "{applied}");
    api.apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod\n");
    // What kube-controller-manager makes in every namespace (it does not
    // run here), which the admission of a pod looks up.
    api.apply_yaml("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: prod\n");
    let kubeconfig = api.service_account_kubeconfig("ipam-delegated", "ipam-delegated");

    let sb = Sandbox::new();
    let plain = network("blue", &sb, &FULL_STACK, "10.77.0.0/24");
    let sticky = network("sticky", &sb, &STICKY_STACK, "10.77.1.0/24");
    let db = sb.db();

    let kept_uid = create_pod(&api, "kept");
    add(&sb, &plain, "c-kept", Some(&pod_args("kept", &kept_uid)));
    add(&sb, &plain, "c-no-pod", None);
    let gone_uid = create_pod(&api, "gone");
    add(&sb, &plain, "c-gone", Some(&pod_args("gone", &gone_uid)));
    let again_uid = create_pod(&api, "again");
    add(&sb, &plain, "c-again", Some(&pod_args("again", &again_uid)));
    let db_uid = create_pod(&api, "db-0");
    add(&sb, &sticky, "c-sticky", Some(&pod_args("db-0", &db_uid)));

    let agent = Agent::start(&kubeconfig, &db, sb.path());
    delete_pod(&api, "gone");
    delete_pod(&api, "again");
    let again_new = create_pod(&api, "again");
    assert_ne!(again_new, again_uid);
    delete_pod(&api, "db-0");
    let deleted = Instant::now();

    // Not before the grace: a pass or two have seen them gone, not for long enough.
    wait_until("two passes", || agent.log(), || agent.sample("ipam_delegated_agent_passes_total") >= 2.0);
    if deleted.elapsed() < Duration::from_secs(GRACE - 1) {
        assert!(leased(&db, "c-gone") && leased(&db, "c-again"), "released within the grace: {:?}", rows(&db));
    }
    wait_until("the deleted pod's attachment released", || agent.log(), || !leased(&db, "c-gone"));
    wait_until("the re-created pod's old attachment released", || agent.log(), || !leased(&db, "c-again"));
    wait_until(
        "the sticky pod's address held",
        || agent.log(),
        || {
            rows(&db).iter().any(|(c, state, identity)| {
                c == "c-sticky" && state == "held" && identity.as_deref() == Some("prod/db-0")
            })
        },
    );
    assert!(!rows(&db).iter().any(|(c, _, _)| c == "c-gone" || c == "c-again"), "freed: {:?}", rows(&db));
    // A few more passes: what exists, or never named a pod, stays.
    let passes = agent.sample("ipam_delegated_agent_passes_total");
    wait_until("two more passes", || agent.log(), || agent.sample("ipam_delegated_agent_passes_total") >= passes + 2.0);
    assert!(leased(&db, "c-kept") && leased(&db, "c-no-pod"), "{:?}", rows(&db));
    assert_eq!(agent.sample("ipam_delegated_agent_released_total"), 3.0, "{}", agent.log());
    assert_eq!(agent.sample("ipam_delegated_agent_errors_total"), 0.0, "{}", agent.log());
    assert!(agent.sample("ipam_delegated_agent_last_success_timestamp_seconds") > 1.7e9);
    // What `ipam-delegated metrics` says of the database, served beside.
    let scraped = agent.try_scrape().expect("metrics");
    assert!(scraped.contains("ipam_delegated_pool_used_addresses{network=\"blue\",pool=\"p\"} 2"), "{scraped}");
    let read = format!("ipam_delegated_database_ok{{database=\"{}\"}} 1", db.display());
    assert!(scraped.lines().any(|l| l == read), "{read} in {scraped}");

    // The API server down: passes fail, count, and release nothing, even
    // of a pod that no longer exists.
    let ghost_uid = create_pod(&api, "ghost");
    add(&sb, &plain, "c-ghost", Some(&pod_args("ghost", &ghost_uid)));
    delete_pod(&api, "ghost");
    api.stop();
    let errors_from = Instant::now();
    wait_until("errors counted", || agent.log(), || agent.sample("ipam_delegated_agent_errors_total") >= 2.0);
    std::thread::sleep(Duration::from_secs(GRACE + 1).saturating_sub(errors_from.elapsed()));
    assert!(leased(&db, "c-ghost"), "released while the API server was down: {:?}", rows(&db));
    assert!(agent.log().contains("nothing released"), "{}", agent.log());
    api.restart();
    wait_until("the ghost's attachment released after the restart", || agent.log(), || !leased(&db, "c-ghost"));
    assert!(leased(&db, "c-kept") && leased(&db, "c-no-pod"), "{:?}", rows(&db));

    // SIGTERM ends it promptly.
    let mut agent = agent;
    // SAFETY: a plain syscall on our own child.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGTERM) };
    let asked = Instant::now();
    let status = loop {
        if let Some(status) = agent.child.try_wait().expect("waiting for the agent") {
            break status;
        }
        assert!(asked.elapsed() < Duration::from_secs(5), "the agent did not end on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}: {}", agent.log());
}
