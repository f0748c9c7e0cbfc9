//! ipam-bench-null: the floor program's build doing nothing. Its time is
//! the start-up and exit of a program of that build (C library, linking,
//! the Rust runtime's set-up), which the benchmark subtracts from the floor
//! program's to tell start-up from work.

fn main() {}

/// The suite's program's allocator (shared::heap).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: shared::heap::Heap = shared::heap::Heap;
