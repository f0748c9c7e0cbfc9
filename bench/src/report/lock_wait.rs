//! The lock-wait section: the waits, and what they say about fairness.

use std::fmt::Write as _;

use super::format::stats_row;
use crate::figures::lock_wait::LockWait;

/// The lock-wait scenario's section: the figures, and what they say about fairness.
pub fn section(lw: &LockWait, cores: usize) -> String {
    let mut s = String::new();
    let (n, ahead) = (lw.workers, lw.workers.saturating_sub(1));
    let lines = match lw.lines_per_call {
        (1, 1) => "one such line".to_string(),
        (a, b) if a == b => format!("{a} such lines"),
        (a, b) => format!("{a} to {b} such lines"),
    };
    let _ = writeln!(s, "\n## Waiting for the lock: {n} ADDs in flight at once\n");
    let _ = writeln!(s, "{} ADDs of the full stack on one database, by {n} threads that start together and each start one ADD process after the other, so that {n} calls are in flight at any time (on {cores} cores). The full stack rather than the allocator alone, because that is what a runtime starts: each call runs `ipam-delegated` with `ipam-ds-pool` (which reads without the lock) and `ipam-da-sequential` (in the fast layout all in one process), whose commit is the call's one write, so the lock sees the arrivals it sees in use. Each call logs at debug level to a file of its own (`ipam.logFile`, `ipam.logLevel: \"debug\"`), where every write transaction logs `lock wait W, transaction T, durable commit C` (shared/src/store): a call's wait is the sum of its W ({lines} per call), the time a transaction held the lock is T + C (a lower bound: the WAL checkpoint every dozen ADDs also runs under the lock). The same run without logging, on a fresh database, gives the calls' end-to-end latencies.\n", lw.calls);
    let _ = writeln!(s, "| measurement | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    s.push_str(&stats_row("lock wait per ADD", &lw.wait));
    s.push_str(&stats_row("lock held per write transaction (transaction + durable commit)", &lw.hold));
    s.push_str(&stats_row("ADD end to end, logging at debug", &lw.latency_logged));
    s.push_str(&stats_row("ADD end to end, no log file", &lw.latency));
    let failures = if lw.failures.is_empty() {
        "No call failed.".to_string()
    } else {
        format!(
            "{} calls failed, with the codes {:?} (11: the lock stayed taken for `ipam.lockTimeout`).",
            lw.failures.len(),
            lw.failures
        )
    };
    let _ = writeln!(s, "\nThe logged run took {:.2} s for {} write transactions: the lock changed hands every {:.2} ms on average (one turn: a hold and the hand-over to the next holder). {failures}\n", lw.run_time.as_secs_f64(), lw.hold.n, lw.turn_ms);
    let _ = write!(s, "**Fairness.** Writers wait in a queue in front of the flock on `<database>.lock` (shared/src/store/queue.rs): a writer takes the next ticket in `<database>.lock-queue` when it asks for the lock, waits for the writer with the ticket before its own, and then takes the flock, which keeps every holder alone. Served in the queue's order, no writer has its turn before one with an earlier ticket, and a wait sees at most {ahead} turns go by (one per call in flight ahead of it). Each transaction logs its line while it still holds the lock, with its ticket, so the lines' timestamps give the order of the turns exactly: {} of {} turns came after a turn with a later ticket (were passed over), one of them after {}; {} had no ticket (the queue could not be used). About when each asked and took the lock (its timestamp − C − T − W and − C − T): one wait saw {} turns go by; the longest wait lasted {:.2} ms, {:.1}× the median of {:.2} ms. ", lw.passed_over, lw.acquisitions, lw.most_passed_by, lw.unticketed, lw.most_handovers, lw.wait.max_ms, lw.max_over_median(), lw.wait.median_ms);
    if lw.passed_over == 0 {
        let _ = writeln!(s, "The waiters were served in the order they asked.");
    } else if lw.most_handovers > ahead {
        let _ = writeln!(s, "So waiters are starved: a wait that sees more than {ahead} turns go by can only have been passed over again and again by calls that came after it, and only the lock timeout bounds it.");
    } else {
        let _ = writeln!(s, "So the order is not kept, though in this run no wait saw more turns go by than an ordered queue would allow ({ahead}).");
    }
    s
}
