//! ipam-bench-floor: the least work of one steady-state ADD of the suite, as
//! a program of its own, so that the benchmark states the suite's distance to
//! it as a figure. `bash scripts/build -p ipam-bench-floor` builds it as the
//! suite's program is built (the same target, C library, linking and flags).
//!
//! A call does what any plugin call that answers only once its lease is on
//! disk must do: read the configuration on stdin and the CNI_* environment;
//! open the database; take the writers' exclusive lock on `<database>.lock`;
//! in one write transaction (BEGIN IMMEDIATE) look up the attachment's lease,
//! read the cursor, find the next free address after it, insert the lease
//! and move the cursor; commit under synchronous=NORMAL; the suite's
//! checkpoint policy; release the lock; one fdatasync of the -wal; print the
//! answer. A DEL deletes the attachment's lease the same way.
//!
//! What the suite does beyond this is what the floor leaves out: a JSON
//! parser (this program finds the three string fields it needs by a scan),
//! pools and their checks, the schema's marks and migrations, logging, the
//! lock's queue and bounded wait, delegates. Its database is its own (a table
//! of leases, one of cursors), created by its first call.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use fs2::FileExt;
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};

/// The suite's checkpoint policy (`WAL_CHECKPOINT_FRAMES` and
/// `WAL_SIZE_LIMIT` in shared/src/store/mod.rs): once the WAL holds more
/// than 64 frames, a RESTART checkpoint and a commit that changes nothing,
/// which starts the WAL again at its beginning; the file keeps its size.
const WAL_CHECKPOINT_FRAMES: i32 = 64;
const WAL_SIZE_LIMIT: i64 = 2 * WAL_CHECKPOINT_FRAMES as i64 * (4096 + 24);

thread_local! {
    /// Frames in the WAL after the last commit, as SQLite's WAL hook says.
    static WAL_FRAMES: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Addresses are keyed as the suite keys them: 16 bytes, big-endian, IPv4
/// mapped, so that BLOB order is address order.
const SCHEMA: &str = "
BEGIN;
CREATE TABLE IF NOT EXISTS leases (
    key          BLOB PRIMARY KEY NOT NULL,
    container_id TEXT NOT NULL,
    ifname       TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS leases_by_owner ON leases (container_id, ifname);
CREATE TABLE IF NOT EXISTS cursors (
    subnet TEXT PRIMARY KEY NOT NULL,
    last   BLOB NOT NULL
) WITHOUT ROWID;
COMMIT;
";

/// A CNI error: its code and message.
struct Failure {
    code: u32,
    msg: String,
}

impl Failure {
    fn new(code: u32, msg: impl Into<String>) -> Failure {
        Failure { code, msg: msg.into() }
    }
}

fn db(e: rusqlite::Error) -> Failure {
    Failure::new(5, format!("database: {e}"))
}

fn io_failure(what: &str, e: io::Error) -> Failure {
    Failure::new(5, format!("{what}: {e}"))
}

fn main() -> ExitCode {
    let mut input = Vec::new();
    let read = io::stdin().read_to_end(&mut input);
    let config = String::from_utf8_lossy(&input);
    let version = string_field(&config, "cniVersion").unwrap_or("1.0.0");
    let outcome = match read {
        Ok(_) => call(&config),
        Err(e) => Err(io_failure("reading the configuration on stdin", e)),
    };
    let mut out = io::stdout().lock();
    let version = json_string(version);
    match outcome {
        Ok(Some(address)) => {
            let _ = writeln!(out, r#"{{"cniVersion":{version},"ips":[{{"address":"{address}"}}]}}"#);
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(f) => {
            let _ = writeln!(out, r#"{{"cniVersion":{version},"code":{},"msg":{}}}"#, f.code, json_string(&f.msg));
            ExitCode::FAILURE
        }
    }
}

/// One call: the address answered to an ADD (with its prefix length), none
/// to a DEL.
fn call(config: &str) -> Result<Option<String>, Failure> {
    let env = |name: &str| std::env::var(name).map_err(|_| Failure::new(4, format!("{name} is not set")));
    let (command, container, ifname) = (env("CNI_COMMAND")?, env("CNI_CONTAINERID")?, env("CNI_IFNAME")?);
    let field = |name: &str| {
        string_field(config, name)
            .ok_or_else(|| Failure::new(7, format!("the configuration has no \"{name}\" string (without escapes)")))
    };
    let path = PathBuf::from(field("database")?);
    match command.as_str() {
        "ADD" => {
            let subnet = field("subnet")?;
            let range = Range::parse(subnet)?;
            let address = Database::open(&path)?.add(subnet, &range, &container, &ifname)?;
            Ok(Some(format!("{}/{}", Ipv4Addr::from(address), range.prefix)))
        }
        "DEL" => Database::open(&path)?.del(&container, &ifname).map(|()| None),
        other => Err(Failure::new(4, format!("CNI_COMMAND {other}: this program does ADD and DEL only"))),
    }
}

/// The addresses a subnet hands out: from the one after the gateway (the
/// first address) to the one before the broadcast address.
struct Range {
    prefix: u32,
    first: u32,
    last: u32,
}

impl Range {
    fn parse(subnet: &str) -> Result<Range, Failure> {
        let invalid = || Failure::new(7, format!("subnet {subnet}: not an IPv4 subnet of at least 4 addresses"));
        let (address, prefix) = subnet.split_once('/').ok_or_else(invalid)?;
        let address: Ipv4Addr = address.parse().map_err(|_| invalid())?;
        let prefix: u32 = prefix.parse().map_err(|_| invalid())?;
        if prefix > 30 {
            return Err(invalid());
        }
        let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        let network = u32::from(address) & mask;
        Ok(Range { prefix, first: network + 2, last: (network | !mask) - 1 })
    }
}

fn key(address: u32) -> [u8; 16] {
    Ipv4Addr::from(address).to_ipv6_mapped().octets()
}

fn address_of(key: &[u8]) -> Result<u32, Failure> {
    match <[u8; 16]>::try_from(key) {
        Ok(octets) => match std::net::Ipv6Addr::from(octets).to_ipv4_mapped() {
            Some(v4) => Ok(u32::from(v4)),
            None => Err(Failure::new(5, "database: a key that is no IPv4 address")),
        },
        Err(_) => Err(Failure::new(5, "database: a key that is not 16 bytes")),
    }
}

struct Database {
    conn: Connection,
    lock: File,
    path: PathBuf,
}

/// The writers' lock, held until dropped.
struct Held<'a>(&'a File);

impl Held<'_> {
    fn take(lock: &File) -> Result<Held<'_>, Failure> {
        lock.lock_exclusive().map_err(|e| io_failure("locking the database", e))?;
        Ok(Held(lock))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // If unlocking fails the lock still goes when the file is closed.
        let _ = FileExt::unlock(self.0);
    }
}

impl Database {
    fn open(path: &Path) -> Result<Database, Failure> {
        let fresh = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        shared::store::use_program_allocator();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(db)?;
        // As the suite: the WAL outlives each process (SQLite would
        // checkpoint and delete it at the last close), and commits are made
        // durable by the one sync below.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(db)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(db)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(db)?;
        conn.wal_hook(Some(|_: &rusqlite::hooks::Wal, frames: std::ffi::c_int| {
            WAL_FRAMES.set(frames);
            Ok(())
        }));
        let lock_path = sibling(path, ".lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io_failure(&format!("lock file {}", lock_path.display()), e))?;
        let database = Database { conn, lock, path: path.to_path_buf() };
        if fresh {
            let _held = Held::take(&database.lock)?;
            let mode: String =
                database.conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).map_err(db)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Failure::new(5, format!("database: journal mode {mode}, not WAL")));
            }
            database.conn.execute_batch(SCHEMA).map_err(db)?;
            database.sync()?;
        }
        Ok(database)
    }

    /// The attachment's address: the one it holds, or the next free one
    /// after the cursor, leased to it.
    fn add(mut self, subnet: &str, range: &Range, container: &str, ifname: &str) -> Result<u32, Failure> {
        let held = Held::take(&self.lock)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        let leased: Option<Vec<u8>> = tx
            .query_row(
                "SELECT key FROM leases WHERE container_id = ?1 AND ifname = ?2",
                params![container, ifname],
                |row| row.get(0),
            )
            .optional()
            .map_err(db)?;
        if let Some(key) = leased {
            return address_of(&key);
        }
        let cursor: Option<Vec<u8>> = tx
            .query_row("SELECT last FROM cursors WHERE subnet = ?1", [subnet], |row| row.get(0))
            .optional()
            .map_err(db)?;
        let after = cursor.as_deref().map(address_of).transpose()?;
        let address = next_free(&tx, range, after)?;
        tx.execute(
            "INSERT INTO leases (key, container_id, ifname) VALUES (?1, ?2, ?3)",
            params![key(address), container, ifname],
        )
        .map_err(db)?;
        tx.execute("REPLACE INTO cursors (subnet, last) VALUES (?1, ?2)", params![subnet, key(address)]).map_err(db)?;
        tx.commit().map_err(db)?;
        let restarted = restart_large_wal(&self.conn);
        drop(held);
        if !restarted {
            self.sync()?;
        }
        Ok(address)
    }

    /// Releases the attachment's lease, if it has one.
    fn del(mut self, container: &str, ifname: &str) -> Result<(), Failure> {
        let held = Held::take(&self.lock)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        let deleted = tx
            .execute("DELETE FROM leases WHERE container_id = ?1 AND ifname = ?2", params![container, ifname])
            .map_err(db)?;
        tx.commit().map_err(db)?;
        let restarted = restart_large_wal(&self.conn);
        drop(held);
        if deleted > 0 && !restarted {
            self.sync()?;
        }
        Ok(())
    }

    /// What was committed reaches the disk: one fdatasync of the WAL, where
    /// the commits are (SQLite syncs what a checkpoint copies itself).
    fn sync(&self) -> Result<(), Failure> {
        let wal = sibling(&self.path, "-wal");
        let failed = |e| io_failure(&format!("fdatasync of {}", wal.display()), e);
        File::open(&wal).and_then(|file| file.sync_data()).map_err(failed)
    }
}

/// The first address after `after` (or from the range's start) that no
/// lease holds, going round the range once.
fn next_free(tx: &Transaction, range: &Range, after: Option<u32>) -> Result<u32, Failure> {
    let mut taken = tx.prepare("SELECT 1 FROM leases WHERE key = ?1").map_err(db)?;
    let mut candidate = match after {
        Some(a) if a >= range.first && a < range.last => a + 1,
        _ => range.first,
    };
    for _ in range.first..=range.last {
        if !taken.exists([key(candidate)]).map_err(db)? {
            return Ok(candidate);
        }
        candidate = if candidate == range.last { range.first } else { candidate + 1 };
    }
    Err(Failure::new(100, "no free address in the subnet"))
}

/// The suite's checkpoint policy: past WAL_CHECKPOINT_FRAMES, a RESTART
/// checkpoint (which syncs every commit into the database file: the call's
/// own sync is then not needed) and a commit that changes nothing, which
/// starts the WAL again at its beginning. Best effort: the transaction has
/// committed. Says whether the checkpoint completed.
fn restart_large_wal(conn: &Connection) -> bool {
    if WAL_FRAMES.replace(0) <= WAL_CHECKPOINT_FRAMES {
        return false;
    }
    let busy: rusqlite::Result<i64> = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| row.get(0));
    if busy.ok() != Some(0) {
        return false;
    }
    let _ = conn
        .pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .and_then(|()| conn.pragma_update(None, "user_version", 0));
    true
}

/// `<path><suffix>`, as SQLite names its -wal file.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The value of the first `"name": "…"` in the JSON text, if it is a string
/// without escapes.
fn string_field<'a>(json: &'a str, name: &str) -> Option<&'a str> {
    let quoted = format!("\"{name}\"");
    let mut rest = json;
    while let Some(at) = rest.find(&quoted) {
        rest = &rest[at + quoted.len()..];
        if let Some(value) = rest.trim_start().strip_prefix(':') {
            let value = value.trim_start().strip_prefix('"')?;
            let text = &value[..value.find('"')?];
            return (!text.contains('\\')).then_some(text);
        }
    }
    None
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_found_as_a_plugin_reads_them() {
        let config = r#"{"cniVersion":"1.0.0","ipam":{"delegates":["database"],"database" : "/var/lib/x.sqlite","pools":[{"ranges":[{"subnet":"10.20.0.0/16"}]}]}}"#;
        assert_eq!(string_field(config, "database"), Some("/var/lib/x.sqlite"));
        assert_eq!(string_field(config, "subnet"), Some("10.20.0.0/16"));
        assert_eq!(string_field(r#"{"database":"a\"b"}"#, "database"), None);
        assert_eq!(string_field(r#"{"database":3}"#, "database"), None);
        let range = Range::parse("10.20.0.0/16").ok().map(|r| (r.prefix, r.first, r.last));
        assert_eq!(
            range,
            Some((16, u32::from(Ipv4Addr::new(10, 20, 0, 2)), u32::from(Ipv4Addr::new(10, 20, 255, 254))))
        );
        assert!(Range::parse("10.20.0.0/31").is_err());
        assert_eq!(address_of(&key(0x0a14_0002)).ok(), Some(0x0a14_0002));
        assert_eq!(json_string("a\"b\\\n"), r#""a\"b\\\u000a""#);
    }
}

/// The suite's program's allocator (shared::heap).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: shared::heap::Heap = shared::heap::Heap;
