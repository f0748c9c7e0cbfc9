//! The one way the stack runs a delegate, whichever way it runs: the
//! [`Runner`] trait, which the delegates run in this process and those run
//! as processes implement alike.

use std::borrow::Cow;
use std::time::Instant;

use serde_json::Value;
use shared::{Command, Result};

/// A delegate's stdin: the configuration, with the `prevResult` it is given.
pub enum Input<'a> {
    /// The text to give it: the runtime's own bytes.
    Text(&'a [u8]),
    /// A configuration the stack made: printed for a delegate that runs as a
    /// process; one that runs in this process reads the value itself, which
    /// is what it would parse that text to.
    Value(Value),
}

impl Input<'_> {
    /// What a delegate run as a process reads on its stdin.
    pub fn text(&self) -> Cow<'_, [u8]> {
        match self {
            Input::Text(bytes) => Cow::Borrowed(bytes),
            Input::Value(value) => Cow::Owned(value.to_string().into_bytes()),
        }
    }
}

/// What one run of a delegate is given.
pub struct Call<'a> {
    pub command: Command,
    pub input: Input<'a>,
    /// When it must have answered; it is also told so, in `vars`.
    pub deadline: Instant,
    /// The variables the orchestrator sets for it (see [`crate::stack_call`]).
    pub vars: &'a [(&'static str, String)],
}

/// A way of running a delegate. `Ok(None)`: it succeeded and printed nothing;
/// `Ok(Some(json))`: it succeeded with output; a failure is its own error
/// object, or the orchestrator's about how it ended (read the same way for both).
pub trait Runner {
    fn run(&self, call: Call) -> Result<Option<Value>>;
}
