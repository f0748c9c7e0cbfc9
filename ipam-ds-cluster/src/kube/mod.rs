//! A small blocking client of the Kubernetes API, for cluster-scoped custom
//! resources: get, list, create, replace and delete, each conditioned the
//! way the API allows (create-if-absent, `resourceVersion`, delete
//! preconditions), each answer typed and stamped with the server's `Date`.
//!
//! One CNI call is one short process making a few requests, so the client
//! is plain HTTP/1.1 over rustls (ring) on a std `TcpStream`: no runtime, no
//! threads, one TLS handshake per process, the connection kept for the next
//! requests. Every request is bounded by the configured timeout, connecting
//! and the handshake included, so an API server that accepts connections but
//! never answers costs at most `timeout`, never a hang. A request that gets
//! no answer is not sent again: whether a write took effect is then
//! unknown, as with etcd, and the caller reads before it writes again (a
//! create then finds the object, a replace its new version).
//!
//! Where to connect and as whom comes from a kubeconfig (`kubeconfig.rs`),
//! read once per call (by the settings); its problems are settings errors naming the file.

mod client;
pub mod kubeconfig;
mod wire;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use shared::{CniError, Code};

pub use client::Client;
pub use kubeconfig::Kubeconfig;

/// What a client needs, as read from the `cluster.kubernetes` settings: the
/// kubeconfig already read and checked there, so that a call reads it once.
#[derive(Clone)]
pub struct Settings {
    pub kubeconfig: Arc<Kubeconfig>,
    /// Per request, connecting and the TLS handshake included.
    pub timeout: Duration,
}

impl fmt::Debug for Settings {
    // The kubeconfig holds credentials: only where it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings").field("kubeconfig", &self.kubeconfig.path).field("timeout", &self.timeout).finish()
    }
}

/// Counts kept so that logs and the benchmark can tell what one call cost
/// the API server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests sent, answered or not.
    pub requests: u64,
    /// TCP connections (each with its TLS handshake) opened, or tried.
    pub connections: u64,
}

/// A resource listed across namespaces: `/apis/{group}/{version}/{plural}`,
/// or `/api/{version}/{plural}` for the core group (`group` empty: pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
}

impl Resource {
    /// As RBAC and kubectl name it: `plural.group` (`plural` in the core group).
    pub fn qualified(&self) -> String {
        match self.group {
            "" => self.plural.to_string(),
            group => format!("{}.{group}", self.plural),
        }
    }

    /// The group's root: the core group (`""`: nodes) is under `/api`.
    fn group_path(&self) -> String {
        match self.group {
            "" => format!("/api/{}", self.version),
            group => format!("/apis/{group}/{}", self.version),
        }
    }
}

/// A resource in one namespace: `…/namespaces/{namespace}/{plural}` (the
/// reaper's `coordination.k8s.io` Lease, a pod a sticky identity is read from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaced<'a> {
    pub resource: Resource,
    pub namespace: &'a str,
}

/// Where a client's request goes: a cluster-scoped [`Resource`] or a
/// [`Namespaced`] one.
pub trait Collection {
    fn collection_path(&self) -> String;

    /// As RBAC names it, for messages.
    fn qualified(&self) -> String;

    fn object_path(&self, name: &str) -> String {
        format!("{}/{}", self.collection_path(), percent_encoded(name))
    }
}

impl Collection for Resource {
    fn collection_path(&self) -> String {
        format!("{}/{}", self.group_path(), self.plural)
    }

    fn qualified(&self) -> String {
        Resource::qualified(self)
    }
}

impl Collection for Namespaced<'_> {
    fn collection_path(&self) -> String {
        format!("{}/namespaces/{}/{}", self.resource.group_path(), self.namespace, self.resource.plural)
    }

    fn qualified(&self) -> String {
        format!("{} in namespace {}", self.resource.qualified(), self.namespace)
    }
}

/// An object as the server returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct Object(pub Value);

impl Object {
    pub fn name(&self) -> Option<&str> {
        self.0["metadata"]["name"].as_str()
    }

    pub fn uid(&self) -> Option<&str> {
        self.0["metadata"]["uid"].as_str()
    }

    /// The version a replace or delete of this object is conditioned on.
    pub fn resource_version(&self) -> Option<&str> {
        self.0["metadata"]["resourceVersion"].as_str()
    }
}

/// Every answer: what it says, and when by the server's clock (its `Date`
/// header), the clock the objects' timestamps are also on.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    pub outcome: T,
    pub date: SystemTime,
}

#[derive(Debug, Clone, PartialEq)]
pub struct List {
    pub items: Vec<Object>,
    /// The list's own version: the state of the whole collection it shows.
    pub resource_version: String,
}

/// `labelSelector` and `fieldSelector` of a list, in the API's syntax.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selectors<'a> {
    pub labels: Option<&'a str>,
    pub fields: Option<&'a str>,
    /// `resourceVersion=0`: the API server's cache as it is, possibly
    /// behind, answered at once; else a consistent list, which waits until
    /// the cache has caught up with etcd.
    pub from_cache: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    Created(Object),
    /// An object of that name exists; nothing was written.
    AlreadyExists,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Replaced {
    Replaced(Object),
    /// The object changed since the `resourceVersion` given; nothing was written.
    Conflict,
    NotFound,
}

/// The object a delete is meant for: the server deletes it only if its uid
/// and version are still these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preconditions<'a> {
    pub uid: Option<&'a str>,
    pub resource_version: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Deleted {
    /// Gone, or going (an object with finalizers is deleted once they are done).
    Deleted,
    /// The object is no longer the one the preconditions name; nothing was deleted.
    Conflict,
    NotFound,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// No answer in time: refused, reset, timed out, or the server said it
    /// is unavailable or too busy (5xx, 429). Worth retrying later.
    Unavailable(String),
    /// 401: the server does not know the credentials (expired, revoked,
    /// forged token; a certificate of another CA).
    Unauthorized { kubeconfig: PathBuf, message: String },
    /// 403: authenticated, but RBAC refuses `verb` on `resource`.
    Forbidden { verb: &'static str, resource: String, message: String },
    /// The server's certificate failed verification against the CA the
    /// kubeconfig names (`setting` names it), or the handshake failed for good.
    Tls { kubeconfig: PathBuf, setting: String, reason: String },
    /// An unusable kubeconfig: the file and what is wrong with it.
    Settings { kubeconfig: PathBuf, message: String },
    /// Any other refusal, for good (400, 404 of a collection, 422, …):
    /// the status code and the server's message.
    Refused { status: u16, message: String },
    /// An answer that is not what the API promises.
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(m) => write!(f, "the Kubernetes API server is unreachable: {m}"),
            Error::Unauthorized { kubeconfig, message } => write!(
                f,
                "{}: the Kubernetes API server does not accept these credentials (an expired or revoked token?): \
                 {message}",
                kubeconfig.display()
            ),
            Error::Forbidden { verb, resource, message } => {
                write!(f, "the Kubernetes API server's RBAC refuses to {verb} {resource}: {message}")
            }
            Error::Tls { kubeconfig, setting, reason } => write!(
                f,
                "{}: TLS with the Kubernetes API server failed, checked against {setting}: {reason}",
                kubeconfig.display()
            ),
            Error::Settings { kubeconfig, message } => write!(f, "{}: {message}", kubeconfig.display()),
            Error::Refused { status, message } => {
                write!(f, "the Kubernetes API server refused the request ({status}): {message}")
            }
            Error::Protocol(m) => write!(f, "unexpected answer from the Kubernetes API server: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The CNI error a caller returns: 11 for what may pass, 7 for what the
    /// configuration or the cluster's RBAC must change.
    pub fn to_cni(&self, field: &str) -> CniError {
        match self {
            Error::Unavailable(_) => CniError::new(Code::TryAgainLater, self.to_string()),
            Error::Protocol(_) => CniError::new(Code::Io, self.to_string()),
            _ => CniError::config(field, self),
        }
    }
}

/// A name or selector as one segment or query value of a URL.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
