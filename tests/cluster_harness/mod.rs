//! The cluster under test, shared by the cluster-mode test files: its store
//! — one real etcd (`TestEtcd`, Debian's etcd from PATH: a missing etcd
//! fails the test, never skips it), a cluster of members (`TestEtcdCluster`,
//! each node given the endpoints it uses), or a real Kubernetes API server
//! ([`kube::KubeStore`]) — a directory holding each simulated node's
//! database, and readers of what the store and the node databases hold.
//! Every call is a real `ipam-delegated` process of the fast layout
//! (`support::bin_dir()`).
//!
//! Used by several test files through `mod cluster_harness;`, so not every
//! item is used by every one of them.
#![allow(dead_code)]

pub mod kube;
pub mod sticky;
pub mod sticky_storm;
pub mod storm;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipam_ds_cluster::etcd::testing::{TestEtcd, TestEtcdCluster};
use serde_json::{json, Value};

use crate::stack::{self, LeaseRow};
use crate::support::{self, bin_dir, list_leases, run_args, run_env, suite_bin, Outcome, CLUSTER_STACK};

pub const NETWORK: &str = "cnet";
/// The pool the readers of blocks and address records read.
pub const POOL: &str = "blue";
/// The etcd keys of pool `blue` of network `cnet` (the default prefix).
pub const POOL_KEYS: &str = "/ipam-delegated/v1/cnet/blue/";
pub const BLOCKS: &str = "/ipam-delegated/v1/cnet/blue/blocks/";
pub const ADDRS: &str = "/ipam-delegated/v1/cnet/blue/addrs/";
pub const IDENTITIES: &str = "/ipam-delegated/v1/cnet/_sticky/";
pub const NETNS_PATH: &str = "/var/run/netns/x";

// ---------------------------------------------------------------------------
// The cluster under test

/// The store of a `Cluster`: what its nodes are configured with, and the
/// blocks and address records of pool blue of network cnet that the tests
/// read back from it.
pub trait Store {
    /// The datastore member of a node's `ipam.cluster`: `{"etcd": {...}}` or
    /// `{"kubernetes": {...}}`.
    fn settings(&self) -> Value;
    /// Every block of the pool that has a node (claimed, or released by
    /// release-node).
    fn blocks(&self) -> Vec<BlockRec>;
    /// Every address record of the pool.
    fn addrs(&self) -> Vec<AddrRec>;
    /// Every workload identity of network cnet, as `<ifname>/<identity>`
    /// and its record in etcd's layout (`node`, `container`, `addresses`,
    /// `until`: Unix seconds, absent while live).
    fn identities(&self) -> Vec<(String, Value)>;
}

/// The etcd of a `Cluster`: what the nodes use, and what the tests read.
pub trait Etcd {
    /// The endpoints of a node not given its own.
    fn endpoints(&self) -> Vec<String>;
    /// Every key under `prefix` with its value, as the cluster holds them.
    fn dump(&self, prefix: &str) -> Vec<(String, String)>;
}

impl Etcd for TestEtcd {
    fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        TestEtcd::dump(self, prefix)
    }
}

/// Read from the members neither paused nor partitioned.
impl Etcd for TestEtcdCluster {
    fn endpoints(&self) -> Vec<String> {
        TestEtcdCluster::endpoints(self)
    }

    fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        TestEtcdCluster::dump(self, prefix)
    }
}

/// The etcd datastore settings naming `endpoints`.
fn etcd_settings(endpoints: &[String]) -> Value {
    json!({"etcd": {"endpoints": endpoints, "timeout": 1}})
}

impl<E: Etcd> Store for E {
    fn settings(&self) -> Value {
        etcd_settings(&self.endpoints())
    }

    fn blocks(&self) -> Vec<BlockRec> {
        self.dump(BLOCKS)
            .into_iter()
            .map(|(key, value)| {
                let segment = key.strip_prefix(BLOCKS).expect("a block key");
                let v: Value = serde_json::from_str(&value).unwrap_or_else(|e| panic!("block {key}: {e}: {value}"));
                BlockRec {
                    net: Net4::segment(segment),
                    node: v["node"].as_str().unwrap_or_else(|| panic!("block {key} has no node: {value}")).to_string(),
                    released: v["released"].as_bool().unwrap_or(false),
                    key,
                }
            })
            .collect()
    }

    fn addrs(&self) -> Vec<AddrRec> {
        self.dump(ADDRS)
            .into_iter()
            .map(|(key, value)| {
                let ip =
                    key.rsplit('/').next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("address key {key}"));
                let v: Value = serde_json::from_str(&value).unwrap_or_else(|e| panic!("address {key}: {e}: {value}"));
                let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                AddrRec {
                    ip,
                    node: text("node"),
                    kind: text("kind"),
                    container: text("container"),
                    lender: text("lender"),
                    key,
                }
            })
            .collect()
    }

    fn identities(&self) -> Vec<(String, Value)> {
        self.dump(IDENTITIES)
            .into_iter()
            .map(|(key, value)| {
                let name = key.strip_prefix(IDENTITIES).expect("an identity key").to_string();
                (name, serde_json::from_str(&value).unwrap_or_else(|e| panic!("identity {key}: {e}: {value}")))
            })
            .collect()
    }
}

/// One store, and a directory holding each node's database.
pub struct Cluster<S: Store = TestEtcd> {
    pub store: S,
    pub dir: tempfile::TempDir,
    pub pools: Value,
    pub grace: f64,
    /// ipam.timeout: seconds per delegate call.
    pub call_timeout: u64,
    /// The etcd endpoints of the nodes (by name) given their own (an etcd
    /// store's: see [`Cluster::set_endpoints`]).
    pub node_endpoints: HashMap<String, Vec<String>>,
    /// `ipam.cluster.shareBlocks`, when set (else the default, auto).
    pub share_blocks: Option<&'static str>,
}

impl Cluster {
    pub fn new(pools: Value, grace: f64) -> Cluster {
        Cluster::over(TestEtcd::start(), pools, grace)
    }

    /// The /22 of the brief, cut in /27 blocks.
    pub fn blue(grace: f64) -> Cluster {
        Cluster::new(blue_pools(), grace)
    }
}

/// Pool blue: the /22 of the brief, cut in /27 blocks.
pub fn blue_pools() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.50.0.0/22"}], "blockSize": 27}])
}

impl<E: Etcd> Cluster<E> {
    /// `node` uses `endpoints` (in order) rather than the etcd's.
    pub fn set_endpoints(&mut self, node: &str, endpoints: Vec<String>) {
        self.node_endpoints.insert(node.to_string(), endpoints);
    }

    pub fn endpoints_of(&self, node: &str) -> Vec<String> {
        self.node_endpoints.get(node).cloned().unwrap_or_else(|| self.store.endpoints())
    }
}

impl<S: Store> Cluster<S> {
    pub fn over(store: S, pools: Value, grace: f64) -> Cluster<S> {
        let dir = tempfile::Builder::new().prefix("ipam-cluster-").tempdir().expect("tempdir");
        // Built before any clock starts.
        let _ = bin_dir();
        Cluster { store, dir, pools, grace, call_timeout: 5, node_endpoints: HashMap::new(), share_blocks: None }
    }

    pub fn db(&self, node: &str) -> PathBuf {
        self.dir.path().join(node).join("allocations.sqlite")
    }

    pub fn config(&self, node: &str) -> Value {
        let mut cluster = match self.node_endpoints.get(node) {
            Some(endpoints) => etcd_settings(endpoints),
            None => self.store.settings(),
        };
        cluster["node"] = json!(node);
        cluster["offlineGrace"] = json!(self.grace);
        let mut config = json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "bridge",
            "ipam": {
                "type": "ipam-delegated",
                "database": self.db(node),
                "timeout": self.call_timeout,
                "delegates": CLUSTER_STACK,
                "pools": self.pools,
                "cluster": cluster
            }
        });
        if let Some(share) = self.share_blocks {
            config["ipam"]["cluster"]["shareBlocks"] = json!(share);
        }
        config
    }

    /// `command` through ipam-delegated for `container` (eth0), with
    /// `config` on stdin and `extra` variables (CNI_ARGS).
    pub fn run(&self, command: &str, container: &str, config: &Value, extra: &[(&str, &str)]) -> Outcome {
        let cni_path = bin_dir().display().to_string();
        let env = cni_env(command, container, &cni_path, extra);
        run_env(&suite_bin("ipam-delegated"), &env, config.to_string().as_bytes(), Some(self.dir.path()))
    }

    /// [`Cluster::run`], its process group SIGKILLed `kill_after` the spawn
    /// when given (see [`support::run_killable`]).
    pub fn run_killable(
        &self,
        command: &str,
        container: &str,
        config: &Value,
        extra: &[(&str, &str)],
        kill_after: Option<Duration>,
    ) -> Fate {
        let cni_path = bin_dir().display().to_string();
        let env = cni_env(command, container, &cni_path, extra);
        match support::run_killable(env, self.dir.path(), config.to_string().as_bytes(), kill_after) {
            Some(out) => Fate::Done(out),
            None => Fate::Killed,
        }
    }

    pub fn add(&self, node: &str, container: &str) -> Outcome {
        self.run("ADD", container, &self.config(node), &[])
    }

    /// ADD of `container` on `node`, tried again every 200 ms as a runtime
    /// would, until it succeeds or `within` has passed: the last outcome.
    pub fn add_within(&self, node: &str, container: &str, within: Duration) -> Outcome {
        let deadline = Instant::now() + within;
        loop {
            let out = self.add(node, container);
            if out.status == 0 || Instant::now() >= deadline {
                return out;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// ADD asking for `ip` by name, through CNI_ARGS as a runtime passes it.
    pub fn add_static(&self, node: &str, container: &str, ip: IpAddr) -> Outcome {
        let args = format!("IgnoreUnknown=1;IP={ip}");
        self.run("ADD", container, &self.config(node), &[("CNI_ARGS", args.as_str())])
    }

    pub fn del(&self, node: &str, container: &str) -> Outcome {
        self.run("DEL", container, &self.config(node), &[])
    }

    /// STATUS (spec 1.1).
    pub fn status(&self, node: &str) -> Outcome {
        let mut config = self.config(node);
        config["cniVersion"] = json!("1.1.0");
        self.run("STATUS", "status", &config, &[])
    }

    /// GC (spec 1.1) keeping the attachments (`containers`, eth0).
    pub fn gc(&self, node: &str, containers: &[String]) -> Outcome {
        let valid: Vec<(String, String)> = containers.iter().map(|c| (c.clone(), "eth0".to_string())).collect();
        let config = stack::gc_config(&self.config(node), &valid);
        self.run("GC", "gc", &config, &[])
    }

    /// `node`'s database, which its first call creates. A missing one fails
    /// the test, naming it: read as empty, it would make every check that
    /// nothing is there pass without having read anything.
    pub fn existing_db(&self, node: &str) -> PathBuf {
        let db = self.db(node);
        assert!(
            db.exists(),
            "{node}'s database {} does not exist: the test reads a node that never ran (where that is expected, \
             say so with Cluster::leases_if_created)",
            db.display()
        );
        db
    }

    /// The leases of `node`'s database (which must exist).
    pub fn leases(&self, node: &str) -> Vec<LeaseRow> {
        stack::leases(&self.existing_db(node))
    }

    /// The leases of `node`'s database, none when it was never created: for
    /// a node that may not have made its first call yet, or whose calls may
    /// all have been refused before any database was made (an invalid
    /// configuration).
    pub fn leases_if_created(&self, node: &str) -> Vec<LeaseRow> {
        if self.db(node).exists() {
            self.leases(node)
        } else {
            Vec::new()
        }
    }

    /// The leases of `node`'s database (which must exist) that attachments
    /// hold (live leases and shares), not the holds of workload identities.
    pub fn attached(&self, node: &str) -> Vec<LeaseRow> {
        let listed = list_leases(&self.existing_db(node));
        let rows = listed.as_array().expect("an array of leases");
        let text =
            |v: &Value, k: &str| v[k].as_str().unwrap_or_else(|| panic!("lease row without {k}: {v}")).to_string();
        rows.iter()
            .filter(|v| !matches!(v["state"].as_str(), Some("held" | "expired")))
            .map(|v| LeaseRow {
                address: text(v, "address").parse().unwrap_or_else(|e| panic!("lease address ({e}): {v}")),
                pool: text(v, "pool"),
                network: text(v, "network"),
                container_id: text(v, "container_id"),
                ifname: text(v, "ifname"),
            })
            .collect()
    }

    /// Every block of pool blue in the store that has a node.
    pub fn blocks(&self) -> Vec<BlockRec> {
        self.store.blocks()
    }

    /// The blocks the store shows as `node`'s (not released).
    pub fn blocks_of(&self, node: &str) -> Vec<Net4> {
        self.blocks().into_iter().filter(|b| b.node == node && !b.released).map(|b| b.net).collect()
    }

    /// Every address record of pool blue in the store.
    pub fn addrs(&self) -> Vec<AddrRec> {
        self.store.addrs()
    }

    /// Rows of the query `sql` of `node`'s database (which must exist; its
    /// cluster tables `cluster_blocks`, `cluster_records`, …), each as text
    /// columns, read with rusqlite.
    pub fn table(&self, node: &str, sql: &str) -> Vec<Vec<String>> {
        let conn = rusqlite::Connection::open(self.existing_db(node)).expect("open a node database");
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                (0..n)
                    .map(|i| {
                        let v: rusqlite::types::Value = row.get(i)?;
                        Ok(match v {
                            rusqlite::types::Value::Null => "NULL".into(),
                            rusqlite::types::Value::Integer(i) => i.to_string(),
                            rusqlite::types::Value::Real(r) => r.to_string(),
                            rusqlite::types::Value::Text(t) => t,
                            rusqlite::types::Value::Blob(b) => format!("{b:?}"),
                        })
                    })
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        rows.map(|r| r.expect("a row")).collect()
    }

    /// Runs the statement `sql` with `params` on `node`'s database: the
    /// state a call of that node leaves at a given step (a kill, a write in
    /// flight), for the real calls that meet it. The rows it changed.
    pub fn execute(&self, node: &str, sql: &str, params: impl rusqlite::Params) -> usize {
        let conn = rusqlite::Connection::open(self.existing_db(node)).expect("open a node database");
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The blocks `node`'s database holds (any state), with their state.
    pub fn node_blocks(&self, node: &str) -> Vec<(Net4, String)> {
        self.table(node, "SELECT block, state FROM cluster_blocks WHERE network = 'cnet' AND pool = 'blue'")
            .into_iter()
            .map(|r| (Net4::cidr(&r[0]), r[1].clone()))
            .collect()
    }

    pub fn node_records(&self, node: &str) -> Vec<Vec<String>> {
        self.table(node, "SELECT key, address, kind, container_id, state FROM cluster_records")
    }
}

/// The CNI variables of `command` for `container` (eth0), then `extra`
/// (CNI_ARGS).
fn cni_env<'a>(
    command: &'a str,
    container: &'a str,
    cni_path: &'a str,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", container),
        ("CNI_NETNS", NETNS_PATH),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", cni_path),
    ];
    env.extend_from_slice(extra);
    env
}

/// How a call that may be killed ended ([`Cluster::run_killable`]).
#[derive(Debug)]
pub enum Fate {
    Killed,
    Done(Outcome),
}

#[derive(Debug, Clone)]
pub struct BlockRec {
    pub key: String,
    pub net: Net4,
    pub node: String,
    pub released: bool,
}

#[derive(Debug, Clone)]
pub struct AddrRec {
    pub key: String,
    pub ip: IpAddr,
    pub node: String,
    pub kind: String,
    pub container: String,
    /// Of a borrowed address: the node that lent it.
    pub lender: String,
}

/// An IPv4 block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Net4 {
    pub start: u32,
    pub len: u8,
}

impl Net4 {
    /// `10.50.0.32-27`, as the etcd keys spell a block.
    pub fn segment(s: &str) -> Net4 {
        Net4::cidr(&s.replace('-', "/"))
    }

    pub fn cidr(s: &str) -> Net4 {
        let (addr, len) = s.split_once('/').unwrap_or_else(|| panic!("{s:?} is not a CIDR"));
        let addr: Ipv4Addr = addr.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"));
        Net4 { start: u32::from(addr), len: len.parse().unwrap_or_else(|e| panic!("{s:?}: {e}")) }
    }

    pub fn size(&self) -> u32 {
        1u32 << (32 - self.len)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => (u32::from(v4).wrapping_sub(self.start)) < self.size(),
            IpAddr::V6(_) => false,
        }
    }

    pub fn nth(&self, n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self.start + n))
    }
}

impl std::fmt::Display for Net4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.start), self.len)
    }
}

/// Prints how long the test took when it ends (passed or not), not
/// counting the build of the executables.
pub struct Took(pub &'static str, pub Instant);

impl Took {
    /// After the build of the executables under test (once per process).
    pub fn new(test: &'static str) -> Took {
        let _ = bin_dir();
        Took(test, Instant::now())
    }
}

impl Drop for Took {
    fn drop(&mut self) {
        eprintln!("{} took {:.2?}", self.0, self.1.elapsed());
    }
}

/// ADDs as `config` (containers `a<n>`, after the `got` addresses the node
/// has) until one fails, which must be 100 (its blocks full, none left to
/// claim); at most `most` addresses in all. The addresses got.
pub fn fill_until_100<S: Store>(c: &Cluster<S>, config: &Value, mut got: Vec<IpAddr>, most: usize) -> Vec<IpAddr> {
    loop {
        let out = c.run("ADD", &format!("a{}", got.len()), config, &[]);
        if out.status != 0 {
            assert_eq!(failure(&out).0, 100, "the ADD once the blocks are full: {}", brief(&out));
            return got;
        }
        got.push(added(&out, "an ADD filling the blocks"));
        assert!(got.len() <= most, "more than {most} addresses: {got:?}");
    }
}

/// ADDs as `config` until one gets an address: a block released at
/// `released_at` is claimable once its `wait` is over (refused with 100
/// before), and within 10 s after. The address, and how long after the
/// release it was claimed.
pub fn claimed_after_wait<S: Store>(
    c: &Cluster<S>,
    config: &Value,
    released_at: Instant,
    wait: Duration,
) -> (IpAddr, Duration) {
    let deadline = released_at + wait + Duration::from_secs(10);
    loop {
        let out = c.run("ADD", "a-wait", config, &[]);
        if out.status == 0 {
            return (added(&out, "the ADD after the wait"), released_at.elapsed());
        }
        assert_eq!(failure(&out).0, 100, "{}", brief(&out));
        assert!(Instant::now() < deadline, "the released block was not claimable {wait:?} after its release");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The code and message of a failed run (asserting the error object).
pub fn failure(out: &Outcome) -> (u64, String) {
    let (code, msg, _) = out.error();
    (code, msg)
}

/// The IPv4 address of a successful ADD (`what` names it if it failed).
pub fn added(out: &Outcome, what: &str) -> IpAddr {
    assert_eq!(out.status, 0, "{what}: {}", brief(out));
    stack::ipv4_of(out.result())
}

/// A short account of a run, for assertion messages.
pub fn brief(out: &Outcome) -> String {
    format!("exit {}, stdout {}, stderr {}", out.status, out.stdout.trim(), out.stderr.trim())
}

/// How long [`place`] retries one pod's ADD, as a runtime does.
pub const PLACE_RETRY_FOR: Duration = Duration::from_secs(20);

/// `count` pods of `node` (containers `<tag>-<i>`), each ADD retried every
/// 200 ms as a runtime does until it succeeds (within [`PLACE_RETRY_FOR`]);
/// the addresses they got.
pub fn place<S: Store>(c: &Cluster<S>, node: &str, tag: &str, count: usize) -> Vec<IpAddr> {
    (0..count)
        .map(|i| added(&c.add_within(node, &format!("{tag}-{i}"), PLACE_RETRY_FOR), &format!("{node}'s pod {tag}-{i}")))
        .collect()
}

/// Every address of `from..=to` (the last octet of `prefix`.*).
pub fn v4_range(prefix: &str, from: u8, to: u8) -> std::collections::BTreeSet<IpAddr> {
    (from..=to).map(|i| format!("{prefix}.{i}").parse().expect("an address")).collect()
}

/// Every address an attachment holds across `nodes`' databases, asserting
/// none twice. (Addresses a node lends out are held in its database under
/// the network `cnet/lent`, by no attachment: see [`lent_holds`].)
pub fn held_once<S: Store>(c: &Cluster<S>, nodes: &[&str]) -> BTreeMap<IpAddr, (String, String)> {
    let (held, twice) = held_by(c, nodes);
    if let Some((ip, (n1, c1), (n2, c2))) = twice.first() {
        panic!("{ip} is held twice across the cluster: by {n1} (container {c1}) and by {n2} (container {c2})");
    }
    held
}

pub type Holder = (String, String);
pub type Twice = (IpAddr, Holder, Holder);

/// Every address an attachment holds across `nodes`' databases (node,
/// container), and the addresses held twice. A hold of a workload identity
/// (ipam-da-sticky) is no attachment's, and not counted: a node keeps one
/// for a while after the identity went, also once another node took the
/// identity over.
pub fn held_by<S: Store>(c: &Cluster<S>, nodes: &[&str]) -> (BTreeMap<IpAddr, Holder>, Vec<Twice>) {
    let mut held: BTreeMap<IpAddr, Holder> = BTreeMap::new();
    let mut twice = Vec::new();
    for node in nodes {
        for row in c.attached(node).into_iter().filter(|r| r.network == NETWORK) {
            let holder = (node.to_string(), row.container_id.clone());
            if let Some(other) = held.insert(row.address, holder.clone()) {
                twice.push((row.address, other, holder));
            }
        }
    }
    (held, twice)
}

/// The addresses each node holds in its database as lent out (network
/// `cnet/lent`): (address, lender).
pub fn lent_holds<S: Store>(c: &Cluster<S>, nodes: &[&str]) -> Vec<(IpAddr, String)> {
    let lent = format!("{NETWORK}/lent");
    nodes
        .iter()
        .flat_map(|n| c.leases(n).into_iter().filter(|r| r.network == lent).map(|r| (r.address, n.to_string())))
        .collect()
}

/// Each held address lies in a block the store shows as its node's, or has
/// an address record in the store for its node.
pub fn assert_covered<S: Store>(c: &Cluster<S>, held: &BTreeMap<IpAddr, (String, String)>) {
    let problems = uncovered(c, held);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The held addresses [`assert_covered`] refuses, one line each.
pub fn uncovered<S: Store>(c: &Cluster<S>, held: &BTreeMap<IpAddr, (String, String)>) -> Vec<String> {
    let blocks = c.blocks();
    let addrs = c.addrs();
    let mut problems = Vec::new();
    for (ip, (node, container)) in held {
        let in_block = blocks.iter().any(|b| &b.node == node && !b.released && b.net.contains(*ip));
        let recorded = addrs.iter().any(|a| a.ip == *ip && &a.node == node);
        if !(in_block || recorded) {
            problems.push(format!(
                "{ip} is held by {node} (container {container}) outside every block the store shows as {node}'s, \
                 and the store has no address record of {node} for it; blocks: {:?}; address records: {:?}",
                blocks.iter().filter(|b| b.net.contains(*ip)).collect::<Vec<_>>(),
                addrs.iter().filter(|a| a.ip == *ip).collect::<Vec<_>>()
            ));
        }
    }
    problems
}

/// Blocks per node in the store: "few", not one per ADD.
pub fn assert_few_blocks<S: Store>(c: &Cluster<S>, nodes: &[&str], peak: &HashMap<String, usize>, per_block: usize) {
    let mut counts = Vec::new();
    for node in nodes {
        let owned = c.blocks_of(node).len();
        let most = peak.get(*node).copied().unwrap_or(0);
        let bound = most.div_ceil(per_block) + 2;
        counts.push(format!("{node}: {owned} blocks for at most {most} leases"));
        assert!(
            owned <= bound,
            "{node} owns {owned} blocks in the store for at most {most} leases at once (bound {bound}): concurrent ADDs of \
             one node claimed a block each? {counts:?}"
        );
    }
    eprintln!("blocks per node: {}", counts.join("; "));
}

/// The blocks of `c`'s first pool in the order `node` tries to claim them,
/// as ipam-ds-cluster orders them (its public `Geometry::claim_order`): to
/// pick a node name that takes over exactly the blocks another lost.
pub fn claim_order<S: Store>(c: &Cluster<S>, node: &str) -> Vec<Net4> {
    let pool = shared::pool::Pool::from_json(&c.pools[0], "pools[0]").expect("the test's pool reads");
    ipam_ds_cluster::blocks::Geometry::of(&pool).claim_order(node).map(|b| Net4::cidr(&b.to_string())).collect()
}

/// Whether the operator tool answers `cluster --help`.
pub fn has_cluster_tool() -> bool {
    let out = run_args(&suite_bin("ipam-delegated"), &["cluster", "--help"], &[], b"", None);
    out.status == 0
}

/// Hands `node`'s blocks and records back with the operator's
/// `cluster release-node`, run with `operator`'s settings.
pub fn release_node<S: Store>(c: &Cluster<S>, node: &str, operator: &str) -> &'static str {
    release_node_saying(c, node, operator);
    "ipam-delegated cluster release-node"
}

/// [`release_node`], returning what the command printed.
pub fn release_node_saying<S: Store>(c: &Cluster<S>, node: &str, operator: &str) -> String {
    assert!(has_cluster_tool(), "ipam-delegated cluster --help failed: the operator tool is broken");
    let out = cluster_tool(c, &c.config(operator), &["release-node", node]);
    assert_eq!(out.status, 0, "ipam-delegated cluster release-node {node}: {}", brief(&out));
    out.stdout
}

/// `ipam-delegated cluster --conf CONFLIST ARGS`, the conflist holding
/// `config` (a node's plugin configuration, as [`Cluster::config`] makes
/// it) as its one plugin.
pub fn cluster_tool<S: Store>(c: &Cluster<S>, config: &Value, args: &[&str]) -> Outcome {
    let conflist = c.dir.path().join("cnet.conflist");
    let mut plugin = config.clone();
    let plugin_obj = plugin.as_object_mut().expect("a plugin configuration");
    plugin_obj.remove("cniVersion");
    plugin_obj.remove("name");
    let list = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [plugin]});
    std::fs::write(&conflist, serde_json::to_vec_pretty(&list).expect("JSON")).expect("writing the conflist");
    let mut all = vec!["cluster", "--conf", conflist.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_args(&suite_bin("ipam-delegated"), &all, &[], b"", None)
}

/// `at_once` ADDs of node n1 started together, in blocks of 16: each places
/// its pod, each at its own address, in few blocks.
pub fn burst_places_every_pod_at_its_first_add<S: Store + Sync>(c: &Cluster<S>, at_once: usize) {
    let outs = burst(c, "ADD", at_once);
    let placed: BTreeSet<IpAddr> = outs.iter().map(|out| stack::ipv4_of(out.result())).collect();
    assert_eq!(placed.len(), at_once, "each pod its own address");
    held_once(c, &["n1"]);
    // Blocks of 16: the burst needs 3, and one claimed ahead of need or
    // two is fine; one per ADD is not.
    let blocks = c.blocks_of("n1");
    assert!(blocks.len() <= at_once.div_ceil(16) + 2, "n1 claimed {} blocks: {blocks:?}", blocks.len());
}

/// The DELs of `burst_places_every_pod_at_its_first_add`'s pods at once:
/// each succeeds, and the cluster's store keeps no record of them.
pub fn burst_of_dels_releases_every_address<S: Store + Sync>(c: &Cluster<S>, at_once: usize) {
    burst(c, "DEL", at_once);
    let left: Vec<AddrRec> = c.addrs().into_iter().filter(|r| r.container.starts_with("burst-")).collect();
    assert!(left.is_empty(), "records of the burst's pods left in the cluster's store: {left:?}");
}

/// `command` of node n1 for `at_once` pods (burst-0, burst-1, …), all
/// started together: each must succeed at once.
fn burst<S: Store + Sync>(c: &Cluster<S>, command: &str, at_once: usize) -> Vec<Outcome> {
    let barrier = std::sync::Barrier::new(at_once);
    let config = c.config("n1");
    let outs: Vec<Outcome> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..at_once)
            .map(|j| {
                let (barrier, config) = (&barrier, &config);
                s.spawn(move || {
                    barrier.wait();
                    c.run(command, &format!("burst-{j}"), config, &[])
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let failed: Vec<String> = outs
        .iter()
        .enumerate()
        .filter(|(_, out)| out.status != 0)
        .map(|(j, out)| format!("burst-{j}: {}", brief(out)))
        .collect();
    assert!(failed.is_empty(), "{} of {at_once} {command}s at once failed:\n  {}", failed.len(), failed.join("\n  "));
    outs
}
