//! ipam-delegated, the orchestrator, against fake delegates (see tests/support):
//! what each delegate is given, in which order, what reaches the caller, and
//! how every kind of failure is rolled back or reported.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{assert_error, with_prev, Outcome, Response, Rng, Sandbox, CONTAINER_ID, IFNAME, NETNS};

const DELEGATED: &str = "ipam-delegated";
const ALL_VERSIONS: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A network configuration whose IPAM is ipam-delegated running `delegates`.
fn config(version: &str, delegates: &[&str]) -> Value {
    json!({
        "cniVersion": version,
        "name": "testnet",
        "type": "bridge",
        "ipam": {"type": "ipam-delegated", "delegates": delegates}
    })
}

/// A 1.0.0 result, told apart from others by `tag` (an address 10.0.0.<tag>).
fn result(tag: u8) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "ips": [{"address": format!("10.0.0.{tag}/24"), "gateway": "10.0.0.1"}],
        "routes": [],
        "dns": {},
        "pools": [{"name": format!("pool-{tag}"), "subnet": "10.0.0.0/24"}]
    })
}

fn calls(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// The README's example flow

/// Step 1's network configuration, byte for byte as the README shows it.
const README_CONFIG: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "example",
  "type": "bridge",
  "ipam": {
    "type": "ipam-delegated",
    "delegates": [
      "ipam-ds-hello",
      "ipam-da-world"
    ],
    "hello": "local-pool",
    "world": 23
  }
}
"#;

/// Step 4: ipam-ds-hello's result.
const README_HELLO: &str = r#"{
  "cniVersion": "1.0.0",
  "ips": [],
  "routes": [],
  "dns": {},
  "pools": [
    { "name": "local-pool", "subnet": "10.168.0.0/24" }
  ]
}
"#;

/// Step 6: ipam-da-world's result, which step 7 returns unchanged.
const README_WORLD: &str = r#"{
  "cniVersion": "1.0.0",
  "ips": [
    { "address": "10.168.0.23/24", "gateway": "10.168.0.1" }
  ],
  "routes": [
    { "dst": "0.0.0.0/0", "gw": "10.168.0.1" }
  ],
  "dns": {}
}
"#;

#[test]
fn readme_example_flow() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-hello");
    sb.fake("ipam-da-world");
    sb.respond("ipam-ds-hello", "ADD", Response::text(README_HELLO));
    sb.respond("ipam-da-world", "ADD", Response::text(README_WORLD));
    let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod";
    let out = sb.cni_raw(DELEGATED, "ADD", README_CONFIG.as_bytes(), &[("CNI_ARGS", args)]);

    // 7: the result is ipam-da-world's, exactly.
    let world: Value = serde_json::from_str(README_WORLD).unwrap();
    assert_eq!(out.result(), &world, "{out:#?}");
    assert_eq!(out.stdout.lines().count(), 1, "one JSON document on stdout: {out:#?}");
    assert_eq!(sb.call_list(), calls(&["ipam-ds-hello ADD", "ipam-da-world ADD"]));

    // 3: ipam-ds-hello gets exactly the bytes ipam-delegated got.
    assert_eq!(String::from_utf8(sb.record(0).0).unwrap(), README_CONFIG);

    // 5: ipam-da-world gets the original configuration plus prevResult =
    // ipam-ds-hello's output. (The README's step 5 shows a "gateway" in the
    // pool that step 4 did not output; the contract says the output is passed
    // as it is, and so it is here.)
    let original: Value = serde_json::from_str(README_CONFIG).unwrap();
    let hello: Value = serde_json::from_str(README_HELLO).unwrap();
    assert_eq!(sb.record_json(1), with_prev(&original, &hello));

    // Both see the caller's environment.
    let expected_env: std::collections::BTreeMap<String, String> = [
        ("CNI_ARGS", args.to_string()),
        ("CNI_COMMAND", "ADD".to_string()),
        ("CNI_CONTAINERID", CONTAINER_ID.to_string()),
        ("CNI_IFNAME", IFNAME.to_string()),
        ("CNI_NETNS", NETNS.to_string()),
        ("CNI_PATH", sb.cni_path()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for i in 0..2 {
        assert_eq!(sb.record(i).1, expected_env, "environment of call {i}");
    }
}

#[test]
fn the_last_delegates_pools_are_not_returned() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-a");
    sb.fake("ipam-da-b");
    sb.respond("ipam-ds-a", "ADD", Response::json(&result(2)));
    sb.respond("ipam-da-b", "ADD", Response::json(&result(3)));
    let out = sb.cni(DELEGATED, "ADD", &config("1.0.0", &["ipam-ds-a", "ipam-da-b"]), &[]);
    let mut expected = result(3);
    expected.as_object_mut().unwrap().remove("pools");
    assert_eq!(out.result(), &expected);
    assert_eq!(sb.record_json(1)["prevResult"], result(2), "the pools reach the next delegate");
}

// ---------------------------------------------------------------------------
// ADD failures and their rollback

const STACK: [&str; 3] = ["ipam-ds-alpha", "ipam-da-beta", "ipam-da-gamma"];

/// How the DELs of a rollback answer.
#[derive(Clone, Copy, Debug)]
enum DelAnswers {
    /// alpha's DEL prints a result, beta's DEL fails (error object).
    PrintThenFail,
    /// alpha's DEL prints nothing, beta's DEL prints a result.
    NothingThenPrint,
}

#[test]
fn add_failure_at_each_position_rolls_back_in_order() {
    for answers in [DelAnswers::PrintThenFail, DelAnswers::NothingThenPrint] {
        for failed in 0..STACK.len() {
            let sb = Sandbox::new();
            for (i, name) in STACK.iter().enumerate() {
                sb.fake(name);
                let add = if i == failed {
                    Response::error(101 + i as u32, &format!("{name} says no"))
                } else {
                    Response::json(&result(10 + i as u8))
                };
                sb.respond(name, "ADD", add);
            }
            let del_alpha = json!({"cniVersion": "1.0.0", "ips": [], "dns": {}, "note": "after DEL alpha"});
            let del_beta = json!({"cniVersion": "1.0.0", "ips": [], "dns": {}, "note": "after DEL beta"});
            match answers {
                DelAnswers::PrintThenFail => {
                    sb.respond(STACK[0], "DEL", Response::json(&del_alpha));
                    sb.respond(STACK[1], "DEL", Response::error(11, "database locked"));
                }
                DelAnswers::NothingThenPrint => {
                    sb.respond(STACK[0], "DEL", Response::text(""));
                    sb.respond(STACK[1], "DEL", Response::json(&del_beta));
                }
            }
            sb.respond(STACK[2], "DEL", Response::json(&json!({"ips": [], "note": "after DEL gamma"})));

            let conf = config("1.0.0", &STACK);
            let input = serde_json::to_vec_pretty(&conf).unwrap();
            let out = sb.cni_raw(DELEGATED, "ADD", &input, &[]);
            let case = format!("{answers:?}, failure at {}", failed + 1);

            // The failing delegate's own code and message; details name it and the rollback.
            let (code, msg, details) = out.error();
            assert_eq!((code, msg.as_str()), (101 + failed as u64, format!("{} says no", STACK[failed]).as_str()));
            assert!(details.contains(STACK[failed]) && details.contains("rollback"), "{case}: {details}");
            for name in &STACK[..=failed] {
                assert!(details.contains(&format!("DEL {name:?}")), "{case}: rollback of {name}: {details}");
            }
            assert_eq!(out.json.as_ref().unwrap()["cniVersion"], "1.0.0");

            // ADDs up to the failure, then DEL on the first ..= failed, in order.
            let mut expected: Vec<String> = STACK[..=failed].iter().map(|n| format!("{n} ADD")).collect();
            expected.extend(STACK[..=failed].iter().map(|n| format!("{n} DEL")));
            assert_eq!(sb.call_list(), expected, "{case}");

            // What each DEL was given.
            let first_del = failed + 1;
            if failed == 0 {
                assert_eq!(sb.record(first_del).0, input, "{case}: the first DEL gets the config as received");
            }
            // The prevResult the failed step was given, then what the previous DEL printed.
            let mut prev = (failed > 0).then(|| result(10 + failed as u8 - 1));
            for (k, name) in STACK[..=failed].iter().enumerate() {
                let given = sb.record_json(first_del + k);
                assert_eq!(given.get("prevResult"), prev.as_ref(), "{case}: prevResult of DEL {name}");
                let mut rest = given.clone();
                rest.as_object_mut().unwrap().remove("prevResult");
                assert_eq!(rest, conf, "{case}: DEL {name} gets the original configuration");
                prev = match (answers, k) {
                    (DelAnswers::PrintThenFail, 0) => Some(del_alpha.clone()),
                    (DelAnswers::NothingThenPrint, 1) => Some(del_beta.clone()),
                    _ => prev,
                };
            }
        }
    }
}

/// A two-delegate stack whose second delegate's ADD answers `bad`: the error
/// code is `code`, and both delegates are rolled back.
fn second_add_fails(bad: Response, code: u64, words: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-ok");
    sb.fake("ipam-da-bad");
    sb.respond("ipam-ds-ok", "ADD", Response::json(&result(5)));
    sb.respond("ipam-da-bad", "ADD", bad.clone());
    let out = sb.cni(DELEGATED, "ADD", &config("0.4.0", &["ipam-ds-ok", "ipam-da-bad"]), &[]);
    assert_error(&out, code, words);
    assert_eq!(out.json.as_ref().unwrap()["cniVersion"], "0.4.0", "the error is in the config's version");
    assert_eq!(
        sb.call_list(),
        calls(&["ipam-ds-ok ADD", "ipam-da-bad ADD", "ipam-ds-ok DEL", "ipam-da-bad DEL"]),
        "{bad:?}"
    );
    // Both DELs get the prevResult ipam-da-bad was given (the default fake
    // DEL prints back the prevResult it gets).
    assert_eq!(sb.record_json(2)["prevResult"], result(5));
    assert_eq!(sb.record_json(3)["prevResult"], result(5));
    sb
}

#[test]
fn each_kind_of_add_failure_is_reported_and_rolled_back() {
    // An error object and a non-zero exit: the delegate's code and message.
    second_add_fails(Response::error(101, "10.0.0.9 is in use"), 101, &["10.0.0.9 is in use", "ipam-da-bad"]);
    // The same error object with exit 0 is still a failure.
    second_add_fails(Response { exit: 0, ..Response::error(102, "outside") }, 102, &["outside"]);
    // A bare non-zero exit without output.
    second_add_fails(Response::exit(3), 6, &["ipam-da-bad", "3"]);
    // Output that is not JSON, with exit 0.
    second_add_fails(Response::text("all good!\n"), 6, &["ipam-da-bad", "all good!"]);
    // JSON that is not a result.
    second_add_fails(Response::text("[1, 2]"), 6, &["ipam-da-bad"]);
    second_add_fails(Response::json(&json!({"cniVersion": "1.0.0", "ips": "10.0.0.9"})), 6, &["ips"]);
    // Success without a result.
    second_add_fails(Response::text(""), 6, &["ipam-da-bad"]);
}

#[test]
fn a_delegate_past_the_timeout_is_killed_and_rolled_back() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-ok");
    sb.fake("ipam-da-slow");
    sb.respond("ipam-ds-ok", "ADD", Response::json(&result(5)));
    sb.respond("ipam-da-slow", "ADD", Response { sleep_secs: 4.0, ..Response::json(&result(6)) });
    let mut conf = config("1.0.0", &["ipam-ds-ok", "ipam-da-slow"]);
    conf["ipam"]["timeout"] = json!(1);
    // Built before the clock starts: the first call of a test process builds.
    support::bin_dir();
    let start = Instant::now();
    let out = sb.cni(DELEGATED, "ADD", &conf, &[]);
    let took = start.elapsed();
    assert_error(&out, 105, &["ipam-da-slow"]);
    // Back well before the delegate would have finished on its own (the
    // slack is for the rollback on a loaded machine).
    assert!(took >= Duration::from_secs(1) && took < Duration::from_millis(3800), "took {took:?}");
    assert_eq!(sb.call_list(), calls(&["ipam-ds-ok ADD", "ipam-da-slow ADD", "ipam-ds-ok DEL", "ipam-da-slow DEL"]));
    // Had it survived, it would have left its marker 4 s after it started.
    std::thread::sleep(Duration::from_millis(4500).saturating_sub(start.elapsed()));
    assert!(!sb.woke(1), "the timed-out delegate was not killed");
}

/// A rollback's DEL reaches every delegate that ran, even after one hangs:
/// each DEL gets time of its own, as every DEL does.
#[test]
fn a_rollback_reaches_every_delegate_even_after_one_hangs() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-hang");
    sb.fake("ipam-da-bad");
    sb.respond("ipam-ds-hang", "ADD", Response::json(&result(5)));
    sb.respond("ipam-ds-hang", "DEL", Response { sleep_secs: 30.0, ..Response::text("") });
    sb.respond("ipam-da-bad", "ADD", Response::error(100, "no free address"));
    let mut conf = config("1.0.0", &["ipam-ds-hang", "ipam-da-bad"]);
    conf["ipam"]["timeout"] = json!(1);
    // Built before the clock starts: the first call of a test process builds.
    support::bin_dir();
    let start = Instant::now();
    let out = sb.cni(DELEGATED, "ADD", &conf, &[]);
    let took = start.elapsed();
    // The original error, the rollback's own failure in its details.
    assert_error(&out, 100, &["no free address", "DEL \"ipam-ds-hang\" failed", "DEL \"ipam-da-bad\" ok"]);
    assert_eq!(sb.call_list(), calls(&["ipam-ds-hang ADD", "ipam-da-bad ADD", "ipam-ds-hang DEL", "ipam-da-bad DEL"]));
    assert_eq!(sb.record_json(3)["prevResult"], result(5), "the failed step's prevResult, the hung DEL gave none");
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

#[test]
fn the_default_timeout_does_not_kill_a_slow_but_working_delegate() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-slow");
    sb.respond("ipam-da-slow", "ADD", Response { sleep_secs: 1.5, ..Response::json(&result(6)) });
    let mut conf = config("1.0.0", &["ipam-da-slow"]);
    let out = sb.cni(DELEGATED, "ADD", &conf, &[]);
    assert_eq!(out.result()["ips"], result(6)["ips"]);
    // Nor does an explicit, fractional one.
    conf["ipam"]["timeout"] = json!(2.5);
    assert_eq!(sb.cni(DELEGATED, "ADD", &conf, &[]).result()["ips"], result(6)["ips"]);
    assert!(sb.woke(0) && sb.woke(1));
}

#[test]
fn delegate_stderr_reaches_the_caller() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-ok");
    sb.fake("ipam-da-bad");
    sb.respond(
        "ipam-ds-ok",
        "ADD",
        Response { stderr: "warning from ipam-ds-ok\n".into(), ..Response::json(&result(5)) },
    );
    sb.respond(
        "ipam-da-bad",
        "ADD",
        Response { stderr: "ipam-da-bad: cannot open database\n".into(), ..Response::error(103, "unusable") },
    );
    sb.respond("ipam-da-bad", "DEL", Response { stderr: "ipam-da-bad: DEL too\n".into(), ..Response::text("") });
    let out = sb.cni(DELEGATED, "ADD", &config("1.0.0", &["ipam-ds-ok", "ipam-da-bad"]), &[]);
    assert_eq!(out.code(), 103);
    for line in ["warning from ipam-ds-ok\n", "ipam-da-bad: cannot open database\n", "ipam-da-bad: DEL too\n"] {
        assert!(out.stderr.contains(line), "{line:?} missing from stderr: {}", out.stderr);
    }
    assert!(!out.stdout.contains("warning"), "stderr leaked to stdout");
}

// ---------------------------------------------------------------------------
// DEL, CHECK, GC, STATUS

#[test]
fn del_runs_every_delegate_past_failures_and_chains_outputs() {
    let sb = Sandbox::new();
    for name in STACK {
        sb.fake(name);
    }
    let printed = json!({"cniVersion": "1.0.0", "ips": [], "note": "from beta's DEL"});
    sb.respond(STACK[0], "DEL", Response::error(11, "database locked"));
    sb.respond(STACK[1], "DEL", Response::json(&printed));
    sb.respond(STACK[2], "DEL", Response::exit(2));
    let conf = config("1.0.0", &STACK);
    // DEL does not need CNI_NETNS.
    let mut env = sb.env("DEL", &[]);
    env.retain(|(k, _)| k != "CNI_NETNS");
    let out = sb.cni_env(DELEGATED, &env, conf.to_string().as_bytes());
    let (code, msg, details) = out.error();
    assert_eq!(code, 11, "the first failure's code: {out:#?}");
    let text = format!("{msg} {details}");
    assert!(text.contains("database locked") && text.contains(STACK[0]) && text.contains(STACK[2]), "{text}");
    assert!(!details.contains(&format!("{:?}:", STACK[1])), "beta did not fail: {details}");
    assert_eq!(sb.call_list(), STACK.iter().map(|n| format!("{n} DEL")).collect::<Vec<_>>());
    assert_eq!(sb.record(0).0, conf.to_string().into_bytes(), "the first gets the config as received");
    assert_eq!(sb.record_json(1), conf, "alpha failed: beta gets the configuration as it came");
    assert_eq!(sb.record_json(2), with_prev(&conf, &printed), "gamma gets what beta printed");
}

#[test]
fn del_success_prints_nothing() {
    let sb = Sandbox::new();
    for name in STACK {
        sb.fake(name);
    }
    let prev = result(7);
    sb.respond(STACK[0], "DEL", Response::json(&result(8)));
    let conf = with_prev(&config("0.4.0", &STACK), &prev);
    let out = sb.cni(DELEGATED, "DEL", &conf, &[]);
    out.assert_quiet_success();
    assert_eq!(sb.call_list(), STACK.iter().map(|n| format!("{n} DEL")).collect::<Vec<_>>());
    // alpha replaced the prevResult; beta and gamma (default fakes) pass it on.
    assert_eq!(sb.record_json(0), conf);
    assert_eq!(sb.record_json(1)["prevResult"], result(8));
    assert_eq!(sb.record_json(2)["prevResult"], result(8));
}

#[test]
fn check_runs_every_delegate_and_reports_every_failure() {
    let sb = Sandbox::new();
    for name in STACK {
        sb.fake(name);
    }
    let prev = result(7);
    let conf = with_prev(&config("1.0.0", &STACK), &prev);
    sb.respond(STACK[0], "CHECK", Response::text(""));
    sb.respond(STACK[1], "CHECK", Response::error(104, "10.0.0.7 is not recorded"));
    sb.respond(STACK[2], "CHECK", Response::text(""));
    let out = sb.cni(DELEGATED, "CHECK", &conf, &[]);
    let (code, msg, details) = out.error();
    assert_eq!((code, msg.as_str()), (104, "10.0.0.7 is not recorded"), "{out:#?}");
    assert!(details.contains(STACK[1]), "{details}");
    assert_eq!(sb.call_list(), STACK.iter().map(|n| format!("{n} CHECK")).collect::<Vec<_>>());
    for i in 0..3 {
        assert_eq!(sb.record_json(i), conf, "CHECK {i} gets the runtime's prevResult");
    }

    // Two failures: the first one's code, both named.
    sb.respond(STACK[0], "CHECK", Response::error(103, "database unusable"));
    let out = sb.cni(DELEGATED, "CHECK", &conf, &[]);
    let (code, msg, details) = out.error();
    assert_eq!(code, 103);
    let text = format!("{msg} {details}");
    assert!(text.contains(STACK[0]) && text.contains(STACK[1]) && text.contains("not recorded"), "{text}");
    assert_eq!(sb.calls().len(), 6, "all three ran again");

    // All pass: nothing on stdout.
    sb.respond(STACK[0], "CHECK", Response::text(""));
    sb.respond(STACK[1], "CHECK", Response::text(""));
    sb.cni(DELEGATED, "CHECK", &conf, &[]).assert_quiet_success();
    assert_eq!(sb.calls().len(), 9);
}

/// A GC or STATUS configuration (spec 1.1.0).
fn gc_config() -> Value {
    let mut c = config("1.1.0", &STACK);
    c["cni.dev/valid-attachments"] = json!([{"containerID": "ctr-1", "ifname": "eth0"}]);
    c
}

/// The environment of GC and STATUS: no attachment.
fn bare_env(sb: &Sandbox, command: &str) -> Vec<(String, String)> {
    vec![("CNI_COMMAND".into(), command.into()), ("CNI_PATH".into(), sb.cni_path())]
}

#[test]
fn gc_is_forwarded_unchanged_to_every_delegate_past_failures() {
    let sb = Sandbox::new();
    for name in STACK {
        sb.fake(name);
    }
    let input = serde_json::to_vec_pretty(&gc_config()).unwrap();
    sb.cni_env(DELEGATED, &bare_env(&sb, "GC"), &input).assert_quiet_success();
    for i in 0..3 {
        assert_eq!(sb.record(i).0, input, "GC {i} gets the configuration unchanged");
    }

    sb.respond(STACK[0], "GC", Response::error(11, "database locked"));
    sb.respond(STACK[1], "GC", Response::json(&result(9)));
    let out = sb.cni_env(DELEGATED, &bare_env(&sb, "GC"), &input);
    assert_error(&out, 11, &[STACK[0], "database locked"]);
    assert_eq!(sb.call_list()[3..], calls(&[&format!("{} GC", STACK[0]), "ipam-da-beta GC", "ipam-da-gamma GC"]));
    assert_eq!(sb.record(5).0, input, "beta's output is not chained into GC");

    // GC needs spec 1.1.0.
    let mut old = gc_config();
    old["cniVersion"] = json!("1.0.0");
    let out = sb.cni_env(DELEGATED, &bare_env(&sb, "GC"), old.to_string().as_bytes());
    assert_eq!(out.code(), 1);
    assert_eq!(sb.calls().len(), 6, "no delegate ran");
}

#[test]
fn status_fails_with_the_first_unready_delegate() {
    let sb = Sandbox::new();
    for name in STACK {
        sb.fake(name);
    }
    let input = gc_config().to_string().into_bytes();
    sb.cni_env(DELEGATED, &bare_env(&sb, "STATUS"), &input).assert_quiet_success();
    assert_eq!(sb.call_list(), STACK.iter().map(|n| format!("{n} STATUS")).collect::<Vec<_>>());
    for i in 0..3 {
        assert_eq!(sb.record(i).0, input);
    }

    sb.respond(STACK[1], "STATUS", Response::error(50, "no free address for IPv4"));
    let out = sb.cni_env(DELEGATED, &bare_env(&sb, "STATUS"), &input);
    let (code, msg, details) = out.error();
    assert_eq!((code, msg.as_str()), (50, "no free address for IPv4"));
    assert!(details.contains(STACK[1]), "{details}");
    assert_eq!(sb.call_list()[3..5], calls(&["ipam-ds-alpha STATUS", "ipam-da-beta STATUS"]));
}

#[test]
fn bad_timeouts_are_error_7_and_nothing_runs() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-one");
    for bad in [json!(0), json!(-1), json!("30"), json!(1e9), json!([1]), json!(true)] {
        let mut conf = config("1.0.0", &["ipam-da-one"]);
        conf["ipam"]["timeout"] = bad.clone();
        assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[]), 7, &["ipam.timeout"]);
    }
    assert_eq!(sb.calls(), vec![]);
}

// ---------------------------------------------------------------------------
// Finding the delegates

#[test]
fn bad_delegate_lists_are_error_7_and_nothing_runs() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-ok");
    // Executables that exist at the paths the bad names point to.
    std::fs::create_dir(sb.fakes_dir().join("a")).unwrap();
    sb.fake_in(&sb.fakes_dir().join("a"), "b");
    sb.fake_in(sb.path(), "fakes-parent");
    for bad in [
        Value::Null,
        json!([]),
        json!("ipam-ds-ok"),
        json!({"0": "ipam-ds-ok"}),
        json!([1]),
        json!(["ipam-ds-ok", 2]),
        json!([""]),
        json!(["a/b"]),
        json!([format!("{}/ipam-ds-ok", sb.fakes_dir().display())]),
        json!(["/usr/lib/cni/bridge"]),
        json!(["."]),
        json!([".."]),
        json!(["ipam-ds-ok", "a/b"]),
        json!(["ipam-ds-ok", ".."]),
        json!(["ipam-ds-ok", "../fakes-parent"]),
        json!(["ipam-ds-ok\u{0}"]),
    ] {
        let mut conf = config("1.0.0", &[]);
        conf["ipam"]["delegates"] = bad.clone();
        let out = sb.cni(DELEGATED, "ADD", &conf, &[]);
        assert_error(&out, 7, &["ipam.delegates"]);
        // Also for the other commands.
        assert_error(&sb.cni(DELEGATED, "DEL", &conf, &[]), 7, &["ipam.delegates"]);
        assert_eq!(sb.calls(), vec![], "{bad}: a delegate ran");
    }
    // Missing altogether.
    let mut conf = config("1.0.0", &[]);
    conf["ipam"].as_object_mut().unwrap().remove("delegates");
    assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[]), 7, &["ipam.delegates"]);
    assert_eq!(sb.calls(), vec![]);
}

#[test]
fn delegates_are_found_in_cni_path_only() {
    let sb = Sandbox::new();
    sb.fake("ipam-ds-ok");
    sb.respond("ipam-ds-ok", "ADD", Response::json(&result(4)));

    // Not anywhere: 106 naming it, and the delegate before it did not run.
    let conf = config("1.0.0", &["ipam-ds-ok", "ipam-da-missing"]);
    assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[]), 106, &["ipam-da-missing"]);
    // Present but not executable.
    std::fs::write(sb.fakes_dir().join("ipam-da-missing"), "#!/bin/sh\nexit 0\n").unwrap();
    assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[]), 106, &["ipam-da-missing"]);
    assert_eq!(sb.calls(), vec![]);

    // In the working directory only: not found, even when CNI_PATH has
    // empty, "." or relative entries.
    sb.fake_in(&sb.workdir(), "ipam-da-cwd");
    let conf = config("1.0.0", &["ipam-ds-ok", "ipam-da-cwd"]);
    let odd_path = format!(":.:work:../work:{}:", sb.fakes_dir().display());
    for path in [sb.cni_path(), odd_path] {
        let out = sb.cni(DELEGATED, "ADD", &conf, &[("CNI_PATH", &path)]);
        assert_error(&out, 106, &["ipam-da-cwd"]);
    }
    assert_eq!(sb.calls(), vec![]);

    // The first directory of CNI_PATH that has it wins.
    let second = sb.path().join("second");
    std::fs::create_dir(&second).unwrap();
    std::fs::copy(sb.fakes_dir().join("ipam-ds-ok"), second.join("ipam-da-second")).unwrap();
    let path = format!("{}:{}", sb.fakes_dir().display(), second.display());
    let conf = config("1.0.0", &["ipam-ds-ok", "ipam-da-second"]);
    let out = sb.cni(DELEGATED, "ADD", &conf, &[("CNI_PATH", &path)]);
    assert_eq!(out.result()["ips"], result(4)["ips"]);
    assert_eq!(sb.call_list(), calls(&["ipam-ds-ok ADD", "ipam-ds-ok ADD"]), "the copy calls itself ipam-ds-ok");

    // Without CNI_PATH, or with only relative entries: error 4 naming it.
    let mut env = sb.env("ADD", &[]);
    env.retain(|(k, _)| k != "CNI_PATH");
    assert_error(&sb.cni_env(DELEGATED, &env, conf.to_string().as_bytes()), 4, &["CNI_PATH"]);
    assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[("CNI_PATH", "fakes:.")]), 4, &["CNI_PATH"]);
    assert_eq!(sb.calls().len(), 2);
}

// ---------------------------------------------------------------------------
// Versions and the environment

/// What a one-delegate stack returns in each version when its delegate
/// answers `answer` in 1.0.0 shape.
fn expected_in(version: &str) -> Value {
    let legacy = json!({
        "cniVersion": version,
        "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}]},
        "ip6": {"ip": "fd00::3/64"},
        "dns": {"nameservers": ["10.1.2.1"]}
    });
    let tagged = json!({
        "cniVersion": version,
        "ips": [
            {"version": "4", "address": "10.1.2.3/24", "gateway": "10.1.2.1"},
            {"version": "6", "address": "fd00::3/64"}
        ],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}],
        "dns": {"nameservers": ["10.1.2.1"]}
    });
    let current = json!({
        "cniVersion": version,
        "ips": [{"address": "10.1.2.3/24", "gateway": "10.1.2.1"}, {"address": "fd00::3/64"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.2.1"}],
        "dns": {"nameservers": ["10.1.2.1"]}
    });
    match version {
        "0.1.0" | "0.2.0" => legacy,
        "0.3.0" | "0.3.1" | "0.4.0" => tagged,
        _ => current,
    }
}

#[test]
fn add_answers_in_the_requested_version() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-one");
    let mut answer = expected_in("1.0.0");
    answer["pools"] = json!([{"name": "p"}]);
    sb.respond("ipam-da-one", "ADD", Response::json(&answer));
    for version in ALL_VERSIONS {
        let out = sb.cni(DELEGATED, "ADD", &config(version, &["ipam-da-one"]), &[]);
        assert_eq!(out.result(), &expected_in(version), "{version}");
    }
    // No cniVersion means 0.2.0.
    let mut conf = config("", &["ipam-da-one"]);
    conf.as_object_mut().unwrap().remove("cniVersion");
    assert_eq!(sb.cni(DELEGATED, "ADD", &conf, &[]).result(), &expected_in("0.2.0"));
    assert_eq!(sb.calls().len(), ALL_VERSIONS.len() + 1);
}

#[test]
fn unknown_or_malformed_versions_are_error_1() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-one");
    for bad in [json!("0.5.0"), json!("2.0.0"), json!("1.0"), json!("v1.0.0"), json!(""), json!(1), json!(null)] {
        let mut conf = config("", &["ipam-da-one"]);
        conf["cniVersion"] = bad.clone();
        for command in ["ADD", "DEL", "CHECK"] {
            let out = sb.cni(DELEGATED, command, &conf, &[]);
            assert_eq!(out.code(), 1, "{command} with cniVersion {bad}: {out:#?}");
        }
    }
    assert_eq!(sb.calls(), vec![]);
    // Commands newer than the configuration's version.
    for (command, version) in [("CHECK", "0.3.1"), ("GC", "1.0.0"), ("STATUS", "0.4.0")] {
        let out = sb.cni(DELEGATED, command, &config(version, &["ipam-da-one"]), &[]);
        assert_eq!(out.code(), 1, "{command} at {version}");
    }
    assert_eq!(sb.calls(), vec![]);
}

#[test]
fn version_lists_every_supported_version() {
    let sb = Sandbox::new();
    for (stdin, echoed) in
        [(r#"{"cniVersion":"0.4.0"}"#, "0.4.0"), (r#"{"cniVersion":"1.0.0"}"#, "1.0.0"), ("", "1.1.0")]
    {
        let out = sb.cni_raw(DELEGATED, "VERSION", stdin.as_bytes(), &[]);
        assert_eq!(out.result(), &json!({"cniVersion": echoed, "supportedVersions": ALL_VERSIONS}), "{stdin}");
    }
    // The spec's VERSION call has no other variable.
    let env = [("CNI_COMMAND".to_string(), "VERSION".to_string())];
    let out = sb.cni_env(DELEGATED, &env, br#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(out.result(), &json!({"cniVersion": "0.3.1", "supportedVersions": ALL_VERSIONS}));
}

#[test]
fn bad_environment_is_error_4_naming_the_variable() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-one");
    let conf = config("1.0.0", &["ipam-da-one"]);
    let input = conf.to_string().into_bytes();
    for (command, missing) in [("ADD", "CNI_CONTAINERID"), ("ADD", "CNI_IFNAME"), ("ADD", "CNI_NETNS")] {
        let mut env = sb.env(command, &[]);
        env.retain(|(k, _)| k != missing);
        let out = sb.cni_env(DELEGATED, &env, &input);
        assert_error(&out, 4, &[missing]);
        assert_eq!(out.json.as_ref().unwrap()["cniVersion"], "1.0.0");
    }
    for (var, value) in [
        ("CNI_IFNAME", "eth0/1"),
        ("CNI_IFNAME", "a-very-long-ifname"),
        ("CNI_IFNAME", ".."),
        ("CNI_CONTAINERID", "-leading-dash"),
        ("CNI_COMMAND", "ATTACH"),
        ("CNI_COMMAND", "add"),
        ("CNI_ARGS", "IgnoreUnknown"),
    ] {
        assert_error(&sb.cni(DELEGATED, "ADD", &conf, &[(var, value)]), 4, &[var]);
    }
    assert_eq!(sb.calls(), vec![]);
}

#[test]
fn run_by_hand_it_describes_itself_on_stderr() {
    let sb = Sandbox::new();
    let out = sb.cni_env(DELEGATED, &[("CNI_PATH".into(), sb.cni_path())], b"");
    assert_eq!((out.status, out.stdout.as_str()), (0, ""), "{out:#?}");
    assert!(out.stderr.contains("ipam-delegated"), "{}", out.stderr);
    assert!(out.stderr.contains(env!("CARGO_PKG_VERSION")), "{}", out.stderr);
    assert!(out.stderr.contains(&ALL_VERSIONS.join(" ")), "{}", out.stderr);
}

#[test]
fn oversized_or_broken_stdin_is_an_error_object() {
    let sb = Sandbox::new();
    sb.fake("ipam-da-one");
    let conf = config("1.0.0", &["ipam-da-one"]);
    // More than 4 MiB: error 5.
    let mut big = conf.to_string().into_bytes();
    big.pop();
    big.extend_from_slice(b", \"padding\": \"");
    big.resize(5 << 20, b'x');
    big.extend_from_slice(b"\"}");
    assert_eq!(sb.cni_raw(DELEGATED, "ADD", &big, &[]).code(), 5);
    for bad in [&b""[..], b"[]", b"{", b"\"text\"", b"{\"cniVersion\": \"1.0.0\"}x", b"\xff\xfe{}"] {
        assert_eq!(sb.cni_raw(DELEGATED, "ADD", bad, &[]).code(), 6, "{bad:?}");
    }
    assert_eq!(sb.calls(), vec![]);
}

// ---------------------------------------------------------------------------
// Randomized input

/// Values that are not valid JSON numbers for a u64/f64, or deeply nested,
/// spliced into the text in place of a placeholder string.
const RAW_TOKENS: [&str; 6] =
    ["1e400", "-1e400", "18446744073709551616", "-9223372036854775809", "123456789012345678901234567890", "-0"];

fn random_value(rng: &mut Rng, raw: &mut Vec<String>) -> Value {
    match rng.index(12) {
        0 => Value::Null,
        1 => json!(rng.percent(50)),
        2 => json!(*rng.pick(&[0i64, -1, 1, 7, 65536, i64::MAX, i64::MIN])),
        3 => json!(*rng.pick(&[0.5f64, 1e-9, 1e308, -2.5, 86400.0, 86401.0])),
        4 => json!(*rng.pick(&["", "x", "a/b", ".", "..", "1.0.0", "0.2.0", "10.0.0.1/24", "fd00::1", "ä\u{0}", "ok"])),
        5 => json!("x".repeat(rng.index(5000))),
        6 => json!([]),
        7 => json!({}),
        8 => json!([random_leaf(rng), random_leaf(rng)]),
        9 => json!({"address": random_leaf(rng), "gateway": random_leaf(rng), "dst": random_leaf(rng)}),
        10 => {
            // Nesting just below and well above serde_json's recursion limit.
            let depth = *rng.pick(&[20usize, 120, 127, 128, 129, 500, 5000]);
            raw.push(format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
            json!(format!("@RAW{}@", raw.len() - 1))
        }
        _ => {
            raw.push(rng.pick(&RAW_TOKENS).to_string());
            json!(format!("@RAW{}@", raw.len() - 1))
        }
    }
}

fn random_leaf(rng: &mut Rng) -> Value {
    rng.pick(&[json!(null), json!(1), json!("10.0.0.5/24"), json!("x"), json!(["a"]), json!({"k": 1})]).clone()
}

/// Sets the value at `path` (object keys, or array indexes as numbers),
/// creating objects on the way; does nothing where the shape does not allow it.
fn set_path(root: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut node = root;
    for key in parents {
        node = match (node, key.parse::<usize>()) {
            (Value::Array(a), Ok(i)) if i < a.len() => &mut a[i],
            (Value::Object(o), _) => o.entry(key.to_string()).or_insert_with(|| json!({})),
            _ => return,
        };
    }
    match (node, last.parse::<usize>()) {
        (Value::Array(a), Ok(i)) if i < a.len() => a[i] = value,
        (Value::Object(o), _) => drop(o.insert(last.to_string(), value)),
        _ => {}
    }
}

const KNOWN_PATHS: &[&[&str]] = &[
    &["cniVersion"],
    &["name"],
    &["type"],
    &["ipam"],
    &["ipam", "type"],
    &["ipam", "delegates"],
    &["ipam", "delegates", "0"],
    &["ipam", "delegates", "1"],
    &["ipam", "timeout"],
    &["ipam", "logLevel"],
    &["ipam", "database"],
    &["prevResult"],
    &["prevResult", "cniVersion"],
    &["prevResult", "ips"],
    &["prevResult", "ips", "0"],
    &["prevResult", "ips", "0", "address"],
    &["prevResult", "ips", "0", "gateway"],
    &["prevResult", "routes"],
    &["prevResult", "dns"],
    &["prevResult", "dns", "nameservers"],
    &["prevResult", "pools"],
    &["prevResult", "ip4"],
    &["runtimeConfig"],
    &["runtimeConfig", "ips"],
    &["args", "cni"],
    &["cni.dev/valid-attachments"],
    &["cni.dev/valid-attachments", "0"],
];

/// One random invocation: (environment, stdin).
fn random_case(rng: &mut Rng, sb: &Sandbox) -> (Vec<(String, String)>, Vec<u8>) {
    let command = *rng.pick(&[
        "ADD", "ADD", "ADD", "ADD", "ADD", "ADD", "DEL", "DEL", "DEL", "CHECK", "CHECK", "GC", "GC", "STATUS",
        "STATUS", "VERSION", "", "add", "ADD ", "DELETE",
    ]);
    let mut overrides: Vec<(&str, String)> = Vec::new();
    if rng.percent(12) {
        let ifname = *rng.pick(&["", ".", "..", "a/b", "a:b", "a b", "0123456789abcdef", "ä", "net1.100", "x"]);
        overrides.push(("CNI_IFNAME", ifname.into()));
    }
    if rng.percent(8) {
        let id = *rng.pick(&["", "-x", "a/b", "ä", "c1", "x".repeat(300).leak()]);
        overrides.push(("CNI_CONTAINERID", id.into()));
    }
    if rng.percent(8) {
        let args = *rng.pick(&["", "IgnoreUnknown=1;IP=10.0.0.9", "=x", "NOEQ", "A=1;;B=2", "IP=;"]);
        overrides.push(("CNI_ARGS", args.into()));
    }
    if rng.percent(5) {
        overrides.push(("CNI_PATH", rng.pick(&["", ".", "/nonexistent", "fakes"]).to_string()));
    }
    let overrides: Vec<(&str, &str)> = overrides.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut env = sb.env(command, &overrides);
    if rng.percent(3) {
        let drop = *rng.pick(&["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_PATH"]);
        env.retain(|(k, _)| k != drop);
    }

    let delegates: &[&str] =
        rng.pick::<&[&str]>(&[&["ok"][..], &["ok", "ok"], &["ok", "bad"], &["bad", "ok"], &["junk"]]);
    let version = *rng.pick(&ALL_VERSIONS);
    let mut conf = config(version, delegates);
    if rng.percent(40) {
        conf["prevResult"] = result(rng.index(250) as u8);
    }
    if rng.percent(20) {
        conf["cni.dev/valid-attachments"] = json!([{"containerID": "c", "ifname": "eth0"}]);
    }
    if rng.percent(10) {
        conf["ipam"]["logFile"] = json!(sb.path().join("log").join("delegated.log").display().to_string());
    }
    let mut raw = Vec::new();
    for _ in 0..rng.index(4) {
        let path = *rng.pick(KNOWN_PATHS);
        let value = random_value(rng, &mut raw);
        set_path(&mut conf, path, value);
    }
    let mut text = conf.to_string();
    for (i, token) in raw.iter().enumerate() {
        text = text.replace(&format!("\"@RAW{i}@\""), token);
    }
    let mut bytes = text.into_bytes();
    if rng.percent(10) {
        bytes.truncate(rng.index(bytes.len() + 1));
    }
    if rng.percent(8) {
        let at = rng.index(bytes.len() + 1);
        let junk: &[u8] = rng.pick::<&[u8]>(&[&b"\xff"[..], b"\xc3", b"\xed\xa0\x80", b"\x00", b"\"\xfe\""]);
        bytes.splice(at..at, junk.iter().copied());
    }
    (env, bytes)
}

/// What every run must look like, whatever the input.
fn assert_well_behaved(case: usize, env: &[(String, String)], stdin: &[u8], out: &Outcome) {
    let command = env.iter().find(|(k, _)| k == "CNI_COMMAND").map(|(_, v)| v.as_str()).unwrap_or_default();
    let shown = String::from_utf8_lossy(&stdin[..stdin.len().min(400)]);
    let ctx = || format!("case {case}: env {env:?}\nstdin {shown:?}\n{out:#?}");
    assert!(!out.stderr.contains("panicked") && !out.stderr.contains("bug:"), "panic: {}", ctx());
    assert!(out.status == 0 || out.status == 1, "exit status: {}", ctx());
    if out.stdout.is_empty() {
        assert!(out.status == 0 && ["DEL", "CHECK", "GC", "STATUS"].contains(&command), "empty stdout: {}", ctx());
        return;
    }
    let mut docs = serde_json::Deserializer::from_str(&out.stdout).into_iter::<Value>();
    let first = docs.next().and_then(Result::ok);
    assert!(docs.next().is_none() && out.stdout.ends_with('\n'), "not exactly one JSON document: {}", ctx());
    let obj = first.as_ref().and_then(Value::as_object);
    let obj = obj.unwrap_or_else(|| panic!("stdout is not a JSON object: {}", ctx()));
    assert!(obj.get("cniVersion").is_some_and(Value::is_string), "cniVersion: {}", ctx());
    if out.status != 0 {
        let code = obj.get("code").and_then(Value::as_u64);
        assert!(code.is_some_and(|c| c != 999), "error code: {}", ctx());
        assert!(obj.get("msg").is_some_and(Value::is_string), "error msg: {}", ctx());
        assert!(obj.get("details").is_some_and(Value::is_string), "error details: {}", ctx());
    } else if command == "VERSION" {
        assert_eq!(obj.get("supportedVersions"), Some(&json!(ALL_VERSIONS)), "{}", ctx());
    } else {
        assert_eq!(command, "ADD", "a result for another command: {}", ctx());
        assert!(obj.get("code").is_none() && obj.get("dns").is_some(), "not a result: {}", ctx());
    }
}

#[test]
fn random_inputs_never_break_the_protocol() {
    let sb = Sandbox::new();
    for name in ["ok", "bad", "junk"] {
        sb.fake(name);
    }
    for command in ["ADD", "DEL", "CHECK", "GC", "STATUS"] {
        let ok = if command == "ADD" { Response::json(&result(1)) } else { Response::text("") };
        sb.respond("ok", command, ok);
        sb.respond("bad", command, Response::error(101, "bad"));
        sb.respond("junk", command, Response::text("{\"half\": "));
    }
    sb.respond("ok", "DEL", Response::json(&result(2)));
    // FUZZ_SEED and FUZZ_CASES explore further; the default is fixed.
    let mut rng = Rng::new(std::env::var("FUZZ_SEED").map(|s| s.parse().unwrap()).unwrap_or(0x1bad_5eed_2026));
    let n: usize = std::env::var("FUZZ_CASES").map(|s| s.parse().unwrap()).unwrap_or(300);
    let start = Instant::now();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for case in 0..n {
        let (env, stdin) = random_case(&mut rng, &sb);
        let out = sb.cni_env(DELEGATED, &env, &stdin);
        assert_well_behaved(case, &env, &stdin, &out);
        let code = out.json.as_ref().and_then(|j| j.get("code")).map_or("ok".to_string(), ToString::to_string);
        *outcomes.entry(code).or_default() += 1;
    }
    // The inputs reach past parsing: successes and delegate failures happen too.
    assert!(outcomes.get("ok").is_some_and(|&n| n >= 20), "{outcomes:?}");
    assert!(outcomes.contains_key("101") && outcomes.contains_key("6"), "{outcomes:?}");
    eprintln!("300 random cases in {:?}: {outcomes:?}", start.elapsed());
}
