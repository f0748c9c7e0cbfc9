//! The tests' own harness of a real Kubernetes API server, reused as it is:
//! `tests/kube_harness/mod.rs` (`KubeApi`: start, apply, request, stop) and
//! the Go builder it calls, `tests/support/go.rs` (kube-test-server built
//! from the Go module tests/kube once per change, into target/kube-test/,
//! with the machine's Go and the module proxy), both included by `#[path]`
//! (main.rs, here). Including the two files keeps one builder and one
//! harness for the tests and the benchmark, without moving test code into a
//! crate or running `cargo test --no-run` to get at its product; the cost is
//! that this module must provide what they ask of the tests' `support`
//! module: its name, [`repo`] and [`target_dir`].

use std::path::{Path, PathBuf};

#[path = "../../tests/support/go.rs"]
pub mod go;

/// The repository's root (the workspace of this crate).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root")
}

/// The target directory the benchmark runs from (`<target>/release/ipam-bench`,
/// as `setup::build` finds it), so that kube-test-server is the one the tests
/// built in `<target>/kube-test/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors().nth(2).expect("<target>/release/ipam-bench").to_path_buf()
}
