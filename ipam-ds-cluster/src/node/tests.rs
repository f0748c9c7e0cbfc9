//! `node/` over an etcd in memory ([`crate::datastore::memory`]): what two
//! nodes racing, a kill between two steps and an outage make of ADD,
//! without a server.

use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

use serde_json::json;
use shared::args::Attachment;
use shared::pool::Pool;
use shared::result::IpamResult;
use shared::store::{open_for_delegate, StoreHandle};
use shared::{Code, Result};

use super::{free_addresses, Session};
use crate::datastore::etcd::EtcdStore;
use crate::datastore::memory::Memory;
use crate::rows::{ClusterRows, NodeBlock};
use crate::settings::Settings;

const NET: &str = "net";

/// One block of four addresses: 10.0.0.4/30.
fn one_block_pool() -> Vec<Pool> {
    let pool = json!({
        "name": "blue",
        "ranges": [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.4", "rangeEnd": "10.0.0.7"}],
        "blockSize": 30
    });
    vec![Pool::from_json(&pool, "pools[0]").unwrap()]
}

struct TestNode {
    settings: Settings,
    store: StoreHandle,
    _dir: tempfile::TempDir,
}

impl TestNode {
    fn new(name: &str, offline_grace: u64) -> TestNode {
        TestNode::sharing(name, offline_grace, "never")
    }

    /// A node whose blocks are shared as `share_blocks` says.
    fn sharing(name: &str, offline_grace: u64, share_blocks: &str) -> TestNode {
        let settings = Settings::from_value(&json!({
            "etcd": {"endpoints": ["http://127.0.0.1:9"]},
            "node": name,
            "offlineGrace": offline_grace,
            "shareBlocks": share_blocks
        }))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            open_for_delegate(&dir.path().join("node.db"), std::time::Duration::from_secs(5).into()).unwrap();
        crate::tables::make_missing(&mut store).unwrap();
        TestNode { settings, store, _dir: dir }
    }

    /// An ADD of `container` as the stack makes it: this delegate's view,
    /// then the allocator's answer: the address the node leased for it,
    /// else its lease of the view's first free address.
    fn add(&mut self, memory: &Memory, pools: &[Pool], container: &str) -> Result<Option<IpAddr>> {
        let who = Attachment { network: NET.into(), container_id: container.into(), ifname: "eth0".into() };
        let datastore =
            Box::new(EtcdStore::over(memory.client(), crate::settings::DEFAULT_PREFIX, &self.settings, NET));
        let views = {
            let call = Session::over(&self.settings, NET, &mut self.store, datastore)?;
            call.node.settle(call.store);
            call.node.add(call.store, pools, &who, None, &[], &IpamResult::default())?
        };
        self.store.write(|tx| {
            // What the node leased for it already (as ipam-da-sequential answers).
            if let Some(held) = tx.leases_of(&who)?.first() {
                return Ok(Some(held.address));
            }
            for view in &views {
                if let Some(&address) = free_addresses(tx, view, 1)?.first() {
                    tx.insert_lease(address, &view.name, &who)?;
                    return Ok(Some(address));
                }
            }
            Ok(None)
        })
    }

    fn blocks(&mut self) -> Vec<NodeBlock> {
        self.store.read(|tx| tx.network_blocks(NET)).unwrap()
    }
}

/// The nodes named in the block records the store holds.
fn owners(memory: &Memory) -> Vec<String> {
    memory
        .dump("/ipam-delegated/v1/net/blue/blocks/")
        .into_iter()
        .map(|(_, value)| {
            serde_json::from_str::<serde_json::Value>(&value).unwrap()["node"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn two_nodes_racing_for_the_last_block_get_it_once() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let b = Rc::new(RefCell::new(TestNode::new("node-b", 300)));
    let b_got = Rc::new(RefCell::new(None));
    {
        let (memory, pools, b, b_got) = (memory.clone(), pools.clone(), b.clone(), b_got.clone());
        // node-b claims between node-a's read of the pool and its claim.
        memory.clone().before_write("/blocks/", move || {
            *b_got.borrow_mut() = Some(b.borrow_mut().add(&memory, &pools, "cb"));
        });
    }
    let mut a = TestNode::new("node-a", 300);
    let a_got = a.add(&memory, &pools, "ca");
    let b_got = b_got.borrow_mut().take().expect("node-b's ADD ran");
    assert_eq!(b_got.unwrap(), Some("10.0.0.4".parse().unwrap()));
    assert_eq!(a_got.unwrap_err().code, Code::NoFreeAddress, "the only block is node-b's");
    assert_eq!(owners(&memory), ["node-b"]);
    assert!(a.blocks().is_empty(), "node-a recorded no block");
    assert_eq!(b.borrow_mut().blocks().len(), 1);
}

#[test]
fn a_claim_whose_answer_a_kill_lost_is_adopted_and_never_handed_to_another() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let (mut a, mut b) = (TestNode::new("node-a", 300), TestNode::new("node-b", 300));
    memory.lose_answer("/blocks/");
    let lost = a.add(&memory, &pools, "ca").unwrap_err();
    assert_eq!(lost.code, Code::TryAgainLater, "{lost:?}");
    assert_eq!(owners(&memory), ["node-a"], "the claim was made");
    assert!(a.blocks().is_empty(), "but not recorded by the call that made it");
    assert_eq!(b.add(&memory, &pools, "cb").unwrap_err().code, Code::NoFreeAddress, "node-a's claim holds");
    assert_eq!(a.add(&memory, &pools, "ca").unwrap(), Some("10.0.0.4".parse().unwrap()), "adopted at the next claim");
    assert_eq!(a.blocks().len(), 1);
    assert_eq!(owners(&memory), ["node-a"]);
}

/// Makes every confirmation of `node`'s blocks `ms` older.
fn age_confirmations(node: &mut TestNode, ms: i64) {
    node.store
        .write(|tx| {
            for mut b in tx.network_blocks(NET)? {
                b.confirmed -= ms;
                tx.put_node_block(&b)?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn without_the_store_a_node_allocates_in_blocks_confirmed_within_offline_grace() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let mut a = TestNode::new("node-a", 300);
    assert_eq!(a.add(&memory, &pools, "c1").unwrap(), Some("10.0.0.4".parse().unwrap()));
    // Past the confirmation cache (so the ADD asks the store), within offlineGrace.
    age_confirmations(&mut a, 5_000);
    memory.set_down(true);
    assert_eq!(a.add(&memory, &pools, "c2").unwrap(), Some("10.0.0.5".parse().unwrap()));
}

#[test]
fn without_the_store_past_offline_grace_add_is_11() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let mut a = TestNode::new("node-a", 3);
    assert_eq!(a.add(&memory, &pools, "c1").unwrap(), Some("10.0.0.4".parse().unwrap()));
    age_confirmations(&mut a, 5_000);
    memory.set_down(true);
    let e = a.add(&memory, &pools, "c2").unwrap_err();
    assert_eq!(e.code, Code::TryAgainLater);
    assert!(e.msg.contains("confirmed within offlineGrace"), "{}", e.msg);
    memory.set_down(false);
    assert_eq!(a.add(&memory, &pools, "c2").unwrap(), Some("10.0.0.5".parse().unwrap()), "confirmed again");
}

/// The addresses recorded in the store, with the container each names.
fn address_records(memory: &Memory) -> Vec<(String, String)> {
    memory
        .dump("/ipam-delegated/v1/net/blue/addrs/")
        .into_iter()
        .map(|(key, value)| {
            let record: serde_json::Value = serde_json::from_str(&value).unwrap();
            let address = key.rsplit('/').next().unwrap().to_string();
            (address, record["container"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

#[test]
fn two_nodes_granting_the_last_address_of_a_shared_block_get_it_once() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let a = Rc::new(RefCell::new(TestNode::sharing("node-a", 300, "always")));
    for (container, address) in [("a1", "10.0.0.4"), ("a2", "10.0.0.5"), ("a3", "10.0.0.6")] {
        assert_eq!(a.borrow_mut().add(&memory, &pools, container).unwrap(), Some(address.parse().unwrap()));
    }
    let a_got = Rc::new(RefCell::new(None));
    {
        let (memory, pools, a, a_got) = (memory.clone(), pools.clone(), a.clone(), a_got.clone());
        // node-a is granted the last address between node-b's read of the
        // block and its grant.
        memory.clone().before_write("/addrs/", move || {
            *a_got.borrow_mut() = Some(a.borrow_mut().add(&memory, &pools, "a4"));
        });
    }
    let mut b = TestNode::sharing("node-b", 300, "always");
    let b_got = b.add(&memory, &pools, "b1");
    assert_eq!(a_got.borrow_mut().take().expect("node-a's ADD ran").unwrap(), Some("10.0.0.7".parse().unwrap()));
    assert_eq!(b_got.unwrap_err().code, Code::NoFreeAddress);
    let records = address_records(&memory);
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(records.iter().all(|(_, container)| container.starts_with('a')), "{records:?}");
}

#[test]
fn a_grant_whose_answer_a_kill_lost_is_released_by_the_next_call() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let mut a = TestNode::sharing("node-a", 300, "always");
    memory.lose_answer("/addrs/");
    assert_eq!(a.add(&memory, &pools, "a1").unwrap_err().code, Code::TryAgainLater);
    assert_eq!(address_records(&memory), [("10.0.0.4".to_string(), "a1".to_string())], "the grant was made");
    // The next call of the node releases it (its row was left to release)
    // before it grants anew: the address is not stranded.
    assert_eq!(a.add(&memory, &pools, "a2").unwrap(), Some("10.0.0.4".parse().unwrap()));
    assert_eq!(address_records(&memory), [("10.0.0.4".to_string(), "a2".to_string())]);
}

/// A node whose claim found the pool claimed out notes it, and its ADDs
/// within the next moments look in others' shared blocks first: they get
/// the addresses there, and 100 once none is left.
#[test]
fn a_pool_found_claimed_out_is_noted_and_others_shared_blocks_serve() {
    let memory = Memory::default();
    let pools = one_block_pool();
    let mut a = TestNode::sharing("node-a", 300, "always");
    for container in ["a1", "a2"] {
        assert!(a.add(&memory, &pools, container).unwrap().is_some());
    }
    let mut b = TestNode::sharing("node-b", 300, "always");
    let noted = |b: &mut TestNode| b.store.read(|tx| tx.note("claimed-out:net:blue")).unwrap();
    assert_eq!(noted(&mut b), None);
    assert_eq!(b.add(&memory, &pools, "b1").unwrap(), Some("10.0.0.6".parse().unwrap()));
    assert!(noted(&mut b).is_some(), "node-b's claim found no block left: noted");
    assert_eq!(b.add(&memory, &pools, "b2").unwrap(), Some("10.0.0.7".parse().unwrap()));
    assert_eq!(b.add(&memory, &pools, "b3").unwrap_err().code, Code::NoFreeAddress);
    let records = address_records(&memory);
    assert_eq!(records.len(), 4, "{records:?}");
}
