//! The datastore on etcd: the key layout ([`layout`]), each operation of
//! [`Datastore`] as one transaction (or one read), and what a call keeps
//! for the next (the auth token).

pub mod layout;

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use shared::store::{StoreHandle, Tx};
use shared::{CniError, Code};

use super::{
    Answer, BlockClaim, BlockEntry, BlockIs, ConfirmRead, Created, Datastore, Error, Expect, GrantRefusal, IndexedPool,
    Outcome, PoolConfirm, PoolIndex, PoolRead, PoolRecords, RecordChange, RecordRelease, Reservation, ReserveRefusal,
    Swap, Then, Version, Versioned,
};
use crate::etcd::{self, Client, Compare, Kv, Op, OpResponse, RangeRequest, Txn};
use crate::records::{shown, to_bytes, BlockRecord, NodeEntry, RecoveryRecord};
use crate::rows::ClusterRows;
use layout::{NetworkKeys, PoolKeys};

/// What the datastore asks of etcd: its v3 API as [`Client`] speaks it (an
/// in-memory etcd stands in for it in unit tests).
pub trait Api {
    fn txn(&self, txn: &Txn) -> Result<etcd::TxnResponse, etcd::Error>;
    fn range(&self, req: &RangeRequest) -> Result<etcd::RangeResponse, etcd::Error>;
    /// See [`Client::read_in_txns`].
    fn read_in_txns(&self, groups: Vec<Vec<Op>>) -> Result<Vec<OpResponse>, etcd::Error>;
    /// The lease id.
    fn lease_grant(&self, ttl_seconds: i64) -> Result<i64, etcd::Error>;
    /// See [`Client::revisions`].
    fn revisions(&self) -> Option<(i64, i64)>;
    fn forget_revisions(&self);
    fn token(&self) -> Option<String>;
    fn requests(&self) -> etcd::RequestCount;
}

impl Api for Client {
    fn txn(&self, txn: &Txn) -> Result<etcd::TxnResponse, etcd::Error> {
        Client::txn(self, txn)
    }
    fn range(&self, req: &RangeRequest) -> Result<etcd::RangeResponse, etcd::Error> {
        Client::range(self, req)
    }
    fn read_in_txns(&self, groups: Vec<Vec<Op>>) -> Result<Vec<OpResponse>, etcd::Error> {
        Client::read_in_txns(self, groups)
    }
    fn lease_grant(&self, ttl_seconds: i64) -> Result<i64, etcd::Error> {
        Client::lease_grant(self, ttl_seconds)
    }
    fn revisions(&self) -> Option<(i64, i64)> {
        Client::revisions(self)
    }
    fn forget_revisions(&self) {
        Client::forget_revisions(self)
    }
    fn token(&self) -> Option<String> {
        Client::token(self)
    }
    fn requests(&self) -> etcd::RequestCount {
        Client::requests(self)
    }
}

/// One node's calls on one network, on etcd.
pub struct EtcdStore<C: Api = Client> {
    client: C,
    prefix: String,
    network: String,
    node: String,
    /// The auth token the call started with, to save a new one once.
    cached_token: Option<String>,
    /// Where that token is kept: one per endpoints, user and password.
    token_note: Option<String>,
}

impl EtcdStore<Client> {
    /// The client of `settings`, with the auth token an earlier call saved
    /// in the node database.
    pub fn open(
        client: &etcd::Settings,
        prefix: &str,
        settings: &crate::settings::Settings,
        network: &str,
        store: &mut StoreHandle,
    ) -> shared::Result<EtcdStore> {
        let token_note = client.token_note();
        let cached_token = match &token_note {
            Some(note) => store.read(|tx| tx.note(note))?,
            None => None,
        };
        let client = Client::new(client.clone()).map_err(etcd_error)?.with_token(cached_token.clone());
        Ok(EtcdStore { cached_token, token_note, ..EtcdStore::over(client, prefix, settings, network) })
    }
}

impl<C: Api> EtcdStore<C> {
    /// The store over `client`, with no token kept between calls (the
    /// operator's tool).
    pub fn over(client: C, prefix: &str, settings: &crate::settings::Settings, network: &str) -> EtcdStore<C> {
        EtcdStore {
            client,
            prefix: prefix.to_string(),
            network: network.to_string(),
            node: settings.node.clone(),
            cached_token: None,
            token_note: None,
        }
    }

    /// The key prefix, for the operator's commands that read etcd's layout.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The client, for the operator's commands that read etcd's layout
    /// themselves.
    pub fn client(&self) -> &C {
        &self.client
    }

    fn pool_keys(&self, pool: &str) -> PoolKeys {
        PoolKeys::new(&self.prefix, &self.network, pool)
    }

    fn net_keys(&self) -> NetworkKeys {
        NetworkKeys::new(&self.prefix, &self.network)
    }

    fn txn(&self, txn: &Txn) -> Answer<etcd::TxnResponse> {
        self.client.txn(txn).map_err(failure)
    }

    /// One read-only transaction of `N` ranges: the key-values of each, and
    /// the revision etcd answered at.
    fn read<const N: usize>(&self, reads: [RangeRequest; N]) -> Answer<([Vec<Kv>; N], i64)> {
        let txn = Txn { success: reads.into_iter().map(Op::Range).collect(), ..Txn::default() };
        let answer = self.txn(&txn)?;
        Ok((ranges(answer.responses)?, answer.revision))
    }

    /// The address records among `kvs` (keys under the pool's `addrs/`).
    pub(crate) fn address_entries(&self, keys: &PoolKeys, kvs: Vec<Kv>) -> Vec<super::AddressEntry> {
        kvs.into_iter()
            .filter_map(|kv| {
                let (block, address) = keys.parse_address(&kv.key)?;
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                Some(super::AddressEntry { key, block, address, stored: versioned(kv) })
            })
            .collect()
    }

    /// The address records a claim's transaction read in the block it put
    /// (its second operation).
    fn claimed_records(&self, keys: &PoolKeys, responses: Vec<OpResponse>) -> Vec<super::AddressEntry> {
        match responses.into_iter().nth(1) {
            Some(OpResponse::Range(addresses)) => self.address_entries(keys, addresses.kvs),
            _ => Vec::new(),
        }
    }
}

impl<C: Api> Datastore for EtcdStore<C> {
    fn marks(&self) -> Option<(i64, i64)> {
        self.client.revisions()
    }

    fn forget_marks(&self) {
        self.client.forget_revisions();
    }

    fn history_loss(&self, lowest: i64, seen: i64) -> String {
        format!(
            "etcd lost history: it answers at revision {lowest}, but this node saw revision {seen} before, or a \
             claim older than this node's own of the same block (etcd restored from an older backup, or its data \
             wiped)"
        )
    }

    fn claims_grow(&self) -> bool {
        true
    }

    fn finish(&self, store: &mut StoreHandle) {
        let token = self.client.token();
        let changed = token != self.cached_token;
        if let (Some(token), Some(note), true) = (&token, &self.token_note, changed) {
            // One token kept: those of earlier credentials are of no use.
            let keep = |tx: &Tx| {
                tx.drop_notes_with_prefix(etcd::TOKEN_NOTE_PREFIX, note)?;
                tx.set_note(note, token)
            };
            if let Err(e) = store.write(keep) {
                tracing::warn!("the etcd token is not kept for the next call: {e}");
            }
        }
        let count = self.client.requests();
        tracing::debug!(
            "etcd requests: {} range, {} txn ({} writing), {} other",
            count.ranges,
            count.txns,
            count.writing_txns,
            count.other
        );
    }

    fn reachable(&self) -> Answer<()> {
        let probe = RangeRequest { limit: 1, ..RangeRequest::prefix(format!("{}/", self.prefix)).keys_only() };
        self.client.range(&probe).map(drop).map_err(failure)
    }

    fn node_entry_name(&self) -> String {
        self.net_keys().node(&self.node)
    }

    fn put_node_entry(&self, entry: &NodeEntry, expected: Option<&Versioned>) -> Answer<Swap> {
        let key = self.node_entry_name();
        let compare = match expected {
            Some(found) => Compare::mod_revision_is(key.clone(), found.version.0),
            None => Compare::absent(key.clone()),
        };
        let txn = Txn {
            compare: vec![compare],
            success: vec![Op::Put { key: key.clone().into_bytes(), value: to_bytes(entry), lease: 0 }],
            failure: vec![Op::Range(RangeRequest::key(key))],
        };
        let answer = self.txn(&txn)?;
        if answer.succeeded {
            return Ok(Swap::Done);
        }
        let [now] = ranges(answer.responses)?;
        Ok(Swap::Conflict(now.into_iter().next().map(versioned)))
    }

    fn definition_name(&self, pool: &str) -> String {
        self.pool_keys(pool).definition()
    }

    fn read_pool(&self, pool: &str) -> Answer<PoolRead> {
        let (keys, net) = (self.pool_keys(pool), self.net_keys());
        let ([definition, blocks, entry, indexed, recovery], _) = self.read([
            RangeRequest::key(keys.definition()),
            RangeRequest::prefix(keys.blocks()),
            RangeRequest::key(net.node(&self.node)),
            RangeRequest::key(net.pool(pool)).keys_only(),
            RangeRequest::key(net.recovery()),
        ])?;
        Ok(PoolRead {
            definition: first(definition),
            blocks: block_entries(&keys, blocks),
            entry: first(entry),
            indexed: !indexed.is_empty(),
            recovery: first(recovery),
        })
    }

    fn read_pool_index(&self, pool: &str) -> Answer<PoolIndex> {
        let (keys, net) = (self.pool_keys(pool), self.net_keys());
        let ([definition, index], revision) =
            self.read([RangeRequest::key(keys.definition()), RangeRequest::prefix(net.pools())])?;
        let pools = index
            .into_iter()
            .filter_map(|kv| {
                let name = net.parse_pool(&kv.key)?.to_string();
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                Some(IndexedPool { name, key, stored: versioned(kv) })
            })
            .collect();
        Ok(PoolIndex { definition: first(definition), pools, at: Version(revision) })
    }

    fn define_pool(
        &self,
        pool: &str,
        definition: &[u8],
        index_at: Version,
        current: Option<&Versioned>,
    ) -> Answer<bool> {
        let (keys, net) = (self.pool_keys(pool), self.net_keys());
        let mut txn = Txn {
            compare: vec![Compare::UnchangedSince { prefix: net.pools().into_bytes(), revision: index_at.0 }],
            success: vec![Op::Put { key: net.pool(pool).into_bytes(), value: definition.to_vec(), lease: 0 }],
            failure: Vec::new(),
        };
        match current {
            Some(found) => txn.compare.push(Compare::mod_revision_is(keys.definition(), found.version.0)),
            None => {
                txn.compare.push(Compare::absent(keys.definition()));
                txn.success.push(Op::Put { key: keys.definition().into_bytes(), value: definition.to_vec(), lease: 0 });
            }
        }
        Ok(self.txn(&txn)?.succeeded)
    }

    fn claim_block(&self, pool: &str, block: IpNet, record: &[u8], definition: &Versioned) -> Answer<BlockClaim> {
        let keys = self.pool_keys(pool);
        let txn = Txn {
            compare: vec![
                Compare::absent(keys.block(&block)),
                Compare::mod_revision_is(keys.definition(), definition.version.0),
                Compare::absent(self.net_keys().recovery()),
            ],
            success: vec![
                Op::Put { key: keys.block(&block).into_bytes(), value: record.to_vec(), lease: 0 },
                Op::Range(RangeRequest::prefix(keys.block_addresses(&block))),
            ],
            failure: vec![Op::Range(RangeRequest::key(keys.definition()))],
        };
        let answer = self.txn(&txn)?;
        if !answer.succeeded {
            let [definition] = ranges(answer.responses)?;
            return Ok(BlockClaim::Lost { definition: first(definition) });
        }
        let records = self.claimed_records(&keys, answer.responses);
        Ok(BlockClaim::Claimed { created: answer.revision, records })
    }

    fn block_records(&self, pool: &str, block: IpNet) -> Answer<Vec<super::AddressEntry>> {
        let keys = self.pool_keys(pool);
        let answer = self.client.range(&RangeRequest::prefix(keys.block_addresses(&block))).map_err(failure)?;
        Ok(self.address_entries(&keys, answer.kvs))
    }

    fn give_back(&self, pool: &str, block: IpNet, created: i64) -> Answer<bool> {
        let key = self.pool_keys(pool).block(&block).into_bytes();
        let txn = Txn {
            compare: vec![Compare::CreateRevision { key: key.clone(), cmp: etcd::Cmp::Equal, revision: created }],
            success: vec![Op::Delete { key, range_end: None }],
            failure: Vec::new(),
        };
        Ok(self.txn(&txn)?.succeeded)
    }

    fn confirm(&self, pools: &[(&str, Vec<IpNet>)]) -> Answer<ConfirmRead> {
        // Linearizable reads (etcd's default): the member answers only once
        // the leader has confirmed, with a quorum, that the member has
        // applied everything committed before the read. A member cut off
        // from its quorum keeps a copy that stays stale for as long as it is
        // cut off: it answers "no leader", or nothing within etcd.timeout,
        // both Unavailable. More blocks than one transaction holds are read
        // in several, each block's two reads in one.
        let mut reads: Vec<Vec<Op>> = vec![vec![Op::Range(RangeRequest::key(self.node_entry_name()))]];
        for (pool, blocks) in pools {
            let keys = self.pool_keys(pool);
            if !blocks.is_empty() {
                reads.push(vec![Op::Range(RangeRequest::key(keys.wanted()).keys_only())]);
            }
            for block in blocks {
                reads.push(vec![
                    Op::Range(RangeRequest::key(keys.block(block))),
                    Op::Range(RangeRequest::prefix(keys.block_addresses(block))),
                ]);
            }
        }
        let mut responses = self.client.read_in_txns(reads).map_err(failure)?.into_iter();
        let mut next = || match responses.next() {
            Some(OpResponse::Range(r)) => Ok(r.kvs),
            _ => Err(failure(not_ranges())),
        };
        let entry = first(next()?);
        let mut read = Vec::with_capacity(pools.len());
        for (pool, blocks) in pools {
            let keys = self.pool_keys(pool);
            let mut c = PoolConfirm { wanted: 0, blocks: Vec::with_capacity(blocks.len()) };
            if !blocks.is_empty() {
                c.wanted = next()?.first().map_or(0, |kv| kv.mod_revision);
            }
            for _ in blocks {
                let (record, addresses) = (next()?, next()?);
                c.blocks.push((first(record), self.address_entries(&keys, addresses)));
            }
            read.push(c);
        }
        Ok(ConfirmRead { entry, pools: read })
    }

    fn record_key(&self, pool: &str, block: IpNet, address: IpAddr) -> String {
        self.pool_keys(pool).address(&block, address)
    }

    fn record(&self, key: &str) -> Answer<Option<Versioned>> {
        let answer = self.client.range(&RangeRequest::key(key)).map_err(failure)?;
        Ok(first(answer.kvs))
    }

    fn delete_record(&self, key: &str, version: Version) -> Answer<bool> {
        let txn = Txn {
            compare: vec![Compare::mod_revision_is(key, version.0)],
            success: vec![Op::Delete { key: key.as_bytes().to_vec(), range_end: None }],
            failure: Vec::new(),
        };
        Ok(self.txn(&txn)?.succeeded)
    }

    fn reserve(&self, r: &Reservation) -> Answer<Outcome<ReserveRefusal>> {
        let keys = self.pool_keys(r.pool);
        let key = keys.address(&r.block, r.address);
        let block_key = keys.block(&r.block);
        let block_compare = match r.block_is {
            BlockIs::Claim(created) => Compare::CreateRevision {
                key: block_key.clone().into_bytes(),
                cmp: etcd::Cmp::Equal,
                revision: created,
            },
            BlockIs::At(version) => Compare::mod_revision_is(block_key.clone(), version.0),
            BlockIs::Unclaimed => Compare::absent(block_key.clone()),
        };
        let txn = Txn {
            compare: [
                Compare::absent(key.clone()),
                block_compare,
                Compare::value_is(keys.definition(), r.definition.to_vec()),
            ]
            .into_iter()
            // In a block that is not this node's, not while nodes re-claim
            // theirs after etcd lost history: it may be one of them.
            .chain((!matches!(r.block_is, BlockIs::Claim(_))).then(|| Compare::absent(self.net_keys().recovery())))
            .collect(),
            success: vec![Op::Put { key: key.clone().into_bytes(), value: r.value.to_vec(), lease: 0 }],
            failure: vec![
                Op::Range(RangeRequest::key(key)),
                Op::Range(RangeRequest::key(block_key)),
                Op::Range(RangeRequest::key(keys.definition())),
            ],
        };
        let answer = self.txn(&txn)?;
        if answer.succeeded {
            return Ok(Outcome::Done);
        }
        let [holder, owner, definition] = ranges(answer.responses)?;
        Ok(Outcome::Refused(ReserveRefusal {
            holder: first(holder),
            owner: first(owner),
            definition: first(definition),
        }))
    }

    fn take_lent(&self, key: &str, version: Version, value: &[u8]) -> Answer<Outcome<()>> {
        let txn = Txn {
            // Not while nodes re-claim after etcd lost history: the lent
            // record may be one its lender has taken back since the backup.
            compare: vec![Compare::mod_revision_is(key, version.0), Compare::absent(self.net_keys().recovery())],
            success: vec![Op::Put { key: key.as_bytes().to_vec(), value: value.to_vec(), lease: 0 }],
            failure: Vec::new(),
        };
        Ok(if self.txn(&txn)?.succeeded { Outcome::Done } else { Outcome::Refused(()) })
    }

    fn grant(
        &self,
        pool: &str,
        block: IpNet,
        address: IpAddr,
        value: &[u8],
        block_at: Version,
    ) -> Answer<Outcome<GrantRefusal>> {
        let keys = self.pool_keys(pool);
        let block_key = keys.block(&block);
        let key = keys.address(&block, address);
        let recovery = self.net_keys().recovery();
        let txn = Txn {
            compare: vec![
                Compare::absent(key.clone()),
                Compare::mod_revision_is(block_key.clone(), block_at.0),
                Compare::absent(recovery.clone()),
            ],
            success: vec![Op::Put { key: key.into_bytes(), value: value.to_vec(), lease: 0 }],
            failure: vec![
                Op::Range(RangeRequest::key(block_key)),
                Op::Range(RangeRequest::prefix(keys.block_addresses(&block))),
                Op::Range(RangeRequest::key(recovery).keys_only()),
            ],
        };
        let answer = self.txn(&txn)?;
        if answer.succeeded {
            return Ok(Outcome::Done);
        }
        let [record, addresses, recovery] = ranges(answer.responses)?;
        Ok(Outcome::Refused(GrantRefusal {
            block: first(record),
            records: self.address_entries(&keys, addresses),
            recovering: !recovery.is_empty(),
        }))
    }

    fn address_records(&self, pool: &str) -> Answer<Vec<super::AddressEntry>> {
        let keys = self.pool_keys(pool);
        let answer = self.client.range(&RangeRequest::prefix(keys.addresses())).map_err(failure)?;
        Ok(self.address_entries(&keys, answer.kvs))
    }

    fn pool_records(&self, pool: &str) -> Answer<PoolRecords> {
        let keys = self.pool_keys(pool);
        let ([blocks, addresses, recovery], _) = self.read([
            RangeRequest::prefix(keys.blocks()),
            RangeRequest::prefix(keys.addresses()),
            RangeRequest::key(self.net_keys().recovery()).keys_only(),
        ])?;
        Ok(PoolRecords {
            blocks: block_entries(&keys, blocks),
            records: self.address_entries(&keys, addresses),
            recovering: !recovery.is_empty(),
        })
    }

    fn missing(&self, keys: &[String]) -> Answer<Vec<String>> {
        let reads = keys.iter().map(|k| vec![Op::Range(RangeRequest::key(k.clone()).keys_only())]).collect();
        let present = self.client.read_in_txns(reads).map_err(failure)?;
        Ok(keys
            .iter()
            .zip(&present)
            .filter(|(_, r)| matches!(r, OpResponse::Range(r) if r.kvs.is_empty()))
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn create_all(&self, keys: &[String], value: &[u8]) -> Answer<usize> {
        let mut created = 0;
        for chunk in keys.chunks(etcd::MAX_TXN_OPS) {
            let txn = Txn {
                compare: chunk.iter().map(|k| Compare::absent(k.clone())).collect(),
                success: chunk
                    .iter()
                    .map(|k| Op::Put { key: k.clone().into_bytes(), value: value.to_vec(), lease: 0 })
                    .collect(),
                failure: Vec::new(),
            };
            if self.txn(&txn)?.succeeded {
                created += chunk.len();
            }
        }
        Ok(created)
    }

    fn want(&self, pool: &str, value: &[u8]) -> Answer<()> {
        let txn = Txn {
            success: vec![Op::Put { key: self.pool_keys(pool).wanted().into_bytes(), value: value.to_vec(), lease: 0 }],
            ..Txn::default()
        };
        self.txn(&txn).map(drop)
    }

    fn blocks(&self, which: &[(&str, IpNet)]) -> Answer<Vec<Option<Versioned>>> {
        let reads =
            which.iter().map(|(pool, block)| vec![Op::Range(RangeRequest::key(self.pool_keys(pool).block(block)))]);
        let answers = self.client.read_in_txns(reads.collect()).map_err(failure)?;
        Ok(firsts(answers))
    }

    fn create_record(&self, key: &str, value: &[u8]) -> Answer<Created> {
        let txn = Txn {
            compare: vec![Compare::absent(key)],
            success: vec![Op::Put { key: key.as_bytes().to_vec(), value: value.to_vec(), lease: 0 }],
            failure: vec![Op::Range(RangeRequest::key(key))],
        };
        let answer = self.txn(&txn)?;
        if answer.succeeded {
            return Ok(Created::Done(Version(answer.revision)));
        }
        let [now] = ranges(answer.responses)?;
        Ok(Created::Exists(first(now)))
    }

    fn records(&self, keys: &[String]) -> Answer<Vec<Option<Versioned>>> {
        // One group: one transaction, so one revision (when it fits one).
        let reads = vec![keys.iter().map(|k| Op::Range(RangeRequest::key(k.clone()))).collect()];
        let answers = self.client.read_in_txns(reads).map_err(failure)?;
        Ok(firsts(answers))
    }

    fn identity_key(&self, ifname: &str, identity: &str) -> String {
        self.net_keys().identity(ifname, identity)
    }

    fn identities(&self) -> Answer<Vec<(String, String, Versioned)>> {
        let prefix = self.net_keys().identities();
        let answer = self.client.range(&RangeRequest::prefix(prefix.clone())).map_err(failure)?;
        Ok(answer
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                let (ifname, identity) = key.strip_prefix(&prefix)?.split_once('/')?;
                Some((ifname.to_string(), identity.to_string(), versioned(kv)))
            })
            .collect())
    }

    fn change_together(
        &self,
        changes: &[RecordChange],
        hold_seconds: Option<i64>,
        not_recovering: bool,
    ) -> Answer<Option<Version>> {
        let lease = match hold_seconds {
            Some(secs) => self.client.lease_grant(secs).map_err(failure)?,
            None => 0,
        };
        let mut txn = Txn::default();
        for c in changes {
            txn.compare.push(match &c.expect {
                Expect::Absent => Compare::absent(c.key.clone()),
                Expect::At(version) => Compare::mod_revision_is(c.key.clone(), version.0),
                Expect::Is(value) => Compare::value_is(c.key.clone(), value.clone()),
            });
            match &c.then {
                Then::Keep => {}
                Then::Put(value) => {
                    txn.success.push(Op::Put { key: c.key.clone().into_bytes(), value: value.clone(), lease })
                }
                Then::Delete => txn.success.push(Op::Delete { key: c.key.clone().into_bytes(), range_end: None }),
            }
        }
        if not_recovering {
            txn.compare.push(Compare::absent(self.recovery_name()));
        }
        let answer = self.txn(&txn)?;
        Ok(answer.succeeded.then_some(Version(answer.revision)))
    }

    fn reclaim_block(
        &self,
        pool: &str,
        block: IpNet,
        record: &[u8],
        definition: &[u8],
    ) -> Answer<Option<(i64, Vec<super::AddressEntry>)>> {
        let keys = self.pool_keys(pool);
        let txn = Txn {
            compare: vec![
                Compare::absent(keys.block(&block)),
                Compare::value_is(keys.definition(), definition.to_vec()),
            ],
            success: vec![
                Op::Put { key: keys.block(&block).into_bytes(), value: record.to_vec(), lease: 0 },
                Op::Range(RangeRequest::prefix(keys.block_addresses(&block))),
            ],
            failure: Vec::new(),
        };
        let answer = self.txn(&txn)?;
        if !answer.succeeded {
            return Ok(None);
        }
        let records = self.claimed_records(&keys, answer.responses);
        Ok(Some((answer.revision, records)))
    }

    fn recovery_name(&self) -> String {
        self.net_keys().recovery()
    }

    fn recovery(&self) -> Answer<Option<Versioned>> {
        self.record(&self.recovery_name())
    }

    fn quarantine(&self, record: &RecoveryRecord, ttl_seconds: i64) -> Answer<bool> {
        let key = self.recovery_name();
        let lease = self.client.lease_grant(ttl_seconds).map_err(failure)?;
        let txn = Txn {
            compare: vec![Compare::absent(key.clone())],
            success: vec![Op::Put { key: key.into_bytes(), value: to_bytes(record), lease }],
            failure: Vec::new(),
        };
        Ok(self.txn(&txn)?.succeeded)
    }

    fn node_entry_of(&self, node: &str) -> Answer<Option<Versioned>> {
        let answer = self.client.range(&RangeRequest::key(self.net_keys().node(node))).map_err(failure)?;
        Ok(first(answer.kvs))
    }

    fn forget_node(&self, node: &str, read: &Versioned) -> Answer<bool> {
        let key = self.net_keys().node(node);
        let txn = Txn {
            compare: vec![Compare::mod_revision_is(key.clone(), read.version.0)],
            success: vec![Op::Delete { key: key.into_bytes(), range_end: None }],
            failure: Vec::new(),
        };
        Ok(self.txn(&txn)?.succeeded)
    }

    fn release_block(&self, pool: &str, block: IpNet, read: &Versioned, wait: Option<Duration>) -> Answer<bool> {
        let key = self.pool_keys(pool).block(&block);
        let op = match wait {
            None => Op::Delete { key: key.clone().into_bytes(), range_end: None },
            Some(wait) => {
                // The tombstone lives under a lease of the wait: when it
                // ends, etcd deletes it and the block is claimable.
                let Ok(mut tombstone) = serde_json::from_slice::<BlockRecord>(&read.value) else { return Ok(false) };
                (tombstone.released, tombstone.at) = (true, shared::store::unix_now());
                let ttl = (wait.as_secs_f64().ceil() as i64).max(1);
                let lease = self.client.lease_grant(ttl).map_err(failure)?;
                Op::Put { key: key.clone().into_bytes(), value: to_bytes(&tombstone), lease }
            }
        };
        let txn = Txn {
            compare: vec![Compare::mod_revision_is(key, read.version.0)],
            success: vec![op],
            failure: Vec::new(),
        };
        Ok(self.txn(&txn)?.succeeded)
    }

    fn release(&self, releases: &[RecordRelease]) -> Vec<Answer<bool>> {
        let op = |r: &RecordRelease| match &r.then {
            Some(value) => Op::Put { key: r.key.as_bytes().to_vec(), value: value.clone(), lease: 0 },
            None => Op::Delete { key: r.key.as_bytes().to_vec(), range_end: None },
        };
        let compare = |r: &RecordRelease| Compare::value_is(r.key, r.value.to_vec());
        let mut outcomes = Vec::with_capacity(releases.len());
        // In transactions etcd takes (a GC after a reboot, or the releases
        // an outage left, can be hundreds): each record's release stands alone.
        for chunk in releases.chunks(etcd::MAX_TXN_OPS) {
            let all = Txn {
                compare: chunk.iter().map(compare).collect(),
                success: chunk.iter().map(op).collect(),
                failure: Vec::new(),
            };
            match self.txn(&all) {
                Ok(answer) if answer.succeeded => outcomes.extend(chunk.iter().map(|_| Ok(true))),
                // One of them is no longer as written: one by one.
                Ok(_) => {
                    for r in chunk {
                        let one = Txn { compare: vec![compare(r)], success: vec![op(r)], failure: Vec::new() };
                        let outcome = self.txn(&one).map(|answer| answer.succeeded);
                        if let Err(e) = &outcome {
                            let e = CniError::from(e.clone());
                            tracing::warn!("{} stays to be released when etcd answers: {e}", r.key);
                        }
                        outcomes.push(outcome);
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "{} cluster record(s) stay to be released by a later call: {}",
                        chunk.len(),
                        CniError::from(e.clone())
                    );
                    outcomes.extend(chunk.iter().map(|_| Err(e.clone())));
                }
            }
        }
        outcomes
    }
}

pub(crate) fn versioned(kv: Kv) -> Versioned {
    Versioned { value: kv.value, version: Version(kv.mod_revision), created: kv.create_revision }
}

fn first(kvs: Vec<Kv>) -> Option<Versioned> {
    kvs.into_iter().next().map(versioned)
}

/// The first key-value of each range answered (none for another response).
fn firsts(answers: Vec<OpResponse>) -> Vec<Option<Versioned>> {
    answers
        .into_iter()
        .map(|answer| match answer {
            OpResponse::Range(r) => first(r.kvs),
            _ => None,
        })
        .collect()
}

/// The block records among `kvs` (keys under the pool's `blocks/`).
fn block_entries(keys: &PoolKeys, kvs: Vec<Kv>) -> Vec<BlockEntry> {
    kvs.into_iter()
        .filter_map(|kv| Some(BlockEntry { block: keys.parse_block(&kv.key)?, stored: versioned(kv) }))
        .collect()
}

/// The key-values of each response of a transaction of `N` ranges (its
/// success or failure responses), in order: read by name, not by position.
pub(crate) fn ranges<const N: usize>(responses: Vec<OpResponse>) -> Answer<[Vec<Kv>; N]> {
    let mut out: [Vec<Kv>; N] = std::array::from_fn(|_| Vec::new());
    let count = responses.len();
    for (slot, response) in out.iter_mut().zip(responses) {
        match response {
            OpResponse::Range(r) => *slot = r.kvs,
            _ => return Err(failure(not_ranges())),
        }
    }
    if count != N {
        return Err(failure(not_ranges()));
    }
    Ok(out)
}

fn not_ranges() -> etcd::Error {
    etcd::Error::Protocol("a txn of ranges answered with other responses".into())
}

/// etcd's failure as the datastore's: unreachable stays so (offlineGrace
/// may bridge it); anything else is an error of the contract.
fn failure(e: etcd::Error) -> Error {
    match e {
        etcd::Error::Unavailable(why) => Error::Unavailable(super::Unreachable { store: "etcd", why }),
        e => Error::Failed(etcd_error(e)),
    }
}

/// etcd's failures in the contract's codes: unreachable is 11 (try again
/// later); refused credentials, a user without the rights, a certificate
/// that does not verify and unusable settings are 7 (a setting to fix,
/// which trying again does not). The one mapping, the operator's tool's too.
pub fn etcd_error(e: etcd::Error) -> CniError {
    match e {
        etcd::Error::Unavailable(why) => Error::Unavailable(super::Unreachable { store: "etcd", why }).into(),
        etcd::Error::Refused { code: 3, message } if message.contains("authentication failed") => CniError::config(
            "ipam.cluster.etcd.passwordFile",
            format!(
                "etcd refused the user (ipam.cluster.etcd.username) or the password in this file: {}",
                shown(&message)
            ),
        ),
        etcd::Error::Refused { code: 3, message } if message.contains("user name is empty") => CniError::config(
            "ipam.cluster.etcd.username",
            format!("etcd requires authentication: set username and passwordFile ({})", shown(&message)),
        ),
        etcd::Error::Refused { code: 7, message } => CniError::config(
            "ipam.cluster.etcd.username",
            format!(
                "etcd denied this user the request: it needs read and write on the keys under ipam.cluster.etcd.prefix \
                 ({})",
                shown(&message)
            ),
        ),
        etcd::Error::Refused { code: 16, message } => {
            CniError::config("ipam.cluster.etcd.username", format!("etcd refused the credentials: {}", shown(&message)))
        }
        etcd::Error::Refused { code, message } => {
            CniError::new(Code::TryAgainLater, format!("etcd refused the request (code {code}): {}", shown(&message)))
        }
        etcd::Error::Settings { field, message } => CniError::config(&format!("ipam.cluster.etcd.{field}"), message),
        etcd::Error::Protocol(why) => {
            CniError::new(Code::TryAgainLater, format!("etcd answered something unexpected: {why}"))
        }
    }
}
