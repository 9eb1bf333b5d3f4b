//! Nanosecond timestamps that fit in one atomic word.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, signed.
///
/// An `i64` covers 1677-09-21 to 2262-04-11; times outside that range are clamped (a
/// documented difference from tmpfs). One word means a timestamp can live in an `AtomicI64`,
/// so reading or storing it never takes a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// Converts, clamping to the representable range.
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            Err(e) => Timestamp(i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n)),
        }
    }

    /// Converts back to `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_nanos(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_nanos(self.0.unsigned_abs())
        }
    }

    /// Whole seconds (floor) and nanoseconds, as `struct timespec` has them.
    pub fn to_timespec(self) -> (i64, u32) {
        (
            self.0.div_euclid(1_000_000_000),
            self.0.rem_euclid(1_000_000_000) as u32,
        )
    }

    /// Builds from seconds and nanoseconds, clamping.
    pub fn from_timespec(sec: i64, nsec: u32) -> Timestamp {
        Timestamp(
            sec.saturating_mul(1_000_000_000)
                .saturating_add(nsec as i64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_before_and_after_epoch() {
        for ns in [0i64, 1, -1, 1_500_000_000_123_456_789, -86_400_000_000_007] {
            let t = Timestamp(ns);
            assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
            let (s, n) = t.to_timespec();
            assert_eq!(Timestamp::from_timespec(s, n), t);
        }
        assert_eq!(Timestamp(-1).to_timespec(), (-1, 999_999_999));
    }
}
