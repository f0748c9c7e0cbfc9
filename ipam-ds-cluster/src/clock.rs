//! The clock that guards offline allocation: how long ago etcd last showed a
//! block ours. It is the kernel's boot-time clock (CLOCK_BOOTTIME: monotonic,
//! counting suspend), never the wall clock, which an administrator, NTP or a
//! VM restore can move in either direction: a confirmation stamped a day
//! ahead by a clock that jumped would otherwise let the node allocate
//! offline in a block that was released and claimed by another node meanwhile.
//!
//! A boot-time reading means something only within one boot, so the node
//! database keeps the boot it was taken in (note [`BOOT_NOTE`]); after a
//! reboot every confirmation is void and an offline ADD waits for etcd.

use std::time::Duration;

/// The note holding the boot id of the confirmations in `cluster_blocks`.
pub const BOOT_NOTE: &str = "confirmed-boot";

/// Now, on the boot-time clock of this boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootClock {
    /// The kernel's id of this boot; empty when unreadable (then nothing
    /// counts as confirmed offline).
    pub boot_id: String,
    /// Milliseconds since boot.
    pub now_ms: i64,
}

impl BootClock {
    pub fn read() -> BootClock {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        BootClock { boot_id, now_ms: boot_time_ms() }
    }

    /// Whether a confirmation taken at `confirmed_ms` in boot `boot` is less
    /// than `grace` old. One from another boot, or later than now (which a
    /// boot-time clock never makes), is none.
    pub fn within(&self, boot: Option<&str>, confirmed_ms: i64, grace: Duration) -> bool {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        !self.boot_id.is_empty()
            && boot == Some(self.boot_id.as_str())
            && confirmed_ms > 0
            && confirmed_ms <= self.now_ms
            && self.now_ms - confirmed_ms < grace_ms
    }
}

fn boot_time_ms() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `ts`, which outlives the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec.saturating_mul(1000).saturating_add(ts.tv_nsec / 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_counts_only_within_its_boot_and_grace() {
        let clock = BootClock { boot_id: "b1".into(), now_ms: 100_000 };
        let grace = Duration::from_secs(30);
        assert!(clock.within(Some("b1"), 90_000, grace));
        assert!(!clock.within(Some("b1"), 60_000, grace), "older than the grace");
        assert!(!clock.within(Some("b1"), 100_001, grace), "later than now");
        assert!(!clock.within(Some("b0"), 90_000, grace), "another boot");
        assert!(!clock.within(None, 90_000, grace), "no boot recorded");
        assert!(!clock.within(Some("b1"), 90_000, Duration::ZERO), "offlineGrace 0");
        let unknown = BootClock { boot_id: String::new(), now_ms: 100_000 };
        assert!(!unknown.within(Some(""), 90_000, grace), "boot id unreadable");
    }

    #[test]
    fn the_boot_time_clock_reads() {
        let a = BootClock::read();
        assert_eq!(a.boot_id.len(), 36, "{a:?}");
        assert!(a.now_ms > 0);
        assert!(BootClock::read().now_ms >= a.now_ms);
    }
}
