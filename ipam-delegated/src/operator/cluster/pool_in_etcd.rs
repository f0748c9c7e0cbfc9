//! One cluster pool as etcd holds it: its definition, its blocks' owners
//! and its address records, read in one request (one revision), in
//! ipam-ds-cluster's layout; and etcd's failures in the plugins' words.

use std::net::IpAddr;

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::etcd::layout::PoolKeys;
use ipam_ds_cluster::etcd::{self, Kv, RangeRequest};
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

/// A block record (`blocks/<block>`) as read, with its etcd revision.
pub struct OwnerEntry {
    pub block: Block,
    pub record: BlockRecord,
    pub kv: Kv,
}

/// An address record (`addrs/<block>/<ip>`) as read.
pub struct AddressEntry {
    pub block: Block,
    pub address: IpAddr,
    pub record: AddressRecord,
    pub kv: Kv,
}

/// One pool as etcd holds it, read in one request (one revision).
pub struct PoolInEtcd {
    pub definition: Option<Kv>,
    /// In address order.
    pub owners: Vec<OwnerEntry>,
    /// In key order: by block, then by address text.
    pub addresses: Vec<AddressEntry>,
    /// Keys of the pool that do not read as the layout's records.
    pub unreadable: Vec<String>,
}

/// Everything under the pool's prefix.
pub fn read_pool(
    conf: &ClusterConf,
    client: &etcd::Client,
    keys: &PoolKeys,
    g: &Geometry,
) -> Result<PoolInEtcd, Failure> {
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
pub fn etcd_failure(conf: &ClusterConf, e: etcd::Error) -> Failure {
    protocol_failure(conf, ipam_ds_cluster::datastore::etcd::etcd_error(e))
}

/// A failure of the plugins' protocol, as the plugins say it.
pub fn protocol_failure(conf: &ClusterConf, e: shared::CniError) -> Failure {
    Failure::Etcd { conf: conf.path.clone(), message: e.msg }
}
