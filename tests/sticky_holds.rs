//! How long a sticky address is held, through the real stack on one node
//! (ipam-delegated running ipam-ds-pool, ipam-da-static, ipam-da-sticky
//! and ipam-da-sequential on one allocation database): a hold lasts at
//! least `hold` seconds however late in a second it starts, it does not
//! outlast `hold` once the node's clock went back, a hold past its end does
//! not keep a pool renamed over its subnet refused (and one that has not
//! ended is named as a hold, with the way to end it), and the attachment's
//! `args` and CNI_ARGS are read as the contract says or refused.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::sticky::{add, del, network, ok_addresses, pod};
use support::{assert_error, bin_dir, list_leases, run_args, Outcome, Sandbox};

/// Debian's libfaketime (package faketime): a process whose clock is shifted.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One pool of one address, 10.46.`third`.2, named `name`.
fn one_address(name: &str, third: u8) -> Value {
    json!([{"name": name, "ranges": [{"subnet": format!("10.46.{third}.0/24"), "rangeStart": format!("10.46.{third}.2"), "rangeEnd": format!("10.46.{third}.2")}]}])
}

/// The operator's tool on the sandbox's database.
fn tool(sb: &Sandbox, args: &[&str]) -> Outcome {
    let db = sb.db();
    let mut all = vec!["--database", db.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    run_args(&bin_dir().join("ipam-delegated"), &all, &[], b"", None)
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs_f64()
}

/// The one row `list --json` shows for `address`.
fn listed(sb: &Sandbox, address: &str) -> Value {
    let rows = list_leases(&sb.db());
    let mine: Vec<&Value> =
        rows.as_array().expect("list --json is an array").iter().filter(|r| r["address"] == address).collect();
    assert_eq!(mine.len(), 1, "one row for {address}: {rows}");
    mine[0].clone()
}

/// Unix seconds of `list`'s `2026-01-02T03:04:05Z`.
fn unix_of(iso: &str) -> i64 {
    let digits = |range: std::ops::Range<usize>| iso[range].parse::<i64>().unwrap_or_else(|e| panic!("{iso}: {e}"));
    let (y, m, d) = (digits(0..4), digits(5..7), digits(8..10));
    let (hh, mm, ss) = (digits(11..13), digits(14..16), digits(17..19));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hh * 3600 + mm * 60 + ss
}

#[test]
fn a_one_second_hold_lasts_a_second_however_late_in_a_second_it_starts() {
    let sb = Sandbox::new();
    let config = network(&sb, one_address("tiny", 1), json!({"hold": 1}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.46.1.2/24"]);
    // The DEL late in a second: a hold that ends on the next whole second
    // would last a tenth of a second.
    while unix_now().fract() < 0.90 || unix_now().fract() > 0.92 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let released = Instant::now();
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    // Just past the next whole second, well within the hold.
    while unix_now().fract() > 0.5 || released.elapsed() < Duration::from_millis(100) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let taken = add(&sb, &config, "c2", &pod("web-0"));
    let asked_after = released.elapsed();
    // Measured after the ADD answered: it asked within the second.
    assert!(asked_after < Duration::from_millis(1000), "the test's ADD came too late to tell: {asked_after:?}");
    assert_error(&taken, 100, &["no free"]);
    // And it does end: free for anyone once the hold and its rounding are past.
    std::thread::sleep(Duration::from_millis(2100).saturating_sub(released.elapsed()));
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.46.1.2/24"]);
}

#[test]
fn a_hold_made_while_the_clock_was_ahead_ends_a_hold_after_the_clock_is_corrected() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: apt-get install faketime (the test needs a DEL whose clock is ahead)"
    );
    // A day ahead, and past the longest hold (366 days) ahead.
    for (third, ahead) in [(2u8, "+1d"), (3, "+400d")] {
        let sb = Sandbox::new();
        let config = network(&sb, one_address("tiny", third), json!({"hold": 2}));
        let address = format!("10.46.{third}.2");
        assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), [format!("{address}/24")]);
        let shifted = [("CNI_ARGS", pod("db-0")), ("LD_PRELOAD", LIBFAKETIME.into()), ("FAKETIME", ahead.into())];
        let shifted: Vec<(&str, &str)> = shifted.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = sb.delegated("DEL", &config, "c1", &shifted);
        out.assert_quiet_success();
        let released = Instant::now();
        // The clock is right again: the hold is read as ending `hold` from
        // now at the latest, not at the end the clock ahead stamped.
        let row = listed(&sb, &address);
        assert_eq!(row["state"], "held", "{ahead}: {row}");
        let until = unix_of(row["held_until"].as_str().expect("held_until of a hold"));
        assert!(until <= unix_now() as i64 + 3, "{ahead}: the hold ends at {until}, now is {}: {row}", unix_now());
        // Nobody else gets the address within the hold ...
        assert_error(&add(&sb, &config, "c2", &pod("web-0")), 100, &["no free"]);
        // ... and anyone does once it ended: 2 s from that ADD, which noticed
        // the clock went back, plus the rounding up, plus room for a slow
        // machine.
        std::thread::sleep(Duration::from_millis(4500).saturating_sub(released.elapsed()));
        let after = add(&sb, &config, "c2", &pod("web-0"));
        assert_eq!(ok_addresses(&after), [format!("{address}/24")], "{ahead}: {:?}", after.stdout);
    }
}

#[test]
fn an_expired_hold_does_not_keep_a_renamed_pool_refused() {
    let sb = Sandbox::new();
    let blue = network(&sb, one_address("blue", 4), json!({"hold": 1}));
    assert_eq!(ok_addresses(&add(&sb, &blue, "c1", &pod("db-0"))), ["10.46.4.2/24"]);
    del(&sb, &blue, "c1", &pod("db-0")).assert_quiet_success();
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(listed(&sb, "10.46.4.2")["state"], "expired");
    // The pool renamed over the same subnet: the hold that ended is no
    // reason to refuse it, on this ADD or any later one.
    let green = network(&sb, one_address("green", 4), json!({"hold": 1}));
    assert_eq!(ok_addresses(&add(&sb, &green, "c2", &pod("web-0"))), ["10.46.4.2/24"]);
    assert_eq!(listed(&sb, "10.46.4.2")["pool"], "green");
    del(&sb, &green, "c2", &pod("web-0")).assert_quiet_success();
}

#[test]
fn a_live_hold_keeps_a_renamed_pool_refused_naming_the_hold_and_how_to_end_it() {
    let sb = Sandbox::new();
    let blue = network(&sb, one_address("blue", 5), json!({"hold": 600}));
    assert_eq!(ok_addresses(&add(&sb, &blue, "c1", &pod("db-0"))), ["10.46.5.2/24"]);
    del(&sb, &blue, "c1", &pod("db-0")).assert_quiet_success();
    let green = network(&sb, one_address("green", 5), json!({"hold": 600}));
    let refused = add(&sb, &green, "c2", &pod("web-0"));
    assert_error(
        &refused,
        7,
        &[
            "pool blue",
            "10.46.5.2 held for identity \"prod/db-0\" until 20",
            "release --identity prod/db-0 --network sticky-net",
            "forget-pool --network sticky-net --pool blue",
        ],
    );
    let (_, msg, details) = refused.error();
    let words = format!("{msg} {details}");
    assert!(!words.contains(" lease") && !words.contains("DEL the attachments"), "a hold is not a lease: {words}");
    // The way out it names works.
    let ended = tool(&sb, &["release", "--identity", "prod/db-0", "--network", "sticky-net"]);
    assert_eq!(ended.status, 0, "{ended:#?}");
    assert_eq!(ok_addresses(&add(&sb, &green, "c2", &pod("web-0"))), ["10.46.5.2/24"]);
}

#[test]
fn malformed_args_are_error_7_naming_the_field_and_value_and_write_nothing() {
    let sb = Sandbox::new();
    let config = network(&sb, one_address("tiny", 6), json!({}));
    for (args, field, value) in [
        (json!(5), "args", "5"),
        (json!("x"), "args", "\"x\""),
        (json!({"cni": "x"}), "args.cni", "\"x\""),
        (json!({"cni": [1]}), "args.cni", "[1]"),
    ] {
        let mut bad = config.clone();
        bad["args"] = args;
        assert_error(&add(&sb, &bad, "c1", &pod("db-0")), 7, &[field, value]);
    }
    // Release must not fail: DEL with such `args` succeeds (it reads the
    // identity from the database).
    let mut bad = config.clone();
    bad["args"] = json!(5);
    del(&sb, &bad, "c1", &pod("db-0")).assert_quiet_success();
    // Keys of `args` other than `cni` are the runtime's: not read.
    let mut labels = config.clone();
    labels["args"] = json!({"labels": [{"key": "app", "value": "db"}], "cni": {"identity": "kubevirt/vm-a"}});
    assert_eq!(ok_addresses(&add(&sb, &labels, "c1", &pod("db-0"))), ["10.46.6.2/24"], "nothing was leased before");
    del(&sb, &labels, "c1", &pod("db-0")).assert_quiet_success();
    assert_eq!(listed(&sb, "10.46.6.2")["identity"], "kubevirt/vm-a");
}

#[test]
fn a_cni_args_key_given_twice_with_two_values_is_error_4_naming_both() {
    let sb = Sandbox::new();
    let config = network(&sb, one_address("tiny", 7), json!({}));
    let twice = "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0;K8S_POD_NAME=db-1";
    assert_error(&add(&sb, &config, "c1", twice), 4, &["CNI_ARGS", "K8S_POD_NAME", "db-0", "db-1"]);
    let mut static_ip = config.clone();
    static_ip["ipam"]["delegates"] = json!(["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"]);
    assert_error(&add(&sb, &static_ip, "c1", "IP=10.46.7.2;IP=10.46.7.3"), 4, &["CNI_ARGS", "IP", "10.46.7.3"]);
    // The same value twice says one thing; a key the suite does not read
    // is not looked at.
    let same = "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0;K8S_POD_NAME=db-0;X=1;X=2";
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", same)), ["10.46.7.2/24"], "nothing was leased before");
    // DEL reads the identity from the database: it succeeds whatever CNI_ARGS says.
    del(&sb, &config, "c1", twice).assert_quiet_success();
    let row = listed(&sb, "10.46.7.2");
    assert_eq!((row["state"].as_str(), row["identity"].as_str()), (Some("held"), Some("prod/db-0")), "{row}");
}

#[test]
fn an_integral_hold_written_as_a_float_is_that_many_seconds() {
    let sb = Sandbox::new();
    let config = network(&sb, one_address("tiny", 8), json!({"hold": 600.0}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.46.8.2/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    let row = listed(&sb, "10.46.8.2");
    let until = unix_of(row["held_until"].as_str().expect("held_until"));
    let now = unix_now() as i64;
    assert!((now + 595..=now + 601).contains(&until), "held for 600 s: {row}");
    let fractional = network(&sb, one_address("tiny", 8), json!({"hold": 600.5}));
    assert_error(&add(&sb, &fractional, "c2", &pod("db-1")), 7, &["ipam.sticky.hold", "600.5"]);
}
