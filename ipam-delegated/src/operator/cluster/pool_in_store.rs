//! One cluster pool as the cluster's datastore holds it (etcd or the
//! Kubernetes API, through ipam-ds-cluster's `Datastore`): its definition,
//! its blocks' owners and its address records; and the store's failures in
//! the plugins' words.

use std::net::IpAddr;

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::{Datastore, Versioned};
use ipam_ds_cluster::etcd;
use ipam_ds_cluster::records::{shown, AddressRecord, BlockRecord};
use ipnet::IpNet;
use shared::addr::to_u128;

use super::super::failure::Failure;
use super::conf::ClusterConf;

/// A block, and what the commands need of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub text: String,
    /// Its first address as a number: blocks sort in address order.
    pub order: u128,
    pub first: IpAddr,
    pub last: IpAddr,
    /// Its allocatable addresses in the pool (0 when it is none of the
    /// pool's blocks as this configuration cuts them).
    pub size: u128,
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

/// A block's record as read (whose block it is), with its version.
pub struct OwnerEntry {
    pub net: IpNet,
    pub block: Block,
    pub record: BlockRecord,
    pub stored: Versioned,
}

/// An address record as read.
pub struct AddressEntry {
    pub block: Block,
    pub address: IpAddr,
    pub record: AddressRecord,
    /// Its name in the store.
    pub key: String,
    pub stored: Versioned,
}

/// One pool as the cluster's datastore holds it.
pub struct PoolInStore {
    pub definition: Option<Versioned>,
    /// In address order.
    pub owners: Vec<OwnerEntry>,
    /// By block, then by address.
    pub addresses: Vec<AddressEntry>,
}

/// The pool's definition, then its blocks' records and address records
/// (read at once where the store can).
pub fn read_pool(conf: &ClusterConf, datastore: &dyn Datastore, g: &Geometry) -> Result<PoolInStore, Failure> {
    let pool = &g.pool.name;
    let failed = |e: ipam_ds_cluster::datastore::Error| cluster_failure(conf, e.into());
    let definition = datastore.read_pool_index(pool).map_err(failed)?.definition;
    let read = datastore.pool_records(pool).map_err(failed)?;
    let mut found = PoolInStore { definition, owners: Vec::new(), addresses: Vec::new() };
    for b in read.blocks {
        match serde_json::from_slice::<BlockRecord>(&b.stored.value) {
            Ok(record) => {
                found.owners.push(OwnerEntry { net: b.block, block: block(b.block, g), record, stored: b.stored })
            }
            Err(_) => unreadable(&format!("the record of block {}", b.block)),
        }
    }
    for a in read.records {
        match serde_json::from_slice::<AddressRecord>(&a.stored.value) {
            Ok(record) => found.addresses.push(AddressEntry {
                block: block(a.block, g),
                address: a.address,
                record,
                key: a.key,
                stored: a.stored,
            }),
            Err(_) => unreadable(&a.key),
        }
    }
    found.owners.sort_by_key(|o| o.block.order);
    found.addresses.sort_by_key(|a| (a.block.order, to_u128(a.address)));
    Ok(found)
}

fn unreadable(what: &str) {
    tracing::warn!("{} is not a record ipam-delegated knows: left out", shown(what));
}

/// etcd's failure in the plugins' words (ipam-ds-cluster's one mapping:
/// the same problem reads the same from both), on one line.
pub fn etcd_failure(conf: &ClusterConf, e: etcd::Error) -> Failure {
    cluster_failure(conf, ipam_ds_cluster::datastore::etcd::etcd_error(e))
}

/// A failure of the plugins' protocol on the datastore, in their words.
pub fn cluster_failure(conf: &ClusterConf, e: shared::CniError) -> Failure {
    Failure::Etcd { conf: conf.path.clone(), message: e.msg }
}
