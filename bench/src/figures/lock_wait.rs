//! The lock-wait figures (the lock-wait scenario).

use std::time::Duration;

use crate::harness::Stats;

/// The lock-wait scenario: waits for the database's lock under contention.
pub struct LockWait {
    /// Calls in flight at once.
    pub workers: usize,
    /// ADDs of each of the two runs.
    pub calls: usize,
    /// Per successful call of the logged run: the sum of its lock waits.
    pub wait: Stats,
    /// Per write transaction: how long it held the lock (transaction +
    /// durable commit, as logged).
    pub hold: Stats,
    /// End-to-end time of the logged run's successful calls.
    pub latency_logged: Stats,
    /// End-to-end time of the run without logging's successful calls.
    pub latency: Stats,
    /// The fewest and the most "lock wait" lines a successful call logged.
    pub lines_per_call: (usize, usize),
    /// The error codes of the calls that failed, in both runs.
    pub failures: Vec<u64>,
    /// The logged run, from the workers' common start to the last call's end.
    pub run_time: Duration,
    /// `run_time` over the write transactions: one turn of the lock (a hold
    /// and the hand-over to the next holder), on average.
    pub turn_ms: f64,
    /// Write transactions timed (each one took the lock once).
    pub acquisitions: usize,
    /// Acquisitions passed over: some transaction with a later queue ticket
    /// had its turn before them.
    pub passed_over: usize,
    /// The most turns with later tickets before one waiter's.
    pub most_passed_by: usize,
    /// Acquisitions without a queue ticket (the queue could not be used).
    pub unticketed: usize,
    /// The most hand-overs of the lock during one wait.
    pub most_handovers: usize,
}

impl LockWait {
    /// The longest wait in medians: far above 1 when some waiters are starved.
    pub fn max_over_median(&self) -> f64 {
        if self.wait.median_ms > 0.0 {
            self.wait.max_ms / self.wait.median_ms
        } else {
            0.0
        }
    }
}
