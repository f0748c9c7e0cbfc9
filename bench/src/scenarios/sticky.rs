//! Sticky addresses (ipam-da-sticky, issue 22): what stickiness costs a call,
//! side by side with the same stack without it and with host-local.
//!
//! **Local mode** (`sticky`): subnet 10.27.0.0/16, a database / dataDir of
//! its own per variant. Each round ADDs one container per variant, then DELs
//! it, the variants' order rotating (first, last and between in turn), as
//! many rounds as the latency scenario runs:
//! - host-local;
//! - the suite without stickiness, delegates [`PLAIN`];
//! - the suite with ipam-da-sticky, delegates [`STICKY`], a pod never seen
//!   before each round: nothing to give back, the allocators bind the
//!   identity to the lease, and its DEL holds the address (600 s, the
//!   default) instead of freeing it;
//! - the return path: the same stack, each round's pod ADDed and DELeted
//!   once before the timed rounds (its address held for it), ADDed again
//!   under a new container id: the ADD takes the hold back (checked: it
//!   answers the address the pod had), its DEL holds it again.
//!
//! Every call gets CNI_ARGS as a kubelet passes them ([`kubelet_args`]):
//! the identity is `bench/<pod>`; host-local and the stack without
//! stickiness ignore them. Then, for each of the suite's variants,
//! `fsync_probes` ADDs and DELs logged at debug level, whose "lock wait W,
//! transaction T, durable commit C" lines count the write transactions of a
//! call and how long they held the database's lock, and as many under
//! `strace -f`, counting its fsync-family calls.
//!
//! **Cluster mode** (`sticky-cluster`): the cluster stack without
//! stickiness, `["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static",
//! "ipam-da-sequential"]`, against the same with ipam-da-sticky before
//! ipam-da-sequential, on each store of cluster mode ([`Store`]): one real
//! etcd, and one real Kubernetes API server started as the cluster scenario
//! starts it (without it, the figures say why); in pool 10.33.0.0/16
//! (default blockSize) in a space of its own (a key prefix in etcd, a
//! network on the API server); a node is a node name with a database of its
//! own. The same rounds, one node per variant and store, every store's
//! variants interleaved in each round: no stickiness (`node-a`), a new
//! identity (`node-b`), the return path on the node that held it
//! (`node-c`), and on another node (`node-d` takes over holds that `node-e`
//! left). Then, per store and variant, `cluster_steady` ADDs and as many
//! DELs, each batch counted by the store itself (etcd's
//! `grpc_server_handled_total` per method, the API server's
//! `apiserver_request_total` per verb and resource; before and after) and
//! logged at debug level (the client's count per call, and the write
//! transactions). The sticky nodes are first given room (ADDs and DELs
//! without CNI_ARGS: not sticky, so their addresses are freed; the node
//! keeps the blocks), so that the timed and counted ADDs of new identities,
//! whose DELs hold their addresses, claim no block.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ipam_ds_cluster::etcd::testing::{find_in_path, TestEtcd};
use serde_json::{json, Value};

use crate::cluster_mode::{self, KubeStore, Store};
use crate::debug_log::{lock_lines, logging};
use crate::figures::cluster::StepCount;
use crate::figures::durability::FsyncProbe;
use crate::figures::sticky::{
    CallProbe, StickyClusterFigures, StickyFigures, StickyStore, VariantTimes, HOST_LOCAL, NEW_IDENTITY, RETURNING,
    RETURNING_ELSEWHERE, WITHOUT,
};
use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats, Latency, Plugin, Run};
use crate::setup::Ctx;
use crate::strace::{self, strace};

const SUBNET: &str = "10.27.0.0/16";
const CLUSTER_SUBNET: &str = "10.33.0.0/16";
const CLUSTER_PREFIX: &str = "/ipam-bench-sticky";
/// The pods' namespace in CNI_ARGS: identities are `bench/<pod>`.
const NAMESPACE: &str = "bench";
/// The stack without stickiness: the sticky stack less ipam-da-sticky.
const PLAIN: [&str; 3] = ["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"];
const STICKY: [&str; 4] = ["ipam-ds-pool", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"];
const CLUSTER_PLAIN: [&str; 4] = cluster_mode::DELEGATES;
const CLUSTER_STICKY: [&str; 5] =
    ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"];

/// CNI_ARGS as a kubelet passes them for pod `pod` in container `container`.
fn kubelet_args(pod: &str, container: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={pod};K8S_POD_INFRA_CONTAINER_ID={container}")
}

/// What a variant's calls are about.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A new pod each time (for the suite with stickiness: a new identity).
    New,
    /// A pod whose address is held for it: ADDed and DELeted once before,
    /// by `preparer`.
    Returning,
}

struct Variant {
    name: &'static str,
    /// A word for the variant in container ids and pod names.
    short: &'static str,
    kind: Kind,
    plugin: Plugin,
    /// The returning kind: who ADDs and DELs each pod first (the same node,
    /// or another one).
    preparer: Option<Plugin>,
}

impl Variant {
    fn new(name: &'static str, short: &'static str, plugin: Plugin) -> Variant {
        Variant { name, short, kind: Kind::New, plugin, preparer: None }
    }

    fn returning(name: &'static str, short: &'static str, plugin: Plugin, preparer: Plugin) -> Variant {
        Variant { name, short, kind: Kind::Returning, plugin, preparer: Some(preparer) }
    }

    /// The container and pod of call `i` of batch `tag`. The pods of each
    /// variant are its own (in cluster mode the nodes share etcd, where an
    /// identity is one key whatever the node).
    fn names(&self, tag: &str, i: usize) -> (String, String) {
        let variant = self.short;
        match self.kind {
            Kind::New => (format!("{tag}-{variant}-{i}"), format!("{tag}-{variant}-pod-{i}")),
            Kind::Returning => (format!("{tag}-{variant}-again-{i}"), format!("{tag}-{variant}-back-{i}")),
        }
    }

    /// The returning kind: ADDs and DELs the pods of `count` calls of batch
    /// `tag` under other container ids, so that each one's address is held
    /// for it; answers those addresses (the new kind: nothing).
    fn prepare(&self, tag: &str, count: usize) -> Vec<IpAddr> {
        let Some(preparer) = &self.preparer else { return Vec::new() };
        (0..count)
            .map(|i| {
                let (_, pod) = self.names(tag, i);
                let first = format!("{tag}-{}-first-{i}", self.short);
                let args = kubelet_args(&pod, &first);
                let run = preparer.run_args("ADD", &first, &args).expect_ok("sticky: the ADD that makes a hold");
                let address = run.first_address().unwrap_or_else(|| panic!("sticky: {pod}'s first ADD: no address"));
                preparer.run_args("DEL", &first, &args).expect_ok("sticky: the DEL that makes a hold");
                address
            })
            .collect()
    }

    /// Call `i` of batch `tag` with `plugin` (this variant's, or one that
    /// logs); an ADD of the returning kind must answer the held address.
    fn call(&self, plugin: &Plugin, command: &str, tag: &str, i: usize, held: &[IpAddr]) -> Run {
        let (container, pod) = self.names(tag, i);
        let run = plugin.run_args(command, &container, &kubelet_args(&pod, &container));
        let run = run.expect_ok(&format!("{command}, {}", self.name));
        if command == "ADD" && self.kind == Kind::Returning {
            let got = run.first_address();
            assert_eq!(got, held.get(i).copied(), "{}: {pod} did not get its held address back", self.name);
        }
        run
    }
}

/// `n` rounds of ADD then DEL of one container per variant, the order
/// rotating; answers each variant's ADD and DEL times and CPU.
fn rounds(variants: &[&Variant], n: usize) -> Vec<VariantTimes> {
    let held: Vec<Vec<IpAddr>> = variants.iter().map(|v| v.prepare("lat", n)).collect();
    let k = variants.len();
    let mut add = vec![(Vec::with_capacity(n), Vec::with_capacity(n)); k];
    let mut del = add.clone();
    for i in 0..n {
        let order: Vec<usize> = (0..k).map(|j| (i + j) % k).collect();
        for (command, out) in [("ADD", &mut add), ("DEL", &mut del)] {
            for &v in &order {
                let run = variants[v].call(&variants[v].plugin, command, "lat", i, &held[v]);
                out[v].0.push(run.wall);
                out[v].1.push(run.cpu);
            }
        }
    }
    variants
        .iter()
        .zip(add.iter().zip(&del))
        .map(|(v, (a, d))| VariantTimes {
            name: v.name,
            add: Latency::of(&a.0),
            del: Latency::of(&d.0),
            add_cpu: stats(&a.1),
            del_cpu: stats(&d.1),
        })
        .collect()
}

/// The write transactions of the calls whose plugins logged to `log`: how
/// many, and how long they held the lock (transaction + commit).
fn write_transactions(log: &Path) -> (usize, Duration) {
    let lines = lock_lines(log);
    (lines.len(), lines.iter().map(|a| a.hold).sum())
}

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let n = ctx.counts.latency;
    let scratch = ctx.scenario_dir("sticky");
    let dir = scratch.path();
    let started = phase(&format!(
        "sticky addresses: ADD and DEL latency, {n} rounds, host-local and the suite without and with \
         ipam-da-sticky (a new identity; the identity's hold taken back) interleaved"
    ));
    let config = |db: &str, delegates: &[&str]| {
        let mut config = ctx.stack_config(&dir.join(db), SUBNET);
        config["ipam"]["delegates"] = json!(delegates);
        config
    };
    let configs = [config("plain.sqlite", &PLAIN), config("new.sqlite", &STICKY), config("returning.sqlite", &STICKY)];
    let [plain, new, returning] = configs.clone().map(|c| ctx.stack_with(&c));
    let variants = [
        Variant::new(HOST_LOCAL, "hl", ctx.host_local(&dir.join("host-local"), SUBNET)),
        Variant::new(WITHOUT, "plain", plain),
        Variant::new(NEW_IDENTITY, "new", new),
        Variant::returning(RETURNING, "back", returning.clone(), returning),
    ];
    // Warm-up (page cache, the databases created), not counted; the
    // returning variant's preparation warms it up.
    for v in variants.iter().filter(|v| v.kind == Kind::New) {
        for i in 0..5 {
            v.call(&v.plugin, "ADD", "warm", i, &[]);
        }
    }
    let times = rounds(&variants.each_ref(), n);
    eprintln!("    took {:.1?}", started.elapsed());

    let m = ctx.counts.fsync_probes;
    phase(&format!(
        "sticky addresses: write transactions per call ({m} ADDs and DELs logged at debug) and fsync-family calls \
         (as many under strace -f), the suite's variants"
    ));
    let mut probes = Vec::new();
    let mut fsync_note = strace::missing();
    for (v, config) in variants[1..].iter().zip(&configs) {
        let held = v.prepare("log", m);
        let mut logged = Vec::new();
        for command in ["ADD", "DEL"] {
            let log = dir.join(format!("{}-{command}.log", v.short));
            let p = ctx.stack_with(&logging(config, &log));
            for i in 0..m {
                v.call(&p, command, "log", i, &held);
            }
            logged.push((command, write_transactions(&log)));
        }
        let mut syncs: [Option<FsyncProbe>; 2] = [None, None];
        if fsync_note.is_none() {
            match count_syncs(v, m, &dir.join("strace.log")) {
                Ok(counted) => syncs = counted.map(Some),
                Err(e) => fsync_note = Some(e),
            }
        }
        for ((command, (write_txns, lock_held)), syncs) in logged.into_iter().zip(syncs) {
            eprintln!("    {}, {command}: {write_txns} write transactions in {m} calls", v.name);
            probes.push(CallProbe { variant: v.name, command, calls: m, write_txns, lock_held, syncs });
        }
    }
    if fsync_note.is_some() {
        probes.iter_mut().for_each(|p| p.syncs = None);
    }
    fig.sticky = Some(StickyFigures {
        plain_delegates: &PLAIN,
        sticky_delegates: &STICKY,
        cni_args: kubelet_args("<pod>", "<container id>"),
        subnet: SUBNET,
        rounds: n,
        variants: times,
        probes,
        fsync_note,
    });
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("sticky".into(), loadavg()));
}

/// `m` ADDs, then as many DELs, of variant `v` under `strace -f`: the
/// fsync-family calls of each (strace writing to `log`). An error: strace
/// cannot trace here.
fn count_syncs(v: &Variant, m: usize, log: &Path) -> Result<[FsyncProbe; 2], String> {
    let held = v.prepare("strace", m);
    let probe = |command: &str| -> Result<FsyncProbe, String> {
        let mut calls = Vec::with_capacity(m);
        for i in 0..m {
            let (container, pod) = v.names("strace", i);
            calls.push(strace(&v.plugin, command, &container, Some(&kubelet_args(&pod, &container)), log)?);
        }
        Ok(FsyncProbe { variant: v.name.into(), case: command.into(), calls })
    };
    let add = probe("ADD")?;
    if v.kind == Kind::Returning {
        // strace's run does not read the answers: a repeat ADD of each
        // container answers what it holds now, which must be its held address.
        for (i, address) in held.iter().enumerate() {
            let (container, pod) = v.names("strace", i);
            let again = v.plugin.run_args("ADD", &container, &kubelet_args(&pod, &container));
            let got = again.expect_ok("sticky: a repeat ADD after strace").first_address();
            assert_eq!(got, Some(*address), "{}: {pod} did not get its held address back under strace", v.name);
        }
    }
    Ok([add, probe("DEL")?])
}

/// Cluster mode: see the module's doc.
pub fn run_cluster(ctx: &Ctx, fig: &mut Figures) {
    if find_in_path("etcd").is_none() {
        fig.sticky_cluster_note = Some("etcd not found in PATH (apt-get install etcd-server)".into());
        eprintln!("    sticky addresses in cluster mode not measured: etcd not found in PATH");
        return;
    }
    let (n, m) = (ctx.counts.latency, ctx.counts.cluster_steady);
    let scratch = ctx.scenario_dir("sticky-cluster");
    let dir = scratch.path();
    let started = phase(
        "sticky addresses in cluster mode: starting etcd and the Kubernetes API server (kube-test-server, built as \
         the tests build it)",
    );
    let etcd = Store::Etcd(TestEtcd::start());
    let (kube, kube_note) = match KubeStore::try_start(dir) {
        Ok(kube) => (Some(Store::Kubernetes(kube)), None),
        Err(why) => {
            eprintln!("    the Kubernetes store not measured: {why}");
            (None, Some(why))
        }
    };
    let stores: Vec<&Store> = std::iter::once(&etcd).chain(&kube).collect();
    let names: Vec<&str> = stores.iter().map(|store| store.name()).collect();
    phase(&format!(
        "sticky addresses in cluster mode: ADD and DEL latency, {n} rounds, the cluster stack without and with \
         ipam-da-sticky (a new identity; returning on its node; returning on another node) on {}, interleaved",
        names.join(" and ")
    ));
    let nodes: Vec<StoreNodes> = stores.iter().map(|store| StoreNodes::new(ctx, store, dir)).collect();
    // Warm-up, not counted: each node claims its first block. The node of
    // new identities gets room for every one it holds (ADDs without
    // CNI_ARGS are not sticky: their DELs free the addresses; it keeps the
    // blocks it claimed).
    for v in nodes.iter().flat_map(|store| &store.variants) {
        let room = if v.name == NEW_IDENTITY { n + m + 5 } else { 5 };
        for i in 0..room {
            v.plugin.run("ADD", &format!("room-{i}")).expect_ok("sticky cluster mode: an ADD making room");
        }
        for i in 5..room {
            v.plugin.run("DEL", &format!("room-{i}")).expect_ok("sticky cluster mode: a DEL making room");
        }
    }
    let all: Vec<&Variant> = nodes.iter().flat_map(|store| &store.variants).collect();
    let mut times = rounds(&all, n).into_iter();
    eprintln!("    took {:.1?}", started.elapsed());

    let mut measured = Vec::new();
    for (store, nodes) in stores.iter().zip(&nodes) {
        let variants = times.by_ref().take(nodes.variants.len()).collect();
        let (counts, probes) = count_requests(ctx, store, nodes, m, dir);
        measured.push(StickyStore { store: store.name(), version: store.version(), variants, counts, probes });
    }
    fig.sticky_cluster = Some(StickyClusterFigures {
        plain_delegates: &CLUSTER_PLAIN,
        sticky_delegates: &CLUSTER_STICKY,
        subnet: CLUSTER_SUBNET,
        rounds: n,
        stores: measured,
        kube_note,
    });
    drop((etcd, kube));
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("sticky cluster".into(), loadavg()));
}

/// The nodes of the cluster-mode variants on one store, and their
/// configurations.
struct StoreNodes {
    variants: [Variant; 4],
    configs: [Value; 4],
}

impl StoreNodes {
    /// On `store`, in pool [`CLUSTER_SUBNET`] in the space
    /// [`CLUSTER_PREFIX`]: `node-a` without stickiness, `node-b` (new
    /// identities), `node-c` (identities returning to it) and `node-d`
    /// (taking over the holds `node-e` left), each a database of its own.
    fn new(ctx: &Ctx, store: &Store, dir: &Path) -> StoreNodes {
        let node = |name: &str, delegates: &[&str]| {
            let db = dir.join(format!("{}-{name}.sqlite", store.name().replace(' ', "-")));
            let mut config = store.configured(ctx.stack_config(&db, CLUSTER_SUBNET), name);
            let pool = json!({ "name": "bench", "ranges": [{ "subnet": CLUSTER_SUBNET }] });
            store.in_space(&mut config, pool, CLUSTER_PREFIX);
            config["ipam"]["delegates"] = json!(delegates);
            config
        };
        let configs = [
            node("node-a", &CLUSTER_PLAIN),
            node("node-b", &CLUSTER_STICKY),
            node("node-c", &CLUSTER_STICKY),
            node("node-d", &CLUSTER_STICKY),
        ];
        let [a, b, c, d] = configs.clone().map(|config| ctx.stack_with(&config));
        let e = ctx.stack_with(&node("node-e", &CLUSTER_STICKY));
        let variants = [
            Variant::new(WITHOUT, "plain", a),
            Variant::new(NEW_IDENTITY, "new", b),
            Variant::returning(RETURNING, "back", c.clone(), c),
            Variant::returning(RETURNING_ELSEWHERE, "away", d, e),
        ];
        StoreNodes { variants, configs }
    }
}

/// Per variant of `nodes` on `store`: `m` ADDs, then as many DELs, each
/// batch counted by the store and logged at debug level (the client's
/// count per call, the write transactions).
fn count_requests(
    ctx: &Ctx,
    store: &Store,
    nodes: &StoreNodes,
    m: usize,
    dir: &Path,
) -> (Vec<(&'static str, StepCount, StepCount)>, Vec<CallProbe>) {
    let name = store.name();
    phase(&format!("sticky addresses in cluster mode on {name}: requests per call, {m} ADDs and DELs per variant"));
    let mut counts = Vec::new();
    let mut probes = Vec::new();
    for (v, config) in nodes.variants.iter().zip(&nodes.configs) {
        let held = v.prepare("count", m);
        let [add, del] = ["ADD", "DEL"].map(|command| {
            let log = dir.join(format!("{}-{}-{command}.log", name.replace(' ', "-"), v.short));
            let p = ctx.stack_with(&logging(config, &log));
            let (step, ()) = store.count_calls(m, &log, || {
                for i in 0..m {
                    v.call(&p, command, "count", i, &held);
                }
            });
            let (write_txns, lock_held) = write_transactions(&log);
            probes.push(CallProbe { variant: v.name, command, calls: m, write_txns, lock_held, syncs: None });
            eprintln!("    {}, {command}: {} requests in {m} calls, {} writes", v.name, step.total(), step.writes());
            step
        });
        counts.push((v.name, add, del));
    }
    (counts, probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubelets_cni_args_name_the_pod() {
        let args = shared::CniArgs::parse(&kubelet_args("db-0", "c1")).unwrap();
        assert_eq!(args.get("K8S_POD_NAMESPACE").unwrap(), Some(NAMESPACE));
        assert_eq!(args.get("K8S_POD_NAME").unwrap(), Some("db-0"));
        assert_eq!(args.get("IgnoreUnknown").unwrap(), Some("1"), "host-local refuses unknown keys without it");
    }

    #[test]
    fn the_stacks_differ_by_ipam_da_sticky_alone() {
        fn less(stack: &[&'static str]) -> Vec<&'static str> {
            stack.iter().copied().filter(|d| *d != "ipam-da-sticky").collect()
        }
        assert_eq!(less(&STICKY), PLAIN);
        assert_eq!(less(&CLUSTER_STICKY), CLUSTER_PLAIN);
    }
}
