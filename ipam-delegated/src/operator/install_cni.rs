//! `install-cni`: the installer a Kubernetes DaemonSet runs on every node
//! (deploy/kubernetes/). It copies this very program into the host's CNI
//! plugin directory, with the delegates' names as symlinks to it (the fast
//! layout of scripts/install), writes the node's name where ipam.cluster.nodeFile
//! reads it, copies etcd's TLS files and password and any network
//! configurations, then waits for SIGTERM as DaemonSets expect.
//!
//! Every file is written to a temporary name in its own directory, fsynced and
//! renamed over the old one: a runtime that starts the plugin at that moment
//! runs the old program or the new one, never half of one, and a plugin
//! process still running from the old file keeps running (its inode lives on).
//!
//! What is ours: a program file that holds [`MARKER`] (every build of this
//! program does, and nothing else should), a symlink whose target is exactly
//! `ipam-delegated`, and a data file whose content is what the manifest
//! `<bin-dir>/.ipam-delegated-installed` says this installer wrote. Nothing
//! else is replaced without `--force`, and `--uninstall` removes only files
//! that are still ours. A foreign file is never run to find out what it is.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{symlink, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use super::failure::{ConflistProblem, Failure, FileAction};
use super::report::{self, Report, NAME};
use crate::builtin;

pub const MANIFEST: &str = ".ipam-delegated-installed";
pub const DEFAULT_BIN_DIR: &str = "/host/opt/cni/bin";
pub const DEFAULT_NODE_FILE: &str = "/host/etc/cni/ipam-delegated/node-name";
pub const DEFAULT_CONF_DIR: &str = "/host/etc/cni/net.d";
pub const DEFAULT_ETCD_DIR: &str = "/host/etc/cni/ipam-delegated/etcd";

/// The bytes every build of this program holds, by which the installer
/// recognises a file as one of ours. Found through `black_box`, so that the
/// optimiser keeps them as one run of bytes in the file.
pub const MARKER: &[u8] = b"ipam-delegated build marker: 6f1d2c84-install-cni-v1";

/// Where the program is read from: the running process's own file.
const SELF_EXE: &str = "/proc/self/exe";

/// The largest conflist or secret file copied (libcni and etcd's files are small).
const MAX_DATA_FILE: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub bin_dir: PathBuf,
    pub node_file: PathBuf,
    pub conflists: Vec<PathBuf>,
    pub conf_dir: PathBuf,
    pub etcd_secret: Option<PathBuf>,
    pub etcd_dir: PathBuf,
    pub force: bool,
    pub once: bool,
    pub uninstall: bool,
}

/// Installs (or uninstalls), prints what it did, then waits for SIGTERM or
/// SIGINT unless `--once`. The signals are blocked first, so that one that
/// comes during the installation ends the wait at once instead of the
/// installation halfway.
pub fn main(options: &Options) -> ExitCode {
    let signals = if options.once { None } else { Some(block_signals()) };
    let outcome = if options.uninstall { uninstall(options) } else { install(options) };
    let report = match outcome {
        Ok(report) => report,
        Err(failure) => return report::finish(Err(failure)),
    };
    let code = report::print(&report.stdout);
    match signals {
        None => code,
        Some(Err(e)) => report::finish(Err(Failure::BlockSignals(e))),
        Some(Ok(set)) => {
            println!("{NAME} install-cni: done; waiting for SIGTERM or SIGINT");
            match wait_for(&set) {
                Ok(signal) => {
                    println!("{NAME} install-cni: signal {signal}, exiting");
                    ExitCode::SUCCESS
                }
                Err(e) => report::finish(Err(Failure::WaitForSignal(e))),
            }
        }
    }
}

fn block_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; the
    // calls only read and write the set given and this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        match libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) {
            0 => Ok(set),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

fn wait_for(set: &libc::sigset_t) -> io::Result<libc::c_int> {
    let mut signal: libc::c_int = 0;
    // SAFETY: set was initialised by block_signals; signal is written by sigwait.
    match unsafe { libc::sigwait(set, &mut signal) } {
        0 => Ok(signal),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

// ---------------------------------------------------------------- manifest

/// What the installer wrote, so that `--uninstall` removes exactly that.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Manifest {
    installed_by: String,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    path: PathBuf,
    kind: Kind,
    /// For a data file: FNV-1a 64 of the content written, in hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fnv1a64: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// The program itself: ours while it holds the marker.
    Program,
    /// A delegate's name: ours while it is a symlink to `ipam-delegated`.
    Link,
    /// The node name, a conflist, an etcd file: ours while its content is
    /// what was written.
    File,
    /// A directory the installer created: removed when empty.
    Dir,
}

fn manifest_path(options: &Options) -> PathBuf {
    options.bin_dir.join(MANIFEST)
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>, Failure> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| Failure::Manifest { path: path.to_path_buf(), error }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }),
    }
}

/// FNV-1a, 64 bits: stable across builds (std's hasher is not), and enough
/// to tell the file written from one edited since.
fn fnv1a64(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

// ---------------------------------------------------------------- install

/// One change to make, decided before any is made.
enum Step {
    Program { path: PathBuf },
    Link { path: PathBuf },
    File { path: PathBuf, contents: Vec<u8>, mode: u32 },
}

struct Plan {
    steps: Vec<Step>,
    /// Lines for the report: what is already as it should be.
    unchanged: Vec<String>,
    refusals: Vec<String>,
    /// Data files that must stay recorded (unchanged and ours).
    keep: Vec<Entry>,
}

fn install(options: &Options) -> Result<Report, Failure> {
    let node = node_name()?;
    let program = own_program()?;
    let manifest_file = manifest_path(options);
    let previous = read_manifest(&manifest_file)?.unwrap_or_default();
    let recorded: BTreeMap<PathBuf, Entry> = previous.entries.iter().map(|e| (e.path.clone(), e.clone())).collect();

    let mut plan = Plan { steps: Vec::new(), unchanged: Vec::new(), refusals: Vec::new(), keep: Vec::new() };
    let program_path = options.bin_dir.join(NAME);
    plan_program(&mut plan, &program_path, &program, options.force)?;
    for delegate in builtin::names() {
        plan_link(&mut plan, &options.bin_dir.join(delegate), options.force)?;
    }
    plan_file(&mut plan, &recorded, &options.node_file, format!("{node}\n").into_bytes(), 0o644, options.force)?;
    if let Some(secret) = &options.etcd_secret {
        for (name, contents) in secret_files(secret)? {
            plan_file(&mut plan, &recorded, &options.etcd_dir.join(name), contents, 0o600, options.force)?;
        }
    }
    let mut names: BTreeMap<String, &Path> = BTreeMap::new();
    for source in &options.conflists {
        let (name, contents) = network_configuration(source)?;
        if let Some(other) = names.insert(name.clone(), source) {
            return Err(Failure::ConflistClash { first: other.to_path_buf(), second: source.clone(), name });
        }
        plan_file(&mut plan, &recorded, &options.conf_dir.join(name), contents, 0o644, options.force)?;
    }
    if !plan.refusals.is_empty() {
        return Err(Failure::NothingInstalled(plan.refusals));
    }

    // Directories first (recorded when created), then the manifest, naming
    // everything about to be written, then the files: a run cut short leaves
    // nothing that --uninstall does not know of.
    let mut created = Vec::new();
    let mut dirs: Vec<(PathBuf, u32)> = vec![(options.bin_dir.clone(), 0o755)];
    for step in &plan.steps {
        if let Step::File { path, .. } = step {
            let private = path.starts_with(&options.etcd_dir);
            dirs.push((parent(path)?.to_path_buf(), if private { 0o700 } else { 0o755 }));
        }
    }
    for (dir, mode) in dirs {
        created.extend(create_dirs(&dir, mode)?);
    }

    let mut entries: BTreeMap<PathBuf, Entry> = recorded;
    for path in created.iter() {
        entries.insert(path.clone(), Entry { path: path.clone(), kind: Kind::Dir, fnv1a64: None });
    }
    for entry in plan.keep.drain(..) {
        entries.insert(entry.path.clone(), entry);
    }
    for step in &plan.steps {
        let entry = match step {
            Step::Program { path } => Entry { path: path.clone(), kind: Kind::Program, fnv1a64: None },
            Step::Link { path } => Entry { path: path.clone(), kind: Kind::Link, fnv1a64: None },
            Step::File { path, contents, .. } => {
                Entry { path: path.clone(), kind: Kind::File, fnv1a64: Some(fnv1a64(contents)) }
            }
        };
        entries.insert(entry.path.clone(), entry);
    }
    // The program and its links are always recorded: a build of ours found
    // in place (scripts/install's) is taken over.
    for (path, kind) in std::iter::once((program_path.clone(), Kind::Program))
        .chain(builtin::names().map(|d| (options.bin_dir.join(d), Kind::Link)))
    {
        entries.entry(path.clone()).or_insert(Entry { path, kind, fnv1a64: None });
    }
    let manifest = Manifest {
        installed_by: format!("{NAME} {}", env!("CARGO_PKG_VERSION")),
        entries: entries.into_values().collect(),
    };
    let text = serde_json::to_string_pretty(&manifest)
        .map_err(|e| Failure::Bug(format!("cannot render the manifest: {e}")))?;
    let text = format!("{text}\n");
    if fs::read(&manifest_file).ok().as_deref() != Some(text.as_bytes()) {
        write_file(&manifest_file, text.as_bytes(), 0o644)?;
    }

    let mut out = String::new();
    for dir in &created {
        out += &format!("created {}\n", dir.display());
    }
    for step in &plan.steps {
        match step {
            Step::Program { path } => {
                write_file(path, &program, 0o755)?;
                out += &format!("installed {}\n", path.display());
            }
            Step::Link { path } => {
                replace_with_link(path)?;
                out += &format!("linked {} -> {NAME}\n", path.display());
            }
            Step::File { path, contents, mode } => {
                write_file(path, contents, *mode)?;
                out += &format!("wrote {}\n", path.display());
            }
        }
    }
    for line in &plan.unchanged {
        out += line;
        out.push('\n');
    }
    out += &format!("node name {node} in {}\n", options.node_file.display());
    Ok(Report::fine(out))
}

fn node_name() -> Result<String, Failure> {
    let name = std::env::var_os("NODE_NAME").ok_or(Failure::NoNodeName)?;
    match name.to_str() {
        Some(name) if ipam_ds_cluster::settings::is_node_name(name) => Ok(name.to_string()),
        _ => Err(Failure::BadNodeName(name)),
    }
}

/// This program's bytes, as the kernel runs them.
fn own_program() -> Result<Vec<u8>, Failure> {
    let bytes = fs::read(SELF_EXE).map_err(|error| Failure::OwnProgram { path: PathBuf::from(SELF_EXE), error })?;
    if !contains(&bytes, std::hint::black_box(MARKER)) {
        return Err(Failure::Bug(format!("this program ({SELF_EXE}) does not hold its own build marker")));
    }
    Ok(bytes)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether the file at `path` holds the marker: read in pieces, so that a
/// large foreign file costs no more memory than a piece.
fn has_marker(path: &Path) -> io::Result<bool> {
    let marker = std::hint::black_box(MARKER);
    let mut file = File::open(path)?;
    let mut window: Vec<u8> = Vec::with_capacity(64 * 1024 + marker.len());
    let mut piece = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut piece)?;
        if n == 0 {
            return Ok(false);
        }
        window.extend_from_slice(&piece[..n]);
        if contains(&window, marker) {
            return Ok(true);
        }
        let keep = window.len().min(marker.len() - 1);
        window.drain(..window.len() - keep);
    }
}

fn lstat(path: &Path) -> Result<Option<fs::Metadata>, Failure> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }),
    }
}

fn io_failure(path: &Path) -> impl Fn(io::Error) -> Failure + '_ {
    move |error| Failure::File { action: FileAction::Read, path: path.to_path_buf(), error }
}

fn foreign(path: &Path, what: &str) -> String {
    format!("{} is {what}, not installed by install-cni (--force replaces it)", path.display())
}

fn plan_program(plan: &mut Plan, path: &Path, program: &[u8], force: bool) -> Result<(), Failure> {
    match lstat(path)? {
        None => plan.steps.push(Step::Program { path: path.to_path_buf() }),
        Some(meta) if meta.is_file() => {
            if meta.len() == program.len() as u64 && fs::read(path).map_err(io_failure(path))? == program {
                plan.unchanged.push(format!("unchanged {}", path.display()));
            } else if has_marker(path).map_err(io_failure(path))? || force {
                plan.steps.push(Step::Program { path: path.to_path_buf() });
            } else {
                plan.refusals.push(foreign(path, "a file that is not an ipam-delegated build"));
            }
        }
        Some(meta) if meta.file_type().is_symlink() => {
            if force {
                plan.steps.push(Step::Program { path: path.to_path_buf() });
            } else {
                plan.refusals.push(foreign(path, &format!("a symbolic link ({})", link_target(path))));
            }
        }
        Some(_) => plan.refusals.push(format!("{} is neither a file nor a symbolic link", path.display())),
    }
    Ok(())
}

fn link_target(path: &Path) -> String {
    fs::read_link(path).map_or_else(|e| format!("unreadable: {e}"), |t| format!("to {}", t.display()))
}

fn plan_link(plan: &mut Plan, path: &Path, force: bool) -> Result<(), Failure> {
    match lstat(path)? {
        None => plan.steps.push(Step::Link { path: path.to_path_buf() }),
        Some(meta) if meta.file_type().is_symlink() => {
            if fs::read_link(path).map_err(io_failure(path))? == Path::new(NAME) {
                plan.unchanged.push(format!("unchanged {} -> {NAME}", path.display()));
            } else if force {
                plan.steps.push(Step::Link { path: path.to_path_buf() });
            } else {
                plan.refusals.push(foreign(path, &format!("a symbolic link ({})", link_target(path))));
            }
        }
        Some(meta) if meta.is_file() => {
            // A copy of ours (an install file by file) becomes the link.
            if has_marker(path).map_err(io_failure(path))? || force {
                plan.steps.push(Step::Link { path: path.to_path_buf() });
            } else {
                plan.refusals.push(foreign(path, "a file that is not an ipam-delegated build"));
            }
        }
        Some(_) => plan.refusals.push(format!("{} is neither a file nor a symbolic link", path.display())),
    }
    Ok(())
}

fn plan_file(
    plan: &mut Plan,
    recorded: &BTreeMap<PathBuf, Entry>,
    path: &Path,
    contents: Vec<u8>,
    mode: u32,
    force: bool,
) -> Result<(), Failure> {
    let ours = |current: &[u8]| {
        recorded.get(path).is_some_and(|e| e.kind == Kind::File && e.fnv1a64.as_deref() == Some(&fnv1a64(current)))
    };
    match lstat(path)? {
        None => plan.steps.push(Step::File { path: path.to_path_buf(), contents, mode }),
        Some(meta) if meta.is_file() => {
            let current = fs::read(path).map_err(io_failure(path))?;
            if current == contents && meta.permissions().mode() & 0o7777 == mode {
                if ours(&current) {
                    plan.keep.push(Entry {
                        path: path.to_path_buf(),
                        kind: Kind::File,
                        fnv1a64: Some(fnv1a64(&current)),
                    });
                    plan.unchanged.push(format!("unchanged {}", path.display()));
                } else {
                    // Someone else's, already right: left as it is, and not ours to remove.
                    plan.unchanged.push(format!("unchanged {} (not installed by install-cni)", path.display()));
                }
            } else if ours(&current) || force {
                plan.steps.push(Step::File { path: path.to_path_buf(), contents, mode });
            } else {
                plan.refusals.push(foreign(path, &format!("a file with other contents (or not mode {mode:o})")));
            }
        }
        Some(meta) if meta.file_type().is_symlink() && force => {
            plan.steps.push(Step::File { path: path.to_path_buf(), contents, mode })
        }
        Some(meta) if meta.file_type().is_symlink() => {
            plan.refusals.push(foreign(path, &format!("a symbolic link ({})", link_target(path))))
        }
        Some(_) => plan.refusals.push(format!("{} is neither a file nor a symbolic link", path.display())),
    }
    Ok(())
}

/// The files of a mounted Secret: each key is a symlink into `..data/`,
/// which is followed; the `..`-names themselves and anything not a file are
/// skipped. In name order.
fn secret_files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, Failure> {
    let unreadable = |error| Failure::File { action: FileAction::ReadEtcdSecret, path: dir.to_path_buf(), error };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            return Err(Failure::NotUtf8Name(entry.path()));
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let meta = fs::metadata(&path).map_err(io_failure(&path))?;
        if !meta.is_file() {
            continue;
        }
        files.push((name, read_small(&path)?));
    }
    if files.is_empty() {
        return Err(Failure::EmptyEtcdSecret(dir.to_path_buf()));
    }
    files.sort();
    Ok(files)
}

fn read_small(path: &Path) -> Result<Vec<u8>, Failure> {
    let file = File::open(path).map_err(io_failure(path))?;
    let mut bytes = Vec::new();
    file.take(MAX_DATA_FILE + 1).read_to_end(&mut bytes).map_err(io_failure(path))?;
    if bytes.len() as u64 > MAX_DATA_FILE {
        return Err(Failure::TooLarge { path: path.to_path_buf(), limit: MAX_DATA_FILE });
    }
    Ok(bytes)
}

/// A network configuration to copy: a name libcni loads (.conf, .conflist,
/// .json), and JSON with a name, which a runtime or Multus can use.
fn network_configuration(source: &Path) -> Result<(String, Vec<u8>), Failure> {
    let not_copied = |problem| Failure::Conflist { source: source.to_path_buf(), problem };
    let name = source
        .file_name()
        .and_then(OsStr::to_str)
        .map(str::to_string)
        .ok_or_else(|| not_copied(ConflistProblem::NoFileName))?;
    let extension = Path::new(&name).extension().and_then(OsStr::to_str).unwrap_or("");
    if !matches!(extension, "conf" | "conflist" | "json") || name.starts_with('.') {
        return Err(not_copied(ConflistProblem::NotLoaded));
    }
    let contents = read_small(source)?;
    let value: serde_json::Value =
        serde_json::from_slice(&contents).map_err(|e| not_copied(ConflistProblem::NotJson(e)))?;
    let named = value.get("name").and_then(serde_json::Value::as_str).is_some_and(|n| !n.is_empty());
    let plugins = value.get("plugins").is_some() || value.get("type").is_some();
    if !named || !plugins {
        return Err(not_copied(ConflistProblem::NotANetwork));
    }
    Ok((name, contents))
}

fn parent(path: &Path) -> Result<&Path, Failure> {
    path.parent().filter(|p| !p.as_os_str().is_empty()).ok_or_else(|| Failure::NoDirectory(path.to_path_buf()))
}

/// Creates `dir` and its missing parents with `mode`, returning those it
/// created, outermost first.
fn create_dirs(dir: &Path, mode: u32) -> Result<Vec<PathBuf>, Failure> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at {
        if path.as_os_str().is_empty() || lstat(path)?.is_some() {
            break;
        }
        missing.push(path.to_path_buf());
        at = path.parent();
    }
    missing.reverse();
    for path in &missing {
        fs::DirBuilder::new()
            .mode(mode)
            .create(path)
            .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(mode)))
            .map_err(|error| Failure::File { action: FileAction::CreateDirectory, path: path.clone(), error })?;
    }
    Ok(missing)
}

/// `.NAME.install-cni-<pid>` beside `path`: a name no runtime loads (libcni
/// takes *.conf*, plugins are found by their own names).
fn temporary(path: &Path) -> Result<PathBuf, Failure> {
    let name = path.file_name().ok_or_else(|| Failure::NoFileName(path.to_path_buf()))?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".install-cni-{}", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// The file written whole under a temporary name, fsynced, renamed over
/// `path`, and the directory fsynced.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), Failure> {
    let tmp = temporary(path)?;
    let result = (|| {
        let _ = fs::remove_file(&tmp); // one left by a dead process of the same pid
        let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?; // whatever the umask
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Failure::File { action: FileAction::Write, path: path.to_path_buf(), error });
    }
    sync_dir(path)
}

fn replace_with_link(path: &Path) -> Result<(), Failure> {
    let tmp = temporary(path)?;
    let _ = fs::remove_file(&tmp);
    let result = symlink(NAME, &tmp).and_then(|()| fs::rename(&tmp, path));
    if let Err(error) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Failure::Link { path: path.to_path_buf(), target: NAME, error });
    }
    sync_dir(path)
}

fn sync_dir(path: &Path) -> Result<(), Failure> {
    let dir = parent(path)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(|error| Failure::File {
        action: FileAction::SyncDirectory,
        path: dir.to_path_buf(),
        error,
    })
}

// ---------------------------------------------------------------- uninstall

fn uninstall(options: &Options) -> Result<Report, Failure> {
    let manifest_file = manifest_path(options);
    let Some(manifest) = read_manifest(&manifest_file)? else {
        return Ok(Report::fine(format!("nothing to remove: no {}\n", manifest_file.display())));
    };
    let mut out = String::new();
    let mut dirs = Vec::new();
    for entry in manifest.entries {
        if entry.kind == Kind::Dir {
            dirs.push(entry.path);
            continue;
        }
        let path = &entry.path;
        match still_ours(&entry) {
            Ok(None) => out += &format!("gone already {}\n", path.display()),
            Ok(Some(true)) => match fs::remove_file(path) {
                Ok(()) => out += &format!("removed {}\n", path.display()),
                Err(error) => return Err(Failure::File { action: FileAction::Remove, path: path.clone(), error }),
            },
            Ok(Some(false)) => out += &format!("kept {}: changed since install-cni wrote it\n", path.display()),
            Err(error) => return Err(Failure::File { action: FileAction::Read, path: path.clone(), error }),
        }
    }
    match fs::remove_file(&manifest_file) {
        Ok(()) => out += &format!("removed {}\n", manifest_file.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(Failure::File { action: FileAction::Remove, path: manifest_file, error }),
    }
    // Innermost first; one that holds anything else stays.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().filter(|c| matches!(c, Component::Normal(_))).count()));
    for dir in dirs {
        match fs::remove_dir(&dir) {
            Ok(()) => out += &format!("removed {}\n", dir.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                out += &format!("kept {}: not empty\n", dir.display())
            }
            Err(error) => return Err(Failure::File { action: FileAction::RemoveDirectory, path: dir, error }),
        }
    }
    Ok(Report::fine(out))
}

/// None: nothing there; Some(whether it is still what was installed).
fn still_ours(entry: &Entry) -> io::Result<Option<bool>> {
    let path = &entry.path;
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(match entry.kind {
        Kind::Program => meta.is_file() && has_marker(path)?,
        Kind::Link => meta.file_type().is_symlink() && fs::read_link(path)? == Path::new(NAME),
        Kind::File => meta.is_file() && Some(fnv1a64(&fs::read(path)?)) == entry.fnv1a64,
        Kind::Dir => false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_found_across_pieces_and_not_in_other_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = dir.path().join("ours");
        let mut bytes = vec![7u8; 64 * 1024 - 10];
        bytes.extend_from_slice(MARKER);
        bytes.extend_from_slice(&[1, 2, 3]);
        fs::write(&ours, &bytes).expect("write");
        assert!(has_marker(&ours).expect("read"));
        let other = dir.path().join("other");
        fs::write(&other, &bytes[..bytes.len() - 4]).expect("write");
        assert!(!has_marker(&other).expect("read"));
    }

    #[test]
    fn fnv1a64_is_the_published_function() {
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
    }
}
