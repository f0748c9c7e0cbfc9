//! The `ipam` object as the suite reads it. Keys of other delegates stay in
//! `other`: the object is a view, and delegates receive the configuration as
//! it came.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{Deserializer, Error as _, IgnoredAny};
use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::level_filters::LevelFilter;

/// The keys of `ipam` that the suite's executables read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpamConf {
    #[serde(rename = "type")]
    pub plugin: Option<String>,
    /// The stack ipam-delegated runs; read by the orchestrator.
    pub delegates: Option<Vec<String>>,
    /// Only skipped here, not copied: the selector reads the pools from the
    /// configuration itself (see [`super::NetConf::pool_specs`]), and no
    /// other call pays for them, or fails on them (a DEL must not).
    pub pools: Option<IgnoredAny>,
    pub database: Option<DatabasePath>,
    pub timeout: Option<Seconds>,
    pub lock_timeout: Option<Seconds>,
    pub log_file: Option<AbsolutePath>,
    pub log_level: Option<LogLevel>,
    /// Every other key: other delegates' settings.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl IpamConf {
    /// Cluster mode (`ipam.cluster`): the pools an allocator is handed are
    /// this node's blocks as ipam-ds-cluster found them with room, to which a
    /// next call adds a block when they are full.
    pub fn is_cluster(&self) -> bool {
        self.other.contains_key("cluster")
    }
}

/// `ipam.timeout` when absent: how long ipam-delegated lets a delegate run.
pub const DEFAULT_DELEGATE_TIMEOUT: Duration = Duration::from_secs(30);

impl IpamConf {
    /// `ipam.timeout`, or its default: how long ipam-delegated lets one
    /// delegate run (and so how long a delegate's call can last).
    pub fn delegate_timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_DELEGATE_TIMEOUT, |s| s.0)
    }
}

/// A positive number of seconds, at most a day.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub Duration);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        value
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map(|s| Seconds(Duration::from_secs_f64(s)))
            .ok_or_else(|| D::Error::custom(format!("must be a number of seconds in (0, 86400], got {value}")))
    }
}

/// An absolute path.
#[derive(Debug, Clone, PartialEq)]
pub struct AbsolutePath(pub PathBuf);

impl<'de> Deserialize<'de> for AbsolutePath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if s.starts_with('/') => Ok(AbsolutePath(PathBuf::from(s))),
            other => Err(D::Error::custom(format!("must be an absolute path, got {other}"))),
        }
    }
}

/// The allocation database: an absolute path naming a file.
#[derive(Debug, Clone, PartialEq)]
pub struct DatabasePath(pub PathBuf);

impl<'de> Deserialize<'de> for DatabasePath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let AbsolutePath(path) = AbsolutePath::deserialize(d)?;
        match path.file_name() {
            Some(_) => Ok(DatabasePath(path)),
            None => Err(D::Error::custom(format!("{} does not name a file", path.display()))),
        }
    }
}

/// `ipam.logLevel`, in any case.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogLevel(pub LevelFilter);

impl<'de> Deserialize<'de> for LogLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let level = match value.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("error") => LevelFilter::ERROR,
            Some("warn") => LevelFilter::WARN,
            Some("info") => LevelFilter::INFO,
            Some("debug") => LevelFilter::DEBUG,
            Some("trace") => LevelFilter::TRACE,
            Some("off") => LevelFilter::OFF,
            _ => {
                return Err(D::Error::custom(format!(
                    "must be one of error, warn, info, debug, trace, off; got {value}"
                )))
            }
        };
        Ok(LogLevel(level))
    }
}
