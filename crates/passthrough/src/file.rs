//! Open files: open, create, and the calls on an open handle.
//!
//! A regular file is opened by re-opening its `O_PATH` descriptor through `/proc/self/fd`
//! ([`crate::fd::ProcSelf::reopen`]) after checking that the inode is a regular file, so no
//! host path is resolved and no device or FIFO is ever opened by the server. Data calls use
//! `pread`/`pwrite` on the handle's descriptor at the offsets the kernel gives (descriptors
//! are opened without `O_APPEND`: the kernel turns appends into offsets itself), except that
//! a host file that is append-only (`chattr +a`) is opened with it, when the caller asked for
//! it, and its writes are then served by the server alone (see
//! [`memofs_core::Opened::append_only`]).
//!
//! While a change feed follows the source ([`PassthroughFs::opens_deferred`]), a plain
//! read-only OPEN opens no host file: the kernel keeps such a file's pages across opens
//! there (every change to its data is reported), so a file read again is read from the
//! kernel's copy, and the host file (on a distributed filesystem, an open and a close
//! through its own client, round trips to its servers) is opened by the first request that
//! needs it ([`PassthroughFs::host_fd`]).

use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use memofs_core::{Attr, Caller, Errno, FileKind, Ino, Opened, Result};

use crate::creds::CallerUmask;
use crate::handles::{writes, OpenFile};
use crate::inode::OpenPin;
use crate::inode::{Inode, Told};
use crate::sys;
use crate::PassthroughFs;

/// Flags the server never passes on: creation is explicit, the magic-link re-open must
/// follow, and no terminal becomes the server's.
const DROPPED_FLAGS: i32 =
    libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_TMPFILE;

/// Most bytes one COPY_FILE_RANGE copies: the largest multiple of the page size that the
/// 32-bit count of a FUSE reply holds (Linux clamps its requests the same way).
const MAX_COPY: u64 = u32::MAX as u64 & !4095;

/// Flags `openat2` accepts for a create (it refuses unknown bits, such as the kernel's
/// internal `__FMODE_EXEC`, which plain `openat` ignores).
const CREATE_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_NOATIME;

impl PassthroughFs {
    /// The flags to open a regular file with, from the kernel's `flags`. `O_APPEND` is
    /// dropped: the kernel places every append itself and sends its offset. So is `O_DIRECT`
    /// unless the configuration keeps it ([`crate::PassthroughConfig::direct_io`]): the
    /// host refuses a direct read or write into the server's own unaligned buffers (the
    /// kernel already bypasses its own page cache for direct I/O through the mount; the
    /// host's page cache then serves the server, as with virtiofsd's default).
    fn file_flags(&self, flags: i32) -> i32 {
        let direct = match self.config.direct_io {
            true => 0,
            false => libc::O_DIRECT,
        };
        flags & !DROPPED_FLAGS & !libc::O_APPEND & !direct
    }

    /// Runs `open(flags)`, first with `O_NOATIME` when the atime policy never updates atime
    /// for this kind (falling back without it on `EPERM`: only the owner or `CAP_FOWNER`
    /// may use it).
    pub(crate) fn open_noatime(
        &self,
        is_dir: bool,
        flags: i32,
        open: impl Fn(i32) -> Result<OwnedFd>,
    ) -> Result<OwnedFd> {
        if self.atime.load().never(is_dir) {
            match open(flags | libc::O_NOATIME) {
                Err(Errno::EPERM) => {}
                r => return r,
            }
        }
        open(flags)
    }

    /// Opens the regular file `inode` with already-filtered `flags` as a new handle. A
    /// writer the host refuses (`EPERM`) who asked for `O_APPEND` (`append`) is let in with
    /// it: the host file is append-only, and the host then places every write at its end.
    fn open_inode(&self, inode: &Inode, flags: i32, append: bool) -> Result<Opened> {
        match inode.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(Errno::EISDIR),
            FileKind::Symlink => return Err(Errno::ELOOP),
            _ => return Err(Errno::ENXIO),
        }
        // Pinned first: the descriptor the open goes through stays until the handle closes.
        let pin = OpenPin::new(inode);
        let open =
            |flags| self.open_noatime(false, flags, |f| self.proc.reopen(inode.fd()?.as_fd(), f));
        match open(flags) {
            Err(Errno::EPERM) if writes(flags) && append => {
                let fd = open(flags | libc::O_APPEND)?;
                self.new_handle(pin, fd, flags, true)
            }
            Ok(fd) => {
                // A reader of an append-only file is told so too (see `Opened::append_only`).
                let append_only = sys::io::get_flags(fd.as_fd())
                    .is_ok_and(|f| f & memofs_core::inode_flags::APPEND != 0);
                self.new_handle(pin, fd, flags, append_only)
            }
            Err(e) => Err(e),
        }
    }

    /// `append_only`: the host file is append-only (see [`Opened::append_only`]).
    fn new_handle(
        &self,
        pin: OpenPin,
        fd: OwnedFd,
        flags: i32,
        append_only: bool,
    ) -> Result<Opened> {
        let flush = writes(flags) && close_may_fail(fd.as_fd());
        let file = OpenFile::new(pin, Some(self.budget.keep(fd)?), flags);
        Ok(Opened {
            fh: self.files.insert(file),
            flush,
            append_only,
        })
    }

    /// OPEN. Runs with the server's credentials: the kernel has checked the caller's
    /// permission (`default_permissions`).
    ///
    /// The kernel checked that permission against the attributes it was last given, which
    /// a host change it was not told of (a `chmod` through a hard link made after the
    /// lookup, outside what the watcher sees) can leave stale. So the host's mode, owner and
    /// group are compared with them first; if they differ, the open fails with `ESTALE`,
    /// and the kernel walks the path again, looking the name up afresh, and checks the
    /// permission against the host's attributes (then as they are).
    ///
    /// While a change feed follows the source, a file with one name under the export has
    /// every change of its mode and owner reported, and its attributes are what the kernel
    /// was told, as for the names it keeps: the comparison is left out, and a plain
    /// read-only open is deferred (see the module documentation).
    pub(crate) fn open_file(&self, ino: Ino, flags: i32) -> Result<Opened> {
        let inode = self.table.get(ino)?;
        let told = *inode.told.lock();
        let reported = self.opens_deferred() && told.is_some_and(|t| t.one_name());
        if let Some(told) = told.filter(|_| !reported) {
            if !told.grants_as(&Told::of(&self.attr(&inode)?)) {
                return Err(Errno::ESTALE);
            }
        }
        let (append, flags) = (flags & libc::O_APPEND != 0, self.file_flags(flags));
        if reported && inode.kind == FileKind::Regular && Self::only_reads(flags) {
            let file = OpenFile::new(OpenPin::new(&inode), None, flags);
            return Ok(Opened {
                fh: self.files.insert(file),
                ..Opened::default()
            });
        }
        self.open_inode(&inode, flags, append)
    }

    /// Whether the file `ino` is on a host filesystem whose files the kernel refuses as
    /// backing files (see `Backend::backing_refused`).
    pub(crate) fn lends_no_backing(&self, ino: Ino) -> bool {
        if self.unlendable.read().is_empty() {
            return false;
        }
        let Ok(inode) = self.table.get(ino) else {
            return false;
        };
        self.unlendable.read().contains(&inode.host.dev)
    }

    /// Whether a plain read-only open may be deferred: a change feed follows the source.
    pub(crate) fn opens_deferred(&self) -> bool {
        self.following.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether an open with (filtered) `flags` only reads: nothing it does at open time
    /// (truncating, or a host file's own open-time effects) may wait.
    fn only_reads(flags: i32) -> bool {
        flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0
    }

    /// The host descriptor of `file`, opened now if its open was deferred (with the
    /// server's credentials, as the open itself would have been). Two requests racing to
    /// open it both may; one descriptor is kept.
    pub(crate) fn host_fd<'f>(&self, file: &'f OpenFile) -> Result<BorrowedFd<'f>> {
        if let Some(fd) = file.fd.get() {
            return Ok(fd.as_fd());
        }
        let inode = self.table.get(file.ino)?;
        let fd = self.open_noatime(false, file.flags, |f| {
            self.proc.reopen(inode.fd()?.as_fd(), f)
        })?;
        let fd = self.budget.keep(fd)?;
        // Lost a race: the other request's descriptor is the handle's, this one closes.
        let _ = file.fd.set(fd);
        Ok(file.fd.get().expect("set above").as_fd())
    }

    /// CREATE, with the caller's credentials and umask. The file is created with `O_EXCL`;
    /// if the name exists (made on the host after the kernel cached it as missing) and the
    /// caller did not ask for `O_EXCL`, the existing file is opened as `open(2)` would, still
    /// with the caller's credentials since the kernel did not check this file.
    pub(crate) fn create_file(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        let dir = self.exported_dir(self.table.get(parent)?)?;
        let name = crate::name::component(name)?;
        let exclusive = flags & libc::O_EXCL != 0;
        let append = flags & libc::O_APPEND != 0;
        let flags = self.file_flags(flags);
        let changes = self.table.host_changes();
        let how = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
        let created = self.create_as_caller(caller, &dir, &name, (mode, umask), flags | how);
        if created.is_ok() {
            self.table.settling.made(dir.ino, name.as_bytes());
        }
        match created {
            Ok(fd) => self.register_created(fd, flags, changes),
            Err(Errno::EEXIST) if !exclusive => {
                self.open_existing(caller, &dir, &name, (flags, append))
            }
            Err(e) => Err(e),
        }
    }

    /// TMPFILE: `openat(parent, ".", O_TMPFILE)` on the host with the caller's credentials
    /// and umask. The inode enters the table with no name; LINK can give it one (unless
    /// `O_EXCL`), as `linkat(fd, "", AT_EMPTY_PATH)` would.
    pub(crate) fn tmpfile_file(
        &self,
        caller: &Caller,
        parent: Ino,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        let dir = self.table.get(parent)?;
        let exclusive = flags & libc::O_EXCL;
        let flags = self.file_flags(flags) & !libc::O_TRUNC;
        let changes = self.table.host_changes();
        let how = libc::O_TMPFILE | exclusive;
        let created = self.create_as_caller(caller, &dir, c".", (mode, umask), flags | how)?;
        self.register_created(created, flags, changes)
    }

    /// Opens `name` in `dir` with `flags` (the creating ones included, kept whatever
    /// [`CREATE_FLAGS`] says, and `O_DIRECT` where [`PassthroughFs::file_flags`] kept it) as
    /// the caller, with the caller's umask and `(mode, umask)`.
    fn create_as_caller(
        &self,
        caller: &Caller,
        dir: &Inode,
        name: &CStr,
        (mode, umask): (u32, u32),
        flags: i32,
    ) -> Result<OwnedFd> {
        let how = flags & (libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_TMPFILE);
        let _creds = self.as_caller(caller);
        let guard = CallerUmask::set(umask);
        let mode = CallerUmask::mode(&guard, mode, umask) & 0o7777;
        self.open_noatime(false, flags & !how, |f| {
            let f = (f & (CREATE_FLAGS | libc::O_DIRECT)) | how;
            sys::at::openat2(dir.fd()?.as_fd(), name, f, mode, self.resolve)
        })
    }

    /// Enters a file just created through `fd` into the inode table (its `O_PATH`
    /// descriptor is re-opened from `fd`, not looked up by name again) and opens a handle.
    /// `changes`: the watcher's count of delivered host changes before the file was created;
    /// if any came since, one may have been about this file before it was in the table.
    fn register_created(&self, fd: OwnedFd, flags: i32, changes: u64) -> Result<(Attr, Opened)> {
        let path_fd = self.proc.reopen(fd.as_fd(), crate::namespace::PATH_FLAGS)?;
        let (inode, attr) = self.reference_fd(path_fd)?;
        if self.caps_cached(&inode) && self.table.host_changes() == changes {
            inode.no_caps.created();
        }
        match self.new_handle(OpenPin::new(&inode), fd, flags, false) {
            Ok(opened) => Ok((attr, opened)),
            Err(e) => {
                self.table.forget(inode.ino, 1);
                Err(e)
            }
        }
    }

    fn open_existing(
        &self,
        caller: &Caller,
        dir: &Inode,
        name: &CStr,
        (flags, append): (i32, bool),
    ) -> Result<(Attr, Opened)> {
        let (inode, attr) = self.lookup_name(dir, name)?;
        let opened = {
            let _creds = self.as_caller(caller);
            self.open_inode(&inode, flags, append)
        };
        match opened {
            Ok(opened) => Ok((attr, opened)),
            Err(e) => {
                self.table.forget(inode.ino, 1);
                Err(e)
            }
        }
    }

    /// The open handle `fh`.
    pub(crate) fn file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        self.files.get(fh)
    }

    /// READ into `buf`.
    pub(crate) fn read_file(&self, fh: u64, off: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        let file = self.file(fh)?;
        sys::io::pread(self.host_fd(&file)?, buf, size as usize, off)
    }

    /// WRITE at `off`; returns the bytes written. A writer of an append-only host file
    /// holds a descriptor opened with `O_APPEND`, on which the host places every write at
    /// the file's end, whatever the offset: nothing already in the file is overwritten, even
    /// after the caller cleared `O_APPEND` with `fcntl` (which the kernel cannot refuse on a
    /// FUSE file), and an append lands at the end the host knows, not at the size the
    /// kernel cached.
    pub(crate) fn write_file(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let file = self.file(fh)?;
        let n = sys::io::pwrite(self.host_fd(&file)?, data, off)?;
        Ok(n as u32)
    }

    /// COPY_FILE_RANGE between two open handles: at most [`MAX_COPY`] bytes per call, so
    /// that the count always fits the reply (the host kernel does the work, and a
    /// filesystem with its own `copy_file_range` may take a longer length whole).
    pub(crate) fn copy_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        let (src, dst) = (self.file(fh_in)?, self.file(fh_out)?);
        let len = len.min(MAX_COPY);
        sys::io::copy_file_range(
            self.host_fd(&src)?,
            off_in,
            self.host_fd(&dst)?,
            off_out,
            len,
        )
    }
}

/// Whether a `close(2)` of a file opened for writing on `fd`'s filesystem may report an error
/// (data written back at close, as NFS does; a quota checked then): every filesystem but the
/// local ones, whose close never fails. Only such opens are flushed at each close (one more
/// waited request per `close(2)`).
pub(crate) fn close_may_fail(fd: BorrowedFd<'_>) -> bool {
    sys::io::fstatfs(fd).map_or(true, |st| !crate::watch::is_local(st.f_type))
}
