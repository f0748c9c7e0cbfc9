//! ipam-ds-cluster: the selection delegate that makes one address space span
//! many nodes. Placed after ipam-ds-pool, it turns the cluster pools it is
//! given into the blocks of them this node owns, claimed on etcd or the Kubernetes API, and hands
//! those to the allocators as `pools`, so that they allocate inside them from
//! the node's own database. Addresses asked for by name are reserved
//! cluster-wide first. DEL and GC release what this node recorded in etcd;
//! STATUS says whether ADD can be served.

pub mod blocks;
pub mod clock;
pub mod datastore;
pub mod etcd;
pub mod kube;
pub mod node;
pub mod reaper;
pub mod records;
pub mod rows;
pub mod settings;
pub mod tables;

use shared::pool::{self, Pool};
use shared::store::StoreHandle;
use shared::{suite_delegate, About, Builtin, CniError, Code, Plugin, Reply, Request, Result};

use node::Session;
use rows::ClusterRows;
use settings::Settings;

pub const ABOUT: About = About {
    name: "ipam-ds-cluster",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM selection delegate: this node's blocks of cluster-wide pools, claimed on etcd or the Kubernetes API",
};

pub struct ClusterSelector;

impl Plugin for ClusterSelector {
    fn add(&self, req: &Request) -> Result<Reply> {
        let settings = Settings::from_config(&req.config)?;
        let (mut result, pools) = suite_delegate::prev_and_pools(req)?;
        let attachment = req.attachment()?;
        let requests = suite_delegate::requested_addresses(req, &pools)?;
        let sticky = shared::sticky::Sticky::of(&req.config)?;
        let identity = match &sticky {
            Some(s) => s.identity(&req.config, &req.env.args)?,
            None => None,
        };
        let asked_families = requests.iter().map(|a| shared::addr::Family::of(*a)).collect();
        let sticking = sticky.as_ref().zip(identity.as_deref()).map(|(settings, identity)| node::Sticking {
            identity,
            settings,
            asked_families,
        });
        // Checked here, against the pools as configured: the view handed on
        // holds only this node's part of them (possibly nothing), so the
        // allocator after it could not say which pool an address misses, and
        // an unusable one must not reach etcd.
        for &address in &requests {
            pool::static_target(&pools, address)?;
        }
        let mut store = open_node_store(req)?;
        let views = {
            let call = Session::open(&settings, &attachment.network, &mut store)?;
            call.node.settle(call.store);
            call.node.add(call.store, &pools, &attachment, sticking.as_ref(), &requests, &result)?
        };
        tracing::debug!("this node's view of the cluster pools: {}", pool::names(&views));
        result.pools = Some(views.iter().map(Pool::to_json).collect());
        suite_delegate::answer_add(req, ABOUT.name, result, "selects blocks but hands out no address")
    }

    /// Releases the attachment's records in etcd (a rollback only those of
    /// its ADD); one that cannot reach etcd is finished by a later call.
    fn del(&self, req: &Request) -> Result<Reply> {
        let attachment = req.attachment()?;
        let mut store = open_node_store(req)?;
        let records = store.read(|tx| tx.node_records_of(&attachment))?;
        let rollback_of = req.env.stack.rollback_of.as_deref();
        let records: Vec<_> = match rollback_of {
            Some(add_id) => records.into_iter().filter(|r| r.added_by.as_deref() == Some(add_id)).collect(),
            None => records,
        };
        match Settings::from_config(&req.config) {
            Ok(settings) => {
                let call = Session::open(&settings, &attachment.network, &mut store)?;
                let node = &call.node;
                // An identity's addresses stay its own, held in etcd.
                let held = match sticky_release(req) {
                    Some((hold, asked)) => {
                        node.hold_identities(call.store, &attachment, asked.as_deref(), hold, rollback_of)?
                    }
                    None => Vec::new(),
                };
                let records: Vec<_> = records.into_iter().filter(|r| !held.contains(&r.key)).collect();
                // The session finishes whatever the release did.
                let released = node.release(call.store, &records);
                node.settle(call.store);
                // A record that keeps an address from other nodes and did not
                // reach etcd: the runtime tries the DEL again.
                node.finish_releases(call.store, &released?)?;
            }
            Err(e) => {
                // DEL must succeed: what cannot be released now is marked,
                // and a call with usable settings releases it.
                tracing::warn!("cluster records stay to be released: {e}");
                let pending: Vec<_> = records.iter().map(|r| r.key.clone()).collect();
                store.write(|tx| {
                    pending.iter().try_for_each(|key| tx.set_node_record_state(key, rows::RecordState::Releasing))
                })?;
            }
        }
        // Rolling back an ADD that this delegate failed: the address it
        // leased in the node's blocks for a family before another found
        // none (the allocators after it did not run, so no DEL of theirs).
        if let (Some(add_id), None) = (rollback_of, sticky_release(req)) {
            store.write(|tx| tx.release_added_by(&attachment, add_id))?;
        }
        suite_delegate::pass_through(req)
    }

    /// The attachment's records in etcd must still be as this node wrote them.
    fn check(&self, req: &Request) -> Result<Reply> {
        let settings = Settings::from_config(&req.config)?;
        let attachment = req.attachment()?;
        let mut store = open_node_store(req)?;
        let records = store.read(|tx| tx.node_records_of(&attachment))?;
        if records.is_empty() {
            return Ok(Reply::Nothing);
        }
        let call = Session::open(&settings, &attachment.network, &mut store)?;
        call.node.check_records(&records).map(|()| Reply::Nothing)
    }

    /// Releases the records of attachments that are gone, finishes pending
    /// releases, and retires blocks that have stayed empty.
    fn gc(&self, req: &Request) -> Result<Reply> {
        let valid = req.config.valid_attachments()?;
        let settings = Settings::from_config(&req.config)?;
        let network = req.config.name()?;
        let mut store = open_node_store(req)?;
        let call = Session::open(&settings, network, &mut store)?;
        let node = &call.node;
        // Refused credentials or a certificate that does not verify are a
        // setting to fix, which GC would otherwise only log (its releases
        // are kept for later, as when etcd is unreachable).
        match node.reachable() {
            Ok(()) | Err(datastore::Error::Unavailable(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let gone = |owner: &shared::Attachment| !valid.contains(&(owner.container_id.clone(), owner.ifname.clone()));
        // Identities of attachments that are gone keep their addresses, held in etcd.
        let mut held = Vec::new();
        if let Some((hold, _)) = sticky_release(req) {
            let of_network = shared::store::LeaseFilter { network: Some(network.to_string()), ..Default::default() };
            let leases = call.store.read(|tx| tx.leases(&of_network))?;
            let mut owners: Vec<shared::Attachment> = leases
                .into_iter()
                .filter(|l| l.identity.is_some() && !l.is_hold() && gone(&l.owner))
                .map(|l| l.owner)
                .collect();
            owners.dedup();
            for owner in owners {
                held.extend(node.hold_identities(call.store, &owner, None, hold, None)?);
            }
            if let Err(e) = node.forget_gone_identities(call.store, &valid) {
                tracing::warn!("identities of gone attachments are let go by a later GC: {e}");
            }
        }
        let stale: Vec<_> = call
            .store
            .read(|tx| tx.node_records(network))?
            .into_iter()
            .filter(|r| gone(&r.owner) && !held.contains(&r.key))
            .collect();
        // What stays undone is journaled, and finished by a later call (the
        // runtime calls GC again; the attachments it lists gone make no DEL).
        let collected = node.release(call.store, &stale).and_then(|_| node.retire_empty_blocks(call.store));
        node.settle(call.store);
        collected.map(|()| Reply::Nothing)
    }

    /// Ready when etcd answers, or when it does not but a block confirmed
    /// within offlineGrace still has room.
    fn status(&self, req: &Request) -> Result<Reply> {
        let settings = Settings::from_config(&req.config)?;
        let network = req.config.name()?;
        let mut store = suite_delegate::usable_store(req)?;
        tables::make_missing(&mut store)?;
        let call = Session::open(&settings, network, &mut store)?;
        let unreachable = match call.node.reachable() {
            Ok(()) => return Ok(Reply::Nothing),
            Err(datastore::Error::Unavailable(unreachable)) => unreachable,
            // Refused credentials, a certificate that does not verify: not
            // an outage that blocks confirmed within offlineGrace can bridge.
            Err(e) => return Err(e.into()),
        };
        let pools = pool::all_pools(&req.config)?;
        let room = call.store.read(|tx| {
            let window = call.node.offline_window(tx)?;
            for p in &pools {
                let confirmed: Vec<_> =
                    tx.node_blocks(network, &p.name)?.into_iter().filter(|b| window.allows(b)).collect();
                if !node::blocks_with_room(tx, &blocks::Geometry::of(p), &confirmed)?.is_empty() {
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        if room {
            tracing::warn!("{unreachable}; ADD is served from blocks confirmed within offlineGrace");
            return Ok(Reply::Nothing);
        }
        Err(CniError::new(
            Code::NotReady,
            format!("no block of this node confirmed within offlineGrace has room, and {unreachable}"),
        ))
    }
}

/// With ipam-da-sticky in the stack: how long a released identity's
/// addresses stay held (zero: not at all), and the identity the call names.
/// Settings that do not read hold for the default, as the allocators do.
fn sticky_release(req: &Request) -> Option<(std::time::Duration, Option<String>)> {
    match shared::sticky::Sticky::of(&req.config) {
        Ok(Some(s)) => Some((s.hold, s.identity(&req.config, &req.env.args).ok().flatten())),
        Ok(None) => None,
        Err(_) => Some((shared::sticky::DEFAULT_HOLD, None)),
    }
}

/// The node database, with cluster mode's tables, which the first cluster
/// call on the node makes (a node-local database has none).
fn open_node_store(req: &Request) -> Result<StoreHandle> {
    let mut store = suite_delegate::open_store(req)?;
    tables::make_missing(&mut store)?;
    Ok(store)
}
/// This plugin, as the multicall program runs it by name.
pub const BUILTIN: Builtin = Builtin { about: ABOUT, plugin: &ClusterSelector };
