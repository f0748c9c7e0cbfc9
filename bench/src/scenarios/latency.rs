//! Single-call latency: ADD then DEL, one call at a time, the full stack (in
//! the measured layout, and in the copies layout where every delegate is a
//! process of its own), ipam-da-sequential alone, the floor program (the
//! least work of a steady-state ADD, bench/floor) and host-local
//! interleaved; with the CPU time of each call. Then the cost of a process
//! that does no work, through the same spawn path, the floor program's build
//! among them.

use std::path::PathBuf;

use crate::figures::Figures;
use crate::harness::{exec, loadavg, phase, stats};
use crate::setup::{Ctx, HOST_LOCAL};

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let n = ctx.counts.latency;
    let scratch = ctx.scenario_dir("latency");
    let dir = scratch.path();
    let subnet = "10.20.0.0/16";
    let variants = [
        ("suite: ipam-delegated (ds-pool + da-sequential)", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        (
            "suite: ipam-delegated, copies layout (each delegate a process)",
            ctx.stack_copies(&dir.join("copies.sqlite"), subnet),
        ),
        ("suite: ipam-da-sequential alone", ctx.sequential(&dir.join("sequential.sqlite"), subnet)),
        ("floor: ipam-bench-floor (the least work of an ADD)", ctx.floor(&dir.join("floor.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    // Warm-up (page cache, database creation), not counted.
    for (name, p) in &variants {
        for i in 0..5 {
            p.run("ADD", &format!("warm-{i}")).expect_ok(name);
        }
    }
    for (command, out, cpu_out) in [("ADD", &mut fig.add, &mut fig.add_cpu), ("DEL", &mut fig.del, &mut fig.del_cpu)] {
        let started = phase(&format!("latency {command}: {n} calls each, interleaved"));
        let mut samples = vec![Vec::with_capacity(n); variants.len()];
        let mut cpu = vec![Vec::with_capacity(n); variants.len()];
        for i in 0..n {
            for k in 0..variants.len() {
                let v = (i + k) % variants.len();
                let run = variants[v].1.run(command, &format!("lat-{i}")).expect_ok(variants[v].0);
                samples[v].push(run.wall);
                cpu[v].push(run.cpu);
            }
        }
        for (v, (name, _)) in variants.iter().enumerate() {
            out.push((name.to_string(), stats(&samples[v])));
            cpu_out.push((name.to_string(), stats(&cpu[v])));
        }
        eprintln!("    took {:.1?}", started.elapsed());
    }
    // What a process costs before any work, through the same spawn path.
    let floors = [
        ("/bin/true", PathBuf::from("/bin/true"), "ADD"),
        ("ipam-da-sequential, CNI_COMMAND=VERSION", ctx.exe("ipam-da-sequential"), "VERSION"),
        ("host-local, CNI_COMMAND=VERSION", PathBuf::from(HOST_LOCAL), "VERSION"),
        ("ipam-bench-null (the floor program's build, doing nothing)", ctx.null_program().to_path_buf(), "ADD"),
    ];
    let mut samples = vec![Vec::with_capacity(n); floors.len()];
    for i in 0..n {
        for k in 0..floors.len() {
            let v = (i + k) % floors.len();
            let (_, exe, command) = &floors[v];
            let run = exec(exe, command, "floor", &ctx.bins, br#"{"cniVersion":"1.0.0"}"#);
            samples[v].push(run.wall);
        }
    }
    for (v, (name, _, _)) in floors.iter().enumerate() {
        fig.floors.push((name.to_string(), stats(&samples[v])));
    }
    fig.loads.push(("latency".into(), loadavg()));
}
