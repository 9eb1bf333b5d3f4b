//! System calls on open descriptors: data I/O, syncing, allocation, seeking, listing.

use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use memofs_core::{Errno, Result};

use super::{check, retry_eintr};

fn offset(off: u64) -> Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| Errno::EINVAL)
}

/// `pread` of up to `size` bytes at `off` into `buf`, which is cleared first. Short at end
/// of file; loops over partial reads until `size` bytes or end of file.
pub(crate) fn pread(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, size: usize, off: u64) -> Result<()> {
    buf.clear();
    buf.reserve(size);
    while buf.len() < size {
        let done = buf.len();
        let at = offset(off + done as u64)?;
        let spare = buf.spare_capacity_mut();
        let want = (size - done).min(spare.len());
        let n = retry_eintr(|| {
            // SAFETY: the kernel writes at most `want` bytes into the spare capacity, which
            // holds at least that many.
            check(unsafe { libc::pread(fd.as_raw_fd(), spare.as_mut_ptr().cast(), want, at) })
        })? as usize;
        if n == 0 {
            break;
        }
        // SAFETY: the kernel initialised `n` more bytes after the current length.
        unsafe { buf.set_len(done + n) };
    }
    Ok(())
}

/// `pwrite` of `data` at `off` (for `O_APPEND` descriptors Linux appends instead). Returns
/// the bytes written, which may be short (for example on `ENOSPC` after a partial write).
pub(crate) fn pwrite(fd: BorrowedFd<'_>, data: &[u8], off: u64) -> Result<usize> {
    let at = offset(off)?;
    retry_eintr(|| {
        // SAFETY: the kernel reads `data.len()` bytes from `data`.
        check(unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), at) })
            .map(|n| n as usize)
    })
}

/// `fsync`, or `fdatasync` with `datasync`.
pub(crate) fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> Result<()> {
    retry_eintr(|| {
        // SAFETY: plain calls on an open descriptor.
        let ret = unsafe {
            if datasync {
                libc::fdatasync(fd.as_raw_fd())
            } else {
                libc::fsync(fd.as_raw_fd())
            }
        };
        check(ret).map(drop)
    })
}

/// `ftruncate`.
pub(crate) fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> Result<()> {
    let size = offset(size)?;
    retry_eintr(|| {
        // SAFETY: plain call on an open descriptor.
        check(unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
    })
}

/// `fallocate`.
pub(crate) fn fallocate(fd: BorrowedFd<'_>, mode: i32, off: u64, len: u64) -> Result<()> {
    let (off, len) = (offset(off)?, offset(len)?);
    retry_eintr(|| {
        // SAFETY: plain call on an open descriptor.
        check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }).map(drop)
    })
}

/// `lseek`; returns the new offset.
pub(crate) fn lseek(fd: BorrowedFd<'_>, off: u64, whence: i32) -> Result<u64> {
    let off = offset(off)?;
    // SAFETY: plain call on an open descriptor.
    let pos = check(unsafe { libc::lseek(fd.as_raw_fd(), off, whence) })?;
    Ok(pos as u64)
}

/// `copy_file_range` between two descriptors at explicit offsets; returns bytes copied.
pub(crate) fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: u64,
) -> Result<u64> {
    let mut off_in = offset(off_in)?;
    let mut off_out = offset(off_out)?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    retry_eintr(|| {
        // SAFETY: both offsets point to live `off_t`s the kernel updates; both descriptors
        // are open.
        let n = check(unsafe {
            libc::syscall(
                libc::SYS_copy_file_range,
                fd_in.as_raw_fd(),
                &mut off_in as *mut libc::off_t,
                fd_out.as_raw_fd(),
                &mut off_out as *mut libc::off_t,
                len,
                0u32,
            )
        })?;
        Ok(n as u64)
    })
}

/// `ioctl(FS_IOC_GETFLAGS)`: the inode flags (`lsattr`).
pub(crate) fn get_flags(fd: BorrowedFd<'_>) -> Result<u32> {
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer; `fd` is open.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) })?;
    Ok(flags as u32)
}

/// `ioctl(FS_IOC_SETFLAGS)` (`chattr`).
pub(crate) fn set_flags(fd: BorrowedFd<'_>, flags: u32) -> Result<()> {
    let flags = flags as libc::c_int;
    // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer; `fd` is open.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) }).map(drop)
}

/// `fstatfs` (works on `O_PATH` descriptors).
pub(crate) fn fstatfs(fd: BorrowedFd<'_>) -> Result<libc::statfs> {
    let mut st = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` has room for a `statfs`; `fd` is open.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: `fstatfs` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The atime rule of the mount `fd` is on, as `fstatvfs`'s flags show it.
pub(crate) fn atime_rule(fd: BorrowedFd<'_>) -> Option<memofs_core::AtimePolicy> {
    use memofs_core::atime::AtimeMode;
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `st` has room for a `statvfs`; `fd` is open.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) }).ok()?;
    // SAFETY: `fstatvfs` succeeded, so it filled `st`.
    let flags = unsafe { st.assume_init() }.f_flag;
    let mode = if flags & libc::ST_NOATIME != 0 {
        AtimeMode::Noatime
    } else if flags & libc::ST_RELATIME != 0 {
        AtimeMode::Relatime
    } else {
        AtimeMode::Strict
    };
    Some(memofs_core::AtimePolicy {
        mode,
        nodiratime: flags & libc::ST_NODIRATIME != 0,
    })
}

/// Closes a duplicate of `fd` and returns what that close reported (`close(dup(fd))`, as a
/// FLUSH asks: the host filesystem's close-time errors, with `fd` itself left open).
pub(crate) fn close_dup(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: F_DUPFD_CLOEXEC on an open descriptor; the new one is checked, then owned
    // by nobody but this function, which closes it once.
    let dup = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: `dup` is the descriptor just made; it is closed here and never used again
    // (a close that fails still releases the descriptor on Linux).
    check(unsafe { libc::close(dup) }).map(drop)
}

/// `getdents64` into `buf`; returns the bytes filled (0 at the end of the directory).
pub(crate) fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize> {
    retry_eintr(|| {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = check(unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        })?;
        Ok(n as usize)
    })
}

/// `syncfs`: everything written to the filesystem that `fd` is on is made durable.
pub(crate) fn syncfs(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: syncfs only reads the descriptor number; a bad one fails with EBADF.
    retry_eintr(|| check(unsafe { libc::syncfs(fd.as_raw_fd()) })).map(|_| ())
}

/// `fchdir`: the process's working directory becomes the directory `fd` refers to (an
/// `O_PATH` descriptor will do).
pub(crate) fn fchdir(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: fchdir only reads the descriptor number; a bad one fails with EBADF.
    check(unsafe { libc::fchdir(fd.as_raw_fd()) }).map(|_| ())
}

/// `fcntl(F_GETFL)`: the open file's access mode and status flags.
pub(crate) fn status_flags(fd: BorrowedFd<'_>) -> Result<i32> {
    // SAFETY: F_GETFL takes no argument and reads only the descriptor's flags.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })
}
