//! A delegate's answer from what it printed and how it ended, the same for a
//! delegate run in this process and one run as a process.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::Value;
use shared::config::{printed_len, STDIN_LIMIT};
use shared::{CniError, Code, Result};

/// Its output (`None` when blank), or its error object, or error 6 or 5 for
/// output that is not JSON or too long, or for a failure without an error
/// object.
pub(super) fn interpret(name: &str, out: &[u8], status: ExitStatus) -> Result<Option<Value>> {
    within_bound(name, out.len() as u64)?;
    let text = String::from_utf8_lossy(out);
    let parsed: Option<Value> =
        if text.trim().is_empty() { None } else { Some(serde_json::from_str(&text).map_err(|e| (e, text.clone()))) }
            .transpose()
            .map_err(|(e, text)| {
                CniError::decode(&format!("output of delegate {name:?}"), e).with_details(excerpt(&text))
            })?;
    judge(name, parsed, status, || text.to_string())
}

/// [`interpret`] of a delegate that ran in this process and answered with
/// `json`: what its process would have printed is that value's text and a
/// newline, which parses back to the same value.
pub(super) fn interpret_value(name: &str, json: Value, status: ExitStatus) -> Result<Option<Value>> {
    within_bound(name, printed_len(&json) + 1)?;
    // Shown only when it failed without an error object.
    let text = if status.success() { String::new() } else { format!("{json}\n") };
    judge(name, Some(json), status, || text)
}

fn within_bound(name: &str, len: u64) -> Result<()> {
    if len > STDIN_LIMIT {
        return Err(CniError::io_problem(
            &format!("output of delegate {name:?}"),
            format!("more than {STDIN_LIMIT} bytes"),
        ));
    }
    Ok(())
}

/// Its error object, else its output when it succeeded, else an error
/// showing the start of what it printed (`text`).
fn judge(
    name: &str,
    parsed: Option<Value>,
    status: ExitStatus,
    text: impl FnOnce() -> String,
) -> Result<Option<Value>> {
    if let Some(error) = parsed.as_ref().and_then(CniError::from_json) {
        return Err(error);
    }
    if status.success() {
        return Ok(parsed);
    }
    let text = text();
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "failed".to_string(),
    };
    Err(CniError::new(Code::Decode, format!("delegate {name:?} {how} without printing an error object"))
        .with_details(excerpt(&text)))
}

fn excerpt(text: &str) -> String {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("output: {:?}", &text[..end])
}
