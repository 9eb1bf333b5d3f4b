//! `size=` and `nr_inodes=` accounting.
//!
//! One atomic operation per request (never per page): a write first computes how many pages
//! it adds, reserves them all at once, and only then touches data, so a write that does not
//! fit fails with `ENOSPC` before anything changes.

use std::sync::atomic::{AtomicU64, Ordering};

use memofs_core::{Errno, Result};

/// Usage counters with their limits (0 = unlimited).
pub struct Limits {
    bytes: AtomicU64,
    bytes_limit: u64,
    inodes: AtomicU64,
    inodes_limit: u64,
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

impl Limits {
    /// New counters at zero.
    pub fn new(bytes_limit: u64, inodes_limit: u64) -> Limits {
        Limits {
            bytes: AtomicU64::new(0),
            bytes_limit,
            inodes: AtomicU64::new(0),
            inodes_limit,
        }
    }

    /// Reserves `n` bytes, or fails with `ENOSPC` leaving usage unchanged.
    pub fn charge_bytes(&self, n: u64) -> Result<()> {
        reserve(&self.bytes, self.bytes_limit, n)
    }

    /// Returns `n` bytes.
    pub fn uncharge_bytes(&self, n: u64) {
        if n != 0 {
            let prev = self.bytes.fetch_sub(n, Ordering::AcqRel);
            debug_assert!(prev >= n, "byte accounting underflow");
        }
    }

    /// Reserves one inode, or fails with `ENOSPC`.
    pub fn charge_inode(&self) -> Result<()> {
        reserve(&self.inodes, self.inodes_limit, 1)
    }

    /// Counts the root inode, which exists whatever the limit.
    pub(crate) fn charge_inode_unchecked(&self) {
        self.inodes.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns one inode.
    pub fn uncharge_inode(&self) {
        self.inodes.fetch_sub(1, Ordering::AcqRel);
    }

    /// Bytes in use.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Byte limit (0 = unlimited).
    pub fn bytes_limit(&self) -> u64 {
        self.bytes_limit
    }

    /// Inodes in use.
    pub fn inodes(&self) -> u64 {
        self.inodes.load(Ordering::Relaxed)
    }

    /// Inode limit (0 = unlimited).
    pub fn inodes_limit(&self) -> u64 {
        self.inodes_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let unlimited = Limits::new(0, 0);
        unlimited.charge_bytes(u64::MAX / 2).unwrap();
    }
}
