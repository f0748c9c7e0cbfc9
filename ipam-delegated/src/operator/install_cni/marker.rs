//! How the installer recognises a build of this program: by bytes that every
//! build holds, and nothing else should. A foreign file is never run to find
//! out what it is.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The bytes every build of this program holds. Found through `black_box`,
/// so that the optimiser keeps them as one run of bytes in the file.
pub const MARKER: &[u8] = b"ipam-delegated build marker: 6f1d2c84-install-cni-v1";

/// Whether `bytes` (a file read whole: this program, or one of its size) hold
/// the marker.
pub fn in_bytes(bytes: &[u8]) -> bool {
    contains(bytes, std::hint::black_box(MARKER))
}

/// Whether the file at `path` holds the marker: read in pieces, so that a
/// large foreign file costs no more memory than a piece.
pub fn in_file(path: &Path) -> io::Result<bool> {
    let marker = std::hint::black_box(MARKER);
    let mut file = File::open(path)?;
    let mut window: Vec<u8> = Vec::with_capacity(64 * 1024 + marker.len());
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut piece)?;
        if n == 0 {
            return Ok(false);
        }
        window.extend_from_slice(&piece[..n]);
        if contains(&window, marker) {
            return Ok(true);
        }
        let keep = window.len().min(marker.len() - 1);
        window.drain(..window.len() - keep);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_found_across_pieces_and_not_in_other_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = dir.path().join("ours");
        let mut bytes = vec![7u8; 64 * 1024 - 10];
        bytes.extend_from_slice(MARKER);
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&ours, &bytes).expect("write");
        assert!(in_file(&ours).expect("read"));
        assert!(in_bytes(&bytes));
        let other = dir.path().join("other");
        std::fs::write(&other, &bytes[..bytes.len() - 4]).expect("write");
        assert!(!in_file(&other).expect("read"));
        assert!(!in_bytes(&bytes[..bytes.len() - 4]));
    }
}
