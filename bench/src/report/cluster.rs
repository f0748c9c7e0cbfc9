//! Cluster mode: its summary table (also printed), the two stores side by
//! side (also printed), and its section.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::format::{ratio, server_counts, stats_row, yes};
use crate::figures::cluster::{ClusterFigures, ClusterFill, FirstAdds, KubeFigures, PodWaves, StepCount, TightPool};
use crate::figures::Figures;
use crate::harness::{Latency, Stats};

/// The cluster-mode summary (Markdown, also printed): cluster mode against
/// local mode, with the targets.
pub fn table(fig: &Figures) -> String {
    let mut t = String::new();
    t.push_str("| measurement | cluster mode | local mode | cluster / local | target | met |\n");
    t.push_str("|---|---:|---:|---:|---|---|\n");
    let mut line = |what: &str, cluster: String, local: String, r: String, target: &str, met: Option<bool>| {
        let _ = writeln!(t, "| {what} | {cluster} | {local} | {r} | {target} | {} |", met.map_or("", yes));
    };
    let Some(c) = &fig.cluster else {
        let why = fig.cluster_note.as_deref().unwrap_or("the cluster scenario did not run");
        line("cluster mode", format!("not measured: {why}"), "—".into(), "—".into(), "", None);
        return t;
    };
    let (nodes, workers_per_node) = (c.fill.nodes, c.fill.workers_per_node);
    let ms = |v: f64| format!("{v:.2} ms");
    let (ca, la) = (c.add_cluster, c.add_local);
    line(
        &format!("ADD median, full stack, steady state (n={}; the node owns a block with room)", ca.stats.n),
        ms(ca.stats.median_ms),
        ms(la.stats.median_ms),
        ratio(ca.stats.median_ms, la.stats.median_ms),
        "≤ 1.2×",
        Some(la.stats.median_ms > 0.0 && ca.stats.median_ms <= 1.2 * la.stats.median_ms),
    );
    line("ADD p90, full stack, steady state", ms(ca.p90_ms), ms(la.p90_ms), ratio(ca.p90_ms, la.p90_ms), "", None);
    let ls = c.add_local_static.stats.median_ms;
    line(
        "ADD median against local mode with ipam-da-static too (the cluster stack less ipam-ds-cluster)",
        ms(ca.stats.median_ms),
        ms(ls),
        ratio(ca.stats.median_ms, ls),
        "(comparison)",
        None,
    );
    let (cd, ld) = (c.del_cluster, c.del_local);
    line(
        "DEL median, full stack, steady state",
        ms(cd.stats.median_ms),
        ms(ld.stats.median_ms),
        ratio(cd.stats.median_ms, ld.stats.median_ms),
        "(comparison)",
        None,
    );
    let a = &c.steady_add;
    let txn_note = if a.split() { "read-only Txn per the calls' logs" } else { "every Txn counted as a read" };
    line(
        &format!("etcd reads per ADD, steady state (etcd's count over {} ADDs: Range + {txn_note})", a.calls),
        format!("{:.2}", a.per_call(a.reads())),
        "0".into(),
        "—".into(),
        "≤ 1",
        Some(a.calls > 0 && a.reads() <= a.calls as u64),
    );
    line(
        "etcd writes per ADD, steady state (Put, DeleteRange, writing Txn)",
        format!("{:.2}", a.per_call(a.writes())),
        "0".into(),
        "—".into(),
        "0",
        Some(a.split() && a.writes() == 0),
    );
    let d = &c.steady_del;
    line(
        &format!("etcd requests per DEL, steady state (etcd's count over {} DELs)", d.calls),
        format!("{:.2}", d.per_call(d.total())),
        "0".into(),
        "—".into(),
        "(counted)",
        None,
    );
    line(
        "etcd writes per DEL, steady state (Put, DeleteRange, writing Txn)",
        format!("{:.2}", d.per_call(d.writes())),
        "0".into(),
        "—".into(),
        "(counted)",
        None,
    );
    let tp = &c.tight;
    let pool = format!("tight pool ({} in {} blocks of /{}, one node", tp.subnet, tp.blocks, tp.block_size);
    let writes_note =
        |step: &StepCount| if step.split() { "" } else { "; not every call logged: every Txn counted as a read" };
    for (command, step, target) in [("ADD", &tp.add, "≤ 1"), ("DEL", &tp.del, "(counted)")] {
        line(
            &format!("etcd requests per {command}, {pool}; etcd's count over {} {command}s)", step.calls),
            format!("{:.2}", step.per_call(step.total())),
            "0".into(),
            "—".into(),
            target,
            (command == "ADD").then_some(step.calls > 0 && step.total() <= step.calls as u64),
        );
        line(
            &format!("etcd writes per {command}, {pool}; Put, DeleteRange, writing Txn{})", writes_note(step)),
            format!("{:.2}", step.per_call(step.writes())),
            "0".into(),
            "—".into(),
            "(counted)",
            None,
        );
    }
    let f = &c.fill;
    line(
        &format!(
            "etcd requests per ADD, {nodes} nodes from empty (etcd's count over {} ADDs, {} blocks claimed; per \
             ADD that succeeded, {})",
            f.adds, f.blocks, f.cluster_ok
        ),
        format!("{:.3}", f.per_add()),
        "0".into(),
        "—".into(),
        "≤ 1.1",
        Some(f.cluster_ok > 0 && f.per_add() <= 1.1),
    );
    let failed = |list: &[u64]| if list.is_empty() { String::new() } else { format!(", {} failed", list.len()) };
    let (cr, lr) = (ClusterFill::rate(f.cluster_ok, f.cluster_time), ClusterFill::rate(f.local_ok, f.local_time));
    line(
        &format!(
            "{nodes} nodes × {workers_per_node}-way concurrent ADD throughput ({} ADDs each way{}{})",
            f.adds,
            failed(&f.cluster_failures),
            if f.local_failures.is_empty() {
                String::new()
            } else {
                format!(", {} failed in local mode", f.local_failures.len())
            }
        ),
        format!("{cr:.1} ADD/s"),
        format!("{lr:.1} ADD/s"),
        ratio(cr, lr),
        "(comparison)",
        None,
    );
    line(
        &format!("addresses handed out twice across the {nodes} nodes"),
        format!("{}", f.duplicates),
        "—".into(),
        "—".into(),
        "0",
        Some(f.duplicates == 0 && f.without_address == 0),
    );
    line(
        &format!("ADDs that failed, {nodes} nodes from empty (a /16 pool: room for every one)"),
        format!("{}", f.cluster_failures.len()),
        format!("{}", f.local_failures.len()),
        "—".into(),
        "0",
        Some(f.cluster_failures.is_empty()),
    );
    for w in &c.waves {
        let what = format!("{} pods into {} addresses, {}", w.pods(), w.usable, wave_shape(w));
        line(
            &format!(
                "{what}: pods placed ({} nodes, {} blocks of /{}, {} ADDs in flight per node, a failed ADD retried \
                 every {:.1} s for at most {} s per wave)",
                w.nodes,
                w.blocks,
                w.block_size,
                w.threads_per_node,
                w.retry.as_secs_f64(),
                w.deadline.as_secs()
            ),
            format!("{} of {}", w.placed(), w.pods()),
            "—".into(),
            "—".into(),
            &format!("{}", w.pods()),
            Some(w.pods() > 0 && w.placed() == w.pods()),
        );
        line(&format!("{what}: wall time to place them"), wave_time(w), "—".into(), "—".into(), "(measured)", None);
        line(
            &format!("{what}: failed ADD attempts"),
            format!("{}", w.failed()),
            "—".into(),
            "—".into(),
            "(counted)",
            None,
        );
        line(
            &format!("{what}: addresses held twice"),
            format!("{}", w.duplicates),
            "—".into(),
            "—".into(),
            "0",
            Some(w.sound()),
        );
    }
    t
}

/// Which nodes placed their pods when: "one wave (nodes 1-10 at once)",
/// "two waves (nodes 1-5, then nodes 6-10)".
fn wave_shape(w: &PodWaves) -> String {
    let each: Vec<String> = w.waves.iter().map(|v| format!("nodes {}-{}", v.nodes.0, v.nodes.1)).collect();
    if each.len() == 1 {
        format!("{} ({} at once)", w.name, each.join(""))
    } else {
        format!("{} ({})", w.name, each.join(", then "))
    }
}

/// The waves' time, each wave's when there are several, and what was given
/// up at the deadline.
fn wave_time(w: &PodWaves) -> String {
    let mut text = format!("{:.2} s", w.time().as_secs_f64());
    if w.waves.len() > 1 {
        let each: Vec<String> = w.waves.iter().map(|v| format!("{:.2}", v.time.as_secs_f64())).collect();
        let _ = write!(text, " ({} s)", each.join(" + "));
    }
    if w.placed() < w.pods() {
        let _ = write!(text, "; {} not placed by the deadline", w.pods() - w.placed());
    }
    text
}

/// The cluster-mode section of BENCHMARKS.md.
pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Cluster mode: `ipam-ds-cluster` on etcd and on the Kubernetes API\n");
    let Some(c) = &fig.cluster else {
        let _ = writeln!(s, "{}", table(fig));
        return s;
    };
    let (nodes, workers_per_node) = (c.fill.nodes, c.fill.workers_per_node);
    let _ = writeln!(s, "The full stack in cluster mode is `ipam-delegated` with delegates `[\"ipam-ds-pool\", \"ipam-ds-cluster\", \"ipam-da-static\", \"ipam-da-sequential\"]` and `ipam.cluster = {{\"etcd\": {{\"endpoints\": [E]}}, \"node\": N}}`; local mode is the benchmark's full stack (`[\"ipam-ds-pool\", \"ipam-da-sequential\"]`, no cluster) on a database of its own. Pool `bench`, 10.30.0.0/16, default blockSize (/26 blocks). One real etcd ({}, a single member on loopback ports, its data in a temporary directory of the system temp dir) serves every simulated node; a node is a node name with a database of its own. Every call is a real process, as above.\n", c.etcd);
    let _ = writeln!(s, "{}", table(fig));
    let _ = writeln!(s, "### Latency, steady state\n\nOne node (`node-a`) that already owns a block with room (5 warm-up ADDs, not counted, claimed it), and a local-mode database on the same pool: ADD then DEL of one container, cluster and local interleaved (the order rotating), {} times. A third database, in local mode with the cluster stack's other delegates (`[\"ipam-ds-pool\", \"ipam-da-static\", \"ipam-da-sequential\"]`), is interleaved likewise for comparison: the difference between it and cluster mode is ipam-ds-cluster's own cost.\n", c.add_cluster.stats.n);
    let _ = writeln!(s, "| command, mode | n | median ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|");
    for (name, l) in [
        ("ADD, cluster mode", c.add_cluster),
        ("ADD, local mode", c.add_local),
        ("DEL, cluster mode", c.del_cluster),
        ("DEL, local mode", c.del_local),
        ("ADD, local mode with ipam-da-static", c.add_local_static),
        ("DEL, local mode with ipam-da-static", c.del_local_static),
    ] {
        let st = l.stats;
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            st.n, st.median_ms, l.p90_ms, st.p99_ms, st.max_ms
        );
    }
    let _ = writeln!(s, "\n### etcd requests per call\n\nCounted by etcd itself: `grpc_server_handled_total` per method from its `/metrics`, read before and after each batch (reading the metrics is no gRPC request). The steady-state node was first given room for the counted ADDs ({n} ADDs and {n} DELs, not counted: it keeps the blocks it claimed), then made {n} ADDs and {n} DELs, each batch logging at debug level (`ipam.logFile`, `ipam.logLevel`), where ipam-ds-cluster logs its client's count per call (`etcd requests: N range, N txn (N writing), N other`): etcd does not say whether a txn wrote, the client does. The {nodes} nodes from empty are the concurrent run below (a key prefix of their own in etcd, so the pool starts with no block claimed), not logged: their writes are the block claims (blocks in etcd afterwards), plus claims that lost a race.\n", n = c.steady_add.calls);
    let tp = &c.tight;
    let _ = writeln!(s, "The tight pool is a pool of few blocks: {}, blockSize {block_size} ({} blocks, {} addresses to hand out), under a key prefix of its own in etcd, used by one node (`node-t`, a database of its own) the same way: room first ({n} ADDs and {n} DELs, not counted), then {n} ADDs and {n} DELs, each batch counted and logged. It claimed {} of the {} blocks.\n", tp.subnet, tp.blocks, tp.usable, tp.claimed, tp.blocks, n = tp.add.calls, block_size = tp.block_size);
    let _ = writeln!(s, "| calls | n | Range | Txn | Put | DeleteRange | LeaseGrant | Authenticate | per call | the client's count (logs) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let methods = ["Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "Authenticate"];
    let count_row = |s: &mut String, name: &str, n: usize, etcd: &BTreeMap<String, u64>, client: String| {
        let _ = write!(s, "| {name} | {n} |");
        for m in methods {
            let _ = write!(s, " {} |", etcd.get(m).copied().unwrap_or(0));
        }
        let total: u64 = etcd.values().sum();
        let _ = writeln!(s, " {:.3} | {client} |", total as f64 / n.max(1) as f64);
    };
    for (name, step) in [
        ("ADD, steady state", &c.steady_add),
        ("DEL, steady state", &c.steady_del),
        ("ADD, tight pool", &c.tight.add),
        ("DEL, tight pool", &c.tight.del),
    ] {
        let client = format!("{}; {} of {} calls logged", step.client.describe(), step.logged, step.calls);
        count_row(&mut s, name, step.calls, &step.server, client);
    }
    let f = &c.fill;
    count_row(
        &mut s,
        &format!("ADD, {nodes} nodes from empty"),
        f.cluster_ok,
        &f.etcd,
        format!("not logged; {} blocks claimed", f.blocks),
    );
    let (cr, lr) = (ClusterFill::rate(f.cluster_ok, f.cluster_time), ClusterFill::rate(f.local_ok, f.local_time));
    let _ = writeln!(s, "\n### {nodes} nodes, concurrent ADDs from empty\n\n{nodes} nodes, each with {workers_per_node} worker threads that each start ADD processes one after the other ({} in flight at once), from empty: in cluster mode {nodes} fresh node databases sharing the etcd, in local mode {nodes} fresh databases and no cluster; {} ADDs each way, run in two interleaved halves (cluster, local, cluster, local). Rates count the ADDs that succeeded.\n", nodes * workers_per_node, f.adds);
    let _ = writeln!(s, "| mode | ADDs | succeeded | failed (codes) | time | ADD/s |\n|---|---:|---:|---|---:|---:|");
    let codes = |list: &[u64]| {
        let mut by_code: BTreeMap<u64, usize> = BTreeMap::new();
        for &c in list {
            *by_code.entry(c).or_default() += 1;
        }
        let each: Vec<String> = by_code.iter().map(|(c, n)| format!("code {c} × {n}")).collect();
        if list.is_empty() {
            "0".to_string()
        } else {
            format!("{} ({})", list.len(), each.join(", "))
        }
    };
    let _ = writeln!(
        s,
        "| cluster mode | {} | {} | {} | {:.2} s | {cr:.1} |",
        f.adds,
        f.cluster_ok,
        codes(&f.cluster_failures),
        f.cluster_time.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| local mode | {} | {} | {} | {:.2} s | {lr:.1} |",
        f.adds,
        f.local_ok,
        codes(&f.local_failures),
        f.local_time.as_secs_f64()
    );
    let _ = writeln!(s, "\nAcross the nodes in cluster mode, {} address(es) were answered to more than one ADD, and {} successful ADD(s) answered no address.\n", f.duplicates, f.without_address);
    for (code, msg) in &f.failure_messages {
        let _ = writeln!(s, "A cluster-mode ADD that failed with code {code} said: \"{msg}\"\n");
    }
    s.push_str(&waves(&c.waves));
    let _ = writeln!(s, "### One etcd request, from the client\n\nThrough the plugins' own client (`ipam_ds_cluster::etcd::Client`), in the benchmark's process, requests one after the other:\n");
    let _ = writeln!(s, "| request | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    s.push_str(&stats_row("range of one key, kept-alive connection", &c.floor_range));
    s.push_str(&stats_row(
        "read-only txn of 3 ranges (an ADD's confirming read), fresh connection",
        &c.floor_fresh_txn,
    ));
    s.push_str(&stats_row("txn with one put (etcd syncs its WAL), kept-alive connection", &c.floor_put));
    let _ = writeln!(
        s,
        "\nWhat these times put under the cluster figures: the etcd item of \"What bounds the figures\" above.\n"
    );
    s.push_str(&kube_section(fig, c));
    s
}

/// The pods placed into a pool of exactly as many addresses, in waves.
fn waves(runs: &[PodWaves]) -> String {
    let mut s = String::new();
    let Some(first) = runs.first() else { return s };
    let _ = writeln!(s, "### {pods} pods into {pods} addresses\n\n{nodes} nodes (`node-1` … `node-{nodes}`, each a database of its own) place {} pods each into a pool of exactly {} addresses: {subnet} from {} to {}, blockSize {block_size} ({} blocks), in a space of its own per run (a key prefix in etcd, a network on the API server). Every pod is an ADD process with its own container id; each node places its pods {threads} at a time ({threads} threads), and a failed ADD is tried again {:.1} s later (the same container id), as a runtime does, until it succeeds or the wave's deadline ({} s) has passed; pods not placed by then are given up. One wave: all {nodes} nodes at once. Two waves: nodes 1-{half} place their pods and are done, then nodes {second}-{nodes} place theirs while nodes 1-{half} make no call at all. A wave's time runs from its start until every pod of it is placed or given up. Every address answered is collected: none may be answered twice.\n", first.pods() / first.nodes, first.usable, first.range.0, first.range.1, first.blocks, first.retry.as_secs_f64(), first.deadline.as_secs(), pods = first.pods(), nodes = first.nodes, subnet = first.subnet, block_size = first.block_size, threads = first.threads_per_node, half = first.nodes / 2, second = first.nodes / 2 + 1);
    let _ = writeln!(s, "| run | wave | pods | placed | failed ADD attempts | time |\n|---|---|---:|---:|---:|---:|");
    for w in runs {
        for v in &w.waves {
            let _ = writeln!(
                s,
                "| {} | nodes {}-{} | {} | {} | {} | {:.2} s |",
                w.name,
                v.nodes.0,
                v.nodes.1,
                v.pods,
                v.placed,
                v.failed,
                v.time.as_secs_f64()
            );
        }
    }
    for w in runs {
        let requests: u64 = w.server.values().sum();
        let _ = writeln!(
            s,
            "\n{}: {} of {} pods placed in {}; {} address(es) answered twice, {} placed pod(s) answered no address, {} address(es) outside the pool's range; {} of {} blocks claimed; {} handled {requests} requests over every ADD attempt ({}).",
            capitalized(w.name),
            w.placed(),
            w.pods(),
            wave_time(w),
            w.duplicates,
            w.without_address,
            w.outside,
            w.claimed,
            w.blocks,
            w.store,
            server_counts(&w.server)
        );
        for (code, (n, msg)) in &w.failures {
            let _ = writeln!(s, "\n{n} ADD attempt(s) failed with code {code}; the first said: \"{msg}\"");
        }
    }
    s.push('\n');
    s
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// What the two stores have in common in the figures, for the side-by-side
/// table.
struct Side<'a> {
    add: Latency,
    del: Latency,
    add_confirming: Latency,
    del_confirming: Latency,
    steady_add: &'a StepCount,
    steady_del: &'a StepCount,
    confirming_add: &'a StepCount,
    first_add: &'a FirstAdds,
    tight: &'a TightPool,
    waves: &'a [PodWaves; 2],
    /// A request on a kept-alive connection; one by a new client (its
    /// connection made first); a write.
    floor: [Stats; 3],
}

impl<'a> Side<'a> {
    fn etcd(c: &'a ClusterFigures) -> Side<'a> {
        Side {
            add: c.add_cluster,
            del: c.del_cluster,
            add_confirming: c.add_confirming,
            del_confirming: c.del_confirming,
            steady_add: &c.steady_add,
            steady_del: &c.steady_del,
            confirming_add: &c.confirming_add,
            first_add: &c.first_add,
            tight: &c.tight,
            waves: &c.waves,
            floor: [c.floor_range, c.floor_fresh_txn, c.floor_put],
        }
    }

    fn kube(k: &'a KubeFigures) -> Side<'a> {
        Side {
            add: k.add,
            del: k.del,
            add_confirming: k.add_confirming,
            del_confirming: k.del_confirming,
            steady_add: &k.steady_add,
            steady_del: &k.steady_del,
            confirming_add: &k.confirming_add,
            first_add: &k.first_add,
            tight: &k.tight,
            waves: &k.waves,
            floor: [k.floor.get, k.floor.fresh_get, k.floor.put],
        }
    }
}

/// Cluster mode on etcd and on the Kubernetes API against local mode
/// (Markdown, also printed); "met" is the Kubernetes store's.
pub fn side_by_side(fig: &Figures) -> String {
    let mut t = String::new();
    t.push_str("| measurement | local mode | etcd | Kubernetes API | target | met |\n");
    t.push_str("|---|---:|---:|---:|---|---|\n");
    let Some(c) = &fig.cluster else { return t };
    let Some(k) = &c.kube else {
        let why = c.kube_note.as_deref().unwrap_or("not measured");
        let _ = writeln!(t, "| the Kubernetes API store | — | — | not measured: {why} | | |");
        return t;
    };
    let (e, k) = (Side::etcd(c), Side::kube(k));
    let mut line = |what: &str, local: String, [etcd, kube]: [String; 2], target: &str, met: Option<bool>| {
        let _ = writeln!(t, "| {what} | {local} | {etcd} | {kube} | {target} | {} |", met.map_or("", yes));
    };
    let local_add = c.add_local.stats.median_ms;
    let against_local = |ms: f64| format!("{ms:.2} ms ({})", ratio(ms, local_add));
    line(
        &format!("ADD median, steady state (n={}; the node owns a block with room)", k.add.stats.n),
        format!("{local_add:.2} ms"),
        [e.add.stats.median_ms, k.add.stats.median_ms].map(against_local),
        "≤ 1.2× local",
        Some(local_add > 0.0 && k.add.stats.median_ms <= 1.2 * local_add),
    );
    let ms = |v: f64| format!("{v:.2} ms");
    let both = |f: &dyn Fn(&Side) -> String| [f(&e), f(&k)];
    line("ADD p99, steady state", ms(c.add_local.stats.p99_ms), both(&|s| ms(s.add.stats.p99_ms)), "", None);
    line("DEL median, steady state", ms(c.del_local.stats.median_ms), both(&|s| ms(s.del.stats.median_ms)), "", None);
    line("DEL p99, steady state", ms(c.del_local.stats.p99_ms), both(&|s| ms(s.del.stats.p99_ms)), "", None);
    line(
        "ADD median without confirmation cache (`offlineGrace` 0: every ADD confirms its block, its process's first \
         request: connection and TLS handshake included on the API server)",
        "—".into(),
        both(&|s| against_local(s.add_confirming.stats.median_ms)),
        "(measured)",
        None,
    );
    line("ADD p99 without confirmation cache", "—".into(), both(&|s| ms(s.add_confirming.stats.p99_ms)), "", None);
    line("DEL median of that node", "—".into(), both(&|s| ms(s.del_confirming.stats.median_ms)), "", None);
    let per = |step: &StepCount, n: u64| format!("{:.3}", step.per_call(n));
    line(
        &format!("requests per ADD, steady state (the store's count over {} ADDs)", k.steady_add.calls),
        "0".into(),
        both(&|s| per(s.steady_add, s.steady_add.total())),
        "0 (the confirmation cache, 2 s)",
        None,
    );
    line(
        "writes per ADD, steady state",
        "0".into(),
        both(&|s| per(s.steady_add, s.steady_add.writes())),
        "0",
        Some(k.steady_add.calls > 0 && k.steady_add.writes() == 0),
    );
    line(
        "requests per ADD, steady state, as the plugin logged them",
        "0".into(),
        both(&|s| client_per_call(s.steady_add)),
        "(counted)",
        None,
    );
    line(
        &format!("requests per DEL, steady state (over {} DELs)", k.steady_del.calls),
        "0".into(),
        both(&|s| per(s.steady_del, s.steady_del.total())),
        "(counted)",
        None,
    );
    line(
        "writes per DEL, steady state",
        "0".into(),
        both(&|s| per(s.steady_del, s.steady_del.writes())),
        "(counted)",
        None,
    );
    line(
        &format!("requests per ADD without confirmation cache (over {} ADDs)", k.confirming_add.calls),
        "0".into(),
        both(&|s| per(s.confirming_add, s.confirming_add.total())),
        "(counted)",
        None,
    );
    let shared = format!(
        "in a shared block ({} in {} blocks of /{}, one node; over {} calls)",
        k.tight.subnet, k.tight.blocks, k.tight.block_size, k.tight.add.calls
    );
    line(
        &format!("requests per ADD {shared}"),
        "0".into(),
        both(&|s| per(&s.tight.add, s.tight.add.total())),
        "1",
        Some(k.tight.add.calls > 0 && k.tight.add.total() <= k.tight.add.calls as u64),
    );
    line(
        "writes per ADD in a shared block",
        "0".into(),
        both(&|s| per(&s.tight.add, s.tight.add.writes())),
        "(counted)",
        None,
    );
    line(
        "requests per DEL in a shared block",
        "0".into(),
        both(&|s| per(&s.tight.del, s.tight.del.total())),
        "(counted)",
        None,
    );
    line(
        &format!(
            "requests per first ADD of a fresh node: the node registered, its first block claimed (over {} nodes)",
            k.first_add.count.calls
        ),
        "0".into(),
        both(&|s| per(&s.first_add.count, s.first_add.count.total())),
        "(counted)",
        None,
    );
    line(
        "writes per first ADD of a fresh node",
        "0".into(),
        both(&|s| per(&s.first_add.count, s.first_add.count.writes())),
        "(counted)",
        None,
    );
    line(
        "first ADD of a fresh node, median",
        "—".into(),
        both(&|s| s.first_add.latency.map_or("—".into(), |l| ms(l.median_ms))),
        "(measured)",
        None,
    );
    for (i, w) in k.waves.iter().enumerate() {
        let what = format!("{} pods into {} addresses, {}", w.pods(), w.usable, wave_shape(w));
        let each = |f: &dyn Fn(&PodWaves) -> String| [f(&e.waves[i]), f(w)];
        line(
            &format!("{what}: pods placed"),
            "—".into(),
            each(&|w| format!("{} of {}", w.placed(), w.pods())),
            &format!("{}", w.pods()),
            Some(w.pods() > 0 && w.placed() == w.pods()),
        );
        line(&format!("{what}: time to the last"), "—".into(), each(&wave_time), "(measured)", None);
        line(
            &format!("{what}: failed ADD attempts"),
            "—".into(),
            each(&|w| format!("{}", w.failed())),
            "(counted)",
            None,
        );
        line(
            &format!("{what}: addresses held twice"),
            "—".into(),
            each(&|w| format!("{}", w.duplicates)),
            "0",
            Some(w.sound()),
        );
    }
    let floors = [
        "one read on a kept-alive connection, in-process (etcd: a range; API: a GET), median",
        "one read by a new client, in-process (etcd: the confirming txn, plain TCP; API: a GET, TCP and TLS \
         handshake), median",
        "one write on a kept-alive connection, in-process (etcd: a put; API: a replace), median",
    ];
    for (i, what) in floors.iter().enumerate() {
        line(what, "—".into(), both(&|s| ms(s.floor[i].median_ms)), "(measured)", None);
    }
    t
}

/// The client's logged requests per call, as it says them.
fn client_per_call(step: &StepCount) -> String {
    use crate::figures::cluster::ClientCount;
    let calls = step.calls.max(1) as f64;
    match step.client {
        ClientCount::Etcd(k) => format!("{:.3}", (k.ranges + k.txns + k.other) as f64 / calls),
        ClientCount::Kubernetes(k) => {
            format!("{:.3} ({:.3} connections)", k.requests as f64 / calls, k.connections as f64 / calls)
        }
    }
}

/// The Kubernetes API subsection of the cluster section.
fn kube_section(fig: &Figures, c: &ClusterFigures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### On the Kubernetes API, side by side with etcd\n");
    let Some(k) = &c.kube else {
        let why = c.kube_note.as_deref().unwrap_or("not measured");
        let _ = writeln!(s, "Not measured: {why}.\n");
        return s;
    };
    let _ = writeln!(s, "The same stack with `ipam.cluster = {{\"kubernetes\": {{\"kubeconfig\": K, \"timeout\": 5}}, \"node\": N}}`, on a real API server: {}, built from the Go module tests/kube by the tests' own builder (tests/support/go.rs, once per change into target/kube-test), started by the tests' harness (tests/kube_harness) on 127.0.0.1 with RBAC enforced, `deploy/kubernetes/` namespace.yaml, crds.yaml and rbac.yaml applied. The plugins use a token of the DaemonSet's ServiceAccount, bound to rbac.yaml's role, as on a cluster. Both stores run in the same run and the same interleaving: the latency step alternates local mode, local mode with ipam-da-static, and on each store the steady node and the node without confirmation cache (`offlineGrace` 0), the order rotating; every other step runs on etcd, then on the API server, with the same code. The API server counts its requests itself: `apiserver_request_total` of the group `ipam-delegated.io` per verb and resource, from its `/metrics` (read as the admin) before and after each batch, its answers that are no success apart (\"PUT ipdblocks (409)\": the object changed since it was read; such a request wrote nothing); the plugin logs its client's count per call (`Kubernetes API requests: N (M connection(s))`). `cargo run --release -p ipam-bench -- --only cluster` measures both stores again and prints these tables (it writes no file).\n", k.version);
    let _ = writeln!(
        s,
        "\"met\" is the Kubernetes store's; ratios are to local mode's ADD median. Printed by the run too.\n\n{}",
        side_by_side(fig)
    );
    s.push_str(&kube_counts(k));
    s.push_str(&kube_rest(k, c));
    s
}

/// The Kubernetes store's requests per verb and resource of each counted
/// batch (Markdown, also printed).
pub fn kube_counts(k: &KubeFigures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| calls on the API server | n | requests per verb and resource | per call | the client's count (logs) |\n|---|---:|---|---:|---|");
    for (name, step) in [
        ("ADD, steady state", &k.steady_add),
        ("DEL, steady state", &k.steady_del),
        ("ADD without confirmation cache", &k.confirming_add),
        ("first ADD of a fresh node", &k.first_add.count),
        ("ADD in a shared block (tight pool)", &k.tight.add),
        ("DEL in a shared block (tight pool)", &k.tight.del),
    ] {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {:.3} | {}; {} of {} calls logged |",
            step.calls,
            server_counts(&step.server),
            step.per_call(step.total()),
            step.client.describe(),
            step.logged,
            step.calls
        );
    }
    s
}

/// The rest of the Kubernetes subsection: the first ADDs, the floor, the waves.
fn kube_rest(k: &KubeFigures, c: &ClusterFigures) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nThe first ADDs: {n} fresh nodes one after the other, each a database of its own, in a network of their own; {claimed} blocks claimed (on etcd: {etcd_claimed}). The tight pool claimed {} of its {} blocks.\n",
        k.tight.claimed,
        k.tight.blocks,
        n = k.first_add.count.calls,
        claimed = k.first_add.claimed,
        etcd_claimed = c.first_add.claimed,
    );
    let _ = writeln!(s, "One API request from the plugins' own client (`ipam_ds_cluster::kube::Client`), in the benchmark's process, one after the other, with the plugins' kubeconfig:\n");
    let _ = writeln!(s, "| request | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    let f = &k.floor;
    s.push_str(&stats_row("GET of an IPDNode, kept-alive connection", &f.get));
    s.push_str(&stats_row("GET of an IPDNode by a new client (TCP and TLS handshake first)", &f.fresh_get));
    s.push_str(&stats_row("replace (PUT) of an IPDNode at its resourceVersion, kept-alive connection", &f.put));
    s.push_str(&stats_row(
        "LIST of the IPDBlocks (a consistent read) right after that replace of an IPDNode",
        &f.list_after_write,
    ));
    s.push_str(&stats_row("the same LIST again, nothing written since", &f.list));
    s.push('\n');
    s.push_str(&waves(&k.waves));
    s
}
