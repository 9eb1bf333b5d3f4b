//! `size=` and `nr_inodes=` accounting.
//!
//! Never per page: a write first computes how many pages it adds, reserves them all at once,
//! and only then touches data, so a write that does not fit fails with `ENOSPC` before
//! anything changes.
//!
//! Bytes are counted like the kernel's per-CPU counters: each request thread draws on a
//! reserve of its own (one cache line per shard, so threads do not bounce a shared line),
//! taken from the global count in batches of [`BATCH`] bytes and handed back when it grows
//! past two batches. The global count includes the reserves, so it can never pass the limit.
//! Near the limit (less than a batch per shard left) nothing is reserved ahead: charges go to
//! the global count exactly, and before failing with `ENOSPC` every shard's reserve is
//! returned, so a request fails only if the bytes really are in use.
//!
//! Whatever `size=` says, a charge also needs room on the machine ([`crate::machine`]),
//! checked whenever a thread takes bytes from the global count, so that a request for more
//! than the machine holds fails before anything is allocated.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use memofs_core::{Errno, Result};

use crate::machine::Machine;

/// Bytes a shard takes from the global count at a time.
pub const BATCH: u64 = 4 << 20;

/// Number of reserves; threads are spread over them round-robin.
const SHARDS: usize = 16;

/// One shard's reserve, alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
struct Reserve(AtomicU64);

/// Usage counters with their limits (0 = unlimited).
pub struct Limits {
    /// Bytes in use plus every shard's reserve.
    bytes: AtomicU64,
    bytes_limit: AtomicU64,
    reserves: [Reserve; SHARDS],
    inodes: AtomicU64,
    inodes_limit: AtomicU64,
    machine: Machine,
}

fn reserve(counter: &AtomicU64, limit: u64, n: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            let new = used.checked_add(n)?;
            (limit == 0 || new <= limit).then_some(new)
        })
        .map(|_| ())
        .map_err(|_| Errno::ENOSPC)
}

/// The calling thread's shard.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: Cell<Option<usize>> = const { Cell::new(None) });
    SHARD.with(|s| {
        s.get().unwrap_or_else(|| {
            let n = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(Some(n));
            n
        })
    })
}

impl Limits {
    /// New counters at zero, bounded by this machine's memory besides the limits.
    pub fn new(bytes_limit: u64, inodes_limit: u64) -> Limits {
        Limits::with_machine(bytes_limit, inodes_limit, Machine::system())
    }

    /// New counters at zero, bounded by `machine` besides the limits.
    pub fn with_machine(bytes_limit: u64, inodes_limit: u64, machine: Machine) -> Limits {
        Limits {
            bytes: AtomicU64::new(0),
            bytes_limit: AtomicU64::new(bytes_limit),
            reserves: Default::default(),
            inodes: AtomicU64::new(0),
            inodes_limit: AtomicU64::new(inodes_limit),
            machine,
        }
    }

    /// The machine's room, which bounds every charge.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Reserves `n` bytes, or fails with `ENOSPC` leaving usage unchanged.
    pub fn charge_bytes(&self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mine = &self.reserves[shard()].0;
        if mine
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(n))
            .is_ok()
        {
            return Ok(());
        }
        // Take a batch ahead only while there is room for every shard to do the same.
        let limit = self.bytes_limit();
        let roomy =
            limit == 0 || self.bytes.load(Ordering::Relaxed) + (SHARDS as u64 + 1) * BATCH <= limit;
        if roomy
            && self.machine.take(n + BATCH).is_ok()
            && reserve(&self.bytes, limit, n + BATCH).is_ok()
        {
            mine.fetch_add(BATCH, Ordering::AcqRel);
            return Ok(());
        }
        self.machine.take(n)?;
        if reserve(&self.bytes, limit, n).is_ok() {
            return Ok(());
        }
        self.return_reserves();
        reserve(&self.bytes, limit, n)
    }

    /// Gives every shard's reserve back to the global count.
    fn return_reserves(&self) {
        for r in &self.reserves {
            let held = r.0.swap(0, Ordering::AcqRel);
            if held != 0 {
                self.bytes.fetch_sub(held, Ordering::AcqRel);
            }
        }
    }

    /// Returns `n` bytes.
    pub fn uncharge_bytes(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mine = &self.reserves[shard()].0;
        let held = mine.fetch_add(n, Ordering::AcqRel) + n;
        if held > 2 * BATCH {
            // Keep one batch; the rest goes back where every thread can have it.
            if let Ok(prev) = mine.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                r.checked_sub(BATCH + 1).map(|_| BATCH)
            }) {
                let prev_global = self.bytes.fetch_sub(prev - BATCH, Ordering::AcqRel);
                debug_assert!(prev_global >= prev - BATCH, "byte accounting underflow");
            }
        }
    }

    /// Reserves one inode, or fails with `ENOSPC`.
    pub fn charge_inode(&self) -> Result<()> {
        reserve(&self.inodes, self.inodes_limit(), 1)
    }

    /// Counts the root inode, which exists whatever the limit.
    pub(crate) fn charge_inode_unchecked(&self) {
        self.inodes.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns one inode.
    pub fn uncharge_inode(&self) {
        self.inodes.fetch_sub(1, Ordering::AcqRel);
    }

    /// Bytes in use (exact when no charge is under way).
    pub fn bytes(&self) -> u64 {
        let reserved: u64 = self
            .reserves
            .iter()
            .map(|r| r.0.load(Ordering::Acquire))
            .sum();
        self.bytes.load(Ordering::Acquire).saturating_sub(reserved)
    }

    /// Byte limit (0 = unlimited).
    pub fn bytes_limit(&self) -> u64 {
        self.bytes_limit.load(Ordering::Relaxed)
    }

    /// Inodes in use.
    pub fn inodes(&self) -> u64 {
        self.inodes.load(Ordering::Relaxed)
    }

    /// Inode limit (0 = unlimited).
    pub fn inodes_limit(&self) -> u64 {
        self.inodes_limit.load(Ordering::Relaxed)
    }

    /// New limits for a live filesystem (0 = unlimited), refused, as tmpfs refuses them,
    /// below what is in use; a charge racing with the change is checked against the old
    /// limit or the new one.
    pub fn set_limits(
        &self,
        bytes_limit: u64,
        inodes_limit: u64,
    ) -> std::result::Result<(), String> {
        self.return_reserves();
        let (bytes, inodes) = (self.bytes(), self.inodes());
        if bytes_limit != 0 && bytes > bytes_limit {
            return Err(format!(
                "size={bytes_limit} is below the {bytes} bytes in use"
            ));
        }
        if inodes_limit != 0 && inodes > inodes_limit {
            return Err(format!(
                "nr_inodes={inodes_limit} is below the {inodes} inodes in use"
            ));
        }
        self.bytes_limit.store(bytes_limit, Ordering::Relaxed);
        self.inodes_limit.store(inodes_limit, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn reservations_fail_whole_and_leave_usage_alone() {
        let l = Limits::new(10, 1);
        l.charge_bytes(8).unwrap();
        assert_eq!(l.charge_bytes(3), Err(Errno::ENOSPC));
        assert_eq!(l.bytes(), 8);
        l.charge_bytes(2).unwrap();
        l.uncharge_bytes(10);
        assert_eq!(l.bytes(), 0);
        l.charge_inode().unwrap();
        assert_eq!(l.charge_inode(), Err(Errno::ENOSPC));
        let unlimited = Limits::with_machine(0, 0, Machine::fixed(u64::MAX / 2 + BATCH));
        unlimited.charge_bytes(u64::MAX / 2).unwrap();
    }

    #[test]
    fn the_machine_bounds_charges_with_or_without_a_limit() {
        for limit in [0, 1 << 50] {
            let l = Limits::with_machine(limit, 0, Machine::fixed(64 << 20));
            assert_eq!(l.charge_bytes(1 << 50), Err(Errno::ENOSPC), "limit {limit}");
            assert_eq!(l.bytes(), 0, "a refused charge takes nothing");
            l.charge_bytes(1 << 20).unwrap();
            assert_eq!(l.charge_bytes(65 << 20), Err(Errno::ENOSPC));
            assert_eq!(l.bytes(), 1 << 20);
        }
    }

    #[test]
    fn reserves_are_batched_and_counted_exactly() {
        let l = Limits::new(0, 0);
        l.charge_bytes(4096).unwrap();
        // One batch went to this thread's reserve; usage is still exact.
        assert_eq!(l.bytes.load(Ordering::Relaxed), 4096 + BATCH);
        assert_eq!(l.bytes(), 4096);
        for _ in 0..100 {
            l.charge_bytes(4096).unwrap();
        }
        assert_eq!(l.bytes(), 101 * 4096);
        // Freeing a lot hands all but one batch back to the global count.
        l.uncharge_bytes(101 * 4096);
        l.charge_bytes(3 * BATCH).unwrap();
        l.uncharge_bytes(3 * BATCH);
        assert_eq!(l.bytes(), 0);
        assert!(l.bytes.load(Ordering::Relaxed) <= 2 * BATCH);
    }

    #[test]
    fn reserves_held_by_other_threads_do_not_cause_enospc() {
        // Room for the batches of a few shards only: every thread must be able to use the
        // whole limit once the others are idle.
        let limit = 4 * BATCH;
        let l = Arc::new(Limits::new(limit, 0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    l.charge_bytes(4096).unwrap();
                    l.uncharge_bytes(4096);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        l.charge_bytes(limit).unwrap();
        assert_eq!(l.bytes(), limit);
        assert_eq!(l.charge_bytes(1), Err(Errno::ENOSPC));
        l.uncharge_bytes(limit);
        assert_eq!(l.bytes(), 0);
    }

    #[test]
    fn concurrent_charges_never_pass_the_limit() {
        let limit = 64 * BATCH;
        let l = Arc::new(Limits::new(limit, 0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut held = 0;
                    for k in 0..20_000u64 {
                        let n = 4096 * (1 + (k * 7 + i) % 64);
                        if l.charge_bytes(n).is_ok() {
                            held += n;
                        }
                        if k % 3 == 0 {
                            l.uncharge_bytes(held);
                            held = 0;
                        }
                        assert!(l.bytes.load(Ordering::Relaxed) <= limit);
                    }
                    l.uncharge_bytes(held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(l.bytes(), 0);
    }
}
