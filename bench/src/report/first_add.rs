//! The first ADD on a fresh node.

use std::fmt::Write as _;

use super::format::stats_row;
use crate::figures::Figures;
use crate::setup::Counts;

/// The first ADD on a fresh node: empty when it was not measured.
pub fn section(fig: &Figures, c: &Counts) -> String {
    let mut s = String::new();
    if fig.first_add.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\n## The first ADD on a fresh node ({} calls per variant)\n\nEach call in a fresh directory of its own, the variants interleaved: the suite's database does not exist yet (the ADD creates it 0600, sets up its schema and WAL, registers the pool and allocates; the directory exists, as /var/lib/cni would), host-local's dataDir does not either (it creates it). Subnet 10.26.0.0/16.\n", c.first_add);
    let _ = writeln!(s, "| variant | n | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|");
    for (name, st) in &fig.first_add {
        s.push_str(&stats_row(name, st));
    }
    s
}
