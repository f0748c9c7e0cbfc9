//! The operator's tool: `ipam-delegated` run with arguments inspects, exports
//! and repairs the allocation database, and prints its own completions and
//! man pages. Runtimes never pass arguments to a CNI plugin, so this never
//! meets a runtime; it reads no stdin and prints no CNI error object: text for
//! people, JSON or Prometheus text for scripts, one error line on stderr.
//! Usage errors and help are clap's.

mod agent;
mod atomic_file;
mod check;
mod cli;
mod cluster;
mod completions;
mod database;
mod failure;
mod forget_pool;
mod install_cni;
mod list;
mod man;
mod metrics;
mod pools;
mod release;
mod report;
mod survey;
mod table;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use shared::logging::{self, LogSettings};

use cli::{Command, Invocation};
use database::{absolute, open, open_for_reading};
use failure::Failure;
use report::{finish, print, Report, EXIT_USAGE, NAME};

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
        Invocation::Agent(options) => agent::main(&options),
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
