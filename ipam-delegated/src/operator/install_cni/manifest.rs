//! `<bin-dir>/.ipam-delegated-installed`: what the installer wrote, so that
//! `--uninstall` removes exactly that, and a data file is known as ours while
//! its content is what was written.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ipam_ds_cluster::blocks::fnv1a;
use serde::{Deserialize, Serialize};

use super::super::failure::{Failure, FileAction};
use super::super::report::{to_json, NAME};

pub const MANIFEST: &str = ".ipam-delegated-installed";

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub installed_by: String,
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    pub path: PathBuf,
    pub kind: Kind,
    /// For a data file: FNV-1a 64 of the content written, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fnv1a64: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The program itself: ours while it holds the marker.
    Program,
    /// A delegate's name: ours while it is a symlink to `ipam-delegated`.
    Link,
    /// The node name, a conflist, an etcd file: ours while its content is
    /// what was written.
    File,
    /// A directory the installer created: removed when empty.
    Dir,
}

impl Entry {
    pub fn new(path: &Path, kind: Kind) -> Entry {
        Entry { path: path.to_path_buf(), kind, fnv1a64: None }
    }

    pub fn file(path: &Path, contents: &[u8]) -> Entry {
        Entry { path: path.to_path_buf(), kind: Kind::File, fnv1a64: Some(fnv1a64(contents)) }
    }

    /// Whether `contents` are what this entry says was written.
    pub fn wrote(&self, contents: &[u8]) -> bool {
        self.kind == Kind::File && self.fnv1a64.as_deref() == Some(&fnv1a64(contents))
    }
}

impl Manifest {
    /// The manifest of this build, of `entries` in path order.
    pub fn of(entries: BTreeMap<PathBuf, Entry>) -> Manifest {
        Manifest {
            installed_by: format!("{NAME} {}", env!("CARGO_PKG_VERSION")),
            entries: entries.into_values().collect(),
        }
    }

    /// The entries by path.
    pub fn recorded(&self) -> BTreeMap<PathBuf, Entry> {
        self.entries.iter().map(|e| (e.path.clone(), e.clone())).collect()
    }

    /// The file's text: pretty JSON and a final newline, as every report's.
    pub fn text(&self) -> Result<String, Failure> {
        to_json(self)
    }
}

pub fn path(bin_dir: &Path) -> PathBuf {
    bin_dir.join(MANIFEST)
}

pub fn read(path: &Path) -> Result<Option<Manifest>, Failure> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| Failure::Manifest { path: path.to_path_buf(), error }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }),
    }
}

/// FNV-1a, 64 bits, in hex: stable across builds (std's hasher is not), and
/// enough to tell the file written from one edited since.
fn fnv1a64(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_is_the_published_function() {
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn a_file_entry_knows_its_contents_and_nothing_else() {
        let entry = Entry::file(Path::new("/etc/cni/ipam-delegated/node-name"), b"node-a\n");
        assert!(entry.wrote(b"node-a\n"));
        assert!(!entry.wrote(b"node-b\n"));
        assert!(!Entry::new(Path::new("/opt/cni/bin/ipam-delegated"), Kind::Program).wrote(b""));
    }
}
