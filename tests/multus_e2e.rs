//! End to end with Multus on a real API server: Multus's thin plugin (built
//! from its Go module at the release tests/multus/go.mod pins) run as the
//! kubelet's runtime runs it, for Pod objects of the API server
//! (tests/kube_harness, RBAC enforced) that carry the
//! `k8s.v1.cni.cncf.io/networks` annotation; Multus reads them and the
//! NetworkAttachmentDefinitions with its own ServiceAccount's token, and
//! runs Debian's `macvlan` and `bridge` with the suite as their IPAM, in
//! cluster mode on the API server with the token of the manifests'
//! ServiceAccount: what `kubectl apply -f deploy/kubernetes/` grants is
//! enough for all of it, or a call fails.
//!
//! Each node is what a host has of its own: a network namespace playing the
//! host's (its `eth1` a veth, the kernel has no dummy; the bridges and host
//! ends the plugins make), with the API server at the same 127.0.0.1:PORT
//! as on the machine (forwarded); its plugin directory, where the
//! DaemonSet's installer (`ipam-delegated install-cni`) put the suite; and,
//! by running its calls under `unshare --mount`, its own /etc/cni (the node
//! name and the plugins' kubeconfig that installer wrote, Multus's
//! kubeconfig and its cluster network) and its own /var/lib/cni (the node
//! database, Multus's cache). So the example NADs of deploy/kubernetes/ run
//! as they are, with the host paths they name, on every node. Each pod is a
//! network namespace of its own.
//!
//! These need root, `ip`, `unshare` and Debian's plugins, so they are
//! `#[ignore]`d and scripts/test runs them; each checks its prerequisites
//! first and fails loudly when one is missing. Addresses stay in 10.0.0.0/8
//! and fd00::/8; no traffic is sent.

mod kube_harness;
mod netns;
mod support;

use std::fs;
use std::io::{self, ErrorKind};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use kube_harness::KubeApi;
use netns::{ip_ok, prerequisites, unique, Netns, PLUGINS};
use serde_json::{json, Value};
use support::manifests::{files, objects, objects_of, plugins_account};
use support::{list_leases, Outcome, CLUSTER_STACK, CLUSTER_STICKY_STACK};

/// The Go module that pins Multus, and its thin plugin's package.
const MULTUS_MODULE: &str = "tests/multus";
const MULTUS: &str = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4";
const MULTUS_PLUGIN: &str = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus";

/// The annotations Multus reads and writes.
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

/// Where each node keeps what the installer writes (deploy/kubernetes/'s
/// NADs name these paths) and its node database.
const NODE_NAME_FILE: &str = "/etc/cni/ipam-delegated/node-name";
const PLUGINS_KUBECONFIG: &str = "/etc/cni/ipam-delegated/kubeconfig";
const NODE_DATABASE: &str = "ipam-delegated/allocations.sqlite";
/// Multus's kubeconfig and cluster network on each node, where its
/// DaemonSet writes them. Multus is given the directory, where it takes the
/// first configuration as the runtime would: given the .conflist's path,
/// Multus v4.3.0 keeps for DEL a copy of the list without its plugins' own
/// fields (host-local's DEL then fails: "no IP ranges specified").
const MULTUS_KUBECONFIG: &str = "/etc/cni/net.d/multus.d/multus.kubeconfig";
const CLUSTER_NETWORK_DIR: &str = "/etc/cni/net.d";
const CLUSTER_NETWORK: &str = "/etc/cni/net.d/10-default.conflist";

/// The Multus plugin, built once per change of tests/multus.
fn multus_plugin() -> PathBuf {
    support::go::build_package(MULTUS_MODULE, MULTUS_PLUGIN, "multus", "multus")
}

/// The kinds of Multus's own manifest this test applies: the NAD CRD and
/// what Multus's ServiceAccount is granted (not its ConfigMap and
/// DaemonSet: the test installs the plugin itself).
const MULTUS_KINDS: [&str; 4] = ["CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"];

/// The objects of [`MULTUS_KINDS`] of the pinned release's
/// deployments/multus-daemonset.yml, as YAML.
fn multus_manifests() -> String {
    let release = support::go::module_dir(MULTUS_MODULE, MULTUS);
    let objects = objects_of(&[release.join("deployments/multus-daemonset.yml")]);
    let wanted: Vec<String> = objects
        .into_iter()
        .filter(|(_, o)| MULTUS_KINDS.iter().any(|k| o["kind"] == *k))
        .map(|(_, o)| o.to_string())
        .collect();
    assert_eq!(wanted.len(), MULTUS_KINDS.len(), "Multus's manifest has one object of each of {MULTUS_KINDS:?}");
    wanted.join("\n---\n")
}

/// The configuration of the NAD `name` of deploy/kubernetes/, parsed.
fn example_nad(name: &str) -> Value {
    let all = objects();
    let (_, nad) = all
        .iter()
        .find(|(_, o)| o["kind"] == "NetworkAttachmentDefinition" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the NAD {name} in deploy/kubernetes/"));
    serde_json::from_str(nad["spec"]["config"].as_str().expect("spec.config")).expect("a NAD's config is JSON")
}

/// The configuration of a NAD like deploy/kubernetes/'s macvlan-cluster
/// (the same master, node file and kubeconfig), named `name`, with the
/// delegates `stack` and the pools `pools`.
fn like_the_macvlan_example(name: &str, stack: &[&str], pools: Value) -> Value {
    let mut config = example_nad("macvlan-cluster");
    config["name"] = json!(name);
    config["ipam"]["delegates"] = json!(stack);
    config["ipam"]["pools"] = pools;
    config
}

/// A cluster: the API server with Multus's and the suite's manifests
/// applied, and the credentials each node is given.
struct Cluster {
    api: KubeApi,
    /// Multus's ServiceAccount token, as its DaemonSet writes it on a node.
    multus_kubeconfig: PathBuf,
    /// A token of the manifests' ServiceAccount (the installer
    /// DaemonSet's), which each node's installer is given as its pod's.
    plugins_kubeconfig: PathBuf,
}

impl Cluster {
    /// Starts the API server and applies Multus's CRD and RBAC, then
    /// deploy/kubernetes/ as `kubectl apply -f` does (its example NADs
    /// included), then `nads` (NetworkAttachmentDefinitions of the test, in
    /// namespace default, whose ServiceAccount `default` is made here: no
    /// controller-manager runs).
    fn start(nads: &[(&str, Value)]) -> Cluster {
        prerequisites();
        let unshare = std::process::Command::new("unshare").arg("--version").output();
        assert!(
            unshare.is_ok_and(|o| o.status.success()),
            "this end-to-end test runs each node's calls under unshare --mount: apt-get install util-linux"
        );
        let api = KubeApi::start();
        api.apply_yaml(&multus_manifests());
        api.apply(&files().iter().map(PathBuf::as_path).collect::<Vec<_>>());
        let mut extra = vec![json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                    "metadata": {"name": "default", "namespace": "default"}})
        .to_string()];
        for (name, config) in nads {
            extra.push(
                json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                       "metadata": {"name": name, "namespace": "default"},
                       "spec": {"config": config.to_string()}})
                .to_string(),
            );
        }
        api.apply_yaml(&extra.join("\n---\n"));
        let multus_kubeconfig = api.service_account_kubeconfig("kube-system", "multus");
        let (namespace, account) = plugins_account();
        let plugins_kubeconfig = api.service_account_kubeconfig(&namespace, &account);
        Cluster { api, multus_kubeconfig, plugins_kubeconfig }
    }

    fn port(&self) -> u16 {
        let server = self.api.server();
        server.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("a port in {server}"))
    }

    /// The Pod object `name` in namespace default, on `node`, asking for
    /// `networks` (the annotation's value), made as the admin; its
    /// namespace for the runtime, made too.
    fn pod(&self, name: &str, node: &Node, networks: &str) -> Pod {
        self.labelled_pod(name, node, networks, json!({}))
    }

    /// As [`Cluster::pod`], the Pod object carrying `labels`.
    fn labelled_pod(&self, name: &str, node: &Node, networks: &str, labels: Value) -> Pod {
        let object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": {NETWORKS: networks}, "labels": labels},
            "spec": {"nodeName": node.name, "containers": [{"name": "app", "image": "registry.invalid/app"}]}
        });
        let (status, body) =
            self.api.request(&self.api.admin_kubeconfig(), "POST", "/api/v1/namespaces/default/pods", Some(&object));
        assert_eq!(status, 201, "creating the pod {name}: {body}");
        let made: Value = serde_json::from_str(&body).expect("a Pod");
        let uid = made["metadata"]["uid"].as_str().expect("the pod's uid").to_string();
        Pod { name: name.to_string(), uid, container: unique("sandbox"), netns: Netns::new() }
    }

    /// The Pod object of `pod`, read as the admin.
    fn pod_object(&self, pod: &Pod) -> Value {
        let path = format!("/api/v1/namespaces/default/pods/{}", pod.name);
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", &path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("a Pod")
    }

    /// Deletes the Pod object of `pod` (its sandbox is the runtime's) as
    /// the kubelet finishes a deletion once the pod's containers are gone:
    /// at once (grace period 0), the name free for a new pod.
    fn delete_pod(&self, pod: &Pod) {
        let path = format!("/api/v1/namespaces/default/pods/{}", pod.name);
        let now = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0});
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "DELETE", &path, Some(&now));
        assert_eq!(status, 200, "DELETE {path}: {body}");
    }

    /// The nodes that own blocks of the pool `pool` of the network
    /// `network`, by the `IPDBlock` objects, read as the admin; sorted.
    fn block_owners(&self, network: &str, pool: &str) -> Vec<String> {
        let path = "/apis/ipam-delegated.io/v1alpha1/ipdblocks";
        let (status, body) = self.api.request(&self.api.admin_kubeconfig(), "GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        let list: Value = serde_json::from_str(&body).expect("a list of IPDBlocks");
        let blocks = list["items"].as_array().into_iter().flatten();
        let ours = blocks.filter(|b| b["spec"]["network"] == network && b["spec"]["pool"] == pool);
        let mut owners: Vec<String> =
            ours.filter_map(|b| Some(b["spec"]["owner"]["node"].as_str()?.to_string())).collect();
        owners.sort();
        owners.dedup();
        owners
    }

    /// The addresses Multus recorded in the pod's network-status for the
    /// network `nad` (namespace/name).
    fn status_addresses(&self, pod: &Pod, nad: &str) -> Vec<IpAddr> {
        let object = self.pod_object(pod);
        let status = object["metadata"]["annotations"][NETWORK_STATUS]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no {NETWORK_STATUS} annotation: {object}", pod.name));
        let status: Value = serde_json::from_str(status).expect("network-status is JSON");
        let entry = status
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == nad)
            .unwrap_or_else(|| panic!("{}: no {nad} in its network-status {status}", pod.name));
        let ips = entry["ips"].as_array().into_iter().flatten();
        ips.map(|ip| ip.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("an address: {ip}"))).collect()
    }
}

/// A pod as the runtime knows it: its Pod object's name and UID, its
/// sandbox's container id and network namespace.
struct Pod {
    name: String,
    uid: String,
    container: String,
    netns: Netns,
}

impl Pod {
    /// The addresses on `dev` inside the pod (link-local ones aside).
    fn addresses(&self, dev: &str) -> Vec<IpAddr> {
        let all = self.netns.addresses(dev);
        all.into_iter().map(|(a, _)| a).filter(|a| !matches!(a, IpAddr::V6(v6) if v6.segments()[0] == 0xfe80)).collect()
    }
}

/// A simulated host: its network namespace, its plugin directory, its
/// /etc/cni and /var/lib/cni.
struct Node {
    name: String,
    host: Netns,
    etc_cni: PathBuf,
    var_lib_cni: PathBuf,
    /// The node's CNI plugin directory, where the installer put the suite.
    cni_bin: PathBuf,
    _dir: tempfile::TempDir,
    _api: ApiForward,
}

impl Node {
    /// The node `name`, the `index`th (its cluster network's subnet), set
    /// up as the DaemonSets leave a host: the suite's installer run for it
    /// (see [`install`]); Multus's kubeconfig and the cluster network (a
    /// bridge with host-local, each node its own subnet) in /etc/cni/net.d;
    /// `eth1` for the macvlan NADs.
    fn new(cluster: &Cluster, name: &str, index: u8) -> Node {
        let host = Netns::host();
        ip_ok(&["-n", &host.name, "link", "set", "lo", "up"]);
        ip_ok(&["-n", &host.name, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1-peer"]);
        ip_ok(&["-n", &host.name, "link", "set", "eth1", "up"]);
        ip_ok(&["-n", &host.name, "link", "set", "eth1-peer", "up"]);
        let api = ApiForward::start(&host, cluster.port());

        let dir = tempfile::Builder::new().prefix("ipam-multus-node-").tempdir().expect("tempdir");
        let (etc_cni, var_lib_cni) = (dir.path().join("etc-cni"), dir.path().join("var-lib-cni"));
        let cni_bin = dir.path().join("opt-cni-bin");
        fs::create_dir_all(&var_lib_cni).expect("the node's /var/lib/cni");
        let on_node = |path: &str| etc_cni.join(path.strip_prefix("/etc/cni/").expect("a path under /etc/cni"));
        install(cluster, name, dir.path(), &cni_bin, &on_node);
        write(&on_node(MULTUS_KUBECONFIG), &read(&cluster.multus_kubeconfig), 0o600);
        let default_network = json!({
            "cniVersion": "1.0.0", "name": "default-cni-network",
            "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": false, "ipMasq": false,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("10.244.{index}.0/24")}]]}}]
        });
        write(&on_node(CLUSTER_NETWORK), default_network.to_string().as_bytes(), 0o644);
        Node { name: name.to_string(), host, etc_cni, var_lib_cni, cni_bin, _dir: dir, _api: api }
    }

    /// Multus's configuration on the node, as its thin entrypoint writes
    /// it; its `binDir` (searched before CNI_PATH) the node's.
    fn multus_conf(&self) -> Value {
        json!({"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
               "kubeconfig": MULTUS_KUBECONFIG, "clusterNetwork": CLUSTER_NETWORK_DIR,
               "binDir": path_text(&self.cni_bin)})
    }

    /// Runs Multus for `pod` as the runtime would on this node: in the
    /// node's namespace, with its /etc/cni and /var/lib/cni, eth0 in the
    /// pod's namespace, the kubelet's CNI_ARGS, and CNI_PATH with Debian's
    /// plugins and the suite's.
    fn multus(&self, command: &str, pod: &Pod) -> Outcome {
        let cni_args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            pod.name, pod.container, pod.uid
        );
        let cni_path = format!("{}:{PLUGINS}", self.cni_bin.display());
        let netns = pod.netns.path();
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", pod.container.as_str()),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", cni_args.as_str()),
            ("CNI_PATH", cni_path.as_str()),
        ];
        let plugin = path_text(&multus_plugin());
        let (etc, var) = (path_text(&self.etc_cni), path_text(&self.var_lib_cni));
        let mounts = r#"mount --bind "$1" /etc/cni && mount --bind "$2" /var/lib/cni && exec "$3""#;
        let args = ["--mount", "--propagation", "private", "sh", "-c", mounts, "node-mounts", &etc, &var, &plugin];
        self.host.run(Path::new("unshare"), &args, &env, self.multus_conf().to_string().as_bytes(), None)
    }

    /// ADD of `pod` through Multus; its result.
    fn add(&self, pod: &Pod) -> Value {
        let out = self.multus("ADD", pod);
        assert_eq!(out.status, 0, "Multus ADD of {} on {}: {out:#?}", pod.name, self.name);
        out.result().clone()
    }

    /// DEL of `pod` through Multus.
    fn del(&self, pod: &Pod) {
        let out = self.multus("DEL", pod);
        assert_eq!((out.status, out.stdout.as_str()), (0, ""), "Multus DEL of {} on {}: {out:#?}", pod.name, self.name);
    }

    /// The node database's leases (`ipam-delegated list --json`).
    fn leases(&self) -> Value {
        list_leases(&self.var_lib_cni.join(NODE_DATABASE))
    }
}

/// Runs the installer of deploy/kubernetes/'s DaemonSet for the node
/// `name` as its pod would (`ipam-delegated install-cni --once`, the
/// program under test): the suite into the node's plugin directory
/// `cni_bin`, the node's name and the plugins' kubeconfig into its
/// /etc/cni (`on_node`), made of a ServiceAccount volume under `dir` that
/// holds the manifests' ServiceAccount's token and the cluster's CA, the
/// server that of the in-cluster environment.
fn install(cluster: &Cluster, name: &str, dir: &Path, cni_bin: &Path, on_node: &dyn Fn(&str) -> PathBuf) {
    let volume = dir.join("serviceaccount");
    let kubeconfig: serde_yaml::Value =
        serde_yaml::from_slice(&read(&cluster.plugins_kubeconfig)).expect("the ServiceAccount's kubeconfig");
    let token = kubeconfig["users"][0]["user"]["token"].as_str().expect("a bearer token");
    write(&volume.join("token"), token.as_bytes(), 0o600);
    write(&volume.join("ca.crt"), &read(&cluster.api.ca_file()), 0o644);
    let option = |flag: &str, path: &Path| format!("--{flag}={}", path.display());
    let out = std::process::Command::new(support::suite_bin("ipam-delegated"))
        .arg("install-cni")
        .arg("--once")
        .arg(option("bin-dir", cni_bin))
        .arg(option("node-file", &on_node(NODE_NAME_FILE)))
        .arg(option("kubeconfig", &on_node(PLUGINS_KUBECONFIG)))
        .arg(option("service-account-dir", &volume))
        .arg(option("conf-dir", &on_node("/etc/cni/net.d")))
        .arg(option("etcd-dir", &on_node("/etc/cni/ipam-delegated/etcd")))
        .env_remove("CNI_COMMAND")
        .env("NODE_NAME", name)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", cluster.port().to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running ipam-delegated install-cni");
    assert!(out.status.success(), "install-cni on {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Where Multus's calls mount the node's directories must exist: the CNI
/// directories every runtime's host has (podman's package makes /etc/cni).
fn mount_points() {
    for dir in ["/etc/cni", "/var/lib/cni"] {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    }
}

fn write(path: &Path, content: &[u8], mode: u32) {
    fs::create_dir_all(path.parent().expect("a parent")).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    fs::write(path, content).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn path_text(path: &Path) -> String {
    path.to_str().unwrap_or_else(|| panic!("a path that is not UTF-8: {}", path.display())).to_string()
}

// ---------------------------------------------------------------------------
// The API server as a host sees it

/// 127.0.0.1:PORT inside a node's namespace, forwarded to the API server
/// on the machine's 127.0.0.1:PORT: a host reaches its API server from its
/// own namespace, and the server's certificate names 127.0.0.1. Stops
/// accepting when dropped.
struct ApiForward {
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl ApiForward {
    fn start(netns: &Netns, port: u16) -> ApiForward {
        // Bound by a thread that enters the namespace and ends: the socket
        // stays the namespace's, this process's threads stay in their own.
        let path = netns.path();
        let listener = thread::scope(|s| {
            s.spawn(|| {
                let ns = fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                // SAFETY: a plain syscall on a descriptor we hold, changing this thread alone.
                let entered = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(entered, 0, "entering {path}: {}", io::Error::last_os_error());
                TcpListener::bind(("127.0.0.1", port))
            })
            .join()
            .expect("the thread that binds in the node's namespace")
        })
        .unwrap_or_else(|e| panic!("binding 127.0.0.1:{port} in {path}: {e}"));
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let accepting = thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        thread::spawn(move || forward(client, port));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(10)),
                    Err(e) => panic!("accepting on 127.0.0.1:{port} in a node's namespace: {e}"),
                }
            }
        });
        ApiForward { stop, accepting: Some(accepting) }
    }
}

impl Drop for ApiForward {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

/// Copies a node's connection to the API server and back until either
/// side closes.
fn forward(client: TcpStream, port: u16) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else { return };
    let _ = client.set_nonblocking(false);
    let (Ok(mut client_in), Ok(mut server_out)) = (client.try_clone(), server.try_clone()) else { return };
    let up = thread::spawn(move || {
        let _ = io::copy(&mut client_in, &mut server_out);
        let _ = server_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut server_in, mut client_out) = (server, client);
    let _ = io::copy(&mut server_in, &mut client_out);
    let _ = client_out.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

// ---------------------------------------------------------------------------
// The scenarios

fn two_nodes(cluster: &Cluster) -> [Node; 2] {
    mount_points();
    [Node::new(cluster, "node-a", 1), Node::new(cluster, "node-b", 2)]
}

/// deploy/kubernetes/'s example NADs as they are: pods on two nodes get
/// distinct addresses of each pool, on net1 in their namespace and in
/// Multus's network-status alike, eth0 being the cluster network; a DEL
/// frees the pod's addresses in its node database.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins and Go; run by scripts/test"]
fn pods_on_two_nodes_get_distinct_addresses_of_the_example_networks() {
    let cluster = Cluster::start(&[]);
    let nodes = two_nodes(&cluster);
    let macvlan = example_nad("macvlan-cluster");
    let pool = &macvlan["ipam"]["pools"][0]["ranges"][0]["subnet"];
    assert_eq!(pool, "10.81.0.0/16", "the example's pool: {macvlan}");

    let mut seen: Vec<IpAddr> = Vec::new();
    let mut pods = Vec::new();
    for (i, node) in nodes.iter().chain(nodes.iter()).enumerate() {
        let pod = cluster.pod(&format!("app-{i}"), node, "macvlan-cluster,bridge-cluster");
        let result = node.add(&pod);
        assert!(!pod.addresses("eth0").is_empty(), "{}: eth0 (the cluster network) has no address: {result}", pod.name);
        let macvlan_ips = pod.addresses("net1");
        let bridge_ips = pod.addresses("net2");
        assert_eq!(macvlan_ips, cluster.status_addresses(&pod, "default/macvlan-cluster"), "{}: net1", pod.name);
        assert_eq!(bridge_ips, cluster.status_addresses(&pod, "default/bridge-cluster"), "{}: net2", pod.name);
        assert!(
            matches!(macvlan_ips[..], [IpAddr::V4(a)] if a.octets()[..2] == [10, 81]),
            "{}: {macvlan_ips:?}",
            pod.name
        );
        assert!(
            matches!(bridge_ips[..], [IpAddr::V4(a), IpAddr::V6(b)]
                if a.octets()[..2] == [10, 82] && b.segments()[..2] == [0xfd00, 0x82]),
            "{}: net2 has one address of each of bridge-cluster's pools: {bridge_ips:?}",
            pod.name
        );
        for ip in macvlan_ips.iter().chain(&bridge_ips) {
            assert!(!seen.contains(ip), "{}: {ip} was given to another pod already ({seen:?})", pod.name);
            seen.push(*ip);
        }
        pods.push((node, pod));
    }
    for node in &nodes {
        let leases = node.leases();
        assert_eq!(leases.as_array().map(Vec::len), Some(6), "{}: two pods, three addresses each: {leases}", node.name);
    }
    // Each node under its own name: each claimed blocks of its own.
    for (network, pool) in
        [("macvlan-cluster", "macvlan4"), ("bridge-cluster", "bridge4"), ("bridge-cluster", "bridge6")]
    {
        assert_eq!(
            cluster.block_owners(network, pool),
            ["node-a", "node-b"],
            "the owners of {network}'s {pool} blocks"
        );
    }

    for (node, pod) in &pods {
        node.del(pod);
        assert!(!pod.netns.has_link("net1") && !pod.netns.has_link("net2"), "{}: DEL left a link", pod.name);
        cluster.delete_pod(pod);
    }
    for node in &nodes {
        assert_eq!(node.leases(), json!([]), "{}: DEL left leases", node.name);
    }
}

/// A pool of five addresses (a /29 less its network and broadcast
/// addresses and its gateway), one block shared by the nodes, filled by pods
/// of both: one more is refused; a DEL on node-a frees an address, and the
/// next pod, on node-b, gets exactly it.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins and Go; run by scripts/test"]
fn a_del_frees_an_address_of_a_full_pool_for_a_pod_on_another_node() {
    let pools = json!([{"name": "small4", "ranges": [{"subnet": "10.83.0.0/29"}]}]);
    let cluster =
        Cluster::start(&[("macvlan-small", like_the_macvlan_example("macvlan-small", &CLUSTER_STACK, pools))]);
    let nodes = two_nodes(&cluster);

    let mut pods = Vec::new();
    for i in 0..5 {
        let node = &nodes[i % 2];
        let pod = cluster.pod(&format!("fill-{i}"), node, "macvlan-small");
        node.add(&pod);
        let ips = pod.addresses("net1");
        assert_eq!(ips, cluster.status_addresses(&pod, "default/macvlan-small"), "{}: net1", pod.name);
        pods.push((node, pod, ips));
    }
    let mut given: Vec<IpAddr> = pods.iter().flat_map(|(_, _, ips)| ips.clone()).collect();
    given.sort();
    let usable: Vec<IpAddr> = (2..=6).map(|i| IpAddr::from([10, 83, 0, i])).collect();
    assert_eq!(given, usable, "five pods on two nodes: every usable address of the pool, each once");

    let refused = cluster.pod("one-too-many", &nodes[1], "macvlan-small");
    let out = nodes[1].multus("ADD", &refused);
    assert_ne!(out.status, 0, "a sixth pod in a full pool of five: {out:#?}");
    // Multus's own error (code 999) carries the suite's message on.
    let msg = out.json.as_ref().and_then(|j| j["msg"].as_str()).unwrap_or_default();
    assert!(
        msg.contains("\"macvlan-small\"") && msg.contains("no free IPv4 address in the cluster pools (small4)"),
        "Multus names the network, and the suite why: {out:#?}"
    );
    assert!(!refused.netns.has_link("net1"), "a refused ADD left net1");
    nodes[1].del(&refused);
    cluster.delete_pod(&refused);

    let (node, pod, freed) = &pods[0];
    assert_eq!(node.name, "node-a");
    node.del(pod);
    cluster.delete_pod(pod);
    let late = cluster.pod("late", &nodes[1], "macvlan-small");
    nodes[1].add(&late);
    assert_eq!(&late.addresses("net1"), freed, "the pod on node-b gets the address node-a's DEL freed");
    assert_eq!(&cluster.status_addresses(&late, "default/macvlan-small"), freed);

    for (node, pod, _) in &pods[1..] {
        node.del(pod);
    }
    nodes[1].del(&late);
    for node in &nodes {
        assert_eq!(node.leases(), json!([]), "{}: DEL left leases", node.name);
    }
}

/// A StatefulSet's pod (its identity: K8S_POD_NAMESPACE/K8S_POD_NAME, what
/// Multus passes on) deleted on node-a and made again, a new Pod object
/// under the same name, on node-b keeps its address; meanwhile the address
/// is held for it, and another pod does not get it.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins and Go; run by scripts/test"]
fn a_statefulset_pod_made_again_on_another_node_keeps_its_address() {
    let pools = json!([{"name": "sticky4", "ranges": [{"subnet": "10.84.0.0/24"}]}]);
    let sticky = like_the_macvlan_example("macvlan-sticky", &CLUSTER_STICKY_STACK, pools);
    let cluster = Cluster::start(&[("macvlan-sticky", sticky)]);
    let [node_a, node_b] = two_nodes(&cluster);

    let first = cluster.pod("web-0", &node_a, "macvlan-sticky");
    node_a.add(&first);
    let address = first.addresses("net1");
    assert_eq!(address.len(), 1, "web-0 on node-a: {address:?}");
    assert_eq!(address, cluster.status_addresses(&first, "default/macvlan-sticky"));

    // The StatefulSet controller deletes the pod; the runtime DELs it.
    node_a.del(&first);
    cluster.delete_pod(&first);
    assert!(!first.netns.has_link("net1"), "DEL left net1 in web-0's first sandbox");

    let other = cluster.pod("other-0", &node_b, "macvlan-sticky");
    node_b.add(&other);
    assert_ne!(other.addresses("net1"), address, "another pod got the address held for web-0");

    let again = cluster.pod("web-0", &node_b, "macvlan-sticky");
    assert_ne!(again.uid, first.uid, "a new Pod object");
    node_b.add(&again);
    assert_eq!(again.addresses("net1"), address, "web-0 made again on node-b keeps its address");
    assert_eq!(cluster.status_addresses(&again, "default/macvlan-sticky"), address);

    node_b.del(&again);
    node_b.del(&other);
}

/// A KubeVirt VM (`ipam.sticky.identity: "auto"`): KubeVirt runs it in a
/// pod `virt-launcher-<vm>-<suffix>` labelled `vm.kubevirt.io/name`, a new
/// one at each start or migration. Its pod deleted on node-a and a new one,
/// under another name, made on node-b: the VM keeps its address, with no
/// `cni-args` in the pod's network selection; the plugins read the label
/// with the manifests' ServiceAccount.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins and Go; run by scripts/test"]
fn a_vm_s_pod_made_again_under_a_new_name_on_another_node_keeps_its_address() {
    let pools = json!([{"name": "vm4", "ranges": [{"subnet": "10.85.0.0/24"}]}]);
    let mut vm = like_the_macvlan_example("macvlan-vm", &CLUSTER_STICKY_STACK, pools);
    vm["ipam"]["sticky"] = json!({"identity": "auto", "shareLive": true});
    let cluster = Cluster::start(&[("macvlan-vm", vm)]);
    let [node_a, node_b] = two_nodes(&cluster);
    let labels = json!({"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "fedora-01"});

    let first = cluster.labelled_pod("virt-launcher-fedora-01-x7k2p", &node_a, "macvlan-vm", labels.clone());
    node_a.add(&first);
    let address = first.addresses("net1");
    assert_eq!(address.len(), 1, "the VM's first pod on node-a: {address:?}");
    node_a.del(&first);
    cluster.delete_pod(&first);

    let other = cluster.pod("web-0", &node_b, "macvlan-vm");
    node_b.add(&other);
    assert_ne!(other.addresses("net1"), address, "another pod got the address held for the VM");

    let again = cluster.labelled_pod("virt-launcher-fedora-01-q9w4z", &node_b, "macvlan-vm", labels);
    node_b.add(&again);
    assert_eq!(again.addresses("net1"), address, "the VM's new pod on node-b keeps its address");
    assert_eq!(cluster.status_addresses(&again, "default/macvlan-vm"), address);

    node_b.del(&again);
    node_b.del(&other);
}

/// A pod deleted from the API server without a DEL (a force delete, a node
/// that crashed, a DEL that failed): no runtime calls CNI GC for Multus's
/// secondary networks, so the node agent (`ipam-delegated agent`, as the
/// DaemonSet's second container runs it on the node, with the plugins'
/// kubeconfig the installer wrote) releases its address once the pod has
/// been gone for `--grace`; a pod that exists keeps its address.
#[test]
#[ignore = "needs root, network namespaces, containernetworking-plugins and Go; run by scripts/test"]
fn the_node_agent_releases_the_address_of_a_pod_deleted_without_a_del() {
    let cluster = Cluster::start(&[]);
    let [node_a, _node_b] = two_nodes(&cluster);
    let gone = cluster.pod("gone-0", &node_a, "macvlan-cluster");
    let kept = cluster.pod("kept-0", &node_a, "macvlan-cluster");
    node_a.add(&gone);
    node_a.add(&kept);
    let leased = |node: &Node| -> Vec<String> {
        let leases = node.leases();
        let mut pods: Vec<String> = leases
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["container_id"].as_str().map(str::to_string))
            .collect();
        pods.sort();
        pods.dedup();
        pods
    };
    let mut both = vec![gone.container.clone(), kept.container.clone()];
    both.sort();
    assert_eq!(leased(&node_a), both, "both pods leased on node-a: {:#}", node_a.leases());
    cluster.delete_pod(&gone);

    let log = node_a._dir.path().join("agent.log");
    let agent = path_text(&node_a.cni_bin.join("ipam-delegated"));
    let (etc, var) = (path_text(&node_a.etc_cni), path_text(&node_a.var_lib_cni));
    let database = format!("/var/lib/cni/{NODE_DATABASE}");
    let mounts = r#"mount --bind "$1" /etc/cni && mount --bind "$2" /var/lib/cni && shift 2 && exec "$@""#;
    let mut child = std::process::Command::new("ip")
        .args(["netns", "exec", &node_a.host.name, "unshare", "--mount", "--propagation", "private", "sh", "-c"])
        .args([mounts, "node-mounts", &etc, &var, &agent, "agent", "--node", &node_a.name])
        .args(["--interval", "1", "--grace", "2", "--kubeconfig", PLUGINS_KUBECONFIG, "--database", &database])
        .env_remove("CNI_COMMAND")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&log).expect("agent.log"))
        .spawn()
        .expect("starting the agent on node-a");
    let only_kept = vec![kept.container.clone()];
    let started = std::time::Instant::now();
    while leased(&node_a) != only_kept {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!(
                "the agent did not release gone-0: {:#}\n{}",
                node_a.leases(),
                fs::read_to_string(&log).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(500));
    }
    // Passes go on; kept-0, whose pod exists, keeps its address.
    thread::sleep(Duration::from_secs(4));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(leased(&node_a), only_kept, "kept-0 keeps its address: {:#}", node_a.leases());
    node_a.del(&kept);
}
