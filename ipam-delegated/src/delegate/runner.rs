//! The one way the stack runs a delegate, whichever way it runs: the
//! [`Runner`] trait, which the delegates run in this process and those run
//! as processes implement alike.

use std::time::Instant;

use serde_json::Value;
use shared::{Command, Result};

/// What one run of a delegate is given.
pub struct Call<'a> {
    pub command: Command,
    /// Its stdin: the configuration, with the `prevResult` it is given.
    pub input: &'a [u8],
    /// When it must have answered; it is also told so, in `vars`.
    pub deadline: Instant,
    /// The variables the orchestrator sets for it (see [`crate::stack_call`]).
    pub vars: &'a [(&'static str, String)],
}

/// A way of running a delegate. `Ok(None)`: it succeeded and printed nothing;
/// `Ok(Some(json))`: it succeeded with output; a failure is its own error
/// object, or the orchestrator's about how it ended (read the same way for both).
pub trait Runner {
    fn run(&self, call: &Call) -> Result<Option<Value>>;
}
