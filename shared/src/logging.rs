//! Logging: warnings and errors always go to stderr (stdout is reserved for the
//! JSON answer). A debug log file is kept by the `verbose` build, or wherever
//! `ipam.logFile` says, at `ipam.logLevel`.

use std::cell::Cell;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::level_filters::LevelFilter;
use tracing_appender::rolling::RollingFileAppender;
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

/// Logging for one plugin run, until the returned guard is dropped. The
/// process's first run installs the global subscriber: warnings and errors
/// to stderr, and `settings.level` and up to `settings.file`. A run inside
/// it (a delegate that ipam-delegated runs in its own process) logs through
/// the same subscriber, into the file its own settings name, so that its
/// lines land where its process would have written them. A log file that
/// cannot be opened is reported on stderr and otherwise ignored: logging
/// must not fail a runtime's call.
pub fn activate(executable: &str, settings: &LogSettings) -> Active {
    let file = settings.file.as_deref().and_then(|path| log_file(executable, path));
    let previous = CURRENT_FILE.replace(file);
    INSTALLED.get_or_init(|| {
        let stderr = fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_filter(LevelFilter::WARN);
        // Files are written at the first run's level: the runs of one call
        // share its configuration, and with it ipam.logLevel.
        let file = settings
            .file
            .is_some()
            .then(|| fmt::layer().with_writer(|| CurrentFile).with_ansi(false).with_filter(settings.level));
        let subscriber = tracing_subscriber::registry().with(stderr).with(file);
        // Only fails if a subscriber is already set, which then keeps logging.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    Active { previous }
}

/// Ends a run's logging: the enclosing run's file is current again.
pub struct Active {
    previous: Option<usize>,
}

impl Drop for Active {
    fn drop(&mut self) {
        CURRENT_FILE.set(self.previous);
    }
}

static INSTALLED: OnceLock<()> = OnceLock::new();

/// The log files of this process's runs, opened once each, or why one
/// could not be.
static FILES: Mutex<Vec<(PathBuf, std::result::Result<RollingFileAppender, String>)>> = Mutex::new(Vec::new());

thread_local! {
    /// The index in [`FILES`] of the file the running plugin logs to.
    static CURRENT_FILE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The index in [`FILES`] of `path`, opened if it is new.
fn log_file(executable: &str, path: &Path) -> Option<usize> {
    let mut files = FILES.lock().unwrap_or_else(PoisonError::into_inner);
    let index = match files.iter().position(|(p, _)| p == path) {
        Some(index) => index,
        None => {
            files.push((path.to_path_buf(), open_appender(path)));
            files.len() - 1
        }
    };
    if let Err(why) = &files[index].1 {
        // Said by every run that cannot log, as a process of its own would.
        eprintln!("{executable}: cannot log to {}: {why}", path.display());
        return None;
    }
    Some(index)
}

/// A writer to the current run's log file (nothing when it has none).
struct CurrentFile;

impl CurrentFile {
    /// `f` on the current run's file; `none` when there is none.
    fn with<T>(f: impl FnOnce(&mut RollingFileAppender) -> io::Result<T>, none: T) -> io::Result<T> {
        let Some(index) = CURRENT_FILE.get() else { return Ok(none) };
        let mut files = FILES.lock().unwrap_or_else(PoisonError::into_inner);
        match files.get_mut(index).and_then(|(_, file)| file.as_mut().ok()) {
            Some(file) => f(file),
            None => Ok(none),
        }
    }
}

impl Write for CurrentFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        CurrentFile::with(|file| file.write(buf), buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        CurrentFile::with(|file| file.flush(), ())
    }
}

fn open_appender(path: &Path) -> std::result::Result<RollingFileAppender, String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).ok_or("no directory")?;
    let name = path.file_name().ok_or("no file name")?;
    RollingFileAppender::builder()
        .rotation(tracing_appender::rolling::Rotation::NEVER)
        .filename_prefix(name.to_string_lossy())
        .build(dir)
        .map_err(|e| e.to_string())
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
