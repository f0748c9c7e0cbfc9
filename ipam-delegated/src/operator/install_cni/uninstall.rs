//! `--uninstall`: removes what the manifest records and is still ours; a
//! file changed since it was written, or a directory that holds anything
//! else, stays.

use std::fs;
use std::io;
use std::path::{Component, Path};

use super::super::failure::{Failure, FileAction};
use super::super::report::Report;
use super::found::still_ours;
use super::manifest::{self, Kind};

pub fn uninstall(bin_dir: &Path) -> Result<Report, Failure> {
    let manifest_file = manifest::path(bin_dir);
    let Some(manifest) = manifest::read(&manifest_file)? else {
        return Ok(Report::fine(format!("nothing to remove: no {}\n", manifest_file.display())));
    };
    let mut out = String::new();
    let mut dirs = Vec::new();
    for entry in manifest.entries {
        if entry.kind == Kind::Dir {
            dirs.push(entry.path);
            continue;
        }
        let path = &entry.path;
        match still_ours(&entry) {
            Ok(None) => out += &format!("gone already {}\n", path.display()),
            Ok(Some(true)) => match fs::remove_file(path) {
                Ok(()) => out += &format!("removed {}\n", path.display()),
                Err(error) => return Err(Failure::File { action: FileAction::Remove, path: path.clone(), error }),
            },
            Ok(Some(false)) => out += &format!("kept {}: changed since install-cni wrote it\n", path.display()),
            Err(error) => return Err(Failure::File { action: FileAction::Read, path: path.clone(), error }),
        }
    }
    match fs::remove_file(&manifest_file) {
        Ok(()) => out += &format!("removed {}\n", manifest_file.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(Failure::File { action: FileAction::Remove, path: manifest_file, error }),
    }
    // Innermost first; one that holds anything else stays.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().filter(|c| matches!(c, Component::Normal(_))).count()));
    for dir in dirs {
        match fs::remove_dir(&dir) {
            Ok(()) => out += &format!("removed {}\n", dir.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                out += &format!("kept {}: not empty\n", dir.display())
            }
            Err(error) => return Err(Failure::File { action: FileAction::RemoveDirectory, path: dir, error }),
        }
    }
    Ok(Report::fine(out))
}
