//! `check`: SQLite's integrity check and the suite's invariants.

use shared::store::AllocationStore;

use super::failure::Failure;
use super::report::Report;

pub fn run(store: &mut AllocationStore) -> Result<Report, Failure> {
    let problems = store.read(|tx| tx.integrity_problems())?;
    if problems.is_empty() {
        return Ok(Report::fine("ok\n".to_string()));
    }
    let stdout = problems.into_iter().map(|p| p + "\n").collect();
    Ok(Report { stdout, failure: Some(Failure::IntegrityCheck { database: store.path().to_path_buf() }) })
}
