//! The CustomResourceDefinitions of deploy/kubernetes/crds.yaml: the four
//! kinds of cluster mode's Kubernetes store
//! (ipam-ds-cluster/docs/kubernetes.md), cluster-scoped, in one group, each
//! named `<plural>.<group>`, each with a schema whose `required` fields
//! exist and printer columns that point at fields the schema has (a column
//! at a path the schema lacks would show nothing); and on a real API server
//! (kube_harness): established, an object of each kind accepted, invalid
//! ones refused by the schema and its rules (a pool's cut never changes, a
//! block's record count is its records'), and `kubectl get`'s columns, as
//! the server's own Table of each kind; and the single-object
//! compare-and-swaps the protocol is made of, as that server does them.

mod kube_harness;
mod support;

use std::path::PathBuf;

use kube_harness::{Headers, KubeApi};
use serde_json::{json, Value};
use support::manifests;

const GROUP: &str = "ipam-delegated.io";

/// (kind, plural) of each CRD, in the file's order.
const KINDS: [(&str, &str); 4] = [
    ("IPDNetwork", "ipdnetworks"),
    ("IPDBlock", "ipdblocks"),
    ("IPDIdentity", "ipdidentities"),
    ("IPDNode", "ipdnodes"),
];

const CRDS: &str = "crds.yaml";

fn crds_file() -> PathBuf {
    manifests::deploy_dir().join(CRDS)
}

/// The objects of crds.yaml, as support::manifests reads every manifest.
fn crds() -> Vec<Value> {
    manifests::objects().into_iter().filter(|(file, _)| file == CRDS).map(|(_, crd)| crd).collect()
}

/// The schema of the property a `.a.b.c` path names, from `schema` (an
/// object's schema), through `properties` and a map's `additionalProperties`.
fn property<'s>(schema: &'s Value, path: &str) -> Option<&'s Value> {
    let mut at = schema;
    for step in path.trim_start_matches('.').split('.') {
        at = at["properties"].get(step)?;
    }
    Some(at)
}

/// Every `required` name of `schema` and of the schemas under it that is
/// not among its properties: (where, name).
fn required_but_undeclared(schema: &Value, at: &str, found: &mut Vec<String>) {
    if let Some(required) = schema["required"].as_array() {
        for name in required {
            let name = name.as_str().expect("a required name");
            if schema["properties"].get(name).is_none() {
                found.push(format!("{at}: {name}"));
            }
        }
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, sub) in properties {
            required_but_undeclared(sub, &format!("{at}.{name}"), found);
        }
    }
    for key in ["items", "additionalProperties"] {
        if schema[key].is_object() {
            required_but_undeclared(&schema[key], &format!("{at}[]"), found);
        }
    }
}

#[test]
fn four_cluster_scoped_kinds_of_one_group_each_named_plural_dot_group() {
    let crds = crds();
    let kinds: Vec<(&str, &str)> = crds
        .iter()
        .map(|crd| {
            (crd["spec"]["names"]["kind"].as_str().unwrap_or(""), crd["spec"]["names"]["plural"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(kinds, KINDS);
    for crd in &crds {
        let names = &crd["spec"]["names"];
        let plural = names["plural"].as_str().expect("plural");
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(crd["metadata"]["name"], format!("{plural}.{GROUP}").as_str(), "the API server names a CRD so");
        assert_eq!(crd["spec"]["group"], GROUP);
        assert_eq!(crd["spec"]["scope"], "Cluster", "{plural}");
        let kind = names["kind"].as_str().expect("kind");
        assert_eq!(names["singular"], kind.to_lowercase().as_str());
        assert_eq!(names["listKind"], format!("{kind}List").as_str());
        let categories = names["categories"].as_array().expect("categories");
        assert!(categories.iter().any(|c| c == "ipam-delegated"), "{plural}: kubectl get ipam-delegated lists it");
        // Not a plural another IPAM's CRDs or Kubernetes itself use, which kubectl would resolve to either.
        assert!(!["ipamblocks", "ippools", "blockaffinities", "nodes", "networks", "blocks"].contains(&plural));

        let versions = crd["spec"]["versions"].as_array().expect("versions");
        let storage: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
        assert_eq!(storage.len(), 1, "{plural}: one storage version");
        assert!(versions.iter().all(|v| v["served"] == true), "{plural}");
    }
}

#[test]
fn each_schema_requires_only_what_it_declares_and_each_column_shows_a_field_it_has() {
    for crd in crds() {
        let plural = crd["spec"]["names"]["plural"].as_str().expect("plural").to_string();
        for version in crd["spec"]["versions"].as_array().expect("versions") {
            let schema = &version["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object", "{plural}");
            assert!(
                schema["required"].as_array().is_some_and(|r| r.iter().any(|n| n == "spec")),
                "{plural}: spec required"
            );
            let spec = property(schema, ".spec").unwrap_or_else(|| panic!("{plural}: no spec"));
            assert!(spec["required"].as_array().is_some_and(|r| !r.is_empty()), "{plural}: spec requires fields");

            let mut undeclared = Vec::new();
            required_but_undeclared(schema, &plural, &mut undeclared);
            assert!(undeclared.is_empty(), "required but not declared: {undeclared:?}");

            let columns = version["additionalPrinterColumns"].as_array().expect("printer columns");
            assert!(columns.len() >= 3, "{plural}: kubectl get shows what it holds");
            for column in columns {
                let path = column["jsonPath"].as_str().expect("jsonPath");
                if path.starts_with(".metadata.") {
                    continue;
                }
                let field = property(schema, path).unwrap_or_else(|| panic!("{plural}: column {path}: no such field"));
                let shown = column["type"].as_str().expect("a column's type");
                let has = field["type"].as_str().expect("the field's type");
                let fits = shown == has || (shown == "string" && ["array", "string"].contains(&has));
                assert!(fits, "{plural}: column {path} is {shown}, the field {has}");
            }
        }
    }
}

#[test]
fn the_columns_show_blocks_with_their_nodes_and_identities_with_their_addresses() {
    let crds = crds();
    let columns = |plural: &str| -> Vec<String> {
        let crd = crds.iter().find(|c| c["spec"]["names"]["plural"] == plural).expect(plural);
        let version = &crd["spec"]["versions"][0];
        let all = version["additionalPrinterColumns"].as_array().expect("columns");
        all.iter().map(|c| c["jsonPath"].as_str().expect("jsonPath").to_string()).collect()
    };
    for (plural, expected) in [
        ("ipdnetworks", &[".spec.network", ".spec.poolNames"][..]),
        (
            "ipdblocks",
            &[".spec.cidr", ".spec.pool", ".spec.owner.node", ".spec.state", ".spec.owner.shared", ".spec.recordCount"],
        ),
        (
            "ipdidentities",
            &[".spec.identity", ".spec.ifname", ".spec.state", ".spec.node", ".spec.addresses", ".spec.until"],
        ),
        ("ipdnodes", &[".spec.node", ".spec.network", ".spec.db"]),
    ] {
        let shown = columns(plural);
        for path in expected {
            assert!(shown.iter().any(|s| s == path), "{plural}: no column {path} in {shown:?}");
        }
    }
}

/// kubectl get's request: the server's Table of the objects, with the CRD's columns.
const AS_TABLE: Headers = Headers { accept: Some("application/json;as=Table;v=v1;g=meta.k8s.io"), content_type: None };
const MERGE_PATCH: Headers = Headers { accept: None, content_type: Some("application/merge-patch+json") };

fn path(plural: &str) -> String {
    format!("/apis/{GROUP}/v1alpha1/{plural}")
}

/// One valid object of each kind, named as the doc's examples are.
fn valid_objects() -> [(&'static str, Value); 4] {
    let object = |kind: &str, name: &str, spec: Value| json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind, "metadata": {"name": name}, "spec": spec});
    [
        (
            "ipdnetworks",
            object(
                "IPDNetwork",
                "cluster-net",
                json!({"network": "cluster-net", "poolNames": ["cluster4", "cluster6"], "pools": [
                    {"name": "cluster4", "ranges": ["10.80.0.0/16 10.80.0.1-10.80.255.254"], "blockSize": 26},
                    {"name": "cluster6", "ranges": ["fd00:80::/64 fd00:80::1-fd00:80::ffff:ffff:ffff:ffff"], "blockSize": 122}]}),
            ),
        ),
        (
            "ipdblocks",
            object(
                "IPDBlock",
                "cluster-net.cluster4.10-80-212-192-26",
                json!({"network": "cluster-net", "pool": "cluster4", "cidr": "10.80.212.192/26", "state": "Owned",
                    "owner": {"node": "node-a", "db": "5f0c2a9e4b7d41c3a1e0f2b3c4d5e6f7", "claim": 7_340_032_117_i64,
                              "shared": true, "since": "2026-11-23T19:28:52Z"},
                    "recordCount": 1,
                    "records": {"10.80.212.200": {"kind": "allocated", "node": "node-b", "container": "c7", "ifname": "net1"}}}),
            ),
        ),
        (
            "ipdidentities",
            object(
                "IPDIdentity",
                "cluster-net.net1.h---e42cefb0a292e1b0f9922877cb50ec87",
                json!({"network": "cluster-net", "ifname": "net1", "identity": "prod/db-0", "state": "Held",
                    "node": "node-a", "addresses": ["10.80.212.200", "fd00:80::5"], "until": "2026-11-23T19:38:52Z"}),
            ),
        ),
        (
            "ipdnodes",
            object(
                "IPDNode",
                "cluster-net.node-a",
                json!({"network": "cluster-net", "node": "node-a", "db": "5f0c2a9e4b7d41c3a1e0f2b3c4d5e6f7",
                    "offlineGrace": 300, "timeout": 30}),
            ),
        ),
    ]
}

/// `object` with `change` made to it (a JSON merge of `change` into it).
fn changed(object: &Value, change: Value) -> Value {
    fn merge(into: &mut Value, change: Value) {
        match (into, change) {
            (Value::Object(into), Value::Object(change)) => {
                for (key, value) in change {
                    if value.is_null() {
                        into.remove(&key);
                    } else {
                        merge(into.entry(key).or_insert(Value::Null), value);
                    }
                }
            }
            (into, change) => *into = change,
        }
    }
    let mut object = object.clone();
    merge(&mut object, change);
    object
}

#[test]
fn the_api_server_establishes_them_and_enforces_their_schemas_and_shows_their_columns() {
    let api = KubeApi::start();
    let admin = api.admin_kubeconfig();
    let applied = api.apply(&[&crds_file()]);
    for (_, plural) in KINDS {
        assert!(applied.contains(&format!("{plural}.{GROUP}")), "{applied}");
        let crd_path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}");
        let (status, body) = api.request(&admin, "GET", &crd_path, None);
        assert_eq!(status, 200, "{body}");
        let crd: Value = serde_json::from_str(&body).expect("a CRD");
        let conditions = crd["status"]["conditions"].as_array().expect("conditions").clone();
        let established = conditions.iter().any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{plural}: {conditions:?}");
    }

    // One valid object of each kind: accepted, and cluster-scoped (no namespace has them).
    let objects = valid_objects();
    for (plural, object) in &objects {
        let (status, body) = api.request(&admin, "POST", &path(plural), Some(object));
        assert_eq!(status, 201, "{plural}: {body}");
        let namespaced = format!("/apis/{GROUP}/v1alpha1/namespaces/default/{plural}");
        assert_eq!(api.request(&admin, "GET", &namespaced, None).0, 404, "{plural} in a namespace");
    }

    // Invalid ones: refused (422), the message naming what the schema says.
    let [(_, network), (_, block), (_, identity), (_, node)] = &objects;
    let renamed = |object: &Value, name: &str| changed(object, json!({"metadata": {"name": name}}));
    let block2 = renamed(block, "cluster-net.cluster4.10-80-0-0-26");
    let refusals = [
        ("ipdblocks", changed(&block2, json!({"spec": {"recordCount": 2}})), "recordCount is the number of records"),
        ("ipdblocks", changed(&block2, json!({"spec": {"state": "Taken"}})), "spec.state"),
        (
            "ipdblocks",
            changed(&block2, json!({"spec": {"state": "Unclaimed"}})),
            "a block has an owner unless it is Unclaimed",
        ),
        ("ipdblocks", changed(&block2, json!({"spec": {"cidr": "10.80.0.0"}})), "spec.cidr"),
        (
            "ipdblocks",
            changed(&block2, json!({"spec": {"records": {"10.80.0.9": {"kind": "static"}}}})),
            "a record names its node",
        ),
        (
            "ipdidentities",
            changed(&renamed(identity, "cluster-net.net1.db-1"), json!({"spec": {"until": null}})),
            "a held identity has an end",
        ),
        ("ipdnodes", changed(&renamed(node, "cluster-net.node-b"), json!({"spec": {"db": "not-a-db"}})), "spec.db"),
        (
            "ipdnetworks",
            changed(&renamed(network, "other-net"), json!({"spec": {"poolNames": ["cluster4"]}})),
            "poolNames are the names of pools",
        ),
    ];
    for (plural, object, why) in refusals {
        let (status, body) = api.request(&admin, "POST", &path(plural), Some(&object));
        assert_eq!(status, 422, "{plural} {why}: {body}");
        assert!(body.contains(why), "{plural}: the refusal names {why:?}: {body}");
    }

    // A pool's cut never changes once written: an update changing it is refused, one adding a pool is not.
    let (status, body) = api.request(&admin, "GET", &format!("{}/cluster-net", path("ipdnetworks")), None);
    assert_eq!(status, 200, "{body}");
    let stored: Value = serde_json::from_str(&body).expect("an IPDNetwork");
    let mut recut = stored.clone();
    recut["spec"]["pools"][0]["blockSize"] = json!(24);
    let (status, body) = api.request(&admin, "PUT", &format!("{}/cluster-net", path("ipdnetworks")), Some(&recut));
    assert_eq!(status, 422, "a pool cut anew: {body}");
    assert!(body.contains("a pool's definition never changes"), "{body}");
    let mut grown = stored;
    grown["spec"]["pools"]
        .as_array_mut()
        .expect("pools")
        .push(json!({"name": "cluster9", "ranges": ["10.99.0.0/16 10.99.0.1-10.99.255.254"], "blockSize": 26}));
    grown["spec"]["poolNames"].as_array_mut().expect("poolNames").push(json!("cluster9"));
    let (status, body) = api.request(&admin, "PUT", &format!("{}/cluster-net", path("ipdnetworks")), Some(&grown));
    assert_eq!(status, 200, "a pool added: {body}");

    // kubectl get's columns: the server's Table of each kind, and the row of the object made above.
    let expected: [(&str, &[&str], &[Value]); 4] = [
        ("ipdnetworks", &["Name", "Network", "Pools"], &[json!("cluster-net"), json!("cluster-net")]),
        (
            "ipdblocks",
            &["Name", "CIDR", "Pool", "Node", "State", "Shared", "Records"],
            &[
                json!("cluster-net.cluster4.10-80-212-192-26"),
                json!("10.80.212.192/26"),
                json!("cluster4"),
                json!("node-a"),
                json!("Owned"),
                json!(true),
                json!(1),
            ],
        ),
        (
            "ipdidentities",
            &["Name", "Identity", "Interface", "State", "Node", "Addresses", "Held-Until"],
            &[
                json!("cluster-net.net1.h---e42cefb0a292e1b0f9922877cb50ec87"),
                json!("prod/db-0"),
                json!("net1"),
                json!("Held"),
                json!("node-a"),
            ],
        ),
        (
            "ipdnodes",
            &["Name", "Node", "Network", "DB"],
            &[
                json!("cluster-net.node-a"),
                json!("node-a"),
                json!("cluster-net"),
                json!("5f0c2a9e4b7d41c3a1e0f2b3c4d5e6f7"),
            ],
        ),
    ];
    for (plural, columns, cells) in expected {
        let (status, body) = api.request_with(&admin, "GET", &path(plural), None, AS_TABLE);
        assert_eq!(status, 200, "{plural}: {body}");
        let table: Value = serde_json::from_str(&body).expect("a Table");
        assert_eq!(table["kind"], "Table", "{body}");
        let names: Vec<&str> =
            table["columnDefinitions"].as_array().expect("columns").iter().filter_map(|c| c["name"].as_str()).collect();
        assert!(names.starts_with(columns), "{plural}: columns {names:?}");
        let rows = table["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 1, "{plural}: {body}");
        let shown = rows[0]["cells"].as_array().expect("cells");
        assert!(shown.starts_with(cells), "{plural}: row {shown:?}");
    }
    // The pools and an identity's addresses are lists: shown whole.
    let (_, body) = api.request_with(&admin, "GET", &path("ipdnetworks"), None, AS_TABLE);
    assert!(body.contains("cluster4") && body.contains("cluster6") && body.contains("cluster9"), "{body}");
    let (_, body) = api.request_with(&admin, "GET", &path("ipdidentities"), None, AS_TABLE);
    assert!(body.contains("fd00:80::5"), "{body}");
}

/// What the protocol's every write relies on (ipam-ds-cluster/docs/kubernetes.md,
/// "What the API server gives"): an update or a merge patch carrying a
/// resourceVersion that is no longer the object's is refused (409), a create
/// of an existing name too, a delete with preconditions uid and
/// resourceVersion likewise; each change of spec bumps metadata.generation
/// (no status subresource), which a restored backup would show going back.
#[test]
fn the_api_server_compares_and_swaps_one_object_as_the_protocol_needs() {
    let api = KubeApi::start();
    let admin = api.admin_kubeconfig();
    api.apply(&[&crds_file()]);
    let [_, (_, block), ..] = valid_objects();
    let blocks = path("ipdblocks");
    let name = block["metadata"]["name"].as_str().expect("a name").to_string();
    let at = format!("{blocks}/{name}");
    let parse = |body: &str| -> Value { serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}")) };

    let (status, body) = api.request(&admin, "POST", &blocks, Some(&block));
    assert_eq!(status, 201, "{body}");
    let created = parse(&body);
    assert_eq!(created["metadata"]["generation"], 1, "{body}");
    let (status, body) = api.request(&admin, "POST", &blocks, Some(&block));
    assert_eq!(status, 409, "a second create of one name: {body}");
    assert!(body.contains("AlreadyExists"), "{body}");

    // A grant: one record added by a merge patch at the version read.
    let first_rv = created["metadata"]["resourceVersion"].as_str().expect("resourceVersion").to_string();
    let grant = |rv: &str, address: &str, count: u64| {
        json!({"metadata": {"resourceVersion": rv}, "spec": {"recordCount": count,
            "records": {address: {"kind": "allocated", "node": "node-c", "container": "c9", "ifname": "net1"}}}})
    };
    let (status, body) =
        api.request_with(&admin, "PATCH", &at, Some(&grant(&first_rv, "10.80.212.201", 2)), MERGE_PATCH);
    assert_eq!(status, 200, "a grant at the version read: {body}");
    let granted = parse(&body);
    assert_eq!(granted["spec"]["records"].as_object().map(|r| r.len()), Some(2), "{body}");
    assert_eq!(granted["metadata"]["generation"], 2, "a change of spec bumps the generation: {body}");
    // Another node's grant from the same read: refused, nothing written.
    let (status, body) =
        api.request_with(&admin, "PATCH", &at, Some(&grant(&first_rv, "10.80.212.202", 2)), MERGE_PATCH);
    assert_eq!(status, 409, "a grant from a stale read: {body}");
    let (_, body) = api.request(&admin, "GET", &at, None);
    let now = parse(&body);
    assert!(now["spec"]["records"].get("10.80.212.202").is_none(), "{body}");
    assert_eq!(now["metadata"]["generation"], 2, "{body}");

    // An update (PUT) at a stale version: refused.
    let mut stale = now.clone();
    stale["metadata"]["resourceVersion"] = json!(first_rv);
    stale["spec"]["state"] = json!("Released");
    stale["spec"]["released"] = json!({"until": "2026-11-23T19:35:23Z"});
    assert_eq!(api.request(&admin, "PUT", &at, Some(&stale)).0, 409, "a tombstone from a stale read");

    // A delete with preconditions: refused at a stale version or another uid; done at the current one.
    let uid = now["metadata"]["uid"].as_str().expect("uid").to_string();
    let current_rv = now["metadata"]["resourceVersion"].as_str().expect("resourceVersion").to_string();
    let delete = |uid: &str, rv: &str| json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid, "resourceVersion": rv}});
    let (status, body) = api.request(&admin, "DELETE", &at, Some(&delete(&uid, &first_rv)));
    assert_eq!(status, 409, "a delete from a stale read: {body}");
    let (status, body) =
        api.request(&admin, "DELETE", &at, Some(&delete("00000000-0000-0000-0000-000000000000", &current_rv)));
    assert_eq!(status, 409, "a delete of another creation of the name: {body}");
    let (status, body) = api.request(&admin, "DELETE", &at, Some(&delete(&uid, &current_rv)));
    assert_eq!(status, 200, "the delete at the version read: {body}");
    assert_eq!(api.request(&admin, "GET", &at, None).0, 404);

    // Made again: another uid, the generation from 1 again.
    let (status, body) = api.request(&admin, "POST", &blocks, Some(&block));
    assert_eq!(status, 201, "{body}");
    let again = parse(&body);
    assert_ne!(again["metadata"]["uid"].as_str(), Some(uid.as_str()));
    assert_eq!(again["metadata"]["generation"], 1, "{body}");
}
