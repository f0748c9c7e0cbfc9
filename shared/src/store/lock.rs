//! The exclusive lock on `<database>.lock` that serializes writers across
//! processes, waited for with a bound.
//!
//! flock(2) locks belong to the open file description, which `try_clone`
//! shares: a helper thread can take the lock for us on a clone, and closing
//! the clone keeps it held as long as our handle stays open.

use std::cell::OnceCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use fs2::FileExt;

use super::queue::{self, Ticket};
use super::unusable;
use crate::error::{CniError, Code, Result};

/// How long a writer may wait for the lock: `ipam.lockTimeout` for each
/// wait, and within an orchestrated call also the bounds `ipam-delegated`
/// passes down, so that one call's waits add up to one budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWait {
    /// `ipam.lockTimeout`: the longest one wait lasts.
    pub timeout: Duration,
    /// Shared by every wait of the call, rollback included: a stuck lock
    /// costs the call its lock budget once, not once per delegate.
    pub shared_until: Option<Instant>,
    /// The whole call's deadline (`ipam.timeout`); a wait cut short by it is
    /// error 105, saying that it was waiting for the lock.
    pub call_deadline: Option<Instant>,
}

impl From<Duration> for LockWait {
    fn from(timeout: Duration) -> Self {
        LockWait { timeout, shared_until: None, call_deadline: None }
    }
}

impl LockWait {
    /// When this wait must end, and whether that is the call's deadline.
    fn until(&self, now: Instant) -> (Instant, bool) {
        let mut until = now + self.timeout;
        if let Some(shared) = self.shared_until {
            until = until.min(shared);
        }
        match self.call_deadline {
            Some(deadline) if deadline <= until => (deadline, true),
            _ => (until, false),
        }
    }
}

pub(super) struct LockFile {
    path: PathBuf,
    /// `None` after a wait timed out: the abandoned waiter may still get the
    /// lock on that description, so the next attempt opens a fresh one.
    file: Option<File>,
    /// `<database>.lock-queue`, which orders the waiters ([`queue`]), opened
    /// at the first wait for the lock (a reader never opens it); `None` when
    /// it cannot be opened, and then waiters are served in no order.
    queue: OnceCell<Option<File>>,
}

/// The lock, held until dropped.
pub(super) struct HeldLock<'a> {
    file: &'a File,
    turn: Option<(&'a File, Ticket)>,
}

impl HeldLock<'_> {
    /// The queue ticket this turn was taken with (none when the queue
    /// could not be used and the writer waited in no order).
    pub(super) fn ticket(&self) -> Option<u64> {
        self.turn.as_ref().map(|(_, ticket)| ticket.number())
    }
}

impl Drop for HeldLock<'_> {
    fn drop(&mut self) {
        // If unlocking fails the lock still goes when the file is closed.
        let _ = FileExt::unlock(self.file);
        // Only then the next writer's turn, so that it finds the lock free.
        if let Some((queue, ticket)) = self.turn.take() {
            ticket.release(queue);
        }
    }
}

impl LockFile {
    /// Opens the lock file, creating it 0600.
    pub(super) fn open(path: &Path) -> io::Result<Self> {
        let file = open_lock_file(path)?;
        Ok(LockFile { path: path.to_path_buf(), file: Some(file), queue: OnceCell::new() })
    }

    /// Takes the lock, waiting as long as `wait` allows: error 11 past the
    /// lock timeout or the call's shared lock budget, 105 past the call's
    /// deadline.
    pub(super) fn acquire(&mut self, wait: &LockWait, db_path: &Path) -> Result<HeldLock<'_>> {
        let file = match self.file.take() {
            Some(file) => file,
            None => open_lock_file(&self.path).map_err(|e| self.failure(db_path, e))?,
        };
        let started = Instant::now();
        let (until, is_call_deadline) = wait.until(started);
        // The whole wait, queue and lock, is one budget, and is reported so.
        let timed_out = || match is_call_deadline {
            true => call_deadline_reached(db_path),
            false => stayed_locked(db_path, until.saturating_duration_since(started)),
        };
        let queue = self.queue.get_or_init(|| open_queue(&self.path)).as_ref();
        // A queue that fails costs the order, never the lock.
        let ticket = queue.and_then(|queue| match Ticket::take(queue) {
            Ok(ticket) => ticket,
            Err(e) => {
                tracing::warn!("lock queue of {}: {e}; waiting in no order", db_path.display());
                None
            }
        });
        let (ticket, predecessor) = match ticket {
            Some((ticket, predecessor)) => (Some(ticket), predecessor),
            None => (None, None),
        };
        // First the turn (the writer before this one is done), then the lock.
        let waited = predecessor
            .zip(queue)
            .map_or(Ok(()), |(slot, queue)| {
                if queue::is_turn(queue, slot).map_err(WaitFailure::Io)? {
                    return Ok(());
                }
                let budget = until.saturating_duration_since(Instant::now());
                let clone = queue.try_clone().map_err(WaitFailure::Io)?;
                wait_in_thread(budget, move || queue::wait_for_turn(&clone, slot))
            })
            .and_then(|()| match file.try_lock_exclusive() {
                Ok(()) => Ok(()),
                Err(e) if is_contended(&e) => {
                    let budget = until.saturating_duration_since(Instant::now());
                    // On timeout `file` is dropped below; the waiter thread's
                    // clone then releases the lock as soon as it gets it.
                    let clone = file.try_clone().map_err(WaitFailure::Io)?;
                    wait_in_thread(budget, move || clone.lock_exclusive())
                }
                Err(e) => Err(WaitFailure::Io(e)),
            });
        if let Err(e) = waited {
            // The successor's turn comes now: this writer has given up.
            if let (Some(ticket), Some(queue)) = (ticket, queue) {
                ticket.release(queue);
            }
            return Err(match e {
                WaitFailure::Io(e) => self.failure(db_path, e),
                WaitFailure::NoThread(e) => no_thread(e),
                WaitFailure::TimedOut => timed_out(),
            });
        }
        let turn = queue.zip(ticket);
        let file = self.file.insert(file);
        Ok(HeldLock { file, turn })
    }

    fn failure(&self, db_path: &Path, err: io::Error) -> CniError {
        unusable(db_path, format!("lock file {}: {err}", self.path.display()))
    }
}

/// `<lock file>-queue`, read and written (the counter) and read-locked (a
/// turn); `None`, with a warning, when it cannot be opened.
fn open_queue(lock_path: &Path) -> Option<File> {
    let mut path = lock_path.as_os_str().to_owned();
    path.push("-queue");
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| tracing::warn!("lock queue {}: {e}; waiters are served in no order", path.to_string_lossy()))
        .ok()
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(path)
}

fn is_contended(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock || err.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

enum WaitFailure {
    Io(io::Error),
    NoThread(io::Error),
    TimedOut,
}

/// Runs the blocking `wait` in a helper thread rather than polling, so that
/// the lock is taken the moment it is released, for at most `timeout`.
fn wait_in_thread(
    timeout: Duration,
    wait: impl FnOnce() -> io::Result<()> + Send + 'static,
) -> std::result::Result<(), WaitFailure> {
    if timeout.is_zero() {
        return Err(WaitFailure::TimedOut);
    }
    let (report, outcome) = mpsc::channel();
    thread::Builder::new()
        .name("allocation-db-lock".into())
        .spawn(move || {
            let _ = report.send(wait());
        })
        .map_err(WaitFailure::NoThread)?;
    match outcome.recv_timeout(timeout) {
        Ok(result) => result.map_err(WaitFailure::Io),
        Err(_) => Err(WaitFailure::TimedOut),
    }
}

/// The system refused a thread (a pids limit, no memory): try again later.
fn no_thread(err: io::Error) -> CniError {
    CniError::new(
        Code::TryAgainLater,
        format!("cannot start a thread to wait for the allocation database lock ({err}): the system is out of processes or memory; try again later"),
    )
}

fn call_deadline_reached(db_path: &Path) -> CniError {
    CniError::new(
        Code::DelegateTimeout,
        format!(
            "the call's deadline (ipam.timeout) was reached while waiting for the lock of allocation database {}: another process holds it",
            db_path.display()
        ),
    )
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

/// A turn at work that spans transactions and requests outside the
/// database, taken on a lock file of its own beside the database's (see
/// [`super::AllocationStore::take_turn`]); given back when dropped, or by
/// the kernel when the process dies.
pub struct Turn {
    file: File,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let _ = FileExt::unlock(&self.file);
    }
}

/// Waits at most `wait` for the turn on `path`: none when another process
/// kept it that long.
pub(super) fn take_turn(path: &Path, wait: Duration) -> io::Result<Option<Turn>> {
    let file = open_lock_file(path)?;
    match file.try_lock_exclusive() {
        Ok(()) => return Ok(Some(Turn { file })),
        Err(e) if !is_contended(&e) => return Err(e),
        Err(_) => {}
    }
    // On timeout `file` is dropped; the waiter thread's clone then gives
    // the turn back as soon as it gets it.
    let clone = file.try_clone()?;
    match wait_in_thread(wait, move || clone.lock_exclusive()) {
        Ok(()) => Ok(Some(Turn { file })),
        Err(WaitFailure::TimedOut) => Ok(None),
        Err(WaitFailure::Io(e) | WaitFailure::NoThread(e)) => Err(e),
    }
}
