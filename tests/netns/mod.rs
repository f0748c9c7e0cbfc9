//! Network namespaces and links for the tests that drive Debian's real main
//! plugins: prerequisites checked loudly, unique names, and guards that
//! remove what a test made even when it fails.
#![allow(dead_code)]

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

/// Where Debian's containernetworking-plugins put the main plugins.
pub const PLUGINS: &str = "/usr/lib/cni";

/// Fails the test, naming what is missing, unless it runs as root with the
/// plugins and `ip` at hand. Never lets a test pass without doing its work.
pub fn prerequisites() {
    let mut missing = Vec::new();
    // SAFETY: a plain syscall.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        missing.push(format!("root (running as uid {uid})"));
    }
    for plugin in ["bridge", "macvlan"] {
        let path = Path::new(PLUGINS).join(plugin);
        let executable = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if !executable {
            missing.push(format!("{} (apt-get install containernetworking-plugins)", path.display()));
        }
    }
    if !Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
        missing.push("the ip command (apt-get install iproute2)".to_string());
    }
    assert!(
        missing.is_empty(),
        "this end-to-end test cannot run; missing: {}. Run it as root with containernetworking-plugins and iproute2 \
         installed (bash scripts/test does).",
        missing.join(", ")
    );
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name unique to this process and call, at most 15 characters for a
/// 2-character prefix (the kernel's limit for link names).
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}x{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A number unique to this process's scenarios, for their subnets.
pub fn subnet_tag() -> usize {
    100 + COUNTER.fetch_add(1, Ordering::Relaxed) % 150
}

pub fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).stdin(Stdio::null()).output().expect("running ip")
}

pub fn ip_ok(args: &[&str]) {
    let out = ip(args);
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        let name = format!("ipam-e2e-{}", unique("n"));
        ip_ok(&["netns", "add", &name]);
        Netns { name }
    }

    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }

    /// The addresses on `dev` inside the namespace, with their prefix lengths.
    pub fn addresses(&self, dev: &str) -> Vec<(IpAddr, u64)> {
        let out = ip(&["-n", &self.name, "-j", "addr", "show", "dev", dev]);
        assert!(
            out.status.success(),
            "ip -n {} addr show dev {dev}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let links: Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
        links
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| Some((a["local"].as_str()?.parse().ok()?, a["prefixlen"].as_u64()?)))
            .collect()
    }

    pub fn has_link(&self, dev: &str) -> bool {
        ip(&["-n", &self.name, "link", "show", dev]).status.success()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A link in the root namespace (a bridge the plugin makes, a veth pair we
/// make), deleted on drop if it exists.
pub struct Link {
    pub name: String,
}

impl Drop for Link {
    fn drop(&mut self) {
        if ip(&["link", "show", &self.name]).status.success() {
            let _ = ip(&["link", "del", &self.name]);
        }
    }
}

/// One end of a veth pair, up, to serve as a macvlan master (this kernel has
/// no dummy link type); the pair goes with the returned guard. The peer is up
/// too: without carrier, IPv6 duplicate address detection never ends and
/// macvlan waits 10 s for the address to settle.
pub fn veth_master() -> Link {
    let (master, peer) = (unique("mv"), unique("mp"));
    let guard = Link { name: master.clone() };
    ip_ok(&["link", "add", &master, "type", "veth", "peer", "name", &peer]);
    ip_ok(&["link", "set", &master, "up"]);
    ip_ok(&["link", "set", &peer, "up"]);
    guard
}

/// One end of a veth pair made inside `netns`, both ends up, to serve there
/// as a macvlan master (see [`veth_master`]). No guard: the pair goes with
/// the namespace.
pub fn veth_master_in(netns: &Netns) -> String {
    let (master, peer) = (unique("mv"), unique("mp"));
    ip_ok(&["-n", &netns.name, "link", "add", &master, "type", "veth", "peer", "name", &peer]);
    ip_ok(&["-n", &netns.name, "link", "set", &master, "up"]);
    ip_ok(&["-n", &netns.name, "link", "set", &peer, "up"]);
    master
}

/// The names of the links of this process's own network namespace, sorted.
pub fn root_links() -> Vec<String> {
    let out = ip(&["-j", "link", "show"]);
    assert!(out.status.success(), "ip -j link show: {}", String::from_utf8_lossy(&out.stderr));
    let links: Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
    let mut names: Vec<String> =
        links.as_array().into_iter().flatten().filter_map(|l| Some(l["ifname"].as_str()?.to_string())).collect();
    names.sort();
    names
}

/// The names `ip netns list` shows, sorted.
pub fn netns_names() -> Vec<String> {
    let out = ip(&["netns", "list"]);
    assert!(out.status.success(), "ip netns list: {}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Whether `name` is one that another test process of this suite may make
/// and remove while this one runs: a [`unique`] name carrying another
/// process's id, or the host end of a veth that `bridge` names `veth` and 8
/// hex digits (the e2e tests run it in the machine's own namespace).
pub fn made_by_another_test_process(name: &str) -> bool {
    if name.len() == 12 && name.starts_with("veth") && name[4..].bytes().all(|b| b.is_ascii_hexdigit()) {
        return true;
    }
    let Some((head, count)) = name.rsplit_once('x') else { return false };
    let pid_digits = head.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (prefix, pid) = head.split_at(head.len() - pid_digits);
    !prefix.is_empty()
        && prefix.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        && !pid.is_empty()
        && !count.is_empty()
        && count.bytes().all(|b| b.is_ascii_digit())
        && pid.parse::<u32>().is_ok_and(|p| p != std::process::id() % 100_000)
}
