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

/// Reads up to a length of bytes at an offset of a descriptor to where a READ's bytes go;
/// how many it read ([`Backend::read_from_fd`]).
pub type FdRead<'a> = dyn FnMut(BorrowedFd<'_>, u64, usize) -> std::io::Result<usize> + 'a;

/// Writes a WRITE's bytes at an offset of a descriptor, from where they lie; how many it
/// wrote ([`Backend::write_to_fd`]).
pub type FdWrite<'a> = dyn FnMut(BorrowedFd<'_>, u64) -> std::io::Result<usize> + 'a;
use std::sync::Arc;

use crate::errno::{Errno, Result};
use crate::invalidate::Invalidator;
use crate::types::{
    Attr, BackendUsage, Caller, Capabilities, DirEntry, Ino, Opened, SetAttr, StatFs,
};

/// A filesystem backend.
pub trait Backend: Send + Sync + 'static {
    /// Finds `name` in directory `parent`. A miss is `Err(ENOENT)`.
    fn lookup(&self, caller: &Caller, parent: Ino, name: &OsStr) -> Result<Attr>;
    /// The kernel dropped `nlookup` references to `ino`.
    fn forget(&self, ino: Ino, nlookup: u64);
    /// The kernel dropped every reference it held, with no FORGET for them: a virtio-fs
    /// guest that unmounted (its connection ends before its inodes are evicted) or rebooted.
    /// The root stays.
    fn forget_all(&self);
    /// Every open file and directory handle is gone, with no RELEASE for them: the guest's
    /// kernel that held them reset or rebooted (a virtio-fs device's DESTROY, a new INIT, a
    /// reset). What only they kept (the data of files unlinked while open, host
    /// descriptors) goes now.
    fn release_all(&self);
    /// Attributes of `ino`.
    fn getattr(&self, ino: Ino) -> Result<Attr>;
    /// Changes attributes (chmod, chown, truncate, utimens).
    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr>;
    /// Target of a symlink.
    fn readlink(&self, ino: Ino) -> Result<Vec<u8>>;
    /// Creates a regular file, FIFO, socket or device node. `mode` includes the kind bits.
    /// `umask` is the caller's umask, not yet applied to `mode`: the backend applies it
    /// unless the parent directory has a default POSIX ACL, whose inheritance replaces it
    /// (as `posix_acl_create` does). When the kernel has applied the umask already, it is 0.
    fn mknod(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<Attr>;
    /// Creates a directory (`umask` as for [`Backend::mknod`]).
    fn mkdir(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<Attr>;
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
    /// Opens a regular file with open(2) `flags`. `O_APPEND` is passed on for the
    /// backend's checks (an append-only file refuses writers without it), but the kernel
    /// places every append itself and sends explicit offsets: a backend never moves a
    /// write to the end of the file.
    fn open(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened>;
    /// Creates and opens a regular file (the kernel sends this for `open(O_CREAT)`;
    /// `umask` as for [`Backend::mknod`]).
    fn create(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)>;
    /// Creates and opens a regular file with no name in directory `parent` (`O_TMPFILE`);
    /// `umask` as for [`Backend::mknod`]. The kernel counts one lookup for it.
    fn tmpfile(
        &self,
        _caller: &Caller,
        _parent: Ino,
        _mode: u32,
        _umask: u32,
        _flags: i32,
    ) -> Result<(Attr, Opened)> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Reads up to `size` bytes at `offset` into `buf` (cleared first); short at end of file.
    fn read(&self, ino: Ino, fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<()>;
    /// READ answered without a copy where the backend can: up to `size` bytes at `offset`,
    /// handed to `send` as consecutive slices, which may point into the backend's own memory
    /// (held unchanged for the call). The default reads into `buf` and sends that.
    fn read_with(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        buf: &mut Vec<u8>,
        send: &mut dyn FnMut(&[&[u8]]),
    ) -> Result<()> {
        self.read(ino, fh, offset, size, buf)?;
        send(&[buf]);
        Ok(())
    }
    /// READ where the data is in a file the host kernel holds (a host file; the mem
    /// backend's kernel-backed data): `read` gets its descriptor, `offset` and how many bytes
    /// there are to read (at most `size`, up to the end of the file the backend knows), reads
    /// them where they go and says how many it read. `None`: the data is elsewhere
    /// ([`Backend::read_with`] serves it).
    fn read_from_fd(
        &self,
        _ino: Ino,
        _fh: u64,
        _offset: u64,
        _size: u32,
        _read: &mut FdRead<'_>,
    ) -> Option<Result<usize>> {
        None
    }
    /// Writes `data` at `offset`; returns bytes written.
    fn write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32>;
    /// [`Backend::write`] of pages the kernel wrote back from its writeback cache. The kernel
    /// keeps a regular file's mtime and ctime while it caches the file and sends them in a
    /// SETATTR whenever it moves them, so a backend that keeps its own times leaves them as
    /// they are: the write-back of data written in the same clock tick as the file's last
    /// stamp would otherwise give the server a later time than the kernel shows. A backend
    /// whose files are stamped by something else (a host filesystem, or file data in the
    /// host kernel's own files, which stamp themselves at every write) writes as usual.
    fn write_cached(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write(ino, fh, offset, data)
    }
    /// WRITE where the data goes to a file the host kernel holds (a host file): `write`
    /// gets its descriptor and `offset`, writes the bytes there from where they lie and
    /// says how many it wrote. `None`: the data goes elsewhere ([`Backend::write`] takes it).
    fn write_to_fd(
        &self,
        _ino: Ino,
        _fh: u64,
        _offset: u64,
        _write: &mut FdWrite<'_>,
    ) -> Option<Result<u32>> {
        None
    }
    /// A `close(2)` of a descriptor of an open whose [`crate::Opened::flush`] was set: what
    /// the host's close would report (the kernel sends FLUSH only for those opens).
    fn flush(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }
    /// Last close of an open file.
    fn release(&self, ino: Ino, fh: u64) -> Result<()>;
    /// Makes data durable, as far as the backend has durability.
    fn fsync(&self, ino: Ino, fh: u64, datasync: bool) -> Result<()>;
    /// Opens a directory for reading.
    fn opendir(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened>;
    /// Lists entries after `offset` (0 = from the start). `sink` returns false when its buffer
    /// is full and the entry was not taken; listing stops there. With `plus`, entries carry
    /// attributes and count as lookups when taken. `fh` is 0 where the request layer
    /// declined OPENDIR (the backend is the only writer, or
    /// [`Backend::sees_every_change`]): the directory was never opened.
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
    /// Makes everything written durable, as far as the backend has durability (a
    /// `sync(2)` or `syncfs(2)` of the mount).
    fn syncfs(&self) -> Result<()> {
        Ok(())
    }
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
    /// Copies a range between two open files; returns bytes copied, never more than a FUSE
    /// reply's 32-bit count holds (a shorter count than asked is allowed, as for
    /// copy_file_range(2)).
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
    /// Whether the descriptor [`Backend::with_backing_fd`] lent for `ino` stays the file
    /// holding `ino`'s data after its last open closes, so the kernel's registration of it
    /// may be kept for the next open. Asked at the last release and at FORGET; answering
    /// false (the default) closes the registration then.
    fn keeps_backing(&self, _ino: Ino) -> bool {
        false
    }
    /// Takes new size and inode limits (0 = unlimited) on the live filesystem (`mount -o
    /// remount,size=,nr_inodes=`); an error says why not.
    fn set_limits(&self, _size: u64, _nr_inodes: u64) -> std::result::Result<(), String> {
        Err("this backend has no size or inode limits".into())
    }
    /// Puts a new atime rule in effect on the live filesystem (`mount -o
    /// remount,strictatime`, ...): one the mount names (`named`), or else the backend's own
    /// choice; an error says why not.
    fn set_atime(
        &self,
        _atime: crate::AtimePolicy,
        _named: bool,
    ) -> std::result::Result<(), String> {
        Err("this backend's atime rule is fixed when it is mounted".into())
    }
    /// Makes the live filesystem read-only or writable again (`mount -o remount,ro`); the
    /// request layer refuses changes itself on a read-only mount, so a backend needs to do
    /// nothing unless it enforces more.
    fn set_read_only(&self, _read_only: bool) -> std::result::Result<(), String> {
        Ok(())
    }
    /// The directories the kernel may hold (those it has looked up, and the root), whose
    /// listings it may keep.
    fn directories_known(&self) -> Vec<Ino> {
        vec![crate::ROOT_INO]
    }

    /// The inode flags `FS_IOC_GETFLAGS` reports (`FS_IMMUTABLE_FL`, `FS_APPEND_FL`, ...).
    fn get_flags(&self, _ino: Ino) -> Result<u32> {
        Err(Errno::ENOTTY)
    }
    /// Sets the inode flags (`FS_IOC_SETFLAGS`); the kernel has checked ownership and
    /// `CAP_LINUX_IMMUTABLE`. Flags the backend does not support fail with `EOPNOTSUPP`.
    fn set_flags(&self, _caller: &Caller, _ino: Ino, _flags: u32) -> Result<()> {
        Err(Errno::ENOTTY)
    }
    /// What this backend can do, declared once; the mount plan is computed from it.
    fn capabilities(&self) -> Capabilities;
    /// How the whole filesystem moves to another server process (a VM's live migration),
    /// where it can. Default: it cannot.
    fn migration(&self) -> Option<&dyn crate::migrate::Migrate> {
        None
    }

    /// The kernel is being given `attr` (a reply carries it): what it checks permissions
    /// against until it expires or is invalidated. Called for every attribute reply: cheap.
    /// Default: nothing to note.
    fn attr_sent(&self, _attr: &Attr) {}
    /// Whether a miss of `name` in `parent` that [`Backend::lookup`] just answered may be
    /// kept by the kernel as a negative entry. No where the backend was told the name was
    /// just made elsewhere and its source has not caught up yet (a change feed's report
    /// that came before the source's own client shows it): the next lookup asks again.
    /// Default: yes.
    fn miss_may_be_kept(&self, _parent: Ino, _name: &OsStr) -> bool {
        true
    }
    /// Whether `attr` may change where neither the mount nor the backend sees it (e.g. a
    /// host file's other hard links outside a watched export), so the kernel must not keep
    /// it (see [`crate::CachePolicy::attr_timeout_for`]). Called for every attribute reply:
    /// cheap. Default: never.
    fn attr_unseen_changes(&self, _attr: &Attr) -> bool {
        false
    }
    /// Whether every change made behind the kernel's back (on a host, by another process)
    /// to the names in any directory the kernel holds is reported to the invalidator as it
    /// happens, so the kernel may keep directory listings although the backend is not the
    /// only writer. Asked at every OPENDIR. Default: no.
    fn name_changes_reported(&self) -> bool {
        false
    }
    /// The kernel refused the file of `ino` that [`Backend::with_backing_fd`] lent, for a
    /// reason of the file's filesystem (stacked too deep, or without the operations the
    /// kernel needs): every file of that filesystem would be refused alike, so the backend
    /// may stop lending them (and opening them only to lend). Called with the request
    /// layer's backing map locked, as `with_backing_fd`. Default: nothing to note.
    fn backing_refused(&self, _ino: Ino) {}
    /// Whether every change made behind the kernel's back to a regular file's data (on a
    /// host, on another machine, through a mapping too) is reported to the invalidator as
    /// it happens, so the kernel may keep a file's pages across opens although the backend
    /// is not the only writer (a change feed that names each modified file; not a host
    /// watcher, which sees no write through a shared mapping). Asked at every OPEN the
    /// server serves. Default: no.
    fn data_changes_reported(&self) -> bool {
        false
    }
    /// Whether nothing can change the tree unseen for as long as the mount lives: every
    /// change made behind the kernel's back, to names and attributes alike, is reported to
    /// the invalidator as it happens (a local filesystem under a watcher that marks all of
    /// it, no other filesystem reachable, no other machine writing). The request layer then
    /// declines OPENDIR, once and for good: the kernel keeps every listing and sends READDIR
    /// with fh 0 when it needs one. Default: no.
    fn sees_every_change(&self) -> bool {
        false
    }
    /// Hands the backend the transport's invalidator, once mounted. Backends whose every
    /// change comes through the mount ignore it.
    fn attach_invalidator(&self, _invalidator: Arc<dyn Invalidator>) {}
}
