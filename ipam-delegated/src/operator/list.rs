//! `list`: every lease, optionally narrowed by network, pool or container.

use serde::Serialize;
use shared::store::{AllocationStore, Lease, LeaseFilter};

use super::table::{Align, Table};
use super::{utc, Failure, Report};

/// One lease as scripts see it (`--json`).
#[derive(Serialize)]
struct LeaseRow<'a> {
    pool: &'a str,
    address: String,
    network: &'a str,
    container_id: &'a str,
    ifname: &'a str,
    since: String,
}

impl<'a> LeaseRow<'a> {
    fn new(lease: &'a Lease) -> Self {
        LeaseRow {
            pool: &lease.pool,
            address: lease.address.to_string(),
            network: &lease.owner.network,
            container_id: &lease.owner.container_id,
            ifname: &lease.owner.ifname,
            since: utc::iso8601(lease.since),
        }
    }
}

pub fn run(store: &mut AllocationStore, filter: &LeaseFilter, json: bool) -> Result<Report, Failure> {
    let leases = store.read(|tx| tx.leases(filter))?;
    let rows: Vec<LeaseRow> = leases.iter().map(LeaseRow::new).collect();
    if json {
        return Ok(Report::fine(super::to_json(&rows)?));
    }
    if rows.is_empty() {
        let narrowed = *filter != LeaseFilter::default();
        return Ok(Report::fine(if narrowed { "no leases match\n" } else { "no leases\n" }.to_string()));
    }
    let mut table = Table::new(&[
        ("POOL", Align::Left),
        ("ADDRESS", Align::Left),
        ("NETWORK", Align::Left),
        ("CONTAINER", Align::Left),
        ("IFNAME", Align::Left),
        ("SINCE", Align::Left),
    ]);
    for row in rows {
        table.push(vec![
            row.pool.to_string(),
            row.address,
            row.network.to_string(),
            row.container_id.to_string(),
            row.ifname.to_string(),
            row.since,
        ]);
    }
    Ok(Report::fine(table.render()))
}
