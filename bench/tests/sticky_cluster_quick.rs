//! The sticky-cluster scenario in quick mode: `BENCH_QUICK=1 ipam-bench
//! --only sticky-cluster` runs the cluster stack without and with
//! ipam-da-sticky on a real etcd and a real Kubernetes API server and prints
//! the two side by side. The times are not asserted (a shared machine's
//! timings say nothing), only that both stores were measured and gave every
//! row, and what is no timing: a DEL without stickiness asks neither store
//! anything (the confirmation cache), and every sticky ADD writes the
//! identity to the store, which is what lets it return on another node. The
//! scenario itself checks that a returning identity gets its held address
//! back (the run fails otherwise).
//!
//! Needs what the benchmark needs: /usr/lib/cni/host-local, etcd, Go
//! (kube-test-server is built once per change, into target/kube-test), and
//! the release build of scripts/build (the suite as installed).

use std::process::Command;

const STORES: [&str; 2] = ["etcd", "Kubernetes API"];
const STICKY: [&str; 3] = [
    "suite, sticky: a new identity",
    "suite, sticky: the identity returns (hold taken back)",
    "suite, sticky: the identity returns on another node",
];

/// The cells of the first line of `text` that starts with `start`.
fn row<'a>(text: &'a str, start: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no row starting \"{start}\" in the output:\n{text}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

fn number(cell: &str, what: &str) -> f64 {
    cell.parse().unwrap_or_else(|e| panic!("{what}: {cell:?} is no figure: {e}"))
}

#[test]
fn both_stores_are_measured_side_by_side_in_quick_mode() {
    let out = Command::new(env!("CARGO_BIN_EXE_ipam-bench"))
        .args(["--only", "sticky-cluster"])
        .env("BENCH_QUICK", "1")
        .output()
        .expect("running ipam-bench");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ipam-bench --only sticky-cluster failed ({}):\n{stderr}\n{stdout}", out.status);
    assert!(!stdout.to_lowercase().contains("not measured"), "a store was not measured:\n{stdout}\n{stderr}");
    let section = &stdout[stdout.find("### Cluster mode").unwrap_or_else(|| panic!("no cluster section:\n{stdout}"))..];

    // The requests table: per store, requests and writes per call.
    let header = row(section, "| calls | n | etcd: requests per call |");
    assert_eq!(header[4], "Kubernetes API: requests per call", "{header:?}");
    let requests = &section[section.find("| calls | n | etcd: requests per call |").unwrap_or(0)..];
    for command in ["ADD", "DEL"] {
        for variant in std::iter::once("suite, no stickiness").chain(STICKY) {
            let what = format!("{command}, {variant}");
            let cells = row(requests, &format!("| {what} |"));
            assert_eq!(cells.len(), 6, "{what}: {cells:?}");
            let figures: Vec<f64> = cells[2..].iter().map(|c| number(c, &what)).collect();
            match (command, variant) {
                ("DEL", "suite, no stickiness") => {
                    assert_eq!(figures, [0.0; 4], "{what}: a DEL without stickiness asked a store: {cells:?}")
                }
                ("ADD", "suite, no stickiness") => {}
                ("ADD", _) => {
                    for (store, writes) in STORES.iter().zip([figures[1], figures[3]]) {
                        assert!(writes >= 1.0, "{what} on {store}: the identity was not written ({cells:?})");
                    }
                }
                _ => {}
            }
        }
    }
    // Every call of every counted batch logged the client's count.
    for store in STORES {
        let cells = row(section, &format!("| ADD, suite, sticky: a new identity | {store} |"));
        assert!(cells[4].ends_with("calls logged"), "{cells:?}");
        let (logged, of) = cells[4].rsplit_once("; ").map(|(_, l)| l).and_then(|l| l.split_once(" of ")).unwrap();
        assert_eq!(logged, of.trim_end_matches(" calls logged"), "{store}: {cells:?}");
    }
}
