//! The CNI_* environment of one invocation.

use std::path::PathBuf;

use crate::args::{Attachment, CniArgs};
use crate::error::{CniError, Code, Result};
use crate::stack_call::StackCall;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            other => {
                return Err(CniError::env(
                    "CNI_COMMAND",
                    format!("unknown command {other:?} (expected ADD, DEL, CHECK, GC, STATUS or VERSION)"),
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// Spec 1.0/1.1: ADD, DEL and CHECK act on one attachment; GC, STATUS and
    /// VERSION on none.
    fn needs_attachment(self) -> bool {
        matches!(self, Command::Add | Command::Del | Command::Check)
    }

    /// DEL may come after the namespace is gone, so only ADD and CHECK need it.
    fn needs_netns(self) -> bool {
        matches!(self, Command::Add | Command::Check)
    }
}

/// The validated CNI_* variables.
#[derive(Debug, Clone)]
pub struct Env {
    pub command: Command,
    pub container_id: Option<String>,
    pub netns: Option<String>,
    pub ifname: Option<String>,
    pub args: CniArgs,
    /// CNI_PATH's directories; empty and relative entries are dropped so that
    /// a delegate is never looked up in the working directory.
    pub path: Vec<PathBuf>,
    /// What ipam-delegated passed down, when it runs this process.
    pub stack: StackCall,
}

impl Env {
    /// Reads the variables through `var`. `Ok(None)` when CNI_COMMAND is unset
    /// (a person at a terminal, not a runtime).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Env>> {
        let Some(command) = var("CNI_COMMAND") else { return Ok(None) };
        let command = Command::parse(&command)?;
        let required = |name: &str, needed: bool| -> Result<Option<String>> {
            match var(name) {
                Some(v) if !v.is_empty() => Ok(Some(v)),
                _ if needed => Err(CniError::env(name, format!("missing, but required for {}", command.as_str()))),
                _ => Ok(None),
            }
        };
        let container_id = required("CNI_CONTAINERID", command.needs_attachment())?;
        if let Some(id) = &container_id {
            validate_container_id(id)?;
        }
        let ifname = required("CNI_IFNAME", command.needs_attachment())?;
        if let Some(name) = &ifname {
            validate_ifname(name)?;
        }
        let netns = required("CNI_NETNS", command.needs_netns())?;
        let args = CniArgs::parse(&var("CNI_ARGS").unwrap_or_default())?;
        let path =
            var("CNI_PATH").unwrap_or_default().split(':').map(PathBuf::from).filter(|p| p.is_absolute()).collect();
        let stack = StackCall::from_vars(&var)?;
        Ok(Some(Env { command, container_id, netns, ifname, args, path, stack }))
    }

    /// From the process environment; a variable that is not UTF-8 counts as
    /// present but invalid.
    pub fn from_process() -> Result<Option<Env>> {
        for (key, value) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| k.starts_with("CNI_")) && value.to_str().is_none() {
                return Err(CniError::env(&key.to_string_lossy(), "not valid UTF-8"));
            }
        }
        Env::from_vars(|name| std::env::var(name).ok())
    }

    /// The environment a delegate run in this process by ipam-delegated sees
    /// (ipam-delegated's `delegate::in_process`): the process's own, with
    /// CNI_COMMAND and `vars` set and every other variable of
    /// [`crate::stack_call`] unset, as a delegate's process would get it.
    /// (The process's own variables were checked by [`Env::from_process`]
    /// when it started, and are not checked again.)
    pub fn in_process(command: Command, vars: &[(&str, String)]) -> Result<Env> {
        let env = Env::from_vars(|name| {
            if name == "CNI_COMMAND" {
                return Some(command.as_str().to_string());
            }
            match vars.iter().find(|(key, _)| *key == name) {
                Some((_, value)) => Some(value.clone()),
                None if crate::stack_call::ALL.contains(&name) => None,
                None => std::env::var(name).ok(),
            }
        })?;
        env.ok_or_else(|| CniError::new(Code::Internal, "bug: CNI_COMMAND is set but not seen"))
    }

    /// The attachment this call acts on. Only meaningful for ADD, DEL and
    /// CHECK, whose container id and ifname `from_vars` guarantees.
    pub fn attachment(&self, network: &str) -> Attachment {
        Attachment {
            network: network.to_string(),
            container_id: self.container_id.clone().unwrap_or_default(),
            ifname: self.ifname.clone().unwrap_or_default(),
        }
    }
}

/// Spec: alphanumeric first, then alphanumerics, `_`, `.` or `-`.
fn validate_container_id(id: &str) -> Result<()> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        Ok(())
    } else {
        Err(CniError::env(
            "CNI_CONTAINERID",
            format!(
                "invalid container id {id:?}: must start with a letter or digit, then letters, digits, '_', '.' or '-'"
            ),
        ))
    }
}

/// The kernel's rule for interface names, as libcni checks it.
fn validate_ifname(name: &str) -> Result<()> {
    let problem = if name.len() > 15 {
        Some("longer than 15 bytes")
    } else if name == "." || name == ".." {
        Some("must not be '.' or '..'")
    } else if name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        Some("must not contain '/', ':' or whitespace")
    } else {
        None
    };
    match problem {
        Some(p) => Err(CniError::env("CNI_IFNAME", format!("invalid interface name {name:?}: {p}"))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<Env>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Env::from_vars(|k| map.get(k).cloned())
    }

    const ADD: [(&str, &str); 4] =
        [("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c1"), ("CNI_NETNS", "/run/netns/x"), ("CNI_IFNAME", "eth0")];

    #[test]
    fn no_command_means_a_person_at_a_terminal() {
        assert!(env(&[]).unwrap().is_none());
    }

    #[test]
    fn add_with_everything_parses() {
        let mut vars = ADD.to_vec();
        vars.push(("CNI_PATH", "/opt/cni/bin::relative:/usr/lib/cni"));
        vars.push(("CNI_ARGS", "IgnoreUnknown=1;IP=10.0.0.5"));
        let e = env(&vars).unwrap().unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.path, vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]);
        assert_eq!(e.args.get("IP").unwrap(), Some("10.0.0.5"));
        assert_eq!(e.attachment("net").container_id, "c1");
    }

    #[test]
    fn each_required_variable_is_named_when_missing() {
        for missing in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"] {
            let vars: Vec<_> = ADD.iter().copied().filter(|(k, _)| *k != missing).collect();
            let e = env(&vars).unwrap_err();
            assert_eq!(e.code, 4);
            assert!(e.msg.contains(missing), "{}", e.msg);
        }
    }

    #[test]
    fn del_needs_no_netns_and_gc_status_version_need_no_attachment() {
        assert!(env(&[("CNI_COMMAND", "DEL"), ("CNI_CONTAINERID", "c"), ("CNI_IFNAME", "eth0")]).unwrap().is_some());
        for cmd in ["GC", "STATUS", "VERSION"] {
            assert!(env(&[("CNI_COMMAND", cmd)]).unwrap().is_some(), "{cmd}");
        }
        assert_eq!(env(&[("CNI_COMMAND", "CHECK"), ("CNI_CONTAINERID", "c")]).unwrap_err().code, 4);
    }

    #[test]
    fn unknown_command_is_error_4() {
        for cmd in ["add", "", "DELETE"] {
            let e = env(&[("CNI_COMMAND", cmd)]).unwrap_err();
            assert_eq!(e.code, 4);
            assert!(e.msg.contains("CNI_COMMAND"));
        }
    }

    #[test]
    fn container_id_and_ifname_rules() {
        let with = |k: &str, v: &str| {
            let vars: Vec<(&str, &str)> =
                ADD.iter().map(|&(key, val)| if key == k { (key, v) } else { (key, val) }).collect();
            env(&vars).map(|_| ())
        };
        for good in ["a", "0abc", "a_b.c-d", "ABC123"] {
            assert!(with("CNI_CONTAINERID", good).is_ok(), "{good}");
        }
        for bad in ["-a", "_a", ".a", "a b", "a/b", "ä"] {
            let e = with("CNI_CONTAINERID", bad).unwrap_err();
            assert!(e.code == 4 && e.msg.contains("CNI_CONTAINERID"), "{bad}: {e}");
        }
        for good in ["eth0", "a", "123456789012345", "net1.100"] {
            assert!(with("CNI_IFNAME", good).is_ok(), "{good}");
        }
        for bad in ["1234567890123456", ".", "..", "a/b", "a b", "a:b", "a\tb"] {
            let e = with("CNI_IFNAME", bad).unwrap_err();
            assert!(e.code == 4 && e.msg.contains("CNI_IFNAME"), "{bad}: {e}");
        }
    }
}
