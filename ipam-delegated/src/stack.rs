//! The stack of delegates named in `ipam.delegates`, and how each CNI command
//! runs through it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use shared::{delegate, CniError, Command, IpamResult, Request, Result};

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Stack<'a> {
    req: &'a Request,
    delegates: Vec<Delegate>,
    timeout: Duration,
}

struct Delegate {
    name: String,
    path: PathBuf,
}

impl<'a> Stack<'a> {
    /// Reads `ipam.delegates` and `ipam.timeout` and finds every delegate,
    /// so that a bad name or a missing executable fails before anything runs.
    pub fn new(req: &'a Request) -> Result<Self> {
        let names = delegate_names(req.config.ipam_key("delegates")?)?;
        let timeout = req.config.ipam_seconds("timeout", DEFAULT_TIMEOUT)?;
        if req.env.path.is_empty() {
            return Err(CniError::env(
                "CNI_PATH",
                "missing or without an absolute directory; it is where delegates are found",
            ));
        }
        let delegates = names
            .into_iter()
            .map(|name| Ok(Delegate { path: delegate::find(&name, &req.env.path)?, name }))
            .collect::<Result<_>>()?;
        Ok(Stack { req, delegates, timeout })
    }

    /// ADD: each delegate gets the previous one's output as `prevResult`; the
    /// last one's result, without `pools`, is the answer. A failure is rolled back.
    pub fn add(&self) -> Result<IpamResult> {
        let mut prev: Option<Value> = None;
        let mut last: Option<IpamResult> = None;
        for (step, d) in self.delegates.iter().enumerate() {
            match self.call(d, Command::Add, prev.as_ref()).and_then(|out| require_result(d, out)) {
                Ok((output, parsed)) => {
                    prev = Some(output);
                    last = Some(parsed);
                }
                Err(error) => {
                    let rollback = self.rollback(step, prev.as_ref());
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
    fn rollback(&self, failed: usize, given_to_failed: Option<&Value>) -> Vec<String> {
        let mut prev = given_to_failed.cloned();
        self.delegates[..=failed]
            .iter()
            .map(|d| match self.call(d, Command::Del, prev.as_ref()) {
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

    /// DEL and CHECK: every delegate runs, even past failures, chaining the
    /// outputs that are results; all failures are returned together.
    pub fn run_all(&self, command: Command) -> Result<()> {
        let mut prev: Option<Value> = None;
        let mut failures = Vec::new();
        for d in &self.delegates {
            match self.call(d, command, prev.as_ref()) {
                Ok(output) => chain(&mut prev, output),
                Err(e) => failures.push((d.name.as_str(), e)),
            }
        }
        combine(command, failures)
    }

    /// GC: forwarded to every delegate, going on past failures.
    pub fn gc(&self) -> Result<()> {
        let failures =
            self.delegates.iter().filter_map(|d| self.call(d, Command::Gc, None).err().map(|e| (d.name.as_str(), e)));
        combine(Command::Gc, failures.collect())
    }

    /// STATUS: ready only if every delegate is.
    pub fn status(&self) -> Result<()> {
        for d in &self.delegates {
            self.call(d, Command::Status, None).map_err(|e| {
                let details = format!("delegate {:?} is not ready{}", d.name, suffix(&e.details));
                e.with_details(details)
            })?;
        }
        Ok(())
    }

    /// Runs one delegate. `prev: None` gives it the configuration exactly as
    /// we received it; otherwise with `prevResult` replaced.
    fn call(&self, d: &Delegate, command: Command, prev: Option<&Value>) -> Result<Option<Value>> {
        tracing::debug!("{} {}", command.as_str(), d.name);
        match prev {
            None => delegate::run(&d.path, command, &self.req.config.bytes, self.timeout),
            Some(p) => {
                let input = self.req.config.with_prev_result(Some(p)).to_string();
                delegate::run(&d.path, command, input.as_bytes(), self.timeout)
            }
        }
    }
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
fn delegate_names(value: Option<&Value>) -> Result<Vec<String>> {
    const FIELD: &str = "ipam.delegates";
    let list = match value {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => return Err(CniError::config(FIELD, "must not be empty")),
        Some(other) => return Err(CniError::config(FIELD, format!("must be an array of names, got {other}"))),
        None => {
            return Err(CniError::config(
                FIELD,
                "missing: name the delegates to run, e.g. [\"ipam-ds-pool\", \"ipam-da-sequential\"]",
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(name) if is_bare_name(name) => Ok(name.to_string()),
            _ => Err(CniError::config(
                &format!("{FIELD}[{i}]"),
                format!("{v} is not a bare executable name (no path separator, not '.' or '..')"),
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
    Err(CniError {
        code: first.code,
        msg,
        details: format!("{} failed by delegate {first_name:?}: {}", command.as_str(), all.join("; ")),
    })
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
    use serde_json::json;
    use shared::Code;

    #[test]
    fn delegate_names_must_be_bare() {
        assert_eq!(delegate_names(Some(&json!(["a", "ipam-da-x"]))).unwrap(), vec!["a", "ipam-da-x"]);
        for bad in [
            json!([]),
            json!("a"),
            json!([1]),
            json!(["a/b"]),
            json!(["."]),
            json!([".."]),
            json!([""]),
            json!(["/bin/true"]),
        ] {
            let e = delegate_names(Some(&bad)).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("ipam.delegates"), "{bad}: {e}");
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
