//! The installed build's allocator: dlmalloc (Rust's own allocator on wasm),
//! a dense heap, behind a spin lock; SQLite allocates through it too
//! ([`crate::store::use_program_allocator`]).
//!
//! The installed build is static on musl (scripts/build), whose allocator
//! hands memory back to the kernel at nearly every free: 58 mmap and 49
//! munmap calls in one full-stack ADD. dlmalloc keeps its memory and packs
//! blocks of every size together. A call lives a few milliseconds, and each
//! page it touches first costs a page fault (1.8 µs each on the benchmark's
//! machine): a full-stack ADD touched 218 pages with mimalloc, whose every
//! size class begins a page of its own, and 150 with dlmalloc.
//!
//! The lock is a spin lock of its own. A call does its work on one
//! thread, so the lock is nearly never contended, and dlmalloc's own global
//! lock, a pthread mutex, cost an ADD 160K of its 1.4M instructions (musl's
//! unlock is an atomic swap and a wake check, for every allocation and
//! free); an uncontended spin lock is one compare-and-swap and a store.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use dlmalloc::Dlmalloc;

/// The process's heap, as a global allocator:
/// `#[global_allocator] static ALLOCATOR: shared::heap::Heap = shared::heap::Heap;`
pub struct Heap;

struct Locked {
    busy: AtomicBool,
    heap: UnsafeCell<Dlmalloc>,
}

// SAFETY: `heap` is reached only through `with`, which holds `busy`.
unsafe impl Sync for Locked {}

static HEAP: Locked = Locked { busy: AtomicBool::new(false), heap: UnsafeCell::new(Dlmalloc::new()) };

/// Releases the lock, also if what ran under it panicked.
struct Unlock<'a>(&'a AtomicBool);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Locked {
    fn with<T>(&self, f: impl FnOnce(&mut Dlmalloc) -> T) -> T {
        let mut spins = 0u32;
        while self.busy.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            // Another thread is allocating: spin a little, then let it run
            // (it may have been preempted holding the lock).
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let _unlock = Unlock(&self.busy);
        // SAFETY: the lock is held, so this is the only reference.
        f(unsafe { &mut *self.heap.get() })
    }
}

// SAFETY: dlmalloc returns blocks of the size and alignment asked for, or
// null; each call runs alone under the lock.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP.with(|heap| heap.malloc(layout.size(), layout.align()))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        HEAP.with(|heap| heap.calloc(layout.size(), layout.align()))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HEAP.with(|heap| heap.free(ptr, layout.size(), layout.align()))
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HEAP.with(|heap| heap.realloc(ptr, layout.size(), layout.align(), new_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks keep their contents and alignment through growth, and many
    /// threads allocating at once each get blocks of their own.
    #[test]
    fn blocks_are_aligned_kept_and_private_under_threads() {
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..2000usize {
                        let align = 1 << (round % 7);
                        let layout = Layout::from_size_align(1 + round % 300, align).unwrap();
                        unsafe {
                            let p = Heap.alloc(layout);
                            assert!(!p.is_null() && (p as usize).is_multiple_of(align));
                            p.write_bytes(t, layout.size());
                            let grown = Heap.realloc(p, layout, layout.size() * 3);
                            assert!(!grown.is_null() && (grown as usize).is_multiple_of(align));
                            let kept = std::slice::from_raw_parts(grown, layout.size());
                            assert!(kept.iter().all(|&b| b == t), "thread {t} lost its bytes");
                            Heap.dealloc(grown, Layout::from_size_align(layout.size() * 3, align).unwrap());
                            let zeroed = Heap.alloc_zeroed(layout);
                            assert!(std::slice::from_raw_parts(zeroed, layout.size()).iter().all(|&b| b == 0));
                            Heap.dealloc(zeroed, layout);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
