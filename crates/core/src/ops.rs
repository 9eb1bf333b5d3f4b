//! The operations every backend implements.
//!
//! The transport (FUSE) calls these with already-decoded arguments and turns the results into
//! replies; cache timeouts are added by [`crate::CachePolicy`], never by a backend. Every
//! operation returns `Result<_, Errno>`.
//!
//! Lookup counting follows FUSE: each successful `lookup`, `mknod`, `mkdir`, `symlink`,
//! `link`, `create`, and each READDIRPLUS entry the sink accepts (except `.` and `..`) gives
//! the kernel one reference, which it returns with `forget`.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::errno::{Errno, Result};
use crate::invalidate::Invalidator;
use crate::types::{Attr, BackendUsage, Caller, DirEntry, FileKind, Ino, Opened, SetAttr, StatFs};

/// A filesystem backend.
pub trait Backend: Send + Sync + 'static {
    /// Finds `name` in directory `parent`. A miss is `Err(ENOENT)`.
    fn lookup(&self, caller: &Caller, parent: Ino, name: &OsStr) -> Result<Attr>;
    /// The kernel dropped `nlookup` references to `ino`.
    fn forget(&self, ino: Ino, nlookup: u64);
    /// Attributes of `ino`.
    fn getattr(&self, ino: Ino) -> Result<Attr>;
    /// Changes attributes (chmod, chown, truncate, utimens).
    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr>;
    /// Target of a symlink.
    fn readlink(&self, ino: Ino) -> Result<Vec<u8>>;
    /// Creates a regular file, FIFO, socket or device node. `mode` includes the kind bits
    /// and has the caller's umask applied already.
    fn mknod(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Result<Attr>;
    /// Creates a directory.
    fn mkdir(&self, caller: &Caller, parent: Ino, name: &OsStr, mode: u32) -> Result<Attr>;
    /// Removes a non-directory name.
    fn unlink(&self, caller: &Caller, parent: Ino, name: &OsStr) -> Result<()>;
    /// Removes an empty directory.
    fn rmdir(&self, caller: &Caller, parent: Ino, name: &OsStr) -> Result<()>;
    /// Creates a symlink to `target`.
    fn symlink(&self, caller: &Caller, parent: Ino, name: &OsStr, target: &OsStr) -> Result<Attr>;
    /// Renames, with `renameat2` flags.
    fn rename(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()>;
    /// Adds a hard link to `ino`.
    fn link(&self, caller: &Caller, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr>;
    /// Opens a regular file with open(2) `flags`.
    fn open(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened>;
    /// Creates and opens a regular file (the kernel sends this for `open(O_CREAT)`).
    fn create(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)>;
    /// Reads up to `size` bytes at `offset` into `buf` (cleared first); short at end of file.
    fn read(&self, ino: Ino, fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<()>;
    /// Writes `data` at `offset` (or at the end for `O_APPEND` opens); returns bytes written.
    fn write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32>;
    /// `close` of one file descriptor.
    fn flush(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }
    /// Whether [`Backend::flush`] does anything. When it does not (the default), the
    /// transport opens files with `FOPEN_NOFLUSH` and `close` costs no round trip.
    fn flush_on_close(&self) -> bool {
        false
    }
    /// Last close of an open file.
    fn release(&self, ino: Ino, fh: u64) -> Result<()>;
    /// Makes data durable, as far as the backend has durability.
    fn fsync(&self, ino: Ino, fh: u64, datasync: bool) -> Result<()>;
    /// Opens a directory for reading.
    fn opendir(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened>;
    /// Lists entries after `offset` (0 = from the start). `sink` returns false when its buffer
    /// is full and the entry was not taken; listing stops there. With `plus`, entries carry
    /// attributes and count as lookups when taken.
    fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        plus: bool,
        sink: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()>;
    /// Makes a directory's entries durable.
    fn fsyncdir(&self, _ino: Ino, _fh: u64, _datasync: bool) -> Result<()> {
        Ok(())
    }
    /// Closes a directory handle.
    fn releasedir(&self, ino: Ino, fh: u64) -> Result<()>;
    /// Filesystem usage.
    fn statfs(&self) -> Result<StatFs>;
    /// Sets an extended attribute (`flags`: `XATTR_CREATE`, `XATTR_REPLACE`).
    fn setxattr(
        &self,
        caller: &Caller,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()>;
    /// Reads an extended attribute.
    fn getxattr(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>>;
    /// Lists extended attribute names, each NUL-terminated.
    fn listxattr(&self, ino: Ino) -> Result<Vec<u8>>;
    /// Removes an extended attribute.
    fn removexattr(&self, caller: &Caller, ino: Ino, name: &OsStr) -> Result<()>;
    /// Allocates or punches a range (`mode` as fallocate(2)).
    fn fallocate(&self, ino: Ino, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()>;
    /// `SEEK_DATA` / `SEEK_HOLE` (the kernel handles the other whences).
    fn lseek(&self, ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64>;
    /// Copies a range between two open files; returns bytes copied.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        ino_in: Ino,
        fh_in: u64,
        offset_in: u64,
        ino_out: Ino,
        fh_out: u64,
        offset_out: u64,
        len: u64,
    ) -> Result<u64>;
    /// Memory and inode usage, for `memofs stats`.
    fn usage(&self) -> BackendUsage;
    /// Lends `use_fd` a file descriptor the kernel may use directly for the data of open
    /// file `fh` (FUSE passthrough; the kernel takes its own reference when it registers
    /// it), and returns true; returns false, without calling `use_fd`, to serve reads and
    /// writes through this trait. Lending instead of handing out a duplicate saves a
    /// `dup` and a `close` per open.
    fn with_backing_fd(
        &self,
        _ino: Ino,
        _fh: u64,
        _use_fd: &mut dyn FnMut(BorrowedFd<'_>),
    ) -> bool {
        false
    }
    /// True if [`Backend::with_backing_fd`] can return file descriptors; the transport asks the
    /// kernel for passthrough (which excludes the writeback cache) only then.
    fn has_backing_fds(&self) -> bool {
        false
    }
    /// Clears setuid, and setgid when group-executable, on a regular file, and drops its
    /// `security.capability`: what a write, truncate or chown by an unprivileged caller must
    /// do. The transport decides when (the kernel leaves it to the server, which lets the
    /// kernel skip a `security.capability` lookup on every write). Returns true if anything
    /// changed.
    fn kill_suidgid(&self, caller: &Caller, ino: Ino) -> Result<bool> {
        let attr = self.getattr(ino)?;
        if attr.kind != FileKind::Regular {
            return Ok(false);
        }
        let mode = attr.perm as u32;
        let mut new = mode & !libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            new &= !libc::S_ISGID;
        }
        let mut changed = false;
        if new != mode {
            self.setattr(
                caller,
                ino,
                &SetAttr {
                    mode: Some(new),
                    ..SetAttr::default()
                },
            )?;
            changed = true;
        }
        match self.removexattr(caller, ino, OsStr::new("security.capability")) {
            Ok(()) => changed = true,
            Err(e) if e == Errno::ENODATA || e == Errno::EOPNOTSUPP => {}
            Err(e) => return Err(e),
        }
        Ok(changed)
    }
    /// True when a chown through [`Backend::setattr`] itself drops setuid/setgid and
    /// `security.capability`, as a host filesystem's `chown(2)` does; the transport then
    /// does not call [`Backend::kill_suidgid`] after a chown.
    fn chown_kills_privs(&self) -> bool {
        false
    }
    /// Hands the backend the transport's invalidator, once mounted. Backends whose every
    /// change comes through the mount ignore it.
    fn attach_invalidator(&self, _invalidator: Arc<dyn Invalidator>) {}
}
