//! The plugins' debug log: asking a configuration for it, and reading back
//! what the scenarios count in it (the store's lock lines, ipam-ds-cluster's
//! etcd or Kubernetes API requests).

use std::fs;
use std::path::Path;
use std::time::Duration;

use ipam_ds_cluster::etcd::RequestCount;
use ipam_ds_cluster::kube::Counts;
use serde_json::{json, Value};

/// `config` logging at debug level to `log`.
pub fn logging(config: &Value, log: &Path) -> Value {
    let mut config = config.clone();
    config["ipam"]["logFile"] = json!(log);
    config["ipam"]["logLevel"] = json!("debug");
    config
}

/// One write transaction's turn at the lock, from its log line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acquisition {
    /// When it logged, holding the lock, in seconds since midnight (UTC).
    pub logged: f64,
    /// Its queue ticket (None: the writer could not use the queue).
    pub ticket: Option<u64>,
    pub wait: Duration,
    /// Transaction + durable commit.
    pub hold: Duration,
}

impl Acquisition {
    /// About when it asked for the lock.
    pub fn asked(&self) -> f64 {
        self.logged - (self.hold + self.wait).as_secs_f64()
    }

    /// About when it took the lock.
    pub fn took(&self) -> f64 {
        self.logged - self.hold.as_secs_f64()
    }
}

/// Each "<timestamp> … lock wait W, transaction T, durable commit C, ticket
/// N" line of a call's log, as the acquisition it times. A missing log is no
/// lines.
pub fn lock_lines(log: &Path) -> Vec<Acquisition> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let logged = time_of_day(line.split_whitespace().next()?)?;
            let rest = &line[line.find("lock wait ")? + "lock wait ".len()..];
            let mut parts = rest.split(", ");
            let wait = duration(parts.next()?)?;
            let tx = duration(parts.next()?.strip_prefix("transaction ")?)?;
            let commit = duration(parts.next()?.strip_prefix("durable commit ")?)?;
            let ticket = parts.next().and_then(|t| t.trim().strip_prefix("ticket ")?.parse().ok());
            Some(Acquisition { logged, ticket, wait, hold: tx + commit })
        })
        .collect()
}

/// "2026-11-23T13:11:21.569919Z" as seconds since midnight. (A run that
/// crosses midnight UTC would misorder its calls; the figures say so.)
fn time_of_day(stamp: &str) -> Option<f64> {
    let time = stamp.split_once('T')?.1.strip_suffix('Z')?;
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?.parse::<f64>().ok()?, parts.next()?.parse::<f64>().ok()?, parts.next()?);
    Some(h * 3600.0 + m * 60.0 + s.parse::<f64>().ok()?)
}

/// A `Duration` as its `Debug` prints it: "1.234567ms", "12.3µs", "0ns", "1.5s".
fn duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    for (unit, scale) in [("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)] {
        if let Some(number) = text.strip_suffix(unit) {
            return number.parse::<f64>().ok().map(|n| Duration::from_secs_f64(n * scale));
        }
    }
    None
}

/// The sum of the "etcd requests: N range, N txn (N writing), N other" lines
/// of a log, and how many there were (one per call of ipam-ds-cluster).
pub fn etcd_client_counts(log: &str) -> (RequestCount, usize) {
    let mut sum = RequestCount::default();
    let mut lines = 0;
    for line in log.lines() {
        let Some(rest) = line.split("etcd requests: ").nth(1) else { continue };
        let numbers: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse().ok())
            .take(4)
            .collect();
        if let [ranges, txns, writing_txns, other] = numbers[..] {
            sum.ranges += ranges;
            sum.txns += txns;
            sum.writing_txns += writing_txns;
            sum.other += other;
            lines += 1;
        }
    }
    (sum, lines)
}

/// The sum of the "Kubernetes API requests: N (M connection(s))" lines of a
/// log, and how many there were (one per call of ipam-ds-cluster).
pub fn kube_client_counts(log: &str) -> (Counts, usize) {
    let mut sum = Counts::default();
    let mut lines = 0;
    for line in log.lines() {
        let Some(rest) = line.split("Kubernetes API requests: ").nth(1) else { continue };
        let numbers: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse().ok())
            .take(2)
            .collect();
        if let [requests, connections] = numbers[..] {
            sum.requests += requests;
            sum.connections += connections;
            lines += 1;
        }
    }
    (sum, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_debug_prints_them() {
        for d in [Duration::ZERO, Duration::from_nanos(7), Duration::from_micros(1011), Duration::from_millis(1500)] {
            let parsed = duration(&format!("{d:?}")).unwrap();
            assert!(parsed.abs_diff(d) < Duration::from_nanos(2), "{d:?} read as {parsed:?}");
        }
        assert_eq!(duration("12.5µs"), Some(Duration::from_nanos(12_500)));
        assert_eq!(duration("soon"), None);
    }

    #[test]
    fn lock_lines_of_a_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        fs::write(
            &log,
            "2026-11-23T13:11:21.569919Z DEBUG cni{plugin=\"ipam-ds-pool\"}: shared::store: lock wait 1.011µs, \
             transaction 182.251µs, durable commit 275.199µs\n\
             2026-11-23T13:11:21.576967Z  INFO cni{}: ipam_da_sequential: allocated 10.24.0.2\n\
             2026-11-23T13:11:21.577603Z DEBUG cni{}: shared::store: lock wait 2.5ms, transaction 1ms, durable \
             commit 1.5ms, ticket 41\n",
        )
        .unwrap();
        let lines = lock_lines(&log);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[1].wait, lines[1].hold), (Duration::from_micros(2500), Duration::from_micros(2500)));
        assert_eq!((lines[0].ticket, lines[1].ticket), (None, Some(41)));
        let asked = 13.0 * 3600.0 + 11.0 * 60.0 + 21.577603 - 0.005;
        assert!((lines[1].asked() - asked).abs() < 1e-9, "{lines:?}");
        assert!(lock_lines(&dir.path().join("missing.log")).is_empty());
    }

    #[test]
    fn the_clients_counts_are_read_from_the_log() {
        let log = "2025-01-01T00:00:00Z DEBUG ipam-ds-cluster ADD c1: etcd requests: 0 range, 1 txn (0 writing), 0 other\n\
                   2025-01-01T00:00:00Z DEBUG ipam-da-sequential ADD c1: allocated 10.30.0.2\n\
                   2025-01-01T00:00:01Z DEBUG ipam-ds-cluster ADD c2: etcd requests: 1 range, 3 txn (1 writing), 2 other\n";
        let (count, lines) = etcd_client_counts(log);
        assert_eq!(lines, 2);
        assert_eq!(count, RequestCount { ranges: 1, txns: 4, writing_txns: 1, other: 2 });
        let log = "2025-01-01T00:00:00Z DEBUG cni{plugin=\"ipam-ds-cluster\"}: ipam_ds_cluster::datastore::kubernetes: \
                   Kubernetes API requests: 0 (0 connection(s))\n\
                   2025-01-01T00:00:01Z DEBUG cni{}: ipam_ds_cluster::datastore::kubernetes: Kubernetes API requests: 3 \
                   (1 connection(s))\n\
                   2025-01-01T00:00:01Z DEBUG cni{}: etcd requests: 1 range, 3 txn (1 writing), 2 other\n";
        let (count, lines) = kube_client_counts(log);
        assert_eq!(lines, 2);
        assert_eq!(count, Counts { requests: 3, connections: 1 });
    }
}
