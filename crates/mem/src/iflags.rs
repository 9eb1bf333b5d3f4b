//! Inode flags (`chattr`/`lsattr`): the ones tmpfs keeps, and the checks the VFS makes for
//! them.
//!
//! tmpfs keeps immutable, append-only, no-dump and no-atime; a new inode takes no-dump and
//! no-atime from its directory. A FUSE mount's kernel does not know an inode's flags, so
//! the checks the VFS makes on tmpfs are made here, for every request that reaches the
//! server (`may_open`, `may_setattr`, `may_delete`, `vfs_link`, `xattr_permission`,
//! `vfs_fallocate`, `generic_copy_file_checks`, and `inode_permission(MAY_WRITE)` of an
//! immutable directory): `EPERM`.
//!
//! Writes are checked when a file is opened, never per write: the VFS does the same (a
//! descriptor opened for writing before `chattr +i` or `+a` goes on writing anywhere on
//! tmpfs, and an immutable file can still be truncated through it). That is also why
//! kernel-backed data, whose reads and writes bypass the server, needs no more than the
//! check at OPEN.

use std::sync::atomic::Ordering;

use memofs_core::inode_flags::{APPEND, IMMUTABLE, NOATIME, NODUMP};
use memofs_core::{Errno, Result, SetAttr, TimeSet};

use crate::inode::Inode;

/// The flags kept (`SHMEM_FL_USER_MODIFIABLE` without casefolding, which needs an
/// encoding memofs does not have).
pub const SUPPORTED: u32 = IMMUTABLE | APPEND | NODUMP | NOATIME;

/// The flags a new inode takes from its directory (`SHMEM_FL_INHERITED`).
pub const INHERITED: u32 = NODUMP | NOATIME;

/// Internal, never reported: an `O_TMPFILE` inode that LINK may still give a name (the
/// kernel's `I_LINKABLE`; not set with `O_EXCL`, cleared by the first link).
pub const LINKABLE: u32 = 0x8000_0000;

/// Internal, never reported: the inode's last name went while nobody had it open, and its
/// data with it (see `MemFs::link_removed`); no open may reach it any more.
pub const DATA_FREED: u32 = 0x4000_0000;

impl Inode {
    /// The flags, `LINKABLE` included.
    pub fn iflags(&self) -> u32 {
        self.flags.load(Ordering::Acquire)
    }

    /// The flags `FS_IOC_GETFLAGS` reports.
    pub fn visible_flags(&self) -> u32 {
        self.iflags() & SUPPORTED
    }

    /// Replaces the visible flags, keeping the internal ones.
    pub fn set_visible_flags(&self, flags: u32) {
        let _ = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                Some((f & !SUPPORTED) | (flags & SUPPORTED))
            });
    }

    /// `EPERM` for an immutable inode: nothing may be written to it, and an immutable
    /// directory's entries may not change.
    pub fn check_writable(&self) -> Result<()> {
        if self.iflags() & IMMUTABLE != 0 {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `EPERM` for an immutable or append-only inode: its name, attributes and xattrs may
    /// not change, and an append-only directory's entries may not go away.
    pub fn check_changeable(&self) -> Result<()> {
        if self.iflags() & (IMMUTABLE | APPEND) != 0 {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `may_open`: no writer (nor `O_TRUNC`) for an immutable file; an append-only file
    /// takes writers with `O_APPEND` only, and no `O_TRUNC`.
    pub fn check_open(&self, flags: i32) -> Result<()> {
        let f = self.iflags();
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let trunc = flags & libc::O_TRUNC != 0;
        let refused = (f & IMMUTABLE != 0 && (writing || trunc))
            || (f & APPEND != 0 && (trunc || (writing && flags & libc::O_APPEND == 0)));
        if refused {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `may_setattr` and truncation: neither kind of flagged inode takes a new mode, owner
    /// or explicit times; only an append-only one may be touched (times set to now). A
    /// size change is refused for an append-only file, and for an immutable one unless it
    /// comes through a descriptor opened before (`ftruncate`).
    pub fn check_setattr(&self, set: &SetAttr) -> Result<()> {
        let f = self.iflags();
        if f & (IMMUTABLE | APPEND) == 0 {
            return Ok(());
        }
        let explicit = |t: Option<TimeSet>| matches!(t, Some(TimeSet::At(_)));
        let touch = set.atime.is_some() || set.mtime.is_some();
        let refused = set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || explicit(set.atime)
            || explicit(set.mtime)
            || (f & IMMUTABLE != 0 && (touch || (set.size.is_some() && set.fh.is_none())))
            || (f & APPEND != 0 && set.size.is_some());
        if refused {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// `vfs_fallocate`: nothing on an immutable file, only plain allocation (with or
    /// without `FALLOC_FL_KEEP_SIZE`) on an append-only one.
    pub fn check_fallocate(&self, mode: i32) -> Result<()> {
        let f = self.iflags();
        if f & IMMUTABLE != 0 || (f & APPEND != 0 && mode & !libc::FALLOC_FL_KEEP_SIZE != 0) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// Whether reads may leave atime alone whatever the mount's rule (`chattr +A`).
    pub fn noatime(&self) -> bool {
        self.iflags() & NOATIME != 0
    }
}
