//! After etcd lost history (wiped, or restored from an older backup): how
//! the node notices, keeps other nodes off while nodes re-claim their blocks
//! (`_recovery`), and puts back what it holds (see the README, "etcd wiped,
//! or restored from an older backup").

use super::*;
use crate::datastore::Created;

impl Node<'_> {
    /// Whether etcd lost history since this node last wrote down what it
    /// saw: an answer at a revision below it (etcd restored from an older
    /// backup, or its data wiped). Then the node recovers its blocks (see
    /// [`Node::recover`]) and the call fails with 11, to be tried again.
    pub(super) fn check_history(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        watermark: Option<i64>,
        confirmed: &[Confirmed],
    ) -> Result<()> {
        let Some((lowest, _)) = self.datastore.marks() else { return Ok(()) };
        // A key's create revision only grows over a continuous history: a
        // block key of ours created before our own claim of it is etcd's
        // older state, whatever the revisions it answers at now (other
        // nodes' writes since the restore may have carried them past ours).
        let older_claim = confirmed
            .iter()
            .flat_map(|c| &c.lost)
            .filter(|_| self.datastore.claims_grow())
            .filter_map(|(b, _, found)| found.as_ref().filter(|f| f.created < b.revision).map(|_| b.revision))
            .max();
        let Some(seen) = watermark.filter(|w| lowest < *w).or(older_claim) else { return Ok(()) };
        let loss = self.datastore.history_loss(lowest, seen);
        tracing::error!("{loss}; re-claiming this node's blocks");
        self.recover(store, geometries, seen, lowest)?;
        Err(CniError::new(
            Code::TryAgainLater,
            format!("{loss}: this node re-claimed its blocks of network {:?} where it could; try again", self.network),
        ))
    }

    /// After etcd lost history, puts what this node holds back as it was, as
    /// far as etcd allows, without ever taking an address another node may
    /// hold:
    /// - for offlineGrace + 3 × ipam.timeout no node claims or adopts any
    ///   other block of the network, nor takes a lent address (`_recovery`),
    ///   so that nodes re-claim their own first;
    /// - every block of the network it holds, in any pool (not only this
    ///   call's): one still ours stays (at its claim's revision); one etcd
    ///   lost that holds our leases is claimed again (contested when its
    ///   pool is not among this call's, whose cut it needs); one another node
    ///   owns that holds our leases is contested (see [`Node::contest`]); one
    ///   without our leases is dropped;
    /// - every address record it holds is written again where etcd lost it
    ///   (an address held twice is logged), and records etcd shows as this
    ///   node's that it does not hold (released, or lent and taken back,
    ///   before the loss) are deleted, so nobody borrows them.
    pub(super) fn recover(
        &self,
        store: &mut StoreHandle,
        geometries: &[Geometry],
        seen: i64,
        now_at: i64,
    ) -> Result<()> {
        self.quarantine(seen, now_at)?;
        let rows: Vec<(NodeBlock, Vec<Lease>)> = store.read(|tx| {
            let mut rows = Vec::new();
            for b in tx.network_blocks(&self.network)? {
                if b.state != BlockState::Releasing {
                    let held = self.leases_in(tx, &b)?;
                    rows.push((b, held));
                }
            }
            Ok(rows)
        })?;
        let which: Vec<(&str, IpNet)> = rows.iter().map(|(b, _)| (b.pool.as_str(), b.block)).collect();
        let found = self.datastore.blocks(&which)?;
        for ((b, held), found) in rows.iter().zip(found) {
            let g = geometries.iter().find(|g| g.pool.name == b.pool);
            self.take_back(store, g, b, held, found.as_ref())?;
        }
        self.rewrite_records(store, None)?;
        let highest = self.datastore.marks().map_or(now_at, |(_, high)| high);
        store.write(|tx| tx.set_note(&revision_note(&self.network), &highest.to_string()))
    }

    /// After etcd lost history: this node's address records as its database
    /// holds them, in every pool of the network, or only in one block (one
    /// etcd lost and this node claimed back).
    pub(super) fn rewrite_records(&self, store: &mut StoreHandle, only: Option<&NodeBlock>) -> Result<()> {
        let within = |pool: &str, address: IpAddr| only.is_none_or(|b| b.pool == pool && b.block.contains(&address));
        let (rows, lent) =
            store.read(|tx| Ok((tx.node_records(&self.network)?, tx.leases_of(&lend_holder(&self.network))?)))?;
        let rows: Vec<NodeRecord> = rows.into_iter().filter(|r| within(&r.pool, r.address)).collect();
        let lent: Vec<Lease> = lent.into_iter().filter(|l| within(&l.pool, l.address)).collect();
        let mut pools: Vec<&str> = rows.iter().map(|r| r.pool.as_str()).collect();
        pools.extend(lent.iter().map(|l| l.pool.as_str()));
        pools.extend(only.map(|b| b.pool.as_str()));
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            let found = match only {
                Some(b) => self.datastore.block_records(pool, b.block)?,
                None => self.datastore.address_records(pool)?,
            };
            for r in rows.iter().filter(|r| r.pool == pool && r.state == RecordState::Held) {
                let theirs = found.iter().find(|f| f.key == r.key).map(|f| &f.stored);
                match theirs {
                    Some(kv) if kv.value == r.value.as_bytes() => {}
                    Some(kv) => tracing::error!(
                        "{} is held here by container {} interface {} and, since etcd lost history, in the cluster \
                         too ({}): an address held twice",
                        r.address,
                        shown(&r.owner.container_id),
                        shown(&r.owner.ifname),
                        shown_bytes(&kv.value)
                    ),
                    None => {
                        if matches!(self.datastore.create_record(&r.key, r.value.as_bytes())?, Created::Done(_)) {
                            tracing::warn!("{} of pool {pool}: its record, lost by etcd, is written again", r.address);
                        }
                    }
                }
            }
            // Records that name this node but that it does not hold.
            for f in &found {
                let Ok(record) = serde_json::from_slice::<AddressRecord>(&f.stored.value) else { continue };
                let address = f.address;
                let ours = record.node == self.settings.node;
                let held = match record.kind {
                    Kind::Lent => lent.iter().any(|l| l.address == address),
                    _ => rows.iter().any(|r| r.key == f.key),
                };
                if ours && !held && self.datastore.delete_record(&f.key, f.stored.version)? {
                    tracing::warn!("{address} of pool {pool}: a record of this node that it no longer holds, shown again by etcd, is deleted");
                }
            }
        }
        Ok(())
    }

    /// What becomes of block `b`, which holds this node's leases `held`, when
    /// etcd shows it as `kv` (none: absent). `g`: its pool, when this call
    /// has it (claiming the block back needs its cut).
    pub(super) fn take_back(
        &self,
        store: &mut StoreHandle,
        g: Option<&Geometry>,
        b: &NodeBlock,
        held: &[Lease],
        found: Option<&Versioned>,
    ) -> Result<()> {
        let record = found.and_then(|f| serde_json::from_slice::<BlockRecord>(&f.value).ok());
        match (found, &record) {
            (Some(found), Some(r)) if self.is_ours(r) => {
                tracing::warn!(
                    "block {} of pool {} is this node's in etcd at revision {}",
                    b.block,
                    b.pool,
                    found.created
                );
                let kept = NodeBlock { state: BlockState::Owned, revision: found.created, ..b.clone() };
                store.write(|tx| tx.put_node_block(&kept))?;
                // Claimed again (by this node's own recovery, killed before it
                // wrote the block down): what it recorded in it may be gone.
                if found.created != b.revision {
                    self.rewrite_records(store, Some(b))?;
                }
                Ok(())
            }
            _ if held.is_empty() => {
                tracing::warn!("block {} of pool {} holds no lease here: left to the cluster", b.block, b.pool);
                store.write(|tx| self.drop_block(tx, b))
            }
            (None, _) => match g {
                Some(g) if self.reclaim(store, g, b, held)? => Ok(()),
                Some(_) => self.contest(store, b, held, "another node claimed it first"),
                None => self.contest(store, b, held, "etcd lost it (claimed back when its pool is used)"),
            },
            (Some(_), r) => {
                let holder =
                    r.as_ref().map_or("an unreadable record".to_string(), |r| format!("node {}", shown(&r.node)));
                self.contest(store, b, held, &format!("etcd shows it {holder}'s"))
            }
        }
    }

    /// Claims `b` again after etcd lost it (the quarantine does not apply:
    /// its leases `held` are this node's), reading what others hold in it,
    /// as the kind it was claimed (see [`Node::reclaimed_kind`]). False when
    /// another node has it.
    pub(super) fn reclaim(&self, store: &mut StoreHandle, g: &Geometry, b: &NodeBlock, held: &[Lease]) -> Result<bool> {
        self.define(g)?;
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let record = self.claim_record(self.reclaimed_kind(store, b, held)?);
        let Some((created, records)) =
            self.datastore.reclaim_block(&b.pool, b.block, &to_bytes(&record), &definition)?
        else {
            return Ok(false);
        };
        tracing::warn!("block {} of pool {} was gone from etcd: claimed again", b.block, b.pool);
        let taken = self.taken_in(store, &records)?;
        let again = self.owned_block(g, b.block, created, taken, record.shared);
        store.write(|tx| {
            self.stamp_boot(tx)?;
            tx.put_node_block(&NodeBlock { since: b.since, ..again })
        })?;
        // What this node recorded in the block went with it.
        self.rewrite_records(store, Some(b))?;
        Ok(true)
    }

    /// Whether block `b`, claimed back, is shared: as it was claimed, whatever
    /// `shareBlocks` says now (a block's kind is fixed at its claim). The
    /// node database has the kind of every block (a database of a build
    /// before shared blocks says "own", which is what that build claimed).
    /// A block of its own hands addresses out with no etcd record: claimed
    /// back as shared, they would look free to every node. So a block is
    /// shared again only if each of this node's leases in it has its
    /// record, which [`Node::rewrite_records`] writes again; else it is
    /// claimed back as its own, which is safe whatever it was (what others
    /// hold in it is read and skipped, and nobody else allocates in it).
    fn reclaimed_kind(&self, store: &mut StoreHandle, b: &NodeBlock, held: &[Lease]) -> Result<bool> {
        if !b.shared {
            return Ok(false);
        }
        let unrecorded = store.read(|tx| {
            let mut unrecorded = Vec::new();
            for lease in held {
                let row = tx.node_record(&self.record_key(&b.pool, &b.block, lease.address))?;
                if row.is_none_or(|r| r.state != RecordState::Held) {
                    unrecorded.push(lease.address);
                }
            }
            Ok(unrecorded)
        })?;
        if !unrecorded.is_empty() {
            tracing::warn!(
                "shared block {} of pool {} holds leases of this node without their record ({unrecorded:?}): \
                 claimed back as this node's own, so that no other node is granted them",
                b.block,
                b.pool
            );
        }
        Ok(unrecorded.is_empty())
    }

    /// A block that holds leases of this node but is another's in etcd (or
    /// that etcd lost, and this call cannot claim back): it is never handed
    /// to the allocators again, and each lease is published as this node's
    /// address record in it, so that its owner's allocators skip the address
    /// (they read the block's records at each ADD). Marked first and
    /// published after: [`Node::settle`] publishes what a kill or an etcd
    /// failure left unpublished, at every later call. An address another
    /// attachment already holds in the cluster is logged as held twice.
    pub(super) fn contest(&self, store: &mut StoreHandle, b: &NodeBlock, held: &[Lease], why: &str) -> Result<()> {
        if b.state != BlockState::Contested {
            tracing::error!(
                "block {} of pool {} holds {} lease(s) of this node but {why}: their addresses are published as \
                 this node's, and the block is not used again",
                b.block,
                b.pool,
                held.len()
            );
            store.write(|tx| {
                tx.put_node_block(&NodeBlock { state: BlockState::Contested, since: unix_now(), ..b.clone() })
            })?;
        }
        for lease in held {
            let key = self.record_key(&b.pool, &b.block, lease.address);
            match store.read(|tx| tx.node_record(&key))? {
                Some(r) if r.state == RecordState::Writing && r.owner == lease.owner => {}
                Some(_) => continue,
                None => {}
            }
            let value = to_text(&AddressRecord {
                kind: Kind::Static,
                node: self.settings.node.clone(),
                container: lease.owner.container_id.clone(),
                ifname: lease.owner.ifname.clone(),
                lender: String::new(),
                identity: String::new(),
            });
            let row = NodeRecord {
                key: key.clone(),
                value: value.clone(),
                pool: b.pool.clone(),
                address: lease.address,
                kind: Kind::Static,
                owner: lease.owner.clone(),
                added_by: Some(RECOVERED.to_string()),
                state: RecordState::Writing,
            };
            store.write(|tx| tx.put_node_record(&row))?;
            // Unsure (no answer): the row stays `writing`, and publishing is
            // tried again (create if absent: a write that did happen is
            // found as ours). Never `releasing`: releasing a record releases
            // its lease, which a running container holds.
            let theirs = match self.datastore.create_record(&key, value.as_bytes())? {
                Created::Done(_) => None,
                Created::Exists(theirs) => Some(theirs),
            };
            let published = match &theirs {
                None => true,
                Some(now) => now.as_ref().is_some_and(|now| now.value == value.as_bytes()),
            };
            if published {
                store.write(|tx| tx.set_node_record_state(&key, RecordState::Held))?;
            } else {
                store.write(|tx| tx.drop_node_record(&key))?;
                tracing::error!(
                    "{} is leased here to container {} interface {} and held in the cluster too ({}): an address \
                     held twice",
                    lease.address,
                    shown(&lease.owner.container_id),
                    shown(&lease.owner.ifname),
                    theirs.flatten().map_or(String::new(), |now| shown_bytes(&now.value))
                );
            }
        }
        Ok(())
    }

    /// Keeps the network's nodes from claiming or adopting blocks while they
    /// re-claim their own, for as long as a node may allocate unconfirmed.
    pub(super) fn quarantine(&self, seen: i64, now_at: i64) -> Result<()> {
        let window = self.settings.offline_grace + self.settings.call_timeout * 3;
        let ttl = (window.as_secs_f64().ceil() as i64).max(1);
        let record = RecoveryRecord { node: self.settings.node.clone(), at: unix_now(), from: seen, to: now_at };
        if self.datastore.quarantine(&record, ttl)? {
            let key = self.datastore.recovery_name();
            tracing::warn!("no block of network {:?} is claimed by any node for {ttl}s ({key})", self.network);
        }
        Ok(())
    }
}
