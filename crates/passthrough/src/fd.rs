//! Descriptors the backend keeps: the budget they count against, and `/proc/self/fd`.
//!
//! # Descriptor budget
//! The backend keeps one `O_PATH` descriptor per inode the kernel holds a reference to, one
//! descriptor per open file handle and one per open directory handle. Each of those is a
//! [`CountedFd`], counted against [`FdBudget`]. When the budget is spent, cold inode
//! descriptors are closed to make room (see [`crate::pin`]); a request that would exceed a
//! budget nothing can be freed from fails with `ENFILE` instead of taking the process's last
//! descriptors. Short-lived descriptors
//! (a re-open to truncate, a lookup of an inode already known) are not counted: the budget
//! is kept below `RLIMIT_NOFILE` by [`RESERVED_FDS`] to leave room for them, the FUSE
//! device, the watcher and the transport.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use memofs_core::{Errno, Result};

use crate::reaper::Reaper;
use crate::sys;

/// Descriptors kept out of the budget for short-lived use and for the rest of the process.
pub const RESERVED_FDS: usize = 256;

/// Something holding descriptors it can close when asked ([`crate::pin::Pins`]).
pub(crate) trait Evict: Send + Sync {
    /// Closes up to `want` descriptors; returns how many it closed.
    fn evict(&self, want: usize) -> usize;
}

/// Counts the long-lived descriptors against a maximum.
pub(crate) struct FdBudget {
    used: AtomicUsize,
    max: usize,
    /// Where descriptors no longer needed are closed (see [`crate::reaper`]).
    reaper: Reaper<Box<dyn Send>>,
    /// Asked to close descriptors when the budget is spent.
    evictor: OnceLock<Weak<dyn Evict>>,
}

impl FdBudget {
    pub(crate) fn new(max: usize) -> Arc<FdBudget> {
        Arc::new(FdBudget {
            used: AtomicUsize::new(0),
            max,
            reaper: Reaper::start(),
            evictor: OnceLock::new(),
        })
    }

    /// Names what to ask for descriptors when the budget is spent (once).
    pub(crate) fn set_evictor(&self, evictor: Weak<dyn Evict>) {
        let _ = self.evictor.set(evictor);
    }

    /// Counts `fd`. When the budget is spent, first closes what waits to be closed, then
    /// asks the evictor to close a batch of cold descriptors (a batch, so that a stream of
    /// new inodes does not evict on every request); fails with `ENFILE`, closing `fd`, only
    /// when nothing could be freed.
    pub(crate) fn keep(self: &Arc<Self>, fd: OwnedFd) -> Result<CountedFd> {
        if !self.take_slot() {
            self.reaper.drain_now();
            while !self.take_slot() {
                let evictor = self.evictor.get().and_then(Weak::upgrade);
                let batch = (self.max / 64).max(16);
                if evictor.is_none_or(|e| e.evict(batch) == 0) {
                    return Err(Errno::ENFILE);
                }
            }
        }
        Ok(CountedFd {
            fd,
            budget: self.clone(),
        })
    }

    fn take_slot(&self) -> bool {
        if self.used.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.used.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Drops `holder` (something owning [`CountedFd`]s) on the reaper thread: closing a
    /// descriptor can cost the request thread most of a FORGET (see [`crate::reaper`]).
    pub(crate) fn close_later(&self, holder: impl Send + 'static) {
        self.reaper.drop_later(Box::new(holder));
    }

    /// Descriptors currently counted.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The maximum.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// A descriptor counted against an [`FdBudget`]; closing it gives the slot back.
#[derive(Debug)]
pub(crate) struct CountedFd {
    fd: OwnedFd,
    budget: Arc<FdBudget>,
}

impl AsFd for CountedFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl std::fmt::Debug for FdBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdBudget")
            .field("used", &self.used())
            .field("max", &self.max)
            .finish()
    }
}

impl Drop for CountedFd {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `/proc/self/fd`, opened once, for re-opening `O_PATH` descriptors.
///
/// Opening `/proc/self/fd/N` follows a magic link to exactly the inode descriptor `N` pins,
/// wherever its names have moved since: no path is resolved on the host, so a symlink
/// swapped in after the lookup cannot redirect it. Callers re-open only regular files and
/// directories this way (a device or FIFO must never be opened by the server), and only
/// descriptors the backend owns.
///
/// A sandboxed server ([`ProcSelf::confine`]) has no `/proc` under its root: calls that take
/// only a path reach `/proc/self/fd` as the working directory, for the length of the call
/// and under [`CWD`], and the working directory is the sandbox's root again before
/// the lock is let go. At rest, nothing `..` leads from is outside the sandbox but this
/// descriptor itself, which only the backend uses.
#[derive(Debug)]
pub(crate) struct ProcSelf {
    fd_dir: OwnedFd,
    /// The sandbox's root, once the host's paths are gone.
    root: OnceLock<OwnedFd>,
}

/// Held while a thread has borrowed the process's working directory ([`ProcSelf::with_path`]),
/// and while a thread takes a copy of it for its own (`unshare(CLONE_FS)`), so that no copy
/// is taken of a borrowed one. A leaf lock (see the crate's lock order): the working
/// directory is one per process.
pub(crate) static CWD: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

impl ProcSelf {
    pub(crate) fn open() -> std::io::Result<ProcSelf> {
        let fd = sys::at::openat(
            at_fdcwd(),
            c"/proc/self/fd",
            libc::O_PATH | libc::O_DIRECTORY,
        )
        .map_err(std::io::Error::from)?;
        Ok(ProcSelf {
            fd_dir: fd,
            root: OnceLock::new(),
        })
    }

    /// The process's root is now a sandbox's (with no `/proc`), and its working directory
    /// that root: calls that take only a path go through [`ProcSelf::with_path`]'s
    /// borrowed working directory from now on.
    pub(crate) fn confine(&self) -> std::io::Result<()> {
        let root = sys::at::openat(at_fdcwd(), c"/", libc::O_PATH | libc::O_DIRECTORY)
            .map_err(std::io::Error::from)?;
        sys::io::fchdir(root.as_fd()).map_err(std::io::Error::from)?;
        let _ = self.root.set(root);
        Ok(())
    }

    /// `/proc/self/fd` itself, for `*at()` calls with [`ProcSelf::name`].
    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.fd_dir.as_fd()
    }

    /// The entry naming `fd` inside `/proc/self/fd`.
    pub(crate) fn name(fd: BorrowedFd<'_>) -> CString {
        CString::new(fd.as_raw_fd().to_string()).expect("digits contain no NUL")
    }

    /// Runs `call` with a path to the inode `fd` pins, for calls that take only a path:
    /// `/proc/self/fd/N`, or in a sandbox `N` with `/proc/self/fd` the working directory for
    /// the length of the call (one such call at a time, under [`CWD`]; the sandbox's root is
    /// the working directory again afterwards).
    pub(crate) fn with_path<T>(
        &self,
        fd: BorrowedFd<'_>,
        call: impl FnOnce(&std::ffi::CStr) -> Result<T>,
    ) -> Result<T> {
        let Some(root) = self.root.get() else {
            let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
            return call(&path);
        };
        let _cwd = CWD.lock();
        // With the server's ids: the call may run as a caller who could not enter the root.
        crate::creds::as_server(|| sys::io::fchdir(self.dir()))?;
        // Back to the root when the call returns or unwinds.
        struct Back<'a>(BorrowedFd<'a>);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                if let Err(e) = crate::creds::as_server(|| sys::io::fchdir(self.0)) {
                    // A working directory left outside the sandbox would outlive this call:
                    // a server that cannot enter its own root as itself stops instead.
                    log::error!("passthrough: cannot return to the sandbox's root ({e}): stopping");
                    std::process::abort();
                }
            }
        }
        let _back = Back(root.as_fd());
        call(&Self::name(fd))
    }

    /// A new descriptor for the inode `fd` pins, opened with `flags`.
    pub(crate) fn reopen(&self, fd: BorrowedFd<'_>, flags: i32) -> Result<OwnedFd> {
        // O_NOFOLLOW would stop at the magic link itself; O_CREAT/O_EXCL make no sense here.
        let flags = flags & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL);
        sys::at::openat(self.dir(), &Self::name(fd), flags)
    }
}

/// `AT_FDCWD` as a borrowed descriptor, for the one absolute open at startup.
pub(crate) fn at_fdcwd() -> BorrowedFd<'static> {
    // SAFETY: AT_FDCWD is a sentinel the *at() calls accept in place of a descriptor; it
    // is never closed or used as a real descriptor.
    unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) }
}
