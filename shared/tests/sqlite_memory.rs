//! SQLite allocates through the program's allocator once the store has set
//! it up (shared::store::use_program_allocator): the installed build relies
//! on it to keep SQLite off musl's malloc. This test program's allocator
//! counts the bytes the test's thread holds, so SQLite's blocks show in the
//! count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use rusqlite::ffi;

struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the test's thread: the harness's own thread allocates too (its
    /// output, its timers), and on a loaded machine it did so mid-test.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn counted() -> bool {
    COUNTED.try_with(Cell::get).unwrap_or(false)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            HELD.fetch_add(layout.size(), Ordering::SeqCst);
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            HELD.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted() {
            HELD.fetch_add(new_size, Ordering::SeqCst);
            HELD.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BLOCK: usize = 3 << 20;

#[test]
fn sqlite_allocates_frees_and_resizes_through_the_programs_allocator() {
    shared::store::use_program_allocator();
    // This thread only, which makes no allocation of its own between the
    // readings, so the count moves by SQLite's calls alone.
    COUNTED.with(|c| c.set(true));
    let before = HELD.load(Ordering::SeqCst);
    let p = unsafe { ffi::sqlite3_malloc64(BLOCK as u64) }.cast::<u8>();
    assert!(!p.is_null());
    let held = HELD.load(Ordering::SeqCst) - before;
    assert!((BLOCK..BLOCK + 64).contains(&held), "SQLite's block is not the program's: held {held} more bytes");
    assert!(unsafe { ffi::sqlite3_msize(p.cast()) } as usize >= BLOCK);

    unsafe { p.write_bytes(0xA5, BLOCK) };
    let grown = unsafe { ffi::sqlite3_realloc64(p.cast(), 2 * BLOCK as u64) }.cast::<u8>();
    assert!(!grown.is_null());
    let kept = unsafe { std::slice::from_raw_parts(grown, BLOCK) };
    assert!(kept.iter().all(|&b| b == 0xA5), "realloc lost the block's contents");
    assert!(unsafe { ffi::sqlite3_msize(grown.cast()) } as usize >= 2 * BLOCK);
    assert!(HELD.load(Ordering::SeqCst) - before >= 2 * BLOCK);

    unsafe { ffi::sqlite3_free(grown.cast()) };
    assert_eq!(HELD.load(Ordering::SeqCst), before, "SQLite's free did not give the block back");

    // And a database works on it.
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("db")).unwrap();
    conn.execute_batch("CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('a'), ('b');").unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0)).unwrap();
    assert_eq!(n, 2);
}
