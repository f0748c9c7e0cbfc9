//! Why a delegate could not be started: a shortage that passes (error 11,
//! another attempt may succeed) or a file that cannot be run (106).

use std::io;
use std::path::Path;

use shared::{CniError, Code};

/// Why starting a process or a thread failed with `e`, when the cause is a
/// shortage that passes (another attempt may succeed: error 11).
pub(super) fn shortage(e: &io::Error) -> Option<&'static str> {
    match e.raw_os_error()? {
        // fork and pthread_create refused under a process limit (EAGAIN), or
        // no memory for the copy, the stack or the kernel's structures.
        libc::EAGAIN | libc::ENOMEM => Some("the system is out of processes or memory; try again later"),
        // The pipes to a delegate, or the watcher's.
        libc::EMFILE | libc::ENFILE => Some("out of file descriptors; try again later"),
        _ => None,
    }
}

/// The delegate's process could not be started: error 11 for a shortage,
/// 106 when the file cannot be executed (gone, not executable, not a format
/// the kernel runs).
pub(super) fn spawn_error(name: &str, path: &Path, e: &io::Error) -> CniError {
    let error = match shortage(e) {
        Some(why) => {
            CniError::new(Code::TryAgainLater, format!("cannot start a process for delegate {name:?}: {e}: {why}"))
        }
        None => CniError::new(Code::DelegateNotFound, format!("delegate {name:?} could not be started: {e}")),
    };
    error.with_details(path.display().to_string())
}

pub(super) fn thread_error(name: &str, e: &io::Error) -> CniError {
    match shortage(e) {
        Some(why) => {
            CniError::new(Code::TryAgainLater, format!("cannot start a thread to run delegate {name:?}: {e}: {why}"))
        }
        None => CniError::new(Code::Io, format!("cannot start a thread to run delegate {name:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortage_is_error_11_and_an_unrunnable_file_106() {
        let path = Path::new("/opt/cni/bin/d");
        for errno in [libc::EAGAIN, libc::ENOMEM, libc::EMFILE, libc::ENFILE] {
            let e = spawn_error("d", path, &io::Error::from_raw_os_error(errno));
            assert!(e.code == 11 && e.msg.starts_with("cannot start a process for delegate \"d\": "), "{e}");
            assert!(e.msg.ends_with("; try again later") && e.details == "/opt/cni/bin/d", "{e}");
            let e = thread_error("d", &io::Error::from_raw_os_error(errno));
            assert!(e.code == 11 && e.msg.starts_with("cannot start a thread to run delegate \"d\": "), "{e}");
        }
        assert_eq!(
            thread_error("d", &io::Error::from_raw_os_error(libc::EAGAIN)).msg,
            "cannot start a thread to run delegate \"d\": Resource temporarily unavailable (os error 11): \
             the system is out of processes or memory; try again later"
        );
        for errno in [libc::ENOENT, libc::EACCES, libc::ENOEXEC, libc::ETXTBSY] {
            let e = spawn_error("d", path, &io::Error::from_raw_os_error(errno));
            assert!(e.code == 106 && e.msg.starts_with("delegate \"d\" could not be started: "), "{e}");
        }
        assert_eq!(thread_error("d", &io::Error::from_raw_os_error(libc::EINVAL)).code, 5);
    }
}
