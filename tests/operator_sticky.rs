//! The operator's tool over sticky addresses (ipam-da-sticky), on databases
//! the real stack filled: `list` shows identities, holds with their end and
//! attachments sharing a lease; `release --identity` drops an identity's
//! holds (and nothing else); `pools` and `metrics` count holds apart from
//! leases and free addresses; `check` names a hold without identity and a
//! sharer without a live lease.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use shared::utc::iso8601;
use support::sticky::{add, del, ok_addresses, pod};
use support::{assert_error, bin_dir, run_args, Outcome, Sandbox, STICKY_STACK};

fn network(sb: &Sandbox, name: &str, pools: Value, sticky: Value) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": STICKY_STACK, "database": sb.db(), "pools": pools, "sticky": sticky}
    })
}

/// Four addresses, 10.45.0.10 to 10.45.0.13.
fn blue() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.45.0.0/24", "rangeStart": "10.45.0.10", "rangeEnd": "10.45.0.13"}]}])
}

/// One address, 10.45.1.20.
fn tiny() -> Value {
    json!([{"name": "tiny", "ranges": [{"subnet": "10.45.1.0/24", "rangeStart": "10.45.1.20", "rangeEnd": "10.45.1.20"}]}])
}

/// The operator's tool on the sandbox's database.
fn tool(sb: &Sandbox, args: &[&str]) -> Outcome {
    let db = sb.db();
    let mut all = vec!["--database", db.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    run_args(&bin_dir().join("ipam-delegated"), &all, &[], b"", None)
}

/// The tool's stdout, after asserting a quiet success.
fn stdout(sb: &Sandbox, args: &[&str]) -> String {
    let out = tool(sb, args);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""), "{args:?}: {out:#?}");
    out.stdout
}

fn json_of(sb: &Sandbox, args: &[&str]) -> Value {
    serde_json::from_str(&stdout(sb, args)).unwrap_or_else(|e| panic!("{args:?}: no JSON: {e}"))
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs() as i64
}

/// `ISO 8601` UTC as the tool writes it: 2026-01-02T03:04:05Z.
fn is_iso8601(text: &str) -> bool {
    text.len() == 20
        && text.char_indices().all(|(i, c)| match i {
            4 | 7 => c == '-',
            10 => c == 'T',
            13 | 16 => c == ':',
            19 => c == 'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The rows of `list`'s table as words, SINCE (checked to be a time) left out.
fn table_rows(table: &str) -> Vec<Vec<String>> {
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    let since = header.iter().position(|h| *h == "SINCE").expect("SINCE column");
    std::iter::once(header.iter().filter(|h| **h != "SINCE").map(|h| h.to_string()).collect())
        .chain(lines.map(|line| {
            let mut words: Vec<String> = line.split_whitespace().map(String::from).collect();
            assert_eq!(words.len(), header.len(), "a word per column (- for none): {line:?}");
            let since = words.remove(since);
            assert!(is_iso8601(&since), "since {since:?} in {line:?}");
            words
        }))
        .collect()
}

/// Every object of `list --json` with its `since` checked and removed.
fn without_since(mut rows: Value) -> Value {
    for row in rows.as_array_mut().expect("an array") {
        let since = row.as_object_mut().and_then(|o| o.remove("since")).expect("since");
        assert!(since.as_str().is_some_and(is_iso8601), "{since}");
    }
    rows
}

fn lines_with<'a>(text: &'a str, part: &str) -> Vec<&'a str> {
    text.lines().filter(|line| line.contains(part)).collect()
}

#[test]
fn list_shows_identities_holds_with_their_end_and_sharers() {
    let sb = Sandbox::new();
    let config = network(&sb, "sticky-net", blue(), json!({"hold": 600, "shareLive": true}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c-db", &pod("db-0"))), ["10.45.0.10/24"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c-web", &pod("web-0"))), ["10.45.0.11/24"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c-src", &pod("vm-1"))), ["10.45.0.12/24"]);
    assert_eq!(
        ok_addresses(&add(&sb, &config, "c-dst", &pod("vm-1"))),
        ["10.45.0.12/24"],
        "shareLive: the same address"
    );
    // No K8S_POD_NAME: no identity.
    assert_eq!(ok_addresses(&add(&sb, &config, "c-plain", "K8S_POD_NAMESPACE=prod")), ["10.45.0.13/24"]);
    let before = now();
    del(&sb, &config, "c-db", &pod("db-0")).assert_quiet_success();
    let after = now();

    let rows = table_rows(&stdout(&sb, &["list"]));
    let until = rows[1][6].clone();
    // At least the hold: its end is rounded up to a whole second.
    assert!(iso8601(before + 600) <= until && until <= iso8601(after + 601), "held until {until}");
    let expected: Vec<Vec<String>> = [
        ["POOL", "ADDRESS", "NETWORK", "CONTAINER", "IFNAME", "STATE", "UNTIL", "IDENTITY"],
        ["blue", "10.45.0.10", "sticky-net", "c-db", "eth0", "held", until.as_str(), "prod/db-0"],
        ["blue", "10.45.0.11", "sticky-net", "c-web", "eth0", "leased", "-", "prod/web-0"],
        ["blue", "10.45.0.12", "sticky-net", "c-src", "eth0", "leased", "-", "prod/vm-1"],
        ["blue", "10.45.0.12", "sticky-net", "c-dst", "eth0", "shared", "-", "prod/vm-1"],
        ["blue", "10.45.0.13", "sticky-net", "c-plain", "eth0", "leased", "-", "-"],
    ]
    .iter()
    .map(|row| row.iter().map(|w| w.to_string()).collect())
    .collect();
    assert_eq!(rows, expected);

    let row = |address: &str, ctr: &str, identity: Value, state: &str, held_until: Value| {
        json!({"pool": "blue", "address": address, "network": "sticky-net", "container_id": ctr, "ifname": "eth0",
               "identity": identity, "state": state, "held_until": held_until})
    };
    assert_eq!(
        without_since(json_of(&sb, &["list", "--json"])),
        json!([
            row("10.45.0.10", "c-db", json!("prod/db-0"), "held", json!(until)),
            row("10.45.0.11", "c-web", json!("prod/web-0"), "leased", Value::Null),
            row("10.45.0.12", "c-src", json!("prod/vm-1"), "leased", Value::Null),
            row("10.45.0.12", "c-dst", json!("prod/vm-1"), "shared", Value::Null),
            row("10.45.0.13", "c-plain", Value::Null, "leased", Value::Null),
        ])
    );

    // Narrowed by identity, alone or with the other filters.
    let containers = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["list", "--json"];
        all.extend_from_slice(args);
        let rows = json_of(&sb, &all);
        rows.as_array().expect("array").iter().map(|r| r["container_id"].as_str().expect("id").to_string()).collect()
    };
    assert_eq!(containers(&["--identity", "prod/vm-1"]), ["c-src", "c-dst"]);
    assert_eq!(containers(&["--identity", "prod/db-0"]), ["c-db"]);
    assert_eq!(containers(&["--container", "c-dst"]), ["c-dst"], "a sharer is found by its own container");
    assert_eq!(containers(&["--identity", "prod/vm-1", "--network", "other-net"]), Vec::<String>::new());
    assert_eq!(stdout(&sb, &["list", "--identity", "prod/nobody"]), "no leases match\n");
    assert_eq!(stdout(&sb, &["check"]), "ok\n");
}

#[test]
fn release_identity_drops_only_its_holds_and_another_pod_gets_the_address() {
    let sb = Sandbox::new();
    let config = network(&sb, "tiny-net", tiny(), json!({"hold": 600}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.45.1.20/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    assert_error(&add(&sb, &config, "c2", &pod("web-0")), 100, &["no free"]);

    // Another network's holds only: nothing.
    assert_eq!(
        stdout(&sb, &["release", "--identity", "prod/db-0", "--network", "other-net"]),
        "nothing released: identity \"prod/db-0\" on network \"other-net\" holds no address\n"
    );
    let held = json_of(&sb, &["list", "--json"]);
    assert_eq!(held[0]["state"], "held", "{held}");
    let until = held[0]["held_until"].as_str().expect("held_until").to_string();

    let released = stdout(&sb, &["release", "--identity", "prod/db-0", "--network", "tiny-net"]);
    assert_eq!(
        released,
        format!(
            "released 10.45.1.20 (pool tiny of network \"tiny-net\") held for identity \"prod/db-0\" until {until}\n"
        )
    );
    assert_eq!(stdout(&sb, &["list"]), "no leases\n");
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.45.1.20/24"], "free for another pod");
    assert_eq!(
        stdout(&sb, &["release", "--identity", "prod/db-0"]),
        "nothing released: identity \"prod/db-0\" holds no address\n"
    );

    // A live lease is never released by identity: it is said to be kept.
    assert_eq!(
        stdout(&sb, &["release", "--identity", "prod/web-0"]),
        "nothing released: identity \"prod/web-0\" holds no address\n\
         kept 10.45.1.20 (pool tiny): leased by container c2 interface eth0 of network \"tiny-net\", not a hold; \
         release that attachment to free it\n"
    );
    let live = without_since(json_of(&sb, &["list", "--json"]));
    assert_eq!(
        live,
        json!([{"pool": "tiny", "address": "10.45.1.20", "network": "tiny-net", "container_id": "c2", "ifname": "eth0",
                "identity": "prod/web-0", "state": "leased", "held_until": null}])
    );

    // Releasing the attachment frees its address at once: no hold for web-0.
    assert_eq!(
        stdout(&sb, &["release", "--network", "tiny-net", "--container", "c2", "--ifname", "eth0"]),
        "released 10.45.1.20 (pool tiny) held by container c2 interface eth0 of network \"tiny-net\"\n"
    );
    assert_eq!(stdout(&sb, &["list"]), "no leases\n");
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("other-0"))), ["10.45.1.20/24"]);
    assert_eq!(stdout(&sb, &["check"]), "ok\n");
}

#[test]
fn pools_and_metrics_count_a_hold_as_neither_lease_nor_free() {
    let sb = Sandbox::new();
    let config = network(&sb, "sticky-net", blue(), json!({"hold": 600}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.45.0.10/24"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.45.0.11/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();

    let metrics = stdout(&sb, &["metrics"]);
    let pool = "{network=\"sticky-net\",pool=\"blue\"}";
    assert_eq!(
        lines_with(&metrics, pool),
        [
            format!("ipam_delegated_pool_size_addresses{pool} 4"),
            format!("ipam_delegated_pool_used_addresses{pool} 2"),
            format!("ipam_delegated_pool_free_addresses{pool} 2"),
            format!("ipam_delegated_pool_leases{pool} 1"),
            format!("ipam_delegated_pool_held_addresses{pool} 1"),
        ]
    );
    assert_eq!(
        lines_with(&metrics, " ipam_delegated_pool_held_addresses "),
        [
            "# HELP ipam_delegated_pool_held_addresses Addresses of the pool held for a workload identity whose \
             attachment is gone (ipam-da-sticky), until the hold ends: neither leases nor free.",
            "# TYPE ipam_delegated_pool_held_addresses gauge",
        ]
    );
    let pools = json_of(&sb, &["pools", "--json"]);
    assert_eq!(
        pools,
        json!([{"network": "sticky-net", "name": "blue", "subnets": ["10.45.0.0/24"], "size": 4, "used": 2,
                "free": 2, "held": 1, "percent_used": 50.0, "next": "10.45.0.12"}])
    );

    // The identity back: its hold is its lease again.
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("db-0"))), ["10.45.0.10/24"]);
    let metrics = stdout(&sb, &["metrics"]);
    assert_eq!(
        lines_with(&metrics, pool)[1..],
        [
            format!("ipam_delegated_pool_used_addresses{pool} 2"),
            format!("ipam_delegated_pool_free_addresses{pool} 2"),
            format!("ipam_delegated_pool_leases{pool} 2"),
            format!("ipam_delegated_pool_held_addresses{pool} 0"),
        ]
    );
}

#[test]
fn an_ended_hold_is_listed_as_expired_and_counted_free_until_the_next_add_takes_it() {
    let sb = Sandbox::new();
    let config = network(&sb, "tiny-net", tiny(), json!({"hold": 1}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.45.1.20/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    let pool = "{network=\"tiny-net\",pool=\"tiny\"}";
    let figures = |sb: &Sandbox| -> (Vec<String>, Value) {
        let metrics = stdout(sb, &["metrics"]);
        let lines = lines_with(&metrics, pool).iter().map(|l| l.replace(pool, " ")).collect();
        let pools = json_of(sb, &["pools", "--json"]);
        (lines, json!([pools[0]["used"], pools[0]["free"], pools[0]["held"], pools[0]["next"]]))
    };
    // Held (unless this machine took over a second to get here).
    let listed = json_of(&sb, &["list", "--json"]);
    if listed[0]["held_until"].as_str() > Some(iso8601(now()).as_str()) {
        assert_eq!(listed[0]["state"], "held", "{listed}");
        let (metrics, pools) = figures(&sb);
        assert!(metrics.contains(&"ipam_delegated_pool_held_addresses  1".to_string()), "{metrics:?}");
        assert_eq!(pools, json!([1, 0, 1, null]));
    }

    std::thread::sleep(Duration::from_millis(2100));
    let rows = table_rows(&stdout(&sb, &["list"]));
    assert_eq!(rows[1][..6], ["tiny", "10.45.1.20", "tiny-net", "c1", "eth0", "expired"]);
    assert_eq!(rows[1][7], "prod/db-0");
    let listed = json_of(&sb, &["list", "--json"]);
    assert_eq!((&listed[0]["state"], &listed[0]["identity"]), (&json!("expired"), &json!("prod/db-0")), "{listed}");
    assert!(listed[0]["held_until"].as_str().is_some_and(is_iso8601), "{listed}");
    let (metrics, pools) = figures(&sb);
    assert_eq!(
        metrics,
        [
            "ipam_delegated_pool_size_addresses  1",
            "ipam_delegated_pool_used_addresses  0",
            "ipam_delegated_pool_free_addresses  1",
            "ipam_delegated_pool_leases  0",
            "ipam_delegated_pool_held_addresses  0",
        ]
    );
    assert_eq!(pools, json!([0, 1, 0, "10.45.1.20"]), "next is the ended hold's address");

    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.45.1.20/24"]);
    let rows = table_rows(&stdout(&sb, &["list"]));
    assert_eq!(rows[1], ["tiny", "10.45.1.20", "tiny-net", "c2", "eth0", "leased", "-", "prod/web-0"]);
}

#[test]
fn check_names_a_hold_without_identity_and_a_sharer_without_a_live_lease() {
    let sb = Sandbox::new();
    let config = network(&sb, "sticky-net", blue(), json!({"shareLive": true}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c-src", &pod("vm-1"))), ["10.45.0.10/24"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c-dst", &pod("vm-1"))), ["10.45.0.10/24"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c-db", &pod("db-0"))), ["10.45.0.11/24"]);
    del(&sb, &config, "c-db", &pod("db-0")).assert_quiet_success();
    assert_eq!(stdout(&sb, &["check"]), "ok\n", "a hold and a sharer are sound");

    // What no plugin writes: the hold loses its identity, and the shared
    // lease becomes a hold under its sharer (and its holder's pod, kept for
    // the node agent, the pod of an attachment without a lease).
    let sql = rusqlite::Connection::open(sb.db()).expect("opening the database");
    sql.execute("UPDATE leases SET identity = NULL WHERE address = '10.45.0.11'", []).expect("update");
    sql.execute("UPDATE leases SET held_until = ?1 WHERE address = '10.45.0.10'", [now() + 600]).expect("update");
    drop(sql);
    let damaged = tool(&sb, &["check"]);
    assert_eq!(damaged.status, 1, "{damaged:#?}");
    assert_eq!(
        damaged.stdout,
        "hold on 10.45.0.11 (pool blue of network \"sticky-net\") names no identity\n\
         container c-dst interface eth0 of network \"sticky-net\" shares 10.45.0.10, which has no live lease: it is \
         a hold\n\
         attachment_pods names container c-src interface eth0 of network \"sticky-net\", which holds no lease\n"
    );
    assert_eq!(damaged.stderr, format!("ipam-delegated: integrity check of {} failed\n", sb.db().display()));
}
