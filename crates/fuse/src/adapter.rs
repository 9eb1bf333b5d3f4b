//! `fuser::Filesystem` over a memofs `Backend`: decodes requests, applies the cache policy,
//! counts, and encodes replies. No filesystem logic lives here.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileHandle, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use memofs_core::{
    Attr, Backend, CachePolicy, Caller, Errno, Ino, Invalidator, Result, SetAttr, Timestamp,
};

use crate::backing::Backings;
use crate::blocking::Blocking;
use crate::busy_poll::BusyPoll;
use crate::config::TransportConfig;
use crate::convert::{errno, file_attr, file_type, negative_attr, time_set};
use crate::fileattr;
use crate::gate::Gate;
use crate::stats::{Event, Op, Stats};

/// Largest WRITE the kernel may send (it caps requests at `fs.fuse.max_pages_limit` pages).
pub const MAX_WRITE: u32 = 1 << 20;

/// The `fuser::Filesystem` implementation.
pub struct Adapter<B: Backend> {
    backend: Arc<B>,
    policy: CachePolicy,
    config: TransportConfig,
    stats: Arc<Stats>,
    /// FUSE passthrough backing ids of open files.
    backings: Backings,
    /// Set once mounted: where attribute changes the kernel cannot know of are reported.
    invalidator: Arc<OnceLock<Arc<dyn Invalidator>>>,
    /// Where FSYNC and FSYNCDIR wait for the disk.
    blocking: Blocking,
    /// Which request threads read the device.
    gate: Gate,
    /// How the reading thread waits for the next request.
    poll: Arc<BusyPoll>,
}

thread_local! {
    /// Each request thread reuses one read buffer: no allocation per READ.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn reply_unit(reply: ReplyEmpty, r: Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
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
            backings: Backings::default(),
            invalidator: Arc::new(OnceLock::new()),
            blocking: Blocking::default(),
            gate: Gate::new(config.threads),
            poll: Arc::new(BusyPoll::new(config.busy_poll, stats.clone())),
            stats,
        }
    }

    /// The busy poller, to attach the device to once the session exists.
    pub fn busy_poll(&self) -> Arc<BusyPoll> {
        self.poll.clone()
    }

    /// Where to hand the invalidator once the session exists.
    pub fn invalidator_slot(&self) -> Arc<OnceLock<Arc<dyn Invalidator>>> {
        self.invalidator.clone()
    }

    /// Clears setuid, and setgid when group-executable, on a regular file, and drops its
    /// `security.capability`: what a write, truncate or chown by an unprivileged caller must
    /// do. Returns true if anything changed.
    fn kill_suidgid(&self, caller: &Caller, ino: Ino) -> Result<bool> {
        let attr = self.backend.getattr(ino)?;
        if attr.kind != memofs_core::FileKind::Regular {
            return Ok(false);
        }
        let mode = attr.perm as u32;
        let mut new = mode & !libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            new &= !libc::S_ISGID;
        }
        let mut changed = false;
        if new != mode {
            self.backend.setattr(
                caller,
                ino,
                &SetAttr {
                    mode: Some(new),
                    ..SetAttr::default()
                },
            )?;
            changed = true;
        }
        match self
            .backend
            .removexattr(caller, ino, OsStr::new("security.capability"))
        {
            Ok(()) => changed = true,
            Err(e) if e == Errno::ENODATA || e == Errno::EOPNOTSUPP => {}
            Err(e) => return Err(e),
        }
        Ok(changed)
    }

    /// Clears setuid/setgid (see [`Adapter::kill_suidgid`]) where the kernel, which runs
    /// with `FUSE_HANDLE_KILLPRIV_V2`, leaves it to the server; tells the kernel to drop
    /// the attributes it cached if anything changed.
    fn kill_privs(&self, req: &Request, ino: Ino) {
        if let Ok(true) = self.kill_suidgid(&caller(req), ino) {
            if let Some(inv) = self.invalidator.get() {
                inv.inode(ino);
            }
        }
    }

    /// An unprivileged caller (approximating the kernel's `CAP_FSETID` check by uid 0).
    fn unprivileged(req: &Request) -> bool {
        req.uid() != 0
    }

    /// Open flags for a regular file: `FOPEN_NOFLUSH`, as no backend acts on `close` (the
    /// kernel ignores it under the writeback cache, which must write back on close); opens
    /// served by the server (not `passthrough`) may bypass the page cache.
    fn fopen_flags(&self, passthrough: bool) -> FopenFlags {
        let mut f = FopenFlags::FOPEN_NOFLUSH;
        if !passthrough && self.config.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        f
    }

    /// Runs one request's handling and counts it, with its latency, under `op`; then the
    /// thread may park (see [`crate::gate`]) or poll for the next request (see
    /// [`crate::busy_poll`]).
    fn timed<R>(&self, req: &Request, op: Op, handle: impl FnOnce() -> R) -> R {
        self.enter(req, matches!(op, Op::Read | Op::Write | Op::CopyFileRange));
        let r = self.counted(op, handle);
        self.leave();
        r
    }

    /// A request starts on this thread (see [`Gate::enter`]).
    fn enter(&self, req: &Request, data: bool) {
        self.poll.arrived();
        self.gate.enter(req.pid(), data);
    }

    /// The request is answered: park, or wait for the next one (see [`crate::busy_poll`]).
    fn leave(&self) {
        let answered = self.poll.answered();
        let alone = self.gate.leave();
        self.poll.wait(answered, alone);
    }

    /// Runs one request's handling and counts it, with its latency, under `op`.
    fn counted<R>(&self, op: Op, handle: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = handle();
        self.stats.record(op, t);
        r
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

    /// Runs `sync` (an `fsync` of the backend) on a blocking-request thread and replies
    /// from there (see [`crate::blocking`]).
    fn sync_off_thread(
        &self,
        op: Op,
        reply: ReplyEmpty,
        sync: impl FnOnce(&B) -> Result<()> + Send + 'static,
    ) {
        let start = Instant::now();
        let (backend, stats) = (self.backend.clone(), self.stats.clone());
        self.blocking.run(move || {
            reply_unit(reply, sync(&backend));
            stats.record(op, start);
        });
    }

    fn reply_xattr(reply: ReplyXattr, size: u32, r: Result<Vec<u8>>) {
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(errno(Errno::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(e)),
        }
    }

    /// LOOKUP, counted (with its hit or miss) before the reply, so a client that saw the
    /// answer also sees it counted.
    fn lookup_counted(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = Instant::now();
        let r = self.backend.lookup(&caller(req), parent.0, name);
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
    /// The session is over: every request thread has stopped. If the connection ended
    /// (the mount went away, or it was aborted), the process exits here, because fuser 0.18
    /// would next unmount the mount point's path once more (its check for a mount already
    /// gone always finds it present) and so take down whatever was mounted there since: a
    /// new mount made right after `umount`, or the filesystem below. Nothing is left to do
    /// (data went to the host or dies with the mount); an aborted mount that is still in
    /// place is cleared by `memofs umount`, as after a crash.
    fn destroy(&mut self) {
        if self.poll.connection_ended() {
            log::info!(
                "the connection ended; if it was aborted and the mount is still listed, clear it \
                 with `memofs umount MOUNTPOINT`"
            );
            std::process::exit(0);
        }
    }

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
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            // Backends apply the caller's umask themselves (or a default ACL instead).
            | InitFlags::FUSE_DONT_MASK;
        if self.backend.capabilities().posix_acl {
            wanted |= InitFlags::FUSE_POSIX_ACL;
        }
        if self.config.passthrough {
            // Passthrough and the writeback cache exclude each other; passthrough wins.
            if config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH)
                && config.set_max_stack_depth(1).is_ok()
            {
                wanted |= InitFlags::FUSE_PASSTHROUGH;
                self.backings.enable();
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
        // Not through `timed`: the lookup counts its hits and misses before replying.
        self.enter(req, false);
        self.lookup_counted(req, parent, name, reply);
        self.leave();
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // Not through the gate: fuser calls this once per node of a BATCH_FORGET, and a
        // thread must not park between two of them. Nor does it busy-poll afterwards:
        // measured by hand, polling after FORGETs too made no difference to `rm -rf`.
        self.counted(Op::Forget, || {
            self.backend.forget(ino.0, nlookup);
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.timed(req, Op::Getattr, || {
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
        self.timed(req, Op::Setattr, || {
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
            let chown = uid.is_some() || gid.is_some();
            let kill = (size.is_some() && Self::unprivileged(req)) || chown;
            if r.is_ok() && kill && matches!(self.kill_suidgid(&caller(req), ino.0), Ok(true)) {
                r = self.backend.getattr(ino.0);
            }
            self.reply_attr(reply, r);
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.timed(req, Op::Readlink, || match self.backend.readlink(ino.0) {
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
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.timed(req, Op::Mknod, || {
            self.reply_entry(
                reply,
                self.backend
                    .mknod(&caller(req), parent.0, name, mode, umask, rdev),
            );
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.timed(req, Op::Mkdir, || {
            self.reply_entry(
                reply,
                self.backend
                    .mkdir(&caller(req), parent.0, name, mode, umask),
            );
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(req, Op::Unlink, || {
            reply_unit(reply, self.backend.unlink(&caller(req), parent.0, name));
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(req, Op::Rmdir, || {
            reply_unit(reply, self.backend.rmdir(&caller(req), parent.0, name));
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
        self.timed(req, Op::Symlink, || {
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
        self.timed(req, Op::Rename, || {
            reply_unit(
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
        self.timed(req, Op::Link, || {
            self.reply_entry(
                reply,
                self.backend.link(&caller(req), ino.0, newparent.0, newname),
            );
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.timed(req, Op::Open, || {
            match self.backend.open(&caller(req), ino.0, flags.0) {
                Ok(o) => {
                    // O_TRUNC truncates here (atomic_o_trunc). With passthrough the server
                    // never sees the writes, so an unprivileged open for writing drops the
                    // bits now rather than at the first write (documented in the README).
                    let writing = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
                    let passthrough = self.backings.enabled();
                    if Self::unprivileged(req)
                        && (flags.0 & libc::O_TRUNC != 0 || (writing && passthrough))
                    {
                        self.kill_privs(req, ino.0);
                    }
                    match self
                        .backings
                        .backing_for(&*self.backend, ino.0, o.fh, |fd| reply.open_backing(fd))
                    {
                        Some(id) => {
                            reply.opened_passthrough(FileHandle(o.fh), self.fopen_flags(true), &id)
                        }
                        None => reply.opened(FileHandle(o.fh), self.fopen_flags(false)),
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.timed(req, Op::Read, || {
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
        self.timed(req, Op::Write, || {
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
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _ = (ino, fh);
        self.timed(req, Op::Flush, || reply.ok());
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.timed(req, Op::Release, || {
            self.backings.release(ino.0);
            reply_unit(reply, self.backend.release(ino.0, fh.0));
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
        self.sync_off_thread(Op::Fsync, reply, move |b| b.fsync(ino.0, fh.0, datasync));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.timed(req, Op::Opendir, || {
            match self.backend.opendir(&caller(req), ino.0, flags.0) {
                Ok(o) => reply.opened(FileHandle(o.fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.timed(req, Op::Readdir, || {
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
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.timed(req, Op::Readdirplus, || {
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
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.timed(req, Op::Releasedir, || {
            reply_unit(reply, self.backend.releasedir(ino.0, fh.0));
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
        self.sync_off_thread(Op::Fsyncdir, reply, move |b| {
            b.fsyncdir(ino.0, fh.0, datasync)
        });
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.timed(req, Op::Statfs, || match self.backend.statfs() {
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
        self.timed(req, Op::Setxattr, || {
            reply_unit(
                reply,
                self.backend
                    .setxattr(&caller(req), ino.0, name, value, flags),
            );
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.timed(req, Op::Getxattr, || {
            Self::reply_xattr(reply, size, self.backend.getxattr(ino.0, name));
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.timed(req, Op::Listxattr, || {
            Self::reply_xattr(reply, size, self.backend.listxattr(ino.0));
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.timed(req, Op::Removexattr, || {
            reply_unit(reply, self.backend.removexattr(&caller(req), ino.0, name));
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions); only existence is ours.
        self.timed(req, Op::Access, || {
            reply_unit(reply, self.backend.getattr(ino.0).map(|_| ()));
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.timed(req, Op::Create, || {
            match self
                .backend
                .create(&caller(req), parent.0, name, mode, umask, flags)
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
                    match self
                        .backings
                        .backing_for(&*self.backend, attr.ino, o.fh, |fd| reply.open_backing(fd))
                    {
                        Some(id) => reply.created_passthrough(
                            &ttl,
                            &fa,
                            generation,
                            fh,
                            self.fopen_flags(true),
                            &id,
                        ),
                        None => reply.created(&ttl, &fa, generation, fh, self.fopen_flags(false)),
                    }
                }
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.timed(req, Op::Fallocate, || {
            reply_unit(
                reply,
                self.backend.fallocate(ino.0, fh.0, offset, length, mode),
            );
        });
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.timed(req, Op::Lseek, || {
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
        req: &Request,
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
        self.timed(req, Op::CopyFileRange, || {
            match self.backend.copy_file_range(
                ino_in.0, fh_in.0, offset_in, ino_out.0, fh_out.0, offset_out, len,
            ) {
                Ok(n) => reply.written(n.min(u32::MAX as u64) as u32),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    /// The inode-flag ioctls (`chattr`/`lsattr`, see [`crate::fileattr`]).
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.timed(req, Op::Ioctl, || {
            match fileattr::ioctl(&*self.backend, &caller(req), ino.0, cmd, in_data) {
                Ok(out) => reply.ioctl(0, &out[..out.len().min(out_size as usize)]),
                Err(e) => reply.error(errno(e)),
            }
        });
    }
}
