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
//! apart, does not poll at all, and a burst's end costs one window (a burst of two requests
//! too). At most one thread polls at a time.
//!
//! Polling trades some server CPU for the wakeup a sleeping thread would cost each request
//! (docs/performance.md, "How the server waits"). It also takes CPU time from a caller that
//! computes between short bursts of requests (a Python import: open, ioctl, stat, read,
//! close, then seconds of work spread over a thousand files), where most polls end empty.
//! So polling also stops while it does not pay: [`Payoff`] keeps an average of the recent
//! polls' outcomes, and below one hit in four a thread polls only every [`PROBE`]th time it
//! otherwise would, to notice when requests come back to back again.
//!
//! A parked thread rejoins the reading every [`crate::gate::REJOIN`], and while it waits in
//! `read(2)` the thread that answers is not the only reader, so it parks instead of polling.
//! With 16 request threads that cost little: 6113 polls saw a request during one `rm -rf`,
//! against 6178 with two threads.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use memofs_request::stats::{Event, Stats};

/// While polls miss more often than they hit, one poll in this many still happens.
pub const PROBE: u32 = 16;
/// [`Payoff`]'s score when every recent poll hit.
const FULL: u32 = 1024;

/// Whether busy polling has been paying off: an average of recent polls' outcomes, each poll
/// weighing a sixteenth. A hit saves the caller a wakeup, which on a virtual machine costs
/// more than the CPU a miss burns, so polling goes on while at least one poll in four hits
/// (a run of 21 misses stops it after a run of hits). Shared by the threads that may poll;
/// races only blur the average.
pub struct Payoff {
    /// The average, from 0 (every poll missed) to [`FULL`] (every poll hit).
    score: AtomicU32,
    /// Polls skipped since the last probe.
    skipped: AtomicU32,
}

impl Default for Payoff {
    /// Polling pays until polls say otherwise.
    fn default() -> Self {
        Payoff {
            score: AtomicU32::new(FULL),
            skipped: AtomicU32::new(0),
        }
    }
}

impl Payoff {
    /// Whether to poll now: while at least a quarter of the recent polls hit, and otherwise
    /// once every [`PROBE`] times.
    pub fn worth_polling(&self) -> bool {
        if self.score.load(Ordering::Relaxed) >= FULL / 4 {
            return true;
        }
        let skipped = self.skipped.load(Ordering::Relaxed) + 1;
        let probe = skipped >= PROBE;
        self.skipped
            .store(if probe { 0 } else { skipped }, Ordering::Relaxed);
        probe
    }

    /// A poll saw a request (`hit`) or ran out its window: counted in the average and in
    /// `stats` (`busy_poll_hits`, `busy_poll_misses`).
    pub fn polled(&self, hit: bool, stats: &Stats) {
        let score = self.score.load(Ordering::Relaxed);
        let score = score - score / 16 + if hit { FULL / 16 } else { 0 };
        self.score.store(score, Ordering::Relaxed);
        stats.event(if hit {
            Event::BusyPollHit
        } else {
            Event::BusyPollMiss
        });
    }
}

/// How the reading thread waits for the next request.
pub struct BusyPoll {
    /// The window in nanoseconds (0: never poll).
    window_ns: u64,
    /// A descriptor of the connection's device (any one will do: all queues of a connection
    /// share the kernel's input queue, which is what `poll(2)` looks at).
    device: OnceLock<OwnedFd>,
    epoch: Instant,
    /// When the last answer went out, in nanoseconds since `epoch`.
    answered: AtomicU64,
    /// Whether the last request arrived within a window of the answer before it.
    quick: AtomicBool,
    /// The last poll saw a request arrive.
    hit: AtomicBool,
    payoff: Payoff,
    stats: Arc<Stats>,
}

impl BusyPoll {
    /// Polls for up to `window` (zero: never).
    pub fn new(window: Duration, stats: Arc<Stats>) -> BusyPoll {
        BusyPoll {
            window_ns: window.as_nanos() as u64,
            device: OnceLock::new(),
            epoch: Instant::now(),
            answered: AtomicU64::new(0),
            quick: AtomicBool::new(false),
            hit: AtomicBool::new(false),
            payoff: Payoff::default(),
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

    /// A request arrived: note whether it came within a window of the last answer (or was
    /// the one the last poll saw arrive, whose gap includes the read and dispatch).
    pub fn arrived(&self) {
        if self.window_ns == 0 {
            return;
        }
        let gap = self
            .now()
            .saturating_sub(self.answered.load(Ordering::Relaxed));
        // Taken whatever the gap, so a hit never outlives the request it saw.
        let hit = self.hit.swap(false, Ordering::Relaxed);
        let quick = gap <= self.window_ns || hit;
        if self.quick.load(Ordering::Relaxed) != quick {
            self.quick.store(quick, Ordering::Relaxed);
        }
    }

    /// A request was answered just now: note the time (before the thread may park, see
    /// [`crate::gate`]); pass what this returns to [`BusyPoll::wait`].
    pub fn answered(&self) -> Answered {
        if self.window_ns == 0 {
            return Answered(0);
        }
        let now = self.now();
        self.answered.fetch_max(now, Ordering::Relaxed);
        Answered(now)
    }

    /// After [`BusyPoll::answered`]; `alone`: this thread is the only one that will read
    /// next. Returns once a request is waiting, the window since the answer is over, or at
    /// once if requests have not been coming within a window of each other or polls have
    /// not been paying off.
    pub fn wait(&self, answered: Answered, alone: bool) {
        if self.window_ns == 0
            || !alone
            || !self.quick.load(Ordering::Relaxed)
            || !self.payoff.worth_polling()
        {
            return;
        }
        let Some(device) = self.device.get() else {
            return;
        };
        let end = answered.0 + self.window_ns;
        loop {
            match poll_device(device) {
                Poll::Request => {
                    self.hit.store(true, Ordering::Relaxed);
                    self.payoff.polled(true, &self.stats);
                    return;
                }
                // The connection is gone (the next read says so) or the poll failed: read.
                Poll::Ended | Poll::Failed => return,
                Poll::Nothing => {}
            }
            if self.now() >= end {
                self.payoff.polled(false, &self.stats);
                return;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

/// When a request was answered (from [`BusyPoll::answered`]).
#[derive(Clone, Copy, Debug)]
pub struct Answered(u64);

/// What the device has to read.
enum Poll {
    /// A request or a FORGET.
    Request,
    /// Nothing yet.
    Nothing,
    /// The connection ended (unmounted or aborted; the next `read(2)` reports it).
    Ended,
    /// `poll(2)` itself failed (interrupted, out of memory).
    Failed,
}

fn poll_device(device: &OwnedFd) -> Poll {
    let mut p = libc::pollfd {
        fd: device.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd for an open descriptor; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    match n {
        0 => Poll::Nothing,
        n if n < 0 => Poll::Failed,
        _ if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0 => Poll::Request,
        _ => Poll::Ended,
    }
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

    /// Answers a request that arrived right after the previous answer (so polling is on),
    /// then polls as a thread that reads `alone` or not.
    fn after_a_quick_request(p: &BusyPoll, alone: bool) {
        let _ = p.answered();
        p.arrived();
        p.wait(p.answered(), alone);
    }

    fn polls(stats: &Stats) -> u64 {
        count(stats, Event::BusyPollMiss) + count(stats, Event::BusyPollHit)
    }

    #[test]
    fn polls_only_alone_and_while_requests_come_within_a_window() {
        let window = Duration::from_millis(50);
        let (p, _peer, stats) = polled(window);
        // No request seen yet: nothing to go by, no polling.
        p.wait(p.answered(), true);
        assert_eq!(polls(&stats), 0);
        // A request right after the answer: the next answer polls (and times out).
        let t = Instant::now();
        after_a_quick_request(&p, true);
        assert!(t.elapsed() >= window);
        assert_eq!(count(&stats, Event::BusyPollMiss), 1);
        // Not while another thread reads.
        after_a_quick_request(&p, false);
        assert_eq!(polls(&stats), 1);
        // A request long after the answer: polling stops.
        let _ = p.answered();
        std::thread::sleep(2 * window);
        p.arrived();
        p.wait(p.answered(), true);
        assert_eq!(polls(&stats), 1);
    }

    #[test]
    fn returns_as_soon_as_something_is_waiting() {
        let window = Duration::from_millis(50);
        let (p, mut peer, stats) = polled(window);
        peer.write_all(b"x").unwrap();
        after_a_quick_request(&p, true);
        assert_eq!((count(&stats, Event::BusyPollHit), polls(&stats)), (1, 1));
        // The request the poll saw counts as quick however long its read and dispatch took;
        // the one after it, as long after, does not.
        for quick in [true, false] {
            std::thread::sleep(2 * window);
            p.arrived();
            assert_eq!(p.quick.load(Ordering::Relaxed), quick);
        }
    }

    #[test]
    fn a_hit_counts_for_the_request_it_saw_only() {
        let window = Duration::from_millis(50);
        let (p, mut peer, _stats) = polled(window);
        peer.write_all(b"x").unwrap();
        after_a_quick_request(&p, true);
        // The request the poll saw arrives at once; one long after is not quick.
        p.arrived();
        std::thread::sleep(2 * window);
        p.arrived();
        assert!(!p.quick.load(Ordering::Relaxed));
    }

    #[test]
    fn polling_stops_while_polls_miss_and_probes_bring_it_back() {
        let p = Payoff::default();
        let stats = Stats::new();
        assert!(p.worth_polling(), "polling starts on");
        // A few misses among hits keep it on.
        for _ in 0..10 {
            p.polled(false, &stats);
            assert!(p.worth_polling());
        }
        for _ in 0..10 {
            p.polled(true, &stats);
        }
        // A long run of misses stops it: then one chance in PROBE.
        let mut misses = 0;
        while p.worth_polling() {
            p.polled(false, &stats);
            misses += 1;
            assert!(misses < 100, "polling never stopped");
        }
        assert!(misses > 10, "stopped after {misses} misses");
        let polls = (0..10 * PROBE).filter(|_| p.worth_polling()).count();
        assert_eq!(polls, 10, "one probe every {PROBE}");
        // Probes that hit turn it on again.
        let mut probes = 0;
        while !p.worth_polling() {
            if (0..PROBE).any(|_| p.worth_polling()) {
                p.polled(true, &stats);
                probes += 1;
            }
        }
        assert!(
            (1..=5).contains(&probes),
            "{probes} probes to turn polling on"
        );
    }

    #[test]
    fn a_closed_connection_ends_the_poll_uncounted() {
        let (p, peer, stats) = polled(Duration::from_secs(30));
        drop(peer);
        let t = Instant::now();
        after_a_quick_request(&p, true);
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(polls(&stats), 0);
    }
}
