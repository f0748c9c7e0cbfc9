//! The Kubernetes manifests of deploy/kubernetes/, parsed, and what must hold
//! between them for a node's plugins to work: the installer's paths are on
//! the host's mounts; NODE_NAME is the node's; the NetworkAttachmentDefinitions
//! name the node file and etcd's files where the installer puts them on the
//! host, and the Secret has those files; their configurations parse as the
//! plugins parse them (the installer run for real into a temporary host,
//! then ipam.cluster read from there); the etcd StatefulSet is three members
//! whose client Service is the NADs' endpoint.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::manifests::objects;

const NAMESPACE: &str = "ipam-delegated";
const DELEGATES: [&str; 4] = ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"];

fn find(kind: &str, name: &str) -> Value {
    let found: Vec<Value> =
        objects().into_iter().map(|(_, o)| o).filter(|o| o["kind"] == kind && o["metadata"]["name"] == name).collect();
    assert_eq!(found.len(), 1, "one {kind} {name}");
    found.into_iter().next().expect("one")
}

fn text<'v>(value: &'v Value, what: &str) -> &'v str {
    value.as_str().unwrap_or_else(|| panic!("{what}: not a string: {value}"))
}

/// The installer's container and pod spec.
struct Installer {
    pod: Value,
    container: Value,
}

impl Installer {
    fn of(daemonset: &str, container: &str) -> Installer {
        let ds = find("DaemonSet", daemonset);
        assert_eq!(ds["metadata"]["namespace"], NAMESPACE);
        let pod = ds["spec"]["template"]["spec"].clone();
        let containers = pod["containers"].as_array().expect("containers");
        let container = containers.iter().find(|c| c["name"] == container).expect("the installer's container").clone();
        Installer { pod, container }
    }

    /// `--name=value` arguments.
    fn args(&self) -> BTreeMap<String, String> {
        let args = self.container["args"].as_array().expect("args");
        args.iter()
            .filter_map(|a| text(a, "an argument").strip_prefix("--"))
            .map(|a| match a.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (a.to_string(), String::new()),
            })
            .collect()
    }

    fn arg(&self, name: &str) -> String {
        self.args().get(name).unwrap_or_else(|| panic!("the installer has no --{name}")).clone()
    }

    fn volume(&self, name: &str) -> Value {
        let volumes = self.pod["volumes"].as_array().expect("volumes");
        volumes.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no volume {name}")).clone()
    }

    /// (mountPath, volume) of each mount.
    fn mounts(&self) -> Vec<(String, Value)> {
        let mounts = self.container["volumeMounts"].as_array().expect("volumeMounts");
        mounts
            .iter()
            .map(|m| (text(&m["mountPath"], "mountPath").to_string(), self.volume(text(&m["name"], "name"))))
            .collect()
    }

    /// The host's path of a path in the container, through the hostPath
    /// mount that holds it (the longest such mount path).
    fn on_host(&self, path: &str) -> Option<String> {
        self.mounts()
            .into_iter()
            .filter(|(_, volume)| volume.get("hostPath").is_some())
            .filter(|(mount, _)| Path::new(path).starts_with(mount))
            .max_by_key(|(mount, _)| mount.len())
            .map(|(mount, volume)| {
                let rest = Path::new(path).strip_prefix(&mount).expect("under the mount");
                let host = text(&volume["hostPath"]["path"], "hostPath.path");
                if rest.as_os_str().is_empty() {
                    host.to_string()
                } else {
                    Path::new(host).join(rest).display().to_string()
                }
            })
    }

    /// The Secret mounted at `path`, and its name.
    fn secret_at(&self, path: &str) -> String {
        let (_, volume) = self.mounts().into_iter().find(|(mount, _)| mount == path).expect("a mount at --etcd-secret");
        text(&volume["secret"]["secretName"], "secretName").to_string()
    }
}

fn installer() -> Installer {
    Installer::of("ipam-delegated", "install-cni")
}

/// The file names and contents of a Secret (stringData).
fn secret_files(name: &str) -> BTreeMap<String, String> {
    let secret = find("Secret", name);
    assert_eq!(secret["metadata"]["namespace"], NAMESPACE);
    let data = secret["stringData"].as_object().expect("stringData");
    data.iter().map(|(k, v)| (k.clone(), text(v, k).to_string())).collect()
}

/// Each NAD's name and its configuration, parsed.
fn nads() -> Vec<(String, Value)> {
    let nads: Vec<(String, Value)> = objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == "NetworkAttachmentDefinition")
        .map(|(_, o)| {
            assert_eq!(o["apiVersion"], "k8s.cni.cncf.io/v1");
            let name = text(&o["metadata"]["name"], "name").to_string();
            let config = serde_json::from_str(text(&o["spec"]["config"], "spec.config"))
                .unwrap_or_else(|e| panic!("{name}: spec.config is not JSON: {e}"));
            (name, config)
        })
        .collect();
    let mut types: Vec<String> = nads.iter().map(|(_, c)| text(&c["type"], "type").to_string()).collect();
    types.sort();
    assert_eq!(types, ["bridge", "macvlan"]);
    nads
}

/// The paths of files a configuration's ipam.cluster names: (field, path).
fn cluster_files(config: &Value) -> Vec<(&'static str, String)> {
    let cluster = &config["ipam"]["cluster"];
    let etcd = &cluster["etcd"];
    let mut files = vec![("nodeFile", text(&cluster["nodeFile"], "nodeFile").to_string())];
    files.push(("passwordFile", text(&etcd["passwordFile"], "passwordFile").to_string()));
    for key in ["ca", "cert", "key"] {
        files.push((key, text(&etcd["tls"][key], key).to_string()));
    }
    files
}

#[test]
fn the_installer_writes_on_the_host_and_names_its_node() {
    let installer = installer();
    let env = installer.container["env"].as_array().expect("env");
    let node = env.iter().find(|e| e["name"] == "NODE_NAME").expect("env NODE_NAME");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
    // On every node, tainted ones too.
    let tolerations = installer.pod["tolerations"].as_array().expect("tolerations");
    assert!(tolerations.iter().any(|t| t["operator"] == "Exists" && t.get("key").is_none()), "{tolerations:?}");
    let requests = &installer.container["resources"]["requests"];
    assert!(requests["cpu"].is_string() && requests["memory"].is_string(), "{requests}");

    // Each directory it writes is a host directory, the one runtimes and the plugins read.
    assert_eq!(installer.on_host(&installer.arg("bin-dir")).as_deref(), Some("/opt/cni/bin"));
    assert_eq!(installer.on_host(&installer.arg("conf-dir")).as_deref(), Some("/etc/cni/net.d"));
    assert_eq!(installer.on_host(&installer.arg("node-file")).as_deref(), Some("/etc/cni/ipam-delegated/node-name"));
    assert_eq!(installer.on_host(&installer.arg("etcd-dir")).as_deref(), Some("/etc/cni/ipam-delegated/etcd"));
    // The database's directory, for the operator's tool in the pod.
    assert!(installer.on_host("/host/var/lib/cni/ipam-delegated/allocations.sqlite").is_some());
    // etcd's files come from the Secret of etcd-secret.yaml.
    assert_eq!(installer.secret_at(&installer.arg("etcd-secret")), "ipam-delegated-etcd");
    assert!(!secret_files("ipam-delegated-etcd").is_empty());
    // Waits (no --once): a DaemonSet's container must go on running.
    assert!(!installer.args().contains_key("once"));

    // The uninstaller sees the host's directories at the same places (the
    // manifest names files by those paths) and runs the same image.
    let uninstaller = Installer::of("ipam-delegated-uninstall", "uninstall-cni");
    assert!(uninstaller.args().contains_key("uninstall"));
    assert_eq!(uninstaller.arg("bin-dir"), installer.arg("bin-dir"));
    assert_eq!(uninstaller.container["image"], installer.container["image"]);
    for key in ["bin-dir", "conf-dir", "node-file", "etcd-dir"] {
        let path = installer.arg(key);
        assert_eq!(uninstaller.on_host(&path), installer.on_host(&path), "{key}");
    }
}

#[test]
fn the_nads_name_the_files_the_installer_puts_on_the_host() {
    let installer = installer();
    let node_file = installer.on_host(&installer.arg("node-file")).expect("node file on the host");
    let etcd_dir = installer.on_host(&installer.arg("etcd-dir")).expect("etcd dir on the host");
    let secret = secret_files(&installer.secret_at(&installer.arg("etcd-secret")));
    for (name, config) in nads() {
        assert_eq!(config["name"], name.as_str(), "the network's name is the NAD's");
        assert_eq!(config["ipam"]["type"], "ipam-delegated", "{name}");
        assert_eq!(config["ipam"]["delegates"], json!(DELEGATES), "{name}");
        for (field, path) in cluster_files(&config) {
            if field == "nodeFile" {
                assert_eq!(path, node_file, "{name}: ipam.cluster.nodeFile");
                continue;
            }
            let path = Path::new(&path);
            assert_eq!(path.parent(), Some(Path::new(&etcd_dir)), "{name}: {field} {}", path.display());
            let file = path.file_name().expect("a file").to_string_lossy();
            assert!(secret.contains_key(file.as_ref()), "{name}: {field}: the Secret has no {file}");
        }
    }
}

/// The installer run as the DaemonSet runs it, into `root` as the host (the
/// Secret's files in `root`/secret), then each NAD's configuration read by
/// the plugins' own parsers with its paths under `root`.
#[test]
fn the_nads_parse_as_the_plugins_parse_them_on_a_host_the_installer_prepared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("host");
    let installer = installer();
    let secret_dir = dir.path().join("secret");
    fs::create_dir_all(&secret_dir).expect("secret dir");
    for (name, contents) in secret_files(&installer.secret_at(&installer.arg("etcd-secret"))) {
        fs::write(secret_dir.join(name), contents).expect("secret file");
    }
    let under_root = |host: &str| root.join(host.trim_start_matches('/'));
    let mut args = vec!["install-cni".to_string(), "--once".to_string()];
    for (key, value) in installer.args() {
        let value = if key == "etcd-secret" {
            secret_dir.display().to_string()
        } else {
            let host = installer.on_host(&value).unwrap_or_else(|| panic!("--{key}={value} is on no host mount"));
            under_root(&host).display().to_string()
        };
        args.push(format!("--{key}={value}"));
    }
    for host in ["/opt/cni/bin", "/etc/cni/net.d"] {
        fs::create_dir_all(under_root(host)).expect("host dirs");
    }
    let program = support::suite_bin("ipam-delegated");
    let out = Command::new(&program)
        .args(&args)
        .env_remove("CNI_COMMAND")
        .env("NODE_NAME", "node-a")
        .output()
        .expect("run the installer");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));

    for (name, mut config) in nads() {
        for (field, path) in cluster_files(&config) {
            let at = under_root(&path);
            assert!(at.is_file(), "{name}: {field} {path}: the installer wrote no {}", at.display());
        }
        // The same configuration, its files where the installer put them.
        let cluster = &mut config["ipam"]["cluster"];
        cluster["nodeFile"] = json!(under_root(text(&cluster["nodeFile"], "nodeFile")));
        let etcd = &mut cluster["etcd"];
        etcd["passwordFile"] = json!(under_root(text(&etcd["passwordFile"], "passwordFile")));
        for key in ["ca", "cert", "key"] {
            etcd["tls"][key] = json!(under_root(text(&etcd["tls"][key], key)));
        }
        let bytes = serde_json::to_vec(&config).expect("json");
        let conf = shared::NetConf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(conf.ipam_key_warnings().is_empty(), "{name}: {:?}", conf.ipam_key_warnings());
        let pools = shared::pool::select::all_pools(&conf).unwrap_or_else(|e| panic!("{name}: pools: {e:?}"));
        assert!(!pools.is_empty(), "{name}");
        let settings = ipam_ds_cluster::settings::Settings::from_config(&conf)
            .unwrap_or_else(|e| panic!("{name}: ipam.cluster: {e:?}"));
        assert_eq!(settings.node, "node-a", "{name}: the node's name, from the file the installer wrote");
        assert!(settings.weak.is_empty(), "{name}: {:?}", settings.weak);
    }
}

#[test]
fn the_etcd_statefulset_is_three_members_behind_the_nads_endpoint() {
    let sts = find("StatefulSet", "ipam-etcd");
    assert_eq!(sts["metadata"]["namespace"], NAMESPACE);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&sts["spec"]["selector"]["matchLabels"], labels);
    let service_name = text(&sts["spec"]["serviceName"], "serviceName");
    let headless = find("Service", service_name);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(&headless["spec"]["selector"], labels);

    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    let args: BTreeMap<String, String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| text(a, "arg").strip_prefix("--")?.split_once('=').map(|(k, v)| (k.into(), v.into())))
        .collect();
    let expected: Vec<String> =
        (0..3).map(|i| format!("ipam-etcd-{i}=https://ipam-etcd-{i}.{service_name}.{NAMESPACE}.svc:2380")).collect();
    assert_eq!(args["initial-cluster"], expected.join(","));
    // The TLS files it names are in its Secret.
    let tls_volume = container["volumeMounts"].as_array().expect("mounts").iter().find(|m| m["name"] == "tls").cloned();
    let tls_mount = text(&tls_volume.expect("a tls mount")["mountPath"], "mountPath").to_string();
    let tls = secret_files("ipam-etcd-tls");
    for key in ["cert-file", "key-file", "trusted-ca-file", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file"] {
        let file = Path::new(&args[key]).strip_prefix(&tls_mount).unwrap_or_else(|_| panic!("--{key}"));
        assert!(tls.contains_key(&file.display().to_string()), "--{key}: no {} in ipam-etcd-tls", file.display());
    }

    // The NADs reach it through the client Service's fixed address.
    let client = find("Service", "ipam-etcd-client");
    assert_eq!(&client["spec"]["selector"], labels);
    let address = text(&client["spec"]["clusterIP"], "clusterIP");
    for (name, config) in nads() {
        let endpoints = config["ipam"]["cluster"]["etcd"]["endpoints"].as_array().expect("endpoints").clone();
        assert_eq!(endpoints, [json!(format!("https://{address}:2379"))], "{name}");
    }
    assert_eq!(find("Namespace", NAMESPACE)["kind"], "Namespace");
}
