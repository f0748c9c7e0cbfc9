//! The machine, the versions, the layout measured and the load averages.

use std::fmt::Write as _;

use crate::figures::machine::Machine;
use crate::figures::Figures;

/// The machine, the versions, the layout measured and the load averages: a
/// Markdown table (also printed by a run of some scenarios).
pub fn table(m: &Machine, fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| date | {} |", m.date);
    let _ = writeln!(s, "| CPU | {} |", m.cpu);
    let _ = writeln!(s, "| cores | {} |", m.cores);
    let _ = writeln!(s, "| kernel | {} |", m.kernel);
    let _ = writeln!(s, "| disk / filesystem | {} |", m.filesystem);
    let _ = writeln!(s, "| rustc | {} |", m.rustc);
    let _ = writeln!(s, "| host-local | containernetworking-plugins {} (Debian) |", m.host_local);
    let _ = writeln!(s, "| suite | {} |", m.suite);
    let _ = writeln!(s, "| suite layout measured | {} |", fig.layout);
    if let Some(c) = &fig.cluster {
        let _ = writeln!(s, "| etcd (cluster mode) | {} |", c.etcd);
        if let Some(k) = &c.kube {
            let _ = writeln!(s, "| Kubernetes API server (cluster mode) | {} |", k.version);
        }
    }
    if let Some(w) = &fig.whereabouts {
        let _ = writeln!(s, "| Kubernetes API server (side by side with whereabouts) | {} |", w.kubernetes);
        let _ = writeln!(s, "| whereabouts | {} (Go module, bench/whereabouts) |", w.whereabouts);
    }
    let _ = writeln!(s, "| load average (1, 5, 15 min) | {} |", loads(fig));
    s
}

/// The load averages taken during the run, each with when it was taken.
pub fn loads(fig: &Figures) -> String {
    fig.loads.iter().map(|(when, l)| format!("{when}: {l}")).collect::<Vec<_>>().join("; ")
}
