//! Open file and directory handles: the `fh` numbers the kernel passes back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use memofs_core::{Errno, Ino, Result};
use parking_lot::RwLock;

use crate::fd::CountedFd;
use crate::inode::OpenPin;

/// An open regular file.
#[derive(Debug)]
pub(crate) struct OpenFile {
    /// The inode it was opened through.
    pub ino: Ino,
    /// A real (not `O_PATH`) descriptor of the host file: opened with the handle, or, for
    /// a deferred open, by the first request that needs it
    /// ([`crate::PassthroughFs::host_fd`]).
    pub fd: OnceLock<CountedFd>,
    /// The flags the host file is (or is to be) opened with.
    pub flags: i32,
    /// Keeps the inode's own descriptor open while the file is.
    pub _pin: OpenPin,
}

impl OpenFile {
    /// A handle of `pin`'s inode whose host file is `fd`, or, without one, is opened with
    /// `flags` when first needed.
    pub(crate) fn new(pin: OpenPin, fd: Option<CountedFd>, flags: i32) -> OpenFile {
        OpenFile {
            ino: pin.ino(),
            fd: fd.map(OnceLock::from).unwrap_or_default(),
            flags,
            _pin: pin,
        }
    }

    /// Opened for writing (a truncate can go through it).
    pub(crate) fn writable(&self) -> bool {
        writes(self.flags)
    }
}

/// Whether open flags `flags` open for writing.
pub(crate) fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// `fh` → handle. Requests clone the `Arc` and drop the lock before any system call, so a
/// `release` racing with a read closes the descriptor only after the read finishes.
pub(crate) struct HandleTable<T> {
    map: RwLock<HashMap<u64, Arc<T>>>,
    /// Handles a guest holds that a migration could not open again here (a leaf lock, taken
    /// after `map`).
    lost: RwLock<HashSet<u64>>,
    next: AtomicU64,
}

impl<T> HandleTable<T> {
    pub(crate) fn new() -> Self {
        HandleTable {
            map: RwLock::new(HashMap::new()),
            lost: RwLock::new(HashSet::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Stores `handle`; returns its new `fh` (never 0, which stands for no handle, and
    /// never reused while the backend lives).
    pub(crate) fn insert(&self, handle: T) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.write().insert(fh, Arc::new(handle));
        fh
    }

    /// Stores `handle` as `fh` (a handle another server gave out: live migration);
    /// `EEXIST` if `fh` is taken, `EINVAL` for 0. Later handles are numbered after it.
    pub(crate) fn insert_at(&self, fh: u64, handle: T) -> Result<()> {
        if fh == 0 {
            return Err(Errno::EINVAL);
        }
        let mut map = self.map.write();
        if map.contains_key(&fh) {
            return Err(Errno::EEXIST);
        }
        map.insert(fh, Arc::new(handle));
        self.next.fetch_max(fh + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Every handle with its `fh`, in `fh` order (a snapshot).
    pub(crate) fn entries(&self) -> Vec<(u64, Arc<T>)> {
        let mut all: Vec<_> = self
            .map
            .read()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        all.sort_unstable_by_key(|(fh, _)| *fh);
        all
    }

    /// The next `fh` to be given out.
    pub(crate) fn next_fh(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Gives out no `fh` below `next` from now on.
    pub(crate) fn skip_to(&self, next: u64) {
        self.next.fetch_max(next, Ordering::Relaxed);
    }

    /// The handle `fh`; `EIO` for one a migration lost, `EBADF` if unknown.
    pub(crate) fn get(&self, fh: u64) -> Result<Arc<T>> {
        match self.map.read().get(&fh) {
            Some(h) => Ok(h.clone()),
            None if self.lost.read().contains(&fh) => Err(Errno::EIO),
            None => Err(Errno::EBADF),
        }
    }

    /// Lets go of `fh` (a RELEASE); `EBADF` if unknown.
    pub(crate) fn release(&self, fh: u64) -> Result<()> {
        match self.map.write().remove(&fh) {
            Some(_) => Ok(()),
            None if self.lost.write().remove(&fh) => Ok(()),
            None => Err(Errno::EBADF),
        }
    }

    /// A handle the guest holds that a migration could not open again here: it answers
    /// `EIO` until released. `EEXIST` if `fh` is taken.
    pub(crate) fn insert_lost(&self, fh: u64) -> Result<()> {
        if fh == 0 || self.map.read().contains_key(&fh) {
            return Err(Errno::EEXIST);
        }
        if !self.lost.write().insert(fh) {
            return Err(Errno::EEXIST);
        }
        self.next.fetch_max(fh + 1, Ordering::Relaxed);
        Ok(())
    }

    /// The handles lost in a migration, in `fh` order.
    pub(crate) fn lost(&self) -> Vec<u64> {
        let mut lost: Vec<u64> = self.lost.read().iter().copied().collect();
        lost.sort_unstable();
        lost
    }

    /// Removes every handle (they close once requests using them are done).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.map.write());
        self.lost.write().clear();
        drop(all);
    }

    /// Open handles.
    pub(crate) fn len(&self) -> usize {
        self.map.read().len()
    }
}
