//! The order in which writers get the lock. flock(2) wakes its waiters in no
//! order: under 64-way contention a waiter was passed over by hundreds of
//! later ones (BENCHMARKS.md, lock waits). So a writer first takes a ticket
//! in `<database>.lock-queue` and waits only for the writer just before it;
//! the flock on `<database>.lock` still does the excluding.
//!
//! The file holds a counter at bytes [0, 8) and one byte per ticket after it.
//! Ticket `t` holds an open-file-description write lock on byte `8 + t` from
//! taking its ticket until it releases the database lock; its successor
//! waits for a read lock on that byte. OFD locks go with their descriptor,
//! so a writer that dies frees its successor, and a writer that gives up
//! unlocks its byte. A lost or wrapped counter costs only the order, never
//! the exclusion, which the flock keeps.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Ticket bytes wrap after this many tickets.
const SLOTS: u64 = 1 << 40;

/// A place in the queue: the byte this writer holds.
pub(super) struct Ticket {
    slot: u64,
}

impl Ticket {
    /// Takes the next ticket and holds its byte, and answers the slot of
    /// the writer just before. `None` when the byte is taken (the counter
    /// was reset or wrapped): then the writer waits for the flock alone, as
    /// without a queue.
    pub(super) fn take(queue: &File) -> io::Result<Option<(Ticket, Option<u64>)>> {
        ofd_lock(queue, libc::F_WRLCK as i16, 0, 8, true)?;
        let taken = next_ticket(queue);
        let unlocked = ofd_lock(queue, libc::F_UNLCK as i16, 0, 8, false);
        let taken = taken?;
        unlocked?;
        Ok(taken.map(|(slot, predecessor)| (Ticket { slot }, predecessor)))
    }

    /// Its number in the queue's order (until the counter wraps at [`SLOTS`]).
    pub(super) fn number(&self) -> u64 {
        self.slot
    }

    /// Gives the turn to the successor.
    pub(super) fn release(self, queue: &File) {
        // If unlocking fails the byte still goes when the process exits.
        let _ = ofd_lock(queue, libc::F_UNLCK as i16, 8 + self.slot, 1, false);
    }
}

/// Under the counter's lock: the counter read and advanced, this ticket's
/// byte taken, and the predecessor's slot (none for the first ticket).
/// Taking the byte before the counter's lock is let go means a successor
/// always finds it held.
fn next_ticket(queue: &File) -> io::Result<Option<(u64, Option<u64>)>> {
    let mut counter = [0u8; 8];
    let read = queue.read_at(&mut counter, 0)?;
    let t = if read == 8 { u64::from_le_bytes(counter) } else { 0 };
    let slot = t % SLOTS;
    queue.write_all_at(&t.wrapping_add(1).to_le_bytes(), 0)?;
    match ofd_lock(queue, libc::F_WRLCK as i16, 8 + slot, 1, false) {
        Ok(()) => Ok(Some((slot, (t > 0).then(|| (t - 1) % SLOTS)))),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Blocks until the writer holding `slot` has let go of it (returns at once
/// when nobody holds it).
pub(super) fn wait_for_turn(queue: &File, slot: u64) -> io::Result<()> {
    ofd_lock(queue, libc::F_RDLCK as i16, 8 + slot, 1, true)?;
    ofd_lock(queue, libc::F_UNLCK as i16, 8 + slot, 1, false)
}

/// Whether the writer holding `slot` is already done, without waiting: the
/// common case, which then needs no waiting thread.
pub(super) fn is_turn(queue: &File, slot: u64) -> io::Result<bool> {
    match ofd_lock(queue, libc::F_RDLCK as i16, 8 + slot, 1, false) {
        Ok(()) => ofd_lock(queue, libc::F_UNLCK as i16, 8 + slot, 1, false).map(|()| true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// An open-file-description lock of `len` bytes at `start`; `wait` blocks.
fn ofd_lock(file: &File, kind: i16, start: u64, len: u64, wait: bool) -> io::Result<()> {
    // SAFETY: a zeroed flock is a valid value; every field we rely on is set.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind;
    lock.l_whence = libc::SEEK_SET as i16;
    lock.l_start = i64::try_from(start).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    lock.l_len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let command = if wait { libc::F_OFD_SETLKW } else { libc::F_OFD_SETLK };
    loop {
        // SAFETY: fcntl with a lock command reads the flock we pass.
        let status = unsafe { libc::fcntl(file.as_raw_fd(), command, &lock) };
        if status == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::path::Path;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A writer's own open file description of the queue, as each process has.
    fn open(path: &Path) -> File {
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap()
    }

    /// Waits in a thread for `slot`'s turn; the receiver hears when it came.
    fn waiting(path: &Path, slot: u64) -> mpsc::Receiver<()> {
        let file = open(path);
        let (done, heard) = mpsc::channel();
        std::thread::spawn(move || {
            wait_for_turn(&file, slot).unwrap();
            let _ = done.send(());
        });
        heard
    }

    #[test]
    fn each_writer_waits_for_the_one_before_it_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.lock-queue");
        let (a, b, c) = (open(&path), open(&path), open(&path));
        let (ticket_a, first) = Ticket::take(&a).unwrap().unwrap();
        assert_eq!(first, None, "the first ticket waits for nobody");
        let (ticket_b, before_b) = Ticket::take(&b).unwrap().unwrap();
        let (ticket_c, before_c) = Ticket::take(&c).unwrap().unwrap();
        assert_eq!((before_b, before_c), (Some(ticket_a.slot), Some(ticket_b.slot)));

        let (b_turn, c_turn) = (waiting(&path, ticket_a.slot), waiting(&path, ticket_b.slot));
        let short = Duration::from_millis(150);
        assert!(b_turn.recv_timeout(short).is_err() && c_turn.recv_timeout(short).is_err(), "both wait");
        ticket_a.release(&a);
        b_turn.recv_timeout(Duration::from_secs(5)).expect("b's turn comes when a lets go");
        assert!(c_turn.recv_timeout(short).is_err(), "c still waits for b");
        ticket_b.release(&b);
        c_turn.recv_timeout(Duration::from_secs(5)).expect("then c's");
        ticket_c.release(&c);
    }

    #[test]
    fn a_writer_that_is_gone_frees_its_successor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.lock-queue");
        let a = open(&path);
        let (ticket_a, _) = Ticket::take(&a).unwrap().unwrap();
        let b = open(&path);
        let (_ticket_b, before_b) = Ticket::take(&b).unwrap().unwrap();
        let b_turn = waiting(&path, before_b.unwrap());
        drop(a); // closing the description drops its locks, as a dying process does
        b_turn.recv_timeout(Duration::from_secs(5)).expect("b's turn comes when a is gone");
        let _ = ticket_a;
    }
}
