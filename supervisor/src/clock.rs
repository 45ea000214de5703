//! Time as the records write it: durations in whole milliseconds, instants in seconds since the
//! Unix epoch.

use std::time::{Duration, SystemTime};

/// `d` in whole milliseconds (saturating).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Seconds since the Unix epoch (0 when the clock is before it).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_saturates_and_truncates() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert!(now_secs() > 1_700_000_000);
    }
}
