//! A new allocation database, made once at build time from
//! `src/store/current.sql` with this build's SQLite, so that a plugin
//! creating one writes these bytes instead of running the statements (see
//! `src/store/create.rs`): the file, in WAL mode, the schema and the marks
//! checkpointed into it; and its WAL, holding one more commit that changes
//! nothing, so that the first commit of a plugin appends to a WAL that has
//! a header (SQLite writes and syncs a new WAL's header, and its directory,
//! even at synchronous=NORMAL).

use std::path::PathBuf;

use rusqlite::config::DbConfig;
use rusqlite::Connection;

fn main() {
    println!("cargo:rerun-if-changed=src/store/current.sql");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let db = out.join("new-database.sqlite");
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut path = db.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    let conn = Connection::open(&db).expect("create the new database");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).expect("keep the WAL at close");
    // One connection: the WAL index in its memory, no -shm file.
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE").expect("locking_mode");
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).expect("WAL");
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "synchronous", "OFF").expect("synchronous");
    let schema = include_str!("src/store/current.sql");
    conn.execute_batch(&format!("BEGIN; {schema} COMMIT;")).expect("src/store/current.sql");
    let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0)).expect("checkpoint");
    assert_eq!(busy, 0, "the checkpoint of the new database did not complete");
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).expect("user_version");
    conn.pragma_update(None, "user_version", version).expect("the commit that changes nothing");
    conn.close().map_err(|(_, e)| e).expect("close");
    let wal = out.join("new-database.sqlite-wal");
    assert!(std::fs::metadata(&wal).expect("its WAL").len() > 32, "the WAL holds no commit");
}
