//! [`Server`]: one decoded request in, one reply out, with every FUSE semantic memofs adds
//! on top of its backend.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memofs_core::plan::MountPlan;
use memofs_core::{
    Attr, Backend, Caller, Entry, Errno, FileKind, Ino, Invalidator, Result, SetAttr, TimeSet,
};

use crate::backing::Backings;
use crate::invalidate::{Misses, NotifyInvalidator};
use crate::keep::Keeper;
use crate::kernel::{BackingWrites, Kernel};
use crate::privs::{kill_privs, kill_suidgid, privileged};
use crate::reply::{OpenOut, ReplyOut};
use crate::request::{Op, Request};
use crate::stats::{Counted, Event, Stats};

/// What the kernel granted at INIT, as far as the meaning of requests depends on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    /// FUSE passthrough (backing files).
    pub passthrough: bool,
    /// The writeback cache.
    pub writeback: bool,
    /// Create requests carry an unapplied umask (`FUSE_DONT_MASK`).
    pub dont_mask: bool,
    /// The kernel enforces POSIX ACLs (`FUSE_POSIX_ACL`).
    pub posix_acl: bool,
    /// `FUSE_NOTIFY_INC_EPOCH` exists (protocol 7.44, Linux 6.16+).
    pub inc_epoch: bool,
}

/// How a request was handled.
pub enum Handled {
    /// Answered (or needs no answer).
    Done,
    /// Not answered yet: the transport runs this off the request thread (it may wait for a
    /// disk) and then answers with its result.
    Blocking(Box<dyn FnOnce() -> Result<()> + Send>),
}

thread_local! {
    /// Each request thread reuses one read buffer: no allocation per READ.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The request layer of one mount.
pub struct Server<B: Backend> {
    backend: Arc<B>,
    plan: MountPlan,
    granted: Granted,
    stats: Arc<Stats>,
    kernel: Option<Arc<dyn Kernel>>,
    invalidator: Option<Arc<NotifyInvalidator>>,
    /// Names answered with a negative entry, for the invalidator's fallback (see
    /// [`crate::invalidate`]); kept only where something changes behind the kernel's back.
    misses: Arc<Misses>,
    /// Which kernel caches may outlive an open (see [`crate::keep`]).
    keeper: Keeper,
    backings: Backings,
    /// The abstract socket name of the control socket, where it has no file of its own.
    control_address: std::sync::OnceLock<Vec<u8>>,
}

/// Answers `out` with `r`'s error, or calls `ok` with its value.
fn answer<T>(out: &mut dyn ReplyOut, r: Result<T>, ok: impl FnOnce(&mut dyn ReplyOut, T)) {
    match r {
        Ok(v) => ok(out, v),
        Err(e) => out.error(e),
    }
}

/// xattr names only privileged callers may see (as Linux filesystems hide them).
const TRUSTED: &[u8] = b"trusted.";

impl<B: Backend> Server<B> {
    /// The request layer for `backend` under `plan`, counting into `stats`. Call
    /// [`Server::start`] once INIT is done and before the first request.
    pub fn new(backend: Arc<B>, plan: MountPlan, stats: Arc<Stats>) -> Server<B> {
        let misses = Arc::new(Misses::new(plan.cache.negative_timeout));
        let keeper = Keeper::new(plan.atime);
        Server {
            backend,
            plan,
            granted: Granted::default(),
            stats,
            kernel: None,
            invalidator: None,
            misses,
            keeper,
            backings: Backings::default(),
            control_address: std::sync::OnceLock::new(),
        }
    }

    /// The mount plan this layer serves.
    pub fn plan(&self) -> &MountPlan {
        &self.plan
    }

    /// What INIT granted.
    pub fn granted(&self) -> Granted {
        self.granted
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// INIT is done: `granted` is what the kernel allowed, `kernel` the connection's
    /// notifications and backing files. Starts the invalidation thread and hands the
    /// backend its invalidator.
    pub fn start(&mut self, granted: Granted, kernel: Arc<dyn Kernel>) -> std::io::Result<()> {
        self.granted = granted;
        if granted.passthrough {
            self.backings.enable();
        }
        let invalidator = Arc::new(NotifyInvalidator::start(
            kernel.clone(),
            self.misses.clone(),
            self.stats.clone(),
            granted.inc_epoch,
        )?);
        self.backend.attach_invalidator(invalidator.clone());
        self.invalidator = Some(invalidator);
        self.kernel = Some(kernel);
        Ok(())
    }

    /// The control socket listens on the abstract socket `name` (shorter than
    /// [`crate::ioctl::CONTROL_ADDRESS_SIZE`]): the mount tells it to root and the server's
    /// user through [`crate::ioctl::CONTROL_ADDRESS`]. Set once; later calls change nothing.
    pub fn set_control_address(&self, name: &[u8]) {
        if name.len() < crate::ioctl::CONTROL_ADDRESS_SIZE {
            let _ = self.control_address.set(name.to_vec());
        }
    }

    /// Where invalidations go (for `memofs invalidate`), once started.
    pub fn invalidator(&self) -> Option<Arc<NotifyInvalidator>> {
        self.invalidator.clone()
    }

    /// Handles one request; every request that wants a reply gets exactly one through `out`
    /// (now, or after the [`Handled::Blocking`] job).
    pub fn handle(&self, req: &Request<'_>, out: &mut dyn ReplyOut) -> Handled {
        let mut out = Counted {
            out,
            stats: &self.stats,
            kind: req.op.kind(),
            start: Instant::now(),
        };
        match &req.op {
            Op::Forget { nlookup } => {
                self.forget(req.nodeid, *nlookup);
                out.count();
            }
            Op::BatchForget { forgets } => {
                for [ino, n] in forgets.iter() {
                    self.forget(*ino, *n);
                }
                out.count();
            }
            Op::Interrupt { .. } => {}
            Op::Fsync { fh, datasync } => {
                let (fh, datasync, ino) = (*fh, *datasync, req.nodeid);
                return self.blocking(&out, move |b| b.fsync(ino, fh, datasync));
            }
            Op::Fsyncdir { fh, datasync } => {
                let (fh, datasync, ino) = (*fh, *datasync, req.nodeid);
                return self.blocking(&out, move |b| b.fsyncdir(ino, fh, datasync));
            }
            op => self.dispatch(req.nodeid, &req.caller, op, &mut out),
        }
        Handled::Done
    }

    /// A request answered off the request thread by `work` on the backend: counted, with
    /// its latency, when the work is done and just before the transport answers it.
    fn blocking(
        &self,
        out: &Counted<'_>,
        work: impl FnOnce(&B) -> Result<()> + Send + 'static,
    ) -> Handled {
        let (backend, stats, kind, start) = (
            self.backend.clone(),
            self.stats.clone(),
            out.kind,
            out.start,
        );
        Handled::Blocking(Box::new(move || {
            let r = work(&backend);
            stats.record(kind, start);
            r
        }))
    }

    /// A positive entry for `attr`, with the timeouts the cache policy gives it.
    fn entry(&self, attr: Attr) -> Entry {
        self.backend.attr_sent(&attr);
        self.entry_unsent(attr)
    }

    /// [`Server::entry`] for a reply that may yet not carry it (a READDIRPLUS entry that
    /// may not fit): the caller tells the backend once it does.
    fn entry_unsent(&self, attr: Attr) -> Entry {
        let unseen = self.backend.attr_unseen_changes(&attr);
        self.plan.cache.entry(attr, unseen)
    }

    /// How long the kernel may keep `attr` (which a reply is about to give it).
    fn attr_timeout(&self, attr: &Attr) -> Duration {
        self.backend.attr_sent(attr);
        let unseen = self.backend.attr_unseen_changes(attr);
        self.plan.cache.attr_timeout_for(attr, unseen)
    }

    fn entry_reply(&self, out: &mut dyn ReplyOut, r: Result<Attr>) {
        answer(out, r, |out, attr| out.entry(&self.entry(attr)));
    }

    /// The umask a backend must apply: the kernel's own when it left it to the server.
    fn umask(&self, umask: u32) -> u32 {
        if self.granted.dont_mask {
            umask
        } else {
            0
        }
    }

    /// Open flags as the backend honours them: under the writeback cache the kernel reads
    /// pages of write-only files too, so those are opened read-write.
    fn open_flags(&self, flags: i32) -> i32 {
        if self.granted.writeback && flags & libc::O_ACCMODE == libc::O_WRONLY {
            (flags & !libc::O_ACCMODE) | libc::O_RDWR
        } else {
            flags
        }
    }

    /// The kernel's writeback of cached pages of `ino` failed (a full mount's `ENOSPC`):
    /// the kernel reports the error at the writer's next `fsync` or `close`, but would go
    /// on serving the pages it could not store as if they were the file's. They are dropped
    /// (dirty pages of later writes are written back first), so that what a reader sees is
    /// what the backend holds. Queued, not sent: the kernel waits for this WRITE's answer
    /// before it can drop those pages.
    fn writeback_failed(&self, ino: Ino) {
        self.stats.event(Event::WritebackFailed);
        if let Some(inv) = &self.invalidator {
            inv.inode(ino);
        }
    }

    /// If `due`, clears setuid/setgid/capabilities of `ino` (see [`crate::privs`]) and, if
    /// anything changed, tells the kernel to drop the attributes it cached. An error fails
    /// the request that asked for it, as the kernel fails a write whose privileges it cannot
    /// drop.
    fn kill_privs(&self, due: bool, caller: &Caller, ino: Ino) -> Result<()> {
        if due && kill_suidgid(&*self.backend, caller, ino)? {
            if let Some(inv) = &self.invalidator {
                inv.inode(ino);
            }
        }
        Ok(())
    }

    /// Gives up an open handle of `ino`: the backend's handle, then the open's use of the
    /// backing file (which may outlive it: see [`crate::backing`]).
    fn release(&self, ino: Ino, fh: u64) -> Result<()> {
        let r = self.backend.release(ino, fh);
        if let Some(k) = &self.kernel {
            self.backings
                .release(&*self.backend, &**k, &self.stats, ino);
        }
        r
    }

    /// FORGET of `nlookup` lookups of `ino`: the backend's, then a backing file
    /// registration the backend no longer keeps.
    fn forget(&self, ino: Ino, nlookup: u64) {
        self.backend.forget(ino, nlookup);
        if let Some(k) = &self.kernel {
            self.backings.forgotten(&*self.backend, &**k, ino);
        }
    }

    /// How an open file of `ino` is served: through a backing file if the backend lends
    /// one and passthrough was granted, else through the server, keeping the pages the
    /// kernel has from earlier opens when nothing but the mount changes the file and no
    /// read could move atime now (see [`crate::keep`]).
    ///
    /// The kernel sends FLUSH at each `close(2)` only where the backend's close can fail
    /// ([`memofs_core::Opened::flush`]). No open of an append-only file gets a backing file
    /// ([`memofs_core::Opened::append_only`]; the kernel refuses to mix opens with and
    /// without one), and one that writes (`writing`) gets no page cache either: every write
    /// reaches the backend, and the kernel refuses shared writable mappings of it.
    ///
    /// An error: the kernel refused the backing file for a passing reason (see
    /// [`crate::backing`]); the backend's handle is released again and the open fails.
    fn open_out(
        &self,
        caller: &Caller,
        ino: Ino,
        opened: memofs_core::Opened,
        writing: bool,
    ) -> Result<OpenOut> {
        let fh = opened.fh;
        let backing_id = match self.kernel.as_deref() {
            Some(_) if opened.append_only => Ok(None),
            Some(k) => {
                let writes = self.backing_writes(caller);
                self.backings
                    .open(&*self.backend, k, &self.stats, (ino, fh), writes)
            }
            None => Ok(None),
        };
        let backing_id = backing_id.inspect_err(|_| {
            let _ = self.backend.release(ino, fh);
        })?;
        let append_writer = opened.append_only && writing;
        let direct_io = backing_id.is_none() && (self.plan.direct_io || append_writer);
        let keep_cache =
            !direct_io && backing_id.is_none() && self.plan.sole_writer && self.keep(ino);
        Ok(OpenOut {
            fh,
            noflush: !opened.flush,
            direct_io,
            keep_cache,
            backing_id,
            ..OpenOut::default()
        })
    }

    /// Whose privilege writes through a new backing registration carry (the kernel does a
    /// backing file's I/O with the credentials it was registered with, whoever writes): the
    /// server's where the backend is the files' only writer, since the mode the kernel checks
    /// and clears is then the real one; elsewhere the opener's, so that a setuid bit set
    /// behind the kernel's back after an unprivileged caller's open goes at that caller's
    /// next write, as the host would clear it. (A registration is shared by the inode's later
    /// opens: an unprivileged open of a file root already holds open writes with root's.)
    fn backing_writes(&self, caller: &Caller) -> BackingWrites {
        if self.plan.sole_writer || privileged(caller) {
            BackingWrites::Server
        } else {
            BackingWrites::Unprivileged
        }
    }

    /// Whether the kernel may keep its copy of `ino` now; if so, it is dropped again when
    /// relatime's day is up.
    fn keep(&self, ino: Ino) -> bool {
        let Ok(attr) = self.backend.getattr(ino) else {
            return false;
        };
        let keep = self.keeper.may_keep(&attr);
        if keep {
            self.relatime_refresh(&attr);
        }
        keep
    }

    /// See [`Keeper::served`].
    fn relatime_refresh(&self, attr: &Attr) {
        if let Some(inv) = &self.invalidator {
            let inv: Arc<dyn Invalidator> = inv.clone();
            self.keeper.served(attr, &inv);
        }
    }

    fn lookup(&self, parent: Ino, caller: &Caller, name: &OsStr, out: &mut dyn ReplyOut) {
        let r = self.backend.lookup(caller, parent, name);
        self.stats.event(match r {
            Ok(_) => Event::LookupHit,
            Err(_) => Event::LookupMiss,
        });
        match r {
            Err(Errno::ENOENT) => match self.plan.cache.negative() {
                Some(neg) => {
                    self.stats.event(Event::NegativeReply);
                    if !self.plan.sole_writer {
                        self.misses.note(parent, name);
                    }
                    out.entry(&neg);
                }
                None => out.error(Errno::ENOENT),
            },
            r => self.entry_reply(out, r),
        }
    }

    /// SETATTR. A chown (and `chown(f, -1, -1)`, which arrives as a SETATTR that sets
    /// nothing) clears setuid, setgid and capabilities of a non-directory, as Linux's
    /// `chown_common` does; a truncate the kernel flags clears them on a regular file. The
    /// reply carries the new attributes, so the kernel needs no invalidation.
    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr, kill: bool) -> Result<Attr> {
        let b = &*self.backend;
        let mut set = *set;
        if set
            == (SetAttr {
                fh: set.fh,
                ..SetAttr::default()
            })
        {
            set.uid = Some(b.getattr(ino)?.uid);
        }
        if self.granted.writeback
            && set.size.is_some()
            && set.mtime.is_none()
            && set.ctime.is_none()
        {
            // Under the writeback cache the kernel keeps a regular file's mtime and ctime and
            // sends them whenever it moves them, as at a truncate that changes the size. A
            // truncate(2) to the size the file has comes without them: the kernel keeps both,
            // and so does the server, or they would jump once the kernel forgot the inode.
            let now = b.getattr(ino)?;
            if now.kind == FileKind::Regular && set.size == Some(now.size) {
                set.mtime = Some(TimeSet::At(now.mtime));
                set.ctime = Some(now.ctime);
            }
        }
        let attr = b.setattr(caller, ino, &set)?;
        let chown = set.uid.is_some() || set.gid.is_some();
        let killed = if chown && attr.kind != FileKind::Directory {
            kill_privs(b, caller, &attr)?
        } else {
            kill && kill_suidgid(b, caller, ino)?
        };
        if killed {
            b.getattr(ino)
        } else {
            Ok(attr)
        }
    }

    fn readdir(&self, ino: Ino, fh: u64, offset: u64, plus: bool, out: &mut dyn ReplyOut) {
        let r = self.backend.readdir(ino, fh, offset, plus, &mut |e| {
            let entry = e.attr.map(|a| self.entry_unsent(a));
            let taken = out.dirent(e, entry.as_ref());
            if let (true, Some(a)) = (taken, &e.attr) {
                self.backend.attr_sent(a);
            }
            taken
        });
        match r {
            Ok(()) => out.dir_done(),
            Err(e) => return out.error(e),
        }
        // A listing the kernel keeps (see `opendir`): drop it when relatime's day is up.
        if offset == 0 && self.declines_opendir() {
            if let Ok(attr) = self.backend.getattr(ino) {
                self.relatime_refresh(&attr);
            }
        }
    }

    /// After a request that moved the times of `ino` without changing any entry (SETATTR,
    /// SETXATTR, REMOVEXATTR): a directory whose listing the kernel keeps must have it dropped
    /// if relatime now wants the next listing to reach the server. Sent before the reply, so
    /// the caller's next listing already finds the cache gone (the notification takes no lock
    /// the request holds: the kernel only bumps the inode's attribute version and drops the
    /// directory's pages).
    fn times_moved(&self, ino: Ino) {
        if !self.may_keep_listings() {
            return;
        }
        let Ok(attr) = self.backend.getattr(ino) else {
            return;
        };
        if attr.kind == FileKind::Directory && !self.keeper.may_keep(&attr) {
            if let Some(inv) = &self.invalidator {
                inv.inode_now(ino);
            }
        }
    }

    /// Whether the kernel keeps directory listings: the backend is the only writer (so the
    /// kernel drops a listing whenever it changes through the mount) or it reports every
    /// other change as it happens ([`Backend::sees_every_change`]), and no atime rule forbids
    /// it. Then OPENDIR is answered `ENOSYS`, once: the kernel stops sending OPENDIR and
    /// RELEASEDIR and keeps every listing (`FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR`).
    fn declines_opendir(&self) -> bool {
        (self.plan.sole_writer || self.backend.sees_every_change()) && self.keeper.listings_kept()
    }

    /// Whether the kernel may keep directory listings at all: as above, or the backend
    /// reports every change to names made behind the kernel's back (a passthrough export
    /// whose watcher marks the whole filesystem). Then each OPENDIR the backend answers asks
    /// the kernel to keep the listing (`FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR`) while no listing
    /// could move the directory's atime, as for file pages at OPEN.
    fn may_keep_listings(&self) -> bool {
        (self.plan.sole_writer || self.backend.name_changes_reported())
            && self.keeper.listings_kept()
    }

    fn listxattr(&self, caller: &Caller, ino: Ino, size: u32, out: &mut dyn ReplyOut) {
        let r = self.backend.listxattr(ino).map(|mut list| {
            if !privileged(caller) {
                list = list
                    .split_inclusive(|&b| b == 0)
                    .filter(|name| !name.starts_with(TRUSTED))
                    .flatten()
                    .copied()
                    .collect();
            }
            list
        });
        xattr_reply(out, size, r);
    }

    /// Every request but those [`Server::handle`] takes itself: a flat table of named steps.
    fn dispatch(&self, ino: Ino, caller: &Caller, op: &Op<'_>, out: &mut dyn ReplyOut) {
        let b = &*self.backend;
        match *op {
            Op::Lookup { name } => self.lookup(ino, caller, name, out),
            Op::Getattr { .. } => answer(out, b.getattr(ino), |out, a| {
                out.attr(&a, self.attr_timeout(&a))
            }),
            Op::Statx { .. } => answer(out, b.getattr(ino), |out, a| {
                out.statx(&a, self.attr_timeout(&a))
            }),
            Op::Setattr {
                ref set,
                kill_suidgid,
            } => {
                let r = self.setattr(caller, ino, set, kill_suidgid);
                self.moved_times_if(&r, ino);
                answer(out, r, |out, a| out.attr(&a, self.attr_timeout(&a)))
            }
            Op::Readlink => answer(out, b.readlink(ino), |out, t| out.data(&t)),
            Op::Symlink { name, target } => {
                self.entry_reply(out, b.symlink(caller, ino, name, target))
            }
            Op::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => self.entry_reply(
                out,
                b.mknod(caller, ino, name, mode, self.umask(umask), rdev),
            ),
            Op::Mkdir { name, mode, umask } => {
                self.entry_reply(out, b.mkdir(caller, ino, name, mode, self.umask(umask)))
            }
            Op::Unlink { name } => answer(out, b.unlink(caller, ino, name), |out, ()| out.empty()),
            Op::Rmdir { name } => answer(out, b.rmdir(caller, ino, name), |out, ()| out.empty()),
            Op::Rename {
                name,
                new_parent,
                new_name,
                flags,
            } => answer(
                out,
                b.rename(caller, ino, name, new_parent, new_name, flags),
                |out, ()| out.empty(),
            ),
            Op::Link { inode, new_name } => {
                self.entry_reply(out, b.link(caller, inode, ino, new_name))
            }
            Op::Open {
                flags,
                kill_suidgid,
            } => self.open(caller, ino, flags, kill_suidgid, out),
            Op::Create {
                name,
                mode,
                umask,
                flags,
            } => {
                let (umask, flags) = (self.umask(umask), self.open_flags(flags));
                self.created(caller, out, b.create(caller, ino, name, mode, umask, flags));
            }
            Op::Tmpfile { mode, umask, flags } => {
                let (umask, flags) = (self.umask(umask), self.open_flags(flags));
                self.created(caller, out, b.tmpfile(caller, ino, mode, umask, flags));
            }
            Op::Read { fh, offset, size } => READ_BUF.with(|buf| {
                let mut buf = buf.borrow_mut();
                let mut out = Some(out);
                let r = b.read_with(ino, fh, offset, size, &mut buf, &mut |parts| {
                    if let Some(out) = out.take() {
                        out.data_parts(parts);
                    }
                });
                if let (Err(e), Some(out)) = (r, out) {
                    out.error(e);
                }
            }),
            Op::Write {
                fh,
                offset,
                data,
                kill_suidgid,
                cached,
            } => {
                let r = self
                    .kill_privs(kill_suidgid, caller, ino)
                    .and_then(|()| b.write(ino, fh, offset, data));
                if cached && r.is_err() {
                    self.writeback_failed(ino);
                }
                answer(out, r, |out, n| out.written(n));
            }
            // Under the writeback cache the kernel sends FLUSH at every close, after writing
            // back and checking for writeback errors itself; a backend that is its files' only
            // writer has nothing to add, and ENOSYS stops the kernel sending it (a round trip
            // per close of a file that was opened).
            Op::Flush { .. } if self.granted.writeback && self.plan.sole_writer => {
                answer(out, Err(Errno::ENOSYS), |_, ()| {})
            }
            Op::Flush { fh } => answer(out, b.flush(ino, fh), |out, ()| out.empty()),
            Op::Release { fh } => answer(out, self.release(ino, fh), |out, ()| out.empty()),
            Op::Opendir { flags } => self.opendir(caller, ino, flags, out),
            Op::Readdir {
                fh, offset, plus, ..
            } => self.readdir(ino, fh, offset, plus, out),
            Op::Releasedir { fh } => answer(out, b.releasedir(ino, fh), |out, ()| out.empty()),
            Op::Statfs => answer(out, b.statfs(), |out, s| out.statfs(&s)),
            Op::Setxattr {
                name,
                value,
                flags,
                acl_kill_sgid,
            } => self.setxattr(caller, ino, (name, value, flags), acl_kill_sgid, out),
            Op::Getxattr { name, size } => xattr_reply(out, size, b.getxattr(ino, name)),
            Op::Listxattr { size } => self.listxattr(caller, ino, size, out),
            Op::Removexattr { name } => {
                let r = b.removexattr(caller, ino, name);
                self.moved_times_if(&r, ino);
                answer(out, r, |out, ()| out.empty())
            }
            Op::Access => answer(out, b.getattr(ino), |out, _| out.empty()),
            Op::Ioctl {
                cmd: crate::ioctl::CONTROL_ADDRESS,
                ..
            } => answer(out, self.control_address(caller), |out, a| out.ioctl(0, &a)),
            Op::Ioctl { cmd, input, .. } => answer(
                out,
                crate::ioctl::ioctl(b, caller, ino, cmd, input),
                |out, v| out.ioctl(0, &v),
            ),
            Op::Fallocate {
                fh,
                offset,
                length,
                mode,
            } => {
                let r = self
                    .kill_privs(!privileged(caller), caller, ino)
                    .and_then(|()| b.fallocate(ino, fh, offset, length, mode));
                answer(out, r, |out, ()| out.empty());
            }
            // Under the writeback cache the kernel asks without writing its dirty pages back
            // first, so where the data and holes are is known to the kernel, not here:
            // ENOSYS makes it answer from its own size from then on (the whole file data,
            // as `lseek(2)` allows).
            Op::Lseek { .. } if self.granted.writeback => {
                answer(out, Err(Errno::ENOSYS), |_, ()| {})
            }
            Op::Lseek { fh, offset, whence } => {
                let r = u64::try_from(offset)
                    .map_err(|_| Errno::ENXIO)
                    .and_then(|off| b.lseek(ino, fh, off, whence));
                answer(out, r, |out, off| out.offset(off));
            }
            Op::CopyFileRange {
                fh_in,
                offset_in,
                ino_out,
                fh_out,
                offset_out,
                len,
            } => {
                let r = self
                    .kill_privs(!privileged(caller), caller, ino_out)
                    .and_then(|()| {
                        b.copy_file_range(ino, fh_in, offset_in, ino_out, fh_out, offset_out, len)
                    });
                answer(out, r, |out, n| out.written(n.min(u32::MAX as u64) as u32));
            }
            Op::Destroy => out.empty(),
            Op::Syncfs | Op::Unsupported { .. } => out.error(Errno::ENOSYS),
            Op::Forget { .. }
            | Op::BatchForget { .. }
            | Op::Interrupt { .. }
            | Op::Fsync { .. }
            | Op::Fsyncdir { .. } => unreachable!("handled in Server::handle"),
        }
    }

    /// OPEN. With passthrough the server never sees the writes, so an unprivileged open for
    /// writing drops setuid and setgid now rather than at the first write.
    fn open(&self, caller: &Caller, ino: Ino, flags: i32, kill: bool, out: &mut dyn ReplyOut) {
        let r = self
            .backend
            .open(caller, ino, self.open_flags(flags))
            .and_then(|o| {
                let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
                self.open_out(caller, ino, o, writing)
            });
        let o = match r {
            Ok(o) => o,
            Err(e) => return out.error(e),
        };
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let due = kill || (writing && o.backing_id.is_some() && !privileged(caller));
        match self.kill_privs(due, caller, ino) {
            Ok(()) => out.opened(&o),
            Err(e) => {
                // The kernel never sees this open: nothing may stay open for it.
                let _ = self.release(ino, o.fh);
                out.error(e);
            }
        }
    }

    /// OPENDIR: declined where the kernel keeps every listing, else the backend's handle,
    /// with the listing kept while no listing could move atime (see `may_keep_listings`).
    fn opendir(&self, caller: &Caller, ino: Ino, flags: i32, out: &mut dyn ReplyOut) {
        if self.declines_opendir() {
            return out.error(Errno::ENOSYS);
        }
        answer(out, self.backend.opendir(caller, ino, flags), |out, o| {
            let keep = self.may_keep_listings() && self.keep(ino);
            out.opened(&OpenOut {
                fh: o.fh,
                keep_cache: keep,
                cache_dir: keep,
                ..OpenOut::default()
            })
        })
    }

    /// SETXATTR (`what`: name, value, flags); setting an access ACL may clear setgid.
    fn setxattr(
        &self,
        caller: &Caller,
        ino: Ino,
        (name, value, flags): (&OsStr, &[u8], i32),
        acl_kill_sgid: bool,
        out: &mut dyn ReplyOut,
    ) {
        let b = &*self.backend;
        let mut r = b.setxattr(caller, ino, name, value, flags);
        if r.is_ok() && acl_kill_sgid {
            r = clear_setgid(b, caller, ino);
        }
        self.moved_times_if(&r, ino);
        answer(out, r, |out, ()| out.empty());
    }

    /// Where the control socket listens, when it has no file of its own (see
    /// [`Server::set_control_address`]): for root and the server's user only.
    fn control_address(&self, caller: &Caller) -> Result<Vec<u8>> {
        // SAFETY: geteuid has no preconditions.
        let own = unsafe { libc::geteuid() };
        if caller.uid != 0 && caller.uid != own {
            return Err(Errno::EACCES);
        }
        let name = self.control_address.get().ok_or(Errno::ENOTTY)?;
        let mut answer = name.clone();
        answer.resize(crate::ioctl::CONTROL_ADDRESS_SIZE, 0);
        Ok(answer)
    }

    /// [`Server::times_moved`] after a request that succeeded.
    fn moved_times_if<T>(&self, r: &Result<T>, ino: Ino) {
        if r.is_ok() {
            self.times_moved(ino);
        }
    }

    /// CREATE and TMPFILE: the new file's entry and its open. If the open cannot be given
    /// (a passing refusal of its backing file), the file stays created and the request fails.
    fn created(
        &self,
        caller: &Caller,
        out: &mut dyn ReplyOut,
        r: Result<(Attr, memofs_core::Opened)>,
    ) {
        let r = r.and_then(|(attr, o)| match self.open_out(caller, attr.ino, o, true) {
            Ok(open) => Ok((open, attr)),
            Err(e) => {
                // The kernel never learns of the entry: its lookup is given back.
                self.forget(attr.ino, 1);
                Err(e)
            }
        });
        answer(out, r, |out, (open, attr)| {
            out.created(&self.entry(attr), &open)
        });
    }
}

/// Clears setgid, as setting an access ACL does for a caller outside the file's group.
fn clear_setgid<B: Backend>(b: &B, caller: &Caller, ino: Ino) -> Result<()> {
    let mode = b.getattr(ino)?.perm as u32;
    if mode & libc::S_ISGID != 0 {
        let set = memofs_core::SetAttr {
            mode: Some(mode & !libc::S_ISGID),
            ..Default::default()
        };
        b.setattr(caller, ino, &set)?;
    }
    Ok(())
}

/// A GETXATTR/LISTXATTR answer: the size when asked with size 0, `ERANGE` when the value
/// does not fit.
fn xattr_reply(out: &mut dyn ReplyOut, size: u32, r: Result<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => out.xattr_size(v.len() as u32),
        Ok(v) if v.len() > size as usize => out.error(Errno::ERANGE),
        Ok(v) => out.data(&v),
        Err(e) => out.error(e),
    }
}
