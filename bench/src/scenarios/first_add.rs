//! The first ADD on a fresh node: the suite's database does not exist yet
//! (that ADD creates it, its schema and WAL, and registers the pool), and
//! host-local's dataDir does not either. The full stack and host-local
//! interleaved, each call in a fresh directory of its own.

use std::fs;

use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats};
use crate::setup::Ctx;

const SUBNET: &str = "10.26.0.0/16";

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let n = ctx.counts.first_add;
    let scratch = ctx.scenario_dir("first-add");
    let dir = scratch.path();
    let started = phase(&format!("first ADD on a fresh node: {n} of each, interleaved, each in a fresh dir"));
    let names = ["suite: ipam-delegated (ds-pool + da-sequential)", "host-local"];
    let first_add = |v: usize, trial: &str| {
        // The directory exists, as /var/lib/cni would; what is in it is new.
        let fresh = dir.join(format!("{trial}-{v}"));
        fs::create_dir(&fresh).expect("fresh dir");
        let plugin = match v {
            0 => ctx.stack(&fresh.join("stack.sqlite"), SUBNET),
            _ => ctx.host_local(&fresh.join("host-local"), SUBNET),
        };
        let run = plugin.run("ADD", &format!("first-{trial}")).expect_ok(names[v]);
        assert_eq!(run.first_address(), Some("10.26.0.2".parse().unwrap()), "{}: the pool's first address", names[v]);
        // Not timed; keeps the scratch dir small.
        fs::remove_dir_all(&fresh).expect("remove fresh dir");
        run.wall
    };
    // Warm-up (the executables in the page cache), not counted.
    for v in 0..names.len() {
        first_add(v, "warm");
    }
    let mut samples = vec![Vec::with_capacity(n); names.len()];
    for i in 0..n {
        for k in 0..names.len() {
            let v = (i + k) % names.len();
            samples[v].push(first_add(v, &i.to_string()));
        }
    }
    for (v, name) in names.iter().enumerate() {
        fig.first_add.push((name.to_string(), stats(&samples[v])));
    }
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("first ADD".into(), loadavg()));
}
