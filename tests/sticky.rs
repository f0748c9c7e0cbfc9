//! Sticky addresses on one node, through the real stack: ipam-delegated
//! running ipam-ds-pool, ipam-da-static, ipam-da-sticky and
//! ipam-da-sequential on one allocation database. A workload identity
//! (CNI_ARGS K8S_POD_NAMESPACE/K8S_POD_NAME, or args.cni.identity) gets its
//! address back when it is re-created under a new container id, while the
//! hold lasts; nobody else gets it meanwhile.

mod support;

use serde_json::{json, Value};
use support::sticky::{add, del, network, ok_addresses, pod};
use support::{assert_error, Sandbox};

fn small_pool() -> Value {
    json!([{"name": "blue", "ranges": [{"subnet": "10.44.0.0/24", "rangeStart": "10.44.0.10", "rangeEnd": "10.44.0.13"}]}])
}

#[test]
fn a_re_created_pod_gets_its_address_back_and_another_pod_does_not() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({}));
    let first = ok_addresses(&add(&sb, &config, "c1", &pod("db-0")));
    assert_eq!(first, ["10.44.0.10/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();

    // Held for db-0: another pod skips it, even though it is the next one
    // round robin would reach after wrapping.
    let other = ok_addresses(&add(&sb, &config, "c2", &pod("web-0")));
    assert_eq!(other, ["10.44.0.11/24"]);

    // db-0 re-created under a new container id: the same address.
    let again = ok_addresses(&add(&sb, &config, "c3", &pod("db-0")));
    assert_eq!(again, first);
    // A repeat ADD of the same attachment answers the same.
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("db-0"))), first);
    // CHECK with the ADD's result passes for the attachment that holds it now.
    let mut check = config.clone();
    check["prevResult"] = add(&sb, &config, "c3", &pod("db-0")).result().clone();
    let checked = sb.delegated("CHECK", &check, "c3", &[("CNI_ARGS", &pod("db-0"))]);
    checked.assert_quiet_success();
}

#[test]
fn nobody_else_gets_a_held_address_and_a_static_request_for_it_is_101_naming_the_identity() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({"hold": 600}));
    let held = ok_addresses(&add(&sb, &config, "c1", &pod("db-0")))[0].clone();
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    // The pool has four addresses; one is held: three pods get the other three.
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let got = ok_addresses(&add(&sb, &config, &format!("o{i}"), &pod(name)));
        assert_ne!(got[0], held, "{name} got the held address");
    }
    let full = add(&sb, &config, "o9", &pod("d"));
    assert_error(&full, 100, &["no free"]);

    let mut by_name = config.clone();
    by_name["args"] = json!({"cni": {"ips": ["10.44.0.10"]}});
    let refused = add(&sb, &by_name, "s1", &pod("someone-else"));
    assert_error(&refused, 101, &["10.44.0.10", "held for identity \"prod/db-0\" until 20"]);

    // The identity itself may ask for it by name.
    let own = ok_addresses(&add(&sb, &by_name, "c2", &pod("db-0")));
    assert_eq!(own, ["10.44.0.10/24"]);
}

#[test]
fn after_the_hold_ends_the_address_is_free_for_anyone() {
    let sb = Sandbox::new();
    let config = network(
        &sb,
        json!([{"name": "tiny", "ranges": [{"subnet": "10.44.1.0/29", "rangeStart": "10.44.1.2", "rangeEnd": "10.44.1.2"}]}]),
        json!({"hold": 1}),
    );
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.44.1.2/29"]);
    // However late in a second the DEL comes, the hold lasts a second: the
    // ADD just after it falls inside (tests/sticky_holds.rs aims at the end
    // of a second).
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    assert_error(&add(&sb, &config, "c2", &pod("web-0")), 100, &["no free"]);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.44.1.2/29"]);
    // db-0 comes back too late: its address is web-0's now.
    del(&sb, &config, "c2", &pod("web-0")).assert_quiet_success();
}

#[test]
fn hold_zero_and_attachments_without_identity_free_their_address_as_before() {
    let sb = Sandbox::new();
    let tiny = json!([{"name": "tiny", "ranges": [{"subnet": "10.44.2.0/29", "rangeStart": "10.44.2.2", "rangeEnd": "10.44.2.2"}]}]);
    let no_hold = network(&sb, tiny.clone(), json!({"hold": 0}));
    assert_eq!(ok_addresses(&add(&sb, &no_hold, "c1", &pod("db-0"))), ["10.44.2.2/29"]);
    del(&sb, &no_hold, "c1", &pod("db-0")).assert_quiet_success();
    assert_eq!(ok_addresses(&add(&sb, &no_hold, "c2", &pod("other"))), ["10.44.2.2/29"]);
    del(&sb, &no_hold, "c2", &pod("other")).assert_quiet_success();

    // No identity (no K8S_POD_NAME): not sticky.
    let sticky = network(&sb, tiny, json!({}));
    assert_eq!(ok_addresses(&add(&sb, &sticky, "c3", "K8S_POD_NAMESPACE=prod")), ["10.44.2.2/29"]);
    del(&sb, &sticky, "c3", "K8S_POD_NAMESPACE=prod").assert_quiet_success();
    assert_eq!(ok_addresses(&add(&sb, &sticky, "c4", &pod("x"))), ["10.44.2.2/29"]);
}

#[test]
fn two_live_attachments_of_one_identity_are_101_unless_share_live() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({}));
    let first = ok_addresses(&add(&sb, &config, "src", &pod("vm-1")));
    let second = add(&sb, &config, "dst", &pod("vm-1"));
    assert_error(&second, 101, &["prod/vm-1", "container src", "shareLive"]);

    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({"shareLive": true}));
    let first_shared = ok_addresses(&add(&sb, &config, "src", &pod("vm-1")));
    assert_eq!(first_shared, first);
    assert_eq!(ok_addresses(&add(&sb, &config, "dst", &pod("vm-1"))), first, "the migration target shares it");
    // The source goes: the target keeps the address, live.
    del(&sb, &config, "src", &pod("vm-1")).assert_quiet_success();
    let mut check = config.clone();
    check["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": first[0]}]});
    sb.delegated("CHECK", &check, "dst", &[("CNI_ARGS", &pod("vm-1"))]).assert_quiet_success();
    assert_eq!(ok_addresses(&add(&sb, &config, "other", &pod("web"))), ["10.44.0.11/24"]);
    // The target goes too: now it is held, and comes back.
    del(&sb, &config, "dst", &pod("vm-1")).assert_quiet_success();
    assert_eq!(ok_addresses(&add(&sb, &config, "third", &pod("vm-1"))), first);
}

#[test]
fn args_cni_identity_wins_and_gc_of_a_gone_attachment_holds_its_address() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({}));
    let mut vm = config.clone();
    vm["args"] = json!({"cni": {"identity": "kubevirt/vm-a"}});
    let first = ok_addresses(&add(&sb, &vm, "c1", &pod("virt-launcher-abc")));
    // GC with no valid attachment: c1 is gone without a DEL.
    let mut gc = config.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["cni.dev/valid-attachments"] = json!([]);
    let collected = sb.delegated("GC", &gc, "c1", &[]);
    collected.assert_quiet_success();
    // The VM's next launcher pod has another pod name, the same identity.
    assert_eq!(ok_addresses(&add(&sb, &vm, "c2", &pod("virt-launcher-xyz"))), first);
}

#[test]
fn a_failed_add_keeps_the_identity_s_address_held() {
    let sb = Sandbox::new();
    // Dual-stack, where IPv6 has no room: the ADD fails after IPv4 was taken.
    let pools = json!([
        {"name": "v4", "ranges": [{"subnet": "10.44.3.0/24", "rangeStart": "10.44.3.5", "rangeEnd": "10.44.3.9"}]},
        {"name": "v6", "ranges": [{"subnet": "fd00:44::/64", "rangeStart": "fd00:44::5", "rangeEnd": "fd00:44::5"}]}
    ]);
    let config = network(&sb, pools, json!({}));
    let first = ok_addresses(&add(&sb, &config, "c1", &pod("db-0")));
    assert_eq!(first, ["10.44.3.5/24", "fd00:44::5/64"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    // Both come back together.
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("db-0"))), first);
    del(&sb, &config, "c2", &pod("db-0")).assert_quiet_success();
    // Another pod cannot get IPv6 (held): its ADD fails and rolls back,
    // leaving db-0's holds as they were.
    assert_error(&add(&sb, &config, "x", &pod("web-0")), 100, &["IPv6"]);
    assert_eq!(ok_addresses(&add(&sb, &config, "c3", &pod("db-0"))), first);
}

#[test]
fn a_hold_the_pool_no_longer_hands_out_is_dropped_with_a_warning() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({}));
    assert_eq!(ok_addresses(&add(&sb, &config, "c1", &pod("db-0"))), ["10.44.0.10/24"]);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    let mut excluded = config.clone();
    excluded["ipam"]["pools"][0]["exclude"] = json!(["10.44.0.10/32"]);
    let out = add(&sb, &excluded, "c2", &pod("db-0"));
    assert_eq!(ok_addresses(&out), ["10.44.0.11/24"]);
    assert!(out.stderr.contains("10.44.0.10") && out.stderr.contains("dropped"), "{}", out.stderr);
}

#[test]
fn sticky_settings_without_the_delegate_are_a_warning_and_change_nothing() {
    let sb = Sandbox::new();
    let mut config = network(
        &sb,
        json!([{"name": "tiny", "ranges": [{"subnet": "10.44.4.0/29", "rangeStart": "10.44.4.2", "rangeEnd": "10.44.4.2"}]}]),
        json!({"hold": 600}),
    );
    config["ipam"]["delegates"] = json!(["ipam-ds-pool", "ipam-da-static", "ipam-da-sequential"]);
    let out = add(&sb, &config, "c1", &pod("db-0"));
    assert_eq!(ok_addresses(&out), ["10.44.4.2/29"]);
    assert!(out.stderr.contains("ipam.sticky") && out.stderr.contains("ipam-da-sticky"), "{}", out.stderr);
    del(&sb, &config, "c1", &pod("db-0")).assert_quiet_success();
    assert_eq!(ok_addresses(&add(&sb, &config, "c2", &pod("web-0"))), ["10.44.4.2/29"], "nothing was held");
}

#[test]
fn bad_sticky_settings_are_error_7_naming_the_field_and_write_nothing() {
    let sb = Sandbox::new();
    let config = network(&sb, small_pool(), json!({"hold": "ten minutes"}));
    assert_error(&add(&sb, &config, "c1", &pod("db-0")), 7, &["ipam.sticky.hold", "ten minutes"]);
    let config = network(&sb, small_pool(), json!({"identty": ["K8S_POD_NAME"]}));
    assert_error(&add(&sb, &config, "c1", &pod("db-0")), 7, &["ipam.sticky.identty", "identity"]);
    let good = network(&sb, small_pool(), json!({}));
    assert_eq!(ok_addresses(&add(&sb, &good, "c1", &pod("db-0"))), ["10.44.0.10/24"], "nothing was leased before");
}
