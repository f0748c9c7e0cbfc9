//! The cluster's reaper (issue 32): what no node's runtime releases once a
//! node is deleted from the cluster, and identities whose hold ended.
//!
//! - [`lease`]: one reaper at a time per network, a `coordination.k8s.io`
//!   Lease timed by the API server's clock.
//! - [`nodes`]: the nodes holding something in the network that are no
//!   longer the cluster's nodes. The Lease keeps since when each has been
//!   missing ([`lease::HeldLease::missing_since`]); once that is longer
//!   than the node's own offlineGrace + 3 × ipam.timeout, the operator's
//!   `release-node` releases it (its blocks unclaimable for that long
//!   again, timed by the store).
//! - Ended identities: [`crate::datastore::kubernetes::KubeStore::collect_ended_identities`].
//!
//! The pass that runs them in order is the operator's (`ipam-delegated
//! cluster reap`), which the node agent runs at each interval.

pub mod lease;
pub mod nodes;
