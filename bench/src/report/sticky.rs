//! The sticky-address section: the tables of the sticky-address scenarios
//! and what they say (also printed when they run).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::format::ratio;
use crate::figures::cluster::StepCount;
use crate::figures::durability::FsyncProbe;
use crate::figures::sticky::{
    CallProbe, StickyClusterFigures, StickyFigures, VariantTimes, HOST_LOCAL, NEW_IDENTITY, RETURNING,
    RETURNING_ELSEWHERE, WITHOUT,
};
use crate::figures::Figures;

fn times<'a>(variants: &'a [VariantTimes], name: &str) -> Option<&'a VariantTimes> {
    variants.iter().find(|v| v.name == name)
}

fn probe<'a>(probes: &'a [CallProbe], variant: &str, command: &str) -> Option<&'a CallProbe> {
    probes.iter().find(|p| p.variant == variant && p.command == command)
}

fn list(names: &[&str]) -> String {
    format!("[{}]", names.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", "))
}

/// ADD and DEL of each variant: median, p90, p99, max, CPU, and the
/// medians' ratios to host-local (when it ran) and to the suite without
/// stickiness.
fn latency_table(variants: &[VariantTimes]) -> String {
    let host = times(variants, HOST_LOCAL);
    let without = times(variants, WITHOUT);
    let mut t = String::from("| command, variant | n | median ms | p90 ms | p99 ms | max ms | CPU median ms |");
    if host.is_some() {
        t.push_str(" median / host-local | p90 / host-local |");
    }
    t.push_str(" median / no stickiness |\n|---|---:|---:|---:|---:|---:|---:|");
    if host.is_some() {
        t.push_str("---:|---:|");
    }
    t.push_str("---:|\n");
    for command in ["ADD", "DEL"] {
        let of = |v: &VariantTimes| if command == "ADD" { (v.add, v.add_cpu) } else { (v.del, v.del_cpu) };
        for v in variants {
            let (l, cpu) = of(v);
            let st = l.stats;
            let _ = write!(
                t,
                "| {command}, {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                v.name, st.n, st.median_ms, l.p90_ms, st.p99_ms, st.max_ms, cpu.median_ms
            );
            if let Some(h) = host {
                let (hl, _) = of(h);
                let _ = write!(t, " {} | {} |", ratio(st.median_ms, hl.stats.median_ms), ratio(l.p90_ms, hl.p90_ms));
            }
            let base = without.map_or("—".into(), |w| ratio(st.median_ms, of(w).0.stats.median_ms));
            let _ = writeln!(t, " {base} |");
        }
    }
    t
}

/// Per call: the write transactions, how long they held the lock, and
/// (local mode) the fsync-family calls.
fn probe_table(probes: &[CallProbe], syncs: bool) -> String {
    let mut t = String::from("| calls | n | write transactions per call | lock held per call, mean ms |");
    t.push_str(if syncs { " fsync-family calls per call (strace -f) |\n" } else { "\n" });
    t.push_str(if syncs { "|---|---:|---:|---:|---:|\n" } else { "|---|---:|---:|---:|\n" });
    for p in probes {
        let _ = write!(
            t,
            "| {}, {} | {} | {:.2} | {:.3} |",
            p.command,
            p.variant,
            p.calls,
            p.write_txns_per_call(),
            p.lock_held_per_call_ms()
        );
        if syncs {
            let _ = write!(t, " {} |", p.syncs.as_ref().map_or("—".into(), FsyncProbe::per_call));
        }
        t.push('\n');
    }
    t
}

/// etcd's count per method of each variant's counted calls, and the client's.
fn count_table(counts: &[(&'static str, StepCount, StepCount)]) -> String {
    let methods: BTreeSet<&String> = counts
        .iter()
        .flat_map(|(_, a, d)| a.server.iter().chain(&d.server))
        .filter(|(_, n)| **n > 0)
        .map(|(m, _)| m)
        .collect();
    let mut t = String::from("| calls | n |");
    for m in &methods {
        let _ = write!(t, " {m} |");
    }
    t.push_str(" etcd requests per call | the client's count (logs) |\n|---|---:|");
    t.push_str(&"---:|".repeat(methods.len() + 1));
    t.push_str("---|\n");
    for (name, add, del) in counts {
        for (command, step) in [("ADD", add), ("DEL", del)] {
            let _ = write!(t, "| {command}, {name} | {} |", step.calls);
            for m in &methods {
                let _ = write!(t, " {} |", step.server.get(*m).copied().unwrap_or(0));
            }
            let _ = writeln!(
                t,
                " {:.2} | {}; {} of {} calls logged |",
                step.per_call(step.total()),
                step.client.describe(),
                step.logged,
                step.calls
            );
        }
    }
    t
}

/// What stickiness cost per call in local mode, from the figures, and why.
fn local_reading(f: &StickyFigures) -> String {
    let mut s = String::new();
    let (Some(without), Some(new), Some(back)) =
        (times(&f.variants, WITHOUT), times(&f.variants, NEW_IDENTITY), times(&f.variants, RETURNING))
    else {
        return s;
    };
    let w = without.add.stats.median_ms;
    let (n, b) = (new.add.stats.median_ms, back.add.stats.median_ms);
    let _ = write!(
        s,
        "In this run the median ADD took {w:.2} ms without stickiness, {n:.2} ms with it for a new identity ({:+.2} \
         ms, {}) and {b:.2} ms for an identity taking its hold back ({:+.2} ms, {})",
        n - w,
        ratio(n, w),
        b - w,
        ratio(b, w)
    );
    if let Some(h) = times(&f.variants, HOST_LOCAL) {
        let hl = h.add.stats.median_ms;
        let _ =
            write!(s, "; host-local's took {hl:.2} ms ({} and {} of it with stickiness)", ratio(n, hl), ratio(b, hl));
    }
    let cpu = |v: &VariantTimes| v.add_cpu.median_ms;
    let _ = write!(
        s,
        ". The CPU time of an ADD (median; less disturbed by other work on the machine than wall time) was {:.2} ms \
         without stickiness, {:.2} ms for a new identity ({:+.2} ms) and {:.2} ms for a returning one ({:+.2} ms)",
        cpu(without),
        cpu(new),
        cpu(new) - cpu(without),
        cpu(back),
        cpu(back) - cpu(without)
    );
    let (wd, nd) = (without.del.stats.median_ms, new.del.stats.median_ms);
    let _ = write!(s, ". A DEL took {wd:.2} ms without stickiness and {nd:.2} ms with it ({:+.2} ms).", nd - wd);
    let txns = |variant: &str, command: &str| probe(&f.probes, variant, command).map(CallProbe::write_txns_per_call);
    if let (Some(tw), Some(tn), Some(tb)) = (txns(WITHOUT, "ADD"), txns(NEW_IDENTITY, "ADD"), txns(RETURNING, "ADD")) {
        let _ = write!(
            s,
            " Per ADD the stack without stickiness made {tw:.2} write transactions, with it {tn:.2} (new identity) and \
             {tb:.2} (returning)"
        );
        let syncs =
            |variant: &str| probe(&f.probes, variant, "ADD").and_then(|p| p.syncs.as_ref()).map(FsyncProbe::per_call);
        if let (Some(sw), Some(sn), Some(sb)) = (syncs(WITHOUT), syncs(NEW_IDENTITY), syncs(RETURNING)) {
            let _ = write!(s, ", and {sw}, {sn} and {sb} fsync-family calls");
        }
        s.push('.');
    }
    s.push_str(
        " What stickiness adds, by the code: ipam-da-sticky runs a write transaction of its own in every ADD (the \
         database's lock, BEGIN IMMEDIATE, dropping expired holds, reading the identity's rows by the \
         leases_by_identity index, binding the identity, the commit to the WAL). For a new identity it finds \
         nothing, and ipam-da-sequential's transaction leases as before plus one UPDATE that binds the identity to \
         the new lease: two write transactions instead of one. For a returning identity it turns the hold back into \
         a lease (one UPDATE), and ipam-da-sequential, whose family has its address already, opens no transaction: \
         one write transaction, as without stickiness. In the fast layout the commits are not synced one by one: \
         the WAL is synced once before the call answers, whatever the number of commits. In a DEL each allocator of the stack releases the attachment in a write transaction of its \
         own (ipam-da-static's and ipam-da-sequential's), ipam-da-sticky's is one more, and a release of an \
         identity's lease sets held_until instead of deleting the row.",
    );
    s
}

/// What stickiness cost per call in cluster mode, from the figures, and why.
fn cluster_reading(c: &StickyClusterFigures) -> String {
    let mut s = String::new();
    let Some(without) = times(&c.variants, WITHOUT) else { return s };
    let w = without.add.stats.median_ms;
    let _ = write!(s, "In this run the median cluster-mode ADD took {w:.2} ms without stickiness");
    for (name, what) in [
        (NEW_IDENTITY, "for a new identity"),
        (RETURNING, "for an identity returning to its node"),
        (RETURNING_ELSEWHERE, "for one returning on another node"),
    ] {
        if let Some(v) = times(&c.variants, name) {
            let m = v.add.stats.median_ms;
            let _ = write!(s, ", {m:.2} ms {what} ({:+.2} ms, {})", m - w, ratio(m, w));
        }
    }
    if let Some(new) = times(&c.variants, NEW_IDENTITY) {
        let (cw, cn) = (without.add_cpu.median_ms, new.add_cpu.median_ms);
        let _ = write!(s, "; its CPU time (median) {cw:.2} ms without stickiness, {cn:.2} ms for a new identity");
    }
    s.push('.');
    let per = |name: &str, add: bool| {
        c.counts.iter().find(|(n, _, _)| *n == name).map(|(_, a, d)| {
            let step = if add { a } else { d };
            step.per_call(step.total())
        })
    };
    if let (Some(wa), Some(na)) = (per(WITHOUT, true), per(NEW_IDENTITY, true)) {
        let _ = write!(
            s,
            " etcd counted {wa:.2} requests per ADD without stickiness and {na:.2} with it for a new identity"
        );
        if let Some(ra) = per(RETURNING, true) {
            let _ = write!(s, ", {ra:.2} for a returning one");
        }
        if let (Some(wd), Some(nd)) = (per(WITHOUT, false), per(NEW_IDENTITY, false)) {
            let _ = write!(s, "; {wd:.2} per DEL without and {nd:.2} with it");
        }
        s.push('.');
    }
    s.push_str(
        " What stickiness adds in cluster mode: before anything is allocated, ipam-ds-cluster claims the identity's \
         key in etcd (one txn that creates it if absent and reads it otherwise; for a held identity a second txn \
         takes it over, comparing the key and each address record), and once the address is decided it records \
         the address in the key (a txn comparing the key as the claim's answer left it, when the addresses \
         changed: a new identity's); \
         a DEL reads the key and the addresses' records in one txn, grants the hold its etcd lease, and writes the \
         key and each address's held record under that lease in one txn. Each request is \
         a round trip to etcd, and a writing one waits for etcd's WAL sync.",
    );
    s
}

/// The tables printed and written: local mode, then cluster mode (or why it
/// was not measured). Empty when neither scenario ran.
pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    if fig.sticky.is_none() && fig.sticky_cluster.is_none() && fig.sticky_cluster_note.is_none() {
        return s;
    }
    let _ = writeln!(s, "## Sticky addresses: ADD and DEL with and without ipam-da-sticky\n");
    if let Some(f) = &fig.sticky {
        let _ = writeln!(s, "The suite without stickiness is `ipam-delegated` with delegates `{}`; with stickiness `{}` (`ipam.sticky` left to its defaults: identity `K8S_POD_NAMESPACE`/`K8S_POD_NAME`, hold 600 s). Subnet {}, a database / dataDir of its own per variant. {} rounds: each round ADDs one container per variant, then DELs it, the variants' order rotating. Every call has CNI_ARGS as a kubelet passes them (`{}`); host-local and the stack without stickiness ignore them. *A new identity*: a pod never seen before (nothing to give back; the allocators bind the identity to the lease; its DEL holds the address). *The identity returns*: each round's pod was ADDed and DELeted once before the rounds, so that its address is held for it; its ADD under a new container id takes the hold back (the benchmark checks that it answers the held address), and its DEL holds it again.\n", list(f.plain_delegates), list(f.sticky_delegates), f.subnet, f.rounds, f.cni_args);
        let _ = writeln!(s, "{}", latency_table(&f.variants));
        let n = f.probes.first().map_or(0, |p| p.calls);
        let _ = writeln!(s, "Then {n} ADDs and {n} DELs per variant logged at debug level: every write transaction logs \"lock wait W, transaction T, durable commit C\", so the lines count a call's write transactions and T + C is how long they held the database's lock; and as many under `strace -f`, counting the fsync-family calls as in Durability{}.\n", f.fsync_note.as_ref().map_or(String::new(), |note| format!(" (not counted: {note})")));
        let _ = writeln!(s, "{}", probe_table(&f.probes, f.fsync_note.is_none()));
        let _ = writeln!(s, "{}\n", local_reading(f));
    }
    match (&fig.sticky_cluster, &fig.sticky_cluster_note) {
        (Some(c), _) => {
            let _ = writeln!(s, "### Cluster mode\n\nThe cluster stack without stickiness is `{}`, with it `{}`, on one real etcd ({}, a single member on loopback ports); pool `bench`, {}, default blockSize (/26 blocks), under a key prefix of its own; a node is a node name with a database of its own, one per variant: no stickiness (`node-a`), a new identity (`node-b`), the identity returning to the node that held it (`node-c`), and returning on another node (`node-d` takes over holds that `node-e` left: the address lies in `node-e`'s block). {} rounds as above, then per variant as many ADDs and DELs as the cluster scenario counts, each batch counted by etcd (`grpc_server_handled_total` per method, before and after) and logged at debug level (the client's count per call, the write transactions). The node of new identities was first given room for every identity it holds (ADDs without CNI_ARGS, not sticky, then their DELs: it keeps the blocks it claimed), so that no counted ADD claims a block.\n", list(c.plain_delegates), list(c.sticky_delegates), c.etcd, c.subnet, c.rounds);
            let _ = writeln!(s, "{}", latency_table(&c.variants));
            let _ = writeln!(s, "{}", count_table(&c.counts));
            let _ = writeln!(s, "{}", probe_table(&c.probes, false));
            let _ = writeln!(s, "{}\n", cluster_reading(c));
        }
        (None, Some(note)) => {
            let _ = writeln!(s, "### Cluster mode\n\nNot measured: {note}.\n");
        }
        (None, None) => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use ipam_ds_cluster::etcd::RequestCount;

    use crate::figures::cluster::ClientCount;

    use super::*;
    use crate::harness::{Latency, Stats};

    fn lat(median_ms: f64, n: usize) -> Latency {
        Latency {
            stats: Stats { median_ms, p99_ms: median_ms * 2.0, max_ms: median_ms * 3.0, n },
            p90_ms: median_ms * 1.5,
        }
    }

    fn variant(name: &'static str, add: f64, del: f64) -> VariantTimes {
        let cpu = Stats { median_ms: add / 2.0, p99_ms: 0.0, max_ms: 0.0, n: 10 };
        VariantTimes { name, add: lat(add, 10), del: lat(del, 10), add_cpu: cpu, del_cpu: cpu }
    }

    fn call(variant: &'static str, command: &'static str, write_txns: usize) -> CallProbe {
        let syncs = FsyncProbe { variant: variant.into(), case: command.into(), calls: vec![Default::default(); 4] };
        CallProbe { variant, command, calls: 4, write_txns, lock_held: Duration::from_millis(2), syncs: Some(syncs) }
    }

    #[test]
    fn the_local_figures_compare_with_host_local_and_without_stickiness() {
        let fig = Figures {
            sticky: Some(StickyFigures {
                plain_delegates: &["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"],
                sticky_delegates: &["ipam-ds-pool", "ipam-da-static", "ipam-da-sticky", "ipam-da-sequential"],
                cni_args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=<pod>;K8S_POD_INFRA_CONTAINER_ID=<container id>"
                    .into(),
                subnet: "10.27.0.0/16",
                rounds: 10,
                variants: vec![
                    variant(HOST_LOCAL, 4.0, 3.0),
                    variant(WITHOUT, 2.0, 1.8),
                    variant(NEW_IDENTITY, 2.5, 1.9),
                    variant(RETURNING, 2.4, 1.9),
                ],
                probes: vec![call(WITHOUT, "ADD", 4), call(NEW_IDENTITY, "ADD", 8), call(RETURNING, "ADD", 8)],
                fsync_note: None,
            }),
            ..Default::default()
        };
        let s = section(&fig);
        for text in [
            "| ADD, host-local | 10 | 4.00 | 6.00 | 8.00 | 12.00 | 2.00 | 1.00× | 1.00× | 2.00× |",
            "| ADD, suite, no stickiness | 10 | 2.00 | 3.00 | 4.00 | 6.00 | 1.00 | 0.50× | 0.50× | 1.00× |",
            "| ADD, suite, sticky: a new identity | 10 | 2.50 | 3.75 | 5.00 | 7.50 | 1.25 | 0.62× | 0.62× | 1.25× |",
            "| DEL, suite, sticky: a new identity | 10 | 1.90 |",
            "| ADD, suite, sticky: a new identity | 4 | 2.00 | 0.500 | 0 |",
            "for a new identity (+0.50 ms, 1.25×)",
            "was 1.00 ms without stickiness, 1.25 ms for a new identity (+0.25 ms) and 1.20 ms for a returning one",
            "Per ADD the stack without stickiness made 1.00 write transactions, with it 2.00 (new identity)",
            "K8S_POD_NAME=<pod>",
            "with stickiness `[\"ipam-ds-pool\", \"ipam-da-static\", \"ipam-da-sticky\", \"ipam-da-sequential\"]`",
        ] {
            assert!(s.contains(text), "{text} missing from\n{s}");
        }
        assert!(!s.contains("### Cluster mode"), "{s}");
        assert!(section(&Figures::default()).is_empty());
    }

    #[test]
    fn the_cluster_figures_count_etcd_per_call() {
        let step = |calls: usize, txn: u64, lease: u64, writing: u64| StepCount {
            calls,
            server: BTreeMap::from([("Txn".to_string(), txn), ("LeaseGrant".to_string(), lease), ("Put".into(), 0)]),
            client: ClientCount::Etcd(RequestCount { ranges: 0, txns: txn, writing_txns: writing, other: lease }),
            logged: calls,
        };
        let fig = Figures {
            sticky_cluster: Some(StickyClusterFigures {
                etcd: "etcd Version: 3.4.23".into(),
                plain_delegates: &["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"],
                sticky_delegates: &[
                    "ipam-ds-pool",
                    "ipam-ds-cluster",
                    "ipam-da-static",
                    "ipam-da-sticky",
                    "ipam-da-sequential",
                ],
                subnet: "10.33.0.0/16",
                rounds: 10,
                variants: vec![variant(WITHOUT, 2.0, 1.8), variant(NEW_IDENTITY, 3.0, 2.8)],
                counts: vec![
                    (WITHOUT, step(10, 0, 0, 0), step(10, 0, 0, 0)),
                    (NEW_IDENTITY, step(10, 30, 0, 20), step(10, 20, 10, 10)),
                ],
                probes: vec![],
            }),
            ..Default::default()
        };
        let s = section(&fig);
        for text in [
            "| calls | n | LeaseGrant | Txn | etcd requests per call | the client's count (logs) |",
            "| ADD, suite, sticky: a new identity | 10 | 0 | 30 | 3.00 | 0 range, 30 txn (20 writing), 0 other; 10 of 10 calls logged |",
            "| DEL, suite, sticky: a new identity | 10 | 10 | 20 | 3.00 |",
            "| ADD, suite, sticky: a new identity | 10 | 3.00 | 4.50 | 6.00 | 9.00 | 1.50 | 1.50× |",
            "etcd counted 0.00 requests per ADD without stickiness and 3.00 with it for a new identity",
            "its CPU time (median) 1.00 ms without stickiness, 1.50 ms for a new identity.",
        ] {
            assert!(s.contains(text), "{text} missing from\n{s}");
        }
        let missing = Figures { sticky_cluster_note: Some("etcd not found in PATH".into()), ..Default::default() };
        assert!(section(&missing).contains("Not measured: etcd not found in PATH."));
    }
}
