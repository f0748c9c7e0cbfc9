//! Sticky addresses on one node are exact and exclusive, through the real
//! stack (ipam-delegated running ipam-ds-pool, ipam-da-static,
//! ipam-da-sticky and ipam-da-sequential on one database): an ADD refused
//! because its identity is live elsewhere leaves nothing allocated or held,
//! so the identity keeps exactly its own address; a failed ADD frees what it
//! took from the free addresses and gives the identity back its holds as
//! they were; and of concurrent first ADDs of one identity (`shareLive`
//! off) exactly one is granted.

mod support;

use std::sync::Barrier;
use std::thread;

use serde_json::{json, Value};
use support::sticky::{add, del, network, ok_addresses};
use support::{addresses, assert_error, list_leases, Outcome, Sandbox};

/// 10.44.5.10 to 10.44.5.40.
fn pool() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.44.5.0/24", "rangeStart": "10.44.5.10", "rangeEnd": "10.44.5.40"}]}])
}

/// The CNI_ARGS of pod `prod/<name>`, asking for `ip` by name when given.
fn pod(name: &str, ip: Option<&str>) -> String {
    let asked = ip.map(|ip| format!(";IP={ip}")).unwrap_or_default();
    format!("{}{asked}", support::sticky::pod(name))
}

/// Every row of the database as the operator lists it: (address, state,
/// identity, container), in address order.
fn rows(sb: &Sandbox) -> Vec<(String, String, String, String)> {
    let text = |row: &Value, key: &str| row[key].as_str().unwrap_or("-").to_string();
    list_leases(&sb.db())
        .as_array()
        .expect("list --json prints an array")
        .iter()
        .map(|row| (text(row, "address"), text(row, "state"), text(row, "identity"), text(row, "container_id")))
        .collect()
}

fn row(address: &str, state: &str, identity: &str, container: &str) -> (String, String, String, String) {
    (address.to_string(), state.to_string(), identity.to_string(), container.to_string())
}

/// The listed `held_until` of the hold on `address`.
fn held_until(sb: &Sandbox, address: &str) -> String {
    let listed = list_leases(&sb.db());
    let found = listed.as_array().unwrap().iter().find(|r| r["address"] == address && r["state"] == "held");
    found.and_then(|r| r["held_until"].as_str()).unwrap_or_else(|| panic!("no hold on {address}: {listed}")).to_string()
}

#[test]
fn an_add_refused_because_its_identity_is_live_elsewhere_leaves_its_requested_address_free() {
    let sb = Sandbox::new();
    let config = network(&sb, pool(), json!({"hold": 600}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0", None))), ["10.44.5.10/24"]);

    // A second attachment of db-0, asking for .15 by name: 101, and .15 is
    // neither leased nor held afterwards.
    let refused = add(&sb, &config, "c2", &pod("db-0", Some("10.44.5.15")));
    assert_error(&refused, 101, &["prod/db-0", "container c1", "10.44.5.10", "shareLive"]);
    assert_eq!(rows(&sb), [row("10.44.5.10", "leased", "prod/db-0", "c1")], "the 101 left something behind");

    // So another workload's request for .15 is granted.
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("web-0", Some("10.44.5.15")))), ["10.44.5.15/24"]);
}

#[test]
fn an_add_refused_because_its_identity_is_live_elsewhere_does_not_cost_the_identity_its_address() {
    let sb = Sandbox::new();
    let config = network(&sb, pool(), json!({"hold": 600}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-1", Some("10.44.5.15")))), ["10.44.5.15/24"]);
    let refused = add(&sb, &config, "c2", &pod("db-1", Some("10.44.5.12")));
    assert_error(&refused, 101, &["prod/db-1", "container c1"]);

    // The live attachment goes: db-1 holds .15, and only .15.
    del(&sb, &config, "c1", &pod("db-1", None)).assert_quiet_success();
    assert_eq!(rows(&sb), [row("10.44.5.15", "held", "prod/db-1", "c1")]);
    // Its next ADD, asking for nothing by name, gets .15 back.
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("db-1", None))), ["10.44.5.15/24"]);
    assert_eq!(rows(&sb), [row("10.44.5.15", "leased", "prod/db-1", "c3")]);
}

/// Dual-stack pools whose IPv6 pool has one address, taken by web-0: an
/// ADD that needs IPv6 fails with 100 after its IPv4 address was taken.
fn dual_stack_with_ipv6_taken(sb: &Sandbox, sticky: Value) -> Value {
    let pools = json!([
        {"name": "v4", "ranges": [{"subnet": "10.44.6.0/24", "rangeStart": "10.44.6.5", "rangeEnd": "10.44.6.9"}]},
        {"name": "v6", "ranges": [{"subnet": "fd00:44:6::/64", "rangeStart": "fd00:44:6::5", "rangeEnd": "fd00:44:6::5"}]}
    ]);
    let config = network(sb, pools, sticky);
    assert_eq!(ok_addresses(&add(sb, &config, "web", &pod("web-0", None))), ["10.44.6.5/24", "fd00:44:6::5/64"]);
    config
}

#[test]
fn a_failed_add_frees_the_address_it_took_for_its_identity() {
    let sb = Sandbox::new();
    let config = dual_stack_with_ipv6_taken(&sb, json!({"hold": 600}));
    // ipam-da-static leases .8 for db-0; ipam-da-sequential finds no IPv6.
    assert_error(&add(&sb, &config, "c1", &pod("db-0", Some("10.44.6.8"))), 100, &["IPv6"]);
    del(&sb, &config, "c1", &pod("db-0", None)).assert_quiet_success();
    let left: Vec<_> = rows(&sb).into_iter().filter(|r| r.2 != "prod/web-0").collect();
    assert!(left.is_empty(), "the failed ADD of db-0 left {left:?}");
}

#[test]
fn a_failed_add_gives_the_identity_its_hold_back_with_the_end_it_had() {
    let sb = Sandbox::new();
    let v4_only = network(
        &sb,
        json!([{"name": "v4", "ranges": [{"subnet": "10.44.6.0/24", "rangeStart": "10.44.6.5", "rangeEnd": "10.44.6.9"}]}]),
        json!({"hold": 600}),
    );
    // db-0 was on the IPv4-only network, and holds .9 for 600 s.
    assert_eq!(ok_addresses(&add(&sb, &v4_only, "c1", &pod("db-0", Some("10.44.6.9")))), ["10.44.6.9/24"]);
    del(&sb, &v4_only, "c1", &pod("db-0", None)).assert_quiet_success();
    let end = held_until(&sb, "10.44.6.9");

    // The network became dual-stack, with a longer hold; IPv6 is full. db-0's
    // ADD takes its hold back, then fails: the hold is what it was.
    let dual = dual_stack_with_ipv6_taken(&sb, json!({"hold": 3600}));
    assert_error(&add(&sb, &dual, "c2", &pod("db-0", None)), 100, &["IPv6"]);
    assert_eq!(held_until(&sb, "10.44.6.9"), end, "the failed ADD changed the end of db-0's hold");
    let of_db0: Vec<_> = rows(&sb).into_iter().filter(|r| r.2 == "prod/db-0").map(|r| (r.0, r.1)).collect();
    assert_eq!(of_db0, [("10.44.6.9".to_string(), "held".to_string())]);
}

/// Attachments that start their ADDs of one identity at once, per round.
const AT_ONCE: usize = 8;
const ROUNDS: usize = 5;

#[test]
fn of_concurrent_first_adds_of_one_identity_exactly_one_is_granted() {
    let sb = Sandbox::new();
    let config = network(&sb, pool(), json!({"hold": 600}));
    for round in 0..ROUNDS {
        let name = format!("db-{round}");
        let identity = format!("prod/{name}");
        let args = pod(&name, None);
        let containers: Vec<String> = (0..AT_ONCE).map(|i| format!("r{round}-c{i}")).collect();
        let start = Barrier::new(AT_ONCE);
        let outcomes: Vec<Outcome> = thread::scope(|s| {
            let adds: Vec<_> = containers
                .iter()
                .map(|ctr| {
                    let (sb, config, args, start) = (&sb, &config, &args, &start);
                    s.spawn(move || {
                        start.wait();
                        add(sb, config, ctr, args)
                    })
                })
                .collect();
            adds.into_iter().map(|a| a.join().expect("an ADD thread")).collect()
        });
        let granted: Vec<(&String, Vec<String>)> = containers
            .iter()
            .zip(&outcomes)
            .filter(|(_, out)| out.status == 0)
            .map(|(ctr, out)| (ctr, addresses(out)))
            .collect();
        assert_eq!(
            granted.len(),
            1,
            "round {round}: {} of {AT_ONCE} ADDs of {identity} were granted: {granted:?}",
            granted.len()
        );
        for out in outcomes.iter().filter(|out| out.status != 0) {
            assert_error(out, 101, &[&identity, "shareLive"]);
        }
        let (winner, address) = (granted[0].0, granted[0].1[0].trim_end_matches("/24").to_string());
        let of_identity: Vec<_> = rows(&sb).into_iter().filter(|r| r.2 == identity).collect();
        assert_eq!(of_identity, [row(&address, "leased", &identity, winner)], "round {round}");

        // The runtime deletes every container: the identity holds the
        // winner's address, and nothing else.
        for ctr in &containers {
            del(&sb, &config, ctr, &args).assert_quiet_success();
        }
        let of_identity: Vec<_> = rows(&sb).into_iter().filter(|r| r.2 == identity).collect();
        assert_eq!(of_identity, [row(&address, "held", &identity, winner)], "round {round}");
        let again = ok_addresses(&add(&sb, &config, &format!("r{round}-again"), &args));
        assert_eq!(again, [format!("{address}/24")], "round {round}");
    }
}
