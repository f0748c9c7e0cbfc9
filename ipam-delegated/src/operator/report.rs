//! What a command hands back, and how it reaches the operator: its report on
//! stdout (text for people, JSON or Prometheus text for scripts), or a
//! [`Failure`] as one line on stderr and exit 1.

use std::io::{self, Write};
use std::process::ExitCode;

use super::failure::Failure;

/// The tool's name: its clap command, the prefix of its error lines, its
/// file in the CNI plugin directory.
pub const NAME: &str = "ipam-delegated";

/// Usage errors exit 2 (clap's own code), operational failures (and
/// problems found by check) 1.
const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// What a command prints on stdout, and whether it failed anyway (check
/// finding problems prints them and exits 1 with this one line on stderr).
pub struct Report {
    pub stdout: String,
    pub failure: Option<Failure>,
}

impl Report {
    pub fn fine(stdout: String) -> Self {
        Report { stdout, failure: None }
    }
}

/// Prints what a command reported; its failure, or the command's own, is
/// one line on stderr and exit 1.
pub fn finish(outcome: Result<Report, Failure>) -> ExitCode {
    let failure = match outcome {
        Ok(Report { stdout, failure: None }) => return print(&stdout),
        Ok(Report { stdout, failure: Some(failure) }) => {
            print(&stdout);
            failure
        }
        Err(failure) => failure,
    };
    eprintln!("{NAME}: {failure}");
    ExitCode::from(EXIT_FAILURE)
}

/// Writes to stdout; a reader that went away (`| head`) is not our failure.
pub fn print(text: &str) -> ExitCode {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: cannot write to stdout: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Pretty JSON with a final newline; serde_json writes u128 figures exactly.
pub fn to_json(value: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| Failure::Bug(format!("cannot render JSON: {e}")))
}

/// Figures above 2^53 (an IPv6 pool's size or block count) become strings:
/// most JSON readers (jq, JavaScript) hold numbers as doubles and would
/// round them.
pub fn exact_figure<S: serde::Serializer>(figure: &u128, out: S) -> Result<S::Ok, S::Error> {
    const EXACT_IN_A_DOUBLE: u128 = 1 << 53;
    if *figure > EXACT_IN_A_DOUBLE {
        out.serialize_str(&figure.to_string())
    } else {
        out.serialize_u128(*figure)
    }
}

/// [`exact_figure`], or null.
pub fn exact_option<S: serde::Serializer>(figure: &Option<u128>, out: S) -> Result<S::Ok, S::Error> {
    match figure {
        Some(n) => exact_figure(n, out),
        None => out.serialize_none(),
    }
}

/// `1 block`, `2 blocks`.
pub fn count(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_written() {
        assert_eq!(count(1, "block"), "1 block");
        assert_eq!(count(0, "address record"), "0 address records");
    }

    #[test]
    fn figures_beyond_a_double_are_exact_strings() {
        #[derive(serde::Serialize)]
        struct Figures {
            #[serde(serialize_with = "exact_figure")]
            small: u128,
            #[serde(serialize_with = "exact_option")]
            large: Option<u128>,
            #[serde(serialize_with = "exact_option")]
            none: Option<u128>,
        }
        let json = serde_json::to_string(&Figures { small: 1 << 53, large: Some((1 << 53) + 1), none: None });
        assert_eq!(json.expect("json"), r#"{"small":9007199254740992,"large":"9007199254740993","none":null}"#);
    }
}
