//! [`Server`]: one decoded request in, one reply out, with every FUSE semantic memofs adds
//! on top of its backend.
//!
//! [`Server::handle`] takes what must not wait in line (FORGET, INTERRUPT) and what may wait
//! for a disk (FSYNC), and hands every other request to the family that gives it meaning,
//! each in a module of its own: [`names`] (lookups, making and removing names), [`attrs`]
//! (attributes and extended attributes), [`handles`] (opens, listings, releases) and
//! [`data`] (what moves file data through a handle).

mod attrs;
mod data;
mod handles;
mod labels;
mod names;

use std::sync::Arc;
use std::time::{Duration, Instant};

use memofs_core::plan::MountPlan;
use memofs_core::{AtimePolicy, Attr, Backend, Caller, Entry, Errno, Ino, Invalidator, Result};

use crate::backing::Backings;
use crate::invalidate::{Misses, NotifyInvalidator};
use crate::keep::Keeper;
use crate::kernel::Kernel;
use crate::privs::kill_suidgid;
use crate::reply::ReplyOut;
use crate::request::{Label, Op, Request};
use crate::running::Running;
use crate::stats::{Counted, Stats};

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
    /// `FUSE_NOTIFY_INVAL_ENTRY` takes `FUSE_EXPIRE_ONLY` (Linux 6.2+).
    pub expire_only: bool,
    /// Shared mappings of direct-I/O opens (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6+).
    pub direct_io_allow_mmap: bool,
    /// Directories where another filesystem is mounted may be flagged (`FUSE_SUBMOUNTS`).
    pub submounts: bool,
}

/// How a request was handled.
pub enum Handled {
    /// Answered (or needs no answer).
    Done,
    /// Not answered yet: the transport runs this off the request thread (it may wait for a
    /// disk) and then answers with its result.
    Blocking(Box<dyn FnOnce() -> Result<()> + Send>),
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
    /// An OPENDIR was declined: the kernel keeps every directory listing from then on, for
    /// the connection's life (see `Server::declines_opendir`).
    opendir_declined: std::sync::atomic::AtomicBool,
    /// Requests that would change something are refused (`EROFS`): the plan's `ro`, then
    /// each remount's.
    read_only: std::sync::atomic::AtomicBool,
    /// The mount names its atime rule (else it is the backend's own choice).
    atime_named: std::sync::atomic::AtomicBool,
    backings: Backings,
    /// The exec opens not yet released (see [`crate::running`]).
    running: Running,
    /// The abstract socket name of the control socket, where it has no file of its own.
    control_address: std::sync::OnceLock<Vec<u8>>,
    /// The backend's name for file capabilities (see [`crate::xattrs::caps_name`]).
    caps: Option<std::ffi::OsString>,
}

/// Answers `out` with `r`'s error, or calls `ok` with its value.
fn answer<T>(out: &mut dyn ReplyOut, r: Result<T>, ok: impl FnOnce(&mut dyn ReplyOut, T)) {
    match r {
        Ok(v) => ok(out, v),
        Err(e) => out.error(e),
    }
}

impl<B: Backend> Server<B> {
    /// The request layer for `backend` under `plan`, counting into `stats`. Call
    /// [`Server::start`] once INIT is done and before the first request.
    pub fn new(backend: Arc<B>, plan: MountPlan, stats: Arc<Stats>) -> Server<B> {
        let misses = Arc::new(Misses::new(plan.cache.negative_timeout));
        let keeper = Keeper::new(plan.atime_in_effect(), plan.atime);
        let read_only = plan.read_only();
        let atime_named = plan.atime_given();
        let caps = crate::xattrs::caps_name(&plan);
        Server {
            backend,
            plan,
            granted: Granted::default(),
            stats,
            kernel: None,
            invalidator: None,
            misses,
            keeper,
            opendir_declined: Default::default(),
            read_only: read_only.into(),
            atime_named: atime_named.into(),
            backings: Backings::default(),
            running: Running::default(),
            control_address: std::sync::OnceLock::new(),
            caps,
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

    /// Puts a remount's read-only flag and atime rule in effect: `rule` is the rule the
    /// mount names (`named`), or the backend's own choice, which a read-only mount keeps for
    /// when it is made writable (nothing moves atime while it is read-only). The backend
    /// takes both (the kernel-backed data's mount flag, an export's private copy of the
    /// host mount), then the request layer (its `EROFS`, what the kernel may keep).
    /// Listings the kernel kept under the old rule are dropped, so each directory's next
    /// listing reaches the server. Where the kernel keeps every listing for good (an
    /// OPENDIR was declined), `strictatime` needs `nodiratime`: a listing served from the
    /// kernel's copy never reaches the server to move the directory's atime.
    pub fn remount(
        &self,
        read_only: bool,
        rule: AtimePolicy,
        named: bool,
    ) -> std::result::Result<(), String> {
        use std::sync::atomic::Ordering::SeqCst;
        let strict_dirs = rule.moves_every_listing();
        let refused = || {
            Err(
                "strictatime needs nodiratime on this mount: the kernel keeps every \
                 directory listing for the connection's life (it was told so at an OPENDIR), \
                 so listings would not move directories' atime; remount with \
                 strictatime,nodiratime, or unmount and mount with strictatime"
                    .into(),
            )
        };
        if strict_dirs && self.opendir_declined() {
            return refused();
        }
        let was = (
            self.read_only.load(SeqCst),
            self.keeper.rule(),
            self.atime_named.load(SeqCst),
        );
        let back = || {
            let _ = self.backend.set_read_only(was.0);
            let _ = self.backend.set_atime(was.1.in_effect(was.0), was.2);
            self.read_only.store(was.0, SeqCst);
            self.atime_named.store(was.2, SeqCst);
            self.keeper.set_policy(was.1.in_effect(was.0), was.1);
        };
        let policy = rule.in_effect(read_only);
        let changed = policy != self.keeper.policy();
        let done = self
            .backend
            .set_read_only(read_only)
            .and_then(|()| self.backend.set_atime(policy, named));
        if let Err(e) = done {
            back();
            return Err(e);
        }
        self.read_only.store(read_only, SeqCst);
        self.atime_named.store(named, SeqCst);
        self.keeper.set_policy(policy, rule);
        // The rule first, then the flag again (an OPENDIR sets the flag, then reads the rule).
        let declined = self.opendir_declined();
        if strict_dirs && declined {
            back();
            return refused();
        }
        if let (true, true, Some(inv)) = (declined, changed, &self.invalidator) {
            for ino in self.backend.directories_known() {
                inv.inode(ino);
            }
        }
        Ok(())
    }

    /// Whether an OPENDIR was declined (see [`Server::remount`]).
    pub fn opendir_declined(&self) -> bool {
        self.opendir_declined
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Takes over the knowledge that an OPENDIR was declined on this connection (by the
    /// server process that handed the mount over).
    pub fn note_opendir_declined(&self) {
        self.opendir_declined
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The opens the kernel made to execute a file and has not released: (inode, handle,
    /// count), for a live migration (see [`crate::running`]).
    pub fn exec_opens(&self) -> Vec<(Ino, u64, u32)> {
        self.running.entries()
    }

    /// Takes on the exec opens of the server a VM moved from ([`Server::exec_opens`]).
    pub fn restore_exec_opens(&self, entries: &[(Ino, u64, u32)]) {
        self.running.restore(entries);
    }

    /// The backing registrations and passthrough writers, for a server process that takes
    /// the connection over ([`Server::restore_backings`]).
    pub fn backings(&self) -> crate::backing::BackingState {
        self.backings.state()
    }

    /// Takes on the backing registrations of the server this one takes over from; after
    /// [`Server::start`], before the first request.
    pub fn restore_backings(&self, state: &crate::backing::BackingState) {
        self.backings.restore(state);
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
            granted,
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
            Op::Syncfs => return self.blocking(&out, |b| b.syncfs()),
            op => match crate::ids::host_caller(&self.plan.ids, &req.caller) {
                Ok(caller) => self.dispatch(req.nodeid, &caller, op, req.label.as_ref(), &mut out),
                Err(e) => out.error(e),
            },
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
        let unseen = self.unseen_changes(&attr);
        let mut e = self.plan.cache.entry(attr, unseen);
        e.attr = e.attr.map(|a| self.shown_attr(&a));
        e
    }

    /// How long the kernel may keep `attr` (which a reply is about to give it).
    fn attr_timeout(&self, attr: &Attr) -> Duration {
        self.backend.attr_sent(attr);
        let unseen = self.unseen_changes(attr);
        self.plan.cache.attr_timeout_for(attr, unseen)
    }

    /// Whether `attr` may change without the kernel hearing of it: the backend says so, or
    /// a passthrough open writes the file (through a mapping, the kernel learns nothing).
    fn unseen_changes(&self, attr: &Attr) -> bool {
        self.backend.attr_unseen_changes(attr) || self.backings.has_writer(attr.ino)
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

    /// If `due`, clears setuid/setgid/capabilities of `ino` (see [`crate::privs`]) and, if
    /// anything changed, tells the kernel to drop the attributes it cached. An error fails
    /// the request that asked for it, as the kernel fails a write whose privileges it cannot
    /// drop.
    fn kill_privs(&self, due: bool, caller: &Caller, ino: Ino) -> Result<()> {
        if due && kill_suidgid(&*self.backend, caller, ino, self.caps.as_deref())? {
            if let Some(inv) = &self.invalidator {
                inv.inode(ino);
            }
        }
        Ok(())
    }

    /// FORGET of `nlookup` lookups of `ino`: the backend's, then a backing file
    /// registration the backend no longer keeps.
    fn forget(&self, ino: Ino, nlookup: u64) {
        self.backend.forget(ino, nlookup);
        if let Some(k) = &self.kernel {
            self.backings.forgotten(&*self.backend, &**k, ino);
        }
    }

    /// Every request but those [`Server::handle`] takes itself, to the family that gives it
    /// meaning.
    /// `label`: the security label of the node the request makes, if it carries one.
    fn dispatch(
        &self,
        ino: Ino,
        caller: &Caller,
        op: &Op<'_>,
        label: Option<&Label<'_>>,
        out: &mut dyn ReplyOut,
    ) {
        if self.read_only.load(std::sync::atomic::Ordering::Relaxed) && op.modifies() {
            return out.error(Errno::EROFS);
        }
        match op {
            Op::Lookup { .. }
            | Op::Symlink { .. }
            | Op::Mknod { .. }
            | Op::Mkdir { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::Rename { .. }
            | Op::Link { .. } => self.names(ino, caller, op, label, out),
            Op::Getattr { .. }
            | Op::Statx { .. }
            | Op::Setattr { .. }
            | Op::Readlink
            | Op::Statfs
            | Op::Access => self.attributes(ino, caller, op, out),
            Op::Setxattr { .. }
            | Op::Getxattr { .. }
            | Op::Listxattr { .. }
            | Op::Removexattr { .. } => self.xattrs(ino, caller, op, out),
            Op::Open { .. }
            | Op::Create { .. }
            | Op::Tmpfile { .. }
            | Op::Flush { .. }
            | Op::Release { .. }
            | Op::Opendir { .. }
            | Op::Readdir { .. }
            | Op::Releasedir { .. } => self.handles(ino, caller, op, label, out),
            Op::Read { .. }
            | Op::Write { .. }
            | Op::Ioctl { .. }
            | Op::Fallocate { .. }
            | Op::Lseek { .. }
            | Op::CopyFileRange { .. } => self.data(ino, caller, op, out),
            Op::Destroy => out.empty(),
            Op::Unsupported { .. }
            | Op::Syncfs
            | Op::Forget { .. }
            | Op::BatchForget { .. }
            | Op::Interrupt { .. }
            | Op::Fsync { .. }
            | Op::Fsyncdir { .. } => out.error(Errno::ENOSYS),
        }
    }
}
