//! Replacing a file so that a reader sees the old one or the new, never a
//! part: node_exporter's textfile collector may read the metrics at any
//! moment, and a runtime may start a plugin or load a conflist at any moment
//! while install-cni replaces it (a process still running the old program
//! keeps running: its inode lives on).
//!
//! The new file is written under a temporary name in the same directory and
//! renamed over the old one (a rename within one directory is atomic).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{symlink, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How a file is replaced, as the readers of its directory need it.
pub struct Replacement {
    /// The temporary name beside the file, made from the file's name: one
    /// that the directory's readers skip while it is written.
    pub temporary: fn(&OsStr) -> OsString,
    /// The file's mode, whatever the umask; `None`: the umask's.
    pub mode: Option<u32>,
    /// The file, then its directory, fsynced: the new file survives a crash
    /// of the machine, not only of the process.
    pub durable: bool,
}

#[derive(Debug)]
pub enum Error {
    /// Nothing was replaced.
    Write(io::Error),
    /// The file was replaced, but its directory could not be fsynced.
    SyncDirectory { dir: PathBuf, error: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Write(error) => write!(f, "{error}"),
            Error::SyncDirectory { dir, error } => write!(f, "cannot fsync the directory {}: {error}", dir.display()),
        }
    }
}

/// Replaces `path` with a file that holds `contents`.
pub fn write(path: &Path, contents: &[u8], how: &Replacement) -> Result<(), Error> {
    replace(path, how, |tmp| {
        let mut file = create_new(tmp, how.mode)?;
        if let Some(mode) = how.mode {
            file.set_permissions(fs::Permissions::from_mode(mode))?; // whatever the umask
        }
        file.write_all(contents)?;
        if how.durable {
            file.sync_all()
        } else {
            file.flush()
        }
    })
}

/// Replaces `path` with a symbolic link to `target`.
pub fn link(path: &Path, target: &Path, how: &Replacement) -> Result<(), Error> {
    replace(path, how, |tmp| match symlink(target, tmp) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            symlink(target, tmp)
        }
        other => other,
    })
}

/// `make` writes the temporary file; it is then renamed over `path`, or
/// removed if anything failed.
fn replace(path: &Path, how: &Replacement, make: impl FnOnce(&Path) -> io::Result<()>) -> Result<(), Error> {
    let Some(name) = path.file_name() else {
        return Err(Error::Write(io::Error::new(io::ErrorKind::InvalidInput, "the path names no file")));
    };
    let tmp = path.with_file_name((how.temporary)(name));
    let result = make(&tmp).and_then(|()| fs::rename(&tmp, path));
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Error::Write(error));
    }
    if how.durable {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|error| Error::SyncDirectory { dir: dir.to_path_buf(), error })?;
    }
    Ok(())
}

/// O_EXCL, so that a link planted under the temporary name in a shared
/// directory is not followed. One left by a dead process of the same pid is
/// ours to replace.
fn create_new(tmp: &Path, mode: Option<u32>) -> io::Result<File> {
    let open = || {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        if let Some(mode) = mode {
            options.mode(mode);
        }
        options.open(tmp)
    };
    match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            open()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suffixed(name: &OsStr) -> OsString {
        let mut tmp = name.to_os_string();
        tmp.push(".tmp");
        tmp
    }

    const PLAIN: Replacement = Replacement { temporary: suffixed, mode: None, durable: false };
    const PRIVATE: Replacement = Replacement { temporary: suffixed, mode: Some(0o600), durable: true };

    fn names(dir: &Path) -> Vec<OsString> {
        let mut names: Vec<_> = fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ipam.prom");
        fs::write(&path, "old").expect("old contents");
        fs::write(dir.path().join("ipam.prom.tmp"), "stale").expect("a stale temporary");
        write(&path, b"new\n", &PLAIN).expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new\n");
        assert_eq!(names(dir.path()), ["ipam.prom"]);
    }

    #[test]
    fn the_mode_is_the_one_asked_for_whatever_the_umask() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tls.key");
        fs::write(&path, "old").expect("old contents");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        write(&path, b"KEY\n", &PRIVATE).expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "KEY\n");
        assert_eq!(fs::metadata(&path).expect("stat").permissions().mode() & 0o7777, 0o600);
        assert_eq!(names(dir.path()), ["tls.key"]);
    }

    #[test]
    fn a_file_is_replaced_by_a_link_and_a_stale_temporary_is_no_obstacle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ipam-ds-pool");
        fs::write(&path, "a copy").expect("old file");
        symlink("elsewhere", dir.path().join("ipam-ds-pool.tmp")).expect("a stale temporary");
        link(&path, Path::new("ipam-delegated"), &PRIVATE).expect("link");
        assert_eq!(fs::read_link(&path).expect("a link"), Path::new("ipam-delegated"));
        assert_eq!(names(dir.path()), ["ipam-ds-pool"]);
    }

    #[test]
    fn a_missing_directory_or_no_file_name_is_an_error_that_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(matches!(write(&dir.path().join("missing").join("ipam.prom"), b"x", &PLAIN), Err(Error::Write(_))));
        match write(Path::new("/"), b"x", &PLAIN) {
            Err(Error::Write(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
            other => panic!("{other:?}"),
        }
        assert!(names(dir.path()).is_empty());
    }
}
