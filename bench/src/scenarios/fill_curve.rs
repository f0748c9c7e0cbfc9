//! ADD latency against pool fill: a /16 filled to each level (leases from
//! the start of the pool, the cursor on the last one, as sequential
//! allocation leaves them), the full stack and host-local.

use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats};
use crate::setup::{
    allocatable, host_local_fill, host_local_set_last, selector_pool, suite_fill, suite_set_cursor, Ctx,
};

/// The fill levels measured, as fractions of the pool.
const FILL_LEVELS: [f64; 7] = [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 0.9999];

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let scratch = ctx.scenario_dir("fill-curve");
    let dir = scratch.path();
    let subnet = "10.23.0.0/16";
    let db = dir.join("stack.sqlite");
    let hl_dir = dir.join("host-local");
    let pool = selector_pool(&db, subnet);
    let all = allocatable(&pool, u128::MAX);
    let stack = ctx.stack(&db, subnet);
    let host_local = ctx.host_local(&hl_dir, subnet);
    let started = phase("ADD latency against fill");
    let mut filled = 0usize;
    let trials = ctx.counts.trials.max(3);
    let mut suite_curve = Vec::new();
    let mut hl_curve = Vec::new();
    for level in FILL_LEVELS {
        let target = (all.len() as f64 * level).round() as usize;
        let cursor = target.checked_sub(1).map(|i| all[i]);
        suite_fill(&db, &pool, &all[filled..target], cursor);
        host_local_fill(&hl_dir, &all[filled..target], cursor);
        filled = target;
        let (mut s, mut h) = (Vec::new(), Vec::new());
        for t in 0..trials {
            let id = format!("fill-{level}-{t}");
            let run = stack.run("ADD", &id).expect_ok("suite ADD, fill curve");
            s.push(run.wall);
            stack.run("DEL", &id).expect_ok("suite DEL");
            let run = host_local.run("ADD", &id).expect_ok("host-local ADD, fill curve");
            h.push(run.wall);
            host_local.run("DEL", &id).expect_ok("host-local DEL");
            if let Some(c) = cursor {
                suite_set_cursor(&db, &pool, c);
                host_local_set_last(&hl_dir, c);
            }
        }
        suite_curve.push((level, stats(&s)));
        hl_curve.push((level, stats(&h)));
    }
    fig.fill_curve.push(("suite: ipam-delegated".into(), suite_curve));
    fig.fill_curve.push(("host-local".into(), hl_curve));
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("fill curve".into(), loadavg()));
}
