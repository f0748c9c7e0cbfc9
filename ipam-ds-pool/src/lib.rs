//! ipam-ds-pool: the selection delegate. It works out which pools this
//! attachment draws from — `runtimeConfig.ipRanges` first, then the configured
//! pools whose `match` holds, narrowed by `IPAM_POOL` or `args.cni.pools` —,
//! validates and records them in the allocation database, and hands them to the
//! allocators as `pools` next to the prevResult it was given.

use std::collections::BTreeSet;

use shared::addr::Family;
use shared::pool::{self, Pool};
use shared::{suite_delegate, About, Builtin, CniError, Code, Plugin, Reply, Request, Result};

pub const ABOUT: About = About {
    name: "ipam-ds-pool",
    version: env!("CARGO_PKG_VERSION"),
    summary: "IPAM selection delegate: picks the pools an attachment draws from",
};

pub struct Selector;

impl Plugin for Selector {
    fn add(&self, req: &Request) -> Result<Reply> {
        let candidates = pool::candidates(&req.config, &req.env.args)?;
        tracing::debug!("candidate pools: {}", pool::names(&candidates));
        // A selection delegate after this one (ipam-ds-cluster: this node's
        // blocks of the pools) hands the allocators a narrower view of the
        // pools and records that one; recording them as selected here too
        // would rewrite each pool every call.
        if !refined_later(req.config.ipam()?.delegates.as_deref().unwrap_or_default()) {
            let network = req.config.name()?;
            let mut store = suite_delegate::open_store(req)?;
            // Recording is a no-op for pools already recorded as they are;
            // reading first keeps the common case free of the lock and of a commit.
            let recorded = store.read(|tx| {
                candidates.iter().try_fold(true, |all, p| Ok(all && suite_delegate::is_registered(tx, network, p)?))
            })?;
            if !recorded {
                store.write(|tx| {
                    candidates.iter().try_for_each(|p| suite_delegate::register(tx, network, p).map(drop))
                })?;
            }
        }
        let mut result = req.config.prev_result()?.unwrap_or_default();
        result.pools = Some(candidates.iter().map(Pool::to_json).collect());
        suite_delegate::answer_add(req, ABOUT.name, result, "selects pools but hands out no address")
    }

    fn del(&self, req: &Request) -> Result<Reply> {
        suite_delegate::pass_through(req)
    }

    fn check(&self, _: &Request) -> Result<Reply> {
        Ok(Reply::Nothing)
    }

    /// The selector holds no allocations; it only refuses a GC that names no
    /// valid attachments, as every delegate of the suite does.
    fn gc(&self, req: &Request) -> Result<Reply> {
        req.config.valid_attachments()?;
        Ok(Reply::Nothing)
    }

    /// Ready when the database is usable and every IP family among the pools
    /// has a pool with a free address.
    fn status(&self, req: &Request) -> Result<Reply> {
        let pools = pool::all_pools(&req.config)?;
        let network = req.config.name()?;
        let mut store = suite_delegate::usable_store(req)?;
        let families: BTreeSet<Family> = pools.iter().map(Pool::family).collect();
        store.read(|tx| {
            for &family in &families {
                let mut has_room = false;
                for p in pools.iter().filter(|p| p.family() == family) {
                    let cursor = tx.registered_pool(network, &p.name)?.and_then(|r| r.cursor);
                    if p.find_free(cursor, tx)?.is_some() {
                        has_room = true;
                        break;
                    }
                }
                if !has_room {
                    return Err(CniError::new(Code::NotReady, format!("no {family} pool has a free address"))
                        .with_details(format!("pools: {}", pool::names(&pools))));
                }
            }
            Ok(())
        })?;
        Ok(Reply::Nothing)
    }
}

/// This plugin, as the multicall program runs it by name.
pub const BUILTIN: Builtin = Builtin { about: ABOUT, plugin: &Selector };

/// Whether a selection delegate (`ipam-ds-…`) follows this one in the stack.
fn refined_later(delegates: &[String]) -> bool {
    let name = |d: &String| d.rsplit('/').next().unwrap_or_default().to_string();
    delegates.iter().map(name).skip_while(|d| d != ABOUT.name).skip(1).any(|d| d.starts_with("ipam-ds-"))
}

#[cfg(test)]
mod tests {
    use super::refined_later;

    #[test]
    fn pools_are_recorded_by_the_last_selection_delegate_only() {
        let stack = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(refined_later(&stack(&["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-sequential"])));
        assert!(refined_later(&stack(&["/opt/cni/bin/ipam-ds-pool", "/opt/cni/bin/ipam-ds-cluster"])));
        assert!(!refined_later(&stack(&["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"])));
        assert!(!refined_later(&stack(&["ipam-ds-cluster", "ipam-ds-pool", "ipam-da-sequential"])));
        assert!(!refined_later(&[]));
    }
}
