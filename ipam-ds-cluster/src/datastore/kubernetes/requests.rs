//! The Kubernetes API's requests as the store makes them: typed objects
//! in and out, each answer's `Date` kept as the store's clock, and the
//! server's refusals in the protocol's terms.

use serde::de::DeserializeOwned;
use shared::{CniError, Code};

use super::objects::{self, Kind as ObjectKind, Object, Time};
use super::{KubeStore, KUBECONFIG_FIELD, STORE};
use crate::datastore::{Answer, Error, Unreachable};
use crate::kube::{self, Preconditions, Resource, Selectors};
use crate::records::shown;

impl KubeStore {
    pub(super) fn answered<T>(&self, answer: kube::Answer<T>) -> T {
        self.now.set(Time::of(answer.date));
        answer.outcome
    }

    pub(super) fn get<K: ObjectKind>(&self, name: &str) -> Answer<Option<Object<K>>> {
        let found = self.client.get(&resource::<K>(), name).map_err(failure)?;
        self.answered(found).map(|o| typed::<K>(o.0)).transpose()
    }

    /// Objects by label; `from_cache`: see [`Selectors::from_cache`].
    pub(super) fn list<K: ObjectKind>(&self, labels: &str, from_cache: bool) -> Answer<Vec<Object<K>>> {
        let selectors = Selectors { labels: Some(labels), fields: None, from_cache };
        let list = self.client.list(&resource::<K>(), &selectors).map_err(failure)?;
        self.answered(list).items.into_iter().map(|o| typed::<K>(o.0)).collect()
    }

    /// Creates `object`; none: one of its name exists.
    pub(super) fn create<K: ObjectKind>(&self, object: &Object<K>) -> Answer<Option<Object<K>>> {
        let body = written(object)?;
        let created = self.client.create(&resource::<K>(), &body).map_err(failure)?;
        match self.answered(created) {
            kube::Created::Created(o) => typed::<K>(o.0).map(Some),
            kube::Created::AlreadyExists => Ok(None),
        }
    }

    /// Replaces `object` at the resourceVersion it was read at; none: it
    /// changed or went since.
    pub(super) fn replace<K: ObjectKind>(&self, object: &Object<K>) -> Answer<Option<Object<K>>> {
        let name = &object.metadata.name;
        let version = object.metadata.resource_version.as_deref().unwrap_or_default();
        let body = written(object)?;
        let replaced = self.client.replace(&resource::<K>(), name, version, &body).map_err(failure)?;
        match self.answered(replaced) {
            kube::Replaced::Replaced(o) => typed::<K>(o.0).map(Some),
            kube::Replaced::Conflict | kube::Replaced::NotFound => Ok(None),
        }
    }

    /// Deletes `object` while it is as read; false: it changed or went since.
    pub(super) fn delete<K: ObjectKind>(&self, object: &Object<K>) -> Answer<bool> {
        let preconditions = Preconditions {
            uid: object.metadata.uid.as_deref(),
            resource_version: object.metadata.resource_version.as_deref(),
        };
        let deleted = self.client.delete(&resource::<K>(), &object.metadata.name, &preconditions).map_err(failure)?;
        Ok(matches!(self.answered(deleted), kube::Deleted::Deleted))
    }
}

/// `object` as a create or update sends it. Without the fields' owners:
/// the API server would otherwise keep, in the object, every field of every
/// record again under the manager that wrote it (a shared block's
/// `managedFields` weigh about as much as its records), and work them out
/// again at every write. The objects are this plugin's alone, and a list
/// of one empty entry is how a write asks for none.
fn written<K: ObjectKind>(object: &Object<K>) -> Answer<serde_json::Value> {
    let mut body = serde_json::to_value(object).map_err(|e| bug(&object.metadata.name, e))?;
    body["metadata"]["managedFields"] = serde_json::json!([{}]);
    Ok(body)
}

pub(super) fn resource<K: ObjectKind>() -> Resource {
    Resource { group: objects::GROUP, version: objects::VERSION, plural: K::PLURAL }
}

pub(super) fn typed<K: ObjectKind + DeserializeOwned>(value: serde_json::Value) -> Answer<Object<K>> {
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
    serde_json::from_value(value).map_err(|e| {
        Error::Failed(CniError::new(
            Code::TryAgainLater,
            format!("{} {} does not read as this plugin writes it: {e}", K::KIND, shown(&name)),
        ))
    })
}

pub(super) fn failure(e: kube::Error) -> Error {
    match e {
        kube::Error::Unavailable(why) => Error::Unavailable(Unreachable { store: STORE, why }),
        e => Error::Failed(e.to_cni(KUBECONFIG_FIELD)),
    }
}

pub(super) fn bug(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Failed(CniError::new(Code::Io, format!("{}: {e}", shown(what))))
}

pub(super) fn not_ours(name: &str, expected: &str) -> Error {
    Error::Failed(CniError::new(
        Code::TryAgainLater,
        format!(
            "object {} is not the one its name stands for ({expected}): a hash collision, or made by hand; remove \
             it",
            shown(name)
        ),
    ))
}
