//! The operator's command line, parsed by hand: `[--database PATH] COMMAND
//! [OPTIONS]`, each option as `--name value` or `--name=value`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use shared::config::DEFAULT_DATABASE;
use shared::store::{LeaseFilter, DEFAULT_LOCK_TIMEOUT};
use shared::Attachment;

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Invocation {
    /// Print this help text on stdout.
    Help(String),
    Version,
    Run {
        database: PathBuf,
        command: Command,
    },
}

#[derive(Debug, PartialEq)]
pub enum Command {
    List { filter: LeaseFilter, json: bool },
    Pools { json: bool },
    Release { owner: Attachment, lock_timeout: Duration },
    ForgetPool { network: String, pool: String, lock_timeout: Duration },
    Check,
}

/// A command line we cannot act on: exit 2, naming what is wrong.
#[derive(Debug, PartialEq)]
pub struct UsageError {
    /// The command whose options were wrong, to point at its help.
    pub command: Option<&'static str>,
    pub problem: String,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.command {
            Some(name) => write!(f, "{name}: {} (see 'ipam-delegated {name} --help')", self.problem),
            None => write!(f, "{} (see 'ipam-delegated --help')", self.problem),
        }
    }
}

/// One option a command accepts; `value` names its argument, `None` for a flag.
struct OptionSpec {
    name: &'static str,
    value: Option<&'static str>,
    help: &'static str,
}

struct CommandSpec {
    name: &'static str,
    summary: &'static str,
    /// Said after the options in the command's help.
    notes: &'static str,
    options: &'static [OptionSpec],
}

const LOCK_TIMEOUT: OptionSpec =
    OptionSpec { name: "lock-timeout", value: Some("SECONDS"), help: "how long to wait for the lock (default 10)" };

const JSON: OptionSpec = OptionSpec { name: "json", value: None, help: "print JSON for scripts instead of a table" };

const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "list",
        summary: "every lease: pool, address, network, container id, ifname, since",
        notes: "Leases are listed in address order; since is when the lease was taken, in UTC.\n\
                With --json: an array of objects with the keys pool, address, network,\n\
                container_id, ifname and since.",
        options: &[
            OptionSpec { name: "network", value: Some("NAME"), help: "only leases of this network name" },
            OptionSpec { name: "pool", value: Some("NAME"), help: "only leases of this pool" },
            OptionSpec { name: "container", value: Some("ID"), help: "only leases of this container id" },
            JSON,
        ],
    },
    CommandSpec {
        name: "pools",
        summary: "per registered pool: size, used, free, percent used, next address",
        notes: "size counts the allocatable addresses: each range's rangeStart..rangeEnd minus\n\
                the excluded addresses and the gateway. used counts the leases inside those\n\
                allocatable addresses, so a static lease outside them (outside the range, or\n\
                excluded) is not counted. next is the address sequential allocation would try\n\
                next, or - when the pool is full.\n\
                With --json: an array of objects with the keys network, name, subnets, size,\n\
                used, free, percent_used and next (null when full). size, used and free are\n\
                numbers, or decimal strings when above 2^53 (an IPv6 pool), which JSON readers\n\
                that hold numbers as doubles would round.",
        options: &[JSON],
    },
    CommandSpec {
        name: "release",
        summary: "release every lease of one attachment",
        notes: "Takes the same lock as the plugins. Releasing an attachment that holds nothing\n\
                is not an error. The released addresses are printed and logged.",
        options: &[
            OptionSpec { name: "network", value: Some("NAME"), help: "the network name (required)" },
            OptionSpec { name: "container", value: Some("ID"), help: "the container id (required)" },
            OptionSpec { name: "ifname", value: Some("NAME"), help: "the interface name (required)" },
            LOCK_TIMEOUT,
        ],
    },
    CommandSpec {
        name: "forget-pool",
        summary: "release every lease of one pool and drop its registration",
        notes: "For a pool that is gone from the configuration (renamed, moved, merged) but still\n\
                holds leases, so that its subnets can be registered by another pool. A pool\n\
                that holds no lease gives way by itself. Takes the same lock as the plugins;\n\
                the released addresses are printed and logged. Release only pools whose\n\
                containers are gone: a running container keeps using its address.",
        options: &[
            OptionSpec { name: "network", value: Some("NAME"), help: "the network name (required)" },
            OptionSpec { name: "pool", value: Some("NAME"), help: "the pool name (required)" },
            LOCK_TIMEOUT,
        ],
    },
    CommandSpec {
        name: "check",
        summary: "check the database's integrity",
        notes: "Runs SQLite's integrity check, then the suite's own: every lease lies in a\n\
                subnet of its registered pool, its text address matches its key, and the\n\
                runs of leased addresses agree with the leases. Prints ok and exits 0, or\n\
                prints the problems and exits 1.",
        options: &[],
    },
];

/// The tool's help, `ipam-delegated --help`.
pub fn main_help() -> String {
    let commands: Vec<String> = COMMANDS.iter().map(|c| format!("  {:<11} {}", c.name, c.summary)).collect();
    format!(
        "ipam-delegated: operator commands over the allocation database.\n\
         Without arguments ipam-delegated is the CNI IPAM plugin a container runtime runs.\n\
         \n\
         Usage: ipam-delegated [--database PATH] COMMAND [OPTIONS]\n\
         \n\
         Commands:\n{}\n  help [COMMAND]  this text, or a command's\n\
         \n\
         Options (also accepted after the command):\n\
         \x20 --database PATH  the allocation database (default {DEFAULT_DATABASE})\n\
         \x20 -h, --help       this text; 'ipam-delegated COMMAND --help' for a command's\n\
         \x20 --version        the version\n\
         \n\
         Exit status: 0 success; 1 failure (no database, locked, unusable, or check\n\
         found problems); 2 usage error.\n",
        commands.join("\n")
    )
}

fn command_help(spec: &CommandSpec) -> String {
    let mut options: Vec<(String, &str)> = spec
        .options
        .iter()
        .map(|o| (format!("--{}{}", o.name, o.value.map(|v| format!(" {v}")).unwrap_or_default()), o.help))
        .collect();
    options.push(("--database PATH".into(), "the allocation database"));
    options.push(("-h, --help".into(), "this text"));
    let width = options.iter().map(|(o, _)| o.len()).max().unwrap_or(0);
    let usage: Vec<String> = spec
        .options
        .iter()
        .map(|o| match o.value {
            Some(v) if matches!(spec.name, "release" | "forget-pool") && o.name != "lock-timeout" => {
                format!(" --{} {v}", o.name)
            }
            Some(v) => format!(" [--{} {v}]", o.name),
            None => format!(" [--{}]", o.name),
        })
        .collect();
    let lines: Vec<String> = options.iter().map(|(o, help)| format!("  {o:<width$}  {help}")).collect();
    format!(
        "ipam-delegated {}: {}\n\nUsage: ipam-delegated {}{}\n\nOptions:\n{}\n\n{}\n",
        spec.name,
        spec.summary,
        spec.name,
        usage.concat(),
        lines.join("\n"),
        spec.notes
    )
}

/// Parses the arguments after the executable's name.
pub fn parse(args: &[OsString]) -> Result<Invocation, UsageError> {
    let args: Vec<&str> = args
        .iter()
        .map(|a| a.to_str().ok_or_else(|| usage(None, format!("argument {a:?} is not valid UTF-8"))))
        .collect::<Result<_, _>>()?;
    let mut database: Option<String> = None;
    let mut rest = args.as_slice();
    // Options before the command: only the global ones.
    let spec = loop {
        let Some((&arg, tail)) = rest.split_first() else {
            return Err(usage(None, "no command given".into()));
        };
        rest = tail;
        match arg {
            "-h" | "--help" => return Ok(Invocation::Help(main_help())),
            "--version" => return Ok(Invocation::Version),
            "help" => return help_for(rest),
            _ if arg.starts_with('-') => {
                let (name, inline) = split_option(arg);
                if name != "database" {
                    return Err(usage(None, format!("unknown option {arg}")));
                }
                let value = take_value(None, "database", inline, &mut rest)?;
                set_once(None, &mut database, "database", value)?;
            }
            name => {
                break COMMANDS
                    .iter()
                    .find(|c| c.name == name)
                    .ok_or_else(|| usage(None, format!("unknown command {name:?}")))?
            }
        }
    };
    let mut given = BTreeMap::new();
    let command = Some(spec.name);
    // --help wins over any mistake beside it: the person is asking how.
    if rest.iter().any(|&a| a == "-h" || a == "--help") {
        return Ok(Invocation::Help(command_help(spec)));
    }
    while let Some((&arg, tail)) = rest.split_first() {
        rest = tail;
        if !arg.starts_with('-') {
            return Err(usage(command, format!("unexpected argument {arg:?}")));
        }
        if !arg.starts_with("--") {
            return Err(usage(command, format!("unknown option {arg}")));
        }
        let (name, inline) = split_option(arg);
        if name == "database" {
            let value = take_value(command, "database", inline, &mut rest)?;
            set_once(command, &mut database, "database", value)?;
            continue;
        }
        let option = spec
            .options
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| usage(command, format!("unknown option --{name}")))?;
        let value = match option.value {
            Some(_) => take_value(command, option.name, inline, &mut rest)?,
            None if inline.is_some() => return Err(usage(command, format!("--{name} takes no value"))),
            None => String::new(),
        };
        if given.insert(option.name, value).is_some() {
            return Err(usage(command, format!("--{name} given twice")));
        }
    }
    let database = PathBuf::from(database.unwrap_or_else(|| DEFAULT_DATABASE.to_string()));
    let command = build(spec.name, given)?;
    Ok(Invocation::Run { database, command })
}

fn help_for(rest: &[&str]) -> Result<Invocation, UsageError> {
    match rest {
        [] => Ok(Invocation::Help(main_help())),
        [name] => COMMANDS
            .iter()
            .find(|c| c.name == *name)
            .map(|spec| Invocation::Help(command_help(spec)))
            .ok_or_else(|| usage(None, format!("unknown command {name:?}"))),
        [_, extra, ..] => Err(usage(None, format!("help: unexpected argument {extra:?}"))),
    }
}

/// `--name=value` → ("name", Some("value")); `--name` → ("name", None).
fn split_option(arg: &str) -> (&str, Option<&str>) {
    let bare = arg.trim_start_matches('-');
    match bare.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (bare, None),
    }
}

fn take_value(
    command: Option<&'static str>,
    name: &str,
    inline: Option<&str>,
    rest: &mut &[&str],
) -> Result<String, UsageError> {
    let value = match inline {
        Some(value) => value,
        None => match rest.split_first() {
            Some((&value, tail)) if !value.starts_with("--") => {
                *rest = tail;
                value
            }
            _ => return Err(usage(command, format!("--{name} needs a value"))),
        },
    };
    if value.is_empty() {
        return Err(usage(command, format!("--{name} must not be empty")));
    }
    Ok(value.to_string())
}

fn set_once(
    command: Option<&'static str>,
    slot: &mut Option<String>,
    name: &str,
    value: String,
) -> Result<(), UsageError> {
    if slot.replace(value).is_some() {
        return Err(usage(command, format!("--{name} given twice")));
    }
    Ok(())
}

fn build(name: &'static str, mut given: BTreeMap<&'static str, String>) -> Result<Command, UsageError> {
    let json = given.contains_key("json");
    let lock_timeout = match given.remove("lock-timeout") {
        Some(text) => seconds(&text)
            .ok_or_else(|| usage(Some(name), format!("--lock-timeout must be a number of seconds, got {text:?}")))?,
        None => DEFAULT_LOCK_TIMEOUT,
    };
    let mut required =
        |option: &str| given.remove(option).ok_or_else(|| usage(Some(name), format!("--{option} is required")));
    Ok(match name {
        "list" => Command::List {
            filter: LeaseFilter {
                network: required("network").ok(),
                pool: required("pool").ok(),
                container_id: required("container").ok(),
            },
            json,
        },
        "pools" => Command::Pools { json },
        "release" => {
            let owner = Attachment {
                network: required("network")?,
                container_id: required("container")?,
                ifname: required("ifname")?,
            };
            Command::Release { owner, lock_timeout }
        }
        "forget-pool" => Command::ForgetPool { network: required("network")?, pool: required("pool")?, lock_timeout },
        _ => Command::Check,
    })
}

fn seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| Duration::try_from_secs_f64(value).ok()).flatten()
}

fn usage(command: Option<&'static str>, problem: String) -> UsageError {
    UsageError { command, problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Invocation, UsageError> {
        parse(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    fn problem(args: &[&str]) -> String {
        parse_strs(args).unwrap_err().to_string()
    }

    #[test]
    fn list_with_filters_and_the_database_before_or_after_the_command() {
        let expected = Invocation::Run {
            database: PathBuf::from("/tmp/db"),
            command: Command::List {
                filter: LeaseFilter { network: Some("n".into()), pool: None, container_id: Some("c".into()) },
                json: true,
            },
        };
        assert_eq!(
            parse_strs(&["--database", "/tmp/db", "list", "--network=n", "--container", "c", "--json"]),
            Ok(expected)
        );
        let after = parse_strs(&["list", "--json", "--network", "n", "--container=c", "--database=/tmp/db"]);
        assert!(matches!(after, Ok(Invocation::Run { ref database, .. }) if database == &PathBuf::from("/tmp/db")));
    }

    #[test]
    fn defaults() {
        assert_eq!(
            parse_strs(&["pools"]),
            Ok(Invocation::Run { database: PathBuf::from(DEFAULT_DATABASE), command: Command::Pools { json: false } })
        );
        let Ok(Invocation::Run { command: Command::Release { lock_timeout, owner }, .. }) =
            parse_strs(&["release", "--network", "n", "--container", "c", "--ifname", "eth0", "--lock-timeout", "0.5"])
        else {
            panic!("release did not parse");
        };
        assert_eq!(lock_timeout, Duration::from_millis(500));
        assert_eq!(owner, Attachment { network: "n".into(), container_id: "c".into(), ifname: "eth0".into() });
    }

    #[test]
    fn help_everywhere() {
        assert!(matches!(parse_strs(&["--help"]), Ok(Invocation::Help(t)) if t.contains("Commands:")));
        assert!(matches!(parse_strs(&["help"]), Ok(Invocation::Help(t)) if t.contains("Commands:")));
        for args in [&["list", "--help"][..], &["list", "--bogus", "-h"], &["help", "list"]] {
            assert!(matches!(parse_strs(args), Ok(Invocation::Help(t)) if t.contains("--container ID")), "{args:?}");
        }
        assert!(matches!(parse_strs(&["release", "-h"]), Ok(Invocation::Help(t)) if t.contains("--lock-timeout")));
    }

    #[test]
    fn usage_errors_name_the_culprit() {
        assert_eq!(problem(&[]), "no command given (see 'ipam-delegated --help')");
        assert_eq!(problem(&["frobnicate"]), "unknown command \"frobnicate\" (see 'ipam-delegated --help')");
        assert_eq!(problem(&["--bogus", "list"]), "unknown option --bogus (see 'ipam-delegated --help')");
        assert_eq!(problem(&["list", "--bogus"]), "list: unknown option --bogus (see 'ipam-delegated list --help')");
        assert!(problem(&["list", "--network"]).contains("--network needs a value"));
        assert!(problem(&["list", "--network", "--json"]).contains("--network needs a value"));
        assert!(problem(&["list", "--pool", "a", "--pool=b"]).contains("--pool given twice"));
        assert!(problem(&["list", "extra"]).contains("unexpected argument \"extra\""));
        assert!(problem(&["pools", "--json=yes"]).contains("--json takes no value"));
        assert!(problem(&["check", "--json"]).contains("check: unknown option --json"));
        assert!(problem(&["release", "--network", "n", "--container", "c"]).contains("--ifname is required"));
        let bad = problem(&["release", "--network", "n", "--container", "c", "--ifname", "e", "--lock-timeout", "-1"]);
        assert!(bad.contains("--lock-timeout must be a number of seconds"), "{bad}");
        assert!(problem(&["forget-pool", "--network", "n"]).contains("forget-pool: --pool is required"));
        assert_eq!(
            parse_strs(&["forget-pool", "--pool", "p", "--network=n", "--lock-timeout", "2"]),
            Ok(Invocation::Run {
                database: PathBuf::from(DEFAULT_DATABASE),
                command: Command::ForgetPool {
                    network: "n".into(),
                    pool: "p".into(),
                    lock_timeout: Duration::from_secs(2)
                }
            })
        );
    }
}
