//! The command line: `--help`, `--bin-dir`, and the internal `--rusage-of`
//! launcher.

use std::path::PathBuf;

use crate::setup::FULL;

/// What the command line asks for.
#[derive(Debug)]
pub enum Mode {
    /// The benchmark: of the layout built and installed from this workspace
    /// (None), or of one already installed in this directory; `only`: the
    /// scenarios to run (comma-separated names), else every one.
    Bench { bin_dir: Option<PathBuf>, only: Option<String> },
    /// `-h` / `--help`: the usage text.
    Help,
    /// `--rusage-of <exe>`: the launcher the memory scenario starts plugins with.
    RusageOf(String),
}

/// The `--help` text; the counts are those of a full run.
pub fn usage() -> String {
    let c = FULL;
    format!(
        "\
ipam-bench: the IPAM suite against Debian's host-local, with real processes.

Usage: cargo run --release -p ipam-bench [-- [--bin-dir DIR] [--only NAMES] | --help]

Builds ipam-delegated in release mode as it is installed, and in the same
build the floor programs (bash scripts/build -p ipam-bench-floor; see
latency below), and installs ipam-delegated with scripts/install into a
temporary PREFIX, in its fast layout (bin/ipam-delegated, and the delegates
ipam-ds-pool, ipam-da-static and ipam-da-sequential as symlinks to it, so
that a whole stack runs in one process); that bin directory is the suite's
CNI_PATH. With --bin-dir, an
installed layout is measured instead (the floor programs are still built).
A copies layout (each of the four names a copy of the file, so that every
delegate is a process of its own) is made beside it for one comparison row.

Every plugin call is a real process with the CNI_* environment a runtime
sets and the configuration on stdin, timed from spawn to reaping. The full
stack (ipam-delegated with ipam-ds-pool + ipam-da-sequential) and
/usr/lib/cni/host-local work on the same subnets, each with a fresh
database / dataDir per scenario, their calls interleaved. In order:

  durability   fsync-family calls per call (strace -f): ADD in the steady
               state ({fsync_probes} ADDs), the first ADD on a fresh node, DEL; and
               the time of one 4 KiB append + fdatasync on the temp dir's disk
  latency      single ADD and DEL latency ({latency} calls each; the full stack
               in both layouts, ipam-da-sequential alone, the floor,
               host-local), and the cost of a process that does no work.
               The floor is ipam-bench-floor (bench/floor), a minimal
               program of the benchmark's own doing the least work of a
               steady-state ADD: open, lock, one write transaction, one
               fdatasync of the WAL, the suite's checkpoint policy; its
               build doing nothing (ipam-bench-null) splits its time into
               start-up and work. Reported: the floor's median and p99, and
               the suite's distance to it (ms and ×)
  first-add    the first ADD on a fresh node: the suite's database created by
               that ADD, host-local's dataDir new ({first_add} of each, interleaved,
               each in a fresh temp dir)
  throughput   {workers}-way concurrent ADD throughput ({throughput} ADDs each)
  nearly-full  ADD in a /16 with one free address behind the cursor, then
               in the exhausted /16
  big          ADD in a /8 and a /64 holding {big_fill} leases (suite only)
  fill-curve   ADD latency against pool fill, 0% to 99.99% of a /16
  memory       peak RSS of one ADD of the full stack (one process) and of
               each delegate's name, and of host-local
  lock-wait    how long calls wait for the database's lock, {lock_workers} full-stack
               ADDs in flight at once ({lock_wait} ADDs, read from each call's
               debug log), and whether the waiting is fair (suite only)
  cluster      cluster mode (ipam-ds-cluster, nodes simulated as node names
               with databases of their own) on two stores side by side, a
               real etcd from PATH and a real Kubernetes API server (the
               tests' kube-test-server, built with Go as the tests build it
               into target/kube-test; without Go, etcd alone), against local
               mode: steady-state ADD/DEL latency ({latency} each, interleaved, also
               without confirmation cache), store requests per steady-state
               ADD and DEL ({cluster_steady} each, counted by the store and logged by the
               client), per first ADD of a fresh node ({cluster_tight}), the same in a
               tight pool of shared blocks ({cluster_tight} each; 10.31.0.0/24 in 4
               blocks, one node), {wave_pods} pods on {wave_nodes} nodes into a pool of
               exactly {wave_pods} addresses ({wave_threads} ADDs in flight per node, failed ADDs
               retried every 0.5 s for at most {wave_secs} s per wave; all nodes at
               once, then in two waves of 5 nodes: pods placed, time, failed
               attempts, addresses held twice), one request's latency from
               the client; on etcd only, {cluster_adds} ADDs by {nodes} nodes from empty,
               {workers_per_node} in flight per node (throughput both ways, etcd requests per
               ADD)
  sticky       sticky addresses (ipam-da-sticky), local mode: ADD and DEL
               latency ({latency} rounds) of host-local, the suite's stack without
               stickiness (ds-pool + da-static + da-sequential) and with
               ipam-da-sticky (a new identity each round; an identity taking
               its hold back under a new container id), interleaved, CNI_ARGS
               as a kubelet passes them; write transactions and fsync-family
               calls per call ({fsync_probes} ADDs and DELs each)
  sticky-cluster
               the same in cluster mode on a real etcd and on a real
               Kubernetes API server (as the cluster scenario starts it),
               side by side: the cluster stack without and with
               ipam-da-sticky (a new identity; returning on its node;
               returning on another node), latency ({latency} rounds, both stores
               interleaved) and store requests and writes per ADD and DEL
               ({cluster_steady} each, counted by the store and logged by the client)
  whereabouts  the suite in cluster mode and whereabouts (built from its Go
               module, bench/whereabouts, with its CRDs and RBAC applied) on
               one real Kubernetes API server, the same calls with CNI_ARGS
               as a kubelet passes them: {wa_pods} pods on {wave_nodes} nodes into exactly
               {wa_pods} addresses ({quick_wa_pods} with BENCH_QUICK=1) in one wave and in
               two (as the cluster scenario, each plugin the same deadline),
               steady-state ADD and DEL latency ({latency} each, interleaved)
               and API requests per call ({cluster_steady} each, the API server's
               apiserver_request_total), a burst of {burst} pods on one node
               ({quick_burst} with BENCH_QUICK=1), peak RSS per call. `--only
               whereabouts` rewrites its section of BENCHMARKS.md (and
               nothing else)

Prints the summary table on stdout (progress on stderr) and writes
BENCHMARKS.md and benchmarks/add-latency-vs-fill.svg at the workspace root,
replacing them. A full run took 223 s at a load average near 5 (the
cluster scenario 87 s of it, 43 s of which the Kubernetes store's pods in
waves), plus the release build and, the first time, the build of the API
server (Go); the two sticky scenarios add about 4 minutes on a busy machine
(--only sticky-cluster, on etcd and on the API server, took 199 s at a
load average near 8, the suite's build cached);
BENCH_QUICK=1 --only cluster took 77 s. The cluster scenario's pods in waves
take each wave's deadline ({wave_secs} s; {quick_wave_secs} s with BENCH_QUICK=1) at most, for
each of the six waves (three per store) whose pods cannot all be placed.
--only whereabouts took 371 s at a load average near 5 (whereabouts takes
each wave's deadline, 45 s, in each of its three waves; 20 s with
BENCH_QUICK=1, whose run took 134 s), plus the first time the Go build of
whereabouts (about a minute).

Options:
  -h, --help         print this help and exit
  --bin-dir DIR      measure the layout installed in DIR (e.g. /usr/lib/cni
                     after dpkg -i, or /opt/cni/bin after scripts/install):
                     DIR/ipam-delegated and the three delegates' names; no
                     build. The report says which layout was measured
  --only NAMES       only these scenarios, comma-separated (names above;
                     durability always runs), e.g. --only sticky,sticky-cluster
                     (a few minutes with the build); prints their figures
                     and the machine, writes no files (but for whereabouts:
                     its section of BENCHMARKS.md). As BENCH_ONLY
  --rusage-of EXE    internal: run EXE and report its peak RSS on stderr
                     (the launcher of the memory scenario)

Environment:
  BENCH_QUICK=1      reduced counts, for development; writes no files
  BENCH_ONLY=a,b     only these scenarios (names above; durability always
                     runs); writes no files
  BENCH_TMPDIR=DIR   where the temporary databases and layouts go (default:
                     the system temp dir); they are removed at the end
  BENCH_KEEP=1       keep the temporary databases (to profile them)
  BENCH_STDERR=1     show the plugins' stderr
  CARGO_TARGET_DIR   honoured by the build and by scripts/install

Needs /usr/lib/cni/host-local (apt-get install containernetworking-plugins),
for the durability figures strace, and for the cluster figures etcd
(apt-get install etcd-server; without it they are reported as not measured).
",
        fsync_probes = c.fsync_probes,
        latency = c.latency,
        first_add = c.first_add,
        workers = c.workers,
        throughput = c.throughput,
        big_fill = c.big_fill,
        lock_workers = c.lock_workers,
        lock_wait = c.lock_wait,
        cluster_steady = c.cluster_steady,
        cluster_adds = c.cluster_adds,
        cluster_tight = c.cluster_tight,
        wave_pods = crate::scenarios::cluster::WAVE_PODS,
        wave_nodes = crate::scenarios::cluster::WAVE_NODES,
        wave_threads = crate::scenarios::cluster::WAVE_THREADS,
        wave_secs = c.cluster_wave_secs,
        quick_wave_secs = crate::setup::QUICK.cluster_wave_secs,
        nodes = crate::scenarios::cluster::NODES,
        workers_per_node = crate::scenarios::cluster::WORKERS_PER_NODE,
        burst = c.whereabouts_burst,
        quick_burst = crate::setup::QUICK.whereabouts_burst,
        wa_pods = c.whereabouts_pods,
        quick_wa_pods = crate::setup::QUICK.whereabouts_pods,
    )
}

/// Reads the arguments after the program name; an error names the argument.
pub fn parse(args: &[String]) -> Result<Mode, String> {
    let mut args = args.iter();
    let mut bin_dir = None;
    let mut only = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Mode::Help),
            "--rusage-of" if bin_dir.is_none() => {
                let exe = args.next().ok_or("`--rusage-of` needs an executable")?;
                return match args.next() {
                    None => Ok(Mode::RusageOf(exe.clone())),
                    Some(extra) => Err(format!("unknown argument `{extra}`")),
                };
            }
            "--bin-dir" if bin_dir.is_none() => {
                let dir = args.next().filter(|d| !d.is_empty()).ok_or("`--bin-dir` needs a directory")?;
                bin_dir = Some(PathBuf::from(dir));
            }
            "--only" if only.is_none() => {
                let names = args.next().filter(|n| !n.is_empty()).ok_or("`--only` needs scenario names")?;
                only = Some(names.clone());
            }
            other => {
                if let Some(dir) = other.strip_prefix("--bin-dir=") {
                    if bin_dir.is_some() || dir.is_empty() {
                        return Err(if dir.is_empty() {
                            "`--bin-dir` needs a directory".into()
                        } else {
                            "`--bin-dir` given twice".into()
                        });
                    }
                    bin_dir = Some(PathBuf::from(dir));
                } else if let Some(names) = other.strip_prefix("--only=") {
                    if only.is_some() || names.is_empty() {
                        return Err(if names.is_empty() {
                            "`--only` needs scenario names".into()
                        } else {
                            "`--only` given twice".into()
                        });
                    }
                    only = Some(names.to_string());
                } else {
                    return Err(format!("unknown argument `{other}`"));
                }
            }
        }
    }
    Ok(Mode::Bench { bin_dir, only })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_of(args: &[&str]) -> Result<Mode, String> {
        parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn arguments() {
        assert!(matches!(parse_of(&[]), Ok(Mode::Bench { bin_dir: None, only: None })));
        assert!(matches!(parse_of(&["--help"]), Ok(Mode::Help)));
        assert!(matches!(parse_of(&["--bin-dir", "/x", "-h"]), Ok(Mode::Help)));
        for args in [&["--bin-dir", "/usr/lib/cni"][..], &["--bin-dir=/usr/lib/cni"]] {
            match parse_of(args) {
                Ok(Mode::Bench { bin_dir: Some(dir), only: None }) => assert_eq!(dir, PathBuf::from("/usr/lib/cni")),
                _ => panic!("{args:?}"),
            }
        }
        assert!(matches!(parse_of(&["--rusage-of", "/bin/true"]), Ok(Mode::RusageOf(e)) if e == "/bin/true"));
        assert!(parse_of(&["--bin-dir"]).unwrap_err().contains("needs a directory"));
        assert!(parse_of(&["--bin-dir="]).unwrap_err().contains("needs a directory"));
        assert!(parse_of(&["--bin-dir", "/a", "--bin-dir", "/b"]).unwrap_err().contains("`--bin-dir`"));
        assert!(parse_of(&["--frob"]).unwrap_err().contains("`--frob`"));
        assert!(parse_of(&["--rusage-of", "/bin/true", "x"]).unwrap_err().contains("`x`"));
        for args in [
            &["--only", "sticky,sticky-cluster", "--bin-dir", "/d"][..],
            &["--bin-dir=/d", "--only=sticky,sticky-cluster"],
        ] {
            match parse_of(args) {
                Ok(Mode::Bench { bin_dir: Some(dir), only: Some(names) }) => {
                    assert_eq!((dir, names.as_str()), (PathBuf::from("/d"), "sticky,sticky-cluster"))
                }
                _ => panic!("{args:?}"),
            }
        }
        assert!(parse_of(&["--only"]).unwrap_err().contains("needs scenario names"));
        assert!(parse_of(&["--only="]).unwrap_err().contains("needs scenario names"));
        assert!(parse_of(&["--only", "a", "--only", "b"]).unwrap_err().contains("`--only`"));
        assert!(parse_of(&["--only=a", "--only=b"]).unwrap_err().contains("`--only` given twice"));
        assert!(parse_of(&["--bin-dir=/a", "--bin-dir=/b"]).unwrap_err().contains("`--bin-dir` given twice"));
    }

    #[test]
    fn the_usage_names_every_scenario_and_option() {
        let text = usage();
        for name in
            crate::SCENARIOS.map(|(name, _)| name).iter().chain(&["durability", "--bin-dir", "--only", "--help"])
        {
            assert!(text.contains(name), "{name} missing from the usage");
        }
    }
}
