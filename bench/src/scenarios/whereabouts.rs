//! The suite in cluster mode and whereabouts side by side, on one real
//! Kubernetes API server (the tests' kube-test-server), the same machine and
//! the same calls: every call a process started the way a runtime starts
//! it, CNI_ARGS as a kubelet passes them (the pod's namespace and name:
//! whereabouts keys its reservations by them), 10 nodes simulated by node
//! names (for the suite each with a database of its own; whereabouts takes
//! no node name unless its node slices are configured, which need its
//! controller: not here). The suite: the cluster stack on the Kubernetes
//! datastore with deploy/kubernetes/'s CRDs and RBAC, a token of its
//! DaemonSet's ServiceAccount ([`KubeStore`]); whereabouts as its own
//! manifests install it ([`Whereabouts`]). Each step gives each plugin a
//! pool of its own (10.50-54.x for the suite, 10.60-64.x for whereabouts). In order,
//! after one uncounted ADD and DEL of each plugin (the API server is seconds
//! old):
//!
//! 1. **1000 pods into 1000 addresses, one wave, then two waves** (200
//!    with BENCH_QUICK), as the cluster scenario places them (10 nodes, 2
//!    ADDs in flight per node, a failed ADD retried 0.5 s later until the
//!    wave's deadline): the suite first, then whereabouts, each the same
//!    deadline. Reported: pods placed, failed attempts, addresses held
//!    twice, the time to the last pod placed, and the API server's count.
//! 2. **Steady state**: one node, a roomy pool (a /16), ADD then DEL of one
//!    pod by each plugin in turn (the order alternating), as many rounds as
//!    the latency scenario; then, each plugin alone, as many ADDs and DELs
//!    as the cluster scenario counts (after as many uncounted, to make
//!    room), between two reads of the API server's `apiserver_request_total`.
//! 3. **A burst of 200 pods on one node** (50 with BENCH_QUICK: 200
//!    whereabouts processes at once take some 7 GiB): all ADDs started at
//!    once, in a roomy pool, failed ADDs retried as in the waves.
//! 4. **Peak RSS** of one ADD and one DEL (the largest of 5), through the
//!    memory scenario's launcher.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use shared::addr::{from_u128, parse_cidr, to_u128};

use crate::cluster_mode::{self, api_requests_in, difference, KubeStore, Store};
use crate::figures::whereabouts::{Placement, PluginFigures, Requests, WaveRun, WhereaboutsFigures};
use crate::figures::Figures;
use crate::harness::{caught, loadavg, phase, stats, Latency, Plugin, Run};
use crate::scenarios::cluster::{WAVE_NODES, WAVE_THREADS};
use crate::setup::Ctx;
use crate::whereabouts::{self as plugin, Whereabouts};

/// How long a failed ADD waits before it is tried again (as in the cluster
/// scenario's waves).
const RETRY: Duration = Duration::from_millis(500);
/// The blockSize of the suite's pools (as in the cluster scenario's waves).
const BLOCK_SIZE: u8 = 26;
/// Calls of the peak-RSS step, of each command.
const RSS_CALLS: usize = 5;
/// The API group of Leases: whereabouts takes one per call, the API server
/// renews its own.
const LEASES: &str = "coordination.k8s.io";
/// The namespace of the pods, as CNI_ARGS names it.
const POD_NAMESPACE: &str = "bench";

/// A step's pool: its name (the suite's network, a space of its own), and
/// the second octet of its 10.x subnet for the suite (whereabouts': +10).
#[derive(Clone, Copy)]
struct Step {
    name: &'static str,
    octet: u8,
    /// A /22 handing out exactly as many addresses as pods, or a roomy /16.
    exact: bool,
}

const ONE_WAVE: Step = Step { name: "wa-one-wave", octet: 50, exact: true };
const TWO_WAVES: Step = Step { name: "wa-two-waves", octet: 51, exact: true };
const STEADY: Step = Step { name: "wa-steady", octet: 52, exact: false };
const BURST: Step = Step { name: "wa-burst", octet: 53, exact: false };
const WARM_UP: Step = Step { name: "wa-warm-up", octet: 54, exact: false };

/// One of the two plugins compared, as a runtime calls it on a node.
enum Contender<'a> {
    Suite { ctx: &'a Ctx, store: &'a Store, dir: &'a Path },
    Whereabouts(&'a Whereabouts),
}

impl Contender<'_> {
    fn name(&self) -> String {
        match self {
            Contender::Suite { .. } => "ipam-delegated, cluster mode".into(),
            Contender::Whereabouts(w) => format!("whereabouts {}", w.version),
        }
    }

    /// The API groups of its requests.
    fn groups(&self) -> Vec<&'static str> {
        match self {
            Contender::Suite { .. } => vec![cluster_mode::GROUP],
            Contender::Whereabouts(_) => plugin::GROUPS.to_vec(),
        }
    }

    /// The subnet of `step`, and for an exact pool its first and last
    /// address (`pods` of them, from the subnet's .2).
    fn pool(&self, step: Step, pods: usize) -> (String, Option<(String, String)>) {
        let octet = step.octet + if matches!(self, Contender::Whereabouts(_)) { 10 } else { 0 };
        if step.exact {
            let first: IpAddr = format!("10.{octet}.0.2").parse().expect("an address");
            let last = from_u128(to_u128(first) + pods as u128 - 1);
            (format!("10.{octet}.0.0/22"), Some((first.to_string(), last.to_string())))
        } else {
            (format!("10.{octet}.0.0/16"), None)
        }
    }

    /// Its plugin on node `node` (from 1) in `step`'s pool (of exactly
    /// `pods` addresses if the step's is exact).
    fn on_node(&self, step: Step, node: usize, pods: usize) -> Plugin {
        let (subnet, range) = self.pool(step, pods);
        let range = range.as_ref().map(|(first, last)| (first.as_str(), last.as_str()));
        match self {
            Contender::Suite { ctx, store, dir } => {
                let db = dir.join(format!("{}-node-{node}.sqlite", step.name));
                let mut config = store.configured(ctx.stack_config(&db, &subnet), &format!("node-{node}"));
                let mut pool = json!({ "name": "bench", "ranges": [{ "subnet": subnet }] });
                if let Some((first, last)) = range {
                    pool["ranges"][0]["rangeStart"] = json!(first);
                    pool["ranges"][0]["rangeEnd"] = json!(last);
                    pool["blockSize"] = json!(BLOCK_SIZE);
                }
                store.in_space(&mut config, pool, &format!("/{}", step.name));
                ctx.stack_with(&config)
            }
            Contender::Whereabouts(w) => w.plugin(step.name, &subnet, range),
        }
    }
}

/// CNI_ARGS as a kubelet passes them for the pod whose sandbox is `container`.
fn cni_args(container: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={POD_NAMESPACE};K8S_POD_NAME={container};K8S_POD_INFRA_CONTAINER_ID={container}")
}

fn call(plugin: &Plugin, command: &str, container: &str) -> Run {
    plugin.run_args(command, container, &cni_args(container))
}

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let scratch = ctx.scenario_dir("whereabouts");
    let dir = scratch.path();
    let started = phase("whereabouts: starting the Kubernetes API server (kube-test-server), with the suite's CRDs");
    let kube = match KubeStore::try_start(dir) {
        Ok(kube) => kube,
        Err(why) => return not_measured(fig, format!("the API server did not start: {why}")),
    };
    phase("whereabouts: building it (bench/whereabouts, Go) and applying its CRDs and RBAC");
    let whereabouts = match caught(|| Whereabouts::install(&kube.api, dir)) {
        Ok(w) => w,
        Err(why) => return not_measured(fig, format!("whereabouts was not built or installed: {why}")),
    };
    let store = Store::Kubernetes(kube);
    let Store::Kubernetes(kube) = &store else { unreachable!() };
    let contenders = [Contender::Suite { ctx, store: &store, dir }, Contender::Whereabouts(&whereabouts)];
    let deadline = Duration::from_secs(ctx.counts.cluster_wave_secs);
    let pods = ctx.counts.whereabouts_pods;
    let per_node = pods / WAVE_NODES;
    let burst_pods = ctx.counts.whereabouts_burst;

    if let Err(why) = contenders.iter().try_for_each(warm_up) {
        return not_measured(fig, why);
    }
    let mut waves: Vec<[Placement; 2]> = Vec::new();
    for c in &contenders {
        let one = place(kube, c, ONE_WAVE, &[WAVE_NODES], per_node, WAVE_THREADS, deadline);
        let half = WAVE_NODES / 2;
        let two = place(kube, c, TWO_WAVES, &[half, WAVE_NODES - half], per_node, WAVE_THREADS, deadline);
        waves.push([one, two]);
    }
    let latencies = steady_latency(ctx, &contenders);
    let counted: Vec<[Requests; 2]> = contenders.iter().map(|c| counted(ctx, kube, c)).collect();
    let bursts: Vec<Placement> =
        contenders.iter().map(|c| place(kube, c, BURST, &[1], burst_pods, burst_pods, deadline)).collect();
    let rss: Vec<[i64; 2]> = contenders.iter().map(peak_rss).collect();

    let plugins = contenders
        .iter()
        .zip(waves)
        .zip(latencies)
        .zip(counted)
        .zip(bursts)
        .zip(rss)
        .map(|(((((c, [one_wave, two_waves]), (add, del)), [add_requests, del_requests]), burst), rss)| {
            let (subnet, range) = c.pool(ONE_WAVE, pods);
            let (first, last) = range.unwrap_or_default();
            PluginFigures {
                name: c.name(),
                configured: configured(c),
                wave_pool: (subnet, first, last),
                one_wave,
                two_waves,
                add,
                del,
                add_requests,
                del_requests,
                burst,
                rss_add_kib: rss[0],
                rss_del_kib: rss[1],
            }
        })
        .collect();
    fig.whereabouts = Some(WhereaboutsFigures {
        kubernetes: store.version(),
        whereabouts: whereabouts.version.clone(),
        pods,
        nodes: WAVE_NODES,
        threads_per_node: WAVE_THREADS,
        retry: RETRY,
        deadline,
        burst_pods,
        plugins,
    });
    drop(store);
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("whereabouts".into(), loadavg()));
}

/// One ADD and DEL of `c`, uncounted, in a pool of its own. The API server
/// is seconds old when the first wave starts, and whereabouts' CRDs were
/// applied moments before: the server's own start-up work can hold the
/// first requests back (once, every first ADD of the suite's one wave
/// waited 2.2 s), which would count against whichever plugin goes first.
fn warm_up(c: &Contender) -> Result<(), String> {
    let plugin = c.on_node(WARM_UP, 1, 1);
    for command in ["ADD", "DEL"] {
        let run = call(&plugin, command, "warm-up");
        if !run.success {
            return Err(format!("{}: the warm-up {command} failed: {}", c.name(), String::from_utf8_lossy(&run.out)));
        }
    }
    Ok(())
}

fn not_measured(fig: &mut Figures, why: String) {
    eprintln!("    whereabouts side by side not measured: {why}");
    fig.whereabouts_note = Some(why);
}

/// How a plugin is configured, in a sentence of the report.
fn configured(c: &Contender) -> String {
    match c {
        Contender::Suite { .. } => "the cluster stack (`ipam-ds-pool`, `ipam-ds-cluster`, `ipam-da-static`, \
            `ipam-da-sequential`) with `ipam.cluster = {\"kubernetes\": {\"kubeconfig\": K, \"timeout\": 5}, \"node\": \
            N}`, K a token of deploy/kubernetes/'s DaemonSet's ServiceAccount bound to its rbac.yaml; a database per \
            node; the waves' pool cut into /26 blocks (16)"
            .into(),
        Contender::Whereabouts(_) => format!(
            "`ipam = {{\"type\": \"whereabouts\", \"range\": S, \"range_start\": A, \"range_end\": B, \
             \"configuration_path\": F}}`, F its flat file `whereabouts.conf` as its DaemonSet writes it \
             (`{{\"datastore\": \"kubernetes\", \"kubernetes\": {{\"kubeconfig\": K}}}}`), K a token of its \
             ServiceAccount `{}/whereabouts` bound to its ClusterRole `whereabouts-cni` (doc/crds/daemonset-install.yaml \
             of the module); its defaults otherwise (overlapping-range reservations on, leader election: lease \
             1500 ms, renew deadline 1000 ms, retry 500 ms)",
            plugin::NAMESPACE
        ),
    }
}

/// Pods placed by nodes 1… of `step`'s pool in waves: `waves` the nodes of
/// each wave (taken in order), `per_node` pods each, `threads` ADDs in
/// flight per node, a failed ADD retried after [`RETRY`] until it succeeds
/// or `deadline` has passed since the wave began (the pods not placed then
/// are given up). The nodes of earlier waves make no call.
fn place(
    kube: &KubeStore,
    c: &Contender,
    step: Step,
    waves: &[usize],
    per_node: usize,
    threads: usize,
    deadline: Duration,
) -> Placement {
    let nodes_total: usize = waves.iter().sum();
    let nodes: Vec<Plugin> = (1..=nodes_total).map(|k| c.on_node(step, k, per_node * nodes_total)).collect();
    let groups = c.groups();
    let addresses: Mutex<Vec<Option<IpAddr>>> = Mutex::new(Vec::new());
    let failures: Mutex<BTreeMap<u64, (usize, String)>> = Mutex::new(BTreeMap::new());
    let placing: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
    let mut server = BTreeMap::new();
    let mut leases = 0;
    let mut runs = Vec::new();
    let mut first = 0;
    for &size in waves {
        let wave = first..first + size;
        first = wave.end;
        phase(&format!(
            "whereabouts side by side, {}: {} in {}, nodes {}-{} place {per_node} pods each, {threads} ADDs in flight \
             per node, failed ADDs retried every {RETRY:?} (deadline {deadline:?})",
            c.name(),
            step.name,
            c.pool(step, per_node * nodes_total).0,
            wave.start + 1,
            wave.end
        ));
        let (placed, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let last_placed = Mutex::new(Duration::ZERO);
        let next: Vec<AtomicUsize> = wave.clone().map(|_| AtomicUsize::new(0)).collect();
        let before = kube.metrics();
        let t0 = Instant::now();
        let end = t0 + deadline;
        thread::scope(|s| {
            for (k, next) in wave.clone().zip(&next) {
                for _ in 0..threads {
                    let (p, placed, failed, last_placed) = (&nodes[k], &placed, &failed, &last_placed);
                    let (addresses, failures, placing) = (&addresses, &failures, &placing);
                    s.spawn(move || 'pods: loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= per_node || Instant::now() >= end {
                            break;
                        }
                        let container = format!("{}-{}-{i}", step.name, k + 1);
                        loop {
                            let run = call(p, "ADD", &container);
                            if run.success {
                                placed.fetch_add(1, Ordering::Relaxed);
                                let at = t0.elapsed();
                                let mut last = last_placed.lock().unwrap_or_else(|e| e.into_inner());
                                *last = (*last).max(at);
                                drop(last);
                                addresses.lock().unwrap_or_else(|e| e.into_inner()).push(run.first_address());
                                placing.lock().unwrap_or_else(|e| e.into_inner()).push(run.wall);
                                break;
                            }
                            failed.fetch_add(1, Ordering::Relaxed);
                            let answer = run.json();
                            let code = answer["code"].as_u64().unwrap_or(0);
                            let msg = answer["msg"].as_str().unwrap_or("(no error answer)").to_string();
                            failures.lock().unwrap_or_else(|e| e.into_inner()).entry(code).or_insert((0, msg)).0 += 1;
                            // A runtime tries again later; past the deadline,
                            // this pod and the rest are given up.
                            if Instant::now() + RETRY >= end {
                                break 'pods;
                            }
                            thread::sleep(RETRY);
                        }
                    });
                }
            }
        });
        let time = t0.elapsed();
        let after = kube.metrics();
        for (key, n) in difference(&api_requests_in(&before, &groups), &api_requests_in(&after, &groups)) {
            *server.entry(key).or_default() += n;
        }
        let lease_requests = |metrics: &str| api_requests_in(metrics, &[LEASES]).into_values().sum::<u64>();
        leases += lease_requests(&after).saturating_sub(lease_requests(&before));
        let run = WaveRun {
            nodes: (wave.start + 1, wave.end),
            pods: per_node * wave.len(),
            placed: placed.into_inner(),
            failed: failed.into_inner(),
            last_placed: last_placed.into_inner().unwrap_or_else(|e| e.into_inner()),
            time,
        };
        eprintln!(
            "    placed {} of {} pods, the last {:.1?} after the start; {} failed ADD attempts; every call returned \
             after {:.1?}",
            run.placed, run.pods, run.last_placed, run.failed, run.time
        );
        runs.push(run);
    }
    let addresses = addresses.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut holders: HashMap<IpAddr, usize> = HashMap::new();
    for address in addresses.iter().flatten() {
        *holders.entry(*address).or_default() += 1;
    }
    let (subnet, range) = c.pool(step, per_node * nodes_total);
    let inside = |a: &IpAddr| match &range {
        Some((first, last)) => (ip(first)..=ip(last)).contains(&to_u128(*a)),
        None => parse_cidr(&subnet).is_some_and(|net| net.contains(a)),
    };
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    for (code, (n, msg)) in &failures {
        eprintln!("    {n} ADD attempt(s) failed with code {code}, the first: {msg}");
    }
    Placement {
        waves: runs,
        held_twice: holders.values().filter(|&&n| n > 1).count(),
        without_address: addresses.iter().filter(|a| a.is_none()).count(),
        outside: holders.keys().filter(|a| !inside(a)).count(),
        failures,
        server,
        leases,
        placing_add: stats(&placing.into_inner().unwrap_or_else(|e| e.into_inner())),
    }
}

fn ip(text: &str) -> u128 {
    to_u128(text.parse().unwrap_or_else(|e| panic!("{text}: {e}")))
}

/// Step 2's latency: ADD then DEL of one pod by each plugin on node 1 of
/// [`STEADY`], in turn, the order alternating, after 5 warm-up ADDs each
/// (the suite's node claims its block, whereabouts creates its IPPool).
fn steady_latency(ctx: &Ctx, contenders: &[Contender]) -> Vec<(Latency, Latency)> {
    let n = ctx.counts.latency;
    phase(&format!("whereabouts side by side: steady-state ADD and DEL latency, {n} of each, interleaved"));
    let plugins: Vec<Plugin> = contenders.iter().map(|c| c.on_node(STEADY, 1, 0)).collect();
    for p in &plugins {
        for i in 0..5 {
            call(p, "ADD", &format!("warm-{i}")).expect_ok("a warm-up ADD");
        }
    }
    let k = plugins.len();
    let (mut add, mut del) = (vec![Vec::with_capacity(n); k], vec![Vec::with_capacity(n); k]);
    for i in 0..n {
        let order: Vec<usize> = (0..k).map(|j| (i + j) % k).collect();
        let container = format!("lat-{i}");
        for &v in &order {
            add[v].push(call(&plugins[v], "ADD", &container).expect_ok("a steady-state ADD").wall);
        }
        for &v in &order {
            del[v].push(call(&plugins[v], "DEL", &container).expect_ok("a steady-state DEL").wall);
        }
    }
    (0..k).map(|v| (Latency::of(&add[v]), Latency::of(&del[v]))).collect()
}

/// Step 2's counts: `cluster_steady` ADDs, then as many DELs, by `c` alone
/// on node 1 of [`STEADY`], each batch between two reads of the API
/// server's count; first, uncounted, as many ADDs and DELs (room: the
/// suite's node keeps the blocks it claimed).
fn counted(ctx: &Ctx, kube: &KubeStore, c: &Contender) -> [Requests; 2] {
    let n = ctx.counts.cluster_steady;
    phase(&format!("whereabouts side by side, {}: API requests of {n} steady-state ADDs and DELs", c.name()));
    let p = c.on_node(STEADY, 1, 0);
    for command in ["ADD", "DEL"] {
        for i in 0..n {
            call(&p, command, &format!("room-{i}")).expect_ok("an uncounted steady-state call");
        }
    }
    let groups = c.groups();
    ["ADD", "DEL"].map(|command| {
        let before = kube.metrics();
        let t0 = Instant::now();
        for i in 0..n {
            call(&p, command, &format!("count-{i}")).expect_ok("a counted steady-state call");
        }
        let time = t0.elapsed();
        let after = kube.metrics();
        Requests {
            calls: n,
            server: difference(&api_requests_in(&before, &groups), &api_requests_in(&after, &groups)),
            time,
        }
    })
}

/// Step 4: the largest peak RSS of [`RSS_CALLS`] ADDs, and of as many DELs,
/// on node 1 of [`STEADY`], in KiB.
fn peak_rss(c: &Contender) -> [i64; 2] {
    phase(&format!("whereabouts side by side, {}: peak RSS of {RSS_CALLS} ADDs and DELs", c.name()));
    let p = c.on_node(STEADY, 1, 0);
    ["ADD", "DEL"].map(|command| {
        (0..RSS_CALLS)
            .map(|i| {
                let container = format!("rss-{i}");
                let run = p.run_args_rss(command, &container, &cni_args(&container)).expect_ok("a peak-RSS call");
                run.maxrss_kib
            })
            .max()
            .unwrap_or(-1)
    })
}
