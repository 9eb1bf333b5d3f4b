//! Where the server's messages go (standard error, or the system log with `--syslog`), at
//! a rate a client cannot raise: each place in the code that logs may write [`BURST`]
//! messages at once and one more each [`REFILL`] after that; the rest are counted, and the
//! next message from that place says how many were left out. A guest or a mount's user who
//! can make the server warn (a malformed request, a host error) can therefore not fill the
//! host's disk or drown other messages; `debug` and `trace` messages, which only
//! `-o debug`/`--log-level=debug` turn on, are not limited.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Messages one place may log at once.
pub const BURST: u32 = 20;
/// How often one place may log once its burst is spent.
pub const REFILL: Duration = Duration::from_secs(1);

/// Logs to standard error at `level`, unless MEMOFS_LOG says otherwise.
pub fn to_stderr(level: &str) {
    let env = env_logger::Env::new().filter_or("MEMOFS_LOG", level);
    let logger = env_logger::Builder::from_env(env)
        .format_timestamp_micros()
        .build();
    let max = logger.filter();
    if log::set_boxed_logger(Box::new(RateLimited::new(logger))).is_ok() {
        log::set_max_level(max);
    }
}

/// `inner`, with each place's messages limited as the module says.
pub struct RateLimited<L> {
    inner: L,
    places: Mutex<HashMap<(String, u32), Bucket>>,
}

impl<L: log::Log> RateLimited<L> {
    pub fn new(inner: L) -> RateLimited<L> {
        RateLimited {
            inner,
            places: Mutex::new(HashMap::new()),
        }
    }
}

/// One place's allowance.
#[derive(Debug)]
struct Bucket {
    tokens: u32,
    refilled: Instant,
    /// Messages left out since the last one logged.
    dropped: u64,
}

impl Bucket {
    fn new(now: Instant) -> Bucket {
        Bucket {
            tokens: BURST,
            refilled: now,
            dropped: 0,
        }
    }

    /// Whether a message may be logged at `now`; if so, how many were left out before it.
    fn take(&mut self, now: Instant) -> Option<u64> {
        let earned = now.saturating_duration_since(self.refilled).as_nanos() / REFILL.as_nanos();
        if earned > 0 {
            self.tokens = (u128::from(self.tokens) + earned).min(u128::from(BURST)) as u32;
            self.refilled += REFILL * earned.min(u128::from(u32::MAX)) as u32;
        }
        if self.tokens == 0 {
            self.dropped += 1;
            return None;
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.dropped))
    }
}

impl<L: log::Log> log::Log for RateLimited<L> {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.inner.enabled(record.metadata()) {
            return;
        }
        if record.level() >= log::Level::Debug {
            return self.inner.log(record);
        }
        let place = (
            record.module_path().unwrap_or("").to_string(),
            record.line().unwrap_or(0),
        );
        let now = Instant::now();
        let left_out = self
            .places
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(place)
            .or_insert_with(|| Bucket::new(now))
            .take(now);
        match left_out {
            None => {}
            Some(0) => self.inner.log(record),
            Some(n) => self.inner.log(
                &log::Record::builder()
                    .args(format_args!("{} ({n} like it not logged)", record.args()))
                    .metadata(record.metadata().clone())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            ),
        }
    }

    fn flush(&self) {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log;

    #[derive(Default)]
    struct Kept(Mutex<Vec<String>>);

    impl Log for Kept {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            self.0.lock().unwrap().push(record.args().to_string());
        }
        fn flush(&self) {}
    }

    fn record(line: u32, level: log::Level, f: impl FnOnce(&log::Record<'_>)) {
        f(&log::Record::builder()
            .args(format_args!("at {line}"))
            .level(level)
            .module_path(Some("here"))
            .line(Some(line))
            .build())
    }

    #[test]
    fn each_place_logs_its_burst_then_is_counted() {
        let logger = RateLimited::new(Kept::default());
        for _ in 0..100 {
            record(1, log::Level::Warn, |r| logger.log(r));
        }
        record(2, log::Level::Error, |r| logger.log(r));
        for _ in 0..5 {
            record(3, log::Level::Debug, |r| logger.log(r));
        }
        let kept = logger.inner.0.lock().unwrap().clone();
        assert_eq!(kept.iter().filter(|m| *m == "at 1").count(), BURST as usize);
        assert_eq!(
            kept.iter().filter(|m| *m == "at 2").count(),
            1,
            "another place"
        );
        assert_eq!(
            kept.iter().filter(|m| *m == "at 3").count(),
            5,
            "debug is not limited"
        );
    }

    #[test]
    fn a_spent_place_logs_again_as_time_passes_saying_how_many_were_left_out() {
        let start = Instant::now();
        let mut b = Bucket::new(start);
        for _ in 0..BURST {
            assert_eq!(b.take(start), Some(0));
        }
        assert_eq!(b.take(start), None);
        assert_eq!(b.take(start + REFILL / 2), None);
        assert_eq!(b.take(start + REFILL), Some(2));
        assert_eq!(b.take(start + REFILL), None);
        let later = start + REFILL * 1000;
        for _ in 0..BURST {
            assert!(b.take(later).is_some());
        }
        assert_eq!(
            b.take(later),
            None,
            "the allowance never grows past the burst"
        );
    }
}
