//! ipam-delegated runs the suite's own delegates inside its process when the
//! file it finds in CNI_PATH is the very program it is (the fast layout:
//! ipam-delegated and the delegates' names linked to it), and execs any other
//! file. These tests hold the two paths to one behaviour: the same scenario,
//! run against the fast layout and against a layout where every delegate is a
//! copy of its own (so every one is exec'd), gives byte-identical stdout,
//! identical exit codes and the same stderr (timestamps aside), for every
//! command and every spec version; and another program installed under a
//! delegate's name, or interleaved with the built-in ones, is exec'd and
//! chained as the contract says.
//!
//! Both layouts are installed, one after the other, in the same directory of
//! the sandbox, `bin/`, and use the same database path, so that the paths in
//! error messages are the same too. Each run first proves its layout: by the
//! files' inodes, and by tracing the execve calls of one ADD with strace.

mod support;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};
use support::{
    addresses, assert_error, bin_dir, copies_dir, result_addresses, run_args, with, with_prev, Outcome, Response,
    Sandbox, IFNAME, NETNS, SUITE_EXECUTABLES,
};

const DELEGATED: &str = "ipam-delegated";
const POOL: &str = "ipam-ds-pool";
const STATIC: &str = "ipam-da-static";
const SEQUENTIAL: &str = "ipam-da-sequential";
const VERSIONS: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Whether `version` is `min` or later (both from [`VERSIONS`]).
fn at_least(version: &str, min: &str) -> bool {
    let index = |v: &str| VERSIONS.iter().position(|x| *x == v).unwrap_or_else(|| panic!("unknown version {v}"));
    index(version) >= index(min)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// `ipam-delegated` and the delegates' names all one file: delegates run in-process.
    Fast,
    /// Each name a copy of its own: every delegate is exec'd.
    Copies,
}

/// A sandbox with a `bin/` directory that holds one layout at a time, and
/// optionally the sandbox's fake delegates ahead of it in CNI_PATH.
struct Lab {
    sb: Sandbox,
    with_fakes: bool,
}

impl Lab {
    fn new(with_fakes: bool) -> Lab {
        Lab { sb: Sandbox::new(), with_fakes }
    }

    fn bin(&self) -> PathBuf {
        self.sb.path().join("bin")
    }

    /// The orchestrator as a runtime runs it: from `bin/`.
    fn exe(&self) -> PathBuf {
        self.bin().join(DELEGATED)
    }

    fn cni_path(&self) -> String {
        match self.with_fakes {
            true => format!("{}:{}", self.sb.fakes_dir().display(), self.bin().display()),
            false => self.bin().display().to_string(),
        }
    }

    fn db(&self) -> PathBuf {
        self.sb.db()
    }

    /// Fills `bin/` with `layout`, replacing what was there.
    fn install(&self, layout: Layout) {
        let bin = self.bin();
        if bin.exists() {
            std::fs::remove_dir_all(&bin).unwrap();
        }
        std::fs::create_dir(&bin).unwrap();
        for name in SUITE_EXECUTABLES {
            let target = match (layout, name) {
                (Layout::Fast, DELEGATED) => bin_dir().join(DELEGATED),
                // As scripts/install lays them out: links to ipam-delegated.
                (Layout::Fast, _) => PathBuf::from(DELEGATED),
                (Layout::Copies, _) => copies_dir().join(name),
            };
            std::os::unix::fs::symlink(&target, bin.join(name)).unwrap();
        }
    }

    /// A fresh database (same path) and fresh fake records.
    fn wipe(&self) {
        let db_dir = self.db().parent().unwrap().to_path_buf();
        if db_dir.exists() {
            std::fs::remove_dir_all(&db_dir).unwrap();
        }
        std::fs::write(self.sb.path().join("calls.log"), "").unwrap();
        for entry in std::fs::read_dir(self.sb.path().join("records")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }

    /// The environment of a runtime's call of `command` for (`ctr`, eth0).
    fn env(&self, command: &str, ctr: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let cni_path = self.cni_path();
        let mut overrides = vec![("CNI_CONTAINERID", ctr), ("CNI_PATH", cni_path.as_str())];
        overrides.extend_from_slice(extra);
        self.sb.env(command, &overrides)
    }

    /// Runs the orchestrator of `bin/` for a runtime's call.
    fn cni(&self, command: &str, config: &Value, ctr: &str, extra: &[(&str, &str)]) -> Outcome {
        let env = self.env(command, ctr, extra);
        self.sb.cni_env(self.exe().to_str().unwrap(), &env, config.to_string().as_bytes())
    }

    /// Runs the operator's tool of `bin/` on the database: `args`, then `--json --database DB`.
    fn operator(&self, args: &[&str]) -> Outcome {
        let db = self.db();
        let mut all = args.to_vec();
        all.extend(["--json", "--database", db.to_str().unwrap()]);
        run_args(&self.exe(), &all, &[], b"", Some(&self.sb.workdir()))
    }
}

/// What one run of a scenario produced, in order: each call's outcome under a
/// unique label (stderr without timestamps).
#[derive(Debug, Default)]
struct Transcript {
    entries: Vec<(String, Outcome)>,
}

impl Transcript {
    fn get(&self, version: &str, label: &str) -> &Outcome {
        let key = format!("{version} {label}");
        self.entries
            .iter()
            .find(|(l, _)| *l == key)
            .map(|(_, o)| o)
            .unwrap_or_else(|| panic!("no entry {key:?} in the transcript"))
    }
}

/// One layout's run of a scenario: records what every call gives.
struct Run<'a> {
    lab: &'a Lab,
    version: &'static str,
    transcript: Transcript,
}

impl Run<'_> {
    fn record(&mut self, label: &str, mut out: Outcome) -> Outcome {
        let key = format!("{} {label}", self.version);
        assert!(self.transcript.entries.iter().all(|(l, _)| *l != key), "label {key:?} used twice");
        out.stderr = strip_timestamps(&out.stderr);
        self.transcript.entries.push((key, out.clone()));
        out
    }

    /// A runtime's call of ipam-delegated for the attachment (`ctr`, eth0).
    fn cni(&mut self, label: &str, command: &str, config: &Value, ctr: &str, extra: &[(&str, &str)]) -> Outcome {
        let out = self.lab.cni(command, config, ctr, extra);
        self.record(label, out)
    }

    /// The database as the operator sees it: every lease (without the time it
    /// was taken) and every pool with its next address.
    fn database(&mut self, label: &str) -> Outcome {
        let mut list = self.lab.operator(&["list"]);
        if let Some(Value::Array(leases)) = &mut list.json {
            for lease in leases.iter_mut() {
                lease.as_object_mut().map(|l| l.remove("since"));
            }
        }
        let pools = self.lab.operator(&["pools"]);
        let json = json!({"leases": list.json, "pools": pools.json});
        let out = Outcome {
            status: list.status.max(pools.status),
            stdout: json.to_string(),
            stderr: format!("{}{}", list.stderr, pools.stderr),
            json: Some(json),
        };
        self.record(label, out)
    }

    /// Something the fakes recorded, to be compared across layouts too.
    fn note(&mut self, label: &str, text: String) {
        let json = serde_json::from_str(&text).ok();
        self.record(label, Outcome { status: 0, stdout: text, stderr: String::new(), json });
    }

    /// The fakes' calls so far, as one note.
    fn note_calls(&mut self, label: &str) {
        let calls = self.lab.sb.call_list().join("\n");
        self.note(label, calls);
    }
}

/// Removes the timestamp that starts a log line
/// (`2026-11-23T17:51:52.512127Z ERROR cni{…}: …` → ` ERROR cni{…}: …`).
fn strip_timestamps(stderr: &str) -> String {
    let mut out = String::with_capacity(stderr.len());
    for line in stderr.split_inclusive('\n') {
        let b = line.as_bytes();
        let stamped = b.len() > 20
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':';
        match line.find(' ').filter(|&sp| stamped && line[..sp].ends_with('Z')) {
            Some(sp) => out.push_str(&line[sp..]),
            None => out.push_str(line),
        }
    }
    out
}

/// Runs `scenario` for each of `versions`, each on a fresh database, once
/// with the fast layout and once with the copies, and asserts that the two
/// transcripts are the same. Returns the fast layout's.
fn both_layouts(lab: &Lab, versions: &[&'static str], scenario: impl Fn(&mut Run)) -> Transcript {
    let mut transcripts = Vec::new();
    for layout in [Layout::Fast, Layout::Copies] {
        lab.install(layout);
        prove_layout(lab, layout);
        let mut transcript = Transcript::default();
        for &version in versions {
            lab.wipe();
            let mut run = Run { lab, version, transcript };
            scenario(&mut run);
            transcript = run.transcript;
        }
        transcripts.push(transcript);
    }
    let copies = transcripts.pop().unwrap();
    let fast = transcripts.pop().unwrap();
    assert_same(&fast, &copies);
    fast
}

/// Every call's label, exit code, stdout and stderr must be the same.
fn assert_same(fast: &Transcript, copies: &Transcript) {
    let labels = |t: &Transcript| t.entries.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    assert_eq!(labels(fast), labels(copies), "the two runs made different calls");
    let mut differences = Vec::new();
    for ((label, f), (_, c)) in fast.entries.iter().zip(&copies.entries) {
        let mut what = Vec::new();
        if f.status != c.status {
            what.push(format!("  exit code: fast {} / copies {}", f.status, c.status));
        }
        if f.stdout != c.stdout {
            what.push(format!("  stdout:\n    fast:   {:?}\n    copies: {:?}", f.stdout, c.stdout));
        }
        if f.stderr != c.stderr {
            what.push(format!("  stderr:\n    fast:   {:?}\n    copies: {:?}", f.stderr, c.stderr));
        }
        if !what.is_empty() {
            differences.push(format!("{label}:\n{}", what.join("\n")));
        }
    }
    assert!(
        differences.is_empty(),
        "the fast layout (in-process delegates) and the copies (exec'd delegates) differ in {} of {} calls:\n{}",
        differences.len(),
        fast.entries.len(),
        differences.join("\n")
    );
}

/// The execve calls of one ADD of the orchestrator in `bin/` with CNI_PATH
/// = `bin/` only, traced with strace, stack [ipam-ds-pool,
/// ipam-da-sequential]: the paths executed, in order, and the outcome.
fn traced_add(lab: &Lab, delegates: &[&str]) -> (Vec<String>, Outcome) {
    let available = Command::new("strace").arg("-V").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(available, "strace is needed to prove which delegates run in-process (apt-get install -y strace)");
    let dir = lab.sb.path().join("layout-check");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("strace.txt");
    let config = json!({
        "cniVersion": "1.1.0",
        "name": "layout-check",
        "type": "bridge",
        "ipam": {
            "type": DELEGATED,
            "delegates": delegates,
            "database": dir.join("db.sqlite"),
            "pools": [{"name": "lc", "ranges": [{"subnet": "10.250.0.0/24"}]}]
        }
    });
    let bin = lab.bin().display().to_string();
    let env = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "layout-check"),
        ("CNI_NETNS", NETNS),
        ("CNI_IFNAME", IFNAME),
        ("CNI_PATH", bin.as_str()),
    ];
    let exe = lab.exe();
    let args = ["-f", "-e", "trace=execve", "-o", trace.to_str().unwrap(), exe.to_str().unwrap()];
    let out = run_args(Path::new("strace"), &args, &env, config.to_string().as_bytes(), Some(&lab.sb.workdir()));
    let text = std::fs::read_to_string(&trace).unwrap();
    let execs = text
        .lines()
        .filter_map(|l| {
            l.split_once("execve(\"").and_then(|(_, rest)| rest.split_once('"')).map(|(p, _)| p.to_string())
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    (execs, out)
}

/// Asserts that `bin/` holds `layout`: by inodes, and by what one ADD execs.
fn prove_layout(lab: &Lab, layout: Layout) {
    let bin = lab.bin();
    let file = |name: &str| {
        let meta = std::fs::metadata(bin.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        (meta.dev(), meta.ino())
    };
    for name in [POOL, STATIC, SEQUENTIAL] {
        match layout {
            Layout::Fast => assert_eq!(file(name), file(DELEGATED), "fast layout: {name} is not ipam-delegated's file"),
            Layout::Copies => assert_ne!(file(name), file(DELEGATED), "copies: {name} is ipam-delegated's file"),
        }
    }
    let (execs, out) = traced_add(lab, &[POOL, SEQUENTIAL]);
    assert_eq!(addresses(&out), ["10.250.0.2/24"], "the layout check's ADD: {out:#?}");
    let path = |name: &str| bin.join(name).display().to_string();
    let expected = match layout {
        Layout::Fast => vec![path(DELEGATED)],
        Layout::Copies => vec![path(DELEGATED), path(POOL), path(SEQUENTIAL)],
    };
    assert_eq!(execs, expected, "{layout:?}: the execve calls of one ADD");
}

// ---------------------------------------------------------------------------
// Configurations and results

/// A network configuration named `name` whose IPAM is ipam-delegated running
/// `delegates` on the lab's database with `pools`.
fn net(lab: &Lab, version: &str, name: &str, delegates: &[&str], pools: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": name,
        "type": "bridge",
        "ipam": {"type": DELEGATED, "delegates": delegates, "database": lab.db(), "pools": pools}
    })
}

fn pool(name: &str, subnet: &str) -> Value {
    json!({"name": name, "ranges": [{"subnet": subnet}]})
}

/// Asserts the outcome of a command that `version` may or may not allow:
/// `allowed` checks it when allowed; otherwise it must be error 1.
fn when_allowed(version: &str, min: &str, out: &Outcome, allowed: impl FnOnce(&Outcome)) {
    if at_least(version, min) {
        allowed(out);
    } else {
        assert_error(out, 1, &[&format!("cniVersion {version} does not allow")]);
    }
}

/// The leases of a [`Run::database`] entry, as "address container ifname network".
fn leases(out: &Outcome) -> BTreeSet<String> {
    let json = out.json.as_ref().unwrap_or_else(|| panic!("no JSON: {out:#?}"));
    assert_eq!(out.status, 0, "the operator's tool failed: {out:#?}");
    json["leases"]
        .as_array()
        .unwrap_or_else(|| panic!("no leases in {json}"))
        .iter()
        .map(|l| {
            format!(
                "{} {} {} {}",
                l["address"].as_str().unwrap(),
                l["container_id"].as_str().unwrap(),
                l["ifname"].as_str().unwrap(),
                l["network"].as_str().unwrap()
            )
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// 1. The same scenario both ways

#[test]
fn example_flow_is_identical_in_process_and_exec_for_every_command_and_version() {
    let started = Instant::now();
    let lab = Lab::new(false);
    let pools = json!([pool("ex4", "10.1.0.0/24"), pool("ex6", "fd00:1::/64")]);
    let t = both_layouts(&lab, &VERSIONS, |r| {
        let v = r.version;
        let config = net(r.lab, v, "example", &[POOL, SEQUENTIAL], pools.clone());
        r.cni("VERSION", "VERSION", &json!({"cniVersion": v}), "c1", &[]);
        let add = r.cni("ADD", "ADD", &config, "c1", &[]);
        r.cni("ADD again", "ADD", &config, "c1", &[]);
        r.database("database after ADD");
        let checked = with_prev(&config, add.json.as_ref().unwrap_or(&Value::Null));
        r.cni("CHECK", "CHECK", &checked, "c1", &[]);
        r.cni("CHECK of another attachment", "CHECK", &checked, "c2", &[]);
        let valid = json!([{"containerID": "c1", "ifname": IFNAME}]);
        r.cni("GC", "GC", &with(&config, "cni.dev/valid-attachments", valid), "c1", &[]);
        r.cni("STATUS", "STATUS", &config, "c1", &[]);
        r.cni("DEL", "DEL", &checked, "c1", &[]);
        r.database("database after DEL");
        r.cni("DEL again", "DEL", &config, "c1", &[]);
        r.cni("unknown command", "FROB", &config, "c1", &[]);
    });
    for v in VERSIONS {
        let version = t.get(v, "VERSION");
        assert_eq!(version.result()["cniVersion"], v, "{version:#?}");
        assert_eq!(version.result()["supportedVersions"].as_array().map(Vec::len), Some(7), "{version:#?}");
        let add = t.get(v, "ADD");
        assert_eq!(addresses(add), ["10.1.0.2/24", "fd00:1::2/64"], "{v}");
        assert_eq!(add.result()["cniVersion"], v);
        assert!(add.result().get("pools").is_none(), "{add:#?}");
        assert_eq!(t.get(v, "ADD again").stdout, add.stdout, "{v}: a repeated ADD answers the same");
        assert_eq!(
            leases(t.get(v, "database after ADD")),
            set(&["10.1.0.2 c1 eth0 example", "fd00:1::2 c1 eth0 example"]),
            "{v}"
        );
        when_allowed(v, "0.4.0", t.get(v, "CHECK"), Outcome::assert_quiet_success);
        when_allowed(v, "0.4.0", t.get(v, "CHECK of another attachment"), |o| assert_error(o, 104, &["10.1.0.2"]));
        when_allowed(v, "1.1.0", t.get(v, "GC"), Outcome::assert_quiet_success);
        when_allowed(v, "1.1.0", t.get(v, "STATUS"), Outcome::assert_quiet_success);
        t.get(v, "DEL").assert_quiet_success();
        assert_eq!(leases(t.get(v, "database after DEL")), set(&[]), "{v}");
        t.get(v, "DEL again").assert_quiet_success();
        assert_eq!(t.get(v, "unknown command").code(), 4, "{v}");
    }
    eprintln!("example flow: {:?}", started.elapsed());
}

#[test]
fn rollback_at_each_position_of_the_stack_is_identical_in_process_and_exec() {
    let started = Instant::now();
    let lab = Lab::new(false);
    let pools = json!([pool("r4", "10.3.0.0/24"), pool("r6", "fd00:3::/64")]);
    let t = both_layouts(&lab, &VERSIONS, |r| {
        let v = r.version;
        let standard = net(r.lab, v, "rollnet", &[POOL, STATIC, SEQUENTIAL], pools.clone());
        let asking = |config: &Value, args: Value| with(config, "args", json!({"cni": args}));
        r.cni("holder ADD", "ADD", &asking(&standard, json!({"ips": ["10.3.0.5"]})), "holder", &[]);
        // Position 1: the selector, on an unknown pool name.
        r.cni("step 1 fails", "ADD", &asking(&standard, json!({"pools": ["nope"]})), "c1", &[]);
        // Position 2: the static allocator, on an address another attachment holds.
        r.cni("step 2 fails", "ADD", &asking(&standard, json!({"ips": ["10.3.0.5"]})), "c2", &[]);
        // Position 3: the static allocator after the sequential one took addresses.
        let sequential_first = net(r.lab, v, "rollnet", &[POOL, SEQUENTIAL, STATIC], pools.clone());
        r.cni(
            "step 3 fails after sequential",
            "ADD",
            &asking(&sequential_first, json!({"ips": ["10.3.0.5"]})),
            "c2",
            &[],
        );
        r.database("database after the failed ADDs");
        // Position 3: the sequential allocator on a full pool, after the static one took an address.
        let tiny = net(r.lab, v, "rollnet", &[POOL, SEQUENTIAL], json!([pool("tiny4", "10.4.0.0/30")]));
        r.cni("filler ADD", "ADD", &tiny, "filler", &[]);
        let full = net(
            r.lab,
            v,
            "rollnet",
            &[POOL, STATIC, SEQUENTIAL],
            json!([pool("tiny4", "10.4.0.0/30"), pool("r6", "fd00:3::/64")]),
        );
        r.cni("step 3 fails exhausted", "ADD", &asking(&full, json!({"ips": ["fd00:3::9"]})), "c3", &[]);
        r.database("database after exhaustion");
        r.cni("later ADD", "ADD", &standard, "c4", &[]);
        r.database("database at the end");
    });
    for v in VERSIONS {
        assert_eq!(addresses(t.get(v, "holder ADD")), ["10.3.0.5/24", "fd00:3::2/64"], "{v}");
        assert_error(
            t.get(v, "step 1 fails"),
            7,
            &["nope", "delegate \"ipam-ds-pool\" (step 1 of 3) failed ADD; rollback: DEL \"ipam-ds-pool\" ok"],
        );
        assert_error(
            t.get(v, "step 2 fails"),
            101,
            &[
                "holder",
                "delegate \"ipam-da-static\" (step 2 of 3) failed ADD; rollback: DEL \"ipam-ds-pool\" ok; DEL \
                 \"ipam-da-static\" ok",
            ],
        );
        assert_error(
            t.get(v, "step 3 fails after sequential"),
            101,
            &[
                "holder",
                "delegate \"ipam-da-static\" (step 3 of 3) failed ADD; rollback: DEL \"ipam-ds-pool\" ok; DEL \
                 \"ipam-da-sequential\" ok; DEL \"ipam-da-static\" ok",
            ],
        );
        let holder = ["10.3.0.5 holder eth0 rollnet", "fd00:3::2 holder eth0 rollnet"];
        assert_eq!(leases(t.get(v, "database after the failed ADDs")), set(&holder), "{v}");
        assert_eq!(addresses(t.get(v, "filler ADD")), ["10.4.0.2/30"], "{v}");
        assert_error(t.get(v, "step 3 fails exhausted"), 100, &["delegate \"ipam-da-sequential\" (step 3 of 3)"]);
        let mut after = holder.to_vec();
        after.push("10.4.0.2 filler eth0 rollnet");
        assert_eq!(leases(t.get(v, "database after exhaustion")), set(&after), "{v}: fd00:3::9 was rolled back");
        // Nothing of c2's or c3's stayed leased: the later ADD and the holder's and filler's leases are all.
        // (The rollback releases the leases; round robin goes on after the addresses c2 had
        // for a moment, in both layouts: 10.3.0.3 and fd00:3::4.)
        let later = addresses(t.get(v, "later ADD"));
        assert!(later.len() == 2 && !later.contains(&"10.3.0.5/24".to_string()), "{v}: {later:?}");
        let ended: Vec<String> =
            later.iter().map(|a| format!("{} c4 eth0 rollnet", a.split('/').next().unwrap())).collect();
        after.extend(ended.iter().map(String::as_str));
        assert_eq!(leases(t.get(v, "database at the end")), set(&after), "{v}");
    }
    eprintln!("rollback: {:?}", started.elapsed());
}

#[test]
fn static_conflicts_are_identical_in_process_and_exec() {
    let started = Instant::now();
    let lab = Lab::new(false);
    let t = both_layouts(&lab, &VERSIONS, |r| {
        let v = r.version;
        let config = net(r.lab, v, "staticnet", &[POOL, STATIC, SEQUENTIAL], json!([pool("s4", "10.5.0.0/24")]));
        let by_args = [("CNI_ARGS", "IgnoreUnknown=1;IP=10.5.0.7")];
        r.cni("a asks by CNI_ARGS", "ADD", &config, "ctr-a", &by_args);
        let by_runtime = with(&config, "runtimeConfig", json!({"ips": ["10.5.0.7/24"]}));
        r.cni("b asks by runtimeConfig", "ADD", &by_runtime, "ctr-b", &[]);
        let by_cni_args = with(&config, "args", json!({"cni": {"ips": ["10.5.0.7"]}}));
        r.cni("c asks by args.cni.ips", "ADD", &by_cni_args, "ctr-c", &[]);
        r.cni("a asks again", "ADD", &config, "ctr-a", &by_args);
        r.database("database while a holds it");
        r.cni("DEL a", "DEL", &config, "ctr-a", &by_args);
        r.cni("b asks again", "ADD", &by_runtime, "ctr-b", &[]);
        r.database("database at the end");
    });
    for v in VERSIONS {
        let a = t.get(v, "a asks by CNI_ARGS");
        assert_eq!(addresses(a), ["10.5.0.7/24"], "{v}");
        assert_error(t.get(v, "b asks by runtimeConfig"), 101, &["10.5.0.7", "ctr-a"]);
        assert_error(t.get(v, "c asks by args.cni.ips"), 101, &["10.5.0.7", "ctr-a"]);
        assert_eq!(t.get(v, "a asks again").stdout, a.stdout, "{v}");
        assert_eq!(leases(t.get(v, "database while a holds it")), set(&["10.5.0.7 ctr-a eth0 staticnet"]), "{v}");
        t.get(v, "DEL a").assert_quiet_success();
        assert_eq!(addresses(t.get(v, "b asks again")), ["10.5.0.7/24"], "{v}");
        assert_eq!(leases(t.get(v, "database at the end")), set(&["10.5.0.7 ctr-b eth0 staticnet"]), "{v}");
    }
    eprintln!("static conflicts: {:?}", started.elapsed());
}

#[test]
fn exhaustion_is_identical_in_process_and_exec() {
    let started = Instant::now();
    let lab = Lab::new(false);
    let t = both_layouts(&lab, &VERSIONS, |r| {
        let v = r.version;
        let config = net(r.lab, v, "smallnet", &[POOL, SEQUENTIAL], json!([pool("x4", "10.6.0.0/29")]));
        r.cni("STATUS when empty", "STATUS", &config, "e0", &[]);
        for i in 0..5 {
            r.cni(&format!("ADD e{i}"), "ADD", &config, &format!("e{i}"), &[]);
        }
        r.cni("ADD e5 when full", "ADD", &config, "e5", &[]);
        r.cni("STATUS when full", "STATUS", &config, "e5", &[]);
        r.database("database when full");
        r.cni("DEL e2", "DEL", &config, "e2", &[]);
        r.cni("ADD e5 after a DEL", "ADD", &config, "e5", &[]);
        r.cni("ADD e6 when full again", "ADD", &config, "e6", &[]);
    });
    for v in VERSIONS {
        when_allowed(v, "1.1.0", t.get(v, "STATUS when empty"), Outcome::assert_quiet_success);
        for i in 0..5 {
            assert_eq!(addresses(t.get(v, &format!("ADD e{i}"))), [format!("10.6.0.{}/29", i + 2)], "{v}");
        }
        assert_error(t.get(v, "ADD e5 when full"), 100, &["x4"]);
        when_allowed(v, "1.1.0", t.get(v, "STATUS when full"), |o| assert_error(o, 50, &[]));
        assert_eq!(leases(t.get(v, "database when full")).len(), 5, "{v}");
        t.get(v, "DEL e2").assert_quiet_success();
        assert_eq!(addresses(t.get(v, "ADD e5 after a DEL")), ["10.6.0.4/29"], "{v}");
        assert_error(t.get(v, "ADD e6 when full again"), 100, &[]);
    }
    eprintln!("exhaustion: {:?}", started.elapsed());
}

#[test]
fn gc_and_status_are_identical_in_process_and_exec() {
    let started = Instant::now();
    let lab = Lab::new(false);
    let t = both_layouts(&lab, &VERSIONS, |r| {
        let v = r.version;
        let pools = json!([pool("g4", "10.7.0.0/24"), pool("g6", "fd00:7::/64")]);
        let config = net(r.lab, v, "gcnet", &[POOL, STATIC, SEQUENTIAL], pools);
        let other = net(r.lab, v, "othernet", &[POOL, SEQUENTIAL], json!([pool("o4", "10.17.0.0/24")]));
        r.cni("STATUS", "STATUS", &config, "g1", &[]);
        r.cni("ADD g1", "ADD", &config, "g1", &[]);
        r.cni("ADD g2", "ADD", &config, "g2", &[]);
        r.cni("ADD o1 of another network", "ADD", &other, "o1", &[]);
        r.cni("GC without valid-attachments", "GC", &config, "g1", &[]);
        r.database("database before GC");
        let valid = json!([{"containerID": "g1", "ifname": IFNAME}]);
        r.cni("GC keeping g1", "GC", &with(&config, "cni.dev/valid-attachments", valid), "g1", &[]);
        r.database("database after GC");
        let tiny = net(r.lab, v, "fullnet", &[POOL, SEQUENTIAL], json!([pool("f4", "10.8.0.0/30")]));
        r.cni("STATUS of the tiny network", "STATUS", &tiny, "f1", &[]);
        r.cni("ADD f1 filling it", "ADD", &tiny, "f1", &[]);
        r.cni("STATUS of the full network", "STATUS", &tiny, "f1", &[]);
        r.cni("GC keeping nothing", "GC", &with(&tiny, "cni.dev/valid-attachments", json!([])), "f1", &[]);
        r.cni("STATUS after GC", "STATUS", &tiny, "f1", &[]);
        r.database("database at the end");
    });
    for v in VERSIONS {
        when_allowed(v, "1.1.0", t.get(v, "STATUS"), Outcome::assert_quiet_success);
        assert_eq!(addresses(t.get(v, "ADD g1")), ["10.7.0.2/24", "fd00:7::2/64"], "{v}");
        assert_eq!(addresses(t.get(v, "ADD g2")), ["10.7.0.3/24", "fd00:7::3/64"], "{v}");
        assert_eq!(addresses(t.get(v, "ADD o1 of another network")), ["10.17.0.2/24"], "{v}");
        when_allowed(v, "1.1.0", t.get(v, "GC without valid-attachments"), |o| {
            assert_error(o, 7, &["cni.dev/valid-attachments"])
        });
        let g1 = ["10.7.0.2 g1 eth0 gcnet", "fd00:7::2 g1 eth0 gcnet", "10.17.0.2 o1 eth0 othernet"];
        let mut all = g1.to_vec();
        all.extend(["10.7.0.3 g2 eth0 gcnet", "fd00:7::3 g2 eth0 gcnet"]);
        assert_eq!(leases(t.get(v, "database before GC")), set(&all), "{v}");
        assert_eq!(addresses(t.get(v, "ADD f1 filling it")), ["10.8.0.2/30"], "{v}");
        when_allowed(v, "1.1.0", t.get(v, "GC keeping g1"), Outcome::assert_quiet_success);
        when_allowed(v, "1.1.0", t.get(v, "STATUS of the tiny network"), Outcome::assert_quiet_success);
        when_allowed(v, "1.1.0", t.get(v, "STATUS of the full network"), |o| assert_error(o, 50, &["f4"]));
        when_allowed(v, "1.1.0", t.get(v, "GC keeping nothing"), Outcome::assert_quiet_success);
        when_allowed(v, "1.1.0", t.get(v, "STATUS after GC"), Outcome::assert_quiet_success);
        if at_least(v, "1.1.0") {
            assert_eq!(leases(t.get(v, "database after GC")), set(&g1), "{v}");
            assert_eq!(leases(t.get(v, "database at the end")), set(&g1), "{v}");
        } else {
            assert_eq!(leases(t.get(v, "database after GC")), set(&all), "{v}: GC is not allowed");
        }
    }
    eprintln!("GC and STATUS: {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------
// 2. Another program under a delegate's name

#[test]
fn a_delegate_replaced_by_another_program_is_executed_and_answers() {
    let lab = Lab::new(false);
    lab.install(Layout::Fast);
    let bin = lab.bin();
    std::fs::remove_file(bin.join(SEQUENTIAL)).unwrap();
    lab.sb.fake_in(&bin, SEQUENTIAL);

    // The layout check's own ADD: ipam-ds-pool runs in-process, the fake is exec'd.
    let (execs, out) = traced_add(&lab, &[POOL, SEQUENTIAL]);
    assert_eq!(out.status, 0, "{out:#?}");
    let path = |name: &str| bin.join(name).display().to_string();
    assert_eq!(execs.iter().filter(|e| **e == path(SEQUENTIAL)).count(), 1, "{execs:#?}");
    assert!(!execs.contains(&path(POOL)), "ipam-ds-pool was exec'd: {execs:#?}");
    assert_eq!(execs[0], path(DELEGATED), "{execs:#?}");
    lab.wipe();

    let pools = json!([{"name": "fk4", "ranges": [{"subnet": "10.9.0.0/24"}], "routes": [{"dst": "0.0.0.0/0"}]}]);
    let config = net(&lab, "1.0.0", "fakenet", &[POOL, SEQUENTIAL], pools);
    // By default the fake passes its prevResult on: ipam-ds-pool's output, pools and all.
    let out = lab.cni("ADD", &config, "k1", &[]);
    assert_eq!(lab.sb.call_list(), ["ipam-da-sequential ADD"]);
    let given = lab.sb.record_json(0);
    let prev = &given["prevResult"];
    assert_eq!(prev["pools"][0]["name"], "fk4", "{given:#}");
    assert_eq!(prev["pools"][0]["ranges"][0]["subnet"], "10.9.0.0/24", "{given:#}");
    assert!(prev.get("ips").and_then(Value::as_array).is_none_or(Vec::is_empty), "{given:#}");
    assert_eq!(with(&given, "prevResult", Value::Null), with(&config, "prevResult", Value::Null));
    let env = lab.sb.record(0).1;
    assert_eq!(env.get("CNI_COMMAND").map(String::as_str), Some("ADD"));
    assert_eq!(env.get("CNI_CONTAINERID").map(String::as_str), Some("k1"));
    assert_eq!(env.get("CNI_PATH"), Some(&lab.cni_path()));
    // The answer is what the fake printed (the prevResult), without the pools.
    let mut passed = prev.clone();
    passed.as_object_mut().unwrap().remove("pools");
    assert_eq!(out.result(), &passed, "{out:#?}");

    // Its output is the answer.
    let own = json!({
        "cniVersion": "1.0.0",
        "ips": [{"address": "10.9.0.99/24", "gateway": "10.9.0.1"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {},
        "pools": [{"name": "fk4", "subnet": "10.9.0.0/24"}]
    });
    lab.sb.respond(SEQUENTIAL, "ADD", Response::json(&own));
    let out = lab.cni("ADD", &config, "k2", &[]);
    assert_eq!(addresses(&out), ["10.9.0.99/24"]);
    let mut expected = own.clone();
    expected.as_object_mut().unwrap().remove("pools");
    assert_eq!(out.result(), &expected, "{out:#?}");
    assert_eq!(lab.sb.call_list(), ["ipam-da-sequential ADD", "ipam-da-sequential ADD"]);

    // DEL reaches it too.
    lab.cni("DEL", &config, "k2", &[]).assert_quiet_success();
    assert_eq!(lab.sb.calls().last().unwrap(), &(SEQUENTIAL.to_string(), "DEL".to_string()));
}

// ---------------------------------------------------------------------------
// 3. Mixed stacks

#[test]
fn mixed_stacks_chain_prev_result_and_roll_back_identically_in_process_and_exec() {
    let started = Instant::now();
    let lab = Lab::new(true);
    for fake in ["recorder-a", "recorder-b", "refuser"] {
        lab.sb.fake(fake);
    }
    lab.sb.respond("refuser", "ADD", Response::error(120, "refuser says no"));
    let versions = ["0.2.0", "0.4.0", "1.1.0"];
    let t = both_layouts(&lab, &versions, |r| {
        let v = r.version;
        let pools = json!([pool("m4", "10.11.0.0/24")]);
        let mixed = net(r.lab, v, "mixnet", &[POOL, "recorder-a", SEQUENTIAL, "recorder-b"], pools.clone());
        r.cni("mixed ADD", "ADD", &mixed, "m1", &[]);
        r.note_calls("calls after the mixed ADD");
        for (i, who) in [(0, "recorder-a"), (1, "recorder-b")] {
            let stdin = String::from_utf8(r.lab.sb.record(i).0).unwrap();
            r.note(&format!("{who} was given"), stdin);
        }
        let failing = net(r.lab, v, "mixnet", &[POOL, SEQUENTIAL, "refuser", STATIC], pools.clone());
        r.cni("ADD failing in the middle", "ADD", &failing, "m2", &[]);
        r.note_calls("calls after the failed ADD");
        r.note("refuser's DEL was given", String::from_utf8(r.lab.sb.record(3).0).unwrap());
        r.database("database after the failed ADD");
        r.cni("mixed DEL", "DEL", &mixed, "m1", &[]);
        r.note_calls("calls after the DEL");
        r.database("database at the end");
    });
    for v in versions {
        let add = t.get(v, "mixed ADD");
        assert_eq!(addresses(add), ["10.11.0.2/24"], "{v}");
        assert!(add.result().get("pools").is_none(), "{add:#?}");
        assert_eq!(t.get(v, "calls after the mixed ADD").stdout, "recorder-a ADD\nrecorder-b ADD");
        // recorder-a: ipam-ds-pool's output, the pools and no address yet.
        let a = t.get(v, "recorder-a was given").json.clone().unwrap();
        assert_eq!(a["prevResult"]["pools"][0]["name"], "m4", "{a:#}");
        assert_eq!(result_addresses(&a["prevResult"]), Vec::<String>::new(), "{a:#}");
        // recorder-b: ipam-da-sequential's output, with the address (and the pools).
        let b = t.get(v, "recorder-b was given").json.clone().unwrap();
        assert_eq!(b["prevResult"]["pools"][0]["name"], "m4", "{b:#}");
        assert_eq!(result_addresses(&b["prevResult"]), ["10.11.0.2/24"], "{b:#}");

        // The external delegate failing at step 3 of 4: the in-process ones before it are rolled back.
        assert_error(
            t.get(v, "ADD failing in the middle"),
            120,
            &[
                "refuser says no",
                "delegate \"refuser\" (step 3 of 4) failed ADD; rollback: DEL \"ipam-ds-pool\" ok; DEL \
                 \"ipam-da-sequential\" ok; DEL \"refuser\" ok",
            ],
        );
        assert_eq!(
            t.get(v, "calls after the failed ADD").stdout,
            "recorder-a ADD\nrecorder-b ADD\nrefuser ADD\nrefuser DEL"
        );
        let given = t.get(v, "refuser's DEL was given").json.clone().unwrap();
        assert_eq!(result_addresses(&given["prevResult"]), ["10.11.0.3/24"], "{given:#}");
        assert_eq!(leases(t.get(v, "database after the failed ADD")), set(&["10.11.0.2 m1 eth0 mixnet"]), "{v}");
        t.get(v, "mixed DEL").assert_quiet_success();
        assert_eq!(
            t.get(v, "calls after the DEL").stdout,
            "recorder-a ADD\nrecorder-b ADD\nrefuser ADD\nrefuser DEL\nrecorder-a DEL\nrecorder-b DEL"
        );
        assert_eq!(leases(t.get(v, "database at the end")), set(&[]), "{v}");
    }
    eprintln!("mixed stacks: {:?}", started.elapsed());
}
