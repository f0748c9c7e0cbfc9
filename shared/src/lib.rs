//! Everything the suite's executables share: the CNI protocol (environment,
//! configuration, results in every spec version, errors, logging), the
//! variables through which ipam-delegated tells its delegates what a call is,
//! the pool model, and the SQLite allocation store. How ipam-delegated runs
//! its delegates is its own (ipam-delegated/src/delegate/): no delegate
//! links it.

pub mod addr;
pub mod agent_record;
pub mod args;
pub mod config;
pub mod env;
pub mod error;
pub mod heap;
pub mod logging;
pub mod plugin;
pub mod pool;
pub mod result;
pub mod stack_call;
pub mod sticky;
pub mod store;
pub mod suite_delegate;
pub mod utc;
pub mod version;

pub use args::{Attachment, CniArgs};
pub use config::NetConf;
pub use env::{Command, Env};
pub use error::{CniError, Code, Result};
pub use plugin::{About, Builtin, Plugin, Reply, Request};
pub use result::{Dns, IpConfig, IpamResult, Route};
pub use version::SpecVersion;
