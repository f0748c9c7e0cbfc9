//! End to end through a real runtime library: libcni, the CNI project's own
//! runtime library (the one containerd, CRI-O and Multus embed), runs network
//! configuration lists in which Debian's `bridge` and `macvlan` are chained
//! after another plugin, with `ipam-delegated` and the real delegates as their
//! IPAM; one container gets two interfaces whose addresses come from ONE
//! allocation database.
//!
//! # What it guards
//!
//! A plugin that is not the first of its list gets the earlier plugins' result
//! as `prevResult`, and Debian's plugins pass their stdin to IPAM unchanged.
//! `ipam-delegated` must not hand that runtime `prevResult` to its delegates:
//! if it does, `ipam-da-sequential` finds the families "already present", the
//! interface gets another interface's address and nothing is recorded for it.
//!
//! # The setup, and why this one
//!
//! The bug report's shape, ONE list `[bridge on eth0, macvlan on eth1]`, is not
//! something a runtime can run. libcni, like every runtime, gives every plugin
//! of a list the same CNI_IFNAME (one `RuntimeConf.IfName` per list; neither
//! `Args` nor `CapabilityArgs` can change it per plugin), and two main plugins
//! on one name collide: `macvlan` cannot rename its link to the `eth0` that
//! `bridge` made. Emulating a per-plugin ifname would not pass with a correct
//! IPAM either: libcni caches only the last plugin's result and hands it to
//! every plugin on CHECK, and Debian's `bridge` CHECK looks for its bridge in
//! that result and wants every address of it on its own interface
//! (`ip.ValidateExpectedInterfaceIPs`), so it fails on `macvlan`'s result
//! whatever the IPAM answers. Among Debian's plugins none can come second in a
//! list and make an interface of another name. So:
//!
//! - **Two interfaces of one container, one database**: two network lists run
//!   by libcni for the same container, as Multus and podman do for a container
//!   on two networks: `chain-a…` on eth0 (`bridge`) and `chain-b…` on eth1
//!   (`macvlan`), each network with its own pool (10.71.T.0/24, 10.72.T.0/24),
//!   both with `ipam-delegated` on the same database file.
//! - **A real runtime `prevResult` on ADD**: each list is `[loopback, main
//!   plugin]`. Debian's `loopback`, first, brings `lo` up and returns `lo`'s
//!   addresses (127.0.0.1/8 and ::1/128) as its result; libcni hands that to
//!   `bridge` / `macvlan` as `prevResult`, and they pass it on to
//!   `ipam-delegated`. That is a runtime `prevResult` holding another
//!   interface's addresses, IPv4 and IPv6 both "already present", with
//!   nothing faked: libcni and Debian's plugins do all of it.
//! - **CHECK and DEL as a runtime does them**: libcni reads the list's cached
//!   final result and hands it as `prevResult` to every plugin of the list,
//!   `loopback` included, while the same database holds the other interface's
//!   and the other container's leases; DEL of one container must release its
//!   two leases and nothing else. (With a correct IPAM that cached result holds
//!   only the list's own interface: a `prevResult` naming another interface's
//!   address reaches a Debian plugin's IPAM on ADD only, here through
//!   `loopback`; on CHECK the plugin itself would refuse it, as said above.)
//!
//! # Isolation
//!
//! The runtime (tests/runtime/libcni-run.go, a Go module pinning libcni's
//! release, built with the machine's Go into target/libcni-run/ once:
//! `support::go`) runs inside a network namespace of its own that plays the host,
//! through `ip netns exec`, and so do the plugins it starts: the bridge, the
//! host ends of the veths, the macvlan master (a veth pair made there; this
//! kernel has no dummy links) and any sysctl a plugin writes live in it, not
//! in the machine's own namespace, and go with it. Each container has its own
//! namespace. `isGateway` and `ipMasq` are off, no plugin uses iptables, the
//! addresses are in 10.0.0.0/8, and the test sends no traffic (what the
//! kernel announces on the new links stays on veths between the namespaces,
//! or on a macvlan master whose peer leads nowhere). The test reads the
//! machine's own namespace (forwarding sysctls, links, `ip netns` entries)
//! before and compares after, also when the scenario fails; guards remove the
//! namespaces, and with them everything in them, either way.
//!
//! Needs root, iproute2, Debian's containernetworking-plugins, and Go with the
//! Go module proxy (or libcni's module in Go's module cache), so it is
//! `#[ignore]`d like tests/e2e.rs, run by scripts/test with `--ignored`, and
//! fails loudly when something is missing.

mod netns;
mod stack;
mod support;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use netns::{ip_ok, subnet_tag, PLUGINS};
use netns::{prerequisites, unique, veth_master_in, Netns};
use serde_json::{json, Value};
use stack::{addresses, LeaseRow};
use support::FULL_STACK;
use support::{bin_dir, run_args, Outcome, Sandbox};

/// The spec version of the lists: the newest Debian's plugins (1.1.1) speak.
const VERSION: &str = "1.0.0";

/// Fails the test, naming the package to install, unless the `loopback`
/// plugin is at hand (root, `ip`, `bridge` and `macvlan` are
/// [`prerequisites`]; Go, [`support::go::build`]).
fn runtime_prerequisites() {
    let loopback = Path::new(PLUGINS).join("loopback");
    assert!(
        loopback.is_file(),
        "this end-to-end test cannot run; missing: {} (apt-get install containernetworking-plugins). Run it as root \
         with containernetworking-plugins and iproute2 installed and Go at hand (bash scripts/test does).",
        loopback.display()
    );
}

/// The runtime: libcni-run inside the host namespace, plugins from
/// /usr/lib/cni then the suite's binaries, results cached in `cache`.
struct Runtime {
    exe: PathBuf,
    host: Netns,
    cache: PathBuf,
}

impl Runtime {
    fn run(&self, command: &str, net: &Network, ctr: &Container) -> Outcome {
        let cni_path = format!("{PLUGINS}:{}", bin_dir().display());
        let exe = self.exe.to_string_lossy();
        let conflist = net.conflist.to_string_lossy();
        let netns_path = ctr.netns.path();
        let args = ["netns", "exec", &self.host.name, &*exe, command, &*conflist, &ctr.id, &netns_path, net.ifname];
        let cache = self.cache.to_string_lossy();
        run_args(Path::new("ip"), &args, &[("CNI_PATH", &cni_path), ("CNI_CACHE_DIR", &cache)], b"", None)
    }
}

/// One network list: `[loopback, main plugin]` on `ifname`, its pool `subnet`.
struct Network {
    name: String,
    ifname: &'static str,
    plugin: &'static str,
    pool: &'static str,
    subnet: String,
    conflist: PathBuf,
}

impl Network {
    /// Writes the list into the sandbox: `loopback`, then `plugin` with
    /// `fields` and ipam-delegated running the full stack on the sandbox's database.
    fn new(sb: &Sandbox, letter: &str, ifname: &'static str, plugin: &'static str, fields: Value) -> Network {
        let name = format!("chain-{letter}-{}", unique("n"));
        let pool = if letter == "a" { "a4" } else { "b4" };
        let subnet = format!("10.7{}.{}.0/24", if letter == "a" { 1 } else { 2 }, subnet_tag());
        let mut main = json!({
            "type": plugin,
            "ipam": {
                "type": "ipam-delegated",
                "delegates": FULL_STACK,
                "database": sb.db(),
                "pools": [{"name": pool, "ranges": [{"subnet": subnet}]}]
            }
        });
        for (k, v) in fields.as_object().expect("plugin fields are an object") {
            main[k] = v.clone();
        }
        let list = json!({"cniVersion": VERSION, "name": name, "plugins": [{"type": "loopback"}, main]});
        let conflist = sb.path().join(format!("{name}.conflist"));
        std::fs::write(&conflist, serde_json::to_string_pretty(&list).expect("JSON"))
            .unwrap_or_else(|e| panic!("writing {}: {e}", conflist.display()));
        Network { name, ifname, plugin, pool, subnet, conflist }
    }

    /// Whether `ip` is in this network's /24.
    fn contains(&self, ip: IpAddr) -> bool {
        let prefix = self.subnet.strip_suffix("0/24").expect("a /24 written as x.y.z.0/24");
        ip.is_ipv4() && ip.to_string().starts_with(prefix)
    }

    fn what(&self) -> String {
        format!("network {} (loopback, then {} on {}, pool {})", self.name, self.plugin, self.ifname, self.subnet)
    }
}

/// A container: an id and a network namespace of its own.
struct Container {
    id: String,
    netns: Netns,
}

impl Container {
    fn new(n: usize) -> Container {
        Container { id: format!("chain-ctr{n}-{}", std::process::id()), netns: Netns::new() }
    }

    /// The addresses on `dev` apart from IPv6 link-local ones, or a note
    /// that there is no such link.
    fn global_addresses(&self, dev: &str) -> Result<Vec<(IpAddr, u64)>, String> {
        if !self.netns.has_link(dev) {
            return Err(format!("no {dev} in {}", self.netns.name));
        }
        let link_local = |ip: &IpAddr| matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
        Ok(self.netns.addresses(dev).into_iter().filter(|(ip, _)| !link_local(ip)).collect())
    }
}

/// ADD of `net` for `ctr` through libcni; returns the list's result and the
/// one address it gave. On failure, says what the interface and the database
/// hold now.
fn add(rt: &Runtime, sb: &Sandbox, net: &Network, ctr: &Container) -> (Value, IpAddr) {
    let what = format!("ADD of {} for {} through libcni", net.what(), ctr.id);
    let out = rt.run("ADD", net, ctr);
    if out.status != 0 {
        let (carries, lo) = (ctr.global_addresses(net.ifname), ctr.global_addresses("lo"));
        let from_lo = match (&carries, &lo) {
            (Ok(on_it), Ok(on_lo)) if on_it.iter().any(|a| on_lo.contains(a)) => format!(
                "\n  {} carries lo's address: the IPAM answered with the runtime's prevResult (loopback's result) \
                 instead of an address of {}",
                net.ifname, net.subnet
            ),
            _ => String::new(),
        };
        panic!(
            "{what} failed (exit {}): {}{}\n  {} in the container now carries: {carries:?}\n  lo carries: \
             {lo:?}{from_lo}\n  leases on record: {:#?}",
            out.status,
            out.stderr,
            out.stdout,
            net.ifname,
            stack::leases(&sb.db())
        );
    }
    let result = out.json.clone().unwrap_or_else(|| panic!("{what}: no JSON result on stdout: {out:#?}"));
    let ips = addresses(&result);
    assert!(
        ips.len() == 1 && net.contains(ips[0]),
        "{what}: the result should hold exactly one address, of {}; it holds {ips:?}: {result}\n  leases on record: \
         {:#?}",
        net.subnet,
        stack::leases(&sb.db())
    );
    let ip = ips[0];
    let named =
        result["interfaces"].as_array().into_iter().flatten().any(|i| {
            i["name"].as_str() == Some(net.ifname) && i["sandbox"].as_str() == Some(ctr.netns.path().as_str())
        });
    assert!(named, "{what}: the result names no {} in {}: {result}", net.ifname, ctr.netns.path());
    assert_eq!(
        ctr.global_addresses(net.ifname),
        Ok(vec![(ip, 24)]),
        "{what}: {} in the container should carry exactly {ip}/24 (the result: {result})",
        net.ifname
    );
    // loopback ran first, so its result (lo's addresses) was the prevResult
    // libcni handed the main plugin, and so its IPAM.
    let lo = ctr.global_addresses("lo");
    assert!(
        lo.as_ref().is_ok_and(|a| a.contains(&("127.0.0.1".parse().unwrap(), 8))),
        "{what}: loopback should have brought lo up with 127.0.0.1/8: {lo:?}"
    );
    (result, ip)
}

/// CHECK of `net` for `ctr` through libcni: silent success.
fn check(rt: &Runtime, sb: &Sandbox, net: &Network, ctr: &Container, when: &str) {
    let out = rt.run("CHECK", net, ctr);
    assert!(
        out.status == 0 && out.stdout.is_empty(),
        "CHECK of {} for {} through libcni ({when}) failed (exit {}): {}{}\n  leases on record: {:#?}",
        net.what(),
        ctr.id,
        out.status,
        out.stderr,
        out.stdout,
        stack::leases(&sb.db())
    );
}

/// DEL of `net` for `ctr` through libcni: silent success, and the interface is gone.
fn del(rt: &Runtime, net: &Network, ctr: &Container) {
    let out = rt.run("DEL", net, ctr);
    assert!(
        out.status == 0 && out.stdout.is_empty(),
        "DEL of {} for {} through libcni failed (exit {}): {}{}",
        net.what(),
        ctr.id,
        out.status,
        out.stderr,
        out.stdout
    );
    assert!(!ctr.netns.has_link(net.ifname), "DEL of {}: {} is still in {}", net.what(), net.ifname, ctr.netns.name);
}

/// The lease `ip` of `ctr` on `net`, as the operator listing shows it.
fn lease(net: &Network, ctr: &Container, ip: IpAddr) -> LeaseRow {
    LeaseRow {
        address: ip,
        pool: net.pool.to_string(),
        network: net.name.clone(),
        container_id: ctr.id.clone(),
        ifname: net.ifname.to_string(),
    }
}

fn sorted(mut rows: Vec<LeaseRow>) -> Vec<LeaseRow> {
    rows.sort();
    rows
}

/// A bridge made beforehand inside `netns`, as an administrator may, with a
/// MAC address of its own. Without one the kernel gives a bridge the smallest
/// MAC of its ports, so it changes as containers come and go, and Debian's
/// `bridge` (1.1.1) CHECK compares it with the one in the cached result: the
/// first container's CHECK would fail ("Bridge interface … Mac doesn't match")
/// once the second one is on the bridge, whatever the IPAM does. The plugin
/// uses an existing bridge as it is. No guard: it goes with the namespace.
fn fixed_mac_bridge_in(netns: &Netns) -> String {
    let name = unique("cb");
    let mac = format!("02:00:0a:47:{:02x}:01", std::process::id() % 256);
    ip_ok(&["-n", &netns.name, "link", "add", "name", &name, "type", "bridge"]);
    ip_ok(&["-n", &netns.name, "link", "set", &name, "address", &mac]);
    ip_ok(&["-n", &netns.name, "link", "set", &name, "up"]);
    name
}

/// Two containers, each on both networks; CHECK; DEL of one, then the other.
fn scenario() {
    let sb = Sandbox::new();
    let exe = support::go::build("tests/runtime", "libcni-run", "libcni-run");
    let cache = sb.path().join("cni-cache");
    std::fs::create_dir(&cache).expect("creating the libcni cache directory");
    let rt = Runtime { exe, host: Netns::new(), cache };
    let master = veth_master_in(&rt.host);
    let bridge = fixed_mac_bridge_in(&rt.host);
    let nets = [
        Network::new(&sb, "a", "eth0", "bridge", json!({"bridge": bridge, "isGateway": false, "ipMasq": false})),
        Network::new(&sb, "b", "eth1", "macvlan", json!({"master": master, "mode": "bridge"})),
    ];
    let ctrs = [Container::new(1), Container::new(2)];

    // ADD: each container on both networks; each interface gets an address of
    // its own pool, recorded for (network, container, ifname).
    let mut expected = Vec::new();
    let mut given: Vec<IpAddr> = Vec::new();
    for ctr in &ctrs {
        let mut mine = Vec::new();
        for net in &nets {
            let (_, ip) = add(&rt, &sb, net, ctr);
            mine.push(ip);
            expected.push(lease(net, ctr, ip));
            assert_eq!(
                stack::leases(&sb.db()),
                sorted(expected.clone()),
                "the leases after ADD of {} for {}: one per interface, owned by (network, container, ifname)",
                net.what(),
                ctr.id
            );
        }
        assert_ne!(mine[0], mine[1], "{}: eth0 and eth1 carry the same address", ctr.id);
        assert!(
            mine.iter().all(|ip| !given.contains(ip)),
            "{} got {mine:?}, but the other container holds {given:?}",
            ctr.id
        );
        given.extend(mine);
    }

    // CHECK: libcni hands each list's cached result to every plugin of it.
    for ctr in &ctrs {
        for net in &nets {
            check(&rt, &sb, net, ctr, "both containers up");
        }
    }

    // DEL of the first container, in the reverse order of its ADDs: its two
    // leases go, the second container's stay and still CHECK.
    let (first, second) = (&ctrs[0], &ctrs[1]);
    for net in nets.iter().rev() {
        del(&rt, net, first);
    }
    let left: Vec<LeaseRow> = expected.iter().filter(|r| r.container_id == second.id).cloned().collect();
    assert_eq!(stack::leases(&sb.db()), sorted(left), "the leases after DEL of {} on both networks", first.id);
    for net in &nets {
        check(&rt, &sb, net, second, "after DEL of the other container");
    }

    // DEL of the second container: no lease is left.
    for net in nets.iter().rev() {
        del(&rt, net, second);
    }
    assert_eq!(stack::leases(&sb.db()), Vec::new(), "the leases after DEL of both containers");
}

#[test]
#[ignore = "needs root, network namespaces, /usr/lib/cni and Go: run by scripts/test"]
fn two_interfaces_of_one_container_from_one_database_through_libcni() {
    prerequisites();
    runtime_prerequisites();
    let started = Instant::now();
    netns::leaving_the_host_as_found("tests/chain.rs", scenario);
    eprintln!("chain: the scenario took {:?}", started.elapsed());
}
