//! The durability figures (the durability scenario): the
//! fsync-family system calls of some calls, counted with strace.

/// fsync-family system calls of one call, from strace.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SyncCount {
    pub fsync: usize,
    pub fdatasync: usize,
    pub sync_file_range: usize,
}

impl SyncCount {
    /// Counts the calls in an `strace -f -e trace=fsync,fdatasync,sync_file_range`
    /// log (a call interrupted by another process's line is logged as
    /// "fsync(3 <unfinished ...>" and "<... fsync resumed>": counted once).
    pub fn of_strace(text: &str) -> SyncCount {
        let count = |call: &str| text.lines().filter(|l| l.contains(&format!("{call}("))).count();
        SyncCount { fsync: count("fsync"), fdatasync: count("fdatasync"), sync_file_range: count("sync_file_range") }
    }

    pub fn total(&self) -> usize {
        self.fsync + self.fdatasync + self.sync_file_range
    }

    fn add(self, other: SyncCount) -> SyncCount {
        SyncCount {
            fsync: self.fsync + other.fsync,
            fdatasync: self.fdatasync + other.fdatasync,
            sync_file_range: self.sync_file_range + other.sync_file_range,
        }
    }
}

/// The fsync-family calls of some calls of one variant in one case.
pub struct FsyncProbe {
    pub variant: String,
    /// One of [`FsyncProbe::FIRST_ADD`], [`FsyncProbe::ADD`], [`FsyncProbe::DEL`].
    pub case: String,
    pub calls: Vec<SyncCount>,
}

impl FsyncProbe {
    pub const FIRST_ADD: &'static str = "first ADD on a fresh node";
    pub const ADD: &'static str = "ADD, steady state";
    pub const DEL: &'static str = "DEL, steady state";

    pub fn sum(&self) -> SyncCount {
        self.calls.iter().fold(SyncCount::default(), |a, &b| a.add(b))
    }

    pub fn mean(&self) -> f64 {
        self.sum().total() as f64 / self.calls.len().max(1) as f64
    }

    /// The median call's total.
    pub fn median(&self) -> usize {
        let mut totals: Vec<usize> = self.calls.iter().map(SyncCount::total).collect();
        totals.sort_unstable();
        totals.get(totals.len() / 2).copied().unwrap_or(0)
    }

    /// "1" when every call made as many; else "1.25 per call (1 to 4)".
    pub fn per_call(&self) -> String {
        let totals = self.calls.iter().map(SyncCount::total);
        let (lo, hi) = (totals.clone().min().unwrap_or(0), totals.max().unwrap_or(0));
        if lo == hi {
            format!("{lo}")
        } else {
            format!("{:.2} ({lo} to {hi})", self.mean())
        }
    }
}
