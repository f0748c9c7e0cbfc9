//! The operator's tool: `ipam-delegated` run with arguments inspects, exports
//! and repairs the allocation database, and prints its own completions and
//! man pages. Runtimes never pass arguments to a CNI plugin, so this never
//! meets a runtime; it reads no stdin and prints no CNI error object: text for
//! people, JSON or Prometheus text for scripts, one error line on stderr.
//! Usage errors and help are clap's.

mod atomic_file;
mod check;
mod cli;
mod cluster;
mod completions;
mod forget_pool;
mod install_cni;
mod list;
mod man;
mod metrics;
mod pools;
mod release;
mod survey;
mod table;
use shared::utc;

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

/// Usage errors exit 2 (clap's own code), operational failures (and
/// problems found by check) 1.
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

/// Runs the tool on the arguments after the executable's name. Cold and
/// never inlined, so that the executable's `main`, which the plugin runs at
/// every container start, does not carry the tool's code (10.8 KiB instead
/// of 21.6 KiB with this inlined into it).
#[cold]
#[inline(never)]
pub fn main(args: &[OsString]) -> ExitCode {
    let invocation = match cli::parse(args) {
        Ok(invocation) => invocation,
        Err(e) => {
            // Help and --version come this way too, for stdout and exit 0.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    match invocation {
        Invocation::Completions(shell) => print(&completions::script(shell)),
        Invocation::Man(dir) => finish(man::run(&dir)),
        // Logging is the configuration's (ipam.logFile): a node released by
        // hand is on record beside the plugins' own lines.
        Invocation::Cluster { conf, command } => finish(cluster::run(&conf, command)),
        Invocation::InstallCni(options) => install_cni::main(&options),
        Invocation::Delegates => print(&crate::builtin::names().map(|name| format!("{name}\n")).collect::<String>()),
        Invocation::Database { database, command } => {
            // Where the plugins log (stderr for warnings; the verbose build's
            // file), so that a release by hand is on record beside theirs.
            let _logging = logging::activate(NAME, &LogSettings::from_ipam(NAME, None));
            finish(absolute(&database).and_then(|database| execute(&database, command)))
        }
    }
}

fn execute(database: &Path, command: Command) -> Result<Report, Failure> {
    match command {
        Command::List { filter, identity, json } => {
            list::run(&mut open_for_reading(database)?, &filter, identity.as_deref(), json)
        }
        Command::Pools { json } => pools::run(&mut open_for_reading(database)?, json),
        Command::Metrics { output } => metrics::run(database, output.as_deref()),
        Command::Release { owner, lock_timeout } => release::run(&mut open(database, lock_timeout)?, &owner),
        Command::ReleaseHolds { identity, network, lock_timeout } => {
            release::holds(&mut open(database, lock_timeout)?, &identity, network.as_deref())
        }
        Command::ForgetPool { network, pool, lock_timeout } => {
            forget_pool::run(&mut open(database, lock_timeout)?, &network, &pool)
        }
        Command::Check => check::run(&mut open_for_reading(database)?),
    }
}

/// Prints what a command reported; its failure, or the command's own, is
/// one line on stderr and exit 1.
fn finish(outcome: Result<Report, Failure>) -> ExitCode {
    let problem = match outcome {
        Ok(Report { stdout, failure: None }) => return print(&stdout),
        Ok(Report { stdout, failure: Some(problem) }) => {
            print(&stdout);
            problem
        }
        Err(Failure(problem)) => problem,
    };
    eprintln!("{NAME}: {problem}");
    ExitCode::from(EXIT_FAILURE)
}

/// Readers take no lock, so the lock timeout is the default one of opening.
fn open_for_reading(database: &Path) -> Result<AllocationStore, Failure> {
    open(database, DEFAULT_LOCK_TIMEOUT)
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
