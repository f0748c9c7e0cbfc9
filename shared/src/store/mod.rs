//! The allocation database: a SQLite file shared by the selector and the
//! allocators. Persistence only: which address to pick is decided elsewhere;
//! the store answers questions and records changes.
//!
//! Writers are serialized across processes by an exclusive lock on
//! `<database>.lock` (see [`lock`]), so SQLite itself never makes a writer
//! wait; readers use WAL snapshots and take no lock.

mod columns;
mod create;
mod holds;
mod integrity;
mod leases;
mod lock;
mod pods;
mod pools;
mod queue;
mod runs;
mod schema;
#[cfg(any(test, feature = "testing"))]
pub mod schema_testing;
mod sharing;
mod sqlite_memory;
#[cfg(test)]
mod testing;

use std::cell::Cell;
use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::error::{CniError, Code, Result};

pub use holds::Share;
pub use leases::{Lease, LeaseFilter};
pub use lock::{LockWait, Turn};
pub use pods::{AgentRecord, AttachmentPod, Pod};
pub use pools::{PoolOverlap, RegisteredPool};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use sharing::{open_for_delegate, share_within_call, StoreHandle};
pub use sqlite_memory::use_program_allocator;

use lock::LockFile;

/// Unix seconds now, as the rows count time.
pub fn unix_now() -> i64 {
    columns::now_unix()
}

/// How long a writer waits for the lock before giving up with error 11.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// WAL frames (pages) after which a writer checkpoints the WAL and starts
/// it again from its beginning (see [`restart_wal`]).
///
/// A process that opens the database while no other connection is open
/// rebuilds the WAL index by reading the WAL up to its last valid frame, and
/// that rebuild forgets how much of it was already checkpointed. SQLite's
/// automatic (passive) checkpoints therefore never restart the WAL here: it
/// would grow without bound, every later process would read all of it, and
/// every commit past the threshold would copy all of it into the database
/// again. A checkpoint that restarts the WAL once it holds this many frames
/// keeps what a process reads short.
const WAL_CHECKPOINT_FRAMES: i32 = 64;

/// The WAL's size past which a restart truncates it (one large transaction
/// made it larger); below it, the file keeps its size and is written over.
const WAL_SIZE_LIMIT: i64 = 2 * WAL_CHECKPOINT_FRAMES as i64 * (4096 + 24);

/// How long the checkpoint waits for readers before it gives up until the
/// next write (the ADD has committed already; this is housekeeping).
const CHECKPOINT_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

thread_local! {
    /// Frames in the WAL after this thread's last commit, as SQLite's WAL
    /// hook reports them.
    static WAL_FRAMES: Cell<i32> = const { Cell::new(0) };
}

fn record_wal_frames(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// When a commit reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the commit returns (SQLite's synchronous=FULL): a plugin in a
    /// process of its own, which answers as soon as it has committed.
    EachCommit,
    /// At [`AllocationStore::sync`] (synchronous=NORMAL): the delegates that
    /// ipam-delegated runs in its own process commit one after another, and
    /// the call syncs once before it answers (see [`share_within_call`]).
    AtSync,
}

/// An open allocation database and its lock file.
pub struct AllocationStore {
    conn: Connection,
    lock: LockFile,
    path: PathBuf,
    lock_wait: LockWait,
    /// The ipam-delegated ADD this process is part of: leases it takes are
    /// tagged with it, so that a rollback releases only those.
    add_id: Option<String>,
    /// What an ADD records for the node agent beside its leases.
    agent_record: Option<AgentRecord>,
    durability: Durability,
    /// Committed since the last [`AllocationStore::sync`] (AtSync only).
    unsynced: bool,
}

/// One transaction on the store: every question and change goes through it.
pub struct Tx<'conn> {
    sql: rusqlite::Transaction<'conn>,
    path: &'conn Path,
    add_id: Option<&'conn str>,
    agent_record: Option<&'conn AgentRecord>,
    /// Whether `agent_record` was written in this transaction.
    agent_recorded: Cell<bool>,
}

/// What a delegate's own rows (ipam-ds-cluster's) build on.
impl<'conn> Tx<'conn> {
    /// The SQLite transaction itself: the one hook for a delegate's own
    /// tables. A delegate with tables of its own keeps their statements in
    /// its crate, and runs them through this: it makes them, where missing,
    /// in a write ([`AllocationStore::write`]) with `CREATE ... IF NOT EXISTS`
    /// (a new database has only the core's tables, see `current.sql`), and
    /// reads and writes its rows in the core's transactions, so that they
    /// commit or roll back with the leases. The core's own tables are read
    /// and written through the methods of `Tx`, never through this.
    /// Failures map to the contract's codes with [`InDatabase::in_db`].
    pub fn sql(&self) -> &rusqlite::Transaction<'conn> {
        &self.sql
    }

    pub fn path(&self) -> &Path {
        self.path
    }

    /// The ipam-delegated ADD this transaction's writes belong to, if any.
    pub fn add_id(&self) -> Option<&str> {
        self.add_id
    }
}

impl AllocationStore {
    /// Opens the database at an absolute path, creating it when there is
    /// none (no file, or an empty one): built aside and renamed into place
    /// (see store/create.rs). Missing parent directories are created 0700, a new
    /// database file and the lock file `<name>.lock` beside it 0600, and a
    /// database of ours that is readable by others is made 0600. A file that
    /// is not one of the suite's databases is error 103 and is left as it is.
    /// Creating or migrating the schema happens under the lock; when the
    /// schema is current, opening only reads the file's marks.
    pub fn open(path: &Path, lock_wait: impl Into<LockWait>) -> Result<Self> {
        AllocationStore::open_with(path, lock_wait.into(), Durability::EachCommit)
    }

    /// [`AllocationStore::open`], with commits made durable as `durability` says.
    pub fn open_with(path: &Path, lock_wait: LockWait, durability: Durability) -> Result<Self> {
        if !path.is_absolute() {
            return Err(unusable(path, "not an absolute path"));
        }
        if path.file_name().is_none() {
            return Err(unusable(path, "the path does not name a file"));
        }
        if let Some(parent) = path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| unusable(path, format!("cannot create directory {}: {e}", parent.display())))?;
        }
        // SQLite follows a symlink to the file it names (and keeps its -wal
        // beside the target); the lock must be the target's too, or two paths
        // to one database would be two locks.
        let path = resolve_symlink(path)?;
        let lock_path = sibling(&path, ".lock");
        let mut lock = LockFile::open(&lock_path)
            .map_err(|e| unusable(&path, format!("lock file {}: {e}", lock_path.display())))?;
        if !open_database_file(&path)? {
            let held = lock.acquire(&lock_wait, &path)?;
            create::create(&path)?;
            drop(held);
            if !open_database_file(&path)? {
                return Err(unusable(&path, "it was removed or emptied while it was being created"));
            }
        }

        use_program_allocator();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).in_db(&path)?;
        // SQLite silently falls back to read-only; an ADD must not find out late.
        if conn.is_readonly("main").in_db(&path)? {
            return Err(unusable(&path, "the file is read-only"));
        }
        // Waits only for outside writers such as the sqlite3 shell: our own
        // writers are serialized by the lock file.
        conn.busy_timeout(lock_wait.timeout).in_db(&path)?;
        // Every plugin process is short-lived and usually the last connection:
        // by default SQLite then checkpoints and deletes the WAL at close, so
        // each process would recreate it (file creation, header and directory
        // fsyncs) and checkpoint again (two more fsyncs). The WAL persists
        // instead and writers restart it past WAL_CHECKPOINT_FRAMES; crash
        // safety is SQLite's WAL recovery, as after any crash.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).in_db(&path)?;

        let mut store = AllocationStore {
            conn,
            lock,
            path,
            lock_wait,
            add_id: None,
            agent_record: None,
            durability,
            unsynced: false,
        };
        let synchronous = match durability {
            Durability::EachCommit => "FULL",
            Durability::AtSync => "NORMAL",
        };
        // The first statements read the file, and so meet whatever a killed
        // process left to recover.
        let found = store.under_lock_if_busy(|conn, path| {
            // A committed ADD must be on disk before the process answers: in
            // WAL mode FULL syncs the WAL at every commit; NORMAL leaves it
            // to the checkpoints, and to sync().
            conn.pragma_update(None, "synchronous", synchronous).in_db(path)?;
            // Our hook replaces SQLite's own, which is its automatic
            // checkpoint: the writers checkpoint themselves (restart_wal).
            conn.wal_hook(Some(record_wal_frames));
            schema::identify(conn, path)
        })?;
        if !matches!(found, schema::Found::Ours(SCHEMA_VERSION)) {
            let _held = store.lock.acquire(&store.lock_wait, &store.path)?;
            schema::migrate(&mut store.conn, &store.path, store.lock_wait.timeout)?;
            store.unsynced = durability == Durability::AtSync;
        }
        Ok(store)
    }

    /// With [`Durability::AtSync`], makes every commit of this handle so far
    /// durable: one fdatasync of the WAL, where the commits are. SQLite syncs
    /// the rest itself even at synchronous=NORMAL: what a checkpoint copies,
    /// a new WAL's header, and with it the WAL's directory. A new database
    /// is synced, with its directory, when it is created.
    pub fn sync(&mut self) -> Result<()> {
        if !self.unsynced {
            return Ok(());
        }
        let failed = |what: &Path, e: std::io::Error| {
            CniError::io(&format!("making the allocation database durable: fsync of {}", what.display()), e)
        };
        let wal = sibling(&self.path, "-wal");
        match File::open(&wal) {
            Ok(file) => file.sync_data().map_err(|e| failed(&wal, e))?,
            // Only if something removed it: SQLite keeps it (see open).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&wal, e)),
        }
        self.unsynced = false;
        Ok(())
    }

    /// Tags the leases this handle takes with the ipam-delegated ADD they
    /// belong to (see [`Tx::release_added_by`]).
    pub fn set_add_id(&mut self, add_id: Option<String>) {
        self.add_id = add_id;
    }

    /// Has the leases and shares this handle writes for the record's
    /// attachment record its pod and network configuration too (see
    /// [`AgentRecord`]).
    pub fn set_agent_record(&mut self, record: Option<AgentRecord>) {
        self.agent_record = record;
    }

    /// A turn named `name` among this database's processes, for work that
    /// must not interleave with the same work of another process but spans
    /// several transactions and requests elsewhere (each transaction still
    /// takes the database's lock): the lock file `<database>.<name>.lock`,
    /// waited for at most `wait`. None when another process kept it that
    /// long: a turn orders work, it never guards it, so the caller goes on
    /// without. Another process's transactions never wait for it.
    pub fn take_turn(&self, name: &str, wait: Duration) -> Result<Option<Turn>> {
        let path = sibling(&self.path, &format!(".{name}.lock"));
        lock::take_turn(&path, wait).map_err(|e| unusable(&self.path, format!("lock file {}: {e}", path.display())))
    }

    /// Runs `f` in one write transaction while holding the lock: commits if
    /// `f` succeeds, rolls back otherwise, and releases the lock after.
    pub fn write<T>(&mut self, f: impl FnOnce(&Tx) -> Result<T>) -> Result<T> {
        let asked = Instant::now();
        let held = self.lock.acquire(&self.lock_wait, &self.path)?;
        let locked = Instant::now();
        let value = {
            let sql = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).in_db(&self.path)?;
            let tx = Tx {
                sql,
                path: &self.path,
                add_id: self.add_id.as_deref(),
                agent_record: self.agent_record.as_ref(),
                agent_recorded: Cell::new(false),
            };
            let value = f(&tx)?;
            let committing = Instant::now();
            WAL_FRAMES.set(0);
            tx.sql.commit().in_db(&self.path)?;
            self.unsynced |= self.durability == Durability::AtSync;
            // Logged while the lock is held, so the lines' order is the
            // order of the turns, and with the queue ticket it tells
            // whether the turns followed the queue (ipam-bench's lock waits).
            tracing::debug!(
                "lock wait {:?}, transaction {:?}, durable commit {:?}, ticket {}",
                locked - asked,
                committing - locked,
                committing.elapsed(),
                held.ticket().map_or_else(|| "none".to_string(), |t| t.to_string())
            );
            value
        };
        if WAL_FRAMES.get() > WAL_CHECKPOINT_FRAMES && restart_wal(&self.conn, &self.path, self.lock_wait.timeout) {
            // Every commit so far is in the database file, which the
            // checkpoint synced.
            self.unsynced = false;
        }
        drop(held);
        Ok(value)
    }

    /// Runs `f` in a read transaction (a consistent WAL snapshot) without the
    /// lock. It always rolls back; a write attempted in it is a bug and fails.
    pub fn read<T>(&mut self, f: impl Fn(&Tx) -> Result<T>) -> Result<T> {
        self.under_lock_if_busy(|conn, path| {
            let changes_before = conn.total_changes();
            let sql = conn.transaction_with_behavior(TransactionBehavior::Deferred).in_db(path)?;
            let tx = Tx { sql, path, add_id: None, agent_record: None, agent_recorded: Cell::new(false) };
            let value = f(&tx);
            let changed = tx.sql.total_changes() != changes_before;
            tx.sql.rollback().in_db(path)?;
            if changed {
                return Err(CniError::new(
                    Code::Internal,
                    "bug: write attempted in a read transaction of the allocation database",
                ));
            }
            value
        })
    }

    /// Runs a lock-free read; if SQLite answers busy, runs it again holding
    /// the lock. A process killed while creating or writing the database
    /// leaves a journal to recover, and SQLite does not wait for a sibling's
    /// recovery: it answers busy at once. Under the lock no sibling of ours
    /// is writing, so the second attempt recovers or waits (busy_timeout).
    fn under_lock_if_busy<T>(&mut self, read: impl Fn(&mut Connection, &Path) -> Result<T>) -> Result<T> {
        match read(&mut self.conn, &self.path) {
            Err(e) if e.is(Code::TryAgainLater) => {
                tracing::debug!("lock-free read of {} was busy; reading under the lock", self.path.display());
                let _held = self.lock.acquire(&self.lock_wait, &self.path)?;
                read(&mut self.conn, &self.path)
            }
            other => other,
        }
    }

    /// Whether every table of `names` is in the database, asked on the bare
    /// connection: no transaction, so a delegate that checks for its own
    /// tables at every call (cluster mode) pays three lookups, not a
    /// BEGIN and ROLLBACK around them.
    pub fn has_tables(&self, names: &[&str]) -> Result<bool> {
        names.iter().try_fold(true, |all, &name| Ok(all && self.conn.table_exists(None, name).in_db(&self.path)?))
    }

    /// Ok when the database can be written now (for STATUS): takes the lock,
    /// begins a write transaction and rolls it back.
    pub fn probe_writable(&mut self) -> Result<()> {
        let _held = self.lock.acquire(&self.lock_wait, &self.path)?;
        let sql = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).in_db(&self.path)?;
        sql.rollback().in_db(&self.path)
    }

    /// Copies the write-ahead log into the database file and truncates it,
    /// under the lock. For bulk loads (tools, benchmarks): a plugin's next
    /// commit then does not pay for checkpointing a large log.
    pub fn checkpoint(&mut self) -> Result<()> {
        let _held = self.lock.acquire(&self.lock_wait, &self.path)?;
        let (busy, _, _): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .in_db(&self.path)?;
        if busy != 0 {
            return Err(CniError::new(
                Code::TryAgainLater,
                format!("allocation database {} is busy: checkpoint not completed", self.path.display()),
            ));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Checkpoints the whole WAL into the database file, syncing both, then
/// commits a change that changes nothing, so that this connection starts
/// the WAL again from its beginning: SQLite restarts a WAL at a commit of a
/// connection that saw it all checkpointed, while a later process, which
/// rebuilds the WAL index, would take all of it for new and append. The
/// restart writes and syncs the WAL's new header here, where the checkpoint
/// has synced the directory already, and the next process appends to it.
/// The file keeps its size (up to [`WAL_SIZE_LIMIT`]): later commits write
/// over it, and their fdatasync changes no file size. Says whether the
/// checkpoint completed. Best effort: failures are logged, never reported,
/// since the caller's transaction has committed.
fn restart_wal(conn: &Connection, path: &Path, busy_timeout: Duration) -> bool {
    let _ = conn.busy_timeout(CHECKPOINT_BUSY_TIMEOUT);
    let outcome: rusqlite::Result<(i64, i64, i64)> =
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)));
    let _ = conn.busy_timeout(busy_timeout);
    match outcome {
        Ok((0, _, _)) => tracing::debug!("checkpointed the WAL of {}", path.display()),
        Ok(_) => {
            tracing::debug!("WAL of {} not checkpointed: readers were busy", path.display());
            return false;
        }
        Err(e) => {
            tracing::warn!("checkpoint of {} failed: {e}", path.display());
            return false;
        }
    }
    // The commit restarts the WAL, and a restart cuts the file down to this
    // size (one large transaction made it larger). Its frame repeats page 1
    // as the database file has it: losing it to a crash loses nothing.
    let restarted = conn
        .pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .and_then(|()| conn.pragma_update(None, "user_version", SCHEMA_VERSION));
    if let Err(e) = restarted {
        tracing::warn!("restarting the WAL of {} failed: {e}", path.display());
    }
    true
}

/// `<path><suffix>`, as SQLite names its -wal and -shm files.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The file a symlink at `path` leads to, existing or not (a new database
/// is created there), or `path`.
fn resolve_symlink(path: &Path) -> Result<PathBuf> {
    let cannot = |e: std::io::Error| unusable(path, format!("cannot resolve the symlink: {e}"));
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => dangling_target(path).map_err(cannot),
            resolved => resolved.map_err(cannot),
        },
        _ => Ok(path.to_path_buf()),
    }
}

/// Where a chain of symlinks that ends at nothing leads: the canonical
/// directory of its last link's target, and the target's name.
fn dangling_target(path: &Path) -> std::io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    // As many links as the kernel follows (ELOOP past that).
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(&at)?;
                at = at.parent().map_or(to.clone(), |dir| dir.join(&to));
            }
            // Created meanwhile, by a sibling.
            Ok(_) => return std::fs::canonicalize(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(dir), Some(name)) = (at.parent(), at.file_name()) else {
                    return Err(std::io::Error::other(format!("{} names no file", at.display())));
                };
                return Ok(std::fs::canonicalize(dir)?.join(name));
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// SQLite's file header; a non-empty file without it is not a database.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Checks the database file and makes it private; false when there is none
/// yet (no file, or an empty one), which [`create`] builds. An existing
/// non-empty file without SQLite's header is error 103 before SQLite ever
/// opens it for writing.
///
/// The descriptor this reads through stays open until the process ends, one
/// per file ([`DATABASE_FILES`]): closing any descriptor of a file drops
/// every POSIX lock the process holds on it, SQLite's shared lock with them,
/// and a sqlite3 shell closing next would take itself for the file's last
/// connection and delete the WAL this process goes on committing to (its
/// commits lost at its exit).
fn open_database_file(path: &Path) -> Result<bool> {
    let mut files = DATABASE_FILES.lock().unwrap_or_else(PoisonError::into_inner);
    let same = |f: &File, on_disk: &std::fs::Metadata| {
        f.metadata().is_ok_and(|m| m.dev() == on_disk.dev() && m.ino() == on_disk.ino())
    };
    let known = match std::fs::metadata(path) {
        Ok(on_disk) => files.iter().position(|f| same(f, &on_disk)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(unusable(path, e)),
    };
    let file = match known {
        Some(i) => &files[i],
        None => match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => {
                files.push(file);
                &files[files.len() - 1]
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(unusable(path, e)),
        },
    };
    let mut header = [0u8; 16];
    match file.read_at(&mut header, 0) {
        Ok(0) => Ok(false),
        Ok(n) if n == header.len() && &header == SQLITE_MAGIC => make_private(file, path).map(|()| true),
        Ok(_) => Err(unusable(
            path,
            "it is not a database (a file without the SQLite header); nothing was changed: point \
             ipam.database at a file of its own",
        )),
        Err(e) => Err(unusable(path, e)),
    }
}

/// The database files this process opened, never closed (see
/// [`open_database_file`]).
static DATABASE_FILES: Mutex<Vec<File>> = Mutex::new(Vec::new());

/// Ours, so nobody else may read it: a database file created wider (by hand,
/// or by an older build) becomes 0600, and so do its -wal and -shm, which
/// took their mode from it.
fn make_private(file: &File, path: &Path) -> Result<()> {
    let meta = file.metadata().map_err(|e| unusable(path, e))?;
    if meta.permissions().mode() & 0o077 == 0 {
        return Ok(());
    }
    let private = || Permissions::from_mode(0o600);
    file.set_permissions(private()).map_err(|e| unusable(path, format!("cannot make it private (0600): {e}")))?;
    for sibling in [sibling(path, "-wal"), sibling(path, "-shm")] {
        match std::fs::set_permissions(&sibling, private()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(unusable(path, format!("cannot make {} private (0600): {e}", sibling.display())))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Error 103 naming the database and the cause.
fn unusable(path: &Path, cause: impl fmt::Display) -> CniError {
    CniError::new(Code::DatabaseUnusable, format!("allocation database {} is unusable: {cause}", path.display()))
}

/// Maps SQLite failures to the contract's codes: busy or locked (an outside
/// writer such as the sqlite3 shell) is 11, anything else 103.
pub trait InDatabase<T> {
    #[track_caller]
    fn in_db(self, path: &Path) -> Result<T>;
}

impl<T> InDatabase<T> for rusqlite::Result<T> {
    #[track_caller]
    fn in_db(self, path: &Path) -> Result<T> {
        let at = std::panic::Location::caller();
        self.map_err(|err| {
            tracing::debug!("SQLite error at {at}: {err}");
            err
        })
        .map_err(|err| match err.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => CniError::new(
                Code::TryAgainLater,
                format!("allocation database {} is busy ({err}): try again later", path.display()),
            )
            .with_source(err),
            _ => unusable(path, &err).with_source(err),
        })
    }
}

#[cfg(test)]
mod tests;
