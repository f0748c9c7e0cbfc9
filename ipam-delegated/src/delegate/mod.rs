//! Running one delegate, whichever way it runs. Each delegate of a stack gets
//! its [`Runner`] once, when the stack is read ([`runner`], as netavark picks
//! a built-in or an external plugin driver), and the stack then runs every
//! delegate alike:
//!
//! - [`in_process`]: one of the suite's own delegates whose file is this very
//!   program, run inside this process;
//! - [`process`]: any other executable, run as a process of its own in the
//!   process group of a [`watcher`], and killed at its deadline;
//!
//! and what either printed is read the same way ([`answer`]).

mod answer;
mod in_process;
mod process;
mod runner;
mod start_errors;
#[cfg(test)]
mod testing;
mod watcher;

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::rc::Rc;

use shared::{CniError, Code, Result};

use crate::builtin;
pub use runner::{Call, Input, Runner};
pub use watcher::DelegateGroup;

/// A delegate's executable as found: its path, and the file's (device,
/// inode), which tell whether it is the same file as another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub file: (u64, u64),
}

/// The executable file called `name` in the first directory of CNI_PATH
/// holding one; error 106 otherwise.
pub fn find(name: &str, dirs: &[PathBuf]) -> Result<Found> {
    for dir in dirs {
        let path = dir.join(name);
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(Found { path, file: (meta.dev(), meta.ino()) });
            }
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(CniError::new(Code::DelegateNotFound, format!("delegate {name:?} not found or not executable in CNI_PATH"))
        .with_details(format!(
            "searched: {}",
            if searched.is_empty() { "(nothing)".into() } else { searched.join(":") }
        )))
}

/// The file of this program, as (device, inode): a delegate found to be this
/// file runs in this process. `None` if it cannot be read (every delegate then
/// runs as a process, which is slower, never wrong).
pub fn this_program() -> Option<(u64, u64)> {
    std::fs::metadata("/proc/self/exe").ok().map(|m| (m.dev(), m.ino()))
}

/// How the delegate `name`, `ipam.delegates[index]`, found as `found`, runs:
/// in this process when its file is this program (`myself`) and the name is
/// one of the suite's delegates, since that is code this process already has;
/// as a process in `group` otherwise. This program under any other name is
/// ipam-delegated itself: error 7, a stack cannot run itself.
pub fn runner(
    index: usize,
    name: &str,
    found: Found,
    myself: Option<(u64, u64)>,
    group: &Rc<DelegateGroup>,
) -> Result<Box<dyn Runner>> {
    if Some(found.file) != myself {
        return Ok(Box::new(process::Exec::new(name, found.path, Rc::clone(group))));
    }
    match builtin::named(OsStr::new(name)) {
        Some(builtin) => {
            tracing::debug!("{name} ({}) is this program: it runs in this process", found.path.display());
            Ok(Box::new(in_process::InProcess(builtin)))
        }
        None => Err(CniError::config(
            &format!("ipam.delegates[{index}]"),
            format!("{name:?} ({}) is ipam-delegated itself: a stack cannot run itself", found.path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::testing::script;
    use super::*;

    #[test]
    fn find_looks_only_in_cni_path_and_needs_the_exec_bit() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        script(b.path(), "d", "true");
        std::fs::write(a.path().join("d"), "not executable").unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        let found = find("d", &dirs).unwrap();
        assert_eq!(found.path, b.path().join("d"));
        let meta = std::fs::metadata(b.path().join("d")).unwrap();
        assert_eq!(found.file, (meta.dev(), meta.ino()));
        let e = find("missing", &dirs).unwrap_err();
        assert_eq!(e.code, 106);
        assert!(e.details.contains(&a.path().display().to_string()));
        assert_eq!(find("d", &[]).unwrap_err().code, 106);
    }
}
