//! What `ipam-delegated` tells the delegates it runs beyond the CNI protocol,
//! in environment variables that any other plugin ignores, as its delegates
//! read them (ipam-delegated's `stack_call` writes them):
//!
//! - `IPAM_DELEGATED_ADD`: the id of the ADD a delegate takes part in; the
//!   suite's allocators tag the leases they take with it.
//! - `IPAM_DELEGATED_ROLLBACK`: set on the DELs that roll a failed ADD back,
//!   to that ADD's id; the suite's allocators then release only the leases
//!   that ADD took, never what the attachment held before it.
//! - `IPAM_DELEGATED_DEADLINE`: the whole call's deadline (`ipam.timeout`), and
//!   `IPAM_DELEGATED_LOCK_DEADLINE`: the call's budget for waiting on the
//!   database lock, both as CLOCK_MONOTONIC milliseconds (one clock for every
//!   process of the machine).
//! - `IPAM_DELEGATED_DEPTH`: how many orchestrators are running this one, so
//!   that a stack that runs itself, directly or through a wrapper, ends.

use std::time::{Duration, Instant};

use crate::error::{CniError, Result};

pub const ADD_ID: &str = "IPAM_DELEGATED_ADD";
pub const ROLLBACK: &str = "IPAM_DELEGATED_ROLLBACK";
pub const DEADLINE: &str = "IPAM_DELEGATED_DEADLINE";
pub const LOCK_DEADLINE: &str = "IPAM_DELEGATED_LOCK_DEADLINE";
pub const DEPTH: &str = "IPAM_DELEGATED_DEPTH";

/// Every variable of this module, so that a delegate gets only the ones its
/// orchestrator sets and never stale ones inherited from further up.
pub const ALL: [&str; 5] = [ADD_ID, ROLLBACK, DEADLINE, LOCK_DEADLINE, DEPTH];

/// One call's place in a stack, as read from (or written to) the variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackCall {
    pub add_id: Option<String>,
    pub rollback_of: Option<String>,
    pub deadline: Option<Instant>,
    pub lock_deadline: Option<Instant>,
    pub depth: u32,
}

impl StackCall {
    /// Reads the variables through `var`; a malformed one is error 4.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let id = |name: &str| -> Result<Option<String>> {
            match var(name).filter(|v| !v.is_empty()) {
                Some(v) if v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => Ok(Some(v)),
                Some(v) => Err(CniError::env(name, format!("{v:?} is not an id (letters, digits and '-')"))),
                None => Ok(None),
            }
        };
        // One reading of the clocks for both instants: equal instants (the
        // lock budget is often the deadline itself) stay equal.
        let clocks = Clocks::now();
        let instant = |name: &str| -> Result<Option<Instant>> {
            match var(name).filter(|v| !v.is_empty()) {
                Some(v) => v
                    .parse::<u64>()
                    .map(|ms| Some(clocks.instant_at_monotonic_ms(ms)))
                    .map_err(|_| CniError::env(name, format!("{v:?} is not a number of milliseconds"))),
                None => Ok(None),
            }
        };
        let depth = match var(DEPTH).filter(|v| !v.is_empty()) {
            Some(v) => v.parse().map_err(|_| CniError::env(DEPTH, format!("{v:?} is not a whole number")))?,
            None => 0,
        };
        Ok(StackCall {
            add_id: id(ADD_ID)?,
            rollback_of: id(ROLLBACK)?,
            deadline: instant(DEADLINE)?,
            lock_deadline: instant(LOCK_DEADLINE)?,
            depth,
        })
    }
}

/// CLOCK_MONOTONIC, which std's `Instant` also reads, as a duration since boot.
pub fn monotonic_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// std's `Instant` and CLOCK_MONOTONIC read once, to convert between them:
/// the two are read a moment apart, so each conversion with a reading of its
/// own could move equal instants a millisecond apart (and a lock budget that
/// is the deadline would end before it, answering 11 instead of 105).
pub struct Clocks {
    now: Instant,
    clock: Duration,
}

impl Clocks {
    /// Both clocks, read now.
    pub fn now() -> Clocks {
        Clocks { now: Instant::now(), clock: monotonic_now() }
    }

    /// `at` as CLOCK_MONOTONIC milliseconds, as the variables carry it.
    pub fn monotonic_ms_of(&self, at: Instant) -> u64 {
        let at = match at.checked_duration_since(self.now) {
            Some(ahead) => self.clock + ahead,
            None => self.clock.saturating_sub(self.now - at),
        };
        at.as_millis() as u64
    }

    /// The instant of `ms` CLOCK_MONOTONIC milliseconds, as a variable says it.
    pub fn instant_at_monotonic_ms(&self, ms: u64) -> Instant {
        let at = Duration::from_millis(ms);
        match at.checked_sub(self.clock) {
            Some(ahead) => self.now + ahead,
            None => self.now.checked_sub(self.clock - at).unwrap_or(self.now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, String)]) -> Result<StackCall> {
        StackCall::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn no_variable_is_no_stack_and_malformed_values_are_error_4() {
        assert_eq!(read(&[]).unwrap(), StackCall::default());
        for (name, value) in [(ADD_ID, "a b"), (ROLLBACK, "x;y"), (DEADLINE, "soon"), (DEPTH, "-1")] {
            let e = read(&[(name, value.to_string())]).unwrap_err();
            assert!(e.code == 4 && e.msg.contains(name), "{e}");
        }
    }
}
