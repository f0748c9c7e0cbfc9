//! The summary table: the suite against host-local, with the targets (also
//! printed).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::time::Duration;

use super::format::{ratio, yes, MIB};
use super::variants::{find, fsync_probe, COPIES, FLOOR, HOST, SEQUENTIAL, STACK};
use crate::figures::durability::FsyncProbe;
use crate::figures::Figures;
use crate::harness::{stats, Stats};

fn median(samples: &[Duration]) -> f64 {
    stats(samples).median_ms
}

/// The summary table (Markdown, also printed).
pub fn table(fig: &Figures) -> String {
    // Shared by the two ways of writing a row below, each used between the other's uses.
    let t = RefCell::new(String::new());
    t.borrow_mut().push_str("| measurement | suite | host-local | suite / host-local | target | met |\n");
    t.borrow_mut().push_str("|---|---:|---:|---:|---|---|\n");
    let get = |list: &[(String, Stats)], prefix: &str| find(list, prefix).copied().unwrap_or_default();
    let (hl_add, hl_del) = (get(&fig.add, HOST), get(&fig.del, HOST));
    let (stack_add, stack_del) = (get(&fig.add, STACK), get(&fig.del, STACK));
    let (seq_add, seq_del) = (get(&fig.add, SEQUENTIAL), get(&fig.del, SEQUENTIAL));
    let copies_add = get(&fig.add, COPIES);
    let line = |what: &str, suite: String, hl: String, r: String, target: &str, met: Option<bool>| {
        let _ = writeln!(t.borrow_mut(), "| {what} | {suite} | {hl} | {r} | {target} | {} |", met.map_or("", yes));
    };
    let row = |what: &str, suite: f64, hl: Option<f64>, unit: &str, target: &str, met: Option<bool>| {
        let hl_cell = hl.map_or("—".into(), |v| format!("{v:.2} {unit}"));
        let r = hl.map_or("—".into(), |v| ratio(suite, v));
        line(what, format!("{suite:.2} {unit}"), hl_cell, r, target, met);
    };
    let at_most = |suite: f64, hl: f64, k: f64| Some(suite > 0.0 && hl > 0.0 && suite <= k * hl);
    if stack_add.n > 0 {
        let (s, h) = (stack_add.median_ms, hl_add.median_ms);
        row(&format!("ADD median, full stack (n={})", stack_add.n), s, Some(h), "ms", "≤ 0.4×", at_most(s, h, 0.4));
        row("ADD p99, full stack", stack_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
        row(
            "ADD median, full stack, copies layout (each delegate a process)",
            copies_add.median_ms,
            Some(h),
            "ms",
            "(comparison)",
            None,
        );
        let s = seq_add.median_ms;
        row("ADD median, ipam-da-sequential alone", s, Some(h), "ms", "≤ 0.4×", at_most(s, h, 0.4));
        row("ADD p99, ipam-da-sequential alone", seq_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
        let floor_add = get(&fig.add, FLOOR);
        if floor_add.n > 0 {
            let f = floor_add.median_ms;
            row(
                "ADD median, the floor: ipam-bench-floor (the least work of a steady-state ADD as a program of its \
                 own, built as the suite's program is)",
                f,
                Some(hl_add.median_ms),
                "ms",
                "(floor)",
                None,
            );
            row("ADD p99, the floor", floor_add.p99_ms, Some(hl_add.p99_ms), "ms", "", None);
            let above = |median: f64| format!("{:+.2} ms ({} the floor)", median - f, ratio(median, f));
            line(
                "ADD median above the floor, full stack (its median − the floor's)",
                above(stack_add.median_ms),
                above(hl_add.median_ms),
                "—".into(),
                "(distance)",
                None,
            );
            line(
                "ADD median above the floor, ipam-da-sequential alone",
                above(seq_add.median_ms),
                "—".into(),
                "—".into(),
                "(distance)",
                None,
            );
        }
        let (s, h) = (stack_del.median_ms, hl_del.median_ms);
        row("DEL median, full stack", s, Some(h), "ms", "≤ 0.5×", at_most(s, h, 0.5));
        row("DEL p99, full stack", stack_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
        row("DEL median, ipam-da-sequential alone", seq_del.median_ms, Some(h), "ms", "", None);
        row("DEL p99, ipam-da-sequential alone", seq_del.p99_ms, Some(hl_del.p99_ms), "ms", "", None);
    }
    if let (Some(s), Some(h)) = (find(&fig.first_add, STACK), find(&fig.first_add, HOST)) {
        row(
            &format!("first ADD on a fresh node, median (n={}; the ADD creates the database)", s.n),
            s.median_ms,
            Some(h.median_ms),
            "ms",
            "≤ 1.0×",
            at_most(s.median_ms, h.median_ms, 1.0),
        );
        row("first ADD on a fresh node, p99", s.p99_ms, Some(h.p99_ms), "ms", "", None);
    }
    if let (Some(s), Some(h)) = (find(&fig.throughput, "suite"), find(&fig.throughput, HOST)) {
        let workers = fig.counts.map_or(0, |c| c.workers);
        row(
            &format!("{workers}-way concurrent ADD throughput"),
            s.0,
            Some(h.0),
            "ADD/s",
            "≥ 2×",
            Some(h.0 > 0.0 && s.0 >= 2.0 * h.0),
        );
    }
    if let (Some(s), Some(h)) = (find(&fig.one_free, "suite"), find(&fig.one_free, HOST)) {
        let (s, h) = (median(s), median(h));
        row(
            "/16, one free address behind the cursor: ADD",
            s,
            Some(h),
            "ms",
            "≤ 10 ms, ≥ 50× faster",
            Some(s <= 10.0 && h >= 50.0 * s),
        );
    }
    if let (Some(s), Some(h)) = (find(&fig.exhausted, "suite"), find(&fig.exhausted, HOST)) {
        let (s, h) = (median(s), median(h));
        row("/16 exhausted: ADD (error)", s, Some(h), "ms", "≤ 10 ms", Some(s <= 10.0));
    }
    for (name, st, _) in &fig.big {
        row(
            &format!("{name}: ADD median (max {:.2} ms)", st.max_ms),
            st.median_ms,
            None,
            "ms",
            "≤ 20 ms",
            Some(st.median_ms <= 20.0),
        );
    }
    if let Some(lw) = &fig.lock_wait {
        let n = lw.workers;
        row(
            &format!("{n}-way contention: lock wait per ADD, median (n={})", lw.wait.n),
            lw.wait.median_ms,
            None,
            "ms",
            "",
            None,
        );
        row(&format!("{n}-way contention: lock wait per ADD, p99"), lw.wait.p99_ms, None, "ms", "", None);
        row(
            &format!(
                "{n}-way contention: lock wait per ADD, max ({:.1}× the median; {} of {} waits passed over by a later \
                 ticket, one by {})",
                lw.max_over_median(),
                lw.passed_over,
                lw.acquisitions,
                lw.most_passed_by
            ),
            lw.wait.max_ms,
            None,
            "ms",
            "served in order: none passed over",
            Some(lw.passed_over == 0),
        );
    }
    let hl_rss = find(&fig.rss, HOST).map(|&k| k as f64 / MIB);
    for (name, kib) in fig.rss.iter().filter(|(n, _)| n != HOST && !n.starts_with("(floor")) {
        let mib = *kib as f64 / MIB;
        row(&format!("peak RSS, one ADD of {name}"), mib, hl_rss, "MiB", "≤ 8 MiB", Some(mib <= 8.0));
    }
    let probes = [
        (STACK, "full stack", FsyncProbe::ADD),
        (STACK, "full stack", FsyncProbe::FIRST_ADD),
        (STACK, "full stack", FsyncProbe::DEL),
        (SEQUENTIAL, "ipam-da-sequential alone", FsyncProbe::ADD),
    ];
    for (variant, label, case) in probes {
        if let Some(s) = fsync_probe(fig, variant, case) {
            let h = fsync_probe(fig, HOST, case).map_or("—".into(), FsyncProbe::per_call);
            let what = format!("fsync-family calls per {case}, {label} (strace -f, n={})", s.calls.len());
            line(&what, s.per_call(), h, "—".into(), "counted", None);
        }
    }
    if let Some(note) = &fig.fsync_note {
        line("fsync-family calls per call", format!("not counted: {note}"), "—".into(), "—".into(), "counted", None);
    }
    t.into_inner()
}
