//! Types shared by backends and the transport.

use std::ffi::OsString;
use std::time::Duration;

use crate::time::Timestamp;

/// An inode number as seen by the kernel. `ROOT_INO` is the root directory.
pub type Ino = u64;

/// The root directory's inode number (FUSE's `FUSE_ROOT_ID`).
pub const ROOT_INO: Ino = 1;

/// Longest file name accepted, as on tmpfs.
pub const NAME_MAX: usize = 255;

/// The host's page size (`sysconf(_SC_PAGESIZE)`: 4 KiB on x86-64, 4, 16 or 64 KiB on
/// aarch64), the unit tmpfs allocates in and guest memory is faulted in.
pub fn page_size() -> u64 {
    static SIZE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf only reads its argument.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
    })
}

/// Checks that `name` is one ordinary path component a filesystem may hold: not empty, not
/// `.` or `..`, no `/` or NUL, at most [`NAME_MAX`] bytes (`ENAMETOOLONG`; `EINVAL` for the
/// rest). Both backends check every name that creates, removes or renames an entry with it.
pub fn check_component(name: &[u8]) -> crate::Result<()> {
    if name.len() > NAME_MAX {
        return Err(crate::Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(crate::Errno::EINVAL);
    }
    Ok(())
}

/// The kind of object an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Character device node.
    CharDevice,
    /// Block device node.
    BlockDevice,
}

impl FileKind {
    /// The kind encoded in the `S_IFMT` bits of a mode, if any.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::Regular,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
        }
    }
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// Generation: with `ino`, identifies the inode for the inode's whole life.
    pub generation: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: Timestamp,
    /// Last data modification.
    pub mtime: Timestamp,
    /// Last status change.
    pub ctime: Timestamp,
    /// Creation (birth) time.
    pub crtime: Timestamp,
    /// Object kind.
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (no `S_IFMT` bits).
    pub perm: u16,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u32,
    /// Preferred I/O size.
    pub blksize: u32,
    /// A directory where another filesystem is mounted (an export's submount), which a
    /// guest that asked for them is told of (`FUSE_ATTR_SUBMOUNT`).
    pub mount_root: bool,
}

/// A reply to a lookup-like request: the attributes (or none, for a negative entry) with how
/// long the kernel may cache the name and the attributes. Built only by [`crate::CachePolicy`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// `None` for a negative entry (FUSE nodeid 0): "this name does not exist".
    pub attr: Option<Attr>,
    /// How long the kernel may keep the name → inode mapping (or the negative entry).
    pub entry_timeout: Duration,
    /// How long the kernel may keep the attributes.
    pub attr_timeout: Duration,
}

/// Who is making a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Effective (filesystem) user id.
    pub uid: u32,
    /// Effective (filesystem) group id.
    pub gid: u32,
    /// Process id, for diagnostics.
    pub pid: u32,
}

impl Caller {
    /// The superuser, for internal use and tests.
    pub const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
    };

    /// Whether the caller counts as a member of group `gid` where Linux asks
    /// `in_group_or_capable` (keeping the set-group-id bit: `posix_acl_update_mode`,
    /// `setattr_should_drop_sgid`): root (taken as holding `CAP_FSETID`), the caller's own
    /// group, or one of the supplementary groups the kernel lists for the calling thread.
    /// FUSE does not send supplementary groups, so they are read from `/proc/<pid>/status`;
    /// a caller whose process cannot be read there (pid 0, from another pid namespace)
    /// counts as no member, as the kernel's default is to clear.
    pub fn in_group(&self, gid: u32) -> bool {
        if self.uid == 0 || self.gid == gid {
            return true;
        }
        if self.pid == 0 {
            return false;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return false;
        };
        status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|groups| groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
    }
}

/// A time to set with `utimensat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// `UTIME_NOW`: the time of the change (the `ctime` the kernel sent with it, else the
    /// server's clock).
    Now,
    /// An explicit time.
    At(Timestamp),
}

/// The fields a SETATTR request changes; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the kind bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
    /// New change time, when the kernel sends one.
    pub ctime: Option<Timestamp>,
    /// The open file handle the change came through, if any.
    pub fh: Option<u64>,
}

/// One directory entry produced by `readdir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: Ino,
    /// The offset to pass to `readdir` to continue after this entry.
    pub offset: u64,
    /// Kind of the entry.
    pub kind: FileKind,
    /// Entry name.
    pub name: OsString,
    /// Attributes, filled for READDIRPLUS only (not for `.` and `..`).
    pub attr: Option<Attr>,
}

/// Filesystem-wide usage, as `statfs` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Total blocks of `bsize` bytes.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
}

/// What `open`/`create`/`opendir` hands back to the transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// The file handle the kernel passes back on later requests.
    pub fh: u64,
    /// A `close(2)` of this open can fail in the backend (a host filesystem that reports
    /// errors at close, such as NFS): the kernel is to send FLUSH at each close, and
    /// [`crate::Backend::flush`]'s answer is what `close(2)` returns.
    pub flush: bool,
    /// The file is append-only: no open of it is passed through to a backing file, and an
    /// open that writes gets no page cache either, so every write reaches the backend, which
    /// takes appends only (and the kernel refuses a shared writable mapping), as a kernel
    /// refuses to overwrite an append-only file's bytes.
    pub append_only: bool,
}

/// What a backend can do, declared once (see [`crate::Backend::capabilities`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Regular files can lend the kernel a file descriptor for their data
    /// ([`crate::Backend::with_backing_fd`], FUSE passthrough).
    pub backing_fds: bool,
    /// Every change reaches the backend through the mount (nothing changes behind the
    /// kernel's back), so the kernel may keep names, attributes, directory listings and
    /// file pages until the server says otherwise.
    pub sole_writer: bool,
    /// The backend keeps POSIX ACLs (`system.posix_acl_access`/`_default`) with their
    /// semantics: a set access ACL updates the mode, new inodes inherit the parent's
    /// default ACL instead of taking the umask, chmod updates the ACL. The kernel then
    /// enforces them (FUSE_POSIX_ACL).
    pub posix_acl: bool,
    /// Others change the backend's files where no watcher here can see it (a network,
    /// cluster or FUSE filesystem underneath, changed from other machines): what the kernel
    /// caches must not outlive a short timeout unless the mount asked otherwise.
    pub unseen_writers: bool,
    /// The files' atime is another system's to keep (a FUSE or network filesystem
    /// underneath: the kernel never moves it, the server behind moves it on its own terms,
    /// if at all), so no rule the mount states can be kept by what reaches this server:
    /// unless the mount names one, atime holds back no cache (`noatime`).
    pub atime_elsewhere: bool,
}

/// `renameat2` flags understood by backends.
pub mod rename_flags {
    /// Fail with `EEXIST` if the target exists.
    pub const NOREPLACE: u32 = libc::RENAME_NOREPLACE;
    /// Atomically swap source and target.
    pub const EXCHANGE: u32 = libc::RENAME_EXCHANGE;
    /// Leave a whiteout (a 0:0 character device) where the source was (overlayfs).
    pub const WHITEOUT: u32 = libc::RENAME_WHITEOUT;
}

/// Inode flags as `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` carry them (`linux/fs.h`; libc does
/// not define them).
pub mod inode_flags {
    /// Writes are synchronous (`chattr +S`).
    pub const SYNC: u32 = 0x0000_0008;
    /// Immutable: no change of data, name, attributes or xattrs (`chattr +i`).
    pub const IMMUTABLE: u32 = 0x0000_0010;
    /// Append-only: writers must append, nothing may truncate, rename or unlink it
    /// (`chattr +a`).
    pub const APPEND: u32 = 0x0000_0020;
    /// Not for dump(8) (`chattr +d`).
    pub const NODUMP: u32 = 0x0000_0040;
    /// atime is never updated (`chattr +A`).
    pub const NOATIME: u32 = 0x0000_0080;
    /// Directory updates are synchronous (`chattr +D`).
    pub const DIRSYNC: u32 = 0x0001_0000;
    /// DAX (`chattr +x`).
    pub const DAX: u32 = 0x0200_0000;
    /// New inodes inherit the directory's project id (`chattr +P`).
    pub const PROJINHERIT: u32 = 0x2000_0000;
}

/// Counters a backend exposes for `memofs stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendUsage {
    /// Bytes of file data, xattrs and symlink targets held.
    pub bytes_used: u64,
    /// Byte limit (`size=`).
    pub bytes_limit: u64,
    /// Live inodes, including unlinked-but-open ones.
    pub inodes_used: u64,
    /// Inode limit (`nr_inodes=`).
    pub inodes_limit: u64,
    /// Host descriptors the backend holds, where it holds any (the passthrough backend).
    pub descriptors_used: u64,
    /// The most it may hold (0: it holds none).
    pub descriptors_limit: u64,
    /// Descriptors opened again after being closed to stay within the limit.
    pub descriptors_reopened: u64,
}
