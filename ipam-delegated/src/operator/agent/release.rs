//! Releasing one attachment: the stack's DEL, run as a runtime runs it
//! (the configuration its ADD was given on stdin, CNI_CONTAINERID,
//! CNI_IFNAME, CNI_ARGS naming the pod, no network namespace), by this very
//! program, so that everything a DEL does happens: a sticky identity's
//! address goes to its hold, cluster mode's records are released in its
//! datastore. Not GC with the valid attachments: GC releases every
//! attachment not listed, and an ADD in flight on this node is in no list
//! the agent could make.
//!
//! The DEL is a process of its own (the suite's delegates run inside it, as
//! in any plugin call): a plugin reads its call from the environment, which
//! is the whole process's, and the agent has a metrics thread; a DEL that
//! crashed would not take the agent with it either.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use shared::agent_record::cni_args_of;
use shared::store::{AllocationStore, Pod, DEFAULT_LOCK_TIMEOUT};
use shared::Attachment;

use crate::builtin;

/// The name the orchestrator runs under.
const ORCHESTRATOR: &str = "ipam-delegated";

/// A directory whose entries are this program under its own name and each
/// delegate's: the DELs start the plugin their configuration's `ipam.type`
/// names from it, and it comes first in their CNI_PATH, so that the suite's
/// delegates run inside the DEL's process (as in a plugin call), whatever
/// directory the host installed them in. Removed when dropped.
pub struct OwnDelegates {
    dir: PathBuf,
}

impl OwnDelegates {
    pub fn make() -> std::io::Result<OwnDelegates> {
        let program = std::env::current_exe()?;
        let dir = std::env::temp_dir().join(format!("ipam-delegated-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        for name in std::iter::once(ORCHESTRATOR).chain(builtin::names()) {
            std::os::unix::fs::symlink(&program, dir.join(name))?;
        }
        Ok(OwnDelegates { dir })
    }
}

impl Drop for OwnDelegates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the DEL of `attachment`, whose ADD named `pod`, with the
/// configuration recorded in `database`; `cni_path`: where any other
/// delegate is found (after this program's own names). Ok once the
/// attachment holds nothing in `database` any more.
pub fn release(
    database: &Path,
    attachment: &Attachment,
    pod: &Pod,
    own: &OwnDelegates,
    cni_path: &[PathBuf],
) -> Result<(), String> {
    let mut store = AllocationStore::open(database, DEFAULT_LOCK_TIMEOUT).map_err(|e| e.to_string())?;
    let config = store
        .read(|tx| tx.network_config(&attachment.network))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no configuration of network {:?} is recorded", attachment.network))?;
    let plugin = plugin_of(&config, own)?;
    let path = std::iter::once(own.dir.as_path())
        .chain(cni_path.iter().map(PathBuf::as_path))
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let mut command = Command::new(&plugin);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CNI_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", &attachment.container_id)
        .env("CNI_IFNAME", &attachment.ifname)
        .env("CNI_ARGS", cni_args_of(pod))
        .env("CNI_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", plugin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits before reading all of it says why on stdout.
        let _ = stdin.write_all(config.as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| format!("waiting for the DEL of {attachment}: {e}"))?;
    if !output.status.success() {
        let answer = String::from_utf8_lossy(&output.stdout);
        return Err(format!("DEL of {attachment} failed ({}): {}", output.status, answer.trim()));
    }
    // A configuration whose ipam.database is another path than the one
    // watched (mounted elsewhere in this container) released nothing here.
    let left = store.read(|tx| tx.attachment_pods()).map_err(|e| e.to_string())?;
    if left.iter().any(|a| a.attachment == *attachment) {
        return Err(format!(
            "DEL of {attachment} succeeded but it still holds addresses in {}: does its configuration's \
             ipam.database name this database?",
            database.display()
        ));
    }
    Ok(())
}

/// This program under the name the configuration's `ipam.type` gives:
/// ipam-delegated, or one of its delegates run alone.
fn plugin_of(config: &str, own: &OwnDelegates) -> Result<PathBuf, String> {
    let config: Value =
        serde_json::from_str(config).map_err(|e| format!("the recorded configuration does not read: {e}"))?;
    match config["ipam"]["type"].as_str() {
        Some(name) if name == ORCHESTRATOR || builtin::names().any(|own_name| own_name == name) => {
            Ok(own.dir.join(name))
        }
        Some(name) => Err(format!("ipam.type {name:?} of the recorded configuration is not this program")),
        None => Err("the recorded configuration has no ipam.type".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_this_program_under_the_name_ipam_type_gives_and_nothing_else() {
        let own = OwnDelegates::make().unwrap();
        let plugin = |config: &str| plugin_of(config, &own);
        assert_eq!(plugin(r#"{"ipam": {"type": "ipam-delegated"}}"#).unwrap(), own.dir.join("ipam-delegated"));
        assert_eq!(plugin(r#"{"ipam": {"type": "ipam-da-sequential"}}"#).unwrap(), own.dir.join("ipam-da-sequential"));
        // Each name is this program.
        let this = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        for name in std::iter::once(ORCHESTRATOR).chain(builtin::names()) {
            use std::os::unix::fs::MetadataExt;
            let linked = std::fs::metadata(own.dir.join(name)).unwrap();
            assert_eq!((linked.dev(), linked.ino()), (this.dev(), this.ino()), "{name}");
        }
        for (config, words) in [
            (r#"{"ipam": {"type": "host-local"}}"#, "\"host-local\" of the recorded configuration is not this program"),
            (r#"{"ipam": {}}"#, "no ipam.type"),
            ("not json", "does not read"),
        ] {
            let e = plugin(config).unwrap_err();
            assert!(e.contains(words), "{config}: {e}");
        }
        let dir = own.dir.clone();
        drop(own);
        assert!(!dir.exists(), "removed when dropped");
    }
}
