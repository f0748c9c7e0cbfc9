//! The stack of delegates named in `ipam.delegates`, and how each CNI command
//! runs through it.

use std::borrow::Cow;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;
use shared::stack_call::StackCall;
use shared::{CniError, Code, Command, IpamResult, Request, Result};

use crate::delegate::{self, Call, DelegateGroup, Input, Runner};
use crate::stack_call::{self, new_add_id};

/// How many orchestrators may run one inside another. A stack that runs
/// itself, directly or through a wrapper, would fork until the pids limit.
const MAX_DEPTH: u32 = 4;

/// Each delegate's DEL (the runtime's, or a rollback's) gets at least this
/// long of its own, of both the deadline and the lock budget, counted from
/// when it starts: a DEL is how leases are released, and one delegate that
/// hangs must not use up the others' time, or their leases would never be
/// released (every retry of the runtime meeting the same hang). A DEL of N
/// delegates thus ends within `ipam.timeout` + N × (this + the half second a
/// delegate's process is given past its deadline to say why it is late).
const DEL_FLOOR: Duration = Duration::from_secs(1);

pub struct Stack<'a> {
    req: &'a Request,
    delegates: Vec<Delegate>,
    /// `ipam.timeout`, for messages.
    timeout: Duration,
    /// The whole call's end: every ADD, CHECK, GC and STATUS delegate runs
    /// within it; a DEL's delegate gets at least [`DEL_FLOOR`] past it.
    deadline: Instant,
    /// Until when the call's delegates may wait for the database lock, all
    /// their waits together.
    lock_deadline: Instant,
    depth: u32,
    /// The configuration as an ADD's first delegate gets it: without the
    /// runtime's `prevResult`, which is not the stack's own.
    fresh: Cow<'a, [u8]>,
}

struct Delegate {
    name: String,
    /// In this process or as a process: chosen once, by [`delegate::runner`].
    runner: Box<dyn Runner>,
}

/// What a delegate run is part of, as the suite's delegates are told.
#[derive(Clone, Copy)]
enum Role<'a> {
    Add(&'a str),
    Rollback(&'a str),
    Other,
}

impl<'a> Stack<'a> {
    /// Reads `ipam.delegates`, `ipam.timeout` and `ipam.lockTimeout` and finds
    /// every delegate, so that a bad name, a missing executable or a stack
    /// that would run itself fails before anything runs.
    pub fn new(req: &'a Request) -> Result<Self> {
        let started = Instant::now();
        let inherited = &req.env.stack;
        let depth = inherited.depth + 1;
        if depth > MAX_DEPTH {
            return Err(CniError::config(
                "ipam.delegates",
                format!(
                    "ipam-delegated is nested {depth} deep: a delegate runs ipam-delegated again (directly or \
                     through a wrapper), which would never end; at most {MAX_DEPTH} are allowed"
                ),
            ));
        }
        let ipam = req.config.ipam()?;
        let names = delegate_names(ipam.delegates.as_deref())?;
        let timeout = ipam.delegate_timeout();
        let lock_timeout = req.config.lock_timeout()?;
        if req.env.path.is_empty() {
            return Err(CniError::env(
                "CNI_PATH",
                "missing or without an absolute directory; it is where delegates are found",
            ));
        }
        let myself = delegate::this_program();
        // The process group the delegates run in, one after another, shared
        // by the runners of processes.
        let group = Rc::new(DelegateGroup::default());
        let delegates = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let found = delegate::find(&name, &req.env.path)?;
                let runner = delegate::runner(i, &name, found, myself, &group)?;
                Ok(Delegate { name, runner })
            })
            .collect::<Result<_>>()?;
        let deadline = earliest(started + timeout, inherited.deadline);
        let lock_deadline = earliest(earliest(started + lock_timeout, inherited.lock_deadline), Some(deadline));
        let fresh = match req.config.raw.get("prevResult") {
            Some(_) => Cow::Owned(req.config.with_prev_result(None).to_string().into_bytes()),
            None => Cow::Borrowed(req.config.bytes()),
        };
        Ok(Stack { req, delegates, timeout, deadline, lock_deadline, depth, fresh })
    }

    /// ADD: the stack starts from an empty result; each delegate gets the
    /// previous one's output as `prevResult`; the last one's result, without
    /// `pools`, is the answer. A failure is rolled back.
    pub fn add(&self) -> Result<IpamResult> {
        // An ADD run by an outer orchestrator keeps its id, so that the outer
        // rollback releases what this stack took.
        let add_id = self.req.env.stack.add_id.clone().unwrap_or_else(new_add_id);
        let mut prev: Option<Value> = None;
        let mut last: Option<IpamResult> = None;
        for (step, d) in self.delegates.iter().enumerate() {
            match self.call(d, Command::Add, prev.as_ref(), Role::Add(&add_id)).and_then(|out| require_result(d, out)) {
                Ok((output, parsed)) => {
                    prev = Some(output);
                    last = Some(parsed);
                }
                Err(error) => {
                    let rollback = self.rollback(step, prev.as_ref(), &add_id);
                    let details = format!(
                        "delegate {:?} (step {} of {}) failed ADD; rollback: {}{}",
                        d.name,
                        step + 1,
                        self.delegates.len(),
                        rollback.join("; "),
                        if error.details.is_empty() {
                            String::new()
                        } else {
                            format!("; its details: {}", error.details)
                        }
                    );
                    return Err(error.with_details(details));
                }
            }
        }
        let mut result = last.ok_or_else(|| CniError::config("ipam.delegates", "empty"))?;
        result.pools = None;
        Ok(result)
    }

    /// DEL on every delegate up to and including the failed one, in order: the
    /// first with the prevResult the failed step was given, each next one with
    /// what the previous DEL returned. DEL failures are reported, not raised.
    /// The suite's delegates are told which ADD to undo and release only what
    /// it took. Each DEL gets its time as any DEL does (see [`Stack::deadlines`]).
    fn rollback(&self, failed: usize, given_to_failed: Option<&Value>, add_id: &str) -> Vec<String> {
        let role = Role::Rollback(add_id);
        let mut prev = given_to_failed.cloned();
        self.delegates[..=failed]
            .iter()
            .map(|d| match self.call(d, Command::Del, prev.as_ref(), role) {
                Ok(output) => {
                    chain(&mut prev, output);
                    format!("DEL {:?} ok", d.name)
                }
                Err(e) => {
                    tracing::warn!("rollback: DEL of delegate {:?} failed: {e}", d.name);
                    format!("DEL {:?} failed ({e})", d.name)
                }
            })
            .collect()
    }

    /// DEL and CHECK: every delegate runs, even past failures (a DEL's each
    /// with time of its own, see [`Stack::deadlines`]), chaining the outputs
    /// that are results; all failures are returned together, each naming its
    /// delegate. The first delegate gets the runtime's prevResult: DEL and
    /// CHECK act on the result the runtime holds.
    pub fn run_all(&self, command: Command) -> Result<()> {
        // A DEL that rolls back an outer orchestrator's ADD undoes it here too.
        let role = match (&self.req.env.stack.rollback_of, command) {
            (Some(add_id), Command::Del) => Role::Rollback(add_id),
            _ => Role::Other,
        };
        let mut prev: Option<Value> = None;
        let mut failures = Vec::new();
        for d in &self.delegates {
            match self.call(d, command, prev.as_ref(), role) {
                Ok(output) => chain(&mut prev, output),
                Err(e) => failures.push((d.name.as_str(), e)),
            }
        }
        combine(command, failures)
    }

    /// GC: forwarded to every delegate, going on past failures.
    pub fn gc(&self) -> Result<()> {
        let failures = self
            .delegates
            .iter()
            .filter_map(|d| self.call(d, Command::Gc, None, Role::Other).err().map(|e| (d.name.as_str(), e)));
        combine(Command::Gc, failures.collect())
    }

    /// STATUS: ready only if every delegate is.
    pub fn status(&self) -> Result<()> {
        for d in &self.delegates {
            self.call(d, Command::Status, None, Role::Other).map_err(|e| {
                let details = format!("delegate {:?} is not ready{}", d.name, suffix(&e.details));
                e.with_details(details)
            })?;
        }
        Ok(())
    }

    /// Until when a delegate starting now may run, and may wait for the
    /// database lock. ADD, CHECK, GC and STATUS: the call's deadline and lock
    /// budget, one for all their delegates (the runtime waits for them, and an
    /// ADD cut short is rolled back, leaving nothing held). DEL, the runtime's
    /// or a rollback's:
    /// those, but at least [`DEL_FLOOR`] from now, so that every delegate
    /// gets its chance to release what it holds, whatever the ones before
    /// it did. The one place where a delegate's time is decided.
    fn deadlines(&self, command: Command) -> (Instant, Instant) {
        match command {
            Command::Del => {
                let floor = Instant::now() + DEL_FLOOR;
                (self.deadline.max(floor), self.lock_deadline.max(floor))
            }
            _ => (self.deadline, self.lock_deadline),
        }
    }

    /// Runs one delegate, whichever way it runs, within its time (see
    /// [`Stack::deadlines`]), telling it what the call is (see
    /// [`shared::stack_call`]). `prev: None` gives it the
    /// configuration as received, except that an ADD starts without the
    /// runtime's `prevResult`; otherwise with `prevResult` replaced.
    fn call(&self, d: &Delegate, command: Command, prev: Option<&Value>, role: Role) -> Result<Option<Value>> {
        tracing::debug!("{} {}", command.as_str(), d.name);
        let (deadline, lock_deadline) = self.deadlines(command);
        if deadline <= Instant::now() {
            return Err(CniError::new(
                Code::DelegateTimeout,
                format!(
                    "delegate {:?} was not run ({}): the call's deadline (ipam.timeout, {:.1}s) was reached",
                    d.name,
                    command.as_str(),
                    self.timeout.as_secs_f64()
                ),
            ));
        }
        let told = StackCall {
            add_id: match role {
                Role::Add(id) => Some(id.to_string()),
                _ => None,
            },
            rollback_of: match role {
                Role::Rollback(add_id) => Some(add_id.to_string()),
                _ => None,
            },
            deadline: Some(deadline),
            lock_deadline: Some(lock_deadline),
            depth: self.depth,
        };
        let input = match prev {
            Some(p) => Input::Value(self.req.config.with_prev_result(Some(p))),
            None if matches!(role, Role::Add(_) | Role::Rollback(_)) => Input::Text(&self.fresh),
            None => Input::Text(self.req.config.bytes()),
        };
        d.runner.run(Call { command, input, deadline, vars: &stack_call::vars(&told) })
    }
}

/// The earlier of `at` and `other`.
fn earliest(at: Instant, other: Option<Instant>) -> Instant {
    other.map_or(at, |o| o.min(at))
}

/// An ADD must print a result. It is passed on raw, so that keys we do not
/// know reach the next delegate, but only once it reads as a result.
fn require_result(d: &Delegate, output: Option<Value>) -> Result<(Value, IpamResult)> {
    let what = format!("output of delegate {:?}", d.name);
    let output = output.ok_or_else(|| CniError::decode(&what, "ADD succeeded but printed no result"))?;
    let parsed = IpamResult::from_json(&output, &what)?;
    Ok((output, parsed))
}

/// DEL and CHECK chain a delegate's output when it is a result; an empty or
/// other output keeps the previous prevResult.
fn chain(prev: &mut Option<Value>, output: Option<Value>) {
    if let Some(output) = output.filter(|o| IpamResult::from_json(o, "").is_ok()) {
        *prev = Some(output);
    }
}

/// `ipam.delegates`: a non-empty array of bare executable names (error 7).
fn delegate_names(names: Option<&[String]>) -> Result<Vec<String>> {
    const FIELD: &str = "ipam.delegates";
    let list = match names {
        Some([]) => return Err(CniError::config(FIELD, "must not be empty")),
        Some(list) => list,
        None => {
            return Err(CniError::config(
                FIELD,
                "missing: name the delegates to run, e.g. [\"ipam-ds-pool\", \"ipam-da-sequential\"]",
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, name)| match is_bare_name(name) {
            true => Ok(name.clone()),
            false => Err(CniError::config(
                &format!("{FIELD}[{i}]"),
                format!("{name:?} is not a bare executable name (no path separator, not '.' or '..')"),
            )),
        })
        .collect()
}

fn is_bare_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// One error for several failures: the first one's code, every message.
fn combine(command: Command, mut failures: Vec<(&str, CniError)>) -> Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = failures.iter().map(|(name, e)| format!("{name:?}: {e}")).collect();
    let (first_name, first) = failures.remove(0);
    let msg = if all.len() == 1 {
        first.msg.clone()
    } else {
        format!("{} delegates failed {}; first: {}", all.len(), command.as_str(), first.msg)
    };
    let details = format!("{} failed by delegate {first_name:?}: {}", command.as_str(), all.join("; "));
    Err(CniError::new(first.code, msg).with_details(details))
}

fn suffix(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(": {details}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::Code;

    #[test]
    fn delegate_names_must_be_bare() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(delegate_names(Some(&names(&["a", "ipam-da-x"]))).unwrap(), vec!["a", "ipam-da-x"]);
        for bad in [&[][..], &["a/b"], &["."], &[".."], &[""], &["a", "/bin/true"]] {
            let e = delegate_names(Some(&names(bad))).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("ipam.delegates"), "{bad:?}: {e}");
        }
        assert_eq!(delegate_names(None).unwrap_err().code, 7);
    }

    #[test]
    fn combined_failures_keep_the_first_code_and_name_everyone() {
        let e = combine(
            Command::Del,
            vec![("a", CniError::new(Code::TryAgainLater, "locked")), ("b", CniError::new(Code::Io, "io"))],
        )
        .unwrap_err();
        assert_eq!(e.code, 11);
        assert!(e.msg.contains("2 delegates failed DEL"));
        assert!(e.details.contains("\"a\"") && e.details.contains("\"b\"") && e.details.contains("io"));
        assert!(combine(Command::Check, vec![]).is_ok());
    }
}
