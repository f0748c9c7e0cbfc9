//! Keys the suite reads in its own objects, and the one they were probably
//! meant to be when a key is not one of them. A typo in a pool ("exlude")
//! must not pass silently: the address meant to be excluded would be handed
//! out.

use serde_json::{Map, Value};

use crate::error::{CniError, Result};

pub const POOL: &[&str] = &[
    "name",
    "ranges",
    "subnet",
    "rangeStart",
    "rangeEnd",
    "gateway",
    "exclude",
    "routes",
    "dns",
    "match",
    "requested-ip",
    "blockSize",
];
pub const RANGE: &[&str] = &["subnet", "rangeStart", "rangeEnd", "gateway"];
/// A route's keys in spec 1.1 (`dst`, `gw`, and the optional rest).
pub const ROUTE: &[&str] = &["dst", "gw", "mtu", "advmss", "priority", "table", "scope"];
pub const DNS: &[&str] = &["nameservers", "domain", "search", "options"];
/// The `ipam` keys the suite's executables read. Other delegates' keys are
/// legal beside them.
pub const IPAM: &[&str] =
    &["type", "delegates", "pools", "database", "timeout", "lockTimeout", "logFile", "logLevel", "cluster", "sticky"];

/// Error 7 for the first key of `keys` (of an object at `field`) that is not
/// among `known`.
pub fn refuse_unknown(keys: &Map<String, Value>, known: &[&str], field: &str) -> Result<()> {
    let Some(key) = keys.keys().find(|k| !known.contains(&k.as_str())) else { return Ok(()) };
    let hint = match closest(key, known) {
        Some(meant) => format!("did you mean `{meant}`?"),
        None => format!("the keys are {}", known.join(", ")),
    };
    Err(CniError::config(&format!("{field}.{key}"), format!("unknown key `{key}`: {hint}")))
}

/// The known key `key` is most likely a typo of: within two edits (case
/// aside), the nearest first.
pub fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&key, &k.to_ascii_lowercase()), *k))
        .filter(|(d, _)| *d <= 2.min(key.len().saturating_sub(1)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit
/// (the commonest typo).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![(0..=b.len()).collect::<Vec<_>>(); a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typos_find_the_key_they_meant() {
        assert_eq!(closest("exlude", POOL), Some("exclude"));
        assert_eq!(closest("rangeStrat", POOL), Some("rangeStart"));
        assert_eq!(closest("rangestart", RANGE), Some("rangeStart"));
        assert_eq!(closest("databse", IPAM), Some("database"));
        assert_eq!(closest("lock_timeout", IPAM), Some("lockTimeout"));
        assert_eq!(closest("retries", IPAM), None, "too far: reported without a guess");
        assert_eq!(closest("comment", POOL), None);
        assert_eq!(closest("gw", RANGE), None, "a short key is no typo of a long one");
    }

    #[test]
    fn an_unknown_key_is_error_7_naming_path_and_guess() {
        let unknown = json!({"exlude": ["10.0.0.5"]});
        let e = refuse_unknown(unknown.as_object().unwrap(), POOL, "ipam.pools[0]").unwrap_err();
        assert_eq!(
            e.msg,
            "invalid network configuration: ipam.pools[0].exlude: unknown key `exlude`: did you mean `exclude`?"
        );
        let far = json!({"colour": "blue"});
        let e = refuse_unknown(far.as_object().unwrap(), RANGE, "r").unwrap_err();
        assert!(e.msg.ends_with("unknown key `colour`: the keys are subnet, rangeStart, rangeEnd, gateway"), "{e}");
        assert!(refuse_unknown(&Map::new(), RANGE, "r").is_ok());
    }
}
