//! CNI specification versions and the VERSION answer.

use crate::error::{CniError, Code, Result};

/// The spec versions every executable of the suite speaks, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

pub const SUPPORTED: [SpecVersion; 7] = [
    SpecVersion::V0_1_0,
    SpecVersion::V0_2_0,
    SpecVersion::V0_3_0,
    SpecVersion::V0_3_1,
    SpecVersion::V0_4_0,
    SpecVersion::V1_0_0,
    SpecVersion::V1_1_0,
];

impl SpecVersion {
    pub const LATEST: SpecVersion = SpecVersion::V1_1_0;
    /// What a configuration without `cniVersion` means.
    pub const IMPLICIT: SpecVersion = SpecVersion::V0_2_0;

    pub fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V0_1_0 => "0.1.0",
            SpecVersion::V0_2_0 => "0.2.0",
            SpecVersion::V0_3_0 => "0.3.0",
            SpecVersion::V0_3_1 => "0.3.1",
            SpecVersion::V0_4_0 => "0.4.0",
            SpecVersion::V1_0_0 => "1.0.0",
            SpecVersion::V1_1_0 => "1.1.0",
        }
    }

    /// Parses a `cniVersion` value; anything unknown or malformed is error 1.
    pub fn parse(s: &str) -> Result<Self> {
        SUPPORTED.into_iter().find(|v| v.as_str() == s).ok_or_else(|| {
            CniError::new(Code::IncompatibleVersion, format!("unsupported cniVersion {s:?}"))
                .with_details(format!("supported versions: {}", supported_list()))
        })
    }

    /// 0.1.0 and 0.2.0 results carry `ip4`/`ip6` objects instead of `ips`.
    pub fn has_legacy_result(self) -> bool {
        self <= SpecVersion::V0_2_0
    }

    /// 0.3.x and 0.4.0 results tag each `ips` entry with `"version"`.
    pub fn tags_ip_version(self) -> bool {
        (SpecVersion::V0_3_0..=SpecVersion::V0_4_0).contains(&self)
    }
}

impl std::fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub fn supported_list() -> String {
    SUPPORTED.map(SpecVersion::as_str).join(" ")
}

/// The VERSION answer: `cniVersion` echoes the request's version when it is one
/// we speak (the spec's rule), else our latest.
pub fn version_answer(requested: Option<&str>) -> serde_json::Value {
    let echoed = requested.and_then(|r| SpecVersion::parse(r).ok()).unwrap_or(SpecVersion::LATEST);
    serde_json::json!({
        "cniVersion": echoed.as_str(),
        "supportedVersions": SUPPORTED.map(SpecVersion::as_str),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_version_and_nothing_else() {
        for v in SUPPORTED {
            assert_eq!(SpecVersion::parse(v.as_str()).unwrap(), v);
        }
        for bad in ["", "1.0", "0.5.0", "2.0.0", "1.0.0 ", "v1.0.0", "abc"] {
            assert_eq!(SpecVersion::parse(bad).unwrap_err().code, 1, "{bad:?}");
        }
    }

    #[test]
    fn result_shape_rules() {
        assert!(SpecVersion::V0_1_0.has_legacy_result());
        assert!(SpecVersion::V0_2_0.has_legacy_result());
        assert!(!SpecVersion::V0_3_0.has_legacy_result());
        assert!(SpecVersion::V0_3_1.tags_ip_version());
        assert!(SpecVersion::V0_4_0.tags_ip_version());
        assert!(!SpecVersion::V1_0_0.tags_ip_version());
        assert!(!SpecVersion::V0_2_0.tags_ip_version());
    }

    #[test]
    fn version_answer_echoes_known_versions() {
        assert_eq!(version_answer(Some("0.4.0"))["cniVersion"], "0.4.0");
        assert_eq!(version_answer(Some("9.9.9"))["cniVersion"], "1.1.0");
        assert_eq!(version_answer(None)["supportedVersions"].as_array().unwrap().len(), 7);
    }
}
