//! Tests of the allocation search, against an in-memory lease index.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::*;

/// Leases in a set; counts the questions asked of it.
#[derive(Default)]
struct Leases {
    held: BTreeSet<u128>,
    calls: std::cell::Cell<usize>,
}

impl Leases {
    fn holding(addrs: &[&str]) -> Self {
        Leases { held: addrs.iter().map(|a| to_u128(ip(a))).collect(), calls: Default::default() }
    }
}

impl LeaseIndex for Leases {
    fn first_unleased(&self, lo: IpAddr, hi: IpAddr) -> Result<Option<IpAddr>> {
        self.calls.set(self.calls.get() + 1);
        let (lo, hi) = (to_u128(lo), to_u128(hi));
        // The first gap in the held set at or after lo.
        let mut n = lo;
        for &held in self.held.range(lo..=hi) {
            if held != n {
                break;
            }
            n += 1;
        }
        Ok((n <= hi).then(|| from_u128(n)))
    }
}

/// A lease index that answers wrongly.
struct Broken(IpAddr);

impl LeaseIndex for Broken {
    fn first_unleased(&self, _: IpAddr, _: IpAddr) -> Result<Option<IpAddr>> {
        Ok(Some(self.0))
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pool(v: Value) -> Pool {
    Pool::from_json(&v, "ipam.pools[0]").unwrap()
}

fn one_range(range: Value) -> Pool {
    pool(json!({"name": "p", "ranges": [range]}))
}

fn pairs(list: &[(&str, &str)]) -> Vec<(IpAddr, IpAddr)> {
    list.iter().map(|(a, b)| (ip(a), ip(b))).collect()
}

fn free(p: &Pool, cursor: Option<&str>, leases: &Leases) -> Option<String> {
    p.find_free(cursor.map(ip), leases).unwrap().map(|a| a.to_string())
}

/// Allocates until the pool is full, moving the cursor as an allocator
/// would; returns the addresses in the order handed out.
fn drain(p: &Pool, cursor: Option<&str>) -> Vec<String> {
    let mut leases = Leases::default();
    let mut cursor = cursor.map(ip);
    let mut out = Vec::new();
    while let Some(a) = p.find_free(cursor, &leases).unwrap() {
        assert!(leases.held.insert(to_u128(a)), "{a} handed out twice");
        out.push(a.to_string());
        cursor = Some(a);
    }
    out
}

#[test]
fn round_robin_continues_after_the_cursor() {
    // 10.0.0.0/29: usable .1-.6, .1 is the gateway.
    let p = one_range(json!({"subnet": "10.0.0.0/29"}));
    assert_eq!(p.allocatable(), pairs(&[("10.0.0.2", "10.0.0.6")]));
    let leases = Leases::default();
    assert_eq!(free(&p, None, &leases).as_deref(), Some("10.0.0.2"));
    assert_eq!(free(&p, Some("10.0.0.2"), &leases).as_deref(), Some("10.0.0.3"));
    // An address released behind the cursor is not reused before the pool wraps.
    let leases = Leases::holding(&["10.0.0.3", "10.0.0.4"]);
    assert_eq!(free(&p, Some("10.0.0.4"), &leases).as_deref(), Some("10.0.0.5"));
    assert_eq!(free(&p, Some("10.0.0.2"), &leases).as_deref(), Some("10.0.0.5"));
    assert_eq!(drain(&p, None), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]);
}

#[test]
fn wraps_around_and_ends_at_the_cursor() {
    let p = one_range(json!({"subnet": "10.0.0.0/29"}));
    assert_eq!(p.search_order(Some(ip("10.0.0.4"))), pairs(&[("10.0.0.5", "10.0.0.6"), ("10.0.0.2", "10.0.0.4")]));
    // A cursor at the end of the interval does not produce an empty piece.
    assert_eq!(p.search_order(Some(ip("10.0.0.6"))), pairs(&[("10.0.0.2", "10.0.0.6")]));
    let leases = Leases::holding(&["10.0.0.5", "10.0.0.6"]);
    assert_eq!(free(&p, Some("10.0.0.4"), &leases).as_deref(), Some("10.0.0.2"));
    assert_eq!(free(&p, Some("10.0.0.6"), &leases).as_deref(), Some("10.0.0.2"));
    // Only the cursor's own address is free again: found last.
    let leases = Leases::holding(&["10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.6"]);
    assert_eq!(free(&p, Some("10.0.0.4"), &leases).as_deref(), Some("10.0.0.4"));
    assert_eq!(drain(&p, Some("10.0.0.4")), ["10.0.0.5", "10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4"]);
}

#[test]
fn skips_a_gateway_inside_the_range() {
    let p = one_range(json!({"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.5", "rangeEnd": "10.0.0.15",
                            "gateway": "10.0.0.10"}));
    assert_eq!(p.allocatable(), pairs(&[("10.0.0.5", "10.0.0.9"), ("10.0.0.11", "10.0.0.15")]));
    let leases = Leases::default();
    assert_eq!(free(&p, Some("10.0.0.9"), &leases).as_deref(), Some("10.0.0.11"));
    assert_eq!(p.capacity(), 10);
    assert!(!drain(&p, None).contains(&"10.0.0.10".to_string()));
}

#[test]
fn excludes_at_edges_and_overlapping() {
    let p = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.5",
                        "rangeEnd": "10.0.0.15", "gateway": "10.0.0.10"}],
                        "exclude": ["10.0.0.12/30", "10.0.0.5", "10.0.0.6/31", "10.0.0.7", "10.0.0.200/29"]}));
    assert_eq!(p.allocatable(), pairs(&[("10.0.0.8", "10.0.0.9"), ("10.0.0.11", "10.0.0.11")]));
    assert_eq!(p.capacity(), 3);
    assert_eq!(drain(&p, None), ["10.0.0.8", "10.0.0.9", "10.0.0.11"]);
    // An exclude that reaches past both ends of the range leaves nothing.
    let none = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.20",
                           "rangeEnd": "10.0.0.40"}], "exclude": ["10.0.0.0/26"]}));
    assert_eq!(none.allocatable(), vec![]);
    assert_eq!(none.capacity(), 0);
    assert_eq!(free(&none, None, &Leases::default()), None);
    // The excluded address at the start of the range is skipped from the start.
    let edge = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.0/28"}], "exclude": ["10.0.0.2", "10.0.0.14"]}));
    assert_eq!(edge.allocatable(), pairs(&[("10.0.0.3", "10.0.0.13")]));
}

#[test]
fn exhaustion_is_none_with_one_question_per_interval() {
    let p = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.0.0/28", "gateway": "10.0.0.8"}],
                        "exclude": ["10.0.0.4"]}));
    assert_eq!(
        p.allocatable(),
        pairs(&[("10.0.0.1", "10.0.0.3"), ("10.0.0.5", "10.0.0.7"), ("10.0.0.9", "10.0.0.14")])
    );
    let all = drain(&p, None);
    assert_eq!(all.len(), 12);
    let leases = Leases::holding(&all.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(free(&p, None, &leases), None);
    assert_eq!(leases.calls.get(), 3);
    leases.calls.set(0);
    assert_eq!(free(&p, Some("10.0.0.6"), &leases), None);
    assert_eq!(leases.calls.get(), 4, "the cursor's interval is asked about in two pieces");
}

#[test]
fn smallest_subnets() {
    // /31: the second address is the default gateway, the first is handed out.
    let p31 = one_range(json!({"subnet": "10.0.0.4/31"}));
    assert_eq!(p31.allocatable(), pairs(&[("10.0.0.4", "10.0.0.4")]));
    assert_eq!(drain(&p31, None), ["10.0.0.4"]);
    let p32 = one_range(json!({"subnet": "10.0.0.9/32"}));
    assert_eq!(p32.allocatable(), pairs(&[("10.0.0.9", "10.0.0.9")]));
    assert_eq!(drain(&p32, Some("10.0.0.9")), ["10.0.0.9"]);
    let p127 = one_range(json!({"subnet": "fd00::/127"}));
    assert_eq!(p127.allocatable(), pairs(&[("fd00::", "fd00::")]));
    assert_eq!(drain(&p127, None), ["fd00::"]);
    let p128 = one_range(json!({"subnet": "fd00::9/128"}));
    assert_eq!(drain(&p128, None), ["fd00::9"]);
    assert_eq!(p128.capacity(), 1);
    // /30: network, broadcast and gateway leave one address.
    assert_eq!(drain(&one_range(json!({"subnet": "10.0.0.4/30"})), None), ["10.0.0.6"]);
}

#[test]
fn ipv6_64_with_a_cursor_in_the_middle() {
    let p = one_range(json!({"subnet": "fd00:22::/64"}));
    assert_eq!(p.capacity(), (1u128 << 64) - 2);
    assert_eq!(
        p.search_order(Some(ip("fd00:22::1234"))),
        pairs(&[("fd00:22::1235", "fd00:22::ffff:ffff:ffff:ffff"), ("fd00:22::2", "fd00:22::1234")])
    );
    let leases = Leases::holding(&["fd00:22::1235", "fd00:22::1236"]);
    assert_eq!(free(&p, Some("fd00:22::1234"), &leases).as_deref(), Some("fd00:22::1237"));
    let leases = Leases::holding(&["fd00:22::ffff:ffff:ffff:ffff"]);
    assert_eq!(free(&p, Some("fd00:22::ffff:ffff:ffff:fffe"), &leases).as_deref(), Some("fd00:22::2"));
}

#[test]
fn multiple_ranges_in_one_pool() {
    let p = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.1.0/29"}, {"subnet": "10.0.0.0/30"}]}));
    assert_eq!(p.allocatable(), pairs(&[("10.0.1.2", "10.0.1.6"), ("10.0.0.2", "10.0.0.2")]));
    assert_eq!(p.capacity(), 6);
    assert_eq!(drain(&p, Some("10.0.1.4")), ["10.0.1.5", "10.0.1.6", "10.0.0.2", "10.0.1.2", "10.0.1.3", "10.0.1.4"]);
    assert_eq!(p.search_order(Some(ip("10.0.0.2"))), pairs(&[("10.0.1.2", "10.0.1.6"), ("10.0.0.2", "10.0.0.2")]));
}

#[test]
fn cursor_in_no_interval() {
    let p = pool(json!({"name": "p", "ranges": [{"subnet": "10.0.2.0/24", "rangeStart": "10.0.2.2",
                        "rangeEnd": "10.0.2.20"}, {"subnet": "10.0.1.0/24", "rangeEnd": "10.0.1.9"}],
                        "exclude": ["10.0.2.10"]}));
    let all = pairs(&[("10.0.2.2", "10.0.2.9"), ("10.0.2.11", "10.0.2.20"), ("10.0.1.2", "10.0.1.9")]);
    assert_eq!(p.allocatable(), all);
    // An excluded cursor resumes after itself in its own range.
    assert_eq!(
        p.search_order(Some(ip("10.0.2.10"))),
        pairs(&[("10.0.2.11", "10.0.2.20"), ("10.0.1.2", "10.0.1.9"), ("10.0.2.2", "10.0.2.9")])
    );
    // Past the range end in the subnet: the next range.
    assert_eq!(
        p.search_order(Some(ip("10.0.2.100"))),
        pairs(&[("10.0.1.2", "10.0.1.9"), ("10.0.2.2", "10.0.2.9"), ("10.0.2.11", "10.0.2.20")])
    );
    // The gateway of the second range, though its numbers are below the first range.
    assert_eq!(
        p.search_order(Some(ip("10.0.1.1"))),
        pairs(&[("10.0.1.2", "10.0.1.9"), ("10.0.2.2", "10.0.2.9"), ("10.0.2.11", "10.0.2.20")])
    );
    // Outside every subnet: the first interval starting after it, else the beginning.
    assert_eq!(
        p.search_order(Some(ip("10.0.1.200"))),
        pairs(&[("10.0.2.2", "10.0.2.9"), ("10.0.2.11", "10.0.2.20"), ("10.0.1.2", "10.0.1.9")])
    );
    assert_eq!(
        p.search_order(Some(ip("10.0.1.255"))),
        pairs(&[("10.0.2.2", "10.0.2.9"), ("10.0.2.11", "10.0.2.20"), ("10.0.1.2", "10.0.1.9")])
    );
    assert_eq!(p.search_order(Some(ip("10.9.0.0"))), all);
    assert_eq!(p.search_order(Some(ip("fd00::1"))), all);
    assert_eq!(p.search_order(None), all);
    let leases = Leases::holding(&["10.0.2.11"]);
    assert_eq!(free(&p, Some("10.0.2.10"), &leases).as_deref(), Some("10.0.2.12"));
}

#[test]
fn hand_built_pool_never_yields_network_or_broadcast() {
    let mut p = one_range(json!({"subnet": "10.0.0.0/30"}));
    p.ranges[0].range_start = ip("10.0.0.0");
    p.ranges[0].range_end = ip("10.0.0.3");
    p.ranges[0].gateway = None;
    assert_eq!(p.allocatable(), pairs(&[("10.0.0.1", "10.0.0.2")]));
}

#[test]
fn a_wrong_answer_of_the_index_is_refused() {
    let p = one_range(json!({"subnet": "10.0.0.0/29"}));
    let e = p.find_free(None, &Broken(ip("10.0.0.1"))).unwrap_err();
    assert_eq!(e.code, Code::Internal);
    assert!(e.msg.contains("10.0.0.1"), "{}", e.msg);
    assert_eq!(p.find_free(None, &Broken(ip("10.0.0.3"))).unwrap(), Some(ip("10.0.0.3")));
}
