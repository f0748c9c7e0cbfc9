//! The one error type of the suite. Every failure becomes a [`CniError`], which
//! renders as the CNI error object on stdout and a non-zero exit.

use std::fmt;

/// Error codes: 1–99 are the CNI specification's, 100+ are this suite's
/// (see the contract's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    IncompatibleVersion = 1,
    InvalidEnvironment = 4,
    Io = 5,
    Decode = 6,
    InvalidConfig = 7,
    TryAgainLater = 11,
    NotReady = 50,
    NoFreeAddress = 100,
    AddressInUse = 101,
    AddressNotInPool = 102,
    DatabaseUnusable = 103,
    NotRecorded = 104,
    DelegateTimeout = 105,
    DelegateNotFound = 106,
    /// A bug in this suite (a caught panic). Not in the contract's table
    /// because it should never be seen.
    Internal = 999,
}

/// A CNI error: `code`, a short `msg` and longer `details`. The code is a raw
/// number because `ipam-delegated` passes a delegate's own code through unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

pub type Result<T, E = CniError> = std::result::Result<T, E>;

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        CniError { code: code as u32, msg: msg.into(), details: String::new() }
    }

    /// Whether this error has `code`.
    pub fn is(&self, code: Code) -> bool {
        self.code == code as u32
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
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

    pub fn io(what: &str, err: impl fmt::Display) -> Self {
        Self::new(Code::Io, format!("{what}: {err}"))
    }

    /// The CNI error object for the given spec version string.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
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
        Some(CniError { code: u32::try_from(code).unwrap_or(u32::MAX), msg: text("msg"), details: text("details") })
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

impl std::error::Error for CniError {}

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
}
