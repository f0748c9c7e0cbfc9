//! The document as a whole: the sections' rows and sentences from given
//! figures, and their order.

use std::collections::BTreeMap;
use std::time::Duration;

use ipam_ds_cluster::etcd::RequestCount;

use super::{bounds, cluster, markdown, summary};
use ipam_ds_cluster::kube::Counts;

use crate::figures::cluster::{
    ClientCount, ClusterFigures, ClusterFill, FirstAdds, KubeFigures, KubeFloor, PodWaves, StepCount, TightPool, Wave,
};
use crate::figures::durability::{FsyncProbe, SyncCount};
use crate::figures::lock_wait::LockWait;
use crate::figures::machine::Machine;
use crate::figures::sticky::StickyFigures;
use crate::figures::Figures;
use crate::harness::{Latency, Stats};

fn figures(passed_over: usize, most_handovers: usize) -> Figures {
    let st = |median_ms, p99_ms, max_ms, n| Stats { median_ms, p99_ms, max_ms, n };
    Figures {
        counts: Some(crate::setup::QUICK),
        lock_wait: Some(LockWait {
            workers: 64,
            calls: 320,
            wait: st(180.0, 650.0, 1000.0, 320),
            hold: st(2.3, 9.0, 20.0, 320),
            latency_logged: st(200.0, 700.0, 1050.0, 320),
            latency: st(190.0, 680.0, 1010.0, 320),
            lines_per_call: (1, 1),
            failures: vec![],
            run_time: Duration::from_millis(1200),
            turn_ms: 3.75,
            acquisitions: 320,
            passed_over,
            most_passed_by: passed_over.min(240),
            unticketed: 0,
            most_handovers,
        }),
        ..Default::default()
    }
}

fn machine() -> Machine {
    let unknown = || "unknown".to_string();
    Machine {
        cpu: unknown(),
        cores: 2,
        kernel: unknown(),
        filesystem: unknown(),
        date: unknown(),
        rustc: unknown(),
        host_local: unknown(),
        suite: unknown(),
    }
}

#[test]
fn the_lock_wait_figures_are_in_the_summary_and_have_a_section() {
    let fig = figures(300, 301);
    let table = summary::table(&fig);
    assert!(table.contains("| 64-way contention: lock wait per ADD, median (n=320) | 180.00 ms |"), "{table}");
    assert!(table.contains("| 64-way contention: lock wait per ADD, p99 | 650.00 ms |"), "{table}");
    assert!(table.contains("300 of 320 waits passed over by a later ticket, one by 240) | 1000.00 ms |"), "{table}");
    assert!(table.contains("| served in order: none passed over | **NO** |"), "{table}");
    let md = markdown(&fig, &machine(), &table, Duration::from_secs(1));
    assert!(md.contains("## Waiting for the lock: 64 ADDs in flight at once"), "{md}");
    assert!(md.contains("| lock wait per ADD | 320 | 180.00 | 650.00 | 1000.00 |"), "{md}");
    assert!(md.contains("300 of 320 turns came after a turn with a later ticket"), "{md}");
    assert!(md.contains("So waiters are starved"), "{md}");
}

#[test]
fn waiters_served_in_order_are_said_to_be() {
    let fig = figures(0, 63);
    let md = markdown(&fig, &machine(), &summary::table(&fig), Duration::from_secs(1));
    assert!(md.contains("The waiters were served in the order they asked."), "{md}");
    assert!(summary::table(&fig).contains("| served in order: none passed over | yes |"));
}

#[test]
fn the_targets_the_layouts_and_the_bounds_are_reported() {
    let st = |median_ms, n| Stats { median_ms, p99_ms: median_ms * 1.5, max_ms: median_ms * 2.0, n };
    let named = |list: &[(&str, f64)], n| list.iter().map(|&(k, v)| (k.to_string(), st(v, n))).collect::<Vec<_>>();
    let variants = |stack, copies, seq, hl| {
        [
            ("suite: ipam-delegated (ds-pool + da-sequential)", stack),
            ("suite: ipam-delegated, copies layout (each delegate a process)", copies),
            ("suite: ipam-da-sequential alone", seq),
            ("host-local", hl),
        ]
    };
    let one = |fsync, fdatasync| SyncCount { fsync, fdatasync, sync_file_range: 0 };
    let probe = |variant: &str, case: &str, calls: Vec<SyncCount>| FsyncProbe {
        variant: variant.into(),
        case: case.into(),
        calls,
    };
    let stack = "suite: ipam-delegated (ds-pool + da-sequential)";
    let fig = Figures {
        layout: "fast layout (…), installed in /usr/lib/cni (--bin-dir)".into(),
        counts: Some(crate::setup::QUICK),
        add: named(&variants(1.4, 5.0, 1.2, 3.0), 40),
        del: named(&variants(1.6, 4.0, 1.1, 2.8), 40),
        add_cpu: named(&variants(1.0, 4.0, 0.9, 3.2), 40),
        first_add: named(&[(stack, 3.0), ("host-local", 2.5)], 12),
        floors: named(&[("/bin/true", 0.8), ("ipam-da-sequential, CNI_COMMAND=VERSION", 0.9)], 40),
        throughput: vec![
            ("suite: ipam-delegated".into(), (900.0, Duration::ZERO)),
            ("host-local".into(), (430.0, Duration::ZERO)),
        ],
        rss: vec![
            ("(floor: the launcher running /bin/true)".into(), 2755),
            ("ipam-delegated (the full stack)".into(), 4140),
            ("host-local".into(), 3830),
        ],
        fsyncs: vec![
            probe(stack, FsyncProbe::FIRST_ADD, vec![one(9, 1)]),
            probe(stack, FsyncProbe::ADD, vec![one(0, 1), one(0, 1), one(1, 2), one(0, 1)]),
            probe(stack, FsyncProbe::DEL, vec![one(0, 1); 4]),
            probe("host-local", FsyncProbe::ADD, vec![one(0, 0); 4]),
        ],
        sync_cost: Some(st(0.2, 20)),
        ..Default::default()
    };
    let table = summary::table(&fig);
    contain_all(&table, &[
        "| ADD median, full stack (n=40) | 1.40 ms | 3.00 ms | 0.47× | ≤ 0.4× | **NO** |",
        "| ADD median, full stack, copies layout (each delegate a process) | 5.00 ms | 3.00 ms | 1.67× | (comparison) |  |",
        "| ADD median, ipam-da-sequential alone | 1.20 ms | 3.00 ms | 0.40× | ≤ 0.4× | yes |",
        "| DEL median, full stack | 1.60 ms | 2.80 ms | 0.57× | ≤ 0.5× | **NO** |",
        "| first ADD on a fresh node, median (n=12; the ADD creates the database) | 3.00 ms | 2.50 ms | 1.20× | ≤ 1.0× | **NO** |",
        "| 16-way concurrent ADD throughput | 900.00 ADD/s | 430.00 ADD/s | 2.09× | ≥ 2× | yes |",
        "| peak RSS, one ADD of ipam-delegated (the full stack) | 4.04 MiB | 3.74 MiB | 1.08× | ≤ 8 MiB | yes |",
        "| fsync-family calls per ADD, steady state, full stack (strace -f, n=4) | 1.50 (1 to 3) | 0 | — | counted |  |",
        "| fsync-family calls per first ADD on a fresh node, full stack (strace -f, n=1) | 10 | — | — | counted |  |",
        "| fsync-family calls per DEL, steady state, full stack (strace -f, n=4) | 1 | — | — | counted |  |",
    ]);
    let bounds = bounds::list(&fig);
    assert!(bounds.contains("(CNI_COMMAND=VERSION) 0.90 ms"), "{bounds}");
    assert!(bounds.contains("that floor is 0.30×"), "{bounds}");
    assert!(
        bounds.contains(
            "first ADD on a fresh node: 10 (median call), so with the process floor at least about 2.90 ms, 1.16×"
        ),
        "{bounds}"
    );
    let md = markdown(&fig, &machine(), &table, Duration::from_secs(1));
    assert!(md.contains("| suite layout measured | fast layout (…), installed in /usr/lib/cni (--bin-dir) |"), "{md}");
    assert!(md.contains("## The first ADD on a fresh node (12 calls per variant)"), "{md}");
    assert!(md.contains("| ADD, host-local | 40 | 3.00 | 4.50 | 6.00 | 3.20 |"), "{md}");
    assert!(md.contains(&format!("| {stack} | ADD, steady state | 4 | 1.50 (1 to 3) | 1 | 5 | 0 |")), "{md}");
    assert!(md.contains("### What bounds the figures"), "{md}");
    if std::env::var_os("BENCH_SHOW").is_some() {
        println!("{md}");
    }
}

#[test]
fn the_floor_and_the_suites_distance_to_it_are_reported() {
    let st = |median_ms: f64| Stats { median_ms, p99_ms: median_ms * 1.5, max_ms: median_ms * 2.0, n: 40 };
    let named = |list: &[(&str, f64)]| list.iter().map(|&(k, v)| (k.to_string(), st(v))).collect::<Vec<_>>();
    // The names the latency scenario gives its variants.
    let floor = "floor: ipam-bench-floor (the least work of an ADD)";
    let latency = |stack, seq, floor_ms, hl| {
        named(&[
            ("suite: ipam-delegated (ds-pool + da-sequential)", stack),
            ("suite: ipam-delegated, copies layout (each delegate a process)", 4.0),
            ("suite: ipam-da-sequential alone", seq),
            (floor, floor_ms),
            ("host-local", hl),
        ])
    };
    let fig = Figures {
        counts: Some(crate::setup::QUICK),
        add: latency(1.8, 1.7, 1.2, 3.0),
        del: latency(1.6, 1.5, 1.1, 2.8),
        add_cpu: latency(1.0, 0.9, 0.5, 3.2),
        floors: named(&[
            ("/bin/true", 0.7),
            ("ipam-da-sequential, CNI_COMMAND=VERSION", 0.9),
            ("host-local, CNI_COMMAND=VERSION", 1.0),
            ("ipam-bench-null (the floor program's build, doing nothing)", 0.6),
        ]),
        ..Default::default()
    };
    let t = summary::table(&fig);
    contain_all(&t, &[
        "| ADD median, full stack (n=40) | 1.80 ms | 3.00 ms | 0.60× | ≤ 0.4× | **NO** |",
        "| ADD median, the floor: ipam-bench-floor (the least work of a steady-state ADD as a program of its own, built as the suite's program is) | 1.20 ms | 3.00 ms | 0.40× | (floor) |  |",
        "| ADD p99, the floor | 1.80 ms | 4.50 ms | 0.40× |  |  |",
        "| ADD median above the floor, full stack (its median − the floor's) | +0.60 ms (1.50× the floor) | +1.80 ms (2.50× the floor) | — | (distance) |  |",
        "| ADD median above the floor, ipam-da-sequential alone | +0.50 ms (1.42× the floor) | — | — | (distance) |  |",
    ]);
    let b = bounds::list(&fig);
    contain_all(
        &b,
        &[
            "Its ADD median is 1.20 ms (p99 1.80 ms, CPU 0.50 ms), 0.40× host-local's ADD median.",
            "of the floor's 1.20 ms, 0.60 ms are starting and ending a process of that build, 0.60 ms the work.",
            "(CNI_COMMAND=VERSION) takes 0.90 ms, +0.30 ms against `ipam-bench-null`",
            "The ADD median of the full stack, 1.80 ms, is +0.60 ms above the floor (1.50× the floor's).",
            "The ADD median of ipam-da-sequential alone, 1.70 ms, is +0.50 ms above the floor (1.42× the floor's).",
            "takes 1.10 ms, the full stack's 1.60 ms: +0.50 ms above it (1.45×).",
        ],
    );
    let md = markdown(&fig, &machine(), &t, Duration::from_secs(1));
    assert!(md.contains(&format!("| ADD, {floor} | 40 | 1.20 | 1.80 | 2.40 | 0.50 |")), "{md}");
    assert!(md.contains("| ipam-bench-null (the floor program's build, doing nothing) | 40 | 0.60 |"), "{md}");
    // Without the floor measured, no row or sentence claims it.
    let mut without = fig;
    without.add.retain(|(name, _)| name != floor);
    assert!(!summary::table(&without).contains("floor"), "{}", summary::table(&without));
    assert!(!bounds::list(&without).contains("The floor."), "{}", bounds::list(&without));
}

fn cluster_figures() -> ClusterFigures {
    let lat = |median_ms, p90_ms, n| Latency {
        stats: Stats { median_ms, p99_ms: p90_ms * 1.5, max_ms: p90_ms * 2.0, n },
        p90_ms,
    };
    let methods = |range, txn, put| {
        [("Range", range), ("Txn", txn), ("Put", put), ("DeleteRange", 0), ("LeaseGrant", 0), ("Authenticate", 0)]
            .into_iter()
            .map(|(m, n)| (m.to_string(), n))
            .collect::<BTreeMap<String, u64>>()
    };
    let floor = |median_ms| Stats { median_ms, p99_ms: median_ms * 2.0, max_ms: median_ms * 3.0, n: 200 };
    ClusterFigures {
        etcd: "etcd Version: 3.4.23".into(),
        add_cluster: lat(3.0, 4.0, 300),
        add_local: lat(2.0, 3.0, 300),
        del_cluster: lat(2.2, 3.0, 300),
        del_local: lat(2.0, 2.5, 300),
        add_local_static: lat(2.1, 3.1, 300),
        del_local_static: lat(2.0, 2.5, 300),
        steady_add: StepCount {
            calls: 200,
            server: methods(0, 200, 0),
            client: ClientCount::Etcd(RequestCount { ranges: 0, txns: 200, writing_txns: 0, other: 0 }),
            logged: 200,
        },
        steady_del: StepCount { calls: 200, server: methods(0, 0, 0), client: ClientCount::default(), logged: 200 },
        tight: TightPool {
            subnet: "10.31.0.0/24",
            block_size: 26,
            usable: 253,
            blocks: 4,
            claimed: 1,
            add: StepCount {
                calls: 50,
                server: methods(0, 50, 0),
                client: ClientCount::Etcd(RequestCount { ranges: 0, txns: 50, writing_txns: 50, other: 0 }),
                logged: 50,
            },
            del: StepCount { calls: 50, server: methods(0, 50, 0), client: ClientCount::default(), logged: 49 },
        },
        fill: ClusterFill {
            nodes: 8,
            workers_per_node: 16,
            adds: 2000,
            cluster_ok: 2000,
            cluster_failures: vec![],
            failure_messages: vec![],
            cluster_time: Duration::from_secs(5),
            local_ok: 2000,
            local_failures: vec![],
            local_time: Duration::from_secs(4),
            etcd: methods(0, 2060, 0),
            blocks: 40,
            duplicates: 0,
            without_address: 0,
        },
        waves: [
            pod_waves("one wave", &[(1, 10, 1000, 11.0)]),
            pod_waves("two waves", &[(1, 5, 500, 1.2), (6, 10, 320, 45.0)]),
        ],
        floor_range: floor(0.4),
        floor_fresh_txn: floor(0.7),
        floor_put: floor(0.8),
        first_add: FirstAdds {
            latency: Some(floor(9.0)),
            count: StepCount { calls: 25, server: methods(25, 75, 0), client: ClientCount::default(), logged: 25 },
            claimed: 25,
        },
        add_confirming: lat(3.5, 4.5, 300),
        del_confirming: lat(2.3, 3.0, 300),
        confirming_add: StepCount {
            calls: 200,
            server: methods(0, 200, 0),
            client: ClientCount::default(),
            logged: 200,
        },
        kube: Some(kube_figures()),
        kube_note: None,
    }
}

/// The Kubernetes store's figures: 2.2 ms steady ADD against local's 2.0 ms.
fn kube_figures() -> KubeFigures {
    let lat = |median_ms: f64, n| Latency {
        stats: Stats { median_ms, p99_ms: median_ms * 2.0, max_ms: median_ms * 3.0, n },
        p90_ms: median_ms * 1.5,
    };
    let step = |calls: usize, verbs: &[(&str, u64)]| StepCount {
        calls,
        server: verbs.iter().map(|(v, n)| (v.to_string(), *n)).collect(),
        client: ClientCount::Kubernetes(Counts {
            requests: verbs.iter().map(|(_, n)| n).sum(),
            connections: calls as u64,
        }),
        logged: calls,
    };
    let floor = |median_ms| Stats { median_ms, p99_ms: median_ms * 2.0, max_ms: median_ms * 3.0, n: 200 };
    KubeFigures {
        version: crate::cluster_mode::KUBERNETES.into(),
        add: lat(2.2, 300),
        del: lat(2.1, 300),
        add_confirming: lat(6.0, 300),
        del_confirming: lat(2.4, 300),
        steady_add: step(200, &[("GET ipdblocks", 4)]),
        steady_del: step(200, &[]),
        confirming_add: step(200, &[("GET ipdblocks", 200), ("GET ipdnodes", 200)]),
        first_add: FirstAdds {
            latency: Some(floor(30.0)),
            count: step(25, &[("GET ipdnetworks", 25), ("POST ipdnodes", 25), ("POST ipdblocks", 25)]),
            claimed: 25,
        },
        tight: TightPool {
            subnet: "10.31.0.0/24",
            block_size: 26,
            usable: 253,
            blocks: 4,
            claimed: 1,
            add: step(50, &[("PUT ipdblocks", 50)]),
            del: step(50, &[("PUT ipdblocks", 50)]),
        },
        waves: [
            pod_waves("one wave", &[(1, 10, 1000, 20.0)]),
            pod_waves("two waves", &[(1, 5, 500, 2.0), (6, 10, 500, 9.0)]),
        ],
        floor: KubeFloor {
            get: floor(0.5),
            fresh_get: floor(4.0),
            put: floor(1.5),
            list_after_write: floor(100.0),
            list: floor(1.0),
        },
    }
}

/// Waves of (first node, last node, pods placed of 100 per node, seconds).
fn pod_waves(name: &'static str, waves: &[(usize, usize, usize, f64)]) -> PodWaves {
    let failed = |placed: usize, pods: usize| if placed < pods { 450 } else { 0 };
    let waves: Vec<Wave> = waves
        .iter()
        .map(|&(first, last, placed, secs)| Wave {
            nodes: (first, last),
            pods: 100 * (last - first + 1),
            placed,
            failed: failed(placed, 100 * (last - first + 1)),
            time: Duration::from_secs_f64(secs),
        })
        .collect();
    let stalled = waves.iter().any(|w| w.placed < w.pods);
    PodWaves {
        name,
        store: "etcd",
        nodes: 10,
        threads_per_node: 2,
        subnet: "10.32.0.0/22",
        range: ("10.32.0.2", "10.32.3.233"),
        block_size: 26,
        usable: 1000,
        blocks: 16,
        retry: Duration::from_millis(500),
        deadline: Duration::from_secs(45),
        waves,
        failures: if stalled { BTreeMap::from([(100, (450, "no free IPv4 address".into()))]) } else { BTreeMap::new() },
        duplicates: 0,
        without_address: 0,
        outside: 0,
        claimed: 16,
        server: BTreeMap::from([("Txn".to_string(), 1500)]),
    }
}

#[test]
fn the_tight_pool_and_the_waves_have_their_rows_and_a_section() {
    let fig = Figures { counts: Some(crate::setup::QUICK), cluster: Some(cluster_figures()), ..Default::default() };
    let t = cluster::table(&fig);
    contain_all(&t, &[
        "| etcd writes per DEL, steady state (Put, DeleteRange, writing Txn) | 0.00 | 0 | — | (counted) |  |",
        "| etcd requests per ADD, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; etcd's count over 50 ADDs) | 1.00 | 0 | — | ≤ 1 | yes |",
        "| etcd writes per ADD, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; Put, DeleteRange, writing Txn) | 1.00 | 0 | — | (counted) |  |",
        "| etcd requests per DEL, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; etcd's count over 50 DELs) | 1.00 | 0 | — | (counted) |  |",
        // Not every DEL logged its count: its txns are taken as reads.
        "| etcd writes per DEL, tight pool (10.31.0.0/24 in 4 blocks of /26, one node; Put, DeleteRange, writing Txn; not every call logged: every Txn counted as a read) | 0.00 |",
        "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): pods placed (10 nodes, 16 blocks of /26, 2 ADDs in flight per node, a failed ADD retried every 0.5 s for at most 45 s per wave) | 1000 of 1000 | — | — | 1000 | yes |",
        "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): wall time to place them | 11.00 s | — | — | (measured) |  |",
        "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): failed ADD attempts | 0 | — | — | (counted) |  |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): pods placed (10 nodes, 16 blocks of /26, 2 ADDs in flight per node, a failed ADD retried every 0.5 s for at most 45 s per wave) | 820 of 1000 | — | — | 1000 | **NO** |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): wall time to place them | 46.20 s (1.20 + 45.00 s); 180 not placed by the deadline | — | — | (measured) |  |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): failed ADD attempts | 450 | — | — | (counted) |  |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): addresses held twice | 0 | — | — | 0 | yes |",
    ]);
    let mut c = cluster_figures();
    c.waves[0].duplicates = 1;
    c.tight.add.server = methods_txn(60);
    let bad = Figures { cluster: Some(c), ..Default::default() };
    let t = cluster::table(&bad);
    assert!(t.contains("one wave (nodes 1-10 at once): addresses held twice | 1 | — | — | 0 | **NO** |"), "{t}");
    assert!(t.contains("over 50 ADDs) | 1.20 | 0 | — | ≤ 1 | **NO** |"), "{t}");
    let md = markdown(&fig, &machine(), &summary::table(&fig), Duration::from_secs(1));
    contain_all(&md, &[
        "| ADD, tight pool | 50 | 0 | 50 | 0 | 0 | 0 | 0 | 1.000 | 0 range, 50 txn (50 writing), 0 other; 50 of 50 calls logged |",
        "The tight pool is a pool of few blocks: 10.31.0.0/24, blockSize 26 (4 blocks, 253 addresses to hand out)",
        "### 1000 pods into 1000 addresses",
        "| two waves | nodes 6-10 | 500 | 320 | 450 | 45.00 s |",
        "Two waves: 820 of 1000 pods placed in 46.20 s (1.20 + 45.00 s); 180 not placed by the deadline; 0 address(es) answered twice",
        "450 ADD attempt(s) failed with code 100; the first said: \"no free IPv4 address\"",
    ]);
}

fn methods_txn(txn: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("Txn".to_string(), txn)])
}

#[test]
fn the_cluster_figures_have_their_targets_and_a_section() {
    let fig = Figures { counts: Some(crate::setup::QUICK), cluster: Some(cluster_figures()), ..Default::default() };
    let t = cluster::table(&fig);
    contain_all(&t, &[
        "| ADD median, full stack, steady state (n=300; the node owns a block with room) | 3.00 ms | 2.00 ms | 1.50× | ≤ 1.2× | **NO** |",
        "| ADD p90, full stack, steady state | 4.00 ms | 3.00 ms | 1.33× |  |  |",
        "| etcd reads per ADD, steady state (etcd's count over 200 ADDs: Range + read-only Txn per the calls' logs) | 1.00 | 0 | — | ≤ 1 | yes |",
        "| etcd writes per ADD, steady state (Put, DeleteRange, writing Txn) | 0.00 | 0 | — | 0 | yes |",
        "| etcd requests per ADD, 8 nodes from empty (etcd's count over 2000 ADDs, 40 blocks claimed; per ADD that succeeded, 2000) | 1.030 | 0 | — | ≤ 1.1 | yes |",
        "| 8 nodes × 16-way concurrent ADD throughput (2000 ADDs each way) | 400.0 ADD/s | 500.0 ADD/s | 0.80× | (comparison) |  |",
        "| addresses handed out twice across the 8 nodes | 0 | — | — | 0 | yes |",
        "| ADDs that failed, 8 nodes from empty (a /16 pool: room for every one) | 0 | 0 | — | 0 | yes |",
    ]);
    // A writing txn in the steady state is a write, once the logs say so.
    let mut c = cluster_figures();
    c.steady_add.client = ClientCount::Etcd(RequestCount { ranges: 0, txns: 200, writing_txns: 2, other: 0 });
    assert_eq!((c.steady_add.reads(), c.steady_add.writes()), (198, 2));
    c.steady_add.logged = 199;
    assert_eq!((c.steady_add.reads(), c.steady_add.writes()), (200, 0));
    let fig_split = Figures { cluster: Some(c), ..Default::default() };
    assert!(cluster::table(&fig_split).contains("| 0 | — | 0 | **NO** |"), "{}", cluster::table(&fig_split));
    let b = bounds::list(&fig);
    assert!(b.contains("2.00 + 0.70 = 2.70 ms (1.35×) for the ADD that reads"), "{b}");
    let md = markdown(&fig, &machine(), &summary::table(&fig), Duration::from_secs(1));
    assert!(md.contains("## Cluster mode: `ipam-ds-cluster` on etcd and on the Kubernetes API"), "{md}");
    assert!(md.contains("| ADD, steady state | 200 | 0 | 200 | 0 | 0 | 0 | 0 | 1.000 | 0 range, 200 txn (0 writing), 0 other; 200 of 200 calls logged |"), "{md}");
    assert!(md.contains("| cluster mode | 2000 | 2000 | 0 | 5.00 s | 400.0 |"), "{md}");
    let mut c = cluster_figures();
    c.fill.cluster_ok = 1997;
    c.fill.cluster_failures = vec![100, 11, 100];
    c.fill.failure_messages = vec![(100, "no free IPv4 address".into()), (11, "try again".into())];
    let failing = Figures { counts: Some(crate::setup::QUICK), cluster: Some(c), ..Default::default() };
    let md = markdown(&failing, &machine(), &summary::table(&failing), Duration::from_secs(1));
    assert!(md.contains("| cluster mode | 2000 | 1997 | 3 (code 11 × 1, code 100 × 2) |"), "{md}");
    assert!(md.contains("A cluster-mode ADD that failed with code 100 said: \"no free IPv4 address\""), "{md}");
    assert!(cluster::table(&failing).contains("(a /16 pool: room for every one) | 3 | 0 | — | 0 | **NO** |"));
    let missing = Figures { cluster_note: Some("etcd not found in PATH".into()), ..Default::default() };
    assert!(cluster::table(&missing).contains("not measured: etcd not found in PATH"));
    if std::env::var_os("BENCH_SHOW").is_some() {
        println!("{md}");
    }
}

#[test]
fn the_two_stores_side_by_side_have_their_targets_and_a_section() {
    let fig = Figures { counts: Some(crate::setup::QUICK), cluster: Some(cluster_figures()), ..Default::default() };
    let t = cluster::side_by_side(&fig);
    contain_all(&t, &[
        "| ADD median, steady state (n=300; the node owns a block with room) | 2.00 ms | 3.00 ms (1.50×) | 2.20 ms (1.10×) | ≤ 1.2× local | yes |",
        "| DEL median, steady state | 2.00 ms | 2.20 ms | 2.10 ms |  |  |",
        "| requests per ADD, steady state (the store's count over 200 ADDs) | 0 | 1.000 | 0.020 | 0 (the confirmation cache, 2 s) |  |",
        "| writes per ADD, steady state | 0 | 0.000 | 0.000 | 0 | yes |",
        "| requests per ADD, steady state, as the plugin logged them | 0 | 1.000 | 0.020 (1.000 connections) | (counted) |  |",
        "| requests per ADD without confirmation cache (over 200 ADDs) | 0 | 1.000 | 2.000 | (counted) |  |",
        "| requests per ADD in a shared block (10.31.0.0/24 in 4 blocks of /26, one node; over 50 calls) | 0 | 1.000 | 1.000 | 1 | yes |",
        "| writes per ADD in a shared block | 0 | 1.000 | 1.000 | (counted) |  |",
        "| requests per first ADD of a fresh node: the node registered, its first block claimed (over 25 nodes) | 0 | 4.000 | 3.000 | (counted) |  |",
        "| writes per first ADD of a fresh node | 0 | 0.000 | 2.000 | (counted) |  |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): pods placed | — | 820 of 1000 | 1000 of 1000 | 1000 | yes |",
        "| 1000 pods into 1000 addresses, two waves (nodes 1-5, then nodes 6-10): time to the last | — | 46.20 s (1.20 + 45.00 s); 180 not placed by the deadline | 11.00 s (2.00 + 9.00 s) | (measured) |  |",
        "| 1000 pods into 1000 addresses, one wave (nodes 1-10 at once): addresses held twice | — | 0 | 0 | 0 | yes |",
    ]);
    let mut c = cluster_figures();
    if let Some(k) = c.kube.as_mut() {
        k.add.stats.median_ms = 2.6;
        k.tight.add.server = BTreeMap::from([("GET ipdblocks".to_string(), 50), ("PUT ipdblocks".to_string(), 50)]);
        k.waves[0].duplicates = 2;
    }
    // A replace refused (409: the block changed since it was read) is a
    // request, not a write.
    let mut conflicted = kube_figures().tight.add;
    conflicted.server = BTreeMap::from([("PUT ipdblocks".to_string(), 50), ("PUT ipdblocks (409)".to_string(), 7)]);
    assert_eq!((conflicted.total(), conflicted.writes(), conflicted.reads()), (57, 50, 7));
    let bad = Figures { cluster: Some(c), ..Default::default() };
    let t = cluster::side_by_side(&bad);
    assert!(t.contains("| 2.00 ms | 3.00 ms (1.50×) | 2.60 ms (1.30×) | ≤ 1.2× local | **NO** |"), "{t}");
    assert!(t.contains("over 50 calls) | 0 | 1.000 | 2.000 | 1 | **NO** |"), "{t}");
    assert!(t.contains("one wave (nodes 1-10 at once): addresses held twice | — | 0 | 2 | 0 | **NO** |"), "{t}");
    let md = markdown(&fig, &machine(), &summary::table(&fig), Duration::from_secs(1));
    contain_all(&md, &[
        "### On the Kubernetes API, side by side with etcd",
        "| Kubernetes API server (cluster mode) | Kubernetes v1.36.3 (kube-apiserver and its etcd in one process, tests/kube) |",
        "| etcd (cluster mode) | etcd Version: 3.4.23 |",
        "| first ADD of a fresh node | 25 | GET ipdnetworks 25, POST ipdblocks 25, POST ipdnodes 25 | 3.000 | 75 requests, 25 connections; 25 of 25 calls logged |",
        "| GET of an IPDNode by a new client (TCP and TLS handshake first) | 200 | 4.00 | 8.00 | 12.00 |",
        "| LIST of the IPDBlocks (a consistent read) right after that replace of an IPDNode | 200 | 100.00 |",
        "a LIST of the blocks (a consistent read, as a confirming ADD and a claim make it) 1.00 ms, but 100.00 ms right after a write of another resource (an IPDNode)",
    ]);
    let mut c = cluster_figures();
    c.kube = None;
    c.kube_note = Some("no go command".into());
    let without = Figures { counts: Some(crate::setup::QUICK), cluster: Some(c), ..Default::default() };
    assert!(cluster::side_by_side(&without).contains("not measured: no go command"));
    let md = markdown(&without, &machine(), "", Duration::from_secs(1));
    assert!(md.contains("### On the Kubernetes API, side by side with etcd\n\nNot measured: no go command."), "{md}");
}

#[test]
fn the_sticky_section_comes_before_the_latency_section() {
    let fig = Figures {
        counts: Some(crate::setup::QUICK),
        sticky: Some(StickyFigures {
            plain_delegates: &["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"],
            sticky_delegates: &["ipam-ds-pool", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"],
            cni_args: "IgnoreUnknown=1".into(),
            subnet: "10.27.0.0/16",
            rounds: 0,
            variants: vec![],
            probes: vec![],
            fsync_note: None,
        }),
        ..Default::default()
    };
    let md = markdown(&fig, &machine(), "", Duration::from_secs(1));
    let (sticky, latency) = (md.find("## Sticky addresses"), md.find("## Latency ("));
    assert!(sticky.is_some() && sticky < latency, "{md}");
}

/// Each of `expected` is in `text` (the first one missing fails the test).
fn contain_all(text: &str, expected: &[&str]) {
    for part in expected {
        assert!(text.contains(part), "{part} missing from\n{text}");
    }
}
