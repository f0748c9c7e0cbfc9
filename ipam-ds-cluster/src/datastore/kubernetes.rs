//! The Kubernetes API as the cluster's store (docs/kubernetes.md): its
//! objects' names ([`names`]) and shapes ([`objects`]), with no I/O. The
//! datastore trait on this store is to come.

pub mod names;
pub mod objects;
