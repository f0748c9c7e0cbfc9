//! Replacing a file so that a reader sees the old contents or the new, never
//! a part: node_exporter's textfile collector may read at any moment.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `contents` to `FILE.tmp-<pid>` beside `path`, then renames it over
/// `path` (a rename within one directory is atomic). The temporary name does
/// not end in `.prom`, so the collector skips it while it is written.
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = temporary(path)?;
    let result = create_new(&tmp)
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.flush()))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temporary(path: &Path) -> io::Result<PathBuf> {
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"));
    };
    let mut tmp = name.to_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// O_EXCL, so that a link planted under the temporary name in a shared
/// directory is not followed. One left by a dead process of the same pid is
/// ours to replace.
fn create_new(tmp: &Path) -> io::Result<fs::File> {
    let open = || OpenOptions::new().write(true).create_new(true).open(tmp);
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

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ipam.prom");
        fs::write(&path, "old").expect("old contents");
        fs::write(temporary(&path).expect("name"), "stale").expect("a stale temporary");
        write(&path, b"new\n").expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new\n");
        let names: Vec<_> = fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["ipam.prom"]);
    }

    #[test]
    fn a_missing_directory_or_no_file_name_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(write(&dir.path().join("missing").join("ipam.prom"), b"x").is_err());
        assert_eq!(write(Path::new("/"), b"x").map_err(|e| e.kind()), Err(io::ErrorKind::InvalidInput));
    }
}
