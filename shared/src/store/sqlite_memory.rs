//! SQLite allocates through the program's allocator (Rust's global one)
//! instead of the C library's malloc, so that the two share one heap. In the
//! installed build (musl, see shared::heap) musl's malloc
//! would hand memory back to the kernel at nearly every free, and a heap of
//! its own would fault in pages of its own: every page a short-lived process
//! touches for the first time costs it a page fault.

use std::alloc::{alloc, dealloc, realloc, Layout};
use std::ffi::{c_int, c_void};
use std::sync::Once;

use rusqlite::ffi;

/// Each block starts with its size, which `free` and `xSize` need; the
/// header keeps the 8-byte alignment SQLite asks of its allocator.
const HEADER: usize = 8;
const ALIGN: usize = 8;

/// Makes SQLite allocate through Rust's global allocator. Must run before
/// SQLite is first used in the process; later calls do nothing.
pub fn use_program_allocator() {
    static CONFIGURED: Once = Once::new();
    CONFIGURED.call_once(|| {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(sqlite_malloc),
            xFree: Some(sqlite_free),
            xRealloc: Some(sqlite_realloc),
            xSize: Some(sqlite_size),
            xRoundup: Some(sqlite_roundup),
            xInit: Some(sqlite_init),
            xShutdown: Some(sqlite_shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SQLite copies the methods. It refuses (SQLITE_MISUSE) only once it
        // has been initialized, and then keeps its own allocator, which
        // works as well.
        let refused = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &methods as *const _) };
        if refused != ffi::SQLITE_OK {
            tracing::debug!("SQLite keeps the C library's allocator: it was initialized already");
        }
    });
}

fn layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(HEADER)?, ALIGN).ok()
}

unsafe extern "C" fn sqlite_malloc(size: c_int) -> *mut c_void {
    let Some(layout) = usize::try_from(size).ok().and_then(layout) else { return std::ptr::null_mut() };
    let base = alloc(layout);
    if base.is_null() {
        return base.cast();
    }
    base.cast::<usize>().write(layout.size() - HEADER);
    base.add(HEADER).cast()
}

/// The block's start and its layout, from a pointer SQLite was given.
unsafe fn block(p: *mut c_void) -> (*mut u8, Layout) {
    let base = p.cast::<u8>().sub(HEADER);
    let size = base.cast::<usize>().read();
    (base, Layout::from_size_align_unchecked(size + HEADER, ALIGN))
}

unsafe extern "C" fn sqlite_free(p: *mut c_void) {
    if !p.is_null() {
        let (base, layout) = block(p);
        dealloc(base, layout);
    }
}

unsafe extern "C" fn sqlite_realloc(p: *mut c_void, size: c_int) -> *mut c_void {
    if p.is_null() {
        return sqlite_malloc(size);
    }
    let Some(new) = usize::try_from(size).ok().and_then(layout) else { return std::ptr::null_mut() };
    let (base, old) = block(p);
    let moved = realloc(base, old, new.size());
    if moved.is_null() {
        return moved.cast();
    }
    moved.cast::<usize>().write(new.size() - HEADER);
    moved.add(HEADER).cast()
}

unsafe extern "C" fn sqlite_size(p: *mut c_void) -> c_int {
    if p.is_null() {
        return 0;
    }
    c_int::try_from(block(p).1.size() - HEADER).unwrap_or(c_int::MAX)
}

extern "C" fn sqlite_roundup(size: c_int) -> c_int {
    size.saturating_add(ALIGN as c_int - 1) & !(ALIGN as c_int - 1)
}

extern "C" fn sqlite_init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

extern "C" fn sqlite_shutdown(_: *mut c_void) {}
