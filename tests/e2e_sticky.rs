//! End to end: sticky addresses (issue 22) through real runtimes. Debian's
//! `bridge` plugin (containernetworking-plugins, /usr/lib/cni) in real
//! network namespaces, and podman itself (4.3, its CNI backend, with runc),
//! with `ipam-delegated` running the sticky stack on one allocation database:
//! a workload re-created under a new container id gets its address back, on
//! its interface in its new namespace; another workload does not get it while
//! it is held; after the hold it is free for anyone.
//!
//! These need root, `ip` (iproute2), the plugins and, for podman, podman,
//! runc and a static busybox, so they are `#[ignore]`d: a plain `cargo test`
//! lists them as ignored, and scripts/test runs them with `--ignored` (and
//! must, in CI), also against the installed package (IPAM_TEST_BIN_DIR). Each
//! one checks its prerequisites first and fails loudly when one is missing.
//!
//! The main plugins run in a network namespace that plays the host
//! ([`Netns::host`]), podman too (through `nsenter --net`, see [`Podman`]):
//! the bridges and the host ends of the veths stay in it and go with it, and
//! each test checks that the machine's own namespace is as it found it
//! ([`leaving_the_host_as_found`]). One test runs at a time, so that one's
//! namespaces are not another's changes. Addresses stay in 10.0.0.0/8; no
//! traffic is sent; `isGateway` and `ipMasq` are off (no iptables).

mod netns;
mod stack;
mod support;

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use netns::{leaving_the_host_as_found, prerequisites, subnet_tag, unique, Netns, PLUGINS};
use serde_json::{json, Value};
use support::sticky::pod;
use support::{bin_dir, run_args, Outcome, Sandbox, STICKY_STACK};

/// One test at a time: each checks the machine's own namespace before and
/// after, and another one's namespaces meanwhile would be changes to it.
static TURN: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A `bridge` network named `name` on the bridge `bridge` whose IPAM is
/// `ipam-delegated` with the sticky stack on `db`: one pool on `subnet`
/// handing out `first..=last`, and `ipam.sticky` set to `sticky`.
fn bridge_network(name: &str, bridge: &str, db: &Path, subnet: &str, range: (&str, &str), sticky: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "bridge",
        "bridge": bridge,
        "isGateway": false,
        "ipMasq": false,
        "ipam": {
            "type": "ipam-delegated",
            "delegates": STICKY_STACK,
            "database": db,
            "pools": [{"name": "sticky", "ranges": [{"subnet": subnet, "rangeStart": range.0, "rangeEnd": range.1}]}],
            "sticky": sticky
        }
    })
}

/// The suite's executables first, so that the build under test runs even
/// where the package put its own in /usr/lib/cni.
fn cni_path() -> String {
    if bin_dir() == Path::new(PLUGINS) {
        PLUGINS.to_string()
    } else {
        format!("{}:{PLUGINS}", bin_dir().display())
    }
}

// ---------------------------------------------------------------------------
// The database as an administrator reads it

/// One row of the leases table: a live lease, or a hold for an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    address: IpAddr,
    container_id: String,
    identity: Option<String>,
    /// Unix seconds; `None` for a live lease.
    held_until: Option<i64>,
}

/// Every row of the leases table of `db`, by address, read-only with SQLite
/// as an administrator reads the database.
fn rows(db: &Path) -> Vec<Row> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| panic!("opening {} read-only: {e}", db.display()));
    let mut stmt = conn
        .prepare("SELECT address, container_id, identity, held_until FROM leases ORDER BY key")
        .expect("the leases table of schema 5");
    let rows = stmt
        .query_map([], |r| {
            let address: String = r.get(0)?;
            Ok(Row {
                address: address.parse().unwrap_or_else(|e| panic!("{address:?} in leases ({e})")),
                container_id: r.get(1)?,
                identity: r.get(2)?,
                held_until: r.get(3)?,
            })
        })
        .expect("reading leases")
        .collect::<Result<Vec<_>, _>>()
        .expect("reading leases");
    rows
}

/// (address, container id, identity, held): a row without the hold's end.
type Summary = (IpAddr, String, Option<String>, bool);

fn live(address: IpAddr, container_id: &str, identity: &str) -> Summary {
    (address, container_id.to_string(), Some(identity.to_string()), false)
}

fn held(address: IpAddr, container_id: &str, identity: &str) -> Summary {
    (address, container_id.to_string(), Some(identity.to_string()), true)
}

/// The rows of `db` without the hold's end.
fn summary(db: &Path) -> Vec<Summary> {
    rows(db).into_iter().map(|r| (r.address, r.container_id, r.identity, r.held_until.is_some())).collect()
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_secs_f64()
}

// ---------------------------------------------------------------------------
// Debian's bridge plugin, run as a runtime runs it

/// A network of `bridge` run in the namespace `host`, each attachment in a
/// namespace of its own.
struct Bridged<'a> {
    sb: &'a Sandbox,
    host: &'a Netns,
    config: Value,
}

/// One attachment: its namespace (deleted on drop), its container id and
/// the ADD's result.
struct Attached {
    netns: Netns,
    container: String,
    result: Value,
}

impl Bridged<'_> {
    /// Runs `command` of /usr/lib/cni/bridge for `container` in `netns` (eth0),
    /// with `cni_args` as CNI_ARGS when given, and `config` on stdin.
    fn run(&self, command: &str, config: &Value, container: &str, netns: &Netns, cni_args: Option<&str>) -> Outcome {
        let (netns_path, cni_path) = (netns.path(), cni_path());
        let mut overrides = vec![
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", netns_path.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", cni_path.as_str()),
        ];
        if let Some(args) = cni_args {
            overrides.push(("CNI_ARGS", args));
        }
        let env = self.sb.env(command, &overrides);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let bridge = Path::new(PLUGINS).join("bridge");
        self.host.run(&bridge, &[], &env, config.to_string().as_bytes(), Some(&self.sb.workdir()))
    }

    /// ADD of `container` in a new namespace: its one IPv4 address, which
    /// must be on eth0 there with the pool's prefix length.
    fn add(&self, container: &str, cni_args: Option<&str>) -> (Attached, IpAddr) {
        let netns = Netns::new();
        let out = self.run("ADD", &self.config, container, &netns, cni_args);
        assert_eq!(out.status, 0, "ADD of {container} ({cni_args:?}): {out:#?}");
        let result = out.result().clone();
        let address = stack::ipv4_of(&result);
        let on_eth0 = netns.addresses("eth0");
        assert!(
            on_eth0.contains(&(address, 24)),
            "ADD of {container}: {address}/24 is not on eth0 in {}; it has {on_eth0:?}",
            netns.name
        );
        (Attached { netns, container: container.to_string(), result }, address)
    }

    /// An ADD of `container` that fails; its namespace is removed after the
    /// DEL a runtime runs after a failed ADD.
    fn failed_add(&self, container: &str, cni_args: Option<&str>) -> Outcome {
        let netns = Netns::new();
        let out = self.run("ADD", &self.config, container, &netns, cni_args);
        let del = self.run("DEL", &self.config, container, &netns, cni_args);
        assert_eq!(del.status, 0, "DEL after the failed ADD of {container}: {del:#?}");
        out
    }

    /// DEL of the attachment, with `cni_args` as CNI_ARGS when given; eth0 is
    /// gone, then the namespace is removed.
    fn del(&self, attached: Attached, cni_args: Option<&str>) {
        let with_prev = support::with_prev(&self.config, &attached.result);
        let out = self.run("DEL", &with_prev, &attached.container, &attached.netns, cni_args);
        assert_eq!((out.status, out.stdout.as_str()), (0, ""), "DEL of {}: {out:#?}", attached.container);
        assert!(!attached.netns.has_link("eth0"), "eth0 is still in {} after DEL", attached.netns.name);
    }
}

/// A bridge network in a new host namespace whose pool is 10.73.T.0/24
/// handing out .10 to .`last`.
fn bridged<'a>(sb: &'a Sandbox, host: &'a Netns, last: u8, sticky: Value) -> Bridged<'a> {
    let tag = subnet_tag();
    let (subnet, first, last) = (format!("10.73.{tag}.0/24"), format!("10.73.{tag}.10"), format!("10.73.{tag}.{last}"));
    let name = format!("sticky-{}", unique("n"));
    let config = bridge_network(&name, &unique("sb"), &sb.db(), &subnet, (&first, &last), sticky);
    Bridged { sb, host, config }
}

/// A pod re-created under a new container id, in a new namespace, gets its
/// address back on eth0 there; another pod gets another address meanwhile.
/// A DEL without CNI_ARGS (Nomad's teardown passes none) holds the address
/// as well: the identity is the one on record from the ADD.
#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn a_re_created_pod_gets_its_address_back_in_its_new_namespace() {
    prerequisites();
    let _turn = one_at_a_time();
    leaving_the_host_as_found("tests/e2e_sticky.rs a_re_created_pod_gets_its_address_back", || {
        let sb = Sandbox::new();
        let host = Netns::host();
        let net = bridged(&sb, &host, 13, json!({"hold": 600}));
        let db = sb.db();

        let (first, address) = net.add("db-0-first", Some(&pod("db-0")));
        assert_eq!(summary(&db), [live(address, "db-0-first", "prod/db-0")]);
        net.del(first, Some(&pod("db-0")));
        assert_eq!(summary(&db), [held(address, "db-0-first", "prod/db-0")], "after DEL: held for the pod");

        // The pod comes back under a new container id, in a new namespace.
        let (second, again) = net.add("db-0-second", Some(&pod("db-0")));
        assert_eq!(again, address, "the re-created pod's address");
        assert_eq!(summary(&db), [live(address, "db-0-second", "prod/db-0")]);

        // Another pod gets another address.
        let (web, other) = net.add("web-0", Some(&pod("web-0")));
        assert_ne!(other, address, "another pod got db-0's address");

        // A DEL that names no pod at all holds the address for db-0 all the same.
        net.del(second, None);
        let after = summary(&db);
        assert!(after.contains(&held(address, "db-0-second", "prod/db-0")), "after a DEL without CNI_ARGS: {after:?}");
        let (third, back) = net.add("db-0-third", Some(&pod("db-0")));
        assert_eq!(back, address, "the pod's address after a DEL without CNI_ARGS");

        net.del(third, Some(&pod("db-0")));
        net.del(web, Some(&pod("web-0")));
        assert_eq!(
            summary(&db),
            [held(address, "db-0-third", "prod/db-0"), held(other, "web-0", "prod/web-0")],
            "both pods' addresses held at the end"
        );
    });
}

/// With a short hold, nobody else gets the address while it lasts (the pool
/// has no other); once it has passed, the next pod gets it.
#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn after_a_short_hold_the_address_goes_to_another_pod() {
    prerequisites();
    let _turn = one_at_a_time();
    leaving_the_host_as_found("tests/e2e_sticky.rs after_a_short_hold", || {
        let sb = Sandbox::new();
        let host = Netns::host();
        let hold_secs = 2;
        // One address: .10 to .10.
        let net = bridged(&sb, &host, 10, json!({"hold": hold_secs}));
        let db = sb.db();

        let (db0, address) = net.add("db-0", Some(&pod("db-0")));
        net.del(db0, Some(&pod("db-0")));
        let hold_end = match rows(&db).as_slice() {
            [Row { held_until: Some(until), identity: Some(identity), .. }] if identity == "prod/db-0" => *until,
            other => panic!("expected one hold for prod/db-0: {other:?}"),
        };
        let left = hold_end as f64 - now_unix();
        assert!(left > 0.0 && left <= hold_secs as f64 + 1.0, "the hold ends in {left} s, not about {hold_secs} s");

        // While it lasts: the pool is full for anyone else.
        // Debian's bridge passes IPAM's error on, without cniVersion.
        let refused = net.failed_add("web-0-early", Some(&pod("web-0")));
        let error = refused.json.as_ref().filter(|_| refused.status != 0);
        let (code, msg) = error.map_or((None, ""), |e| (e["code"].as_u64(), e["msg"].as_str().unwrap_or("")));
        assert!(code == Some(100) && msg.contains("no free"), "ADD of web-0 during the hold: {refused:#?}");

        // A hold ends when the clock's whole seconds reach its end.
        std::thread::sleep(Duration::from_secs_f64(hold_end as f64 - now_unix() + 0.2));
        let (web, got) = net.add("web-0", Some(&pod("web-0")));
        assert_eq!(got, address, "after the hold the address is free for another pod");
        assert_eq!(summary(&db), [live(address, "web-0", "prod/web-0")]);
        net.del(web, Some(&pod("web-0")));
    });
}

// ---------------------------------------------------------------------------
// podman

/// Fails the test, naming what is missing, unless podman, runc, nsenter and a
/// static /bin/busybox are at hand (the other prerequisites are
/// [`prerequisites`]'s).
fn podman_prerequisites() {
    let runs = |exe: &str, arg: &str| {
        Command::new(exe).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    let mut missing = Vec::new();
    if !runs("podman", "--version") {
        missing.push("podman (apt-get install podman)");
    }
    if !runs("runc", "--version") {
        missing.push("runc (apt-get install runc)");
    }
    if !runs("nsenter", "--version") {
        missing.push("nsenter (apt-get install util-linux)");
    }
    // ldd fails on a static executable: "not a dynamic executable".
    if !Path::new(BUSYBOX).is_file() || runs("ldd", BUSYBOX) {
        missing.push("a static /bin/busybox for the containers' root file system (apt-get install busybox-static)");
    }
    assert!(
        missing.is_empty(),
        "this end-to-end test cannot run; missing: {}. Run it as root with the packages of scripts/test-packages \
         installed (bash scripts/test does).",
        missing.join(", ")
    );
}

/// busybox-static's executable, the whole root file system of the containers
/// (no image: nothing is pulled).
const BUSYBOX: &str = "/bin/busybox";

/// podman with its CNI backend and runc, as root, with all of its state in a
/// directory of its own: storage (`--root`, `--runroot`, vfs), containers.conf
/// (CONTAINERS_CONF: the CNI backend, this network's configuration
/// directory, the plugin directories, its temporary files, file locks instead
/// of /dev/shm, events to a file), the network's configuration list, and the
/// containers' root file system. It runs in the namespace `host` through
/// `nsenter --net` (not `ip netns exec`, which mounts a new /sys without the
/// cgroup file systems runc needs), so the bridge and the host ends of the
/// veths stay there; the containers' namespaces are podman's own
/// (/run/netns/netns-…, removed with the containers). What podman 4.3 keeps
/// elsewhere: libcni's result cache, /var/lib/cni/results (not configurable
/// there), whose entries go at DEL.
struct Podman<'a> {
    dir: PathBuf,
    host: &'a Netns,
    network: String,
}

impl<'a> Podman<'a> {
    /// podman in `dir` (made here) with the one network `conflist`.
    fn new(dir: PathBuf, host: &'a Netns, conflist: &Value) -> Podman<'a> {
        let network = conflist["name"].as_str().expect("a conflist's name").to_string();
        for sub in ["net.d", "root", "runroot", "tmp", "rootfs/bin"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap_or_else(|e| panic!("creating {sub}: {e}"));
        }
        std::fs::write(dir.join("net.d").join(format!("{network}.conflist")), conflist.to_string()).unwrap();
        let mut plugin_dirs = vec![bin_dir().display().to_string()];
        if bin_dir() != Path::new(PLUGINS) {
            plugin_dirs.push(PLUGINS.to_string());
        }
        let conf = format!(
            "[network]\n\
             network_backend = \"cni\"\n\
             network_config_dir = {net_d:?}\n\
             cni_plugin_dirs = {plugin_dirs:?}\n\
             [engine]\n\
             cgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n\
             events_logfile_path = {events:?}\n\
             tmp_dir = {tmp:?}\n\
             lock_type = \"file\"\n",
            net_d = dir.join("net.d").display().to_string(),
            events = dir.join("events.log").display().to_string(),
            tmp = dir.join("tmp").display().to_string(),
        );
        std::fs::write(dir.join("containers.conf"), conf).unwrap();
        // The root file system: busybox, and the two commands run.
        let bin = dir.join("rootfs/bin");
        std::fs::copy(BUSYBOX, bin.join("busybox")).expect("copying /bin/busybox");
        std::fs::set_permissions(bin.join("busybox"), std::fs::Permissions::from_mode(0o755)).unwrap();
        for applet in ["sh", "ip"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        Podman { dir, host, network }
    }

    /// `podman ARGS` with this instance's state, in the host namespace.
    fn podman(&self, args: &[&str]) -> Outcome {
        let (net, root, runroot) =
            (format!("--net={}", self.host.path()), self.dir.join("root"), self.dir.join("runroot"));
        let mut all = vec![
            net.as_str(),
            "podman",
            "--root",
            root.to_str().expect("a UTF-8 path"),
            "--runroot",
            runroot.to_str().expect("a UTF-8 path"),
            "--storage-driver",
            "vfs",
            // runc, which scripts/test-packages installs for this (not crun,
            // which podman prefers where both are).
            "--runtime",
            "runc",
        ];
        all.extend_from_slice(args);
        let conf = self.dir.join("containers.conf");
        // run_args leaves out the test's own CNI_* variables: podman adds
        // its environment's CNI_ARGS to what it passes.
        run_args(Path::new("nsenter"), &all, &[("CONTAINERS_CONF", conf.to_str().expect("a UTF-8 path"))], b"", None)
    }

    /// `podman run --name NAME` on the network: the IPv4 address on eth0 as
    /// the container itself sees it.
    fn run(&self, name: &str) -> IpAddr {
        let rootfs = self.dir.join("rootfs");
        let out = self.podman(&[
            "run",
            // podman's defaults (nofile 1048576, …) may exceed what the
            // machine allows (a CI container): runc then fails to set them.
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
            "--network",
            &self.network,
            "--name",
            name,
            "--rootfs",
            rootfs.to_str().expect("a UTF-8 path"),
            "/bin/ip",
            "-o",
            "-4",
            "addr",
            "show",
            "dev",
            "eth0",
        ]);
        assert_eq!(out.status, 0, "podman run --name {name}: {out:#?}");
        // busybox ip -o: "2: eth0    inet 10.74.T.2/24 brd … scope global eth0…"
        let cidr = out
            .stdout
            .split_whitespace()
            .skip_while(|word| *word != "inet")
            .nth(1)
            .unwrap_or_else(|| panic!("podman run --name {name}: no inet address on eth0 in {:?}", out.stdout));
        let (address, prefix) = cidr.split_once('/').unwrap_or_else(|| panic!("{cidr:?} is not an address/prefix"));
        assert_eq!(prefix, "24", "podman run --name {name}: the prefix length of {cidr}");
        address.parse().unwrap_or_else(|e| panic!("{address:?} ({e})"))
    }

    /// `podman rm NAME`.
    fn rm(&self, name: &str) {
        let out = self.podman(&["rm", name]);
        assert_eq!(out.status, 0, "podman rm {name}: {out:#?}");
    }

    /// The container's full id (its CNI_CONTAINERID).
    fn id(&self, name: &str) -> String {
        let out = self.podman(&["inspect", "--format", "{{.Id}}", name]);
        assert_eq!(out.status, 0, "podman inspect {name}: {out:#?}");
        out.stdout.trim().to_string()
    }
}

impl Drop for Podman<'_> {
    /// Every container goes, also when the test failed (their namespaces
    /// and mounts with them).
    fn drop(&mut self) {
        let out = self.podman(&["rm", "--all", "--force"]);
        if out.status != 0 {
            eprintln!("podman rm --all --force in {}: {out:#?}", self.dir.display());
        }
    }
}

/// A bridge network for podman on 10.74.T.0/24 handing out .10 to .13.
fn podman_network(sb: &Sandbox, sticky: Value) -> Value {
    let tag = subnet_tag();
    let (subnet, first, last) = (format!("10.74.{tag}.0/24"), format!("10.74.{tag}.10"), format!("10.74.{tag}.13"));
    let name = format!("sticky-{}", unique("p"));
    let mut plugin = bridge_network(&name, &unique("pb"), &sb.db(), &subnet, (&first, &last), sticky);
    // A list's plugins take its name and version.
    for key in ["name", "cniVersion"] {
        plugin.as_object_mut().expect("an object").remove(key);
    }
    json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]})
}

/// podman's CNI backend passes `IgnoreUnknown=1;K8S_POD_NAME=<container
/// name>` (and no K8S_POD_NAMESPACE): with `ipam.sticky.identity`
/// `["K8S_POD_NAME"]`, `podman rm` and `podman run --name` of the same name
/// give the same address; another name gets another one.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins, podman, runc and busybox-static; run by scripts/test"]
fn podman_run_of_the_same_name_gets_the_same_address_back() {
    prerequisites();
    podman_prerequisites();
    let _turn = one_at_a_time();
    leaving_the_host_as_found("tests/e2e_sticky.rs podman_run_of_the_same_name", || {
        let sb = Sandbox::new();
        let host = Netns::host();
        let podman =
            Podman::new(sb.path().join("podman"), &host, &podman_network(&sb, json!({"identity": ["K8S_POD_NAME"]})));
        let db = sb.db();

        let address = podman.run("db-0");
        let first_id = podman.id("db-0");
        podman.rm("db-0");
        // The container is gone and so is its attachment: held for "db-0".
        assert_eq!(summary(&db), [held(address, &first_id, "db-0")], "after podman rm db-0");

        let again = podman.run("db-0");
        let second_id = podman.id("db-0");
        assert_ne!(second_id, first_id, "podman run --name db-0 made a new container");
        assert_eq!(again, address, "podman run --name db-0 after podman rm db-0");

        let other = podman.run("web-0");
        let web_id = podman.id("web-0");
        assert_ne!(other, address, "another container name got db-0's address");

        podman.rm("db-0");
        podman.rm("web-0");
        assert_eq!(
            summary(&db),
            [held(address, &second_id, "db-0"), held(other, &web_id, "web-0")],
            "after podman rm of both"
        );
    });
}

/// The default identity (K8S_POD_NAMESPACE and K8S_POD_NAME) does not stick
/// under podman: it passes no K8S_POD_NAMESPACE, so its containers have no
/// identity, and `podman rm` frees the address where it holds it with
/// `["K8S_POD_NAME"]` (above). (When `podman run` returns, podman may or may
/// not have run DEL yet; after `podman rm` it has.)
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins, podman, runc and busybox-static; run by scripts/test"]
fn podman_passes_no_pod_namespace_so_the_default_identity_does_not_stick() {
    prerequisites();
    podman_prerequisites();
    let _turn = one_at_a_time();
    leaving_the_host_as_found("tests/e2e_sticky.rs podman_passes_no_pod_namespace", || {
        let sb = Sandbox::new();
        let host = Netns::host();
        let podman = Podman::new(sb.path().join("podman"), &host, &podman_network(&sb, json!({})));
        let db = sb.db();

        podman.run("db-0");
        podman.rm("db-0");
        assert_eq!(summary(&db), [], "after podman rm db-0: nothing held");
    });
}
