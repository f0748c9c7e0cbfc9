//! Concurrent ADD throughput.

use std::fmt::Write as _;

use crate::figures::Figures;
use crate::setup::Counts;

pub fn section(fig: &Figures, c: &Counts) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Concurrent ADD throughput\n\n{} ADDs per variant, {} worker threads each spawning processes, run in two interleaved halves (suite, host-local, suite, host-local).\n", c.throughput, c.workers);
    let _ = writeln!(s, "| variant | ADD/s | total time |\n|---|---:|---:|");
    for (name, (rate, spent)) in &fig.throughput {
        let _ = writeln!(s, "| {name} | {rate:.1} | {:.2} s |", spent.as_secs_f64());
    }
    s
}
