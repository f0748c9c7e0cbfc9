//! The process group that a stack's delegates run in, one after another, led
//! by a watcher process that kills the group when we die.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use shared::{CniError, Code, Result};

use super::start_errors::shortage;

/// The process group the delegates join, led by its [`Watcher`].
pub(super) struct Group {
    /// The watcher's pid, which is the group's id; `None` once the watcher is
    /// reaped. Only an unreaped child's pid cannot have been reused, so the
    /// group is signalled under this lock only.
    leader: Mutex<Option<libc::pid_t>>,
    /// Whether [`Group::kill`] took the watcher with the group.
    killed: AtomicBool,
}

impl Group {
    /// SIGKILL to the whole group: the delegate, what it started, the watcher.
    pub(super) fn kill(&self) {
        if let Some(leader) = *self.leader.lock().unwrap_or_else(PoisonError::into_inner) {
            self.killed.store(true, Ordering::Relaxed);
            // SAFETY: a plain syscall on the group of our own unreaped child.
            unsafe { libc::kill(-leader, libc::SIGKILL) };
        }
    }

    /// Someone else killed the group (a delegate its own, with SIGKILL): the
    /// watcher may be gone with it, and is not reused.
    pub(super) fn note_killed(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }
}

/// The process group that one caller's delegates run in, one after another,
/// led by a [`Watcher`]: a caller running several delegates in a row
/// (ipam-delegated's stack, its rollback) forks one watcher, not one per
/// delegate (a fork and its reaping cost about 0.2 ms, a trivial delegate's
/// whole run about 0.8 ms). Its delegates thus share a group: a timeout also
/// kills what earlier ones left running in the background, as our death
/// would. Dropping it kills and reaps the watcher.
///
/// Shared by the stack's runners of processes, which run one at a time in
/// one thread: a `RefCell`, borrowed only while the watcher is looked at.
#[derive(Default)]
pub struct DelegateGroup {
    watcher: RefCell<Option<Watcher>>,
}

impl DelegateGroup {
    /// The group's leader (the watcher's pid) and the group, the watcher
    /// started anew when there is none or its group was killed.
    pub(super) fn watcher(&self, name: &str) -> Result<(libc::pid_t, Arc<Group>)> {
        let mut slot = self.watcher.borrow_mut();
        // A dead one is reaped here, by its drop.
        let whole = slot.take().filter(Watcher::whole);
        let watcher = match whole {
            Some(watcher) => watcher,
            None => Watcher::start(name)?,
        };
        let watcher = slot.insert(watcher);
        Ok((watcher.pid, Arc::clone(&watcher.group)))
    }
}

/// A process of ours that leads the delegates' process group and, when we
/// die, kills that group. PR_SET_PDEATHSIG takes the delegate with us, but not
/// what the delegate started; this one notices our death as the end of file
/// on a pipe whose only writer is us (the descriptor is close-on-exec, so no
/// delegate keeps it), whatever kills us. Leading the group, it also keeps
/// the group's id from being reused while we may signal it.
///
/// Dropping it kills and reaps the watcher, then closes the pipe; what
/// delegates left running in the group stays.
struct Watcher {
    pid: libc::pid_t,
    group: Arc<Group>,
    /// The pipe's write end, held for its closing: after the watcher is
    /// reaped (drop order), or when we die. `None` only in a test playing our death.
    _lifeline: Option<OwnedFd>,
}

impl Watcher {
    fn start(name: &str) -> Result<Watcher> {
        let failed = |step: &str, e: io::Error| {
            let what = format!("cannot start a process to watch delegate {name:?}");
            match shortage(&e) {
                Some(why) => CniError::new(Code::TryAgainLater, format!("{what}: {e}: {why}")),
                None => CniError::new(Code::Io, format!("{what}: {e}")),
            }
            .with_details(format!("{step} failed"))
        };
        let mut fds: [RawFd; 2] = [-1, -1];
        // SAFETY: pipe2 fills the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(failed("pipe2", io::Error::last_os_error()));
        }
        // SAFETY: both descriptors are fresh and owned by nothing else.
        let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let highest = highest_fd();
        // SAFETY: the child runs `watch` only, which makes async-signal-safe
        // system calls and never returns: nothing of this multi-threaded
        // process's state (locks, allocator, destructors) is touched in it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            watch(read_end.as_raw_fd(), highest);
        }
        if pid < 0 {
            return Err(failed("fork", io::Error::last_os_error()));
        }
        drop(read_end);
        let group = Group { leader: Mutex::new(Some(pid)), killed: AtomicBool::new(false) };
        let watcher = Watcher { pid, group: Arc::new(group), _lifeline: Some(write_end) };
        // Here too, not only in the watcher: the delegate joins the group as
        // soon as it starts, perhaps before the watcher has run at all.
        // SAFETY: a plain syscall on our own child, which does not exec.
        if unsafe { libc::setpgid(pid, pid) } != 0 {
            // Dropping the watcher kills and reaps it.
            return Err(failed("setpgid", io::Error::last_os_error()));
        }
        Ok(watcher)
    }

    /// Whether it still watches: its group was not killed, and nothing else
    /// (a delegate signalling its own group) killed it.
    fn whole(&self) -> bool {
        if self.group.killed.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: siginfo_t is plain data, valid all zero.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // WNOWAIT: a dead watcher is left for the drop to reap.
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: waitid on our own unreaped child fills the struct it is given.
        let checked = unsafe { libc::waitid(libc::P_PID, self.pid as libc::id_t, &mut info, flags) } == 0;
        // SAFETY: waitid set si_pid: 0 when the watcher has not exited.
        checked && unsafe { info.si_pid() } == 0
    }

    /// Plays our death for the watcher (a test cannot die and check).
    #[cfg(test)]
    fn cut_lifeline(&mut self) {
        self._lifeline = None;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let mut leader = self.group.leader.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pid) = leader.take() {
            // SAFETY: plain syscalls on our own unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
                    && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                {}
            }
        }
    }
}

/// The highest descriptor number the watcher may have to close if the
/// kernel has no close_range (before 5.9): read here, before the fork,
/// because getrlimit is not async-signal-safe.
fn highest_fd() -> libc::c_uint {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if known {
        limit.rlim_cur.min(1 << 16) as libc::c_uint
    } else {
        1024
    }
}

/// The watcher's whole life, in the child of a fork of a multi-threaded
/// process: async-signal-safe system calls only, no allocation, no locks, no
/// return. It leads its own group, holds no descriptor but the pipe's read
/// end (so that it keeps no one else's pipe open, our stdout included), waits
/// for the end of file that our death makes, then kills its group, itself
/// included. Only SIGKILL ends it before: every other signal is blocked, so a
/// delegate signalling its own group does not blind it.
fn watch(lifeline: RawFd, highest: libc::c_uint) -> ! {
    // SAFETY: see above; every call here is a system call on our own state.
    unsafe {
        libc::setpgid(0, 0);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        let keep = lifeline as libc::c_uint;
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0, keep - 1, 0) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0) == 0;
        if !(below && above) {
            for fd in (0..highest).filter(|&fd| fd != keep) {
                libc::close(fd as RawFd);
            }
        }
        let mut byte = 0u8;
        loop {
            match libc::read(lifeline, (&mut byte as *mut u8).cast(), 1) {
                0 => break,
                n if n < 0 && *libc::__errno_location() != libc::EINTR => {
                    // Blind: leave the group alone rather than kill a delegate we still wait for.
                    libc::_exit(1)
                }
                // Nobody writes to it; and an interrupted read is read again.
                _ => {}
            }
        }
        libc::kill(0, libc::SIGKILL);
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command as Process, Stdio};
    use std::thread;
    use std::time::Duration;

    use super::super::testing::{members, state, within_2s};
    use super::*;

    #[test]
    fn the_watcher_kills_its_group_when_we_die_and_only_then() {
        // Dismissed after a normal run: the watcher goes alone.
        let watcher = Watcher::start("alone").unwrap();
        let mut survivor = Process::new("sleep").arg("30").process_group(watcher.pid).spawn().unwrap();
        drop(watcher);
        thread::sleep(Duration::from_millis(100));
        assert!(survivor.try_wait().unwrap().is_none(), "dismissing the watcher killed its group");
        survivor.kill().unwrap();
        survivor.wait().unwrap();

        // Our death (its pipe's end of file): the whole group goes, what the delegate started too.
        let mut watcher = Watcher::start("orphaned").unwrap();
        let mut delegate = Process::new("/bin/sh")
            .args(["-c", "sleep 30 & echo $!; exec sleep 30"])
            .process_group(watcher.pid)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(delegate.stdout.take().unwrap()), &mut line).unwrap();
        let background: libc::pid_t = line.trim().parse().unwrap();
        let group = watcher.pid;
        assert_eq!(members(group).len(), 3, "the watcher, the delegate and its child");
        thread::sleep(Duration::from_millis(100));
        assert!(delegate.try_wait().unwrap().is_none(), "the watcher killed its group on its own");
        watcher.cut_lifeline();
        assert!(within_2s(|| delegate.try_wait().unwrap().is_some()), "the delegate survived us");
        assert_eq!(delegate.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(within_2s(|| members(group).is_empty()), "still running in the group: {:?}", members(group));
        assert!(matches!(state(background), None | Some('Z')), "the delegate's child survived us");
        assert_eq!(state(group), Some('Z'), "the watcher ends once it has killed its group");
    }
}
