//! Every way the operator's tool can fail, each worded once for the person
//! who ran it: the one line after `ipam-delegated: ` on stderr, with exit 1.
//! The plugin side's counterpart is [`CniError`], whose codes are for
//! runtimes; these are for people, so they carry no code.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use shared::CniError;

use super::atomic_file;

#[derive(Debug)]
pub enum Failure {
    /// The store, or a configuration read with the plugins' own code, said no.
    Cni(CniError),
    /// `--database` names nothing: the plugins create it on their first ADD.
    NoDatabase(PathBuf),
    /// `--database` names a directory or some other non-file.
    NotAFile(PathBuf),
    /// `--database` cannot be made absolute (no working directory).
    DatabasePath {
        path: PathBuf,
        error: io::Error,
    },
    /// A file or directory could not be read, written, created or removed.
    File {
        action: FileAction,
        path: PathBuf,
        error: io::Error,
    },
    /// Something the tool renders itself could not be rendered.
    Bug(String),
    /// More than one thing went wrong (metrics: the database and the output file).
    Several(Vec<Failure>),

    // ---- database commands
    /// `check` found problems (printed on stdout).
    IntegrityCheck {
        database: PathBuf,
    },
    /// `forget-pool` of a pool the database does not know.
    UnknownPool {
        network: String,
        pool: String,
        database: PathBuf,
    },

    // ---- cluster
    /// etcd's failure, in ipam-ds-cluster's words, for the configuration `conf`.
    Etcd {
        conf: PathBuf,
        message: String,
    },
    /// `--conf` is not a network configuration in cluster mode.
    ClusterConf {
        conf: PathBuf,
        problem: String,
    },
    /// `blocks`: this node's database could not be read for the use of its blocks.
    BlocksUseUnknown {
        node: String,
        because: Box<Failure>,
    },
    /// `release-node`: an identity key changed at every try.
    IdentityKeptChanging {
        key: String,
        node: String,
    },
    /// `release-node`: a pool's records of the node changed at every try.
    RecordsKeptChanging {
        node: String,
        pool: String,
    },

    // ---- agent
    /// What the agent needs to start (its node's name, the metrics address) is missing or wrong.
    Agent(String),

    // ---- install-cni
    NoNodeName,
    BadNodeName(OsString),
    /// This very program could not be read from `/proc/self/exe`.
    OwnProgram {
        path: PathBuf,
        error: io::Error,
    },
    /// A manifest that does not read as one.
    Manifest {
        path: PathBuf,
        error: serde_json::Error,
    },
    /// Files in the way, each worded; nothing was written.
    NothingInstalled(Vec<String>),
    /// Two `--conflist`s with one file name.
    ConflistClash {
        first: PathBuf,
        second: PathBuf,
        name: String,
    },
    Conflist {
        source: PathBuf,
        problem: ConflistProblem,
    },
    NotUtf8Name(PathBuf),
    TooLarge {
        path: PathBuf,
        limit: u64,
    },
    /// A path to write whose directory is not named.
    NoDirectory(PathBuf),
    /// The delegate's name could not be linked to the program.
    Link {
        path: PathBuf,
        target: &'static str,
        error: io::Error,
    },
    BlockSignals(io::Error),
    WaitForSignal(io::Error),
    /// `--kubeconfig` outside a pod: a variable of the in-cluster environment is not set.
    NotInCluster(&'static str),
    BadInCluster {
        variable: &'static str,
        value: OsString,
    },
    /// A file of the pod's ServiceAccount (`--service-account-dir`) that is not what the kubelet writes.
    ServiceAccount {
        path: PathBuf,
        problem: String,
    },
}

/// What was being done to a path that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    Read,
    ReadEtcdSecret,
    Write,
    WriteMetrics,
    Create,
    CreateDirectory,
    SyncDirectory,
    Remove,
    RemoveDirectory,
}

/// Why a `--conflist` is not copied.
#[derive(Debug)]
pub enum ConflistProblem {
    NoFileName,
    NotLoaded,
    NotJson(serde_json::Error),
    NotANetwork,
}

impl Failure {
    /// A file that [`atomic_file`] could not replace, or whose directory it
    /// could not fsync after.
    pub fn unwritten(action: FileAction, path: &Path, e: atomic_file::Error) -> Failure {
        match e {
            atomic_file::Error::Write(error) => Failure::File { action, path: path.to_path_buf(), error },
            atomic_file::Error::SyncDirectory { dir, error } => {
                Failure::File { action: FileAction::SyncDirectory, path: dir, error }
            }
        }
    }
}

impl From<CniError> for Failure {
    fn from(e: CniError) -> Self {
        Failure::Cni(e)
    }
}

impl fmt::Display for FileAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileAction::Read => "read",
            FileAction::ReadEtcdSecret => "read --etcd-secret",
            FileAction::Write => "write",
            FileAction::WriteMetrics => "write the metrics to",
            FileAction::Create => "create",
            FileAction::CreateDirectory => "create the directory",
            FileAction::SyncDirectory => "fsync the directory",
            FileAction::Remove => "remove",
            FileAction::RemoveDirectory => "remove the directory",
        })
    }
}

impl fmt::Display for ConflistProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConflistProblem::NoFileName => f.write_str("names no file (or its name is not UTF-8)"),
            ConflistProblem::NotLoaded => f.write_str("libcni loads only files named *.conf, *.conflist or *.json"),
            ConflistProblem::NotJson(e) => write!(f, "not JSON: {e}"),
            ConflistProblem::NotANetwork => {
                f.write_str("not a network configuration (a JSON object with a name, and plugins or a type)")
            }
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Cni(e) if e.details.is_empty() => f.write_str(&e.msg),
            Failure::Cni(e) => write!(f, "{}: {}", e.msg, e.details),
            Failure::NoDatabase(path) => write!(f, "no allocation database at {}", path.display()),
            Failure::NotAFile(path) => write!(f, "{} is not a file", path.display()),
            Failure::DatabasePath { path, error } => write!(f, "database path {}: {error}", path.display()),
            Failure::File { action, path, error } => write!(f, "cannot {action} {}: {error}", path.display()),
            Failure::Bug(what) => write!(f, "bug: {what}"),
            Failure::Several(failures) => {
                for (i, failure) in failures.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{failure}")?;
                }
                Ok(())
            }
            Failure::IntegrityCheck { database } => write!(f, "integrity check of {} failed", database.display()),
            Failure::UnknownPool { network, pool, database } => write!(
                f,
                "pool {pool:?} of network {network:?} is not registered and holds no lease in {}",
                database.display()
            ),
            Failure::Etcd { conf, message } => f.write_str(&one_line(&format!("{}: {message}", conf.display()))),
            Failure::ClusterConf { conf, problem } => write!(f, "{}: {problem}", conf.display()),
            Failure::BlocksUseUnknown { node, because } => {
                write!(f, "the use of node {node}'s blocks is unknown: {because}")
            }
            Failure::IdentityKeptChanging { key, node } => write!(
                f,
                "identity key {key} kept changing while it was released (is node {node} alive?): the node's blocks \
                 and address records are left as they are; run release-node again"
            ),
            Failure::RecordsKeptChanging { node, pool } => write!(
                f,
                "records of node {node} in pool {pool} kept changing while they were released (is the node alive?): \
                 run release-node again"
            ),
            Failure::Agent(problem) => write!(f, "agent: {problem}"),
            Failure::NoNodeName => f.write_str(
                "NODE_NAME is not set: the installer writes it to --node-file (in a DaemonSet, from the downward API: \
                 env NODE_NAME, valueFrom fieldRef spec.nodeName)",
            ),
            Failure::BadNodeName(name) => write!(
                f,
                "NODE_NAME {name:?} is not a node name: letters, digits, '.', '_' and '-', at most 253 characters"
            ),
            Failure::OwnProgram { path, error } => write!(f, "cannot read this program ({}): {error}", path.display()),
            Failure::Manifest { path, error } => {
                write!(f, "{}: not a manifest of install-cni ({error}); move it away to install afresh", path.display())
            }
            Failure::NothingInstalled(refusals) => write!(f, "nothing installed: {}", refusals.join("; ")),
            Failure::ConflistClash { first, second, name } => write!(
                f,
                "--conflist {} and {}: one file name, {name}, in --conf-dir",
                first.display(),
                second.display()
            ),
            Failure::Conflist { source, problem } => write!(f, "--conflist {}: {problem}", source.display()),
            Failure::NotUtf8Name(path) => write!(f, "{}: a file name that is not UTF-8", path.display()),
            Failure::TooLarge { path, limit } => write!(f, "{}: larger than {limit} bytes", path.display()),
            Failure::NoDirectory(path) => write!(f, "{}: names no file in a directory", path.display()),
            Failure::Link { path, target, error } => write!(f, "cannot link {} -> {target}: {error}", path.display()),
            Failure::BlockSignals(error) => write!(f, "cannot block SIGTERM and SIGINT to wait for them: {error}"),
            Failure::WaitForSignal(error) => write!(f, "cannot wait for a signal: {error}"),
            Failure::NotInCluster(variable) => write!(
                f,
                "{variable} is not set: --kubeconfig takes the API server's address from the environment the \
                 kubelet gives every pod (KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT)"
            ),
            Failure::BadInCluster { variable, value } => {
                write!(f, "{variable} {value:?} is not the API server's address or port")
            }
            Failure::ServiceAccount { path, problem } => {
                write!(f, "{} (the pod's ServiceAccount, --service-account-dir): {problem}", path.display())
            }
        }
    }
}

/// Line breaks (from etcd's messages) would break the one-line error.
fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).map(str::trim).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_on_one_line() {
        assert_eq!(one_line("a\nb\r\n c"), "a b c");
        let etcd = Failure::Etcd { conf: "/etc/cni/net.d/a.conflist".into(), message: "etcd is\nunreachable".into() };
        assert_eq!(etcd.to_string(), "/etc/cni/net.d/a.conflist: etcd is unreachable");
    }

    #[test]
    fn a_cni_error_reads_as_its_message_and_details() {
        let bare = CniError::new(shared::Code::TryAgainLater, "database is locked");
        assert_eq!(Failure::from(bare.clone()).to_string(), "database is locked");
        assert_eq!(Failure::from(bare.with_details("after 10s")).to_string(), "database is locked: after 10s");
    }

    #[test]
    fn several_failures_read_in_order() {
        let both = Failure::Several(vec![
            Failure::NoDatabase("/var/lib/cni/ipam.db".into()),
            Failure::File {
                action: FileAction::WriteMetrics,
                path: "/m/ipam.prom".into(),
                error: io::Error::from(io::ErrorKind::PermissionDenied),
            },
        ]);
        assert_eq!(
            both.to_string(),
            "no allocation database at /var/lib/cni/ipam.db; cannot write the metrics to /m/ipam.prom: permission denied"
        );
    }
}
