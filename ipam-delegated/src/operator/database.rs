//! The allocation database an operator's command names with `--database`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shared::store::{AllocationStore, DEFAULT_LOCK_TIMEOUT};

use super::failure::{Failure, FileAction};

/// Readers take no lock, so the lock timeout is the default one of opening.
pub fn open_for_reading(database: &Path) -> Result<AllocationStore, Failure> {
    open(database, DEFAULT_LOCK_TIMEOUT)
}

/// The store, refusing to create one: the plugins create the database on
/// their first ADD, and an operator who typed the wrong path must be told so.
pub fn open(database: &Path, lock_timeout: Duration) -> Result<AllocationStore, Failure> {
    match std::fs::metadata(database) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(Failure::NotAFile(database.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Failure::NoDatabase(database.to_path_buf())),
        Err(error) => {
            return Err(Failure::File { action: FileAction::Read, path: database.to_path_buf(), error });
        }
    }
    Ok(AllocationStore::open(database, lock_timeout)?)
}

/// The store wants an absolute path; a relative one is taken from the
/// working directory, as any command-line tool would.
pub fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path).map_err(|error| Failure::DatabasePath { path: path.to_path_buf(), error })
}
