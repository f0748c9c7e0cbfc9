//! The ADD result cache, in libcni's layout and shape:
//! `<dir>/results/<network>-<containerID>-<ifname>`, a `cniCacheV1` object.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// libcni's default cache directory.
pub const DEFAULT_DIR: &str = "/var/lib/cni";
const KIND: &str = "cniCacheV1";

/// One attachment: what names its cache file.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
}

/// What ADD cached for an attachment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cached {
    pub result: Option<Value>,
    pub cni_args: Option<Vec<(String, String)>>,
    pub capability_args: Option<Map<String, Value>>,
}

/// The cache file of `at` under `dir`.
pub fn path(dir: &Path, at: &Attachment) -> PathBuf {
    dir.join("results").join(format!("{}-{}-{}", at.network, at.container_id, at.ifname))
}

/// Writes the cache file of `at` (directory 0700, file 0600, replaced at once).
pub fn write(
    dir: &Path,
    at: &Attachment,
    list_bytes: &[u8],
    cni_args: &[(String, String)],
    capability_args: &Map<String, Value>,
    result: &Value,
) -> Result<PathBuf, String> {
    let mut entry = json!({
        "kind": KIND,
        "containerId": at.container_id,
        "config": base64(list_bytes),
        "ifName": at.ifname,
        "networkName": at.network,
        "netns": at.netns,
    });
    if !cni_args.is_empty() {
        entry["cniArgs"] = json!(cni_args.iter().map(|(k, v)| [k, v]).collect::<Vec<_>>());
    }
    if !capability_args.is_empty() {
        entry["capabilityArgs"] = Value::Object(capability_args.clone());
    }
    entry["result"] = result.clone();

    let file = path(dir, at);
    let results = dir.join("results");
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&results)
        .map_err(|e| format!("creating {}: {e}", results.display()))?;
    let tmp = results.join(format!(".{}.tmp-{}", at.container_id, std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(entry.to_string().as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, &file));
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("writing {}: {e}", file.display())
    })?;
    Ok(file)
}

/// The cached entry of `at`, if any. A file that is not `cniCacheV1` is taken
/// as a bare result, as libcni reads its older cache files.
pub fn read(dir: &Path, at: &Attachment) -> Result<Option<Cached>, String> {
    let file = path(dir, at);
    let bytes = match fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", file.display())),
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
    if value["kind"] != KIND {
        return Ok(Some(Cached { result: Some(value), ..Cached::default() }));
    }
    let cni_args = value["cniArgs"].as_array().map(|pairs| {
        pairs.iter().filter_map(|p| Some((p.get(0)?.as_str()?.to_string(), p.get(1)?.as_str()?.to_string()))).collect()
    });
    Ok(Some(Cached {
        result: value.get("result").filter(|r| r.is_object()).cloned(),
        cni_args,
        capability_args: value["capabilityArgs"].as_object().cloned(),
    }))
}

/// Removes the cache file of `at`; a missing one is no error.
pub fn remove(dir: &Path, at: &Attachment) -> Result<(), String> {
    let file = path(dir, at);
    match fs::remove_file(&file) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(format!("removing {}: {e}", file.display())),
        _ => Ok(()),
    }
}

/// The attachments (container ID, ifname) with a cached result for `network`.
pub fn attachments(dir: &Path, network: &str) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(dir.join("results")) else { return Vec::new() };
    let mut found: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|entry| serde_json::from_slice::<Value>(&fs::read(entry.path()).ok()?).ok())
        .filter(|v| v["kind"] == KIND && v["networkName"] == network)
        .filter_map(|v| Some((v["containerId"].as_str()?.to_string(), v["ifName"].as_str()?.to_string())))
        .collect();
    found.sort();
    found
}

/// Standard base64 with padding: how Go's encoding/json writes a []byte.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Attachment {
        Attachment {
            network: "blue-net".into(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/blue".into(),
        }
    }

    #[test]
    fn the_file_is_named_as_libcni_names_it() {
        assert_eq!(path(Path::new(DEFAULT_DIR), &at()), Path::new("/var/lib/cni/results/blue-net-c1-eth0"));
    }

    #[test]
    fn base64_as_go_writes_it() {
        for (plain, coded) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("{}\n", "e30K")]
        {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    #[test]
    fn written_read_listed_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let result = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.22.1.0/16"}]});
        let args = vec![("IgnoreUnknown".to_string(), "1".to_string())];
        let caps = json!({"ips": ["10.22.1.5/16"]}).as_object().cloned().unwrap_or_default();
        assert_eq!(read(dir.path(), &at()), Ok(None));
        let file = write(dir.path(), &at(), b"{}", &args, &caps, &result).expect("written");
        assert_eq!(file, dir.path().join("results/blue-net-c1-eth0"));
        let raw: Value = serde_json::from_slice(&fs::read(&file).expect("read")).expect("JSON");
        let keys: Vec<&str> = raw.as_object().into_iter().flatten().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["kind", "containerId", "config", "ifName", "networkName", "netns", "cniArgs", "capabilityArgs", "result"]
        );
        assert_eq!(
            (&raw["kind"], &raw["config"], &raw["cniArgs"]),
            (&json!(KIND), &json!("e30="), &json!([["IgnoreUnknown", "1"]]))
        );
        let cached = read(dir.path(), &at()).expect("readable").expect("cached");
        assert_eq!(cached, Cached { result: Some(result), cni_args: Some(args), capability_args: Some(caps) });
        assert_eq!(attachments(dir.path(), "blue-net"), [("c1".to_string(), "eth0".to_string())]);
        assert!(attachments(dir.path(), "other").is_empty());
        remove(dir.path(), &at()).expect("removed");
        assert!(!file.exists());
        remove(dir.path(), &at()).expect("removing a missing file is no error");
    }
}
