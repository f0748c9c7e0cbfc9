//! The operator's tool (`ipam-delegated` run with arguments) over a database
//! filled by the real plugins.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

mod support;

use support::{bin_dir, run_args, Outcome as Run, FULL_STACK};

/// Runs ipam-delegated with `args` and `env` (and no CNI_* variable of ours).
fn run(args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>, cwd: Option<&Path>) -> Run {
    run_args(&bin_dir().join("ipam-delegated"), args, env, stdin.unwrap_or_default(), cwd)
}

/// The operator's tool on `db`.
fn tool(db: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--database", db.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    run(&all, &[], None, None)
}

/// A database filled by real ADDs: blue-net c1/eth0 and c2/eth0, each with one
/// address of pool blue (IPv4) and one of blue6, and red-net c3/net1 with one
/// of red and one of red6 (pools belong to their network).
struct Sandbox {
    dir: TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let sandbox = Sandbox { dir: tempfile::tempdir().expect("tempdir") };
        for (network, container, ifname) in
            [("blue-net", "c1", "eth0"), ("blue-net", "c2", "eth0"), ("red-net", "c3", "net1")]
        {
            let result = sandbox.add(network, container, ifname, "");
            assert_eq!(result.status, 0, "ADD {network} {container}: {result:#?}");
        }
        sandbox
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("db.sqlite")
    }

    fn add(&self, network: &str, container: &str, ifname: &str, cni_args: &str) -> Run {
        let pools = if network == "red-net" {
            json!([
                {"name": "red",
                 "ranges": [{"subnet": "10.23.0.0/24", "rangeStart": "10.23.0.10", "rangeEnd": "10.23.0.20"}]},
                {"name": "red6", "ranges": [{"subnet": "fd00:23::/120"}]}
            ])
        } else {
            json!([
                {"name": "blue", "exclude": ["10.22.0.12"],
                 "ranges": [{"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.10", "rangeEnd": "10.22.0.20"}]},
                {"name": "blue6", "ranges": [{"subnet": "fd00:22::/120"}]}
            ])
        };
        self.add_with_pools(network, &pools, container, ifname, cni_args)
    }

    /// A real ADD through the full stack on `network` configured with `pools`.
    fn add_with_pools(&self, network: &str, pools: &Value, container: &str, ifname: &str, cni_args: &str) -> Run {
        let config = json!({
            "cniVersion": "1.1.0",
            "name": network,
            "type": "bridge",
            "ipam": {
                "type": "ipam-delegated",
                "delegates": FULL_STACK,
                "database": self.db(),
                "pools": pools
            }
        });
        let cni_path = bin_dir().to_str().expect("UTF-8 path");
        let env = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", "/proc/self/ns/net"),
            ("CNI_IFNAME", ifname),
            ("CNI_PATH", cni_path),
            ("CNI_ARGS", cni_args),
        ];
        run(&[], &env, Some(config.to_string().as_bytes()), None)
    }

    fn sql(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.db()).expect("opening the database with rusqlite")
    }
}

fn assert_success(run: &Run) {
    assert_eq!((run.status, run.stderr.as_str()), (0, ""), "{run:#?}");
}

/// A failure: exit `status`, nothing on stdout, one line on stderr, returned.
fn failure_line(run: &Run, status: i32) -> String {
    assert_eq!(run.status, status, "{run:#?}");
    assert_eq!(run.stdout, "", "{run:#?}");
    assert_eq!(run.stderr.lines().count(), 1, "one error line: {run:#?}");
    assert!(run.stderr.starts_with("ipam-delegated: "), "{run:#?}");
    run.stderr.trim_end().to_string()
}

/// The table's rows without the SINCE column, which is checked apart.
fn rows_without_since(table: &str) -> Vec<String> {
    let header = table.lines().next().expect("header");
    let since_at = header.find("SINCE").expect("SINCE column");
    table
        .lines()
        .map(|line| {
            let (head, since) = line.split_at(since_at);
            assert!(since == "SINCE" || is_iso8601(since), "since {since:?} in {line:?}");
            head.trim_end().to_string()
        })
        .collect()
}

fn is_iso8601(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| range.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() == 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'Z'
}

#[test]
fn list_shows_every_lease_aligned_and_filters_narrow_it() {
    let s = Sandbox::new();
    let all = tool(&s.db(), &["list"]);
    assert_success(&all);
    assert_eq!(
        rows_without_since(&all.stdout),
        [
            "POOL   ADDRESS     NETWORK   CONTAINER  IFNAME",
            "blue   10.22.0.10  blue-net  c1         eth0",
            "blue   10.22.0.11  blue-net  c2         eth0",
            "red    10.23.0.10  red-net   c3         net1",
            "blue6  fd00:22::2  blue-net  c1         eth0",
            "blue6  fd00:22::3  blue-net  c2         eth0",
            "red6   fd00:23::2  red-net   c3         net1",
        ]
    );
    let addresses = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["list"];
        all.extend_from_slice(args);
        let out = tool(&s.db(), &all);
        assert_success(&out);
        out.stdout.lines().skip(1).map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string()).collect()
    };
    assert_eq!(addresses(&["--network", "red-net"]), ["10.23.0.10", "fd00:23::2"]);
    assert_eq!(addresses(&["--pool=blue6"]), ["fd00:22::2", "fd00:22::3"]);
    assert_eq!(addresses(&["--container", "c2"]), ["10.22.0.11", "fd00:22::3"]);
    assert_eq!(addresses(&["--network", "blue-net", "--pool", "blue", "--container", "c1"]), ["10.22.0.10"]);
    let none = tool(&s.db(), &["list", "--network", "green-net"]);
    assert_eq!((none.status, none.stdout.as_str()), (0, "no leases match\n"));
}

#[test]
fn list_json_has_one_object_per_lease() {
    let s = Sandbox::new();
    let out = tool(&s.db(), &["list", "--json", "--network", "red-net"]);
    assert_success(&out);
    let mut leases: Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    for lease in leases.as_array_mut().expect("an array") {
        let since = lease.as_object_mut().and_then(|o| o.remove("since")).expect("since");
        assert!(since.as_str().is_some_and(is_iso8601), "{since}");
    }
    assert_eq!(
        leases,
        json!([
            {"pool": "red", "address": "10.23.0.10", "network": "red-net", "container_id": "c3", "ifname": "net1",
             "identity": null, "state": "leased", "held_until": null},
            {"pool": "red6", "address": "fd00:23::2", "network": "red-net", "container_id": "c3", "ifname": "net1",
             "identity": null, "state": "leased", "held_until": null}
        ])
    );
}

#[test]
fn pools_shows_size_use_and_the_next_address() {
    let s = Sandbox::new();
    let out = tool(&s.db(), &["pools"]);
    assert_success(&out);
    // blue: .10-.20 minus the excluded .12 is 10 addresses; red: .10-.20 is 11;
    // blue6 and red6: ::2-::ff (::1 is the gateway).
    assert_eq!(
        out.stdout,
        "NETWORK   NAME   SUBNETS        SIZE  USED  FREE  USED%  NEXT\n\
         blue-net  blue   10.22.0.0/24     10     2     8  20.0%  10.22.0.13\n\
         blue-net  blue6  fd00:22::/120   254     2   252   0.8%  fd00:22::4\n\
         red-net   red    10.23.0.0/24     11     1    10   9.1%  10.23.0.11\n\
         red-net   red6   fd00:23::/120   254     1   253   0.4%  fd00:23::3\n"
    );
    let out = tool(&s.db(), &["pools", "--json"]);
    assert_success(&out);
    let pools: Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        pools,
        json!([
            {"network": "blue-net", "name": "blue", "subnets": ["10.22.0.0/24"], "size": 10, "used": 2, "free": 8,
             "held": 0, "percent_used": 20.0, "next": "10.22.0.13"},
            {"network": "blue-net", "name": "blue6", "subnets": ["fd00:22::/120"], "size": 254, "used": 2,
             "free": 252, "held": 0, "percent_used": 0.79, "next": "fd00:22::4"},
            {"network": "red-net", "name": "red", "subnets": ["10.23.0.0/24"], "size": 11, "used": 1, "free": 10,
             "held": 0, "percent_used": 9.09, "next": "10.23.0.11"},
            {"network": "red-net", "name": "red6", "subnets": ["fd00:23::/120"], "size": 254, "used": 1,
             "free": 253, "held": 0, "percent_used": 0.39, "next": "fd00:23::3"}
        ])
    );
}

#[test]
fn a_full_pool_shows_no_next_address() {
    let s = Sandbox::new();
    for i in 4..=11 {
        let added = s.add("blue-net", &format!("c{i}"), "eth0", "");
        assert_eq!(added.status, 0, "{added:#?}");
    }
    let out = tool(&s.db(), &["pools"]);
    assert_success(&out);
    let blue = out.stdout.lines().nth(1).expect("row of blue");
    assert_eq!(
        blue.split_whitespace().collect::<Vec<_>>(),
        ["blue-net", "blue", "10.22.0.0/24", "10", "10", "0", "100.0%", "-"]
    );
    let json: Value = serde_json::from_str(&tool(&s.db(), &["pools", "--json"]).stdout).expect("JSON");
    assert_eq!((&json[0]["free"], &json[0]["next"]), (&json!(0), &Value::Null));
}

#[test]
fn release_frees_one_attachment_for_reuse() {
    let s = Sandbox::new();
    // Held by c2: a static request for it is refused.
    let refused = s.add("blue-net", "c9", "eth0", "IP=10.22.0.11");
    assert_ne!(refused.status, 0, "{refused:#?}");

    let out = tool(&s.db(), &["release", "--network", "blue-net", "--container", "c2", "--ifname", "eth0"]);
    assert_success(&out);
    assert_eq!(
        out.stdout,
        "released 10.22.0.11 (pool blue) held by container c2 interface eth0 of network \"blue-net\"\n\
         released fd00:22::3 (pool blue6) held by container c2 interface eth0 of network \"blue-net\"\n"
    );
    let list = tool(&s.db(), &["list", "--container", "c2"]);
    assert_eq!((list.status, list.stdout.as_str()), (0, "no leases match\n"));
    assert_eq!(tool(&s.db(), &["list"]).stdout.lines().count(), 1 + 4);

    let again = tool(&s.db(), &["release", "--network", "blue-net", "--container", "c2", "--ifname", "eth0"]);
    assert_success(&again);
    assert_eq!(again.stdout, "nothing released: container c2 interface eth0 of network \"blue-net\" holds no lease\n");

    let reused = s.add("blue-net", "c9", "eth0", "IP=10.22.0.11");
    assert_eq!(reused.status, 0, "{reused:#?}");
    let owner = tool(&s.db(), &["list", "--container", "c9", "--pool", "blue"]);
    assert_eq!(owner.stdout.lines().nth(1).and_then(|l| l.split_whitespace().nth(1)), Some("10.22.0.11"));
    assert_eq!(tool(&s.db(), &["check"]).stdout, "ok\n");
}

#[test]
fn check_passes_a_healthy_database_and_names_damage() {
    let s = Sandbox::new();
    let ok = tool(&s.db(), &["check"]);
    assert_success(&ok);
    assert_eq!(ok.stdout, "ok\n");

    // A lease in a pool no one registered, with its run, so that it is the only problem.
    let n = 0xffff_0000_0000_u128 | u128::from(u32::from(Ipv4Addr::new(10, 99, 0, 1)));
    let key = n.to_be_bytes().to_vec();
    let sql = s.sql();
    sql.execute(
        "INSERT INTO leases (key, address, pool, network, container_id, ifname, since)
         VALUES (?1, '10.99.0.1', 'ghost', 'blue-net', 'c7', 'eth0', 0)",
        [&key],
    )
    .expect("insert");
    sql.execute("INSERT INTO leased_runs (first, last) VALUES (?1, ?1)", [&key]).expect("insert run");
    drop(sql);

    let damaged = tool(&s.db(), &["check"]);
    assert_eq!(damaged.status, 1, "{damaged:#?}");
    assert_eq!(damaged.stdout, "lease on 10.99.0.1 names unregistered pool ghost of network \"blue-net\"\n");
    assert_eq!(damaged.stderr, format!("ipam-delegated: integrity check of {} failed\n", s.db().display()));
}

#[test]
fn a_missing_database_is_reported_and_not_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("nowhere").join("db.sqlite");
    for command in
        [&["list"][..], &["pools"], &["check"], &["release", "--network", "n", "--container", "c", "--ifname", "e"]]
    {
        let line = failure_line(&tool(&db, command), 1);
        assert_eq!(line, format!("ipam-delegated: no allocation database at {}", db.display()), "{command:?}");
    }
    assert!(!dir.path().join("nowhere").exists(), "the tool must not create the database or its directory");
}

#[test]
fn a_relative_database_path_is_taken_from_the_working_directory() {
    let s = Sandbox::new();
    let out = run(&["pools", "--database", "db.sqlite", "--json"], &[], None, Some(s.dir.path()));
    assert_success(&out);
    let pools: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(pools.as_array().map(Vec::len), Some(4));
}

#[test]
fn a_newer_schema_is_refused() {
    let s = Sandbox::new();
    s.sql().pragma_update(None, "user_version", 99).expect("set user_version");
    let line = failure_line(&tool(&s.db(), &["list"]), 1);
    assert!(line.contains("schema version 99 is newer"), "{line}");
}

#[test]
fn release_gives_up_on_a_held_lock_within_its_bound_while_reads_go_on() {
    let s = Sandbox::new();
    let lock = std::fs::File::open(s.dir.path().join("db.sqlite.lock")).expect("lock file");
    // SAFETY: flock on a descriptor we own; released when `lock` is closed.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0, "taking the lock");

    let started = Instant::now();
    let release = ["release", "--network", "red-net", "--container", "c3", "--ifname", "net1"];
    let mut args = release.to_vec();
    args.extend(["--lock-timeout", "1"]);
    let line = failure_line(&tool(&s.db(), &args), 1);
    assert!(line.contains("locked") && line.contains("try again later"), "{line}");
    assert!(started.elapsed() < Duration::from_secs(8), "waited {:?}", started.elapsed());

    // Readers take no lock.
    assert_success(&tool(&s.db(), &["list", "--network", "red-net"]));

    drop(lock);
    let out = tool(&s.db(), &release);
    assert_success(&out);
    assert_eq!(out.stdout.lines().count(), 2, "{out:#?}");
}

/// A usage error in clap's form: exit 2, nothing on stdout, and on stderr
/// `error: ...` and the pointer at --help (most also show the usage); the
/// text is returned.
fn usage_error(run: &Run) -> String {
    assert_eq!((run.status, run.stdout.as_str()), (2, ""), "{run:#?}");
    assert!(run.stderr.starts_with("error: "), "{run:#?}");
    assert!(run.stderr.ends_with("\nFor more information, try '--help'.\n"), "{run:#?}");
    run.stderr.clone()
}

#[test]
fn usage_errors_exit_2_naming_the_culprit() {
    let db = Path::new("/nonexistent/db.sqlite");
    for (args, parts) in [
        (&["frobnicate"][..], &["error: unrecognized subcommand 'frobnicate'"][..]),
        (&["list", "--frob"], &["error: unexpected argument '--frob' found", "Usage: ipam-delegated list [OPTIONS]"]),
        (&["pools", "extra"], &["error: unexpected argument 'extra' found", "Usage: ipam-delegated pools [OPTIONS]"]),
        (
            &["release", "--network", "n", "--ifname", "e"],
            &["error: the following required arguments were not provided:\n  --container <ID>"],
        ),
        (&["list", "--network"], &["error: a value is required for '--network <NAME>' but none was supplied"]),
        (
            &["list", "--pool", "a", "--pool", "b"],
            &["error: the argument '--pool <NAME>' cannot be used multiple times"],
        ),
        (
            &["release", "--network", "n", "--container", "c", "--ifname", "e", "--lock-timeout", "soon"],
            &["error: invalid value 'soon' for '--lock-timeout <SECONDS>': expected a number of seconds"],
        ),
        (
            &["completions", "tcsh"],
            &["error: invalid value 'tcsh' for '<SHELL>'", "[possible values: bash, zsh, fish]"],
        ),
    ] {
        let text = usage_error(&tool(db, args));
        for part in parts {
            assert!(text.contains(part), "{args:?}: {part:?} in {text}");
        }
    }
    let text = usage_error(&run(&["--frob"], &[], None, None));
    assert!(text.starts_with("error: unexpected argument '--frob' found"), "{text}");
    // --database without a command still reaches the tool.
    let text = usage_error(&tool(db, &[]));
    assert!(text.starts_with("error: 'ipam-delegated' requires a subcommand but one was not provided"), "{text}");
}

#[test]
fn a_misspelled_command_or_option_gets_a_suggestion() {
    let text = usage_error(&run(&["pool"], &[], None, None));
    assert!(text.starts_with("error: unrecognized subcommand 'pool'\n"), "{text}");
    assert!(text.contains("tip: a similar subcommand exists: 'pools'"), "{text}");
    let text = usage_error(&run(&["forget-pool", "--netwrk", "n"], &[], None, None));
    assert!(text.contains("tip: a similar argument exists: '--network'"), "{text}");
}

#[test]
fn help_for_the_tool_and_each_command() {
    let main = run(&["--help"], &[], None, None);
    assert_success(&main);
    for part in [
        "Usage: ipam-delegated [OPTIONS] <COMMAND>",
        "--database <PATH>",
        "allocations.sqlite",
        "--version",
        "CNI IPAM plugin",
        "2 usage error",
    ] {
        assert!(main.stdout.contains(part), "{part} in {}", main.stdout);
    }
    for command in [
        "list",
        "pools",
        "metrics",
        "release",
        "forget-pool",
        "check",
        "install-cni",
        "agent",
        "completions",
        "man",
        "help",
    ] {
        assert!(main.stdout.contains(&format!("\n  {command} ")), "{command} in {}", main.stdout);
    }
    assert_eq!(run(&["help"], &[], None, None).stdout, main.stdout);

    for (command, summary, parts) in [
        (
            "list",
            "Every lease",
            &[
                "--network <NAME>",
                "--pool <NAME>",
                "--container <ID>",
                "--identity <ID>",
                "--json",
                "--database <PATH>",
            ][..],
        ),
        ("pools", "Per registered pool", &["--json", "--database <PATH>", "used counts the leases inside those"]),
        (
            "metrics",
            "Per registered pool: size, used, free, leases and held addresses",
            &["--output <FILE>", "--database <PATH>", "FILE.tmp-<pid>"],
        ),
        (
            "release",
            "Release every lease of one attachment",
            &[
                "--network <NAME>",
                "--container <ID>",
                "--ifname <NAME>",
                "--identity <ID>",
                "release [OPTIONS] --identity <ID> [--network <NAME>]",
                "drops the identity's",
                "--lock-timeout <SECONDS>",
                "[default: 10]",
            ],
        ),
        ("forget-pool", "Release every lease of one pool", &["--network <NAME>", "--pool <NAME>", "--lock-timeout"]),
        ("check", "Check the database's integrity", &["--database <PATH>", "Prints ok and exits 0"]),
        ("completions", "Print a shell completion script", &["<SHELL>", "[possible values: bash, zsh, fish]"]),
        ("man", "Write the man pages", &["<DIR>", "ipam-delegated-list.1"]),
        (
            "install-cni",
            "Install the plugins on this node",
            &[
                "--bin-dir <DIR>",
                "[default: /host/opt/cni/bin]",
                "--node-file <FILE>",
                "--conflist <SRC>",
                "--etcd-secret <DIR>",
                "--force",
                "--once",
                "--uninstall",
                "build marker",
                ".ipam-delegated-installed",
            ],
        ),
        (
            "agent",
            "Release, on this node, the addresses of pods",
            &[
                "--node <NAME>",
                "--kubeconfig <FILE>",
                "--database <PATH>",
                "--interval <SECONDS>",
                "[default: 60]",
                "--grace <SECONDS>",
                "[default: 300]",
                "--metrics-address <ADDRESS>",
                "[default: 0.0.0.0:9547]",
                "fieldSelector=spec.nodeName=NODE",
            ],
        ),
    ] {
        let usage = format!("Usage: ipam-delegated {command} ");
        for args in [&[command, "--help"][..], &[command, "-h"], &["help", command]] {
            let help = run(args, &[], None, None);
            assert_success(&help);
            assert!(help.stdout.starts_with(summary), "{args:?}: {}", help.stdout);
            for part in std::iter::once(&usage.as_str()).chain(parts) {
                assert!(help.stdout.contains(part), "{args:?}: {part} in {}", help.stdout);
            }
        }
    }
    let version = run(&["--version"], &[], None, None);
    assert_success(&version);
    assert_eq!(version.stdout, format!("ipam-delegated {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let bash = run(&["completions", "bash"], &[], None, None);
    assert_success(&bash);
    assert!(bash.stdout.starts_with("_ipam__delegated() {"), "{}", bash.stdout);
    assert!(bash.stdout.contains("complete -F _ipam__delegated"), "{}", bash.stdout);
    for word in [
        "list",
        "pools",
        "metrics",
        "release",
        "forget-pool",
        "check",
        "install-cni",
        "completions",
        "man",
        "--lock-timeout",
        "--bin-dir",
        "--identity",
    ] {
        assert!(bash.stdout.contains(word), "{word} in the bash script");
    }
    // bash itself loads it and registers the function for the tool.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("ipam-delegated.bash");
    std::fs::write(&script, &bash.stdout).expect("writing the script");
    let loaded = std::process::Command::new("bash")
        .args(["--norc", "-c", ". \"$0\" && complete -p ipam-delegated"])
        .arg(&script)
        .output()
        .expect("running bash");
    let registered = String::from_utf8_lossy(&loaded.stdout);
    assert!(loaded.status.success() && registered.contains("-F _ipam__delegated"), "{loaded:?}");

    let zsh = run(&["completions", "zsh"], &[], None, None);
    assert_success(&zsh);
    assert!(zsh.stdout.starts_with("#compdef ipam-delegated"), "{}", zsh.stdout);
    let fish = run(&["completions", "fish"], &[], None, None);
    assert_success(&fish);
    assert!(fish.stdout.contains("complete -c ipam-delegated"), "{}", fish.stdout);
}

#[test]
fn man_writes_a_page_for_the_tool_and_each_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Relative, as packaging runs it (`ipam-delegated man target/man`); created if missing.
    let out = run(&["man", "target/man"], &[], None, Some(dir.path()));
    assert_success(&out);
    let pages = [
        "",
        "-list",
        "-pools",
        "-metrics",
        "-release",
        "-forget-pool",
        "-check",
        "-cluster",
        "-cluster-blocks",
        "-cluster-release-node",
        "-cluster-reap",
        "-install-cni",
        "-agent",
        "-completions",
        "-man",
        "-delegates",
    ];
    let expected: String = pages.iter().map(|p| format!("target/man/ipam-delegated{p}.1\n")).collect();
    assert_eq!(out.stdout, expected);
    for page in pages {
        let path = dir.path().join(format!("target/man/ipam-delegated{page}.1"));
        let roff = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(roff.contains(&format!("\n.TH ipam-delegated{page} 1 ")), "{roff}");
        assert!(roff.contains("\n.SH NAME\n") && roff.contains("\n.SH SYNOPSIS\n"), "{roff}");
    }
    let release = std::fs::read_to_string(dir.path().join("target/man/ipam-delegated-release.1")).expect("page");
    assert!(release.contains("\\fBipam\\-delegated release\\fR"), "{release}");
    assert!(release.contains("\\-\\-lock\\-timeout"), "{release}");
    assert!(release.contains("\\-\\-identity <ID>"), "{release}");
    let again = run(&["man", "target/man"], &[], None, Some(dir.path()));
    assert_eq!((again.status, again.stdout), (0, expected), "a second run overwrites");
}

/// A network name with what the exposition format escapes: a double quote, a
/// backslash and a line feed (pool names cannot have them: letters, digits,
/// '_', '.' and '-' only).
const ODD_NETWORK: &str = "say \"hi\" \\o/\nnet";

/// [`Sandbox::new`], plus a static lease of blue outside its range (held,
/// not in used), and on [`ODD_NETWORK`] an IPv6 pool larger than 2^53.
fn metrics_sandbox() -> Sandbox {
    let s = Sandbox::new();
    let added = s.add("blue-net", "c4", "eth0", "IP=10.22.0.5");
    assert_eq!(added.status, 0, "{added:#?}");
    let odd = json!([{"name": "odd6", "ranges": [{"subnet": "fd00:24::/64"}]}]);
    let added = s.add_with_pools(ODD_NETWORK, &odd, "c5", "eth0", "");
    assert_eq!(added.status, 0, "{added:#?}");
    s
}

const METRICS: &str = r#"# HELP ipam_delegated_database_ok 1 if the allocation database could be read, 0 if not (no integrity check: see ipam-delegated check).
# TYPE ipam_delegated_database_ok gauge
ipam_delegated_database_ok 1
# HELP ipam_delegated_pool_size_addresses Allocatable addresses of the pool: its ranges minus excluded addresses and gateways.
# TYPE ipam_delegated_pool_size_addresses gauge
ipam_delegated_pool_size_addresses{network="blue-net",pool="blue"} 10
ipam_delegated_pool_size_addresses{network="blue-net",pool="blue6"} 254
ipam_delegated_pool_size_addresses{network="red-net",pool="red"} 11
ipam_delegated_pool_size_addresses{network="red-net",pool="red6"} 254
ipam_delegated_pool_size_addresses{network="say \"hi\" \\o/\nnet",pool="odd6"} 18446744073709551614
# HELP ipam_delegated_pool_used_addresses Leased or held addresses among the pool's allocatable addresses.
# TYPE ipam_delegated_pool_used_addresses gauge
ipam_delegated_pool_used_addresses{network="blue-net",pool="blue"} 2
ipam_delegated_pool_used_addresses{network="blue-net",pool="blue6"} 3
ipam_delegated_pool_used_addresses{network="red-net",pool="red"} 1
ipam_delegated_pool_used_addresses{network="red-net",pool="red6"} 1
ipam_delegated_pool_used_addresses{network="say \"hi\" \\o/\nnet",pool="odd6"} 1
# HELP ipam_delegated_pool_free_addresses Allocatable addresses of the pool that no lease or hold takes.
# TYPE ipam_delegated_pool_free_addresses gauge
ipam_delegated_pool_free_addresses{network="blue-net",pool="blue"} 8
ipam_delegated_pool_free_addresses{network="blue-net",pool="blue6"} 251
ipam_delegated_pool_free_addresses{network="red-net",pool="red"} 10
ipam_delegated_pool_free_addresses{network="red-net",pool="red6"} 253
ipam_delegated_pool_free_addresses{network="say \"hi\" \\o/\nnet",pool="odd6"} 18446744073709551613
# HELP ipam_delegated_pool_leases Leases recorded for the pool, static ones outside its allocatable addresses included (holds are not leases).
# TYPE ipam_delegated_pool_leases gauge
ipam_delegated_pool_leases{network="blue-net",pool="blue"} 3
ipam_delegated_pool_leases{network="blue-net",pool="blue6"} 3
ipam_delegated_pool_leases{network="red-net",pool="red"} 1
ipam_delegated_pool_leases{network="red-net",pool="red6"} 1
ipam_delegated_pool_leases{network="say \"hi\" \\o/\nnet",pool="odd6"} 1
# HELP ipam_delegated_pool_held_addresses Addresses of the pool held for a workload identity whose attachment is gone (ipam-da-sticky), until the hold ends: neither leases nor free.
# TYPE ipam_delegated_pool_held_addresses gauge
ipam_delegated_pool_held_addresses{network="blue-net",pool="blue"} 0
ipam_delegated_pool_held_addresses{network="blue-net",pool="blue6"} 0
ipam_delegated_pool_held_addresses{network="red-net",pool="red"} 0
ipam_delegated_pool_held_addresses{network="red-net",pool="red6"} 0
ipam_delegated_pool_held_addresses{network="say \"hi\" \\o/\nnet",pool="odd6"} 0
"#;

#[test]
fn metrics_exports_the_figures_of_pools_per_pool() {
    let s = metrics_sandbox();
    let out = tool(&s.db(), &["metrics"]);
    assert_success(&out);
    assert_eq!(out.stdout, METRICS);
    // The same figures as pools shows: one computation, two renderings.
    let pools: Value = serde_json::from_str(&tool(&s.db(), &["pools", "--json"]).stdout).expect("JSON");
    let blue = &pools[0];
    assert_eq!(
        (&blue["name"], &blue["size"], &blue["used"], &blue["free"]),
        (&json!("blue"), &json!(10), &json!(2), &json!(8))
    );
    let odd = &pools[4];
    assert_eq!((&odd["network"], &odd["size"]), (&json!(ODD_NETWORK), &json!("18446744073709551614")));
    // The database given after the command, as for every other one.
    let after = run(&["metrics", "--database", s.db().to_str().expect("UTF-8 path")], &[], None, None);
    assert_eq!(after.stdout, METRICS);
}

#[test]
fn metrics_output_replaces_the_file_atomically() {
    let s = metrics_sandbox();
    let dir = s.dir.path().join("textfile");
    std::fs::create_dir(&dir).expect("collector directory");
    let file = dir.join("ipam-delegated.prom");
    std::fs::write(&file, "stale\n").expect("an older file");
    let out = tool(&s.db(), &["metrics", "--output", file.to_str().expect("UTF-8 path")]);
    assert_success(&out);
    assert_eq!(out.stdout, "", "nothing on stdout with --output");
    assert_eq!(std::fs::read_to_string(&file).expect("the metrics file"), METRICS);
    let names: Vec<_> = std::fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, ["ipam-delegated.prom"], "no temporary file is left");

    // Relative to the working directory, like --database.
    let relative =
        run(&["metrics", "--database", "db.sqlite", "--output", "textfile/rel.prom"], &[], None, Some(s.dir.path()));
    assert_success(&relative);
    assert_eq!(std::fs::read_to_string(dir.join("rel.prom")).expect("relative output"), METRICS);
}

#[test]
fn metrics_on_a_missing_database_say_so_and_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db.sqlite");
    let file = dir.path().join("ipam.prom");
    let out = tool(&db, &["metrics", "--output", file.to_str().expect("UTF-8 path")]);
    assert_eq!((out.status, out.stdout.as_str()), (1, ""), "{out:#?}");
    assert_eq!(out.stderr, format!("ipam-delegated: no allocation database at {}\n", db.display()));
    let written = std::fs::read_to_string(&file).expect("the metrics file is still written");
    assert!(
        written.ends_with("\n# TYPE ipam_delegated_database_ok gauge\nipam_delegated_database_ok 0\n"),
        "{written}"
    );
    assert!(!db.exists(), "the tool must not create the database");

    let unwritable = dir.path().join("missing").join("ipam.prom");
    let line =
        failure_line(&tool(&metrics_sandbox().db(), &["metrics", "--output", unwritable.to_str().expect("UTF-8")]), 1);
    assert!(
        line.starts_with(&format!("ipam-delegated: cannot write the metrics to {}: ", unwritable.display())),
        "{line}"
    );
}

#[test]
fn table_cells_show_control_characters_escaped() {
    let s = metrics_sandbox();
    let out = tool(&s.db(), &["list", "--container", "c5"]);
    assert_success(&out);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert!(out.stdout.contains("say \"hi\" \\o/\\nnet"), "{}", out.stdout);
}

#[test]
fn without_arguments_it_is_the_plugin_and_its_about_text_points_at_the_tool() {
    let about = run(&[], &[], None, None);
    assert_eq!((about.status, about.stdout.as_str()), (0, ""), "{about:#?}");
    assert!(about.stderr.contains("CNI protocol versions supported"), "{}", about.stderr);
    assert!(about.stderr.contains("ipam-delegated --help"), "{}", about.stderr);
    let version = run(&[], &[("CNI_COMMAND", "VERSION")], Some(b"{\"cniVersion\": \"1.0.0\"}"), None);
    assert_eq!(version.status, 0, "{version:#?}");
    assert!(version.stdout.contains("supportedVersions"), "{version:#?}");
}
