//! The longer texts of `--help` and the man pages: what each command's
//! output means, kept apart from the definition so that it reads as a list.

pub const ABOUT: &str = "The operator's tool over the allocation database of the ipam-delegated CNI plugins";

pub const AFTER_HELP: &str = "\
Without arguments ipam-delegated is the CNI IPAM plugin a container runtime runs.

Exit status: 0 success; 1 failure (no database, locked, unusable, or check
found problems); 2 usage error.";

pub const LIST_NOTES: &str = "\
Leases are listed in address order; since is when the lease was taken, in UTC.

With sticky addresses (ipam-da-sticky), the table gains the columns STATE,
UNTIL and IDENTITY (- for none). STATE is leased (the attachment's lease),
held (the attachment is gone: the address is held for IDENTITY until UNTIL,
and nobody else gets it; CONTAINER and IFNAME name the attachment that last
leased it, SINCE when the hold began), expired (a hold past its end: free at the next
allocation), or shared (a second live attachment of IDENTITY sharing the
lease listed above it, shareLive; SINCE is when it began to share).
--identity lists only rows of that identity.

With --json: an array of objects with the keys pool, address, network,
container_id, ifname and since, as above, and identity (null when none),
state (leased, held, expired or shared) and held_until (UTC, null unless
held or expired).";

pub const POOLS_NOTES: &str = "\
size counts the allocatable addresses: each range's rangeStart..rangeEnd minus
the excluded addresses and the gateway. used counts the leases inside those
allocatable addresses, so a static lease outside them (outside the range, or
excluded) is not counted, and the holds of workload identities there
(ipam-da-sticky), which nobody else gets either; a hold past its end counts as
free, as it is to the next allocation. next is the address sequential
allocation would try next, or - when the pool is full.

With --json: an array of objects with the keys network, name, subnets, size,
used, free, held (the pool's holds that have not ended), percent_used and
next (null when full). size, used and free are
numbers, or decimal strings when above 2^53 (an IPv6 pool), which JSON readers
that hold numbers as doubles would round.";

pub const METRICS_NOTES: &str = "\
Per registered pool, labelled network and pool: size, used and free (as in
'ipam-delegated pools'), leases, which also counts static leases outside the
allocatable addresses, and held_addresses, the holds of workload identities
(ipam-da-sticky) that have not ended (counted in used, not in leases).
ipam_delegated_database_ok is 1, or 0 (and the exit status 1) when the
database cannot be read. Sizes are exact integers, also
above 2^53. In cluster mode, from this node's database alone (no etcd):
ipam_delegated_cluster_blocks (labelled network, pool and state: owned, or
releasing) and ipam_delegated_cluster_address_records (labelled network, pool
and kind: static, borrowed, lent, allocated).

For node_exporter's textfile collector, run it from a timer with
--output DIR/ipam-delegated.prom: the file is written as FILE.tmp-<pid> beside
it, then renamed over it, so that the collector never reads half a file.";

/// The two forms, which clap's usage of the argument group would run into one.
pub const RELEASE_USAGE: &str = "\
ipam-delegated release [OPTIONS] --network <NAME> --container <ID> --ifname <NAME>
       ipam-delegated release [OPTIONS] --identity <ID> [--network <NAME>]";

pub const RELEASE_NOTES: &str = "\
With --network, --container and --ifname: frees the attachment's leases at
once, also those of a workload identity (no hold is kept).

With --identity (and --network to keep to one network): drops the identity's
holds (ipam-da-sticky), so that their addresses are free for anyone; a live
lease of the identity is never released this way (it is printed as kept:
release its attachment instead).

Takes the same lock as the plugins. Releasing what holds nothing is not an
error. The released addresses are printed and logged.";

pub const FORGET_POOL_NOTES: &str = "\
For a pool that is gone from the configuration (renamed, moved, merged) but still
holds leases, so that its subnets can be registered by another pool. A pool
that holds no lease gives way by itself. Takes the same lock as the plugins;
the released addresses are printed and logged. Release only pools whose
containers are gone: a running container keeps using its address.";

pub const CHECK_NOTES: &str = "\
Runs SQLite's integrity check, then the suite's own: every lease lies in a
subnet of its registered pool, its text address matches its key, and the
runs of leased addresses agree with the leases, every hold names its identity,
every attachment sharing a lease (shareLive) shares a live lease of its
network, and every attachment whose pod is kept for the node agent holds or
shares a lease. Prints ok and exits 0, or
prints the problems and exits 1.";

pub const COMPLETIONS_NOTES: &str = "\
Where each shell looks for them, for example:
  bash: ipam-delegated completions bash > /usr/share/bash-completion/completions/ipam-delegated
  zsh:  ipam-delegated completions zsh > /usr/share/zsh/vendor-completions/_ipam-delegated
  fish: ipam-delegated completions fish > /usr/share/fish/vendor_completions.d/ipam-delegated.fish";

pub const MAN_NOTES: &str = "\
Writes DIR/ipam-delegated.1 and one page per command (ipam-delegated-list.1,
...), creating DIR if needed, and prints the paths written.";

pub const AGENT_NOTES: &str = "\
For the DaemonSet's second container (deploy/kubernetes/workloads.yaml), on
every node. On Kubernetes no runtime calls CNI GC for secondary networks
(containerd never does; Multus forwards it only for the primary network), so
the addresses of pods deleted without a DEL would stay taken. Each pass:

  1. reads the attachments whose ADD named their pod in CNI_ARGS
     (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID) from each --database;
  2. lists the pods bound to this node, once, consistently
     (fieldSelector=spec.nodeName=NODE);
  3. an attachment whose pod is not listed, or listed with another UID (a pod
     created again under its name), is a candidate; it is released once it
     has been a candidate for --grace since an earlier pass and its ADD is
     older than --grace, never an ADD that may be in flight;
  4. releases it with the stack's DEL, run as a runtime runs it (this
     program as the plugin ipam.type names, a process of its own) with the
     configuration its ADD was given (recorded in the database), CNI_ARGS
     naming the pod and no network namespace: a sticky identity's address
     goes to its hold, cluster mode's records are released, as at any DEL.

A pass that cannot list the pods (the API server unreachable, refused)
releases nothing and counts an error. Attachments whose ADD named no pod are
never touched. GET /metrics on --metrics-address answers what the metrics
command prints, of every --database (ipam_delegated_database_ok labelled by
database, the path), and the agent's counters
(ipam_delegated_agent_passes_total, _released_total, _errors_total,
_last_success_timestamp_seconds). SIGTERM or SIGINT ends it.

Without --kubeconfig the credentials are the pod's: the API server at
https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, the CA and token of
--service-account-dir, read again at every pass (the kubelet refreshes the
token). The ServiceAccount needs list on pods (deploy/kubernetes/rbac.yaml).";

pub const INSTALL_CNI_NOTES: &str = "\
For a DaemonSet's container (deploy/kubernetes/), with the host's directories
mounted under /host. In order:

  1. copies this program (/proc/self/exe) to --bin-dir as ipam-delegated, and
     links ipam-ds-pool, ipam-ds-cluster, ipam-da-static and
     ipam-da-sequential to it (symlinks to ipam-delegated, the fast layout);
  2. writes the node's name, from the environment variable NODE_NAME (the
     downward API's spec.nodeName), and a newline to --node-file: the file
     ipam.cluster.nodeFile names, as the host sees it;
  3. with --kubeconfig, writes the plugins' kubeconfig there, mode 0600: the
     file ipam.cluster.kubernetes.kubeconfig names, as the host sees it. Its
     server is https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT (the
     environment the kubelet gives every pod), its CA (embedded) and bearer
     token those of the pod's ServiceAccount, the files ca.crt and token of
     --service-account-dir;
  4. with --etcd-secret, copies its files (a mounted Secret's keys) into
     --etcd-dir, mode 0600: the files ipam.cluster.etcd's tls and
     passwordFile name, as the host sees them (an empty directory, the
     volume of an optional Secret that does not exist, copies nothing);
  5. copies each --conflist file into --conf-dir under its own name;
  6. waits for SIGTERM or SIGINT and exits 0, unless --once. With
     --kubeconfig it reads the pod's token and CA every 2 seconds meanwhile,
     and when they changed (the kubelet refreshes a projected token inside
     the pod, long before it expires, never on the host) installs again:
     the new kubeconfig is recorded in the manifest and renamed over the
     old one. A token file that cannot be read is said once on stderr, and
     the host keeps the last kubeconfig.

Every file is written to a temporary name in its own directory, fsynced, and
renamed over the old one: a runtime starting the plugin meanwhile runs the old
program or the new, never a part, and plugins still running from the old file
go on. What is already in place with the same content is left as it is, so
running it again changes nothing.

Ours, and replaced without asking: a file holding this program's build marker
(every build of ipam-delegated holds it; a file is never run to find out what
it is), a symlink to ipam-delegated, a file whose content is what the manifest
says install-cni wrote. Anything else of the same name is refused (exit 1,
naming it, and nothing is changed) unless --force. The manifest,
BIN-DIR/.ipam-delegated-installed, lists each file and directory installed
(the kubeconfig with its latest content);
--uninstall removes those that are still as installed (and directories it
created, once empty), names those it keeps, then waits like an install unless
--once. The allocation database is the plugins' state, and stays.

Exit status: 0 done (or signalled while waiting); 1 failure (a file refused, a
path unwritable, NODE_NAME missing, with --kubeconfig outside a pod or without
a token); 2 usage error.";
