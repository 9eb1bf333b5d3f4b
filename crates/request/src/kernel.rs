//! What the request layer asks of the kernel besides replies.
//!
//! A transport implements [`Kernel`] on its FUSE connection (notifications are written to
//! `/dev/fuse` whichever channel carries the requests; backing files are registered with
//! ioctls on it). The request layer decides when to call it.

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;

use memofs_core::Ino;

/// Whose privilege writes through a backing file carry (the kernel does a backing file's
/// I/O with the credentials it was registered with, whoever writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingWrites {
    /// The server's: a privileged server's writes keep setuid and setgid (`CAP_FSETID`),
    /// as the mode the kernel checks and clears through the mount is the file's real one.
    Server,
    /// An unprivileged writer's: every write clears setuid and setgid on the backing file
    /// itself, which is what a file whose mode can change behind the kernel's back needs
    /// (a bit set on the host after the open is not in the mode the kernel checks).
    Unprivileged,
}

/// The kernel side of one FUSE connection.
pub trait Kernel: Send + Sync {
    /// Registers `fd` as a FUSE passthrough backing file whose writes carry `writes`'
    /// privilege; returns its backing id.
    fn open_backing(&self, fd: BorrowedFd<'_>, writes: BackingWrites) -> io::Result<u32>;
    /// Unregisters a backing id (open files keep their reference).
    fn close_backing(&self, id: u32) -> io::Result<()>;
    /// `FUSE_NOTIFY_INVAL_ENTRY`: drop the cached name `name` in `parent`, positive or
    /// negative; with `expire_only`, keep it but look it up again at its next use (a
    /// directory that is some process's working directory stays its working directory
    /// when the name still leads to it). `ENOENT`: the kernel had no such dentry (or, on
    /// some kernels, kept a negative one: see [`crate::invalidate`]).
    fn inval_entry(&self, parent: Ino, name: &OsStr, expire_only: bool) -> io::Result<()>;
    /// `FUSE_NOTIFY_DELETE`: `child`, known as `name` in `parent`, was deleted.
    fn delete(&self, parent: Ino, child: Ino, name: &OsStr) -> io::Result<()>;
    /// `FUSE_NOTIFY_INVAL_INODE`: drop cached attributes, and cached data or listing from
    /// `offset` for `len` bytes (0: to the end; negative `offset`: attributes only).
    fn inval_inode(&self, ino: Ino, offset: i64, len: i64) -> io::Result<()>;
    /// `FUSE_NOTIFY_INC_EPOCH` (Linux 6.16+): every cached name is looked up again.
    fn inc_epoch(&self) -> io::Result<()>;
}
