//! One of this program's own delegates, run inside this process as
//! [`super::process`] would run its file: with the caller's environment,
//! `CNI_COMMAND` and the call's variables set and no stale stack variable;
//! with the input as its stdin, under the same bound; and its answer read
//! back from the bytes it would have printed, with the exit status it would
//! have had, through the same checks.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::Value;
use shared::config::read_bounded;
use shared::{plugin, Builtin, Env, Result};

use super::answer::interpret;
use super::runner::{Call, Runner};

pub struct InProcess(pub &'static Builtin);

impl Runner for InProcess {
    /// Nothing here can kill it at the deadline; it needs nothing to: told the
    /// deadline and the lock budget in the variables, its lock waits end at
    /// them, and it answers 105 or 11 itself, as its process would before
    /// being killed.
    fn run(&self, call: &Call) -> Result<Option<Value>> {
        let env = Env::in_process(call.command, call.vars);
        let stdin = read_bounded(call.input, "stdin");
        let (answer, success) = plugin::respond(self.0, env, stdin);
        let printed = answer.map(|json| format!("{json}\n")).unwrap_or_default();
        let status = ExitStatus::from_raw(if success { 0 } else { 1 << 8 });
        interpret(self.0.about.name, printed.as_bytes(), status)
    }
}
