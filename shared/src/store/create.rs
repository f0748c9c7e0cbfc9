//! A new database is written aside, complete (the bytes that build.rs made,
//! see [`schema::NEW_DATABASE`]), and renamed into place, so that a crash at
//! any moment leaves either no database at the path or a complete one, and
//! the first ADD on a fresh node syncs three times: the new file,
//! its directory, and the ADD's commit. (Created in place, it took nine: two
//! rollback-journal transactions, each syncing journal, directory and file,
//! to mark the file and switch it to WAL; then SQLite syncs a new WAL's
//! header, and the directory with it.)
//!
//! Only the lock holder builds, so every aside file found is a leftover of a
//! process killed while building, and is removed.
//!
//! No process of ours opens a missing or empty database file with SQLite: it
//! builds the database instead. SQLite deletes the -wal beside an empty
//! database file, and a connection to a file that the rename then replaces
//! would go on using the -wal and -shm by name, the new database's.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{schema, sibling, unusable};
use crate::error::Result;

/// Debug builds only: `IPAM_TEST_KILL_AT=<step>` kills the process with
/// SIGKILL at that step of building a database (the steps are the names
/// passed to `kill_point`), so that tests can kill a real process at each.
#[cfg(debug_assertions)]
const KILL_AT_VAR: &str = "IPAM_TEST_KILL_AT";

/// Builds the database at `path` (not a symlink) unless a sibling did it
/// first. Call holding the lock.
pub(super) fn create(path: &Path) -> Result<()> {
    if !is_missing_or_empty(path)? {
        return Ok(());
    }
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => (dir, name),
        _ => return Err(unusable(path, "the path does not name a file in a directory")),
    };
    let failed = |what: &str, e: io::Error| unusable(path, format!("cannot create it: {what}: {e}"));
    // Best effort: a leftover costs only its space.
    if let Err(e) = remove_leftovers(dir, name) {
        tracing::warn!("removing what a process killed while creating {} left: {e}", path.display());
    }
    let aside = sibling(path, &format!(".new-{}", std::process::id()));
    build(&aside, path)?;
    // The WAL first, so that the database never appears beside a WAL that
    // is not its own (one left by a database deleted by hand would be
    // replayed into it) nor without one: a process that opened it then
    // would create a WAL that the rename below takes from under it.
    fs::rename(sibling(&aside, "-wal"), sibling(path, "-wal")).map_err(|e| failed("moving its WAL into place", e))?;
    kill_point("wal-moved");
    // Beside an empty file SQLite deletes a rollback journal; beside the
    // new database it would play it back.
    remove_if_present(&sibling(path, "-journal")).map_err(|e| failed("removing a stale rollback journal", e))?;
    fs::rename(&aside, path).map_err(|e| failed("moving it into place", e))?;
    kill_point("database-moved");
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| failed("syncing its directory", e))?;
    kill_point("directory-synced");
    Ok(())
}

/// Whether there is no database at `path` yet: nothing, or an empty file
/// (which no process of ours opens: each one builds the database instead).
fn is_missing_or_empty(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(meta.is_file() && meta.len() == 0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(unusable(path, e)),
    }
}

/// The complete database at `aside`, 0600, synced, and its WAL beside it:
/// the bytes of [`schema::NEW_DATABASE`] and [`schema::NEW_DATABASE_WAL`],
/// which build.rs made with this build's SQLite (WAL mode, the mark and the
/// schema at [`super::SCHEMA_VERSION`] in the file itself; in the WAL one
/// more commit that changes nothing, so that the first commit of a plugin
/// appends to a WAL that has a header: SQLite syncs a WAL's new header, and
/// the directory with it, even at synchronous=NORMAL). The WAL is synced by
/// the call that commits to it first; until then its frame may be lost to a
/// crash, which loses nothing.
fn build(aside: &Path, path: &Path) -> Result<()> {
    let failed = |what: &str, e: io::Error| unusable(path, format!("cannot create it: {what}: {e}"));
    let mut file = new_file(aside).map_err(|e| failed(&format!("creating {}", aside.display()), e))?;
    kill_point("aside-created");
    file.write_all(schema::NEW_DATABASE).map_err(|e| failed(&format!("writing {}", aside.display()), e))?;
    kill_point("aside-written");
    file.sync_all().map_err(|e| failed(&format!("syncing {}", aside.display()), e))?;
    kill_point("aside-synced");
    let wal = sibling(aside, "-wal");
    new_file(&wal)
        .and_then(|mut f| f.write_all(schema::NEW_DATABASE_WAL))
        .map_err(|e| failed(&format!("writing {}", wal.display()), e))?;
    kill_point("wal-written");
    Ok(())
}

/// A new file, 0600: the database's -wal and -shm take their mode from it.
fn new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
}

/// Removes `<name>.new-<pid>` and its -wal, -shm and -journal in `dir`.
fn remove_leftovers(dir: &Path, name: &OsStr) -> io::Result<()> {
    let mut prefix = name.as_bytes().to_vec();
    prefix.extend_from_slice(b".new-");
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(rest) = file_name.as_bytes().strip_prefix(prefix.as_slice()) else { continue };
        let pid_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if pid_len > 0 && matches!(&rest[pid_len..], b"" | b"-wal" | b"-shm" | b"-journal") {
            let leftover: PathBuf = entry.path();
            remove_if_present(&leftover)?;
            tracing::info!("removed {}, left by a process killed while creating the database", leftover.display());
        }
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(debug_assertions)]
fn kill_point(step: &str) {
    if std::env::var_os(KILL_AT_VAR).is_some_and(|at| at == step) {
        // SAFETY: a plain syscall, on this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

#[cfg(not(debug_assertions))]
fn kill_point(_step: &str) {}
