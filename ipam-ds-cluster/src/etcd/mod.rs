//! A small blocking client of etcd's v3 gRPC API (etcd-client, over tonic).
//!
//! One CNI call is one short process making a few etcd requests: the client is
//! blocking, its async part runs on a current-thread runtime made at the first
//! request (no threads, and nothing costly before that request), and each
//! endpoint's HTTP/2 connection is kept for the next requests. Every request
//! is bounded by the configured timeout on each endpoint, so an etcd that
//! accepts connections but never answers (stopped, partitioned) costs at most
//! `timeout` per endpoint, never a hang.

mod client;
mod grpc;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod tls;
mod wire;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use client::Client;

/// etcd's default `--max-txn-ops`: a transaction with more operations in its
/// compare, success or failure list is refused, for good.
pub const MAX_TXN_OPS: usize = 128;

/// The node database's notes that hold cached auth tokens start so.
pub const TOKEN_NOTE_PREFIX: &str = "etcd-token:";

/// What a client needs, as read from the `cluster.etcd` settings.
#[derive(Clone)]
pub struct Settings {
    /// `http://host:port` or `https://host:port`, tried in order.
    pub endpoints: Vec<String>,
    /// Per request per endpoint, connecting included.
    pub timeout: Duration,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Read only when some endpoint is https.
    pub tls: TlsFiles,
}

impl Settings {
    /// The name under which a node keeps the auth token these settings get,
    /// `None` without credentials. A token carries its user's rights and is
    /// good only with the etcd that issued it: kept per endpoints, user and
    /// password, it is never sent to another network's endpoints nor used
    /// for another user, and a changed password authenticates again. Only a
    /// digest of them is in the name, never the password.
    pub fn token_note(&self) -> Option<String> {
        let (user, password) = (self.username.as_deref()?, self.password.as_deref()?);
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        let parts = self.endpoints.iter().map(String::as_str).chain([user, password]);
        for part in std::iter::once("ipam-delegated etcd token").chain(parts) {
            // Length-prefixed: no two lists of parts give the same bytes.
            digest.update(&(part.len() as u64).to_be_bytes());
            digest.update(part.as_bytes());
        }
        let hex: String = digest.finish().as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
        Some(format!("{TOKEN_NOTE_PREFIX}{hex}"))
    }
}

/// The password stays out of logs and panic messages.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("endpoints", &self.endpoints)
            .field("timeout", &self.timeout)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// PEM files; without `ca`, https endpoints are checked against the system bundle.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Counts kept so that logs and the benchmark can tell what one call cost etcd.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCount {
    pub ranges: u64,
    pub txns: u64,
    /// Txns with a put or delete among their ops: the ones etcd must commit.
    pub writing_txns: u64,
    /// Authentications and lease grants.
    pub other: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// Always linearizable: the member asked answers only what a quorum
/// confirms is current (a member cut off from its quorum answers "no leader"
/// or not at all), never from its own copy alone.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    /// `None`: the key alone.
    pub range_end: Option<Vec<u8>>,
    pub keys_only: bool,
    /// 0: no limit.
    pub limit: i64,
}

impl RangeRequest {
    pub fn key(k: impl Into<Vec<u8>>) -> Self {
        RangeRequest { key: k.into(), range_end: None, keys_only: false, limit: 0 }
    }

    pub fn prefix(p: impl Into<Vec<u8>>) -> Self {
        let key = p.into();
        let end = prefix_end(&key);
        RangeRequest { key, range_end: Some(end), keys_only: false, limit: 0 }
    }

    pub fn keys_only(self) -> Self {
        RangeRequest { keys_only: true, ..self }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeResponse {
    pub revision: i64,
    pub kvs: Vec<Kv>,
    /// Keys in the range, even those a limit left out.
    pub count: i64,
    /// A limit left some keys out.
    pub more: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Compare {
    CreateRevision {
        key: Vec<u8>,
        cmp: Cmp,
        revision: i64,
    },
    ModRevision {
        key: Vec<u8>,
        cmp: Cmp,
        revision: i64,
    },
    Value {
        key: Vec<u8>,
        cmp: Cmp,
        value: Vec<u8>,
    },
    /// No key under `prefix` was created or changed after `revision`
    /// (keys deleted since are not seen).
    UnchangedSince {
        prefix: Vec<u8>,
        revision: i64,
    },
}

impl Compare {
    /// etcd compares a missing key as one whose create_revision is 0.
    pub fn absent(key: impl Into<Vec<u8>>) -> Self {
        Compare::CreateRevision { key: key.into(), cmp: Cmp::Equal, revision: 0 }
    }

    pub fn mod_revision_is(key: impl Into<Vec<u8>>, revision: i64) -> Self {
        Compare::ModRevision { key: key.into(), cmp: Cmp::Equal, revision }
    }

    /// False for a missing key, whatever the value.
    pub fn value_is(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Compare::Value { key: key.into(), cmp: Cmp::Equal, value: value.into() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Range(RangeRequest),
    /// `lease` 0: none.
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    Delete {
        key: Vec<u8>,
        range_end: Option<Vec<u8>>,
    },
}

impl Op {
    fn writes(&self) -> bool {
        !matches!(self, Op::Range(_))
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Txn {
    pub compare: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

impl Txn {
    fn writes(&self) -> bool {
        self.success.iter().chain(&self.failure).any(Op::writes)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TxnResponse {
    pub succeeded: bool,
    pub revision: i64,
    /// One per op of the branch taken, in order.
    pub responses: Vec<OpResponse>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OpResponse {
    Range(RangeResponse),
    Put,
    Delete { deleted: i64 },
}

/// etcd's prefix rule: drop trailing 0xff bytes, increment the last byte left;
/// a prefix of only 0xff bytes (or none) has no end, which etcd spells "\0".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// No endpoint answered in time: refused, reset, timed out, TLS handshake
    /// failed, or etcd said it is unavailable / too busy / has no leader. Worth
    /// retrying later. The message names each endpoint tried and what happened.
    Unavailable(String),
    /// etcd refused the request for good (bad credentials, permission denied,
    /// invalid request). `code` is the gRPC code, `message` etcd's text.
    Refused { code: i64, message: String },
    /// Unusable settings; `field` is the key under `cluster.etcd` ("tls.ca", "endpoints[1]", …).
    Settings { field: String, message: String },
    /// An answer that is not what the v3 API promises.
    Protocol(String),
}

impl Error {
    fn settings(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Settings { field: field.into(), message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable(m) => write!(f, "etcd unavailable: {m}"),
            Error::Refused { code, message } => write!(f, "etcd refused the request: {message} (gRPC code {code})"),
            Error::Settings { field, message } => write!(f, "cluster.etcd.{field}: {message}"),
            Error::Protocol(m) => write!(f, "unexpected answer from etcd: {m}"),
        }
    }
}

impl std::error::Error for Error {}
