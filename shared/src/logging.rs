//! Logging: warnings and errors always go to stderr (stdout is reserved for the
//! JSON answer). A debug log file is kept by the `verbose` build, or wherever
//! `ipam.logFile` says, at `ipam.logLevel`.

use std::path::{Path, PathBuf};

use tracing::level_filters::LevelFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{fmt, Layer};

use crate::config::{AbsolutePath, IpamConf, LogLevel};

/// Where the `verbose` flavour logs: `/var/log/cni/<executable>.log`.
pub const VERBOSE_DIR: &str = "/var/log/cni";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub file: Option<PathBuf>,
    pub level: LevelFilter,
}

impl LogSettings {
    /// The build's default: the verbose flavour keeps a debug log file.
    pub fn build_default(executable: &str) -> LogSettings {
        let verbose = cfg!(feature = "verbose");
        LogSettings {
            file: verbose.then(|| Path::new(VERBOSE_DIR).join(format!("{executable}.log"))),
            level: if verbose { LevelFilter::DEBUG } else { LevelFilter::INFO },
        }
    }

    /// Settings from `ipam.logFile` / `ipam.logLevel`, over the build's default.
    pub fn from_ipam(executable: &str, ipam: Option<&IpamConf>) -> LogSettings {
        let mut settings = LogSettings::build_default(executable);
        if let Some(ipam) = ipam {
            if let Some(AbsolutePath(file)) = &ipam.log_file {
                settings.file = Some(file.clone());
            }
            if let Some(LogLevel(level)) = ipam.log_level {
                settings.level = level;
            }
        }
        settings
    }
}

/// Installs the global subscriber. A log file that cannot be opened is
/// reported on stderr and otherwise ignored: logging must not fail a runtime's call.
pub fn init(executable: &str, settings: &LogSettings) {
    let stderr = fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_filter(LevelFilter::WARN);
    let file = settings.file.as_deref().and_then(|path| match open_appender(path) {
        Ok(writer) => Some(fmt::layer().with_writer(writer).with_ansi(false).with_filter(settings.level)),
        Err(e) => {
            eprintln!("{executable}: cannot log to {}: {e}", path.display());
            None
        }
    });
    let subscriber = tracing_subscriber::registry().with(stderr).with(file);
    // Only fails if a subscriber is already set, which then keeps logging.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

fn open_appender(path: &Path) -> std::result::Result<BoxMakeWriter, String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).ok_or("no directory")?;
    let name = path.file_name().ok_or("no file name")?;
    let appender = tracing_appender::rolling::RollingFileAppender::builder()
        .rotation(tracing_appender::rolling::Rotation::NEVER)
        .filename_prefix(name.to_string_lossy())
        .build(dir)
        .map_err(|e| e.to_string())?;
    Ok(BoxMakeWriter::new(appender))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ipam_keys_override_the_build_default() {
        let conf = |v: serde_json::Value| crate::NetConf::parse(v.to_string().as_bytes()).unwrap();
        let c = conf(json!({"ipam": {"logFile": "/tmp/x.log", "logLevel": "DEBUG"}}));
        let s = LogSettings::from_ipam("exe", Some(c.ipam().unwrap()));
        assert_eq!(s, LogSettings { file: Some(PathBuf::from("/tmp/x.log")), level: LevelFilter::DEBUG });
        for (bad, field) in [
            (json!({"ipam": {"logFile": "rel.log"}}), "ipam.logFile: must be an absolute path, got \"rel.log\""),
            (json!({"ipam": {"logLevel": "loud"}}), "ipam.logLevel: must be one of"),
        ] {
            let e = conf(bad).ipam().unwrap_err();
            assert!(e.code == 7 && e.msg.contains(field), "{e}");
        }
    }

    #[test]
    fn default_file_follows_the_build_flavour() {
        let s = LogSettings::from_ipam("ipam-x", None);
        if cfg!(feature = "verbose") {
            assert_eq!(s.file, Some(PathBuf::from("/var/log/cni/ipam-x.log")));
        } else {
            assert_eq!(s.file, None);
        }
    }
}
