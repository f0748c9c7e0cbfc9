//! The command line: `--help`, and the internal `--rusage-of` launcher.

use crate::setup::FULL;

/// What the command line asks for.
pub enum Mode {
    /// The benchmark (no arguments).
    Bench,
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

Usage: cargo run --release -p ipam-bench [-- --help]

Builds the suite's executables in release mode, then runs every plugin call
as a real process with the CNI_* environment a runtime sets and the
configuration on stdin, timed from spawn to reaping. The full stack
(ipam-delegated with ipam-ds-pool + ipam-da-sequential) and
/usr/lib/cni/host-local work on the same subnets, each with a fresh
database / dataDir per scenario, their calls interleaved. In order:

  durability   fsync-family calls of one ADD of each variant (strace -f)
  latency      single ADD and DEL latency ({latency} calls each), and the cost of
               a process that does no work
  throughput   {workers}-way concurrent ADD throughput ({throughput} ADDs each)
  nearly-full  ADD in a /16 with one free address behind the cursor, then
               in the exhausted /16
  big          ADD in a /8 and a /64 holding {big_fill} leases (suite only)
  fill-curve   ADD latency against pool fill, 0% to 99.99% of a /16
  memory       peak RSS of one ADD of each executable
  lock-wait    how long calls wait for the database's lock, {lock_workers} full-stack
               ADDs in flight at once ({lock_wait} ADDs, read from each call's
               debug log), and whether the waiting is fair (suite only)

Prints the summary table on stdout (progress on stderr) and writes
BENCHMARKS.md and benchmarks/add-latency-vs-fill.svg at the workspace root,
replacing them. A full run takes about 2 minutes on an idle 2-core machine,
plus the release build; BENCH_QUICK=1 takes under a minute.

Options:
  -h, --help         print this help and exit
  --rusage-of EXE    internal: run EXE and report its peak RSS on stderr
                     (the launcher of the memory scenario)

Environment:
  BENCH_QUICK=1      reduced counts, for development; writes no files
  BENCH_ONLY=a,b     only these scenarios (names above; durability always
                     runs); writes no files
  BENCH_TMPDIR=DIR   where the temporary databases go (default: the system
                     temp dir); they are removed at the end
  BENCH_KEEP=1       keep the temporary databases (to profile them)
  BENCH_STDERR=1     show the plugins' stderr

Needs /usr/lib/cni/host-local (apt-get install containernetworking-plugins)
and, for the durability figures, strace.
",
        latency = c.latency,
        workers = c.workers,
        throughput = c.throughput,
        big_fill = c.big_fill,
        lock_workers = c.lock_workers,
        lock_wait = c.lock_wait,
    )
}

/// Reads the arguments after the program name; an error names the argument.
pub fn parse(args: &[String]) -> Result<Mode, String> {
    let mut args = args.iter();
    let mode = match args.next().map(String::as_str) {
        None => return Ok(Mode::Bench),
        Some("-h" | "--help") => return Ok(Mode::Help),
        Some("--rusage-of") => match args.next() {
            Some(exe) => Mode::RusageOf(exe.clone()),
            None => return Err("`--rusage-of` needs an executable".into()),
        },
        Some(other) => return Err(format!("unknown argument `{other}`")),
    };
    match args.next() {
        None => Ok(mode),
        Some(extra) => Err(format!("unknown argument `{extra}`")),
    }
}
