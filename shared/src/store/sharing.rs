//! The suite's delegates that ipam-delegated runs in its own process share
//! the call's connection to each database, and the call makes what they
//! committed durable once, before it answers. Each delegate's transactions
//! stay its own: a failure rolls back its transaction only, as in a process.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use super::{AllocationStore, Durability, LockWait};
use crate::error::Result;

thread_local! {
    /// The stores of the running call, by the path they were opened with,
    /// when the call shares them; each is here while no delegate uses it.
    static CALL: RefCell<Option<Vec<(PathBuf, AllocationStore)>>> = const { RefCell::new(None) };
}

/// Runs `call` (one ipam-delegated call: its delegates, their rollback) with
/// the stores its in-process delegates open shared, opened with
/// [`Durability::AtSync`]; then syncs each store that was written, and
/// closes them. A failed sync fails a call that succeeded: its answer would
/// not be on disk.
pub fn share_within_call<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    CALL.set(Some(Vec::new()));
    let outcome = call();
    let stores = CALL.take().unwrap_or_default();
    let mut synced = Ok(());
    for (_, mut store) in stores {
        if let Err(e) = store.sync() {
            tracing::error!("{e}");
            synced = synced.and(Err(e));
        }
    }
    outcome.and_then(|value| synced.map(|()| value))
}

/// The store at `path` for one delegate run: the call's shared one within
/// [`share_within_call`], waiting for the lock as `wait` says; otherwise a
/// store of its own, durable at each commit.
pub fn open_for_delegate(path: &Path, wait: LockWait) -> Result<StoreHandle> {
    let shared = CALL.with_borrow_mut(|call| {
        call.as_mut().map(|stores| stores.iter().position(|(p, _)| p == path).map(|i| stores.swap_remove(i).1))
    });
    let store = match shared {
        None => return Ok(StoreHandle { store: Some(AllocationStore::open(path, wait)?), shared_as: None }),
        Some(Some(mut store)) => {
            store.lock_wait = wait;
            store.add_id = None;
            store
        }
        Some(None) => AllocationStore::open_with(path, wait, Durability::AtSync)?,
    };
    Ok(StoreHandle { store: Some(store), shared_as: Some(path.to_path_buf()) })
}

/// A store lent to one delegate run; a shared one goes back to the call
/// when dropped.
pub struct StoreHandle {
    store: Option<AllocationStore>,
    shared_as: Option<PathBuf>,
}

impl Deref for StoreHandle {
    type Target = AllocationStore;

    fn deref(&self) -> &AllocationStore {
        self.store.as_ref().unwrap_or_else(|| unreachable!("taken only by drop"))
    }
}

impl DerefMut for StoreHandle {
    fn deref_mut(&mut self) -> &mut AllocationStore {
        self.store.as_mut().unwrap_or_else(|| unreachable!("taken only by drop"))
    }
}

impl Drop for StoreHandle {
    fn drop(&mut self) {
        if let (Some(path), Some(store)) = (self.shared_as.take(), self.store.take()) {
            CALL.with_borrow_mut(|call| match call {
                Some(stores) => stores.push((path, store)),
                // The call ended first, which it cannot: its delegates run
                // inside it. Dropping the store is all there is to do.
                None => drop(store),
            });
        }
    }
}
