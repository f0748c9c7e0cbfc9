//! Durability: the fsync-family calls of each variant, counted with
//! `strace -f` (which follows every process a call starts) when strace is
//! installed: the first ADD on a fresh node (the database or dataDir created
//! by that ADD), ADDs in the steady state, and DELs; and what one sync costs
//! on the temp dir's filesystem, which bounds what a durable call can cost.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::figures::durability::FsyncProbe;
use crate::figures::Figures;
use crate::harness::{phase, stats, Plugin};
use crate::setup::Ctx;
use crate::strace::{self, strace};

const SUBNET: &str = "10.25.0.0/16";

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let scratch = ctx.scenario_dir("fsyncs");
    let dir = scratch.path();
    let started = phase("durability: fsync-family calls per call (strace -f), and the cost of one fdatasync");
    fig.sync_cost = Some(stats(&sync_cost(dir)));
    if let Some(note) = strace::missing() {
        fig.fsync_note = Some(note);
        return;
    }
    let n = ctx.counts.fsync_probes;
    let fresh = |name: &str| {
        let d = dir.join(name);
        fs::create_dir(&d).expect("probe dir");
        d
    };
    // (variant, plugin, whether its first ADD creates the database / dataDir)
    let stack_dir = fresh("stack");
    let copies_dir = fresh("copies");
    let seq_dir = fresh("sequential");
    let hl_dir = fresh("host-local");
    let variants: [(&str, Plugin, bool); 4] = [
        ("suite: ipam-delegated (ds-pool + da-sequential)", ctx.stack(&stack_dir.join("stack.sqlite"), SUBNET), true),
        (
            "suite: ipam-delegated, copies layout (each delegate a process)",
            ctx.stack_copies(&copies_dir.join("stack.sqlite"), SUBNET),
            true,
        ),
        // Its database is created by the selector run that feeds it.
        ("suite: ipam-da-sequential alone", ctx.sequential(&seq_dir.join("sequential.sqlite"), SUBNET), false),
        ("host-local", ctx.host_local(&hl_dir.join("data"), SUBNET), true),
    ];
    let log = dir.join("strace.log");
    for (name, plugin, first) in &variants {
        let mut probe = |case: &str, command: &str, ids: Vec<String>| -> Result<(), String> {
            let calls = ids.iter().map(|id| strace(plugin, command, id, None, &log)).collect::<Result<Vec<_>, _>>()?;
            let probe = FsyncProbe { variant: name.to_string(), case: case.into(), calls };
            let sum = probe.sum();
            eprintln!(
                "    {name}, {case}: {} per call ({} fsync, {} fdatasync, {} sync_file_range in {} calls)",
                probe.per_call(),
                sum.fsync,
                sum.fdatasync,
                sum.sync_file_range,
                probe.calls.len()
            );
            fig.fsyncs.push(probe);
            Ok(())
        };
        let outcome = (|| {
            if *first {
                probe(FsyncProbe::FIRST_ADD, "ADD", vec!["fsync-first".into()])?;
            }
            // Not counted: the steady state starts after a few ADDs.
            for i in 0..3 {
                plugin.run("ADD", &format!("fsync-warm-{i}")).expect_ok(name);
            }
            let ids: Vec<String> = (0..n).map(|i| format!("fsync-{i}")).collect();
            probe(FsyncProbe::ADD, "ADD", ids.clone())?;
            probe(FsyncProbe::DEL, "DEL", ids)
        })();
        if let Err(e) = outcome {
            fig.fsync_note = Some(e);
            fig.fsyncs.clear();
            return;
        }
    }
    eprintln!("    took {:.1?}", started.elapsed());
}

/// The wall time of a 4 KiB append to a file followed by fdatasync, in the
/// temp dir (where the databases are), 20 times: what one durable commit
/// costs the disk at least.
fn sync_cost(dir: &Path) -> Vec<Duration> {
    let path = dir.join("sync-probe");
    let mut file = File::create(&path).expect("sync probe file");
    let block = [0x5a_u8; 4096];
    let times = (0..20)
        .map(|_| {
            let t0 = Instant::now();
            file.write_all(&block).expect("write sync probe");
            file.sync_data().expect("fdatasync sync probe");
            t0.elapsed()
        })
        .collect();
    let _ = fs::remove_file(&path);
    times
}
