//! A /16 with one free address, and exhausted.

use std::fmt::Write as _;
use std::time::Duration;

use crate::figures::Figures;

pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## A /16 with one free address, and exhausted\n\n10.22.0.0/16: every allocatable address leased but one, which lies just behind the allocation cursor, so a sequential search goes round the whole pool. The suite's database is filled through the library (`AllocationStore`, `insert_leases_bulk`, `register_pool` with the selector's `Pool::to_json()`, `set_cursor`); host-local's dataDir gets one file per address and `last_reserved_ip.0`. Then the last address is leased too and ADD must fail. Times of single ADDs (ms), one per trial:\n");
    let _ = writeln!(s, "| case | variant | trials (ms) |\n|---|---|---|");
    for (name, list) in &fig.one_free {
        let _ = writeln!(s, "| one free | {name} | {} |", trials(list));
    }
    for (name, list) in &fig.exhausted {
        let _ = writeln!(s, "| exhausted | {name} | {} |", trials(list));
    }
    s
}

fn trials(list: &[Duration]) -> String {
    list.iter().map(|d| format!("{:.2}", d.as_secs_f64() * 1e3)).collect::<Vec<_>>().join(", ")
}
