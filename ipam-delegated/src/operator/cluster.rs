//! `cluster --conf CONFLIST …`: cluster mode (ipam-ds-cluster) from the
//! operator's side. The datastore's settings (`ipam.cluster`: etcd or the
//! Kubernetes API), the pools (`ipam.pools`) and this node's database
//! (`ipam.database`) are those of the network configuration named, as the
//! plugins read them; the store is read and written through
//! ipam-ds-cluster's own `Datastore`, as the plugins do.
//!
//! `blocks` only reads. `release-node` writes, each change compared with
//! the record as read, so that a record that changed since it was read (its
//! node alive after all, or a new claim) is read again rather than
//! overwritten.

mod blocks;
pub mod conf;
mod pool_in_store;
pub mod reap;
mod release_node;

use std::path::Path;

use ipam_ds_cluster::datastore::etcd::EtcdStore;
use ipam_ds_cluster::datastore::kubernetes::KubeStore;
use ipam_ds_cluster::datastore::Datastore;
use ipam_ds_cluster::etcd;
use ipam_ds_cluster::settings::Store;
use shared::logging::{self, LogSettings};

use super::failure::Failure;
use super::report::{Report, NAME};
use conf::ClusterConf;
use pool_in_store::{cluster_failure, etcd_failure};

/// A `cluster` command, as the command line gives it (`cli`).
#[derive(Debug, PartialEq)]
pub enum ClusterCommand {
    Blocks { json: bool },
    ReleaseNode { node: String, json: bool, gone: bool },
    Reap { json: bool },
}

pub fn run(path: &Path, command: ClusterCommand) -> Result<Report, Failure> {
    let conf = ClusterConf::read(path)?;
    // The configuration's logging (ipam.logFile, ipam.logLevel): what an
    // operator changed in etcd is on record beside the plugins' own lines.
    let _logging = logging::activate(NAME, &LogSettings::from_ipam(NAME, conf.netconf.ipam().ok()));
    conf.settings.warn_weak();
    match command {
        ClusterCommand::Blocks { json } => blocks::run(&conf, open(&conf)?.as_ref(), json),
        ClusterCommand::ReleaseNode { node, json, gone } => {
            release_node::run(&conf, open(&conf)?.as_ref(), &node, json, gone)
        }
        ClusterCommand::Reap { json } => reap::run(&conf, &open_kubernetes(&conf)?, json),
    }
}

/// The configuration's datastore, etcd or the Kubernetes API.
fn open(conf: &ClusterConf) -> Result<Box<dyn Datastore>, Failure> {
    Ok(match &conf.settings.store {
        Store::Etcd { client, prefix } => {
            let client = etcd::Client::new(client.clone()).map_err(|e| etcd_failure(conf, e))?;
            Box::new(EtcdStore::over(client, prefix, &conf.settings, &conf.network))
        }
        Store::Kubernetes(_) => Box::new(open_kubernetes(conf)?),
    })
}

/// The configuration's datastore, which must be the Kubernetes API's
/// (`reap`: its API server lists the cluster's nodes; the node agent's
/// passes open it here too).
pub fn open_kubernetes(conf: &ClusterConf) -> Result<KubeStore, Failure> {
    let Store::Kubernetes(kube) = &conf.settings.store else {
        return Err(Failure::ClusterConf {
            conf: conf.path.clone(),
            problem: "cluster reap needs the Kubernetes datastore (ipam.cluster.kubernetes), whose API server lists \
                      the cluster's nodes; on etcd, release a deleted node with release-node"
                .to_string(),
        });
    };
    KubeStore::open(kube, &conf.settings, &conf.network, None).map_err(|e| cluster_failure(conf, e))
}
