//! How the rows' columns read, for every table of the store: an address key
//! as an address, time as unix seconds, and which rows of `leases` are
//! leases rather than holds.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Type;
use rusqlite::Row;

use crate::addr::from_key;

/// Of the rows an attachment's queries read: its leases, not holds.
pub(super) const LEASED: &str = "held_until IS NULL";

/// Reads a key column; a key that is not 16 bytes is corruption.
pub(super) fn address_column(row: &Row, index: usize) -> rusqlite::Result<IpAddr> {
    let key: Vec<u8> = row.get(index)?;
    from_key(&key).ok_or_else(|| {
        let problem = format!("address key of {} bytes instead of 16", key.len());
        rusqlite::Error::FromSqlConversionFailure(index, Type::Blob, problem.into())
    })
}

/// Unix seconds now, as the rows count time.
pub(super) fn now_unix() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
