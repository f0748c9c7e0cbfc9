//! `cluster --conf CONFLIST …`: cluster mode (ipam-ds-cluster) from the
//! operator's side. The etcd settings (`ipam.cluster`), the pools
//! (`ipam.pools`) and this node's database (`ipam.database`) are those of
//! the network configuration named, as the plugins read them; the etcd keys
//! are ipam-ds-cluster's own layout ([`ipam_ds_cluster::datastore::etcd::layout`]).
//!
//! `blocks` only reads. `release-node` writes etcd, each change under a
//! compare of the record's mod_revision, so that a record that changed since
//! it was read (its node alive after all, or a new claim) is read again
//! rather than overwritten.

mod blocks;
mod conf;
pub mod notes;
mod release_node;

use std::net::IpAddr;

use ipnet::IpNet;
use std::path::Path;
use std::time::Duration;

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::etcd::layout::PoolKeys;
use ipam_ds_cluster::datastore::etcd::EtcdStore;
use ipam_ds_cluster::etcd::{self, Kv, RangeRequest};
use ipam_ds_cluster::records::{shown, AddressRecord, BlockRecord};
use shared::addr::to_u128;
use shared::logging::{self, LogSettings};

use super::cli::ClusterCommand;
use super::{Failure, Report, NAME};
use conf::ClusterConf;

pub fn run(path: &Path, command: ClusterCommand) -> Result<Report, Failure> {
    let conf = ClusterConf::read(path)?;
    // The configuration's logging (ipam.logFile, ipam.logLevel): what an
    // operator changed in etcd is on record beside the plugins' own lines.
    let _logging = logging::activate(NAME, &LogSettings::from_ipam(NAME, conf.netconf.ipam().ok()));
    conf.settings.warn_weak();
    let client = etcd::Client::new(conf.settings.etcd.clone()).map_err(|e| etcd_failure(&conf, e))?;
    let datastore = EtcdStore::over(client, &conf.settings, &conf.network);
    match command {
        ClusterCommand::Blocks { json } => blocks::run(&conf, datastore.client(), json),
        ClusterCommand::ReleaseNode { node, json, gone } => release_node::run(&conf, &datastore, &node, json, gone),
    }
}

/// A block, and what the commands need of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    text: String,
    /// Its first address as a number: blocks sort in address order.
    order: u128,
    first: IpAddr,
    last: IpAddr,
    /// Its allocatable addresses in the pool (0 when it is none of the
    /// pool's blocks as this configuration cuts them).
    size: u128,
}

/// The [`Block`] `net` of `g`'s pool.
fn block(net: IpNet, g: &Geometry) -> Block {
    Block {
        text: net.to_string(),
        order: to_u128(net.network()),
        first: net.network(),
        last: net.broadcast(),
        size: g.node_view(&[net], &[], &[]).map_or(0, |view| view.capacity()),
    }
}

/// A block record (`blocks/<block>`) as read, with its etcd revision.
struct OwnerEntry {
    block: Block,
    record: BlockRecord,
    kv: Kv,
}

/// An address record (`addrs/<block>/<ip>`) as read.
struct AddressEntry {
    block: Block,
    address: IpAddr,
    record: AddressRecord,
    kv: Kv,
}

/// One pool as etcd holds it, read in one request (one revision).
struct PoolInEtcd {
    definition: Option<Kv>,
    /// In address order.
    owners: Vec<OwnerEntry>,
    /// In key order: by block, then by address text.
    addresses: Vec<AddressEntry>,
    /// Keys of the pool that do not read as the layout's records.
    unreadable: Vec<String>,
}

/// Everything under the pool's prefix.
fn read_pool(conf: &ClusterConf, client: &etcd::Client, keys: &PoolKeys, g: &Geometry) -> Result<PoolInEtcd, Failure> {
    let answer = client.range(&RangeRequest::prefix(keys.all())).map_err(|e| etcd_failure(conf, e))?;
    let mut pool = PoolInEtcd { definition: None, owners: Vec::new(), addresses: Vec::new(), unreadable: Vec::new() };
    let definition = keys.definition();
    for kv in answer.kvs {
        let key = String::from_utf8_lossy(&kv.key).into_owned();
        if key == definition {
            pool.definition = Some(kv);
        } else if let Some(net) = keys.parse_block(&kv.key) {
            match serde_json::from_slice::<BlockRecord>(&kv.value) {
                Ok(record) => pool.owners.push(OwnerEntry { block: block(net, g), record, kv }),
                Err(_) => pool.unreadable.push(key),
            }
        } else if let Some((net, address)) = keys.parse_address(&kv.key) {
            match serde_json::from_slice::<AddressRecord>(&kv.value) {
                Ok(record) => pool.addresses.push(AddressEntry { block: block(net, g), address, record, kv }),
                Err(_) => pool.unreadable.push(key),
            }
        } else if key != keys.wanted() {
            pool.unreadable.push(key);
        }
    }
    pool.owners.sort_by_key(|o| o.block.order);
    for key in &pool.unreadable {
        tracing::warn!("etcd key {} is not a record of the layout ipam-delegated knows: left out", shown(key));
    }
    Ok(pool)
}

/// etcd's failure in the plugins' words (ipam-ds-cluster's one mapping:
/// the same problem reads the same from both), on one line.
fn etcd_failure(conf: &ClusterConf, e: etcd::Error) -> Failure {
    failure(conf, ipam_ds_cluster::datastore::etcd::etcd_error(e))
}

/// A failure of the plugins' protocol, as the plugins say it, on one line.
fn failure(conf: &ClusterConf, e: shared::CniError) -> Failure {
    Failure(one_line(&format!("{}: {}", conf.path.display(), e.msg)))
}

/// Line breaks (from etcd's messages) would break the one-line error.
fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).map(str::trim).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Seconds as people write them: `30`, `2.5`.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        return d.as_secs().to_string();
    }
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `1 block`, `2 blocks`.
fn count(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// Figures above 2^53 (an IPv6 pool's block count) become strings, as in
/// `pools --json`: most JSON readers hold numbers as doubles.
fn exact_figure<S: serde::Serializer>(figure: &u128, out: S) -> Result<S::Ok, S::Error> {
    const EXACT_IN_A_DOUBLE: u128 = 1 << 53;
    if *figure > EXACT_IN_A_DOUBLE {
        out.serialize_str(&figure.to_string())
    } else {
        out.serialize_u128(*figure)
    }
}

fn exact_option<S: serde::Serializer>(figure: &Option<u128>, out: S) -> Result<S::Ok, S::Error> {
    match figure {
        Some(n) => exact_figure(n, out),
        None => out.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_counts_read_as_written() {
        assert_eq!(seconds(Duration::from_secs(300)), "300");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5");
        assert_eq!(seconds(Duration::from_millis(1)), "0.001");
        assert_eq!(count(1, "block"), "1 block");
        assert_eq!(count(0, "address record"), "0 address records");
    }

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

    #[test]
    fn errors_stay_on_one_line() {
        assert_eq!(one_line("a\nb\r\n c"), "a b c");
    }
}
