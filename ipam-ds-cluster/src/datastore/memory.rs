//! An etcd in memory, for unit tests of `node/` without a server: the v3
//! API's transactions (compares, ranges, puts, deletes, leases) over one
//! map, with one revision per write, as etcd has them. Nodes of a test share
//! one [`Memory`]; each call gets a handle of its own ([`Memory::client`]),
//! which counts the revisions its answers carried, as a client does.
//!
//! What a test makes happen: the store down ([`Memory::set_down`]); a kill
//! right after a write ([`Memory::lose_answer`]): the write is made and its
//! answer never comes, as when the process is killed before it reads it;
//! another node acting between a call's read and its write
//! ([`Memory::before_write`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use super::etcd::Api;
use crate::etcd::{
    self, Cmp, Compare, Kv, Op, OpResponse, RangeRequest, RangeResponse, RequestCount, Txn, TxnResponse,
};

#[derive(Default)]
struct State {
    revision: i64,
    keys: BTreeMap<Vec<u8>, Kv>,
    next_lease: i64,
    leases: HashMap<i64, i64>,
    down: bool,
    /// The next write that puts a key containing this loses its answer.
    lose_answer: Option<String>,
}

/// One etcd, shared by the nodes of a test.
#[derive(Clone, Default)]
pub struct Memory {
    state: Rc<RefCell<State>>,
    /// Run once, before the next write that puts a key containing the text.
    hook: Rc<RefCell<Option<(String, Hook)>>>,
}

type Hook = Box<dyn FnOnce()>;

/// Whether `txn` puts a key that contains `text` (in either branch).
fn puts(txn: &Txn, text: &str) -> bool {
    txn.success
        .iter()
        .chain(&txn.failure)
        .any(|op| matches!(op, Op::Put { key, .. } if String::from_utf8_lossy(key).contains(text)))
}

/// One call's client of a [`Memory`].
pub struct MemoryClient {
    memory: Memory,
    revisions: Cell<Option<(i64, i64)>>,
}

impl Memory {
    pub fn client(&self) -> MemoryClient {
        MemoryClient { memory: self.clone(), revisions: Cell::new(None) }
    }

    /// Every request fails as unreachable while `down`.
    pub fn set_down(&self, down: bool) {
        self.state.borrow_mut().down = down;
    }

    /// The next transaction that puts a key containing `text` is made, and
    /// its answer is an error: the caller cannot tell it happened.
    pub fn lose_answer(&self, text: &str) {
        self.state.borrow_mut().lose_answer = Some(text.to_string());
    }

    /// Runs `then` (another node's call) just before the next transaction
    /// that puts a key containing `text`: after its caller read what it
    /// decided from.
    pub fn before_write(&self, text: &str, then: impl FnOnce() + 'static) {
        *self.hook.borrow_mut() = Some((text.to_string(), Box::new(then)));
    }

    /// Ends every lease: etcd deletes their keys.
    pub fn end_leases(&self) {
        let mut state = self.state.borrow_mut();
        let leases: Vec<i64> = state.leases.keys().copied().collect();
        state.keys.retain(|_, kv| !leases.contains(&kv.lease));
        state.leases.clear();
        state.revision += 1;
    }

    /// The keys and values under `prefix`, as text.
    pub fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        self.state
            .borrow()
            .keys
            .iter()
            .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
            .map(|(k, kv)| (String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(&kv.value).into_owned()))
            .collect()
    }
}

fn in_range(key: &[u8], start: &[u8], end: Option<&[u8]>) -> bool {
    match end {
        None => key == start,
        // etcd's "\0": every key from start on.
        Some([0]) => key >= start,
        Some(end) => key >= start && key < end,
    }
}

fn holds(cmp: Cmp, ordering: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    matches!(
        (cmp, ordering),
        (Cmp::Equal, Equal) | (Cmp::NotEqual, Less | Greater) | (Cmp::Greater, Greater) | (Cmp::Less, Less)
    )
}

impl State {
    fn compare(&self, c: &Compare) -> bool {
        match c {
            Compare::CreateRevision { key, cmp, revision } => {
                holds(*cmp, self.keys.get(key).map_or(0, |kv| kv.create_revision).cmp(revision))
            }
            Compare::ModRevision { key, cmp, revision } => {
                holds(*cmp, self.keys.get(key).map_or(0, |kv| kv.mod_revision).cmp(revision))
            }
            Compare::Value { key, cmp, value } => {
                self.keys.get(key).is_some_and(|kv| holds(*cmp, kv.value.as_slice().cmp(value.as_slice())))
            }
            Compare::UnchangedSince { prefix, revision } => {
                let end = etcd::prefix_end(prefix);
                self.keys
                    .values()
                    .filter(|kv| in_range(&kv.key, prefix, Some(&end)))
                    .all(|kv| kv.mod_revision <= *revision)
            }
        }
    }

    fn range(&self, r: &RangeRequest) -> RangeResponse {
        let found: Vec<&Kv> =
            self.keys.values().filter(|kv| in_range(&kv.key, &r.key, r.range_end.as_deref())).collect();
        let count = found.len() as i64;
        let limit = if r.limit > 0 { r.limit as usize } else { usize::MAX };
        let kvs: Vec<Kv> = found
            .into_iter()
            .take(limit)
            .map(|kv| if r.keys_only { Kv { value: Vec::new(), ..kv.clone() } } else { kv.clone() })
            .collect();
        RangeResponse { revision: self.revision, more: (kvs.len() as i64) < count, kvs, count }
    }

    fn apply(&mut self, op: &Op, revision: i64) -> OpResponse {
        match op {
            Op::Range(r) => OpResponse::Range(self.range(r)),
            Op::Put { key, value, lease } => {
                let before = self.keys.get(key);
                let kv = Kv {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: before.map_or(revision, |kv| kv.create_revision),
                    mod_revision: revision,
                    version: before.map_or(1, |kv| kv.version + 1),
                    lease: *lease,
                };
                self.keys.insert(key.clone(), kv);
                OpResponse::Put
            }
            Op::Delete { key, range_end } => {
                let before = self.keys.len();
                self.keys.retain(|k, _| !in_range(k, key, range_end.as_deref()));
                OpResponse::Delete { deleted: (before - self.keys.len()) as i64 }
            }
        }
    }
}

impl MemoryClient {
    fn saw(&self, revision: i64) {
        self.revisions.set(Some(match self.revisions.get() {
            Some((low, high)) => (low.min(revision), high.max(revision)),
            None => (revision, revision),
        }));
    }

    fn up(&self) -> Result<std::cell::RefMut<'_, State>, etcd::Error> {
        let state = self.memory.state.borrow_mut();
        if state.down {
            return Err(etcd::Error::Unavailable("the test's etcd is down".into()));
        }
        Ok(state)
    }
}

impl Api for MemoryClient {
    fn txn(&self, txn: &Txn) -> Result<TxnResponse, etcd::Error> {
        let due = self.memory.hook.borrow().as_ref().is_some_and(|(text, _)| puts(txn, text));
        if due {
            let hook = self.memory.hook.borrow_mut().take();
            if let Some((_, then)) = hook {
                then();
            }
        }
        let mut state = self.up()?;
        let succeeded = txn.compare.iter().all(|c| state.compare(c));
        let ops = if succeeded { &txn.success } else { &txn.failure };
        let writes = ops.iter().any(|op| !matches!(op, Op::Range(_)));
        if writes {
            state.revision += 1;
        }
        let revision = state.revision;
        let responses = ops.iter().map(|op| state.apply(op, revision)).collect();
        if succeeded && state.lose_answer.as_deref().is_some_and(|text| puts(txn, text)) {
            state.lose_answer = None;
            return Err(etcd::Error::Unavailable("the answer was lost (the caller was killed)".into()));
        }
        drop(state);
        self.saw(revision);
        Ok(TxnResponse { succeeded, revision, responses })
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, etcd::Error> {
        let answer = self.up()?.range(req);
        self.saw(answer.revision);
        Ok(answer)
    }

    fn read_in_txns(&self, groups: Vec<Vec<Op>>) -> Result<Vec<OpResponse>, etcd::Error> {
        let txn = Txn { success: groups.into_iter().flatten().collect(), ..Txn::default() };
        Ok(self.txn(&txn)?.responses)
    }

    fn lease_grant(&self, ttl_seconds: i64) -> Result<i64, etcd::Error> {
        let mut state = self.up()?;
        state.next_lease += 1;
        let id = state.next_lease;
        state.leases.insert(id, ttl_seconds);
        Ok(id)
    }

    fn revisions(&self) -> Option<(i64, i64)> {
        self.revisions.get()
    }

    fn forget_revisions(&self) {
        self.revisions.set(None);
    }

    fn token(&self) -> Option<String> {
        None
    }

    fn requests(&self) -> RequestCount {
        RequestCount::default()
    }
}
