//! ipam-delegated: runs the IPAM delegates named in `ipam.delegates`, in order,
//! each with the full configuration plus the previous one's result as
//! `prevResult`. A failed ADD is rolled back with DEL on every delegate that ran.
//! Run with arguments, it is the operator's tool over the allocation database
//! (see [`operator`]). Started as a delegate's name, it is that delegate
//! (see [`builtin`]).

mod builtin;
mod delegate;
mod operator;
mod stack;
mod stack_call;
mod vm_identity;

use std::process::ExitCode;

use shared::{About, Builtin, Command, Plugin, Reply, Request, Result};
use stack::Stack;

const ABOUT: About = About {
    name: "ipam-delegated",
    version: env!("CARGO_PKG_VERSION"),
    summary: "runs a stack of IPAM delegates (selection, then allocation)",
};

const OPERATOR_HINT: &str = "Operator commands (list, pools, metrics, release, forget-pool, check) over the \
     allocation database, cluster (blocks, release-node) over etcd, and install-cni (a DaemonSet's installer): \
     ipam-delegated --help";

struct Orchestrator;

impl Plugin for Orchestrator {
    fn add(&self, req: &Request) -> Result<Reply> {
        let resolved = vm_identity::resolved(req)?;
        Stack::new(resolved.as_ref().unwrap_or(req))?.add().map(Reply::Result)
    }

    fn del(&self, req: &Request) -> Result<Reply> {
        let resolved = vm_identity::resolved(req)?;
        Stack::new(resolved.as_ref().unwrap_or(req))?.run_all(Command::Del).map(|()| Reply::Nothing)
    }

    fn check(&self, req: &Request) -> Result<Reply> {
        let resolved = vm_identity::resolved(req)?;
        Stack::new(resolved.as_ref().unwrap_or(req))?.run_all(Command::Check).map(|()| Reply::Nothing)
    }

    fn gc(&self, req: &Request) -> Result<Reply> {
        Stack::new(req)?.gc().map(|()| Reply::Nothing)
    }

    fn status(&self, req: &Request) -> Result<Reply> {
        Stack::new(req)?.status().map(|()| Reply::Nothing)
    }
}

const ORCHESTRATOR: Builtin = Builtin { about: ABOUT, plugin: &Orchestrator };

fn main() -> ExitCode {
    if let Some(delegate) = builtin::started_as().as_deref().and_then(builtin::named) {
        return shared::plugin::run(delegate);
    }
    // Runtimes never pass arguments to a CNI plugin: arguments mean a person.
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    if !args.is_empty() {
        return operator::main(&args);
    }
    // The frame would print the about text too; ours also points at the tool.
    if std::env::var_os("CNI_COMMAND").is_none() {
        eprintln!("{}\n{OPERATOR_HINT}", shared::plugin::about_text(&ABOUT));
        return ExitCode::SUCCESS;
    }
    shared::plugin::run(&ORCHESTRATOR)
}

/// See shared::heap: musl's own allocator gives memory back too eagerly, and
/// a dense heap touches fewer pages.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: shared::heap::Heap = shared::heap::Heap;
