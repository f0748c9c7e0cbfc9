//! `pools`: how full each registered pool is and where allocation goes next.

use serde::Serialize;
use shared::pool::Pool;
use shared::store::{AllocationStore, RegisteredPool, Tx};

use super::table::{Align, Table};
use super::{Failure, Report};

/// One pool as scripts see it (`--json`). The figures are null, and `error`
/// says why, when the stored definition no longer reads as a pool.
#[derive(Serialize)]
struct PoolRow {
    network: String,
    name: String,
    subnets: Vec<String>,
    #[serde(serialize_with = "exact_figure")]
    size: Option<u128>,
    #[serde(serialize_with = "exact_figure")]
    used: Option<u128>,
    #[serde(serialize_with = "exact_figure")]
    free: Option<u128>,
    percent_used: Option<f64>,
    /// The address sequential allocation tries next; null when full.
    next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Figures above 2^53 (an IPv6 pool's size) become strings: most JSON
/// readers (jq, JavaScript) hold numbers as doubles and would round them.
fn exact_figure<S: serde::Serializer>(figure: &Option<u128>, out: S) -> Result<S::Ok, S::Error> {
    const EXACT_IN_A_DOUBLE: u128 = 1 << 53;
    match figure {
        Some(n) if *n > EXACT_IN_A_DOUBLE => out.serialize_str(&n.to_string()),
        Some(n) => out.serialize_u128(*n),
        None => out.serialize_none(),
    }
}

struct Figures {
    size: u128,
    used: u128,
    next: Option<String>,
}

pub fn run(store: &mut AllocationStore, json: bool) -> Result<Report, Failure> {
    let rows: Vec<PoolRow> = store.read(|tx| tx.registered_pools()?.into_iter().map(|pool| row(tx, pool)).collect())?;
    if json {
        return Ok(Report::fine(super::to_json(&rows)?));
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

/// A pool's row; only a database failure is an error, a bad definition is shown.
fn row(tx: &Tx, registered: RegisteredPool) -> shared::Result<PoolRow> {
    let subnets = registered.subnets.iter().map(ToString::to_string).collect();
    let (network, name) = (registered.network, registered.name);
    let pool = match Pool::from_json(&registered.definition, &format!("stored definition of pool {name}")) {
        Ok(pool) => pool,
        Err(e) => {
            return Ok(PoolRow {
                network,
                name,
                subnets,
                size: None,
                used: None,
                free: None,
                percent_used: None,
                next: None,
                error: Some(e.msg),
            })
        }
    };
    let figures = figures(tx, &pool, registered.cursor)?;
    Ok(PoolRow {
        network,
        name,
        subnets,
        size: Some(figures.size),
        used: Some(figures.used),
        free: Some(figures.size.saturating_sub(figures.used)),
        percent_used: Some(percent(figures.used, figures.size)),
        next: figures.next,
        error: None,
    })
}

/// Size and use over the allocatable addresses only, so that used never
/// exceeds size; next is what the plugins' own search would find.
fn figures(tx: &Tx, pool: &Pool, cursor: Option<std::net::IpAddr>) -> shared::Result<Figures> {
    let mut used = 0u128;
    for (lo, hi) in pool.allocatable() {
        used += u128::from(tx.count_leases(lo, hi)?);
    }
    let next = pool.find_free(cursor, tx)?.map(|ip| ip.to_string());
    Ok(Figures { size: pool.capacity(), used, next })
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
