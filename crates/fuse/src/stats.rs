//! Live counters: requests and latency by opcode, lookup hits and misses, negative entries,
//! invalidations.
//!
//! Each request thread writes to its own cache-line-aligned slot with relaxed atomic adds,
//! so counting never makes request threads share a lock or a cache line; readers sum the
//! slots. Latencies go into log2 histograms (bucket `i` holds `[2^i, 2^(i+1))` ns).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Opcodes counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
#[allow(missing_docs)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Fsyncdir,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Fallocate,
    Lseek,
    CopyFileRange,
    Ioctl,
}

/// Number of opcodes.
pub const N_OPS: usize = Op::Ioctl as usize + 1;

/// Opcode names, in `Op` order.
pub const OP_NAMES: [&str; N_OPS] = [
    "LOOKUP",
    "FORGET",
    "GETATTR",
    "SETATTR",
    "READLINK",
    "MKNOD",
    "MKDIR",
    "UNLINK",
    "RMDIR",
    "SYMLINK",
    "RENAME",
    "LINK",
    "OPEN",
    "READ",
    "WRITE",
    "FLUSH",
    "RELEASE",
    "FSYNC",
    "FSYNCDIR",
    "OPENDIR",
    "READDIR",
    "READDIRPLUS",
    "RELEASEDIR",
    "STATFS",
    "SETXATTR",
    "GETXATTR",
    "LISTXATTR",
    "REMOVEXATTR",
    "ACCESS",
    "CREATE",
    "FALLOCATE",
    "LSEEK",
    "COPY_FILE_RANGE",
    "IOCTL",
];

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
    /// A busy-polling thread saw the next request arrive (see [`crate::busy_poll`]).
    BusyPollHit,
    /// A busy-polling thread's window ended with nothing to read.
    BusyPollMiss,
}

const N_EVENTS: usize = Event::BusyPollMiss as usize + 1;

/// Event names, in `Event` order.
pub const EVENT_NAMES: [&str; N_EVENTS] = [
    "lookup_hits",
    "lookup_misses",
    "negative_entries",
    "inval_entry",
    "inval_inode",
    "inc_epoch",
    "inval_failed",
    "busy_poll_hits",
    "busy_poll_misses",
];

#[repr(align(128))]
struct Slot {
    count: [AtomicU64; N_OPS],
    hist: [[AtomicU64; BUCKETS]; N_OPS],
    events: [AtomicU64; N_EVENTS],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
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

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Per opcode: (name, count, p50 ns, p99 ns), opcodes never seen left out.
    pub ops: Vec<(&'static str, u64, u64, u64)>,
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

    /// Records one request of `op` that started at `start`.
    pub fn record(&self, op: Op, start: Instant) {
        let ns = start.elapsed().as_nanos().max(1) as u64;
        let bucket = (63 - ns.leading_zeros() as usize).min(BUCKETS - 1);
        let slot = self.slot();
        slot.count[op as usize].fetch_add(1, Ordering::Relaxed);
        slot.hist[op as usize][bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one event.
    pub fn event(&self, e: Event) {
        self.slot().events[e as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Sums every slot.
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for (op, name) in OP_NAMES.iter().enumerate() {
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
            snap.ops.push((
                name,
                count,
                percentile(&hist, 0.50),
                percentile(&hist, 0.99),
            ));
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

/// The upper bound of the bucket holding quantile `q` (an over-estimate by at most 2x).
fn percentile(hist: &[u64], q: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return (1u64 << (i + 1)) - 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_buckets() {
        let mut h = vec![0u64; BUCKETS];
        h[10] = 98; // ~1-2 us
        h[20] = 2; // ~1-2 ms
        assert_eq!(percentile(&h, 0.5), 2047);
        assert_eq!(percentile(&h, 0.99), (1 << 21) - 1);
    }

    #[test]
    fn counts_sum_across_threads() {
        let s = std::sync::Arc::new(Stats::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.record(Op::Lookup, Instant::now());
                        s.event(Event::LookupMiss);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let snap = s.snapshot();
        assert_eq!(snap.ops[0].0, "LOOKUP");
        assert_eq!(snap.ops[0].1, 4000);
        assert!(snap.events.contains(&("lookup_misses", 4000)));
    }
}
