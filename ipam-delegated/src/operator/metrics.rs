//! `metrics`: the figures of `pools` in Prometheus' text exposition format,
//! for node_exporter's textfile collector (or any scraper of a file).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ipam_ds_cluster::node::lent_network;
use ipam_ds_cluster::rows::{BlockState, ClusterRows, RecordKind};
use ipam_ds_cluster::tables;
use shared::store::{AllocationStore, LeaseFilter};

use super::atomic_file::{self, Replacement};
use super::database::open_for_reading;
use super::failure::{Failure, FileAction};
use super::report::Report;
use super::survey::{survey, PoolSurvey};

/// One metric family: every sample of it is printed together, after its
/// `# HELP` and `# TYPE` lines, as the format requires.
struct Family {
    name: &'static str,
    help: &'static str,
    /// The pool's figure; `None` leaves the pool out of the family (its
    /// stored definition no longer reads as a pool: nothing is known).
    value: fn(&PoolSurvey) -> Option<u128>,
}

// Cluster mode's families are a second list, over the node database's
// cluster rows (see `ClusterSurvey`), rendered by `render_cluster`.
const POOL_FAMILIES: &[Family] = &[
    Family {
        name: "ipam_delegated_pool_size_addresses",
        help: "Allocatable addresses of the pool: its ranges minus excluded addresses and gateways.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.size),
    },
    Family {
        name: "ipam_delegated_pool_used_addresses",
        help: "Leased or held addresses among the pool's allocatable addresses.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.used),
    },
    Family {
        name: "ipam_delegated_pool_free_addresses",
        help: "Allocatable addresses of the pool that no lease or hold takes.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.free()),
    },
    Family {
        name: "ipam_delegated_pool_leases",
        help: "Leases recorded for the pool, static ones outside its allocatable addresses included (holds are not \
               leases).",
        value: |pool| Some(u128::from(pool.leases)),
    },
    Family {
        name: "ipam_delegated_pool_held_addresses",
        help: "Addresses of the pool held for a workload identity whose attachment is gone (ipam-da-sticky), until \
               the hold ends: neither leases nor free.",
        value: |pool| Some(u128::from(pool.holds)),
    },
];

/// Cluster mode (ipam-ds-cluster), from this node's database only (no etcd):
/// per network and pool, the blocks it holds by state, and the address
/// records it wrote in etcd by kind.
#[derive(Debug, Default, PartialEq)]
pub struct ClusterSurvey {
    /// (network, pool) → count per state, in [`BLOCK_STATES`] order.
    blocks: BTreeMap<(String, String), [u64; 3]>,
    /// (network, pool) → count per kind, in [`RECORD_KINDS`] order.
    records: BTreeMap<(String, String), [u64; 4]>,
}

const BLOCK_STATES: [BlockState; 3] = [BlockState::Owned, BlockState::Releasing, BlockState::Contested];
const RECORD_KINDS: [RecordKind; 4] =
    [RecordKind::Static, RecordKind::Borrowed, RecordKind::Lent, RecordKind::Allocated];

const CLUSTER_BLOCKS: &str = "ipam_delegated_cluster_blocks";
const CLUSTER_BLOCKS_HELP: &str = "Blocks of a cluster pool this node holds (its database's view), by state: owned \
     (handed to the allocators), releasing (empty, being given back) or contested (holds leases of this node but is \
     another's in etcd: its leases are published, it is not used).";
const CLUSTER_RECORDS: &str = "ipam_delegated_cluster_address_records";
const CLUSTER_RECORDS_HELP: &str = "Address records this node holds in etcd (its database's view), by kind: static \
     (asked for by name), borrowed (from another node's block), lent (of its block, to another node) or allocated \
     (handed out in a shared block).";

/// The networks are those of the registered pools and of the blocks: an
/// address record's network has a registered pool (its allocator's view).
/// Static and borrowed records are rows of their attachments; addresses lent
/// out are leases this node holds under the network's lent network.
fn cluster_survey(store: &mut AllocationStore, pools: &[PoolSurvey]) -> Result<ClusterSurvey, Failure> {
    Ok(store.read(|tx| {
        let mut survey = ClusterSurvey::default();
        // A database that cluster mode never used has no cluster tables.
        if !tables::exist(tx)? {
            return Ok(survey);
        }
        let blocks = tx.all_node_blocks()?;
        // A lent network holds a real network's lent addresses.
        let lent_suffix = lent_network("");
        let mut networks: Vec<&str> = pools
            .iter()
            .map(|p| p.network.as_str())
            .chain(blocks.iter().map(|b| b.network.as_str()))
            .filter(|n| !n.ends_with(&lent_suffix))
            .collect();
        networks.sort_unstable();
        networks.dedup();
        for b in &blocks {
            let counts = survey.blocks.entry((b.network.clone(), b.pool.clone())).or_default();
            counts[match b.state {
                BlockState::Owned => 0,
                BlockState::Releasing => 1,
                BlockState::Contested => 2,
            }] += 1;
        }
        for network in networks {
            for r in tx.node_records(network)? {
                let counts = survey.records.entry((r.owner.network.clone(), r.pool.clone())).or_default();
                counts[match r.kind {
                    RecordKind::Static => 0,
                    RecordKind::Borrowed => 1,
                    RecordKind::Lent => 2,
                    RecordKind::Allocated => 3,
                }] += 1;
            }
            let lent = LeaseFilter { network: Some(lent_network(network)), pool: None, container_id: None };
            for lease in tx.leases(&lent)? {
                survey.records.entry((network.to_string(), lease.pool)).or_default()[2] += 1;
            }
        }
        Ok(survey)
    })?)
}

/// Every state for a pool with blocks, every kind for a pool with records.
fn render_cluster(out: &mut String, surveys: &[&ClusterSurvey]) {
    let labels = |(network, pool): &(String, String)| {
        format!("network=\"{}\",pool=\"{}\"", label_value(network), label_value(pool))
    };
    if surveys.iter().any(|s| !s.blocks.is_empty()) {
        family_header(out, CLUSTER_BLOCKS, CLUSTER_BLOCKS_HELP);
        for (key, counts) in surveys.iter().flat_map(|s| &s.blocks) {
            for (state, n) in BLOCK_STATES.iter().zip(counts) {
                let _ = writeln!(out, "{CLUSTER_BLOCKS}{{{},state=\"{}\"}} {n}", labels(key), state.as_str());
            }
        }
    }
    if surveys.iter().any(|s| !s.records.is_empty()) {
        family_header(out, CLUSTER_RECORDS, CLUSTER_RECORDS_HELP);
        for (key, counts) in surveys.iter().flat_map(|s| &s.records) {
            for (kind, n) in RECORD_KINDS.iter().zip(counts) {
                let _ = writeln!(out, "{CLUSTER_RECORDS}{{{},kind=\"{}\"}} {n}", labels(key), kind.as_str());
            }
        }
    }
}

/// `--output`: written as `FILE.tmp-<pid>` and renamed over FILE; the
/// textfile collector reads only `*.prom`, so it skips the temporary file.
const FOR_THE_COLLECTOR: Replacement = Replacement { temporary: tmp_pid, mode: None, durable: false };

fn tmp_pid(name: &OsStr) -> OsString {
    let mut tmp = name.to_os_string();
    tmp.push(format!(".tmp-{}", std::process::id()));
    tmp
}

const DATABASE_OK: &str = "ipam_delegated_database_ok";
const DATABASE_OK_HELP: &str =
    "1 if the allocation database could be read, 0 if not (no integrity check: see ipam-delegated check).";

/// Prints the exposition, or writes it to `output`. A database that cannot be
/// read still gives an exposition (`ipam_delegated_database_ok 0`), so that
/// a file a collector serves says so instead of going stale; the exit status
/// is 1 all the same.
pub fn run(database: &Path, output: Option<&Path>) -> Result<Report, Failure> {
    let (text, problem) = of_database(database);
    let Some(output) = output else {
        return Ok(Report { stdout: text, failure: problem });
    };
    let written = atomic_file::write(output, text.as_bytes(), &FOR_THE_COLLECTOR)
        .map_err(|e| Failure::unwritten(FileAction::WriteMetrics, output, e));
    match (problem, written) {
        (None, Ok(())) => Ok(Report::fine(String::new())),
        (Some(problem), Ok(())) => Ok(Report { stdout: String::new(), failure: Some(problem) }),
        (None, Err(unwritten)) => Err(unwritten),
        (Some(problem), Err(unwritten)) => Err(Failure::Several(vec![problem, unwritten])),
    }
}

/// What one database holds, as the exposition shows it.
struct Surveyed {
    pools: Vec<PoolSurvey>,
    cluster: ClusterSurvey,
}

fn survey_database(database: &Path) -> Result<Surveyed, Failure> {
    open_for_reading(database).and_then(|mut store| {
        let pools = survey(&mut store)?;
        let cluster = cluster_survey(&mut store, &pools)?;
        Ok(Surveyed { pools, cluster })
    })
}

/// The exposition of `database`, and why it could not be read, if it
/// could not (then it says so: `ipam_delegated_database_ok 0`).
pub fn of_database(database: &Path) -> (String, Option<Failure>) {
    let surveyed = survey_database(database);
    (exposition(&[(None, surveyed.as_ref().ok())]), surveyed.err())
}

/// The agent's: every database's figures in one exposition, each family
/// once. A network's pools are in the database its configuration names,
/// so their labels tell the databases' samples apart; only
/// `ipam_delegated_database_ok` is labelled by `database`, its path.
pub fn of_databases(databases: &[PathBuf]) -> String {
    let surveyed: Vec<Result<Surveyed, Failure>> = databases.iter().map(|d| survey_database(d)).collect();
    let each: Vec<(Option<&Path>, Option<&Surveyed>)> =
        databases.iter().zip(&surveyed).map(|(d, s)| (Some(d.as_path()), s.as_ref().ok())).collect();
    exposition(&each)
}

/// The whole exposition of `databases`: each named (`None`: one database,
/// unlabelled) with what it holds, `None` when it could not be read.
fn exposition(databases: &[(Option<&Path>, Option<&Surveyed>)]) -> String {
    let mut out = String::new();
    family_header(&mut out, DATABASE_OK, DATABASE_OK_HELP);
    for (path, surveyed) in databases {
        let ok = u8::from(surveyed.is_some());
        let _ = match path {
            Some(path) => {
                writeln!(out, "{DATABASE_OK}{{database=\"{}\"}} {ok}", label_value(&path.to_string_lossy()))
            }
            None => writeln!(out, "{DATABASE_OK} {ok}"),
        };
    }
    let read: Vec<&Surveyed> = databases.iter().filter_map(|(_, s)| *s).collect();
    let pools: Vec<&PoolSurvey> = read.iter().flat_map(|s| &s.pools).collect();
    for family in POOL_FAMILIES {
        render(&mut out, family, &pools);
    }
    let clusters: Vec<&ClusterSurvey> = read.iter().map(|s| &s.cluster).collect();
    render_cluster(&mut out, &clusters);
    out
}

/// A family with no sample (no pool registered, or no database) is left out.
fn render(out: &mut String, family: &Family, pools: &[&PoolSurvey]) {
    let samples: Vec<(&PoolSurvey, u128)> =
        pools.iter().filter_map(|pool| (family.value)(pool).map(|value| (*pool, value))).collect();
    if samples.is_empty() {
        return;
    }
    family_header(out, family.name, family.help);
    for (pool, value) in samples {
        // u128 as exact decimal text: Prometheus reads it as a float, and an
        // IPv6 pool's size above 2^53 is still written as it is.
        let _ = writeln!(
            out,
            "{}{{network=\"{}\",pool=\"{}\"}} {value}",
            family.name,
            label_value(&pool.network),
            label_value(&pool.name)
        );
    }
}

fn family_header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

/// A label value as the format wants it: backslash, double quote and line
/// feed escaped; anything else (any UTF-8) as it is.
fn label_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::survey::Figures;
    use super::*;

    fn pool(network: &str, name: &str, figures: Result<Figures, String>, leases: u64) -> PoolSurvey {
        PoolSurvey { network: network.into(), name: name.into(), subnets: vec![], leases, holds: leases / 2, figures }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\\b\"c\nd é"), "a\\\\b\\\"c\\nd é");
    }

    #[test]
    fn families_are_grouped_and_an_unreadable_pool_has_only_its_leases() {
        let pools = vec![
            pool("n", "big", Ok(Figures { size: u128::MAX, used: 3, next: None }), 4),
            pool("n", "bad\"", Err("no ranges".into()), 1),
        ];
        let text = exposition(&[(None, Some(&holding(pools)))]);
        assert!(text.starts_with(
            "# HELP ipam_delegated_database_ok 1 if the allocation database could be read, 0 if not \
             (no integrity check: see ipam-delegated check).\n# TYPE ipam_delegated_database_ok gauge\n\
             ipam_delegated_database_ok 1\n"
        ));
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "ipam_delegated_database_ok 1",
                "ipam_delegated_pool_size_addresses{network=\"n\",pool=\"big\"} 340282366920938463463374607431768211455",
                "ipam_delegated_pool_used_addresses{network=\"n\",pool=\"big\"} 3",
                "ipam_delegated_pool_free_addresses{network=\"n\",pool=\"big\"} 340282366920938463463374607431768211452",
                "ipam_delegated_pool_leases{network=\"n\",pool=\"big\"} 4",
                "ipam_delegated_pool_leases{network=\"n\",pool=\"bad\\\"\"} 1",
                "ipam_delegated_pool_held_addresses{network=\"n\",pool=\"big\"} 2",
                "ipam_delegated_pool_held_addresses{network=\"n\",pool=\"bad\\\"\"} 0",
            ]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" gauge")).count(), 6);
    }

    #[test]
    fn cluster_rows_are_counted_per_pool_by_state_and_kind() {
        use ipam_ds_cluster::rows::{NodeBlock, NodeRecord, RecordState};
        use shared::store::DEFAULT_LOCK_TIMEOUT;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = AllocationStore::open(&dir.path().join("db.sqlite"), DEFAULT_LOCK_TIMEOUT).expect("store");
        // A node-local database has no cluster tables, and so no cluster rows.
        let survey = cluster_survey(&mut store, &[]).unwrap_or_else(|failure| panic!("{failure}"));
        assert!(survey.blocks.is_empty() && survey.records.is_empty());
        store.write(tables::make).expect("cluster tables");
        let block = |text: &str, state| NodeBlock {
            network: "blue-net".into(),
            pool: "blue".into(),
            block: text.parse().unwrap(),
            state,
            revision: 1,
            confirmed: 0,
            taken: vec![],
            since: 0,
            shared: false,
        };
        let record = |address: &str, kind| NodeRecord {
            key: format!("/k/{address}"),
            value: "{}".into(),
            pool: "blue".into(),
            address: address.parse().unwrap(),
            kind,
            owner: shared::Attachment { network: "blue-net".into(), container_id: "c".into(), ifname: "eth0".into() },
            added_by: None,
            state: RecordState::Held,
        };
        store
            .write(|tx| {
                tx.put_node_block(&block("10.40.0.0/29", BlockState::Owned))?;
                tx.put_node_block(&block("10.40.0.8/29", BlockState::Owned))?;
                tx.put_node_block(&block("10.40.0.16/29", BlockState::Releasing))?;
                tx.put_node_record(&record("10.40.0.30", RecordKind::Static))?;
                tx.put_node_record(&record("10.40.0.31", RecordKind::Borrowed))?;
                tx.put_node_record(&record("10.40.0.32", RecordKind::Allocated))?;
                // Lent out: held by this node under the network's lent network.
                let lender = shared::Attachment {
                    network: lent_network("blue-net"),
                    container_id: "cluster".into(),
                    ifname: "lent".into(),
                };
                tx.insert_lease("10.40.0.6".parse().unwrap(), "blue", &lender)?;
                tx.insert_lease("10.40.0.7".parse().unwrap(), "blue", &lender)
            })
            .expect("cluster rows");
        let survey = cluster_survey(&mut store, &[]).unwrap_or_else(|failure| panic!("{failure}"));
        let mut text = String::new();
        render_cluster(&mut text, &[&survey]);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"owned\"} 2",
                "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"releasing\"} 1",
                "ipam_delegated_cluster_blocks{network=\"blue-net\",pool=\"blue\",state=\"contested\"} 0",
                "ipam_delegated_cluster_address_records{network=\"blue-net\",pool=\"blue\",kind=\"static\"} 1",
                "ipam_delegated_cluster_address_records{network=\"blue-net\",pool=\"blue\",kind=\"borrowed\"} 1",
                "ipam_delegated_cluster_address_records{network=\"blue-net\",pool=\"blue\",kind=\"lent\"} 2",
                "ipam_delegated_cluster_address_records{network=\"blue-net\",pool=\"blue\",kind=\"allocated\"} 1",
            ]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" gauge")).count(), 2);
        let mut nothing = String::new();
        render_cluster(&mut nothing, &[&ClusterSurvey::default()]);
        assert_eq!(nothing, "", "a node without cluster rows has no cluster family");
    }

    #[test]
    fn no_database_is_said_and_no_pool_family_is_printed() {
        assert_eq!(
            exposition(&[(None, None)]).lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(),
            ["ipam_delegated_database_ok 0"]
        );
        assert_eq!(exposition(&[(None, Some(&holding(vec![])))]).lines().count(), 3);
    }

    #[test]
    fn several_databases_share_each_family_and_each_says_whether_it_was_read() {
        let blue = holding(vec![pool("blue-net", "blue", Ok(Figures { size: 8, used: 2, next: None }), 2)]);
        let red = holding(vec![pool("red-net", "red", Ok(Figures { size: 4, used: 1, next: None }), 1)]);
        let (a, b, gone) = (Path::new("/a/db.sqlite"), Path::new("/b/db.sqlite"), Path::new("/c\"x.sqlite"));
        let text = exposition(&[(Some(a), Some(&blue)), (Some(gone), None), (Some(b), Some(&red))]);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples[..5],
            [
                "ipam_delegated_database_ok{database=\"/a/db.sqlite\"} 1",
                "ipam_delegated_database_ok{database=\"/c\\\"x.sqlite\"} 0",
                "ipam_delegated_database_ok{database=\"/b/db.sqlite\"} 1",
                "ipam_delegated_pool_size_addresses{network=\"blue-net\",pool=\"blue\"} 8",
                "ipam_delegated_pool_size_addresses{network=\"red-net\",pool=\"red\"} 4",
            ]
        );
        // Each family once, before all of its samples.
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE ")).count(), 6, "{text}");
        assert!(text.contains("ipam_delegated_pool_used_addresses{network=\"red-net\",pool=\"red\"} 1"), "{text}");
    }

    fn holding(pools: Vec<PoolSurvey>) -> Surveyed {
        Surveyed { pools, cluster: ClusterSurvey::default() }
    }
}
