//! What the tests that drive the suite's real executables (no fakes) share:
//! the full-stack configuration, the addresses of a result, the leases on
//! record in a database as an administrator reads them, and a seeded PRNG.
//!
//! Used by tests/e2e.rs, tests/concurrency.rs and tests/crash.rs through
//! `mod stack;`, so not every item is used by every one of them.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::{list_leases, FULL_STACK};

/// A network configuration for the main plugin `main_type` whose IPAM is
/// ipam-delegated running [`FULL_STACK`] on the database `db` with `pools`.
pub fn config(version: &str, network: &str, main_type: &str, db: &Path, pools: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": network,
        "type": main_type,
        "ipam": {
            "type": "ipam-delegated",
            "delegates": FULL_STACK,
            "database": db,
            "pools": pools
        }
    })
}

/// `config` asking for `ips` by name (`args.cni.ips`).
pub fn with_static(config: &Value, ips: &[IpAddr]) -> Value {
    let mut c = config.clone();
    let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    c["args"] = json!({"cni": {"ips": ips}});
    c
}

/// `config` narrowed to the candidate pools `pools` (`args.cni.pools`),
/// keeping any other `args.cni` entry.
pub fn with_pools(config: &Value, pools: &[&str]) -> Value {
    let mut c = config.clone();
    if c.get("args").is_none() {
        c["args"] = json!({"cni": {}});
    }
    c["args"]["cni"]["pools"] = json!(pools);
    c
}

/// A GC configuration (cniVersion 1.1.0) keeping the attachments `valid`
/// (container id, ifname) and releasing every other one of the network.
pub fn gc_config(config: &Value, valid: &[(String, String)]) -> Value {
    let mut c = config.clone();
    c["cniVersion"] = json!("1.1.0");
    let list: Vec<Value> = valid.iter().map(|(id, ifname)| json!({"containerID": id, "ifname": ifname})).collect();
    c["cni.dev/valid-attachments"] = Value::Array(list);
    c
}

/// The addresses of a result, without prefix lengths: `ips[].address`
/// (0.3.0 and later) or `ip4.ip` / `ip6.ip` (0.1.0, 0.2.0).
pub fn addresses(result: &Value) -> Vec<IpAddr> {
    let cidrs: Vec<&str> = match result.get("ips").and_then(Value::as_array) {
        Some(ips) => ips.iter().filter_map(|ip| ip.get("address").and_then(Value::as_str)).collect(),
        None => ["ip4", "ip6"].iter().filter_map(|k| result.get(*k)?.get("ip")?.as_str()).collect(),
    };
    cidrs
        .iter()
        .map(|c| {
            let addr = c.split_once('/').map_or(*c, |(a, _)| a);
            addr.parse().unwrap_or_else(|e| panic!("{c:?} in a result is not an address ({e}): {result}"))
        })
        .collect()
}

/// The one IPv4 address of a result.
pub fn ipv4_of(result: &Value) -> IpAddr {
    let v4: Vec<IpAddr> = addresses(result).into_iter().filter(IpAddr::is_ipv4).collect();
    assert_eq!(v4.len(), 1, "expected one IPv4 address in {result}");
    v4[0]
}

/// One lease as an administrator sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseRow {
    pub address: IpAddr,
    pub pool: String,
    pub network: String,
    pub container_id: String,
    pub ifname: String,
}

/// Every lease recorded in the database at `db`, sorted, read from outside
/// the plugins through the operator listing.
pub fn leases(db: &Path) -> Vec<LeaseRow> {
    let listed = list_leases(db);
    let mut rows: Vec<LeaseRow> = listed.as_array().expect("an array of leases").iter().map(row).collect();
    rows.sort();
    rows
}

fn row(v: &Value) -> LeaseRow {
    let text = |k: &str| v[k].as_str().unwrap_or_else(|| panic!("lease row without {k}: {v}")).to_string();
    LeaseRow {
        address: text("address").parse().unwrap_or_else(|e| panic!("lease address ({e}): {v}")),
        pool: text("pool"),
        network: text("network"),
        container_id: text("container_id"),
        ifname: text("ifname"),
    }
}

/// `PRAGMA integrity_check` of the database by the sqlite3 shell, read-only.
pub fn integrity_check(db: &Path) -> String {
    let out = Command::new("sqlite3")
        .arg("-readonly")
        .arg(db)
        .arg("PRAGMA integrity_check")
        .stdin(Stdio::null())
        .output()
        .expect("the sqlite3 shell is needed to read the database (apt-get install sqlite3)");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
}

/// Every address from `first` to `last`, inclusive (same family).
pub fn address_range(first: IpAddr, last: IpAddr) -> Vec<IpAddr> {
    let (lo, hi) = (as_u128(first), as_u128(last));
    assert!(lo <= hi && first.is_ipv4() == last.is_ipv4(), "{first}..{last}");
    (lo..=hi)
        .map(|n| if first.is_ipv4() { IpAddr::from((n as u32).to_be_bytes()) } else { IpAddr::from(n.to_be_bytes()) })
        .collect()
}

fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4) as u128,
        IpAddr::V6(v6) => u128::from(v6),
    }
}
