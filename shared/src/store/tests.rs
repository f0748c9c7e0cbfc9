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
fn a_relative_path_is_error_7_naming_the_field() {
    let e = AllocationStore::open(Path::new("ipam.db"), DEFAULT_LOCK_TIMEOUT).err().unwrap();
    assert_eq!(e.code, 7);
    assert!(e.msg.contains("ipam.database"), "{}", e.msg);
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
        let wal = fs::metadata(dir.path().join("ipam.db-wal")).unwrap().len();
        assert!(wal <= 2 * WAL_CHECKPOINT_BYTES, "after {i} writes the WAL is {wal} bytes");
    }
    let mut store = AllocationStore::open(&path, DEFAULT_LOCK_TIMEOUT).unwrap();
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.255.255"))).unwrap(), 120);
}
