//! `metrics`: the figures of `pools` in Prometheus' text exposition format,
//! for node_exporter's textfile collector (or any scraper of a file).

use std::fmt::Write as _;
use std::path::Path;

use super::survey::{survey, PoolSurvey};
use super::{atomic_file, open_for_reading, Failure, Report};

/// One metric family: every sample of it is printed together, after its
/// `# HELP` and `# TYPE` lines, as the format requires.
struct Family {
    name: &'static str,
    help: &'static str,
    /// The pool's figure; `None` leaves the pool out of the family (its
    /// stored definition no longer reads as a pool: nothing is known).
    value: fn(&PoolSurvey) -> Option<u128>,
}

// Cluster mode's per-block families (blocks owned, blocks borrowed) will be a
// second list like this one, over its own survey, rendered by `family`.
const POOL_FAMILIES: &[Family] = &[
    Family {
        name: "ipam_delegated_pool_size_addresses",
        help: "Allocatable addresses of the pool: its ranges minus excluded addresses and gateways.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.size),
    },
    Family {
        name: "ipam_delegated_pool_used_addresses",
        help: "Leased addresses among the pool's allocatable addresses.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.used),
    },
    Family {
        name: "ipam_delegated_pool_free_addresses",
        help: "Allocatable addresses of the pool that no lease holds.",
        value: |pool| pool.figures.as_ref().ok().map(|f| f.free()),
    },
    Family {
        name: "ipam_delegated_pool_leases",
        help: "Leases recorded for the pool, static ones outside its allocatable addresses included.",
        value: |pool| Some(u128::from(pool.leases)),
    },
];

const DATABASE_OK: &str = "ipam_delegated_database_ok";
const DATABASE_OK_HELP: &str =
    "1 if the allocation database could be read, 0 if not (no integrity check: see ipam-delegated check).";

/// Prints the exposition, or writes it to `output`. A database that cannot be
/// read still gives an exposition (`ipam_delegated_database_ok 0`), so that
/// a file a collector serves says so instead of going stale; the exit status
/// is 1 all the same.
pub fn run(database: &Path, output: Option<&Path>) -> Result<Report, Failure> {
    let surveyed = open_for_reading(database).and_then(|mut store| survey(&mut store));
    let text = exposition(surveyed.as_deref().ok());
    let problem = surveyed.err().map(|Failure(problem)| problem);
    let Some(output) = output else {
        return Ok(Report { stdout: text, failure: problem });
    };
    let written = atomic_file::write(output, text.as_bytes())
        .map_err(|e| format!("cannot write the metrics to {}: {e}", output.display()));
    match (problem, written) {
        (None, Ok(())) => Ok(Report::fine(String::new())),
        (Some(problem), Ok(())) => Ok(Report { stdout: String::new(), failure: Some(problem) }),
        (None, Err(unwritten)) => Err(Failure(unwritten)),
        (Some(problem), Err(unwritten)) => Err(Failure(format!("{problem}; {unwritten}"))),
    }
}

/// The whole exposition; `None` when the database could not be read.
fn exposition(pools: Option<&[PoolSurvey]>) -> String {
    let mut out = String::new();
    family_header(&mut out, DATABASE_OK, DATABASE_OK_HELP);
    let _ = writeln!(out, "{DATABASE_OK} {}", u8::from(pools.is_some()));
    for family in POOL_FAMILIES {
        render(&mut out, family, pools.unwrap_or_default());
    }
    out
}

/// A family with no sample (no pool registered, or no database) is left out.
fn render(out: &mut String, family: &Family, pools: &[PoolSurvey]) {
    let samples: Vec<(&PoolSurvey, u128)> =
        pools.iter().filter_map(|pool| (family.value)(pool).map(|value| (pool, value))).collect();
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
        PoolSurvey { network: network.into(), name: name.into(), subnets: vec![], leases, figures }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\\b\"c\nd é"), "a\\\\b\\\"c\\nd é");
    }

    #[test]
    fn families_are_grouped_and_an_unreadable_pool_has_only_its_leases() {
        let pools = [
            pool("n", "big", Ok(Figures { size: u128::MAX, used: 3, next: None }), 4),
            pool("n", "bad\"", Err("no ranges".into()), 1),
        ];
        let text = exposition(Some(&pools));
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
            ]
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE ") && l.ends_with(" gauge")).count(), 5);
    }

    #[test]
    fn no_database_is_said_and_no_pool_family_is_printed() {
        assert_eq!(
            exposition(None).lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(),
            ["ipam_delegated_database_ok 0"]
        );
        assert_eq!(exposition(Some(&[])).lines().count(), 3);
    }
}
