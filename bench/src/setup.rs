//! What every scenario starts from: the counts, the suite's executables and
//! host-local with their configurations, the temporary directories, and
//! pools filled through the library (the suite) or lease files (host-local).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use shared::addr::{from_u128, to_u128};
use shared::pool::{self, Pool};
use shared::store::AllocationStore;
use shared::{Attachment, CniArgs};
use tempfile::TempDir;

use crate::harness::{exec, Plugin};

pub const HOST_LOCAL: &str = "/usr/lib/cni/host-local";
const NETWORK: &str = "bench";
const CNI_VERSION: &str = "1.0.0";
/// The suite's program; the delegates' names it is installed under are its
/// own list ([`delegates_of`]).
pub const PROGRAM: &str = "ipam-delegated";
/// The package of the floor programs ([`FloorPrograms`]).
const FLOOR_PACKAGE: &str = "ipam-bench-floor";

/// The delegates' names `program` is installed under, as it lists them
/// (`ipam-delegated delegates`: its builtin::DELEGATES, the suite's one list).
pub fn delegates_of(program: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(program)
        .arg("delegates")
        .env_remove("CNI_COMMAND")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let names: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    if !out.status.success() || names.is_empty() {
        return Err(format!(
            "{} delegates listed no delegates ({}): {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(names)
}

/// The names a bin directory of the suite holds: the program and every
/// delegate's name (the copies layout copies the program to each).
fn suite_names(delegates: &[String]) -> impl Iterator<Item = &str> {
    std::iter::once(PROGRAM).chain(delegates.iter().map(String::as_str))
}

/// How much to run.
#[derive(Clone, Copy)]
pub struct Counts {
    pub latency: usize,
    /// First ADDs on a fresh node, of each variant.
    pub first_add: usize,
    pub throughput: usize,
    pub workers: usize,
    pub big_fill: u128,
    pub big_adds: usize,
    pub trials: usize,
    /// ADDs of the lock-wait scenario (each of its two runs).
    pub lock_wait: usize,
    /// The processes contending for the lock at once in the lock-wait scenario.
    pub lock_workers: usize,
    /// Steady-state ADDs (and as many DELs) the durability probe counts
    /// fsyncs of, per variant.
    pub fsync_probes: usize,
    /// Cluster mode: steady-state ADDs (and as many DELs) whose etcd
    /// requests are counted.
    pub cluster_steady: usize,
    /// Cluster mode: ADDs by the simulated nodes from empty (and as many in
    /// local mode), concurrently.
    pub cluster_adds: usize,
    /// Cluster mode: steady-state ADDs (and as many DELs) whose etcd
    /// requests are counted in the tight pool (4 blocks).
    pub cluster_tight: usize,
    /// Cluster mode, 1000 pods into 1000 addresses: how long each wave may
    /// retry before the pods not placed are given up, in seconds.
    pub cluster_wave_secs: u64,
    /// The whereabouts scenario: pods placed into as many addresses by
    /// each plugin, in each of its runs (one wave, two waves).
    pub whereabouts_pods: usize,
    /// The whereabouts scenario: pods of the burst on one node, all
    /// started at once.
    pub whereabouts_burst: usize,
}

pub const FULL: Counts = Counts {
    latency: 300,
    first_add: 100,
    throughput: 1000,
    workers: 16,
    big_fill: 1_000_000,
    big_adds: 20,
    trials: 5,
    lock_wait: 1280,
    lock_workers: 64,
    fsync_probes: 24,
    cluster_steady: 200,
    cluster_adds: 2000,
    cluster_tight: 50,
    cluster_wave_secs: 45,
    whereabouts_pods: 1000,
    whereabouts_burst: 200,
};
pub const QUICK: Counts = Counts {
    latency: 40,
    first_add: 12,
    throughput: 200,
    workers: 16,
    big_fill: 100_000,
    big_adds: 5,
    trials: 1,
    lock_wait: 320,
    lock_workers: 64,
    fsync_probes: 6,
    cluster_steady: 50,
    cluster_adds: 400,
    cluster_tight: 25,
    cluster_wave_secs: 20,
    whereabouts_pods: 200,
    whereabouts_burst: 50,
};

/// The benchmark's floor (bench/floor): `ipam-bench-floor`, the least work of
/// one steady-state ADD as a program of its own, and `ipam-bench-null`, the
/// same build doing nothing.
pub struct FloorPrograms {
    pub floor: PathBuf,
    pub null: PathBuf,
}

/// Builds ipam-delegated in release mode as it is installed, and in the same
/// build the floor programs, into this executable's target directory (passed
/// on as `CARGO_TARGET_DIR`): `bash scripts/build -p ipam-bench-floor` (the
/// build that scripts/install installs; the floor programs come out beside
/// the program it prints, built the same way). Answers the suite as built
/// (for [`Suite::Built`]) and the floor programs.
pub fn build(workspace: &Path) -> (Suite, FloorPrograms) {
    let release = std::env::current_exe().expect("current exe").parent().expect("bin dir").to_path_buf();
    let target = release.parent().expect("target dir").to_path_buf();
    let out = Command::new("bash")
        .args(["scripts/build", "--quiet", "-p", FLOOR_PACKAGE])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", &target)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run bash scripts/build");
    assert!(out.status.success(), "bash scripts/build -p {FLOOR_PACKAGE} failed");
    let printed = String::from_utf8_lossy(&out.stdout);
    let program = workspace.join(printed.lines().last().unwrap_or_default().trim());
    assert!(program.is_file(), "{} missing after the build", program.display());
    // <target>/<triple>/release/ipam-delegated: the triple says the C library.
    let triple = program.ancestors().nth(2).and_then(|d| d.file_name()).map(|t| t.to_string_lossy().into_owned());
    let how = match triple.as_deref() {
        Some(t) if t.ends_with("-musl") => {
            format!("scripts/build (static, {t}: musl, not position-independent, dlmalloc)")
        }
        Some(t) => format!("scripts/build (static, {t}: glibc, a static PIE; the musl target was not installed)"),
        None => "scripts/build".to_string(),
    };
    let built = program.parent().expect("the build's directory");
    let floor = FloorPrograms { floor: built.join("ipam-bench-floor"), null: built.join("ipam-bench-null") };
    for exe in [&floor.floor, &floor.null] {
        assert!(exe.is_file(), "{} missing after bash scripts/build -p {FLOOR_PACKAGE}", exe.display());
    }
    (Suite::Built { workspace: workspace.to_path_buf(), target, how }, floor)
}

/// Where the suite's executables come from.
pub enum Suite {
    /// Built from this workspace (`how`) into this target directory:
    /// installed by `scripts/install` into a temporary PREFIX.
    Built { workspace: PathBuf, target: PathBuf, how: String },
    /// Already installed in this directory (`--bin-dir`).
    Installed(PathBuf),
}

/// Installs the fast layout with `scripts/install` into `prefix` (no link on
/// PATH) and answers its bin directory.
fn install_fast_layout(workspace: &Path, target: &Path, prefix: &Path) -> PathBuf {
    let out = Command::new("bash")
        .arg(workspace.join("scripts/install"))
        .current_dir(workspace)
        .env("PREFIX", prefix)
        .env("LINKDIR", "")
        .env_remove("DESTDIR")
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("run bash scripts/install");
    assert!(
        out.status.success(),
        "scripts/install into {} failed: {}",
        prefix.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    prefix.join("bin")
}

/// The copies layout in `dir`: each of the four names a copy of the
/// program's file, so that ipam-delegated starts every delegate as a
/// process of its own.
fn make_copies_layout(program: &Path, delegates: &[String], dir: &Path) {
    fs::create_dir_all(dir).expect("copies dir");
    for name in suite_names(delegates) {
        fs::copy(program, dir.join(name)).unwrap_or_else(|e| panic!("copy {} to {}: {e}", program.display(), name));
    }
}

/// What a bin directory holds: whether each delegate's name is the program's
/// very file (the fast layout) or a file of its own.
fn describe_layout(bins: &Path, delegates: &[String]) -> String {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let program = bins.join(PROGRAM);
    let Ok(program_id) = id(&program) else {
        panic!("{} missing: not a bin directory of the suite", program.display());
    };
    let mut same = Vec::new();
    let mut other = Vec::new();
    for name in delegates {
        let name = name.as_str();
        match id(&bins.join(name)) {
            Ok(found) if found == program_id => same.push(name),
            Ok(_) => other.push(name),
            Err(e) => panic!("{}: {e}", bins.join(name).display()),
        }
    }
    if other.is_empty() {
        "fast layout (the delegates' names are ipam-delegated's own file: one process per call)".into()
    } else if same.is_empty() {
        "copies layout (every delegate a file of its own: one process per delegate)".into()
    } else {
        format!(
            "mixed layout ({} ipam-delegated's file, run in its process; {} files of their own, run as processes)",
            same.join(", "),
            other.join(", ")
        )
    }
}

/// A fresh directory `<prefix><random>` in `parent` (default: the system
/// temp dir). It is removed when dropped, also on an early return or a
/// panic, unless BENCH_KEEP is set (to profile its files).
fn temp_dir(prefix: &str, parent: Option<&Path>) -> TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix).disable_cleanup(std::env::var_os("BENCH_KEEP").is_some());
    let dir = match parent {
        Some(parent) => fs::create_dir_all(parent).and_then(|()| builder.tempdir_in(parent)),
        None => builder.tempdir(),
    };
    dir.unwrap_or_else(|e| panic!("cannot create a temp dir {prefix}…: {e}"))
}

/// Where things are.
pub struct Ctx {
    /// The directory holding the suite's layout measured: CNI_PATH for the
    /// suite.
    pub bins: PathBuf,
    /// The copies layout of the same program (for one comparison row).
    pub copies: PathBuf,
    /// What was measured: the layout and where it came from.
    pub layout: String,
    /// A fresh directory per run (in BENCH_TMPDIR if set); every scenario
    /// gets its own subdirectory.
    root: TempDir,
    pub counts: Counts,
    floor: FloorPrograms,
}

impl Ctx {
    pub fn new(suite: Suite, counts: Counts, floor: FloorPrograms) -> Ctx {
        let base = std::env::var_os("BENCH_TMPDIR").map(PathBuf::from);
        let root = temp_dir("ipam-bench-", base.as_deref());
        let (bins, source) = match suite {
            Suite::Built { workspace, target, how } => {
                let bins = install_fast_layout(&workspace, &target, &root.path().join("installed"));
                let source = format!(
                    "built from this workspace by {how} and installed by scripts/install into {}",
                    bins.display()
                );
                (bins, source)
            }
            Suite::Installed(dir) => {
                let dir = std::path::absolute(&dir).unwrap_or(dir);
                let source = format!("installed in {} (--bin-dir)", dir.display());
                (dir, source)
            }
        };
        let program = bins.join(PROGRAM);
        let delegates = delegates_of(&program).unwrap_or_else(|e| panic!("{e}"));
        let layout = format!("{}, {source}", describe_layout(&bins, &delegates));
        let copies = root.path().join("copies");
        make_copies_layout(&program, &delegates, &copies);
        Ctx { bins, copies, layout, root, counts, floor }
    }

    /// The run's temporary directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn exe(&self, name: &str) -> PathBuf {
        self.bins.join(name)
    }

    /// A fresh directory for one scenario, removed when the scenario drops it.
    pub fn scenario_dir(&self, name: &str) -> TempDir {
        temp_dir(&format!("{name}-"), Some(self.root()))
    }

    /// The full stack: ipam-delegated with ipam-ds-pool and ipam-da-sequential.
    pub fn stack(&self, db: &Path, subnet: &str) -> Plugin {
        self.stack_with(&suite_config(db, subnet))
    }

    /// The suite's program with `config`: a configuration of
    /// [`Ctx::stack_config`] that the scenario changed.
    pub fn stack_with(&self, config: &Value) -> Plugin {
        Plugin { exe: self.exe(PROGRAM), cni_path: self.bins.clone(), config: bytes(config) }
    }

    /// The full stack in the copies layout: every delegate a process.
    pub fn stack_copies(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: self.copies.join(PROGRAM),
            cni_path: self.copies.clone(),
            config: bytes(&suite_config(db, subnet)),
        }
    }

    /// The configuration [`Ctx::stack`] runs, for a scenario that changes it
    /// per call (the lock-wait scenario's `ipam.logFile`).
    pub fn stack_config(&self, db: &Path, subnet: &str) -> Value {
        suite_config(db, subnet)
    }

    pub fn host_local(&self, data_dir: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: PathBuf::from(HOST_LOCAL),
            cni_path: PathBuf::from("/usr/lib/cni"),
            config: bytes(&host_local_config(data_dir, subnet)),
        }
    }

    /// The floor program on a database of its own, fed the full stack's
    /// configuration (it reads `database` and the subnet from it).
    pub fn floor(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin { exe: self.floor.floor.clone(), cni_path: self.bins.clone(), config: bytes(&suite_config(db, subnet)) }
    }

    /// The floor program's build doing nothing.
    pub fn null_program(&self) -> &Path {
        &self.floor.null
    }

    /// The selector alone, with the stack's configuration.
    pub fn selector(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin { exe: self.exe("ipam-ds-pool"), cni_path: self.bins.clone(), config: bytes(&suite_config(db, subnet)) }
    }

    /// The configuration an allocator gets inside the stack: the config plus
    /// `prevResult` = what ipam-ds-pool printed for it (so `pools` is there).
    pub fn selected_config(&self, db: &Path, subnet: &str) -> Value {
        let mut config = suite_config(db, subnet);
        let selector = self.exe("ipam-ds-pool");
        let out = exec(&selector, "ADD", "selector-probe", &self.bins, &bytes(&config)).expect_ok("ipam-ds-pool ADD");
        config["prevResult"] = out.json();
        assert!(config["prevResult"]["pools"].is_array(), "ipam-ds-pool printed no pools");
        config
    }

    /// ipam-da-sequential alone (its name in the measured layout), fed what
    /// the selector printed.
    pub fn sequential(&self, db: &Path, subnet: &str) -> Plugin {
        Plugin {
            exe: self.exe("ipam-da-sequential"),
            cni_path: self.bins.clone(),
            config: bytes(&self.selected_config(db, subnet)),
        }
    }
}

// ---------------------------------------------------------------- configs

fn suite_config(db: &Path, subnet: &str) -> Value {
    json!({
        "cniVersion": CNI_VERSION, "name": NETWORK, "type": "bridge",
        "ipam": {
            "type": "ipam-delegated",
            "delegates": ["ipam-ds-pool", "ipam-da-sequential"],
            "database": db,
            "pools": [{ "name": "bench", "ranges": [{ "subnet": subnet }] }]
        }
    })
}

fn host_local_config(data_dir: &Path, subnet: &str) -> Value {
    json!({
        "cniVersion": CNI_VERSION, "name": NETWORK, "type": "bridge",
        "ipam": { "type": "host-local", "dataDir": data_dir, "ranges": [[{ "subnet": subnet }]] }
    })
}

pub fn bytes(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

// ------------------------------------------------------------------ fills

/// The pool exactly as the selector registers it for this configuration.
pub fn selector_pool(db: &Path, subnet: &str) -> Pool {
    let config = shared::NetConf::parse(suite_config(db, subnet).to_string().as_bytes()).expect("config");
    let mut pools = pool::candidates(&config, &CniArgs::default()).expect("candidates");
    pools.remove(0)
}

/// The allocatable addresses of a pool, as numbers, in order (gateway and
/// network/broadcast excluded: the same set host-local hands out).
pub fn allocatable(pool: &Pool, limit: u128) -> Vec<u128> {
    let mut out = Vec::new();
    for (lo, hi) in pool.allocatable() {
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        let mut n = lo;
        while n <= hi && (out.len() as u128) < limit {
            out.push(n);
            n += 1;
        }
    }
    out
}

fn fill_owner(n: u128) -> Attachment {
    Attachment { network: NETWORK.into(), container_id: format!("fill-{n:x}"), ifname: "eth0".into() }
}

/// Records leases on `addrs` through the library, as the selector and the
/// allocator would have, and sets the cursor; then checkpoints.
pub fn suite_fill(db: &Path, pool: &Pool, addrs: &[u128], cursor: Option<u128>) {
    let mut store = AllocationStore::open(db, Duration::from_secs(60)).expect("open store");
    store
        .write(|tx| {
            tx.register_pool(NETWORK, &pool.name, &pool.subnets(), &pool.to_json())?.expect("a fresh database");
            tx.insert_leases_bulk(addrs.iter().map(|&n| (from_u128(n), pool.name.as_str(), fill_owner(n))))?;
            if let Some(c) = cursor {
                tx.set_cursor(NETWORK, &pool.name, from_u128(c))?;
            }
            Ok(())
        })
        .expect("fill store");
    store.checkpoint().expect("checkpoint");
}

pub fn suite_set_cursor(db: &Path, pool: &Pool, cursor: u128) {
    let mut store = AllocationStore::open(db, Duration::from_secs(60)).expect("open store");
    store.write(|tx| tx.set_cursor(NETWORK, &pool.name, from_u128(cursor))).expect("set cursor");
}

/// host-local's disk backend: `<dataDir>/<network>/<ip>` holding
/// "<container id>\r\n<ifname>", and `last_reserved_ip.<range set>`.
pub fn host_local_fill(data_dir: &Path, addrs: &[u128], last: Option<u128>) {
    let dir = data_dir.join(NETWORK);
    fs::create_dir_all(&dir).expect("host-local dir");
    for &n in addrs {
        fs::write(dir.join(from_u128(n).to_string()), format!("fill-{n:x}\r\neth0")).expect("host-local lease file");
    }
    if let Some(last) = last {
        host_local_set_last(data_dir, last);
    }
}

pub fn host_local_set_last(data_dir: &Path, last: u128) {
    fs::write(data_dir.join(NETWORK).join("last_reserved_ip.0"), from_u128(last).to_string()).expect("last ip");
}
