//! Concurrent ADD throughput: worker threads each spawning ADD processes, the
//! full stack and host-local in two interleaved halves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::figures::Figures;
use crate::harness::{loadavg, phase};
use crate::setup::Ctx;

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let total = ctx.counts.throughput;
    let scratch = ctx.scenario_dir("throughput");
    let dir = scratch.path();
    let subnet = "10.21.0.0/16";
    let variants = [
        ("suite: ipam-delegated", ctx.stack(&dir.join("stack.sqlite"), subnet)),
        ("host-local", ctx.host_local(&dir.join("host-local"), subnet)),
    ];
    let started =
        phase(&format!("throughput: {total} ADDs each, {} workers, in two interleaved halves", ctx.counts.workers));
    let mut spent = [Duration::ZERO; 2];
    for half in 0..2 {
        for (v, (name, plugin)) in variants.iter().enumerate() {
            let count = total / 2 + if half == 0 { total % 2 } else { 0 };
            let next = AtomicUsize::new(0);
            let t0 = Instant::now();
            thread::scope(|s| {
                for _ in 0..ctx.counts.workers {
                    s.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        plugin.run("ADD", &format!("tp-{half}-{i}")).expect_ok(name);
                    });
                }
            });
            spent[v] += t0.elapsed();
        }
    }
    for (v, (name, _)) in variants.iter().enumerate() {
        fig.throughput.push((name.to_string(), (total as f64 / spent[v].as_secs_f64(), spent[v])));
    }
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("throughput".into(), loadavg()));
}
