//! Pool model: placeholder, filled in by the pool-model work.
