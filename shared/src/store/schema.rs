//! The schema, versioned with `PRAGMA user_version`, its migrations, and the
//! mark that says a file is one of ours (`PRAGMA application_id`).
//!
//! Addresses are keyed by 16-byte big-endian BLOBs (see [`crate::addr::to_key`]),
//! so that SQLite's BLOB order is numeric order; text columns beside them are
//! for people reading the file with the sqlite3 shell.

use std::path::Path;

use std::time::{Duration, Instant};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::{unusable, InDatabase};
use crate::addr::to_key;
use crate::error::{CniError, Code, Result};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 7;

/// `PRAGMA application_id` of the suite's databases ("IPMD"): a SQLite file
/// without it is someone else's and is never written to.
pub const APPLICATION_ID: i32 = 0x4950_4D44;

/// `MIGRATIONS[v]` takes a database from version `v` to `v + 1`; released
/// entries never change, new versions append.
const MIGRATIONS: [fn(&Transaction) -> rusqlite::Result<()>; SCHEMA_VERSION as usize] =
    [to_v1, to_v2, to_v3, to_v4, to_v5, to_v6, to_v7];

const V1: &str = "
-- A pool belongs to the network whose configuration defines it: two networks
-- may both have a pool named ipRanges-0, and they are different pools.
CREATE TABLE pools (
    network    TEXT NOT NULL,
    name       TEXT NOT NULL,
    family     TEXT NOT NULL,        -- ipv4, ipv6 or ipv4,ipv6
    subnets    TEXT NOT NULL,        -- comma-separated CIDRs
    definition TEXT NOT NULL,        -- the pool as configured, JSON
    cursor     TEXT,                 -- last address handed out, or NULL
    PRIMARY KEY (network, name)
) WITHOUT ROWID;

CREATE TABLE leases (
    key          BLOB PRIMARY KEY NOT NULL,  -- the address as 16 bytes, big-endian, IPv4 mapped
    address      TEXT NOT NULL,
    pool         TEXT NOT NULL,
    network      TEXT NOT NULL,
    container_id TEXT NOT NULL,
    ifname       TEXT NOT NULL,
    since        INTEGER NOT NULL            -- unix seconds
) WITHOUT ROWID;

CREATE INDEX leases_by_owner ON leases (network, container_id, ifname);

-- Derived from leases: the maximal runs of consecutive leased addresses, so
-- that the first free address after any point is one lookup away.
CREATE TABLE leased_runs (
    first BLOB PRIMARY KEY NOT NULL,
    last  BLOB NOT NULL
) WITHOUT ROWID;
";

const V2: &str = "
-- Which ipam-delegated ADD took the lease (NULL: a delegate run on its own),
-- so that rolling back a failed ADD releases only what that ADD took.
ALTER TABLE leases ADD COLUMN added_by TEXT;

CREATE INDEX leases_by_pool ON leases (network, pool);

-- Derived from pools: every registered subnet as a key interval, so that a
-- new pool's overlap check is an index lookup instead of reading every pool.
-- (The key's columns come first: the sqlite3 shell of Debian 12, 3.40,
-- misreads a WITHOUT ROWID table's other columns in its integrity check.)
CREATE TABLE pool_subnets (
    first   BLOB NOT NULL,
    network TEXT NOT NULL,
    name    TEXT NOT NULL,
    last    BLOB NOT NULL,
    PRIMARY KEY (first, network, name)
) WITHOUT ROWID;

CREATE INDEX pool_subnets_by_pool ON pool_subnets (network, name);
";

/// Cluster mode's tables, as released: a database migrated from before
/// version 3 has them, a new one does not (ipam-ds-cluster makes them at its
/// first call on a node, from its `tables.sql`, and checks that the two agree).
const V3: &str = "
-- Cluster mode (ipam-ds-cluster): what this node holds in etcd. An address
-- record's row is written before the etcd write it names, and every row is
-- removed only after the etcd delete, so a process killed between the two
-- leaves a row that a later call resolves (a block claimed just before a kill
-- is found again in etcd at the node's next claim).
CREATE TABLE cluster_blocks (
    network   TEXT NOT NULL,
    pool      TEXT NOT NULL,
    block     TEXT NOT NULL,             -- CIDR
    state     TEXT NOT NULL,             -- owned, or releasing (empty, being given back)
    revision  INTEGER NOT NULL,          -- create_revision of our block key in etcd
    confirmed INTEGER NOT NULL,          -- unix seconds: the last etcd read that showed it ours
    taken     TEXT NOT NULL,             -- its addresses held elsewhere in the cluster, as last read
    since     INTEGER NOT NULL,          -- unix seconds: when it entered its state
    PRIMARY KEY (network, pool, block)
) WITHOUT ROWID;

CREATE TABLE cluster_records (
    key          TEXT PRIMARY KEY NOT NULL,  -- the etcd key of an address record
    value        TEXT NOT NULL,              -- the value written: deleted only while it is still this
    network      TEXT NOT NULL,
    pool         TEXT NOT NULL,
    address      TEXT NOT NULL,
    kind         TEXT NOT NULL,              -- static, borrowed or lent
    container_id TEXT NOT NULL,
    ifname       TEXT NOT NULL,
    added_by     TEXT,                       -- the ipam-delegated ADD that wrote it
    state        TEXT NOT NULL               -- writing, held or releasing
) WITHOUT ROWID;

CREATE INDEX cluster_records_by_owner ON cluster_records (network, container_id, ifname);

-- Small facts kept between calls: the etcd auth token, the lend requests seen.
CREATE TABLE cluster_notes (
    name  TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;
";

fn to_v1(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V1)
}

fn to_v2(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V2)?;
    let pools: Vec<(String, String, String)> = tx
        .prepare("SELECT network, name, subnets FROM pools")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut insert = tx.prepare("INSERT INTO pool_subnets (first, last, network, name) VALUES (?1, ?2, ?3, ?4)")?;
    for (network, name, subnets) in pools {
        // A subnet that does not parse was never written by a build of ours;
        // the operator's check reports such a pool, and it stays unindexed.
        for subnet in subnets.split(',').filter_map(|s| s.parse::<ipnet::IpNet>().ok()) {
            insert.execute(params![&to_key(subnet.network())[..], &to_key(subnet.broadcast())[..], network, name])?;
        }
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
}

fn to_v3(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V3)
}

/// Shared blocks (ipam-ds-cluster): blocks in which every address handed out
/// is recorded in etcd, so that any node may allocate in them.
const V4: &str = "
ALTER TABLE cluster_blocks ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
";

fn to_v4(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V4)
}

/// Sticky addresses (ipam-da-sticky). A row of `leases` is still the one
/// place an address is taken, so that one primary key keeps every address
/// on one holder: either an attachment's lease (`held_until` NULL) or, once
/// that attachment is gone, a hold for the workload identity it had, until
/// `held_until`. A second live attachment of an identity that may share its
/// address (`shareLive`) is a row of `lease_sharers`, never a second lease.
const V5: &str = "
ALTER TABLE leases ADD COLUMN identity TEXT;       -- the workload identity the address sticks to, or NULL
ALTER TABLE leases ADD COLUMN held_until INTEGER;  -- NULL: leased; else held for the identity until then (unix s)

CREATE INDEX leases_by_identity ON leases (network, identity, ifname) WHERE identity IS NOT NULL;
CREATE INDEX leases_held ON leases (held_until) WHERE held_until IS NOT NULL;

CREATE TABLE lease_sharers (
    network      TEXT NOT NULL,
    container_id TEXT NOT NULL,
    ifname       TEXT NOT NULL,
    key          BLOB NOT NULL,              -- the shared lease's address
    since        INTEGER NOT NULL,
    added_by     TEXT,
    PRIMARY KEY (network, container_id, ifname, key)
) WITHOUT ROWID;

CREATE INDEX lease_sharers_by_key ON lease_sharers (key);
";

fn to_v5(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V5)
}

/// What the rollback of a failed ADD gives back: an address the ADD took
/// from the free ones becomes free again, one it took from its identity's
/// hold becomes that hold again, with the end it had (not a new one, and
/// not a hold of an address the identity never had).
const V6: &str = "
ALTER TABLE leases ADD COLUMN taken_hold_until INTEGER;  -- NULL: leased from the free addresses by the ADD added_by;
                                                         -- else taken by it from a hold that ended then (unix s)
";

fn to_v6(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V6)
}

/// What the node agent (`ipam-delegated agent`) needs to release the
/// attachments of pods deleted without a DEL: each attachment's pod, as the
/// ADD's CNI_ARGS named it, and each network's configuration, with which it
/// runs the stack's DEL as a runtime would. On Kubernetes with Multus the
/// configurations live in the API server, not on the node's disk.
const V7: &str = "
-- An attachment's pod (K8S_POD_* of its ADD), while the attachment holds a
-- lease or shares one: removed with the last of them.
CREATE TABLE attachment_pods (
    network       TEXT NOT NULL,
    container_id  TEXT NOT NULL,
    ifname        TEXT NOT NULL,
    pod_namespace TEXT NOT NULL,
    pod_name      TEXT NOT NULL,
    pod_uid       TEXT,                      -- NULL: the runtime passed none
    added         INTEGER NOT NULL,          -- unix seconds: the ADD that recorded the pod
    PRIMARY KEY (network, container_id, ifname)
) WITHOUT ROWID;

-- The configuration an ADD of the network was given (without prevResult,
-- runtimeConfig, args and cni.dev/ keys, which are the call's own).
CREATE TABLE network_configs (
    network TEXT PRIMARY KEY NOT NULL,
    config  TEXT NOT NULL,                   -- JSON
    since   INTEGER NOT NULL                 -- unix seconds: when it was written
) WITHOUT ROWID;
";

fn to_v7(tx: &Transaction) -> rusqlite::Result<()> {
    tx.execute_batch(V7)
}

/// A new database, as `build.rs` makes it from `current.sql` (the schema
/// at [`SCHEMA_VERSION`] and the marks) with this build's SQLite: the file,
/// and its WAL holding one commit that changes nothing. A new database is
/// these bytes written (see [`super::create`]), not statements run: through
/// the five migrations, creating it took 3.3M of a first ADD's 4.9M
/// instructions, and from `current.sql` 2.1M of 3.5M. The test
/// `a_new_database_has_the_migrated_schema` compares it with a migrated one.
pub(super) const NEW_DATABASE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/new-database.sqlite"));
pub(super) const NEW_DATABASE_WAL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/new-database.sqlite-wal"));

/// What the file at the database path is, judged before anything is written.
pub(super) enum Found {
    /// One of ours, at this schema version.
    Ours(i64),
    /// A database without tables, such as one an older build was killed
    /// while creating in place: ours to create, in place. (A new one is
    /// built aside: see `create`.)
    Empty,
}

/// Reads the marks of the open file and refuses anything that is not ours
/// (error 103), touching nothing: a foreign database is never migrated,
/// switched to WAL or written. One read transaction, so one snapshot: a
/// sibling may be creating the schema meanwhile. Plain pragmas, and the
/// tables only when the mark is not ours: this runs in every call.
pub(super) fn identify(conn: &Connection, path: &Path) -> Result<Found> {
    let tx = conn.unchecked_transaction().in_db(path)?;
    let application_id: i32 = tx.pragma_query_value(None, "application_id", |row| row.get(0)).in_db(path)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0)).in_db(path)?;
    if application_id == APPLICATION_ID {
        refuse_unknown(version, path)?;
        return Ok(Found::Ours(version));
    }
    let tables: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut names| names.query_map([], |row| row.get(0))?.collect())
        .in_db(path)?;
    match (application_id, version) {
        (0, 0) if tables.is_empty() => Ok(Found::Empty),
        // Version 1 predates the mark: recognised by its tables.
        (0, 1) if tables == ["leased_runs", "leases", "pools"] => Ok(Found::Ours(1)),
        _ => Err(foreign(path, application_id, version, &tables)),
    }
}

fn foreign(path: &Path, application_id: i32, version: i64, tables: &[String]) -> CniError {
    let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    unusable(
        path,
        format!(
            "it is a SQLite database of another application (application_id {application_id:#x}, user_version \
             {version}, tables: {}{}), not an allocation database of this suite; nothing was changed: point \
             ipam.database at a file of its own",
            if shown.is_empty() { "none".to_string() } else { shown.join(", ") },
            if tables.len() > shown.len() { ", …" } else { "" }
        ),
    )
}

/// Persistent, and impossible inside a transaction: set once at creation. It
/// needs the file to itself, and SQLite does not wait for that: a sibling
/// opening the new database holds a read lock for a moment, so try again
/// until it is gone.
fn switch_to_wal(conn: &Connection, path: &Path, patience: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0)).in_db(path) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => return Err(unusable(path, format!("cannot switch to WAL journal mode (got {mode})"))),
            Err(e) if e.is(Code::TryAgainLater) && started.elapsed() < patience => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Error 103 for a database written by a newer build (or a version no build writes).
pub(super) fn refuse_unknown(found: i64, path: &Path) -> Result<()> {
    if found < 0 {
        return Err(unusable(path, format!("invalid schema version {found}")));
    }
    if found > SCHEMA_VERSION {
        return Err(unusable(
            path,
            format!(
                "its schema version {found} is newer than this build's version {SCHEMA_VERSION}: upgrade the plugins"
            ),
        ));
    }
    Ok(())
}

/// Brings the schema to [`SCHEMA_VERSION`]. Call with the lock held: the
/// file is identified again because another process may have migrated first.
pub(super) fn migrate(conn: &mut Connection, path: &Path, patience: Duration) -> Result<()> {
    let found = match identify(conn, path)? {
        Found::Ours(version) if version == SCHEMA_VERSION => return Ok(()),
        Found::Ours(version) => version,
        Found::Empty => 0,
    };
    if found == 0 {
        // Marked before the switch to WAL, so that the mark is in the
        // file's own header from the start, where a plain read finds it.
        conn.pragma_update(None, "application_id", APPLICATION_ID).in_db(path)?;
        switch_to_wal(conn, path, patience)?;
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).in_db(path)?;
    migrate_from(&tx, found, path)?;
    tx.commit().in_db(path)
}

fn migrate_from(tx: &Transaction, found: i64, path: &Path) -> Result<()> {
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        migration(tx).map_err(|e| unusable(path, format!("migration from version {from}: {e}")))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).in_db(path)
}

#[cfg(test)]
mod tests {
    use super::super::schema_testing::{migrated, shape};
    use super::*;

    /// A new database is [`NEW_DATABASE`] and its WAL written, an older one
    /// migrated: both must end with the same marks, and every table of the
    /// new one in the shape the migrations give it, or a query would meet a
    /// difference. The migrated one has cluster mode's tables besides,
    /// which ipam-ds-cluster makes in a new one and compares with these
    /// (its `tables` module).
    #[test]
    fn a_new_database_has_the_migrated_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("created");
        std::fs::write(&path, NEW_DATABASE).unwrap();
        std::fs::write(dir.path().join("created-wal"), NEW_DATABASE_WAL).unwrap();
        let created = Connection::open(&path).unwrap();
        let migrated = migrated(&dir.path().join("migrated"));
        for conn in [&created, &migrated] {
            assert!(matches!(identify(conn, &path).unwrap(), Found::Ours(SCHEMA_VERSION)));
            let mode: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0)).unwrap();
            assert_eq!(mode, "wal");
        }
        let integrity: String = created.pragma_query_value(None, "integrity_check", |row| row.get(0)).unwrap();
        assert_eq!(integrity, "ok");
        // Its WAL holds one commit: a plugin's first commit appends to it.
        let frames: i64 = created.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1)).unwrap();
        assert_eq!(frames, 1);
        let (new, old) = (shape(&created), shape(&migrated));
        assert!(new.len() >= 5, "{new:#?}");
        for (table, shape) in &new {
            assert_eq!(Some(shape), old.get(table), "{table}");
        }
    }
}
