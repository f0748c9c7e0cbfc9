//! `pools`: how full each registered pool is and where allocation goes next.

use serde::Serialize;
use shared::store::AllocationStore;

use super::failure::Failure;
use super::report::{exact_option, to_json, Report};
use super::survey::{survey, PoolSurvey};
use super::table::{Align, Table};

/// One pool as scripts see it (`--json`). The figures are null, and `error`
/// says why, when the stored definition no longer reads as a pool.
#[derive(Serialize)]
struct PoolRow {
    network: String,
    name: String,
    subnets: Vec<String>,
    #[serde(serialize_with = "exact_option")]
    size: Option<u128>,
    #[serde(serialize_with = "exact_option")]
    used: Option<u128>,
    #[serde(serialize_with = "exact_option")]
    free: Option<u128>,
    /// Held for workload identities (in used, not in free).
    held: u64,
    percent_used: Option<f64>,
    /// The address sequential allocation tries next; null when full.
    next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl PoolRow {
    fn new(pool: PoolSurvey) -> Self {
        let (figures, error) = match pool.figures {
            Ok(figures) => (Some(figures), None),
            Err(error) => (None, Some(error)),
        };
        let figures = figures.as_ref();
        PoolRow {
            network: pool.network,
            name: pool.name,
            subnets: pool.subnets,
            size: figures.map(|f| f.size),
            used: figures.map(|f| f.used),
            free: figures.map(|f| f.free()),
            held: pool.holds,
            percent_used: figures.map(|f| percent(f.used, f.size)),
            next: figures.and_then(|f| f.next.clone()),
            error,
        }
    }
}

pub fn run(store: &mut AllocationStore, json: bool) -> Result<Report, Failure> {
    let rows: Vec<PoolRow> = survey(store)?.into_iter().map(PoolRow::new).collect();
    if json {
        return Ok(Report::fine(to_json(&rows)?));
    }
    if rows.is_empty() {
        return Ok(Report::fine("no registered pools\n".to_string()));
    }
    let mut table = Table::new(&[
        ("NETWORK", Align::Left),
        ("NAME", Align::Left),
        ("SUBNETS", Align::Left),
        ("SIZE", Align::Right),
        ("USED", Align::Right),
        ("FREE", Align::Right),
        ("USED%", Align::Right),
        ("NEXT", Align::Left),
    ]);
    for row in rows {
        let figure = |n: Option<u128>| n.map_or("?".to_string(), |n| n.to_string());
        let next = match (&row.error, &row.next) {
            (Some(error), _) => format!("? ({error})"),
            (None, Some(next)) => next.clone(),
            (None, None) => "-".to_string(),
        };
        table.push(vec![
            row.network,
            row.name,
            row.subnets.join(","),
            figure(row.size),
            figure(row.used),
            figure(row.free),
            // From the counts, not the rounded JSON figure, to round only once.
            row.size.zip(row.used).map_or("?".to_string(), |(size, used)| format!("{:.1}%", share(used, size) * 100.0)),
            next,
        ]);
    }
    Ok(Report::fine(table.render()))
}

/// Percent used, rounded to two decimals for JSON.
fn percent(used: u128, size: u128) -> f64 {
    (share(used, size) * 10_000.0).round() / 100.0
}

/// The fraction used; a pool with nothing allocatable counts as full.
fn share(used: u128, size: u128) -> f64 {
    if size == 0 {
        return 1.0;
    }
    used as f64 / size as f64
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn percent_is_rounded_and_an_empty_pool_is_full() {
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(0, 254), 0.0);
        assert_eq!(percent(5, 0), 100.0);
        assert_eq!(percent(1, u128::MAX), 0.0);
    }
}
