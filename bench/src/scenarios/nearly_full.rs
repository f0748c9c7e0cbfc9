//! A /16 with exactly one free address just behind the cursor (the search
//! wraps around the whole pool), then the same /16 exhausted.

use shared::addr::from_u128;

use crate::figures::Figures;
use crate::harness::{loadavg, phase};
use crate::setup::{
    allocatable, host_local_fill, host_local_set_last, selector_pool, suite_fill, suite_set_cursor, Ctx,
};

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let scratch = ctx.scenario_dir("nearly-full");
    let dir = scratch.path();
    let subnet = "10.22.0.0/16";
    let db = dir.join("stack.sqlite");
    let hl_dir = dir.join("host-local");
    let pool = selector_pool(&db, subnet);
    let all = allocatable(&pool, u128::MAX);
    let free_index = all.len() / 2;
    let free = all[free_index];
    let cursor = all[free_index + 1];
    let leased: Vec<u128> = all.iter().copied().filter(|&n| n != free).collect();
    let started = phase(&format!("one free address: filling {} leases each", leased.len()));
    suite_fill(&db, &pool, &leased, Some(cursor));
    host_local_fill(&hl_dir, &leased, Some(cursor));
    eprintln!("    filled in {:.1?}", started.elapsed());

    let stack = ctx.stack(&db, subnet);
    let host_local = ctx.host_local(&hl_dir, subnet);
    let mut suite_times = Vec::new();
    let mut hl_times = Vec::new();
    for t in 0..ctx.counts.trials {
        let id = format!("one-free-{t}");
        let run = stack.run("ADD", &id).expect_ok("suite ADD, one free");
        assert_eq!(run.first_address(), Some(from_u128(free)), "suite took the free address");
        suite_times.push(run.wall);
        stack.run("DEL", &id).expect_ok("suite DEL");
        suite_set_cursor(&db, &pool, cursor);

        let run = host_local.run("ADD", &id).expect_ok("host-local ADD, one free");
        assert_eq!(run.first_address(), Some(from_u128(free)), "host-local took the free address");
        hl_times.push(run.wall);
        host_local.run("DEL", &id).expect_ok("host-local DEL");
        host_local_set_last(&hl_dir, cursor);
    }
    fig.one_free.push(("suite: ipam-delegated".into(), suite_times));
    fig.one_free.push(("host-local".into(), hl_times));

    let started = phase("exhausted /16");
    suite_fill(&db, &pool, &[free], None);
    host_local_fill(&hl_dir, &[free], None);
    let mut suite_times = Vec::new();
    let mut hl_times = Vec::new();
    for t in 0..ctx.counts.trials {
        let id = format!("exhausted-{t}");
        let run = stack.run("ADD", &id);
        assert!(
            !run.success && run.json()["code"] == 100,
            "suite: expected error 100, got {}",
            String::from_utf8_lossy(&run.out)
        );
        suite_times.push(run.wall);
        let run = host_local.run("ADD", &id);
        assert!(!run.success, "host-local: expected failure, got {}", String::from_utf8_lossy(&run.out));
        hl_times.push(run.wall);
    }
    fig.exhausted.push(("suite: ipam-delegated".into(), suite_times));
    fig.exhausted.push(("host-local".into(), hl_times));
    eprintln!("    took {:.1?}", started.elapsed());
    fig.loads.push(("nearly full / exhausted".into(), loadavg()));
}
