//! The latency section: single calls, and processes that do no work.

use std::fmt::Write as _;

use super::format::stats_row;
use super::variants::find;
use crate::figures::Figures;
use crate::setup::Counts;

/// Single ADD and DEL latency of each variant, and the cost of a process that
/// does no work.
pub fn section(fig: &Figures, c: &Counts) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Latency ({} calls per variant and command)\n", c.latency);
    let _ = writeln!(s, "The full stack is `ipam-delegated` with delegates `[\"ipam-ds-pool\", \"ipam-da-sequential\"]`, in the measured layout and in the copies layout (on a database of its own); `ipam-da-sequential` alone is started as its name in the measured layout and fed the configuration with the `prevResult` that `ipam-ds-pool` printed for it (with `pools`). The floor is `ipam-bench-floor` (bench/floor), a minimal program of the benchmark's own that does the least work of a steady-state ADD (\"The floor\" in \"What bounds the figures\" above), built in the same `scripts/build` as the suite's program, on a database of its own and fed the full stack's configuration. Subnet 10.20.0.0/16. CPU is user + system time from wait4's rusage (the process and the children it reaped).\n");
    let _ = writeln!(
        s,
        "| command, variant | n | median ms | p99 ms | max ms | CPU median ms |\n|---|---:|---:|---:|---:|---:|"
    );
    for (command, list, cpu) in [("ADD", &fig.add, &fig.add_cpu), ("DEL", &fig.del, &fig.del_cpu)] {
        for (name, st) in list {
            let cpu = find(cpu, name).map_or("—".into(), |c| format!("{:.2}", c.median_ms));
            let _ = writeln!(
                s,
                "| {command}, {name} | {} | {:.2} | {:.2} | {:.2} | {cpu} |",
                st.n, st.median_ms, st.p99_ms, st.max_ms
            );
        }
    }
    let _ = writeln!(s, "\nThe cost of a process that does no work, through the same spawn path (interleaved likewise): a call of the full stack is one such process in the fast layout (three in the copies layout), a call of host-local one. `ipam-da-sequential` is the suite's program started under that name; `ipam-bench-null` is the floor program's build doing nothing (the start-up and exit of that build).\n");
    let _ = writeln!(s, "| process | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    for (name, st) in &fig.floors {
        s.push_str(&stats_row(name, st));
    }
    s
}
