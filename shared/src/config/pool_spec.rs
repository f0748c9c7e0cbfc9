//! The pool and range objects of `ipam.pools`, `prevResult.pools` and
//! `runtimeConfig.ipRanges`, as written. Only their shape is checked here;
//! what they mean (a CIDR, inside the subnet, usable) is checked where they
//! become a [`crate::pool::Pool`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::keys;
use crate::error::Result;
use crate::result::{Dns, Route};

/// One pool object: the full form with `ranges`, or the short form whose
/// top-level `subnet`, `rangeStart`, `rangeEnd` and `gateway` are its one range.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "a pool object")]
pub struct PoolSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<RangeSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Vec<Route>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    /// CNI_ARGS key → value that must all hold for the pool to apply.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<BTreeMap<String, String>>,
    #[serde(default, rename = "requested-ip", skip_serializing_if = "Option::is_none")]
    pub requested_ip: Option<String>,
    /// Cluster mode: the prefix length of the blocks nodes claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u8>,
    /// Keys the suite does not read, kept so that newer selectors can add some.
    #[serde(flatten, skip_serializing)]
    pub unknown: Map<String, Value>,
}

impl PoolSpec {
    /// Error 7 for a key the suite does not read in the pool, its ranges or
    /// its routes: in a configuration an administrator wrote, that is a typo.
    /// (A pool in `prevResult` may carry a newer selector's keys.)
    pub fn refuse_unknown_keys(&self, field: &str) -> Result<()> {
        keys::refuse_unknown(&self.unknown, keys::POOL, field)?;
        for (i, range) in self.ranges.iter().flatten().enumerate() {
            range.refuse_unknown_keys(&format!("{field}.ranges[{i}]"))?;
        }
        for (i, route) in self.routes.iter().flatten().enumerate() {
            keys::refuse_unknown(&route.extra, keys::ROUTE, &format!("{field}.routes[{i}]"))?;
        }
        Ok(())
    }

    /// The short form's range, if the pool has a top-level `subnet`.
    pub fn short_range(&self) -> Option<RangeSpec> {
        self.subnet.as_ref().map(|subnet| RangeSpec {
            subnet: Some(subnet.clone()),
            range_start: self.range_start.clone(),
            range_end: self.range_end.clone(),
            gateway: self.gateway.clone(),
            unknown: Map::new(),
        })
    }
}

/// One range: a subnet and the part of it allocated dynamically.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "a range object")]
pub struct RangeSpec {
    /// Required; optional here so that its absence is reported with the
    /// range's path and the pool's name, like every other range problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_end: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(flatten, skip_serializing)]
    pub unknown: Map<String, Value>,
}

impl RangeSpec {
    pub fn refuse_unknown_keys(&self, field: &str) -> Result<()> {
        keys::refuse_unknown(&self.unknown, keys::RANGE, field)
    }
}
