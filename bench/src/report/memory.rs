//! Peak resident memory of one ADD.

use std::fmt::Write as _;

use super::format::MIB;
use crate::figures::Figures;

pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Peak resident memory of one ADD\n\n`ru_maxrss` from `wait4`, the largest of 5 ADDs. Linux starts a child's ru_maxrss at the high-water mark of the address space it replaced at execve, which for a child spawned by vfork (as Rust's std does) is its parent's; so each plugin is started by a small launcher (`ipam-bench --rusage-of <exe>`, a fresh process) that reaps it with wait4 and reports its figure. The launcher's own mark is the floor below which nothing can be measured (first row). For the full stack the figure is the largest of ipam-delegated's process and the delegates it reaped; in the fast layout the delegates run inside its process, so it is that one process's. The delegates' rows are the program started under each delegate's name.\n");
    let _ = writeln!(s, "| executable | peak RSS |\n|---|---:|");
    for (name, kib) in &fig.rss {
        let _ = writeln!(s, "| {name} | {:.2} MiB ({kib} KiB) |", *kib as f64 / MIB);
    }
    s
}
