//! Large pools (suite only): a /8 and a /64 each holding `big_fill` leases,
//! the cursor at the start of the leased run so that the next free address
//! lies behind all of them.

use shared::addr::from_u128;

use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats};
use crate::setup::{allocatable, selector_pool, suite_fill, Ctx};

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    for (label, subnet) in [("/8", "10.0.0.0/8"), ("/64", "fd00:20::/64")] {
        // One directory per pool, removed before the next is filled.
        let scratch = ctx.scenario_dir("big");
        let db = scratch.path().join("stack.sqlite");
        let pool = selector_pool(&db, subnet);
        let leased = allocatable(&pool, ctx.counts.big_fill);
        let started = phase(&format!("{label}: filling {} leases", leased.len()));
        suite_fill(&db, &pool, &leased, Some(leased[0]));
        let fill_time = started.elapsed();
        eprintln!("    filled in {fill_time:.1?}");
        let stack = ctx.stack(&db, subnet);
        let expected = from_u128(leased[leased.len() - 1] + 1);
        let mut times = Vec::new();
        for i in 0..ctx.counts.big_adds {
            let run = stack.run("ADD", &format!("big-{i}")).expect_ok("suite ADD, big pool");
            if i == 0 {
                assert_eq!(run.first_address(), Some(expected), "first free after the run");
            }
            times.push(run.wall);
        }
        fig.big.push((format!("{label} holding {} leases", leased.len()), stats(&times), fill_time));
        fig.loads.push((format!("{label} big pool"), loadavg()));
    }
}
