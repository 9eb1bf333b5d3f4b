//! Nanosecond timestamps with the kernel's whole range, and a lock-free cell for them.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NS: i128 = 1_000_000_000;

/// Nanoseconds since the Unix epoch, signed.
///
/// Holds every time a kernel `timespec64` can (signed 64-bit seconds and full nanoseconds,
/// which is what tmpfs stores: hundreds of billions of years either way), so nothing set
/// through `utimensat` is clamped. One number keeps comparisons and differences plain
/// arithmetic; times outside that range come only from arithmetic and are clamped where
/// they leave the type ([`Timestamp::to_timespec`], [`Timestamp::to_system_time`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i128);

impl Timestamp {
    /// The earliest time a `timespec64` holds: `i64::MIN` seconds.
    pub const MIN: Timestamp = Timestamp(i64::MIN as i128 * NS);
    /// The latest time a `timespec64` holds: `i64::MAX` seconds and 999 999 999 ns.
    pub const MAX: Timestamp = Timestamp(i64::MAX as i128 * NS + NS - 1);

    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    fn clamped(self) -> Timestamp {
        self.clamp(Timestamp::MIN, Timestamp::MAX)
    }

    /// Converts exactly (a `SystemTime` on Linux is a `timespec`).
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        let ns = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        Timestamp(ns).clamped()
    }

    /// Converts back to `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        let (sec, nsec) = self.to_timespec();
        let whole = if sec >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(sec as u64))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(sec.unsigned_abs()))
        };
        whole
            .and_then(|t| t.checked_add(Duration::from_nanos(nsec.into())))
            .expect("a SystemTime holds every timespec")
    }

    /// Whole seconds (floor) and nanoseconds, as `struct timespec` has them: -0.5 s is
    /// `(-1, 500_000_000)`.
    pub fn to_timespec(self) -> (i64, u32) {
        let t = self.clamped().0;
        (t.div_euclid(NS) as i64, t.rem_euclid(NS) as u32)
    }

    /// Builds from seconds and nanoseconds as `struct timespec` has them (`nsec` below one
    /// second; a larger one carries into the seconds).
    pub fn from_timespec(sec: i64, nsec: u32) -> Timestamp {
        Timestamp(i128::from(sec) * NS + i128::from(nsec)).clamped()
    }
}

/// Times at the edges of what callers set, as `timespec` `(seconds, nanoseconds)`: -0.5 s,
/// -1 ns and other fractions before 1970, whole seconds before it, years 1, 2500 (past
/// 64-bit nanoseconds) and 9999 (0001-01-01 and 9999-12-31 23:59:59 UTC), and a recent
/// time. The backends' tests round-trip each.
pub const EDGE_TIMES: [(i64, u32); 8] = [
    (-1, 500_000_000),
    (-1, 999_999_999),
    (-86_401, 123_456_789),
    (-1_000_000, 0),
    (-62_135_596_800, 1),
    (16_725_225_600, 0),
    (253_402_300_799, 999_999_999),
    (1_700_000_000, 42),
];

/// A [`Timestamp`] that many threads read and write without a lock (an inode's atime is
/// stored by every reader of the file).
///
/// 128-bit atomics from `portable-atomic`: on x86-64 they are single `cmpxchg16b`
/// instructions (and plain 16-byte loads where the CPU has AVX), chosen at run time, so no
/// reader or writer ever waits for another; only a CPU without `cmpxchg16b` (none made
/// since 2008) gets the crate's fallback, a seqlock. Two 64-bit words could be torn apart
/// between a writer's seconds and nanoseconds, and one 64-bit word of nanoseconds ends in
/// 2262.
#[derive(Debug, Default)]
pub struct AtomicTimestamp(portable_atomic::AtomicI128);

impl AtomicTimestamp {
    /// A cell holding `t`.
    pub fn new(t: Timestamp) -> AtomicTimestamp {
        AtomicTimestamp(portable_atomic::AtomicI128::new(t.0))
    }

    /// The stored time. Relaxed: a timestamp orders nothing else.
    pub fn load(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::Relaxed))
    }

    /// Stores `t`.
    pub fn store(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds of 0001-01-01 and 2500-01-01 UTC.
    const YEAR_1: i64 = -62_135_596_800;
    const YEAR_2500: i64 = 16_725_225_600;

    #[test]
    fn timespecs_round_trip_exactly_before_and_after_the_epoch() {
        let cases = [
            (0, 0),
            (0, 1),
            (-2, 1),
            (i64::MIN, 0),
            (i64::MAX, 999_999_999),
        ];
        for (s, n) in cases.into_iter().chain(EDGE_TIMES) {
            let t = Timestamp::from_timespec(s, n);
            assert_eq!(t.to_timespec(), (s, n), "timespec ({s}, {n})");
            assert_eq!(
                Timestamp::from_system_time(t.to_system_time()),
                t,
                "SystemTime of ({s}, {n})"
            );
        }
        assert_eq!(Timestamp::from_timespec(-1, 500_000_000).0, -500_000_000);
        assert_eq!(Timestamp::from_timespec(-1, 999_999_999).0, -1);
        assert_eq!(Timestamp(-1).to_timespec(), (-1, 999_999_999));
    }

    #[test]
    fn system_times_convert_exactly() {
        let before = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(Timestamp::from_system_time(before).0, -500_000_000);
        assert_eq!(Timestamp(-500_000_000).to_system_time(), before);
        let far = UNIX_EPOCH + Duration::from_secs(YEAR_2500 as u64);
        assert_eq!(
            Timestamp::from_system_time(far).to_timespec(),
            (YEAR_2500, 0)
        );
    }

    #[test]
    fn arithmetic_outside_the_range_is_clamped_on_the_way_out() {
        let past = Timestamp(Timestamp::MIN.0 - 5);
        assert_eq!(past.to_timespec(), (i64::MIN, 0));
        let future = Timestamp(Timestamp::MAX.0 + NS);
        assert_eq!(future.to_timespec(), (i64::MAX, 999_999_999));
        // A nanosecond count past one second carries, as the kernel would reject it anyway.
        assert_eq!(
            Timestamp::from_timespec(1, 1_500_000_000).to_timespec(),
            (2, 500_000_000)
        );
        assert_eq!(
            Timestamp::from_timespec(i64::MAX, u32::MAX),
            Timestamp::MAX,
            "carrying past the last second clamps"
        );
    }

    #[test]
    fn atomic_cell_stores_the_whole_range() {
        let cell = AtomicTimestamp::new(Timestamp::MIN);
        assert_eq!(cell.load(), Timestamp::MIN);
        for t in [
            Timestamp::MAX,
            Timestamp(-1),
            Timestamp::from_timespec(YEAR_1, 7),
        ] {
            cell.store(t);
            assert_eq!(cell.load(), t);
        }
    }
}
