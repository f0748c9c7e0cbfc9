//! The suite and whereabouts side by side: the table (also printed) and
//! the section, which `--only whereabouts` writes into BENCHMARKS.md alone
//! ([`splice`]).

use std::fmt::Write as _;
use std::time::Duration;

use super::format::{ratio, server_counts, yes, MIB};
use crate::figures::machine::Machine;
use crate::figures::whereabouts::{Placement, PluginFigures, Requests, WhereaboutsFigures};
use crate::figures::Figures;

/// The section's heading, by which [`splice`] finds it.
pub const HEADING: &str = "## Side by side with whereabouts, on one API server";
/// The goal of IP=pod throughput: the suite's at least this many times whereabouts'.
const THROUGHPUT_GOAL: f64 = 10.0;

/// The table (Markdown, also printed): each measurement of both plugins,
/// with the goals.
pub fn table(fig: &Figures) -> String {
    let mut t = String::new();
    let Some(w) = &fig.whereabouts else {
        let why = fig.whereabouts_note.as_deref().unwrap_or("the whereabouts scenario did not run");
        let _ = writeln!(t, "Not measured: {why}.");
        return t;
    };
    let [suite, wb] = [&w.plugins[0], &w.plugins[1]];
    let _ = writeln!(t, "| measurement | {} | {} | the suite against whereabouts | goal | met |", suite.name, wb.name);
    t.push_str("|---|---:|---:|---:|---|---|\n");
    let mut line = |what: &str, a: String, b: String, r: String, goal: &str, met: Option<bool>| {
        let _ = writeln!(t, "| {what} | {a} | {b} | {r} | {goal} | {} |", met.map_or("", yes));
    };
    for (name, of) in [
        ("one wave (10 nodes at once)", one_wave as fn(&PluginFigures) -> &Placement),
        ("two waves (nodes 1-5, then 6-10)", two_waves),
    ] {
        let (a, b) = (of(suite), of(wb));
        let what = |m: &str| format!("{} pods into {} addresses, {name}: {m}", w.pods, w.pods);
        line(&what("pods placed"), placed(a), placed(b), "—".into(), "all (the suite)", Some(a.placed() == a.pods()));
        line(
            &what("time to the last pod placed"),
            to_last(a, w.deadline),
            to_last(b, w.deadline),
            "—".into(),
            "",
            None,
        );
        line(
            &what("pods placed per second, to the last placed"),
            format!("{:.1}/s", a.rate()),
            format!("{:.1}/s", b.rate()),
            times(a.rate(), b.rate()),
            &format!("≥ {THROUGHPUT_GOAL:.0}× whereabouts'"),
            Some(a.rate() >= THROUGHPUT_GOAL * b.rate() && a.placed() > 0),
        );
        line(&what("failed ADD attempts"), a.failed().to_string(), b.failed().to_string(), "—".into(), "", None);
        line(
            &what("addresses held twice"),
            a.held_twice.to_string(),
            b.held_twice.to_string(),
            "—".into(),
            "0 (the suite)",
            Some(a.held_twice == 0 && a.sound()),
        );
    }
    let ms = |v: f64| format!("{v:.2} ms");
    let (sa, wa, sd, wd) = (suite.add.stats, wb.add.stats, suite.del.stats, wb.del.stats);
    line(
        &format!("ADD median, steady state (n={}, one call at a time, the plugins in turn)", sa.n),
        ms(sa.median_ms),
        ms(wa.median_ms),
        ratio(sa.median_ms, wa.median_ms),
        "",
        None,
    );
    line("ADD p99, steady state", ms(sa.p99_ms), ms(wa.p99_ms), ratio(sa.p99_ms, wa.p99_ms), "", None);
    line("DEL median, steady state", ms(sd.median_ms), ms(wd.median_ms), ratio(sd.median_ms, wd.median_ms), "", None);
    line("DEL p99, steady state", ms(sd.p99_ms), ms(wd.p99_ms), ratio(sd.p99_ms, wd.p99_ms), "", None);
    let (ra, rb) = (&suite.add_requests, &wb.add_requests);
    line(
        &format!("API requests per ADD, steady state (the API server's count over {} ADDs)", ra.calls),
        format!("{:.2}", ra.per_call()),
        format!("{:.2}", rb.per_call()),
        "—".into(),
        "fewer than whereabouts",
        Some(ra.per_call() < rb.per_call()),
    );
    line(
        "API writes per ADD, steady state",
        per_call(ra.writes(), ra.calls),
        per_call(rb.writes(), rb.calls),
        "—".into(),
        "",
        None,
    );
    let (da, db) = (&suite.del_requests, &wb.del_requests);
    line(
        "API requests per DEL, steady state",
        format!("{:.2}", da.per_call()),
        format!("{:.2}", db.per_call()),
        "—".into(),
        "",
        None,
    );
    let (ba, bb) = (&suite.burst, &wb.burst);
    let burst = |m: &str| format!("a burst of {} pods on one node, all started at once: {m}", w.burst_pods);
    line(&burst("pods placed"), placed(ba), placed(bb), "—".into(), "", None);
    line(&burst("time to the last pod placed"), to_last(ba, w.deadline), to_last(bb, w.deadline), "—".into(), "", None);
    line(&burst("failed ADD attempts"), ba.failed().to_string(), bb.failed().to_string(), "—".into(), "", None);
    line(&burst("addresses held twice"), ba.held_twice.to_string(), bb.held_twice.to_string(), "—".into(), "", None);
    line(
        &burst("ADD median / p99 of the ADDs that placed a pod"),
        format!("{} / {}", ms(ba.placing_add.median_ms), ms(ba.placing_add.p99_ms)),
        format!("{} / {}", ms(bb.placing_add.median_ms), ms(bb.placing_add.p99_ms)),
        "—".into(),
        "",
        None,
    );
    let mib = |kib: i64| format!("{:.1} MiB", kib as f64 / MIB);
    line(
        "peak RSS of one ADD (the largest of 5)",
        mib(suite.rss_add_kib),
        mib(wb.rss_add_kib),
        ratio(suite.rss_add_kib as f64, wb.rss_add_kib as f64),
        "",
        None,
    );
    line(
        "peak RSS of one DEL (the largest of 5)",
        mib(suite.rss_del_kib),
        mib(wb.rss_del_kib),
        ratio(suite.rss_del_kib as f64, wb.rss_del_kib as f64),
        "",
        None,
    );
    t
}

fn one_wave(p: &PluginFigures) -> &Placement {
    &p.one_wave
}

fn two_waves(p: &PluginFigures) -> &Placement {
    &p.two_waves
}

fn placed(p: &Placement) -> String {
    format!("{} of {}", p.placed(), p.pods())
}

/// The time to the last pod placed (each wave's, if several), and when
/// pods were given up.
fn to_last(p: &Placement, deadline: Duration) -> String {
    if p.placed() == 0 {
        return format!("none placed (given up after {:.0} s)", deadline.as_secs_f64());
    }
    let mut s = format!("{:.2} s", p.to_last_placed().as_secs_f64());
    if p.waves.len() > 1 {
        let each: Vec<String> = p.waves.iter().map(|w| format!("{:.2}", w.last_placed.as_secs_f64())).collect();
        let _ = write!(s, " ({} s)", each.join(" + "));
    }
    if p.placed() < p.pods() {
        let _ = write!(s, "; the rest given up at the deadline ({:.0} s per wave)", deadline.as_secs_f64());
    }
    s
}

fn times(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else if a > 0.0 {
        "∞ (whereabouts placed none)".into()
    } else {
        "—".into()
    }
}

fn per_call(n: u64, calls: usize) -> String {
    format!("{:.2}", n as f64 / calls.max(1) as f64)
}

/// The section of BENCHMARKS.md: how the plugins were run, the table, the
/// API server's counts, the failures, and whether the goals were met.
pub fn section(fig: &Figures, m: &Machine) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n{HEADING}\n");
    let Some(w) = &fig.whereabouts else {
        let _ = writeln!(s, "{}", table(fig));
        return s;
    };
    let [suite, wb] = [&w.plugins[0], &w.plugins[1]];
    let _ = writeln!(s, "The suite in cluster mode on the Kubernetes datastore and [whereabouts](https://github.com/k8snetworkplumbingwg/whereabouts) {} (the IPAM plugin most Multus users run) on the same real API server ({}), the same machine, in the same run, with the same calls. Every call is a process started as a runtime starts it, with CNI_ARGS as a kubelet passes them (`IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=P;K8S_POD_INFRA_CONTAINER_ID=C`: whereabouts keys its reservations by the pod's namespace and name, and fails an ADD without them). whereabouts' ADD and DEL do not read the Pod object (only its reconciler, not run here, does), so no Pod objects are created.\n", w.whereabouts, w.kubernetes);
    let _ = writeln!(s, "whereabouts is built from its Go module at {} (bench/whereabouts/go.mod pins it; its plugin is the package `cmd`, a `tool` of that module) with the machine's Go by the tests' builder (tests/support/go.rs, once per change into target/whereabouts/). Its CRDs (IPPool, OverlappingRangeIPReservation) are applied from the module's doc/crds, and of its doc/crds/daemonset-install.yaml the ServiceAccount, the ClusterRole `whereabouts-cni` and its binding (not the DaemonSet: its work on a node is done by the benchmark). Configured as its README and extended-configuration.md say for a Multus network: {}.\n", w.whereabouts, wb.configured);
    let _ = writeln!(s, "The suite: {}.\n", suite.configured);
    let _ = writeln!(s, "10 nodes are simulated by node names (the suite's each with a database of its own); whereabouts takes no node name unless its node slices (\"Fast IPAM\", `node_slice_size`) are configured, which need its node-slice controller running: not measured here. Every whereabouts call takes the cluster-wide Lease `kube-system/whereabouts` by leader election before it reads and patches the range's IPPool; the suite's nodes hand out addresses from blocks of their own.\n");
    let _ = writeln!(s, "Pods into addresses: {} pods on {} nodes into a pool of exactly {} addresses (the suite: {} from {} to {}; whereabouts: {} from {} to {}), each node placing its pods {} at a time, a failed ADD tried again {:.1} s later (the same pod), as a runtime does, until it succeeds or the wave's deadline ({:.0} s, the same for both) has passed; pods not placed by then are given up. One wave: all nodes at once; two waves: nodes 1-5, then nodes 6-10 while nodes 1-5 make no call. Before them, each plugin makes one ADD and one DEL, uncounted, in a pool of its own (the API server is seconds old, and the first requests may wait for its start-up work). The suite runs first, then whereabouts. Time to the last pod placed: from the wave's start to the answer of the last ADD that placed a pod. Every address answered is collected: none may be held twice. The burst: {} pods on one node, all {} ADDs started at once, in a roomy pool (a /16), retried the same way. Steady state: one node, a roomy pool (a /16), ADD then DEL of one pod by each plugin in turn; then each plugin alone, counted. Peak RSS: `ru_maxrss` of the plugin's process, through the memory scenario's launcher.\n",
        w.pods, w.nodes, w.pods,
        suite.wave_pool.0, suite.wave_pool.1, suite.wave_pool.2,
        wb.wave_pool.0, wb.wave_pool.1, wb.wave_pool.2,
        w.threads_per_node, w.retry.as_secs_f64(), w.deadline.as_secs_f64(), w.burst_pods, w.burst_pods);
    let _ = writeln!(
        s,
        "Measured on {} ({}, {} cores, kernel {}), suite {}; load averages: {}.\n",
        m.date,
        m.cpu,
        m.cores,
        m.kernel,
        m.suite,
        super::machine::loads(fig)
    );
    let _ = writeln!(s, "{}", table(fig));
    let _ = writeln!(s, "The API server counts its requests itself: `apiserver_request_total` from its `/metrics` (read as the admin) before and after each batch, of the groups each plugin uses (the suite: `ipam-delegated.io`; whereabouts: `whereabouts.cni.cncf.io` and the Lease's `coordination.k8s.io`), per verb and resource, its answers that are no success apart (\"PUT leases (409)\": a write refused because the object changed since it was read; such a request wrote nothing).\n");
    let _ = writeln!(s, "| calls | plugin | requests per verb and resource | per call |\n|---|---|---|---:|");
    for p in [suite, wb] {
        for (what, r) in [("steady-state ADDs", &p.add_requests), ("steady-state DELs", &p.del_requests)] {
            let _ =
                writeln!(s, "| {} {what} | {} | {} | {:.2} |", r.calls, p.name, server_counts(&r.server), r.per_call());
        }
        for (what, pl) in [("one wave", &p.one_wave), ("two waves", &p.two_waves), ("the burst", &p.burst)] {
            let attempts = pl.placed() + pl.failed();
            let _ = writeln!(
                s,
                "| {what}: every ADD attempt ({attempts}) | {} | {} | {} |",
                p.name,
                server_counts(&pl.server),
                per_call(pl.requests(), attempts)
            );
        }
    }
    let _ = writeln!(s, "\nEach wave: the time to the last pod placed, and until every call had returned (calls in flight at the deadline finish; whereabouts gives up an ADD by itself after 2 minutes).\n");
    let _ = writeln!(s, "| plugin | run | nodes | pods | placed | failed ADD attempts | last placed | every call returned |\n|---|---|---|---:|---:|---:|---:|---:|");
    for p in [suite, wb] {
        for (what, pl) in [("one wave", &p.one_wave), ("two waves", &p.two_waves), ("the burst", &p.burst)] {
            for r in &pl.waves {
                let _ = writeln!(
                    s,
                    "| {} | {what} | {}-{} | {} | {} | {} | {:.2} s | {:.2} s |",
                    p.name,
                    r.nodes.0,
                    r.nodes.1,
                    r.pods,
                    r.placed,
                    r.failed,
                    r.last_placed.as_secs_f64(),
                    r.time.as_secs_f64()
                );
            }
        }
    }
    let background = background(suite, &wb.add_requests);
    let _ = writeln!(s, "\n{background}\n");
    for p in [suite, wb] {
        for (what, pl) in [("one wave", &p.one_wave), ("two waves", &p.two_waves), ("the burst", &p.burst)] {
            for (code, (n, msg)) in &pl.failures {
                let _ = writeln!(
                    s,
                    "- {}, {what}: {n} ADD attempt(s) failed with code {code}; the first said: \"{msg}\"",
                    p.name
                );
            }
            if pl.without_address + pl.outside > 0 {
                let _ = writeln!(
                    s,
                    "- {}, {what}: {} placed pod(s) answered no address, {} address(es) outside the pool",
                    p.name, pl.without_address, pl.outside
                );
            }
        }
    }
    let _ = writeln!(s, "\n{}", goals(w));
    let _ = writeln!(s, "\n```sh\ncargo run --release -p ipam-bench -- --only whereabouts              # measures both again and rewrites this section of BENCHMARKS.md\nBENCH_QUICK=1 cargo run --release -p ipam-bench -- --only whereabouts  # shorter steps, writes nothing (CI: bench/tests/whereabouts_quick.rs)\n```\n\nNeeds Go (to build kube-test-server and whereabouts; the module proxy reachable the first time).");
    s
}

/// The Lease requests the API server makes of its own, as measured during
/// the suite's pods in waves and burst (which take no Lease), and what the
/// same rate puts into whereabouts' count of steady-state ADDs.
fn background(suite: &PluginFigures, wb: &Requests) -> String {
    let runs = [&suite.one_wave, &suite.two_waves, &suite.burst];
    let secs: f64 = runs.iter().map(|p| p.time().as_secs_f64()).sum();
    let leases: u64 = runs.iter().map(|p| p.leases).sum();
    if secs <= 0.0 {
        return String::new();
    }
    let share = leases as f64 / secs * wb.time.as_secs_f64() / wb.calls.max(1) as f64;
    format!(
        "Lease requests are whereabouts' and the API server's own (it renews Leases of its own): during the suite's pods in waves and burst (which take no Lease), {:.1} s in all, the server counted {leases} Lease requests. At that rate about {share:.3} of whereabouts' requests per steady-state ADD (its {} ADDs took {:.1} s) are the server's own; the table does not subtract them.",
        secs,
        wb.calls,
        wb.time.as_secs_f64()
    )
}

/// Whether the goals of the comparison were met, in one paragraph.
pub fn goals(w: &WhereaboutsFigures) -> String {
    let [suite, wb] = [&w.plugins[0], &w.plugins[1]];
    let rate = |of: fn(&PluginFigures) -> &Placement| times(of(suite).rate(), of(wb).rate());
    let all =
        [&suite.one_wave, &suite.two_waves].iter().all(|p| p.placed() == p.pods() && p.held_twice == 0 && p.sound());
    let fast = [one_wave as fn(&PluginFigures) -> &Placement, two_waves]
        .iter()
        .all(|of| of(suite).rate() >= THROUGHPUT_GOAL * of(wb).rate() && of(suite).placed() > 0);
    let fewer = suite.add_requests.per_call() < wb.add_requests.per_call();
    format!(
        "Goals, measured in this run: IP=pod throughput at least {THROUGHPUT_GOAL:.0}× whereabouts' ({} one wave, {} two waves): {}; all {} placed in both waves with 0 held twice (the suite: {} and {} placed, {} and {} held twice): {}; fewer API requests per steady-state ADD than whereabouts ({:.2} against {:.2}): {}.",
        rate(one_wave),
        rate(two_waves),
        yes(fast),
        w.pods,
        suite.one_wave.placed(),
        suite.two_waves.placed(),
        suite.one_wave.held_twice,
        suite.two_waves.held_twice,
        yes(all),
        suite.add_requests.per_call(),
        wb.add_requests.per_call(),
        yes(fewer)
    )
}

/// `document` (BENCHMARKS.md) with `section` in place of its section of
/// the same heading, or, if it has none, before the sticky addresses'
/// section (after cluster mode's), else at its end.
pub fn splice(document: &str, section: &str) -> String {
    let section = section.trim_matches('\n');
    let (head, tail) = match document.find(&format!("\n{HEADING}\n")) {
        Some(start) => {
            let rest = &document[start + 1..];
            let end = rest[HEADING.len()..].find("\n## ").map_or(document.len(), |i| start + 1 + HEADING.len() + i);
            (&document[..start], &document[end..])
        }
        None => match document.find("\n## Sticky addresses") {
            Some(at) => (&document[..at], &document[at..]),
            None => (document.trim_end_matches('\n'), ""),
        },
    };
    format!("{}\n\n{section}\n{tail}", head.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_goes_after_cluster_mode_then_replaces_itself() {
        let document = "# Benchmarks\n\n## Cluster mode\n\ncluster\n\n## Sticky addresses: x\n\nsticky\n";
        let first = splice(document, &format!("\n{HEADING}\n\nold figures\n"));
        assert_eq!(
            first,
            format!("# Benchmarks\n\n## Cluster mode\n\ncluster\n\n{HEADING}\n\nold figures\n\n## Sticky addresses: x\n\nsticky\n")
        );
        let second = splice(&first, &format!("\n{HEADING}\n\nnew figures\n"));
        assert_eq!(second, first.replace("old figures", "new figures"));
        // At the end of a document, and in one without the sticky section.
        let last = format!("# Benchmarks\n\n{HEADING}\n\nold\n");
        assert_eq!(splice(&last, &format!("{HEADING}\n\nnew")), format!("# Benchmarks\n\n{HEADING}\n\nnew\n"));
        assert_eq!(
            splice("# Benchmarks\n", &format!("{HEADING}\n\nnew")),
            format!("# Benchmarks\n\n{HEADING}\n\nnew\n")
        );
    }
}
