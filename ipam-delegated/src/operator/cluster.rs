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

use super::cli::ClusterCommand;
use super::failure::Failure;
use super::report::{Report, NAME};
use conf::ClusterConf;
use pool_in_store::{cluster_failure, etcd_failure};

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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<super::super::cli::Invocation, clap::error::ErrorKind> {
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        super::super::cli::parse(&args).map_err(|e| e.kind())
    }

    #[test]
    fn the_command_line_takes_conf_before_or_after_the_command() {
        use super::super::cli::Invocation;
        use clap::error::ErrorKind;
        let blocks = Invocation::Cluster { conf: "a.conflist".into(), command: ClusterCommand::Blocks { json: true } };
        assert_eq!(parse(&["cluster", "--conf", "a.conflist", "blocks", "--json"]), Ok(blocks));
        let release = ClusterCommand::ReleaseNode { node: "node-3.rack_1".into(), json: false, gone: false };
        assert_eq!(
            parse(&["cluster", "release-node", "node-3.rack_1", "--conf=a.conflist"]),
            Ok(Invocation::Cluster { conf: "a.conflist".into(), command: release })
        );
        let gone = ClusterCommand::ReleaseNode { node: "n2".into(), json: true, gone: true };
        assert_eq!(
            parse(&["cluster", "--conf", "a", "release-node", "--gone", "n2", "--json"]),
            Ok(Invocation::Cluster { conf: "a".into(), command: gone })
        );
        assert_eq!(
            parse(&["cluster", "reap", "--json", "--conf", "a"]),
            Ok(Invocation::Cluster { conf: "a".into(), command: ClusterCommand::Reap { json: true } })
        );
        assert_eq!(parse(&["cluster", "--conf", "a", "reap", "n2"]), Err(ErrorKind::UnknownArgument));
        assert_eq!(parse(&["cluster", "blocks"]), Err(ErrorKind::MissingRequiredArgument));
        assert_eq!(parse(&["cluster", "--conf", "a"]), Err(ErrorKind::MissingSubcommand));
        assert_eq!(parse(&["cluster", "--conf", "a", "release-node"]), Err(ErrorKind::MissingRequiredArgument));
        for bad in ["a/b", "", "n 1", &"n".repeat(254)] {
            assert_eq!(
                parse(&["cluster", "--conf", "a", "release-node", bad]),
                Err(ErrorKind::ValueValidation),
                "{bad:?}"
            );
        }
        assert_eq!(parse(&["--database", "/d", "cluster", "--conf", "a", "blocks"]), Err(ErrorKind::ArgumentConflict));
        assert_eq!(parse(&["cluster", "--conf", "a", "blocks", "--database", "/d"]), Err(ErrorKind::UnknownArgument));
    }
}
