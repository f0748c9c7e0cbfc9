//! Opening, file modes, schema versions, transactions and the lock.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use fs2::FileExt;

use super::testing::{ip, owner, temp_store};
use super::*;

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn creates_missing_directories_0700_and_files_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("var/lib/ipam.db");
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    assert_eq!(store.path(), path);
    assert_eq!(mode(&dir.path().join("var")), 0o700);
    assert_eq!(mode(&dir.path().join("var/lib")), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("var/lib/ipam.db.lock")), 0o600);
    assert_eq!(mode(&dir.path().join("var/lib/ipam.db-wal")), 0o600);
}

#[test]
fn a_relative_path_is_refused_naming_it() {
    // The configuration refuses one first (error 7); the store never guesses a directory.
    let e = AllocationStore::open(Path::new("ipam.db"), DEFAULT_LOCK_TIMEOUT).err().unwrap();
    assert_eq!(e.code, Code::DatabaseUnusable);
    assert!(e.msg.contains("ipam.db is unusable: not an absolute path"), "{}", e.msg);
}

#[test]
fn the_database_is_wal_versioned_and_keeps_its_data() {
    let (dir, mut store) = temp_store();
    let path = dir.path().join("ipam.db");
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    drop(store);

    let started = Instant::now();
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    println!("reopening a current database took {:?}", started.elapsed());
    assert!(store.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap().is_some());

    let shell = rusqlite::Connection::open(&path).unwrap();
    let journal: String = shell.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
    assert_eq!(journal, "wal");
    let version: i64 = shell.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // What an administrator sees with the sqlite3 shell.
    let row: (String, String, String) = shell
        .query_row("SELECT address, network, container_id FROM leases", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    assert_eq!(row, ("10.0.0.1".into(), "n".into(), "c".into()));
}

#[test]
fn a_newer_schema_is_error_103_naming_both_versions() {
    let (dir, store) = temp_store();
    drop(store);
    let path = dir.path().join("ipam.db");
    rusqlite::Connection::open(&path).unwrap().pragma_update(None, "user_version", 99).unwrap();
    let e = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).err().unwrap();
    assert_eq!(e.code, 103);
    assert!(e.msg.contains("99") && e.msg.contains(&format!("version {SCHEMA_VERSION}")), "{}", e.msg);
    assert!(e.msg.contains(&path.display().to_string()), "{}", e.msg);
}

#[test]
fn a_file_that_is_not_a_database_is_error_103_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    fs::write(&path, "this is not a database\n".repeat(100)).unwrap();
    let e = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).err().unwrap();
    assert_eq!(e.code, 103);
    assert!(e.msg.contains(&path.display().to_string()) && e.msg.contains("not a database"), "{}", e.msg);
}

#[test]
fn a_failed_write_rolls_back_and_a_read_cannot_write() {
    let (_dir, mut store) = temp_store();
    let a = owner("n", "c", "eth0");
    let e = store
        .write(|tx| {
            tx.insert_lease(ip("10.0.0.1"), "p", &a)?;
            Err::<(), _>(CniError::new(Code::NoFreeAddress, "no"))
        })
        .unwrap_err();
    assert_eq!(e.code, 100);
    assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap(), None);

    let e = store.read(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &a)).unwrap_err();
    assert_eq!(e.code, 999);
    assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap(), None);
}

#[test]
fn a_held_lock_is_error_11_after_the_timeout_then_released_writes_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    let mut store = AllocationStore::open(&path, Duration::from_millis(200)).unwrap();
    // flock locks are per open file description: this conflicts with the store.
    let holder = File::open(dir.path().join("ipam.db.lock")).unwrap();
    holder.lock_exclusive().unwrap();

    let started = Instant::now();
    let e = store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap_err();
    let waited = started.elapsed();
    assert_eq!(e.code, 11);
    assert!(e.msg.contains("stayed locked for 200ms") && e.msg.contains(&path.display().to_string()), "{}", e.msg);
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(store.probe_writable().unwrap_err().code, 11);
    // Readers take no lock.
    assert_eq!(store.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap(), None);

    FileExt::unlock(&holder).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    store.probe_writable().unwrap();
    // The lock is released after each transaction: another handle can write.
    let mut other = AllocationStore::open(&path, Duration::from_millis(200)).unwrap();
    other.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c", "eth0"))).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.3"), "p", &owner("n", "c", "eth0"))).unwrap();
}

#[test]
fn a_waiting_writer_gets_the_lock_as_soon_as_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    let mut store = AllocationStore::open(&path, Duration::from_secs(10)).unwrap();
    let holder = File::open(dir.path().join("ipam.db.lock")).unwrap();
    holder.lock_exclusive().unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let started = Instant::now();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    let waited = started.elapsed();
    releaser.join().unwrap();
    println!("writer waited {waited:?} for a lock released after 300ms");
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(5), "{waited:?}");
}

#[test]
fn concurrent_handles_create_the_schema_once_and_serialize_their_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new/ipam.db");
    let writers: Vec<_> = (0..4u8)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
                for i in 0..25u8 {
                    let a = owner("n", &format!("c{w}-{i}"), "eth0");
                    store
                        .write(|tx| {
                            let free = tx.first_unleased(ip("10.0.0.1"), ip("10.0.0.254"))?.unwrap();
                            tx.insert_lease(free, "p", &a)
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    let leases = store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap();
    assert_eq!(leases.len(), 100);
    assert_eq!(store.read(|tx| tx.first_unleased(ip("10.0.0.1"), ip("10.0.0.254"))).unwrap(), Some(ip("10.0.0.101")));
}

#[test]
fn the_wal_persists_across_connections() {
    let (dir, mut store) = temp_store();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    drop(store);
    let wal = dir.path().join("ipam.db-wal");
    assert!(fs::metadata(&wal).unwrap().len() >= 32, "closing keeps the WAL instead of checkpointing it away");

    let mut store = AllocationStore::open(&dir.path().join("ipam.db"), DEFAULT_LOCK_TIMEOUT).unwrap();
    assert!(store.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap().is_some(), "recovered from the WAL");
    store.checkpoint().unwrap();
    assert_eq!(fs::metadata(&wal).unwrap().len(), 0);
    drop(store);

    // Writing after the truncation starts the WAL again.
    let mut store = AllocationStore::open(&dir.path().join("ipam.db"), DEFAULT_LOCK_TIMEOUT).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c2", "eth0"))).unwrap();
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.0.255"))).unwrap(), 2);
}

#[test]
fn the_wal_stays_bounded_when_every_write_is_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    for i in 0..120u32 {
        // A fresh connection per write, as each plugin process opens its own.
        let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
        let address = std::net::IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8 + 1]);
        store.write(|tx| tx.insert_lease(address, "p", &owner("n", &format!("c{i}"), "eth0"))).unwrap();
        // What the next process reads: the frames this one found, and its own.
        let frames = WAL_FRAMES.get();
        assert!(frames <= WAL_CHECKPOINT_FRAMES + 8, "after {i} writes the WAL holds {frames} frames");
        let wal = fs::metadata(dir.path().join("ipam.db-wal")).unwrap().len();
        assert!(wal <= WAL_SIZE_LIMIT as u64, "after {i} writes the WAL is {wal} bytes");
    }
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.255.255"))).unwrap(), 120);
}

#[test]
fn a_write_that_restarts_the_wal_leaves_every_commit_synced_in_the_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    let mut store = AllocationStore::open_with(&path, DEFAULT_LOCK_TIMEOUT.into(), Durability::AtSync).unwrap();
    let mut written = 0;
    while store.unsynced || written == 0 {
        assert!(written < 200, "{written} writes and the WAL was never restarted");
        let address = std::net::IpAddr::from([10, 0, 0, written as u8 + 1]);
        store.write(|tx| tx.insert_lease(address, "p", &owner("n", &format!("c{written}"), "eth0"))).unwrap();
        written += 1;
    }
    assert_eq!(WAL_FRAMES.get(), 1, "the WAL starts again with the restart's commit");
    let wal = fs::metadata(sibling(&path, "-wal")).unwrap().len();
    assert!(wal > WAL_CHECKPOINT_FRAMES as u64 * 4096, "the WAL kept its size ({wal} bytes), to be written over");
    // Without the WAL: what the checkpoint synced into the file.
    let alone = dir.path().join("alone.db");
    fs::copy(&path, &alone).unwrap();
    let shell = rusqlite::Connection::open(&alone).unwrap();
    let leases: i64 = shell.query_row("SELECT count(*) FROM leases", [], |r| r.get(0)).unwrap();
    assert_eq!(leases, written);
}

/// A database with a `leases` table of its own, as another program keeps it.
fn foreign_database(path: &Path) {
    let other = rusqlite::Connection::open(path).unwrap();
    other
        .execute_batch("CREATE TABLE leases (mac TEXT, ip TEXT); INSERT INTO leases VALUES ('aa', '10.9.0.1');")
        .unwrap();
}

#[test]
fn someone_elses_sqlite_file_is_error_103_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dhcp.db");
    foreign_database(&path);
    let before = fs::read(&path).unwrap();
    let e = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).err().unwrap();
    assert_eq!(e.code, 103);
    assert!(e.msg.contains("another application") && e.msg.contains("leases"), "{}", e.msg);
    assert_eq!(fs::read(&path).unwrap(), before, "the foreign file was modified");
    let shell = rusqlite::Connection::open(&path).unwrap();
    let journal: String = shell.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
    assert_eq!(journal, "delete", "switched to WAL");
    let tables: i64 = shell.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
    assert_eq!(tables, 1, "tables were added");

    // Another application's mark, even on an empty schema, is refused too.
    let marked = dir.path().join("marked.db");
    rusqlite::Connection::open(&marked).unwrap().pragma_update(None, "application_id", 42).unwrap();
    assert_eq!(AllocationStore::open(&marked, DEFAULT_LOCK_TIMEOUT).err().unwrap().code, 103);
}

#[test]
fn the_suites_databases_carry_its_application_id() {
    let (dir, mut store) = temp_store();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    drop(store);
    let shell = rusqlite::Connection::open(dir.path().join("ipam.db")).unwrap();
    let id: i32 = shell.pragma_query_value(None, "application_id", |r| r.get(0)).unwrap();
    assert_eq!(id, APPLICATION_ID);
    // In the file's own header, not only in the WAL.
    let header = fs::read(dir.path().join("ipam.db")).unwrap();
    assert_eq!(i32::from_be_bytes(header[68..72].try_into().unwrap()), APPLICATION_ID);
}

#[test]
fn a_pre_existing_file_of_ours_becomes_0600_with_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    fs::write(&path, b"").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("ipam.db-wal")), 0o600);
    drop(store);
    // Widened by hand later: narrowed again at the next open.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(dir.path().join("ipam.db-wal"), fs::Permissions::from_mode(0o664)).unwrap();
    AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!((mode(&path), mode(&dir.path().join("ipam.db-wal"))), (0o600, 0o600));
}

#[test]
fn a_symlinked_database_path_uses_the_targets_lock() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real/ipam.db");
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    let link = dir.path().join("ipam.db");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let mut via_link = AllocationStore::open(&link, Duration::from_millis(200)).unwrap();
    assert!(target.is_file(), "the target was not created");
    assert!(!dir.path().join("ipam.db.lock").exists(), "a lock beside the link");
    let holder = File::open(dir.path().join("real/ipam.db.lock")).unwrap();
    holder.lock_exclusive().unwrap();
    let e = via_link.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap_err();
    assert_eq!(e.code, 11, "the link's writer did not wait for the target's lock: {e}");
}

#[test]
fn a_database_is_created_at_the_end_of_a_symlink_chain_and_the_links_stay() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("real")).unwrap();
    // ipam.db -> chain.db -> real/ipam.db, which does not exist yet.
    let link = dir.path().join("ipam.db");
    std::os::unix::fs::symlink("chain.db", &link).unwrap();
    std::os::unix::fs::symlink(dir.path().join("real/ipam.db"), dir.path().join("chain.db")).unwrap();
    let mut via_link = AllocationStore::open(&link, DEFAULT_LOCK_TIMEOUT).unwrap();
    via_link.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    for name in ["ipam.db", "chain.db"] {
        assert!(fs::symlink_metadata(dir.path().join(name)).unwrap().file_type().is_symlink(), "{name} was replaced");
    }
    let target = dir.path().join("real/ipam.db");
    assert_eq!(mode(&target), 0o600);
    let mut at_target = AllocationStore::open(&target, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert!(at_target.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap().is_some());

    // A link to an empty file: the file is no database yet, and is replaced.
    let empty = dir.path().join("real/empty.db");
    fs::write(&empty, b"").unwrap();
    let link = dir.path().join("empty-link.db");
    std::os::unix::fs::symlink(&empty, &link).unwrap();
    let mut via_link = AllocationStore::open(&link, DEFAULT_LOCK_TIMEOUT).unwrap();
    via_link.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c", "eth0"))).unwrap();
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(dir.path().join("real/empty.db.lock").exists(), "the lock is the target's");
    let mut at_target = AllocationStore::open(&empty, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert!(at_target.read(|tx| tx.holder(ip("10.0.0.2"))).unwrap().is_some());
}

#[test]
fn what_a_process_killed_while_creating_left_aside_is_removed_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let leftovers = ["ipam.db.new-4000000", "ipam.db.new-4000000-wal", "ipam.db.new-12-shm", "ipam.db.new-12-journal"];
    let others = ["ipam.db.newer", "ipam.db.new-x", "ipam.db.new-12.bak", "other.db.new-12"];
    for name in leftovers.iter().chain(&others) {
        fs::write(dir.path().join(name), b"half-made").unwrap();
    }
    let mut store = AllocationStore::open(&dir.path().join("ipam.db"), DEFAULT_LOCK_TIMEOUT).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    for name in leftovers {
        assert!(!dir.path().join(name).exists(), "{name} is still there");
    }
    for name in others {
        assert_eq!(fs::read(dir.path().join(name)).unwrap(), b"half-made", "{name} was touched");
    }
}

#[test]
fn a_wal_or_a_rollback_journal_left_beside_no_database_is_not_played_into_the_new_one() {
    // A database deleted by hand, its WAL left behind with commits in it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    for i in 1..=3u8 {
        store
            .write(|tx| tx.insert_lease(ip(&format!("10.0.0.{i}")), "p", &owner("n", &format!("c{i}"), "eth0")))
            .unwrap();
    }
    drop(store);
    assert!(fs::metadata(sibling(&path, "-wal")).unwrap().len() > 0);
    fs::remove_file(&path).unwrap();
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.0.255"))).unwrap(), 0);
    drop(store);

    // An empty file beside the rollback journal of a transaction that never
    // ended (an older build, killed creating the database in place).
    let donor = dir.path().join("donor.db");
    let conn = rusqlite::Connection::open(&donor).unwrap();
    conn.execute_batch("PRAGMA synchronous=OFF; CREATE TABLE t(x); INSERT INTO t VALUES (zeroblob(20000));").unwrap();
    conn.execute_batch("BEGIN; UPDATE t SET x = zeroblob(30000);").unwrap();
    let path = dir.path().join("fresh.db");
    fs::copy(sibling(&donor, "-journal"), sibling(&path, "-journal")).unwrap();
    drop(conn);
    fs::write(&path, b"").unwrap();
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    drop(store);
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.0.255"))).unwrap(), 1);
    let shell = rusqlite::Connection::open(&path).unwrap();
    let integrity: String = shell.pragma_query_value(None, "integrity_check", |r| r.get(0)).unwrap();
    assert_eq!(integrity, "ok");
}

#[test]
fn a_version_1_database_is_migrated_keeping_leases_and_indexing_its_pools() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    {
        // Exactly what version 1 builds wrote: WAL, no application id.
        let old = rusqlite::Connection::open(&path).unwrap();
        old.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)).unwrap();
        old.execute_batch(schema_v1_for_tests()).unwrap();
        old.execute_batch(
            "INSERT INTO pools (network, name, family, subnets, definition) VALUES ('n', 'a', 'ipv4', '10.5.0.0/24', '{}');
             INSERT INTO leases VALUES (x'00000000000000000000ffff0a050002', '10.5.0.2', 'a', 'n', 'c', 'eth0', 1);
             INSERT INTO leased_runs VALUES (x'00000000000000000000ffff0a050002', x'00000000000000000000ffff0a050002');
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!(store.read(|tx| tx.holder(ip("10.5.0.2"))).unwrap().unwrap().owner, owner("n", "c", "eth0"));
    assert!(store.read(|tx| tx.integrity_problems()).unwrap().is_empty());
    // The migrated pool's subnet is indexed: an overlapping pool meets its lease.
    let e = store.write(|tx| tx.register_pool("n", "b", &["10.5.0.0/16".parse().unwrap()], &serde_json::json!({})));
    assert!(e.unwrap().unwrap_err().to_string().contains("holds 1 lease"));
    drop(store);
    let shell = rusqlite::Connection::open(&path).unwrap();
    let (id, version): (i32, i64) = (
        shell.pragma_query_value(None, "application_id", |r| r.get(0)).unwrap(),
        shell.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap(),
    );
    assert_eq!((id, version), (APPLICATION_ID, SCHEMA_VERSION));
}

/// Version 1's tables, as released.
fn schema_v1_for_tests() -> &'static str {
    "CREATE TABLE pools (network TEXT NOT NULL, name TEXT NOT NULL, family TEXT NOT NULL, subnets TEXT NOT NULL,
         definition TEXT NOT NULL, cursor TEXT, PRIMARY KEY (network, name)) WITHOUT ROWID;
     CREATE TABLE leases (key BLOB PRIMARY KEY NOT NULL, address TEXT NOT NULL, pool TEXT NOT NULL,
         network TEXT NOT NULL, container_id TEXT NOT NULL, ifname TEXT NOT NULL, since INTEGER NOT NULL) WITHOUT ROWID;
     CREATE INDEX leases_by_owner ON leases (network, container_id, ifname);
     CREATE TABLE leased_runs (first BLOB PRIMARY KEY NOT NULL, last BLOB NOT NULL) WITHOUT ROWID;"
}

/// What versions 2 to 4 added to version 1's tables, as released.
fn schema_v2_to_v4_for_tests() -> &'static str {
    "ALTER TABLE leases ADD COLUMN added_by TEXT;
     CREATE INDEX leases_by_pool ON leases (network, pool);
     CREATE TABLE pool_subnets (first BLOB NOT NULL, network TEXT NOT NULL, name TEXT NOT NULL, last BLOB NOT NULL,
         PRIMARY KEY (first, network, name)) WITHOUT ROWID;
     CREATE INDEX pool_subnets_by_pool ON pool_subnets (network, name);
     CREATE TABLE cluster_blocks (network TEXT NOT NULL, pool TEXT NOT NULL, block TEXT NOT NULL, state TEXT NOT NULL,
         revision INTEGER NOT NULL, confirmed INTEGER NOT NULL, taken TEXT NOT NULL, since INTEGER NOT NULL,
         PRIMARY KEY (network, pool, block)) WITHOUT ROWID;
     CREATE TABLE cluster_records (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL, network TEXT NOT NULL,
         pool TEXT NOT NULL, address TEXT NOT NULL, kind TEXT NOT NULL, container_id TEXT NOT NULL,
         ifname TEXT NOT NULL, added_by TEXT, state TEXT NOT NULL) WITHOUT ROWID;
     CREATE INDEX cluster_records_by_owner ON cluster_records (network, container_id, ifname);
     CREATE TABLE cluster_notes (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;
     ALTER TABLE cluster_blocks ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;"
}

#[test]
fn a_version_4_database_keeps_its_leases_live_and_a_sticky_stack_allocates_around_them() {
    use crate::pool::Pool;
    use crate::suite_delegate;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    let v4_key = |last: u8| format!("x'00000000000000000000ffff0a0500{last:02x}'");
    {
        // What a version 4 build left: leases on 10.5.0.2, .3 and .5 of pool a.
        let old = rusqlite::Connection::open(&path).unwrap();
        old.pragma_update(None, "application_id", APPLICATION_ID).unwrap();
        old.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)).unwrap();
        old.execute_batch(schema_v1_for_tests()).unwrap();
        old.execute_batch(schema_v2_to_v4_for_tests()).unwrap();
        let (k2, k3, k5) = (v4_key(2), v4_key(3), v4_key(5));
        old.execute_batch(&format!(
            "INSERT INTO pools (network, name, family, subnets, definition, cursor)
                 VALUES ('n', 'a', 'ipv4', '10.5.0.0/24', '{{}}', '10.5.0.5');
             INSERT INTO pool_subnets VALUES (x'00000000000000000000ffff0a050000', 'n', 'a',
                 x'00000000000000000000ffff0a0500ff');
             INSERT INTO leases VALUES ({k2}, '10.5.0.2', 'a', 'n', 'c1', 'eth0', 1, 'add-1');
             INSERT INTO leases VALUES ({k3}, '10.5.0.3', 'a', 'n', 'c2', 'eth0', 2, 'add-2');
             INSERT INTO leases VALUES ({k5}, '10.5.0.5', 'a', 'n', 'c3', 'eth0', 3, NULL);
             INSERT INTO leased_runs VALUES ({k2}, {k3});
             INSERT INTO leased_runs VALUES ({k5}, {k5});
             PRAGMA user_version = 4;"
        ))
        .unwrap();
    }
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    let leases = store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap();
    let seen: Vec<(std::net::IpAddr, &str, Option<&str>, Option<i64>)> = leases
        .iter()
        .map(|l| (l.address, l.owner.container_id.as_str(), l.identity.as_deref(), l.held_until))
        .collect();
    assert_eq!(
        seen,
        [(ip("10.5.0.2"), "c1", None, None), (ip("10.5.0.3"), "c2", None, None), (ip("10.5.0.5"), "c3", None, None)],
        "the leases are live leases of their attachments, of no identity"
    );
    assert!(store.read(|tx| tx.integrity_problems()).unwrap().is_empty());
    {
        let shell = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = shell.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let null_columns: i64 = shell
            .query_row("SELECT count(*) FROM leases WHERE identity IS NULL AND held_until IS NULL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(null_columns, 3);
        let sharers: i64 = shell.query_row("SELECT count(*) FROM lease_sharers", [], |r| r.get(0)).unwrap();
        assert_eq!(sharers, 0);
    }

    // A sticky ADD, as the allocators' write transaction makes it: expired
    // holds dropped first (the old leases are not holds), the pool's next
    // free address after its cursor, tied to the identity.
    let pool =
        Pool::from_json(&serde_json::json!({"name": "a", "ranges": [{"subnet": "10.5.0.0/24"}]}), "pool").unwrap();
    let pod = owner("n", "c4", "eth0");
    let allocate = |store: &mut AllocationStore, who: &crate::args::Attachment, identity: Option<&str>| {
        store
            .write(|tx| {
                suite_delegate::begin_allocating(tx)?;
                let cursor = suite_delegate::register(tx, "n", &pool)?;
                let address = pool.find_free(cursor, tx)?.unwrap();
                tx.insert_lease(address, &pool.name, who)?;
                tx.set_cursor("n", &pool.name, address)?;
                let identity =
                    identity.map(|name| suite_delegate::StickyIdentity { name: name.into(), share_live: false });
                suite_delegate::bind_identity(tx, who, identity.as_ref())?;
                Ok(address)
            })
            .unwrap()
    };
    assert_eq!(
        allocate(&mut store, &pod, Some("prod/db-0")),
        ip("10.5.0.6"),
        "the first free address after the cursor"
    );
    assert_eq!(store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap().len(), 4, "the old leases stay");
    // Released, the new lease is held for its identity; an old one is freed.
    store.write(|tx| tx.release(&pod, Some(Duration::from_secs(600)))).unwrap();
    store.write(|tx| tx.release(&owner("n", "c1", "eth0"), Some(Duration::from_secs(600)))).unwrap();
    assert!(store.read(|tx| tx.holder(ip("10.5.0.6"))).unwrap().unwrap().is_hold());
    assert_eq!(store.read(|tx| tx.holder(ip("10.5.0.2"))).unwrap(), None);
    // The next ADDs go around the leases and the hold, wrapping to the freed one.
    store.write(|tx| tx.set_cursor("n", "a", ip("10.5.0.254"))).unwrap();
    assert_eq!(allocate(&mut store, &owner("n", "c5", "eth0"), None), ip("10.5.0.2"));
    assert_eq!(allocate(&mut store, &owner("n", "c6", "eth0"), None), ip("10.5.0.4"));
    assert_eq!(allocate(&mut store, &owner("n", "c7", "eth0"), None), ip("10.5.0.7"));
    assert!(store.read(|tx| tx.integrity_problems()).unwrap().is_empty());
}

#[test]
fn a_rollback_releases_only_what_its_add_took() {
    let (_dir, mut store) = temp_store();
    let c1 = owner("n", "c1", "eth0");
    store.set_add_id(Some("first".into()));
    store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &c1)).unwrap();
    store.set_add_id(Some("repeat".into()));
    store.write(|tx| tx.insert_lease(ip("fd00::2"), "p6", &c1)).unwrap();
    let released = store.write(|tx| tx.release_added_by(&c1, "repeat")).unwrap();
    assert_eq!(released.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("fd00::2")]);
    assert!(store.read(|tx| tx.holder(ip("10.0.0.2"))).unwrap().is_some(), "the earlier ADD's lease went");
    assert!(store.write(|tx| tx.release_added_by(&owner("n", "c2", "eth0"), "first")).unwrap().is_empty());
}

#[test]
fn lock_waits_share_the_calls_budget_and_its_deadline_is_error_105() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ipam.db");
    drop(AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap());
    let holder = File::open(dir.path().join("ipam.db.lock")).unwrap();
    holder.lock_exclusive().unwrap();
    let write = |wait: LockWait| {
        let mut store = AllocationStore::open(&path, wait).unwrap();
        let started = Instant::now();
        let e = store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap_err();
        (e, started.elapsed())
    };

    // A spent shared budget: no wait at all, error 11.
    let spent = LockWait { timeout: Duration::from_secs(10), shared_until: Some(Instant::now()), call_deadline: None };
    let (e, waited) = write(spent);
    assert_eq!(e.code, 11, "{e}");
    assert!(waited < Duration::from_millis(150), "{waited:?}");

    // The call's deadline before the lock timeout: 105, saying it was the lock.
    let deadline = LockWait {
        timeout: Duration::from_secs(10),
        shared_until: Some(Instant::now() + Duration::from_secs(10)),
        call_deadline: Some(Instant::now() + Duration::from_millis(300)),
    };
    let (e, waited) = write(deadline);
    assert_eq!(e.code, 105, "{e}");
    assert!(e.msg.contains("ipam.timeout") && e.msg.contains("waiting for the lock"), "{}", e.msg);
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(3), "{waited:?}");
}

#[test]
fn every_write_takes_a_ticket_in_the_lock_queue() {
    let (dir, mut store) = temp_store();
    let counter = || {
        let bytes = fs::read(dir.path().join("ipam.db.lock-queue")).unwrap();
        u64::from_le_bytes(bytes[..8].try_into().unwrap())
    };
    let before = counter();
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
    store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c", "eth0"))).unwrap();
    assert_eq!(counter(), before + 2, "one ticket per write: the queue is in use, not bypassed");
    // A turn is given back: a third write is not kept waiting for itself.
    store.write(|tx| tx.insert_lease(ip("10.0.0.3"), "p", &owner("n", "c", "eth0"))).unwrap();
}

/// A turn is one process's at a time, beside the database's lock (whose
/// writers never wait for it), given back when dropped; a taker that waited
/// its bound gets none and goes on.
#[test]
fn a_turn_is_one_holders_and_a_waiter_past_its_bound_goes_on_without() {
    let (dir, mut store) = temp_store();
    let held = store.take_turn("block-writes", Duration::from_secs(1)).unwrap().expect("a free turn");
    assert!(dir.path().join("ipam.db.block-writes.lock").exists());
    // Another process's wait for it (flock: another open file description).
    let other = File::options().write(true).open(dir.path().join("ipam.db.block-writes.lock")).unwrap();
    assert!(other.try_lock_exclusive().is_err(), "the turn is held");
    let started = Instant::now();
    assert!(store.take_turn("block-writes", Duration::from_millis(200)).unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_millis(200), "{:?}", started.elapsed());
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).expect("a write during a turn");
    drop(held);
    other.try_lock_exclusive().expect("given back when dropped");
    FileExt::unlock(&other).unwrap();
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let turn = store.take_turn("block-writes", Duration::from_secs(5)).unwrap();
        (turn.is_some(), started.elapsed())
    });
    other.lock_exclusive().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    FileExt::unlock(&other).unwrap();
    let (got, waited) = waiter.join().unwrap();
    assert!(got && waited < Duration::from_secs(3), "the waiter got the turn once it was given back ({waited:?})");
}

/// The sqlite3 shell of an administrator reading the database (the README's
/// way) while a process has it open, and the commits that process makes
/// after: SQLite's last connection to close checkpoints and deletes the
/// WAL, and it tells it is the last by the locks on the database file. A
/// descriptor of that file the process closed would have dropped them all
/// (POSIX locks are the process's), and its later commits gone into a WAL
/// no longer there: lost at its exit. Also after the process opened and
/// dropped a second store of the same file (an agent's request, a delegate
/// run).
#[test]
fn a_sqlite3_shell_closing_beside_an_open_store_loses_none_of_its_commits() {
    let (dir, mut store) = temp_store();
    let path = dir.path().join("ipam.db");
    store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c1", "eth0"))).unwrap();
    let mut second = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert!(second.read(|tx| tx.holder(ip("10.0.0.1"))).unwrap().is_some());
    drop(second);
    for args in [&["-readonly"][..], &[]] {
        let shell = std::process::Command::new("sqlite3")
            .args(args)
            .arg(&path)
            .arg("SELECT count(*) FROM leases")
            .output()
            .expect("the sqlite3 shell (Debian's sqlite3, which scripts/test-packages installs)");
        assert!(shell.status.success(), "sqlite3: {}", String::from_utf8_lossy(&shell.stderr));
        assert!(
            fs::metadata(dir.path().join("ipam.db-wal")).is_ok(),
            "sqlite3 {args:?} deleted the WAL under the open store"
        );
    }
    store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c2", "eth0"))).unwrap();
    drop(store);
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    for a in ["10.0.0.1", "10.0.0.2"] {
        assert!(store.read(|tx| tx.holder(ip(a))).unwrap().is_some(), "the lease of {a} was lost");
    }
}
