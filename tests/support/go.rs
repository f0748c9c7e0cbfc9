//! The Go programs the tests run, each built from a Go module of the
//! repository (tests/runtime: the libcni runtime of tests/chain.rs;
//! tests/kube: the API server of tests/kube_harness) with the machine's Go,
//! its dependencies those that the module's go.mod and go.sum pin, fetched
//! through the Go module proxy into Go's module cache.
//!
//! Built once per change, not once per test: into target/<dir>/, under a file
//! lock (tests of one binary run at once, and binaries may too), and again
//! only when the stamp beside the executable differs: a hash of the Go
//! version, go.mod, go.sum and the module's .go files.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{repo, target_dir};

/// Where the go command is looked for: PATH, then where the Go project's
/// own installation puts it (a machine whose PATH lacks it, or whose PATH
/// has an older one first, such as Debian's golang-go).
const GO_CANDIDATES: [&str; 2] = ["go", "/usr/local/go/bin/go"];

/// The executable `exe` of the Go module at `module` (relative to the
/// repository), built into target/`dir`/ if it is not there for these
/// sources yet. Fails the test, saying what is missing, when no go command
/// of at least the module's `go` version is found, or the build fails.
pub fn build(module: &str, dir: &str, exe: &str) -> PathBuf {
    build_package(module, ".", dir, exe)
}

/// As [`build`], of the main package `package` of the module's build list
/// rather than of the module's own: a program of a dependency it pins
/// (bench/whereabouts: whereabouts' plugin, a `tool` of its go.mod).
pub fn build_package(module: &str, package: &str, dir: &str, exe: &str) -> PathBuf {
    let source = repo().join(module);
    let out_dir = target_dir().join(dir);
    fs::create_dir_all(&out_dir).unwrap_or_else(|e| panic!("creating {}: {e}", out_dir.display()));
    let lock = File::create(out_dir.join(".lock")).unwrap_or_else(|e| panic!("{}/.lock: {e}", out_dir.display()));
    fs2::FileExt::lock_exclusive(&lock).unwrap_or_else(|e| panic!("locking {}/.lock: {e}", out_dir.display()));

    let (go, version) = go_for(&source);
    let stamp_file = out_dir.join(format!("{exe}.stamp"));
    let stamp = stamp(&source, &version);
    let exe_path = out_dir.join(exe);
    if exe_path.is_file() && fs::read_to_string(&stamp_file).is_ok_and(|s| s == stamp) {
        return exe_path;
    }
    let started = Instant::now();
    let tmp = out_dir.join(format!("{exe}.tmp"));
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&tmp)
        .arg(package)
        .current_dir(&source)
        // go.sum must already pin every module: a build never changes it.
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        // The Go found, never another one fetched because go.mod asks for it.
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {go} build in {}: {e}", source.display()));
    assert!(
        out.status.success(),
        "{go} build of {} failed ({}):\n{}{}",
        source.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    fs::rename(&tmp, &exe_path).unwrap_or_else(|e| panic!("renaming {} to {exe}: {e}", tmp.display()));
    fs::write(&stamp_file, &stamp).unwrap_or_else(|e| panic!("{}: {e}", stamp_file.display()));
    eprintln!("built {} from {module} with {version} in {:.1?}", exe_path.display(), started.elapsed());
    exe_path
}

/// Where Go's module cache holds the module `dependency` at the version the
/// Go module at `module` pins (its files as released: manifests, CRDs),
/// fetched through the module proxy if it is not there yet.
pub fn module_dir(module: &str, dependency: &str) -> PathBuf {
    let source = repo().join(module);
    let (go, _) = go_for(&source);
    let out = Command::new(&go)
        .args(["mod", "download", "-json", dependency])
        .current_dir(&source)
        .env("GOFLAGS", "-mod=readonly")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {go} mod download {dependency} in {}: {e}", source.display()));
    let answer = String::from_utf8_lossy(&out.stdout);
    // `"Dir": "/root/go/pkg/mod/…@v1.2.3",` in the JSON it prints.
    let dir = answer.lines().find_map(|l| l.trim().strip_prefix("\"Dir\": \"")?.strip_suffix("\","));
    match dir {
        Some(dir) if out.status.success() => PathBuf::from(dir),
        _ => panic!(
            "{go} mod download {dependency} in {} ({}): {answer}{}",
            source.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The first go command of [`GO_CANDIDATES`] whose version is at least the
/// one the module's go.mod names, and its `go version` line.
fn go_for(module: &Path) -> (String, String) {
    let go_mod = module.join("go.mod");
    let text = fs::read_to_string(&go_mod).unwrap_or_else(|e| panic!("{}: {e}", go_mod.display()));
    let needed = text
        .lines()
        .find_map(|l| l.strip_prefix("go "))
        .and_then(release)
        .unwrap_or_else(|| panic!("{}: no `go` line", go_mod.display()));
    let mut found = Vec::new();
    for go in GO_CANDIDATES {
        let Ok(out) = Command::new(go).arg("version").env("GOTOOLCHAIN", "local").stderr(Stdio::null()).output() else {
            continue;
        };
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // "go version go1.26.8 linux/amd64"
        match version.split_whitespace().nth(2).and_then(|v| v.strip_prefix("go")).and_then(release) {
            Some(have) if out.status.success() && have >= needed => return (go.to_string(), version),
            _ => found.push(format!("{go}: {version}")),
        }
    }
    panic!(
        "{} needs Go {}.{} or newer (its go.mod), to build the program the test runs; found {}. Install Go (the \
         project's machines have it in /usr/local/go/bin) and make the Go module proxy reachable.",
        module.display(),
        needed.0,
        needed.1,
        if found.is_empty() { "no go command".to_string() } else { found.join("; ") }
    );
}

/// "1.26.0" or "1.26" as (1, 26).
fn release(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    Some((major, minor))
}

/// The hash of what the executable is built from: the Go version, go.mod,
/// go.sum and every .go file of the module, by name.
fn stamp(module: &Path, go_version: &str) -> String {
    let mut files: Vec<PathBuf> = fs::read_dir(module)
        .unwrap_or_else(|e| panic!("{}: {e}", module.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name == "go.mod" || name == "go.sum" || name.ends_with(".go")
        })
        .collect();
    files.sort();
    let mut hasher = DefaultHasher::new();
    go_version.hash(&mut hasher);
    for file in files {
        file.file_name().hash(&mut hasher);
        fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())).hash(&mut hasher);
    }
    format!("{:016x}\n", hasher.finish())
}
