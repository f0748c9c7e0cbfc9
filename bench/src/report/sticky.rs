//! The sticky-address section: the tables of the sticky-address scenarios
//! and what they say (also printed when they run).

use std::fmt::Write as _;

use super::format::{ratio, server_counts};
use crate::figures::cluster::StepCount;
use crate::figures::durability::FsyncProbe;
use crate::figures::sticky::{
    CallProbe, StickyClusterFigures, StickyFigures, StickyStore, VariantTimes, HOST_LOCAL, NEW_IDENTITY, RETURNING,
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

/// The cluster-mode variants' ADD and DEL on each store, side by side:
/// median, p90, p99, CPU median and the median's ratio to the same store
/// without stickiness; with a second store, its median over the first's.
fn cluster_latency_table(c: &StickyClusterFigures) -> String {
    let mut t = String::from("| command, variant | n |");
    for store in &c.stores {
        let name = store.store;
        let _ = write!(t, " {name}: median ms | p90 ms | p99 ms | CPU median ms | median / no stickiness |");
    }
    let second = c.stores.get(1).map(|s| (s.store, c.stores[0].store));
    if let Some((second, first)) = second {
        let _ = write!(t, " median, {second} / {first} |");
    }
    let _ = writeln!(
        t,
        "\n|---|---:|{}{}",
        "---:|".repeat(5 * c.stores.len()),
        if second.is_some() { "---:|" } else { "" }
    );
    let Some(first) = c.stores.first() else { return t };
    for command in ["ADD", "DEL"] {
        let of = |v: &VariantTimes| if command == "ADD" { (v.add, v.add_cpu) } else { (v.del, v.del_cpu) };
        for variant in &first.variants {
            let _ = write!(t, "| {command}, {} | {} |", variant.name, of(variant).0.stats.n);
            let medians: Vec<Option<f64>> = c
                .stores
                .iter()
                .map(|store| {
                    let Some((l, cpu)) = times(&store.variants, variant.name).map(of) else {
                        t.push_str(" — | — | — | — | — |");
                        return None;
                    };
                    let st = l.stats;
                    let base = times(&store.variants, WITHOUT)
                        .map_or("—".into(), |w| ratio(st.median_ms, of(w).0.stats.median_ms));
                    let _ = write!(
                        t,
                        " {:.2} | {:.2} | {:.2} | {:.2} | {base} |",
                        st.median_ms, l.p90_ms, st.p99_ms, cpu.median_ms
                    );
                    Some(st.median_ms)
                })
                .collect();
            if let [Some(a), Some(b)] = medians[..] {
                let _ = write!(t, " {} |", ratio(b, a));
            }
            t.push('\n');
        }
    }
    t
}

/// A row saying why the Kubernetes API has no figures, when it has none.
fn kube_missing(c: &StickyClusterFigures) -> String {
    c.kube_note.as_ref().map_or(String::new(), |why| format!("| the Kubernetes API store | not measured: {why} |\n"))
}

/// Each variant's requests and writes per call on each store, side by side.
fn cluster_request_table(c: &StickyClusterFigures) -> String {
    let mut t = String::from("| calls | n |");
    for store in &c.stores {
        let _ = write!(t, " {}: requests per call | writes per call |", store.store);
    }
    let _ = writeln!(t, "\n|---|---:|{}", "---:|".repeat(2 * c.stores.len()));
    let Some(first) = c.stores.first() else { return t };
    for (command, add) in [("ADD", true), ("DEL", false)] {
        for (name, a, _) in &first.counts {
            let _ = write!(t, "| {command}, {name} | {} |", a.calls);
            for store in &c.stores {
                match count(store, name, add) {
                    Some(step) => {
                        let _ =
                            write!(t, " {:.2} | {:.2} |", step.per_call(step.total()), step.per_call(step.writes()));
                    }
                    None => t.push_str(" — | — |"),
                }
            }
            t.push('\n');
        }
    }
    t.push_str(&kube_missing(c));
    t
}

/// The counted ADDs (`add`) or DELs of variant `name` on `store`.
fn count<'a>(store: &'a StickyStore, name: &str, add: bool) -> Option<&'a StepCount> {
    store.counts.iter().find(|(n, _, _)| *n == name).map(|(_, a, d)| if add { a } else { d })
}

/// The stores' own counts of each variant's counted calls, and the
/// clients'.
fn cluster_count_table(c: &StickyClusterFigures) -> String {
    let mut t = String::from(
        "| calls | store | n | the store's count (etcd: per gRPC method; the API server: per verb and resource) | \
         the client's count (logs) |\n|---|---|---:|---|---|\n",
    );
    let Some(first) = c.stores.first() else { return t };
    for (command, add) in [("ADD", true), ("DEL", false)] {
        for (name, _, _) in &first.counts {
            for store in &c.stores {
                let Some(step) = count(store, name, add) else { continue };
                let _ = writeln!(
                    t,
                    "| {command}, {name} | {} | {} | {} | {}; {} of {} calls logged |",
                    store.store,
                    step.calls,
                    server_counts(&step.server),
                    step.client.describe(),
                    step.logged,
                    step.calls
                );
            }
        }
    }
    t
}

/// The node database's write transactions per call on each store, side by
/// side.
fn cluster_probe_table(c: &StickyClusterFigures) -> String {
    let mut t = String::from("| calls | n |");
    for store in &c.stores {
        let _ = write!(t, " {}: write transactions per call | lock held per call, mean ms |", store.store);
    }
    let _ = writeln!(t, "\n|---|---:|{}", "---:|".repeat(2 * c.stores.len()));
    let Some(first) = c.stores.first() else { return t };
    for command in ["ADD", "DEL"] {
        for p in first.probes.iter().filter(|p| p.command == command) {
            let _ = write!(t, "| {command}, {} | {} |", p.variant, p.calls);
            for store in &c.stores {
                match probe(&store.probes, p.variant, command) {
                    Some(q) => {
                        let _ = write!(t, " {:.2} | {:.3} |", q.write_txns_per_call(), q.lock_held_per_call_ms());
                    }
                    None => t.push_str(" — | — |"),
                }
            }
            t.push('\n');
        }
    }
    t
}

/// What stickiness cost per call in cluster mode on each store, from the
/// figures, and why.
fn cluster_reading(c: &StickyClusterFigures) -> String {
    let mut s = String::new();
    for store in &c.stores {
        let Some(without) = times(&store.variants, WITHOUT) else { continue };
        let w = without.add.stats.median_ms;
        let _ = write!(s, "On the {} store the median ADD took {w:.2} ms without stickiness", store.store);
        for (name, what) in [
            (NEW_IDENTITY, "for a new identity"),
            (RETURNING, "for an identity returning to its node"),
            (RETURNING_ELSEWHERE, "for one returning on another node"),
        ] {
            if let Some(v) = times(&store.variants, name) {
                let m = v.add.stats.median_ms;
                let _ = write!(s, ", {m:.2} ms {what} ({:+.2} ms, {})", m - w, ratio(m, w));
            }
        }
        if let Some(new) = times(&store.variants, NEW_IDENTITY) {
            let (cw, cn) = (without.add_cpu.median_ms, new.add_cpu.median_ms);
            let _ = write!(s, "; its CPU time (median) {cw:.2} ms without stickiness, {cn:.2} ms for a new identity");
        }
        let per = |name: &str, add: bool| {
            count(store, name, add).map(|step| (step.per_call(step.total()), step.per_call(step.writes())))
        };
        let mut adds = Vec::new();
        for (name, what) in [
            (WITHOUT, "without stickiness"),
            (NEW_IDENTITY, "for a new identity"),
            (RETURNING, "returning to its node"),
            (RETURNING_ELSEWHERE, "returning on another node"),
        ] {
            if let Some((r, w)) = per(name, true) {
                adds.push(format!("{r:.2} ({w:.2} writes) {what}"));
            }
        }
        if !adds.is_empty() {
            let _ = write!(s, ". It counted requests per ADD: {}", adds.join(", "));
            if let (Some((wd, _)), Some((nd, ndw))) = (per(WITHOUT, false), per(NEW_IDENTITY, false)) {
                let _ = write!(s, "; per DEL {wd:.2} without stickiness and {nd:.2} ({ndw:.2} writes) with it");
            }
        }
        s.push_str(".\n\n");
    }
    s.push_str(
        "What stickiness adds on etcd: before anything is allocated, ipam-ds-cluster claims the identity's \
         key in etcd (one txn that creates it if absent and reads it otherwise; for a held identity a second txn \
         takes it over, comparing the key and each address record), and once the address is decided it records \
         the address in the key (a txn comparing the key as the claim's answer left it, when the addresses \
         changed: a new identity's); \
         a DEL reads the key and the addresses' records in one txn, grants the hold its etcd lease, and writes the \
         key and each address's held record under that lease in one txn. Each request is \
         a round trip to etcd, and a writing one waits for etcd's WAL sync.",
    );
    if c.stores.len() > 1 {
        s.push_str(KUBE_READING);
    }
    s
}

/// What stickiness adds on the Kubernetes API, by the code
/// (ipam-ds-cluster's node/sticky.rs and datastore/kubernetes/identities.rs).
const KUBE_READING: &str =
    "\n\nWhat stickiness adds on the Kubernetes API: an identity on an interface is one `IPDIdentity` \
     object, and an address held for it is a record in its block's `IPDBlock`. The API server changes one object per \
     request, each a compare-and-swap at the resourceVersion read, so where etcd compares the key and the records in \
     one txn the plugin reads each object and writes them one after the other, in the order after which a kill \
     between two writes is settled by the attachment's DEL (datastore/kubernetes/identities.rs). An ADD of a new \
     identity reads its IPDIdentity (404) and creates it live on this node (POST), and once the address is decided \
     replaces it with the address listed (PUT, at the resourceVersion its creation answered: no second read): three \
     requests, two writes, where etcd takes two txns. An identity returning, to its node or to another, is read (held); the IPDNetwork is read (no take-over \
     while the network recovers lost history, which etcd compares in its txn); the identity is replaced live on \
     this attachment first (PUT, at the resourceVersion read), then the block of each address is read and updated, \
     its record now this attachment's (PUT): five requests, two writes, against two txns. A DEL reads the identity \
     and the blocks of its addresses, updates each block (its records held for the identity until \
     the API server's `Date` plus the hold) and then the identity (held until the same end, at the resourceVersion read): four \
     requests, two writes, where etcd takes three (a read-only txn, a LeaseGrant, a writing txn); no lease, the end is written in \
     both objects and judged by the API server's clock. Every CNI process opens a TLS connection of its own (one per \
     call in the client's count), and each write waits for the API server's etcd. The node database takes one more \
     write transaction in a call that read the server: the note of the uids and generations of the objects it saw \
     (`kube-seen:`, datastore/kubernetes/history.rs).";

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
            let load = fig.loads.iter().find(|(when, _)| when == "sticky cluster").map(|(_, load)| load.as_str());
            s.push_str(&cluster_section(c, load));
        }
        (None, Some(note)) => {
            let _ = writeln!(s, "### Cluster mode\n\nNot measured: {note}.\n");
        }
        (None, None) => {}
    }
    s
}

/// The cluster-mode subsection: how it was measured, the tables side by
/// side, what they say.
/// `load`: the load average when the scenario ended.
fn cluster_section(c: &StickyClusterFigures, load: Option<&str>) -> String {
    let mut s = String::new();
    let version = |name: &str| c.stores.iter().find(|store| store.store == name).map(|store| store.version.clone());
    let etcd = version("etcd").unwrap_or_else(|| "etcd".into());
    let kube = match (version("Kubernetes API"), &c.kube_note) {
        (Some(kube), _) => format!("and one real Kubernetes API server ({kube}, started as in \"On the Kubernetes API, side by side with etcd\" above: RBAC enforced, the plugins with the DaemonSet's ServiceAccount token), both stores' variants interleaved in every round"),
        (None, Some(why)) => format!("(the Kubernetes API not measured: {why})"),
        (None, None) => String::new(),
    };
    let _ = writeln!(s, "### Cluster mode\n\nThe cluster stack without stickiness is `{}`, with it `{}`, on one real etcd ({etcd}, a single member on loopback ports) {kube}; pool `bench`, {}, default blockSize (/26 blocks), in a space of its own (a key prefix in etcd, a network on the API server); a node is a node name with a database of its own, one per variant and store: no stickiness (`node-a`), a new identity (`node-b`), the identity returning to the node that held it (`node-c`), and returning on another node (`node-d` takes over holds that `node-e` left: the address lies in `node-e`'s block). {} rounds as above, then per store and variant as many ADDs and DELs as the cluster scenario counts, each batch counted by the store itself (etcd: `grpc_server_handled_total` per method; the API server: `apiserver_request_total` of the group `ipam-delegated.io` per verb and resource, its answers that are no success apart), before and after, and logged at debug level (the client's count per call, the write transactions). Writes: on etcd Put, DeleteRange and the txns that wrote (the client's count tells them); on the API server POST, PUT, PATCH and DELETE answered with success. The node of new identities was first given room for every identity it holds (ADDs without CNI_ARGS, not sticky, then their DELs: it keeps the blocks it claimed), so that no counted ADD claims a block. `cargo run --release -p ipam-bench -- --only sticky-cluster` measures both stores again and prints these tables (it writes no file).\n", list(c.plain_delegates), list(c.sticky_delegates), c.subnet, c.rounds);
    if let Some(load) = load {
        let _ = writeln!(s, "Times are wall-clock times of whole processes: they grow with whatever else the machine runs (load average when the scenario ended: {load}); the counts do not.\n");
    }
    let _ = writeln!(s, "{}{}", cluster_latency_table(c), kube_missing(c));
    let _ = writeln!(s, "{}", cluster_request_table(c));
    let _ = writeln!(s, "{}", cluster_count_table(c));
    let _ = writeln!(s, "{}", cluster_probe_table(c));
    let _ = writeln!(s, "{}\n", cluster_reading(c));
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use ipam_ds_cluster::etcd::RequestCount;
    use ipam_ds_cluster::kube;

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

    fn etcd_step(calls: usize, txn: u64, lease: u64, writing: u64) -> StepCount {
        StepCount {
            calls,
            server: BTreeMap::from([("Txn".to_string(), txn), ("LeaseGrant".to_string(), lease), ("Put".into(), 0)]),
            client: ClientCount::Etcd(RequestCount { ranges: 0, txns: txn, writing_txns: writing, other: lease }),
            logged: calls,
        }
    }

    fn kube_step(calls: usize, server: &[(&str, u64)]) -> StepCount {
        let requests = server.iter().map(|(_, n)| n).sum();
        StepCount {
            calls,
            server: server.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            client: ClientCount::Kubernetes(kube::Counts { requests, connections: calls as u64 }),
            logged: calls,
        }
    }

    fn cluster(stores: Vec<StickyStore>, kube_note: Option<String>) -> Figures {
        Figures {
            sticky_cluster: Some(StickyClusterFigures {
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
                stores,
                kube_note,
            }),
            ..Default::default()
        }
    }

    fn etcd_store() -> StickyStore {
        StickyStore {
            store: "etcd",
            version: "etcd Version: 3.4.23".into(),
            variants: vec![variant(WITHOUT, 2.0, 1.8), variant(NEW_IDENTITY, 3.0, 2.8)],
            counts: vec![
                (WITHOUT, etcd_step(10, 0, 0, 0), etcd_step(10, 0, 0, 0)),
                (NEW_IDENTITY, etcd_step(10, 30, 0, 20), etcd_step(10, 20, 10, 10)),
            ],
            probes: vec![call(WITHOUT, "ADD", 10), call(NEW_IDENTITY, "ADD", 20)],
        }
    }

    #[test]
    fn the_cluster_figures_count_each_stores_requests_and_writes_side_by_side() {
        let kube = StickyStore {
            store: "Kubernetes API",
            version: "Kubernetes v1.36.3".into(),
            variants: vec![variant(WITHOUT, 2.2, 2.0), variant(NEW_IDENTITY, 6.0, 5.0)],
            counts: vec![
                (WITHOUT, kube_step(10, &[]), kube_step(10, &[])),
                (
                    NEW_IDENTITY,
                    kube_step(
                        10,
                        &[
                            ("GET ipdidentities", 10),
                            ("GET ipdidentities (404)", 10),
                            ("POST ipdidentities", 10),
                            ("PUT ipdidentities", 10),
                        ],
                    ),
                    kube_step(10, &[("GET ipdidentities", 20), ("PUT ipdblocks", 10), ("PUT ipdblocks (409)", 2)]),
                ),
            ],
            probes: vec![call(WITHOUT, "ADD", 10), call(NEW_IDENTITY, "ADD", 30)],
        };
        let s = section(&cluster(vec![etcd_store(), kube], None));
        contain_all(
            &s,
            &[
                "| command, variant | n | etcd: median ms | p90 ms | p99 ms | CPU median ms | median / no stickiness | \
                 Kubernetes API: median ms | p90 ms | p99 ms | CPU median ms | median / no stickiness | median, \
                 Kubernetes API / etcd |",
                "| ADD, suite, sticky: a new identity | 10 | 3.00 | 4.50 | 6.00 | 1.50 | 1.50× | 6.00 | 9.00 | 12.00 | \
                 3.00 | 2.73× | 2.00× |",
                "| calls | n | etcd: requests per call | writes per call | Kubernetes API: requests per call | writes per \
                 call |",
                // etcd: the txns that wrote, per the client; the API server:
                // its writing verbs answered with success (a 409 wrote nothing).
                "| ADD, suite, sticky: a new identity | 10 | 3.00 | 2.00 | 4.00 | 2.00 |",
                "| DEL, suite, sticky: a new identity | 10 | 3.00 | 1.00 | 3.20 | 1.00 |",
                "| ADD, suite, sticky: a new identity | etcd | 10 | Txn 30 | 0 range, 30 txn (20 writing), 0 other; 10 \
                 of 10 calls logged |",
                "| ADD, suite, sticky: a new identity | Kubernetes API | 10 | GET ipdidentities 10, GET ipdidentities \
                 (404) 10, POST ipdidentities 10, PUT ipdidentities 10 | 40 requests, 10 connections; 10 of 10 calls \
                 logged |",
                "| DEL, suite, no stickiness | Kubernetes API | 10 | none |",
                "| ADD, suite, sticky: a new identity | 4 | 5.00 | 0.500 | 7.50 | 0.500 |",
                "On the etcd store the median ADD took 2.00 ms without stickiness, 3.00 ms for a new identity (+1.00 ms, 1.50×)",
                "On the Kubernetes API store the median ADD took 2.20 ms without stickiness, 6.00 ms for a new identity",
                "It counted requests per ADD: 0.00 (0.00 writes) without stickiness, 4.00 (2.00 writes) for a new identity",
                "Kubernetes v1.36.3",
                "What stickiness adds on the Kubernetes API",
            ],
        );
        assert!(!s.contains("not measured"), "{s}");
    }

    #[test]
    fn without_the_api_server_the_cluster_figures_say_why() {
        let s = section(&cluster(vec![etcd_store()], Some("go not found in PATH".into())));
        contain_all(
            &s,
            &[
                "| command, variant | n | etcd: median ms | p90 ms | p99 ms | CPU median ms | median / no stickiness |\n",
                "| ADD, suite, sticky: a new identity | 10 | 3.00 | 4.50 | 6.00 | 1.50 | 1.50× |\n",
                "| the Kubernetes API store | not measured: go not found in PATH |",
                "| ADD, suite, sticky: a new identity | etcd | 10 | Txn 30 | 0 range, 30 txn (20 writing), 0 other; 10 \
                 of 10 calls logged |",
                "It counted requests per ADD: 0.00 (0.00 writes) without stickiness, 3.00 (2.00 writes) for a new identity",
            ],
        );
        assert!(!s.contains("Kubernetes API:"), "{s}");
        assert!(!s.contains("What stickiness adds on the Kubernetes API"), "{s}");
        let missing = Figures { sticky_cluster_note: Some("etcd not found in PATH".into()), ..Default::default() };
        assert!(section(&missing).contains("Not measured: etcd not found in PATH."));
    }

    fn contain_all(text: &str, expected: &[&str]) {
        for e in expected {
            assert!(text.contains(e), "{e} missing from\n{text}");
        }
    }
}
