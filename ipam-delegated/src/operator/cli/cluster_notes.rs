//! The longer texts of `cluster`'s `--help` and man page, in the contract's
//! words (docs/contract.md, "Cluster mode").

pub const CLUSTER_NOTES: &str = "\
For networks in cluster mode (ipam-ds-cluster), whose addresses are unique
across nodes: pools are cut into blocks that nodes claim in etcd.

--conf names the network configuration: a .conflist, or one plugin's .conf.
Its first plugin whose ipam is of type ipam-delegated and has ipam.cluster is
read as the plugins read it: the network is the configuration's name, etcd and
this node are ipam.cluster's, the pools ipam.pools, and this node's database
ipam.database.

blocks shows per pool the blocks, their owner nodes and, for this node, their
usage; release-node NODE hands a dead node's blocks and records back to the
cluster. Their own --help says more.

etcd that cannot be reached is an error naming the endpoints (exit status 1).";

pub const BLOCKS_NOTES: &str = "\
Per pool, its blocks in address order: the block, its owner node, its state
and since when (UTC), and the address records in it. A block is owned, or
released: given back by release-node, and claimable again once its etcd lease
ends. A block that holds address records but has no owner is unclaimed.
Address records keep single addresses apart from their block's owner: static
(asked for by name), borrowed (taken by another node) and lent (offered by the
owner). For this node's owned blocks, used counts the leases inside the block
in this node's database and size the block's allocatable addresses (its part
of the pool's ranges minus excluded addresses and the gateway); for other
nodes' blocks they are -. Each pool ends with how many of its blocks (those
with an address to hand out) are claimed and how many this node owns. etcd's definition of a pool that differs
from the configuration's is warned about.

With --json: one object with the keys network, node (this node) and pools, an
array of objects with the keys name, block_size, blocks_total, blocks_claimed
(released ones included), blocks_released, blocks_of_node and blocks; each
block has the keys block, node (null when unclaimed), state, since, used and
size (null but for this node's owned blocks) and records (an object with the
keys static, borrowed and lent). The database is read only when this node
owns a block; when it cannot be read, used is unknown (? or null) and the
exit status is 1.";

pub const RELEASE_NODE_NOTES: &str = "\
For a node that is gone. Each block NODE owns in the network's pools is
replaced by a released record put under an etcd lease of offlineGrace + 3 x
ipam.timeout seconds (ipam.timeout is 30 when not set): that is how long NODE,
if it is in fact alive but cut off from etcd, may still allocate in its
blocks. When the lease ends, etcd deletes the record and the block can be
claimed again; NODE itself never uses a released block again. NODE's address
records (static, borrowed, lent, allocated) are deleted at once, but for one of an
address another node lent it, which goes back to that lender as lent (as
NODE's own DEL would do). Each change is made only if the record is unchanged
since it was read; one that changed is read again. The wait is NODE's own
offlineGrace and ipam.timeout, as its plugins recorded them in etcd, when
longer than CONFLIST's.

With --gone, NODE's blocks are deleted rather than released: claimable at
once. Only for a node that can never run again (its machine deleted, its
disk wiped): one that is alive but cut off from etcd may still allocate in
them for offlineGrace, and a node that claims them meanwhile would hand out
the same addresses.

Prints each block released and each record deleted, then a summary. A node
that holds nothing is not an error. Logged as the plugins log (ipam.logFile).

With --json: one object with the keys network, node, blocks (pool, block,
claimed), records (pool, address, kind, container, ifname, returned_to: the
lender it went back to, or null when deleted),
claimable_in_seconds and claimable_at (null when no block was released;
0 and now with --gone), gone.";

pub const REAP_NOTES: &str = "\
For networks on the Kubernetes datastore (ipam.cluster.kubernetes). One pass
of the reaper, as the node agent runs it at each interval, as this node
(ipam.cluster.node of CONFLIST):

1. The reaper's Lease of the network (coordination.k8s.io, namespace
   ipam-delegated, ipam-delegated-reaper.<network>): taken when absent or
   expired, renewed when this node's, each write conditioned on what was
   read; expiry is judged by the API server's clock (the Date of its
   answers). While another node holds it, the pass does nothing else: one
   reaper at a time.
2. Each node that holds a block, an address record or a live identity of
   the network and is not a Node of the cluster (one LIST of nodes), and
   whose kubelet renews no Lease in kube-node-lease (one GET each), is
   noted missing in the Lease (annotation ipam-delegated.io/missing-nodes,
   since when by the API server's clock). Once it has been missing for its
   grace (its own offlineGrace + 3 x ipam.timeout, as release-node reads
   it) it is released as release-node NODE releases it (not --gone): its
   blocks stay unclaimable for that grace again, timed by the API server,
   then another node may claim them. A node whose Node exists is never
   released, and one seen again is no longer noted. When the cluster lists
   no Node at all, nothing is released (exit status 1).
3. Each IPDIdentity whose hold ended (by the API server's Date) and that no
   attachment holds is deleted, conditioned on its uid and resourceVersion:
   one taken over or held again meanwhile is kept.

Every write compares what was read, so a pass killed anywhere is finished
by the next. Prints the Lease's holder, each node waiting out its grace, each
node released (as release-node prints it) and each identity collected. The
Lease lasts 60 s unless renewed.

With --json: one object with the keys network, lease (name, held, holder,
until, taken_from), released_nodes (each as release-node --json prints it),
waiting_nodes (node, missing_since, releasable_at) and ended_identities
(ifname, identity, held_until, deleted).";
