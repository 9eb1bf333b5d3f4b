//! Nanosecond timestamps with the kernel's whole range, and a lock-free cell for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
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

    /// The kernel's coarse wall-clock time (`CLOCK_REALTIME_COARSE`, the clock the kernel
    /// stamps files with): no later than any time the kernel stamps after it.
    pub fn coarse_now() -> Timestamp {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec for the call to fill.
        match unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } {
            0 => Timestamp::from_timespec(ts.tv_sec, ts.tv_nsec as u32),
            _ => Timestamp::now(),
        }
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
/// stored by every reader of the file), in one 64-bit word.
///
/// A time within 146 years of 1970 (1824 to 2116) is the word itself, signed nanoseconds in
/// 63 bits, loaded and stored with single atomic instructions. A time outside that range
/// (what `utimensat` may set: a `timespec64` spans hundreds of billions of years) is kept
/// exactly in a process-wide table, and the word holds its entry's number with the top bit
/// set. Only such times take the table's lock. Every change of a word to or from an entry
/// number is made under that lock, so a reader that loads a number and then takes the lock
/// finds its entry, or finds that the word has changed since and loads it again. Entry
/// numbers are never reused, and an entry goes when its word is overwritten or dropped.
#[derive(Default)]
pub struct AtomicTimestamp(AtomicU64);

/// Top bit of a word: the rest is an entry number in [`wide_times`].
const WIDE: u64 = 1 << 63;
/// The narrow range: nanoseconds that fit in 63 signed bits.
const NARROW: std::ops::Range<i128> = -(1 << 62)..(1 << 62);

/// Times outside the narrow range, by entry number.
fn wide_times() -> std::sync::MutexGuard<'static, WideTimes> {
    static TABLE: OnceLock<Mutex<WideTimes>> = OnceLock::new();
    let table = TABLE.get_or_init(|| Mutex::new(WideTimes::default()));
    // A panic while the lock was held left the table whole (each change is one insert or
    // remove), so a poisoned lock is taken as it is.
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Default)]
struct WideTimes {
    next: u64,
    times: HashMap<u64, Timestamp>,
}

impl WideTimes {
    /// Forgets the entry `word` names, if it names one.
    fn drop_word(&mut self, word: u64) {
        if word & WIDE != 0 {
            self.times.remove(&(word & !WIDE));
        }
    }
}

impl AtomicTimestamp {
    /// A cell holding `t`.
    pub fn new(t: Timestamp) -> AtomicTimestamp {
        let cell = AtomicTimestamp(AtomicU64::new(0));
        cell.store(t);
        cell
    }

    /// The stored time. Relaxed: a timestamp orders nothing else.
    pub fn load(&self) -> Timestamp {
        loop {
            let word = self.0.load(Ordering::Relaxed);
            if word & WIDE == 0 {
                // Sign-extend the 63-bit count.
                return Timestamp((((word << 1) as i64) >> 1) as i128);
            }
            if let Some(t) = wide_times().times.get(&(word & !WIDE)) {
                return *t;
            }
            // Overwritten since the load: the word now holds something else.
        }
    }

    /// Stores `t`.
    pub fn store(&self, t: Timestamp) {
        if !NARROW.contains(&t.0) {
            let mut table = wide_times();
            let number = table.next;
            table.next += 1;
            table.times.insert(number, t);
            let old = self.0.swap(number | WIDE, Ordering::Relaxed);
            table.drop_word(old);
            return;
        }
        let word = t.0 as i64 as u64 & !WIDE;
        let mut current = self.0.load(Ordering::Relaxed);
        while current & WIDE == 0 {
            match self
                .0
                .compare_exchange_weak(current, word, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
        // The word names an entry: replace it under the table's lock.
        let mut table = wide_times();
        let old = self.0.swap(word, Ordering::Relaxed);
        table.drop_word(old);
    }

    /// True if `self` holds an entry of the wide table (for tests).
    #[cfg(test)]
    fn is_wide(&self) -> bool {
        self.0.load(Ordering::Relaxed) & WIDE != 0
    }
}

impl Drop for AtomicTimestamp {
    fn drop(&mut self) {
        let word = *self.0.get_mut();
        if word & WIDE != 0 {
            wide_times().drop_word(word);
        }
    }
}

impl std::fmt::Debug for AtomicTimestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AtomicTimestamp")
            .field(&self.load())
            .finish()
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

    #[test]
    fn atomic_cell_keeps_eight_bytes_and_wide_entries_go_with_their_value() {
        assert_eq!(std::mem::size_of::<AtomicTimestamp>(), 8);
        let edges = [NARROW.start - 1, NARROW.start, NARROW.end - 1, NARROW.end];
        for ns in edges {
            let cell = AtomicTimestamp::new(Timestamp(ns));
            assert_eq!(cell.load(), Timestamp(ns));
            assert_eq!(cell.is_wide(), !NARROW.contains(&ns));
        }
        let cell = AtomicTimestamp::new(Timestamp::MAX);
        let number = cell.0.load(Ordering::Relaxed) & !WIDE;
        cell.store(Timestamp::MIN);
        assert!(!wide_times().times.contains_key(&number), "overwritten");
        let number = cell.0.load(Ordering::Relaxed) & !WIDE;
        cell.store(Timestamp(5));
        assert!(!wide_times().times.contains_key(&number), "narrowed");
        assert!(!cell.is_wide());
        cell.store(Timestamp::MAX);
        let number = cell.0.load(Ordering::Relaxed) & !WIDE;
        drop(cell);
        assert!(!wide_times().times.contains_key(&number), "dropped");
    }

    #[test]
    fn racing_stores_of_wide_and_narrow_times_leave_one_of_them() {
        let cell = AtomicTimestamp::new(Timestamp(0));
        // Wide values no other test stores, so the table's entries for them are this cell's.
        let (far, early) = (
            Timestamp(Timestamp::MAX.0 - 77),
            Timestamp(Timestamp::MIN.0 + 77),
        );
        let values = [far, Timestamp(7), early, Timestamp(-7)];
        std::thread::scope(|s| {
            for t in values {
                let cell = &cell;
                s.spawn(move || {
                    for _ in 0..2000 {
                        cell.store(t);
                        assert!(values.contains(&cell.load()));
                    }
                });
            }
        });
        let last = cell.load();
        assert!(values.contains(&last));
        let wide = wide_times();
        let live = usize::from(cell.is_wide());
        let mine = wide.times.values().filter(|t| values.contains(t)).count();
        assert_eq!(mine, live, "entries left behind");
    }
}
