//! The operator's command line, defined once for clap: parsing, `--help`, the
//! shell completions and the man pages all come from [`Cli`], so that they
//! cannot disagree. The clap types stay in this module; the rest of the tool
//! sees [`Invocation`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use shared::config::DEFAULT_DATABASE;
use shared::store::{LeaseFilter, DEFAULT_LOCK_TIMEOUT};
use shared::Attachment;

mod cluster_notes;
mod notes;

use cluster_notes::{BLOCKS_NOTES, CLUSTER_NOTES, REAP_NOTES, RELEASE_NODE_NOTES};
use notes::{
    ABOUT, AFTER_HELP, AGENT_NOTES, CHECK_NOTES, COMPLETIONS_NOTES, FORGET_POOL_NOTES, INSTALL_CNI_NOTES, LIST_NOTES,
    MAN_NOTES, METRICS_NOTES, POOLS_NOTES, RELEASE_NOTES, RELEASE_USAGE,
};

use super::agent::{self, Credentials};
use super::cluster::ClusterCommand;
use super::install_cni::{
    self, DEFAULT_BIN_DIR, DEFAULT_CONF_DIR, DEFAULT_ETCD_DIR, DEFAULT_NODE_FILE, DEFAULT_SERVICE_ACCOUNT_DIR,
};
use super::report::NAME;

/// What the command line asks for, once clap has accepted it.
#[derive(Debug, PartialEq)]
pub enum Invocation {
    /// A command over the allocation database at `database`.
    Database {
        database: PathBuf,
        command: Command,
    },
    Completions(Shell),
    Man(PathBuf),
    /// A cluster command over the network configuration at `conf` (its
    /// etcd, its pools and this node's database).
    Cluster {
        conf: PathBuf,
        command: ClusterCommand,
    },
    /// The installer of a Kubernetes DaemonSet.
    InstallCni(install_cni::Options),
    /// The node agent of a Kubernetes DaemonSet.
    Agent(agent::Options),
    /// The names the delegates are installed under.
    Delegates,
}

/// `ReleaseHolds` is `release --identity`: the holds of a workload identity.
#[derive(Debug, PartialEq)]
pub enum Command {
    List { filter: LeaseFilter, identity: Option<String>, json: bool },
    Pools { json: bool },
    Metrics { output: Option<PathBuf> },
    Release { owner: Attachment, lock_timeout: Duration },
    ReleaseHolds { identity: String, network: Option<String>, lock_timeout: Duration },
    ForgetPool { network: String, pool: String, lock_timeout: Duration },
    Check,
}

/// The shells whose completion scripts are generated and tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Parses the arguments after the executable's name. A request for help or
/// the version is an `Err` too, as clap has it: its `print` and `exit_code`
/// do the right thing for both (stdout and 0; stderr and 2 for a usage error).
pub fn parse(args: &[OsString]) -> Result<Invocation, clap::Error> {
    let argv = std::iter::once(OsString::from(NAME)).chain(args.iter().cloned());
    let cli = Cli::try_parse_from(argv)?;
    let top = cli.database.database;
    let top_given = top.is_some();
    // The agent's databases are a list, which it takes whole.
    let top_for_agent = top.clone();
    let database = |given: DatabaseArg| match (top, given.database) {
        (Some(_), Some(_)) => Err(Cli::command()
            .error(ErrorKind::ArgumentConflict, "the argument '--database <PATH>' cannot be used multiple times")),
        (Some(path), None) | (None, Some(path)) => Ok(path),
        (None, None) => Ok(PathBuf::from(DEFAULT_DATABASE)),
    };
    let (given, command) = match cli.command {
        Sub::List(a) => {
            let filter = LeaseFilter { network: a.network, pool: a.pool, container_id: a.container };
            (a.database, Command::List { filter, identity: a.identity, json: a.json })
        }
        Sub::Pools(a) => (a.database, Command::Pools { json: a.json }),
        Sub::Metrics(a) => (a.database, Command::Metrics { output: a.output }),
        Sub::Release(a) => (a.database, release(a.target, a.lock.timeout())?),
        Sub::ForgetPool(a) => {
            (a.database, Command::ForgetPool { network: a.network, pool: a.pool, lock_timeout: a.lock.timeout() })
        }
        Sub::Check(a) => (a.database, Command::Check),
        Sub::Completions { shell } => return Ok(Invocation::Completions(shell)),
        Sub::Man { dir } => return Ok(Invocation::Man(dir)),
        Sub::Cluster(a) => return cluster(top_given, a),
        Sub::InstallCni(a) => return install(top_given, a),
        Sub::Agent(a) => return agent(top_for_agent, a),
        Sub::Delegates => return Ok(Invocation::Delegates),
    };
    Ok(Invocation::Database { database: database(given)?, command })
}

/// `cluster`: the database is the configuration's, and `--conf` is
/// required (clap cannot require an argument given before or after the
/// command, so this does).
fn cluster(top_database: bool, a: ClusterArgs) -> Result<Invocation, clap::Error> {
    if top_database {
        return Err(Cli::command().error(
            ErrorKind::ArgumentConflict,
            "the argument '--database <PATH>' cannot be used with 'cluster': its database is the configuration's \
             ipam.database",
        ));
    }
    let Some(conf) = a.conf else {
        let mut root = Cli::command();
        root.build();
        let mut command = root.find_subcommand("cluster").cloned().unwrap_or_default();
        return Err(command.error(
            ErrorKind::MissingRequiredArgument,
            "the following required arguments were not provided:\n  --conf <CONFLIST>",
        ));
    };
    let command = match a.command {
        ClusterSub::Blocks { json } => ClusterCommand::Blocks { json },
        ClusterSub::ReleaseNode { node, json, gone } => ClusterCommand::ReleaseNode { node, json, gone },
        ClusterSub::Reap { json } => ClusterCommand::Reap { json },
    };
    Ok(Invocation::Cluster { conf, command })
}

fn install(top_database: bool, a: InstallCniArgs) -> Result<Invocation, clap::Error> {
    if top_database {
        return Err(Cli::command()
            .error(ErrorKind::ArgumentConflict, "the argument '--database <PATH>' cannot be used with 'install-cni'"));
    }
    Ok(Invocation::InstallCni(install_cni::Options {
        bin_dir: a.bin_dir,
        node_file: a.node_file,
        conflists: a.conflist,
        conf_dir: a.conf_dir,
        etcd_secret: a.etcd_secret,
        etcd_dir: a.etcd_dir,
        kubeconfig: a.kubeconfig,
        service_account_dir: a.service_account_dir,
        force: a.force,
        once: a.once,
        uninstall: a.uninstall,
    }))
}

/// `agent`: its databases are `--database`, given before the command or
/// after it (repeatable there), by default the suite's default one.
fn agent(top_database: Option<PathBuf>, a: AgentArgs) -> Result<Invocation, clap::Error> {
    let mut databases: Vec<PathBuf> = top_database.into_iter().chain(a.database).collect();
    if databases.is_empty() {
        databases.push(PathBuf::from(DEFAULT_DATABASE));
    }
    Ok(Invocation::Agent(agent::Options {
        node: a.node,
        node_file: a.node_file,
        credentials: match a.kubeconfig {
            Some(path) => Credentials::Kubeconfig(path),
            None => Credentials::InCluster(a.service_account_dir),
        },
        databases,
        interval: Duration::from_secs(a.interval),
        grace: Duration::from_secs(a.grace),
        metrics_address: Some(a.metrics_address).filter(|address| !address.is_empty()),
        cni_path: a.cni_path,
    }))
}

/// The clap definition itself, for the completions and the man pages.
pub fn definition() -> clap::Command {
    Cli::command()
}

#[derive(Parser, Debug)]
#[command(name = NAME, version, about = ABOUT, after_help = AFTER_HELP, subcommand_required = true)]
struct Cli {
    #[command(flatten)]
    database: DatabaseArg,
    #[command(subcommand)]
    command: Sub,
}

// Accepted before the command and after it, as the hand-written parser did;
// each command that reads the database has its own, so that `man` and
// `completions` do not offer it.
#[derive(Args, Debug)]
struct DatabaseArg {
    #[arg(long, value_name = "PATH", help = database_help())]
    database: Option<PathBuf>,
}

fn database_help() -> String {
    format!("The allocation database [default: {DEFAULT_DATABASE}]")
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Every lease and hold: pool, address, network, container id, ifname, since, state, identity
    #[command(after_help = LIST_NOTES)]
    List(ListArgs),
    /// Per registered pool: size, used, free, percent used, next address
    #[command(after_help = POOLS_NOTES)]
    Pools(PoolsArgs),
    /// Per registered pool: size, used, free, leases and held addresses in Prometheus text format
    #[command(after_help = METRICS_NOTES)]
    Metrics(MetricsArgs),
    /// Release every lease of one attachment, or drop the holds of one identity
    #[command(after_help = RELEASE_NOTES, override_usage = RELEASE_USAGE)]
    Release(ReleaseArgs),
    /// Release every lease of one pool and drop its registration
    #[command(after_help = FORGET_POOL_NOTES)]
    ForgetPool(ForgetPoolArgs),
    /// Check the database's integrity
    #[command(after_help = CHECK_NOTES)]
    Check(CheckArgs),
    /// Cluster mode (ipam-ds-cluster): the blocks of a network's cluster pools in etcd
    #[command(after_help = CLUSTER_NOTES, subcommand_required = true)]
    Cluster(ClusterArgs),
    /// Install the plugins on this node from a container (a Kubernetes DaemonSet), then wait for SIGTERM
    #[command(after_help = INSTALL_CNI_NOTES)]
    InstallCni(InstallCniArgs),
    /// Release, on this node, the addresses of pods the Kubernetes API no longer has (a DaemonSet's node agent)
    #[command(after_help = AGENT_NOTES)]
    Agent(AgentArgs),
    /// Print a shell completion script on stdout
    #[command(after_help = COMPLETIONS_NOTES)]
    Completions {
        /// The shell that will load the script
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Write the man pages into a directory
    #[command(after_help = MAN_NOTES)]
    Man {
        /// Where to write the pages
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the names this program runs as a delegate under, one a line: the links an installation needs
    // The program's own list (builtin::DELEGATES), which scripts/install,
    // scripts/package and the bench read from here.
    Delegates,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Only leases of this network name
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    network: Option<String>,
    /// Only leases of this pool
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pool: Option<String>,
    /// Only leases of this container id
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    container: Option<String>,
    /// Only leases and holds of this workload identity (ipam-da-sticky)
    #[arg(long, value_name = "ID", value_parser = NonEmptyStringValueParser::new())]
    identity: Option<String>,
    /// Print JSON for scripts instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    database: DatabaseArg,
}

#[derive(Args, Debug)]
struct PoolsArgs {
    /// Print JSON for scripts instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    database: DatabaseArg,
}

#[derive(Args, Debug)]
struct MetricsArgs {
    /// Write FILE atomically instead of printing on stdout
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    database: DatabaseArg,
}

#[derive(Args, Debug)]
struct ReleaseArgs {
    #[command(flatten)]
    target: ReleaseTarget,
    #[command(flatten)]
    lock: LockArg,
    #[command(flatten)]
    database: DatabaseArg,
}

/// An attachment (--network, --container and --ifname: its leases are
/// freed), or an identity (--identity, --network optional: its holds are
/// dropped). One or the other, never both.
#[derive(Args, Debug)]
struct ReleaseTarget {
    /// The network name (with --identity: only its holds on this network)
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    network: Option<String>,
    /// The container id
    #[arg(
        long,
        value_name = "ID",
        value_parser = NonEmptyStringValueParser::new(),
        requires_all = ["network", "ifname"]
    )]
    container: Option<String>,
    /// The interface name
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new(), requires = "container")]
    ifname: Option<String>,
    /// Drop the holds of this workload identity (ipam-da-sticky) instead: the addresses become free; a live lease
    /// of the identity stays
    #[arg(
        long,
        value_name = "ID",
        value_parser = NonEmptyStringValueParser::new(),
        conflicts_with_all = ["container", "ifname"]
    )]
    identity: Option<String>,
}

/// The command a valid `release` asks for.
fn release(target: ReleaseTarget, lock_timeout: Duration) -> Result<Command, clap::Error> {
    match target {
        ReleaseTarget { identity: Some(identity), network, .. } => {
            Ok(Command::ReleaseHolds { identity, network, lock_timeout })
        }
        ReleaseTarget { network: Some(network), container: Some(container_id), ifname: Some(ifname), .. } => {
            Ok(Command::Release { owner: Attachment { network, container_id, ifname }, lock_timeout })
        }
        // Nothing, or --network alone (clap checks what the others require).
        ReleaseTarget { network, .. } => {
            let missing = if network.is_some() { "" } else { "\n  --network <NAME>" };
            Err(release_command().error(
                ErrorKind::MissingRequiredArgument,
                format!(
                    "the following required arguments were not provided:{missing}\n  --container <ID>\n  --ifname \
                     <NAME>\n\n(or --identity <ID> to drop an identity's holds)"
                ),
            ))
        }
    }
}

/// `release` as clap built it, so that an error shows its usage.
fn release_command() -> clap::Command {
    let mut root = Cli::command();
    root.build();
    root.find_subcommand("release").cloned().unwrap_or_default()
}

#[derive(Args, Debug)]
struct ForgetPoolArgs {
    /// The network name
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    network: String,
    /// The pool name
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pool: String,
    #[command(flatten)]
    lock: LockArg,
    #[command(flatten)]
    database: DatabaseArg,
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    database: DatabaseArg,
}

#[derive(Args, Debug)]
struct AgentArgs {
    /// This node's name [default: the environment variable NODE_NAME, else --node-file]
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    node: Option<String>,
    /// The node file install-cni writes, read when neither --node nor NODE_NAME is given
    #[arg(long, value_name = "FILE", default_value = DEFAULT_AGENT_NODE_FILE, value_parser = absolute_path)]
    node_file: PathBuf,
    /// A kubeconfig to list the pods with [default: the pod's ServiceAccount, in-cluster]
    #[arg(long, value_name = "FILE", value_parser = absolute_path)]
    kubeconfig: Option<PathBuf>,
    /// The ServiceAccount files (token, ca.crt) of the in-cluster credentials
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SERVICE_ACCOUNT_DIR, value_parser = absolute_path)]
    service_account_dir: PathBuf,
    /// A node database to watch (repeatable) [default: the suite's default database]
    #[arg(long, value_name = "PATH", value_parser = absolute_path)]
    database: Vec<PathBuf>,
    /// Seconds between two passes
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
    /// Seconds a pod must have been gone, and its attachment's ADD old, before the attachment is released
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    grace: u64,
    /// Where GET /metrics is answered (host:port; empty: nowhere)
    #[arg(long, value_name = "ADDRESS", default_value = "0.0.0.0:9547")]
    metrics_address: String,
    /// A directory where the DELs find delegates that are not this program (repeatable)
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    cni_path: Vec<PathBuf>,
}

/// Where the node file is, as the agent's container mounts it: at the
/// host's own path, since the configurations the agent runs DEL with name
/// the host's paths (ipam.cluster.nodeFile).
const DEFAULT_AGENT_NODE_FILE: &str = "/etc/cni/ipam-delegated/node-name";

#[derive(Args, Debug)]
struct InstallCniArgs {
    /// The host's CNI plugin directory, as mounted in the container
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BIN_DIR, value_parser = absolute_path)]
    bin_dir: PathBuf,
    /// Where to write the node's name (from the environment variable NODE_NAME), as mounted in the container
    #[arg(long, value_name = "FILE", default_value = DEFAULT_NODE_FILE, value_parser = absolute_path)]
    node_file: PathBuf,
    /// A network configuration to copy into --conf-dir under its own file name (repeatable)
    #[arg(long, value_name = "SRC", value_parser = absolute_path)]
    conflist: Vec<PathBuf>,
    /// Where --conflist files go, as mounted in the container
    #[arg(long, value_name = "DIR", default_value = DEFAULT_CONF_DIR, value_parser = absolute_path)]
    conf_dir: PathBuf,
    /// A mounted Secret (etcd's TLS files, password) whose files to copy into --etcd-dir, mode 0600
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    etcd_secret: Option<PathBuf>,
    /// Where --etcd-secret's files go, as mounted in the container (the directory is made 0700)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ETCD_DIR, value_parser = absolute_path)]
    etcd_dir: PathBuf,
    /// Where to write the plugins' kubeconfig, as mounted in the container (mode 0600): the API server of the
    /// in-cluster environment (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT), the CA and token of
    /// --service-account-dir; written again whenever the kubelet refreshes the token
    #[arg(long, value_name = "FILE", value_parser = absolute_path)]
    kubeconfig: Option<PathBuf>,
    /// The pod's ServiceAccount files (token, ca.crt) that --kubeconfig is made of
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SERVICE_ACCOUNT_DIR, value_parser = absolute_path)]
    service_account_dir: PathBuf,
    /// Replace files of the same names that were not installed by install-cni
    #[arg(long)]
    force: bool,
    /// Exit once done instead of waiting for SIGTERM
    #[arg(long)]
    once: bool,
    /// Remove what install-cni installed (its manifest in --bin-dir says what), and nothing else
    #[arg(long, conflicts_with_all = ["conflist", "etcd_secret", "kubeconfig", "force"])]
    uninstall: bool,
}

fn absolute_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if path.is_absolute() && !text.is_empty() {
        Ok(path)
    } else {
        Err("expected an absolute path".to_string())
    }
}

#[derive(Args, Debug)]
struct ClusterArgs {
    /// The network configuration: a .conflist, or one plugin's .conf [required]
    #[arg(long, value_name = "CONFLIST", global = true)]
    conf: Option<PathBuf>,
    #[command(subcommand)]
    command: ClusterSub,
}

#[derive(Subcommand, Debug)]
enum ClusterSub {
    /// Per cluster pool: the blocks, their owner nodes and, for this node, their usage
    #[command(after_help = BLOCKS_NOTES)]
    Blocks {
        /// Print JSON for scripts instead of tables
        #[arg(long)]
        json: bool,
    },
    /// Hand a dead node's blocks and records back to the cluster
    #[command(after_help = RELEASE_NODE_NOTES)]
    ReleaseNode {
        /// The node, as its ipam.cluster.node (or nodeFile, or host name) names it
        #[arg(value_name = "NODE", value_parser = node_name)]
        node: String,
        /// Print JSON for scripts instead of text
        #[arg(long)]
        json: bool,
        /// NODE can never run again (its machine deleted, its disk wiped): its blocks are claimable at once,
        /// without waiting out its offlineGrace. If NODE is in fact alive but cut off from etcd, it may go on
        /// allocating in them, and a node that claims them meanwhile hands out the same addresses
        #[arg(long)]
        gone: bool,
    },
    /// One pass of the reaper: release the nodes deleted from the cluster and collect ended identities
    #[command(after_help = REAP_NOTES)]
    Reap {
        /// Print JSON for scripts instead of text
        #[arg(long)]
        json: bool,
    },
}

fn node_name(text: &str) -> Result<String, String> {
    if ipam_ds_cluster::settings::is_node_name(text) {
        Ok(text.to_string())
    } else {
        Err("not a node name: letters, digits, '.', '_' and '-', at most 253 characters".to_string())
    }
}

#[derive(Args, Debug)]
struct LockArg {
    // Negative numbers are let through to the parser, which names the
    // mistake, instead of being taken for an unknown option.
    #[arg(
        long = "lock-timeout",
        value_name = "SECONDS",
        help = lock_timeout_help(),
        value_parser = seconds,
        allow_negative_numbers = true
    )]
    timeout: Option<Duration>,
}

impl LockArg {
    fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_LOCK_TIMEOUT)
    }
}

fn lock_timeout_help() -> String {
    format!("How long to wait for the lock [default: {}]", DEFAULT_LOCK_TIMEOUT.as_secs_f64())
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && *value >= 0.0)
        .and_then(|value| Duration::try_from_secs_f64(value).ok())
        .ok_or_else(|| "expected a number of seconds, such as 10 or 0.5".to_string())
}

#[cfg(test)]
mod tests;
