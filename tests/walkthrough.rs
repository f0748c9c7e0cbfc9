//! The walk-throughs of docs/walkthroughs.md ("A bridge network, step by
//! step", "Sticky addresses") and the command block of every example in examples/README.md,
//! run as a user runs them: each command as written, through `scripts/cni` (the runtime of the
//! workspace's `cni-run`), with Debian's real `bridge` and `macvlan`. A
//! doc that drifts from what works fails here.
//!
//! The commands are read from the two docs and run one by one in one bash
//! process (so `export` and `walk=$(mktemp -d)` carry over), with these
//! changes only:
//!
//! - `bash scripts/build` and the install into target/cni are not run:
//!   the suite is the build under test ([`bin_dir`], the same layout), and
//!   `scripts/cni` builds cni-run itself;
//! - `$PWD/target/cni/bin` and `target/cni/bin/` name [`bin_dir`];
//! - each namespace the docs make (`ip netns add NAME`) gets a name unique
//!   to the test, wherever NAME is a word of a command;
//! - `scripts/cni`, `ip link` and the operator's `ipam-delegated` run in a
//!   network namespace that plays the
//!   host, made by the test (as tests/chain.rs runs libcni), in a mount
//!   namespace of their own where a directory of the test is mounted on
//!   `/var/lib`: the bridge, the host ends of the veths, any sysctl a plugin
//!   writes (`isGateway`: forwarding), the iptables rule of `ipMasq`, the
//!   result cache (`/var/lib/cni/results`) and the examples' default database
//!   (`/var/lib/cni/ipam-delegated`) stay out of the machine's own. `mktemp`
//!   makes its directory in the test's (TMPDIR).
//!
//! After each command the test checks what it claims: ADD gives the
//! expected addresses, on eth0 in the namespace, a lease each and libcni's
//! cache file; CHECK is silent; DEL removes eth0, the lease (a sticky
//! network's address stays held for its identity) and the cache file.
//! Forwarding starts off in the host namespace: the walk-through must leave
//! it off, and the examples with `isGateway` turn it on, as their README says.
//! The machine's own namespace (forwarding sysctls, links, `ip netns`) and
//! `/var/lib/cni` are compared before and after. Addresses are the examples'
//! (10.0.0.0/8, fd00::/8); no traffic is sent (a macvlan's master is a veth
//! made inside the host namespace).
//!
//! The end-to-end tests need root, iproute2 and Debian's
//! containernetworking-plugins, so they are `#[ignore]`d like tests/e2e.rs and
//! run by scripts/test; they take turns, so that each one's before/after
//! comparison sees only itself.

mod netns;
mod support;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use netns::{ip, ip_ok, netns_names, prerequisites, unique, Netns};
use serde_json::Value;
use support::{bin_dir, list_leases, read_repo_file, repo, Sandbox};

/// The doc of the walk-throughs, and its two sections.
const WALKTHROUGHS: &str = "docs/walkthroughs.md";
const BRIDGE_SECTION: &str = "## A bridge network, step by step";
const STICKY_SECTION: &str = "## Sticky addresses";
const EXAMPLES_SECTION: &str = "## Run them with scripts/cni";
/// How long one command may take (the first `scripts/cni` builds cni-run).
/// The docs' release build, and its install into target/cni (the fast layout).
const BUILD: &str = "bash scripts/build";
const INSTALL: &str = "PREFIX=$PWD/target/cni LINKDIR= bash scripts/install";
const STEP_LIMIT: Duration = Duration::from_secs(600);

// ---------------------------------------------------------------------------
// The commands, as the docs show them

/// One command of a doc: a line, or a line with its here-document.
#[derive(Debug, Clone)]
struct Step {
    text: String,
}

impl Step {
    /// The command without its trailing comment (the first line of a here-document).
    fn command(&self) -> &str {
        let first = self.text.lines().next().unwrap_or_default();
        first.split_once(" #").map_or(first, |(c, _)| c).trim_end()
    }

    fn is_heredoc(&self) -> bool {
        self.text.contains('\n')
    }

    /// The words after `scripts/cni` (ADD, the conflist, …), if it runs it.
    fn cni_words(&self) -> Option<Vec<&str>> {
        let (_, rest) = self.command().split_once("scripts/cni ")?;
        Some(rest.split_whitespace().collect())
    }

    fn verb(&self) -> Option<&str> {
        self.cni_words().and_then(|w| w.first().copied())
    }
}

/// The ```sh blocks of the section headed `heading` (up to the next `## `),
/// each with the `### ` heading it follows ("" before the first).
fn sh_blocks(text: &str, heading: &str) -> Vec<(String, Vec<Step>)> {
    let mut lines = text.lines().skip_while(|l| *l != heading);
    assert!(lines.next().is_some(), "no section {heading:?}");
    let (mut blocks, mut sub) = (Vec::new(), String::new());
    while let Some(line) = lines.next() {
        if line.starts_with("## ") {
            break;
        }
        if let Some(h) = line.strip_prefix("### ") {
            sub = h.to_string();
        } else if line == "```sh" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
            blocks.push((sub.clone(), steps(&body)));
        }
    }
    blocks
}

/// The commands of a block: blank and comment lines left out, a here-document
/// kept with its command.
fn steps(body: &[&str]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = body.iter();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut text = line.to_string();
        if let Some((_, word)) = line.split_once("<<") {
            let end = word.trim().trim_matches('\'').trim_matches('"').to_string();
            for more in lines.by_ref() {
                text.push('\n');
                text.push_str(more);
                if *more == end {
                    break;
                }
            }
        }
        steps.push(Step { text });
    }
    steps
}

fn bridge_steps() -> Vec<Step> {
    sh_blocks(&read_repo_file(WALKTHROUGHS), BRIDGE_SECTION).into_iter().flat_map(|(_, s)| s).collect()
}

fn sticky_steps() -> Vec<Step> {
    sh_blocks(&read_repo_file(WALKTHROUGHS), STICKY_SECTION).into_iter().flat_map(|(_, s)| s).collect()
}

/// examples/README.md's blocks: the set-up (before the first example), one per
/// example by file stem, and the clean-up ("When done").
struct ExampleBlocks {
    setup: Vec<Step>,
    examples: Vec<(String, Vec<Step>)>,
    done: Vec<Step>,
}

fn example_blocks() -> ExampleBlocks {
    let mut blocks = ExampleBlocks { setup: Vec::new(), examples: Vec::new(), done: Vec::new() };
    for (heading, steps) in sh_blocks(&read_repo_file("examples/README.md"), EXAMPLES_SECTION) {
        if heading.is_empty() {
            blocks.setup.extend(steps);
        } else if heading == "When done" {
            blocks.done.extend(steps);
        } else {
            let stem = heading.trim_matches('`').strip_suffix(".conflist");
            let stem = stem.unwrap_or_else(|| panic!("examples/README.md: unexpected heading ### {heading}"));
            blocks.examples.push((stem.to_string(), steps));
        }
    }
    blocks
}

/// The stems of examples/*.conflist, sorted.
fn example_stems() -> Vec<String> {
    let mut stems: Vec<String> = fs::read_dir(repo().join("examples"))
        .expect("reading examples/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "conflist"))
        .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    stems.sort();
    stems
}

fn conflist(stem: &str) -> Value {
    serde_json::from_str(&read_repo_file(&format!("examples/{stem}.conflist"))).expect("an example is JSON")
}

/// The name `ip netns add NAME` makes in `steps`.
fn namespace_made(steps: &[Step]) -> String {
    let add = steps.iter().find_map(|s| s.command().strip_prefix("ip netns add "));
    add.unwrap_or_else(|| panic!("no `ip netns add NAME` in {steps:#?}")).trim().to_string()
}

/// Every name `ip netns add NAME` makes in `steps`, in order.
fn namespaces_made(steps: &[Step]) -> Vec<String> {
    steps.iter().filter_map(|s| s.command().strip_prefix("ip netns add ")).map(|n| n.trim().to_string()).collect()
}

/// What each example's ADD must give, and the bridge its block removes (the
/// conflist's own).
fn expected_addresses(stem: &str) -> &'static [&'static str] {
    match stem {
        "bridge" => &["10.22.1.0/16"],
        "macvlan" => &["10.30.0.100/24"],
        "dual-stack" => &["10.50.0.2/24", "fd00:50::2/64"],
        "spillover" => &["10.40.0.2/29"],
        "per-namespace" => &["10.24.0.2/24"],
        "static" => &["10.60.0.7/24", "fd00:60::2/64"],
        "ip-ranges" => &["10.70.0.50/24"],
        "sticky" => &["10.45.0.10/24"],
        // The blocks node-a claims first in an empty etcd (their place is
        // hashed from the node's name).
        "cluster" => &["10.80.212.192/16", "fd00:80::a5c7:3088:1e32:d4c0/64"],
        other => panic!("tests/walkthrough.rs has no expected addresses for examples/{other}.conflist"),
    }
}

// ---------------------------------------------------------------------------
// Without root: the docs hold the commands the end-to-end tests run

#[test]
fn the_bridge_walk_through_has_every_step() {
    let steps = bridge_steps();
    let commands: Vec<&str> = steps.iter().map(Step::command).collect();
    for wanted in [
        BUILD,
        INSTALL,
        "export CNI_PATH=$PWD/target/cni/bin:/usr/lib/cni",
        "ip netns add blue",
        "scripts/cni ADD $walk/blue.conflist c1 blue",
        "ip -n blue addr show eth0",
        "scripts/cni CHECK $walk/blue.conflist c1 blue",
        "target/cni/bin/ipam-delegated list --database $walk/allocations.sqlite",
        "scripts/cni DEL $walk/blue.conflist c1 blue",
        "ip netns del blue",
        "ip link del cni-blue0",
        "rm -r $walk",
    ] {
        assert!(commands.contains(&wanted), "the bridge walk-through has no `{wanted}`: {commands:#?}");
    }
    // The configuration: the example's network, without isGateway and ipMasq
    // (the host's forwarding and firewall stay as they are), on its own database.
    let heredoc = steps.iter().find(|s| s.is_heredoc()).expect("the walk-through writes its conflist");
    let json: String = heredoc.text.lines().skip(1).take_while(|l| *l != "EOF").collect::<Vec<_>>().join("\n");
    let config: Value =
        serde_json::from_str(&json.replace("$walk", "/w")).expect("the walk-through's conflist is JSON");
    let plugin = &config["plugins"][0];
    assert_eq!((&config["name"], &plugin["bridge"]), (&"blue-net".into(), &"cni-blue0".into()));
    assert!(plugin.get("isGateway").is_none() && plugin.get("ipMasq").is_none(), "{plugin}");
    assert_eq!(plugin["ipam"]["database"], "/w/allocations.sqlite");
    assert_eq!(plugin["ipam"]["pools"], conflist("bridge")["plugins"][0]["ipam"]["pools"], "the example's pool");
    assert!(read_repo_file(WALKTHROUGHS).contains("`/var/lib/cni/results/blue-net-c1-eth0`"));
}

/// docs/walkthroughs.md's "Sticky addresses": examples/sticky.conflist's network on a
/// database of its own; db-0 added, deleted and added again under a new
/// container id in a new namespace, db-1 added, the hold listed and
/// released, and everything it made removed.
#[test]
fn the_sticky_walk_through_has_every_step() {
    let steps = sticky_steps();
    let commands: Vec<&str> = steps.iter().map(Step::command).collect();
    for wanted in [
        "sticky=$(mktemp -d)",
        "scripts/cni ADD $sticky/sticky.conflist c1 db0-a --args \"$db0\"",
        "scripts/cni DEL $sticky/sticky.conflist c1 db0-a",
        "scripts/cni ADD $sticky/sticky.conflist c2 db0-b --args \"$db0\"",
        "scripts/cni ADD $sticky/sticky.conflist c3 db1-a --args \"$db1\"",
        "target/cni/bin/ipam-delegated list --database $sticky/allocations.sqlite",
        "target/cni/bin/ipam-delegated release --database $sticky/allocations.sqlite --identity prod/db-0",
        "ip link del cni-sticky0",
        "rm -r $sticky",
    ] {
        assert!(commands.contains(&wanted), "the sticky walk-through has no `{wanted}`: {commands:#?}");
    }
    for ns in namespaces_made(&steps) {
        assert!(commands.contains(&format!("ip netns del {ns}").as_str()), "{ns} is not deleted: {commands:#?}");
    }
    let heredoc = steps.iter().find(|s| s.is_heredoc()).expect("the walk-through writes its conflist");
    let json: String = heredoc.text.lines().skip(1).take_while(|l| *l != "EOF").collect::<Vec<_>>().join("\n");
    let config: Value = serde_json::from_str(&json.replace("$sticky", "/s")).expect("the conflist is JSON");
    let example = conflist("sticky");
    let mut ipam = example["plugins"][0]["ipam"].clone();
    ipam["database"] = "/s/allocations.sqlite".into();
    assert_eq!(config["plugins"][0]["ipam"], ipam, "the example's IPAM, on its own database");
    assert_eq!(
        (&config["name"], &config["plugins"][0]["bridge"]),
        (&example["name"], &example["plugins"][0]["bridge"])
    );
}

#[test]
fn every_example_has_a_command_block() {
    let blocks = example_blocks();
    let mut documented: Vec<&str> = blocks.examples.iter().map(|(stem, _)| stem.as_str()).collect();
    documented.sort_unstable();
    assert_eq!(documented, example_stems(), "examples/README.md: one block per examples/*.conflist");
    let ns = namespace_made(&blocks.setup);
    assert!(blocks.done.iter().any(|s| s.command() == format!("ip netns del {ns}")), "the clean-up deletes {ns}");
    for (stem, steps) in &blocks.examples {
        let file = format!("examples/{stem}.conflist");
        for verb in ["ADD", "CHECK", "DEL"] {
            let line = steps.iter().find(|s| s.verb() == Some(verb));
            let words = line.and_then(Step::cni_words).unwrap_or_else(|| panic!("{stem}: no scripts/cni {verb}"));
            assert_eq!(words[1..4], [file.as_str(), "c1", ns.as_str()], "{stem}: {verb}");
        }
        let add = steps.iter().find(|s| s.verb() == Some("ADD")).map(|s| s.text.as_str()).unwrap_or_default();
        for address in expected_addresses(stem) {
            assert!(add.contains(address), "{stem}: the ADD line's comment names {address}: {add}");
        }
        let plugin = &conflist(stem)["plugins"][0];
        let removes: Vec<&str> = steps.iter().filter_map(|s| s.command().strip_prefix("ip link del ")).collect();
        match plugin["bridge"].as_str() {
            Some(bridge) => assert_eq!(removes, [bridge], "{stem}: the block removes the bridge the plugin makes"),
            None => assert!(removes.is_empty(), "{stem}"),
        }
    }
}

/// Without root: `ipam-delegated` alone as the list's plugin (cniVersion
/// 1.1.0), so no namespace is entered. CHECK and DEL get ADD's cached result;
/// GC's valid attachments are the cached ones, so an attachment whose cache
/// file is gone loses its lease; STATUS passes.
#[test]
fn scripts_cni_with_the_suite_alone_add_check_gc_status_del() {
    let sb = Sandbox::new();
    let list = serde_json::json!({"cniVersion": "1.1.0", "name": "alone", "plugins": [{
        "type": "ipam-delegated",
        "ipam": {
            "type": "ipam-delegated",
            "delegates": ["ipam-ds-pool", "ipam-da-sequential"],
            "database": sb.db(),
            "pools": [{"name": "p", "ranges": [{"subnet": "10.99.0.0/24"}]}]
        }
    }]});
    let file = sb.path().join("alone.conflist");
    fs::write(&file, list.to_string()).expect("writing the list");
    let file = file.to_str().expect("a UTF-8 path");
    let cache = sb.path().join("cache");
    let cni_path = bin_dir().display().to_string();
    let env = [("CNI_PATH", cni_path.as_str()), ("CNI_CACHE_DIR", cache.to_str().expect("UTF-8"))];
    let cargo = [("CARGO", env!("CARGO"))];
    let cni = |args: &[&str]| {
        let script = repo().join("scripts/cni");
        let mut all: Vec<(&str, &str)> = env.to_vec();
        all.extend(cargo);
        support::run_args(&script, args, &all, b"", None)
    };
    let holders = || -> Vec<String> {
        let leases = list_leases(&sb.db());
        leases.as_array().into_iter().flatten().filter_map(|l| Some(l["container_id"].as_str()?.to_string())).collect()
    };

    for container in ["a", "b"] {
        let added = cni(&["ADD", file, container, "/proc/self/ns/net"]);
        assert_eq!(added.status, 0, "ADD {container}: {added:#?}");
        assert!(cache.join(format!("results/alone-{container}-eth0")).is_file(), "ADD {container} is cached");
    }
    let check = cni(&["CHECK", file, "a", "/proc/self/ns/net"]);
    assert_eq!((check.status, check.stdout.as_str()), (0, ""), "CHECK: {check:#?}");
    fs::remove_file(cache.join("results/alone-b-eth0")).expect("forgetting b");
    let gc = cni(&["GC", file]);
    assert_eq!((gc.status, gc.stdout.as_str()), (0, ""), "GC: {gc:#?}");
    assert_eq!(holders(), ["a"], "GC keeps the cached attachment and releases the other");
    let status = cni(&["STATUS", file]);
    assert_eq!(status.status, 0, "STATUS: {status:#?}");
    let del = cni(&["DEL", file, "a", "/proc/self/ns/net"]);
    assert_eq!((del.status, del.stdout.as_str()), (0, ""), "DEL: {del:#?}");
    assert!(holders().is_empty());
    assert!(!cache.join("results/alone-a-eth0").exists(), "DEL removes the cached result");
}

// ---------------------------------------------------------------------------
// Running the commands

/// One bash process the steps run in, one after the other.
struct Shell {
    child: Child,
    stdin: Option<ChildStdin>,
    done: Receiver<String>,
    dir: PathBuf,
    count: usize,
}

/// What one step did.
#[derive(Debug)]
struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Shell {
    /// bash in the repository's top directory, with `env` and no CNI_* of
    /// ours; `__host CMD…` runs CMD in `host`'s network namespace with
    /// `varlib` mounted on /var/lib.
    fn new(dir: &Path, host: &Netns, varlib: &Path) -> Shell {
        let mut cmd = Command::new("bash");
        cmd.args(["--norc", "--noprofile"]).current_dir(repo());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CNI_") {
                cmd.env_remove(key);
            }
        }
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp).expect("creating TMPDIR");
        cmd.env("TMPDIR", &tmp).env("CARGO", env!("CARGO")).env("__HOSTNS", &host.name).env("__VARLIB", varlib);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        cmd.stderr(fs::File::create(dir.join("shell.err")).expect("shell.err"));
        let mut child = cmd.spawn().expect("starting bash");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("bash's stdout");
        let (tx, done) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Shell { child, stdin, done, dir: dir.to_path_buf(), count: 0 };
        let prelude = r#"__host() { ip netns exec "$__HOSTNS" unshare --mount sh -c 'mount --bind "$0" /var/lib && exec "$@"' "$__VARLIB" "$@"; }"#;
        shell.ok(prelude);
        shell
    }

    fn run(&mut self, command: &str) -> Ran {
        self.count += 1;
        let (out, err) = (self.dir.join(format!("{}.out", self.count)), self.dir.join(format!("{}.err", self.count)));
        let script =
            format!("{{\n{command}\n}} </dev/null >'{}' 2>'{}'\necho \"__done $?\"\n", out.display(), err.display());
        let stdin = self.stdin.as_mut().expect("bash's stdin");
        stdin.write_all(script.as_bytes()).and_then(|()| stdin.flush()).expect("writing to bash");
        let line = self.done.recv_timeout(STEP_LIMIT).unwrap_or_else(|e| {
            let shell_err = fs::read_to_string(self.dir.join("shell.err")).unwrap_or_default();
            panic!("`{command}` did not finish within {STEP_LIMIT:?} ({e}); bash said: {shell_err}")
        });
        let status = line.strip_prefix("__done ").and_then(|s| s.parse().ok());
        let status = status.unwrap_or_else(|| panic!("`{command}`: unexpected output of bash: {line:?}"));
        let text = |p: &Path| fs::read_to_string(p).unwrap_or_default();
        Ran { status, stdout: text(&out), stderr: text(&err) }
    }

    /// Runs `command` and asserts it succeeded.
    fn ok(&mut self, command: &str) -> Ran {
        let ran = self.run(command);
        let shell_err = fs::read_to_string(self.dir.join("shell.err")).unwrap_or_default();
        assert_eq!(
            ran.status, 0,
            "`{command}` failed\n--- its stderr:\n{}--- its stdout:\n{}--- bash's: {shell_err}",
            ran.stderr, ran.stdout
        );
        ran
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the test runs a doc's commands (see the module's documentation).
struct Rewrite {
    bin: String,
    /// The doc's namespace names, each with the test's.
    namespaces: Vec<(String, String)>,
}

impl Rewrite {
    /// The command to run for `step`; None for the build and the install.
    fn apply(&self, step: &Step) -> Option<String> {
        if step.is_heredoc() {
            return Some(step.text.clone());
        }
        let command = step.command();
        if command == BUILD || command == INSTALL {
            return None;
        }
        let unknown = command.replace("$PWD/target/cni/bin", "");
        let unknown = unknown.split(' ').find(|w| !w.starts_with("target/cni/bin/") && w.contains("target/"));
        assert!(unknown.is_none(), "a use of target/ this test does not know: {command}");
        let command = command.replace("$PWD/target/cni/bin", &self.bin);
        let words: Vec<String> = command
            .split(' ')
            .map(|w| {
                match (self.namespaces.iter().find(|(readme, _)| readme == w), w.strip_prefix("target/cni/bin/")) {
                    (Some((_, ours)), _) => ours.clone(),
                    (None, Some(exe)) => format!("{}/{exe}", self.bin),
                    (None, None) => w.to_string(),
                }
            })
            .collect();
        let mut command = words.join(" ");
        // The operator's tool too: the examples' database is the default
        // one, under the test's /var/lib.
        if command.starts_with("ip link ") || command.starts_with(&format!("{}/ipam-delegated ", self.bin)) {
            command.insert_str(0, "__host ");
        } else if let Some(at) = command.find("scripts/cni ") {
            command.insert_str(at, "__host ");
        }
        // etcd (examples/cluster.conflist's) runs where the plugins run, in
        // the namespace that plays the host: `ip netns exec` becomes etcd,
        // so that `$!` is its pid.
        let command = command
            .replace("etcd --", "ip netns exec \"$__HOSTNS\" etcd --")
            .replace("etcdctl ", "ip netns exec \"$__HOSTNS\" etcdctl ");
        Some(command)
    }
}

/// Runs `steps` as a user would (rewritten as [`Rewrite`] says) and checks
/// after each what it claims. `expected`: the addresses ADD gives; `db`: the
/// allocation database as a shell word (expanded by the shell), relative to
/// /var/lib for the default one.
fn walk(steps: &[Step], expected: &[&str], db: &str, host: &Netns) {
    let sb = Sandbox::new();
    let varlib = sb.path().join("varlib");
    fs::create_dir(&varlib).expect("creating the test's /var/lib");
    let readme_ns = namespace_made(steps);
    // Removed at the end, also when the doc's `ip netns del` is not reached.
    let container = Netns { name: format!("ipam-e2e-{}", unique("w")) };
    let rewrite =
        Rewrite { bin: bin_dir().display().to_string(), namespaces: vec![(readme_ns, container.name.clone())] };
    let mut shell = Shell::new(&sb.path().join("shell"), host, &varlib);
    let database = |shell: &mut Shell| match db.strip_prefix("/var/lib/") {
        Some(under) => varlib.join(under),
        None => PathBuf::from(shell.ok(&format!("printf %s \"{db}\"")).stdout),
    };
    let mut cache_file = None;
    // Whether the network's stack is sticky: then DEL leaves the address held.
    let mut sticky = false;

    for step in steps {
        let Some(command) = rewrite.apply(step) else { continue };
        eprintln!("$ {command}");
        let ran = shell.ok(&command);
        let what = format!("`{}`", step.command());
        match step.verb() {
            Some("ADD") => {
                let words = step.cni_words().unwrap_or_default();
                let list: Value = serde_json::from_str(&shell.ok(&format!("cat {}", words[1])).stdout).expect("JSON");
                sticky = list["plugins"][0]["ipam"]["delegates"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|name| name == "ipam-da-sticky"));
                let file =
                    varlib.join(format!("cni/results/{}-{}-eth0", list["name"].as_str().expect("name"), words[2]));
                added(&ran, &what, expected, &container, &file, &database(&mut shell));
                cache_file = Some(file);
            }
            Some("CHECK") => assert_eq!(ran.stdout, "", "{what} is silent: {ran:#?}"),
            Some("DEL") => {
                assert_eq!(ran.stdout, "", "{what} is silent: {ran:#?}");
                assert!(!container.has_link("eth0"), "{what}: eth0 is still in {}", container.name);
                let left = list_leases(&database(&mut shell));
                let rows = left.as_array().expect("an array");
                let held = rows.iter().filter(|row| row["state"] == "held").count();
                assert_eq!(held, rows.len(), "{what}: leases are left: {left}");
                assert!(sticky || rows.is_empty(), "{what}: addresses are held, and the network is not sticky: {left}");
                let file = cache_file.as_ref().expect("DEL after ADD");
                assert!(!file.exists(), "{what}: the cached result {} is still there", file.display());
            }
            _ => {}
        }
        let command = step.command();
        if command.contains("ipam-delegated release --identity") {
            assert!(ran.stdout.starts_with("released "), "{what} releases a hold: {ran:#?}");
            assert_eq!(list_leases(&database(&mut shell)), Value::Array(Vec::new()), "{what}: rows are left");
        } else if command.contains("ipam-delegated list") {
            for address in expected {
                let ip = address.split('/').next().unwrap_or_default();
                assert!(ran.stdout.contains(ip) && ran.stdout.contains(" c1 "), "{what} lists {ip} for c1: {ran:#?}");
            }
        } else if command.starts_with("ip -n ") {
            for address in expected {
                assert!(ran.stdout.contains(address), "{what} shows {address}: {ran:#?}");
            }
        } else if command.starts_with("ip netns del ") {
            assert!(!netns_names().contains(&container.name), "{what}: the namespace is still there");
        } else if let Some(link) = command.strip_prefix("ip link del ") {
            assert!(!ip(&["-n", &host.name, "link", "show", link]).status.success(), "{what}: {link} is still there");
        }
    }
    assert!(cache_file.is_some(), "the commands never ran scripts/cni ADD: {steps:#?}");
}

/// After `scripts/cni ADD`: the result's addresses are `expected` and on eth0
/// in `container`, each is leased in `db`, and libcni's cache file holds the
/// result.
fn added(ran: &Ran, what: &str, expected: &[&str], container: &Netns, cache_file: &Path, db: &Path) {
    let result: Value =
        serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{what} prints JSON ({e}): {ran:#?}"));
    let addresses: Vec<&str> =
        result["ips"].as_array().into_iter().flatten().filter_map(|ip| ip["address"].as_str()).collect();
    assert_eq!(addresses, expected, "{what}: the result's addresses: {result}");
    let on_eth0: Vec<String> = container.addresses("eth0").iter().map(|(a, p)| format!("{a}/{p}")).collect();
    for address in expected {
        assert!(
            on_eth0.iter().any(|a| a == address),
            "{what}: {address} is not on eth0 in {}: {on_eth0:?}",
            container.name
        );
    }
    let leases = list_leases(db);
    let holders: Vec<&str> =
        leases.as_array().into_iter().flatten().filter_map(|l| l["container_id"].as_str()).collect();
    assert_eq!(holders.len(), expected.len(), "{what}: one lease per address in {}: {leases}", db.display());
    assert!(holders.iter().all(|h| *h == "c1"), "{what}: {leases}");
    let cached: Value = serde_json::from_slice(&fs::read(cache_file).unwrap_or_else(|e| {
        panic!("{what}: no cached result at {} (/var/lib is the test's): {e}", cache_file.display())
    }))
    .expect("the cache file is JSON");
    assert_eq!(
        (&cached["kind"], &cached["containerId"], &cached["ifName"]),
        (&"cniCacheV1".into(), &"c1".into(), &"eth0".into()),
        "{what}: {cached}"
    );
    assert_eq!(cached["result"], result, "{what}: the cached result is the one printed");
}

/// docs/walkthroughs.md's "Sticky addresses", run as [`Rewrite`] says: each
/// `scripts/cni ADD` gives the address its comment names, on eth0 in its
/// namespace; each DEL is silent; the listing shows db-0's address held for
/// it and db-1's leased; `release --identity` frees the held one.
fn sticky_walk(steps: &[Step], host: &Netns) {
    let sb = Sandbox::new();
    let varlib = sb.path().join("varlib");
    fs::create_dir(&varlib).expect("creating the test's /var/lib");
    let made = namespaces_made(steps);
    // Removed at the end, also when the doc's `ip netns del` is not reached.
    let ours: Vec<Netns> = made.iter().map(|_| Netns { name: format!("ipam-e2e-{}", unique("s")) }).collect();
    let namespaces: Vec<(String, String)> = made.iter().cloned().zip(ours.iter().map(|n| n.name.clone())).collect();
    let rewrite = Rewrite { bin: bin_dir().display().to_string(), namespaces: namespaces.clone() };
    let mut shell = Shell::new(&sb.path().join("shell"), host, &varlib);
    let mut adds = 0;
    for step in steps {
        let Some(command) = rewrite.apply(step) else { continue };
        eprintln!("$ {command}");
        let ran = shell.ok(&command);
        let what = format!("`{}`", step.command());
        let comment = step.text.lines().next().and_then(|l| l.split_once(" #")).map_or("", |(_, c)| c);
        match step.verb() {
            Some("ADD") => {
                let result: Value =
                    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{what} prints JSON ({e}): {ran:#?}"));
                let got: Vec<&str> =
                    result["ips"].as_array().into_iter().flatten().filter_map(|ip| ip["address"].as_str()).collect();
                let said: Vec<&str> = comment.split([' ', ',']).filter(|w| w.contains("/24")).collect();
                assert_eq!(got, said, "{what}: the result's addresses are the comment's: {result}");
                let readme_ns = step.cni_words().unwrap_or_default()[3];
                let ns = &ours[made.iter().position(|m| m == readme_ns).expect("a namespace the steps make")];
                let on_eth0: Vec<String> = ns.addresses("eth0").iter().map(|(a, p)| format!("{a}/{p}")).collect();
                for address in &said {
                    assert!(on_eth0.iter().any(|a| a == address), "{what}: {address} is not on eth0 in {}", ns.name);
                }
                adds += 1;
            }
            Some("DEL") => assert_eq!(ran.stdout, "", "{what} is silent: {ran:#?}"),
            _ => {}
        }
        let command = step.command();
        if command.contains("ipam-delegated list") {
            let rows: Vec<Vec<&str>> = ran.stdout.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
            let row = |address: &str| rows.iter().find(|r| r[1] == address).cloned().unwrap_or_default();
            // POOL ADDRESS NETWORK CONTAINER IFNAME SINCE STATE UNTIL IDENTITY
            assert_eq!(rows.len(), 2, "{what}: {ran:#?}");
            assert_eq!([row("10.45.0.10")[6], row("10.45.0.10")[8]], ["held", "prod/db-0"], "{what}: {ran:#?}");
            assert_eq!([row("10.45.0.11")[6], row("10.45.0.11")[8]], ["leased", "prod/db-1"], "{what}: {ran:#?}");
        } else if command.contains("release --database") {
            assert!(ran.stdout.starts_with("released 10.45.0.10 "), "{what}: {ran:#?}");
        } else if let Some(readme_ns) = command.strip_prefix("ip netns del ") {
            let ns = &namespaces.iter().find(|(readme, _)| readme == readme_ns).expect("a namespace made").1;
            assert!(!netns_names().contains(ns), "{what}: the namespace is still there");
        } else if let Some(link) = command.strip_prefix("ip link del ") {
            assert!(!ip(&["-n", &host.name, "link", "show", link]).status.success(), "{what}: {link} is still there");
        }
    }
    assert_eq!(adds, 3, "the walk-through's ADDs: {steps:#?}");
}

// ---------------------------------------------------------------------------
// The machine's own namespace, before and after

/// The tests of this file take turns: each compares the machine before and after itself.
static TURN: Mutex<()> = Mutex::new(());

/// Runs `scenario` with a fresh host namespace and asserts the machine is as
/// it was afterwards (netns::HostState, and whether /var/lib/cni exists),
/// also when the scenario failed.
fn leaving_the_machine_as_found(scenario: impl FnOnce(&Netns)) {
    prerequisites();
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let var_lib_cni = Path::new("/var/lib/cni").exists();
    netns::leaving_the_host_as_found("tests/walkthrough.rs", || scenario(&Netns::host()));
    assert_eq!(Path::new("/var/lib/cni").exists(), var_lib_cni, "whether /var/lib/cni exists changed");
}

// ---------------------------------------------------------------------------
// End to end

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn the_bridge_walk_through_as_written() {
    leaving_the_machine_as_found(|host| {
        walk(&bridge_steps(), &["10.22.1.0/16"], "$walk/allocations.sqlite", host);
        assert_eq!(host.forwarding(), ["0", "0"], "the walk-through leaves the host's forwarding alone");
    });
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn the_sticky_walk_through_as_written() {
    leaving_the_machine_as_found(|host| {
        // As docs/walkthroughs.md says: after the first walk-through's set-up (CNI_PATH).
        let setup = bridge_steps().into_iter().filter(|s| s.command().starts_with("export CNI_PATH="));
        let steps: Vec<Step> = setup.chain(sticky_steps()).collect();
        sticky_walk(&steps, host);
        assert_eq!(host.forwarding(), ["0", "0"], "the walk-through leaves the host's forwarding alone");
    });
}

/// examples/README.md's set-up, the block of `stem`, and its clean-up.
fn example(stem: &str) {
    leaving_the_machine_as_found(|host| {
        if conflist(stem)["plugins"][0]["ipam"].get("cluster").is_some() {
            // Its etcd listens on the host namespace's loopback.
            ip_ok(&["-n", &host.name, "link", "set", "lo", "up"]);
        }
        if conflist(stem)["plugins"][0]["type"] == "macvlan" {
            // The example's master, eth0, as a veth pair inside the host namespace.
            let master = conflist(stem)["plugins"][0]["master"].as_str().expect("master").to_string();
            let peer = unique("mp");
            ip_ok(&["-n", &host.name, "link", "add", &master, "type", "veth", "peer", "name", &peer]);
            ip_ok(&["-n", &host.name, "link", "set", &master, "up"]);
            ip_ok(&["-n", &host.name, "link", "set", &peer, "up"]);
        }
        let blocks = example_blocks();
        let block = blocks.examples.iter().find(|(s, _)| s == stem).map(|(_, b)| b.clone());
        let block = block.unwrap_or_else(|| panic!("examples/README.md has no block for {stem}.conflist"));
        let steps: Vec<Step> = blocks.setup.iter().chain(&block).chain(&blocks.done).cloned().collect();
        walk(&steps, expected_addresses(stem), "/var/lib/cni/ipam-delegated/allocations.sqlite", host);
        // As examples/README.md says: isGateway turns forwarding on (IPv6 too
        // for an IPv6 pool) and leaves it on.
        let gateway = conflist(stem)["plugins"][0]["isGateway"] == true;
        let ipv6 = expected_addresses(stem).iter().any(|a| a.contains(':'));
        let on = |yes: bool| if yes { "1" } else { "0" };
        assert_eq!(host.forwarding(), [on(gateway), on(gateway && ipv6)], "{stem}: forwarding in the host");
    });
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_bridge() {
    example("bridge");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_macvlan() {
    example("macvlan");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_dual_stack() {
    example("dual-stack");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_spillover() {
    example("spillover");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_per_namespace() {
    example("per-namespace");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_static() {
    example("static");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_ip_ranges() {
    example("ip-ranges");
}

#[test]
#[ignore = "needs root, network namespaces and Debian's containernetworking-plugins (bash scripts/test runs them)"]
fn example_sticky() {
    example("sticky");
}

#[test]
#[ignore = "needs root, network namespaces, Debian's containernetworking-plugins and etcd-server (bash scripts/test runs them)"]
fn example_cluster() {
    example("cluster");
}
