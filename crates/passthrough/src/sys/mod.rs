//! Thin, safe wrappers over the host system calls the backend makes.
//!
//! Wrappers take file descriptors as [`BorrowedFd`](std::os::fd::BorrowedFd) and names as
//! `&CStr` (single path components, already checked by [`crate::name`]) and report failure
//! as the host's errno through [`Errno::last`]. Nothing here builds a host path: the only
//! strings made up are `/proc/self/fd/N` names of descriptors the backend owns
//! ([`crate::fd::ProcSelf`]).
//!
//! - [`at`]: `*at()` calls relative to a directory descriptor or on an `O_PATH` descriptor;
//! - [`io`]: calls on open descriptors (read, write, sync, allocate, list a directory);
//! - [`xattr`]: extended attributes through a `/proc/self/fd/N` path;
//! - [`notify`]: fanotify, inotify, eventfd and poll for the watcher.

pub(crate) mod at;
pub(crate) mod io;
pub(crate) mod notify;
pub(crate) mod xattr;

use std::os::fd::{FromRawFd, OwnedFd};

use memofs_core::{Errno, Result};

/// Return values of system calls that signal failure with -1.
pub(crate) trait SysRet: Copy {
    /// True for the failure value.
    fn failed(self) -> bool;
}

impl SysRet for i32 {
    fn failed(self) -> bool {
        self == -1
    }
}

impl SysRet for i64 {
    fn failed(self) -> bool {
        self == -1
    }
}

impl SysRet for isize {
    fn failed(self) -> bool {
        self == -1
    }
}

/// `Err(errno)` when a system call failed, its return value otherwise.
pub(crate) fn check<T: SysRet>(ret: T) -> Result<T> {
    if ret.failed() {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Retries a call interrupted by a signal.
pub(crate) fn retry_eintr<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    loop {
        match f() {
            Err(Errno(libc::EINTR)) => continue,
            r => return r,
        }
    }
}

/// Takes ownership of the descriptor a successful system call just returned.
pub(crate) fn owned_fd(ret: i64) -> Result<OwnedFd> {
    let fd = check(ret)?;
    let fd = i32::try_from(fd).map_err(|_| Errno::EIO)?;
    // SAFETY: the call succeeded and returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
