//! The figures a run records: what every scenario measured, filled in by the
//! scenarios and read by the renderers (the report and the chart).
//! Whatever a renderer prints about how a figure was taken (a pool's subnet,
//! the number of nodes) is recorded here with the figure, so that the
//! renderers need no scenario. One module per scenario whose figures are more
//! than a list of timings, and the machine they were taken on.

pub mod cluster;
pub mod durability;
pub mod lock_wait;
pub mod machine;
pub mod sticky;
pub mod whereabouts;

use std::time::Duration;

use crate::harness::Stats;
use crate::setup::Counts;
use cluster::ClusterFigures;
use durability::FsyncProbe;
use lock_wait::LockWait;

/// Every figure the report needs, filled in by the scenarios.
#[derive(Default)]
pub struct Figures {
    /// The suite's layout measured, and where it came from.
    pub layout: String,
    pub add: Vec<(String, Stats)>,
    pub del: Vec<(String, Stats)>,
    /// CPU time (user + system) of the latency scenario's calls.
    pub add_cpu: Vec<(String, Stats)>,
    pub del_cpu: Vec<(String, Stats)>,
    /// The first ADD on a fresh node.
    pub first_add: Vec<(String, Stats)>,
    /// The durability probe's counts, per variant and case.
    pub fsyncs: Vec<FsyncProbe>,
    /// Why there are no counts (strace missing or unable to trace).
    pub fsync_note: Option<String>,
    /// A 4 KiB append + fdatasync in the temp dir.
    pub sync_cost: Option<Stats>,
    pub throughput: Vec<(String, (f64, Duration))>,
    pub one_free: Vec<(String, Vec<Duration>)>,
    pub exhausted: Vec<(String, Vec<Duration>)>,
    pub big: Vec<(String, Stats, Duration)>,
    pub fill_curve: Vec<(String, Vec<(f64, Stats)>)>,
    pub rss: Vec<(String, i64)>,
    pub floors: Vec<(String, Stats)>,
    pub loads: Vec<(String, String)>,
    pub counts: Option<Counts>,
    pub lock_wait: Option<LockWait>,
    /// Cluster mode (ipam-ds-cluster on etcd) against local mode.
    pub cluster: Option<ClusterFigures>,
    /// Why cluster mode was not measured.
    pub cluster_note: Option<String>,
    /// Sticky addresses: the suite without and with ipam-da-sticky.
    pub sticky: Option<sticky::StickyFigures>,
    pub sticky_cluster: Option<sticky::StickyClusterFigures>,
    /// Why sticky addresses in cluster mode were not measured.
    pub sticky_cluster_note: Option<String>,
    /// The suite in cluster mode and whereabouts on one API server.
    pub whereabouts: Option<whereabouts::WhereaboutsFigures>,
    /// Why they were not measured side by side.
    pub whereabouts_note: Option<String>,
}

impl Figures {
    /// The levels of the fill curve, as fractions of the pool: its first
    /// variant's (every variant is measured at the same levels).
    pub fn fill_levels(&self) -> Vec<f64> {
        self.fill_curve.first().map(|(_, curve)| curve.iter().map(|&(level, _)| level).collect()).unwrap_or_default()
    }
}
