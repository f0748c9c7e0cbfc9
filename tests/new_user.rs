//! What a new user hit, each held down by a test through the real
//! executables: a stack that ends without an allocator answered success with
//! no address, and typos in the configuration passed in silence.

mod stack;
mod support;

use serde_json::{json, Value};
use support::{list_leases, Sandbox};

fn network(sb: &Sandbox, delegates: &[&str], pools: Value) -> Value {
    let mut c = stack::config("1.0.0", "newbie", "bridge", &sb.db(), pools);
    c["ipam"]["delegates"] = json!(delegates);
    c
}

fn blue() -> Value {
    json!([{"name": "blue", "subnet": "10.77.0.0/24"}])
}

fn lease_count(sb: &Sandbox) -> usize {
    list_leases(&sb.db()).as_array().map_or(0, Vec::len)
}

#[test]
fn a_stack_that_ends_without_an_allocator_is_error_7_naming_what_to_add() {
    let sb = Sandbox::new();
    for delegates in [&["ipam-ds-pool"][..], &["ipam-ds-pool", "ipam-da-static"]] {
        let out = sb.add(&network(&sb, delegates, blue()), "c1");
        let (code, msg, _) = out.error();
        assert_eq!(code, 7, "{delegates:?}: {msg}");
        let last = delegates.last().unwrap();
        for part in [
            "ipam.delegates",
            &format!("ends with {last}"),
            "end the stack with an allocation delegate such as ipam-da-sequential",
        ] {
            assert!(msg.contains(part), "{part:?} in {msg}");
        }
        assert_eq!(lease_count(&sb), 0, "rolled back: nothing held");
    }
    // A static request at the end of the stack is an address: that stack is fine.
    let with_ip =
        stack::with_static(&network(&sb, &["ipam-ds-pool", "ipam-da-static"], blue()), &["10.77.0.9".parse().unwrap()]);
    let out = sb.add(&with_ip, "c1");
    assert_eq!(stack::addresses(out.result()), ["10.77.0.9".parse::<std::net::IpAddr>().unwrap()]);
    // Called on its own, outside a stack, a suite delegate answers as before.
    let out = sb.cni("ipam-ds-pool", "ADD", &network(&sb, &["ipam-ds-pool"], blue()), &[("CNI_CONTAINERID", "c2")]);
    assert_eq!(out.status, 0, "{}", out.stderr);
}

#[test]
fn a_typo_in_a_pool_is_error_7_with_the_key_meant() {
    let sb = Sandbox::new();
    let pools = json!([{"name": "blue", "subnet": "10.77.0.0/24", "exlude": ["10.77.0.2"]}]);
    let out = sb.add(&network(&sb, &support::FULL_STACK, pools), "c1");
    let (code, msg, _) = out.error();
    assert_eq!(code, 7);
    assert_eq!(
        msg,
        "invalid network configuration: ipam.pools[0].exlude: unknown key `exlude`: did you mean `exclude`?"
    );
    assert!(!sb.db().exists(), "refused before the database is touched");
}

#[test]
fn a_near_miss_of_an_ipam_key_is_warned_about_once_on_stderr_and_in_the_log() {
    let sb = Sandbox::new();
    let log = sb.db().with_file_name("ipam.log");
    let mut config = network(&sb, &support::FULL_STACK, blue());
    config["ipam"]["lockTimout"] = json!(5);
    config["ipam"]["logFile"] = json!(log);
    let out = sb.add(&config, "c1");
    assert_eq!(out.status, 0, "{}", out.stderr);
    let warning = "ipam.lockTimout is not a key the suite reads (did you mean `lockTimeout`?)";
    assert_eq!(out.stderr.matches(warning).count(), 1, "once, by the orchestrator: {}", out.stderr);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains(warning), "{logged}");
}
