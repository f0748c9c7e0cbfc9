//! The one error type of the suite. Every failure becomes a [`CniError`], which
//! renders as the CNI error object on stdout and a non-zero exit.

use std::fmt;
use std::sync::Arc;

/// Error codes: 1–99 are the CNI specification's, 100+ are this suite's
/// (see docs/contract.md's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    IncompatibleVersion,
    InvalidEnvironment,
    Io,
    Decode,
    InvalidConfig,
    TryAgainLater,
    NotReady,
    NoFreeAddress,
    AddressInUse,
    AddressNotInPool,
    DatabaseUnusable,
    NotRecorded,
    DelegateTimeout,
    DelegateNotFound,
    /// A bug in this suite (a caught panic). Not in the contract's table
    /// because it should never be seen.
    Internal,
    /// A code this suite does not define, passed through unchanged from a
    /// delegate's error object.
    Other(u32),
}

impl Code {
    const KNOWN: [Code; 15] = [
        Code::IncompatibleVersion,
        Code::InvalidEnvironment,
        Code::Io,
        Code::Decode,
        Code::InvalidConfig,
        Code::TryAgainLater,
        Code::NotReady,
        Code::NoFreeAddress,
        Code::AddressInUse,
        Code::AddressNotInPool,
        Code::DatabaseUnusable,
        Code::NotRecorded,
        Code::DelegateTimeout,
        Code::DelegateNotFound,
        Code::Internal,
    ];

    /// The number in the error object.
    pub const fn number(self) -> u32 {
        match self {
            Code::IncompatibleVersion => 1,
            Code::InvalidEnvironment => 4,
            Code::Io => 5,
            Code::Decode => 6,
            Code::InvalidConfig => 7,
            Code::TryAgainLater => 11,
            Code::NotReady => 50,
            Code::NoFreeAddress => 100,
            Code::AddressInUse => 101,
            Code::AddressNotInPool => 102,
            Code::DatabaseUnusable => 103,
            Code::NotRecorded => 104,
            Code::DelegateTimeout => 105,
            Code::DelegateNotFound => 106,
            Code::Internal => 999,
            Code::Other(n) => n,
        }
    }

    /// The code a number stands for; one this suite does not define is `Other`.
    pub fn from_number(n: u32) -> Code {
        Code::KNOWN.into_iter().find(|c| c.number() == n).unwrap_or(Code::Other(n))
    }
}

impl From<Code> for u32 {
    fn from(code: Code) -> u32 {
        code.number()
    }
}

/// So that a test or a caller can compare with the number a runtime sees.
impl PartialEq<u32> for Code {
    fn eq(&self, n: &u32) -> bool {
        self.number() == *n
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// A CNI error: `code`, a short `msg` and longer `details`, and the error
/// that caused it when there is one (for logs; the error object carries its
/// text in `msg` or `details`).
#[derive(Debug, Clone)]
pub struct CniError {
    pub code: Code,
    pub msg: String,
    pub details: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Errors are equal when a runtime would see the same object.
impl PartialEq for CniError {
    fn eq(&self, other: &Self) -> bool {
        (self.code, &self.msg, &self.details) == (other.code, &other.msg, &other.details)
    }
}

impl Eq for CniError {}

pub type Result<T, E = CniError> = std::result::Result<T, E>;

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        CniError { code, msg: msg.into(), details: String::new(), source: None }
    }

    /// Whether this error has `code`.
    pub fn is(&self, code: Code) -> bool {
        self.code == code
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Keeps `source` reachable through [`std::error::Error::source`].
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// Error 7 naming the offending field.
    pub fn config(field: &str, problem: impl fmt::Display) -> Self {
        Self::new(Code::InvalidConfig, format!("invalid network configuration: {field}: {problem}"))
    }

    /// Error 6: content that is not JSON of the right shape.
    pub fn decode(what: &str, problem: impl fmt::Display) -> Self {
        Self::new(Code::Decode, format!("{what}: {problem}"))
    }

    /// Error 4 naming the variable.
    pub fn env(var: &str, problem: impl fmt::Display) -> Self {
        Self::new(Code::InvalidEnvironment, format!("{var}: {problem}"))
    }

    /// Error 5 naming what was being read or written; the I/O error stays
    /// reachable as the source.
    pub fn io(what: &str, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::new(Code::Io, format!("{what}: {err}")).with_source(err)
    }

    /// Error 5 without an underlying error value (a limit, a short read).
    pub fn io_problem(what: &str, problem: impl fmt::Display) -> Self {
        Self::new(Code::Io, format!("{what}: {problem}"))
    }

    /// The CNI error object for the given spec version string.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code.number(),
            "msg": self.msg,
            "details": self.details,
        })
    }

    /// Reads an error object produced by another plugin; `None` if `value`
    /// is not one.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        let obj = value.as_object()?;
        let code = obj.get("code")?.as_u64()?;
        let text = |key: &str| obj.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let code = Code::from_number(u32::try_from(code).unwrap_or(u32::MAX));
        Some(CniError::new(code, text("msg")).with_details(text("details")))
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_object_has_the_four_keys() {
        let e = CniError::config("ipam.delegates", "must not be empty").with_details("more");
        let v = e.to_json("1.0.0");
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 7);
        assert_eq!(v["msg"], "invalid network configuration: ipam.delegates: must not be empty");
        assert_eq!(v["details"], "more");
        assert_eq!(CniError::from_json(&v), Some(e));
    }

    #[test]
    fn from_json_rejects_non_errors() {
        assert_eq!(CniError::from_json(&serde_json::json!({"ips": []})), None);
        assert_eq!(CniError::from_json(&serde_json::json!("code")), None);
    }

    #[test]
    fn codes_round_trip_and_foreign_codes_pass_through() {
        for code in Code::KNOWN {
            assert_eq!(Code::from_number(code.number()), code);
        }
        let foreign = CniError::from_json(&serde_json::json!({"code": 42, "msg": "theirs"})).unwrap();
        assert_eq!(foreign.code, Code::Other(42));
        assert_eq!(foreign.to_json("1.0.0")["code"], 42);
        assert_eq!(CniError::from_json(&serde_json::json!({"code": 101})).unwrap().code, Code::AddressInUse);
    }

    #[test]
    fn the_io_error_stays_reachable() {
        use std::error::Error;
        let e = CniError::io("reading x", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(e.code, Code::Io);
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).unwrap();
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    }
}
