//! SIGTERM and SIGINT, awaited as a DaemonSet's container is expected to.
//! They are blocked before the installation, so that one that comes during
//! it ends the wait at once instead of the installation halfway.

use std::io;
use std::time::Duration;

pub struct Blocked(libc::sigset_t);

pub fn block() -> io::Result<Blocked> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; the
    // calls only read and write the set given and this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        match libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) {
            0 => Ok(Blocked(set)),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

impl Blocked {
    /// The signal that came.
    pub fn wait(&self) -> io::Result<libc::c_int> {
        let mut signal: libc::c_int = 0;
        // SAFETY: the set was initialised by block; signal is written by sigwait.
        match unsafe { libc::sigwait(&self.0, &mut signal) } {
            0 => Ok(signal),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// The signal that came within `limit`; `None`: none did (or the wait
    /// was interrupted by another signal).
    pub fn wait_for(&self, limit: Duration) -> io::Result<Option<libc::c_int>> {
        // `time_t` is i64 on the 64-bit targets built (its alias is
        // deprecated for musl, whose type changes on 32-bit ones).
        let timeout = libc::timespec {
            tv_sec: i64::try_from(limit.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: limit.subsec_nanos() as libc::c_long,
        };
        // SAFETY: the set was initialised by block; the info argument may be null.
        match unsafe { libc::sigtimedwait(&self.0, std::ptr::null_mut(), &timeout) } {
            -1 => match io::Error::last_os_error() {
                e if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => Ok(None),
                e => Err(e),
            },
            signal => Ok(Some(signal)),
        }
    }
}
