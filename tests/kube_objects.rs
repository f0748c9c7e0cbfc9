//! ipam-ds-cluster's typed objects of the Kubernetes store
//! (`datastore::kubernetes::objects`) against deploy/kubernetes/crds.yaml on
//! a real API server (kube_harness): each kind in each of its states,
//! serialised from the types, is accepted as created and as updated, and
//! what the server answers and lists reads back into the types equal to what
//! was sent, so the schema and the types cannot drift apart unseen. The
//! names the types give (`datastore::kubernetes::names`) are accepted too.

mod kube_harness;
mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipam_ds_cluster::datastore::kubernetes::objects::{
    collection, sample_network, Attachment, BlockSpec, BlockState, IdentityRecord, IdentitySpec, IdentityState, Kind,
    NetworkSpec, NodeRecord, NodeSpec, Object, Owner, Record, Recovery, Time, Wanted, LABEL_KIND, LABEL_NETWORK,
};
use kube_harness::KubeApi;

const DB: &str = "5f0c2a9e4b7d41c3a1e0f2b3c4d5e6f7";

fn crds_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/crds.yaml")
}

fn time(text: &str) -> Time {
    Time::parse(text).expect("a time")
}

fn owner(node: &str, shared: bool) -> Owner {
    Owner { node: node.into(), db: DB.into(), claim: 7_340_032_117, shared, since: time("2026-11-23T19:28:52Z") }
}

/// One of each record kind, in the block of `cidr` (IPv4 /26 or IPv6 /122).
fn records(cidr: &str) -> BTreeMap<IpAddr, Record> {
    let first: IpAddr = cidr.split('/').next().and_then(|a| a.parse().ok()).expect("a CIDR");
    let address = |n: u8| match first {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + u32::from(n))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + u128::from(n))),
    };
    BTreeMap::from([
        (address(1), Record::Static(NodeRecord { node: "node-b".into(), ..NodeRecord::default() })),
        (address(2), Record::Lent(NodeRecord { node: "node-a".into(), ..NodeRecord::default() })),
        (
            address(3),
            Record::Borrowed(NodeRecord {
                node: "node-c".into(),
                container: Some("0f3c".repeat(16)),
                ifname: Some("net1".into()),
                lender: Some("node-a".into()),
                identity: None,
            }),
        ),
        (
            address(4),
            Record::Allocated(NodeRecord {
                node: "Node_C.example".into(),
                container: Some("c7".into()),
                ifname: Some("eth0".into()),
                lender: None,
                identity: Some("prod/db-1".into()),
            }),
        ),
        (
            address(5),
            Record::Identity(IdentityRecord {
                identity: "prod/db-0".into(),
                identity_uid: "6b1f3c1e-8a4e-4a43-9c55-0c1d2e3f4a5b".into(),
                held_until: Some(time("2026-11-23T19:38:52Z")),
                node: None,
            }),
        ),
    ])
}

/// Each block state, in both families; shared and own; with and without
/// records, `wanted` and `recovering`.
fn blocks() -> Vec<BlockSpec> {
    let until = time("2026-11-23T20:00:00Z");
    let block = |pool: &str, cidr: &str, state: BlockState| BlockSpec {
        network: "cluster-net".into(),
        pool: pool.into(),
        cidr: cidr.parse().expect("a block"),
        state,
        wanted: None,
        recovering: None,
        records: BTreeMap::new(),
    };
    vec![
        BlockSpec {
            records: records("10.80.212.192/26"),
            ..block("cluster4", "10.80.212.192/26", BlockState::Owned(owner("node-a", true)))
        },
        BlockSpec {
            wanted: Some(Wanted { node: "node-d".into(), at: until }),
            ..block("cluster4", "10.80.0.0/26", BlockState::Claiming(owner("Node_A", false)))
        },
        BlockSpec {
            records: records("10.80.1.0/26"),
            ..block("cluster4", "10.80.1.0/26", BlockState::Released { owner: owner("node-a", false), until })
        },
        BlockSpec { records: records("10.80.2.0/26"), ..block("cluster4", "10.80.2.0/26", BlockState::Unclaimed) },
        BlockSpec {
            records: records("fd00:80::a5c7:3088:1e32:d4c0/122"),
            recovering: Some(until),
            ..block("cluster6", "fd00:80::a5c7:3088:1e32:d4c0/122", BlockState::Owned(owner("node-b", true)))
        },
        block("cluster6", "fd00:80::/122", BlockState::Owned(owner("ip-10-0-0-1.ec2.internal", false))),
    ]
}

fn identities() -> Vec<IdentitySpec> {
    let live = Attachment { node: "node-a".into(), container: "c1".into() };
    vec![
        IdentitySpec {
            network: "cluster-net".into(),
            ifname: "net1".into(),
            identity: "prod/db-0".into(),
            state: IdentityState::Held { was: None, until: time("2026-11-23T19:38:52Z") },
            addresses: vec!["10.80.212.197".parse().expect("ip"), "fd00:80::5".parse().expect("ip")],
            sharers: Vec::new(),
        },
        IdentitySpec {
            network: "cluster-net".into(),
            ifname: "eth0".into(),
            identity: "db-1".into(),
            state: IdentityState::Live(live.clone()),
            addresses: Vec::new(),
            sharers: vec![Attachment { node: "node-b".into(), container: "c2".into() }],
        },
        IdentitySpec {
            network: "cluster-net".into(),
            ifname: "eth0".into(),
            identity: "Ünïcode/ID ".repeat(40),
            state: IdentityState::Held { was: Some(live), until: time("2026-11-23T19:38:52Z") },
            addresses: vec!["10.80.212.198".parse().expect("ip")],
            sharers: Vec::new(),
        },
    ]
}

fn nodes() -> Vec<NodeSpec> {
    vec![
        NodeSpec {
            network: "cluster-net".into(),
            node: "node-a".into(),
            db: DB.into(),
            offline_grace: Duration::from_secs(300),
            timeout: Duration::from_secs(30),
        },
        NodeSpec {
            network: "cluster-net".into(),
            node: "Node_A.example".into(),
            db: DB.into(),
            offline_grace: Duration::from_millis(2500),
            timeout: Duration::from_millis(500),
        },
    ]
}

/// The server's answer read into the types: the object sent, with the
/// metadata the server sets.
fn assert_answer_is<K: Kind + Debug + PartialEq>(answer: &str, sent: &Object<K>) -> Object<K> {
    let read: Object<K> =
        serde_json::from_str(answer).unwrap_or_else(|e| panic!("{} {}: {e}: {answer}", K::KIND, sent.metadata.name));
    assert_eq!(read.spec, sent.spec, "{} {}", K::KIND, sent.metadata.name);
    assert_eq!(read.metadata.name, sent.metadata.name);
    assert_eq!(read.metadata.labels, sent.metadata.labels);
    assert!(read.metadata.uid.is_some() && read.metadata.resource_version.is_some(), "{answer}");
    assert!(read.metadata.generation.is_some() && read.metadata.creation_timestamp.is_some(), "{answer}");
    read
}

/// Creates each object of `specs`, reads it back, then updates it to
/// `changed` of it and reads that back: each answer equal to what was sent.
fn create_read_update<K: Kind + Debug + PartialEq + Clone>(
    api: &KubeApi,
    admin: &Path,
    specs: Vec<K>,
    changed: impl Fn(&K) -> K,
) {
    for spec in specs {
        let sent = Object::new(spec);
        let body = serde_json::to_value(&sent).expect("serializes");
        let (status, answer) = api.request(admin, "POST", &collection::<K>(), Some(&body));
        assert_eq!(status, 201, "{} {}: {answer}", K::KIND, sent.metadata.name);
        let created = assert_answer_is(&answer, &sent);
        let at = format!("{}/{}", collection::<K>(), sent.metadata.name);
        let (status, answer) = api.request(admin, "GET", &at, None);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(assert_answer_is(&answer, &sent), created);

        let update = created.with_spec(changed(&created.spec));
        let (status, answer) =
            api.request(admin, "PUT", &at, Some(&serde_json::to_value(&update).expect("serializes")));
        assert_eq!(status, 200, "{} {}: {answer}", K::KIND, sent.metadata.name);
        let updated = assert_answer_is(&answer, &update);
        assert_ne!(updated.metadata.resource_version, created.metadata.resource_version);
        let (_, answer) = api.request(admin, "GET", &at, None);
        assert_eq!(assert_answer_is(&answer, &update), updated);
    }
}

#[test]
fn each_kind_in_each_state_is_accepted_and_reads_back_as_sent() {
    let api = KubeApi::start();
    let admin = api.admin_kubeconfig();
    api.apply(&[&crds_file()]);

    create_read_update(&api, &admin, vec![sample_network()], |spec| NetworkSpec {
        recovery: Some(Recovery {
            node: "node-a".into(),
            seen: "block 10.80.0.0/26 at generation 2, written at 5".into(),
            until: time("2026-11-23T20:10:00Z"),
        }),
        ..spec.clone()
    });
    // Every block state to the next one the protocol writes: a claim
    // confirmed, a tombstone claimed, an owned block given back.
    create_read_update(&api, &admin, blocks(), |spec| {
        let state = match &spec.state {
            BlockState::Claiming(o) => BlockState::Owned(o.clone()),
            BlockState::Owned(_) => BlockState::Unclaimed,
            BlockState::Released { .. } | BlockState::Unclaimed => BlockState::Claiming(owner("node-e", false)),
        };
        BlockSpec { state, wanted: None, ..spec.clone() }
    });
    create_read_update(&api, &admin, identities(), |spec| {
        let state = match &spec.state {
            IdentityState::Live(at) => {
                IdentityState::Held { was: Some(at.clone()), until: time("2026-11-23T21:00:00Z") }
            }
            IdentityState::Held { .. } => {
                IdentityState::Live(Attachment { node: "node-b".into(), container: "c9".into() })
            }
        };
        IdentitySpec { state, ..spec.clone() }
    });
    create_read_update(&api, &admin, nodes(), |spec| NodeSpec {
        offline_grace: Duration::from_secs(60),
        ..spec.clone()
    });

    // A LIST by the labels the types give: the network's blocks of a node's
    // own, as updated above (the Owned ones given back, so unlabelled).
    let owned_again: Vec<BlockSpec> = blocks()
        .into_iter()
        .filter(|b| matches!(b.state, BlockState::Released { .. } | BlockState::Unclaimed))
        .collect();
    let selector = format!("{LABEL_NETWORK}%3Dcluster-net,{LABEL_KIND}%3Down");
    let (status, answer) =
        api.request(&admin, "GET", &format!("{}?labelSelector={selector}", collection::<BlockSpec>()), None);
    assert_eq!(status, 200, "{answer}");
    let list: serde_json::Value = serde_json::from_str(&answer).expect("a list");
    let items = list["items"].as_array().expect("items").iter().map(|item| {
        serde_json::from_value::<Object<BlockSpec>>(item.clone()).unwrap_or_else(|e| panic!("{e}: {item}"))
    });
    let mut listed: Vec<String> = items.map(|o| o.spec.cidr.to_string()).collect();
    listed.sort();
    // Claiming → Owned, and Released or Unclaimed → Claiming of node-e: own.
    let mut expected: Vec<String> = owned_again.iter().map(|b| b.cidr.to_string()).collect();
    expected.push("10.80.0.0/26".into());
    expected.sort();
    assert_eq!(listed, expected, "{answer}");
}
