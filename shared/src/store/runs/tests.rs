//! `first_unleased` against a brute-force model, at the edges of the address
//! space, and at scale.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Instant;

use super::super::testing::{ip, owner, temp_store};
use super::super::LeaseFilter;
use crate::addr::{from_u128, to_u128};
use crate::args::Attachment;

/// Knuth's MMIX LCG: deterministic, no dependency.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// What the model expects: the first number in [lo, hi] not in `leased`.
fn model_first_unleased(leased: &BTreeSet<u128>, lo: u128, hi: u128) -> Option<u128> {
    (lo..=hi).find(|n| !leased.contains(n))
}

#[test]
fn first_unleased_agrees_with_a_model_through_random_inserts_and_releases() {
    let (_dir, mut store) = temp_store();
    let base = to_u128(ip("10.0.0.0"));
    const SPACE: u64 = 48;
    let owners: Vec<Attachment> = (0..6).map(|i| owner("net", &format!("c{i}"), "eth0")).collect();
    let mut leased: BTreeSet<u128> = BTreeSet::new();
    let mut held_by: Vec<BTreeSet<u128>> = vec![BTreeSet::new(); owners.len()];
    let mut rng = Lcg(42);

    for _round in 0..40 {
        store
            .write(|tx| {
                for _ in 0..50 {
                    let who = rng.below(owners.len() as u64) as usize;
                    match rng.below(10) {
                        0 => {
                            let released = tx.release(&owners[who], None).unwrap();
                            assert_eq!(released.len(), held_by[who].len());
                            for n in std::mem::take(&mut held_by[who]) {
                                leased.remove(&n);
                            }
                        }
                        1 => {
                            // A block of consecutive addresses, some possibly held.
                            let first = base + u128::from(rng.below(SPACE));
                            let len = rng.below(6) as u128 + 1;
                            let block: Vec<u128> = (first..first + len).filter(|n| !leased.contains(n)).collect();
                            let items = block.iter().map(|&n| (from_u128(n), "p", owners[who].clone()));
                            assert_eq!(tx.insert_leases_bulk(items).unwrap(), block.len());
                            leased.extend(&block);
                            held_by[who].extend(&block);
                        }
                        _ => {
                            let n = base + u128::from(rng.below(SPACE));
                            let result = tx.insert_lease(from_u128(n), "p", &owners[who]);
                            if leased.insert(n) {
                                result.unwrap();
                                held_by[who].insert(n);
                            } else {
                                assert_eq!(result.unwrap_err().code, 101);
                            }
                        }
                    }
                    for _ in 0..4 {
                        let lo = base + u128::from(rng.below(SPACE + 2));
                        let hi = lo + u128::from(rng.below(SPACE / 2));
                        let got = tx.first_unleased(from_u128(lo), from_u128(hi)).unwrap();
                        assert_eq!(got, model_first_unleased(&leased, lo, hi).map(from_u128), "[{lo}, {hi}]");
                        let limit = rng.below(SPACE / 2) as usize;
                        let counted = tx.count_unleased(from_u128(lo), from_u128(hi), limit).unwrap();
                        let model = (lo..=hi).filter(|n| !leased.contains(n)).count().min(limit);
                        assert_eq!(counted, model, "free in [{lo}, {hi}] up to {limit}");
                    }
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap().iter().filter(|p| p.contains("runs")).count(), 0);
        let listed = store.read(|tx| tx.leases(&LeaseFilter::default())).unwrap();
        assert_eq!(listed.iter().map(|l| to_u128(l.address)).collect::<BTreeSet<_>>(), leased);
    }
}

#[test]
fn runs_at_the_ends_of_the_address_space_do_not_overflow() {
    let (_dir, mut store) = temp_store();
    let a = owner("net", "c", "eth0");
    let (zero, max) = (ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
    let below_max = from_u128(u128::MAX - 1);
    store
        .write(|tx| {
            tx.insert_lease(zero, "p", &a)?;
            tx.insert_lease(max, "p", &a)?;
            tx.insert_lease(below_max, "p", &a)
        })
        .unwrap();
    store
        .read(|tx| {
            assert_eq!(tx.first_unleased(zero, max)?, Some(ip("::1")));
            assert_eq!(tx.first_unleased(below_max, max)?, None);
            assert_eq!(tx.first_unleased(max, zero)?, None, "empty range");
            assert_eq!(tx.count_unleased(zero, max, usize::MAX)?, usize::MAX, "all but three, capped");
            assert_eq!(tx.count_unleased(below_max, max, 10)?, 0);
            assert_eq!(tx.count_unleased(zero, ip("::4"), 10)?, 4);
            assert_eq!(tx.count_unleased(max, zero, 10)?, 0, "empty range");
            Ok(())
        })
        .unwrap();
    store.write(|tx| tx.release(&a, None)).unwrap();
    assert_eq!(store.read(|tx| tx.first_unleased(below_max, max)).unwrap(), Some(below_max));
    assert_eq!(store.read(|tx| tx.integrity_problems()).unwrap().iter().filter(|p| p.contains("runs")).count(), 0);
}

/// Leases `count` consecutive addresses from `first` in one transaction;
/// returns the seconds it took.
fn fill(store: &mut super::super::AllocationStore, first: IpAddr, count: u128, skip: Option<IpAddr>) -> f64 {
    let started = Instant::now();
    let start = to_u128(first);
    let skip = skip.map(to_u128);
    store
        .write(|tx| {
            let items = (start..start + count)
                .filter(|&n| Some(n) != skip)
                .map(|n| (from_u128(n), "p", owner("net", &format!("c{n}"), "eth0")));
            tx.insert_leases_bulk(items).map(drop)
        })
        .unwrap();
    started.elapsed().as_secs_f64()
}

#[test]
fn first_unleased_is_one_lookup_behind_a_full_slash_16() {
    let (_dir, mut store) = temp_store();
    let free = ip("10.0.255.250");
    let seconds = fill(&mut store, ip("10.0.0.1"), 65_534, Some(free));
    let started = Instant::now();
    let found = store.read(|tx| tx.first_unleased(ip("10.0.0.1"), ip("10.0.255.254"))).unwrap();
    println!("filled a /16 with 65,533 leases in {seconds:.2}s; first_unleased took {:?}", started.elapsed());
    assert_eq!(found, Some(free));
    assert_eq!(store.read(|tx| tx.first_unleased(ip("10.0.255.251"), ip("10.0.255.254"))).unwrap(), None);
    assert_eq!(store.read(|tx| tx.count_leases(ip("10.0.0.0"), ip("10.0.255.255"))).unwrap(), 65_533);
}
