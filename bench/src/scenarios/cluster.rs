//! Cluster mode: the full stack with `ipam-ds-cluster` (delegates
//! `["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static",
//! "ipam-da-sequential"]`, `ipam.cluster` naming a real etcd, or a real
//! Kubernetes API server, and a node) against the same stack in local mode,
//! on one machine.
//!
//! One etcd (`TestEtcd`: Debian's etcd from PATH, on loopback ports, its data
//! in a temporary directory) serves every simulated node; a node is a node
//! name with a database of its own. Beside it, one Kubernetes API server
//! (the tests' kube-test-server: kube-apiserver and its etcd in one process,
//! see `support`) with deploy/kubernetes/'s namespace, CRDs and RBAC
//! applied; the plugins reach it with a token of the DaemonSet's
//! ServiceAccount. Without Go to build it, the etcd
//! figures are taken alone and the report says why. Pool `bench`,
//! 10.30.0.0/16, default blockSize (/26 blocks). Where a step names both
//! stores, it runs on each with the same code ([`Store`]): a store's pool is
//! kept apart from the other steps' by a key prefix in etcd, a network name
//! on the API server. In order:
//!
//! 1. **The floor**: etcd requests made in-process through the plugins' own
//!    client (`TestEtcd::client`): a range on a kept-alive connection; a
//!    read-only txn of three ranges (the shape of an ADD's confirming read) on
//!    a fresh connection, as every CNI process makes it; a put (a write etcd
//!    commits to its WAL) on a kept-alive connection.
//!    On the API server: a GET on a kept-alive connection, a GET by a new
//!    client (its TCP and TLS handshake), a replace (PUT) of an object.
//! 2. **Latency, steady state**: on each store one node that owns a block
//!    with room, and a local-mode database, on the same pool; ADD then DEL
//!    of one container, every variant in turn (the order rotating), as many
//!    times as the latency scenario runs. For comparison, a database in local
//!    mode with the cluster stack's other delegates (`ipam-da-static` too),
//!    and on each store a node with `offlineGrace` 0: no confirmation cache,
//!    every ADD confirms its block (a call's first request: its connection
//!    and TLS handshake).
//! 3. **Store requests per call, steady state** (each store): the same node is first given
//!    room for the ADDs counted (as many ADDs and DELs, not counted: it keeps
//!    its blocks), then ADDs, then as many DELs, each batch between two reads
//!    of etcd's own `grpc_server_handled_total` per method. Those calls log at
//!    debug level to a file per batch, where `ipam-ds-cluster` logs its
//!    client's count per call ("etcd requests: N range, N txn (N writing), N
//!    other"): etcd counts a txn without saying whether it wrote, the client
//!    does. The API server counts `apiserver_request_total` per verb and
//!    resource (its `/metrics`, read as the admin), the Kubernetes client
//!    "Kubernetes API requests: N (M connection(s))". The same counts of the
//!    node without confirmation cache (ADDs only), and of the first ADD of
//!    fresh nodes (each registers its node and claims its first block, in a
//!    space of their own), also timed.
//! 4. **8 nodes from empty, concurrently**: fresh node databases and a fresh
//!    key prefix in etcd; 16 workers per node each starting ADD processes one
//!    after the other (128 in flight), against the same load in local mode
//!    (8 databases, no cluster), in two interleaved halves: ADDs/s both ways,
//!    and etcd's count over every cluster ADD (block claims included), the
//!    blocks claimed (read from etcd afterwards) and whether any address was
//!    handed out twice across the nodes.
//!
//! Between steps 3 and 4, **the tight pool** (each store): step 3's counts (room first,
//! then ADDs and DELs, each batch counted by etcd and logged) for one node
//! (`node-t`, a database of its own) in a pool of few blocks,
//! 10.31.0.0/24 with blockSize 26 (4 blocks), under a key prefix of its own.
//! A pool of at most 64 blocks has its blocks shared (`shareBlocks` "auto"):
//! every ADD there is an ADD in a shared block (the address's record written
//! to the store before it is handed out), every DEL deletes that record.
//!
//! 5. **1000 pods into 1000 addresses, one wave**: 10 nodes (`node-1` …
//!    `node-10`, fresh databases, a key prefix of their own) place 100 pods
//!    each into a pool of exactly 1000 addresses (10.32.0.2–10.32.3.233 of
//!    10.32.0.0/22, blockSize 26: 16 blocks), all at once. Every pod is an
//!    ADD process with its own container id, 2 in flight per node; a failed
//!    ADD is tried again 0.5 s later, as a runtime does, until it succeeds
//!    or the wave's deadline has passed. Reported: pods placed, the time, the
//!    failed attempts, and addresses answered twice (collected from every
//!    answer). On each store.
//! 6. **The same in two waves**: nodes 1-5 place their pods and are done;
//!    then nodes 6-10 place theirs while nodes 1-5 make no call at all.
//!    On each store.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::kubernetes::objects::{NodeSpec, Object};
use ipam_ds_cluster::etcd::testing::{find_in_path, TestEtcd};
use ipam_ds_cluster::etcd::{Op, RangeRequest, Txn};
use ipam_ds_cluster::kube;
use serde_json::{json, Value};
use shared::addr::to_u128;
use shared::pool;
use shared::CniArgs;

use crate::cluster_mode::{self, difference, KubeStore, Store};
use crate::debug_log::logging;
use crate::figures::cluster::{
    ClusterFigures, ClusterFill, FirstAdds, KubeFigures, KubeFloor, PodWaves, StepCount, TightPool, Wave,
};
use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats, Latency, Plugin, Run, Stats};
use crate::setup::{bytes, Ctx};

const SUBNET: &str = "10.30.0.0/16";
/// The network and pool names of the stack's configuration (setup.rs).
const NETWORK: &str = "bench";
const POOL: &str = "bench";
/// The key prefix of the from-empty run: nothing of the earlier steps.
const FILL_PREFIX: &str = "/ipam-bench-fill";
/// The space of the fresh nodes' first ADDs.
const FIRST_SPACE: &str = "/ipam-bench-first";
pub const NODES: usize = 8;
pub const WORKERS_PER_NODE: usize = 16;
/// Requests of each kind the floor is measured with.
const FLOOR_REQUESTS: usize = 200;
/// The API server's LISTs of the floor, fewer: one after a write may wait
/// for the server's cache (100 ms).
const FLOOR_LISTS: usize = 50;
/// The blockSize of the tight pool and of the waves' pool.
const BLOCK_SIZE: u8 = 26;
/// The tight pool: few blocks (4), one node; a key prefix of its own.
const TIGHT_SUBNET: &str = "10.31.0.0/24";
const TIGHT_PREFIX: &str = "/ipam-bench-tight";
/// The waves' pool: [`WAVE_RANGE`] of this subnet, exactly [`WAVE_PODS`]
/// addresses (the gateway, 10.32.0.1, and the network address outside it).
const WAVE_SUBNET: &str = "10.32.0.0/22";
const WAVE_RANGE: (&str, &str) = ("10.32.0.2", "10.32.3.233");
/// Pods placed by the waves, as many as the pool's addresses.
pub const WAVE_PODS: usize = 1000;
pub const WAVE_NODES: usize = 10;
/// ADDs in flight per node in the waves.
pub const WAVE_THREADS: usize = 2;
/// How long a failed ADD of the waves waits before it is tried again.
const RETRY: Duration = Duration::from_millis(500);

/// What the latency step measured of one store: ADD and DEL of the steady
/// node, and of the node without confirmation cache.
struct StoreLatency {
    add: Latency,
    del: Latency,
    add_confirming: Latency,
    del_confirming: Latency,
}

/// What the steps measure on each store, after the latency step.
struct StoreCounts {
    steady_add: StepCount,
    steady_del: StepCount,
    confirming_add: StepCount,
    first_add: FirstAdds,
    tight: TightPool,
    waves: [PodWaves; 2],
}

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    if find_in_path("etcd").is_none() {
        fig.cluster_note = Some("etcd not found in PATH (apt-get install etcd-server)".into());
        eprintln!("    cluster mode not measured: {}", fig.cluster_note.as_deref().unwrap_or_default());
        return;
    }
    let scratch = ctx.scenario_dir("cluster");
    let dir = scratch.path();
    let started = phase("cluster mode: starting etcd; the floor of one etcd request");
    let etcd = TestEtcd::start();
    let (floor_range, floor_fresh_txn, floor_put) = floor(&etcd);
    let etcd = Store::Etcd(etcd);

    phase("cluster mode: starting the Kubernetes API server (kube-test-server, built as the tests build it)");
    let (kube, kube_note) = match KubeStore::try_start(dir) {
        Ok(kube) => (Some(kube), None),
        Err(why) => {
            eprintln!("    the Kubernetes store not measured: {why}");
            (None, Some(why))
        }
    };
    let kube_floor = kube.as_ref().map(|kube| {
        phase("cluster mode: the floor of one Kubernetes API request");
        kube_floor(kube)
    });
    let kube = kube.map(Store::Kubernetes);
    let stores: Vec<&Store> = std::iter::once(&etcd).chain(&kube).collect();

    let (local, mut latencies) = latency(ctx, dir, &stores);
    let mut counts: Vec<StoreCounts> = stores.iter().map(|store| counted_steps(ctx, store, dir)).collect();
    let fill = from_empty(ctx, &etcd, dir);

    let (etcd_latency, etcd_counts) = (latencies.remove(0), counts.remove(0));
    let kube = match (kube.as_ref(), latencies.pop(), counts.pop(), kube_floor) {
        (Some(kube), Some(latency), Some(counted), Some(floor)) => Some(KubeFigures {
            version: kube.version(),
            add: latency.add,
            del: latency.del,
            add_confirming: latency.add_confirming,
            del_confirming: latency.del_confirming,
            steady_add: counted.steady_add,
            steady_del: counted.steady_del,
            confirming_add: counted.confirming_add,
            first_add: counted.first_add,
            tight: counted.tight,
            waves: counted.waves,
            floor,
        }),
        _ => None,
    };
    fig.cluster = Some(ClusterFigures {
        etcd: etcd.version(),
        add_cluster: etcd_latency.add,
        add_local: local[0],
        del_cluster: etcd_latency.del,
        del_local: local[1],
        add_local_static: local[2],
        del_local_static: local[3],
        steady_add: etcd_counts.steady_add,
        steady_del: etcd_counts.steady_del,
        tight: etcd_counts.tight,
        fill,
        waves: etcd_counts.waves,
        floor_range,
        floor_fresh_txn,
        floor_put,
        first_add: etcd_counts.first_add,
        add_confirming: etcd_latency.add_confirming,
        del_confirming: etcd_latency.del_confirming,
        confirming_add: etcd_counts.confirming_add,
        kube,
        kube_note,
    });
    drop(etcd);
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("cluster".into(), loadavg()));
}

/// Step 2: ADD then DEL of one container by every variant in turn (the
/// order rotating): local mode, local mode with ipam-da-static, then per
/// store the steady node and the node without confirmation cache. The local
/// modes' [ADD, DEL, ADD with ipam-da-static, DEL with it], and each
/// store's.
fn latency(ctx: &Ctx, dir: &Path, stores: &[&Store]) -> ([Latency; 4], Vec<StoreLatency>) {
    let n = ctx.counts.latency;
    let names: Vec<&str> = stores.iter().map(|s| s.name()).collect();
    phase(&format!(
        "cluster mode: steady-state ADD and DEL latency, {n} of each, on {} and in local mode, interleaved",
        names.join(" and ")
    ));
    let local_conf = ctx.stack_config(&dir.join("local.sqlite"), SUBNET);
    // For comparison: local mode with the cluster stack's other delegates
    // (ipam-da-static too), so that the cluster delegate's own cost shows.
    let mut static_conf = ctx.stack_config(&dir.join("local-static.sqlite"), SUBNET);
    static_conf["ipam"]["delegates"] = json!(["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"]);
    let mut variants = vec![ctx.stack_with(&local_conf), ctx.stack_with(&static_conf)];
    for store in stores {
        variants.push(ctx.stack_with(&steady_config(ctx, store, dir, None)));
        variants.push(ctx.stack_with(&confirming_config(ctx, store, dir, None)));
    }
    // Warm-up, not counted: the nodes claim their first block, the local
    // databases are created; all keep these leases.
    for p in &variants {
        for i in 0..5 {
            p.run("ADD", &format!("warm-{i}")).expect_ok("cluster-mode warm-up ADD");
        }
    }
    let k = variants.len();
    let mut add = vec![Vec::with_capacity(n); k];
    let mut del = vec![Vec::with_capacity(n); k];
    for i in 0..n {
        // Each variant first, last and between in turn.
        let order: Vec<usize> = (0..k).map(|j| (i + j) % k).collect();
        let container = format!("lat-{i}");
        for &v in &order {
            add[v].push(variants[v].run("ADD", &container).expect_ok("cluster-mode latency ADD").wall);
        }
        for &v in &order {
            del[v].push(variants[v].run("DEL", &container).expect_ok("cluster-mode latency DEL").wall);
        }
    }
    let of = |v: usize| (Latency::of(&add[v]), Latency::of(&del[v]));
    let local = [of(0).0, of(0).1, of(1).0, of(1).1];
    let each = (0..stores.len())
        .map(|s| {
            let ((add, del), (add_confirming, del_confirming)) = (of(2 + 2 * s), of(3 + 2 * s));
            StoreLatency { add, del, add_confirming, del_confirming }
        })
        .collect();
    (local, each)
}

/// Steps 3, the tight pool, 5 and 6 on `store`.
fn counted_steps(ctx: &Ctx, store: &Store, dir: &Path) -> StoreCounts {
    let name = store.name();
    let tag = |step: &str| format!("{}-{step}", if matches!(store, Store::Etcd(_)) { "etcd" } else { "kube" });
    let steady = ctx.counts.cluster_steady;
    phase(&format!("cluster mode on {name}: requests per call, {steady} steady-state ADDs and DELs (logged at debug)"));
    let [steady_add, steady_del] =
        count_steady(ctx, store, dir, &tag("steady"), steady, &|log| steady_config(ctx, store, dir, log));
    phase(&format!(
        "cluster mode on {name}: requests per ADD without confirmation cache (offlineGrace 0), {steady} ADDs and DELs"
    ));
    let [confirming_add, _] =
        count_steady(ctx, store, dir, &tag("confirming"), steady, &|log| confirming_config(ctx, store, dir, log));

    let first = ctx.counts.cluster_tight;
    phase(&format!("cluster mode on {name}: the first ADD of {first} fresh nodes (each registers, claims a block)"));
    let first_add = first_adds(ctx, store, dir, &tag("first"), first);

    let tight_n = ctx.counts.cluster_tight;
    phase(&format!(
        "cluster mode on {name}: requests per call in a tight pool ({TIGHT_SUBNET}, blockSize {BLOCK_SIZE}: shared \
         blocks), {tight_n} steady-state ADDs and DELs (logged at debug)"
    ));
    let tight_db = dir.join(format!("{}-node-t.sqlite", tag("tight")));
    let tight_config = |log: Option<&Path>| {
        let mut config = with_log(store.configured(ctx.stack_config(&tight_db, SUBNET), "node-t"), log);
        store.in_space(&mut config, tight_pool(), TIGHT_PREFIX);
        config
    };
    let (tight_usable, tight_blocks) = pool_size(&tight_config(None));
    let [tight_add, tight_del] = count_steady(ctx, store, dir, &tag("tight"), tight_n, &tight_config);
    let tight = TightPool {
        subnet: TIGHT_SUBNET,
        block_size: BLOCK_SIZE,
        usable: tight_usable,
        blocks: tight_blocks,
        claimed: store.claimed_blocks(TIGHT_PREFIX, NETWORK, POOL),
        add: tight_add,
        del: tight_del,
    };
    let one_wave = pods_in_waves(ctx, store, dir, "one wave", "/ipam-bench-one-wave", &[WAVE_NODES]);
    let half = WAVE_NODES / 2;
    let two_waves = pods_in_waves(ctx, store, dir, "two waves", "/ipam-bench-two-waves", &[half, WAVE_NODES - half]);
    StoreCounts { steady_add, steady_del, confirming_add, first_add, tight, waves: [one_wave, two_waves] }
}

/// `config` logging at debug level to `log`, if given.
fn with_log(config: Value, log: Option<&Path>) -> Value {
    match log {
        Some(log) => logging(&config, log),
        None => config,
    }
}

/// The steady-state node on `store` (`node-a`, a database of its own per
/// store) in pool [`SUBNET`]; `log`: every delegate logs at debug level there.
fn steady_config(ctx: &Ctx, store: &Store, dir: &Path, log: Option<&Path>) -> Value {
    let db = dir.join(format!("{}-node-a.sqlite", store.name().replace(' ', "-")));
    with_log(store.configured(ctx.stack_config(&db, SUBNET), "node-a"), log)
}

/// The node without confirmation cache on `store` (`node-c`, `offlineGrace`
/// 0: every ADD confirms its block), in pool [`SUBNET`].
fn confirming_config(ctx: &Ctx, store: &Store, dir: &Path, log: Option<&Path>) -> Value {
    let db = dir.join(format!("{}-node-c.sqlite", store.name().replace(' ', "-")));
    let mut config = store.configured(ctx.stack_config(&db, SUBNET), "node-c");
    config["ipam"]["cluster"]["offlineGrace"] = json!(0);
    with_log(config, log)
}

/// The tight pool: [`TIGHT_SUBNET`] cut into /[`BLOCK_SIZE`] blocks (4).
fn tight_pool() -> Value {
    json!({ "name": POOL, "ranges": [{ "subnet": TIGHT_SUBNET }], "blockSize": BLOCK_SIZE })
}

/// The pool of the waves: [`WAVE_RANGE`] of [`WAVE_SUBNET`], exactly
/// [`WAVE_PODS`] addresses to hand out (checked by [`pool_size`]).
fn wave_pool() -> Value {
    json!({
        "name": POOL,
        "ranges": [{ "subnet": WAVE_SUBNET, "rangeStart": WAVE_RANGE.0, "rangeEnd": WAVE_RANGE.1 }],
        "blockSize": BLOCK_SIZE,
    })
}

/// The first pool of a configuration as the suite reads it: how many
/// addresses it hands out, and how many blocks ipam-ds-cluster cuts it into.
fn pool_size(config: &Value) -> (u128, u128) {
    let conf = shared::NetConf::parse(&bytes(config)).unwrap_or_else(|e| panic!("the bench's pool configuration: {e}"));
    let pool = pool::candidates(&conf, &CniArgs::default())
        .ok()
        .and_then(|pools| pools.into_iter().next())
        .unwrap_or_else(|| panic!("the bench's pool configuration has no pool: {config}"));
    let usable = pool.allocatable().iter().map(|&(lo, hi)| to_u128(hi) - to_u128(lo) + 1).sum();
    (usable, Geometry::of(&pool).block_count())
}

/// `n` calls of `command` by `plugin` (containers `count-0` …), between two
/// reads of the store's own count; the client's count from the log `log`
/// they wrote. Also their times.
fn counted_batch(store: &Store, plugin: &Plugin, command: &str, n: usize, log: &Path) -> (StepCount, Vec<Duration>) {
    store.count_calls(n, log, || {
        (0..n).map(|i| plugin.run(command, &format!("count-{i}")).expect_ok("cluster-mode counted call").wall).collect()
    })
}

/// `n` ADDs, then `n` DELs of the same containers, by one node, each batch
/// counted by the store and by the client's log (`dir/<tag>-ADD.log`,
/// `…-DEL.log`). First, not counted, room for them: `n` ADDs and `n` DELs
/// (the node keeps the blocks it claimed). `config(log)`: the node's
/// configuration, logging at debug level to `log` if given.
fn count_steady(
    ctx: &Ctx,
    store: &Store,
    dir: &Path,
    tag: &str,
    n: usize,
    config: &dyn Fn(Option<&Path>) -> Value,
) -> [StepCount; 2] {
    let unlogged = ctx.stack_with(&config(None));
    for i in 0..n {
        unlogged.run("ADD", &format!("room-{i}")).expect_ok("cluster-mode ADD (making room)");
    }
    for i in 0..n {
        unlogged.run("DEL", &format!("room-{i}")).expect_ok("cluster-mode DEL (making room)");
    }
    ["ADD", "DEL"].map(|command| {
        let log = dir.join(format!("{tag}-{command}.log"));
        counted_batch(store, &ctx.stack_with(&config(Some(&log))), command, n, &log).0
    })
}

/// The first ADD of `n` fresh nodes (`first-0` …, each a database of its
/// own, in the space [`FIRST_SPACE`]), one after the other: each registers
/// its node and claims its first block. Counted and timed.
fn first_adds(ctx: &Ctx, store: &Store, dir: &Path, tag: &str, n: usize) -> FirstAdds {
    let log = dir.join(format!("{tag}-ADD.log"));
    let before = store.counted();
    let mut times = Vec::with_capacity(n);
    for k in 0..n {
        let node = format!("first-{k}");
        let config = store.configured(ctx.stack_config(&dir.join(format!("{tag}-{node}.sqlite")), SUBNET), &node);
        let mut config = logging(&config, &log);
        let pool = config["ipam"]["pools"][0].clone();
        store.in_space(&mut config, pool, FIRST_SPACE);
        times.push(ctx.stack_with(&config).run("ADD", "first").expect_ok("a fresh node's first ADD").wall);
    }
    let after = store.counted();
    let (client, logged) = store.client_counts(&fs::read_to_string(&log).unwrap_or_default());
    FirstAdds {
        latency: Some(stats(&times)),
        count: StepCount { calls: n, server: difference(&before, &after), client, logged },
        claimed: store.claimed_blocks(FIRST_SPACE, NETWORK, POOL),
    }
}

/// One etcd request from the plugins' client, in-process: a range on a
/// kept-alive connection, a read-only txn of three ranges on a fresh
/// connection (what a CNI process pays for an ADD's confirming read), and a
/// put on a kept-alive connection.
fn floor(etcd: &TestEtcd) -> (Stats, Stats, Stats) {
    let key = |k: &str| format!("/ipam-bench-floor/{k}").into_bytes();
    let client = etcd.client();
    let put = |client: &ipam_ds_cluster::etcd::Client, i: usize| {
        let txn = Txn {
            success: vec![Op::Put { key: key("put"), value: format!("{i}").into_bytes(), lease: 0 }],
            ..Txn::default()
        };
        client.txn(&txn).unwrap_or_else(|e| panic!("etcd put: {e}"));
    };
    put(&client, 0);
    let confirm = Txn {
        success: vec![
            Op::Range(RangeRequest::key(key("wanted")).keys_only()),
            Op::Range(RangeRequest::key(key("put"))),
            Op::Range(RangeRequest::prefix(key("addrs/"))),
        ],
        ..Txn::default()
    };
    let (mut range, mut fresh, mut puts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..FLOOR_REQUESTS {
        range.push(time(&mut || {
            client.range(&RangeRequest::key(key("put"))).unwrap_or_else(|e| panic!("etcd range: {e}"));
        }));
        fresh.push(time(&mut || {
            etcd.client().txn(&confirm).unwrap_or_else(|e| panic!("etcd txn: {e}"));
        }));
        puts.push(time(&mut || put(&client, i)));
    }
    (stats(&range), stats(&fresh), stats(&puts))
}

/// How long `f` took.
fn time(f: &mut dyn FnMut()) -> Duration {
    let t0 = Instant::now();
    f();
    t0.elapsed()
}

/// One API request from the plugins' client (`ipam_ds_cluster::kube`),
/// in-process, with the plugins' kubeconfig: a GET of an `IPDNode` on a
/// kept-alive connection; the same GET by a new client (a new connection:
/// TCP and TLS handshake, as every CNI process makes its first request);
/// a replace (PUT) of it at its resourceVersion on a kept-alive connection;
/// for the first [`FLOOR_LISTS`] of those, a LIST of the blocks (a
/// consistent read, as a confirming ADD and a claim make it) right after
/// the replace, and again.
fn kube_floor(kube: &KubeStore) -> KubeFloor {
    let kubeconfig = kube::Kubeconfig::read(kube.kubeconfig()).unwrap_or_else(|e| panic!("the kubeconfig: {e}"));
    let settings = kube::Settings { kubeconfig: kubeconfig.into(), timeout: Duration::from_secs(5) };
    let new_client = || kube::Client::new(&settings).unwrap_or_else(|e| panic!("the Kubernetes client: {e}"));
    let resource = kube::Resource { group: cluster_mode::GROUP, version: cluster_mode::VERSION, plural: "ipdnodes" };
    let spec = NodeSpec {
        network: "ipam-bench-floor".into(),
        node: "floor".into(),
        // A database's id, as the schema wants it: 32 hex digits.
        db: format!("{:032x}", 0),
        offline_grace: Duration::from_secs(300),
        timeout: Duration::from_secs(5),
    };
    let object = serde_json::to_value(Object::new(spec)).unwrap_or_else(|e| panic!("an IPDNode: {e}"));
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let client = new_client();
    let mut current = match client.create(&resource, &object).unwrap_or_else(|e| panic!("creating {name}: {e}")) {
        kube::Answer { outcome: kube::Created::Created(created), .. } => created.0,
        other => panic!("creating the IPDNode {name}: {other:?}"),
    };
    let get = |client: &kube::Client| match client.get(&resource, &name) {
        Ok(kube::Answer { outcome: Some(_), .. }) => {}
        other => panic!("GET of the IPDNode {name}: {other:?}"),
    };
    let blocks = kube::Resource { group: cluster_mode::GROUP, version: cluster_mode::VERSION, plural: "ipdblocks" };
    let list = |client: &kube::Client| {
        if let Err(e) = client.list(&blocks, &kube::Selectors::default()) {
            panic!("LIST of the IPDBlocks: {e}");
        }
    };
    let (mut gets, mut fresh, mut puts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lists_after_write, mut lists) = (Vec::new(), Vec::new());
    for i in 0..FLOOR_REQUESTS {
        gets.push(time(&mut || get(&client)));
        fresh.push(time(&mut || get(&new_client())));
        current["spec"]["db"] = json!(format!("{:032x}", i + 1));
        let version = current["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        puts.push(time(&mut || {
            current = match client.replace(&resource, &name, &version, &current) {
                Ok(kube::Answer { outcome: kube::Replaced::Replaced(replaced), .. }) => replaced.0,
                other => panic!("replacing the IPDNode {name}: {other:?}"),
            };
        }));
        if i < FLOOR_LISTS {
            lists_after_write.push(time(&mut || list(&client)));
            lists.push(time(&mut || list(&client)));
        }
    }
    KubeFloor {
        get: stats(&gets),
        fresh_get: stats(&fresh),
        put: stats(&puts),
        list_after_write: stats(&lists_after_write),
        list: stats(&lists),
    }
}

/// Step 4: `cluster_adds` ADDs by [`NODES`] nodes from empty, each node
/// [`WORKERS_PER_NODE`]-way concurrent, and the same in local mode, in two
/// interleaved halves.
fn from_empty(ctx: &Ctx, store: &Store, dir: &Path) -> ClusterFill {
    let per_node = ctx.counts.cluster_adds / NODES;
    let total = per_node * NODES;
    phase(&format!(
        "cluster mode: {total} ADDs by {NODES} nodes from empty, {WORKERS_PER_NODE} processes in flight per node, \
         against as many in local mode ({NODES} databases), in two interleaved halves"
    ));
    let node_dir = |mode: &str| {
        let d = dir.join(mode);
        fs::create_dir_all(&d).expect("node dir");
        d
    };
    let (cluster_dir, local_dir) = (node_dir("cluster-nodes"), node_dir("local-nodes"));
    let nodes: Vec<[Plugin; 2]> = (0..NODES)
        .map(|k| {
            let name = format!("node-{k}");
            let mut cluster =
                store.configured(ctx.stack_config(&cluster_dir.join(format!("{name}.sqlite")), SUBNET), &name);
            let pool = cluster["ipam"]["pools"][0].clone();
            store.in_space(&mut cluster, pool, FILL_PREFIX);
            let local = ctx.stack_config(&local_dir.join(format!("{name}.sqlite")), SUBNET);
            [ctx.stack_with(&cluster), ctx.stack_with(&local)]
        })
        .collect();
    let mut spent = [Duration::ZERO; 2];
    let mut outcomes: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
    let mut etcd_count: BTreeMap<String, u64> = BTreeMap::new();
    for half in 0..2 {
        let count = per_node / 2 + if half == 0 { per_node % 2 } else { 0 };
        for v in 0..2 {
            let before = (v == 0).then(|| store.counted());
            let done = Mutex::new(Vec::with_capacity(count * NODES));
            let t0 = Instant::now();
            thread::scope(|s| {
                for node in &nodes {
                    let next = std::sync::Arc::new(AtomicUsize::new(0));
                    for _ in 0..WORKERS_PER_NODE {
                        let (next, done, p) = (next.clone(), &done, &node[v]);
                        s.spawn(move || loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= count {
                                break;
                            }
                            let run = p.run("ADD", &format!("fill-{half}-{i}"));
                            done.lock().unwrap_or_else(|e| e.into_inner()).push(run);
                        });
                    }
                }
            });
            spent[v] += t0.elapsed();
            outcomes[v].extend(done.into_inner().unwrap_or_else(|e| e.into_inner()));
            if let Some(before) = before {
                for (method, n) in difference(&before, &store.counted()) {
                    *etcd_count.entry(method).or_default() += n;
                }
            }
        }
    }
    let blocks = store.claimed_blocks(FILL_PREFIX, NETWORK, POOL);
    let failures = |v: usize| -> Vec<u64> {
        outcomes[v].iter().filter(|r| !r.success).map(|r| r.json()["code"].as_u64().unwrap_or(0)).collect()
    };
    // Across the nodes, in cluster mode, no address may be handed out twice.
    let mut holders: HashMap<IpAddr, usize> = HashMap::new();
    for run in outcomes[0].iter().filter(|r| r.success) {
        if let Some(address) = run.first_address() {
            *holders.entry(address).or_default() += 1;
        }
    }
    let ok = |v: usize| outcomes[v].iter().filter(|r| r.success).count();
    let mut failure_messages: Vec<(u64, String)> = Vec::new();
    for run in outcomes[0].iter().filter(|r| !r.success) {
        let answer = run.json();
        let code = answer["code"].as_u64().unwrap_or(0);
        if !failure_messages.iter().any(|(c, _)| *c == code) {
            let message = failure_message(&answer);
            eprintln!("    a cluster-mode ADD failed with code {code}: {message}");
            failure_messages.push((code, message));
        }
    }
    ClusterFill {
        nodes: NODES,
        workers_per_node: WORKERS_PER_NODE,
        adds: total,
        cluster_ok: ok(0),
        cluster_failures: failures(0),
        failure_messages,
        cluster_time: spent[0],
        local_ok: ok(1),
        local_failures: failures(1),
        local_time: spent[1],
        etcd: etcd_count,
        blocks,
        duplicates: holders.values().filter(|&&n| n > 1).count(),
        without_address: ok(0) - holders.values().sum::<usize>(),
    }
}

/// Steps 5 and 6: [`WAVE_PODS`] pods on [`WAVE_NODES`] nodes into a pool of
/// exactly as many addresses ([`wave_pool`]), under the key prefix
/// `prefix` (a space of its own, see [`Store`]) and with fresh node
/// databases. `waves`: how many nodes each wave
/// has (the nodes taken in order), one wave after the other. Each node of a
/// wave places its share of the pods [`WAVE_THREADS`] at a time, every
/// failed ADD retried after [`RETRY`] as a runtime does, until it is placed
/// or the wave's deadline (`cluster_wave_secs`) has passed. The nodes of
/// earlier waves make no call.
fn pods_in_waves(ctx: &Ctx, store: &Store, dir: &Path, name: &'static str, prefix: &str, waves: &[usize]) -> PodWaves {
    let node_dir = dir.join(format!("{}{prefix}", store.name().replace(' ', "-")));
    fs::create_dir_all(&node_dir).expect("node dir");
    let configs: Vec<Value> = (0..WAVE_NODES)
        .map(|k| {
            let node = format!("node-{}", k + 1);
            let mut config =
                store.configured(ctx.stack_config(&node_dir.join(format!("{node}.sqlite")), SUBNET), &node);
            store.in_space(&mut config, wave_pool(), prefix);
            config
        })
        .collect();
    let nodes: Vec<Plugin> = configs.iter().map(|config| ctx.stack_with(config)).collect();
    let (usable, blocks) = configs.first().map_or((0, 0), pool_size);
    assert_eq!(usable, WAVE_PODS as u128, "the waves' pool must hand out exactly {WAVE_PODS} addresses");
    let per_node = WAVE_PODS / WAVE_NODES;
    let deadline = Duration::from_secs(ctx.counts.cluster_wave_secs);
    let mut server: BTreeMap<String, u64> = BTreeMap::new();
    let addresses: Mutex<Vec<Option<IpAddr>>> = Mutex::new(Vec::with_capacity(WAVE_PODS));
    let failures: Mutex<BTreeMap<u64, (usize, String)>> = Mutex::new(BTreeMap::new());
    let mut done = Vec::new();
    let mut first = 0;
    for &size in waves {
        let wave = first..(first + size).min(WAVE_NODES);
        first = wave.end;
        phase(&format!(
            "cluster mode on {}, {WAVE_PODS} pods into {WAVE_PODS} addresses, {name}: nodes {}-{} place {per_node} pods \
             each, {WAVE_THREADS} ADDs in flight per node, failed ADDs retried every {RETRY:?} (deadline {deadline:?})",
            store.name(),
            wave.start + 1,
            wave.end
        ));
        let (placed, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let next: Vec<AtomicUsize> = wave.clone().map(|_| AtomicUsize::new(0)).collect();
        let before = store.counted();
        let t0 = Instant::now();
        let end = t0 + deadline;
        thread::scope(|s| {
            for (k, next) in wave.clone().zip(&next) {
                for _ in 0..WAVE_THREADS {
                    let (p, placed, failed, addresses, failures) = (&nodes[k], &placed, &failed, &addresses, &failures);
                    s.spawn(move || {
                        'pods: loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= per_node || Instant::now() >= end {
                                break;
                            }
                            let container = format!("pod-{}-{i}", k + 1);
                            loop {
                                let run = p.run("ADD", &container);
                                if run.success {
                                    placed.fetch_add(1, Ordering::Relaxed);
                                    addresses.lock().unwrap_or_else(|e| e.into_inner()).push(run.first_address());
                                    break;
                                }
                                failed.fetch_add(1, Ordering::Relaxed);
                                let answer = run.json();
                                let code = answer["code"].as_u64().unwrap_or(0);
                                let mut failures = failures.lock().unwrap_or_else(|e| e.into_inner());
                                failures.entry(code).or_insert_with(|| (0, failure_message(&answer))).0 += 1;
                                drop(failures);
                                // A runtime tries again later; past the
                                // deadline, this pod and the rest are given up.
                                if Instant::now() + RETRY >= end {
                                    break 'pods;
                                }
                                thread::sleep(RETRY);
                            }
                        }
                    });
                }
            }
        });
        let elapsed = t0.elapsed();
        for (key, n) in difference(&before, &store.counted()) {
            *server.entry(key).or_default() += n;
        }
        let wave = Wave {
            nodes: (wave.start + 1, wave.end),
            pods: per_node * wave.len(),
            placed: placed.into_inner(),
            failed: failed.into_inner(),
            time: elapsed,
        };
        eprintln!(
            "    placed {} of {} pods in {:.1?}, {} failed ADD attempts; {} of {blocks} blocks claimed",
            wave.placed,
            wave.pods,
            wave.time,
            wave.failed,
            store.claimed_blocks(prefix, NETWORK, POOL)
        );
        done.push(wave);
    }
    let addresses = addresses.into_inner().unwrap_or_else(|e| e.into_inner());
    let (first, last) = (to_u128(ip(WAVE_RANGE.0)), to_u128(ip(WAVE_RANGE.1)));
    let mut holders: HashMap<IpAddr, usize> = HashMap::new();
    for address in addresses.iter().flatten() {
        *holders.entry(*address).or_default() += 1;
    }
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    for (code, (n, msg)) in &failures {
        eprintln!("    {n} ADD attempt(s) failed with code {code}, the first: {msg}");
    }
    PodWaves {
        name,
        store: store.name(),
        nodes: WAVE_NODES,
        threads_per_node: WAVE_THREADS,
        subnet: WAVE_SUBNET,
        range: WAVE_RANGE,
        block_size: BLOCK_SIZE,
        usable,
        blocks,
        retry: RETRY,
        deadline,
        waves: done,
        failures,
        duplicates: holders.values().filter(|&&n| n > 1).count(),
        without_address: addresses.iter().filter(|a| a.is_none()).count(),
        outside: holders.keys().filter(|a| !(first..=last).contains(&to_u128(**a))).count(),
        claimed: store.claimed_blocks(prefix, NETWORK, POOL),
        server,
    }
}

/// A failed call's error answer in one line: its message and details.
fn failure_message(answer: &Value) -> String {
    let msg = answer["msg"].as_str().unwrap_or("(no error answer)");
    let details = answer["details"].as_str().map(|d| format!(" ({d})")).unwrap_or_default();
    format!("{msg}{details}")
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}
