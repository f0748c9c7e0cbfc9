//! What is at the paths the installer writes, read for the plan: as much of
//! each file as the plan needs, and no more (a large foreign file is only
//! searched for the marker).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::super::failure::{Failure, FileAction};
use super::super::report::NAME;
use super::manifest::{Entry, Kind};
use super::marker;
use super::plan::{Build, Current, Found};

/// What is where the program goes.
pub fn program(path: &Path, program: &[u8]) -> Result<Found<Build>, Failure> {
    Ok(match lstat(path)? {
        None => Found::Nothing,
        // A file of the program's size is read whole once, to compare and
        // then to search; any other is only searched, in pieces.
        Some(meta) if meta.is_file() && meta.len() == program.len() as u64 => {
            let bytes = fs::read(path).map_err(unreadable(path))?;
            Found::File(if bytes == program {
                Build::Identical
            } else if marker::in_bytes(&bytes) {
                Build::Ours
            } else {
                Build::Foreign
            })
        }
        Some(meta) if meta.is_file() => Found::File(build(path)?),
        Some(meta) if meta.file_type().is_symlink() => Found::Symlink(target(path)),
        Some(_) => Found::Other,
    })
}

/// What is where a delegate's link goes.
pub fn link(path: &Path) -> Result<Found<Build>, Failure> {
    Ok(match lstat(path)? {
        None => Found::Nothing,
        Some(meta) if meta.file_type().is_symlink() => {
            Found::Symlink(Ok(fs::read_link(path).map_err(unreadable(path))?))
        }
        Some(meta) if meta.is_file() => Found::File(build(path)?),
        Some(_) => Found::Other,
    })
}

/// What is where a data file goes.
pub fn data_file(path: &Path) -> Result<Found<Current>, Failure> {
    Ok(match lstat(path)? {
        None => Found::Nothing,
        Some(meta) if meta.is_file() => Found::File(Current {
            contents: fs::read(path).map_err(unreadable(path))?,
            mode: meta.permissions().mode() & 0o7777,
        }),
        Some(meta) if meta.file_type().is_symlink() => Found::Symlink(target(path)),
        Some(_) => Found::Other,
    })
}

/// Whether what the manifest records is still what was installed; `None`:
/// nothing is there.
pub fn still_ours(entry: &Entry) -> io::Result<Option<bool>> {
    let path = &entry.path;
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(match entry.kind {
        Kind::Program => meta.is_file() && marker::in_file(path)?,
        Kind::Link => meta.file_type().is_symlink() && fs::read_link(path)? == Path::new(NAME),
        Kind::File => meta.is_file() && entry.wrote(&fs::read(path)?),
        Kind::Dir => false,
    }))
}

/// The path's own metadata (a link's, not its target's); `None`: nothing there.
pub fn lstat(path: &Path) -> Result<Option<fs::Metadata>, Failure> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }),
    }
}

fn build(path: &Path) -> Result<Build, Failure> {
    Ok(if marker::in_file(path).map_err(unreadable(path))? { Build::Ours } else { Build::Foreign })
}

fn target(path: &Path) -> Result<PathBuf, String> {
    fs::read_link(path).map_err(|e| e.to_string())
}

/// The failure to read `path`, for `map_err`.
pub fn unreadable(path: &Path) -> impl Fn(io::Error) -> Failure + '_ {
    move |error| Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }
}
