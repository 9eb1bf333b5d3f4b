//! Request threads the load does not need wait off the device.
//!
//! Every request thread not busy with a request sleeps in `read(2)` on its `/dev/fuse` queue,
//! and the kernel wakes one of them for each request and each FORGET it queues. With one
//! process using the mount at a time (a shell, `tar`, `rm -rf`, a compiler) a second
//! reader only adds wakeups: `rm -rf` queues a FORGET right after each UNLINK reply, which
//! wakes the idle thread while the busy one already comes back for it, and on two CPUs
//! those wakeups compete with the caller; but two callers reading at once need two threads
//! (docs/performance.md, "How the server waits", has the measurements).
//!
//! So a thread that finishes a request parks (in the callback, after its reply went out)
//! when another thread is waiting in `read(2)`, unless the caller changed or a READ, WRITE
//! or COPY_FILE_RANGE started within the last [`HOLD`] (callers taking turns that fast are
//! working at the same time, and the kernel sends a caller's reads and writes several at a
//! time: readahead, writeback, the pages of a mapping); and one parked thread goes back to
//! reading when such a request starts while no thread is reading. Parked threads also go
//! back by themselves after [`REJOIN`], so none holds up an unmount for longer (a reader then
//! sees `ENODEV` and ends its loop); a thread parks only while another reads, so requests
//! are always read.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Longest a thread stays parked before reading again: bounds how long an unmount waits
/// for a parked thread (which ends once it reads again), at the price of about one extra
/// wakeup per period under a one-caller load. An idle server has no parked thread and no
/// periodic wakeup (every thread sleeps in `read(2)`).
pub const REJOIN: Duration = Duration::from_millis(10);
/// After a request from a caller other than the one before, threads stop parking for this
/// long: callers that take turns at this pace are working at the same time.
pub const HOLD: Duration = Duration::from_millis(20);

#[derive(Default)]
struct State {
    /// Threads handling a request.
    busy: usize,
    /// Threads parked.
    parked: usize,
    /// Parked threads asked to read again.
    unpark: usize,
    /// The caller of the last request that named one.
    last_pid: u32,
    /// When the caller last changed or a READ, WRITE or COPY_FILE_RANGE last started.
    switched: Option<Instant>,
}

/// Which request threads read the device.
pub struct Gate {
    threads: usize,
    rejoin: Duration,
    state: Mutex<State>,
    wake: Condvar,
}

impl Gate {
    /// For `threads` request threads.
    pub fn new(threads: usize) -> Gate {
        Gate::with_rejoin(threads, REJOIN)
    }

    /// With parked threads reading again after `rejoin` at the latest.
    pub fn with_rejoin(threads: usize, rejoin: Duration) -> Gate {
        Gate {
            threads,
            rejoin,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }
    }

    /// A request from process or thread `pid` (0: the kernel's own) starts on this thread;
    /// `data`: a READ, WRITE or COPY_FILE_RANGE, which the kernel sends several at a time for
    /// one caller (readahead, writeback, the pages of a mapping) or which may take long, so
    /// they count as callers at once.
    pub fn enter(&self, pid: u32, data: bool) {
        if self.threads < 2 {
            return;
        }
        let mut s = self.state.lock();
        s.busy += 1;
        let another = pid != 0 && pid != s.last_pid;
        if !another && !data {
            return;
        }
        if data || s.last_pid != 0 {
            s.switched = Some(Instant::now());
        }
        if pid != 0 {
            s.last_pid = pid;
        }
        if self.readers(&s) == 0 && s.parked > s.unpark {
            s.unpark += 1;
            self.wake.notify_one();
        }
    }

    /// The request is answered: park this thread while another one reads. Returns true
    /// only if it did not park and goes on to read as the only reader (what
    /// [`crate::busy_poll`] needs).
    pub fn leave(&self) -> bool {
        if self.threads < 2 {
            return true;
        }
        let mut s = self.state.lock();
        s.busy -= 1;
        // This thread counts as a reader now; park only if it is not the only one, and not
        // while callers take turns.
        let readers = self.readers(&s);
        if readers < 2 || s.switched.is_some_and(|t| t.elapsed() < HOLD) {
            return readers < 2;
        }
        s.parked += 1;
        let deadline = Instant::now() + self.rejoin;
        loop {
            if s.unpark > 0 {
                s.unpark -= 1;
                break;
            }
            if self.wake.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        s.parked -= 1;
        // A wakeup aimed at a thread whose wait had just timed out leaves a token nobody
        // waits for; drop it rather than let the next thread skip its park.
        s.unpark = s.unpark.min(s.parked);
        false
    }

    /// Threads neither busy nor parked: reading, or on their way to.
    fn readers(&self, s: &State) -> usize {
        self.threads.saturating_sub(s.busy + s.parked)
    }

    /// Threads parked now (for tests).
    pub fn parked(&self) -> usize {
        self.state.lock().parked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_thread_never_parks() {
        let g = Gate::new(1);
        g.enter(7, false);
        assert!(g.leave(), "the one thread reads alone");
        assert_eq!(g.parked(), 0);
    }

    #[test]
    fn a_thread_parks_while_another_reads_and_a_second_caller_wakes_it() {
        let g = Arc::new(Gate::with_rejoin(2, Duration::from_secs(60)));
        // Thread A answers a request while B reads: A parks.
        let a = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.enter(100, false);
                g.leave();
            })
        };
        let start = Instant::now();
        while g.parked() == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "A never parked");
            std::thread::yield_now();
        }
        // B takes a request from the same caller: A stays parked.
        g.enter(100, false);
        assert_eq!(g.parked(), 1);
        // B is the only reader: it does not park, and reads alone.
        assert!(g.leave());
        // A request from another caller while B is busy and nobody reads: A goes back.
        g.enter(200, false);
        a.join().unwrap();
        assert_eq!(g.parked(), 0);
    }

    /// With three threads, a request from caller 1 and then `(pid, data)` while it is
    /// served: when one of them is answered two threads would read, yet none parks.
    fn parking_held_off_by(pid: u32, data: bool) {
        let g = Gate::with_rejoin(3, Duration::from_secs(60));
        let start = Instant::now();
        g.enter(1, false);
        g.enter(pid, data);
        assert!(!g.leave(), "two threads read");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(g.parked(), 0);
    }

    #[test]
    fn threads_do_not_park_while_callers_take_turns() {
        parking_held_off_by(2, false); // a second caller while the first is served
    }

    #[test]
    fn threads_do_not_park_after_reads_and_writes() {
        parking_held_off_by(1, true); // the same caller's readahead
    }

    #[test]
    fn a_parked_thread_comes_back_by_itself() {
        let rejoin = Duration::from_millis(50);
        let g = Gate::with_rejoin(2, rejoin);
        let start = Instant::now();
        g.enter(1, false);
        g.leave(); // the other thread counts as reading: this one parks until `rejoin`
        assert!(start.elapsed() >= rejoin);
        assert_eq!(g.parked(), 0);
    }
}
