//! Cluster mode's rows in the node database: the blocks this node owns in
//! etcd and the address records it wrote there, each written before the etcd
//! write it names and dropped only after the etcd delete, and small notes.
//! They are this crate's alone, as their tables are ([`crate::tables`]): the
//! core every allocator links lends its transaction ([`ClusterRows`] on
//! [`Tx::sql`]) and knows nothing of what they mean.

use std::net::IpAddr;
use std::path::Path;
use std::str::FromStr;

use ipnet::IpNet;
use rusqlite::{params, Row};

use shared::args::Attachment;
use shared::store::{InDatabase, Tx};
use shared::Result;

/// Where a block of this node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Ours in etcd, at `revision`.
    Owned,
    /// Empty and no longer handed to the allocators; given back once no call
    /// that saw it as owned can still be allocating in it.
    Releasing,
    /// Holds leases of this node but is no longer ours in etcd (etcd lost
    /// history, or the node was released while its containers ran): never
    /// handed to the allocators; its leases are published as address
    /// records so that its owner skips them; dropped once they are gone.
    Contested,
}

/// A block of a cluster pool held (or being claimed or given back) by this node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeBlock {
    pub network: String,
    pub pool: String,
    pub block: IpNet,
    pub state: BlockState,
    /// The create_revision of our block key in etcd: a block re-claimed by
    /// anyone, us included, is another claim.
    pub revision: i64,
    /// Milliseconds on the boot-time clock of the last etcd read that showed
    /// the block ours, in the boot the note `confirmed-boot` names (0: none);
    /// of a `releasing` block, when GC retired it. Never the wall clock: see
    /// ipam-ds-cluster's `clock`.
    pub confirmed: i64,
    /// Its addresses that other attachments of the cluster hold, as last read.
    pub taken: Vec<IpAddr>,
    /// Unix seconds: since when it is in its state.
    pub since: i64,
    /// Every address handed out in it is recorded in etcd, and any node may
    /// allocate in it (a shared block); otherwise only this node allocates
    /// in it, from its own database.
    pub shared: bool,
}

/// What an address record in etcd says about its address (its `kind`, in
/// the record's JSON as in this table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// Asked for by name, reserved cluster-wide.
    #[default]
    Static,
    /// Taken from another node's block.
    Borrowed,
    /// Of one of our blocks, offered to nodes that have no room.
    Lent,
    /// Handed out in a shared block (by its owner or any other node).
    Allocated,
}

/// Where an address record stands between this node and etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// Being written: whether etcd has it is known at the next attempt.
    Writing,
    Held,
    /// To be deleted from etcd (a release that could not reach it yet).
    Releasing,
}

/// An address record this node wrote in etcd, for an attachment.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub key: String,
    /// The value written: the record is deleted only while it is still this.
    pub value: String,
    pub pool: String,
    pub address: IpAddr,
    pub kind: RecordKind,
    pub owner: Attachment,
    pub added_by: Option<String>,
    pub state: RecordState,
}

macro_rules! text_enum {
    ($ty:ty { $($variant:ident = $text:literal),* }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),* }
            }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<Self, String> {
                match s { $($text => Ok(Self::$variant),)* other => Err(format!("unknown {} {other:?}", stringify!($ty))) }
            }
        }
    };
}

text_enum!(BlockState { Owned = "owned", Releasing = "releasing", Contested = "contested" });
text_enum!(RecordKind { Static = "static", Borrowed = "borrowed", Lent = "lent", Allocated = "allocated" });
text_enum!(RecordState { Writing = "writing", Held = "held", Releasing = "releasing" });

/// A text column that must parse; one that does not was not written by us.
fn parsed<T: FromStr>(row: &Row, index: usize) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text: String = row.get(index)?;
    text.parse().map_err(|e: T::Err| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, e.to_string().into())
    })
}

const BLOCK_COLUMNS: &str = "network, pool, block, state, revision, confirmed, taken, since, shared";

fn block_from_row(row: &Row) -> rusqlite::Result<NodeBlock> {
    let taken: String = row.get(6)?;
    let taken = taken
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<IpAddr>().map_err(|e| e.to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(6, rusqlite::types::Type::Text, e.into()))?;
    Ok(NodeBlock {
        network: row.get(0)?,
        pool: row.get(1)?,
        block: parsed(row, 2)?,
        state: parsed(row, 3)?,
        revision: row.get(4)?,
        confirmed: row.get(5)?,
        taken,
        since: row.get(7)?,
        shared: row.get(8)?,
    })
}

const RECORD_COLUMNS: &str = "key, value, pool, address, kind, network, container_id, ifname, added_by, state";

fn record_from_row(row: &Row) -> rusqlite::Result<NodeRecord> {
    Ok(NodeRecord {
        key: row.get(0)?,
        value: row.get(1)?,
        pool: row.get(2)?,
        address: parsed(row, 3)?,
        kind: parsed(row, 4)?,
        owner: Attachment { network: row.get(5)?, container_id: row.get(6)?, ifname: row.get(7)? },
        added_by: row.get(8)?,
        state: parsed(row, 9)?,
    })
}

/// The cluster rows of a node database transaction.
pub trait ClusterRows {
    /// The transaction's connection.
    fn conn(&self) -> &rusqlite::Connection;
    /// The database, for error messages.
    fn db_path(&self) -> &Path;
    /// The ipam-delegated ADD this transaction is part of, if any.
    fn adding(&self) -> Option<&str>;
    fn blocks_where(&self, condition: &str, values: impl rusqlite::Params) -> Result<Vec<NodeBlock>> {
        let sql = format!("SELECT {BLOCK_COLUMNS} FROM cluster_blocks WHERE {condition} ORDER BY network, pool, block");
        let mut stmt = self.conn().prepare_cached(&sql).in_db(self.db_path())?;
        stmt.query_map(values, block_from_row).and_then(Iterator::collect).in_db(self.db_path())
    }

    /// This node's blocks of a pool of `network`, in address order of their text.
    fn node_blocks(&self, network: &str, pool: &str) -> Result<Vec<NodeBlock>> {
        let mut blocks = self.network_blocks(network)?;
        blocks.retain(|b| b.pool == pool);
        Ok(blocks)
    }

    /// This node's blocks of every pool of `network`. One statement for
    /// this and [`ClusterRows::node_blocks`]: a call prepares each statement
    /// it runs, and preparing one costs more than reading a network's blocks.
    fn network_blocks(&self, network: &str) -> Result<Vec<NodeBlock>> {
        self.blocks_where("network = ?1", [network])
    }

    /// Every block of this node, of every network.
    fn all_node_blocks(&self) -> Result<Vec<NodeBlock>> {
        self.blocks_where("1", [])
    }

    /// Records a block as given, replacing its earlier row.
    fn put_node_block(&self, b: &NodeBlock) -> Result<()> {
        let taken = b.taken.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        self.conn()
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO cluster_blocks ({BLOCK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))
            .and_then(|mut stmt| {
                stmt.execute(params![
                    b.network,
                    b.pool,
                    b.block.to_string(),
                    b.state.as_str(),
                    b.revision,
                    b.confirmed,
                    taken,
                    b.since,
                    b.shared
                ])
            })
            .in_db(self.db_path())
            .map(drop)
    }

    /// Voids every block's confirmation: they were taken in another boot.
    fn void_block_confirmations(&self) -> Result<()> {
        self.conn().execute("UPDATE cluster_blocks SET confirmed = 0", []).in_db(self.db_path()).map(drop)
    }

    fn drop_node_block(&self, network: &str, pool: &str, block: &IpNet) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM cluster_blocks WHERE network = ?1 AND pool = ?2 AND block = ?3")
            .and_then(|mut stmt| stmt.execute(params![network, pool, block.to_string()]))
            .in_db(self.db_path())
            .map(drop)
    }

    fn records_where(&self, condition: &str, values: impl rusqlite::Params) -> Result<Vec<NodeRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM cluster_records WHERE {condition} ORDER BY key");
        let mut stmt = self.conn().prepare_cached(&sql).in_db(self.db_path())?;
        stmt.query_map(values, record_from_row).and_then(Iterator::collect).in_db(self.db_path())
    }

    /// The address record this node wrote at etcd key `key`, if any.
    fn node_record(&self, key: &str) -> Result<Option<NodeRecord>> {
        Ok(self.records_where("key = ?1", [key])?.into_iter().next())
    }

    /// The address records this node wrote for `owner`.
    fn node_records_of(&self, owner: &Attachment) -> Result<Vec<NodeRecord>> {
        self.records_where(
            "network = ?1 AND container_id = ?2 AND ifname = ?3",
            [&owner.network, &owner.container_id, &owner.ifname],
        )
    }

    /// The address records this node wrote for attachments of `network`.
    fn node_records(&self, network: &str) -> Result<Vec<NodeRecord>> {
        self.records_where("network = ?1", [network])
    }

    /// Records not yet settled with etcd (being written, or to be deleted), of every network.
    fn unsettled_node_records(&self) -> Result<Vec<NodeRecord>> {
        self.records_where("state != 'held'", [])
    }

    /// Records an address record, tagged with this handle's ADD.
    fn put_node_record(&self, r: &NodeRecord) -> Result<()> {
        let added_by = r.added_by.as_deref().or(self.adding());
        self.conn()
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO cluster_records ({RECORD_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ))
            .and_then(|mut stmt| {
                stmt.execute(params![
                    r.key,
                    r.value,
                    r.pool,
                    r.address.to_string(),
                    r.kind.as_str(),
                    r.owner.network,
                    r.owner.container_id,
                    r.owner.ifname,
                    added_by,
                    r.state.as_str()
                ])
            })
            .in_db(self.db_path())
            .map(drop)
    }

    fn set_node_record_state(&self, key: &str, state: RecordState) -> Result<()> {
        self.conn()
            .prepare_cached("UPDATE cluster_records SET state = ?2 WHERE key = ?1")
            .and_then(|mut stmt| stmt.execute(params![key, state.as_str()]))
            .in_db(self.db_path())
            .map(drop)
    }

    /// Drops the row at `key` only while it holds `value`: a call that
    /// released an etcd record must not drop the row another call has since
    /// written at the same key (the address handed out again).
    fn drop_node_record_if(&self, key: &str, value: &str) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM cluster_records WHERE key = ?1 AND value = ?2")
            .and_then(|mut stmt| stmt.execute(params![key, value]))
            .in_db(self.db_path())
            .map(drop)
    }

    fn drop_node_record(&self, key: &str) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM cluster_records WHERE key = ?1")
            .and_then(|mut stmt| stmt.execute([key]))
            .in_db(self.db_path())
            .map(drop)
    }

    fn note(&self, name: &str) -> Result<Option<String>> {
        let mut stmt =
            self.conn().prepare_cached("SELECT value FROM cluster_notes WHERE name = ?1").in_db(self.db_path())?;
        let mut rows = stmt.query_map([name], |row| row.get(0)).in_db(self.db_path())?;
        rows.next().transpose().in_db(self.db_path())
    }

    /// The names of the notes that start with `prefix`.
    fn notes_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT name FROM cluster_notes WHERE substr(name, 1, length(?1)) = ?1 ORDER BY name")
            .in_db(self.db_path())?;
        stmt.query_map([prefix], |row| row.get(0)).and_then(Iterator::collect).in_db(self.db_path())
    }

    fn drop_note(&self, name: &str) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM cluster_notes WHERE name = ?1")
            .and_then(|mut stmt| stmt.execute([name]))
            .in_db(self.db_path())
            .map(drop)
    }

    /// Drops the notes whose names start with `prefix`, but `keep`.
    fn drop_notes_with_prefix(&self, prefix: &str, keep: &str) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM cluster_notes WHERE substr(name, 1, length(?1)) = ?1 AND name != ?2")
            .and_then(|mut stmt| stmt.execute([prefix, keep]))
            .in_db(self.db_path())
            .map(drop)
    }

    fn set_note(&self, name: &str, value: &str) -> Result<()> {
        self.conn()
            .prepare_cached("INSERT OR REPLACE INTO cluster_notes (name, value) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute([name, value]))
            .in_db(self.db_path())
            .map(drop)
    }
}

impl ClusterRows for Tx<'_> {
    fn conn(&self) -> &rusqlite::Connection {
        self.sql()
    }

    fn db_path(&self) -> &Path {
        self.path()
    }

    fn adding(&self) -> Option<&str> {
        self.add_id()
    }
}
