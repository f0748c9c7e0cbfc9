//! The cluster's datastore: what the protocol of `node/` asks of the store
//! that holds the cluster's records, as domain operations (register the
//! node, claim a block, grant an address in a shared block, …), so that the
//! protocol names no store's types. Each operation is one atomic step of
//! the store: it writes only while what it compares is as the caller read
//! it, and says so in a store-neutral outcome.
//!
//! The model is etcd's `concurrency` STM: a step reads, decides, and writes
//! comparing what it read; a conflict means "read again and decide again"
//! ([`retry`]). A store that can compare only one object at a time (the
//! Kubernetes API, by `resourceVersion`) implements each operation on the
//! object that carries what it compares.
//!
//! [`etcd`] is the store of today; [`kubernetes`] holds the Kubernetes
//! store's objects, for the implementation to come.

pub mod etcd;
pub mod kubernetes;
#[cfg(test)]
pub mod memory;

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use shared::store::StoreHandle;
use shared::{CniError, Code};

use crate::records::{NodeEntry, RecoveryRecord};

/// Which write of a record a value is: compared by a later write to know
/// the record is still as read. Opaque but for [`Version::mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version(i64);

impl Version {
    /// The version of a record not written since its creation `created`
    /// (see [`Versioned::created`]): what a block's record is while its
    /// claim stands unchanged.
    pub fn unwritten_since(created: i64) -> Version {
        Version(created)
    }

    /// A number that grows with every write of the store, kept in the node
    /// database where a version must outlive the call (what was last lent
    /// for a `wanted` request).
    pub fn mark(self) -> i64 {
        self.0
    }
}

/// A record as the store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    /// The record's JSON (see [`crate::records`]); anyone with write access
    /// to the store may have put anything there.
    pub value: Vec<u8>,
    pub version: Version,
    /// Set at its creation: a record deleted and created again has another.
    /// A block's is its claim, kept in the node database.
    pub created: i64,
}

/// A block's record (whose block it is).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockEntry {
    pub block: IpNet,
    pub stored: Versioned,
}

/// An address record of a block. `key` names it in the store, as the node
/// database's rows do.
#[derive(Debug, Clone, PartialEq)]
pub struct AddressEntry {
    pub key: String,
    pub block: IpNet,
    pub address: IpAddr,
    pub stored: Versioned,
}

/// Why the store did not do what was asked.
#[derive(Debug, Clone)]
pub enum Error {
    /// It did not answer (or has no quorum): try again later. Within
    /// offlineGrace a node allocates in its confirmed blocks meanwhile.
    Unavailable(Unreachable),
    /// Anything else, in the contract's words (a setting to fix, 7; a
    /// refusal or an unexpected answer, 11).
    Failed(CniError),
}

impl From<Error> for CniError {
    fn from(e: Error) -> CniError {
        match e {
            Error::Unavailable(e) => CniError::new(Code::TryAgainLater, e.to_string()),
            Error::Failed(e) => e,
        }
    }
}

/// Which store did not answer, and how it failed.
#[derive(Debug, Clone)]
pub struct Unreachable {
    /// `etcd`, `the Kubernetes API server`.
    pub store: &'static str,
    pub why: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is unreachable: {}", self.store, self.why)
    }
}

pub type Answer<T> = std::result::Result<T, Error>;

/// What one attempt of a read-decide-write step made of it.
pub enum Attempt<T> {
    Done(T),
    /// What it compared changed since it read it: read again.
    Conflict,
}

/// Runs `attempt` until it is done, at most `rounds` times: each attempt
/// reads, decides and writes comparing what it read. `None`: it kept
/// conflicting (others keep writing what it compares).
pub fn retry<T>(rounds: usize, mut attempt: impl FnMut() -> shared::Result<Attempt<T>>) -> shared::Result<Option<T>> {
    for _ in 0..rounds {
        if let Attempt::Done(done) = attempt()? {
            return Ok(Some(done));
        }
    }
    Ok(None)
}

/// Everything a claim decides from, read at once: the pool's definition
/// and every block's record, this node's entry, whether the pool is in the
/// network's index, and `_recovery` (etcd lost history).
#[derive(Debug, Clone)]
pub struct PoolRead {
    pub definition: Option<Versioned>,
    pub blocks: Vec<BlockEntry>,
    pub entry: Option<Versioned>,
    pub indexed: bool,
    pub recovery: Option<Versioned>,
}

/// The network's index of pools (each with its definition), with the pool's
/// own definition, as of `at`.
#[derive(Debug, Clone)]
pub struct PoolIndex {
    pub definition: Option<Versioned>,
    pub pools: Vec<IndexedPool>,
    pub at: Version,
}

#[derive(Debug, Clone)]
pub struct IndexedPool {
    pub name: String,
    /// Where it is, for messages.
    pub key: String,
    pub stored: Versioned,
}

/// What became of a claim of one block.
#[derive(Debug, Clone)]
pub enum BlockClaim {
    /// The block is this node's: its claim, and the address records already
    /// in it (addresses reserved while nobody claimed it).
    Claimed { created: i64, records: Vec<AddressEntry> },
    /// Another node was first, the pool's definition changed, or nodes are
    /// re-claiming after etcd lost history: the definition now.
    Lost { definition: Option<Versioned> },
}

/// What a confirming read saw: this node's entry and, per pool asked, the
/// mark of its `wanted` request (0: none) and each block's record (none:
/// deleted) with its address records.
#[derive(Debug, Clone)]
pub struct ConfirmRead {
    pub entry: Option<Versioned>,
    pub pools: Vec<PoolConfirm>,
}

#[derive(Debug, Clone)]
pub struct PoolConfirm {
    pub wanted: i64,
    pub blocks: Vec<(Option<Versioned>, Vec<AddressEntry>)>,
}

/// What became of a creation of one record.
#[derive(Debug, Clone)]
pub enum Created {
    /// At this version.
    Done(Version),
    /// It was there: as it is now (none: gone again since).
    Exists(Option<Versioned>),
}

/// What became of a compare-and-swap of one record.
#[derive(Debug, Clone)]
pub enum Swap {
    Done,
    /// It was not as expected: as it is now (none: absent).
    Conflict(Option<Versioned>),
}

/// What became of a write that compares: done, or refused with what the
/// store has instead (what the caller decides from next).
#[derive(Debug, Clone)]
pub enum Outcome<R> {
    Done,
    Refused(R),
}

/// What a reservation compares a block's record to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockIs {
    /// This node's claim `created`.
    Claim(i64),
    /// Another node's shared block, as read.
    At(Version),
    /// Nobody's.
    Unclaimed,
}

/// An address asked for by name, reserved in the cluster: its record
/// created while absent, its block as `block_is` and the pool's definition
/// `definition` (and, in a block that is not this node's, while the store is
/// not recovering lost history).
#[derive(Debug, Clone, Copy)]
pub struct Reservation<'a> {
    pub pool: &'a str,
    pub block: IpNet,
    pub address: IpAddr,
    pub value: &'a [u8],
    pub block_is: BlockIs,
    pub definition: &'a [u8],
}

/// Why a reservation was refused: the address's record, its block's and
/// the pool's definition, as they are (none: absent).
#[derive(Debug, Clone)]
pub struct ReserveRefusal {
    pub holder: Option<Versioned>,
    pub owner: Option<Versioned>,
    pub definition: Option<Versioned>,
}

/// Why a grant in a shared block was refused: the block's record and
/// address records as they are, and whether the store is recovering.
#[derive(Debug, Clone)]
pub struct GrantRefusal {
    pub block: Option<Versioned>,
    pub records: Vec<AddressEntry>,
    pub recovering: bool,
}

/// A pool's block records and address records, read at once, and whether
/// the store is recovering lost history.
#[derive(Debug, Clone)]
pub struct PoolRecords {
    pub blocks: Vec<BlockEntry>,
    pub records: Vec<AddressEntry>,
    pub recovering: bool,
}

/// The release of one record this node wrote: while it is still `value`,
/// it becomes `then` (none: deleted).
#[derive(Debug, Clone)]
pub struct RecordRelease<'a> {
    pub key: &'a str,
    pub value: &'a [u8],
    pub then: Option<Vec<u8>>,
}

/// What a record must be for a change of several to go through.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    Absent,
    At(Version),
    /// Holds this value.
    Is(Vec<u8>),
}

/// What a change of several records does to one.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// Nothing: it is only compared.
    Keep,
    Put(Vec<u8>),
    Delete,
}

/// One record of a change of several (see [`Datastore::change_together`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordChange {
    pub key: String,
    pub expect: Expect,
    pub then: Then,
}

/// The protocol's operations on the store (see the module's doc). One value
/// serves one call of one node on one network.
pub trait Datastore {
    /// The lowest and highest marks of the store's history its answers
    /// carried in this call (etcd's revisions): a linearizable answer is never
    /// behind one given before, so one below a mark seen earlier means the
    /// store lost history. None: no answer carried one.
    fn marks(&self) -> Option<(i64, i64)>;

    /// Forgets the marks seen so far: [`Datastore::marks`] is about later answers.
    fn forget_marks(&self);

    /// What the store's answers said of a loss of history (an answer at
    /// mark `lowest` after `seen`), for the node's log and error.
    fn history_loss(&self, lowest: i64, seen: i64) -> String;

    /// Whether a later claim of a block has a higher `created` (etcd's
    /// create revisions): then a claim of this node found replaced by a
    /// lower one is the store's older state.
    fn claims_grow(&self) -> bool;

    /// The end of the call: what the next call can reuse (an auth token) is
    /// kept in the node database, and what the call cost is logged.
    fn finish(&self, store: &mut StoreHandle);

    /// Whether writes of one block by this node's calls should take turns
    /// ([`Datastore::resume_blocks_of`], [`Datastore::keep_written`]): a store
    /// that keeps a block as one object (the Kubernetes API) refuses all but
    /// one of two writes sent at the version both read, and each refused one
    /// costs a read and another write. etcd's records are keys of their own.
    fn writes_take_turns(&self) -> bool {
        false
    }

    /// At its turn: the blocks of the records of `keys` as the call of this
    /// node that wrote each last kept it, so that the writes go at their
    /// versions without a read.
    fn resume_blocks_of(&self, _store: &mut StoreHandle, _keys: &[&str]) {}

    /// Before its turn ends: what this call wrote, kept for the next call
    /// (as [`Datastore::finish`] keeps it).
    fn keep_written(&self, _store: &mut StoreHandle) {}

    /// Whether the store answers (one small read).
    fn reachable(&self) -> Answer<()>;

    /// Where this node's entry is, for messages.
    fn node_entry_name(&self) -> String;

    /// Writes this node's entry, while it is as `expected` (none: absent).
    fn put_node_entry(&self, entry: &NodeEntry, expected: Option<&Versioned>) -> Answer<Swap>;

    /// Where pool `pool`'s definition is, for messages.
    fn definition_name(&self, pool: &str) -> String;

    /// What a claim in `pool` decides from (see [`PoolRead`]).
    fn read_pool(&self, pool: &str) -> Answer<PoolRead>;

    /// The network's index of pools, with `pool`'s definition.
    fn read_pool_index(&self, pool: &str) -> Answer<PoolIndex>;

    /// Defines `pool`: its definition (created, or kept as `current`) and
    /// its entry in the network's index, while the index is unchanged since
    /// `index_at`. False: something changed; read again.
    fn define_pool(
        &self,
        pool: &str,
        definition: &[u8],
        index_at: Version,
        current: Option<&Versioned>,
    ) -> Answer<bool>;

    /// Claims `block` of `pool` with `record`, only while nobody has it, the
    /// pool's definition is still `definition` and etcd is not recovering.
    fn claim_block(&self, pool: &str, block: IpNet, record: &[u8], definition: &Versioned) -> Answer<BlockClaim>;

    /// The address records of `block`.
    fn block_records(&self, pool: &str, block: IpNet) -> Answer<Vec<AddressEntry>>;

    /// Deletes this node's claim `created` of `block`. False: it was no
    /// longer that claim.
    fn give_back(&self, pool: &str, block: IpNet, created: i64) -> Answer<bool>;

    /// One linearizable read of this node's entry and, per pool, its
    /// `wanted` mark and each of `blocks`' records with their addresses.
    fn confirm(&self, pools: &[(&str, Vec<IpNet>)]) -> Answer<ConfirmRead>;

    /// The store's name of the record of `address` in `block` of `pool`.
    fn record_key(&self, pool: &str, block: IpNet, address: IpAddr) -> String;

    /// The record named `key`.
    fn record(&self, key: &str) -> Answer<Option<Versioned>>;

    /// Deletes the record named `key` while it is at `version`. False: it changed.
    fn delete_record(&self, key: &str, version: Version) -> Answer<bool>;

    /// Reserves an address by name (see [`Reservation`]).
    fn reserve(&self, r: &Reservation) -> Answer<Outcome<ReserveRefusal>>;

    /// Makes the lent record `key`, at `version`, `value` (a borrowing or a
    /// reservation of a lent address), while the store is not recovering.
    fn take_lent(&self, key: &str, version: Version, value: &[u8]) -> Answer<Outcome<()>>;

    /// Grants an address of another's or this node's shared `block`: its
    /// record `value` created while absent, the block's record at `block_at`
    /// and the store not recovering.
    fn grant(
        &self,
        pool: &str,
        block: IpNet,
        address: IpAddr,
        value: &[u8],
        block_at: Version,
    ) -> Answer<Outcome<GrantRefusal>>;

    /// Every address record of `pool`.
    fn address_records(&self, pool: &str) -> Answer<Vec<AddressEntry>>;

    /// Every block record and address record of `pool`.
    fn pool_records(&self, pool: &str) -> Answer<PoolRecords>;

    /// Those of `keys` that name no record.
    fn missing(&self, keys: &[String]) -> Answer<Vec<String>>;

    /// Creates records `value` at `keys` while absent, in as few steps as
    /// the store takes, each all or nothing: how many were created.
    fn create_all(&self, keys: &[String], value: &[u8]) -> Answer<usize>;

    /// Asks the nodes with room in `pool` to lend (its `wanted` request).
    fn want(&self, pool: &str, value: &[u8]) -> Answer<()>;

    /// The records of these blocks (none: absent), in one read where the
    /// store allows.
    fn blocks(&self, which: &[(&str, IpNet)]) -> Answer<Vec<Option<Versioned>>>;

    /// Creates the record `key` while absent.
    fn create_record(&self, key: &str, value: &[u8]) -> Answer<Created>;

    /// Claims `block` of `pool` back after the store lost it: while nobody
    /// has it and the pool's definition is `definition` (whether or not the
    /// store is recovering: the block holds this node's leases). None:
    /// another node has it.
    fn reclaim_block(
        &self,
        pool: &str,
        block: IpNet,
        record: &[u8],
        definition: &[u8],
    ) -> Answer<Option<(i64, Vec<AddressEntry>)>>;

    /// Where `_recovery` is, for messages.
    fn recovery_name(&self) -> String;

    /// `_recovery` while it lasts: nodes re-claim their blocks after the
    /// store lost history (see [`Datastore::quarantine`]).
    fn recovery(&self) -> Answer<Option<Versioned>>;

    /// Writes `_recovery` while absent, for `ttl_seconds`: no block of the
    /// network is claimed meanwhile. False: another node wrote it first.
    fn quarantine(&self, record: &RecoveryRecord, ttl_seconds: i64) -> Answer<bool>;

    /// The records named `keys` (none: absent), read at once.
    fn records(&self, keys: &[String]) -> Answer<Vec<Option<Versioned>>>;

    /// Where workload identity `identity` has its addresses on `ifname`.
    fn identity_key(&self, ifname: &str, identity: &str) -> String;

    /// Every identity of the network: its interface, its name and its record.
    fn identities(&self) -> Answer<Vec<(String, String, Versioned)>>;

    /// Changes an identity's record and its addresses' records at once, all
    /// or none: each only while it is as expected (and, with `not_recovering`,
    /// while the store is not recovering lost history). With `hold_seconds`,
    /// what it puts ends by itself after that long (the identity's hold).
    /// The version of what it wrote; none: something was not as expected.
    fn change_together(
        &self,
        changes: &[RecordChange],
        hold_seconds: Option<i64>,
        not_recovering: bool,
    ) -> Answer<Option<Version>>;

    /// `node`'s entry (release-node reads the wait that node recorded).
    fn node_entry_of(&self, node: &str) -> Answer<Option<Versioned>>;

    /// Deletes `node`'s entry while it is as `read`. False: it changed
    /// (the node registered again: it is alive).
    fn forget_node(&self, node: &str, read: &Versioned) -> Answer<bool>;

    /// release-node: while `block`'s record is as `read`, the block becomes
    /// released, unclaimable for `wait` (a tombstone that ends by itself,
    /// timed by the store), or, with no wait (gone for good), nobody's at
    /// once. False: it changed.
    fn release_block(&self, pool: &str, block: IpNet, read: &Versioned, wait: Option<Duration>) -> Answer<bool>;

    /// Releases records this node wrote, each on its own: per record, true
    /// when released, false when it is no longer as written (left as it is),
    /// or why the store could not be asked.
    fn release(&self, releases: &[RecordRelease]) -> Vec<Answer<bool>>;
}

/// `_recovery` as read, for messages: who saw the store lose history.
pub fn recovery_of(stored: &Versioned) -> Option<RecoveryRecord> {
    serde_json::from_slice(&stored.value).ok()
}
