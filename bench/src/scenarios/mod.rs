//! The scenarios, one module each. Each takes the run's [`Ctx`] and adds its
//! figures to the run's [`Figures`]; each works in its own temporary
//! directory with a fresh database / dataDir, removed when it returns.
//!
//! [`Ctx`]: crate::setup::Ctx
//! [`Figures`]: crate::figures::Figures

pub mod big_pools;
pub mod cluster;
pub mod durability;
pub mod fill_curve;
pub mod first_add;
pub mod latency;
pub mod lock_wait;
pub mod memory;
pub mod nearly_full;
pub mod sticky;
pub mod throughput;
pub mod whereabouts;
