//! The installer's long-running part with `--kubeconfig`: until SIGTERM or
//! SIGINT, it reads the pod's ServiceAccount files every [`POLL`] and, when
//! the kubeconfig they make differs from the one installed (the kubelet
//! refreshed the projected token, long before it expires, or the CA
//! changed), installs again: the same plan as at the start, so the new
//! kubeconfig is recorded in the manifest and renamed over the old one,
//! and a file that is no longer ours is refused as it would be then.
//!
//! The files are compared by content, as Multus's thin entrypoint and
//! whereabouts' token watcher do, and not by the token's expiry: a token the
//! kubelet replaced early (a new pod, a changed ServiceAccount) reaches the
//! host just as well.

use std::time::Duration;

use super::super::failure::Failure;
use super::super::report::{self, NAME};
use super::signals::Blocked;
use super::{install, kubeconfig, Options};

/// How often the pod's token and CA are read: a few seconds, against the
/// minutes the kubelet leaves between a refresh and the old token's expiry.
pub const POLL: Duration = Duration::from_secs(2);

/// Waits for SIGTERM or SIGINT, keeping the host's kubeconfig `installed`
/// (its contents) in step with the pod's files meanwhile; the signal.
pub fn until_signal(options: &Options, blocked: &Blocked, mut installed: Vec<u8>) -> Result<libc::c_int, Failure> {
    // A problem reading the pod's files is said once, not at every poll;
    // the host keeps the last kubeconfig until the files read again.
    let mut last_problem = None;
    loop {
        if let Some(signal) = blocked.wait_for(POLL).map_err(Failure::WaitForSignal)? {
            return Ok(signal);
        }
        let now = match kubeconfig::contents(&options.service_account_dir) {
            Ok(now) => now,
            Err(failure) => {
                let problem = failure.to_string();
                if last_problem.as_ref() != Some(&problem) {
                    eprintln!("{NAME} install-cni: {problem}; the host's kubeconfig is left as it is");
                    last_problem = Some(problem);
                }
                continue;
            }
        };
        last_problem = None;
        if now == installed {
            continue;
        }
        println!("{NAME} install-cni: the pod's ServiceAccount token or CA changed: installing again");
        let (report, kubeconfig) = install(options)?;
        report::print(&report.stdout);
        if let Some(kubeconfig) = kubeconfig {
            installed = kubeconfig;
        }
    }
}
