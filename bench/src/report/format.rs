//! How a figure is written in a table: a ratio, whether a target was met, a
//! row of statistics, mebibytes, a store's count of requests.

use std::collections::BTreeMap;

use crate::harness::Stats;

pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 && a / b < 0.1 {
        format!("{:.4}× ({:.0}× faster)", a / b, b / a)
    } else if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "—".into()
    }
}

pub fn yes(met: bool) -> &'static str {
    if met {
        "yes"
    } else {
        "**NO**"
    }
}

pub const MIB: f64 = 1024.0;

pub fn stats_row(name: &str, s: &Stats) -> String {
    format!("| {name} | {} | {:.2} | {:.2} | {:.2} |\n", s.n, s.median_ms, s.p99_ms, s.max_ms)
}

/// A store's count of some calls' requests (per etcd method, per API verb
/// and resource), the counts that are not 0: "VERB resource N" each.
pub fn server_counts(server: &BTreeMap<String, u64>) -> String {
    let counted: Vec<String> = server.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k} {n}")).collect();
    if counted.is_empty() {
        "none".into()
    } else {
        counted.join(", ")
    }
}
