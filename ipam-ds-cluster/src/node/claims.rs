//! Claiming blocks: the pool's definition (its cut, compared by every claim),
//! one claim per transaction, and adoption of a claim a kill left
//! unrecorded. Claims are made holding the node database's lock.

use super::*;

impl Node<'_> {
    /// Claims a block of `g`'s pool for this node, unless another process of
    /// this node has just done so: claims are made holding the node
    /// database's lock, so concurrent ADDs of one node claim one block, not
    /// one each. The blocks the node has that `known` lacks (none: no block
    /// is left to claim).
    pub(super) fn claim(&self, store: &mut StoreHandle, g: &Geometry, known: &[NodeBlock]) -> Result<Vec<NodeBlock>> {
        self.claim_leasing(store, g, known, None, None).map(|(blocks, _)| blocks)
    }

    /// [`Node::claim`], and in the same transaction, for `lease_for` the
    /// next free address of the blocks it returns that are this node's own
    /// (leased), for `reserve_for` the next of those that are shared (a row
    /// of its grant, `writing`, which its grant then tries first and the
    /// node's other calls pass over): in a burst, the other ADDs of the node
    /// waiting for the lock would otherwise take the block's every address
    /// before this one's next transaction.
    pub(super) fn claim_leasing(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        known: &[NodeBlock],
        lease_for: Option<&Attachment>,
        reserve_for: Option<sharing::Grantee>,
    ) -> Result<(Vec<NodeBlock>, Option<IpAddr>)> {
        let definition = to_bytes(&PoolRecord::of(g.pool, g.block_size));
        let network = self.network.clone();
        let decide = |tx: &Tx| -> Result<Option<Vec<NodeBlock>>> {
            let now_mine: Vec<NodeBlock> =
                tx.node_blocks(&network, &g.pool.name)?.into_iter().filter(|b| b.state == BlockState::Owned).collect();
            let new: Vec<NodeBlock> =
                now_mine.iter().filter(|b| !known.iter().any(|k| k.block == b.block)).cloned().collect();
            if !new.is_empty() {
                let blocks: Vec<IpNet> = new.iter().map(|b| b.block).collect();
                let taken: Vec<IpAddr> = new.iter().flat_map(|b| b.taken.iter().copied()).collect();
                if let Some(view) = g.node_view(&blocks, &[], &taken) {
                    if !self.free_to_grant(tx, g, &view, 1, None)?.is_empty() {
                        tracing::debug!("another call of this node claimed a block of pool {} meanwhile", g.pool.name);
                        return Ok(Some(new));
                    }
                }
            }
            let claimed = retry(CLAIM_ROUNDS, || {
                let (definition_kv, owners, indexed) = self.read_pool(&definition, g)?;
                let Some(definition_kv) = definition_kv.filter(|_| indexed) else {
                    self.define(g)?;
                    return Ok(Attempt::Conflict);
                };
                let adopted: Vec<(IpNet, i64)> = owners
                    .iter()
                    .filter(|(block, (r, _))| self.is_ours(r) && !now_mine.iter().any(|b| b.block == **block))
                    .map(|(block, (_, stored))| (*block, stored.created))
                    .collect();
                let (adopted, given_back): (Vec<_>, Vec<_>) = adopted
                    .into_iter()
                    .partition(|(block, revision)| !gave_back(tx, &network, &g.pool.name, block, *revision));
                // A claim this node gave back, shown again by an etcd
                // restored from an older backup: another node may have
                // claimed the block meanwhile and may hold its addresses, and
                // giving it back again would let anyone claim it before that
                // node notices. Left as it is for the operator (release-node).
                for (block, revision) in given_back {
                    tracing::warn!(
                        "block {block} of pool {} shows as this node's claim at revision {revision}, which it gave \
                         back (etcd restored from an older backup?): not used; another node may hold its addresses",
                        g.pool.name
                    );
                }
                if let Some(&(block, revision)) = adopted.first() {
                    // Claimed by a call of this node killed before it wrote
                    // it down: the node takes it back (its addresses are read
                    // at the next confirmation, before any is handed out).
                    tracing::warn!(
                        "block {block} of pool {} is this node's in the cluster's store but was not recorded: adopted",
                        g.pool.name
                    );
                    let taken = self.block_addresses(tx, &g.pool.name, &block)?;
                    let shared = owners.get(&block).is_some_and(|(r, _)| r.shared);
                    let b = self.owned_block(g, block, revision, taken, shared);
                    self.stamp(tx)?;
                    tx.put_node_block(&b)?;
                    return Ok(Attempt::Done(Some(vec![b])));
                }
                let free: Vec<IpNet> = g
                    .claim_order(&self.settings.node)
                    .filter(|b| !owners.contains_key(b))
                    .take(CLAIM_ATTEMPTS)
                    .collect();
                if free.is_empty() {
                    let clock = self.clock();
                    tx.set_note(
                        &claimed_out_note(&network, &g.pool.name),
                        &format!("{} {}", clock.boot_id, clock.now_ms),
                    )?;
                    return Ok(Attempt::Done(None));
                }
                for block in free {
                    if let Some(b) = self.claim_one(tx, g, block, &definition, &definition_kv)? {
                        self.stamp(tx)?;
                        tx.put_node_block(&b)?;
                        tracing::info!("claimed block {block} of pool {}", g.pool.name);
                        return Ok(Attempt::Done(Some(vec![b])));
                    }
                    tracing::debug!("block {block} of pool {} was claimed by another node first", g.pool.name);
                }
                // Every block tried was claimed first: read the pool again.
                Ok(Attempt::Conflict)
            })?;
            claimed.ok_or_else(|| {
                CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "pool {}: every block this node tried was claimed by another node first: try again",
                        g.pool.name
                    ),
                )
            })
        };
        let (claimed, leased) = holding_lock_over_etcd(store, |tx| {
            let claimed = decide(tx)?;
            let own: Vec<NodeBlock> = claimed.iter().flatten().filter(|b| !b.shared).cloned().collect();
            let leased = match (lease_for, view(g, &own, &[])) {
                (Some(who), Some(v)) => lease_next(tx, &v, who)?,
                _ => None,
            };
            let shared: Vec<NodeBlock> = claimed.iter().flatten().filter(|b| b.shared).cloned().collect();
            // With a block of its own, the ADD leases there and grants nothing.
            let reserving = reserve_for.filter(|_| own.is_empty());
            if let (Some(to), Some(v)) = (reserving, view(g, &shared, &[])) {
                if let Some(&address) = self.free_to_grant(tx, g, &v, 1, None)?.first() {
                    tx.put_node_record(&self.grant_row(g, address, to))?;
                }
            }
            Ok((claimed, leased))
        })?;
        // The new ones (claimed by this call, or by another call of this
        // node just now): confirmed at their claim.
        Ok((claimed.unwrap_or_default(), leased))
    }

    /// Whether a claim of this node found no block of `pool` left to claim
    /// within the last [`CLAIMED_OUT_FOR`] (see [`plan::plan`]).
    pub(super) fn claimed_out_lately(&self, tx: &Tx, pool: &str) -> Result<bool> {
        let Some(note) = tx.note(&claimed_out_note(&self.network, pool))? else { return Ok(false) };
        let Some((boot, at)) = note.split_once(' ') else { return Ok(false) };
        Ok(at.parse().is_ok_and(|at| self.clock().within(Some(boot), at, CLAIMED_OUT_FOR)))
    }

    /// Error 11 while the nodes re-claim their blocks after the store lost
    /// history (`stored`: its `_recovery`, when read): `refused` is what
    /// waits meanwhile.
    pub(super) fn recovering(&self, stored: Option<&Versioned>, refused: &str) -> CniError {
        let what = stored.and_then(datastore::recovery_of).map_or_else(String::new, |r| {
            format!(" (node {} saw it, {})", shown(&r.node), self.datastore.recovery_name())
        });
        CniError::new(
            Code::TryAgainLater,
            format!(
                "the cluster's store lost history{what}: while the nodes of network {:?} re-claim their blocks, \
                 {refused} (for at most offlineGrace + 3 × ipam.timeout): try again later",
                self.network
            ),
        )
    }

    /// The pool's definition in etcd (refusing one that differs from ours:
    /// nodes cutting a pool differently would hand out overlapping blocks)
    /// and every block with its owner.
    pub(super) fn read_pool(&self, definition: &[u8], g: &Geometry) -> Result<(Option<Versioned>, Owners, bool)> {
        let read = self.datastore.read_pool(&g.pool.name)?;
        if let Some(stored) = &read.recovery {
            return Err(self.recovering(Some(stored), "no block is claimed"));
        }
        // Before any claim or adoption: this node name is this database's.
        self.register(read.entry)?;
        if let Some(stored) = &read.definition {
            check_definition(stored, definition, g, &self.datastore.definition_name(&g.pool.name))?;
        }
        let owners = read
            .blocks
            .into_iter()
            .filter_map(|b| {
                let record = serde_json::from_slice::<BlockRecord>(&b.stored.value).ok()?;
                Some((b.block, (record, b.stored)))
            })
            .collect();
        Ok((read.definition, owners, read.indexed))
    }

    /// Defines the pool in etcd, in one transaction: its cut (which every
    /// claim and static reservation compares) and its entry in the
    /// network's index of pools, only while no pool of the index overlaps
    /// it and the index is as read. Two names over one range (a pool renamed
    /// on some nodes) would each hand out its addresses: error 7 naming
    /// both. A pool defined by an older build gets its index entry here too.
    pub(super) fn define(&self, g: &Geometry) -> Result<()> {
        let ours = PoolRecord::of(g.pool, g.block_size);
        let definition = to_bytes(&ours);
        let name = &g.pool.name;
        let defined = retry(CLAIM_ROUNDS, || {
            let index = self.datastore.read_pool_index(name)?;
            if let Some(stored) = &index.definition {
                check_definition(stored, &definition, g, &self.datastore.definition_name(name))?;
            }
            let mut indexed = false;
            for other in &index.pools {
                if other.name == *name {
                    indexed = true;
                    continue;
                }
                let Ok(theirs) = serde_json::from_slice::<PoolRecord>(&other.stored.value) else { continue };
                if let Some((mine, overlapping)) = ours.overlap(&theirs) {
                    return Err(CniError::config(
                        &format!("pool {name}"),
                        format!(
                            "its range {mine} overlaps range {} of pool {} of the same network in the cluster (etcd \
                             key {}): two pools over one range would each hand out its addresses. Give each range \
                             one pool name on every node",
                            shown(overlapping),
                            shown(&other.name),
                            shown(&other.key)
                        ),
                    ));
                }
            }
            if index.definition.is_some() && indexed {
                return Ok(Attempt::Done(()));
            }
            if self.datastore.define_pool(name, &definition, index.at, index.definition.as_ref())? {
                tracing::info!("pool {name} is defined in the cluster ({})", self.datastore.definition_name(name));
                return Ok(Attempt::Done(()));
            }
            Ok(Attempt::Conflict)
        })?;
        defined.ok_or_else(|| {
            CniError::new(
                Code::TryAgainLater,
                format!("pool {name}: the network's pools kept changing while it was defined: try again"),
            )
        })
    }

    /// One claim: the block key created if absent, with the pool's
    /// definition unchanged since `known` (read by [`Node::read_pool`]);
    /// reads the addresses others already hold in it in the same transaction.
    pub(super) fn claim_one(
        &self,
        tx: &Tx,
        g: &Geometry,
        block: IpNet,
        definition: &[u8],
        known: &Versioned,
    ) -> Result<Option<NodeBlock>> {
        let record = self.block_record(g);
        match self.datastore.claim_block(&g.pool.name, block, &to_bytes(&record), known)? {
            BlockClaim::Lost { definition: now } => {
                if let Some(stored) = &now {
                    check_definition(stored, definition, g, &self.datastore.definition_name(&g.pool.name))?;
                }
                Ok(None)
            }
            BlockClaim::Claimed { created, records } => {
                let taken = self.taken_here(tx, &records)?;
                Ok(Some(self.owned_block(g, block, created, taken, record.shared)))
            }
        }
    }

    pub(super) fn owned_block(
        &self,
        g: &Geometry,
        block: IpNet,
        revision: i64,
        taken: Vec<IpAddr>,
        shared: bool,
    ) -> NodeBlock {
        NodeBlock {
            shared,
            network: self.network.clone(),
            pool: g.pool.name.clone(),
            block,
            state: BlockState::Owned,
            revision,
            confirmed: self.clock().now_ms,
            taken,
            since: unix_now(),
        }
    }

    /// This node's claim of `block` (`found`, its record as etcd just showed it),
    /// as the node database has it once no claim of this node is under way:
    /// read holding the database's lock, which a claim holds until it has
    /// written its block down. A claim a kill left unrecorded is adopted,
    /// as [`Node::claim`] adopts one (its addresses read now). None: not a
    /// claim of this node database, one it gave back, or a block it is
    /// giving back or contests.
    pub(super) fn own_claim(
        &self,
        store: &mut StoreHandle,
        g: &Geometry,
        block: IpNet,
        found: &Versioned,
    ) -> Result<Option<NodeBlock>> {
        let Ok(record) = serde_json::from_slice::<BlockRecord>(&found.value) else { return Ok(None) };
        if !self.is_ours(&record) {
            return Ok(None);
        }
        let network = self.network.clone();
        holding_lock_over_etcd(store, |tx| {
            let known = tx.node_blocks(&network, &g.pool.name)?.into_iter().find(|b| b.block == block);
            match known {
                Some(b) => Ok((b.state == BlockState::Owned && b.revision == found.created).then_some(b)),
                None if gave_back(tx, &network, &g.pool.name, &block, found.created) => Ok(None),
                None => {
                    tracing::warn!(
                        "block {block} of pool {} is this node's in the cluster's store but was not recorded: adopted",
                        g.pool.name
                    );
                    let taken = self.block_addresses(tx, &g.pool.name, &block)?;
                    let b = self.owned_block(g, block, found.created, taken, record.shared);
                    self.stamp(tx)?;
                    tx.put_node_block(&b)?;
                    Ok(Some(b))
                }
            }
        })
    }

    /// The record of a new claim of this node, shared as its settings say for `g`.
    pub(super) fn block_record(&self, g: &Geometry) -> BlockRecord {
        self.claim_record(self.settings.shares(g.block_count(), g.block_len()))
    }

    /// The record of a claim of this node, `shared` or its own.
    pub(super) fn claim_record(&self, shared: bool) -> BlockRecord {
        BlockRecord { node: self.settings.node.clone(), at: unix_now(), released: false, db: self.db.clone(), shared }
    }

    pub(super) fn block_addresses(&self, tx: &Tx, pool: &str, block: &IpNet) -> Result<Vec<IpAddr>> {
        let records = self.datastore.block_records(pool, *block)?;
        self.taken_here(tx, &records)
    }
}

pub(super) fn gave_back_note(network: &str, pool: &str, block: &IpNet) -> String {
    format!("gave-back:{network}/{pool}/{block}")
}

/// Whether this node gave back its claim of `block` at `revision`.
pub(super) fn gave_back(tx: &Tx, network: &str, pool: &str, block: &IpNet, revision: i64) -> bool {
    tx.note(&gave_back_note(network, pool, block)).ok().flatten().is_some_and(|n| n == revision.to_string())
}

pub(super) fn check_definition(stored: &Versioned, ours: &[u8], g: &Geometry, key: &str) -> Result<()> {
    if stored.value == ours {
        return Ok(());
    }
    let theirs = shown_bytes(&stored.value);
    Err(CniError::config(
        &format!("pool {}", g.pool.name),
        format!(
            "its ranges or blockSize ({}) differ from the cluster's ({theirs}, etcd key {key}): every node must \
             configure a cluster pool alike, or their blocks would overlap",
            String::from_utf8_lossy(ours)
        ),
    ))
}
