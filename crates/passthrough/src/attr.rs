//! Attributes: host `statx` → [`Attr`], and SETATTR on the host.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use memofs_core::{Attr, Errno, FileKind, Ino, Result, SetAttr, TimeSet, Timestamp, ROOT_INO};

use crate::fd::ProcSelf;
use crate::inode::Inode;
use crate::sys;
use crate::PassthroughFs;

fn timestamp(t: &libc::statx_timestamp) -> Timestamp {
    Timestamp::from_timespec(t.tv_sec, t.tv_nsec)
}

/// A device number in the kernel's FUSE encoding (`new_encode_dev`).
fn fuse_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A device number from the kernel's FUSE encoding (`new_decode_dev`) as a host `dev_t`.
pub(crate) fn host_dev(rdev: u32) -> libc::dev_t {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

/// Our attributes for host attributes `st`, under our number `ino`.
pub(crate) fn attr_of(ino: Ino, st: &libc::statx) -> Result<Attr> {
    let mode = u32::from(st.stx_mode);
    let kind = FileKind::from_mode(mode).ok_or(Errno::EIO)?;
    let mount_root = kind == FileKind::Directory
        && ino != ROOT_INO
        && st.stx_attributes_mask & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0
        && st.stx_attributes & libc::STATX_ATTR_MOUNT_ROOT as u64 != 0;
    Ok(Attr {
        ino,
        generation: 0,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: timestamp(&st.stx_atime),
        mtime: timestamp(&st.stx_mtime),
        ctime: timestamp(&st.stx_ctime),
        crtime: if st.stx_mask & libc::STATX_BTIME != 0 {
            timestamp(&st.stx_btime)
        } else {
            Timestamp::default()
        },
        kind,
        perm: (mode & 0o7777) as u16,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        rdev: fuse_dev(st.stx_rdev_major, st.stx_rdev_minor),
        blksize: st.stx_blksize,
        mount_root,
    })
}

fn timespec(t: Option<TimeSet>) -> libc::timespec {
    let (tv_sec, tv_nsec) = match t {
        None => (0, libc::UTIME_OMIT),
        Some(TimeSet::Now) => (0, libc::UTIME_NOW),
        Some(TimeSet::At(t)) => {
            let (s, ns) = t.to_timespec();
            (s, i64::from(ns))
        }
    };
    libc::timespec { tv_sec, tv_nsec }
}

/// Set once `fchmodat2(AT_EMPTY_PATH)` turned out to be missing (before Linux 6.6).
static NO_FCHMODAT2: AtomicBool = AtomicBool::new(false);

/// Learns whether `fchmodat2(AT_EMPTY_PATH)` exists before the first chmod needs it.
pub(crate) fn probe_fchmodat2() {
    if !sys::at::has_chmod_fd() {
        NO_FCHMODAT2.store(true, Ordering::Relaxed);
    }
}

/// Whether chmod uses `fchmodat2(AT_EMPTY_PATH)` (else the `/proc/self/fd` name).
pub(crate) fn uses_fchmodat2() -> bool {
    !NO_FCHMODAT2.load(Ordering::Relaxed)
}

/// Sets the mode of what `fd` pins: with `fchmodat2(AT_EMPTY_PATH)` where the kernel has it,
/// else through the descriptor's `/proc/self/fd` name (a path walk through `/proc`, which
/// cost untar's chmods more than the chmods themselves).
fn chmod(proc: &ProcSelf, fd: BorrowedFd<'_>, mode: u32) -> Result<()> {
    let by_proc = || sys::at::chmod_at(proc.dir(), &ProcSelf::name(fd), mode);
    if NO_FCHMODAT2.load(Ordering::Relaxed) {
        return by_proc();
    }
    match sys::at::chmod_fd(fd, mode) {
        Err(Errno::ENOSYS) | Err(Errno::EINVAL) => {
            NO_FCHMODAT2.store(true, Ordering::Relaxed);
            by_proc()
        }
        // A seccomp profile older than fchmodat2 may refuse it with EPERM; a real EPERM
        // (an immutable file) fails the same way through /proc.
        Err(Errno::EPERM) => {
            let done = by_proc();
            if done.is_ok() {
                NO_FCHMODAT2.store(true, Ordering::Relaxed);
            }
            done
        }
        done => done,
    }
}

impl PassthroughFs {
    /// Current attributes of `inode`.
    pub(crate) fn attr(&self, inode: &Inode) -> Result<Attr> {
        let fd = inode.fd()?;
        let st = if self.table.settling.is_settling(inode.ino) {
            sys::at::statx_fd_sync(fd.as_fd())?
        } else {
            sys::at::statx_fd(fd.as_fd())?
        };
        attr_of(inode.ino, &st)
    }

    /// SETATTR: owner, then mode (a chown may clear set-id bits), then size, then times (last,
    /// so a truncate's timestamp update does not override explicit times). The host's ctime
    /// cannot be set and `set.ctime` is ignored. Runs with the server's credentials: the
    /// kernel has checked the caller's permission (`default_permissions`).
    pub(crate) fn set_attr(&self, inode: &Inode, set: &SetAttr) -> Result<Attr> {
        let held = inode.fd()?;
        let fd = held.as_fd();
        // Refuse what cannot be done before changing anything.
        if set.mode.is_some() && inode.kind == FileKind::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        if set.size.is_some() {
            match inode.kind {
                FileKind::Regular => {}
                FileKind::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        if set.uid.is_some() || set.gid.is_some() {
            sys::at::chown_fd(fd, set.uid, set.gid)?;
        }
        if let Some(mode) = set.mode {
            chmod(&self.proc, fd, mode & 0o7777)?;
        }
        if let Some(size) = set.size {
            self.truncate(inode, set.fh, size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            sys::at::utimens_fd(fd, &[timespec(set.atime), timespec(set.mtime)])?;
        }
        self.attr(inode)
    }

    /// A read-only descriptor of `inode` for the inode-flags ioctls, which need an open
    /// file: only regular files and directories, as through FUSE (`ENOTTY` otherwise).
    fn open_for_flags(&self, inode: &Inode) -> Result<OwnedFd> {
        match inode.kind {
            FileKind::Regular => self
                .proc
                .reopen(inode.fd()?.as_fd(), libc::O_RDONLY | libc::O_NONBLOCK),
            FileKind::Directory => sys::at::openat(
                inode.fd()?.as_fd(),
                c".",
                libc::O_RDONLY | libc::O_DIRECTORY,
            ),
            _ => Err(Errno::ENOTTY),
        }
    }

    /// The host inode's flags (`FS_IOC_GETFLAGS`).
    pub(crate) fn inode_flags(&self, inode: &Inode) -> Result<u32> {
        sys::io::get_flags(self.open_for_flags(inode)?.as_fd())
    }

    /// Sets the host inode's flags (`FS_IOC_SETFLAGS`), with the server's credentials: the
    /// kernel has checked ownership and `CAP_LINUX_IMMUTABLE` for the caller, and the host
    /// enforces what the flags mean.
    pub(crate) fn set_inode_flags(&self, inode: &Inode, flags: u32) -> Result<()> {
        sys::io::set_flags(self.open_for_flags(inode)?.as_fd(), flags)
    }

    /// Truncates the regular file `inode` through the open handle `fh` when given, else
    /// through a short-lived write-only re-open.
    fn truncate(&self, inode: &Inode, fh: Option<u64>, size: u64) -> Result<()> {
        let open = fh.and_then(|fh| self.files.get(fh).ok());
        let reopened: OwnedFd;
        let fd: BorrowedFd<'_> = match &open {
            Some(file) if file.ino == inode.ino && file.writable() => self.host_fd(file)?,
            _ => {
                reopened = self.proc.reopen(inode.fd()?.as_fd(), libc::O_WRONLY)?;
                reopened.as_fd()
            }
        };
        sys::io::ftruncate(fd, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip_through_fuse_encoding() {
        for (major, minor) in [(1, 3), (8, 17), (259, 0), (4095, 1 << 19)] {
            let dev = host_dev(fuse_dev(major, minor));
            assert_eq!((libc::major(dev), libc::minor(dev)), (major, minor));
        }
    }
}
