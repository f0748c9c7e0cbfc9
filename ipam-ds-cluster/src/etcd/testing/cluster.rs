//! A real etcd cluster of several members for tests, each member on its own
//! loopback ports with its own data directory, that a test can pause
//! (SIGSTOP) or cut off from the others (`partition`) while it goes on
//! serving its clients, as a member on the wrong side of a network split does.
//!
//! A partition is made of iptables rules: each member runs as a user of its
//! own (when the tests run as root), the connections the cut-off member
//! sends on are marked by its user (`-m owner --uid-owner`, `CONNMARK`),
//! and every packet of them is dropped, whichever end sends it, but on its
//! client port; so is anything to or from its peer port. (Dropping only
//! what it sends would not do: etcd's peers stream to each other over
//! connections the receiving end dialed, and TCP delivers data whose
//! acknowledgements are lost.) The rules carry a comment naming this process; they go when the
//! partition is healed or the cluster dropped (also when the test panics),
//! and those of a test process that died without cleaning up are removed by
//! the next partition made on the machine.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{dump, etcd_path, find_in_path, settings, temp_dir, Member, START_TIMEOUT};
use crate::etcd::{Client, Error, RangeRequest, Settings};

/// etcd's defaults, spelled out: a follower gives its leader up after one to
/// two election timeouts without a heartbeat. Smaller values would elect
/// sooner, and also more often on a loaded machine, for no reason a test
/// wants.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);

/// What the rules of this module carry in their comment, before `pid=`.
const RULE_TAG: &str = "test-etcd-partition:pid=";

pub struct TestEtcdCluster {
    /// The members' directories, removed on drop.
    _dir: tempfile::TempDir,
    members: Vec<Member>,
    /// Per member, the iptables rules cutting it off, while it is.
    cuts: Mutex<Vec<Vec<Vec<String>>>>,
}

impl TestEtcdCluster {
    /// `n` members, all up and agreeing on a leader. As root, each member
    /// runs as a user of its own, so that any can be partitioned.
    pub fn start(n: usize) -> TestEtcdCluster {
        assert!(n > 0, "a cluster of no member");
        let etcd = etcd_path();
        let dir = temp_dir("test-etcd-cluster-");
        // SAFETY: geteuid(2) only reads the process's credentials.
        let own_uids = unsafe { libc::geteuid() } == 0;
        if own_uids {
            // The members' users must reach their directories.
            std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("chmod the cluster's directory");
        }
        let members = (0..n)
            .map(|i| {
                let member_dir = dir.path().join(format!("m{i}"));
                std::fs::create_dir(&member_dir).expect("a member's directory");
                Member { own_uid: own_uids, ..Member::new(&format!("m{i}"), etcd.clone(), member_dir, false) }
            })
            .collect();
        let mut c = TestEtcdCluster { _dir: dir, members, cuts: Mutex::new(vec![Vec::new(); n]) };
        // As TestEtcd: a port taken between our probe and etcd's bind means
        // new ports (and data) for every member, a few times.
        for attempt in 1.. {
            c.spawn_all(attempt);
            let ready = (0..n).try_for_each(|i| {
                let settings = c.settings(i);
                c.members[i].wait_ready(&settings).map_err(|why| (i, why))
            });
            match ready {
                Ok(()) => return c,
                Err((_, why)) if attempt < 3 && c.members.iter().any(Member::port_taken) => {
                    eprintln!("test etcd cluster: {why}; trying other ports");
                    for m in &mut c.members {
                        m.stop();
                        m.new_ports();
                    }
                }
                Err((i, why)) => {
                    let tails: Vec<String> = c
                        .members
                        .iter()
                        .map(|m| format!("--- {} (tail) ---\n{}", m.log_path().display(), m.log_tail()))
                        .collect();
                    for m in &mut c.members {
                        m.stop();
                    }
                    panic!("test etcd cluster did not come up: member {i}: {why}\n{}", tails.join("\n"));
                }
            }
        }
        unreachable!()
    }

    fn spawn_all(&mut self, attempt: u32) {
        let initial_cluster: Vec<String> = self.members.iter().map(Member::initial_cluster_entry).collect();
        let initial_cluster = initial_cluster.join(",");
        let extra = [
            "--initial-cluster-state=new".to_string(),
            // Members of another cluster (a stale process on a reused port)
            // are refused.
            format!(
                "--initial-cluster-token=test-etcd-{}-{}-{attempt}",
                std::process::id(),
                self.members[0].client_port
            ),
            format!("--heartbeat-interval={}", HEARTBEAT.as_millis()),
            format!("--election-timeout={}", ELECTION_TIMEOUT.as_millis()),
        ];
        for m in &mut self.members {
            m.spawn(&initial_cluster, &extra);
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`'s client URL (members count from 0).
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Settings for a client of member `i` alone.
    pub fn settings(&self, i: usize) -> Settings {
        settings(vec![self.endpoint(i)])
    }

    /// A client of the members neither paused nor partitioned, which reads
    /// what the cluster holds (so long as they are a quorum).
    pub fn client(&self) -> Client {
        let cuts = self.cuts.lock().unwrap_or_else(|e| e.into_inner());
        let endpoints: Vec<String> = (0..self.len())
            .filter(|&i| !self.members[i].paused.load(Ordering::SeqCst) && cuts[i].is_empty())
            .map(|i| self.endpoint(i))
            .collect();
        assert!(!endpoints.is_empty(), "every member of the test etcd cluster is paused or partitioned");
        Client::new(settings(endpoints)).expect("client of the test etcd cluster")
    }

    /// Every key under `prefix` with its value, read through `client`.
    pub fn dump(&self, prefix: &str) -> Vec<(String, String)> {
        dump(&self.client(), prefix)
    }

    /// SIGSTOP member `i`: it keeps its sockets and answers nothing.
    pub fn pause(&self, i: usize) {
        self.members[i].pause();
    }

    pub fn resume(&self, i: usize) {
        self.members[i].resume();
    }

    /// Cuts member `i` off from the other members, not from its clients: it
    /// goes on answering what needs no quorum from what it has. Returns once
    /// the others answer a linearizable read (they have a leader, elected
    /// again if `i` was it), so that the majority side can be used at once.
    pub fn partition(&self, i: usize) {
        let Some(uid) = self.members[i].uid() else {
            panic!("partitioning a test etcd member needs root (iptables, and a user per member)")
        };
        let tag = self.rule_tag(i);
        let rule = |matches: &[&str], target: &[&str]| -> Vec<String> {
            let comment = ["-m", "comment", "--comment", &tag];
            ["-p", "tcp"].iter().chain(matches).chain(&comment).chain(target).map(|s| s.to_string()).collect()
        };
        let (uid, client, peer) =
            (uid.to_string(), self.members[i].client_port.to_string(), self.members[i].peer_port.to_string());
        // Inserted in this order at the top, so applied in the reverse one:
        // every connection the member sends on is marked (its user's
        // packets), then every packet of a marked connection is dropped,
        // whichever end sends it, unless it is on the client port; and
        // anything to or from its peer port, before the member sent a
        // packet on the connection.
        let rules = [
            rule(&["-m", "multiport", "--ports", &peer], &["-j", "DROP"]),
            rule(&["-m", "connmark", "--mark", &uid, "-m", "multiport", "!", "--ports", &client], &["-j", "DROP"]),
            rule(&["-m", "owner", "--uid-owner", &uid], &["-j", "CONNMARK", "--set-mark", &uid]),
        ];
        purge_stale_rules();
        {
            let mut cuts = self.cuts.lock().unwrap_or_else(|e| e.into_inner());
            assert!(cuts[i].is_empty(), "member {i} is partitioned already");
            for rule in rules {
                iptables("-I", &rule).unwrap_or_else(|e| panic!("{e}"));
                // Kept as soon as it is in, so that drop removes it.
                cuts[i].push(rule);
            }
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for j in (0..self.len()).filter(|&j| j != i && !self.members[j].paused.load(Ordering::SeqCst)) {
            let client = Client::new(Settings { timeout: Duration::from_secs(1), ..self.settings(j) })
                .expect("client of a member");
            loop {
                match client.range(&RangeRequest::key("test-etcd-partition")) {
                    Ok(_) => break,
                    Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => panic!("member {j} has no leader {START_TIMEOUT:?} after member {i} was cut off: {e}"),
                }
            }
        }
    }

    /// The comment of the rules cutting member `i` off.
    pub fn rule_tag(&self, i: usize) -> String {
        format!("{RULE_TAG}{}:peer={}", std::process::id(), self.members[i].peer_port)
    }

    /// Takes member `i`'s partition away.
    pub fn heal(&self, i: usize) {
        let rules = std::mem::take(&mut self.cuts.lock().unwrap_or_else(|e| e.into_inner())[i]);
        for rule in rules {
            iptables("-D", &rule).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

impl Drop for TestEtcdCluster {
    fn drop(&mut self) {
        let cuts = std::mem::take(self.cuts.get_mut().unwrap_or_else(|e| e.into_inner()));
        for rule in cuts.into_iter().flatten() {
            // Not a panic in a drop (maybe unwinding already): said, and
            // the next partition on this machine removes it.
            if let Err(e) = iptables("-D", &rule) {
                eprintln!("test etcd cluster: {e}");
            }
        }
        for m in &mut self.members {
            m.stop();
        }
    }
}

/// `iptables -w <op> OUTPUT <rule>`.
fn iptables(op: &str, rule: &[String]) -> Result<(), String> {
    let iptables = find_in_path("iptables").ok_or("iptables not found in PATH: install Debian's iptables")?;
    let out = Command::new(&iptables)
        .args(["-w", "10", op, "OUTPUT"])
        .args(rule)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", iptables.display()))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "iptables {op} OUTPUT {}: {}: {}",
            rule.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Removes the rules of test processes that are gone (killed before their
/// drop ran): they would cut off whatever uses those ports next.
fn purge_stale_rules() {
    let Some(iptables_path) = find_in_path("iptables") else { return };
    let Ok(out) = Command::new(iptables_path).args(["-w", "10", "-S", "OUTPUT"]).stdin(Stdio::null()).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(pid) = line.split(RULE_TAG).nth(1).and_then(|rest| rest.split([':', ' ']).next()) else {
            continue;
        };
        if std::path::Path::new("/proc").join(pid).exists() {
            continue;
        }
        let Some(rule) = line.strip_prefix("-A OUTPUT ") else { continue };
        let rule: Vec<String> = rule.split_whitespace().map(String::from).collect();
        match iptables("-D", &rule) {
            Ok(()) => eprintln!("test etcd cluster: removed a rule of a test process gone: {line}"),
            Err(e) => eprintln!("test etcd cluster: {e}"),
        }
    }
}
