//! What the Kubernetes store decides without a server: names of records,
//! records in both shapes, and the versions that writes compare.

use super::blocks::Step;
use super::objects::{NodeRecord, Record};
use super::shapes::{etcd_record, parse_record_key};
use super::*;
use crate::records::{AddressRecord, Kind};

fn block_object(state: BlockState, records: &[(&str, Record)]) -> Object<BlockSpec> {
    Object::new(BlockSpec {
        network: "cnet".into(),
        pool: "blue".into(),
        cidr: "10.50.0.32/27".parse().unwrap(),
        state,
        wanted: None,
        recovering: None,
        records: records.iter().map(|(a, r)| (a.parse().unwrap(), r.clone())).collect(),
    })
}

fn owner(claim: i64) -> Owner {
    Owner { node: "n1".into(), db: "0123456789abcdef0123456789abcdef".into(), claim, shared: true, since: Time(1000) }
}

fn node_record(node: &str, container: &str) -> NodeRecord {
    NodeRecord {
        node: node.into(),
        container: Some(container.into()),
        ifname: Some("eth0".into()),
        ..NodeRecord::default()
    }
}

#[test]
fn record_keys_name_pool_block_and_address_and_read_back() {
    for (pool, block, address) in [
        ("blue", "10.50.0.32/27", "10.50.0.33"),
        ("pool.with-dots_and-dashes", "10.0.0.0/8", "10.255.255.254"),
        ("v6", "fd00:80::a5c7:3088:1e32:d4c0/122", "fd00:80::a5c7:3088:1e32:d4c1"),
    ] {
        let (block, address): (IpNet, IpAddr) = (block.parse().unwrap(), address.parse().unwrap());
        let key = record_key(pool, block, address);
        let (p, b, a) = parse_record_key(&key).unwrap_or_else(|_| panic!("{key} does not read"));
        assert_eq!((p.as_str(), b, a), (pool, block, address), "{key}");
    }
    assert_eq!(
        record_key("blue", "10.50.0.32/27".parse().unwrap(), "10.50.0.33".parse().unwrap()),
        "ipdblocks/blue/10.50.0.32/27/10.50.0.33"
    );
    for bad in [
        "/ipam-delegated/v1/cnet/blue/addrs/10.50.0.32-27/10.50.0.33",
        "ipdblocks/blue/10.50.0.33",
        "ipdblocks/x/10.0.0.0/33/10.0.0.1",
    ] {
        let Err(Error::Failed(e)) = parse_record_key(bad) else { panic!("{bad} read as a record's key") };
        assert!(e.msg.contains(bad), "{}", e.msg);
    }
}

#[test]
fn records_keep_what_the_node_wrote_in_both_shapes() {
    let written = [
        AddressRecord {
            kind: Kind::Static,
            node: "n1".into(),
            container: "c1".into(),
            ifname: "eth0".into(),
            ..AddressRecord::default()
        },
        AddressRecord { kind: Kind::Lent, node: "n2".into(), ..AddressRecord::default() },
        AddressRecord {
            kind: Kind::Borrowed,
            node: "n3".into(),
            container: "c3".into(),
            ifname: "net1".into(),
            lender: "n2".into(),
            ..AddressRecord::default()
        },
        AddressRecord {
            kind: Kind::Allocated,
            node: "n4".into(),
            container: "c4".into(),
            ifname: "eth0".into(),
            identity: "ns/db-0".into(),
            ..AddressRecord::default()
        },
    ];
    for w in written {
        let value = to_bytes(&w);
        let record = address_record(&value, "blue").unwrap();
        assert_eq!(etcd_record(&record), w);
        assert!(same_record(&record, &value), "{w:?}");
        assert_eq!(record_versioned(&record).value, value, "the value read is the value written");
    }
    let lent = address_record(&to_bytes(&written_lent("n2")), "blue").unwrap();
    assert!(!same_record(&lent, &to_bytes(&written_lent("n9"))), "another node's record is not the one written");
    assert!(matches!(address_record(b"{\"kind\":\"stolen\"}", "blue"), Err(Error::Failed(_))));
}

fn written_lent(node: &str) -> AddressRecord {
    AddressRecord { kind: Kind::Lent, node: node.into(), ..AddressRecord::default() }
}

#[test]
fn a_blocks_version_is_its_claim_while_the_claim_stands() {
    let now = Time(5000);
    let owned = block_object(BlockState::Owned(owner(77)), &[]);
    let entry = KubeStore::block_entry(&owned, now).expect("an owned block has a record");
    // What a grant in this node's own shared block compares (node/sharing.rs).
    assert_eq!(entry.stored.version, Version::unwritten_since(77));
    assert_eq!(entry.stored.created, 77);
    let record: BlockRecord = serde_json::from_slice(&entry.stored.value).unwrap();
    assert_eq!((record.node.as_str(), record.at, record.shared, record.released), ("n1", 1000, true, false));
    // Records written in it do not change the block's record.
    let busy = block_object(BlockState::Owned(owner(77)), &[("10.50.0.33", Record::Allocated(node_record("n2", "c")))]);
    assert_eq!(KubeStore::block_entry(&busy, now).unwrap().stored.version, entry.stored.version);
    // Claimed again: another version.
    let again = block_object(BlockState::Owned(owner(78)), &[]);
    assert_ne!(KubeStore::block_entry(&again, now).unwrap().stored.version, entry.stored.version);
}

#[test]
fn a_released_block_is_its_nodes_no_more_and_nobodys_once_its_end_is_past() {
    let released = block_object(BlockState::Released { owner: owner(77), until: Time(5000) }, &[]);
    let until_then = KubeStore::block_entry(&released, Time(5000)).expect("released until 5000");
    let record: BlockRecord = serde_json::from_slice(&until_then.stored.value).unwrap();
    assert!(record.released);
    assert_ne!(until_then.stored.version, Version::unwritten_since(77), "a grant comparing the claim is refused");
    assert!(!KubeStore::nobodys(Some(&released), Time(5000)), "a Date of the end's second is not past it");
    assert!(KubeStore::block_entry(&released, Time(5001)).is_none());
    assert!(KubeStore::nobodys(Some(&released), Time(5001)));
    let unclaimed = block_object(BlockState::Unclaimed, &[("10.50.0.40", Record::Static(node_record("n2", "c")))]);
    assert!(KubeStore::nobodys(Some(&unclaimed), Time(0)) && KubeStore::nobodys(None, Time(0)));
}

#[test]
fn an_emptied_block_nobody_owns_is_deleted_and_an_owned_one_kept() {
    let a: IpAddr = "10.50.0.40".parse().unwrap();
    let unclaimed = block_object(BlockState::Unclaimed, &[("10.50.0.40", Record::Static(node_record("n2", "c")))]);
    assert!(matches!(KubeStore::without(&unclaimed, &[a], Time(0)), Step::Delete(())));
    let owned = block_object(BlockState::Owned(owner(5)), &[("10.50.0.40", Record::Static(node_record("n2", "c")))]);
    match KubeStore::without(&owned, &[a], Time(0)) {
        Step::Write(spec, ()) => assert!(spec.records.is_empty() && matches!(spec.state, BlockState::Owned(_))),
        _ => panic!("an owned block is kept"),
    }
}

#[test]
fn versions_are_digests_of_what_is_compared() {
    assert_eq!(digest_version(&[b"a", b"bc"]), digest_version(&[b"a", b"bc"]));
    assert_ne!(digest_version(&[b"a", b"bc"]), digest_version(&[b"ab", b"c"]), "parts are delimited");
    assert!(digest_version(&[b""]).0 > 0);
    let mut places = std::collections::HashSet::new();
    for node in ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"] {
        let at = spread(node, 4);
        assert!(at < 4);
        places.insert(at);
    }
    assert!(places.len() > 1, "nodes ask different owners first");
}
