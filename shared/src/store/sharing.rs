//! Every command of the suite's plugins is one call, which makes what it
//! committed durable once, before it answers; and the suite's delegates that
//! ipam-delegated runs in its own process share that call's connection to
//! each database. Each delegate's transactions stay its own: a failure rolls
//! back its transaction only, as in a process.

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

/// Runs `call` (one plugin command: for ipam-delegated, its delegates and
/// their rollback) with the stores it opens shared, opened with
/// [`Durability::AtSync`]; then syncs each store that was written, and
/// closes them. A failed sync fails a call that succeeded: its answer would
/// not be on disk. Within a call (a delegate run in ipam-delegated's
/// process), `call` just runs: the enclosing call syncs.
pub fn share_within_call<T>(call: impl FnOnce() -> Result<T>) -> Result<T> {
    if CALL.with_borrow(Option::is_some) {
        return call();
    }
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
            store.agent_record = None;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{ip, owner};
    use crate::store::DEFAULT_LOCK_TIMEOUT;

    fn synchronous(store: &AllocationStore) -> i64 {
        store.conn.pragma_query_value(None, "synchronous", |row| row.get(0)).unwrap()
    }

    /// A temporary table lives in one connection only.
    fn mark(store: &AllocationStore) {
        store.conn.execute_batch("CREATE TEMP TABLE seen(x)").unwrap();
    }

    fn marked(store: &AllocationStore) -> bool {
        store.conn.query_row("SELECT count(*) FROM temp.sqlite_master WHERE name = 'seen'", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn delegates_of_one_call_share_its_connection_and_it_syncs_once_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.db");
        let wait = LockWait::from(DEFAULT_LOCK_TIMEOUT);
        share_within_call(|| {
            let mut first = open_for_delegate(&path, wait)?;
            mark(&first);
            // Commits wait for the call's sync (NORMAL), and are recorded as unsynced.
            assert_eq!(synchronous(&first), 1);
            first.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0")))?;
            assert!(first.unsynced);
            drop(first);
            let second = open_for_delegate(&path, wait)?;
            assert!(marked(&second), "the second delegate got the first one's connection");
            assert!(second.unsynced, "nothing synced it yet");
            Ok(())
        })
        .unwrap();
        // Outside a call: a connection of its own, durable at each commit (FULL).
        let own = open_for_delegate(&path, wait).unwrap();
        assert!(!marked(&own));
        assert_eq!(synchronous(&own), 2);
        let leases = AllocationStore::open(&path, wait).unwrap().read(|tx| tx.leases_of(&owner("n", "c", "eth0")));
        assert_eq!(leases.unwrap().len(), 1, "the call's commit is there");
    }

    #[test]
    fn sync_clears_what_it_made_durable_and_a_failed_call_keeps_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.db");
        let wait = LockWait::from(DEFAULT_LOCK_TIMEOUT);
        let mut store = AllocationStore::open_with(&path, wait, Durability::AtSync).unwrap();
        assert!(!store.unsynced, "a new database is synced as it is created");
        store.write(|tx| tx.insert_lease(ip("10.0.0.1"), "p", &owner("n", "c", "eth0"))).unwrap();
        assert!(store.unsynced);
        store.sync().unwrap();
        assert!(!store.unsynced);
        let failed: Result<()> = share_within_call(|| {
            let mut store = open_for_delegate(&path, wait)?;
            store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &owner("n", "c", "eth0")))?;
            Err(crate::CniError::new(crate::Code::NoFreeAddress, "full"))
        });
        assert_eq!(failed.unwrap_err().code, crate::Code::NoFreeAddress);
    }
}
