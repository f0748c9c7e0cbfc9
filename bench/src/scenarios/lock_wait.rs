//! How long calls wait for the allocation database's lock when 64 full-stack
//! ADDs contend at once, and whether the waiting is fair.
//!
//! The full stack (ipam-delegated with ipam-ds-pool + ipam-da-sequential),
//! not the allocator alone: that is what a runtime starts, and the arrivals at
//! the lock are then what they are in use (each call first selects the pools,
//! reading the database without the lock; only the allocator's commit takes
//! it). `lock_workers` threads start together and each runs ADD
//! processes one after the other on one database, so that as many calls are
//! in flight at any time.
//!
//! The wait of a call is what its plugins log: every write transaction logs
//! "lock wait W, transaction T, durable commit C" at debug level
//! (shared/src/store), so each call gets `ipam.logFile` (a file of its own)
//! and `ipam.logLevel: "debug"`, and its wait is the sum of its lines' W (one
//! line in the steady state: the allocator's; ipam-ds-pool writes only when
//! it registers the pool, before the timed run). T + C is how long the lock
//! was held for the transaction, a lower bound (a WAL checkpoint every dozen
//! ADDs also happens under it). Logging adds a little to each call, so the
//! run is repeated without it, on a fresh database, for the calls'
//! end-to-end latencies.
//!
//! Fairness, from the same lines: each is logged while its transaction still
//! holds the lock, so the lines' timestamps order the turns, and each names
//! the queue ticket its writer took when it asked (shared/src/store/queue.rs).
//! A turn taken before another one with an earlier ticket passed that one
//! over: served in order, none would. (Each line's timestamp is taken just
//! after the commit, so the transaction asked for the lock at about
//! timestamp - C - T - W and took it at timestamp - C - T: how many turns a
//! wait saw go by.)

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::debug_log::{lock_lines, logging, Acquisition};
use crate::figures::lock_wait::LockWait;
use crate::figures::Figures;
use crate::harness::{loadavg, phase, stats, Plugin};
use crate::setup::{bytes, Ctx};

const SUBNET: &str = "10.24.0.0/16";

/// One call of a contention run: its end-to-end time, and its error code if
/// it failed.
type Outcome = (Duration, Option<u64>);

/// What one ADD of the logged run left: its end-to-end time, whether it
/// succeeded (else its error code), and its log's lock lines.
struct Call {
    wall: Duration,
    code: Option<u64>,
    /// Each write transaction the call's plugins logged.
    lines: Vec<Acquisition>,
}

/// For each acquisition: how many turns with a later ticket came before its
/// own (it was passed over by them), and how many turns went by while it
/// waited.
fn order(all: &[Acquisition]) -> Vec<(usize, usize)> {
    all.iter()
        .map(|a| {
            let passed_by = match a.ticket {
                Some(mine) => all.iter().filter(|b| b.logged < a.logged && b.ticket.is_some_and(|t| t > mine)).count(),
                None => 0,
            };
            let during = all.iter().filter(|b| b.took() > a.asked() && b.took() < a.took()).count();
            (passed_by, during)
        })
        .collect()
}

pub fn run(ctx: &Ctx, fig: &mut Figures) {
    let (total, workers) = (ctx.counts.lock_wait, ctx.counts.lock_workers);
    let scratch = ctx.scenario_dir("lock-wait");
    let dir = scratch.path();
    let started = phase(&format!(
        "lock wait: {total} full-stack ADDs by {workers} processes at once, each call logging its lock waits; \
         then again without logging"
    ));

    let logs = dir.join("logs");
    fs::create_dir_all(&logs).expect("logs dir");
    let db = dir.join("logged.sqlite");
    let (logged, run_time) = contend(ctx, &db, total, workers, |i| {
        bytes(&logging(&ctx.stack_config(&db, SUBNET), &logs.join(format!("{i}.log"))))
    });
    let calls: Vec<Call> = logged
        .into_iter()
        .enumerate()
        .map(|(i, (wall, code))| Call { wall, code, lines: lock_lines(&logs.join(format!("{i}.log"))) })
        .collect();

    let plain_db = dir.join("plain.sqlite");
    let plain_config = bytes(&ctx.stack_config(&plain_db, SUBNET));
    let (plain, _) = contend(ctx, &plain_db, total, workers, |_| plain_config.clone());

    let ok: Vec<&Call> = calls.iter().filter(|c| c.code.is_none()).collect();
    let waits: Vec<Duration> = ok.iter().map(|c| c.lines.iter().map(|l| l.wait).sum()).collect();
    let acquisitions: Vec<Acquisition> = ok.iter().flat_map(|c| c.lines.iter().copied()).collect();
    let holds: Vec<Duration> = acquisitions.iter().map(|a| a.hold).collect();
    let order = order(&acquisitions);
    // The lock passes from one transaction to the next: on average one turn
    // (a hold and the hand-over) took this long.
    let turn = run_time / holds.len().max(1) as u32;
    let lines = ok.iter().map(|c| c.lines.len());
    let figures = LockWait {
        workers,
        calls: total,
        wait: stats(&waits),
        hold: stats(&holds),
        latency_logged: stats(&ok.iter().map(|c| c.wall).collect::<Vec<_>>()),
        latency: stats(&plain.iter().filter(|p| p.1.is_none()).map(|p| p.0).collect::<Vec<_>>()),
        lines_per_call: (lines.clone().min().unwrap_or(0), lines.max().unwrap_or(0)),
        failures: calls.iter().filter_map(|c| c.code).chain(plain.iter().filter_map(|p| p.1)).collect(),
        run_time,
        turn_ms: turn.as_secs_f64() * 1e3,
        acquisitions: acquisitions.len(),
        passed_over: order.iter().filter(|o| o.0 > 0).count(),
        most_passed_by: order.iter().map(|o| o.0).max().unwrap_or(0),
        unticketed: acquisitions.iter().filter(|a| a.ticket.is_none()).count(),
        most_handovers: order.iter().map(|o| o.1).max().unwrap_or(0),
    };
    let w = &figures.wait;
    eprintln!(
        "    lock wait per call: median {:.2} ms, p99 {:.2} ms, max {:.2} ms (max / median {:.1}); lock held per \
         transaction: median {:.2} ms, max {:.2} ms; a turn {:.2} ms on average; {} of {} waits passed over by a \
         later ticket, one by {}; one wait saw {} turns go by ({} calls in flight); ADD end to end median {:.2} ms \
         (logging) / {:.2} ms (not), max {:.2} / {:.2} ms; failures {:?}; took {:.1?}",
        w.median_ms,
        w.p99_ms,
        w.max_ms,
        figures.max_over_median(),
        figures.hold.median_ms,
        figures.hold.max_ms,
        figures.turn_ms,
        figures.passed_over,
        figures.acquisitions,
        figures.most_passed_by,
        figures.most_handovers,
        workers,
        figures.latency_logged.median_ms,
        figures.latency.median_ms,
        figures.latency_logged.max_ms,
        figures.latency.max_ms,
        figures.failures,
        started.elapsed()
    );
    fig.lock_wait = Some(figures);
    fig.loads.push(("lock wait".into(), loadavg()));
}

/// `total` ADDs of the full stack on `db` by `workers` threads that start
/// together, each running one process after the other, call `i` with the
/// configuration `config(i)`; after one ADD that creates the database and
/// registers the pool. Answers each call's time and error code (None:
/// success), and how long the calls took from the start together.
fn contend(
    ctx: &Ctx,
    db: &Path,
    total: usize,
    workers: usize,
    config: impl Fn(usize) -> Vec<u8> + Sync,
) -> (Vec<Outcome>, Duration) {
    ctx.stack(db, SUBNET).run("ADD", "lw-warm-up").expect_ok("the lock-wait scenario's first ADD");
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; total]);
    let gate = Barrier::new(workers + 1);
    let elapsed = thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    gate.wait();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            break;
                        }
                        let plugin = Plugin { config: config(i), ..ctx.stack(db, SUBNET) };
                        let run = plugin.run("ADD", &format!("lw-{i}"));
                        let code = (!run.success).then(|| run.json()["code"].as_u64().unwrap_or(0));
                        out.lock().unwrap()[i] = Some((run.wall, code));
                    }
                })
            })
            .collect();
        gate.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join().expect("a lock-wait worker panicked");
        }
        t0.elapsed()
    });
    (out.into_inner().unwrap().into_iter().map(|c| c.expect("every call ran")).collect(), elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passing_over_is_a_later_ticket_taking_its_turn_first() {
        let ms = Duration::from_millis;
        let turn =
            |logged: f64, ticket: Option<u64>, wait: u64| Acquisition { logged, ticket, wait: ms(wait), hold: ms(1) };
        // Ticket 1 waits 10 ms while tickets 3 and 2 have their turns, in
        // that order: both pass it over, and 3 passes 2 over. A writer
        // without a ticket is in no order.
        let all = [turn(0.011, Some(1), 10), turn(0.005, Some(3), 3), turn(0.008, Some(2), 6), turn(0.0095, None, 1)];
        assert_eq!(order(&all), [(2, 3), (0, 0), (1, 1), (0, 0)]);
        // In ticket order, nobody is passed over.
        let fair = [turn(0.002, Some(1), 1), turn(0.004, Some(2), 2), turn(0.006, Some(3), 3)];
        assert!(order(&fair).iter().all(|o| o.0 == 0));
    }
}
