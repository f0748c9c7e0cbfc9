//! ipam-ds-cluster's Kubernetes API client (`ipam_ds_cluster::kube`) against
//! a real kube-apiserver (kube_harness: over a real etcd, RBAC enforced), on
//! a cluster-scoped test resource defined here: every conditioned write
//! has the outcome the server decides (created or already there, replaced
//! or in conflict, deleted or not the object named), every answer carries
//! the server's clock, and every way a request can fail is the CNI error a
//! caller must return: RBAC's refusal and a token the server does not know
//! are 7 naming what to fix, a CA that does not sign the server's
//! certificate is 7 naming the CA setting, and a server that is gone or
//! silent is 11 within the timeout.

mod kube_harness;
mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ipam_ds_cluster::kube::{
    Client, Counts, Created, Deleted, Error, Kubeconfig, Object, Preconditions, Replaced, Resource, Selectors, Settings,
};
use kube_harness::KubeApi;
use serde_json::{json, Value};

const GROUP: &str = "client-test.ipam.example";
const PROBES: Resource = Resource { group: GROUP, version: "v1", plural: "probes" };
const FIELD: &str = "ipam.cluster.kubernetes.kubeconfig";

/// A cluster-scoped resource whose spec holds anything.
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: probes.client-test.ipam.example
spec:
  group: client-test.ipam.example
  scope: Cluster
  names: {plural: probes, singular: probe, kind: Probe, listKind: ProbeList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
";

/// A ServiceAccount that may read probes and nothing more.
const READER: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: client-test
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: reader
  namespace: client-test
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: probe-reader
rules:
  - apiGroups: [client-test.ipam.example]
    resources: [probes]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: reader-reads-probes
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: probe-reader
subjects:
  - kind: ServiceAccount
    name: reader
    namespace: client-test
";

fn client(kubeconfig: &Path, timeout: Duration) -> Client {
    Kubeconfig::read(kubeconfig)
        .and_then(|k| Client::new(&Settings { kubeconfig: k.into(), timeout }))
        .unwrap_or_else(|e| panic!("a client of {}: {e}", kubeconfig.display()))
}

fn probe(name: &str, color: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "Probe",
        "metadata": {"name": name, "labels": {"color": color}},
        "spec": spec,
    })
}

fn names(items: &[Object]) -> Vec<&str> {
    items.iter().map(|o| o.name().expect("a name")).collect()
}

#[test]
fn conditioned_writes_have_the_outcome_the_server_decides() {
    let api = KubeApi::start();
    api.apply_yaml(CRD);
    let admin = client(&api.admin_kubeconfig(), Duration::from_secs(10));

    // Create if absent.
    let before = SystemTime::now();
    let created = admin.create(&PROBES, &probe("p-1", "red", json!({"n": 1}))).unwrap();
    let Created::Created(first) = created.outcome else { panic!("p-1 is new: {created:?}") };
    assert_eq!(first.0["spec"]["n"], 1);
    let again = admin.create(&PROBES, &probe("p-1", "blue", json!({"n": 99}))).unwrap();
    assert_eq!(again.outcome, Created::AlreadyExists);
    assert_eq!(admin.get(&PROBES, "p-1").unwrap().outcome.as_ref(), Some(&first), "the second create wrote nothing");

    // The Date of an answer is the server's clock: the one it stamps objects with.
    let created_at = rfc3339(first.0["metadata"]["creationTimestamp"].as_str().expect("a creationTimestamp"));
    let apart = created.date.duration_since(created_at).unwrap_or_else(|e| e.duration());
    assert!(apart <= Duration::from_secs(1), "Date {:?}, creationTimestamp {created_at:?}", created.date);
    assert!(
        created.date >= before - Duration::from_secs(1) && created.date <= SystemTime::now() + Duration::from_secs(1)
    );

    // Replace on the version read; a stale version is a conflict and writes nothing.
    let version_1 = first.resource_version().expect("a resourceVersion").to_string();
    let mut changed = first.0.clone();
    changed["spec"]["n"] = json!(2);
    let Replaced::Replaced(second) = admin.replace(&PROBES, "p-1", &version_1, &changed).unwrap().outcome else {
        panic!("the version read is current")
    };
    assert_eq!(second.0["spec"]["n"], 2);
    assert_ne!(second.resource_version(), Some(version_1.as_str()));
    changed["spec"]["n"] = json!(3);
    assert_eq!(admin.replace(&PROBES, "p-1", &version_1, &changed).unwrap().outcome, Replaced::Conflict);
    let now = admin.get(&PROBES, "p-1").unwrap().outcome.expect("p-1");
    assert_eq!(now.0["spec"]["n"], 2, "the conflicting replace wrote nothing");
    let gone = probe("p-gone", "red", json!({}));
    assert_eq!(admin.replace(&PROBES, "p-gone", "1", &gone).unwrap().outcome, Replaced::NotFound);

    // Lists by label and by field.
    admin.create(&PROBES, &probe("p-2", "blue", json!({}))).unwrap();
    admin.create(&PROBES, &probe("p-3", "red", json!({}))).unwrap();
    let all = admin.list(&PROBES, &Selectors::default()).unwrap().outcome;
    assert_eq!(names(&all.items), ["p-1", "p-2", "p-3"]);
    assert!(!all.resource_version.is_empty());
    let red =
        admin.list(&PROBES, &Selectors { labels: Some("color=red"), fields: None, from_cache: false }).unwrap().outcome;
    assert_eq!(names(&red.items), ["p-1", "p-3"]);
    let named = admin.list(
        &PROBES,
        &Selectors { labels: Some("color in (red,blue)"), fields: Some("metadata.name=p-2"), from_cache: false },
    );
    assert_eq!(names(&named.unwrap().outcome.items), ["p-2"]);

    // Delete only the object named by uid and version.
    let current = Preconditions { uid: second.uid(), resource_version: second.resource_version() };
    let stale = Preconditions { uid: second.uid(), resource_version: Some(&version_1) };
    let other = Preconditions { uid: Some("00000000-0000-0000-0000-000000000000"), resource_version: None };
    assert_eq!(admin.delete(&PROBES, "p-1", &stale).unwrap().outcome, Deleted::Conflict);
    assert_eq!(admin.delete(&PROBES, "p-1", &other).unwrap().outcome, Deleted::Conflict);
    assert!(admin.get(&PROBES, "p-1").unwrap().outcome.is_some(), "refused deletes deleted nothing");
    assert_eq!(admin.delete(&PROBES, "p-1", &current).unwrap().outcome, Deleted::Deleted);
    assert_eq!(admin.get(&PROBES, "p-1").unwrap().outcome, None);
    assert_eq!(admin.delete(&PROBES, "p-1", &current).unwrap().outcome, Deleted::NotFound);

    // One TLS connection carried all of them.
    assert_eq!(admin.counts(), Counts { requests: 18, connections: 1 });

    // A resource the server does not know is not an object that is not found.
    let unknown = Resource { group: GROUP, version: "v1", plural: "nothings" };
    let e = admin.get(&unknown, "x").unwrap_err();
    assert!(e.to_string().contains("no resource nothings.client-test.ipam.example"), "{e}");
    assert_eq!(u32::from(e.to_cni(FIELD).code), 7, "{e}");
}

#[test]
fn refusals_and_failures_are_the_errors_a_caller_returns() {
    let mut api = KubeApi::start();
    api.apply_yaml(CRD);
    api.apply_yaml(READER);
    let reader_kubeconfig = api.service_account_kubeconfig("client-test", "reader");
    let reader = client(&reader_kubeconfig, Duration::from_secs(10));

    // RBAC lets the reader read, by its token, and refuses the rest, named.
    assert_eq!(reader.get(&PROBES, "p-1").unwrap().outcome, None);
    assert!(reader.list(&PROBES, &Selectors::default()).unwrap().outcome.items.is_empty());
    let e = reader.create(&PROBES, &probe("p-1", "red", json!({}))).unwrap_err();
    assert!(
        matches!(&e, Error::Forbidden { verb: "create", resource, .. } if resource == "probes.client-test.ipam.example"),
        "{e:?}"
    );
    let cni = e.to_cni(FIELD);
    assert_eq!(u32::from(cni.code), 7, "{cni:?}");
    assert!(cni.msg.contains("refuses to create probes.client-test.ipam.example"), "{}", cni.msg);
    assert!(cni.msg.contains("system:serviceaccount:client-test:reader"), "the server's reason: {}", cni.msg);
    let e = reader.delete(&PROBES, "p-1", &Preconditions::default()).unwrap_err();
    assert!(e.to_string().contains("refuses to delete probes.client-test.ipam.example"), "{e}");

    // A token the server did not issue: 7 naming the kubeconfig.
    let forged = edited_kubeconfig(&reader_kubeconfig, api.dir(), "forged", |user, _| {
        user["token"] = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJub2JvZHkifQ.bm90LXNpZ25lZA".into();
    });
    let e = client(&forged, Duration::from_secs(10)).get(&PROBES, "p-1").unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");
    let cni = e.to_cni(FIELD);
    assert_eq!(u32::from(cni.code), 7);
    assert!(cni.msg.contains(&forged.display().to_string()) && cni.msg.contains("expired or revoked"), "{}", cni.msg);

    // A CA that did not sign the server's certificate: 7 naming the CA setting and rustls's reason.
    let other_ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("ipam-ds-cluster/src/kube/testdata/ca.crt");
    let wrong_ca = edited_kubeconfig(&reader_kubeconfig, api.dir(), "wrong-ca", |_, cluster| {
        cluster.as_mapping_mut().unwrap().remove("certificate-authority-data");
        cluster["certificate-authority"] = other_ca.display().to_string().into();
    });
    let e = client(&wrong_ca, Duration::from_secs(10)).get(&PROBES, "p-1").unwrap_err();
    let cni = e.to_cni(FIELD);
    assert_eq!(u32::from(cni.code), 7, "{e:?}");
    assert!(cni.msg.contains(&format!("certificate-authority ({})", other_ca.display())), "{}", cni.msg);
    assert!(cni.msg.contains("UnknownIssuer"), "rustls's reason: {}", cni.msg);

    // The server gone: 11 within the timeout, for a client that had a
    // connection and for a new one.
    api.stop();
    let timeout = Duration::from_millis(800);
    for (what, client) in [("kept", reader), ("new", client(&reader_kubeconfig, timeout))] {
        let started = Instant::now();
        let e = client.get(&PROBES, "p-1").unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(11), "{what}: {:?}", started.elapsed());
        assert!(matches!(e, Error::Unavailable(_)), "{what}: {e:?}");
        assert_eq!(u32::from(e.to_cni(FIELD).code), 11, "{what}: {e}");
    }
}

/// A server that accepts connections and never answers (stopped,
/// partitioned after the SYN): the request ends within the timeout, TLS
/// handshake included, as 11.
#[test]
fn a_silent_server_costs_at_most_the_timeout() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("ipam-ds-cluster/src/kube/testdata/ca.crt");
    let kubeconfig = dir.path().join("silent.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "current-context: c\ncontexts: [{{name: c, context: {{cluster: k, user: u}}}}]\n\
             clusters: [{{name: k, cluster: {{server: 'https://{}', certificate-authority: '{}'}}}}]\n\
             users: [{{name: u, user: {{token: abc}}}}]\n",
            silent.local_addr().unwrap(),
            ca.display()
        ),
    )
    .unwrap();
    let timeout = Duration::from_millis(500);
    let client = client(&kubeconfig, timeout);
    let started = Instant::now();
    let e = client.get(&PROBES, "p-1").unwrap_err();
    let took = started.elapsed();
    assert!(took >= timeout && took < timeout + Duration::from_millis(400), "{took:?}: {e}");
    assert!(e.to_string().contains("no answer to GET") && e.to_string().contains("within 500ms"), "{e}");
    assert_eq!(u32::from(e.to_cni(FIELD).code), 11);
}

/// A copy of `kubeconfig`, its (only) user and cluster changed by `edit`.
fn edited_kubeconfig(
    kubeconfig: &Path,
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut serde_yaml::Value, &mut serde_yaml::Value),
) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("a kubeconfig");
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text).expect("a kubeconfig");
    let mut user = config["users"][0]["user"].clone();
    let mut cluster = config["clusters"][0]["cluster"].clone();
    edit(&mut user, &mut cluster);
    config["users"][0]["user"] = user;
    config["clusters"][0]["cluster"] = cluster;
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config).expect("YAML")).expect("writing a kubeconfig");
    path
}

/// `2026-11-28T12:00:00Z`, as the API server writes timestamps.
fn rfc3339(text: &str) -> SystemTime {
    let number = |range: std::ops::Range<usize>| -> i64 { text[range].parse().unwrap_or_else(|_| panic!("{text}")) };
    assert!(text.len() == 20 && text.ends_with('Z'), "{text}");
    let (y, m, d) = (number(0..4), number(5..7), number(8..10));
    // Days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + number(11..13) * 3600 + number(14..16) * 60 + number(17..19);
    UNIX_EPOCH + Duration::from_secs(seconds as u64)
}
