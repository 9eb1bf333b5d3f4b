//! `*at()` system calls: relative to a directory descriptor with a single name, or on an
//! `O_PATH` descriptor itself with an empty name and `AT_EMPTY_PATH`.

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use memofs_core::{Errno, Result};

use super::{check, owned_fd, retry_eintr};

/// The empty name that, with `AT_EMPTY_PATH`, makes an `*at()` call act on the descriptor.
pub(crate) const EMPTY: &CStr = c"";

/// How many times `openat2` is retried when the kernel reports a concurrent rename
/// (`EAGAIN` from the `RESOLVE_*` checks).
const OPENAT2_RETRIES: usize = 16;

/// `struct open_how` of `openat2` (libc's is `#[non_exhaustive]`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2` of one name relative to `dir`, with `resolve` restrictions.
pub(crate) fn openat2(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u32 as u64,
        mode: u64::from(mode),
        resolve,
    };
    let mut tries = 0;
    loop {
        // SAFETY: `name` is NUL-terminated, `how` is a valid `struct open_how` whose size is passed,
        // and `dir` is an open descriptor; the kernel reads both buffers only during the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                name.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        match owned_fd(ret) {
            Err(Errno(libc::EAGAIN | libc::EINTR)) if tries < OPENAT2_RETRIES => tries += 1,
            r => return r,
        }
    }
}

/// `open_tree(dir, "", OPEN_TREE_CLONE | AT_RECURSIVE)`: a detached copy of the mount tree
/// at `dir` (its submounts included), as an `O_PATH` descriptor of its root. Needs
/// `CAP_SYS_ADMIN` (Linux 5.2).
pub(crate) fn clone_mount(dir: BorrowedFd<'_>) -> Result<OwnedFd> {
    memofs_core::mount_api::clone_tree(dir, true).map_err(Errno::from)
}

/// `mount_setattr(dir, "", AT_EMPTY_PATH | AT_RECURSIVE)` with `MOUNT_ATTR_RDONLY`: the
/// mount at `dir` and every mount below it read-only (for a detached copy,
/// [`clone_mount`], the copy only), and with `private` no longer receiving mounts made
/// elsewhere. Needs `CAP_SYS_ADMIN` over the mount (Linux 5.12).
pub fn make_read_only(dir: BorrowedFd<'_>, private: bool) -> Result<()> {
    let propagation = if private { libc::MS_PRIVATE } else { 0 };
    memofs_core::mount_api::set_attrs(dir, (libc::MOUNT_ATTR_RDONLY, 0), propagation, true)
        .map_err(Errno::from)
}

/// The mount `dir` is on (its id, as in `/proc/self/mountinfo`) and whether `dir` is that
/// mount's root; `None` if the kernel does not say (before Linux 5.8).
pub(crate) fn mount_of(dir: BorrowedFd<'_>) -> Option<(u64, bool)> {
    let st = statx_mask(dir, EMPTY, libc::STATX_MNT_ID).ok()?;
    let root_known = st.stx_attributes_mask & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    let is_root = st.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    (st.stx_mask & libc::STATX_MNT_ID != 0 && root_known).then_some((st.stx_mnt_id, is_root))
}

/// Plain `openat` (no `RESOLVE_*` restrictions): only for `/proc/self/fd/N` re-opens and
/// for walking `..` while checking confinement.
pub(crate) fn openat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> Result<OwnedFd> {
    retry_eintr(|| {
        // SAFETY: `name` is NUL-terminated and `dir` is open; no mode is needed without
        // `O_CREAT`.
        let ret = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
        owned_fd(i64::from(ret))
    })
}

/// `statx` of `name` in `dir` (or of `dir` itself when `name` is empty), never following a
/// symlink.
pub(crate) fn statx(dir: BorrowedFd<'_>, name: &CStr) -> Result<libc::statx> {
    statx_mask(dir, name, libc::STATX_BASIC_STATS | libc::STATX_BTIME)
}

/// [`statx`] asking for the fields in `mask`.
fn statx_mask(dir: BorrowedFd<'_>, name: &CStr, mask: u32) -> Result<libc::statx> {
    let mut st = MaybeUninit::<libc::statx>::uninit();
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_STATX_SYNC_AS_STAT;
    // SAFETY: `name` is NUL-terminated, `dir` is open, and `st` has room for a `statx`.
    check(unsafe { libc::statx(dir.as_raw_fd(), name.as_ptr(), flags, mask, st.as_mut_ptr()) })?;
    // SAFETY: `statx` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `statx` of the object an (`O_PATH`) descriptor refers to.
pub(crate) fn statx_fd(fd: BorrowedFd<'_>) -> Result<libc::statx> {
    statx(fd, EMPTY)
}

/// [`statx_fd`] checked with the filesystem's server where it has one
/// (`AT_STATX_FORCE_SYNC`: a FUSE or network filesystem asks it, whatever it cached).
pub(crate) fn statx_fd_sync(fd: BorrowedFd<'_>) -> Result<libc::statx> {
    let mut st = MaybeUninit::<libc::statx>::uninit();
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC;
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    // SAFETY: `EMPTY` is NUL-terminated, `fd` is open, and `st` has room for a `statx`.
    check(unsafe { libc::statx(fd.as_raw_fd(), EMPTY.as_ptr(), flags, mask, st.as_mut_ptr()) })?;
    // SAFETY: `statx` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `mknodat`.
pub(crate) fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: libc::dev_t) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is open.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

/// `mkdirat`.
pub(crate) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is open.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `symlinkat`: creates `name` in `dir` holding the text `target` (never resolved here).
pub(crate) fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    // SAFETY: both strings are NUL-terminated and `dir` is open.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

/// `unlinkat` (`flags`: 0 or `AT_REMOVEDIR`).
pub(crate) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is open.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat2`.
pub(crate) fn renameat2(
    dir: BorrowedFd<'_>,
    name: &CStr,
    new_dir: BorrowedFd<'_>,
    new_name: &CStr,
    flags: u32,
) -> Result<()> {
    // SAFETY: both names are NUL-terminated and both descriptors are open.
    check(unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            name.as_ptr(),
            new_dir.as_raw_fd(),
            new_name.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// `linkat`.
pub(crate) fn linkat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    new_dir: BorrowedFd<'_>,
    new_name: &CStr,
    flags: i32,
) -> Result<()> {
    // SAFETY: both names are NUL-terminated and both descriptors are open.
    check(unsafe {
        libc::linkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            new_dir.as_raw_fd(),
            new_name.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// The target text of the symlink an `O_PATH` descriptor refers to.
pub(crate) fn readlink_fd(fd: BorrowedFd<'_>) -> Result<Vec<u8>> {
    readlink_at(fd, EMPTY)
}

/// The target text of the symlink `name` in `dir` (the empty name with an `O_PATH`
/// descriptor: that symlink itself).
pub(crate) fn readlink_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>> {
    let mut buf = Vec::<u8>::with_capacity(256);
    loop {
        let cap = buf.capacity();
        // SAFETY: `name` is NUL-terminated; the kernel writes at most `cap` bytes into the
        // buffer's spare capacity.
        let n = check(unsafe {
            libc::readlinkat(dir.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), cap)
        })? as usize;
        if n < cap {
            // SAFETY: the kernel initialised the first `n` bytes.
            unsafe { buf.set_len(n) };
            return Ok(buf);
        }
        if cap >= libc::PATH_MAX as usize * 16 {
            return Err(Errno::ENAMETOOLONG);
        }
        buf.reserve(cap * 2);
    }
}

/// `fchownat(fd, "", .., AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`: changes the owner of the
/// object itself (a symlink's own owner, like `lchown`). `None` leaves an id unchanged.
pub(crate) fn chown_fd(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    let uid = uid.unwrap_or(u32::MAX);
    let gid = gid.unwrap_or(u32::MAX);
    let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: the name is the empty C string and `fd` is open; -1 ids mean "unchanged".
    check(unsafe { libc::fchownat(fd.as_raw_fd(), EMPTY.as_ptr(), uid, gid, flags) }).map(drop)
}

/// `fchmodat(dir, name, mode, 0)`, following the name: used with `/proc/self/fd` and a
/// descriptor number, which lands on the inode an `O_PATH` descriptor pins.
pub(crate) fn chmod_at(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    // SAFETY: `name` is NUL-terminated and `dir` is open.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0) }).map(drop)
}

/// `fchmodat2`'s number: one for every architecture, as for every call since Linux 5.1
/// (`libc` names it on some architectures only).
pub const SYS_FCHMODAT2: libc::c_long = 452;

/// `fchmodat2(fd, "", mode, AT_EMPTY_PATH)` (Linux 6.6+): the mode of the object an
/// `O_PATH` descriptor pins, without a path walk. `ENOSYS` or `EINVAL` where the kernel has
/// no `fchmodat2` or no `AT_EMPTY_PATH` for it.
pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> Result<()> {
    // SAFETY: the name is the empty C string and `fd` is open; fchmodat2 takes
    // (int dirfd, const char *path, mode_t mode, unsigned int flags).
    check(unsafe {
        libc::syscall(
            SYS_FCHMODAT2,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            mode,
            libc::AT_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Whether the kernel has `fchmodat2` with `AT_EMPTY_PATH`, asked without touching a file:
/// on descriptor -1 a kernel that has both answers `EBADF` (flags are checked first: `EINVAL`
/// without `AT_EMPTY_PATH`; `ENOSYS` without the call; seccomp profiles may answer `EPERM`).
pub(crate) fn has_chmod_fd() -> bool {
    // SAFETY: no memory is passed but the empty C string; descriptor -1 is never open.
    let r = unsafe { libc::syscall(SYS_FCHMODAT2, -1, EMPTY.as_ptr(), 0, libc::AT_EMPTY_PATH) };
    r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`: sets the times of the
/// object itself. `UTIME_OMIT` / `UTIME_NOW` go in `tv_nsec`.
pub(crate) fn utimens_fd(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> Result<()> {
    let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: the name is the empty C string, `times` points to two timespecs, `fd` is open.
    check(unsafe { libc::utimensat(fd.as_raw_fd(), EMPTY.as_ptr(), times.as_ptr(), flags) })
        .map(drop)
}

/// Largest file handle asked of `name_to_handle_at` (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// A host file handle: `(handle_type, bytes)`.
pub(crate) type FileHandle = (i32, Vec<u8>);

/// `open_by_handle_at(mount, handle, O_PATH)`: an `O_PATH` descriptor of the object `handle`
/// names on `mount`'s filesystem (needs `CAP_DAC_READ_SEARCH`). `ESTALE` when the object is
/// gone.
pub(crate) fn open_by_handle(
    mount: BorrowedFd<'_>,
    handle_type: i32,
    bytes: &[u8],
) -> Result<OwnedFd> {
    if bytes.len() > MAX_HANDLE_SZ {
        return Err(Errno::EINVAL);
    }
    let header = std::mem::size_of::<libc::file_handle>();
    let mut buf = vec![0u32; (header + MAX_HANDLE_SZ).div_ceil(4)];
    let fh = buf.as_mut_ptr().cast::<libc::file_handle>();
    // SAFETY: `buf` is large enough and aligned for a `file_handle` header followed by
    // `MAX_HANDLE_SZ` bytes; the header and the handle bytes are written before the call
    // reads them.
    let ret = unsafe {
        (*fh).handle_bytes = bytes.len() as u32;
        (*fh).handle_type = handle_type;
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            buf.as_mut_ptr().cast::<u8>().add(header),
            bytes.len(),
        );
        libc::open_by_handle_at(mount.as_raw_fd(), fh, libc::O_PATH | libc::O_CLOEXEC)
    };
    owned_fd(i64::from(ret))
}

/// `name_to_handle_at(fd, "", .., AT_EMPTY_PATH)`: the file handle of the object itself.
pub(crate) fn file_handle(fd: BorrowedFd<'_>) -> Result<FileHandle> {
    let header = std::mem::size_of::<libc::file_handle>();
    // u32 words keep the `file_handle` header aligned.
    let mut buf = vec![0u32; (header + MAX_HANDLE_SZ).div_ceil(4)];
    let fh = buf.as_mut_ptr().cast::<libc::file_handle>();
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `buf` is large enough and aligned for a `file_handle` header followed by
    // `MAX_HANDLE_SZ` bytes; the header is written before the call reads it.
    let (ty, len) = unsafe {
        (*fh).handle_bytes = MAX_HANDLE_SZ as u32;
        check(libc::name_to_handle_at(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            fh,
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        ))?;
        ((*fh).handle_type, (*fh).handle_bytes as usize)
    };
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok((ty, bytes[header..header + len.min(MAX_HANDLE_SZ)].to_vec()))
}
