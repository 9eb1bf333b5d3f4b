//! `io::Result` wrappers over the Linux syscalls the tests need and std lacks.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::Path;

/// An errno value.
pub type Errno = i32;

/// `path` as a C string (panics on interior NUL, which test paths never have).
pub fn cpath(p: impl AsRef<Path>) -> CString {
    CString::new(p.as_ref().as_os_str().as_bytes()).expect("path with NUL")
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("string with NUL")
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// The errno of an error (-1 when it carries none).
pub fn errno_of(e: &io::Error) -> Errno {
    e.raw_os_error().unwrap_or(-1)
}

/// `Ok(v)` → `Ok(v)`, `Err(e)` → `Err(errno)`: for comparing outcomes.
pub fn outcome<T>(r: io::Result<T>) -> Result<T, Errno> {
    r.map_err(|e| errno_of(&e))
}

/// The symbolic name of an errno, for messages.
pub fn errno_name(e: Errno) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EDQUOT => "EDQUOT",
        -1 => "no errno",
        _ => return format!("errno {e}"),
    };
    n.to_string()
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)`.
pub fn renameat2(from: impl AsRef<Path>, to: impl AsRef<Path>, flags: u32) -> io::Result<()> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags as libc::c_uint,
        )
    };
    check(r as libc::c_int).map(drop)
}

/// `setxattr` (follows symlinks).
pub fn setxattr(p: impl AsRef<Path>, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let (p, n) = (cpath(p), cstr(name));
    // SAFETY: the path and name are CStrings and `value` a live slice, all alive for the call.
    check(unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `lsetxattr` (does not follow symlinks).
pub fn lsetxattr(p: impl AsRef<Path>, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let (p, n) = (cpath(p), cstr(name));
    // SAFETY: the path and name are CStrings and `value` a live slice, all alive for the call.
    check(unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `getxattr` into a buffer of exactly `size` bytes; `size == 0` asks for the length and
/// returns an empty vector of that capacity's length in `.1`.
pub fn getxattr_sized(
    p: impl AsRef<Path>,
    name: &str,
    size: usize,
) -> io::Result<(usize, Vec<u8>)> {
    let (p, n) = (cpath(p), cstr(name));
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: CString path and name; `ptr` points to `size` writable bytes (or is null with 0).
    let got = check_size(unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), ptr, size) })?;
    buf.truncate(got.min(size));
    Ok((got, buf))
}

fn get_any(p: &Path, name: &str, follow: bool) -> io::Result<Vec<u8>> {
    let (cp, n) = (cpath(p), cstr(name));
    // SAFETY: CString path and name; `ptr` points to `size` writable bytes (or is null with 0).
    let call = |ptr: *mut libc::c_void, size: usize| unsafe {
        if follow {
            libc::getxattr(cp.as_ptr(), n.as_ptr(), ptr, size)
        } else {
            libc::lgetxattr(cp.as_ptr(), n.as_ptr(), ptr, size)
        }
    };
    loop {
        let len = check_size(call(std::ptr::null_mut(), 0))?;
        let mut buf = vec![0u8; len + 1];
        match check_size(call(buf.as_mut_ptr().cast(), buf.len())) {
            Ok(got) => {
                buf.truncate(got);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The whole value of an xattr (follows symlinks).
pub fn getxattr(p: impl AsRef<Path>, name: &str) -> io::Result<Vec<u8>> {
    get_any(p.as_ref(), name, true)
}

/// The whole value of an xattr (does not follow symlinks).
pub fn lgetxattr(p: impl AsRef<Path>, name: &str) -> io::Result<Vec<u8>> {
    get_any(p.as_ref(), name, false)
}

/// `listxattr` into a buffer of exactly `size` bytes: (returned length, raw bytes).
pub fn listxattr_sized(p: impl AsRef<Path>, size: usize) -> io::Result<(usize, Vec<u8>)> {
    let p = cpath(p);
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: CString path; `ptr` points to `size` writable bytes (or is null with 0).
    let got = check_size(unsafe { libc::listxattr(p.as_ptr(), ptr, size) })?;
    buf.truncate(got.min(size));
    Ok((got, buf))
}

fn list_any(p: &Path, follow: bool) -> io::Result<Vec<String>> {
    let cp = cpath(p);
    // SAFETY: CString path; `ptr` points to `size` writable bytes (or is null with 0).
    let call = |ptr: *mut libc::c_char, size: usize| unsafe {
        if follow {
            libc::listxattr(cp.as_ptr(), ptr, size)
        } else {
            libc::llistxattr(cp.as_ptr(), ptr, size)
        }
    };
    loop {
        let len = check_size(call(std::ptr::null_mut(), 0))?;
        let mut buf = vec![0u8; len + 1];
        match check_size(call(buf.as_mut_ptr().cast(), buf.len())) {
            Ok(got) => {
                buf.truncate(got);
                let mut names: Vec<String> = buf
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                names.sort();
                return Ok(names);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sorted xattr names (follows symlinks).
pub fn listxattr(p: impl AsRef<Path>) -> io::Result<Vec<String>> {
    list_any(p.as_ref(), true)
}

/// Sorted xattr names (does not follow symlinks).
pub fn llistxattr(p: impl AsRef<Path>) -> io::Result<Vec<String>> {
    list_any(p.as_ref(), false)
}

/// `removexattr` (follows symlinks).
pub fn removexattr(p: impl AsRef<Path>, name: &str) -> io::Result<()> {
    let (p, n) = (cpath(p), cstr(name));
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }).map(drop)
}

/// `fallocate(fd, mode, off, len)`.
pub fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: the descriptor belongs to a live File; the call takes only integers.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) })
        .map(drop)
}

/// `lseek(fd, off, whence)`.
pub fn lseek(f: &File, off: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: the descriptor belongs to a live File; the call takes only integers.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i64)
    }
}

/// `copy_file_range` with explicit offsets (which it advances).
pub fn copy_file_range(
    src: &File,
    off_in: &mut i64,
    dst: &File,
    off_out: &mut i64,
    len: usize,
) -> io::Result<usize> {
    let mut i = *off_in as libc::loff_t;
    let mut o = *off_out as libc::loff_t;
    let r =
        // SAFETY: both descriptors belong to live Files; `i` and `o` are locals the call may update.
        unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, len, 0) };
    let n = check_size(r as isize)?;
    *off_in = i as i64;
    *off_out = o as i64;
    Ok(n)
}

/// A timestamp argument for [`utimensat`].
#[derive(Clone, Copy, Debug)]
pub enum Ts {
    /// `UTIME_NOW`
    Now,
    /// `UTIME_OMIT`
    Omit,
    /// seconds, nanoseconds
    At(i64, i64),
}

impl Ts {
    fn raw(self) -> libc::timespec {
        match self {
            Ts::Now => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
            Ts::Omit => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            Ts::At(s, ns) => libc::timespec {
                tv_sec: s as libc::time_t,
                tv_nsec: ns as _,
            },
        }
    }
}

/// `utimensat(AT_FDCWD, p, [atime, mtime], flags)`.
pub fn utimensat(p: impl AsRef<Path>, atime: Ts, mtime: Ts, flags: i32) -> io::Result<()> {
    let p = cpath(p);
    let ts = [atime.raw(), mtime.raw()];
    // SAFETY: CString path; `ts` is a live array of the two timespecs utimensat reads.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), flags) }).map(drop)
}

/// `mknod(p, mode, dev)`.
pub fn mknod(p: impl AsRef<Path>, mode: u32, dev: u64) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::mknod(p.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) }).map(drop)
}

/// `mkfifo(p, mode)`.
pub fn mkfifo(p: impl AsRef<Path>, mode: u32) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::mkfifo(p.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `statfs(p)`.
pub fn statfs(p: impl AsRef<Path>) -> io::Result<libc::statfs> {
    let p = cpath(p);
    // SAFETY: statfs is plain data, for which all zeroes is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: CString path; `s` is a live statfs for the kernel to fill.
    check(unsafe { libc::statfs(p.as_ptr(), &mut s) })?;
    Ok(s)
}

/// The unit of `f_blocks`/`f_bfree`/`f_bavail`: `f_frsize`, or `f_bsize` where that is 0.
pub fn block_size(s: &libc::statfs) -> u64 {
    if s.f_frsize > 0 {
        s.f_frsize as u64
    } else {
        s.f_bsize as u64
    }
}

/// `open(p, flags, mode)` as a `File`.
pub fn open(p: impl AsRef<Path>, flags: i32, mode: u32) -> io::Result<File> {
    let p = cpath(p);
    let fd =
        // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
        check(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
    // SAFETY: `fd` was just returned by open and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, to, AT_SYMLINK_FOLLOW)`: give an open file
/// (e.g. an `O_TMPFILE`) a name.
pub fn link_fd(f: &File, to: impl AsRef<Path>) -> io::Result<()> {
    let from = cpath(format!("/proc/self/fd/{}", f.as_raw_fd()));
    let to = cpath(to);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// `linkat` without following a symlink at `from`.
pub fn link_nofollow(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::linkat(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), 0) })
        .map(drop)
}

/// `truncate(p, len)`.
pub fn truncate(p: impl AsRef<Path>, len: i64) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::truncate(p.as_ptr(), len as libc::off_t) }).map(drop)
}

/// `chmod(p, mode)` with every mode bit passed through (std's `set_permissions` does too, but
/// this keeps the call visible in failures).
pub fn chmod(p: impl AsRef<Path>, mode: u32) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `lchown(p, uid, gid)`; `u32::MAX` leaves a field unchanged.
pub fn lchown(p: impl AsRef<Path>, uid: u32, gid: u32) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::lchown(p.as_ptr(), uid, gid) }).map(drop)
}

/// `chown(p, uid, gid)`; `u32::MAX` leaves a field unchanged.
pub fn chown(p: impl AsRef<Path>, uid: u32, gid: u32) -> io::Result<()> {
    let p = cpath(p);
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    check(unsafe { libc::chown(p.as_ptr(), uid, gid) }).map(drop)
}

/// One entry returned by `getdents64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirent {
    /// `d_ino`
    pub ino: u64,
    /// `d_off`: the position to `lseek` to for the entry after this one.
    pub off: i64,
    /// `d_type`
    pub kind: u8,
    /// `d_name`
    pub name: Vec<u8>,
}

/// One `getdents64` call with a buffer of `bufsize` bytes (empty at end of directory).
pub fn getdents(dir: &File, bufsize: usize) -> io::Result<Vec<Dirent>> {
    let mut buf = vec![0u8; bufsize];
    // SAFETY: the descriptor belongs to a live File; `buf` is `buf.len()` writable bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            dir.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    let n = check_size(n as isize)?;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < n {
        let rec = &buf[pos..];
        let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap());
        let off = i64::from_ne_bytes(rec[8..16].try_into().unwrap());
        let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap()) as usize;
        let kind = rec[18];
        let name_area = &rec[19..reclen];
        let end = name_area
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name_area.len());
        out.push(Dirent {
            ino,
            off,
            kind,
            name: name_area[..end].to_vec(),
        });
        assert!(reclen > 0, "getdents64 returned a zero-length record");
        pos += reclen;
    }
    Ok(out)
}

/// Open a directory for [`getdents`].
pub fn open_dir(p: impl AsRef<Path>) -> io::Result<File> {
    open(p, libc::O_RDONLY | libc::O_DIRECTORY, 0)
}

/// Sorted names in a directory, without `.` and `..`.
pub fn list(p: impl AsRef<Path>) -> io::Result<Vec<String>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(p)? {
        v.push(e?.file_name().to_string_lossy().into_owned());
    }
    v.sort();
    Ok(v)
}

/// `makedev(major, minor)`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    libc::makedev(major, minor) as u64
}

/// Bytes of an `OsStr`.
pub fn bytes(s: &OsStr) -> &[u8] {
    s.as_bytes()
}

/// `pread` until `len` bytes or end of file.
pub fn pread_full(f: &File, off: u64, len: usize) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], off + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}

/// Current `CLOCK_REALTIME` as (seconds, nanoseconds).
pub fn now() -> (i64, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec, ts.tv_nsec)
}

/// Nanoseconds since the epoch of a (seconds, nanoseconds) pair.
pub fn ns(t: (i64, i64)) -> i128 {
    t.0 as i128 * 1_000_000_000 + t.1 as i128
}

/// Wait (polling the clock, which both the kernel's coarse clock and the server's clock follow)
/// until the wall clock is past `t + 20 ms`, so a timestamp set after this is observably newer
/// than `t`. This is a wait for a condition, not a timing assertion.
pub fn wait_clock_past(t: (i64, i64)) {
    let target = ns(t) + 20_000_000;
    loop {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec for the call to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
        if ns((ts.tv_sec, ts.tv_nsec)) > target {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The process umask (read by setting it and setting it back at once; tests never change it).
pub fn umask() -> u32 {
    // SAFETY: umask takes and returns a plain integer.
    unsafe {
        let u = libc::umask(0o022);
        libc::umask(u);
        u as u32
    }
}

/// Runs `f` on a new thread with a filesystem context (`unshare(CLONE_FS)`) of its own whose
/// umask is `umask`, so the process's umask, which other tests read, stays as it is. A
/// memofs server spawned from that thread inherits the umask.
pub fn with_umask<T: Send>(umask: u32, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(CLONE_FS) copies this thread's fs context; umask then changes
            // only that copy.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_FS), 0, "unshare(CLONE_FS)");
                libc::umask(umask as libc::mode_t);
            }
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A read-only descriptor of a file or directory, for the inode-flag ioctls.
fn open_for_ioctl(p: &Path) -> io::Result<File> {
    open(p, libc::O_RDONLY | libc::O_NONBLOCK, 0)
}

/// `ioctl(FS_IOC_GETFLAGS)`: the inode flags (`lsattr`).
pub fn get_flags(p: impl AsRef<Path>) -> io::Result<u32> {
    let f = open_for_ioctl(p.as_ref())?;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer; the descriptor is open.
    check(unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) })?;
    Ok(flags as u32)
}

/// `ioctl(FS_IOC_SETFLAGS)` (`chattr`).
pub fn set_flags(p: impl AsRef<Path>, flags: u32) -> io::Result<()> {
    let f = open_for_ioctl(p.as_ref())?;
    let flags = flags as libc::c_int;
    // SAFETY: FS_IOC_SETFLAGS reads one int through the pointer; the descriptor is open.
    check(unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) }).map(drop)
}

/// `FS_IOC_FSGETXATTR`: `struct fsxattr` as `[xflags, extsize, nextents, projid, cowextsize]`.
pub fn fsgetxattr(p: impl AsRef<Path>) -> io::Result<[u32; 5]> {
    const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
    let f = open_for_ioctl(p.as_ref())?;
    let mut x = [0u32; 7];
    // SAFETY: the kernel writes a 28-byte struct fsxattr into `x`, which has room for it.
    check(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FSGETXATTR, x.as_mut_ptr()) })?;
    Ok([x[0], x[1], x[2], x[3], x[4]])
}

/// `FS_IOC_FSSETXATTR` with `xflags` and an extent size hint (the other fields 0).
pub fn fssetxattr(p: impl AsRef<Path>, xflags: u32, extsize: u32) -> io::Result<()> {
    const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;
    let f = open_for_ioctl(p.as_ref())?;
    let x = [xflags, extsize, 0, 0, 0, 0, 0u32];
    // SAFETY: the kernel reads a 28-byte struct fsxattr from `x`.
    check(unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FSSETXATTR, x.as_ptr()) }).map(drop)
}

/// Birth time by `statx(STATX_BTIME)`, as `(seconds, nanoseconds)`; `None` when the
/// filesystem does not report one.
pub fn btime(p: impl AsRef<Path>) -> io::Result<Option<(i64, u32)>> {
    let p = cpath(p);
    let mut st = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: `p` is NUL-terminated and `st` has room for a struct statx.
    check(unsafe {
        libc::statx(
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BTIME,
            st.as_mut_ptr(),
        )
    })?;
    // SAFETY: statx succeeded and filled `st`.
    let st = unsafe { st.assume_init() };
    Ok((st.stx_mask & libc::STATX_BTIME != 0)
        .then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec)))
}

/// A POSIX ACL as the kernel's xattr value: version 2, then `(e_tag, e_perm, e_id)` entries.
pub fn acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// `close(2)` of `f`, with its result (dropping a `File` ignores it; under a writeback
/// cache it is where a failed writeback is reported).
pub fn close(f: File) -> io::Result<()> {
    use std::os::unix::io::IntoRawFd;
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was just taken out of a `File`, so it is open and owned here; it is
    // closed exactly once.
    check(unsafe { libc::close(fd) }).map(drop)
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` of the whole file: the kernel drops its clean cached
/// pages, so the next read asks the filesystem.
pub fn drop_cached_pages(f: &File) -> io::Result<()> {
    // SAFETY: plain syscall on an open descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}
