//! Allocation store: placeholder, filled in by the store work.
