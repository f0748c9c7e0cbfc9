//! Everything the suite's executables share: the CNI protocol (environment,
//! configuration, results in every spec version, errors, delegation, logging),
//! the pool model, and the SQLite allocation store.

pub mod addr;
pub mod args;
pub mod error;
pub mod pool;
pub mod result;
pub mod store;
pub mod version;

pub use args::{Attachment, CniArgs};
pub use error::{CniError, Code, Result};
pub use result::{Dns, IpConfig, IpamResult, Route};
pub use version::SpecVersion;
