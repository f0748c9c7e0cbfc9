//! `cluster blocks`: per cluster pool, its blocks in the cluster's datastore (owner, state,
//! since when, the address records in them) and, for this node's blocks,
//! their use in this node's database.

use std::collections::BTreeMap;

use ipam_ds_cluster::blocks::Geometry;
use ipam_ds_cluster::datastore::Datastore;
use ipam_ds_cluster::records::{shown, shown_bytes, to_bytes, Kind, PoolRecord};
use serde::Serialize;
use shared::utc;

use super::super::database::open_for_reading;
use super::super::failure::Failure;
use super::super::report::{count, exact_figure, exact_option, to_json, Report};
use super::super::table::{Align, Table};
use super::conf::ClusterConf;
use super::pool_in_store::{read_pool, Block};

const OWNED: &str = "owned";
const RELEASED: &str = "released";
/// Address records in a block nobody owns (a static reservation may be).
const UNCLAIMED: &str = "unclaimed";

#[derive(Serialize)]
struct Document<'a> {
    network: &'a str,
    /// This node: ipam.cluster.node, else nodeFile, else the host name.
    node: &'a str,
    pools: Vec<PoolDocument>,
}

#[derive(Serialize)]
struct PoolDocument {
    name: String,
    block_size: u8,
    /// Blocks the pool is cut into.
    #[serde(serialize_with = "exact_figure")]
    blocks_total: u128,
    /// Blocks with an owner record, released ones included.
    blocks_claimed: usize,
    blocks_released: usize,
    /// This node's owned blocks.
    blocks_of_node: usize,
    blocks: Vec<BlockRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

#[derive(Serialize)]
struct BlockRow {
    block: String,
    /// None for an unclaimed block holding address records.
    node: Option<String>,
    state: &'static str,
    /// When it was claimed (owned) or released, UTC.
    since: Option<String>,
    /// Leases inside the block in this node's database: this node's owned
    /// blocks only (null for others, and when the database cannot be read).
    #[serde(serialize_with = "exact_option")]
    used: Option<u128>,
    /// Allocatable addresses of the block: this node's owned blocks only.
    #[serde(serialize_with = "exact_option")]
    size: Option<u128>,
    records: RecordCounts,
    /// Not part of the document: its first address, to fill in `used`.
    #[serde(skip)]
    block_at: Option<Block>,
}

#[derive(Serialize, Default, Clone, Copy)]
struct RecordCounts {
    #[serde(rename = "static")]
    fixed: usize,
    borrowed: usize,
    lent: usize,
    allocated: usize,
}

impl RecordCounts {
    fn add(&mut self, kind: Kind) {
        match kind {
            Kind::Static => self.fixed += 1,
            Kind::Borrowed => self.borrowed += 1,
            Kind::Lent => self.lent += 1,
            Kind::Allocated => self.allocated += 1,
        }
    }
}

pub fn run(conf: &ClusterConf, datastore: &dyn Datastore, json: bool) -> Result<Report, Failure> {
    let node = conf.settings.node.as_str();
    let mut pools = Vec::with_capacity(conf.pools.len());
    for pool in &conf.pools {
        let g = Geometry::of(pool);
        let found = read_pool(conf, datastore, &g)?;
        let ours = to_bytes(&PoolRecord::of(pool, g.block_size));
        let warning = found.definition.as_ref().filter(|kv| kv.value != ours).map(|kv| {
            format!(
                "the cluster's definition of the pool ({}) differs from this configuration's ({}): nodes that cut a pool \
                 differently hand out overlapping blocks",
                shown_bytes(&kv.value),
                String::from_utf8_lossy(&ours)
            )
        });
        let mut records: BTreeMap<u128, (Block, RecordCounts)> = BTreeMap::new();
        for a in &found.addresses {
            records
                .entry(a.block.order)
                .or_insert_with(|| (a.block.clone(), RecordCounts::default()))
                .1
                .add(a.record.kind);
        }
        let mut rows: Vec<(u128, BlockRow)> = Vec::new();
        for o in &found.owners {
            let mine = o.record.node == node && !o.record.released;
            rows.push((
                o.block.order,
                BlockRow {
                    block: o.block.text.clone(),
                    node: Some(shown(&o.record.node)),
                    state: if o.record.released { RELEASED } else { OWNED },
                    since: Some(utc::iso8601(o.record.at)),
                    used: None,
                    size: mine.then_some(o.block.size),
                    records: records.remove(&o.block.order).map(|(_, c)| c).unwrap_or_default(),
                    block_at: mine.then(|| o.block.clone()),
                },
            ));
        }
        for (order, (block, counts)) in records {
            let row = BlockRow {
                block: block.text,
                node: None,
                state: UNCLAIMED,
                since: None,
                used: None,
                size: None,
                records: counts,
                block_at: None,
            };
            rows.push((order, row));
        }
        rows.sort_by_key(|(order, _)| *order);
        let claimed = found.owners.len();
        let released = found.owners.iter().filter(|o| o.record.released).count();
        pools.push(PoolDocument {
            name: pool.name.clone(),
            block_size: g.block_size,
            blocks_total: g.block_count(),
            blocks_claimed: claimed,
            blocks_released: released,
            blocks_of_node: rows.iter().filter(|(_, r)| r.block_at.is_some()).count(),
            blocks: rows.into_iter().map(|(_, row)| row).collect(),
            warning,
        });
    }
    let failure = fill_usage(conf, &mut pools);
    let document = Document { network: &conf.network, node, pools };
    let stdout = if json { to_json(&document)? } else { render(&document) };
    Ok(Report { stdout, failure })
}

/// Fills in `used` of this node's blocks from its database, opened only
/// when there are some (an operator may run this on no node at all). A
/// database that cannot be read leaves them unknown and fails the command.
fn fill_usage(conf: &ClusterConf, pools: &mut [PoolDocument]) -> Option<Failure> {
    let mine: Vec<&mut BlockRow> =
        pools.iter_mut().flat_map(|p| p.blocks.iter_mut()).filter(|row| row.block_at.is_some()).collect();
    if mine.is_empty() {
        return None;
    }
    let spans: Vec<_> = mine.iter().filter_map(|row| row.block_at.as_ref().map(|b| (b.first, b.last))).collect();
    let counted = open_for_reading(&conf.database).and_then(|mut store| {
        Ok(store.read(|tx| {
            spans.iter().map(|&(first, last)| tx.count_leases(first, last)).collect::<Result<Vec<_>, _>>()
        })?)
    });
    match counted {
        Ok(counts) => {
            for (row, used) in mine.into_iter().zip(counts) {
                row.used = Some(u128::from(used));
            }
            None
        }
        Err(failure) => {
            Some(Failure::BlocksUseUnknown { node: conf.settings.node.clone(), because: Box::new(failure) })
        }
    }
}

fn render(document: &Document) -> String {
    let mut sections = Vec::with_capacity(document.pools.len());
    for pool in &document.pools {
        let mut out = format!("pool {} of network {}, blocks of /{}:\n", pool.name, document.network, pool.block_size);
        if let Some(warning) = &pool.warning {
            out.push_str(&format!("warning: {warning}\n"));
        }
        if pool.blocks.is_empty() {
            out.push_str("no block is claimed\n");
        } else {
            let mut table = Table::new(&[
                ("BLOCK", Align::Left),
                ("NODE", Align::Left),
                ("STATE", Align::Left),
                ("SINCE", Align::Left),
                ("USED", Align::Right),
                ("SIZE", Align::Right),
                ("STATIC", Align::Right),
                ("BORROWED", Align::Right),
                ("LENT", Align::Right),
                ("ALLOCATED", Align::Right),
            ]);
            let figure = |n: Option<u128>, known: bool| match n {
                Some(n) => n.to_string(),
                None if known => "?".to_string(),
                None => "-".to_string(),
            };
            for row in &pool.blocks {
                let mine = row.block_at.is_some();
                table.push(vec![
                    row.block.clone(),
                    row.node.clone().unwrap_or_else(|| "-".to_string()),
                    row.state.to_string(),
                    row.since.clone().unwrap_or_else(|| "-".to_string()),
                    figure(row.used, mine),
                    figure(row.size, mine),
                    row.records.fixed.to_string(),
                    row.records.borrowed.to_string(),
                    row.records.lent.to_string(),
                    row.records.allocated.to_string(),
                ]);
            }
            out.push_str(&table.render());
        }
        let released = match pool.blocks_released {
            0 => String::new(),
            n => format!(", {n} of them released"),
        };
        out.push_str(&format!(
            "{} of {} claimed{released}; this node ({}) owns {}\n",
            pool.blocks_claimed,
            count_u128(pool.blocks_total, "block"),
            document.node,
            pool.blocks_of_node
        ));
        sections.push(out);
    }
    if sections.is_empty() {
        return "no pools\n".to_string();
    }
    sections.join("\n")
}

fn count_u128(n: u128, thing: &str) -> String {
    match usize::try_from(n) {
        Ok(n) => count(n, thing),
        Err(_) => format!("{n} {thing}s"),
    }
}
