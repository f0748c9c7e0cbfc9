//! The operator's tool: `ipam-delegated` run with arguments inspects and
//! repairs the allocation database. Runtimes never pass arguments to a CNI
//! plugin, so this never meets a runtime; it reads no stdin and prints no CNI
//! error object: text for people, JSON for scripts, one error line on stderr.

mod check;
mod cli;
mod forget_pool;
mod list;
mod pools;
mod release;
mod table;
mod utc;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use shared::logging::{self, LogSettings};
use shared::store::{AllocationStore, DEFAULT_LOCK_TIMEOUT};
use shared::CniError;

use cli::{Command, Invocation};

const NAME: &str = "ipam-delegated";

/// Usage errors exit 2, operational failures (and problems found by check) 1.
const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 2;

/// What a command prints on stdout, and whether it failed anyway (check
/// finding problems prints them and exits 1 with this one line on stderr).
pub struct Report {
    pub stdout: String,
    pub failure: Option<String>,
}

impl Report {
    fn fine(stdout: String) -> Self {
        Report { stdout, failure: None }
    }
}

/// An operational failure, already worded for the operator.
pub struct Failure(String);

impl From<CniError> for Failure {
    fn from(e: CniError) -> Self {
        if e.details.is_empty() {
            Failure(e.msg)
        } else {
            Failure(format!("{}: {}", e.msg, e.details))
        }
    }
}

/// Runs the tool on the arguments after the executable's name.
pub fn main(args: &[OsString]) -> ExitCode {
    let (database, command) = match cli::parse(args) {
        Ok(Invocation::Help(text)) => return print(&text),
        Ok(Invocation::Version) => return print(&format!("{NAME} {}\n", env!("CARGO_PKG_VERSION"))),
        Ok(Invocation::Run { database, command }) => (database, command),
        Err(e) => {
            eprintln!("{NAME}: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Where the plugins log (stderr for warnings; the verbose build's file),
    // so that a release by hand is on record beside the plugins' own.
    logging::init(NAME, &LogSettings::from_ipam(NAME, None));
    match execute(&database, command) {
        Ok(report) => {
            let printed = print(&report.stdout);
            match report.failure {
                Some(problem) => {
                    eprintln!("{NAME}: {problem}");
                    ExitCode::from(EXIT_FAILURE)
                }
                None => printed,
            }
        }
        Err(Failure(problem)) => {
            eprintln!("{NAME}: {problem}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn execute(database: &Path, command: Command) -> Result<Report, Failure> {
    let database = absolute(database)?;
    match command {
        Command::List { filter, json } => list::run(&mut open(&database, DEFAULT_LOCK_TIMEOUT)?, &filter, json),
        Command::Pools { json } => pools::run(&mut open(&database, DEFAULT_LOCK_TIMEOUT)?, json),
        Command::Release { owner, lock_timeout } => release::run(&mut open(&database, lock_timeout)?, &owner),
        Command::ForgetPool { network, pool, lock_timeout } => {
            forget_pool::run(&mut open(&database, lock_timeout)?, &network, &pool)
        }
        Command::Check => check::run(&mut open(&database, DEFAULT_LOCK_TIMEOUT)?),
    }
}

/// The store, refusing to create one: the plugins create the database on
/// their first ADD, and an operator who typed the wrong path must be told so.
fn open(database: &Path, lock_timeout: Duration) -> Result<AllocationStore, Failure> {
    match std::fs::metadata(database) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(Failure(format!("{} is not a file", database.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Failure(format!("no allocation database at {}", database.display())))
        }
        Err(e) => return Err(Failure(format!("cannot read {}: {e}", database.display()))),
    }
    Ok(AllocationStore::open(database, lock_timeout)?)
}

/// The store wants an absolute path; a relative one is taken from the
/// working directory, as any command-line tool would.
fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path).map_err(|e| Failure(format!("database path {}: {e}", path.display())))
}

/// Writes to stdout; a reader that went away (`| head`) is not our failure.
fn print(text: &str) -> ExitCode {
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
fn to_json(value: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| Failure(format!("bug: cannot render JSON: {e}")))
}
