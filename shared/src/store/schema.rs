//! The schema, versioned with `PRAGMA user_version`, and its migrations.
//!
//! Addresses are keyed by 16-byte big-endian BLOBs (see [`crate::addr::to_key`]),
//! so that SQLite's BLOB order is numeric order; text columns beside them are
//! for people reading the file with the sqlite3 shell.

use std::path::Path;

use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};

use super::{unusable, InDatabase};
use crate::error::{Code, Result};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

/// `MIGRATIONS[v]` takes a database from version `v` to `v + 1`; released
/// entries never change, new versions append.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [V1];

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
            Err(e) if e.code == Code::TryAgainLater as u32 && started.elapsed() < patience => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
}

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
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
/// version is read again because another process may have migrated first.
pub(super) fn migrate(conn: &mut Connection, path: &Path, patience: Duration) -> Result<()> {
    let found = user_version(conn).in_db(path)?;
    refuse_unknown(found, path)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if found == 0 {
        switch_to_wal(conn, path, patience)?;
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).in_db(path)?;
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(migration).map_err(|e| unusable(path, format!("migration from version {from}: {e}")))?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION).in_db(path)?;
    tx.commit().in_db(path)
}
