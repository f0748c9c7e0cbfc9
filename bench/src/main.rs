//! ipam-bench: the suite against Debian's host-local, side by side.
//!
//! `cargo run --release -p ipam-bench` builds ipam-delegated in release mode,
//! and in the same build (`scripts/build -p ipam-bench-floor`) the floor
//! programs of bench/floor (the least work of an ADD as a program of its own,
//! and the same build doing nothing), installs ipam-delegated with
//! `scripts/install` into a temporary PREFIX (the fast
//! layout: the delegates' names are symlinks to it), runs every scenario with
//! real processes (CNI_* environment like a runtime, a fresh database /
//! dataDir per scenario), interleaving the suite and host-local, prints a
//! table, and writes `BENCHMARKS.md` and `benchmarks/add-latency-vs-fill.svg`
//! at the repository root. `--bin-dir DIR` measures a layout already
//! installed in DIR instead (the floor programs are still built).
//!
//! `BENCH_QUICK=1` runs reduced counts (for development; not for the record).
//! `BENCH_TMPDIR` chooses where the temporary databases go (default: the
//! system temp dir). `--help` lists everything.
//!
//! The modules: [`setup`] (counts, plugins and their configurations, temp
//! dirs, pool fills), [`harness`] (running a plugin process, timing it,
//! statistics), what several scenarios share ([`strace`], [`debug_log`],
//! [`cluster_mode`]; the tests' Kubernetes API server through [`support`]), one module per scenario in [`scenarios`], what they measure
//! in [`figures`], and for what is written [`report`] (one module per section
//! of BENCHMARKS.md) and [`chart`].

mod chart;
mod cli;
mod cluster_mode;
mod debug_log;
mod figures;
mod harness;
// The tests' Kubernetes API server harness, as it is (see `support`).
#[path = "../../tests/kube_harness/mod.rs"]
mod kube_harness;
mod report;
mod scenarios;
mod setup;
mod strace;
mod support;
mod whereabouts;

use std::fs;
use std::path::Path;

use figures::machine::{installed_version, Machine};
use figures::Figures;
use harness::{loadavg, phase};
use setup::{Ctx, Suite, FULL, HOST_LOCAL, QUICK};

type Scenario = fn(&Ctx, &mut Figures);

/// The scenarios, in the order they run (after the durability probe, which
/// always runs); `--only latency,memory` (or `BENCH_ONLY=…`) picks some by name.
const SCENARIOS: [(&str, Scenario); 12] = [
    ("latency", scenarios::latency::run),
    ("first-add", scenarios::first_add::run),
    ("throughput", scenarios::throughput::run),
    ("nearly-full", scenarios::nearly_full::run),
    ("big", scenarios::big_pools::run),
    ("fill-curve", scenarios::fill_curve::run),
    ("memory", scenarios::memory::run),
    ("lock-wait", scenarios::lock_wait::run),
    ("cluster", scenarios::cluster::run),
    ("sticky", scenarios::sticky::run),
    ("sticky-cluster", scenarios::sticky::run_cluster),
    ("whereabouts", scenarios::whereabouts::run),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bin_dir, only_arg) = match cli::parse(&args) {
        Ok(cli::Mode::Bench { bin_dir, only }) => (bin_dir, only),
        Ok(cli::Mode::Help) => {
            print!("{}", cli::usage());
            return;
        }
        Ok(cli::Mode::RusageOf(exe)) => harness::rusage_launcher(&exe),
        Err(message) => {
            eprintln!("ipam-bench: {message}; see `cargo run --release -p ipam-bench -- --help`");
            std::process::exit(2);
        }
    };
    let fail = |message: String| -> ! {
        eprintln!("ipam-bench: {message}; see `cargo run --release -p ipam-bench -- --help`");
        std::process::exit(2)
    };
    if let Some(dir) = &bin_dir {
        let program = dir.join(setup::PROGRAM);
        if !program.is_file() {
            fail(format!("--bin-dir {}: no {} there", dir.display(), setup::PROGRAM));
        }
        let delegates = setup::delegates_of(&program).unwrap_or_else(|e| fail(format!("--bin-dir: {e}")));
        let missing: Vec<&str> = delegates.iter().map(String::as_str).filter(|n| !dir.join(n).is_file()).collect();
        if !missing.is_empty() {
            fail(format!("--bin-dir {}: no {} there", dir.display(), missing.join(", ")));
        }
    }
    // --only latency,memory (or BENCH_ONLY=…) runs a subset; writes nothing.
    let (only, whence) = match only_arg {
        Some(list) => (Some(list), "--only"),
        None => (std::env::var("BENCH_ONLY").ok(), "BENCH_ONLY"),
    };
    if let Some(list) = &only {
        let known = |n: &str| n == "durability" || SCENARIOS.iter().any(|(name, _)| *name == n);
        if let Some(unknown) = list.split(',').find(|n| !known(n)) {
            fail(format!("{whence}: no scenario `{unknown}`"));
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: ipam-bench built without --release; run `cargo run --release -p ipam-bench`");
    }
    assert!(Path::new(HOST_LOCAL).is_file(), "{HOST_LOCAL} missing: apt-get install containernetworking-plugins");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf();
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let counts = if quick { QUICK } else { FULL };
    let (total, suite, floor) = match bin_dir {
        Some(dir) => {
            let total = phase(&format!(
                "measuring the layout installed in {}; building the floor programs (bash scripts/build -p \
                 ipam-bench-floor)",
                dir.display()
            ));
            (total, Suite::Installed(dir), setup::build(&workspace).1)
        }
        None => {
            let total =
                phase("building ipam-delegated and the floor programs (release) and installing it into a temp dir");
            let (suite, floor) = setup::build(&workspace);
            (total, suite, floor)
        }
    };
    let installed = matches!(suite, Suite::Installed(_));
    // Its temporary directory goes with it (also on a panic), unless BENCH_KEEP.
    let ctx = Ctx::new(suite, counts, floor);
    eprintln!("    measuring: {}", ctx.layout);
    let mut machine = Machine::probe(ctx.root(), &workspace);
    if installed {
        machine.suite = installed_version(&ctx.exe("ipam-delegated"), &machine.suite);
    }
    let mut fig = Figures { counts: Some(counts), layout: ctx.layout.clone(), ..Default::default() };
    fig.loads.push(("start".into(), loadavg()));
    scenarios::durability::run(&ctx, &mut fig);

    let wanted = |name: &str| only.as_deref().is_none_or(|list| list.split(',').any(|n| n == name));
    for (name, scenario) in SCENARIOS {
        if wanted(name) {
            scenario(&ctx, &mut fig);
        }
    }
    fig.loads.push(("end".into(), loadavg()));
    drop(ctx); // removes the temporary databases, unless BENCH_KEEP

    let elapsed = total.elapsed();
    let table = report::summary::table(&fig);
    println!("{table}");
    if wanted("cluster") {
        println!("Cluster mode (ipam-ds-cluster on etcd):\n\n{}", report::cluster::table(&fig));
        println!(
            "Cluster mode on etcd and on the Kubernetes API, side by side:\n\n{}",
            report::cluster::side_by_side(&fig)
        );
        if let Some(kube) = fig.cluster.as_ref().and_then(|c| c.kube.as_ref()) {
            println!("The Kubernetes API server's count:\n\n{}", report::cluster::kube_counts(kube));
        }
    }
    if wanted("whereabouts") {
        println!(
            "The suite in cluster mode and whereabouts on one API server:\n\n{}",
            report::whereabouts::table(&fig)
        );
        if let Some(w) = &fig.whereabouts {
            println!("{}\n", report::whereabouts::goals(w));
        }
    }
    let sticky = report::sticky::section(&fig);
    if !sticky.is_empty() {
        println!("{sticky}");
    }
    println!("measured: {}\n", fig.layout);
    println!("{}", report::bounds::list(&fig));
    println!("whole run: {elapsed:.1?}; load averages: {}", report::machine::loads(&fig));
    if only.is_some() {
        println!("\n{}", report::machine::table(&machine, &fig));
    }
    if quick || only.is_some() {
        // Its section stands alone (its own API server, its own machine
        // line): a run of it rewrites that section, and only that.
        if !quick && wanted("whereabouts") && fig.whereabouts.is_some() {
            let path = workspace.join("BENCHMARKS.md");
            let document = fs::read_to_string(&path).unwrap_or_default();
            let section = report::whereabouts::section(&fig, &machine);
            fs::write(&path, report::whereabouts::splice(&document, &section)).expect("write BENCHMARKS.md");
            eprintln!("wrote the section \"{}\" of BENCHMARKS.md", report::whereabouts::HEADING);
        }
        eprintln!("BENCH_QUICK / --only (BENCH_ONLY): BENCHMARKS.md (but for the whereabouts section) and the chart are not written");
        return;
    }
    let svg = chart::render(&fig);
    fs::create_dir_all(workspace.join("benchmarks")).expect("benchmarks dir");
    fs::write(workspace.join("benchmarks/add-latency-vs-fill.svg"), svg).expect("write chart");
    fs::write(workspace.join("BENCHMARKS.md"), report::markdown(&fig, &machine, &table, elapsed))
        .expect("write BENCHMARKS.md");
    eprintln!("wrote BENCHMARKS.md and benchmarks/add-latency-vs-fill.svg");
}
