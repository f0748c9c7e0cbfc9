//! The project's Kubernetes manifests against a real API server
//! (kube_harness: kube-apiserver over a real etcd, RBAC enforced): the
//! server judges a ServiceAccount's requests by RBAC, and comes back from a
//! kill -9 with its objects and the tokens it issued; every object of
//! deploy/kubernetes/ is accepted, applied as `kubectl apply -f` applies the
//! directory (and each option's); the installer DaemonSet's
//! ServiceAccount may do what the roles bound to it grant, and nothing
//! else, by the server's own answers (SelfSubjectAccessReview) and real
//! requests; and those roles (rbac.yaml) are what the plugins' protocol
//! does on the four kinds of crds.yaml, exactly.

mod kube_harness;
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;

use kube_harness::KubeApi;
use serde_json::{json, Value};
use support::kubeconfig::forged_token;
use support::manifests::{all_objects, files, objects, option_files, plugins_account, OPTIONS};

/// The verbs of a resource, each checked against what the roles grant.
const VERBS: [&str; 8] = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

/// A namespace and a ServiceAccount bound to nothing.
const PROBE: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: rbac-probe
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: nobody
  namespace: rbac-probe
";

#[test]
fn the_api_server_judges_a_service_accounts_requests_by_rbac() {
    let api = KubeApi::start();
    let admin = api.admin_kubeconfig();
    api.apply_yaml(PROBE);
    let nobody = api.service_account_kubeconfig("rbac-probe", "nobody");

    // The token is the account's.
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (status, body) =
        api.request(&nobody, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(&review));
    assert_eq!(status, 201, "who am I, with the ServiceAccount's token: {body}");
    let who: Value = serde_json::from_str(&body).expect("a SelfSubjectReview");
    assert_eq!(who["status"]["userInfo"]["username"], "system:serviceaccount:rbac-probe:nobody", "{body}");

    // Bound to nothing: refused (403, not 401: authenticated, not authorized); the admin is not.
    assert_eq!(api.request(&nobody, "GET", "/api/v1/nodes", None).0, 403, "nobody lists nodes");
    assert_eq!(api.request(&nobody, "GET", "/api/v1/namespaces/rbac-probe/secrets", None).0, 403);
    assert_eq!(api.request(&admin, "GET", "/api/v1/nodes", None).0, 200, "the admin lists nodes");
    assert!(!api.can_i(&nobody, "list", "nodes", None));

    // A token the server did not issue is no one's (401).
    let forged = forged_token(&nobody, api.dir());
    assert_eq!(api.request(&forged, "GET", "/api/v1/nodes", None).0, 401, "a forged token");

    // Bound to a role that grants listing nodes: that, and only that.
    api.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: node-lister
rules:
  - apiGroups: [\"\"]
    resources: [nodes]
    verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: nobody-lists-nodes
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: node-lister
subjects:
  - kind: ServiceAccount
    name: nobody
    namespace: rbac-probe
",
    );
    assert_eq!(api.request(&nobody, "GET", "/api/v1/nodes", None).0, 200, "nobody lists nodes once bound");
    assert!(api.can_i(&nobody, "list", "nodes", None));
    assert!(!api.can_i(&nobody, "delete", "nodes", None));
    assert_eq!(api.request(&nobody, "DELETE", "/api/v1/nodes/node-a", None).0, 403);
    assert_eq!(api.request(&nobody, "GET", "/api/v1/namespaces/rbac-probe/secrets", None).0, 403);
}

#[test]
fn the_api_server_restarts_on_its_data_keeping_its_objects_and_the_tokens_it_issued() {
    let mut api = KubeApi::start();
    api.apply_yaml(PROBE);
    let nobody = api.service_account_kubeconfig("rbac-probe", "nobody");
    let server = api.server();
    api.stop();
    api.restart();
    assert_eq!(api.server(), server, "the same port");
    let (status, body) =
        api.request(&api.admin_kubeconfig(), "GET", "/api/v1/namespaces/rbac-probe/serviceaccounts/nobody", None);
    assert_eq!(status, 200, "the ServiceAccount made before the restart: {body}");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (status, body) =
        api.request(&nobody, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(&review));
    assert_eq!(status, 201, "a token issued before the restart: {body}");
}

#[test]
fn every_manifest_of_deploy_kubernetes_is_accepted() {
    let api = KubeApi::start();
    let applied = apply_the_manifests(&api);
    for (file, object) in all_objects() {
        assert!(
            was_applied(&applied, &object),
            "{file}: {} {} is not among what was applied:\n{applied}",
            object["kind"],
            object["metadata"]["name"]
        );
    }
    // Stored as written: the installer's DaemonSet, read back.
    let (status, body) = api.request(
        &api.admin_kubeconfig(),
        "GET",
        "/apis/apps/v1/namespaces/ipam-delegated/daemonsets/ipam-delegated",
        None,
    );
    assert_eq!(status, 200, "{body}");
    let stored: Value = serde_json::from_str(&body).expect("a DaemonSet");
    assert_eq!(stored["spec"]["template"]["spec"]["containers"][0]["name"], "install-cni", "{body}");
}

#[test]
fn the_installers_service_account_may_do_what_its_roles_grant_and_no_more() {
    let api = KubeApi::start();
    apply_the_manifests(&api);
    let (namespace, account) = plugins_account();
    let defined = objects().iter().any(|(_, o)| {
        o["kind"] == "ServiceAccount" && o["metadata"]["name"] == account && o["metadata"]["namespace"] == namespace
    });
    if !defined {
        assert_eq!(account, "default", "the installer runs as ServiceAccount {account}, which no manifest defines");
        // What kube-controller-manager does in every namespace (it does not run here).
        api.apply_yaml(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: {namespace}\n"
        ));
    }
    let installer = api.service_account_kubeconfig(&namespace, &account);
    let grants = grants_of(&namespace, &account);
    eprintln!("the installer ({namespace}/{account}) is granted: {grants:#?}");

    // Each (group, resource) a role names: exactly the verbs it grants.
    let mut named = BTreeSet::new();
    for grant in &grants {
        for rule in &grant.rules {
            for key in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !strings(&rule[key]).iter().any(|s| s == "*"),
                    "{}: a wildcard in {key}: every role of the installer names what it grants: {rule}",
                    grant.role
                );
            }
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    named.insert((grant.namespace.clone(), group.clone(), resource));
                }
            }
        }
    }
    for (namespace, group, resource) in &named {
        let name = kubectl_resource(group, resource);
        for verb in VERBS {
            let granted = grants.iter().filter(|g| &g.namespace == namespace).any(|g| {
                g.rules.iter().any(|r| {
                    rule_has(r, "apiGroups", group)
                        && rule_has(r, "resources", resource)
                        && rule_has(r, "verbs", verb)
                        && strings(&r["resourceNames"]).is_empty()
                })
            });
            assert_eq!(
                api.can_i(&installer, verb, &name, namespace.as_deref()),
                granted,
                "may the installer {verb} {name} (in {namespace:?})? its roles say {granted}"
            );
        }
    }
    // What it lists, it lists for real.
    for (namespace, group, resource) in &named {
        let Some(path) = list_path(group, resource, namespace.as_deref()) else { continue };
        if api.can_i(&installer, "list", &kubectl_resource(group, resource), namespace.as_deref()) {
            let (status, body) = api.request(&installer, "GET", &path, None);
            assert_eq!(status, 200, "the installer lists {path}: {body}");
        }
    }

    // Never, whatever a role says: secrets, pods, nodes, RBAC, tokens.
    let role_names: Vec<String> = grants.iter().map(|g| g.role.clone()).collect();
    let mut never = vec![
        ("GET", "/api/v1/secrets".to_string()),
        ("GET", format!("/api/v1/namespaces/{namespace}/secrets")),
        ("GET", format!("/api/v1/namespaces/{namespace}/secrets/ipam-delegated-etcd")),
        ("POST", "/api/v1/namespaces/default/pods".to_string()),
        ("DELETE", "/api/v1/nodes/node-a".to_string()),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_string()),
        ("POST", format!("/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token")),
    ];
    for role in &role_names {
        never.push(("PATCH", format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")));
    }
    for (method, path) in never {
        let body = (method != "GET" && method != "DELETE").then(|| json!({}));
        let (status, answer) = api.request(&installer, method, &path, body.as_ref());
        assert_eq!(status, 403, "the installer's {method} {path}: {answer}");
    }
}

/// The kinds of crds.yaml, as RBAC names them.
const PLUGIN_RESOURCES: [&str; 4] = ["ipdnetworks", "ipdblocks", "ipdidentities", "ipdnodes"];
/// What the plugins do with them (ipam-ds-cluster/docs/kubernetes.md, "RBAC").
const PLUGIN_VERBS: [&str; 5] = ["get", "list", "create", "update", "delete"];

/// The plugins' ServiceAccount of rbac.yaml, by the API server's own
/// answers: each verb the protocol uses on each of the four kinds, and
/// nothing else (no watch, no deletecollection, no other resource or group),
/// wherever asked; then a real object made, changed and deleted with its
/// token, and the refusals made for real.
#[test]
fn the_plugins_service_account_may_do_what_the_protocol_does_and_no_more() {
    let api = KubeApi::start();
    let deploy = support::manifests::deploy_dir();
    let applied = api.apply(&[&deploy.join("namespace.yaml"), &deploy.join("crds.yaml"), &deploy.join("rbac.yaml")]);
    assert!(applied.contains("applied ClusterRoleBinding ipam-delegated"), "{applied}");
    let (namespace, account) = plugins_account();
    assert_eq!((namespace.as_str(), account.as_str()), ("ipam-delegated", "ipam-delegated"), "the DaemonSet's account");
    let plugins = api.service_account_kubeconfig(&namespace, &account);

    let mut wrong = Vec::new();
    for resource in PLUGIN_RESOURCES {
        let name = format!("{resource}.ipam-delegated.io");
        for verb in VERBS {
            let expected = PLUGIN_VERBS.contains(&verb);
            // Cluster-scoped kinds: what a namespace says does not change it.
            for scope in [None, Some("default")] {
                if api.can_i(&plugins, verb, &name, scope) != expected {
                    wrong.push(format!("{verb} {name} (in {scope:?}): expected {expected}"));
                }
            }
        }
        for sub in ["status", "scale"] {
            if api.can_i(&plugins, "update", &format!("{name}/{sub}"), None) {
                wrong.push(format!("update {name}/{sub}: granted"));
            }
        }
    }
    // Other resources, of the core group, of Kubernetes' and of other CNI
    // projects' groups (a group's name is not a prefix of another's).
    // The reaper's (`cluster reap`): the cluster's nodes listed, nothing
    // else of them; its Lease read, created and updated in the namespace
    // only; the kubelets' Leases in kube-node-lease read by name (whether a
    // node without its Node object still beats), nothing else.
    for verb in VERBS {
        for scope in [None, Some("default")] {
            if api.can_i(&plugins, verb, "nodes", scope) != (verb == "list") {
                wrong.push(format!("{verb} nodes (in {scope:?}): expected {}", verb == "list"));
            }
        }
        for scope in [namespace.as_str(), "default", "kube-system", "kube-node-lease"] {
            let expected = (scope == namespace && ["get", "create", "update"].contains(&verb))
                || (scope == "kube-node-lease" && verb == "get");
            if api.can_i(&plugins, verb, "leases.coordination.k8s.io", Some(scope)) != expected {
                wrong.push(format!("{verb} leases (in {scope}): expected {expected}"));
            }
        }
    }
    // Pods: listed by the node agent (field-selected by its node), one read
    // by name for ipam.sticky "identity": "auto" (a KubeVirt VM's pod's
    // label), in any namespace; nothing else of them.
    for verb in VERBS {
        let expected = ["get", "list"].contains(&verb);
        for scope in [None, Some("default"), Some(namespace.as_str())] {
            if api.can_i(&plugins, verb, "pods", scope) != expected {
                wrong.push(format!("{verb} pods (in {scope:?}): expected {expected}"));
            }
        }
    }
    let others = [
        "secrets",
        "configmaps",
        "serviceaccounts",
        "namespaces",
        "events",
        "daemonsets.apps",
        "clusterroles.rbac.authorization.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "ipamblocks.crd.projectcalico.org",
        "ippools.whereabouts.cni.cncf.io",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "ipdblocks.ipam-delegated.example",
        "ipdblocks",
    ];
    for resource in others {
        for verb in VERBS {
            for scope in [None, Some(namespace.as_str())] {
                if api.can_i(&plugins, verb, resource, scope) {
                    wrong.push(format!("{verb} {resource} (in {scope:?}): granted"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "the plugins' ServiceAccount, by the API server's answers:\n  {}", wrong.join("\n  "));

    // For real: an IPDNode created, read, listed, changed (an update at the
    // resourceVersion read) and deleted with a precondition, as the
    // protocol does; a merge patch, which it never sends, refused.
    let nodes = "/apis/ipam-delegated.io/v1alpha1/ipdnodes";
    let node = json!({
        "apiVersion": "ipam-delegated.io/v1alpha1",
        "kind": "IPDNode",
        "metadata": {"name": "rbac-probe.n1"},
        "spec": {"network": "rbac-probe", "node": "n1", "db": "0123456789abcdef0123456789abcdef", "offlineGrace": 30, "timeout": 5}
    });
    let (status, body) = api.request(&plugins, "POST", nodes, Some(&node));
    assert_eq!(status, 201, "the plugins create an IPDNode: {body}");
    let (status, body) = api.request(&plugins, "GET", &format!("{nodes}/rbac-probe.n1"), None);
    assert_eq!(status, 200, "the plugins read it: {body}");
    let mut read: Value = serde_json::from_str(&body).expect("an IPDNode");
    assert_eq!(api.request(&plugins, "GET", nodes, None).0, 200, "the plugins list IPDNodes");
    read["spec"]["offlineGrace"] = json!(60);
    let (status, body) = api.request(&plugins, "PUT", &format!("{nodes}/rbac-probe.n1"), Some(&read));
    assert_eq!(status, 200, "the plugins update it: {body}");
    let updated: Value = serde_json::from_str(&body).expect("an IPDNode");
    let version = updated["metadata"]["resourceVersion"].clone();
    let patch = json!({"metadata": {"resourceVersion": version}, "spec": {"offlineGrace": 90}});
    let merge = kube_harness::Headers { content_type: Some("application/merge-patch+json"), ..Default::default() };
    let (status, body) = api.request_with(&plugins, "PATCH", &format!("{nodes}/rbac-probe.n1"), Some(&patch), merge);
    assert_eq!(status, 403, "the plugins never patch: {body}");
    let delete = json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": updated["metadata"]["uid"], "resourceVersion": version}
    });
    let (status, body) = api.request(&plugins, "DELETE", &format!("{nodes}/rbac-probe.n1"), Some(&delete));
    assert_eq!(status, 200, "the plugins delete it, preconditioned: {body}");

    // The agent's list of its node's pods, for real.
    let (status, body) = api.request(&plugins, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", None);
    assert_eq!(status, 200, "the agent lists its node's pods: {body}");

    // Refused for real: a watch, a collection's delete, a secret, one pod, a node.
    for (method, path) in [
        ("GET", format!("{nodes}?watch=true")),
        ("DELETE", nodes.to_string()),
        ("GET", format!("/api/v1/namespaces/{namespace}/secrets")),
        ("GET", "/api/v1/pods?watch=true".to_string()),
        ("GET", "/api/v1/nodes/n1".to_string()),
        ("GET", "/api/v1/nodes?watch=true".to_string()),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases".to_string()),
    ] {
        let (status, body) = api.request(&plugins, method, &path, None);
        assert_eq!(status, 403, "the plugins' {method} {path}: {body}");
    }
    // The reaper's for real: the nodes listed, its Lease made and renewed.
    let (status, body) = api.request(&plugins, "GET", "/api/v1/nodes", None);
    assert_eq!(status, 200, "the reaper lists the nodes: {body}");
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "rbac-probe"},
                       "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 60}});
    let (status, body) = api.request(&plugins, "POST", &leases, Some(&lease));
    assert_eq!(status, 201, "the reaper creates its Lease: {body}");
    let mut renewed: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("a Lease ({e}): {body}"));
    renewed["spec"]["leaseDurationSeconds"] = json!(30);
    let (status, body) = api.request(&plugins, "PUT", &format!("{leases}/rbac-probe"), Some(&renewed));
    assert_eq!(status, 200, "the reaper renews its Lease: {body}");
}

/// Applies Multus's NetworkAttachmentDefinition CRD, which the NADs need,
/// then the default set as `kubectl apply -f deploy/kubernetes/` does: its
/// files in name order, each object in the file's order (a namespaced
/// object before its namespace would be refused); then each option's
/// directory the same way. What was applied, a line each.
fn apply_the_manifests(api: &KubeApi) -> String {
    let multus = support::repo().join("tests/kube/testdata/network-attachment-definition-crd.yaml");
    let mut applied = api.apply(&[&multus]);
    let default_set = files();
    applied += &api.apply(&default_set.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    for option in OPTIONS {
        let files = option_files(option);
        applied += &api.apply(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    }
    applied
}

/// Whether `applied` (what `kube-test-server apply` printed, "applied
/// KIND [NS/]NAME" a line) has `object` (a namespaced one without a
/// namespace goes to `default`).
fn was_applied(applied: &str, object: &Value) -> bool {
    let kind = object["kind"].as_str().expect("kind");
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default");
    applied.lines().filter_map(|l| l.strip_prefix(&format!("applied {kind} "))).any(|rest| {
        rest == format!("{namespace}/{name}") || (object["metadata"]["namespace"].is_null() && rest == name)
    })
}

/// The rules of a role bound to an account, and where they hold (None:
/// cluster-wide, by a ClusterRoleBinding).
#[derive(Debug)]
struct Grant {
    role: String,
    namespace: Option<String>,
    rules: Vec<Value>,
}

/// What the manifests' bindings grant `namespace`/`account`. A binding to
/// a role no manifest defines fails the test.
fn grants_of(namespace: &str, account: &str) -> Vec<Grant> {
    let all = objects();
    let mut grants = Vec::new();
    for (file, binding) in &all {
        let scope = match binding["kind"].as_str() {
            Some("ClusterRoleBinding") => None,
            Some("RoleBinding") => Some(binding["metadata"]["namespace"].as_str().unwrap_or("default").to_string()),
            _ => continue,
        };
        let binds_it = binding["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"].as_str() == Some(namespace)
        });
        if !binds_it {
            continue;
        }
        let (kind, role) = (&binding["roleRef"]["kind"], &binding["roleRef"]["name"]);
        let defined = all.iter().find(|(_, o)| {
            o["kind"] == *kind
                && o["metadata"]["name"] == *role
                && (kind == "ClusterRole" || o["metadata"]["namespace"].as_str() == scope.as_deref())
        });
        let (_, defined) = defined.unwrap_or_else(|| panic!("{file}: binds {kind} {role}, which no manifest defines"));
        let rules = defined["rules"].as_array().cloned().unwrap_or_default();
        grants.push(Grant { role: role.as_str().unwrap_or_default().to_string(), namespace: scope, rules });
    }
    grants
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
}

fn rule_has(rule: &Value, key: &str, what: &str) -> bool {
    strings(&rule[key]).iter().any(|s| s == what)
}

/// RESOURCE[.GROUP][/SUBRESOURCE], as kubectl and `can-i` name it.
fn kubectl_resource(group: &str, resource: &str) -> String {
    let (base, sub) = resource.split_once('/').map_or((resource, None), |(b, s)| (b, Some(s)));
    let mut name = base.to_string();
    if !group.is_empty() {
        name = format!("{name}.{group}");
    }
    if let Some(sub) = sub {
        name = format!("{name}/{sub}");
    }
    name
}

/// The URL path that lists `resource` of `group` (in `namespace`), for the
/// core group and the CustomResourceDefinitions of the manifests; None
/// for a subresource or another group.
fn list_path(group: &str, resource: &str, namespace: Option<&str>) -> Option<String> {
    if resource.contains('/') {
        return None;
    }
    let prefix = if group.is_empty() {
        "/api/v1".to_string()
    } else {
        let all = objects();
        let (_, crd) = all.iter().find(|(_, o)| {
            o["kind"] == "CustomResourceDefinition"
                && o["spec"]["group"] == group
                && o["spec"]["names"]["plural"] == resource
        })?;
        let versions = crd["spec"]["versions"].as_array()?;
        let version = versions.iter().find(|v| v["storage"] == true)?["name"].as_str()?;
        format!("/apis/{group}/{version}")
    };
    Some(match namespace {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{resource}"),
        None => format!("{prefix}/{resource}"),
    })
}
