//! Releasing one attachment: the stack's DEL, run in this process as a
//! runtime would run it (the configuration its ADD was given, CNI_ARGS with
//! the pod's fields, no network namespace), so that everything a DEL does
//! happens: a sticky identity's address goes to its hold, cluster mode's
//! records are released in its datastore. Not GC with the valid attachments:
//! GC releases every attachment not listed, and an ADD in flight on this
//! node is in no list the agent could make.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use shared::agent_record::cni_args_of;
use shared::plugin::{self, Stdin};
use shared::store::{AllocationStore, Pod, DEFAULT_LOCK_TIMEOUT};
use shared::{Attachment, Builtin, Command, Env};

use crate::builtin;

/// A directory whose entries are this program under each delegate's name,
/// first in the DELs' CNI_PATH, so that the suite's delegates of a stack
/// run in this process (as they do in a plugin call), whatever directory
/// the host installed them in. Removed when dropped.
pub struct OwnDelegates {
    dir: PathBuf,
}

impl OwnDelegates {
    pub fn make() -> std::io::Result<OwnDelegates> {
        let program = std::env::current_exe()?;
        let dir = std::env::temp_dir().join(format!("ipam-delegated-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir)?;
        for name in builtin::names() {
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
    let config: Value =
        serde_json::from_str(&config).map_err(|e| format!("the recorded configuration does not read: {e}"))?;
    let plugin = plugin_of(&config)?;
    let path = std::iter::once(own.dir.as_path())
        .chain(cni_path.iter().map(PathBuf::as_path))
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let vars = [
        ("CNI_CONTAINERID", attachment.container_id.clone()),
        ("CNI_IFNAME", attachment.ifname.clone()),
        ("CNI_ARGS", cni_args_of(pod)),
        ("CNI_PATH", path),
    ];
    let (answer, success) = plugin::respond(plugin, Env::in_process(Command::Del, &vars), Stdin::Value(config));
    if !success {
        let why = answer.map_or_else(|| "no error object".to_string(), |error| error.to_string());
        return Err(format!("DEL of {attachment} failed: {why}"));
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

/// The plugin the configuration's `ipam.type` names: ipam-delegated or one
/// of its delegates run alone.
fn plugin_of(config: &Value) -> Result<&'static Builtin, String> {
    let Some(name) = config["ipam"]["type"].as_str() else {
        return Err("the recorded configuration has no ipam.type".to_string());
    };
    match name {
        "ipam-delegated" => Ok(&crate::ORCHESTRATOR),
        _ => builtin::named(OsStr::new(name))
            .ok_or_else(|| format!("ipam.type {name:?} of the recorded configuration is not this program")),
    }
}
