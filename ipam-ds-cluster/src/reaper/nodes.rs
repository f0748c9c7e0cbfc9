//! Which nodes of a network are deleted from the cluster: those that hold
//! something in the datastore (a block not yet released, an address
//! record, a live workload identity) and are not among the cluster's
//! nodes. The datastore's side is store-neutral; the cluster's nodes are,
//! on Kubernetes, one LIST of `nodes` (a node's name in the datastore is
//! its Kubernetes Node's: the installer writes `spec.nodeName` to the
//! nodeFile).

use std::collections::BTreeSet;

use shared::pool::Pool;
use shared::Result;

use crate::datastore::Datastore;
use crate::kube::{self, Client, Resource, Selectors};
use crate::records::{AddressRecord, BlockRecord, IdentityRecord};

const NODES: Resource = Resource { group: "", version: "v1", plural: "nodes" };

/// The names of the cluster's Node objects: one consistent LIST (not the
/// API server's cache, which may be behind and miss a node just created).
pub fn cluster_nodes(client: &Client) -> std::result::Result<BTreeSet<String>, kube::Error> {
    let list = client.list(&NODES, &Selectors::default())?;
    Ok(list.outcome.items.iter().filter_map(|node| node.name().map(str::to_string)).collect())
}

/// The nodes that hold, in `pools` of the datastore's network, a block not
/// released, an address record, or a live workload identity.
pub fn nodes_holding(datastore: &dyn Datastore, pools: &[Pool]) -> Result<BTreeSet<String>> {
    let mut holding = BTreeSet::new();
    for pool in pools {
        let read = datastore.pool_records(&pool.name)?;
        for b in read.blocks {
            match serde_json::from_slice::<BlockRecord>(&b.stored.value) {
                Ok(block) if !block.released => drop(holding.insert(block.node)),
                _ => {}
            }
        }
        for a in read.records {
            if let Ok(record) = serde_json::from_slice::<AddressRecord>(&a.stored.value) {
                holding.insert(record.node);
            }
        }
    }
    for (_, _, stored) in datastore.identities()? {
        if let Ok(identity) = serde_json::from_slice::<IdentityRecord>(&stored.value) {
            if !identity.is_held() {
                holding.insert(identity.node);
            }
            holding.extend(identity.sharers.into_iter().map(|s| s.node));
        }
    }
    // A held identity's records name no node.
    holding.remove("");
    Ok(holding)
}

/// Of the nodes holding something in the network, those that are not in
/// `cluster` (the names of its nodes).
pub fn deleted_nodes(datastore: &dyn Datastore, pools: &[Pool], cluster: &BTreeSet<String>) -> Result<Vec<String>> {
    Ok(nodes_holding(datastore, pools)?.difference(cluster).cloned().collect())
}
