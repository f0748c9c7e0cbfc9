//! Holds of workload identities: a released lease of an identity stays held
//! for it, the identity takes it back, a sharer inherits a lease, an expired
//! hold frees its address, and the attachment's own queries never see a hold.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;

use super::super::testing::{ip, owner, temp_store};
use super::super::{runs, unix_now, AllocationStore, Lease, LeaseFilter, Tx};
use crate::addr::from_u128;
use crate::args::Attachment;

const HOUR: Duration = Duration::from_secs(3600);
const DB_0: &str = "prod/db-0";

fn holder(store: &mut AllocationStore, address: &str) -> Option<Lease> {
    store.read(|tx| tx.holder(ip(address))).unwrap()
}

/// `leased_runs` as stored, as address pairs.
fn stored_runs(store: &mut AllocationStore) -> Vec<(IpAddr, IpAddr)> {
    let runs = store.read(runs::stored_runs).unwrap();
    runs.into_iter().map(|(first, last)| (from_u128(first), from_u128(last))).collect()
}

/// The integrity check finds `leased_runs` in step with `leases`.
fn assert_runs_agree(store: &mut AllocationStore) {
    let problems = store.read(|tx| tx.integrity_problems()).unwrap();
    let runs: Vec<&String> = problems.iter().filter(|p| p.contains("leased_runs")).collect();
    assert!(runs.is_empty(), "{runs:?}");
}

/// Leases `address` of pool `pool` to `who`, tied to `identity`, as an
/// allocator's transaction does.
fn lease(tx: &Tx, address: &str, pool: &str, who: &Attachment, identity: Option<&str>) -> crate::error::Result<()> {
    tx.insert_lease(ip(address), pool, who)?;
    match identity {
        Some(identity) => tx.bind_identity(who, identity),
        None => Ok(()),
    }
}

/// The `added_by` column of the row on `address`.
fn added_by(store: &mut AllocationStore, address: &str) -> Option<String> {
    store
        .read(|tx| {
            let sql = "SELECT added_by FROM leases WHERE address = ?1";
            Ok(tx.sql().query_row(sql, [address], |row| row.get(0)).unwrap())
        })
        .unwrap()
}

#[test]
fn a_released_lease_of_an_identity_is_held_for_it_until_now_plus_the_hold() {
    let (_dir, mut store) = temp_store();
    let c1 = owner("n", "c1", "eth0");
    let other = owner("n", "c9", "eth0");
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))?;
            lease(tx, "10.0.0.9", "p", &other, None)
        })
        .unwrap();
    let live = holder(&mut store, "10.0.0.2").unwrap();
    assert_eq!((live.identity.as_deref(), live.held_until, live.is_hold()), (Some(DB_0), None, false));
    assert_eq!(holder(&mut store, "10.0.0.9").unwrap().identity, None, "another attachment's lease was bound");

    let before = unix_now();
    let released = store.write(|tx| tx.release(&c1, Some(HOUR))).unwrap();
    let after = unix_now();
    assert_eq!(released.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("10.0.0.2")]);
    let hold = holder(&mut store, "10.0.0.2").unwrap();
    assert!(hold.is_hold());
    assert_eq!((hold.identity.as_deref(), &hold.owner, hold.pool.as_str()), (Some(DB_0), &c1, "p"));
    let until = hold.held_until.unwrap();
    // At least the hold: the end is rounded up to a whole second.
    assert!(before + 3600 <= until && until <= after + 3601, "held until {until}, released at {before}..{after}");
    assert!((before..=after).contains(&hold.since), "a hold's since is when it began: {hold:?}");
    assert_eq!(added_by(&mut store, "10.0.0.2"), None, "a hold belongs to no ADD");

    // Found by identity, counted as a hold of its pool.
    assert_eq!(store.read(|tx| tx.holds_of_identity(Some("n"), DB_0)).unwrap(), std::slice::from_ref(&hold));
    assert_eq!(store.read(|tx| tx.holds_of_identity(None, DB_0)).unwrap(), std::slice::from_ref(&hold));
    assert!(store.read(|tx| tx.holds_of_identity(Some("m"), DB_0)).unwrap().is_empty());
    assert_eq!(store.read(|tx| tx.count_pool_holds("n", "p")).unwrap(), 1);
    let mine = store.read(|tx| tx.rows_of_identity("n", DB_0, "eth0")).unwrap();
    assert_eq!(mine, [hold], "the identity's rows include its hold");
    assert!(store.read(|tx| tx.rows_of_identity("n", DB_0, "net1")).unwrap().is_empty(), "another interface's");
    assert_runs_agree(&mut store);
}

#[test]
fn without_an_identity_or_a_hold_a_released_lease_is_freed() {
    let (_dir, mut store) = temp_store();
    let (plain, zero, none) = (owner("n", "c1", "eth0"), owner("n", "c2", "eth0"), owner("n", "c3", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &plain, None)?;
            lease(tx, "10.0.0.3", "p", &zero, Some("a"))?;
            lease(tx, "10.0.0.4", "p", &none, Some("b"))
        })
        .unwrap();
    store.write(|tx| tx.release(&plain, Some(HOUR))).unwrap();
    store.write(|tx| tx.release(&zero, Some(Duration::ZERO))).unwrap();
    store.write(|tx| tx.release(&none, None)).unwrap();
    for address in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        assert_eq!(holder(&mut store, address), None, "{address} is still taken");
    }
    assert!(stored_runs(&mut store).is_empty());
}

#[test]
fn take_hold_makes_a_hold_the_new_attachment_s_lease_and_never_takes_a_live_one() {
    let (_dir, mut store) = temp_store();
    let (c1, c2, c3) = (owner("n", "c1", "eth0"), owner("n", "c2", "eth0"), owner("n", "c3", "eth0"));
    store.set_add_id(Some("add-1".into()));
    store.write(|tx| lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))).unwrap();
    store.write(|tx| tx.release(&c1, Some(HOUR))).unwrap();

    // Another network's attachment cannot take it, nor anyone a free address.
    store.set_add_id(Some("add-2".into()));
    assert!(!store.write(|tx| tx.take_hold(ip("10.0.0.2"), &owner("m", "c2", "eth0"))).unwrap());
    assert!(!store.write(|tx| tx.take_hold(ip("10.0.0.3"), &c2)).unwrap());
    assert_eq!(holder(&mut store, "10.0.0.3"), None, "take_hold of a free address leased it");

    let before = unix_now();
    assert!(store.write(|tx| tx.take_hold(ip("10.0.0.2"), &c2)).unwrap());
    let taken = holder(&mut store, "10.0.0.2").unwrap();
    assert_eq!((&taken.owner, taken.held_until, taken.identity.as_deref()), (&c2, None, Some(DB_0)));
    assert!(taken.since >= before);
    assert_eq!(added_by(&mut store, "10.0.0.2").as_deref(), Some("add-2"), "tagged with the ADD that took it");
    assert_eq!(store.read(|tx| tx.leases_of(&c2)).unwrap(), std::slice::from_ref(&taken));
    assert_eq!(store.read(|tx| tx.count_pool_holds("n", "p")).unwrap(), 0);

    // Live now: nobody takes it.
    assert!(!store.write(|tx| tx.take_hold(ip("10.0.0.2"), &c3)).unwrap());
    assert_eq!(holder(&mut store, "10.0.0.2").unwrap(), taken);
    assert_eq!(stored_runs(&mut store), [(ip("10.0.0.2"), ip("10.0.0.2"))]);
    assert_runs_agree(&mut store);
}

#[test]
fn releasing_a_shared_lease_passes_it_to_the_attachment_sharing_it_longest() {
    let (_dir, mut store) = temp_store();
    let (src, dst, third) = (owner("n", "src", "eth0"), owner("n", "dst", "eth0"), owner("n", "x3", "eth0"));
    store.write(|tx| lease(tx, "10.0.0.2", "p", &src, Some("kubevirt/vm-a"))).unwrap();
    store.write(|tx| tx.share_lease(ip("10.0.0.2"), &dst)).unwrap();
    store.write(|tx| tx.share_lease(ip("10.0.0.2"), &dst)).unwrap();
    store.write(|tx| tx.share_lease(ip("10.0.0.2"), &third)).unwrap();
    let shared = store.read(|tx| tx.shared_by(&dst)).unwrap();
    assert_eq!(shared.iter().map(|l| (l.address, &l.owner)).collect::<Vec<_>>(), [(ip("10.0.0.2"), &src)]);
    assert!(store.read(|tx| tx.shares_lease(ip("10.0.0.2"), &dst)).unwrap());
    let sharers: Vec<Attachment> = store.read(|tx| tx.shares()).unwrap().into_iter().map(|s| s.sharer).collect();
    assert_eq!(sharers, [dst.clone(), third.clone()], "one row per sharer: sharing twice is a no-op");

    // A sharer's DEL ends its share and nothing else.
    assert!(store.write(|tx| tx.release(&third, Some(HOUR))).unwrap().is_empty());
    assert!(!store.read(|tx| tx.shares_lease(ip("10.0.0.2"), &third)).unwrap());
    assert_eq!(holder(&mut store, "10.0.0.2").unwrap().owner, src);

    // The source goes: the lease is the sharer's, live, and no longer shared.
    store.write(|tx| tx.release(&src, Some(HOUR))).unwrap();
    let passed = holder(&mut store, "10.0.0.2").unwrap();
    assert_eq!((&passed.owner, passed.held_until, passed.identity.as_deref()), (&dst, None, Some("kubevirt/vm-a")));
    assert_eq!(store.read(|tx| tx.leases_of(&dst)).unwrap(), [passed]);
    assert!(store.read(|tx| tx.shares()).unwrap().is_empty());
    assert!(store.read(|tx| tx.leases_of(&src)).unwrap().is_empty());

    // The last one goes: held.
    store.write(|tx| tx.release(&dst, Some(HOUR))).unwrap();
    assert!(holder(&mut store, "10.0.0.2").unwrap().is_hold());
    assert_runs_agree(&mut store);
}

#[test]
fn an_expired_hold_is_dropped_and_its_address_is_free_again() {
    let (_dir, mut store) = temp_store();
    let (a, b, c) = (owner("n", "a", "eth0"), owner("n", "b", "eth0"), owner("n", "c", "eth0"));
    // One run of three: .3 in the middle is the hold that ends.
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &a, Some("ns/a"))?;
            lease(tx, "10.0.0.3", "p", &b, Some("ns/b"))?;
            lease(tx, "10.0.0.4", "p", &c, None)
        })
        .unwrap();
    store.write(|tx| tx.release(&a, Some(HOUR))).unwrap();
    store.write(|tx| tx.release(&b, Some(HOUR))).unwrap();
    let first_free = |store: &mut AllocationStore| store.read(|tx| tx.first_unleased(ip("10.0.0.2"), ip("10.0.0.9")));
    assert_eq!(first_free(&mut store).unwrap(), Some(ip("10.0.0.5")), "holds keep their addresses taken");
    assert!(store.write(|tx| tx.drop_expired_holds()).unwrap().is_empty(), "nothing has ended yet");

    // .3's hold ends now.
    store
        .write(|tx| {
            tx.sql().execute("UPDATE leases SET held_until = ?1 WHERE address = '10.0.0.3'", [unix_now()]).unwrap();
            Ok(())
        })
        .unwrap();
    let dropped = store.write(|tx| tx.drop_expired_holds()).unwrap();
    assert_eq!(
        dropped.iter().map(|l| (l.address, l.identity.as_deref())).collect::<Vec<_>>(),
        [(ip("10.0.0.3"), Some("ns/b"))]
    );
    assert_eq!(holder(&mut store, "10.0.0.3"), None);
    assert!(holder(&mut store, "10.0.0.2").unwrap().is_hold(), "a hold that has not ended stays");
    assert_eq!(first_free(&mut store).unwrap(), Some(ip("10.0.0.3")));
    assert_eq!(stored_runs(&mut store), [(ip("10.0.0.2"), ip("10.0.0.2")), (ip("10.0.0.4"), ip("10.0.0.4"))]);
    assert_runs_agree(&mut store);
    assert_eq!(store.read(|tx| tx.count_pool_holds("n", "p")).unwrap(), 1);

    // Anyone may lease it now, and the runs join again.
    store.write(|tx| lease(tx, "10.0.0.3", "p", &owner("n", "d", "eth0"), None)).unwrap();
    assert_eq!(stored_runs(&mut store), [(ip("10.0.0.2"), ip("10.0.0.4"))]);
    assert_runs_agree(&mut store);
}

#[test]
fn holds_are_not_the_attachment_s_leases_for_release_gc_or_pool_counts() {
    let (_dir, mut store) = temp_store();
    let (gone, stale) = (owner("n", "gone", "eth0"), owner("n", "stale", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &gone, Some(DB_0))?;
            lease(tx, "10.0.0.3", "p", &stale, None)
        })
        .unwrap();
    store.write(|tx| tx.release(&gone, Some(HOUR))).unwrap();
    let hold = holder(&mut store, "10.0.0.2").unwrap();

    assert!(store.read(|tx| tx.leases_of(&gone)).unwrap().is_empty());
    // A repeated DEL, the operator's release of the attachment, and a release
    // of the address by it leave the hold as it is.
    assert!(store.write(|tx| tx.release(&gone, Some(HOUR))).unwrap().is_empty());
    assert!(store.write(|tx| tx.release(&gone, None)).unwrap().is_empty());
    assert!(!store.write(|tx| tx.release_address(ip("10.0.0.2"), &gone)).unwrap());
    assert!(store.write(|tx| tx.release_added_by(&gone, "any")).unwrap().is_empty());
    assert_eq!(holder(&mut store, "10.0.0.2").unwrap(), hold);

    assert_eq!(store.read(|tx| tx.count_pool_leases("n", "p")).unwrap(), 1);
    // GC with no valid attachment collects the stale lease, not the hold.
    let collected = store.write(|tx| tx.gc("n", &HashSet::new(), Some(HOUR))).unwrap();
    assert_eq!(collected.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("10.0.0.3")]);
    assert_eq!(holder(&mut store, "10.0.0.2").unwrap(), hold);
    assert_eq!(holder(&mut store, "10.0.0.3"), None, "the stale lease had no identity");
    assert_eq!(store.read(|tx| tx.count_pool_leases("n", "p")).unwrap(), 0);
    assert_eq!(store.read(|tx| tx.count_pool_holds("n", "p")).unwrap(), 1);
    // The listing shows it.
    assert_eq!(store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap(), std::slice::from_ref(&hold));

    // Dropping holds (release --identity) drops holds only.
    store.write(|tx| lease(tx, "10.0.0.5", "p", &owner("n", "live", "eth0"), Some(DB_0))).unwrap();
    let live = holder(&mut store, "10.0.0.5").unwrap();
    let dropped = store.write(|tx| tx.drop_holds(&[hold.clone(), live.clone()])).unwrap();
    assert_eq!(dropped, [hold]);
    assert_eq!(holder(&mut store, "10.0.0.2"), None);
    assert_eq!(holder(&mut store, "10.0.0.5").unwrap(), live);
    assert_runs_agree(&mut store);
}

#[test]
fn a_rollback_gives_back_the_identity_s_hold_as_it_was_and_frees_what_the_add_leased_anew() {
    let (_dir, mut store) = temp_store();
    let (c1, c2) = (owner("n", "c1", "eth0"), owner("n", "c2", "eth0"));
    store.write(|tx| lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))).unwrap();
    store.write(|tx| tx.release(&c1, Some(HOUR))).unwrap();
    let end = holder(&mut store, "10.0.0.2").unwrap().held_until;

    // The re-created pod's ADD takes the hold back and leases IPv6 anew,
    // then fails and is rolled back.
    store.set_add_id(Some("add-2".into()));
    store
        .write(|tx| {
            assert!(tx.take_hold(ip("10.0.0.2"), &c2)?);
            lease(tx, "fd00::2", "p6", &c2, Some(DB_0))
        })
        .unwrap();
    let rolled_back = store.write(|tx| tx.release_added_by(&c2, "add-2")).unwrap();
    assert_eq!(rolled_back.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("10.0.0.2"), ip("fd00::2")]);
    let hold = holder(&mut store, "10.0.0.2").unwrap();
    assert_eq!((hold.identity.as_deref(), hold.held_until), (Some(DB_0), end), "the hold as it was: {hold:?}");
    assert_eq!(holder(&mut store, "fd00::2"), None, "the address the failed ADD leased anew is free");
    // The next ADD of the identity gets its hold back.
    store.set_add_id(Some("add-3".into()));
    assert!(store.write(|tx| tx.take_hold(ip("10.0.0.2"), &owner("n", "c3", "eth0"))).unwrap());
    assert_runs_agree(&mut store);
}

#[test]
fn a_rollback_of_a_lease_passed_to_a_sharer_holds_it_for_the_identity() {
    let (_dir, mut store) = temp_store();
    let (src, dst) = (owner("n", "src", "eth0"), owner("n", "dst", "eth0"));
    store.set_add_id(Some("add-src".into()));
    store.write(|tx| lease(tx, "10.0.0.2", "p", &src, Some(DB_0))).unwrap();
    // dst's ADD shares the lease; src goes meanwhile, passing it to dst;
    // then dst's ADD fails: the identity's address stays held for it.
    store.set_add_id(Some("add-dst".into()));
    store.write(|tx| tx.share_lease(ip("10.0.0.2"), &dst)).unwrap();
    store.write(|tx| tx.release(&src, Some(HOUR))).unwrap();
    let before = unix_now();
    store.write(|tx| tx.release_added_by(&dst, "add-dst")).unwrap();
    let hold = holder(&mut store, "10.0.0.2").unwrap();
    assert_eq!(hold.identity.as_deref(), Some(DB_0));
    assert!(hold.held_until.is_some_and(|until| until >= before + 3599), "{hold:?}");
    assert_runs_agree(&mut store);
}

#[test]
fn an_identity_is_live_elsewhere_only_on_a_lease_of_another_attachment() {
    let (_dir, mut store) = temp_store();
    let (c1, c2) = (owner("n", "c1", "eth0"), owner("n", "c2", "eth0"));
    store.write(|tx| lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))).unwrap();
    let elsewhere = |store: &mut AllocationStore, who: &Attachment| {
        store.read(|tx| tx.identity_live_elsewhere(who, DB_0)).unwrap().map(|l| l.address)
    };
    assert_eq!(elsewhere(&mut store, &c2), Some(ip("10.0.0.2")));
    assert_eq!(elsewhere(&mut store, &c1), None, "its own lease");
    assert_eq!(elsewhere(&mut store, &owner("n", "c2", "eth1")), None, "another interface");
    assert_eq!(elsewhere(&mut store, &owner("m", "c2", "eth0")), None, "another network");
    store.write(|tx| tx.release(&c1, Some(HOUR))).unwrap();
    assert_eq!(elsewhere(&mut store, &c2), None, "a hold is not live");
}

#[test]
fn forgetting_a_pool_ends_its_leases_holds_and_shares() {
    let (_dir, mut store) = temp_store();
    let net = |s: &str| vec![s.parse().unwrap()];
    store.write(|tx| tx.register_pool("n", "p", &net("10.0.0.0/24"), &serde_json::json!({}))).unwrap().unwrap();
    store.write(|tx| tx.register_pool("n", "q", &net("10.1.0.0/24"), &serde_json::json!({}))).unwrap().unwrap();
    let (src, dst, gone) = (owner("n", "src", "eth0"), owner("n", "dst", "eth0"), owner("n", "gone", "eth0"));
    let (other, other_sharer) = (owner("n", "o1", "eth0"), owner("n", "o2", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &src, Some("vm-a"))?;
            tx.share_lease(ip("10.0.0.2"), &dst)?;
            lease(tx, "10.0.0.3", "p", &gone, Some("db-0"))?;
            lease(tx, "10.1.0.2", "q", &other, Some("vm-b"))?;
            tx.share_lease(ip("10.1.0.2"), &other_sharer)
        })
        .unwrap();
    store.write(|tx| tx.release(&gone, Some(HOUR))).unwrap();

    let (released, was_registered) = store.write(|tx| tx.forget_pool("n", "p")).unwrap();
    assert!(was_registered);
    assert_eq!(released.iter().map(|l| l.address).collect::<Vec<_>>(), [ip("10.0.0.2"), ip("10.0.0.3")]);
    assert_eq!(holder(&mut store, "10.0.0.2"), None);
    assert_eq!(holder(&mut store, "10.0.0.3"), None, "the hold in the forgotten pool stayed");
    assert!(store.read(|tx| tx.shared_by(&dst)).unwrap().is_empty());
    let sharers: Vec<Attachment> = store.read(|tx| tx.shares()).unwrap().into_iter().map(|s| s.sharer).collect();
    assert_eq!(sharers, [other_sharer], "only the other pool's share is left");
    assert_eq!(stored_runs(&mut store), [(ip("10.1.0.2"), ip("10.1.0.2"))]);
    assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap(), Vec::<String>::new());
    // The addresses are free, and a new identity's lease on 10.0.0.2 shares
    // with nobody: released, it is held, not passed to the old sharer.
    let new = owner("n", "new", "eth0");
    store.write(|tx| tx.register_pool("n", "p", &net("10.0.0.0/24"), &serde_json::json!({}))).unwrap().unwrap();
    store.write(|tx| lease(tx, "10.0.0.2", "p", &new, Some("vm-c"))).unwrap();
    store.write(|tx| tx.release(&new, Some(HOUR))).unwrap();
    let after = holder(&mut store, "10.0.0.2").unwrap();
    assert!(after.is_hold() && after.owner == new, "passed to a sharer of the forgotten lease: {after:?}");
}

#[test]
fn gc_of_a_shared_lease_whose_sharer_is_gone_too_holds_it_for_the_identity() {
    let (_dir, mut store) = temp_store();
    let (src, dst, kept) = (owner("n", "src", "eth0"), owner("n", "dst", "eth0"), owner("n", "kept", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &src, Some("kubevirt/vm-a"))?;
            tx.share_lease(ip("10.0.0.2"), &dst)?;
            lease(tx, "10.0.0.3", "p", &kept, Some("kubevirt/vm-b"))
        })
        .unwrap();
    // Both attachments of vm-a are gone without a DEL; GC keeps only vm-b's.
    let keep: HashSet<(String, String)> = [("kept".to_string(), "eth0".to_string())].into();
    store.write(|tx| tx.gc("n", &keep, Some(HOUR))).unwrap();
    let after = holder(&mut store, "10.0.0.2").unwrap();
    assert!(after.is_hold(), "a gone sharer was left holding the lease: {after:?}");
    assert!(store.read(|tx| tx.leases_of(&dst)).unwrap().is_empty());
    assert!(store.read(|tx| tx.shares()).unwrap().is_empty());
    assert_eq!(holder(&mut store, "10.0.0.3").unwrap().owner, kept);
    assert_runs_agree(&mut store);
}

#[test]
fn holding_one_address_of_an_attachment_leaves_its_others_leased() {
    let (_dir, mut store) = temp_store();
    let (c1, c2) = (owner("n", "c1", "eth0"), owner("n", "c2", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))?;
            lease(tx, "10.0.0.3", "p", &c2, None)
        })
        .unwrap();
    // Another attachment's address, and an address not leased, are not held.
    assert!(!store.write(|tx| tx.hold_address(ip("10.0.0.3"), &c1, HOUR)).unwrap());
    assert!(!store.write(|tx| tx.hold_address(ip("10.0.0.9"), &c1, HOUR)).unwrap());
    let before = unix_now();
    assert!(store.write(|tx| tx.hold_address(ip("10.0.0.2"), &c1, HOUR)).unwrap());
    let hold = holder(&mut store, "10.0.0.2").expect("held");
    assert_eq!(hold.identity.as_deref(), Some(DB_0));
    assert!(hold.held_until.is_some_and(|t| t >= before + 3600 && t <= unix_now() + 3601), "{hold:?}");
    assert!(store.read(|tx| tx.leases_of(&c1)).unwrap().is_empty());
    assert_eq!(holder(&mut store, "10.0.0.3").map(|l| l.owner), Some(c2));
    // Held again: nothing changes.
    assert!(!store.write(|tx| tx.hold_address(ip("10.0.0.2"), &c1, HOUR)).unwrap());
    assert_eq!(holder(&mut store, "10.0.0.2"), Some(hold));
    // Zero: freed, as release_address does.
    store.write(|tx| tx.take_hold(ip("10.0.0.2"), &c1)).unwrap();
    assert!(store.write(|tx| tx.hold_address(ip("10.0.0.2"), &c1, Duration::ZERO)).unwrap());
    assert_eq!(holder(&mut store, "10.0.0.2"), None);
    assert_runs_agree(&mut store);
}

/// Unix time now with its fraction, as the clock reads it.
fn precise_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn a_hold_lasts_at_least_its_length_however_late_in_a_second_it_begins() {
    let (_dir, mut store) = temp_store();
    let c1 = owner("n", "c1", "eth0");
    store.write(|tx| lease(tx, "10.0.0.2", "p", &c1, Some(DB_0))).unwrap();
    // Releases at five points of a second (the identity takes its hold back
    // between them).
    for round in 0..5 {
        let released_at = precise_now();
        store.write(|tx| tx.release(&c1, Some(Duration::from_secs(1)))).unwrap();
        let hold = holder(&mut store, "10.0.0.2").unwrap();
        // It ends once the clock's whole seconds reach held_until: never
        // before a whole second after the release.
        let until = hold.held_until.unwrap() as f64;
        assert!(until >= released_at + 1.0, "round {round}: released at {released_at}, held until {until}");
        assert!(until <= released_at + 2.0, "round {round}: held a second too long: {hold:?}");
        store.write(|tx| tx.take_hold(ip("10.0.0.2"), &c1)).unwrap();
        std::thread::sleep(Duration::from_millis(170));
    }
    // The rounding itself, at the edges of a second.
    let at = |secs: u64, millis: u64| Duration::from_secs(secs) + Duration::from_millis(millis);
    use super::HoldSpan;
    let one = Duration::from_secs(1);
    assert_eq!(HoldSpan::starting(at(100, 999), one), Some(HoldSpan { start: 100, end: 102 }));
    assert_eq!(HoldSpan::starting(at(100, 0), one), Some(HoldSpan { start: 100, end: 101 }));
    assert_eq!(HoldSpan::starting(at(100, 1), Duration::from_secs(600)), Some(HoldSpan { start: 100, end: 701 }));
    assert_eq!(HoldSpan::starting(at(100, 500), Duration::ZERO), None);
}

#[test]
fn a_hold_made_while_the_clock_was_ahead_is_read_and_rewritten_to_end_its_length_from_now() {
    let (_dir, mut store) = temp_store();
    let (a, b, c) = (owner("n", "a", "eth0"), owner("n", "b", "eth0"), owner("n", "c", "eth0"));
    store
        .write(|tx| {
            lease(tx, "10.0.0.2", "p", &a, Some("ns/a"))?;
            lease(tx, "10.0.0.3", "p", &b, Some("ns/b"))?;
            lease(tx, "10.0.0.4", "p", &c, Some("ns/c"))
        })
        .unwrap();
    for who in [&a, &b, &c] {
        store.write(|tx| tx.release(who, Some(Duration::from_secs(2)))).unwrap();
    }
    // .2 and .3 were released while the clock was a day and 400 days ahead
    // (what the rows hold then); .4 on time.
    let now = unix_now();
    store
        .write(|tx| {
            for (address, ahead) in [("10.0.0.2", 86_400), ("10.0.0.3", 400 * 86_400)] {
                let sql = "UPDATE leases SET since = ?2, held_until = ?2 + 2 WHERE address = ?1";
                tx.sql().execute(sql, rusqlite::params![address, now + ahead]).unwrap();
            }
            Ok(())
        })
        .unwrap();
    // Read: each ends its length from now at the latest.
    for address in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        let hold = holder(&mut store, address).unwrap();
        let (since, until) = (hold.since, hold.held_until.unwrap());
        assert!(since <= unix_now() && until <= unix_now() + 3, "{address}: {hold:?}");
        assert!(until >= now + 2, "{address} must not end early: {hold:?}");
    }
    // The next allocation rewrites them so: ended, they are dropped.
    assert!(store.write(|tx| tx.drop_expired_holds()).unwrap().is_empty(), "nothing has ended yet");
    let stored: Vec<(i64, i64)> = store
        .read(|tx| {
            let sql = "SELECT since, held_until FROM leases WHERE held_until IS NOT NULL ORDER BY key";
            Ok(tx
                .sql()
                .prepare(sql)
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect())
        })
        .unwrap();
    assert_eq!(stored.len(), 3);
    for (since, until) in stored {
        assert!(since <= unix_now() && until <= unix_now() + 3 && until - since >= 2, "{since}..{until}");
    }
    std::thread::sleep(Duration::from_millis(3100));
    let dropped = store.write(|tx| tx.drop_expired_holds()).unwrap();
    assert_eq!(dropped.len(), 3, "all three ended within their length: {dropped:?}");
    assert_runs_agree(&mut store);
}
