//! Programs running from the mount.
//!
//! The kernel refuses to let a file it executes be written (ETXTBSY), but it checks an
//! `open(O_RDONLY | O_TRUNC)` only after OPEN has returned, and under FUSE_ATOMIC_O_TRUNC the
//! backend truncates during OPEN: without a check here the running program's text would be
//! gone before the kernel refused the open. So the request layer counts the opens the kernel
//! makes to execute a file (`__FMODE_EXEC` in OPEN's flags, also a script's interpreter and
//! an ELF program's loader) until their RELEASE, and answers a truncating read-only open of
//! such a file ETXTBSY, as the kernel would have, before the backend sees it.
//!
//! Opens for writing are not checked here: the kernel refuses them before it sends OPEN, and
//! an exec open's RELEASE may arrive after its process has ended and the kernel lets writers
//! in again. The exec opens move with a VM's live migration ([`Running::entries`]), as the
//! handles they count do.
//!
//! Lock order: `Running::inner` is a leaf (nothing else is locked while it is held).

use std::collections::HashMap;

use memofs_core::Ino;
use parking_lot::Mutex;

/// Linux's `__FMODE_EXEC`, in the flags of an OPEN made to load a program.
pub(crate) const FMODE_EXEC: i32 = 0x20;

/// The exec opens not yet released.
#[derive(Default)]
pub(crate) struct Running {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Exec opens per handle (a backend may give every open of an inode the same handle).
    handles: HashMap<(Ino, u64), u32>,
    /// Exec opens per inode.
    inodes: HashMap<Ino, u32>,
}

impl Running {
    /// Whether OPEN `flags` ask to execute the file.
    pub(crate) fn is_exec(flags: i32) -> bool {
        flags & FMODE_EXEC != 0
    }

    /// Whether an OPEN with `flags` must be refused (ETXTBSY) for `ino`: it truncates without
    /// asking for write access (the kernel checks that after OPEN) and `ino` is running.
    pub(crate) fn refuses(&self, ino: Ino, flags: i32) -> bool {
        flags & libc::O_TRUNC != 0
            && flags & libc::O_ACCMODE == libc::O_RDONLY
            && self.inner.lock().inodes.contains_key(&ino)
    }

    /// An exec open of `ino` was answered with handle `fh`.
    pub(crate) fn opened(&self, ino: Ino, fh: u64) {
        let mut inner = self.inner.lock();
        *inner.handles.entry((ino, fh)).or_default() += 1;
        *inner.inodes.entry(ino).or_default() += 1;
    }

    /// Every handle with exec opens, and how many: (inode, handle, count).
    pub(crate) fn entries(&self) -> Vec<(Ino, u64, u32)> {
        let inner = self.inner.lock();
        inner
            .handles
            .iter()
            .map(|(&(ino, fh), &n)| (ino, fh, n))
            .collect()
    }

    /// Takes on `entries` (from [`Running::entries`] of the server a VM moved from).
    pub(crate) fn restore(&self, entries: &[(Ino, u64, u32)]) {
        for &(ino, fh, n) in entries {
            for _ in 0..n {
                self.opened(ino, fh);
            }
        }
    }

    /// Handle `fh` of `ino` was released: if it was an exec open, one fewer is running.
    pub(crate) fn released(&self, ino: Ino, fh: u64) {
        let mut inner = self.inner.lock();
        if decrement(&mut inner.handles, (ino, fh)) {
            decrement(&mut inner.inodes, ino);
        }
    }
}

/// Takes one from `key`'s count, dropping it at zero; false if `key` had none.
fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> bool {
    let Some(n) = map.get_mut(&key) else {
        return false;
    };
    *n -= 1;
    if *n == 0 {
        map.remove(&key);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRUNC_RO: i32 = libc::O_RDONLY | libc::O_TRUNC;

    #[test]
    fn a_running_file_refuses_truncating_read_only_opens_until_released() {
        let r = Running::default();
        assert!(!r.refuses(5, TRUNC_RO));
        r.opened(5, 1);
        r.opened(5, 1);
        r.opened(5, 2);
        assert!(r.refuses(5, TRUNC_RO));
        assert!(!r.refuses(6, TRUNC_RO), "another inode");
        assert!(!r.refuses(5, libc::O_RDONLY), "no truncation");
        assert!(
            !r.refuses(5, libc::O_WRONLY | libc::O_TRUNC),
            "the kernel checks writers itself"
        );
        r.released(5, 3);
        r.released(5, 1);
        r.released(5, 2);
        assert!(r.refuses(5, TRUNC_RO), "one exec open of handle 1 is left");
        r.released(5, 1);
        assert!(!r.refuses(5, TRUNC_RO));
        r.released(5, 1);
        assert!(r.inner.lock().inodes.is_empty() && r.inner.lock().handles.is_empty());
    }

    #[test]
    fn exec_opens_are_told_by_their_flags() {
        assert!(Running::is_exec(0x8020));
        assert!(!Running::is_exec(libc::O_RDONLY | libc::O_LARGEFILE));
    }
}
