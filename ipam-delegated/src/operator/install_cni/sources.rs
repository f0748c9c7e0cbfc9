//! What the installer copies, read and checked before anything is written:
//! the node's name, this program, etcd's Secret and the network
//! configurations.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::super::failure::{ConflistProblem, Failure, FileAction};
use super::found::unreadable;
use super::marker;

/// Where the program is read from: the running process's own file.
const SELF_EXE: &str = "/proc/self/exe";

/// The largest conflist or secret file copied (libcni and etcd's files are small).
const MAX_DATA_FILE: u64 = 1 << 20;

/// The node's name, from the environment (a DaemonSet's downward API).
pub fn node_name() -> Result<String, Failure> {
    let name = std::env::var_os("NODE_NAME").ok_or(Failure::NoNodeName)?;
    match name.to_str() {
        Some(name) if ipam_ds_cluster::settings::is_node_name(name) => Ok(name.to_string()),
        _ => Err(Failure::BadNodeName(name)),
    }
}

/// This program's bytes, as the kernel runs them.
pub fn own_program() -> Result<Vec<u8>, Failure> {
    let bytes = fs::read(SELF_EXE).map_err(|error| Failure::OwnProgram { path: PathBuf::from(SELF_EXE), error })?;
    if !marker::in_bytes(&bytes) {
        return Err(Failure::Bug(format!("this program ({SELF_EXE}) does not hold its own build marker")));
    }
    Ok(bytes)
}

/// The files of a mounted Secret: each key is a symlink into `..data/`,
/// which is followed; the `..`-names themselves and anything not a file are
/// skipped. In name order; none when the Secret is an optional one that
/// does not exist (the kubelet mounts an empty directory then).
pub fn secret_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let unlisted = |error| Failure::File { action: FileAction::ReadEtcdSecret, path: dir.to_path_buf(), error };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(unlisted)? {
        let entry = entry.map_err(unlisted)?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            return Err(Failure::NotUtf8Name(entry.path()));
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let meta = fs::metadata(&path).map_err(unreadable(&path))?;
        if !meta.is_file() {
            continue;
        }
        files.push((name, read_small(&path)?));
    }
    files.sort();
    Ok(files)
}

/// The network configurations to copy, by their file names, which must
/// differ: they all go to one directory.
pub fn network_configurations(sources: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let mut names: BTreeMap<String, &Path> = BTreeMap::new();
    let mut files = Vec::with_capacity(sources.len());
    for source in sources {
        let (name, contents) = network_configuration(source)?;
        if let Some(other) = names.insert(name.clone(), source) {
            return Err(Failure::ConflistClash { first: other.to_path_buf(), second: source.clone(), name });
        }
        files.push((name, contents));
    }
    Ok(files)
}

/// A network configuration to copy: a name libcni loads (.conf, .conflist,
/// .json), and JSON with a name, which a runtime or Multus can use.
fn network_configuration(source: &Path) -> Result<(String, Vec<u8>), Failure> {
    let not_copied = |problem| Failure::Conflist { source: source.to_path_buf(), problem };
    let name = source
        .file_name()
        .and_then(OsStr::to_str)
        .map(str::to_string)
        .ok_or_else(|| not_copied(ConflistProblem::NoFileName))?;
    let extension = Path::new(&name).extension().and_then(OsStr::to_str).unwrap_or("");
    if !matches!(extension, "conf" | "conflist" | "json") || name.starts_with('.') {
        return Err(not_copied(ConflistProblem::NotLoaded));
    }
    let contents = read_small(source)?;
    let value: serde_json::Value =
        serde_json::from_slice(&contents).map_err(|e| not_copied(ConflistProblem::NotJson(e)))?;
    let named = value.get("name").and_then(serde_json::Value::as_str).is_some_and(|n| !n.is_empty());
    let plugins = value.get("plugins").is_some() || value.get("type").is_some();
    if !named || !plugins {
        return Err(not_copied(ConflistProblem::NotANetwork));
    }
    Ok((name, contents))
}

/// A file of at most [`MAX_DATA_FILE`] bytes.
pub fn read_small(path: &Path) -> Result<Vec<u8>, Failure> {
    let file = File::open(path).map_err(unreadable(path))?;
    let mut bytes = Vec::new();
    file.take(MAX_DATA_FILE + 1).read_to_end(&mut bytes).map_err(unreadable(path))?;
    if bytes.len() as u64 > MAX_DATA_FILE {
        return Err(Failure::TooLarge { path: path.to_path_buf(), limit: MAX_DATA_FILE });
    }
    Ok(bytes)
}
