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
        // Lowercase letters, digits and '-': Netns::new()'s `ipam-e2e-n` too.
        && prefix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !pid.is_empty()
        && !count.is_empty()
        && count.bytes().all(|b| b.is_ascii_digit())
        && pid.parse::<u32>().is_ok_and(|p| p != std::process::id() % 100_000)
}

// ---------------------------------------------------------------------------
// A namespace that plays the host, and the machine's own namespace before and
// after a test

impl Netns {
    /// A namespace to play the host, where a test runs the main plugins (and
    /// a runtime) as a runtime runs them in the machine's own namespace: the
    /// bridges, the host ends of the veths and any sysctl a plugin writes
    /// (`isGateway` turns forwarding on) stay in it and go with it. Forwarding
    /// starts off in it, so that what a plugin turns on shows.
    pub fn host() -> Netns {
        let host = Netns::new();
        let off = FORWARDING.iter().map(|f| format!("echo 0 > {f}")).collect::<Vec<_>>().join(" && ");
        ip_ok(&["netns", "exec", &host.name, "sh", "-c", &off]);
        host
    }

    /// Runs `exe` inside this namespace (`ip netns exec NAME exe args…`),
    /// with `env` as its CNI_* variables (none of the test's own) and `stdin`,
    /// in `cwd` if given; the plugin sees the namespace as its own.
    pub fn run(
        &self,
        exe: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: &[u8],
        cwd: Option<&Path>,
    ) -> crate::support::Outcome {
        let exe = exe.to_str().expect("a UTF-8 path");
        let mut all = vec!["netns", "exec", self.name.as_str(), exe];
        all.extend_from_slice(args);
        crate::support::run_args(Path::new("ip"), &all, env, stdin, cwd)
    }

    /// The value of the sysctl file `path` (under /proc/sys/net) as this
    /// namespace sees it.
    pub fn sysctl(&self, path: &str) -> String {
        let out = ip(&["netns", "exec", &self.name, "cat", path]);
        assert!(out.status.success(), "reading {path} in {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// IPv4 and IPv6 forwarding (`all`) in this namespace, "0" or "1" each.
    pub fn forwarding(&self) -> [String; 2] {
        [self.sysctl(FORWARDING[0]), self.sysctl(FORWARDING[3])]
    }
}

/// The forwarding switches a main plugin may turn on (`isGateway`): IPv4's
/// global one and the `all`/`default` ones of both families.
pub const FORWARDING: [&str; 5] = [
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv4/conf/all/forwarding",
    "/proc/sys/net/ipv4/conf/default/forwarding",
    "/proc/sys/net/ipv6/conf/all/forwarding",
    "/proc/sys/net/ipv6/conf/default/forwarding",
];

/// What a test must leave as it found it in the machine's own network
/// namespace: the forwarding sysctls, the links and the `ip netns` entries
/// (less the names that other test processes make and remove meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostState {
    /// (sysctl file, value) for each of [`FORWARDING`].
    pub forwarding: Vec<(String, String)>,
    pub links: Vec<String>,
    pub netns: Vec<String>,
}

impl HostState {
    /// Reads the namespace of this process (the machine's own, for a test).
    pub fn read() -> HostState {
        let ours = |names: Vec<String>| names.into_iter().filter(|n| !made_by_another_test_process(n)).collect();
        HostState {
            forwarding: FORWARDING
                .iter()
                .map(|f| {
                    let v = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {f}: {e}"));
                    (f.to_string(), v.trim().to_string())
                })
                .collect(),
            links: ours(root_links()),
            netns: ours(netns_names()),
        }
    }

    /// What differs from `before`, one line each; empty when nothing does.
    pub fn changes_since(&self, before: &HostState) -> Vec<String> {
        let mut changes = Vec::new();
        for ((file, was), (_, now)) in before.forwarding.iter().zip(&self.forwarding) {
            if was != now {
                changes.push(format!("{file}: {was} before, {now} after"));
            }
        }
        let diff = |what: &str, was: &[String], now: &[String], changes: &mut Vec<String>| {
            let added: Vec<&String> = now.iter().filter(|n| !was.contains(n)).collect();
            let gone: Vec<&String> = was.iter().filter(|n| !now.contains(n)).collect();
            if !added.is_empty() {
                changes.push(format!("{what} added: {added:?}"));
            }
            if !gone.is_empty() {
                changes.push(format!("{what} gone: {gone:?}"));
            }
        };
        diff("links", &before.links, &self.links, &mut changes);
        diff("ip netns entries", &before.netns, &self.netns, &mut changes);
        changes
    }
}

/// Runs `scenario` and then asserts that the machine's own namespace
/// ([`HostState`]) is as it was before, also when the scenario failed (its
/// guards have run by then; the changes are printed before its failure is
/// passed on). `what` names the test in the message.
pub fn leaving_the_host_as_found<T>(what: &str, scenario: impl FnOnce() -> T) -> T {
    let before = HostState::read();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(scenario));
    let after = HostState::read();
    let changes = after.changes_since(&before);
    match outcome {
        Err(failure) => {
            if !changes.is_empty() {
                eprintln!("{what}: the machine's own namespace changed too:\n  {}", changes.join("\n  "));
            }
            std::panic::resume_unwind(failure)
        }
        Ok(value) => {
            assert!(
                changes.is_empty(),
                "{what} changed the machine's own network namespace (forwarding sysctls, links, ip netns \
                 entries):\n  {}\n  before: {before:?}\n  after:  {after:?}",
                changes.join("\n  ")
            );
            value
        }
    }
}
