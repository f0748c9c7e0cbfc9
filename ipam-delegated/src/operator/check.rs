//! `check`: SQLite's integrity check and the suite's invariants.

use shared::store::AllocationStore;

use super::{Failure, Report};

pub fn run(store: &mut AllocationStore) -> Result<Report, Failure> {
    let problems = store.read(|tx| tx.integrity_problems())?;
    if problems.is_empty() {
        return Ok(Report::fine("ok\n".to_string()));
    }
    let stdout = problems.into_iter().map(|p| p + "\n").collect();
    Ok(Report { stdout, failure: Some(format!("integrity check of {} failed", store.path().display())) })
}
