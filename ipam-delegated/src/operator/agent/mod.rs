//! `ipam-delegated agent`: the node agent that releases what no runtime
//! releases on Kubernetes. containerd never calls CNI GC, and Multus
//! forwards GC only for the primary network, so the addresses of pods
//! deleted without a DEL (a node crash, a force delete, a DEL that failed)
//! would stay taken. Every `--interval` a pass reads the attachments whose
//! ADD named their pod (the node databases' `attachment_pods`), then makes
//! ONE consistent LIST of the pods bound to this node, and releases, with
//! the stack's DEL, those whose pod has been gone (or replaced by another
//! of the same name) for `--grace` (see [`decide`]). A pass that cannot
//! list the pods releases nothing. The agent holds no state the plugins
//! need: a node without it allocates as well.

mod decide;
mod pods;
mod release;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use shared::logging::{self, LogSettings};
use shared::store::{unix_now, AttachmentPod};

use super::cluster::conf::ClusterConf;
use super::cluster::{open_kubernetes, reap};
use super::database::open_for_reading;
use super::failure::Failure;
use super::install_cni::signals;
use super::report::NAME;
use decide::Candidates;
pub use pods::Credentials;
use release::OwnDelegates;
use serve::Counters;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The node's name; `None`: NODE_NAME, else `node_file`.
    pub node: Option<String>,
    pub node_file: PathBuf,
    pub credentials: Credentials,
    /// The node databases watched.
    pub databases: Vec<PathBuf>,
    pub interval: Duration,
    pub grace: Duration,
    /// Where `/metrics` is served; `None`: nowhere.
    pub metrics_address: Option<String>,
    /// Where delegates other than this program's are found, for the DELs.
    pub cni_path: Vec<PathBuf>,
}

/// Runs passes until SIGTERM or SIGINT, which end it during the wait
/// between two passes, or at the end of the pass in progress (a DEL is
/// never cut short).
pub fn main(options: &Options) -> ExitCode {
    // Before any thread starts, so that every thread has them blocked and
    // the wait below receives them.
    let signals = match signals::block() {
        Ok(signals) => signals,
        Err(e) => return super::report::finish(Err(Failure::BlockSignals(e))),
    };
    let _logging = logging::activate(NAME, &LogSettings::from_ipam(NAME, None));
    let agent = match Agent::start(options) {
        Ok(agent) => agent,
        Err(problem) => return super::report::finish(Err(Failure::Agent(problem))),
    };
    eprintln!(
        "{NAME} agent: node {}, databases {}, every {:?}, grace {:?}",
        agent.node,
        options.databases.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        options.interval,
        options.grace
    );
    let mut candidates = Candidates::default();
    loop {
        agent.pass(options, &mut candidates);
        agent.cluster_duties(options);
        match signals.wait_for(options.interval) {
            Ok(Some(_)) => return ExitCode::SUCCESS,
            Ok(None) => {}
            Err(e) => return super::report::finish(Err(Failure::WaitForSignal(e))),
        }
    }
}

struct Agent {
    node: String,
    own_delegates: OwnDelegates,
    counters: Arc<Counters>,
}

impl Agent {
    fn start(options: &Options) -> Result<Agent, String> {
        let node = pods::node_name(options.node.as_deref(), &options.node_file)?;
        let own_delegates = OwnDelegates::make().map_err(|e| format!("cannot make the delegates' directory: {e}"))?;
        let counters = Arc::new(Counters::default());
        if let Some(address) = &options.metrics_address {
            serve::start(address, options.databases.clone(), Arc::clone(&counters))
                .map_err(|e| format!("cannot serve metrics on {address}: {e}"))?;
        }
        Ok(Agent { node, own_delegates, counters })
    }

    /// One pass: the attachments first, then the pods, so that a pod added
    /// meanwhile is in the list whenever its attachment is in the reading.
    fn pass(&self, options: &Options, candidates: &mut Candidates) {
        self.counters.passes.fetch_add(1, Ordering::Relaxed);
        let attachments = match attachments(&options.databases) {
            Ok(attachments) => attachments,
            Err(e) => return self.failed(&e),
        };
        let pods = match pods::on_node(&options.credentials, &self.node) {
            Ok(pods) => pods,
            Err(e) => return self.failed(&format!("listing the pods of node {}: {e}; nothing released", self.node)),
        };
        let watched = attachments.len();
        let grace = i64::try_from(options.grace.as_secs()).unwrap_or(i64::MAX);
        let release = candidates.pass(attachments, &pods, unix_now(), grace);
        tracing::debug!(
            "{watched} attachments with pods, {} candidates, {} to release",
            candidates.len(),
            release.len()
        );
        let mut failed = false;
        for (database, recorded) in release {
            let attachment = &recorded.attachment;
            match release::release(&database, attachment, &recorded.pod, &self.own_delegates, &options.cni_path) {
                Ok(()) => {
                    tracing::warn!(
                        "released {attachment} of pod {}/{} (uid {}), gone from node {}",
                        recorded.pod.namespace,
                        recorded.pod.name,
                        recorded.pod.uid.as_deref().unwrap_or("not recorded"),
                        self.node
                    );
                    self.counters.released.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    failed = true;
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("{e}");
                }
            }
        }
        if !failed {
            self.counters.last_success.store(unix_now(), Ordering::Relaxed);
        }
    }

    fn failed(&self, problem: &str) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!("{problem}");
    }

    /// The cluster's duties, beside this node's own, for each network in
    /// cluster mode on the Kubernetes API that an ADD on this node was given
    /// (its configuration as recorded): releasing the nodes that are no Node
    /// any more and collecting ended identities, by one agent of the cluster
    /// at a time, the holder of the network's reaper Lease (`cluster reap`'s
    /// pass; every other agent only reads the Lease).
    fn cluster_duties(&self, options: &Options) {
        for database in &options.databases {
            let configs = match open_for_reading(database) {
                Ok(mut store) => match store.read(|tx| tx.network_configs()) {
                    Ok(configs) => configs,
                    Err(e) => return self.failed(&in_database(database, e)),
                },
                Err(Failure::NoDatabase(_)) => continue,
                Err(e) => return self.failed(&in_database(database, e)),
            };
            for (network, config) in configs {
                let on_kubernetes = serde_json::from_str::<serde_json::Value>(&config)
                    .is_ok_and(|c| c["ipam"]["cluster"]["kubernetes"].is_object());
                if on_kubernetes {
                    // Held across the wait to the next pass.
                    let lease = (options.interval * 2).max(ipam_ds_cluster::reaper::lease::DEFAULT_DURATION);
                    self.reap(database, &network, config.as_bytes(), lease);
                }
            }
        }
    }

    fn reap(&self, database: &Path, network: &str, config: &[u8], lease: Duration) {
        let label = PathBuf::from(format!("{} (network {network:?} as its last ADD was given it)", database.display()));
        let reaped = ClusterConf::parse(&label, config).and_then(|conf| {
            let store = open_kubernetes(&conf)?;
            let (reaped, failure) = reap::pass(&conf, &store, &self.node, lease)?;
            let rendered = reaped.rendered();
            Ok((rendered, failure))
        });
        match reaped {
            Ok((rendered, failure)) => {
                tracing::info!("cluster duties of network {network:?}: {}", rendered.trim_end());
                if let Some(failure) = failure {
                    self.failed(&failure.to_string());
                }
            }
            Err(failure) => self.failed(&format!("cluster duties of network {network:?}: {failure}")),
        }
    }
}

/// Every attachment with a pod, of every database; a database not created
/// yet (the plugins create it at their first ADD) has none.
fn attachments(databases: &[PathBuf]) -> Result<Vec<(PathBuf, AttachmentPod)>, String> {
    let mut all = Vec::new();
    for database in databases {
        match open_for_reading(database) {
            Ok(mut store) => {
                let found = store.read(|tx| tx.attachment_pods()).map_err(|e| in_database(database, e))?;
                all.extend(found.into_iter().map(|a| (database.clone(), a)));
            }
            Err(Failure::NoDatabase(_)) => {}
            Err(e) => return Err(in_database(database, e)),
        }
    }
    Ok(all)
}

fn in_database(database: &Path, e: impl std::fmt::Display) -> String {
    format!("reading the attachments of {}: {e}", database.display())
}
