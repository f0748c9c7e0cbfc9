//! What an installation changes, decided before any change is made, from
//! what is wanted and what was found: no I/O here. What is ours is replaced;
//! what is not is refused, and then nothing is written, unless `--force`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::super::failure::Failure;
use super::super::report::NAME;
use super::manifest::{Entry, Kind, Manifest};

/// What is at a path the installer writes, as read before planning.
#[derive(Debug)]
pub enum Found<F> {
    Nothing,
    File(F),
    /// A symbolic link: where it points, or why that could not be read.
    Symlink(Result<PathBuf, String>),
    /// A directory, a device, a socket...
    Other,
}

/// A file found where the program or a delegate's link goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// This very program, byte for byte.
    Identical,
    /// Another build of this program (it holds the marker).
    Ours,
    Foreign,
}

/// A file found where a data file goes.
#[derive(Debug)]
pub struct Current {
    pub contents: Vec<u8>,
    /// The permission bits.
    pub mode: u32,
}

/// A path to install, and what is there now.
#[derive(Debug)]
pub struct At<F> {
    pub path: PathBuf,
    pub found: Found<F>,
}

/// A data file to write: the node's name, an etcd file, a conflist.
#[derive(Debug)]
pub struct DataFile {
    pub at: At<Current>,
    pub contents: Vec<u8>,
    pub mode: u32,
    /// A file the installer writes again while it runs (the kubeconfig, at
    /// each token refresh): any content it made starts so. The manifest
    /// records the new content before the rename puts it in place, so a
    /// crash between leaves the previous one, which is still ours when the
    /// manifest names the path and it starts so (else the restarted pod
    /// would refuse it until `--force`).
    pub rewritten_from: Option<&'static [u8]>,
}

/// Everything an installation wants in place.
#[derive(Debug)]
pub struct Wanted {
    pub bin_dir: PathBuf,
    /// Directories created under it are private (etcd's credentials).
    pub private_dir: PathBuf,
    pub program: At<Build>,
    pub links: Vec<At<Build>>,
    pub files: Vec<DataFile>,
}

/// One change to make.
#[derive(Debug, PartialEq)]
pub enum Step {
    Program { path: PathBuf },
    Link { path: PathBuf },
    File { path: PathBuf, contents: Vec<u8>, mode: u32 },
}

#[derive(Debug, PartialEq)]
pub struct Plan {
    /// Directories to make sure of, in order, and the mode of those created.
    pub dirs: Vec<(PathBuf, u32)>,
    pub steps: Vec<Step>,
    /// Lines for the report: what is already as it should be.
    pub unchanged: Vec<String>,
    /// Data files left as they are that stay recorded (unchanged and ours).
    keep: Vec<Entry>,
    /// The program and its links, recorded even when left as they are: a
    /// build of ours found in place (scripts/install's) is taken over.
    taken_over: Vec<Entry>,
}

/// The plan, or why nothing may be written.
pub fn plan(wanted: Wanted, recorded: &BTreeMap<PathBuf, Entry>, force: bool) -> Result<Plan, Failure> {
    let mut plan =
        Plan { dirs: Vec::new(), steps: Vec::new(), unchanged: Vec::new(), keep: Vec::new(), taken_over: Vec::new() };
    let mut refusals = Vec::new();
    plan.taken_over.push(Entry::new(&wanted.program.path, Kind::Program));
    program(&mut plan, &mut refusals, wanted.program, force);
    for at in wanted.links {
        plan.taken_over.push(Entry::new(&at.path, Kind::Link));
        link(&mut plan, &mut refusals, at, force);
    }
    for file in wanted.files {
        data_file(&mut plan, &mut refusals, recorded, file, force);
    }
    if !refusals.is_empty() {
        return Err(Failure::NothingInstalled(refusals));
    }
    plan.dirs.push((wanted.bin_dir, 0o755));
    for step in &plan.steps {
        if let Step::File { path, .. } = step {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .ok_or_else(|| Failure::NoDirectory(path.to_path_buf()))?;
            let mode = if path.starts_with(&wanted.private_dir) { 0o700 } else { 0o755 };
            plan.dirs.push((dir.to_path_buf(), mode));
        }
    }
    Ok(plan)
}

impl Plan {
    /// The manifest once the plan is carried out: what was recorded, the
    /// directories created, and everything the plan writes or keeps, by path.
    pub fn manifest(&self, mut recorded: BTreeMap<PathBuf, Entry>, created: &[PathBuf]) -> Manifest {
        let mut record = |entry: Entry| {
            recorded.insert(entry.path.clone(), entry);
        };
        for dir in created {
            record(Entry::new(dir, Kind::Dir));
        }
        for entry in &self.keep {
            record(entry.clone());
        }
        for step in &self.steps {
            record(match step {
                Step::Program { path } => Entry::new(path, Kind::Program),
                Step::Link { path } => Entry::new(path, Kind::Link),
                Step::File { path, contents, .. } => Entry::file(path, contents),
            });
        }
        for entry in &self.taken_over {
            recorded.entry(entry.path.clone()).or_insert_with(|| entry.clone());
        }
        Manifest::of(recorded)
    }
}

fn foreign(path: &Path, what: &str) -> String {
    format!("{} is {what}, not installed by install-cni (--force replaces it)", path.display())
}

fn symlink(path: &Path, target: &Result<PathBuf, String>) -> String {
    let target = match target {
        Ok(target) => format!("to {}", target.display()),
        Err(why) => format!("unreadable: {why}"),
    };
    foreign(path, &format!("a symbolic link ({target})"))
}

fn neither(path: &Path) -> String {
    format!("{} is neither a file nor a symbolic link", path.display())
}

const NOT_OURS: &str = "a file that is not an ipam-delegated build";

fn program(plan: &mut Plan, refusals: &mut Vec<String>, at: At<Build>, force: bool) {
    let At { path, found } = at;
    match found {
        Found::File(Build::Identical) => plan.unchanged.push(format!("unchanged {}", path.display())),
        Found::Nothing | Found::File(Build::Ours) => plan.steps.push(Step::Program { path }),
        Found::File(Build::Foreign) | Found::Symlink(_) if force => plan.steps.push(Step::Program { path }),
        Found::File(Build::Foreign) => refusals.push(foreign(&path, NOT_OURS)),
        Found::Symlink(target) => refusals.push(symlink(&path, &target)),
        Found::Other => refusals.push(neither(&path)),
    }
}

fn link(plan: &mut Plan, refusals: &mut Vec<String>, at: At<Build>, force: bool) {
    let At { path, found } = at;
    match found {
        Found::Symlink(Ok(target)) if target == Path::new(NAME) => {
            plan.unchanged.push(format!("unchanged {} -> {NAME}", path.display()))
        }
        // A copy of ours (an install file by file) becomes the link.
        Found::Nothing | Found::File(Build::Identical | Build::Ours) => plan.steps.push(Step::Link { path }),
        Found::File(Build::Foreign) | Found::Symlink(_) if force => plan.steps.push(Step::Link { path }),
        Found::File(Build::Foreign) => refusals.push(foreign(&path, NOT_OURS)),
        Found::Symlink(target) => refusals.push(symlink(&path, &target)),
        Found::Other => refusals.push(neither(&path)),
    }
}

fn data_file(
    plan: &mut Plan,
    refusals: &mut Vec<String>,
    recorded: &BTreeMap<PathBuf, Entry>,
    file: DataFile,
    force: bool,
) {
    let DataFile { at: At { path, found }, contents, mode, rewritten_from } = file;
    let ours = |current: &[u8]| {
        recorded.get(&path).is_some_and(|e| {
            e.wrote(current) || rewritten_from.is_some_and(|header| e.kind == Kind::File && current.starts_with(header))
        })
    };
    match found {
        Found::Nothing => plan.steps.push(Step::File { path, contents, mode }),
        Found::File(current) if current.contents == contents && current.mode == mode => {
            if ours(&current.contents) {
                plan.unchanged.push(format!("unchanged {}", path.display()));
                plan.keep.push(Entry::file(&path, &current.contents));
            } else {
                // Someone else's, already right: left as it is, and not ours to remove.
                plan.unchanged.push(format!("unchanged {} (not installed by install-cni)", path.display()));
            }
        }
        Found::File(current) if ours(&current.contents) || force => {
            plan.steps.push(Step::File { path, contents, mode })
        }
        Found::File(_) => refusals.push(foreign(&path, &format!("a file with other contents (or not mode {mode:o})"))),
        Found::Symlink(_) if force => plan.steps.push(Step::File { path, contents, mode }),
        Found::Symlink(target) => refusals.push(symlink(&path, &target)),
        Found::Other => refusals.push(neither(&path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIN: &str = "/host/opt/cni/bin";
    const ETCD: &str = "/host/etc/cni/ipam-delegated/etcd";
    const NODE_FILE: &str = "/host/etc/cni/ipam-delegated/node-name";

    fn at<F>(path: &str, found: Found<F>) -> At<F> {
        At { path: PathBuf::from(path), found }
    }

    fn current(contents: &[u8], mode: u32) -> Found<Current> {
        Found::File(Current { contents: contents.to_vec(), mode })
    }

    /// A host as found: the program, one delegate's link, the node file and an etcd key.
    fn wanted(program: Found<Build>, link: Found<Build>, node: Found<Current>, key: Found<Current>) -> Wanted {
        Wanted {
            bin_dir: PathBuf::from(BIN),
            private_dir: PathBuf::from(ETCD),
            program: at("/host/opt/cni/bin/ipam-delegated", program),
            links: vec![at("/host/opt/cni/bin/ipam-ds-pool", link)],
            files: vec![
                DataFile { at: at(NODE_FILE, node), contents: b"node-a\n".to_vec(), mode: 0o644, rewritten_from: None },
                DataFile {
                    at: at("/host/etc/cni/ipam-delegated/etcd/tls.key", key),
                    contents: b"KEY\n".to_vec(),
                    mode: 0o600,
                    rewritten_from: None,
                },
            ],
        }
    }

    fn fresh() -> Wanted {
        wanted(Found::Nothing, Found::Nothing, Found::Nothing, Found::Nothing)
    }

    fn paths(manifest: &Manifest) -> Vec<(String, Kind)> {
        manifest.entries.iter().map(|e| (e.path.display().to_string(), e.kind)).collect()
    }

    fn refusals(outcome: Result<Plan, Failure>) -> Vec<String> {
        match outcome {
            Err(Failure::NothingInstalled(refusals)) => refusals,
            Err(other) => panic!("another failure: {other}"),
            Ok(plan) => panic!("planned: {plan:?}"),
        }
    }

    #[test]
    fn a_fresh_host_gets_everything_and_private_directories_for_etcd() {
        let plan = plan(fresh(), &BTreeMap::new(), false).expect("a plan");
        assert_eq!(
            plan.steps,
            [
                Step::Program { path: "/host/opt/cni/bin/ipam-delegated".into() },
                Step::Link { path: "/host/opt/cni/bin/ipam-ds-pool".into() },
                Step::File { path: NODE_FILE.into(), contents: b"node-a\n".to_vec(), mode: 0o644 },
                Step::File {
                    path: "/host/etc/cni/ipam-delegated/etcd/tls.key".into(),
                    contents: b"KEY\n".to_vec(),
                    mode: 0o600
                },
            ]
        );
        assert_eq!(
            plan.dirs,
            [(BIN.into(), 0o755), ("/host/etc/cni/ipam-delegated".into(), 0o755), (ETCD.into(), 0o700)]
        );
        assert!(plan.unchanged.is_empty());
        // The directories created are recorded with the files, by path.
        let created = [PathBuf::from("/host/etc/cni/ipam-delegated"), PathBuf::from(ETCD)];
        assert_eq!(
            paths(&plan.manifest(BTreeMap::new(), &created)),
            [
                ("/host/etc/cni/ipam-delegated".to_string(), Kind::Dir),
                (ETCD.to_string(), Kind::Dir),
                ("/host/etc/cni/ipam-delegated/etcd/tls.key".to_string(), Kind::File),
                (NODE_FILE.to_string(), Kind::File),
                ("/host/opt/cni/bin/ipam-delegated".to_string(), Kind::Program),
                ("/host/opt/cni/bin/ipam-ds-pool".to_string(), Kind::Link),
            ]
        );
    }

    /// The kubeconfig as a crash left it between the manifest's update and
    /// the rename: the previous content, which the manifest no longer
    /// records. Written again, where any other content is refused.
    #[test]
    fn a_rewritten_file_one_version_behind_its_manifest_is_still_ours() {
        const KUBECONFIG: &str = "/host/etc/cni/ipam-delegated/kubeconfig";
        let recorded = BTreeMap::from([(PathBuf::from(KUBECONFIG), Entry::file(Path::new(KUBECONFIG), b"# h\nnew"))]);
        let with = |current: &[u8]| {
            let mut w = fresh();
            w.files = vec![DataFile {
                at: at(KUBECONFIG, Found::File(Current { contents: current.to_vec(), mode: 0o600 })),
                contents: b"# h\nnewer".to_vec(),
                mode: 0o600,
                rewritten_from: Some(b"# h\n"),
            }];
            plan(w, &recorded, false)
        };
        let steps = with(b"# h\nold").expect("the previous version is ours").steps;
        assert!(
            steps.iter().any(|s| matches!(s, Step::File { path, .. } if path == Path::new(KUBECONFIG))),
            "{steps:?}"
        );
        match with(b"someone else's") {
            Err(Failure::NothingInstalled(refusals)) => {
                assert!(refusals.iter().any(|r| r.contains(KUBECONFIG)), "{refusals:?}")
            }
            other => panic!("another content is refused: {other:?}"),
        }
    }

    #[test]
    fn a_second_run_changes_nothing_and_records_the_same() {
        let first = plan(fresh(), &BTreeMap::new(), false).expect("a plan").manifest(BTreeMap::new(), &[]);
        let recorded = first.recorded();
        let again = wanted(
            Found::File(Build::Identical),
            Found::Symlink(Ok(PathBuf::from(NAME))),
            current(b"node-a\n", 0o644),
            current(b"KEY\n", 0o600),
        );
        let plan = plan(again, &recorded, false).expect("a plan");
        assert!(plan.steps.is_empty(), "{:?}", plan.steps);
        assert_eq!(
            plan.unchanged,
            [
                "unchanged /host/opt/cni/bin/ipam-delegated",
                "unchanged /host/opt/cni/bin/ipam-ds-pool -> ipam-delegated",
                "unchanged /host/etc/cni/ipam-delegated/node-name",
                "unchanged /host/etc/cni/ipam-delegated/etcd/tls.key",
            ]
        );
        assert_eq!(plan.manifest(recorded, &[]), first);
    }

    #[test]
    fn what_is_ours_is_replaced_and_a_copy_of_ours_becomes_the_link() {
        let first = plan(fresh(), &BTreeMap::new(), false).expect("a plan").manifest(BTreeMap::new(), &[]);
        let upgrade = wanted(
            Found::File(Build::Ours),
            Found::File(Build::Ours),
            current(b"node-a\n", 0o644),
            current(b"KEY\n", 0o644), // its mode changed: written again
        );
        let plan = plan(upgrade, &first.recorded(), false).expect("a plan");
        let written: Vec<_> = plan.steps.iter().map(|s| format!("{s:?}")).collect();
        assert_eq!(plan.steps.len(), 3, "{written:?}");
        assert!(matches!(&plan.steps[0], Step::Program { .. }));
        assert!(matches!(&plan.steps[1], Step::Link { .. }));
        assert!(matches!(&plan.steps[2], Step::File { mode: 0o600, .. }));
        assert_eq!(plan.unchanged, ["unchanged /host/etc/cni/ipam-delegated/node-name"]);
    }

    #[test]
    fn what_is_not_ours_is_refused_all_at_once_unless_forced() {
        let found = || {
            wanted(
                Found::File(Build::Foreign),
                Found::Symlink(Ok(PathBuf::from("/usr/lib/cni/ipam-delegated"))),
                current(b"node-b\n", 0o644),
                Found::Other,
            )
        };
        assert_eq!(
            refusals(plan(found(), &BTreeMap::new(), false)),
            [
                "/host/opt/cni/bin/ipam-delegated is a file that is not an ipam-delegated build, not installed by \
                 install-cni (--force replaces it)",
                "/host/opt/cni/bin/ipam-ds-pool is a symbolic link (to /usr/lib/cni/ipam-delegated), not installed \
                 by install-cni (--force replaces it)",
                "/host/etc/cni/ipam-delegated/node-name is a file with other contents (or not mode 644), not \
                 installed by install-cni (--force replaces it)",
                "/host/etc/cni/ipam-delegated/etcd/tls.key is neither a file nor a symbolic link",
            ]
        );
        // --force replaces files and links, never a directory.
        assert_eq!(
            refusals(plan(found(), &BTreeMap::new(), true)),
            ["/host/etc/cni/ipam-delegated/etcd/tls.key is neither a file nor a symbolic link"]
        );
        let mut forced = found();
        forced.files.pop();
        assert_eq!(plan(forced, &BTreeMap::new(), true).expect("a plan").steps.len(), 3);
    }

    #[test]
    fn a_data_file_edited_since_it_was_written_is_no_longer_ours() {
        let first = plan(fresh(), &BTreeMap::new(), false).expect("a plan").manifest(BTreeMap::new(), &[]);
        let edited = wanted(
            Found::File(Build::Identical),
            Found::Symlink(Ok(PathBuf::from(NAME))),
            current(b"node-b\n", 0o644),
            current(b"KEY\n", 0o600),
        );
        let refused = refusals(plan(edited, &first.recorded(), false));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].starts_with("/host/etc/cni/ipam-delegated/node-name is a file with other contents"));
    }

    #[test]
    fn a_right_file_of_someone_else_is_left_and_not_recorded() {
        let theirs = wanted(
            Found::File(Build::Identical),
            Found::Symlink(Ok(PathBuf::from(NAME))),
            current(b"node-a\n", 0o644),
            current(b"KEY\n", 0o600),
        );
        let plan = plan(theirs, &BTreeMap::new(), false).expect("a plan");
        assert!(plan.steps.is_empty());
        assert_eq!(
            plan.unchanged[2],
            "unchanged /host/etc/cni/ipam-delegated/node-name (not installed by install-cni)"
        );
        // The program and its links are taken over; the data files are not.
        assert_eq!(
            paths(&plan.manifest(BTreeMap::new(), &[])),
            [
                ("/host/opt/cni/bin/ipam-delegated".to_string(), Kind::Program),
                ("/host/opt/cni/bin/ipam-ds-pool".to_string(), Kind::Link),
            ]
        );
    }
}
