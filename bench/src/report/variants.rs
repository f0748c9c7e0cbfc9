//! The variants' figures by name: the prefixes of the names the latency
//! and durability scenarios give their variants, and finding them.

use crate::figures::durability::FsyncProbe;
use crate::figures::Figures;

/// The figure of the first variant in `list` whose name starts with `prefix`.
pub fn find<'a, T>(list: &'a [(String, T)], prefix: &str) -> Option<&'a T> {
    list.iter().find(|(name, _)| name.starts_with(prefix)).map(|(_, v)| v)
}

/// The full stack in the measured layout, in the copies layout, the
/// allocator alone, host-local: the prefixes of the variants' names.
pub const STACK: &str = "suite: ipam-delegated (";
pub const COPIES: &str = "suite: ipam-delegated, copies";
pub const SEQUENTIAL: &str = "suite: ipam-da-sequential";
pub const HOST: &str = "host-local";
/// The no-work process of the suite (the program under a delegate's name).
pub const SUITE_FLOOR: &str = "ipam-da-sequential, CNI_COMMAND=VERSION";
/// The floor program (bench/floor: the least work of a steady-state ADD),
/// and its build doing nothing.
pub const FLOOR: &str = "floor: ipam-bench-floor";
pub const NULL: &str = "ipam-bench-null";

/// The fsync-family calls of the variant whose name starts with `variant`, in
/// `case` (one of [`FsyncProbe`]'s cases).
pub fn fsync_probe<'a>(fig: &'a Figures, variant: &str, case: &str) -> Option<&'a FsyncProbe> {
    fig.fsyncs.iter().find(|p| p.variant.starts_with(variant) && p.case == case)
}
