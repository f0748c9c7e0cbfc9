//! Cluster mode (`ipam-ds-cluster`, docs/contract.md "Cluster mode") end to
//! end: Debian's `bridge` in network namespaces on two nodes sharing one real
//! etcd (tests/cluster_harness), each node's plugins reaching it through a
//! forwarder in its namespace.
//!
//! What is checked: every container gets its own address, configured on eth0,
//! dynamic and asked for by name, held once and covered in etcd; DEL removes
//! the interfaces and leaves no lease or record behind.
//!
//! The test needs root and is `#[ignore]`d like tests/e2e.rs: scripts/test
//! runs it with `--ignored`, and it fails, naming what is missing, when run
//! without root.

mod cluster_harness;
mod netns;
mod stack;
mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use cluster_harness::*;
use serde_json::{json, Value};
use stack::ipv4_of;
use support::bin_dir;

/// A TCP forwarder listening on 127.0.0.1 inside a network namespace, to
/// the test etcd in this process's namespace: the nodes' plugins run in
/// their own namespaces and reach the one etcd at the same address. Stopped
/// (its listening socket closed) on drop, so the namespace can go.
struct Forwarder {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Forwarder {
    fn new(ns: &netns::Netns, target: std::net::SocketAddr) -> Forwarder {
        netns::ip_ok(&["-n", &ns.name, "link", "set", "lo", "up"]);
        let path = ns.path();
        // The socket is made in the namespace by a thread that enters it
        // (setns affects only the calling thread), then served from here.
        let listener = thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: setns on an open namespace file, for this thread only.
            let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind in the namespace")
        })
        .join()
        .expect("the namespace's listener");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        inbound.set_nonblocking(false).unwrap();
                        thread::spawn(move || {
                            let Ok(outbound) = std::net::TcpStream::connect(target) else { return };
                            let (mut a, mut b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                            let up = thread::spawn(move || {
                                let _ = std::io::copy(&mut a, &mut b);
                                let _ = b.shutdown(std::net::Shutdown::Write);
                            });
                            let (mut a, mut b) = (outbound, inbound);
                            let _ = std::io::copy(&mut a, &mut b);
                            let _ = b.shutdown(std::net::Shutdown::Write);
                            let _ = up.join();
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(10)),
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Forwarder { port, stop, thread: Some(thread) }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
#[ignore = "needs root, network namespaces and containernetworking-plugins; run by scripts/test"]
fn end_to_end_two_netns() {
    let _took = Took::new("end_to_end_two_netns");
    netns::prerequisites();
    netns::leaving_the_host_as_found("end_to_end_two_netns", two_nodes_scenario);
}

fn two_nodes_scenario() {
    use netns::{ip_ok, Netns, PLUGINS};
    let c = Cluster::blue(300.0);
    let etcd_addr: std::net::SocketAddr = c.store.endpoint().trim_start_matches("http://").parse().unwrap();
    // Two nodes: a namespace each, with bridge cbr0, joined by a veth pair
    // (one L2 network). Forwarders go before the namespaces.
    let hosts = [Netns::host(), Netns::host()];
    let names = ["n1", "n2"];
    let forwarders: Vec<Forwarder> = hosts.iter().map(|h| Forwarder::new(h, etcd_addr)).collect();
    for h in &hosts {
        ip_ok(&["-n", &h.name, "link", "add", "cbr0", "type", "bridge"]);
        ip_ok(&["-n", &h.name, "link", "set", "cbr0", "up"]);
    }
    ip_ok(&["-n", &hosts[0].name, "link", "add", "l1", "type", "veth", "peer", "name", "l2", "netns", &hosts[1].name]);
    ip_ok(&["-n", &hosts[0].name, "link", "set", "l1", "master", "cbr0", "up"]);
    ip_ok(&["-n", &hosts[1].name, "link", "set", "l2", "master", "cbr0", "up"]);
    let cni_path = format!("{}:{PLUGINS}", bin_dir().display());
    let config = |k: usize| {
        let mut conf = c.config(names[k]);
        conf["bridge"] = json!("cbr0");
        conf["isGateway"] = json!(false);
        conf["ipMasq"] = json!(false);
        conf["ipam"]["cluster"]["etcd"]["endpoints"] = json!([format!("http://127.0.0.1:{}", forwarders[k].port)]);
        conf
    };
    let bridge = Path::new(PLUGINS).join("bridge");
    let run = |k: usize, command: &str, conf: &Value, container: &str, ns: &Netns, args: Option<&str>| {
        let ns_path = ns.path();
        let mut env = vec![
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", ns_path.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", cni_path.as_str()),
        ];
        if let Some(a) = args {
            env.push(("CNI_ARGS", a));
        }
        hosts[k].run(&bridge, &[], &env, conf.to_string().as_bytes(), Some(c.dir.path()))
    };
    // Three containers per node; each node's third asks for an address by
    // name, in a block nobody owns yet.
    let mut containers: Vec<(usize, String, Netns, IpAddr, Value)> = Vec::new();
    for (k, name) in names.iter().enumerate() {
        for j in 0..2 {
            let ns = Netns::new();
            let id = format!("e2e-{name}-{j}");
            let out = run(k, "ADD", &config(k), &id, &ns, None);
            assert_eq!(out.status, 0, "bridge ADD {id} on {name}: {}", brief(&out));
            let ip = ipv4_of(out.result());
            containers.push((k, id, ns, ip, out.result().clone()));
        }
    }
    for (k, name) in names.iter().enumerate() {
        let owned: BTreeSet<Net4> = c.blocks().into_iter().map(|b| b.net).collect();
        let free = (0..32u32)
            .map(|i| Net4 { start: u32::from(Ipv4Addr::new(10, 50, 0, 0)) + 32 * i, len: 27 })
            .rev()
            .find(|b| !owned.contains(b))
            .expect("a free block");
        let want = free.nth(10 + k as u32);
        let ns = Netns::new();
        let id = format!("e2e-{name}-static");
        let args = format!("IgnoreUnknown=1;IP={want}");
        let out = run(k, "ADD", &config(k), &id, &ns, Some(&args));
        assert_eq!(out.status, 0, "bridge static ADD {id} on {name}: {}", brief(&out));
        assert_eq!(ipv4_of(out.result()), want);
        containers.push((k, id, ns, want, out.result().clone()));
    }
    let ips: BTreeSet<IpAddr> = containers.iter().map(|(_, _, _, ip, _)| *ip).collect();
    assert_eq!(ips.len(), 6, "six containers, six addresses: {ips:?}");
    for (k, id, ns, ip, _) in &containers {
        let configured = ns.addresses("eth0");
        assert!(
            configured.contains(&(*ip, 22)),
            "{id} on {}: {ip}/22 is not on eth0 in {}: {configured:?}",
            names[*k],
            ns.name
        );
    }
    let held = held_once(&c, &names);
    assert_eq!(held.len(), 6);
    assert_covered(&c, &held);
    // Pool blue's 32 blocks are shared: every address has its record in
    // etcd, the two asked for by name as static, the others as allocated.
    let records = c.addrs();
    let kinds = |kind: &str| records.iter().filter(|a| a.kind == kind).count();
    assert_eq!((kinds("static"), kinds("allocated"), records.len()), (2, 4, 6), "{records:?}");
    for (ip, (node, container)) in &held {
        assert!(
            records.iter().any(|a| a.ip == *ip && &a.node == node && &a.container == container),
            "{ip} of {container} on {node} has its record: {records:?}"
        );
    }
    let summary: Vec<String> =
        containers.iter().map(|(k, id, ns, ip, _)| format!("{id} on {} in {}: {ip}", names[*k], ns.name)).collect();
    eprintln!(
        "two nodes: {}; blocks {:?}",
        summary.join(", "),
        c.blocks().iter().map(|b| format!("{} {}", b.net, b.node)).collect::<Vec<_>>()
    );

    for (k, id, ns, _, result) in &containers {
        let out = run(*k, "DEL", &support::with_prev(&config(*k), result), id, ns, None);
        assert_eq!((out.status, out.stdout.as_str()), (0, ""), "bridge DEL {id}: {}", brief(&out));
        assert!(!ns.has_link("eth0"), "{id}: eth0 is still there after DEL");
    }
    for n in names {
        assert_eq!(c.leases(n), Vec::new(), "{n} holds leases after DEL");
        assert_eq!(c.node_records(n), Vec::<Vec<String>>::new(), "{n} keeps cluster records after DEL");
    }
    assert!(c.addrs().is_empty(), "etcd keeps address records after DEL: {:?}", c.addrs());
    drop(containers);
    drop(forwarders);
    drop(hosts);
}
