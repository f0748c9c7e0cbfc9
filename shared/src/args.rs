//! CNI_ARGS: `KEY=VALUE;KEY=VALUE`, as runtimes pass it.

use crate::error::{CniError, Result};

/// The parsed CNI_ARGS, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs(Vec<(String, String)>);

impl CniArgs {
    /// Parses CNI_ARGS; a pair without `=` or with an empty key is error 4.
    pub fn parse(raw: &str) -> Result<Self> {
        let mut pairs = Vec::new();
        for pair in raw.split(';').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((key, value)) if !key.is_empty() => pairs.push((key.to_string(), value.to_string())),
                _ => return Err(CniError::env("CNI_ARGS", format!("invalid pair {pair:?}, expected KEY=VALUE"))),
            }
        }
        Ok(CniArgs(pairs))
    }

    /// The value of `key`. Given twice with one value, it is that value;
    /// with two, which is meant cannot be told: error 4 naming the key and
    /// both values (a key this suite does not read is never looked at).
    pub fn get(&self, key: &str) -> Result<Option<&str>> {
        let mut values = self.0.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let Some(first) = values.next() else { return Ok(None) };
        match values.find(|v| *v != first) {
            None => Ok(Some(first)),
            Some(other) => Err(CniError::env(
                "CNI_ARGS",
                format!("{key} is given twice, as {first:?} and as {other:?}: which one is meant cannot be told"),
            )),
        }
    }

    /// A comma-separated value as a list, blanks dropped (`IP=a,b`).
    pub fn list(&self, key: &str) -> Result<Option<Vec<String>>> {
        Ok(self.get(key)?.map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()))
    }
}

/// Who holds an address: one attachment of one network, as the spec defines
/// it — `(CNI_CONTAINERID, CNI_IFNAME)` — scoped by the network name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
}

/// How messages name a holder: `container C interface I of network "N"`.
impl std::fmt::Display for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "container {} interface {} of network {:?}", self.container_id, self.ifname, self.network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runtime_style_args() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;IP=10.1.2.3, fd00::3 ;X=a=b").unwrap();
        assert_eq!(a.get("K8S_POD_NAMESPACE").unwrap(), Some("prod"));
        assert_eq!(a.get("X").unwrap(), Some("a=b"));
        assert_eq!(a.list("IP").unwrap().unwrap(), vec!["10.1.2.3", "fd00::3"]);
        assert_eq!(a.get("missing").unwrap(), None);
        assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());
        assert_eq!(CniArgs::parse("A=1;;A=1;").unwrap().get("A").unwrap(), Some("1"), "one value twice");
    }

    #[test]
    fn a_key_given_twice_with_two_values_is_error_4_naming_both_when_read() {
        let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=db-0;X=1;K8S_POD_NAME=db-1;X=2").unwrap();
        let e = a.get("K8S_POD_NAME").unwrap_err();
        assert_eq!(e.code, 4);
        for part in ["CNI_ARGS", "K8S_POD_NAME", "\"db-0\"", "\"db-1\""] {
            assert!(e.msg.contains(part), "{part} in {}", e.msg);
        }
        assert_eq!(a.list("X").unwrap_err().code, 4);
        assert_eq!(a.get("IgnoreUnknown").unwrap(), Some("1"), "another key reads as ever");
    }

    #[test]
    fn malformed_pairs_are_error_4_naming_cni_args() {
        for bad in ["NOEQUALS", "A=1;B", "=x"] {
            let e = CniArgs::parse(bad).unwrap_err();
            assert_eq!(e.code, 4);
            assert!(e.msg.contains("CNI_ARGS"), "{}", e.msg);
        }
    }
}
