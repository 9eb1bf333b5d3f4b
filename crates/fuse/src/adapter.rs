//! `fuser::Filesystem` over a memofs `Backend`: decodes requests, applies the cache policy,
//! counts, and encodes replies. No filesystem logic lives here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, FileHandle, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use memofs_core::options::{MountOptions, PassthroughMode};
use memofs_core::{
    Attr, Backend, CachePolicy, Caller, Errno, Ino, Invalidator, Opened, Result, SetAttr, Timestamp,
};
use parking_lot::Mutex;

use crate::convert::{errno, file_attr, file_type, negative_attr, time_set};
use crate::stats::{Event, Op, Stats};

/// Largest WRITE the kernel may send (it caps requests at `fs.fuse.max_pages_limit` pages).
pub const MAX_WRITE: u32 = 1 << 20;

/// Transport settings that are not cache timeouts.
#[derive(Clone, Copy, Debug)]
pub struct TransportConfig {
    /// Ask for the kernel writeback cache.
    pub writeback: bool,
    /// Open every file with `FOPEN_DIRECT_IO`.
    pub direct_io: bool,
    /// Hand regular files' backing fds to the kernel (FUSE passthrough) where the backend has
    /// them and the kernel allows it.
    pub passthrough: bool,
    /// Fail the mount if passthrough was asked for and the kernel does not offer it.
    pub passthrough_required: bool,
}

impl TransportConfig {
    /// The settings a mount with `opts` uses, for a backend that can (`backing_fds`) or
    /// cannot hand the kernel file descriptors.
    pub fn for_mount(opts: &MountOptions, backing_fds: bool) -> TransportConfig {
        TransportConfig {
            writeback: opts.writeback,
            direct_io: opts.direct_io,
            passthrough: opts.passthrough != PassthroughMode::Off && backing_fds,
            passthrough_required: opts.passthrough == PassthroughMode::On && backing_fds,
        }
    }

    /// Whether INIT asks for the writeback cache: never together with passthrough, which
    /// excludes it. Backends that serve file data must know this before they are mounted.
    pub fn writeback_cache(&self) -> bool {
        self.writeback && !self.passthrough
    }
}

/// The `fuser::Filesystem` implementation.
pub struct Adapter<B: Backend> {
    backend: Arc<B>,
    policy: CachePolicy,
    config: TransportConfig,
    stats: Arc<Stats>,
    /// Set once INIT granted passthrough; cleared if the kernel refuses a backing fd.
    passthrough: AtomicBool,
    /// One backing id per inode with passthrough opens, with its open count.
    backing: Mutex<HashMap<Ino, (Arc<BackingId>, usize)>>,
    /// Set once mounted: where attribute changes the kernel cannot know of are reported.
    invalidator: Arc<OnceLock<Arc<dyn Invalidator>>>,
}

thread_local! {
    /// Each request thread reuses one read buffer: no allocation per READ.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

impl<B: Backend> Adapter<B> {
    /// Wraps `backend` with the mount's cache policy.
    pub fn new(
        backend: Arc<B>,
        policy: CachePolicy,
        config: TransportConfig,
        stats: Arc<Stats>,
    ) -> Self {
        Adapter {
            backend,
            policy,
            config,
            stats,
            passthrough: AtomicBool::new(false),
            backing: Mutex::new(HashMap::new()),
            invalidator: Arc::new(OnceLock::new()),
        }
    }

    /// Where to hand the invalidator once the session exists.
    pub fn invalidator_slot(&self) -> Arc<OnceLock<Arc<dyn Invalidator>>> {
        self.invalidator.clone()
    }

    /// Clears setuid/setgid (see [`Backend::kill_suidgid`]) where the kernel, which runs
    /// with `FUSE_HANDLE_KILLPRIV_V2`, leaves it to the server; tells the kernel to drop
    /// the attributes it cached if anything changed.
    fn kill_privs(&self, req: &Request, ino: Ino) {
        if let Ok(true) = self.backend.kill_suidgid(&caller(req), ino) {
            if let Some(inv) = self.invalidator.get() {
                inv.inode(ino);
            }
        }
    }

    /// An unprivileged caller (approximating the kernel's `CAP_FSETID` check by uid 0).
    fn unprivileged(req: &Request) -> bool {
        req.uid() != 0
    }

    /// The backing id to open `ino`/`fh` with, registering the backend's fd with the kernel
    /// on the inode's first passthrough open. `None`: serve this open through the server.
    fn backing_for(
        &self,
        ino: Ino,
        fh: u64,
        register: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let mut map = self.backing.lock();
        if let Some((id, opens)) = map.get_mut(&ino) {
            *opens += 1;
            return Some(id.clone());
        }
        let mut register = Some(register);
        let mut registered = None;
        self.backend.with_backing_fd(ino, fh, &mut |fd| {
            registered = register.take().map(|r| r(fd));
        });
        match registered? {
            Ok(id) => {
                let id = Arc::new(id);
                map.insert(ino, (id.clone(), 1));
                Some(id)
            }
            Err(e) => {
                log::warn!("kernel refused a passthrough backing fd ({e}); serving file data through the server");
                self.passthrough.store(false, Ordering::Relaxed);
                None
            }
        }
    }

    /// Open flags as the backend should honour them: the kernel places every append itself
    /// (from its i_size, under the inode lock) and sends explicit offsets, and it also writes
    /// back mmap-dirtied pages through whatever handle maps them, so a backend that applied
    /// `O_APPEND` would move those writes to the end of the file.
    fn open_flags(&self, flags: i32) -> i32 {
        flags & !libc::O_APPEND
    }

    /// Runs one request's handling and counts it, with its latency, under `op`.
    /// Open flags for a regular file: `FOPEN_NOFLUSH` unless the backend acts on `close`
    /// (the kernel ignores it under the writeback cache, which must write back on close);
    /// opens served by the server (not `passthrough`) also get the cache flags.
    fn fopen_flags(&self, o: &Opened, passthrough: bool) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if !self.backend.flush_on_close() {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        if !passthrough && o.keep_cache {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if !passthrough && (o.direct_io || self.config.direct_io) {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        f
    }

    fn timed<R>(&self, op: Op, handle: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = handle();
        self.stats.record(op, t);
        r
    }

    /// A passthrough open of `ino` was released.
    fn release_backing(&self, ino: Ino) {
        let mut map = self.backing.lock();
        if let Some((_, opens)) = map.get_mut(&ino) {
            *opens -= 1;
            if *opens == 0 {
                map.remove(&ino);
            }
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<Attr>) {
        match r {
            Ok(attr) => {
                let e = self.policy.entry(attr);
                reply.entry_with_ttls(
                    &e.attr_timeout,
                    &e.entry_timeout,
                    &file_attr(&attr),
                    Generation(attr.generation),
                );
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_attr(&self, reply: ReplyAttr, r: Result<Attr>) {
        match r {
            Ok(attr) => reply.attr(&self.policy.attr_timeout, &file_attr(&attr)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_empty(&self, reply: ReplyEmpty, r: Result<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn reply_xattr(reply: ReplyXattr, size: u32, r: Result<Vec<u8>>) {
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(errno(Errno::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir_common(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&memofs_core::DirEntry) -> bool,
    ) -> Result<()> {
        self.backend.readdir(ino.0, fh.0, offset, plus, add)
    }
}

impl<B: Backend> fuser::Filesystem for Adapter<B> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(64);
        let mut wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_MAX_PAGES
            | InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_ASYNC_DIO
            // The server clears setuid/setgid on write, truncate and chown, so the kernel
            // need not look up security.capability before every write.
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.config.passthrough {
            // Passthrough and the writeback cache exclude each other; passthrough wins.
            if config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH)
                && config.set_max_stack_depth(1).is_ok()
            {
                wanted |= InitFlags::FUSE_PASSTHROUGH;
                self.passthrough.store(true, Ordering::Relaxed);
            } else if self.config.passthrough_required {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "passthrough=on, but this kernel does not offer FUSE passthrough",
                ));
            }
        }
        // Never both: a backend is told before INIT which of the two it serves.
        if self.config.writeback_cache() {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        // Ask for each capability the kernel offers; missing ones are simply not used.
        for flag in wanted.iter() {
            let _ = config.add_capabilities(flag);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = Instant::now();
        let r = self.backend.lookup(&caller(req), parent.0, name);
        // Counted before the reply, so a client that saw the answer also sees it counted.
        self.stats.event(match r {
            Ok(_) => Event::LookupHit,
            Err(_) => Event::LookupMiss,
        });
        self.stats.record(Op::Lookup, t);
        match r {
            Err(Errno::ENOENT) => match self.policy.negative() {
                Some(neg) => {
                    self.stats.event(Event::NegativeReply);
                    reply.entry_with_ttls(
                        &Duration::ZERO,
                        &neg.entry_timeout,
                        &negative_attr(),
                        Generation(0),
                    );
                }
                None => reply.error(errno(Errno::ENOENT)),
            },
            r => self.reply_entry(reply, r),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.timed(Op::Forget, || {
            self.backend.forget(ino.0, nlookup);
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.timed(Op::Getattr, || {
            self.reply_attr(reply, self.backend.getattr(ino.0));
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.timed(Op::Setattr, || {
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(time_set),
                mtime: mtime.map(time_set),
                ctime: ctime.map(Timestamp::from_system_time),
                fh: fh.map(|f| f.0),
            };
            let mut r = self.backend.setattr(&caller(req), ino.0, &set);
            // Truncate by an unprivileged caller, and any chown, drop setuid/setgid (for a
            // chown, unless the backend's host filesystem did so itself).
            let chown = (uid.is_some() || gid.is_some()) && !self.backend.chown_kills_privs();
            let kill = (size.is_some() && Self::unprivileged(req)) || chown;
            if r.is_ok()
                && kill
                && matches!(self.backend.kill_suidgid(&caller(req), ino.0), Ok(true))
            {
                r = self.backend.getattr(ino.0);
            }
            self.reply_attr(reply, r);
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.timed(Op::Readlink, || match self.backend.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(e)),
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.timed(Op::Mknod, || {
            self.reply_entry(
                reply,
                self.backend.mknod(&caller(req), parent.0, name, mode, rdev),
            );
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.timed(Op::Mkdir, || {
            self.reply_entry(
                reply,
                self.backend.mkdir(&caller(req), parent.0, name, mode),
            );
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(Op::Unlink, || {
            self.reply_empty(reply, self.backend.unlink(&caller(req), parent.0, name));
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(Op::Rmdir, || {
            self.reply_empty(reply, self.backend.rmdir(&caller(req), parent.0, name));
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.timed(Op::Symlink, || {
            self.reply_entry(
                reply,
                self.backend
                    .symlink(&caller(req), parent.0, link_name, target.as_os_str()),
            );
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Rename, || {
            self.reply_empty(
                reply,
                self.backend.rename(
                    &caller(req),
                    parent.0,
                    name,
                    newparent.0,
                    newname,
                    flags.bits(),
                ),
            );
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.timed(Op::Link, || {
            self.reply_entry(
                reply,
                self.backend.link(&caller(req), ino.0, newparent.0, newname),
            );
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.timed(Op::Open, || {
            match self
                .backend
                .open(&caller(req), ino.0, self.open_flags(flags.0))
            {
                Ok(o) => {
                    // O_TRUNC truncates here (atomic_o_trunc). With passthrough the server
                    // never sees the writes, so an unprivileged open for writing drops the
                    // bits now rather than at the first write (documented in the README).
                    let writing = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
                    let passthrough = self.passthrough.load(Ordering::Relaxed);
                    if Self::unprivileged(req)
                        && (flags.0 & libc::O_TRUNC != 0 || (writing && passthrough))
                    {
                        self.kill_privs(req, ino.0);
                    }
                    match self.backing_for(ino.0, o.fh, |fd| reply.open_backing(fd)) {
                        Some(id) => reply.opened_passthrough(
                            FileHandle(o.fh),
                            self.fopen_flags(&o, true),
                            &id,
                        ),
                        None => reply.opened(FileHandle(o.fh), self.fopen_flags(&o, false)),
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.timed(Op::Read, || {
            READ_BUF.with(|buf| {
                let mut buf = buf.borrow_mut();
                match self.backend.read(ino.0, fh.0, offset, size, &mut buf) {
                    Ok(()) => reply.data(&buf),
                    Err(e) => reply.error(errno(e)),
                }
            });
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        wflags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.timed(Op::Write, || {
            if wflags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                self.kill_privs(req, ino.0);
            }
            match self.backend.write(ino.0, fh.0, offset, data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Flush, || {
            self.reply_empty(reply, self.backend.flush(ino.0, fh.0));
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Release, || {
            self.release_backing(ino.0);
            self.reply_empty(reply, self.backend.release(ino.0, fh.0));
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Fsync, || {
            self.reply_empty(reply, self.backend.fsync(ino.0, fh.0, datasync));
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.timed(Op::Opendir, || {
            match self.backend.opendir(&caller(req), ino.0, flags.0) {
                Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.timed(Op::Readdir, || {
            let r = self.readdir_common(ino, fh, offset, false, &mut |e| {
                !reply.add(INodeNo(e.ino), e.offset, file_type(e.kind), &e.name)
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.timed(Op::Readdirplus, || {
            let ttl = self.policy.entry_timeout.min(self.policy.attr_timeout);
            let r = self.readdir_common(ino, fh, offset, true, &mut |e| match &e.attr {
                Some(a) => !reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    &e.name,
                    &ttl,
                    &file_attr(a),
                    Generation(a.generation),
                ),
                // `.` and `..`: the kernel links neither (so they take no lookup reference), but
                // their inode numbers become `d_ino`, and readdir(3) hides entries with `d_ino` 0.
                None => {
                    let mut attr = negative_attr();
                    attr.kind = file_type(e.kind);
                    attr.ino = INodeNo(e.ino);
                    !reply.add(
                        INodeNo(e.ino),
                        e.offset,
                        &e.name,
                        &Duration::ZERO,
                        &attr,
                        Generation(0),
                    )
                }
            });
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Releasedir, || {
            self.reply_empty(reply, self.backend.releasedir(ino.0, fh.0));
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Fsyncdir, || {
            self.reply_empty(reply, self.backend.fsyncdir(ino.0, fh.0, datasync));
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.timed(Op::Statfs, || match self.backend.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
            ),
            Err(e) => reply.error(errno(e)),
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Setxattr, || {
            self.reply_empty(
                reply,
                self.backend
                    .setxattr(&caller(req), ino.0, name, value, flags),
            );
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.timed(Op::Getxattr, || {
            Self::reply_xattr(reply, size, self.backend.getxattr(ino.0, name));
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.timed(Op::Listxattr, || {
            Self::reply_xattr(reply, size, self.backend.listxattr(ino.0));
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(Op::Removexattr, || {
            self.reply_empty(reply, self.backend.removexattr(&caller(req), ino.0, name));
        });
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions); only existence is ours.
        self.timed(Op::Access, || {
            self.reply_empty(reply, self.backend.getattr(ino.0).map(|_| ()));
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.timed(Op::Create, || {
            match self
                .backend
                .create(&caller(req), parent.0, name, mode, self.open_flags(flags))
            {
                Ok((attr, o)) => {
                    let e = self.policy.entry(attr);
                    // fuser's `created` uses one timeout for entry and attributes; take the shorter.
                    let ttl = e.entry_timeout.min(e.attr_timeout);
                    let (fa, generation, fh) = (
                        file_attr(&attr),
                        Generation(attr.generation),
                        FileHandle(o.fh),
                    );
                    match self.backing_for(attr.ino, o.fh, |fd| reply.open_backing(fd)) {
                        Some(id) => reply.created_passthrough(
                            &ttl,
                            &fa,
                            generation,
                            fh,
                            self.fopen_flags(&o, true),
                            &id,
                        ),
                        None => {
                            reply.created(&ttl, &fa, generation, fh, self.fopen_flags(&o, false))
                        }
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.timed(Op::Fallocate, || {
            self.reply_empty(
                reply,
                self.backend.fallocate(ino.0, fh.0, offset, length, mode),
            );
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.timed(Op::Lseek, || {
            let r = u64::try_from(offset)
                .map_err(|_| Errno::ENXIO)
                .and_then(|off| self.backend.lseek(ino.0, fh.0, off, whence));
            match r {
                Ok(off) => reply.offset(off as i64),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.timed(Op::CopyFileRange, || {
            match self.backend.copy_file_range(
                ino_in.0, fh_in.0, offset_in, ino_out.0, fh_out.0, offset_out, len,
            ) {
                Ok(n) => reply.written(n.min(u32::MAX as u64) as u32),
                Err(e) => reply.error(errno(e)),
            }
        });
    }
}
