//! ADD's part, in the phases it goes through: a snapshot of what the node
//! database holds, the confirming read (or offlineGrace without the store),
//! the workload identity, the addresses asked for by name, then per family
//! the plan's steps until one gives room; last the views handed on.

use super::*;

/// What one ADD is about.
struct AddCall<'a> {
    pools: &'a [Pool],
    geometries: Vec<Geometry<'a>>,
    who: &'a Attachment,
    sticking: Option<&'a Sticking<'a>>,
    requests: &'a [IpAddr],
}

/// What the node database holds for an ADD, per candidate pool.
struct Snapshot<'n> {
    /// The node's owned blocks.
    owned: Vec<Vec<NodeBlock>>,
    /// Its blocks of its own with room: those the ADD confirms and hands on.
    blocks: Vec<Vec<NodeBlock>>,
    /// Its shared blocks.
    shared: Vec<Vec<NodeBlock>>,
    /// The attachment's address records.
    records: Vec<NodeRecord>,
    /// What the attachment holds here (see [`Node::held_for`]).
    held: Vec<Lease>,
    boot: Option<String>,
    /// The highest store mark this node saw (see [`Node::check_history`]).
    watermark: Option<i64>,
    offline_window: OfflineWindow<'n>,
}

/// Most blocks one ADD claims, each after the one before filled up under it.
const CLAIMS_PER_ADD: usize = 3;

impl Node<'_> {
    /// ADD's part: reserves the addresses asked for by name, makes sure each
    /// family that needs an address has room in some pool (claiming a block
    /// when this node's are full), and returns the pools as this node's
    /// allocators must see them. The addresses of `identity` (sticky) in
    /// blocks of this node's own are in the view, as the attachment's own
    /// leases are, so that ipam-da-sticky can hand them back.
    pub fn add(
        &self,
        store: &mut StoreHandle,
        pools: &[Pool],
        who: &Attachment,
        sticking: Option<&Sticking>,
        requests: &[IpAddr],
        prev: &IpamResult,
    ) -> Result<Vec<Pool>> {
        let geometries: Vec<Geometry> = pools.iter().map(Geometry::of).collect();
        for g in &geometries {
            self.settings.check_block_size(&g.pool.name, g.block_size, g.block_len())?;
        }
        let call = AddCall { pools, geometries, who, sticking, requests };
        let mut snap = self.snapshot(store, &call)?;
        let mut needed = needed_families(pools, prev, requests, &snap.held);
        // Only answers given after the watermark was read count against it
        // (settle, before this, may have heard etcd at an earlier revision
        // while another process of this node wrote a later one down).
        self.datastore.forget_marks();
        let skipped = self.needs_no_confirmation(pools, &snap.blocks, &snap.shared, &needed, snap.boot.as_deref());
        // Every block this ADD may use was confirmed moments ago, or not.
        let offline = if skipped { None } else { self.confirm_blocks(store, &call, &mut snap)? };
        let claimed = match sticking {
            Some(s) => {
                let claimed = self.identity_phase(store, &call, s, &mut snap, offline.as_deref())?;
                needed = needed_families(pools, prev, requests, &snap.held);
                claimed
            }
            None => None,
        };
        for &address in requests {
            self.reserve_static(store, &call.geometries, address, who)?;
        }
        let mut granted = Vec::new();
        for family in needed {
            self.find_room(store, &call, &mut snap, family, offline.as_deref(), &mut granted)?;
        }
        // Without a confirming read, the answers of this call's other
        // requests tell whether etcd lost history.
        if skipped {
            self.check_history(store, &call.geometries, snap.watermark, &[])?;
        }
        if let Some(s) = sticking {
            let mut addresses: Vec<IpAddr> = store.read(|tx| tx.leases_of(who))?.iter().map(|l| l.address).collect();
            addresses.extend(granted.iter().map(|(_, a)| *a));
            addresses.extend(requests.iter().filter(|a| pools.iter().any(|p| p.check_static(**a).is_ok())));
            addresses.sort_unstable();
            addresses.dedup();
            self.record_identity_addresses(who, s, &addresses, claimed);
        }
        Ok((0..pools.len()).filter_map(|i| self.pool_view(&call, &snap, i, &granted)).collect())
    }

    /// Only blocks with room are handed to the allocators, and so
    /// confirmed: a full block needs no confirming, and the confirming read
    /// stays one request however many blocks the node has. Holds past their
    /// end free their addresses before room is counted (the allocators drop
    /// them only once they allocate): found in this read, they are dropped
    /// and it is made again.
    fn snapshot(&self, store: &mut StoreHandle, call: &AddCall) -> Result<Snapshot<'_>> {
        let read = |tx: &Tx| {
            if !tx.expired_holds()?.is_empty() {
                return Ok(None);
            }
            let mut owned = Vec::with_capacity(call.pools.len());
            let mut blocks = Vec::with_capacity(call.pools.len());
            let mut shared = Vec::with_capacity(call.pools.len());
            for g in &call.geometries {
                let all: Vec<NodeBlock> = tx
                    .node_blocks(&self.network, &g.pool.name)?
                    .into_iter()
                    .filter(|b| b.state == BlockState::Owned)
                    .collect();
                blocks.push(blocks_to_confirm(tx, g, &all)?);
                shared.push(all.iter().filter(|b| b.shared).cloned().collect::<Vec<_>>());
                owned.push(all);
            }
            let held = self.held_for(tx, &owned, call.who, call.sticking)?;
            Ok(Some(Snapshot {
                records: tx.node_records_of(call.who)?,
                held,
                owned,
                blocks,
                shared,
                boot: tx.note(BOOT_NOTE)?,
                watermark: tx.note(&revision_note(&self.network))?.and_then(|n| n.parse::<i64>().ok()),
                offline_window: self.offline_window(tx)?,
            }))
        };
        match store.read(read)? {
            Some(snap) => Ok(snap),
            None => {
                store.write(|tx| tx.drop_expired_holds().map(drop))?;
                store.read(read)?.ok_or_else(|| {
                    CniError::new(
                        Code::TryAgainLater,
                        "holds kept ending while this node's blocks were read: try again",
                    )
                })
            }
        }
    }

    /// The confirming read and what it changed (lost blocks, lending);
    /// without the store, only blocks confirmed within offlineGrace stay:
    /// why the store did not answer.
    fn confirm_blocks(&self, store: &mut StoreHandle, call: &AddCall, snap: &mut Snapshot) -> Result<Option<String>> {
        match self.confirm(store, &call.geometries, &snap.blocks)? {
            Ok((confirmed, entry)) => {
                // Before anything is decided from what etcd said.
                self.check_history(store, &call.geometries, snap.watermark, &confirmed)?;
                self.register(entry)?;
                let wanted: Vec<i64> = confirmed.iter().map(|c| c.wanted).collect();
                let stale: Vec<datastore::AddressEntry> =
                    confirmed.iter().flat_map(|c| c.stale.iter().cloned()).collect();
                self.drop_stale_lent(&stale);
                self.record_confirmed(store, &call.geometries, &mut snap.blocks, confirmed, snap.boot.as_deref())?;
                for (i, &revision) in wanted.iter().enumerate().filter(|(_, r)| **r > 0) {
                    if let Err(e) = self.lend(store, &call.geometries[i], &snap.blocks[i], revision) {
                        tracing::warn!("pool {}: lending to nodes without room failed: {e}", call.pools[i].name);
                    }
                }
                Ok(None)
            }
            Err(datastore::Error::Unavailable(unreachable)) => {
                for pool_blocks in &mut snap.blocks {
                    pool_blocks.retain(|b| snap.offline_window.allows(b));
                }
                tracing::warn!(
                    "{unreachable}: allocating only in blocks confirmed within offlineGrace ({}s)",
                    self.settings.offline_grace.as_secs()
                );
                Ok(Some(unreachable.to_string()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Before anything is allocated: two nodes adding one identity at once
    /// get it once, and a held identity is taken over (and leased here),
    /// after this call's answers showed etcd kept its history. The identity's
    /// key as the claim left it (see [`Node::record_identity_addresses`]).
    fn identity_phase(
        &self,
        store: &mut StoreHandle,
        call: &AddCall,
        s: &Sticking,
        snap: &mut Snapshot,
        offline: Option<&str>,
    ) -> Result<Option<sticky::Found>> {
        if let Some(why) = offline {
            return Err(CniError::new(
                Code::TryAgainLater,
                format!("identity {:?} is known only in the cluster's datastore, and {why}", s.identity),
            ));
        }
        let watermark = snap.watermark;
        let history = |store: &mut StoreHandle| self.check_history(store, &call.geometries, watermark, &[]);
        let claimed = self.claim_identity(store, &call.geometries, call.who, s, &history)?;
        snap.held = store.read(|tx| self.held_for(tx, &snap.owned, call.who, call.sticking))?;
        // What it took over is its own now, no longer another's in its block.
        for b in snap.blocks.iter_mut().flatten() {
            b.taken.retain(|a| !snap.held.iter().any(|l| l.address == *a && l.owner == *call.who));
        }
        Ok(claimed)
    }

    /// The plan's steps for one family, in order, until one gives room:
    /// room of the node's own, a shared block, a new block, another's shared
    /// block, a lent address. What a step got published for the attachment
    /// goes to `granted`. None: 100 (11 without the store).
    fn find_room(
        &self,
        store: &mut StoreHandle,
        call: &AddCall,
        snap: &mut Snapshot,
        family: Family,
        offline: Option<&str>,
        granted: &mut Vec<(String, IpAddr)>,
    ) -> Result<()> {
        let (pools, geometries, who, sticking) = (call.pools, &call.geometries, call.who, call.sticking);
        let watermark = snap.watermark;
        let history = |store: &mut StoreHandle| self.check_history(store, geometries, watermark, &[]);
        let grantee = sharing::Grantee { who, identity: sticking.map(|s| s.identity) };
        let of_family: Vec<usize> = (0..pools.len()).filter(|&i| pools[i].family() == family).collect();
        // An address an earlier ADD of this attachment got published and
        // then did not lease (killed in between): it is in the view.
        let mut found = snap.records.iter().any(|r| {
            r.kind == Kind::Allocated
                && r.state == RecordState::Held
                && of_family.iter().any(|&i| pools[i].name == r.pool)
        });
        // Blocks claimed in this call filled up before it got an address.
        let mut filled_under_us = false;
        // Room of its own that other ADDs of this node took first: the
        // search is planned again without it (at most once).
        for _ in 0..2 {
            if found {
                break;
            }
            let facts = self.pool_facts(store, call, snap, &of_family)?;
            let plan = plan::plan(&facts, offline.is_none());
            // Nearly full: claim the next block now, so that the node's
            // next ADDs find room without waiting for a claim. (A shared
            // block needs none: each ADD's address is granted before it
            // returns.)
            if let Some(i) = plan.claim_ahead {
                match self.claim(store, &geometries[i], &snap.owned[i]) {
                    Ok(new) => file_new_blocks(new, &mut snap.blocks[i], &mut snap.shared[i]),
                    Err(e) => tracing::warn!("pool {}: claiming a block ahead of need failed: {e}", pools[i].name),
                }
            }
            let mut room_taken = false;
            for step in plan.steps {
                if found {
                    break;
                }
                let address = match step {
                    // Leased here, under the node database's lock, so that
                    // concurrent ADDs of this node never count on one free
                    // address (an identity's is picked here too, so that
                    // its key can list it: a node sharing it must know it).
                    Step::Room(i) => {
                        let leased = self.lease_in_blocks(store, &geometries[i], &snap.blocks[i], who, sticking)?;
                        room_taken = leased.is_none();
                        leased
                    }
                    Step::GrantOwn(i) => {
                        self.grant_in_own(store, &geometries[i], &mut snap.shared[i], grantee, &history)?
                    }
                    Step::Claim(i) => {
                        let (address, filled) = self.claim_room(store, call, snap, i, grantee, &history)?;
                        filled_under_us |= filled;
                        address
                    }
                    Step::GrantOthers(i) => self.grant_in_others(store, &geometries[i], grantee, &history)?,
                    Step::Borrow(i) => self.borrow(store, &geometries[i], &snap.owned[i], who)?,
                };
                if let Some(address) = address {
                    granted.push((pools[step.pool()].name.clone(), address));
                    found = true;
                }
            }
            if !room_taken {
                break;
            }
            // Blocks that had room for this ADD when it looked: full now.
            for &i in &of_family {
                snap.blocks[i] = store.read(|tx| blocks_with_room(tx, &geometries[i], &snap.blocks[i]))?;
            }
        }
        match found {
            true => Ok(()),
            false => Err(no_room(pools, family, filled_under_us, offline)),
        }
    }

    /// What the plan is made from, for each of the family's pools
    /// (`of_family`, indices of the candidate pools).
    fn pool_facts(
        &self,
        store: &mut StoreHandle,
        call: &AddCall,
        snap: &Snapshot,
        of_family: &[usize],
    ) -> Result<Vec<(usize, PoolFacts)>> {
        let mut facts = Vec::with_capacity(of_family.len());
        for &i in of_family {
            let g = &call.geometries[i];
            let headroom = headroom(g);
            let free_own = match view(g, &snap.blocks[i], &[]) {
                Some(v) => store.read(|tx| count_free(tx, &v, headroom + 1))?,
                None => 0,
            };
            let claimed_out = free_own == 0 && store.read(|tx| self.claimed_out_lately(tx, &g.pool.name))?;
            facts.push((i, PoolFacts { free_own, headroom, shared: !snap.shared[i].is_empty(), claimed_out }));
        }
        Ok(facts)
    }

    /// The plan's claim in pool `i`: a new block, and the ADD's address in
    /// it (leased in a block of its own, granted in a shared one). A block
    /// just claimed (by this call, or by another of this node that all of a
    /// burst then share) may fill up before this call's address is taken in
    /// it: the next block is claimed then, as a later ADD would, at most
    /// [`CLAIMS_PER_ADD`]. Also whether that happened.
    fn claim_room(
        &self,
        store: &mut StoreHandle,
        call: &AddCall,
        snap: &mut Snapshot,
        i: usize,
        grantee: sharing::Grantee,
        history: &dyn Fn(&mut StoreHandle) -> Result<()>,
    ) -> Result<(Option<IpAddr>, bool)> {
        let g = &call.geometries[i];
        let mut filled_under_us = false;
        for _ in 0..CLAIMS_PER_ADD {
            // An identity's address is leased with its binding, after.
            let lease_for = call.sticking.is_none().then_some(call.who);
            let (new, leased) = self.claim_leasing(store, g, &snap.owned[i], lease_for, Some(grantee))?;
            if new.is_empty() {
                break;
            }
            snap.owned[i].extend(new.iter().cloned());
            let own = new.iter().any(|b| !b.shared);
            file_new_blocks(new, &mut snap.blocks[i], &mut snap.shared[i]);
            let address = match own {
                _ if leased.is_some() => leased,
                true => self.lease_in_blocks(store, g, &snap.blocks[i], call.who, call.sticking)?,
                false => self.grant_in_own(store, g, &mut snap.shared[i], grantee, history)?,
            };
            if address.is_some() {
                return Ok((address, filled_under_us));
            }
            filled_under_us = true;
        }
        Ok((None, filled_under_us))
    }

    /// Pool `i` as the allocators see it: the node's blocks with room, and
    /// as single addresses what the attachment holds elsewhere.
    fn pool_view(&self, call: &AddCall, snap: &Snapshot, i: usize, granted: &[(String, IpAddr)]) -> Option<Pool> {
        let pool = call.geometries[i].pool;
        // Only records etcd is known to have: a `writing` row may be of a
        // call killed before its etcd write, whose address anyone may be
        // granted (DEL and GC release such rows).
        let mut singles: Vec<IpAddr> = snap
            .records
            .iter()
            .filter(|r| r.pool == pool.name && r.state == RecordState::Held)
            .map(|r| r.address)
            .collect();
        singles.extend(granted.iter().filter(|(p, _)| *p == pool.name).map(|(_, a)| *a));
        singles.extend(snap.held.iter().filter(|l| l.pool == pool.name).map(|l| l.address));
        singles.extend(call.requests.iter().filter(|a| pool.range_for_subnet_member(**a).is_some()));
        view(&call.geometries[i], &snap.blocks[i], &singles)
    }
}

/// ADD's error when no step of the plan found an address of `family`:
/// 11 when blocks it claimed filled up under it or the store did not
/// answer (`offline`: why), else 100.
fn no_room(pools: &[Pool], family: Family, filled_under_us: bool, offline: Option<&str>) -> CniError {
    let names = shared::pool::names(pools.iter().filter(|p| p.family() == family));
    if filled_under_us {
        return CniError::new(
            Code::TryAgainLater,
            format!(
                "the {family} blocks this node claimed in the cluster pools ({names}) filled up while this ADD \
                 ran (other ADDs of this node took their addresses): try again, the next ADD claims another block"
            ),
        );
    }
    match offline {
        Some(why) => CniError::new(
            Code::TryAgainLater,
            format!(
                "no {family} block of this node confirmed within offlineGrace has a free address (cluster pools \
                 {names}; shared blocks are used only with the cluster's datastore), and {why}"
            ),
        ),
        None => CniError::new(
            Code::NoFreeAddress,
            format!(
                "no free {family} address in the cluster pools ({names}): this node's blocks are full, no block \
                 is left to claim, no shared block has room and no node has an address lent out; nodes with room \
                 of their own lend some at their next ADD"
            ),
        ),
    }
}
