//! fanotify, inotify, eventfd and poll: what the host-change watcher is built from.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use memofs_core::Result;

use super::{check, owned_fd, retry_eintr};

/// `fanotify_init(flags, O_RDONLY | O_CLOEXEC)`.
pub(crate) fn fanotify_init(flags: u32) -> Result<OwnedFd> {
    // SAFETY: plain call with integer arguments.
    let ret = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as u32) };
    owned_fd(i64::from(ret))
}

/// `fanotify_mark` of the object `name` names relative to `dir` (followed: used with
/// `/proc/self/fd` and a descriptor number).
pub(crate) fn fanotify_mark(
    fan: BorrowedFd<'_>,
    flags: u32,
    mask: u64,
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and both descriptors are open.
    check(unsafe {
        libc::fanotify_mark(fan.as_raw_fd(), flags, mask, dir.as_raw_fd(), name.as_ptr())
    })
    .map(drop)
}

/// `inotify_init1(IN_NONBLOCK | IN_CLOEXEC)`.
pub(crate) fn inotify_init() -> Result<OwnedFd> {
    // SAFETY: plain call with integer arguments.
    let ret = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    owned_fd(i64::from(ret))
}

/// `inotify_add_watch(fd, path, mask)`; returns the watch descriptor.
pub(crate) fn inotify_add_watch(fd: BorrowedFd<'_>, path: &CStr, mask: u32) -> Result<i32> {
    // SAFETY: `path` is NUL-terminated and `fd` is open.
    check(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) })
}

/// `inotify_rm_watch(fd, wd)`.
pub(crate) fn inotify_rm_watch(fd: BorrowedFd<'_>, wd: i32) -> Result<()> {
    // SAFETY: plain call on an open descriptor.
    check(unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), wd) }).map(drop)
}

/// A non-blocking `eventfd`, used to wake and stop the watcher thread.
pub(crate) fn eventfd() -> Result<OwnedFd> {
    // SAFETY: plain call with integer arguments.
    let ret = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    owned_fd(i64::from(ret))
}

/// Adds one to an eventfd's counter, making it readable.
pub(crate) fn eventfd_signal(fd: BorrowedFd<'_>) -> Result<()> {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of `one`, as eventfd requires.
    check(unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) }).map(drop)
}

/// Waits until one of `fds` is readable, or `timeout_ms` passed (-1: no timeout); returns
/// which are ready.
pub(crate) fn poll<const N: usize>(fds: [BorrowedFd<'_>; N], timeout_ms: i32) -> Result<[bool; N]> {
    let mut polled = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    retry_eintr(|| {
        // SAFETY: `polled` holds N valid `pollfd`s.
        check(unsafe { libc::poll(polled.as_mut_ptr(), N as libc::nfds_t, timeout_ms) })
    })?;
    Ok(polled.map(|p| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0))
}

/// `read` into `buf`; returns the bytes read (0 when a non-blocking descriptor is empty).
pub(crate) fn read_events(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize> {
    let read = retry_eintr(|| {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        check(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
    });
    match read {
        Ok(n) => Ok(n as usize),
        Err(memofs_core::Errno::EAGAIN) => Ok(0),
        Err(e) => Err(e),
    }
}
