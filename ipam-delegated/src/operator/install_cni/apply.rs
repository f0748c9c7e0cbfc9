//! Carrying out a [`Plan`]: directories first (recorded when created), then
//! the manifest, naming everything about to be written, then the files, so
//! that a run cut short leaves nothing that `--uninstall` does not know of.
//!
//! Every file is replaced whole and durably (see [`atomic_file`]): a runtime
//! that starts the plugin at that moment runs the old program or the new
//! one, never half of one.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::super::atomic_file::{self, Replacement};
use super::super::failure::{Failure, FileAction};
use super::super::report::NAME;
use super::found::lstat;
use super::manifest::{Entry, Manifest};
use super::plan::{Plan, Step};

/// Makes the plan so, with `program`'s bytes for the program, writing the
/// manifest unless `installed` (as read for the plan) already says it all;
/// the report's lines: what was created, written and linked, then what was
/// left as it is.
pub fn install(
    plan: &Plan,
    recorded: BTreeMap<PathBuf, Entry>,
    installed: Option<&Manifest>,
    program: &[u8],
    manifest_file: &Path,
) -> Result<String, Failure> {
    let mut created = Vec::new();
    for (dir, mode) in &plan.dirs {
        created.extend(create_dirs(dir, *mode)?);
    }
    let manifest = plan.manifest(recorded, &created);
    if installed != Some(&manifest) {
        write(manifest_file, manifest.text()?.as_bytes(), 0o644)?;
    }

    let mut out = String::new();
    for dir in &created {
        out += &format!("created {}\n", dir.display());
    }
    for step in &plan.steps {
        match step {
            Step::Program { path } => {
                write(path, program, 0o755)?;
                out += &format!("installed {}\n", path.display());
            }
            Step::Link { path } => {
                link(path)?;
                out += &format!("linked {} -> {NAME}\n", path.display());
            }
            Step::File { path, contents, mode } => {
                write(path, contents, *mode)?;
                out += &format!("wrote {}\n", path.display());
            }
        }
    }
    for line in &plan.unchanged {
        out += line;
        out.push('\n');
    }
    Ok(out)
}

/// `.NAME.install-cni-<pid>` beside the file: a name no runtime loads
/// (libcni takes *.conf*, plugins are found by their own names).
fn hidden(name: &OsStr) -> OsString {
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".install-cni-{}", std::process::id()));
    tmp
}

fn installed(mode: Option<u32>) -> Replacement {
    Replacement { temporary: hidden, mode, durable: true }
}

fn write(path: &Path, contents: &[u8], mode: u32) -> Result<(), Failure> {
    atomic_file::write(path, contents, &installed(Some(mode)))
        .map_err(|e| Failure::unwritten(FileAction::Write, path, e))
}

fn link(path: &Path) -> Result<(), Failure> {
    atomic_file::link(path, Path::new(NAME), &installed(None)).map_err(|e| match e {
        atomic_file::Error::Write(error) => Failure::Link { path: path.to_path_buf(), target: NAME, error },
        sync => Failure::unwritten(FileAction::Write, path, sync),
    })
}

/// Creates `dir` and its missing parents with `mode`, returning those it
/// created, outermost first.
fn create_dirs(dir: &Path, mode: u32) -> Result<Vec<PathBuf>, Failure> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at {
        if path.as_os_str().is_empty() || lstat(path)?.is_some() {
            break;
        }
        missing.push(path.to_path_buf());
        at = path.parent();
    }
    missing.reverse();
    for path in &missing {
        fs::DirBuilder::new()
            .mode(mode)
            .create(path)
            .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
            .map_err(|error| Failure::File { action: FileAction::CreateDirectory, path: path.clone(), error })?;
    }
    Ok(missing)
}
