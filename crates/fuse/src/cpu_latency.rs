//! A CPU latency request while requests stream, so that idle CPUs stay awake.
//!
//! Every answer wakes the process it is for, which sleeps in the kernel until then; its CPU
//! has usually gone idle meanwhile. An idle CPU must come back before the process runs: from
//! a deep idle state on a physical machine (tens of microseconds), and on a virtual machine
//! from a halted vCPU, which the hypervisor has to run again. On the project's 2-vCPU VM that
//! return is most of a FUSE round trip: 12 000 files untarred in 4.3-13.1 s with idle vCPUs
//! halting, 2.5-2.8 s with this request (docs/performance.md, "How the server waits for
//! requests").
//!
//! The kernel lets a process bound that latency for as long as it keeps
//! `/dev/cpu_dma_latency` open with a value written to it (the CPU latency QoS request that
//! cpuidle obeys when it picks an idle state). With 0, an idle CPU stays in its shallowest
//! state (on x86 a polling loop) instead of sleeping, and a wakeup finds it running. memofs
//! asks for 0, but only while requests stream: [`Timing::streak`] requests in a row, each
//! within [`Timing::gap`] of the one before, set the request, and a [`Timing::quiet`] window
//! without any drops it (one to two windows after the last request). Polling CPUs cost power
//! (and, on a virtual machine, the host's CPU time), which a mount that is idle or serves a
//! request now and then never pays.
//!
//! The request path only notes arrivals and compares their times; a governor thread writes
//! the values, so no request waits for them. Only root can open the device, and without a
//! cpuidle driver the kernel ignores the request (idle CPUs halt regardless):
//! `cpu_latency=auto` goes without it then (`memofs stats` says why), `cpu_latency=on` fails
//! the mount where the device cannot be opened.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use memofs_request::stats::{Event, Stats};

/// The kernel's CPU latency QoS device.
pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// Which cpuidle driver picks idle states (`none`: idle CPUs halt, whatever is asked).
pub const CPUIDLE_DRIVER: &str = "/sys/devices/system/cpu/cpuidle/current_driver";

/// The value that leaves idle states to cpuidle (the kernel's default for the CPU latency
/// QoS, `PM_QOS_CPU_LATENCY_DEFAULT_VALUE`: 2 000 s in microseconds). The device takes a
/// native-endian 32-bit integer.
pub const RELAXED: i32 = 2_000_000_000;

/// When the request is set and dropped.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Longest gap between two requests of a stream.
    pub gap: Duration,
    /// Requests in a row, each within `gap` of the one before, that set the request.
    pub streak: u32,
    /// A window without a request drops it (so it is dropped one to two windows after the
    /// last request).
    pub quiet: Duration,
}

impl Timing {
    /// What mounts use: a caller working through the mount sends its next request
    /// microseconds after an answer (`tar`, `rm -rf`), or some hundred microseconds apart
    /// while it computes in between (a Python import); 10-20 ms of polling after a stream
    /// ends is little next to the stream.
    pub const DEFAULT: Timing = Timing {
        gap: Duration::from_millis(1),
        streak: 4,
        quiet: Duration::from_millis(10),
    };
}

/// A mount's CPU latency request (or none: [`CpuLatency::off`]). Dropping it drops the
/// request and ends the governor thread.
pub struct CpuLatency {
    shared: Option<Arc<Shared>>,
}

struct Shared {
    timing: Timing,
    epoch: Instant,
    /// A request arrived in the current quiet window, while the request is held.
    seen: AtomicBool,
    /// Arrival of the last request while not held, in nanoseconds since `epoch`.
    last_ns: AtomicU64,
    /// Requests in a row within `gap` of each other, while not held.
    streak: AtomicU32,
    /// The request is held, or the governor has been asked to set it.
    held: AtomicBool,
    governor: Mutex<Governor>,
    wake: Condvar,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Governor {
    /// A stream began: set the request.
    wanted: bool,
    /// The mount is gone.
    stop: bool,
}

impl CpuLatency {
    /// No request, ever.
    pub fn off() -> CpuLatency {
        CpuLatency { shared: None }
    }

    /// Governs `device` (an open [`DEVICE`]) as `timing` says, counting each time the
    /// request is set in `stats`.
    pub fn start(
        device: impl Write + Send + 'static,
        timing: Timing,
        stats: Arc<Stats>,
    ) -> io::Result<CpuLatency> {
        let shared = Arc::new(Shared {
            timing,
            epoch: Instant::now(),
            seen: AtomicBool::new(false),
            last_ns: AtomicU64::new(0),
            streak: AtomicU32::new(0),
            held: AtomicBool::new(false),
            governor: Mutex::default(),
            wake: Condvar::new(),
            stats,
        });
        let me = shared.clone();
        std::thread::Builder::new()
            .name("memofs-cpu-latency".into())
            .spawn(move || me.govern(device))?;
        Ok(CpuLatency {
            shared: Some(shared),
        })
    }

    /// A request arrived (one that wants an answer).
    pub fn arrived(&self) {
        let Some(s) = &self.shared else { return };
        if s.held.load(Ordering::Relaxed) {
            // Load first: the shared line is written once per window, not per request.
            if !s.seen.load(Ordering::Relaxed) {
                s.seen.store(true, Ordering::Relaxed);
            }
            return;
        }
        let now = s.epoch.elapsed().as_nanos() as u64;
        let before = s.last_ns.swap(now, Ordering::Relaxed);
        if now.saturating_sub(before) > s.timing.gap.as_nanos() as u64 {
            s.streak.store(1, Ordering::Relaxed);
            return;
        }
        if s.streak.fetch_add(1, Ordering::Relaxed) + 1 < s.timing.streak
            || s.held.swap(true, Ordering::Relaxed)
        {
            return;
        }
        s.lock().wanted = true;
        s.wake.notify_one();
    }
}

impl Drop for CpuLatency {
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            s.lock().stop = true;
            s.wake.notify_one();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Governor> {
        self.governor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The governor thread: sets the request when a stream begins, drops it after a quiet
    /// spell, until the mount is gone.
    fn govern(&self, mut device: impl Write) {
        loop {
            {
                let mut g = self.lock();
                while !g.wanted && !g.stop {
                    g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                if g.stop {
                    return;
                }
                g.wanted = false;
            }
            if !self.write(&mut device, 0) {
                return;
            }
            self.stats.event(Event::CpuLatencyHeld);
            let stopped = self.hold();
            if !stopped {
                // Before the write: a stream that begins meanwhile sets `wanted`, and its 0
                // is written after this.
                self.streak.store(0, Ordering::Relaxed);
                self.held.store(false, Ordering::Relaxed);
            }
            if !self.write(&mut device, RELAXED) {
                return;
            }
            self.stats.event(Event::CpuLatencyDropped);
            if stopped {
                return;
            }
        }
    }

    /// Writes `value` as the request; on failure (none is expected) says so, and the caller
    /// ends the governor, whose return closes the device and so removes the request. `held`
    /// then stays set once a stream sets it, and no request asks again.
    fn write(&self, device: &mut impl Write, value: i32) -> bool {
        match device.write_all(&value.to_ne_bytes()) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("cannot write {DEVICE} ({e}): idle CPUs sleep as the kernel decides");
                false
            }
        }
    }

    /// Waits for a `quiet` window without a request (so the request is dropped `quiet` to
    /// twice `quiet` after the last one); true if the mount went first.
    fn hold(&self) -> bool {
        self.seen.store(false, Ordering::Relaxed);
        loop {
            let g = self.lock();
            let (g, _) = self
                .wake
                .wait_timeout_while(g, self.timing.quiet, |g| !g.stop)
                .unwrap_or_else(|e| e.into_inner());
            if g.stop {
                return true;
            }
            if !self.seen.swap(false, Ordering::Relaxed) {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A latency "device" that records every value written, and a reader of them.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<u8>>>);

    impl Write for Recorder {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn recorder() -> (Recorder, impl Fn() -> Vec<i32>) {
        let r = Recorder::default();
        let seen = r.clone();
        let read = move || {
            seen.0
                .lock()
                .unwrap()
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        };
        (r, read)
    }

    /// A governor of a recorder with these timings, its counters and a reader of what it
    /// wrote.
    fn governed(
        gap: Duration,
        streak: u32,
        quiet: Duration,
    ) -> (CpuLatency, impl Fn() -> Vec<i32>, Arc<Stats>) {
        let (f, values) = recorder();
        let stats = Arc::new(Stats::new());
        let timing = Timing { gap, streak, quiet };
        let l = CpuLatency::start(f, timing, stats.clone()).unwrap();
        (l, values, stats)
    }

    /// Polls `values` until it returns `want` (the governor writes from its own thread).
    fn until(values: &impl Fn() -> Vec<i32>, want: &[i32]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while values() != want {
            assert!(
                Instant::now() < deadline,
                "wrote {:?}, not {want:?}",
                values()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Times the request was set and dropped.
    fn holds(stats: &Stats) -> (u64, u64) {
        let e = stats.snapshot().events;
        (
            e[Event::CpuLatencyHeld as usize].1,
            e[Event::CpuLatencyDropped as usize].1,
        )
    }

    /// Polls until the governor thread has ended (it holds the other reference).
    fn governor_gone(shared: &Arc<Shared>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(shared) > 1 {
            assert!(Instant::now() < deadline, "the governor thread did not end");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_stream_sets_the_request_and_a_quiet_spell_drops_it() {
        let quiet = Duration::from_millis(20);
        let (l, values, stats) = governed(Duration::from_secs(5), 3, quiet);
        l.arrived();
        l.arrived();
        std::thread::sleep(3 * quiet);
        assert_eq!(
            values(),
            Vec::<i32>::new(),
            "two requests are not a stream of three"
        );
        l.arrived();
        until(&values, &[0, RELAXED]);
        assert_eq!(holds(&stats), (1, 1));
        // Held again by the next stream.
        for _ in 0..3 {
            l.arrived();
        }
        until(&values, &[0, RELAXED, 0, RELAXED]);
        assert_eq!(holds(&stats), (2, 2));
    }

    #[test]
    fn requests_further_apart_than_the_gap_set_nothing() {
        let (gap, quiet) = (Duration::from_millis(2), Duration::from_millis(5));
        let (l, values, stats) = governed(gap, 2, quiet);
        for _ in 0..5 {
            std::thread::sleep(4 * gap);
            l.arrived();
        }
        std::thread::sleep(4 * quiet);
        assert_eq!((values(), holds(&stats)), (vec![], (0, 0)));
    }

    #[test]
    fn held_while_requests_keep_coming_and_dropped_with_the_mount() {
        let quiet = Duration::from_millis(300);
        let (l, values, stats) = governed(Duration::from_secs(5), 2, quiet);
        l.arrived();
        l.arrived();
        until(&values, &[0]);
        // Requests every few milliseconds for three quiet spells: never dropped.
        let end = Instant::now() + 3 * quiet;
        while Instant::now() < end {
            l.arrived();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(values(), [0]);
        drop(l);
        until(&values, &[0, RELAXED]);
        assert_eq!(holds(&stats).0, 1);
    }

    #[test]
    fn a_device_that_refuses_ends_the_governor_and_requests_go_on() {
        struct Refuses;
        impl Write for Refuses {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::EFAULT))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let stats = Arc::new(Stats::new());
        let timing = Timing {
            gap: Duration::from_secs(5),
            streak: 2,
            quiet: Duration::from_millis(5),
        };
        let l = CpuLatency::start(Refuses, timing, stats.clone()).unwrap();
        l.arrived();
        l.arrived();
        governor_gone(l.shared.as_ref().unwrap());
        for _ in 0..100 {
            l.arrived();
        }
        assert_eq!(holds(&stats), (0, 0));
    }

    #[test]
    fn dropped_while_idle_writes_nothing() {
        let t = Timing::DEFAULT;
        let (l, values, stats) = governed(t.gap, t.streak, t.quiet);
        let shared = l.shared.clone().unwrap();
        drop(l);
        governor_gone(&shared);
        assert_eq!((values(), holds(&stats)), (vec![], (0, 0)));
    }
}
