//! The Kubernetes manifests of deploy/kubernetes/, parsed, and what must hold
//! between them for a node's plugins to work. The default set (the
//! directory's own files, what `kubectl apply -f deploy/kubernetes/` applies)
//! is the namespace, the CRDs, the RBAC, the installer DaemonSet and the
//! example NADs, in an order kubectl can apply; the etcd and the removal
//! are options beside it. The installer's paths are on the host's mounts;
//! NODE_NAME is the node's; the NADs name the node file and the kubeconfig
//! (or, on the optional etcd, etcd's files) where the installer puts them
//! on the host; their configurations parse as the plugins parse them (the
//! installer run for real into a temporary host from a ServiceAccount volume,
//! then ipam.cluster read from there); the etcd StatefulSet is three members
//! whose client Service is the etcd NAD's endpoint.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use ipam_ds_cluster::settings::{Settings, Store};
use serde_json::{json, Value};
use support::manifests::{all_objects, deploy_dir, objects, option_files, OPTIONS};

const NAMESPACE: &str = "ipam-delegated";
const DELEGATES: [&str; 4] = ["ipam-ds-pool", "ipam-ds-cluster", "ipam-da-static", "ipam-da-sequential"];

/// The object `kind` `name`, of the default set or an option.
fn find(kind: &str, name: &str) -> Value {
    let found: Vec<Value> = all_objects()
        .into_iter()
        .map(|(_, o)| o)
        .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .collect();
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

    /// The Secret volume (`secretName`, `optional`...) mounted at `path`.
    fn secret_at(&self, path: &str) -> Value {
        let (_, volume) = self.mounts().into_iter().find(|(mount, _)| mount == path).expect("a mount at --etcd-secret");
        volume["secret"].clone()
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

/// Each NAD's name and its configuration, parsed: of the default set, or
/// of the option `option`.
fn nads(option: Option<&str>) -> Vec<(String, Value)> {
    let objects = match option {
        None => objects(),
        Some(option) => support::manifests::objects_of(&option_files(option)),
    };
    objects
        .into_iter()
        .filter(|(_, o)| o["kind"] == "NetworkAttachmentDefinition")
        .map(|(_, o)| {
            assert_eq!(o["apiVersion"], "k8s.cni.cncf.io/v1");
            let name = text(&o["metadata"]["name"], "name").to_string();
            let config = serde_json::from_str(text(&o["spec"]["config"], "spec.config"))
                .unwrap_or_else(|e| panic!("{name}: spec.config is not JSON: {e}"));
            (name, config)
        })
        .collect()
}

/// The paths of files a configuration's ipam.cluster names: (field, path).
fn cluster_files(config: &Value) -> Vec<(&'static str, String)> {
    let cluster = &config["ipam"]["cluster"];
    let mut files = vec![("nodeFile", text(&cluster["nodeFile"], "nodeFile").to_string())];
    if let Some(kubernetes) = cluster.get("kubernetes") {
        files.push(("kubeconfig", text(&kubernetes["kubeconfig"], "kubernetes.kubeconfig").to_string()));
    }
    if let Some(etcd) = cluster.get("etcd") {
        files.push(("passwordFile", text(&etcd["passwordFile"], "passwordFile").to_string()));
        for key in ["ca", "cert", "key"] {
            files.push((key, text(&etcd["tls"][key], key).to_string()));
        }
    }
    files
}

/// `config` with each file of ipam.cluster under `root`.
fn files_under(mut config: Value, root: &Path) -> Value {
    let under = |path: &Value| json!(root.join(text(path, "a path").trim_start_matches('/')));
    let cluster = &mut config["ipam"]["cluster"];
    cluster["nodeFile"] = under(&cluster["nodeFile"]);
    if cluster.get("kubernetes").is_some() {
        cluster["kubernetes"]["kubeconfig"] = under(&cluster["kubernetes"]["kubeconfig"]);
    }
    if cluster.get("etcd").is_some() {
        let etcd = &mut cluster["etcd"];
        etcd["passwordFile"] = under(&etcd["passwordFile"]);
        for key in ["ca", "cert", "key"] {
            etcd["tls"][key] = under(&etcd["tls"][key]);
        }
    }
    config
}

/// The address families of a configuration's pools: "4", "6".
fn families(config: &Value) -> BTreeSet<&'static str> {
    let pools = config["ipam"]["pools"].as_array().expect("pools");
    let subnets =
        pools.iter().flat_map(|p| p["ranges"].as_array().expect("ranges")).map(|r| text(&r["subnet"], "subnet"));
    subnets.map(|s| if s.contains(':') { "6" } else { "4" }).collect()
}

/// What `kubectl apply -f deploy/kubernetes/` applies: the directory's own
/// files (kubectl reads *.json, *.yaml and *.yml, and does not descend into
/// the options' directories), exactly the default set, in an order the API
/// server takes: each namespaced object after its namespace, the DaemonSet
/// after its ServiceAccount (kubectl applies the files in name order).
#[test]
fn kubectl_apply_of_the_directory_is_exactly_the_default_set_in_an_order_that_applies() {
    let mut entries: Vec<String> = fs::read_dir(deploy_dir())
        .expect("deploy/kubernetes")
        .map(|e| {
            let e = e.expect("entry");
            let kind = if e.file_type().expect("type").is_dir() { "/" } else { "" };
            format!("{}{kind}", e.file_name().to_string_lossy())
        })
        .collect();
    entries.sort();
    let dirs: Vec<&String> = entries.iter().filter(|e| e.ends_with('/')).collect();
    assert_eq!(dirs, OPTIONS.map(|o| format!("{o}/")).iter().collect::<Vec<_>>(), "the options' directories");
    for entry in entries.iter().filter(|e| !e.ends_with('/')) {
        assert!(entry.ends_with(".yaml"), "{entry}: kubectl would apply it, or it does not belong here");
    }

    let default_set = objects();
    let mut kinds: Vec<String> = default_set.iter().map(|(_, o)| text(&o["kind"], "kind").to_string()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "DaemonSet",
            "Namespace",
            "NetworkAttachmentDefinition",
            "Role",
            "RoleBinding",
            "ServiceAccount"
        ],
        "no etcd, no Secret, no uninstaller in the default set"
    );
    let daemonsets: Vec<&Value> = default_set.iter().map(|(_, o)| o).filter(|o| o["kind"] == "DaemonSet").collect();
    assert_eq!(daemonsets.len(), 1, "the installer only");

    // In apply order: what each object needs comes before it.
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for (file, object) in &default_set {
        let kind = text(&object["kind"], "kind").to_string();
        let name = text(&object["metadata"]["name"], "name").to_string();
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            // The API server makes its own namespaces (kube-node-lease: the
            // kubelets' Leases, which the reaper reads).
            if !["default", "kube-node-lease"].contains(&namespace) {
                let has = seen.contains(&("Namespace".to_string(), namespace.to_string()));
                assert!(has, "{file}: {kind} {name} comes before its namespace {namespace}");
            }
        }
        if kind == "DaemonSet" {
            let account = text(&object["spec"]["template"]["spec"]["serviceAccountName"], "serviceAccountName");
            let has = seen.contains(&("ServiceAccount".to_string(), account.to_string()));
            assert!(has, "{file}: the DaemonSet comes before its ServiceAccount {account}");
        }
        seen.insert((kind, name));
    }

    // The example NADs: macvlan and bridge, IPv4 and dual-stack, each on the
    // Kubernetes API.
    let mut examples: Vec<(String, Vec<&str>)> = nads(None)
        .iter()
        .map(|(_, c)| (text(&c["type"], "type").to_string(), families(c).into_iter().collect()))
        .collect();
    examples.sort();
    assert_eq!(examples, [("bridge".to_string(), vec!["4", "6"]), ("macvlan".to_string(), vec!["4"])]);
    for (name, config) in nads(None) {
        assert!(config["ipam"]["cluster"].get("kubernetes").is_some(), "{name}: not on the Kubernetes API");
        assert!(config["ipam"]["cluster"].get("etcd").is_none(), "{name}: on etcd");
    }
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
    assert_eq!(installer.on_host(&installer.arg("kubeconfig")).as_deref(), Some("/etc/cni/ipam-delegated/kubeconfig"));
    assert_eq!(installer.on_host(&installer.arg("etcd-dir")).as_deref(), Some("/etc/cni/ipam-delegated/etcd"));
    // The database's directory, for the operator's tool in the pod.
    assert!(installer.on_host("/host/var/lib/cni/ipam-delegated/allocations.sqlite").is_some());
    // The kubeconfig is made of the pod's own ServiceAccount token, where the
    // kubelet mounts it (the installer's default --service-account-dir).
    assert_eq!(installer.pod["serviceAccountName"], "ipam-delegated");
    assert_ne!(installer.pod["automountServiceAccountToken"], false);
    assert!(!installer.args().contains_key("service-account-dir"), "the kubelet's mount, the installer's default");
    // etcd's files come from the Secret of the optional etcd, when it exists.
    let secret = installer.secret_at(&installer.arg("etcd-secret"));
    assert_eq!(secret["secretName"], "ipam-delegated-etcd");
    assert_eq!(secret["optional"], true, "the default set has no such Secret: the pod must start without it");
    assert!(!objects().iter().any(|(_, o)| o["kind"] == "Secret"), "no Secret in the default set");
    assert!(!secret_files("ipam-delegated-etcd").is_empty());
    // Waits (no --once): a DaemonSet's container must go on running.
    assert!(!installer.args().contains_key("once"));

    // The uninstaller sees the host's directories at the same places (the
    // manifest names files by those paths) and runs the same image.
    let uninstaller = Installer::of("ipam-delegated-uninstall", "uninstall-cni");
    assert!(uninstaller.args().contains_key("uninstall"));
    assert_eq!(uninstaller.arg("bin-dir"), installer.arg("bin-dir"));
    assert_eq!(uninstaller.container["image"], installer.container["image"]);
    for key in ["bin-dir", "conf-dir", "node-file", "kubeconfig", "etcd-dir"] {
        let path = installer.arg(key);
        assert_eq!(uninstaller.on_host(&path), installer.on_host(&path), "{key}");
    }
}

#[test]
fn the_nads_name_the_files_the_installer_puts_on_the_host() {
    let installer = installer();
    let node_file = installer.on_host(&installer.arg("node-file")).expect("node file on the host");
    let kubeconfig = installer.on_host(&installer.arg("kubeconfig")).expect("kubeconfig on the host");
    let etcd_dir = installer.on_host(&installer.arg("etcd-dir")).expect("etcd dir on the host");
    let secret = secret_files(text(&installer.secret_at(&installer.arg("etcd-secret"))["secretName"], "secretName"));
    let etcd_nads = nads(Some("etcd"));
    assert!(!etcd_nads.is_empty(), "the optional etcd shows a NAD on it");
    for (name, config) in nads(None).into_iter().chain(etcd_nads) {
        assert_eq!(config["name"], name.as_str(), "the network's name is the NAD's");
        assert_eq!(config["ipam"]["type"], "ipam-delegated", "{name}");
        assert_eq!(config["ipam"]["delegates"], json!(DELEGATES), "{name}");
        for (field, path) in cluster_files(&config) {
            match field {
                "nodeFile" => assert_eq!(path, node_file, "{name}: ipam.cluster.nodeFile"),
                "kubeconfig" => assert_eq!(path, kubeconfig, "{name}: ipam.cluster.kubernetes.kubeconfig"),
                _ => {
                    let path = Path::new(&path);
                    assert_eq!(path.parent(), Some(Path::new(&etcd_dir)), "{name}: {field} {}", path.display());
                    let file = path.file_name().expect("a file").to_string_lossy();
                    assert!(secret.contains_key(file.as_ref()), "{name}: {field}: the Secret has no {file}");
                }
            }
        }
    }
}

/// The installer run as the DaemonSet runs it, into `root` as the host:
/// from a ServiceAccount volume as the kubelet mounts it and an API server
/// address as the kubelet gives it, with the optional etcd's Secret, or
/// with its volume empty as it is without the Secret. Then each NAD's
/// configuration read by the plugins' own parsers with its paths under
/// `root`.
#[test]
fn the_nads_parse_as_the_plugins_parse_them_on_a_host_the_installer_prepared() {
    for with_etcd in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("host");
        let installer = installer();
        let secret_dir = dir.path().join("secret");
        fs::create_dir_all(&secret_dir).expect("secret dir");
        if with_etcd {
            let secret = installer.secret_at(&installer.arg("etcd-secret"));
            for (name, contents) in secret_files(text(&secret["secretName"], "secretName")) {
                fs::write(secret_dir.join(name), contents).expect("secret file");
            }
        }
        let account = service_account_volume(dir.path());
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
        args.push(format!("--service-account-dir={}", account.display()));
        for host in ["/opt/cni/bin", "/etc/cni/net.d"] {
            fs::create_dir_all(under_root(host)).expect("host dirs");
        }
        let program = support::suite_bin("ipam-delegated");
        let out = Command::new(&program)
            .args(&args)
            .env_remove("CNI_COMMAND")
            .env("NODE_NAME", "node-a")
            .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
            .env("KUBERNETES_SERVICE_PORT", "443")
            .output()
            .expect("run the installer");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));

        let mut networks = nads(None);
        if with_etcd {
            networks.extend(nads(Some("etcd")));
        }
        for (name, config) in networks {
            for (field, path) in cluster_files(&config) {
                let at = under_root(&path);
                assert!(at.is_file(), "{name}: {field} {path}: the installer wrote no {}", at.display());
            }
            // The same configuration, its files where the installer put them.
            let bytes = serde_json::to_vec(&files_under(config, &root)).expect("json");
            let conf = shared::NetConf::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert!(conf.ipam_key_warnings().is_empty(), "{name}: {:?}", conf.ipam_key_warnings());
            let pools = shared::pool::select::all_pools(&conf).unwrap_or_else(|e| panic!("{name}: pools: {e:?}"));
            assert!(!pools.is_empty(), "{name}");
            let settings = Settings::from_config(&conf).unwrap_or_else(|e| panic!("{name}: ipam.cluster: {e:?}"));
            assert_eq!(settings.node, "node-a", "{name}: the node's name, from the file the installer wrote");
            assert!(settings.weak.is_empty(), "{name}: {:?}", settings.weak);
            if let Store::Kubernetes(kube) = &settings.store {
                let server = &kube.kubeconfig.server;
                assert_eq!((server.host.as_str(), server.port), ("10.96.0.1", 443), "{name}: the in-cluster server");
            }
        }
    }
}

/// A pod's ServiceAccount volume under `dir` as the kubelet lays it out: a
/// token and the cluster's CA (the kube client's test CA).
fn service_account_volume(dir: &Path) -> PathBuf {
    let account = dir.join("serviceaccount");
    let data = account.join("..2026_11_25_08_00_00.000000001");
    fs::create_dir_all(&data).expect("serviceaccount dir");
    let ca = support::repo().join("ipam-ds-cluster/src/kube/testdata/ca.crt");
    fs::copy(&ca, data.join("ca.crt")).expect("ca.crt");
    fs::write(data.join("token"), "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJpcGFtIn0.c2lnbmF0dXJl").expect("token");
    fs::write(data.join("namespace"), NAMESPACE).expect("namespace");
    symlink("..2026_11_25_08_00_00.000000001", account.join("..data")).expect("..data");
    for key in ["ca.crt", "token", "namespace"] {
        symlink(format!("..data/{key}"), account.join(key)).expect("key link");
    }
    account
}

#[test]
fn the_etcd_statefulset_is_three_members_behind_the_etcd_nads_endpoint() {
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

    // The etcd NADs reach it through the client Service's fixed address.
    let client = find("Service", "ipam-etcd-client");
    assert_eq!(&client["spec"]["selector"], labels);
    let address = text(&client["spec"]["clusterIP"], "clusterIP");
    for (name, config) in nads(Some("etcd")) {
        let endpoints = config["ipam"]["cluster"]["etcd"]["endpoints"].as_array().expect("endpoints").clone();
        assert_eq!(endpoints, [json!(format!("https://{address}:2379"))], "{name}");
    }
    assert_eq!(find("Namespace", NAMESPACE)["kind"], "Namespace");
}
