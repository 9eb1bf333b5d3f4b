//! Live counters: requests and latency by opcode, lookup hits and misses, negative entries,
//! invalidations.
//!
//! Each request thread writes to its own cache-line-aligned slot with relaxed atomic adds,
//! so counting never makes request threads share a lock or a cache line; readers sum the
//! slots. Latencies go into log2 histograms (bucket `i` holds `[2^i, 2^(i+1))` ns), with
//! their sum for an exact mean; percentiles are interpolated within their bucket.
//! `Counted` wraps a request's [`ReplyOut`] and counts the request as its reply goes out.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memofs_core::ops::FdRead;
use memofs_core::{Attr, DirEntry, Entry, Errno, StatFs};

use crate::reply::{FdSource, OpenOut, ReplyOut};
use crate::request::Kind;

const BUCKETS: usize = 40;

/// Named event counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// LOOKUP found the name.
    LookupHit,
    /// LOOKUP did not find the name.
    LookupMiss,
    /// A miss answered with a negative entry (nodeid 0 + timeout).
    NegativeReply,
    /// Entry invalidations sent to the kernel.
    InvalEntry,
    /// Inode invalidations sent to the kernel.
    InvalInode,
    /// Entry epoch increments sent to the kernel (every cached name dropped).
    IncEpoch,
    /// Invalidations the kernel refused.
    InvalFailed,
    /// Entry invalidations of a name the kernel may still cache as missing although it
    /// answered `ENOENT` (see [`crate::invalidate`]): the entry epoch was incremented.
    InvalFallback,
    /// A busy-polling request thread saw the next request arrive.
    BusyPollHit,
    /// A busy-polling thread's window ended with nothing to read.
    BusyPollMiss,
    /// The CPU latency request was set for a stream of requests.
    CpuLatencyHeld,
    /// The CPU latency request was dropped after a quiet spell.
    CpuLatencyDropped,
    /// A backend's file was registered with the kernel as a FUSE passthrough backing file.
    BackingRegistered,
    /// A last release kept the backing file registration for the next open.
    BackingKept,
    /// The kernel refused a backend's file as a backing file (see [`crate::backing`]).
    BackingRefused,
    /// The kernel's writeback of cached pages failed (their pages were dropped).
    WritebackFailed,
}

const N_EVENTS: usize = Event::WritebackFailed as usize + 1;

/// Event names, in `Event` order.
pub const EVENT_NAMES: [&str; N_EVENTS] = [
    "lookup_hits",
    "lookup_misses",
    "negative_entries",
    "inval_entry",
    "inval_inode",
    "inc_epoch",
    "inval_failed",
    "inval_fallback",
    "busy_poll_hits",
    "busy_poll_misses",
    "cpu_latency_holds",
    "cpu_latency_drops",
    "backings_registered",
    "backings_kept",
    "backings_refused",
    "writebacks_failed",
];

#[repr(align(128))]
struct Slot {
    count: [AtomicU64; Kind::COUNT],
    sum_ns: [AtomicU64; Kind::COUNT],
    hist: [[AtomicU64; BUCKETS]; Kind::COUNT],
    events: [AtomicU64; N_EVENTS],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            events: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

const SLOTS: usize = 16;

/// All counters of one mount.
pub struct Stats {
    slots: Box<[Slot]>,
    next_slot: AtomicUsize,
}

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// One opcode's counters in a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpSnapshot {
    /// The opcode's name.
    pub name: &'static str,
    /// Requests answered.
    pub count: u64,
    /// Mean latency, arrival to reply, in nanoseconds.
    pub mean_ns: u64,
    /// Median latency (interpolated within its histogram bucket).
    pub p50_ns: u64,
    /// 99th percentile latency, the same way.
    pub p99_ns: u64,
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per opcode, opcodes never seen left out.
    pub ops: Vec<OpSnapshot>,
    /// Named events.
    pub events: Vec<(&'static str, u64)>,
}

impl Stats {
    /// Zeroed counters.
    pub fn new() -> Stats {
        Stats {
            slots: (0..SLOTS).map(|_| Slot::new()).collect(),
            next_slot: AtomicUsize::new(0),
        }
    }

    fn slot(&self) -> &Slot {
        let i = MY_SLOT.with(|s| {
            if s.get() == usize::MAX {
                s.set(self.next_slot.fetch_add(1, Ordering::Relaxed) % SLOTS);
            }
            s.get()
        });
        &self.slots[i]
    }

    /// Records one request of kind `op` that started at `start`.
    pub fn record(&self, op: Kind, start: Instant) {
        let ns = start.elapsed().as_nanos().max(1) as u64;
        let bucket = (63 - ns.leading_zeros() as usize).min(BUCKETS - 1);
        let slot = self.slot();
        slot.count[op as usize].fetch_add(1, Ordering::Relaxed);
        slot.sum_ns[op as usize].fetch_add(ns, Ordering::Relaxed);
        slot.hist[op as usize][bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one event.
    pub fn event(&self, e: Event) {
        self.slot().events[e as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Sums every slot.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for (op, name) in Kind::ALL.iter().map(|k| k.name()).enumerate() {
            let count: u64 = self
                .slots
                .iter()
                .map(|s| s.count[op].load(Ordering::Relaxed))
                .sum();
            if count == 0 {
                continue;
            }
            let hist: Vec<u64> = (0..BUCKETS)
                .map(|b| {
                    self.slots
                        .iter()
                        .map(|s| s.hist[op][b].load(Ordering::Relaxed))
                        .sum()
                })
                .collect();
            let sum_ns: u64 = self
                .slots
                .iter()
                .map(|s| s.sum_ns[op].load(Ordering::Relaxed))
                .sum();
            snap.ops.push(OpSnapshot {
                name,
                count,
                mean_ns: sum_ns / count,
                p50_ns: percentile(&hist, 0.50),
                p99_ns: percentile(&hist, 0.99),
            });
        }
        for (e, name) in EVENT_NAMES.iter().enumerate() {
            snap.events.push((
                name,
                self.slots
                    .iter()
                    .map(|s| s.events[e].load(Ordering::Relaxed))
                    .sum(),
            ));
        }
        snap
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

/// Quantile `q` of a log2 histogram, interpolated linearly by rank within its bucket
/// `[2^i, 2^(i+1))` (latencies inside a bucket taken as evenly spread).
fn percentile(hist: &[u64], q: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, &n) in hist.iter().enumerate() {
        if n > 0 && seen + n >= rank {
            let low = 1u64 << i;
            let within = (rank - seen) as f64 / n as f64;
            return low + (low as f64 * within) as u64 - 1;
        }
        seen += n;
    }
    0
}

/// Counts a request under its kind, with its latency, just before its reply goes out (so a
/// caller that saw the reply also sees it counted).
pub(crate) struct Counted<'a> {
    pub(crate) out: &'a mut dyn ReplyOut,
    pub(crate) stats: &'a Stats,
    pub(crate) kind: Kind,
    pub(crate) start: Instant,
}

impl Counted<'_> {
    pub(crate) fn count(&self) {
        self.stats.record(self.kind, self.start);
    }
}

impl ReplyOut for Counted<'_> {
    fn error(&mut self, e: Errno) {
        self.count();
        self.out.error(e)
    }
    fn empty(&mut self) {
        self.count();
        self.out.empty()
    }
    fn entry(&mut self, e: &Entry) {
        self.count();
        self.out.entry(e)
    }
    fn attr(&mut self, attr: &Attr, ttl: Duration) {
        self.count();
        self.out.attr(attr, ttl)
    }
    fn statx(&mut self, attr: &Attr, iflags: Option<u32>, ttl: Duration) {
        self.count();
        self.out.statx(attr, iflags, ttl)
    }
    fn opened(&mut self, o: &OpenOut) {
        self.count();
        self.out.opened(o)
    }
    fn created(&mut self, e: &Entry, o: &OpenOut) {
        self.count();
        self.out.created(e, o)
    }
    fn data(&mut self, data: &[u8]) {
        self.count();
        self.out.data(data)
    }
    fn data_parts(&mut self, parts: &[&[u8]]) {
        self.count();
        self.out.data_parts(parts)
    }
    fn data_from_fd(&mut self, source: &mut FdSource<'_>) -> bool {
        let (stats, kind, start) = (self.stats, self.kind, self.start);
        self.out.data_from_fd(&mut |read: &mut FdRead<'_>| {
            let r = source(read);
            if r.is_some() {
                stats.record(kind, start);
            }
            r
        })
    }
    fn written(&mut self, n: u32) {
        self.count();
        self.out.written(n)
    }
    fn xattr_size(&mut self, n: u32) {
        self.count();
        self.out.xattr_size(n)
    }
    fn statfs(&mut self, s: &StatFs) {
        self.count();
        self.out.statfs(s)
    }
    fn offset(&mut self, offset: u64) {
        self.count();
        self.out.offset(offset)
    }
    fn ioctl(&mut self, result: i32, out: &[u8]) {
        self.count();
        self.out.ioctl(result, out)
    }
    fn dirent(&mut self, e: &DirEntry, plus: Option<&Entry>) -> bool {
        self.out.dirent(e, plus)
    }
    fn dir_done(&mut self) {
        self.count();
        self.out.dir_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_buckets() {
        let mut h = vec![0u64; BUCKETS];
        h[10] = 98; // [1024, 2048) ns
        h[20] = 2; // [1, 2) ms
                   // Rank 50 of 98 in [1024, 2048): about half way.
        assert_eq!(percentile(&h, 0.5), 1024 + 1024 * 50 / 98 - 1);
        // Rank 99: the first of the two in [2^20, 2^21).
        assert_eq!(percentile(&h, 0.99), (1 << 20) + (1 << 20) / 2 - 1);
        let mut one = vec![0u64; BUCKETS];
        one[3] = 1;
        assert_eq!(
            percentile(&one, 0.99),
            15,
            "a lone sample: the bucket's top"
        );
        assert_eq!(percentile(&vec![0; BUCKETS], 0.5), 0);
    }

    #[test]
    fn counts_sum_across_threads() {
        let s = std::sync::Arc::new(Stats::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.record(Kind::Lookup, Instant::now());
                        s.event(Event::LookupMiss);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let snap = s.snapshot();
        assert_eq!(snap.ops[0].name, "LOOKUP");
        assert_eq!(snap.ops[0].count, 4000);
        assert!(snap.ops[0].mean_ns > 0 && snap.ops[0].p50_ns <= snap.ops[0].p99_ns);
        assert!(snap.events.contains(&("lookup_misses", 4000)));
    }
}
