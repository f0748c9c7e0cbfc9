//! What the suite's own delegates share — the allocators (`ipam-da-static`,
//! `ipam-da-sequential`) and the selector (`ipam-ds-pool`): opening the
//! database a configuration names, reading pools from `prevResult.pools`,
//! recording pools, and the verbs other than ADD, which are the same for
//! every allocator: an allocator is its ADD ([`Allocator`]), whose write
//! goes through [`allocate`].

use std::net::IpAddr;
use std::time::Instant;

use ipnet::IpNet;

use crate::addr::parse_cidr;
use crate::args::Attachment;
use crate::error::{CniError, Code, Result};
use crate::plugin::{Plugin, Reply, Request};
use crate::pool::{LeaseIndex, Pool, Range};
use crate::result::{IpConfig, IpamResult};
use crate::sticky::{self, Sticky};
use crate::store::{self, Lease, LockWait, StoreHandle, Tx};

/// An allocation delegate whose ADD is `add`; DEL, CHECK, GC and STATUS
/// are this module's.
pub struct Allocator {
    pub add: fn(&Request) -> Result<Reply>,
}

impl Plugin for Allocator {
    fn add(&self, req: &Request) -> Result<Reply> {
        (self.add)(req)
    }

    fn del(&self, req: &Request) -> Result<Reply> {
        del(req)
    }

    fn check(&self, req: &Request) -> Result<Reply> {
        check(req)
    }

    fn gc(&self, req: &Request) -> Result<Reply> {
        gc(req)
    }

    fn status(&self, req: &Request) -> Result<Reply> {
        status(req)
    }
}

impl LeaseIndex for Tx<'_> {
    fn first_unleased(&self, lo: IpAddr, hi: IpAddr) -> Result<Option<IpAddr>> {
        Tx::first_unleased(self, lo, hi)
    }
}

/// The allocation database `ipam.database` names. Its lock waits end with
/// `ipam.lockTimeout`, and within an orchestrated call also with the call's
/// lock budget and deadline; the leases it takes carry the call's ADD id,
/// and an ADD's first lease or share records what the node agent needs
/// (see [`crate::agent_record`]).
/// Within an ipam-delegated call that runs its delegates in its process,
/// the call's connection (see [`store::share_within_call`]).
pub fn open_store(req: &Request) -> Result<StoreHandle> {
    let started = Instant::now();
    let stack = &req.env.stack;
    let wait = LockWait {
        timeout: req.config.lock_timeout()?,
        shared_until: stack.lock_deadline,
        call_deadline: stack.deadline,
    };
    let mut store = store::open_for_delegate(&req.config.database_path()?, wait)?;
    store.set_add_id(stack.add_id.clone());
    store.set_agent_record(crate::agent_record::of(req)?);
    tracing::debug!("opened {} in {:?}", store.path().display(), started.elapsed());
    Ok(store)
}

/// The `prevResult` an allocator needs, and the candidate pools in it.
/// Allocators read pools only from there, so that any selector can feed them.
pub fn prev_and_pools(req: &Request) -> Result<(IpamResult, Vec<Pool>)> {
    const HINT: &str = "put a selector such as ipam-ds-pool before the allocators in ipam.delegates";
    let prev = req.config.prev_result()?.ok_or_else(|| {
        CniError::config("prevResult", format!("missing: allocators read their pools from prevResult.pools; {HINT}"))
    })?;
    let pools = prev
        .pools
        .as_ref()
        .ok_or_else(|| CniError::config("prevResult.pools", format!("missing; {HINT}")))?
        .iter()
        .enumerate()
        .map(|(i, p)| Pool::from_json(p, &format!("prevResult.pools[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    Ok((prev, pools))
}

/// The answer of `me`, one of the suite's delegates, to an orchestrated ADD:
/// `result`, unless `me` ends the stack and `result` has no address. No main
/// plugin accepts an IPAM result without one (Debian's bridge says only
/// "IPAM plugin returned missing IP config"), and the stack's last delegate
/// knows it is last, since it reads `ipam.delegates`: it fails with error 7
/// naming the stack, and the orchestrator rolls back. `why` says why it
/// found no address.
pub fn answer_add(req: &Request, me: &str, result: IpamResult, why: &str) -> Result<Reply> {
    let ends_stack = req
        .config
        .ipam()
        .ok()
        .and_then(|ipam| ipam.delegates.as_ref())
        .filter(|delegates| req.env.stack.add_id.is_some() && delegates.last().is_some_and(|last| last == me));
    match ends_stack {
        Some(delegates) if result.ips.is_empty() => Err(CniError::config(
            "ipam.delegates",
            format!(
                "the stack {delegates:?} ends with {me}, which {why}, so the ADD would answer without an \
                 address: end the stack with an allocation delegate such as ipam-da-sequential"
            ),
        )),
        _ => Ok(Reply::Result(result)),
    }
}

/// The addresses asked for by name, from the first source that has any:
/// `runtimeConfig.ips`, `args.cni.ips`, CNI_ARGS `IP=`, the pools' `requested-ip`.
pub fn requested_addresses(req: &Request, pools: &[Pool]) -> Result<Vec<IpAddr>> {
    let sources = [
        ("runtimeConfig.ips", req.config.runtime_config::<Vec<String>>("ips")?),
        ("args.cni.ips", req.config.args_cni::<Vec<String>>("ips")?),
        ("CNI_ARGS IP", req.env.args.list("IP")?),
    ];
    for (field, list) in sources {
        let found = list
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, text)| parse_request(field, i, text))
            .collect::<Result<Vec<_>>>()?;
        if !found.is_empty() {
            return Ok(found);
        }
    }
    Ok(pools.iter().filter_map(|p| p.requested_ip).collect())
}

/// A bare address or a CIDR (whose prefix the pool decides, but which must be
/// a valid one); the `index`th of `field`'s list.
fn parse_request(field: &str, index: usize, text: &str) -> Result<IpAddr> {
    let trimmed = text.trim();
    let parsed = if trimmed.contains('/') { parse_cidr(trimmed).map(|net| net.addr()) } else { trimmed.parse().ok() };
    parsed
        .ok_or_else(|| CniError::config(&format!("{field}[{index}]"), format!("{text:?} is not an IP address or CIDR")))
}

/// Records the pool of `network` (a no-op when it is registered as it is) and
/// returns its round-robin cursor.
/// A pool that overlaps another one still holding leases in this database
/// is a configuration error: the two configurations cannot both be right.
pub fn register(tx: &Tx, network: &str, pool: &Pool) -> Result<Option<IpAddr>> {
    tx.register_pool(network, &pool.name, &pool.subnets(), &pool.to_json())?
        .map_err(|overlap| CniError::config(&format!("pool {}", pool.name), overlap))
}

/// Round robin, in an allocator's write transaction: the first free
/// address of `pool` after the last one handed out there, leased for
/// `attachment`, and the cursor moved to it. None: the pool is full.
/// ipam-da-sequential's policy, and ipam-ds-cluster's in the node's blocks.
pub fn lease_next(tx: &Tx, pool: &Pool, attachment: &Attachment) -> Result<Option<IpAddr>> {
    let cursor = register(tx, &attachment.network, pool)?;
    let Some(address) = pool.find_free(cursor, tx)? else { return Ok(None) };
    tx.insert_lease(address, &pool.name, attachment)?;
    tx.set_cursor(&attachment.network, &pool.name, address)?;
    match cursor {
        Some(last) => tracing::info!(
            "allocated {address} from pool {}: the first free address after {last}, the last one handed out",
            pool.name
        ),
        None => tracing::info!("allocated {address} from pool {}: the first free address", pool.name),
    }
    Ok(Some(address))
}

/// Whether the pool of `network` is recorded exactly as it is: then
/// [`register`] would write nothing, and a reader need not take the lock.
pub fn is_registered(tx: &Tx, network: &str, pool: &Pool) -> Result<bool> {
    Ok(tx.registered_pool(network, &pool.name)?.is_some_and(|r| r.is(&pool.subnets(), &pool.to_json())))
}

/// Adds an address of `pool` to `result`, with the range's prefix length and
/// gateway and the pool's routes and DNS.
pub fn add_address(result: &mut IpamResult, pool: &Pool, range: &Range, address: IpAddr) {
    let address = IpNet::new(address, range.subnet.prefix_len()).unwrap_or(range.subnet);
    if !result.ips.iter().any(|ip| ip.address.addr() == address.addr()) {
        result.ips.push(IpConfig { address, gateway: range.gateway, interface: None });
    }
    for route in &pool.routes {
        result.add_route(route);
    }
    if let Some(dns) = &pool.dns {
        result.merge_dns(dns);
    }
}

/// A workload identity, as the allocators tie leases to it: its name, and
/// whether another live attachment of it may share its address
/// (`ipam.sticky.shareLive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyIdentity {
    pub name: String,
    pub share_live: bool,
}

/// The attachment's workload identity when the stack is sticky (see
/// [`sticky`]): what the allocators tie their leases to.
pub fn identity(req: &Request) -> Result<Option<StickyIdentity>> {
    let Some(sticky) = Sticky::of(&req.config)? else { return Ok(None) };
    let name = sticky.identity(&req.config, &req.env.args)?;
    Ok(name.map(|name| StickyIdentity { name, share_live: sticky.share_live }))
}

/// An allocator's write, around its policy: in one write transaction of
/// the database the configuration names, holds past their end are dropped
/// first ([`begin_allocating`]), then `policy` leases for `attachment`, and
/// last the attachment's leases are tied to `identity`
/// ([`bind_identity`]: 101 when it is live on another attachment and may not
/// share). An error anywhere rolls the whole transaction back, so an
/// allocator never leaves a lease without its identity, or half of a
/// dual-stack ADD. Every allocator writes through this, so none can forget
/// the bracket; `policy` says only which addresses.
pub fn allocate<T>(
    req: &Request,
    attachment: &Attachment,
    identity: Option<&StickyIdentity>,
    policy: impl FnOnce(&Tx) -> Result<T>,
) -> Result<T> {
    let mut store = open_store(req)?;
    store.write(|tx| {
        begin_allocating(tx)?;
        let chosen = policy(tx)?;
        bind_identity(tx, attachment, identity)?;
        Ok(chosen)
    })
}

/// In an allocator's write transaction: holds past their end are dropped
/// first, so that their addresses are free to it. The suite's allocators
/// get this from [`allocate`]; ipam-ds-cluster's node, which leases in a
/// store it opened for more than the lease, calls it itself.
pub fn begin_allocating(tx: &Tx) -> Result<()> {
    tx.drop_expired_holds().map(drop)
}

/// In an allocator's write transaction, after it leased: the attachment's
/// leases are tied to its identity, if it has one. Error 101 when the
/// identity is live on another attachment and may not share
/// (`shareLive` off): checked here, in the transaction that leases, so
/// that of concurrent ADDs of one identity exactly one leases for it, and
/// the others' transactions, and so their leases, are rolled back. Called
/// by [`allocate`], and by ipam-ds-cluster's node, as [`begin_allocating`].
pub fn bind_identity(tx: &Tx, attachment: &Attachment, identity: Option<&StickyIdentity>) -> Result<()> {
    let Some(identity) = identity else { return Ok(()) };
    if !identity.share_live {
        if let Some(other) = tx.identity_live_elsewhere(attachment, &identity.name)? {
            return Err(identity_live_elsewhere(&identity.name, &other));
        }
    }
    tx.bind_identity(attachment, &identity.name)
}

/// 101: `identity` is live on another attachment, `other` its lease, and
/// may not share it.
pub fn identity_live_elsewhere(identity: &str, other: &Lease) -> CniError {
    CniError::new(
        Code::AddressInUse,
        format!(
            "identity {identity:?} is live on {} with address {}: two live attachments of one identity share its \
             address only with ipam.sticky.shareLive",
            other.owner, other.address
        ),
    )
    .with_details(format!("DEL of container {} releases it", other.owner.container_id))
}

/// DEL: releases everything the attachment holds in this database, whatever
/// the prevResult says, and passes the prevResult on. An identity's
/// addresses stay held for it when the stack is sticky. The rollback of a
/// failed ADD (ipam-delegated says which) releases only what that ADD took,
/// so that a failed repeat ADD leaves the attachment's earlier leases held,
/// and gives back what it took as it was: free, or its identity's hold.
pub fn del(req: &Request) -> Result<Reply> {
    let attachment = req.attachment()?;
    let mut store = open_store(req)?;
    let released = match &req.env.stack.rollback_of {
        Some(add_id) => store.write(|tx| tx.release_added_by(&attachment, add_id))?,
        None => {
            let hold = sticky::release_hold(&req.config);
            store.write(|tx| tx.release(&attachment, hold))?
        }
    };
    for lease in &released {
        tracing::info!("released {} of pool {}", lease.address, lease.pool);
    }
    pass_through(req)
}

/// CHECK: every address of `prevResult.ips` inside a pool of this database
/// must be recorded for this attachment (104 otherwise), except the
/// addresses of the container's other interfaces: in a chain the prevResult
/// is the whole chain's result, which may hold them.
pub fn check(req: &Request) -> Result<Reply> {
    let attachment = req.attachment()?;
    let prev = req
        .config
        .prev_result()?
        .ok_or_else(|| CniError::config("prevResult", "missing: CHECK needs the result of the ADD"))?;
    let mut store = open_store(req)?;
    store.read(|tx| {
        let pools = tx.registered_pools()?;
        for ip in &prev.ips {
            let address = ip.address.addr();
            let Some(pool) = pools.iter().find(|p| p.subnets.iter().any(|s| s.contains(&address))) else { continue };
            if let Some(other) = prev.interface_name(ip).filter(|name| *name != attachment.ifname) {
                tracing::debug!("{address} is the address of interface {other}, not of {}", attachment.ifname);
                continue;
            }
            match tx.holder(address)? {
                Some(lease) if lease.owner == attachment && !lease.is_hold() => {}
                Some(lease) if !lease.is_hold() && tx.shares_lease(address, &attachment)? => {
                    tracing::debug!("{address} is shared with {} (sticky shareLive)", lease.owner);
                }
                Some(lease)
                    if lease.owner.container_id == attachment.container_id
                        && lease.owner.ifname != attachment.ifname =>
                {
                    tracing::debug!("{address} is held by this container's interface {}", lease.owner.ifname);
                }
                other => {
                    let held = match other {
                        Some(lease) => format!("it is held by {}", lease.owner),
                        None => "it is not held by anyone".to_string(),
                    };
                    return Err(CniError::new(
                        Code::NotRecorded,
                        format!("address {address} of pool {} is not recorded for this attachment", pool.name),
                    )
                    .with_details(format!("network {:?}: {held}", attachment.network)));
                }
            }
        }
        Ok(())
    })?;
    Ok(Reply::Nothing)
}

/// GC: releases this network's allocations of attachments that are not in
/// `cni.dev/valid-attachments`.
pub fn gc(req: &Request) -> Result<Reply> {
    let network = req.config.name()?;
    let valid = req.config.valid_attachments()?;
    let mut store = open_store(req)?;
    let hold = sticky::release_hold(&req.config);
    let released = store.write(|tx| tx.gc(network, &valid, hold))?;
    for lease in &released {
        tracing::info!("GC released {} held by {} {}", lease.address, lease.owner.container_id, lease.owner.ifname);
    }
    Ok(Reply::Nothing)
}

/// STATUS: error 50 unless the database can be opened and written.
pub fn status(req: &Request) -> Result<Reply> {
    usable_store(req)?;
    Ok(Reply::Nothing)
}

/// The store, opened and proven writable; error 50 otherwise.
pub fn usable_store(req: &Request) -> Result<StoreHandle> {
    let not_ready = |e: CniError| {
        CniError::new(Code::NotReady, "the allocation database cannot be used").with_details(e.to_string())
    };
    let mut store = open_store(req).map_err(not_ready)?;
    store.probe_writable().map_err(not_ready)?;
    Ok(store)
}

/// The `prevResult` unchanged, so that a DEL chain keeps its information.
/// One that does not read as a result is dropped with a warning: DEL must
/// not fail on it, or the runtime could never delete the container.
pub fn pass_through(req: &Request) -> Result<Reply> {
    Ok(match req.config.prev_result() {
        Ok(Some(prev)) => Reply::Result(prev),
        Ok(None) => Reply::Nothing,
        Err(e) => {
            tracing::warn!("the prevResult is not passed on: {e}");
            Reply::Nothing
        }
    })
}
