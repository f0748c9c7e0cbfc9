//! `cluster reap`: one pass of the cluster's reaper on the Kubernetes
//! datastore (issue 32), which the node agent runs at each interval.
//!
//! 1. The reaper's Lease of the network (`coordination.k8s.io`, namespace
//!    `ipam-delegated`): taken when absent or expired by the API server's
//!    clock, renewed when this node's; while another node's lasts, the pass
//!    does nothing else.
//! 2. Deleted nodes: a node that holds a block, an address record or a
//!    live identity of the network and is no Node of the cluster is noted
//!    missing in the Lease (since the `Date` of this pass), and once it has
//!    been missing for its own grace (offlineGrace + 3 × ipam.timeout, as
//!    `release-node` reads it) it is released as `release-node NODE`
//!    releases it (not `--gone`): its blocks stay unclaimable for that grace
//!    again, timed by the API server, in case it is alive after all; its
//!    records and its entry go, its identities are held. A node seen again
//!    in the cluster is no longer noted. Each write compares what it read,
//!    so a pass killed anywhere is finished by the next.
//! 3. Ended identities: deleted, each conditioned on what the LIST showed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ipam_ds_cluster::datastore::kubernetes::objects::Time;
use ipam_ds_cluster::datastore::kubernetes::KubeStore;
use ipam_ds_cluster::reaper::lease::{self, Holding};
use ipam_ds_cluster::reaper::nodes;
use serde::Serialize;
use shared::{CniError, Code};

use super::super::failure::Failure;
use super::super::report::{count, to_json, Report};
use super::conf::ClusterConf;
use super::pool_in_store::cluster_failure;
use super::release_node::{self, Document};

/// What one pass did, as `--json` prints it.
#[derive(Serialize)]
pub struct Reaped<'a> {
    pub network: &'a str,
    pub lease: LeaseShown,
    /// Each deleted node released, as `release-node --json` shows it.
    pub released_nodes: Vec<Document<'a>>,
    /// Deleted nodes not missing for their grace yet.
    pub waiting_nodes: Vec<WaitingNode>,
    pub ended_identities: Vec<EndedShown>,
    #[serde(skip)]
    rendered: Vec<String>,
}

#[derive(Serialize)]
pub struct LeaseShown {
    pub name: String,
    /// Whether this node holds it (and so did the rest of the pass).
    pub held: bool,
    pub holder: String,
    /// When it ends unless renewed, UTC, by the API server's clock.
    pub until: String,
    /// The holder whose expired Lease this pass took over.
    pub taken_from: Option<String>,
}

#[derive(Serialize)]
pub struct WaitingNode {
    pub node: String,
    /// When a pass first saw it missing from the cluster, UTC.
    pub missing_since: String,
    /// When a pass may release it, UTC: `missing_since` plus its grace.
    pub releasable_at: String,
}

#[derive(Serialize)]
pub struct EndedShown {
    pub ifname: String,
    pub identity: String,
    pub held_until: String,
    /// False: taken over or held again since it was read: kept.
    pub deleted: bool,
}

impl Reaped<'_> {
    /// The text `cluster reap` prints.
    pub fn rendered(&self) -> String {
        let mut out = String::new();
        let lease = &self.lease;
        if !lease.held {
            out.push_str(&format!(
                "the reaper's Lease {} is held by {} until {}: nothing done (one reaper at a time)\n",
                lease.name, lease.holder, lease.until
            ));
            return out;
        }
        let taken = lease.taken_from.as_ref().map(|t| format!(", taken over from {t}")).unwrap_or_default();
        out.push_str(&format!(
            "the reaper's Lease {} is this node's ({}) until {}{taken}\n",
            lease.name, lease.holder, lease.until
        ));
        for w in &self.waiting_nodes {
            out.push_str(&format!(
                "node {} is no node of the cluster since {}: released once missing for its grace, from {}\n",
                w.node, w.missing_since, w.releasable_at
            ));
        }
        for text in &self.rendered {
            out.push_str(text);
        }
        for i in &self.ended_identities {
            let what = if i.deleted { "deleted" } else { "changed meanwhile (taken over or held again): kept" };
            out.push_str(&format!("identity {} on {}, held until {}: {what}\n", i.identity, i.ifname, i.held_until));
        }
        let collected = self.ended_identities.iter().filter(|i| i.deleted).count();
        out.push_str(&format!(
            "released {}, collected {} whose hold ended, in network {}\n",
            count(self.released_nodes.len(), "deleted node"),
            count(collected, "identity object"),
            self.network
        ));
        out
    }

    fn new<'a>(conf: &'a ClusterConf, lease: LeaseShown) -> Reaped<'a> {
        Reaped {
            network: &conf.network,
            lease,
            released_nodes: Vec::new(),
            waiting_nodes: Vec::new(),
            ended_identities: Vec::new(),
            rendered: Vec::new(),
        }
    }
}

/// `cluster reap [--json]`: one pass as this node (the conflist's), with a
/// Lease of [`lease::DEFAULT_DURATION`].
pub fn run(conf: &ClusterConf, store: &KubeStore, json: bool) -> Result<Report, Failure> {
    let (reaped, failure) = pass(conf, store, &conf.settings.node, lease::DEFAULT_DURATION)?;
    let stdout = if json { to_json(&reaped)? } else { reaped.rendered() };
    Ok(Report { stdout, failure })
}

/// One pass as `holder` (a node name) with a Lease of `duration`: what it
/// did, and the first failure after which it went on (a node that could
/// not be released; the others were). Err: it could do nothing.
pub fn pass<'a>(
    conf: &'a ClusterConf,
    store: &KubeStore,
    holder: &str,
    duration: Duration,
) -> Result<(Reaped<'a>, Option<Failure>), Failure> {
    let kube_failure =
        |e: ipam_ds_cluster::kube::Error| cluster_failure(conf, e.to_cni("ipam.cluster.kubernetes.kubeconfig"));
    let name = lease::lease_name(&conf.network);
    let holding = lease::hold(store.client(), &conf.network, holder, duration).map_err(kube_failure)?;
    let mut held = match holding {
        Holding::Theirs { holder, until } => {
            let lease = LeaseShown { name, held: false, holder, until: until.to_string(), taken_from: None };
            tracing::info!(
                "operator reap: the reaper's Lease {} is {}'s until {}",
                lease.name,
                lease.holder,
                lease.until
            );
            return Ok((Reaped::new(conf, lease), None));
        }
        Holding::Ours(held) => held,
    };
    let mut reaped = Reaped::new(
        conf,
        LeaseShown {
            name,
            held: true,
            holder: holder.to_string(),
            until: held.until.to_string(),
            taken_from: held.taken_from.clone(),
        },
    );
    let cluster = nodes::cluster_nodes(store.client()).map_err(kube_failure)?;
    let deleted = deleted_nodes(conf, store, &cluster)?;
    // Since when each is missing, kept in the Lease before anything is
    // released: also the check that this reaper still holds it.
    let seen = held.missing_since();
    let missing: BTreeMap<String, Time> =
        deleted.iter().map(|node| (node.clone(), seen.get(node).copied().unwrap_or(held.now))).collect();
    if !held.keep_missing(store.client(), &missing).map_err(kube_failure)? {
        tracing::info!("operator reap: the reaper's Lease {} was taken meanwhile: this pass stops", reaped.lease.name);
        reaped.lease.held = false;
        return Ok((reaped, None));
    }
    let mut failure = None;
    for (node, since) in &missing {
        let grace = match release_node::grace_of(conf, store, node) {
            Ok(grace) => grace,
            Err(problem) => {
                failure.get_or_insert(problem);
                continue;
            }
        };
        let releasable = since.plus(grace);
        if !releasable.is_past_at(held.now) {
            tracing::info!(
                "operator reap: node {node} holds addresses in network {} and is no node of the cluster since \
                 {since}: released from {releasable}",
                conf.network
            );
            let (missing_since, releasable_at) = (since.to_string(), releasable.to_string());
            reaped.waiting_nodes.push(WaitingNode { node: node.clone(), missing_since, releasable_at });
            continue;
        }
        tracing::info!(
            "operator reap: node {node} holds addresses in network {} and is no node of the cluster since {since}: \
             released",
            conf.network
        );
        let released = release_node::release(conf, store, node, false);
        reaped
            .rendered
            .push(format!("node {node} is no node of the cluster since {since}:\n{}", indented(&released.rendered())));
        let release_node::Released { document, failure: problem, .. } = released;
        reaped.released_nodes.push(document);
        if let Some(problem) = problem {
            failure.get_or_insert(problem);
        }
    }
    let ended = store.collect_ended_identities().map_err(|e| cluster_failure(conf, e.into()))?;
    for e in ended {
        tracing::info!(
            "operator reap: identity {} on {} held until {}: {}",
            e.identity,
            e.ifname,
            e.held_until,
            if e.deleted { "deleted" } else { "changed meanwhile: kept" }
        );
        reaped.ended_identities.push(EndedShown {
            ifname: e.ifname,
            identity: e.identity,
            held_until: e.held_until,
            deleted: e.deleted,
        });
    }
    Ok((reaped, failure))
}

/// The nodes of the network to release; none when the cluster lists no
/// Node at all (a server that is not the nodes' own, or a cluster being
/// rebuilt: not a reason to release every node).
fn deleted_nodes(conf: &ClusterConf, store: &KubeStore, cluster: &BTreeSet<String>) -> Result<Vec<String>, Failure> {
    let deleted = nodes::deleted_nodes(store, &conf.pools, cluster).map_err(|e| cluster_failure(conf, e))?;
    if cluster.is_empty() && !deleted.is_empty() {
        return Err(cluster_failure(
            conf,
            CniError::new(
                Code::TryAgainLater,
                format!(
                    "the Kubernetes API server lists no Node, yet {} node(s) hold addresses in network {}: released \
                     none (is the kubeconfig's server the nodes' own?)",
                    deleted.len(),
                    conf.network
                ),
            ),
        ));
    }
    // No Node, but a kubelet that still beats: not gone (nor noted missing).
    let mut gone = Vec::with_capacity(deleted.len());
    for node in deleted {
        let kube_failure = |e: ipam_ds_cluster::kube::Error| cluster_failure(conf, e.to_cni("kube-node-lease"));
        if lease::kubelet_alive(store.client(), &node).map_err(kube_failure)? {
            tracing::warn!(
                "operator reap: node {node} holds addresses in network {} and is no Node of the cluster, but its \
                 kubelet renews its Lease in kube-node-lease: kept",
                conf.network
            );
            continue;
        }
        gone.push(node);
    }
    Ok(gone)
}

fn indented(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}
