//! `cluster release-node NODE`: hands a dead node's blocks and address
//! records back to the cluster.
//!
//! A block cannot be free at once: NODE, if it is in fact alive but cut off
//! from etcd, may still allocate in a block it confirmed within offlineGrace,
//! and an ADD that confirmed it may still be allocating for about three
//! ipam.timeouts. So each block record becomes a `released` one (NODE's
//! plugins stop using the block at their next read of the store) that
//! lasts that long, timed by the store (on etcd a tombstone under a lease,
//! on the Kubernetes API an end by the API server's clock); then the block
//! can be claimed. Address records are deleted at once: they only keep
//! an address from others; one of an address another node lent (borrowed,
//! or reserved by name) goes back to its lender as lent, as NODE's own DEL
//! would have done, since the lender still holds it.
//!
//! The wait is NODE's: its offlineGrace and ipam.timeout as its plugins
//! recorded them in etcd (`_nodes/NODE`), when longer than the operator's
//! conflist says; an operator's conflist with a shorter grace must not free
//! blocks NODE may still be allocating in. NODE's entry is deleted too, so
//! that a new database may run under the name.
//!
//! Workload identities (ipam-da-sticky) live on NODE go first: each is held
//! for its identity for `ipam.sticky.hold` under an etcd lease, its
//! addresses' records with it, so that the workload comes back with its
//! address on another node (one shared with another node's attachment
//! passes to that one, the records naming it). A record that is an
//! identity's is thus no longer NODE's when its records are deleted; an
//! identity that kept changing meanwhile stops the command before any of
//! NODE's records is deleted.

use std::time::Duration;

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::{Datastore, RecordRelease, Versioned};
use ipam_ds_cluster::node::release_node_identities;
use ipam_ds_cluster::records::{shown, to_bytes, Kind, NodeEntry};
use serde::Serialize;
use shared::store::unix_now;
use shared::utc;

use super::super::failure::Failure;
use super::super::report::{count, to_json, Report};
use super::conf::ClusterConf;
use super::pool_in_store::{cluster_failure, read_pool};

/// How many times a pool is read again when records changed under the
/// changes (each change compares the record's mod_revision).
const ROUNDS: usize = 3;

/// What release-node did, as `--json` prints it.
#[derive(Serialize)]
pub struct Document<'a> {
    network: &'a str,
    node: String,
    blocks: Vec<ReleasedBlock>,
    records: Vec<DeletedRecord>,
    /// NODE's live workload identities: what became of each (left out
    /// when none, as the document was before identities).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    identities: Vec<ReleasedIdentity>,
    /// How long the released blocks stay unclaimable: offlineGrace + 3 ×
    /// ipam.timeout, rounded up to whole seconds.
    claimable_in_seconds: Option<i64>,
    /// When, UTC (null when no block was released).
    claimable_at: Option<String>,
    /// Released as gone for good: blocks deleted, claimable at once.
    gone: bool,
}

impl<'a> Document<'a> {
    fn of(conf: &'a ClusterConf, node: &str, gone: bool) -> Document<'a> {
        Document {
            network: &conf.network,
            node: node.to_string(),
            blocks: Vec::new(),
            records: Vec::new(),
            identities: Vec::new(),
            claimable_in_seconds: None,
            claimable_at: None,
            gone,
        }
    }

    /// Whether nothing was released.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.records.is_empty() && self.identities.is_empty()
    }
}

#[derive(Serialize)]
struct ReleasedIdentity {
    key: String,
    outcome: String,
}

#[derive(Serialize)]
struct ReleasedBlock {
    pool: String,
    block: String,
    /// When NODE claimed it, UTC.
    claimed: String,
}

#[derive(Serialize)]
struct DeletedRecord {
    pool: String,
    address: String,
    kind: &'static str,
    container: String,
    ifname: String,
    /// The node that lent the address, to which it went back as lent; null
    /// when the record was deleted.
    returned_to: Option<String>,
}

/// How long NODE may still allocate in a block after its release, and whose
/// settings say so.
struct Wait {
    offline_grace: Duration,
    call_timeout: Duration,
    /// Read from NODE's entry in etcd (else the operator's conflist).
    nodes_own: bool,
}

impl Wait {
    /// The operator's conflist's.
    fn of(conf: &ClusterConf) -> Wait {
        Wait { offline_grace: conf.settings.offline_grace, call_timeout: conf.call_timeout, nodes_own: false }
    }

    /// NODE's own, as its entry `entry` says, when longer than the
    /// operator's conflist's.
    fn for_node(conf: &ClusterConf, entry: Option<&Versioned>) -> Wait {
        let operators = Wait::of(conf);
        let nodes = entry.and_then(|read| serde_json::from_slice::<NodeEntry>(&read.value).ok()).and_then(|e| {
            let seconds =
                |s: f64| Duration::try_from_secs_f64(s).ok().filter(|d| *d <= Duration::from_secs(86_400 * 2));
            Some(Wait { offline_grace: seconds(e.offline_grace)?, call_timeout: seconds(e.timeout)?, nodes_own: true })
        });
        match nodes {
            Some(nodes) if nodes.window() > operators.window() => nodes,
            _ => operators,
        }
    }

    fn window(&self) -> Duration {
        self.offline_grace + self.call_timeout * 3
    }
}

pub fn run(
    conf: &ClusterConf,
    datastore: &dyn Datastore,
    node: &str,
    json: bool,
    gone: bool,
) -> Result<Report, Failure> {
    let released = release(conf, datastore, node, gone);
    let stdout = if json { to_json(&released.document)? } else { released.rendered() };
    match (released.failure, released.document.is_empty()) {
        // Nothing was done: the failure alone.
        (Some(problem), true) => Err(problem),
        (failure, _) => Ok(Report { stdout, failure }),
    }
}

/// NODE's grace: how long it may still allocate after its release
/// (offlineGrace + 3 × ipam.timeout, its own when longer than the
/// conflist's), which the reaper also waits out before releasing a node
/// missing from the cluster.
pub fn grace_of(conf: &ClusterConf, datastore: &dyn Datastore, node: &str) -> Result<Duration, Failure> {
    let entry = datastore.node_entry_of(node).map_err(|e| cluster_failure(conf, e.into()))?;
    Ok(Wait::for_node(conf, entry.as_ref()).window())
}

/// What [`release`] did with one node.
pub struct Released<'a> {
    pub document: Document<'a>,
    wait: Wait,
    ttl: i64,
    /// What stopped it; what it did before is in `document`.
    pub failure: Option<Failure>,
}

impl Released<'_> {
    /// The text `release-node` prints.
    pub fn rendered(&self) -> String {
        render(&self.document, &self.wait, self.ttl, self.document.claimable_at.as_deref().unwrap_or_default())
    }
}

/// Releases NODE (see the module's doc): its identities, then its blocks
/// and records pool by pool, then its entry; stops at the first failure.
pub fn release<'a>(conf: &'a ClusterConf, datastore: &dyn Datastore, node: &str, gone: bool) -> Released<'a> {
    let failed = |e: ipam_ds_cluster::datastore::Error| cluster_failure(conf, e.into());
    let entry = match datastore.node_entry_of(node) {
        Ok(entry) => entry,
        Err(e) => {
            let document = Document::of(conf, node, gone);
            return Released { document, wait: Wait::of(conf), ttl: 0, failure: Some(failed(e)) };
        }
    };
    let wait = Wait::for_node(conf, entry.as_ref());
    // Gone for good: nothing to wait out.
    let ttl = if gone { 0 } else { (wait.window().as_secs_f64().ceil() as i64).max(1) };
    let block_wait = (!gone).then(|| Duration::from_secs(ttl as u64));
    let mut done = Document::of(conf, node, gone);
    let mut failure = None;
    // Before the records go: an identity's are held with it.
    let hold = match shared::sticky::Sticky::of(&conf.netconf) {
        Ok(Some(sticky)) => sticky.hold,
        _ => shared::sticky::DEFAULT_HOLD,
    };
    match release_node_identities(datastore, &conf.pools, node, hold) {
        Ok(released) => {
            for r in released {
                tracing::info!("operator release-node: identity {}: {}", r.identity_key, r.outcome);
                // Its records may be the identity's: none of the node's is
                // deleted while it is unsettled.
                if !r.settled {
                    failure =
                        Some(Failure::IdentityKeptChanging { key: shown(&r.identity_key), node: node.to_string() });
                }
                done.identities.push(ReleasedIdentity { key: r.identity_key, outcome: r.outcome });
            }
        }
        Err(e) => failure = Some(cluster_failure(conf, e)),
    }
    for pool in conf.pools.iter().filter(|_| failure.is_none()) {
        if let Err(problem) = release_pool(conf, datastore, pool, node, block_wait, &mut done) {
            failure = Some(problem);
            break;
        }
    }
    if let (None, Some(read)) = (&failure, &entry) {
        // Compared: a node that registered again meanwhile is alive and keeps its entry.
        match datastore.forget_node(node, read) {
            Ok(true) => tracing::info!("operator release-node: deleted node {node}'s entry"),
            Ok(false) => {
                tracing::warn!("operator release-node: node {node}'s entry changed meanwhile (is it alive?): kept")
            }
            Err(e) => failure = Some(failed(e)),
        }
    }
    if !done.blocks.is_empty() {
        done.claimable_in_seconds = Some(ttl);
        done.claimable_at = Some(utc::iso8601(unix_now() + ttl));
    }
    Released { document: done, wait, ttl, failure }
}

/// One pool: reads it, then releases NODE's blocks and its records, each
/// only if unchanged since read; what changed meanwhile is read again.
fn release_pool(
    conf: &ClusterConf,
    datastore: &dyn Datastore,
    pool: &shared::pool::Pool,
    node: &str,
    wait: Option<Duration>,
    done: &mut Document,
) -> Result<(), Failure> {
    let g = Geometry::of(pool);
    let failed = |e: ipam_ds_cluster::datastore::Error| cluster_failure(conf, e.into());
    for _ in 0..ROUNDS {
        let found = read_pool(conf, datastore, &g)?;
        let blocks: Vec<_> = found.owners.iter().filter(|o| o.record.node == node && !o.record.released).collect();
        let records: Vec<_> = found.addresses.iter().filter(|a| a.record.node == node).collect();
        if blocks.is_empty() && records.is_empty() {
            return Ok(());
        }
        let mut changed = false;
        for o in blocks {
            if !datastore.release_block(&pool.name, o.net, &o.stored, wait).map_err(failed)? {
                changed = true;
                continue;
            }
            let claimable = wait.map_or("at once".to_string(), |w| format!("in {}s", w.as_secs()));
            tracing::info!(
                "operator release-node: released block {} of pool {} of network {} (node {node}'s since {}); \
                 claimable again {claimable}",
                o.block.text,
                pool.name,
                conf.network,
                utc::iso8601(o.record.at)
            );
            done.blocks.push(ReleasedBlock {
                pool: pool.name.clone(),
                block: o.block.text.clone(),
                claimed: utc::iso8601(o.record.at),
            });
        }
        for a in records {
            let back = a.record.released();
            let lender = back.as_ref().map(|lent| &lent.node);
            let release = RecordRelease { key: &a.key, value: &a.stored.value, then: back.as_ref().map(to_bytes) };
            let released = datastore.release(std::slice::from_ref(&release)).pop().unwrap_or(Ok(false));
            if !released.map_err(failed)? {
                changed = true;
                continue;
            }
            let kind = Kind::as_str(a.record.kind);
            let what =
                lender.map_or("deleted".to_string(), |lender| format!("gave back to its lender {}", shown(lender)));
            tracing::info!(
                "operator release-node: {what} the {kind} record of {} (pool {} of network {}) of node {node}",
                a.address,
                pool.name,
                conf.network
            );
            done.records.push(DeletedRecord {
                pool: pool.name.clone(),
                address: a.address.to_string(),
                kind,
                container: shown(&a.record.container),
                ifname: shown(&a.record.ifname),
                returned_to: lender.map(|lender| shown(lender)),
            });
        }
        if !changed {
            return Ok(());
        }
    }
    Err(Failure::RecordsKeptChanging { node: node.to_string(), pool: pool.name.clone() })
}

fn render(done: &Document, wait: &Wait, ttl: i64, claimable_at: &str) -> String {
    let (node, network) = (done.node.as_str(), done.network);
    let mut out = String::new();
    for i in &done.identities {
        out.push_str(&format!("identity {}: {}\n", i.key, i.outcome));
    }
    if done.blocks.is_empty() && done.records.is_empty() {
        out.push_str(&format!(
            "node {node} holds no block and no address record in network {network}: nothing {}released\n",
            if done.identities.is_empty() { "" } else { "else " }
        ));
        return out;
    }
    for b in &done.blocks {
        out.push_str(&format!("released block {} of pool {} (node {node}'s since {})\n", b.block, b.pool, b.claimed));
    }
    for r in &done.records {
        let holder = match (r.container.as_str(), r.ifname.as_str()) {
            ("", _) => String::new(),
            (container, "") => format!(", container {container}"),
            (container, ifname) => format!(", container {container} interface {ifname}"),
        };
        let action = match &r.returned_to {
            Some(lender) => format!("gave back to its lender {lender}"),
            None => "deleted".to_string(),
        };
        out.push_str(&format!("{action} the {} record of {} (pool {}{holder})\n", r.kind, r.address, r.pool));
    }
    if done.blocks.is_empty() {
        out.push_str(&format!(
            "released {} of node {node} in network {network} (it owned no block)\n",
            count(done.records.len(), "address record")
        ));
        return out;
    }
    if done.gone {
        out.push_str(&format!(
            "released {} and {} of node {node} in network {network} as gone for good: its blocks can be claimed \
             at once\n",
            count(done.blocks.len(), "block"),
            count(done.records.len(), "address record"),
        ));
        return out;
    }
    let rounded =
        if Duration::from_secs(ttl as u64) == wait.window() { String::new() } else { ", rounded up".to_string() };
    let whose = if wait.nodes_own { format!("{node}'s own ") } else { String::new() };
    out.push_str(&format!(
        "released {} and {} of node {node} in network {network}; its blocks can be claimed again in {ttl} s, at \
         {claimable_at} ({whose}offlineGrace {} s + 3 × timeout {} s{rounded}), the time {node} could still be \
         allocating in them if it is alive (if it can never run again: release-node --gone)\n",
        count(done.blocks.len(), "block"),
        count(done.records.len(), "address record"),
        seconds(wait.offline_grace),
        seconds(wait.call_timeout),
    ));
    out
}

/// Seconds as people write them: `30`, `2.5`.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        return d.as_secs().to_string();
    }
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_written() {
        assert_eq!(seconds(Duration::from_secs(300)), "300");
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5");
        assert_eq!(seconds(Duration::from_millis(1)), "0.001");
    }
}
