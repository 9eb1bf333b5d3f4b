//! Busy polling: the one reading thread waits a moment for the next request before it
//! sleeps.
//!
//! A caller working through the mount on its own (`rm -rf`, `tar`, a compiler) sends its
//! next request a few microseconds after the answer to the last one: an `unlinkat(2)` is
//! answered, the kernel queues a FORGET, and the next `unlinkat(2)` first asks for the
//! directory's attributes (a GETATTR, because the unlink invalidated them and the mount
//! checks permissions in the kernel). A request thread that went back to sleep in `read(2)`
//! must be woken for each of those; on a virtual machine that wakeup is an interprocessor
//! interrupt to an idle vCPU, and it costs more than the request.
//!
//! So when a thread has answered and is the only one that will read next (the others are
//! parked, see [`crate::gate`], or there are none), it polls the device for up to the
//! `busy_poll=` window, yielding the CPU between polls (a caller on the same CPU runs at
//! once), and only then reads. It does so only while requests keep coming that fast: a
//! request that arrives more than a window after the previous answer turns polling off until
//! one arrives within a window again, so a server that is idle, or serves requests seconds
//! apart, does not poll at all, and a burst's end costs at most one window. At most one
//! thread polls at a time.
//!
//! Measured on two vCPUs, `rm -rf` of a 2000-file tree through a passthrough export: 0.168 s
//! without polling, 0.146 s with a 50 µs window (server CPU 110 → 135 ms); a 10 µs window
//! gave most of that (0.153 s).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::stats::{Event, Stats};

/// How the reading thread waits for the next request.
pub struct BusyPoll {
    window: Duration,
    /// A descriptor of the connection's device (any one will do: all queues of a connection
    /// share the kernel's input queue, which is what `poll(2)` looks at).
    device: OnceLock<OwnedFd>,
    epoch: Instant,
    /// When the last answer went out, in nanoseconds since `epoch`.
    answered: AtomicU64,
    /// Whether the last request arrived within a window of the answer before it.
    quick: AtomicBool,
    stats: Arc<Stats>,
}

impl BusyPoll {
    /// Polls for up to `window` (zero: never).
    pub fn new(window: Duration, stats: Arc<Stats>) -> BusyPoll {
        BusyPoll {
            window,
            device: OnceLock::new(),
            epoch: Instant::now(),
            answered: AtomicU64::new(0),
            quick: AtomicBool::new(false),
            stats,
        }
    }

    /// Polls `device` (a duplicate of the session's `/dev/fuse` descriptor) from now on.
    pub fn attach(&self, device: OwnedFd) {
        let _ = self.device.set(device);
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// A request arrived: note whether it came within a window of the last answer.
    pub fn arrived(&self) {
        if self.window.is_zero() {
            return;
        }
        let gap = self
            .now()
            .saturating_sub(self.answered.load(Ordering::Relaxed));
        let quick = gap <= self.window.as_nanos() as u64;
        if self.quick.load(Ordering::Relaxed) != quick {
            self.quick.store(quick, Ordering::Relaxed);
        }
    }

    /// A request was answered; `alone`: this thread is the only one that will read next.
    /// Returns once a request is waiting, the window is over, or at once if requests have
    /// not been coming within a window of each other.
    pub fn answered(&self, alone: bool) {
        if self.window.is_zero() {
            return;
        }
        let start = self.now();
        self.answered.store(start, Ordering::Relaxed);
        let Some(device) = self.device.get() else {
            return;
        };
        if !alone || !self.quick.load(Ordering::Relaxed) {
            return;
        }
        let end = start + self.window.as_nanos() as u64;
        loop {
            if pending(device) {
                self.stats.event(Event::BusyPollHit);
                return;
            }
            if self.now() >= end {
                self.stats.event(Event::BusyPollMiss);
                return;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// Whether the device has something to read (a request, a FORGET, or an error such as the
/// connection going away, which the next `read(2)` reports).
fn pending(device: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: device.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd for an open descriptor; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn polled(window: Duration) -> (BusyPoll, UnixStream, Arc<Stats>) {
        let stats = Arc::new(Stats::new());
        let p = BusyPoll::new(window, stats.clone());
        let (a, b) = UnixStream::pair().unwrap();
        p.attach(a.into());
        (p, b, stats)
    }

    fn count(stats: &Stats, e: Event) -> u64 {
        stats.snapshot().events[e as usize].1
    }

    #[test]
    fn polls_only_while_requests_come_within_a_window() {
        let (p, _peer, stats) = polled(Duration::from_millis(5));
        // No request seen yet: nothing to go by, no polling.
        p.answered(true);
        assert_eq!(count(&stats, Event::BusyPollMiss), 0);
        // A request right after the answer: the next answer polls (and times out).
        p.arrived();
        let t = Instant::now();
        p.answered(true);
        assert!(t.elapsed() >= Duration::from_millis(5));
        assert_eq!(count(&stats, Event::BusyPollMiss), 1);
        // Not while another thread reads.
        p.arrived();
        p.answered(false);
        assert_eq!(count(&stats, Event::BusyPollMiss), 1);
        // A request long after the answer: polling stops.
        std::thread::sleep(Duration::from_millis(10));
        p.arrived();
        p.answered(true);
        assert_eq!(count(&stats, Event::BusyPollMiss), 1);
    }

    #[test]
    fn returns_as_soon_as_something_is_waiting() {
        let (p, mut peer, stats) = polled(Duration::from_secs(30));
        p.arrived();
        peer.write_all(b"x").unwrap();
        let t = Instant::now();
        p.answered(true);
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(count(&stats, Event::BusyPollHit), 1);
    }

    #[test]
    fn a_zero_window_never_polls() {
        let (p, _peer, stats) = polled(Duration::ZERO);
        p.arrived();
        p.answered(true);
        assert_eq!(
            count(&stats, Event::BusyPollMiss) + count(&stats, Event::BusyPollHit),
            0
        );
    }
}
