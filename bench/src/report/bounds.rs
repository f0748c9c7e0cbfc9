//! What bounds the figures, as far as the benchmark can know it.

use std::fmt::Write as _;

use super::format::{ratio, MIB};
use super::variants::{find, fsync_probe, COPIES, FLOOR, HOST, NULL, SEQUENTIAL, STACK, SUITE_FLOOR};
use crate::figures::cluster::{ClusterFigures, KubeFigures};
use crate::figures::durability::FsyncProbe;
use crate::figures::Figures;
use crate::harness::Stats;

/// What bounds the figures, as far as the benchmark can know it: a Markdown
/// list (also printed).
pub fn list(fig: &Figures) -> String {
    let mut s = String::new();
    let get = |list: &[(String, Stats)], prefix: &str| find(list, prefix).copied().filter(|st| st.n > 0);
    let floor = get(&fig.floors, SUITE_FLOOR).map(|f| f.median_ms);
    let true_floor = get(&fig.floors, "/bin/true").map(|f| f.median_ms);
    let sync = fig.sync_cost.map(|st| st.median_ms);
    let syncs = |variant: &str, case: &str| fsync_probe(fig, variant, case).map(FsyncProbe::median);
    let (hl_add, hl_del) = (get(&fig.add, HOST), get(&fig.del, HOST));
    if let (Some(f), Some(h), Some(t)) = (floor, hl_add, true_floor) {
        let _ = writeln!(s, "- **Starting a process.** Through this spawn path /bin/true takes {t:.2} ms and the suite's program doing no work (CNI_COMMAND=VERSION) {f:.2} ms: no call of the suite, which is at least one such process, can take less. Against host-local's ADD median ({:.2} ms) that floor is {}; against its DEL ({:.2} ms), {}. The copies layout starts three such processes per call (ipam-delegated and each delegate): at least {:.2} ms, {} host-local's ADD.", h.median_ms, ratio(f, h.median_ms), hl_del.map_or(0.0, |d| d.median_ms), hl_del.map_or("—".into(), |d| ratio(f, d.median_ms)), 3.0 * f, ratio(3.0 * f, h.median_ms));
    }
    if let Some(c) = sync {
        let mut line = format!("- **Syncing.** One 4 KiB append + fdatasync in the temp dir takes {c:.2} ms (median of 20) on this disk; host-local syncs nothing.");
        let first_hl = get(&fig.first_add, HOST);
        let cases = [
            (STACK, "The full stack's", FsyncProbe::ADD, hl_add),
            (STACK, "The full stack's", FsyncProbe::DEL, hl_del),
            (STACK, "The full stack's", FsyncProbe::FIRST_ADD, first_hl),
            (SEQUENTIAL, "ipam-da-sequential alone's", FsyncProbe::ADD, hl_add),
        ];
        for (variant, whose, case, hl) in cases {
            if let (Some(k), Some(f), Some(h)) = (syncs(variant, case), floor, hl) {
                let least = f + k as f64 * c;
                let _ = write!(line, " {whose} {case}: {k} (median call), so with the process floor at least about {least:.2} ms, {} host-local's median.", ratio(least, h.median_ms));
            }
        }
        let _ = writeln!(s, "{line}");
    }
    let cpu = |prefix: &str| get(&fig.add_cpu, prefix).map(|st| st.median_ms);
    if let (Some(sc), Some(hc)) = (cpu(STACK), cpu(HOST)) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let _ = write!(s, "- **CPU.** One ADD takes {sc:.2} ms of CPU (user + system, median, the process and what it reaped) for the full stack, {hc:.2} ms for host-local");
        if let Some(cc) = cpu(COPIES) {
            let _ = write!(s, ", {cc:.2} ms for the copies layout");
        }
        let _ = write!(s, ". On {cores} cores, if nothing but CPU limited them, concurrent ADDs could reach at most {:.0} ADD/s (suite) and {:.0} ADD/s (host-local), a ratio of {:.2}× (the spawning threads' own CPU and the kernel's work in the parent come on top).", cores * 1e3 / sc, cores * 1e3 / hc, hc / sc);
        if let Some(lw) = &fig.lock_wait {
            let _ = write!(s, " Each ADD also holds the database's lock for one write transaction, {:.2} ms (median, transaction + durable commit, under {}-way contention): however many cores, ADDs on one database cannot exceed about {:.0} ADD/s.", lw.hold.median_ms, lw.workers, 1e3 / lw.hold.median_ms.max(1e-9));
        }
        s.push('\n');
    }
    if let (Some(fl), Some(h)) = (get(&fig.add, FLOOR), hl_add) {
        let f = fl.median_ms;
        let _ = write!(s, "- **The floor.** `ipam-bench-floor` (bench/floor), a minimal program of the benchmark's own built by scripts/build as the suite's program is, does the least work of a steady-state ADD: it reads its configuration on stdin (the fields it needs, found by a scan), opens its database, takes the writers' lock, makes one write transaction (five statements: the attachment's lease looked up, the cursor read, the next free address found, the lease inserted, the cursor moved) committed under synchronous=NORMAL, applies the suite's checkpoint policy (past 64 WAL frames a RESTART checkpoint, which syncs the database file, and a commit that starts the WAL again at its beginning), syncs the WAL once (fdatasync; not after a checkpoint) and prints its answer. Its ADD median is {f:.2} ms (p99 {:.2} ms, CPU {}), {} host-local's ADD median.", fl.p99_ms, cpu(FLOOR).map_or("—".into(), |c| format!("{c:.2} ms")), ratio(f, h.median_ms));
        if let Some(null) = get(&fig.floors, NULL) {
            let n = null.median_ms;
            let _ = write!(s, " The same build doing nothing (`ipam-bench-null`) takes {n:.2} ms: of the floor's {f:.2} ms, {n:.2} ms are starting and ending a process of that build, {:.2} ms the work.", f - n);
            if let Some(v) = floor {
                let _ = write!(s, " The suite's program doing no work (CNI_COMMAND=VERSION) takes {v:.2} ms, {:+.2} ms against `ipam-bench-null`: the start-up of its own, beyond the build's.", v - n);
            }
        }
        for (what, prefix) in [("the full stack", STACK), ("ipam-da-sequential alone", SEQUENTIAL)] {
            if let Some(st) = get(&fig.add, prefix) {
                let _ = write!(
                    s,
                    " The ADD median of {what}, {:.2} ms, is {:+.2} ms above the floor ({} the floor's).",
                    st.median_ms,
                    st.median_ms - f,
                    ratio(st.median_ms, f)
                );
            }
        }
        if let (Some(fd), Some(sd)) = (get(&fig.del, FLOOR), get(&fig.del, STACK)) {
            let _ = write!(s, " A DEL of the floor (one write transaction deleting the attachment's lease, one fdatasync) takes {:.2} ms, the full stack's {:.2} ms: {:+.2} ms above it ({}).", fd.median_ms, sd.median_ms, sd.median_ms - fd.median_ms, ratio(sd.median_ms, fd.median_ms));
        }
        s.push('\n');
    }
    if let Some(c) = &fig.cluster {
        let _ = writeln!(s, "{}", cluster_bound(c));
        if let Some(k) = &c.kube {
            let _ = writeln!(s, "{}", kube_bound(k, c.add_local.stats.median_ms));
        }
    }
    if let Some(floor) = fig.rss.iter().find(|(n, _)| n.starts_with("(floor")) {
        let _ = writeln!(s, "- **Memory.** The launcher that measures peak RSS reports {:.2} MiB running /bin/true: no figure can be below it.", floor.1 as f64 / MIB);
    }
    s
}

/// What bounds the cluster-mode figures: one etcd request, seen from the client.
fn cluster_bound(c: &ClusterFigures) -> String {
    let (range, fresh, put) = (c.floor_range.median_ms, c.floor_fresh_txn.median_ms, c.floor_put.median_ms);
    let local = c.add_local.stats.median_ms;
    let least = local + fresh;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "- **etcd (cluster mode).** One request through the plugins' own etcd client, in-process (median of {n}): a \
         range on a kept-alive connection {range:.2} ms; the read-only txn of an ADD's confirming read on a fresh \
         connection, as every CNI process makes it (each call connects anew), {fresh:.2} ms; a put, which etcd syncs \
         to its WAL before it answers, {put:.2} ms. A steady-state ADD in a pool of blocks of the node's own is a \
         local ADD plus, at most every 2 s (while its blocks' confirmation is fresh it asks etcd nothing), that one \
         read: {local:.2} + {fresh:.2} = {least:.2} ms ({}) for the ADD that reads, the local ADD's time for the \
         others (measured median: {:.2} ms, {}); in a pool of shared blocks every ADD and DEL writes one record \
         instead (a txn like the put); an ADD that claims a block adds a read of the pool and a writing txn (at \
         least {put:.2} ms more). The etcd is one member on this machine, on the same {cores} cores as the plugins: \
         under the concurrent load its CPU is taken from theirs.",
        ratio(least, local),
        c.add_cluster.stats.median_ms,
        ratio(c.add_cluster.stats.median_ms, local),
        n = c.floor_range.n,
    )
}

/// What bounds the cluster-mode figures on the Kubernetes API: one request,
/// seen from the client.
fn kube_bound(k: &KubeFigures, local: f64) -> String {
    let f = &k.floor;
    let (get, fresh, put) = (f.get.median_ms, f.fresh_get.median_ms, f.put.median_ms);
    let (list_after_write, list) = (f.list_after_write.median_ms, f.list.median_ms);
    let least = local + fresh;
    format!(
        "- **The Kubernetes API (cluster mode).** One request through the plugins' own Kubernetes client, \
         in-process (median of {n}): a GET on a kept-alive connection {get:.2} ms; the same GET by a new client, its \
         TCP and TLS handshake first, as every CNI process makes its first request, {fresh:.2} ms; a replace (PUT) \
         at a resourceVersion, which the API server writes to its etcd before it answers, {put:.2} ms; a LIST of the \
         blocks (a consistent read, as a confirming ADD and a claim make it) {list:.2} ms, but {list_after_write:.2} ms \
         right after a write of another resource (an IPDNode). An ADD whose \
         confirmation has expired pays at least the new client's request over a local ADD: {local:.2} + {fresh:.2} \
         = {least:.2} ms ({}); measured without confirmation cache: {:.2} ms. The API server and its etcd are one \
         process on this machine, on the same cores as the plugins.",
        ratio(least, local),
        k.add_confirming.stats.median_ms,
        n = f.get.n,
    )
}
