//! The whereabouts scenario in CI's quick mode: `BENCH_QUICK=1 ipam-bench
//! --only whereabouts` runs the suite in cluster mode and whereabouts on one
//! real API server and prints their table. The figures are not asserted (a
//! shared machine's timings say nothing), only that both plugins ran and
//! gave every row, and what is no timing: the suite placed every pod of
//! both waves, none of their addresses held twice.
//!
//! Needs what the benchmark needs: /usr/lib/cni/host-local, strace, Go
//! (kube-test-server and whereabouts are built once per change, into
//! target/kube-test and target/whereabouts), and the release build of
//! scripts/build (the suite as installed).

use std::process::Command;

/// The rows of the table, each of which must give both plugins' figures.
const ROWS: [&str; 9] = [
    "addresses, one wave (10 nodes at once): pods placed",
    "addresses, two waves (nodes 1-5, then 6-10): pods placed",
    "time to the last pod placed",
    "pods placed per second, to the last placed",
    "ADD median, steady state",
    "API requests per ADD, steady state",
    "API requests per DEL, steady state",
    "pods on one node, all started at once: pods placed",
    "peak RSS of one ADD",
];

/// The cells of the first row of a table that holds `what`.
fn row<'a>(table: &'a str, what: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with("| ") && l.contains(what))
        .unwrap_or_else(|| panic!("no row \"{what}\" in the output:\n{table}"));
    line.trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn both_plugins_run_side_by_side_in_quick_mode() {
    let out = Command::new(env!("CARGO_BIN_EXE_ipam-bench"))
        .args(["--only", "whereabouts"])
        .env("BENCH_QUICK", "1")
        .output()
        .expect("running ipam-bench");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ipam-bench --only whereabouts failed ({}):\n{stderr}\n{stdout}", out.status);
    assert!(!stdout.contains("Not measured"), "a plugin was not measured:\n{stdout}\n{stderr}");
    let header = row(&stdout, "| the suite against whereabouts |");
    assert!(header[1].starts_with("ipam-delegated"), "{header:?}");
    assert!(header[2].starts_with("whereabouts v"), "{header:?}");
    for what in ROWS {
        let cells = row(&stdout, what);
        assert_eq!(cells.len(), 6, "{what}: {cells:?}");
        assert!(!cells[1].is_empty() && !cells[2].is_empty(), "{what}: a plugin gave no figure: {cells:?}");
    }
    for wave in ["one wave (10 nodes at once)", "two waves (nodes 1-5, then 6-10)"] {
        let placed = row(&stdout, &format!("{wave}: pods placed"));
        let of = |cell: &str| -> (usize, usize) {
            let (n, of) = cell.split_once(" of ").unwrap_or_else(|| panic!("{wave}: \"{cell}\" is no \"N of M\""));
            (n.parse().expect("a count"), of.parse().expect("a count"))
        };
        let (suite, whereabouts) = (of(placed[1]), of(placed[2]));
        assert!(suite.1 > 0 && suite.0 == suite.1, "the suite, {wave}: {placed:?}");
        assert_eq!(whereabouts.1, suite.1, "whereabouts, {wave}: {placed:?}");
        let twice = row(&stdout, &format!("{wave}: addresses held twice"));
        assert_eq!((twice[1], twice[5]), ("0", "yes"), "the suite, {wave}: {twice:?}");
    }
}
