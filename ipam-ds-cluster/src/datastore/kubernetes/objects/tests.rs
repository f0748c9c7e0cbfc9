use serde_json::{json, Value};

use super::*;

const DB: &str = "5f0c2a9e4b7d41c3a1e0f2b3c4d5e6f7";

fn time(text: &str) -> Time {
    Time::parse(text).expect("a time")
}

fn owner(node: &str, shared: bool) -> Owner {
    Owner { node: node.into(), db: DB.into(), claim: 7_340_032_117, shared, since: time("2026-11-23T19:28:52Z") }
}

fn shared_block() -> BlockSpec {
    BlockSpec {
        network: "cluster-net".into(),
        pool: "cluster4".into(),
        cidr: "10.80.212.192/26".parse().expect("cidr"),
        state: BlockState::Owned(owner("node-a", true)),
        wanted: None,
        recovering: None,
        records: BTreeMap::from([(
            "10.80.212.200".parse().expect("ip"),
            Record::Allocated(NodeRecord {
                node: "node-b".into(),
                container: Some("c7".into()),
                ifname: Some("net1".into()),
                ..NodeRecord::default()
            }),
        )]),
    }
}

fn held_identity() -> IdentitySpec {
    IdentitySpec {
        network: "cluster-net".into(),
        ifname: "net1".into(),
        identity: "prod/db-0".into(),
        state: IdentityState::Held { was: None, until: time("2026-11-23T19:38:52Z") },
        addresses: vec!["10.80.212.200".parse().expect("ip"), "fd00:80::5".parse().expect("ip")],
        sharers: Vec::new(),
    }
}

fn node() -> NodeSpec {
    NodeSpec {
        network: "cluster-net".into(),
        node: "node-a".into(),
        db: DB.into(),
        offline_grace: Duration::from_secs(300),
        timeout: Duration::from_secs(30),
    }
}

fn round_trip<K: Kind + fmt::Debug + PartialEq + Clone>(spec: K) -> Value {
    let object = Object::new(spec);
    let text = serde_json::to_value(&object).expect("serializes");
    let back: Object<K> = serde_json::from_value(text.clone()).expect("deserializes");
    assert_eq!(back, object);
    text
}

/// The objects of tests/crds.rs's valid_objects (which the API server
/// accepts), written from the types: the same JSON but for the labels.
#[test]
fn each_kind_writes_what_the_schema_accepts() {
    let written = round_trip(sample_network());
    assert_eq!(written["apiVersion"], "ipam-delegated.io/v1alpha1");
    assert_eq!(written["kind"], "IPDNetwork");
    assert_eq!(written["metadata"], json!({"name": "cluster-net", "labels": {LABEL_NETWORK: "cluster-net"}}));
    assert_eq!(
        written["spec"],
        json!({"network": "cluster-net", "pools": [
            {"name": "cluster4", "ranges": ["10.80.0.0/16 10.80.0.1-10.80.255.254"], "blockSize": 26},
            {"name": "cluster6", "ranges": ["fd00:80::/64 fd00:80::1-fd00:80::ffff:ffff:ffff:ffff"], "blockSize": 122}],
            "poolNames": ["cluster4", "cluster6"]})
    );

    let written = round_trip(shared_block());
    assert_eq!(written["metadata"]["name"], "cluster-net.cluster4.10-80-212-192-26");
    assert_eq!(
        written["metadata"]["labels"],
        json!({LABEL_KIND: "shared", LABEL_NETWORK: "cluster-net", LABEL_NODE: "node-a", LABEL_POOL: "cluster4"})
    );
    assert_eq!(
        written["spec"],
        json!({"network": "cluster-net", "pool": "cluster4", "cidr": "10.80.212.192/26", "state": "Owned",
            "owner": {"node": "node-a", "db": DB, "claim": 7_340_032_117_i64, "shared": true, "since": "2026-11-23T19:28:52Z"},
            "recordCount": 1,
            "records": {"10.80.212.200": {"kind": "allocated", "node": "node-b", "container": "c7", "ifname": "net1"}}})
    );

    let written = round_trip(held_identity());
    assert_eq!(written["metadata"]["name"], "cluster-net.net1.h---e42cefb0a292e1b0f9922877cb50ec87");
    assert_eq!(
        written["spec"],
        json!({"network": "cluster-net", "ifname": "net1", "identity": "prod/db-0", "state": "Held",
            "addresses": ["10.80.212.200", "fd00:80::5"], "until": "2026-11-23T19:38:52Z"})
    );

    let written = round_trip(node());
    assert_eq!(written["metadata"]["name"], "cluster-net.node-a");
    assert_eq!(
        written["spec"],
        json!({"network": "cluster-net", "node": "node-a", "db": DB, "offlineGrace": 300, "timeout": 30})
    );
}

#[test]
fn every_block_state_and_record_kind_round_trips() {
    let until = time("2026-11-23T20:00:00Z");
    let records = BTreeMap::from([
        (
            "10.80.212.193".parse().expect("ip"),
            Record::Static(NodeRecord { node: "node-b".into(), ..Default::default() }),
        ),
        (
            "10.80.212.194".parse().expect("ip"),
            Record::Lent(NodeRecord { node: "node-a".into(), ..Default::default() }),
        ),
        (
            "10.80.212.195".parse().expect("ip"),
            Record::Borrowed(NodeRecord {
                node: "node-c".into(),
                container: Some("c1".into()),
                ifname: Some("eth0".into()),
                lender: Some("node-a".into()),
                identity: None,
            }),
        ),
        (
            "10.80.212.196".parse().expect("ip"),
            Record::Allocated(NodeRecord {
                node: "node-c".into(),
                identity: Some("prod/db-1".into()),
                ..Default::default()
            }),
        ),
        (
            "10.80.212.197".parse().expect("ip"),
            Record::Identity(IdentityRecord {
                identity: "prod/db-0".into(),
                identity_uid: "6b1f3c1e-8a4e-4a43-9c55-0c1d2e3f4a5b".into(),
                held_until: Some(until),
                node: None,
            }),
        ),
    ]);
    for state in [
        BlockState::Claiming(owner("node-a", false)),
        BlockState::Owned(owner("Node_A", false)),
        BlockState::Released { owner: owner("node-a", false), until },
        BlockState::Unclaimed,
    ] {
        let spec = BlockSpec {
            state: state.clone(),
            wanted: Some(Wanted { node: "node-d".into(), at: until }),
            recovering: Some(until),
            records: records.clone(),
            ..shared_block()
        };
        let written = round_trip(spec.clone());
        assert_eq!(written["spec"]["recordCount"], 5);
        assert_eq!(written["spec"]["owner"].is_null(), state == BlockState::Unclaimed, "{state:?}");
        assert_eq!(written["spec"]["released"].is_null(), !matches!(state, BlockState::Released { .. }), "{state:?}");
        let labels = &written["metadata"]["labels"];
        match spec.state.owner() {
            Some(o) => {
                assert_eq!(labels[LABEL_NODE], names::text(&o.node).as_str());
                assert_eq!(labels[LABEL_KIND], "own");
            }
            None => assert!(labels.get(LABEL_NODE).is_none() && labels.get(LABEL_KIND).is_none(), "{labels}"),
        }
    }
    let empty = round_trip(BlockSpec { records: BTreeMap::new(), ..shared_block() });
    assert_eq!(empty["spec"]["recordCount"], 0);
    assert!(empty["spec"].get("records").is_none());
}

#[test]
fn identities_live_held_and_shared_round_trip() {
    let live = IdentitySpec {
        state: IdentityState::Live(Attachment { node: "node-a".into(), container: "c1".into() }),
        sharers: vec![Attachment { node: "node-b".into(), container: "c2".into() }],
        ..held_identity()
    };
    let written = round_trip(live);
    assert_eq!(written["spec"]["node"], "node-a");
    assert_eq!(written["spec"]["container"], "c1");
    assert!(written["spec"].get("until").is_none());
    assert_eq!(written["metadata"]["labels"][LABEL_NODE], "node-a");
    let held_from = IdentitySpec {
        state: IdentityState::Held {
            was: Some(Attachment { node: "node-a".into(), container: "c1".into() }),
            until: time("2026-11-23T19:38:52Z"),
        },
        ..held_identity()
    };
    round_trip(held_from);
}

#[test]
fn what_the_schema_refuses_does_not_read_as_an_object() {
    let block = serde_json::to_value(Object::new(shared_block())).expect("serializes");
    let mut unowned = block.clone();
    unowned["spec"].as_object_mut().expect("spec").remove("owner");
    assert!(serde_json::from_value::<Object<BlockSpec>>(unowned).is_err(), "Owned without an owner");
    let mut wrong_kind = block.clone();
    wrong_kind["kind"] = "IPDNode".into();
    assert!(serde_json::from_value::<Object<BlockSpec>>(wrong_kind).is_err());
    let mut wrong_version = block;
    wrong_version["apiVersion"] = "ipam-delegated.io/v1".into();
    assert!(serde_json::from_value::<Object<BlockSpec>>(wrong_version).is_err());
    let mut endless = serde_json::to_value(Object::new(held_identity())).expect("serializes");
    endless["spec"].as_object_mut().expect("spec").remove("until");
    assert!(serde_json::from_value::<Object<IdentitySpec>>(endless).is_err(), "held without an end");
}

#[test]
fn metadata_the_server_sets_reads_back_and_an_update_keeps_it() {
    let answer = json!({"apiVersion": API_VERSION, "kind": "IPDNode",
        "metadata": {"name": "cluster-net.node-a", "uid": "6b1f3c1e-8a4e-4a43-9c55-0c1d2e3f4a5b",
            "resourceVersion": "4711", "generation": 3, "creationTimestamp": "2026-11-23T19:28:52Z",
            "managedFields": [{"manager": "kubectl"}], "labels": {LABEL_NETWORK: "cluster-net", LABEL_NODE: "node-a"}},
        "spec": {"network": "cluster-net", "node": "node-a", "db": DB, "offlineGrace": 2.5, "timeout": 30}});
    let read: Object<NodeSpec> = serde_json::from_value(answer).expect("reads");
    assert_eq!(read.metadata.resource_version.as_deref(), Some("4711"));
    assert_eq!(read.metadata.generation, Some(3));
    assert_eq!(read.metadata.creation_timestamp, Some(time("2026-11-23T19:28:52Z")));
    assert_eq!(read.spec.offline_grace, Duration::from_millis(2500));
    let update = read.with_spec(NodeSpec { offline_grace: Duration::from_secs(60), ..read.spec.clone() });
    let written = serde_json::to_value(&update).expect("serializes");
    assert_eq!(written["metadata"]["resourceVersion"], "4711", "an update compares the version read");
    assert_eq!(written["spec"]["offlineGrace"], 60);
}

#[test]
fn times_are_rfc3339_judged_to_the_later_second() {
    assert_eq!(time("1970-01-01T00:00:00Z"), Time(0));
    assert_eq!(time("2023-11-14T22:13:20Z"), Time(1_700_000_000));
    assert_eq!(time("2000-02-29T00:00:00Z"), Time(951_782_400));
    assert_eq!(time("2023-11-14T23:13:20+01:00"), Time(1_700_000_000));
    assert_eq!(time("2023-11-14t22:13:20z"), Time(1_700_000_000));
    assert_eq!(time("2023-11-14T22:13:19.000001Z"), Time(1_700_000_000), "a fraction rounds up");
    assert_eq!(time("2023-11-14T22:13:20.000Z"), Time(1_700_000_000));
    for second in [-86_400 * 365 * 3, -1, 0, 59, 951_782_400, 1_700_000_000, 4_102_444_799] {
        assert_eq!(Time::parse(&Time(second).to_string()), Some(Time(second)), "{second}");
    }
    for bad in [
        "",
        "2023-11-14 22:13:20Z",
        "2023-11-14T22:13:20",
        "2023-02-29T00:00:00Z",
        "2023-13-01T00:00:00Z",
        "2023-11-14T24:00:00Z",
        "2023-11-14T22:13:20.Z",
        "2023-11-14T22:13:20+0100",
        "2023-11-14T22:13:20ZZ",
        "+023-11-14T22:13:20Z",
    ] {
        assert_eq!(Time::parse(bad), None, "{bad:?}");
    }
    assert_eq!(Time(10).plus(Duration::from_millis(1500)), Time(12), "a deadline rounds up");
    assert_eq!(Time::of(UNIX_EPOCH + Duration::from_millis(1_700_000_000_900)), Time(1_700_000_000));
    assert_eq!(Time::of(UNIX_EPOCH - Duration::from_millis(1500)), Time(-2));
    let until = Time(1_700_000_000);
    assert!(!until.is_past_at(Time(1_700_000_000)), "a Date of the same second may be before it");
    assert!(until.is_past_at(Time(1_700_000_001)));
}

#[test]
fn a_block_within_the_limits_is_at_most_2048_records_and_1_mib() {
    let full_records = |count: usize, container: &str| -> BTreeMap<IpAddr, Record> {
        (0..count)
            .map(|n| {
                let address = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + u32::try_from(n).expect("small")));
                let record =
                    NodeRecord { node: "node-b".into(), container: Some(container.into()), ..NodeRecord::default() };
                (address, Record::Allocated(record))
            })
            .collect()
    };
    let block =
        |records| Object::new(BlockSpec { cidr: "10.0.0.0/20".parse().expect("cidr"), records, ..shared_block() });
    let container_id = "0f".repeat(32);
    assert!(block(full_records(MAX_RECORDS, &container_id)).within_limits(), "2048 records of 64-digit ids");
    assert!(!block(full_records(MAX_RECORDS + 1, &container_id)).within_limits(), "2049 records");
    assert!(!block(full_records(1024, &"c".repeat(1024))).within_limits(), "over 1 MiB of JSON");
}
