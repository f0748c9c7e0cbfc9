//! `list`: every lease, every hold of a workload identity (ipam-da-sticky)
//! and every attachment sharing a lease, optionally narrowed by network,
//! pool, container or identity.

use serde::Serialize;
use shared::addr::to_key;
use shared::store::{unix_now, AllocationStore, Lease, LeaseFilter, Share, Tx};
use shared::utc;

use super::failure::Failure;
use super::report::{to_json, Report};
use super::table::{Align, Table};

/// What an address is to the attachment a row names.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum State {
    /// The attachment's own lease.
    Leased,
    /// Held for the identity since the attachment (the last that leased it)
    /// went, until `held_until`: nobody else gets it.
    Held,
    /// A hold past its end that no allocation has dropped yet: free at the
    /// next one.
    Expired,
    /// A second live attachment of the identity, sharing the lease of
    /// another (`shareLive`).
    Shared,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Leased => "leased",
            State::Held => "held",
            State::Expired => "expired",
            State::Shared => "shared",
        }
    }
}

/// One row as scripts see it (`--json`). The first six keys are those of
/// the listing before sticky addresses, with the same meaning; of a hold,
/// container_id and ifname name the attachment that last leased it, and
/// since is when the hold began (its release).
#[derive(Serialize)]
struct Row {
    pool: String,
    address: String,
    network: String,
    container_id: String,
    ifname: String,
    since: String,
    identity: Option<String>,
    state: State,
    held_until: Option<String>,
    /// Address order, as the store's (IPv4 before IPv6).
    #[serde(skip)]
    key: [u8; 16],
}

impl Row {
    fn of_lease(lease: &Lease, now: i64) -> Self {
        let state = match lease.held_until {
            None => State::Leased,
            Some(until) if until <= now => State::Expired,
            Some(_) => State::Held,
        };
        Row {
            pool: lease.pool.clone(),
            address: lease.address.to_string(),
            network: lease.owner.network.clone(),
            container_id: lease.owner.container_id.clone(),
            ifname: lease.owner.ifname.clone(),
            since: utc::iso8601(lease.since),
            identity: lease.identity.clone(),
            state,
            held_until: lease.held_until.map(utc::iso8601),
            key: to_key(lease.address),
        }
    }

    /// A sharer, with the pool and identity of the lease it shares (none
    /// when that lease is missing, which `check` reports).
    fn of_share(share: &Share, lease: Option<&Lease>) -> Self {
        Row {
            pool: lease.map(|l| l.pool.clone()).unwrap_or_default(),
            address: share.address.to_string(),
            network: share.sharer.network.clone(),
            container_id: share.sharer.container_id.clone(),
            ifname: share.sharer.ifname.clone(),
            since: utc::iso8601(share.since),
            identity: lease.and_then(|l| l.identity.clone()),
            state: State::Shared,
            held_until: None,
            key: to_key(share.address),
        }
    }

    fn matches(&self, filter: &LeaseFilter, identity: Option<&str>) -> bool {
        let wanted = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        wanted(&filter.network, &self.network)
            && wanted(&filter.pool, &self.pool)
            && wanted(&filter.container_id, &self.container_id)
            && identity.is_none_or(|i| self.identity.as_deref() == Some(i))
    }
}

pub fn run(
    store: &mut AllocationStore,
    filter: &LeaseFilter,
    identity: Option<&str>,
    json: bool,
) -> Result<Report, Failure> {
    let now = unix_now();
    let rows = store.read(|tx| rows(tx, filter, identity, now))?;
    if json {
        return Ok(Report::fine(to_json(&rows)?));
    }
    if rows.is_empty() {
        let narrowed = *filter != LeaseFilter::default() || identity.is_some();
        return Ok(Report::fine(if narrowed { "no leases match\n" } else { "no leases\n" }.to_string()));
    }
    // Without sticky addresses the table is what it always was.
    let sticky = rows.iter().any(|row| row.identity.is_some() || row.state != State::Leased);
    let mut columns = vec![
        ("POOL", Align::Left),
        ("ADDRESS", Align::Left),
        ("NETWORK", Align::Left),
        ("CONTAINER", Align::Left),
        ("IFNAME", Align::Left),
        ("SINCE", Align::Left),
    ];
    if sticky {
        columns.extend([("STATE", Align::Left), ("UNTIL", Align::Left), ("IDENTITY", Align::Left)]);
    }
    let mut table = Table::new(&columns);
    for row in rows {
        let mut cells = vec![row.pool, row.address, row.network, row.container_id, row.ifname, row.since];
        if sticky {
            // "-" for nothing, so that every row has as many words.
            let dash = |text: Option<String>| text.unwrap_or_else(|| "-".to_string());
            cells.extend([row.state.as_str().to_string(), dash(row.held_until), dash(row.identity)]);
        }
        table.push(cells);
    }
    Ok(Report::fine(table.render()))
}

/// The leases and holds matching, then the sharers, in address order (a
/// lease before its sharers).
fn rows(tx: &Tx, filter: &LeaseFilter, identity: Option<&str>, now: i64) -> shared::Result<Vec<Row>> {
    let mut rows: Vec<Row> = tx
        .leases(filter)?
        .iter()
        .map(|lease| Row::of_lease(lease, now))
        .filter(|row| identity.is_none_or(|i| row.identity.as_deref() == Some(i)))
        .collect();
    for share in tx.shares()? {
        let lease = tx.holder(share.address)?;
        let row = Row::of_share(&share, lease.as_ref());
        if row.matches(filter, identity) {
            rows.push(row);
        }
    }
    rows.sort_by_key(|row| row.key);
    Ok(rows)
}
