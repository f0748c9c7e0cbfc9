//! The exclusive lock on `<database>.lock` that serializes writers across
//! processes, waited for with a bound.
//!
//! flock(2) locks belong to the open file description, which `try_clone`
//! shares: a helper thread can take the lock for us on a clone, and closing
//! the clone keeps it held as long as our handle stays open.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use fs2::FileExt;

use super::unusable;
use crate::error::{CniError, Code, Result};

pub(super) struct LockFile {
    path: PathBuf,
    /// `None` after a wait timed out: the abandoned waiter may still get the
    /// lock on that description, so the next attempt opens a fresh one.
    file: Option<File>,
}

/// The lock, held until dropped.
pub(super) struct HeldLock<'a> {
    file: &'a File,
}

impl Drop for HeldLock<'_> {
    fn drop(&mut self) {
        // If unlocking fails the lock still goes when the file is closed.
        let _ = FileExt::unlock(self.file);
    }
}

impl LockFile {
    /// Opens the lock file, creating it 0600.
    pub(super) fn open(path: &Path) -> io::Result<Self> {
        let file = open_lock_file(path)?;
        Ok(LockFile { path: path.to_path_buf(), file: Some(file) })
    }

    /// Takes the lock, waiting at most `timeout` (error 11 past it).
    pub(super) fn acquire(&mut self, timeout: Duration, db_path: &Path) -> Result<HeldLock<'_>> {
        let file = match self.file.take() {
            Some(file) => file,
            None => open_lock_file(&self.path).map_err(|e| self.failure(db_path, e))?,
        };
        match file.try_lock_exclusive() {
            Ok(()) => {}
            Err(e) if is_contended(&e) => {
                // On timeout `file` is dropped here; the waiter thread's clone
                // then releases the lock as soon as it gets it.
                wait_for_lock(&file, timeout).map_err(|e| match e {
                    Some(e) => self.failure(db_path, e),
                    None => stayed_locked(db_path, timeout),
                })?;
            }
            Err(e) => return Err(self.failure(db_path, e)),
        }
        let file = self.file.insert(file);
        Ok(HeldLock { file })
    }

    fn failure(&self, db_path: &Path, err: io::Error) -> CniError {
        unusable(db_path, format!("lock file {}: {err}", self.path.display()))
    }
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(path)
}

fn is_contended(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock || err.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

/// Blocks in a helper thread rather than polling, so the lock is taken the
/// moment it is released. `Err(None)` means the wait timed out.
fn wait_for_lock(file: &File, timeout: Duration) -> std::result::Result<(), Option<io::Error>> {
    let clone = file.try_clone().map_err(Some)?;
    let (report, outcome) = mpsc::channel();
    thread::Builder::new()
        .name("allocation-db-lock".into())
        .spawn(move || {
            let _ = report.send(clone.lock_exclusive());
        })
        .map_err(Some)?;
    match outcome.recv_timeout(timeout) {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

fn stayed_locked(db_path: &Path, timeout: Duration) -> CniError {
    let waited = if timeout.subsec_millis() == 0 {
        format!("{}s", timeout.as_secs())
    } else {
        format!("{}ms", timeout.as_millis())
    };
    CniError::new(
        Code::TryAgainLater,
        format!("allocation database {} stayed locked for {waited}: try again later", db_path.display()),
    )
}
