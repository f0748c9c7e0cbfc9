//! The command line as clap parses it: every command, option and default of
//! the hand-written parser it replaced, and the usage errors, in clap's words.

use super::*;

fn parse_strs(args: &[&str]) -> Result<Invocation, clap::Error> {
    parse(&args.iter().map(OsString::from).collect::<Vec<_>>())
}

/// The rendered error or help text, and its kind.
fn refusal(args: &[&str]) -> (ErrorKind, String) {
    match parse_strs(args) {
        Ok(invocation) => panic!("{args:?} parsed as {invocation:?}"),
        Err(e) => (e.kind(), e.to_string()),
    }
}

fn run(database: &str, command: Command) -> Invocation {
    Invocation::Database { database: PathBuf::from(database), command }
}

#[test]
fn clap_accepts_the_definition() {
    definition().debug_assert();
}

#[test]
fn list_with_filters_and_the_database_before_or_after_the_command() {
    let filter = LeaseFilter { network: Some("n".into()), pool: None, container_id: Some("c".into()) };
    let expected = run("/tmp/db", Command::List { filter, identity: None, json: true });
    assert_eq!(
        parse_strs(&["--database", "/tmp/db", "list", "--network=n", "--container", "c", "--json"]).ok(),
        Some(expected)
    );
    let after = parse_strs(&["list", "--json", "--network", "n", "--container=c", "--database=/tmp/db"]);
    assert!(matches!(after, Ok(Invocation::Database { ref database, .. }) if database == &PathBuf::from("/tmp/db")));
    let (kind, text) = refusal(&["--database", "/a", "pools", "--database", "/b"]);
    assert_eq!(kind, ErrorKind::ArgumentConflict, "{text}");
    assert!(text.contains("'--database <PATH>' cannot be used multiple times"), "{text}");
}

#[test]
fn defaults() {
    assert_eq!(parse_strs(&["pools"]).ok(), Some(run(DEFAULT_DATABASE, Command::Pools { json: false })));
    assert_eq!(parse_strs(&["metrics"]).ok(), Some(run(DEFAULT_DATABASE, Command::Metrics { output: None })));
    let Ok(Invocation::Database { command: Command::Release { lock_timeout, owner }, .. }) =
        parse_strs(&["release", "--network", "n", "--container", "c", "--ifname", "eth0", "--lock-timeout", "0.5"])
    else {
        panic!("release did not parse");
    };
    assert_eq!(lock_timeout, Duration::from_millis(500));
    assert_eq!(owner, Attachment { network: "n".into(), container_id: "c".into(), ifname: "eth0".into() });
    let Ok(Invocation::Database { command: Command::ForgetPool { lock_timeout, .. }, .. }) =
        parse_strs(&["forget-pool", "--network", "n", "--pool", "p"])
    else {
        panic!("forget-pool did not parse");
    };
    assert_eq!(lock_timeout, DEFAULT_LOCK_TIMEOUT);
}

#[test]
fn release_takes_an_attachment_or_an_identity_and_list_an_identity() {
    assert_eq!(
        parse_strs(&["release", "--identity", "prod/db-0"]).ok(),
        Some(run(
            DEFAULT_DATABASE,
            Command::ReleaseHolds { identity: "prod/db-0".into(), network: None, lock_timeout: DEFAULT_LOCK_TIMEOUT }
        ))
    );
    assert_eq!(
        parse_strs(&["release", "--network=n", "--identity", "i", "--lock-timeout", "1"]).ok(),
        Some(run(
            DEFAULT_DATABASE,
            Command::ReleaseHolds {
                identity: "i".into(),
                network: Some("n".into()),
                lock_timeout: Duration::from_secs(1)
            }
        ))
    );
    let cases: &[(&[&str], ErrorKind, &[&str])] = &[
        (&["release"], ErrorKind::MissingRequiredArgument, &["--identity <ID>", "--container <ID>"]),
        (&["release", "--network", "n"], ErrorKind::MissingRequiredArgument, &["--container <ID>", "--identity <ID>"]),
        (&["release", "--container", "c", "--ifname", "e"], ErrorKind::MissingRequiredArgument, &["--network <NAME>"]),
        (&["release", "--identity", "i", "--container", "c"], ErrorKind::ArgumentConflict, &["--identity <ID>"]),
        (&["release", "--identity", "i", "--ifname", "e"], ErrorKind::ArgumentConflict, &["--ifname <NAME>"]),
        (&["release", "--identity", ""], ErrorKind::InvalidValue, &["'--identity <ID>'"]),
    ];
    for (args, kind, parts) in cases {
        let (actual, text) = refusal(args);
        assert_eq!(actual, *kind, "{args:?}: {text}");
        for part in *parts {
            assert!(text.contains(part), "{args:?}: {part:?} in {text}");
        }
        // Both forms, not clap's run of the group's members.
        let usage = "release [OPTIONS] --network <NAME> --container <ID> --ifname <NAME>\n       ipam-delegated \
                     release [OPTIONS] --identity <ID> [--network <NAME>]";
        assert!(*kind == ErrorKind::InvalidValue || text.contains(usage), "{args:?}: {text}");
    }
    let Ok(Invocation::Database { command: Command::List { identity, .. }, .. }) =
        parse_strs(&["list", "--identity", "prod/db-0", "--json"])
    else {
        panic!("list --identity did not parse");
    };
    assert_eq!(identity.as_deref(), Some("prod/db-0"));
}

#[test]
fn completions_and_man_take_no_database() {
    assert_eq!(parse_strs(&["completions", "zsh"]).ok(), Some(Invocation::Completions(Shell::Zsh)));
    assert_eq!(parse_strs(&["man", "out/man"]).ok(), Some(Invocation::Man(PathBuf::from("out/man"))));
    assert_eq!(refusal(&["man", "d", "--database", "/x"]).0, ErrorKind::UnknownArgument);
    assert_eq!(refusal(&["completions", "tcsh"]).0, ErrorKind::InvalidValue);
}

#[test]
fn help_everywhere() {
    for args in [&["--help"][..], &["help"], &["-h"]] {
        let (kind, text) = refusal(args);
        assert_eq!(kind, ErrorKind::DisplayHelp, "{args:?}");
        assert!(text.contains("Commands:") && text.contains("forget-pool"), "{text}");
    }
    for args in [&["list", "--help"][..], &["list", "-h"], &["help", "list"]] {
        let (kind, text) = refusal(args);
        assert_eq!(kind, ErrorKind::DisplayHelp, "{args:?}");
        assert!(text.contains("--container <ID>") && text.contains("--database <PATH>"), "{text}");
    }
    assert!(refusal(&["release", "-h"]).1.contains("--lock-timeout <SECONDS>"));
    assert_eq!(refusal(&["--version"]).1, format!("ipam-delegated {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn usage_errors_name_the_culprit() {
    let cases: &[(&[&str], ErrorKind, &str)] = &[
        (&["--database", "/x"], ErrorKind::MissingSubcommand, "requires a subcommand"),
        (&["frobnicate"], ErrorKind::InvalidSubcommand, "unrecognized subcommand 'frobnicate'"),
        (&["lis"], ErrorKind::InvalidSubcommand, "a similar subcommand exists: 'list'"),
        (&["--bogus", "list"], ErrorKind::UnknownArgument, "unexpected argument '--bogus'"),
        (&["list", "--bogus"], ErrorKind::UnknownArgument, "Usage: ipam-delegated list"),
        (&["list", "--network"], ErrorKind::InvalidValue, "a value is required for '--network <NAME>'"),
        (&["list", "--network", "--json"], ErrorKind::InvalidValue, "'--network <NAME>'"),
        (&["list", "--network", ""], ErrorKind::InvalidValue, "'--network <NAME>'"),
        (&["pools", "--database", ""], ErrorKind::InvalidValue, "'--database <PATH>'"),
        (&["list", "--pool", "a", "--pool=b"], ErrorKind::ArgumentConflict, "cannot be used multiple times"),
        (&["list", "extra"], ErrorKind::UnknownArgument, "unexpected argument 'extra'"),
        (&["pools", "--json=yes"], ErrorKind::TooManyValues, "unexpected value 'yes' for '--json'"),
        (&["check", "--json"], ErrorKind::UnknownArgument, "unexpected argument '--json'"),
        (&["pools", "--jsn"], ErrorKind::UnknownArgument, "a similar argument exists: '--json'"),
        (&["release", "--network", "n", "--container", "c"], ErrorKind::MissingRequiredArgument, "--ifname <NAME>"),
        (&["forget-pool", "--network", "n"], ErrorKind::MissingRequiredArgument, "--pool <NAME>"),
    ];
    for (args, kind, part) in cases {
        let (actual, text) = refusal(args);
        assert_eq!(actual, *kind, "{args:?}: {text}");
        assert!(text.contains(part), "{args:?}: {part:?} in {text}");
    }
    // Only reached by hand (without arguments the executable is the
    // plugin), clap then shows the help, as a usage error.
    let nothing = parse_strs(&[]).err().map(|e| (e.kind(), e.exit_code()));
    assert_eq!(nothing, Some((ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, 2)));
    let bad = ["release", "--network", "n", "--container", "c", "--ifname", "e", "--lock-timeout", "-1"];
    let (kind, text) = refusal(&bad);
    assert_eq!(kind, ErrorKind::ValueValidation, "{text}");
    assert!(text.contains("invalid value '-1' for '--lock-timeout <SECONDS>'"), "{text}");
    assert!(text.contains("expected a number of seconds"), "{text}");
    assert_eq!(
        parse_strs(&["forget-pool", "--pool", "p", "--network=n", "--lock-timeout", "2"]).ok(),
        Some(run(
            DEFAULT_DATABASE,
            Command::ForgetPool { network: "n".into(), pool: "p".into(), lock_timeout: Duration::from_secs(2) }
        ))
    );
}

#[test]
fn seconds_are_finite_and_not_negative() {
    assert_eq!(seconds("0"), Ok(Duration::ZERO));
    assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
    for bad in ["-1", "NaN", "inf", "1e300", "ten", ""] {
        assert!(seconds(bad).is_err(), "{bad}");
    }
}

#[test]
fn install_cni_defaults_and_refusals() {
    let Ok(Invocation::InstallCni(options)) = parse_strs(&["install-cni"]) else {
        panic!("install-cni did not parse");
    };
    assert_eq!(
        options,
        install_cni::Options {
            bin_dir: PathBuf::from("/host/opt/cni/bin"),
            node_file: PathBuf::from("/host/etc/cni/ipam-delegated/node-name"),
            conflists: vec![],
            conf_dir: PathBuf::from("/host/etc/cni/net.d"),
            etcd_secret: None,
            etcd_dir: PathBuf::from("/host/etc/cni/ipam-delegated/etcd"),
            kubeconfig: None,
            service_account_dir: PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount"),
            force: false,
            once: false,
            uninstall: false,
        }
    );
    let Ok(Invocation::InstallCni(options)) =
        parse_strs(&["install-cni", "--conflist=/a/x.conflist", "--conflist", "/b/y.conf", "--once", "--force"])
    else {
        panic!("install-cni with options did not parse");
    };
    assert_eq!(options.conflists, [PathBuf::from("/a/x.conflist"), PathBuf::from("/b/y.conf")]);
    assert!(options.once && options.force);
    let (kind, text) = refusal(&["install-cni", "--node-file", "node-name"]);
    assert_eq!(kind, ErrorKind::ValueValidation, "{text}");
    assert!(text.contains("expected an absolute path"), "{text}");
    let (kind, _) = refusal(&["install-cni", "--uninstall", "--force"]);
    assert_eq!(kind, ErrorKind::ArgumentConflict);
    // --uninstall removes the kubeconfig by the manifest, and writes none.
    let (kind, _) = refusal(&["install-cni", "--uninstall", "--kubeconfig=/host/etc/cni/ipam-delegated/kubeconfig"]);
    assert_eq!(kind, ErrorKind::ArgumentConflict);
    let (kind, text) = refusal(&["--database", "/db", "install-cni"]);
    assert_eq!(kind, ErrorKind::ArgumentConflict, "{text}");
}

#[test]
fn agent_defaults_and_its_databases_before_and_after_the_command() {
    let Ok(Invocation::Agent(options)) = parse_strs(&["agent"]) else { panic!("agent did not parse") };
    assert_eq!(
        options,
        agent::Options {
            node: None,
            node_file: PathBuf::from("/etc/cni/ipam-delegated/node-name"),
            credentials: Credentials::InCluster(PathBuf::from(DEFAULT_SERVICE_ACCOUNT_DIR)),
            databases: vec![PathBuf::from(DEFAULT_DATABASE)],
            interval: Duration::from_secs(60),
            grace: Duration::from_secs(300),
            metrics_address: Some("0.0.0.0:9547".into()),
            cni_path: Vec::new(),
        }
    );
    let Ok(Invocation::Agent(options)) = parse_strs(&[
        "--database=/a",
        "agent",
        "--database=/b",
        "--database",
        "/c",
        "--kubeconfig=/k",
        "--node=n1",
        "--interval=2",
        "--grace=0",
        "--metrics-address=",
        "--cni-path=/opt/cni/bin",
    ]) else {
        panic!("agent with options did not parse")
    };
    assert_eq!(options.databases, [PathBuf::from("/a"), PathBuf::from("/b"), PathBuf::from("/c")]);
    assert_eq!(options.credentials, Credentials::Kubeconfig(PathBuf::from("/k")));
    assert_eq!(
        (options.node.as_deref(), options.interval, options.grace),
        (Some("n1"), Duration::from_secs(2), Duration::ZERO)
    );
    assert_eq!(options.metrics_address, None, "an empty address serves nothing");
    assert_eq!(options.cni_path, [PathBuf::from("/opt/cni/bin")]);
    for bad in [&["agent", "--interval=0"][..], &["agent", "--database=relative"], &["agent", "--kubeconfig=k"]] {
        assert_eq!(refusal(bad).0, ErrorKind::ValueValidation, "{bad:?}");
    }
}

/// The `cluster` command lines, by the error kind clap gives.
fn cluster_parse(args: &[&str]) -> Result<Invocation, ErrorKind> {
    parse_strs(args).map_err(|e| e.kind())
}

#[test]
fn the_cluster_command_line_takes_conf_before_or_after_the_command() {
    let blocks = Invocation::Cluster { conf: "a.conflist".into(), command: ClusterCommand::Blocks { json: true } };
    assert_eq!(cluster_parse(&["cluster", "--conf", "a.conflist", "blocks", "--json"]), Ok(blocks));
    let release = ClusterCommand::ReleaseNode { node: "node-3.rack_1".into(), json: false, gone: false };
    assert_eq!(
        cluster_parse(&["cluster", "release-node", "node-3.rack_1", "--conf=a.conflist"]),
        Ok(Invocation::Cluster { conf: "a.conflist".into(), command: release })
    );
    let gone = ClusterCommand::ReleaseNode { node: "n2".into(), json: true, gone: true };
    assert_eq!(
        cluster_parse(&["cluster", "--conf", "a", "release-node", "--gone", "n2", "--json"]),
        Ok(Invocation::Cluster { conf: "a".into(), command: gone })
    );
    assert_eq!(
        cluster_parse(&["cluster", "reap", "--json", "--conf", "a"]),
        Ok(Invocation::Cluster { conf: "a".into(), command: ClusterCommand::Reap { json: true } })
    );
    assert_eq!(cluster_parse(&["cluster", "--conf", "a", "reap", "n2"]), Err(ErrorKind::UnknownArgument));
    assert_eq!(cluster_parse(&["cluster", "blocks"]), Err(ErrorKind::MissingRequiredArgument));
    assert_eq!(cluster_parse(&["cluster", "--conf", "a"]), Err(ErrorKind::MissingSubcommand));
    assert_eq!(cluster_parse(&["cluster", "--conf", "a", "release-node"]), Err(ErrorKind::MissingRequiredArgument));
    for bad in ["a/b", "", "n 1", &"n".repeat(254)] {
        assert_eq!(
            cluster_parse(&["cluster", "--conf", "a", "release-node", bad]),
            Err(ErrorKind::ValueValidation),
            "{bad:?}"
        );
    }
    assert_eq!(
        cluster_parse(&["--database", "/d", "cluster", "--conf", "a", "blocks"]),
        Err(ErrorKind::ArgumentConflict)
    );
    assert_eq!(
        cluster_parse(&["cluster", "--conf", "a", "blocks", "--database", "/d"]),
        Err(ErrorKind::UnknownArgument)
    );
}
