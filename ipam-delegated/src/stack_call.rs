//! What this orchestrator tells the delegates it runs beyond the CNI
//! protocol: the writing side of [`shared::stack_call`], whose variables every
//! delegate of the suite reads.

use shared::stack_call::{monotonic_now, Clocks, StackCall, ADD_ID, DEADLINE, DEPTH, LOCK_DEADLINE, ROLLBACK};

/// The variables that say `call` to a delegate.
pub fn vars(call: &StackCall) -> Vec<(&'static str, String)> {
    let mut vars = vec![(DEPTH, call.depth.to_string())];
    if let Some(id) = &call.add_id {
        vars.push((ADD_ID, id.clone()));
    }
    if let Some(id) = &call.rollback_of {
        vars.push((ROLLBACK, id.clone()));
    }
    // One reading of the clocks for both instants (see `Clocks`).
    let clocks = Clocks::now();
    if let Some(at) = call.deadline {
        vars.push((DEADLINE, clocks.monotonic_ms_of(at).to_string()));
    }
    if let Some(at) = call.lock_deadline {
        vars.push((LOCK_DEADLINE, clocks.monotonic_ms_of(at).to_string()));
    }
    vars
}

/// A new ADD id: random, so that no two ADDs of one machine share one.
pub fn new_add_id() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `len` bytes into the buffer we own.
    let filled = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if filled != bytes.len() as isize {
        // Without the kernel's randomness: the process id and the time, which
        // no other process of this machine shares at once.
        let nanos = monotonic_now().as_nanos() as u64;
        bytes = (u64::from(std::process::id()) << 40 ^ nanos).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use shared::Result;

    use super::*;

    /// What a delegate reads of `vars`.
    fn read(vars: &[(&str, String)]) -> Result<StackCall> {
        StackCall::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn round_trips_through_the_environment() {
        let call = StackCall {
            add_id: Some(new_add_id()),
            rollback_of: Some("0123abcd".into()),
            deadline: Some(Instant::now() + Duration::from_secs(30)),
            lock_deadline: Some(Instant::now() + Duration::from_secs(10)),
            depth: 2,
        };
        let back = read(&vars(&call)).unwrap();
        assert_eq!((&back.add_id, &back.rollback_of, back.depth), (&call.add_id, &call.rollback_of, 2));
        for (sent, got) in [(call.deadline, back.deadline), (call.lock_deadline, back.lock_deadline)] {
            let (sent, got) = (sent.unwrap(), got.unwrap());
            let apart = if sent > got { sent - got } else { got - sent };
            assert!(apart < Duration::from_millis(5), "{apart:?}");
        }
    }

    /// A lock budget that is the call's deadline stays the deadline through
    /// the environment, however the clocks are read around a millisecond's
    /// turn: the delegate then says its wait was cut by the deadline (105).
    #[test]
    fn equal_instants_stay_equal_through_the_environment() {
        for _ in 0..2000 {
            let deadline = Instant::now() + Duration::from_micros(1_500_000);
            let call = StackCall { deadline: Some(deadline), lock_deadline: Some(deadline), ..StackCall::default() };
            let back = read(&vars(&call)).unwrap();
            assert_eq!(back.deadline, back.lock_deadline);
        }
    }

    #[test]
    fn ids_are_distinct() {
        assert_ne!(new_add_id(), new_add_id());
        assert_eq!(new_add_id().len(), 16);
    }
}
