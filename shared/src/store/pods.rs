//! What the node agent (`ipam-delegated agent`) reads: each attachment's
//! pod and each network's configuration, recorded by the ADD that leased,
//! in its own write transaction, and forgotten with the attachment's last
//! lease (see [`AgentRecord`]).

use std::collections::BTreeSet;

use rusqlite::params;

use super::columns::now_unix;
use super::{InDatabase, Tx};
use crate::args::Attachment;
use crate::error::Result;

/// A Kubernetes pod, as a runtime names it in CNI_ARGS (`K8S_POD_NAMESPACE`,
/// `K8S_POD_NAME`, `K8S_POD_UID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// `None` when the runtime passed no `K8S_POD_UID`.
    pub uid: Option<String>,
}

/// An attachment whose ADD named its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentPod {
    pub attachment: Attachment,
    pub pod: Pod,
    /// Unix seconds: when the ADD recorded the pod.
    pub added: i64,
}

/// What an ADD records beside its leases, when the runtime named the pod:
/// the pod of `attachment`, and the network's configuration. Set on a store
/// by [`super::AllocationStore::set_agent_record`]; written by the first
/// lease or share of `attachment` in a write transaction, and only what
/// differs from the rows there, so that a steady ADD adds no transaction,
/// no sync and, for its network's configuration, no write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRecord {
    pub attachment: Attachment,
    pub pod: Pod,
    /// The configuration the runtime gave, as JSON, without what is the
    /// call's own (see `suite_delegate::agent_record`).
    pub config: String,
}

impl Tx<'_> {
    /// Records this handle's [`AgentRecord`] when `owner` is its attachment,
    /// once per transaction.
    pub(super) fn record_for_agent(&self, owner: &Attachment) -> Result<()> {
        let Some(record) = self.agent_record.filter(|r| r.attachment == *owner) else { return Ok(()) };
        if self.agent_recorded.replace(true) {
            return Ok(());
        }
        let now = now_unix();
        let pod = &record.pod;
        self.sql
            .prepare_cached(
                "INSERT INTO attachment_pods (network, container_id, ifname, pod_namespace, pod_name, pod_uid, added)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (network, container_id, ifname) DO UPDATE
                 SET pod_namespace = excluded.pod_namespace, pod_name = excluded.pod_name,
                     pod_uid = excluded.pod_uid, added = excluded.added
                 WHERE pod_namespace IS NOT excluded.pod_namespace OR pod_name IS NOT excluded.pod_name
                     OR pod_uid IS NOT excluded.pod_uid",
            )
            .and_then(|mut s| {
                s.execute(params![
                    owner.network,
                    owner.container_id,
                    owner.ifname,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    now
                ])
            })
            .in_db(self.path)?;
        self.sql
            .prepare_cached(
                "INSERT INTO network_configs (network, config, since) VALUES (?1, ?2, ?3)
                 ON CONFLICT (network) DO UPDATE SET config = excluded.config, since = excluded.since
                 WHERE config IS NOT excluded.config",
            )
            .and_then(|mut s| s.execute(params![owner.network, record.config, now]))
            .in_db(self.path)?;
        Ok(())
    }

    /// Forgets the pods of those of `owners` that hold no lease and share
    /// none any more: their last one was just released.
    pub(super) fn forget_pods_of<'a>(&self, owners: impl IntoIterator<Item = &'a Attachment>) -> Result<()> {
        let owners: BTreeSet<&Attachment> = owners.into_iter().collect();
        if owners.is_empty() {
            return Ok(());
        }
        let mut stmt = self
            .sql
            .prepare_cached(
                "DELETE FROM attachment_pods WHERE network = ?1 AND container_id = ?2 AND ifname = ?3
                 AND NOT EXISTS (SELECT 1 FROM leases WHERE network = ?1 AND container_id = ?2 AND ifname = ?3
                                 AND held_until IS NULL)
                 AND NOT EXISTS (SELECT 1 FROM lease_sharers WHERE network = ?1 AND container_id = ?2
                                 AND ifname = ?3)",
            )
            .in_db(self.path)?;
        for owner in owners {
            stmt.execute(params![owner.network, owner.container_id, owner.ifname]).in_db(self.path)?;
        }
        Ok(())
    }

    /// Every attachment whose ADD named its pod, in attachment order.
    pub fn attachment_pods(&self) -> Result<Vec<AttachmentPod>> {
        let mut stmt = self
            .sql
            .prepare_cached(
                "SELECT network, container_id, ifname, pod_namespace, pod_name, pod_uid, added FROM attachment_pods
                 ORDER BY network, container_id, ifname",
            )
            .in_db(self.path)?;
        stmt.query_map([], |row| {
            Ok(AttachmentPod {
                attachment: Attachment { network: row.get(0)?, container_id: row.get(1)?, ifname: row.get(2)? },
                pod: Pod { namespace: row.get(3)?, name: row.get(4)?, uid: row.get(5)? },
                added: row.get(6)?,
            })
        })
        .and_then(Iterator::collect)
        .in_db(self.path)
    }

    /// Every network's configuration, as its last ADD was given it: (network, JSON).
    pub fn network_configs(&self) -> Result<Vec<(String, String)>> {
        let mut stmt =
            self.sql.prepare_cached("SELECT network, config FROM network_configs ORDER BY network").in_db(self.path)?;
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).and_then(Iterator::collect).in_db(self.path)
    }

    /// The configuration an ADD of `network` was last given, as JSON.
    pub fn network_config(&self, network: &str) -> Result<Option<String>> {
        let mut stmt =
            self.sql.prepare_cached("SELECT config FROM network_configs WHERE network = ?1").in_db(self.path)?;
        let mut rows = stmt.query_map([network], |row| row.get(0)).in_db(self.path)?;
        rows.next().transpose().in_db(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{ip, owner, temp_store};
    use super::*;
    use std::time::Duration;

    fn record(attachment: &Attachment, pod: &str, uid: &str, config: &str) -> AgentRecord {
        AgentRecord {
            attachment: attachment.clone(),
            pod: Pod { namespace: "prod".into(), name: pod.into(), uid: Some(uid.into()) },
            config: config.into(),
        }
    }

    fn changes(store: &mut super::super::AllocationStore) -> i64 {
        store.conn.total_changes() as i64
    }

    #[test]
    fn a_lease_of_the_recorded_attachment_records_its_pod_and_network_config_once() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store.set_agent_record(Some(record(&a, "db-0", "u1", r#"{"name":"net"}"#)));
        store
            .write(|tx| {
                tx.insert_lease(ip("10.0.0.2"), "p", &a)?;
                tx.insert_lease(ip("fd00::2"), "p6", &a)?;
                // Another attachment's lease (cluster mode's lending holder) records nothing.
                tx.insert_lease(ip("10.0.0.9"), "p", &owner("net", "lender", "-"))
            })
            .unwrap();
        let pods = store.read(|tx| tx.attachment_pods()).unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].attachment, a);
        assert_eq!(pods[0].pod, Pod { namespace: "prod".into(), name: "db-0".into(), uid: Some("u1".into()) });
        assert_eq!(store.read(|tx| tx.network_config("net")).unwrap().as_deref(), Some(r#"{"name":"net"}"#));

        // A second ADD of another pod of the network, with the same
        // configuration: its pod is written, the configuration is not.
        let b = owner("net", "c2", "eth0");
        store.set_agent_record(Some(record(&b, "db-1", "u2", r#"{"name":"net"}"#)));
        let before = changes(&mut store);
        store.write(|tx| tx.insert_lease(ip("10.0.0.3"), "p", &b)).unwrap();
        // The lease, its run, the pod: not the configuration.
        assert_eq!(changes(&mut store) - before, 3);
        store.set_agent_record(Some(record(&b, "db-1", "u2", r#"{"name":"net","x":1}"#)));
        store.write(|tx| tx.insert_lease(ip("10.0.0.4"), "p", &b)).unwrap();
        assert_eq!(store.read(|tx| tx.network_config("net")).unwrap().as_deref(), Some(r#"{"name":"net","x":1}"#));
    }

    #[test]
    fn a_sharer_of_a_lease_is_recorded_with_its_share_and_forgotten_with_it() {
        let (_dir, mut store) = temp_store();
        let (a, b) = (owner("net", "c1", "eth0"), owner("net", "c2", "eth0"));
        store.set_agent_record(Some(record(&a, "vm-1", "u1", "{}")));
        store.write(|tx| tx.insert_lease(ip("10.0.0.2"), "p", &a)).unwrap();
        store.set_agent_record(Some(record(&b, "vm-1", "u2", "{}")));
        store.write(|tx| tx.share_lease(ip("10.0.0.2"), &b)).unwrap();
        let names = |store: &mut super::super::AllocationStore| -> Vec<String> {
            store.read(|tx| tx.attachment_pods()).unwrap().into_iter().map(|p| p.attachment.container_id).collect()
        };
        assert_eq!(names(&mut store), ["c1", "c2"]);
        store.set_agent_record(None);
        store.write(|tx| tx.release(&b, None)).unwrap();
        assert_eq!(names(&mut store), ["c1"], "the sharer went with its share, the holder stays");
    }

    #[test]
    fn a_failed_transaction_records_nothing() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store.set_agent_record(Some(record(&a, "db-0", "u1", "{}")));
        let failed = store.write(|tx| {
            tx.insert_lease(ip("10.0.0.2"), "p", &a)?;
            Err::<(), _>(crate::CniError::new(crate::Code::NoFreeAddress, "full"))
        });
        assert!(failed.is_err());
        assert!(store.read(|tx| tx.attachment_pods()).unwrap().is_empty());
        assert_eq!(store.read(|tx| tx.network_config("net")).unwrap(), None);
    }

    #[test]
    fn the_pod_goes_with_the_attachments_last_lease_whichever_way_it_goes() {
        let (_dir, mut store) = temp_store();
        let a = owner("net", "c1", "eth0");
        store.set_agent_record(Some(record(&a, "db-0", "u1", "{}")));
        store
            .write(|tx| {
                tx.insert_lease(ip("10.0.0.2"), "p", &a)?;
                tx.insert_lease(ip("fd00::2"), "p6", &a)
            })
            .unwrap();
        store.set_agent_record(None);
        // One of two addresses released: the attachment lives on.
        store.write(|tx| tx.release_address(ip("10.0.0.2"), &a)).unwrap();
        assert_eq!(store.read(|tx| tx.attachment_pods()).unwrap().len(), 1);
        // The last one held for its identity: the attachment is gone.
        store.write(|tx| tx.bind_identity(&a, "prod/db-0")).unwrap();
        store.write(|tx| tx.release(&a, Some(Duration::from_secs(600)))).unwrap();
        assert!(store.read(|tx| tx.attachment_pods()).unwrap().is_empty());

        // GC and the rollback of an ADD forget it too.
        for way in ["gc", "rollback"] {
            let b = owner("net", way, "eth0");
            store.set_agent_record(Some(record(&b, way, "u", "{}")));
            store.set_add_id(Some("add-1".into()));
            store.write(|tx| tx.insert_lease(ip("10.0.0.7"), "p", &b)).unwrap();
            store.set_add_id(None);
            assert_eq!(store.read(|tx| tx.attachment_pods()).unwrap().len(), 1, "{way}");
            match way {
                "gc" => drop(store.write(|tx| tx.gc("net", &Default::default(), None)).unwrap()),
                _ => drop(store.write(|tx| tx.release_added_by(&b, "add-1")).unwrap()),
            }
            assert!(store.read(|tx| tx.attachment_pods()).unwrap().is_empty(), "{way}");
        }
    }
}
