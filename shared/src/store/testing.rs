//! Helpers for the store's unit tests.

use std::net::IpAddr;

use super::{AllocationStore, DEFAULT_LOCK_TIMEOUT};
use crate::args::Attachment;

/// A fresh store at `<tempdir>/ipam.db`; keep the directory alive.
pub(super) fn temp_store() -> (tempfile::TempDir, AllocationStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = AllocationStore::open(&dir.path().join("ipam.db"), DEFAULT_LOCK_TIMEOUT).unwrap();
    (dir, store)
}

pub(super) fn owner(network: &str, container_id: &str, ifname: &str) -> Attachment {
    Attachment { network: network.into(), container_id: container_id.into(), ifname: ifname.into() }
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
