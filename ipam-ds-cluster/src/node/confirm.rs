//! Confirming this node's blocks of its own: one linearizable read of the
//! blocks an ADD may use (still this node's claim? what do others hold in
//! them?), skipped while the last one is fresh, and what it changed written
//! down (see the README, "One read per ADD, at most").

use super::*;

/// What a confirming read said of the node's blocks, pool by pool, with the
/// node's entry in etcd; or why etcd did not answer it (the node database's
/// failures are the outer error).
pub(super) type Confirmation = std::result::Result<(Vec<Confirmed>, Option<Versioned>), datastore::Error>;

impl Node<'_> {
    /// Whether this ADD may skip the confirming read:
    /// - every block of its own with room was confirmed within
    ///   [`Settings::confirmation_cache`] and each family it needs has one.
    ///   Safe as offline allocation is, within a tenth of its window: a block
    ///   confirmed ours stays ours for offlineGrace at least (`release-node`
    ///   waits that out, and nothing else takes a block from its owner), and
    ///   nobody else writes in it but where its owner lent (see the README,
    ///   "Why no address is handed out twice");
    /// - or it has no block of its own with room, and shared blocks in each
    ///   family it needs: their addresses are granted by transactions that
    ///   compare the block unchanged, which confirms it.
    pub(super) fn needs_no_confirmation(
        &self,
        pools: &[Pool],
        blocks: &[Vec<NodeBlock>],
        shared: &[Vec<NodeBlock>],
        needed: &[Family],
        boot: Option<&str>,
    ) -> bool {
        let has =
            |of: &[Vec<NodeBlock>], f: &Family| pools.iter().zip(of).any(|(p, b)| p.family() == *f && !b.is_empty());
        if blocks.iter().all(Vec::is_empty) {
            return !needed.is_empty() && needed.iter().all(|f| has(shared, f));
        }
        let cache = self.settings.confirmation_cache();
        !cache.is_zero()
            && needed.iter().all(|f| has(blocks, f))
            && blocks.iter().flatten().all(|b| self.clock().within(boot, b.confirmed, cache))
    }

    /// One etcd read for every block this node uses: its record (still
    /// ours?) and the addresses others hold in it. More blocks than one
    /// transaction holds are read in several, each block's two reads in one.
    pub(super) fn confirm(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        blocks: &[Vec<NodeBlock>],
    ) -> Result<Confirmation> {
        // Linearizable: a store member cut off from its quorum keeps a copy
        // that stays stale for as long as it is cut off (it never shows a
        // `release-node` tombstone written on the majority side, nor another
        // node's claim after it): its "yes, still yours" is no confirmation.
        // It answers as unreachable, and only offlineGrace applies, counted
        // from the last confirmation by a quorum. The node's entry is always
        // read, so that every ADD that reaches the store learns whether it
        // lost history and whether another database runs under the node's
        // name.
        let asked: Vec<(&str, Vec<IpNet>)> = geometries
            .iter()
            .zip(blocks)
            .map(|(g, pool_blocks)| (g.pool.name.as_str(), pool_blocks.iter().map(|b| b.block).collect()))
            .collect();
        let read = match self.datastore.confirm(&asked) {
            Ok(read) => read,
            Err(e) => return Ok(Err(e)),
        };
        let mut confirmed = Vec::with_capacity(blocks.len());
        for (pool_blocks, pool) in blocks.iter().zip(read.pools) {
            let mut c = Confirmed { ours: Vec::new(), lost: Vec::new(), wanted: pool.wanted, stale: Vec::new() };
            for (b, (record, records)) in pool_blocks.iter().zip(pool.blocks) {
                match self.ours(record.as_ref(), b.revision) {
                    Ok(revision) => {
                        let taken = self.taken_in(store, &records)?;
                        c.stale.extend(records.into_iter().filter(|r| self.stale_lent(&r.stored)));
                        c.ours.push(NodeBlock { revision, taken, ..b.clone() });
                    }
                    Err(why) => c.lost.push((b.clone(), why, record)),
                }
            }
            confirmed.push(c);
        }
        Ok(Ok((confirmed, read.entry)))
    }

    /// Writes what the confirmation changed: lost blocks go, and a block's
    /// confirmation time is refreshed when it has aged a tenth of
    /// offlineGrace (so the steady state rarely writes).
    pub(super) fn record_confirmed(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        blocks: &mut [Vec<NodeBlock>],
        confirmed: Vec<Confirmed>,
        boot: Option<&str>,
    ) -> Result<()> {
        let now = self.clock().now_ms;
        // Written down as often as the cache needs it: a tenth of
        // offlineGrace at most, so that offline the node still has 0.9 of it.
        let refresh = i64::try_from(self.settings.confirmation_cache().as_millis()).unwrap_or(i64::MAX).max(1000);
        let same_boot = boot == Some(self.clock().boot_id.as_str());
        let mut changes: Vec<NodeBlock> = Vec::new();
        let mut lost: Vec<(&Geometry, NodeBlock, String, Option<Versioned>)> = Vec::new();
        for ((pool_blocks, c), g) in blocks.iter_mut().zip(confirmed).zip(geometries) {
            let mut ours = c.ours;
            for b in &mut ours {
                let before = pool_blocks.iter().find(|p| p.block == b.block);
                let changed = !same_boot
                    || before.is_none_or(|p| {
                        !(0..refresh).contains(&(now - p.confirmed)) || p.taken != b.taken || p.revision != b.revision
                    });
                // Confirmed now; written down only when it has aged (or changed).
                b.confirmed = now;
                if changed {
                    changes.push(b.clone());
                }
            }
            lost.extend(c.lost.into_iter().map(|(b, why, kv)| (g, b, why, kv)));
            *pool_blocks = ours;
        }
        if changes.is_empty() && lost.is_empty() {
            return Ok(());
        }
        type Held<'g> = (&'g Geometry<'g>, NodeBlock, String, Option<Versioned>, Vec<Lease>);
        let held: Vec<Held> = store.write(|tx| {
            self.stamp(tx)?;
            for b in &changes {
                tx.put_node_block(b)?;
                // Another node's record for an address leased here: one
                // address, two attachments (etcd lost history, or this node
                // came back after release-node). Only the operator can choose.
                // (A hold of an identity here is no attachment's: its address
                // is held in etcd, or live on the node that took it over.)
                for &address in &b.taken {
                    if let Some(lease) = tx.holder(address)?.filter(|l| l.owner.network == self.network && !l.is_hold())
                    {
                        tracing::error!(
                            "{address} is leased here to container {} interface {} and recorded in the cluster for \
                             another node: an address held twice (block {} of pool {})",
                            shown(&lease.owner.container_id),
                            shown(&lease.owner.ifname),
                            b.block,
                            b.pool
                        );
                    }
                }
            }
            let mut held = Vec::new();
            for (g, b, why, kv) in &lost {
                let leases = self.leases_in(tx, b)?;
                if leases.is_empty() {
                    tracing::warn!(
                        "block {} of pool {} is no longer this node's: {why}; it is not used again",
                        b.block,
                        b.pool
                    );
                    self.drop_block(tx, b)?;
                } else {
                    held.push((*g, b.clone(), why.clone(), kv.clone(), leases));
                }
            }
            Ok(held)
        })?;
        // A lost block with our leases in it is not forgotten: claimed back
        // when etcd has no owner for it, else its owner must learn which of
        // its addresses are ours.
        for (g, b, why, kv, leases) in held {
            tracing::warn!("block {} of pool {} holds leases of this node but {why}", b.block, b.pool);
            self.take_back(store, Some(g), &b, &leases, kv.as_ref())?;
        }
        Ok(())
    }

    /// Our claim if `found` (a block's record) shows the block ours;
    /// otherwise why not.
    pub(super) fn ours(&self, found: Option<&Versioned>, revision: i64) -> std::result::Result<i64, String> {
        let Some(found) = found else { return Err("it is no longer claimed (released by an operator?)".into()) };
        match serde_json::from_slice::<BlockRecord>(&found.value) {
            Ok(r) if r.released => Err(format!("it was released ({} at unix time {})", shown(&r.node), r.at)),
            Ok(r) if r.node != self.settings.node => Err(format!("node {} owns it now", shown(&r.node))),
            Ok(_) if revision != 0 && found.created != revision => {
                Err(format!("it was claimed again (revision {} instead of {revision})", found.created))
            }
            Ok(_) => Ok(found.created),
            Err(e) => Err(format!("its record does not read ({e})")),
        }
    }

    /// Whether `stored`, an address record of one of our blocks, is a lent
    /// record of another node: its lender no longer owns the block.
    pub(super) fn stale_lent(&self, stored: &Versioned) -> bool {
        serde_json::from_slice::<AddressRecord>(&stored.value)
            .is_ok_and(|r| r.kind == Kind::Lent && r.node != self.settings.node)
    }

    /// Deletes lent records left by a block's former owner, so that their
    /// addresses are free again in the block (from the next call on).
    pub(super) fn drop_stale_lent(&self, stale: &[datastore::AddressEntry]) {
        for r in stale {
            match self.datastore.delete_record(&r.key, r.stored.version) {
                Ok(_) => tracing::info!("dropped {}: lent by a former owner of the block", shown(&r.key)),
                Err(e) => tracing::warn!("{} stays for now: {}", shown(&r.key), CniError::from(e)),
            }
        }
    }

    /// Addresses of a block that other nodes (or other attachments through
    /// records) hold: every address record that does not name this node.
    /// (What etcd alone tells; [`Node::taken_here`] is what this node's
    /// database adds to it.)
    pub(super) fn taken(&self, records: &[datastore::AddressEntry]) -> Vec<IpAddr> {
        records
            .iter()
            .filter_map(|r| {
                let record: AddressRecord = serde_json::from_slice(&r.stored.value).ok()?;
                (record.node != self.settings.node).then_some(r.address)
            })
            .collect()
    }

    /// Addresses of a block that this node must not hand out: [`Node::taken`],
    /// and every record naming this node that its database does not back
    /// (see [`Node::backed_here`]).
    pub(super) fn taken_here(&self, tx: &Tx, records: &[datastore::AddressEntry]) -> Result<Vec<IpAddr>> {
        let mut taken = Vec::new();
        for r in records {
            let Ok(record) = serde_json::from_slice::<AddressRecord>(&r.stored.value) else { continue };
            if record.node != self.settings.node || !self.backed_here(tx, &r.key, r.address, &record)? {
                taken.push(r.address);
            }
        }
        Ok(taken)
    }

    /// [`Node::taken_here`], reading the node database only when some
    /// record names this node (the steady state reads nothing more).
    pub(super) fn taken_in(&self, store: &mut StoreHandle, records: &[datastore::AddressEntry]) -> Result<Vec<IpAddr>> {
        let names_this_node = records.iter().any(|r| {
            serde_json::from_slice::<AddressRecord>(&r.stored.value).is_ok_and(|a| a.node == self.settings.node)
        });
        match names_this_node {
            true => store.read(|tx| self.taken_here(tx, records)),
            false => Ok(self.taken(records)),
        }
    }

    /// Whether this node's database backs `record`, an address record naming
    /// this node: its row of the record (this node writes, holds or
    /// releases it), a lease here of the attachment it names, or a hold for
    /// lending (`lent`). Others write records naming this node too: a node
    /// sharing an identity (shareLive) names the identity's first attachment,
    /// and one passing an identity on names the next. Such a record whose
    /// attachment is gone here (its DEL could not reach etcd) is no address
    /// of this node's own, already known: another node's container may use
    /// its address, so it counts as taken.
    fn backed_here(&self, tx: &Tx, key: &str, address: IpAddr, record: &AddressRecord) -> Result<bool> {
        if record.kind == Kind::Lent {
            return Ok(true);
        }
        let named = Attachment {
            network: self.network.clone(),
            container_id: record.container.clone(),
            ifname: record.ifname.clone(),
        };
        if tx.node_record(key)?.is_some_and(|row| row.owner == named) {
            return Ok(true);
        }
        Ok(tx.holder(address)?.is_some_and(|l| !l.is_hold() && l.owner == named) || tx.shares_lease(address, &named)?)
    }
}
