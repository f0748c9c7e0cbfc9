//! The durability section: the fsync-family calls counted, and what each
//! side promises.

use std::fmt::Write as _;

use crate::figures::Figures;

/// The durability section: the fsync-family calls counted, and what each
/// side promises.
pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Durability\n\nfsync-family system calls (fsync, fdatasync, sync_file_range) per call, counted with `strace -f` (every process of the call), so that the comparison is read knowing what each side promises. The first ADD on a fresh node creates the database / dataDir, and its count includes the syncs of creating the database's files (and their directory); the steady state follows a few ADDs, and its DELs undo its ADDs. \"1.25 (1 to 4)\": the mean per call, and the fewest and most one call made.\n");
    if let Some(note) = &fig.fsync_note {
        let _ = writeln!(s, "Not counted: {note}.\n");
    }
    if !fig.fsyncs.is_empty() {
        let _ = writeln!(s, "| variant | case | calls | per call | fsync | fdatasync | sync_file_range |\n|---|---|---:|---:|---:|---:|---:|");
        for p in &fig.fsyncs {
            let sum = p.sum();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                p.variant,
                p.case,
                p.calls.len(),
                p.per_call(),
                sum.fsync,
                sum.fdatasync,
                sum.sync_file_range
            );
        }
    }
    if let Some(c) = fig.sync_cost {
        let _ = writeln!(
            s,
            "\nOne 4 KiB append + fdatasync in the temp dir: median {:.2} ms, max {:.2} ms (n={}).",
            c.median_ms, c.max_ms, c.n
        );
    }
    let _ = writeln!(s, "\nThe suite makes each ADD and DEL durable before it answers: its commits go to SQLite's WAL, which is synced before the call answers (in the fast layout one sync for the whole stack, whose delegates share the call's connection; in the copies layout each writing delegate's process syncs its own commits), with the new database file and its directory also synced when the call created the database; every dozen ADDs or so a checkpoint copies the WAL into the database file and starts the WAL again, syncing the WAL, its directory, the database file and the WAL's new header instead of the one sync, which is what lifts a steady-state mean above its median. host-local writes its lease files without any fsync, so a host crash can lose an allocation it reported; its figures do not include that cost.");
    s
}
