//! A decoded FUSE request, in memofs's own terms.
//!
//! A transport decodes the kernel's bytes into a [`Request`] (borrowing names and data from
//! its buffer) and hands it to [`crate::Server::handle`]. Nothing here depends on how the
//! request arrived (`/dev/fuse` or an io_uring ring).

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

use memofs_core::{Caller, Ino, SetAttr};

/// One request: who asks, about which inode, and what.
#[derive(Debug)]
pub struct Request<'a> {
    /// The kernel's request id (needed only to reply).
    pub unique: u64,
    /// The inode the request is about (for LINK: the new parent).
    pub nodeid: Ino,
    /// The calling process's credentials.
    pub caller: Caller,
    /// The operation and its arguments.
    pub op: Op<'a>,
    /// The security label of the node the request makes, where the kernel sends one
    /// (`FUSE_SECURITY_CTX`, for CREATE, TMPFILE, MKNOD, MKDIR and SYMLINK).
    pub label: Option<Label<'a>>,
}

/// A WRITE's bytes.
#[derive(Clone, Copy)]
pub enum WriteData<'a> {
    /// In the request's buffer.
    Bytes(&'a [u8]),
    /// Still where the sender put them (a guest's memory), moved once the backend says
    /// where they go: written straight to its file where it has one, else copied out.
    Elsewhere(&'a dyn Payload),
}

impl fmt::Debug for WriteData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteData::Bytes(b) => write!(f, "{} bytes", b.len()),
            WriteData::Elsewhere(p) => write!(f, "{} bytes elsewhere", p.len()),
        }
    }
}

/// A request's bytes that a transport leaves where the sender put them.
pub trait Payload {
    /// How many bytes there are.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Writes them at `offset` of `fd`; how many were written (short where the file's
    /// filesystem took fewer).
    fn write_at(&self, fd: BorrowedFd<'_>, offset: u64) -> io::Result<usize>;
    /// Appends them to `buf`.
    fn copy_into(&self, buf: &mut Vec<u8>) -> io::Result<()>;
}

/// A security label the kernel's security module chose for a new node: an extended
/// attribute, `security.selinux` for SELinux, set as the node is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label<'a> {
    /// The attribute's name.
    pub name: &'a OsStr,
    /// Its value.
    pub value: &'a [u8],
}

/// The operations memofs serves. Every variant but [`Op::Forget`], [`Op::BatchForget`] and
/// [`Op::Interrupt`] gets exactly one reply. Each variant's doc describes its fields.
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Op<'a> {
    /// Find `name` in directory `nodeid`.
    Lookup { name: &'a OsStr },
    /// The kernel dropped `nlookup` references to `nodeid` (no reply).
    Forget { nlookup: u64 },
    /// Several forgets at once: `(ino, nlookup)` pairs (no reply).
    BatchForget { forgets: &'a [[u64; 2]] },
    /// Attributes (`fh` when asked through an open file).
    Getattr { fh: Option<u64> },
    /// Attributes with birth time (statx); `mask` is what the caller wants.
    Statx { fh: Option<u64>, mask: u32 },
    /// Change attributes. `kill_suidgid`: the kernel asks the server to clear setuid and
    /// setgid as a truncate by an unprivileged caller must.
    Setattr { set: SetAttr, kill_suidgid: bool },
    /// A symlink's target.
    Readlink,
    /// Create a symlink `name` to `target` in `nodeid`.
    Symlink { name: &'a OsStr, target: &'a OsStr },
    /// Create a file, FIFO, socket or device node (`umask` not yet applied, 0 if it was).
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    /// Create a directory.
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    /// Remove a non-directory name.
    Unlink { name: &'a OsStr },
    /// Remove an empty directory.
    Rmdir { name: &'a OsStr },
    /// renameat2 with `flags`.
    Rename {
        name: &'a OsStr,
        new_parent: Ino,
        new_name: &'a OsStr,
        flags: u32,
    },
    /// Link the existing inode `inode` as `new_name` in directory `nodeid`.
    Link { inode: Ino, new_name: &'a OsStr },
    /// Open a regular file. `kill_suidgid`: an `O_TRUNC` open by an unprivileged caller.
    Open { flags: i32, kill_suidgid: bool },
    /// Create and open a regular file.
    Create {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    },
    /// Create and open a file with no name in directory `nodeid`.
    Tmpfile { mode: u32, umask: u32, flags: i32 },
    /// Read up to `size` bytes at `offset`.
    Read { fh: u64, offset: u64, size: u32 },
    /// Write `data` at `offset`. `kill_suidgid`: the writer is unprivileged. `cached`: the
    /// kernel writes back pages of its writeback cache (no caller waits on this write).
    Write {
        fh: u64,
        offset: u64,
        data: WriteData<'a>,
        kill_suidgid: bool,
        cached: bool,
    },
    /// `close(2)` of one descriptor.
    Flush { fh: u64 },
    /// Last close of an open file.
    Release { fh: u64 },
    /// fsync / fdatasync.
    Fsync { fh: u64, datasync: bool },
    /// Open a directory.
    Opendir { flags: i32 },
    /// List at most `size` bytes of entries after `offset`; `plus` with attributes.
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    /// Close a directory handle.
    Releasedir { fh: u64 },
    /// fsync of a directory.
    Fsyncdir { fh: u64, datasync: bool },
    /// Filesystem usage.
    Statfs,
    /// Set an xattr. `acl_kill_sgid`: setting an access ACL must also clear setgid (the
    /// caller is neither in the file's group nor privileged).
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
        acl_kill_sgid: bool,
    },
    /// Read an xattr (`size` 0: only its size).
    Getxattr { name: &'a OsStr, size: u32 },
    /// List xattr names (`size` 0: only the list's size).
    Listxattr { size: u32 },
    /// Remove an xattr.
    Removexattr { name: &'a OsStr },
    /// access(2) (permissions are the kernel's; only existence is asked).
    Access,
    /// An ioctl on an open file or directory.
    Ioctl {
        fh: u64,
        cmd: u32,
        input: &'a [u8],
        out_size: u32,
    },
    /// fallocate(2).
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    /// SEEK_DATA / SEEK_HOLE (`offset` as the caller gave it).
    Lseek { fh: u64, offset: i64, whence: i32 },
    /// copy_file_range(2) from `nodeid`/`fh_in` to `ino_out`/`fh_out`.
    CopyFileRange {
        fh_in: u64,
        offset_in: u64,
        ino_out: Ino,
        fh_out: u64,
        offset_out: u64,
        len: u64,
    },
    /// syncfs(2).
    Syncfs,
    /// The caller gave up waiting for request `unique` (no reply).
    Interrupt { unique: u64 },
    /// The kernel is done with the filesystem.
    Destroy,
    /// An opcode memofs does not implement (answered `ENOSYS`, which tells the kernel not to
    /// send it again where it can do without).
    Unsupported { opcode: u32 },
}

/// Statistics classes of requests: one counter and latency histogram each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[repr(usize)]
#[allow(missing_docs)]
pub enum Kind {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Symlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Tmpfile,
    Ioctl,
    Fallocate,
    Lseek,
    CopyFileRange,
    Statx,
    Syncfs,
    Other,
}

impl Kind {
    /// Number of kinds.
    pub const COUNT: usize = Kind::Other as usize + 1;

    /// Every kind, in counter order.
    pub const ALL: [Kind; Kind::COUNT] = [
        Kind::Lookup,
        Kind::Forget,
        Kind::Getattr,
        Kind::Setattr,
        Kind::Readlink,
        Kind::Symlink,
        Kind::Mknod,
        Kind::Mkdir,
        Kind::Unlink,
        Kind::Rmdir,
        Kind::Rename,
        Kind::Link,
        Kind::Open,
        Kind::Read,
        Kind::Write,
        Kind::Flush,
        Kind::Release,
        Kind::Fsync,
        Kind::Opendir,
        Kind::Readdir,
        Kind::Readdirplus,
        Kind::Releasedir,
        Kind::Fsyncdir,
        Kind::Statfs,
        Kind::Setxattr,
        Kind::Getxattr,
        Kind::Listxattr,
        Kind::Removexattr,
        Kind::Access,
        Kind::Create,
        Kind::Tmpfile,
        Kind::Ioctl,
        Kind::Fallocate,
        Kind::Lseek,
        Kind::CopyFileRange,
        Kind::Statx,
        Kind::Syncfs,
        Kind::Other,
    ];

    /// The FUSE opcode's name, as `memofs stats` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Lookup => "LOOKUP",
            Kind::Forget => "FORGET",
            Kind::Getattr => "GETATTR",
            Kind::Setattr => "SETATTR",
            Kind::Readlink => "READLINK",
            Kind::Symlink => "SYMLINK",
            Kind::Mknod => "MKNOD",
            Kind::Mkdir => "MKDIR",
            Kind::Unlink => "UNLINK",
            Kind::Rmdir => "RMDIR",
            Kind::Rename => "RENAME",
            Kind::Link => "LINK",
            Kind::Open => "OPEN",
            Kind::Read => "READ",
            Kind::Write => "WRITE",
            Kind::Flush => "FLUSH",
            Kind::Release => "RELEASE",
            Kind::Fsync => "FSYNC",
            Kind::Opendir => "OPENDIR",
            Kind::Readdir => "READDIR",
            Kind::Readdirplus => "READDIRPLUS",
            Kind::Releasedir => "RELEASEDIR",
            Kind::Fsyncdir => "FSYNCDIR",
            Kind::Statfs => "STATFS",
            Kind::Setxattr => "SETXATTR",
            Kind::Getxattr => "GETXATTR",
            Kind::Listxattr => "LISTXATTR",
            Kind::Removexattr => "REMOVEXATTR",
            Kind::Access => "ACCESS",
            Kind::Create => "CREATE",
            Kind::Tmpfile => "TMPFILE",
            Kind::Ioctl => "IOCTL",
            Kind::Fallocate => "FALLOCATE",
            Kind::Lseek => "LSEEK",
            Kind::CopyFileRange => "COPY_FILE_RANGE",
            Kind::Statx => "STATX",
            Kind::Syncfs => "SYNCFS",
            Kind::Other => "OTHER",
        }
    }
}

impl Op<'_> {
    /// The counter this request is counted under.
    pub fn kind(&self) -> Kind {
        match self {
            Op::Lookup { .. } => Kind::Lookup,
            Op::Forget { .. } | Op::BatchForget { .. } => Kind::Forget,
            Op::Getattr { .. } => Kind::Getattr,
            Op::Statx { .. } => Kind::Statx,
            Op::Setattr { .. } => Kind::Setattr,
            Op::Readlink => Kind::Readlink,
            Op::Symlink { .. } => Kind::Symlink,
            Op::Mknod { .. } => Kind::Mknod,
            Op::Mkdir { .. } => Kind::Mkdir,
            Op::Unlink { .. } => Kind::Unlink,
            Op::Rmdir { .. } => Kind::Rmdir,
            Op::Rename { .. } => Kind::Rename,
            Op::Link { .. } => Kind::Link,
            Op::Open { .. } => Kind::Open,
            Op::Create { .. } => Kind::Create,
            Op::Tmpfile { .. } => Kind::Tmpfile,
            Op::Read { .. } => Kind::Read,
            Op::Write { .. } => Kind::Write,
            Op::Flush { .. } => Kind::Flush,
            Op::Release { .. } => Kind::Release,
            Op::Fsync { .. } => Kind::Fsync,
            Op::Opendir { .. } => Kind::Opendir,
            Op::Readdir { plus: false, .. } => Kind::Readdir,
            Op::Readdir { plus: true, .. } => Kind::Readdirplus,
            Op::Releasedir { .. } => Kind::Releasedir,
            Op::Fsyncdir { .. } => Kind::Fsyncdir,
            Op::Statfs => Kind::Statfs,
            Op::Setxattr { .. } => Kind::Setxattr,
            Op::Getxattr { .. } => Kind::Getxattr,
            Op::Listxattr { .. } => Kind::Listxattr,
            Op::Removexattr { .. } => Kind::Removexattr,
            Op::Access => Kind::Access,
            Op::Ioctl { .. } => Kind::Ioctl,
            Op::Fallocate { .. } => Kind::Fallocate,
            Op::Lseek { .. } => Kind::Lseek,
            Op::CopyFileRange { .. } => Kind::CopyFileRange,
            Op::Syncfs => Kind::Syncfs,
            Op::Interrupt { .. } | Op::Destroy | Op::Unsupported { .. } => Kind::Other,
        }
    }

    /// Whether the kernel expects a reply.
    pub fn wants_reply(&self) -> bool {
        !matches!(
            self,
            Op::Forget { .. } | Op::BatchForget { .. } | Op::Interrupt { .. }
        )
    }

    /// Whether the request changes the filesystem: names, attributes, extended attributes,
    /// data, inode flags; an open for writing or truncating. A read-only mount refuses these
    /// (`EROFS`).
    pub fn modifies(&self) -> bool {
        match *self {
            Op::Setattr { .. }
            | Op::Symlink { .. }
            | Op::Mknod { .. }
            | Op::Mkdir { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::Rename { .. }
            | Op::Link { .. }
            | Op::Setxattr { .. }
            | Op::Removexattr { .. }
            | Op::Create { .. }
            | Op::Tmpfile { .. }
            | Op::Write { .. }
            | Op::Fallocate { .. }
            | Op::CopyFileRange { .. } => true,
            Op::Open { flags, .. } => {
                flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
            }
            Op::Ioctl { cmd, .. } => crate::ioctl::modifies(cmd),
            _ => false,
        }
    }

    /// Whether a transport may answer the request before it is handled, and handle it off
    /// the caller's path: RELEASE, which the kernel sends in the background when a file's
    /// last descriptor closes, waiting for no answer and ignoring errors. A later request on
    /// the same inode finds the backing registration still counted, as it would if the
    /// release were slower.
    pub fn answered_first(&self) -> bool {
        matches!(self, Op::Release { .. })
    }

    /// File data moving (READ, WRITE, COPY_FILE_RANGE): the kernel sends a caller's several
    /// at a time (readahead, writeback), which matters to how request threads are scheduled.
    pub fn moves_data(&self) -> bool {
        matches!(
            self,
            Op::Read { .. } | Op::Write { .. } | Op::CopyFileRange { .. }
        )
    }
}
