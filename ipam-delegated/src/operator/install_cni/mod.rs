//! `install-cni`: the installer a Kubernetes DaemonSet runs on every node
//! (deploy/kubernetes/). It copies this very program into the host's CNI
//! plugin directory, with the delegates' names as symlinks to it (the fast
//! layout of scripts/install), writes the node's name where ipam.cluster.nodeFile
//! reads it, with `--kubeconfig` writes the plugins' kubeconfig from the
//! pod's ServiceAccount ([`kubeconfig`]), copies etcd's TLS files and
//! password and any network configurations, then waits for SIGTERM as
//! DaemonSets expect, writing the kubeconfig again whenever the kubelet
//! refreshes the pod's token ([`watch`]).
//!
//! It reads what it copies ([`sources`]) and what is in place ([`found`]),
//! decides every change before making one ([`plan`]), then makes them
//! ([`apply`]), each file replaced whole so that a runtime starting the
//! plugin meanwhile runs the old program or the new one.
//!
//! What is ours: a program file that holds the build [`marker`] (every
//! build of this program does, and nothing else should), a symlink whose
//! target is exactly `ipam-delegated`, and a data file whose content is what
//! the [`manifest`] `<bin-dir>/.ipam-delegated-installed` says this installer
//! wrote. Nothing else is replaced without `--force`, and `--uninstall`
//! removes only files that are still ours. A foreign file is never run to
//! find out what it is.

mod apply;
mod found;
mod kubeconfig;
mod manifest;
mod marker;
mod plan;
pub mod signals;
mod sources;
mod uninstall;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use super::failure::Failure;
use super::report::{self, Report, NAME};
use crate::builtin;
use plan::{At, DataFile, Wanted};

pub const DEFAULT_BIN_DIR: &str = "/host/opt/cni/bin";
pub const DEFAULT_NODE_FILE: &str = "/host/etc/cni/ipam-delegated/node-name";
pub const DEFAULT_CONF_DIR: &str = "/host/etc/cni/net.d";
pub const DEFAULT_ETCD_DIR: &str = "/host/etc/cni/ipam-delegated/etcd";
pub use kubeconfig::{contents as in_cluster_kubeconfig, DEFAULT_SERVICE_ACCOUNT_DIR};

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub bin_dir: PathBuf,
    pub node_file: PathBuf,
    pub conflists: Vec<PathBuf>,
    pub conf_dir: PathBuf,
    pub etcd_secret: Option<PathBuf>,
    pub etcd_dir: PathBuf,
    /// Where to write the plugins' kubeconfig, if at all.
    pub kubeconfig: Option<PathBuf>,
    pub service_account_dir: PathBuf,
    pub force: bool,
    pub once: bool,
    pub uninstall: bool,
}

/// Installs (or uninstalls), prints what it did, then waits for SIGTERM or
/// SIGINT unless `--once`, keeping a `--kubeconfig` current meanwhile. The signals are blocked first, so that one that
/// comes during the installation ends the wait at once instead of the
/// installation halfway.
pub fn main(options: &Options) -> ExitCode {
    let signals = if options.once { None } else { Some(signals::block()) };
    let outcome = if options.uninstall {
        uninstall::uninstall(&options.bin_dir).map(|report| (report, None))
    } else {
        install(options)
    };
    let (report, kubeconfig) = match outcome {
        Ok(installed) => installed,
        Err(failure) => return report::finish(Err(failure)),
    };
    let code = report::print(&report.stdout);
    match signals {
        None => code,
        Some(Err(e)) => report::finish(Err(Failure::BlockSignals(e))),
        Some(Ok(blocked)) => {
            println!("{NAME} install-cni: done; waiting for SIGTERM or SIGINT");
            let waited = match kubeconfig {
                Some(installed) => watch::until_signal(options, &blocked, installed),
                None => blocked.wait().map_err(Failure::WaitForSignal),
            };
            match waited {
                Ok(signal) => {
                    println!("{NAME} install-cni: signal {signal}, exiting");
                    ExitCode::SUCCESS
                }
                Err(failure) => report::finish(Err(failure)),
            }
        }
    }
}

/// The installation's report, and the contents of the kubeconfig it
/// installed, if any.
fn install(options: &Options) -> Result<(Report, Option<Vec<u8>>), Failure> {
    let node = sources::node_name()?;
    let program = sources::own_program()?;
    let manifest_file = manifest::path(&options.bin_dir);
    let installed = manifest::read(&manifest_file)?;
    let recorded = installed.as_ref().map(manifest::Manifest::recorded).unwrap_or_default();

    let program_path = options.bin_dir.join(NAME);
    let mut wanted = Wanted {
        bin_dir: options.bin_dir.clone(),
        private_dir: options.etcd_dir.clone(),
        program: At { found: found::program(&program_path, &program)?, path: program_path },
        links: Vec::new(),
        files: Vec::new(),
    };
    for delegate in builtin::names() {
        let path = options.bin_dir.join(delegate);
        wanted.links.push(At { found: found::link(&path)?, path });
    }
    let mut wanted_file = |path: PathBuf, contents: Vec<u8>, mode: u32, rewritten_from| -> Result<(), Failure> {
        let at = At { found: found::data_file(&path)?, path };
        wanted.files.push(DataFile { at, contents, mode, rewritten_from });
        Ok(())
    };
    wanted_file(options.node_file.clone(), format!("{node}\n").into_bytes(), 0o644, None)?;
    let kubeconfig = match &options.kubeconfig {
        Some(path) => {
            let contents = kubeconfig::contents(&options.service_account_dir)?;
            wanted_file(path.clone(), contents.clone(), 0o600, Some(kubeconfig::HEADER.as_bytes()))?;
            Some(contents)
        }
        None => None,
    };
    let mut data_file = |path, contents, mode| wanted_file(path, contents, mode, None);
    let mut no_secret = None;
    if let Some(secret) = &options.etcd_secret {
        let files = sources::secret_files(secret)?;
        if files.is_empty() {
            no_secret = Some(format!("no etcd files: {} is empty (no Secret)\n", secret.display()));
        }
        for (name, contents) in files {
            data_file(options.etcd_dir.join(name), contents, 0o600)?;
        }
    }
    for (name, contents) in sources::network_configurations(&options.conflists)? {
        data_file(options.conf_dir.join(name), contents, 0o644)?;
    }

    let plan = plan::plan(wanted, &recorded, options.force)?;
    let mut out = apply::install(&plan, recorded, installed.as_ref(), &program, &manifest_file)?;
    out += &format!("node name {node} in {}\n", options.node_file.display());
    out += no_secret.as_deref().unwrap_or_default();
    Ok((Report::fine(out), kubeconfig))
}
