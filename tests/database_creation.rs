//! The first ADD on a fresh node creates the allocation database: built
//! aside and renamed into place (shared/src/store/create.rs). A kill -9 at
//! any step must leave either no database or a complete one, and the next
//! ADD must succeed; first ADDs at once, in both layouts, must all succeed
//! with distinct addresses.
//!
//! The kills come from inside: debug builds die by SIGKILL at the step of the
//! creation that `IPAM_TEST_KILL_AT` names. Release builds have no such
//! points, so this file runs against a debug build only (not with
//! `IPAM_TEST_BIN_DIR`).

mod stack;
mod support;

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;

use serde_json::{json, Value};
use stack::leases;
use support::{copies_dir, parallel, Outcome, Sandbox};

const DELEGATED: &str = "ipam-delegated";
const VERSION: &str = "1.1.0";
const NETWORK: &str = "creation-net";
const KILL_AT: &str = "IPAM_TEST_KILL_AT";
/// Every step of the creation at which a debug build can be killed, in order.
const STEPS: [&str; 7] = [
    "aside-created",
    "aside-written",
    "aside-synced",
    "wal-written",
    "wal-moved",
    "database-moved",
    "directory-synced",
];
/// How a process killed by SIGKILL ends, as the harness reports it.
const KILLED: i32 = 128 + 9;

fn config(db: &Path) -> Value {
    let pools = json!([{"name": "creation", "ranges": [{"subnet": "10.66.0.0/24"}]}]);
    stack::config(VERSION, NETWORK, "bridge", db, pools)
}

fn add(sb: &Sandbox, db: &Path, container: &str, extra: &[(&str, &str)]) -> Outcome {
    let mut env = vec![("CNI_CONTAINERID", container)];
    env.extend_from_slice(extra);
    sb.cni(DELEGATED, "ADD", &config(db), &env)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// What a database's own file holds (its -wal left out): read from a copy
/// of the file alone, so that what it says is the file's.
#[derive(Debug, PartialEq)]
struct FileAlone {
    application_id: i32,
    user_version: i64,
    integrity: String,
    /// `sqlite_master`: (type, name, sql), sorted.
    schema: Vec<(String, String, Option<String>)>,
}

fn file_alone(db: &Path, scratch: &Path) -> FileAlone {
    let _ = fs::remove_dir_all(scratch);
    fs::create_dir_all(scratch).unwrap();
    let copy = scratch.join("alone.sqlite");
    fs::copy(db, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let schema = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    FileAlone {
        application_id: conn.pragma_query_value(None, "application_id", |r| r.get(0)).unwrap(),
        user_version: conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap(),
        integrity: conn.pragma_query_value(None, "integrity_check", |r| r.get(0)).unwrap(),
        schema,
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// What a database created by an uninterrupted first ADD holds in its file.
fn reference(sb: &Sandbox) -> FileAlone {
    let db = sb.path().join("reference/allocations.sqlite");
    let out = add(sb, &db, "reference", &[]);
    assert_eq!(out.status, 0, "the reference ADD: {out:#?}");
    let complete = file_alone(&db, &sb.path().join("scratch"));
    assert_eq!(complete.application_id, shared::store::APPLICATION_ID);
    assert_eq!(complete.user_version, shared::store::SCHEMA_VERSION);
    assert_eq!(complete.integrity, "ok");
    assert!(complete.schema.iter().any(|(kind, name, _)| kind == "table" && name == "leases"), "{complete:?}");
    complete
}

#[test]
fn a_first_add_killed_at_each_step_of_creating_the_database_leaves_none_or_a_complete_one() {
    assert!(
        std::env::var_os(support::BIN_DIR_VAR).is_none_or(|d| d.is_empty()) && cfg!(debug_assertions),
        "the kill points exist in debug builds only: run this test without --release and without {}",
        support::BIN_DIR_VAR
    );
    let sb = Sandbox::new();
    let complete = reference(&sb);
    let scratch = sb.path().join("scratch");
    // A fresh node has no file at the path; an empty one (made by hand, or
    // by a build that created the file before its schema) is no database
    // either, and is replaced.
    for empty_file_before in [false, true] {
        for step in STEPS {
            let what = format!("killed at {step}{}", if empty_file_before { ", over an empty file" } else { "" });
            let dir = sb.path().join(format!("{step}-{empty_file_before}"));
            let db = dir.join("allocations.sqlite");
            if empty_file_before {
                fs::create_dir(&dir).unwrap();
                fs::write(&db, b"").unwrap();
                fs::set_permissions(&db, fs::Permissions::from_mode(0o644)).unwrap();
            }
            let out = add(&sb, &db, "killed", &[(KILL_AT, step)]);
            assert_eq!(out.status, KILLED, "{what}: the process was not killed there: {out:#?}");

            // No database, or a complete one in the file itself.
            match fs::symlink_metadata(&db) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Ok(meta) if meta.len() == 0 && empty_file_before => {}
                Ok(_) => assert_eq!(file_alone(&db, &scratch), complete, "{what}: the database at the path"),
                Err(e) => panic!("{what}: {e}"),
            }

            // The next ADD succeeds, with the pool's first address, in a
            // complete database of ours that nothing aside is left beside.
            let out = add(&sb, &db, "after", &[]);
            assert_eq!(out.status, 0, "{what}: the next ADD: {out:#?}");
            let ip = stack::ipv4_of(out.result());
            assert_eq!(ip, "10.66.0.2".parse::<IpAddr>().unwrap(), "{what}");
            assert_eq!(
                leases(&db).iter().map(|l| (l.address, l.container_id.as_str())).collect::<Vec<_>>(),
                [(ip, "after")]
            );
            assert_eq!(stack::integrity_check(&db), "ok", "{what}");
            assert_eq!(file_alone(&db, &scratch), complete, "{what}: the database after the next ADD");
            assert_eq!((mode(&db), mode(&dir.join("allocations.sqlite-wal"))), (0o600, 0o600), "{what}");
            let left: Vec<String> = names(&dir).into_iter().filter(|n| n.contains(".new-")).collect();
            assert!(left.is_empty(), "{what}: left aside: {left:?}");
        }
    }
}

/// First ADDs at once on fresh nodes, in the fast layout (one process per
/// call, synced once at its end) and the copies layout (a process per
/// delegate, each commit synced), half of the rounds through a symlink to a
/// database that does not exist yet.
#[test]
fn first_adds_at_once_on_a_fresh_node_all_succeed_with_distinct_addresses() {
    const ROUNDS: usize = 12;
    const AT_ONCE: usize = 6;
    let sb = Sandbox::new();
    let copies = copies_dir().join(DELEGATED);
    let copies_path = copies_dir().display().to_string();
    for round in 0..ROUNDS {
        let dir = sb.path().join(format!("round-{round}"));
        let target = dir.join("allocations.sqlite");
        let db: PathBuf = if round % 2 == 1 {
            fs::create_dir_all(&dir).unwrap();
            let link = sb.path().join(format!("link-{round}.sqlite"));
            std::os::unix::fs::symlink(&target, &link).unwrap();
            link
        } else {
            target.clone()
        };
        let config = config(&db);
        let gate = Barrier::new(AT_ONCE);
        let outcomes = parallel(AT_ONCE, AT_ONCE, |k| {
            let container = format!("first-{round}-{k}");
            let env = match k % 2 {
                0 => sb.env("ADD", &[("CNI_CONTAINERID", &container)]),
                _ => sb.env("ADD", &[("CNI_CONTAINERID", &container), ("CNI_PATH", &copies_path)]),
            };
            let exe = if k % 2 == 0 { DELEGATED.to_string() } else { copies.display().to_string() };
            gate.wait();
            sb.cni_env(&exe, &env, config.to_string().as_bytes())
        });
        let mut told = BTreeSet::new();
        for (k, out) in outcomes.iter().enumerate() {
            assert_eq!(out.status, 0, "round {round}, ADD {k}: {out:#?}");
            assert!(told.insert(stack::ipv4_of(out.result())), "round {round}: an address handed out twice");
        }
        let recorded: BTreeSet<IpAddr> = leases(&target).iter().map(|l| l.address).collect();
        assert_eq!(recorded, told, "round {round}: the leases on record");
        assert_eq!(stack::integrity_check(&target), "ok", "round {round}");
        assert_eq!(mode(&target), 0o600, "round {round}");
        if round % 2 == 1 {
            assert!(
                fs::symlink_metadata(&db).unwrap().file_type().is_symlink(),
                "round {round}: the link was replaced"
            );
        }
        let left: Vec<String> = names(&dir).into_iter().filter(|n| n.contains(".new-")).collect();
        assert!(left.is_empty(), "round {round}: left aside: {left:?}");
    }
}
