//! [`memofs_core::Invalidator`] on FUSE notifications, with a fallback for kernels that keep
//! negative entries they are told to drop.
//!
//! Reports are queued and sent by one dedicated thread: a notification must never be written
//! from inside the handler of a request it relates to (the kernel may hold locks that request
//! waits on), and a backend's watcher should not block on the device either.
//!
//! # Names whose miss the kernel caches
//! `FUSE_NOTIFY_INVAL_ENTRY` answers `ENOENT` when the kernel holds no entry for the name,
//! which usually means there is nothing to drop. Some kernels answer `ENOENT` for a
//! *negative* entry too and keep it (docs/guide.md names them), so a name created on the
//! host stays invisible until the negative timeout (an hour by default) runs out. The server
//! therefore remembers the names it answered with a negative entry ([`Misses`], noted by the
//! request path before the reply goes out) until the kernel's copy expires. When the
//! invalidation of such a name comes back `ENOENT`, the kernel may still hold it, so the
//! thread falls back to `FUSE_NOTIFY_INC_EPOCH` (every cached entry is revalidated; every
//! kernel that keeps negative entries has it), once per batch of reports. Such invalidations
//! are counted as `inval_fallback`. On other kernels the fallback runs only when a remembered
//! negative entry was already gone from the kernel's cache (evicted, or not yet added when
//! the host change was seen), which is rare. Nothing depends on the kernel's version: the
//! behaviour is what the kernel answers.
//!
//! A record belongs to the negative entry it was noted for. A LOOKUP may be answered while
//! an invalidation of the same name is on its way to the kernel (the kernel makes the
//! invalidation wait for a LOOKUP in flight, so the miss is noted before it is answered);
//! a record noted after the invalidation started may stand for a negative entry the kernel
//! took after it, so it outlives that invalidation: each note carries a sequence number, and
//! an invalidation spends only the records noted before it started ([`Misses::settle`]). A
//! deletion spends none: after it the kernel may well cache a miss of the name, and the
//! record of that miss is what lets a later re-creation on the host be seen.
//!
//! Whether the kernel has the epoch notification is what INIT granted ([`crate::Granted`]);
//! an epoch the kernel refuses as unknown (`EINVAL`, `ENOSYS`) is not tried again.
//!
//! # Expired, not unhashed
//! Where the kernel takes `FUSE_EXPIRE_ONLY` (Linux 6.2+), a name is invalidated by
//! expiring it: the kernel looks it up again at its next use and keeps the dentry when the
//! name still leads to the same node. Unhashing it instead would turn a directory that is
//! some process's working directory into a deleted one (`getcwd` fails with `ENOENT`) even
//! though only something inside it changed. A name that now leads elsewhere, or nowhere, is
//! dropped by that next lookup.
//!
//! # The root, while the mount starts
//! A new mount's root has placeholder attributes (no permission bits) until a GETATTR
//! answers, and the kernel drops a GETATTR answer that crosses an invalidation of the same
//! inode. So invalidations of the root are held (remembered, not sent) until the transport
//! has made its first GETATTR of the root ([`NotifyInvalidator::release_root`]); then one is
//! sent if any was held. Otherwise a host change seen at mount time could leave the root
//! without permission bits, and an unprivileged user's first access would fail with `EACCES`.
//!
//! # Everything, on request
//! [`NotifyInvalidator::invalidate_all`] (behind `memofs invalidate`) increments the epoch
//! where the kernel has it. Without it, it drops what it can name: every remembered miss; it
//! says what it could not do (names cached as present stay until the entry timeout).
//!
//! # The one notification sent from a request thread
//! [`NotifyInvalidator::inode_now`] invalidates an inode from the calling thread, before the
//! caller's reply goes out. The request layer uses it for a directory whose kept listing a
//! SETATTR, SETXATTR or REMOVEXATTR made stale (see `Server::times_moved`): the caller's next
//! listing must already find the listing gone. It is safe there because
//! `FUSE_NOTIFY_INVAL_INODE` takes no lock those requests hold: the kernel bumps the inode's
//! attribute version and drops the directory's cached pages, and a directory's inode lock is
//! not among them. Nothing else may use it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memofs_core::{Ino, Invalidator, ROOT_INO};

use crate::kernel::Kernel;
use crate::server::Granted;
use crate::stats::{Event, Stats};

enum Report {
    Entry(Ino, OsString),
    Deleted(Ino, Ino, OsString),
    Inode(Ino),
    /// The backend lost track of changes: any cached name may be stale.
    Untracked,
    /// The root's first GETATTR is done: send what was held back.
    ReleaseRoot,
    /// `memofs invalidate`: drop everything, and say what was done.
    UserAsked(Sender<Invalidated>),
    /// Answer once everything reported before is sent.
    Barrier(Sender<()>),
}

/// How many misses [`Misses`] remembers; past that it forgets them all and treats every
/// `ENOENT` as a possibly kept miss until the last forgotten one would have expired.
const MISSES_CAPACITY: usize = 1 << 16;

/// The names the server answered with a negative entry, each until the kernel's copy
/// expires (see the module documentation).
pub struct Misses {
    timeout: Duration,
    inner: Mutex<MissesInner>,
}

/// One remembered miss.
#[derive(Clone, Copy)]
struct Noted {
    /// When the kernel's negative entry expires.
    expires: Instant,
    /// The order it was noted in (see [`Misses::settle`]).
    seq: u64,
}

#[derive(Default)]
struct MissesInner {
    /// (parent, name) → the latest miss noted.
    names: HashMap<(Ino, OsString), Noted>,
    /// The sequence number of the next note.
    next_seq: u64,
    /// Misses were forgotten for room: until then any of them may still be cached.
    forgotten_until: Option<Instant>,
}

impl Misses {
    /// A record for negative entries cached `timeout` long (zero: none are cached).
    pub fn new(timeout: Duration) -> Misses {
        Misses {
            timeout,
            inner: Mutex::new(MissesInner::default()),
        }
    }

    /// The server answers a LOOKUP of `name` in `parent` with a negative entry (called
    /// before the reply is sent).
    pub fn note(&self, parent: Ino, name: &OsStr) {
        self.note_at(parent, name, Instant::now());
    }

    fn note_at(&self, parent: Ino, name: &OsStr, now: Instant) {
        if self.timeout.is_zero() {
            return;
        }
        let expires = now + self.timeout;
        let mut inner = self.lock();
        if inner.names.len() >= MISSES_CAPACITY {
            inner.names.retain(|_, n| n.expires > now);
            if inner.names.len() >= MISSES_CAPACITY {
                let latest = inner.names.values().map(|n| n.expires).max();
                inner.forgotten_until = latest.max(inner.forgotten_until);
                inner.names.clear();
            }
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner
            .names
            .insert((parent, name.to_os_string()), Noted { expires, seq });
    }

    /// Taken just before an invalidation is sent: the records noted from now on are not
    /// spent by it.
    fn mark(&self) -> u64 {
        self.lock().next_seq
    }

    /// After an invalidation of `name` in `parent` that started at `mark`: whether the
    /// kernel may still cache a miss of it. The record is spent if it was noted before the
    /// invalidation started; one noted since may stand for a negative entry the kernel took
    /// after the invalidation, and stays (see the module documentation).
    fn settle(&self, parent: Ino, name: &OsStr, now: Instant, mark: u64) -> bool {
        let mut inner = self.lock();
        let key = (parent, name.to_os_string());
        let noted = match inner.names.get(&key).copied() {
            Some(n) if n.seq < mark => inner.names.remove(&key).is_some_and(|n| n.expires > now),
            Some(n) => n.expires > now,
            None => false,
        };
        noted || inner.forgotten_until.is_some_and(|t| t > now)
    }

    /// Every miss the kernel may still cache, forgotten.
    fn take_all(&self, now: Instant) -> Vec<(Ino, OsString)> {
        let mut inner = self.lock();
        inner
            .names
            .drain()
            .filter(|(_, n)| n.expires > now)
            .map(|(key, _)| key)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MissesInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What `memofs invalidate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalidated {
    /// The entry epoch was incremented: every cached name, positive or negative, is dropped.
    pub epoch: bool,
    /// Without the epoch: the remembered misses whose invalidation was sent.
    pub names: usize,
    /// What could not be done, for the user.
    pub not_done: Option<String>,
}

impl Invalidated {
    /// Whether anything was invalidated.
    pub fn did_something(&self) -> bool {
        self.epoch || self.names > 0
    }
}

/// What the kernel was found to do, for `memofs stats`.
#[derive(Default)]
struct Learnt {
    /// The kernel takes `FUSE_NOTIFY_INC_EPOCH`: INIT granted it, and it was never refused
    /// as unknown.
    epoch: AtomicBool,
    /// Invalidations of remembered misses the kernel answered with success.
    misses_dropped: AtomicU64,
    /// ... and with `ENOENT` (the fallback ran): all of them on kernels that keep misses, a
    /// few evicted or not yet cached ones elsewhere.
    misses_enoent: AtomicU64,
    /// The kernel takes `FUSE_EXPIRE_ONLY` (see the module documentation).
    expire_only: bool,
}

/// Counts a notification sent under `event`, or as failed.
fn count_sent(stats: &Stats, event: Event, result: &io::Result<()>) {
    match result {
        // ENOENT: the kernel holds no such entry or inode (see `Sending::handle` for misses).
        Ok(()) => stats.event(event),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => stats.event(event),
        Err(e) => {
            stats.event(Event::InvalFailed);
            log::debug!("invalidation failed: {e}");
        }
    }
}

/// The sending thread's logic, over any [`Kernel`].
struct Sending<K: Kernel + ?Sized> {
    kernel: Arc<K>,
    misses: Arc<Misses>,
    stats: Arc<Stats>,
    learnt: Arc<Learnt>,
    /// A remembered miss may be kept by the kernel: increment the epoch after this batch.
    fallback: bool,
    /// The kernel keeps a miss and has no epoch: said once in the log.
    warned: bool,
    /// Invalidations of the root wait for [`Report::ReleaseRoot`] (see the module
    /// documentation); `Some(true)` once one was held back.
    root_held: Option<bool>,
}

impl<K: Kernel + ?Sized> Sending<K> {
    fn new(kernel: Arc<K>, misses: Arc<Misses>, stats: Arc<Stats>, learnt: Arc<Learnt>) -> Self {
        Sending {
            kernel,
            misses,
            stats,
            learnt,
            fallback: false,
            warned: false,
            root_held: Some(false),
        }
    }

    fn count(&self, event: Event, result: &io::Result<()>) {
        count_sent(&self.stats, event, result);
    }

    fn handle(&mut self, report: Report) {
        let now = Instant::now();
        match report {
            Report::Entry(parent, name) => {
                let mark = self.misses.mark();
                let result = self
                    .kernel
                    .inval_entry(parent, &name, self.learnt.expire_only);
                self.count(Event::InvalEntry, &result);
                let noted = self.misses.settle(parent, &name, now, mark);
                match result {
                    Err(e) if noted && e.raw_os_error() == Some(libc::ENOENT) => {
                        self.stats.event(Event::InvalFallback);
                        self.learnt.misses_enoent.fetch_add(1, Ordering::Relaxed);
                        self.fallback = true;
                    }
                    Ok(()) if noted => {
                        self.learnt.misses_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            Report::Deleted(parent, child, name) => {
                let result = self.kernel.delete(parent, child, &name);
                self.count(Event::InvalEntry, &result);
            }
            Report::Inode(ROOT_INO) if self.root_held.is_some() => self.root_held = Some(true),
            Report::ReleaseRoot => {
                if self.root_held.take() == Some(true) {
                    let result = self.kernel.inval_inode(ROOT_INO, 0, 0);
                    self.count(Event::InvalInode, &result);
                }
            }
            Report::Inode(ino) => {
                let result = self.kernel.inval_inode(ino, 0, 0);
                self.count(Event::InvalInode, &result);
            }
            Report::Untracked => {
                if !self.epoch() {
                    self.names(now);
                }
            }
            Report::UserAsked(reply) => {
                let done = self.all(now);
                let _ = reply.send(done);
            }
            Report::Barrier(reply) => {
                self.flush();
                let _ = reply.send(());
            }
        }
    }

    /// Increments the epoch where the kernel has it; whether it did.
    fn epoch(&mut self) -> bool {
        if !self.learnt.epoch.load(Ordering::Relaxed) {
            return false;
        }
        let result = self.kernel.inc_epoch();
        self.count(Event::IncEpoch, &result);
        match result {
            Ok(()) => true,
            Err(e) => {
                if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
                    self.learnt.epoch.store(false, Ordering::Relaxed);
                }
                false
            }
        }
    }

    /// Invalidates every remembered miss by name; how many were sent.
    fn names(&mut self, now: Instant) -> usize {
        let names = self.misses.take_all(now);
        for (parent, name) in &names {
            let result = self
                .kernel
                .inval_entry(*parent, name, self.learnt.expire_only);
            self.count(Event::InvalEntry, &result);
        }
        names.len()
    }

    fn all(&mut self, now: Instant) -> Invalidated {
        if self.epoch() {
            self.misses.take_all(now);
            return Invalidated {
                epoch: true,
                names: 0,
                not_done: None,
            };
        }
        let names = self.names(now);
        Invalidated {
            epoch: false,
            names,
            not_done: Some(
                "this kernel has no FUSE_NOTIFY_INC_EPOCH (Linux 6.16+), so the names it caches \
                 as present were not dropped: they stay until the entry timeout runs out"
                    .into(),
            ),
        }
    }

    /// The end of a batch of reports: the fallback, if a kept miss may be cached.
    fn flush(&mut self) {
        if !std::mem::take(&mut self.fallback) || self.epoch() || self.warned {
            return;
        }
        self.warned = true;
        log::warn!(
            "a cached miss could not be dropped by name (the kernel answered ENOENT) and this \
             kernel has no FUSE_NOTIFY_INC_EPOCH: a name created outside the mount may stay \
             hidden until the negative timeout (negative_timeout=0 avoids it)"
        );
    }

    /// Serves reports until every sender is gone.
    fn run(mut self, rx: Receiver<Report>) {
        while let Ok(report) = rx.recv() {
            self.handle(report);
            while let Ok(report) = rx.try_recv() {
                self.handle(report);
            }
            self.flush();
        }
    }
}

/// Sends invalidations to the kernel from its own thread.
pub struct NotifyInvalidator {
    queue: Sender<Report>,
    learnt: Arc<Learnt>,
    kernel: Arc<dyn Kernel>,
    stats: Arc<Stats>,
}

impl Learnt {
    /// What is known at the start: what INIT granted.
    fn granted(granted: Granted) -> Learnt {
        Learnt {
            epoch: AtomicBool::new(granted.inc_epoch),
            expire_only: granted.expire_only,
            ..Learnt::default()
        }
    }
}

impl NotifyInvalidator {
    /// Starts the sending thread; it ends when the invalidator is dropped. `kernel` is where
    /// notifications go; `misses` is where the request path notes its negative replies;
    /// `granted`: which notifications INIT allowed.
    pub fn start(
        kernel: Arc<dyn Kernel>,
        misses: Arc<Misses>,
        stats: Arc<Stats>,
        granted: Granted,
    ) -> io::Result<NotifyInvalidator> {
        let (tx, rx) = channel::<Report>();
        let learnt = Arc::new(Learnt::granted(granted));
        let sending = Sending::new(kernel.clone(), misses, stats.clone(), learnt.clone());
        std::thread::Builder::new()
            .name("memofs-notify".into())
            .spawn(move || sending.run(rx))?;
        Ok(NotifyInvalidator {
            queue: tx,
            learnt,
            kernel,
            stats,
        })
    }

    /// Invalidates `ino` from the calling thread, before its reply goes out: the one
    /// exception to sending from the notification thread (see the module documentation).
    pub fn inode_now(&self, ino: Ino) {
        count_sent(
            &self.stats,
            Event::InvalInode,
            &self.kernel.inval_inode(ino, 0, 0),
        );
    }

    /// Drops the attributes the kernel caches for `ino` (not its pages) from the calling
    /// thread, before its reply goes out; the kernel takes no lock a request holds for it.
    pub fn attrs_now(&self, ino: Ino) {
        count_sent(
            &self.stats,
            Event::InvalInode,
            &self.kernel.inval_inode(ino, -1, 0),
        );
    }

    fn send(&self, r: Report) {
        let _ = self.queue.send(r);
    }

    /// The transport has made the root's first GETATTR: invalidations of the root go out
    /// from now on, and one now if any was held back (see the module documentation).
    pub fn release_root(&self) {
        self.send(Report::ReleaseRoot);
    }

    /// Drops every name the kernel caches, or what can be named without the epoch (see the
    /// module documentation); waits for the sending thread's answer.
    pub fn invalidate_all(&self) -> Invalidated {
        let (tx, rx) = channel();
        self.send(Report::UserAsked(tx));
        rx.recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| Invalidated {
                epoch: false,
                names: 0,
                not_done: Some("the notification thread did not answer".into()),
            })
    }

    /// Whether every report made before this call has been sent within `limit` (a
    /// notification may wait in the kernel for a request the server has not answered: a
    /// page it must drop is locked for a READ still queued).
    pub fn settled(&self, limit: Duration) -> bool {
        let (tx, rx) = channel();
        self.send(Report::Barrier(tx));
        rx.recv_timeout(limit).is_ok()
    }

    /// `memofs stats` lines for what the kernel was found to do.
    pub fn features(&self) -> Vec<(String, String)> {
        let epoch = if self.learnt.epoch.load(Ordering::Relaxed) {
            "yes"
        } else {
            "no (memofs invalidate drops the remembered misses only; lost host events \
             leave names cached until their timeouts)"
        };
        let negative = format!(
            "{} cached misses dropped by name, {} answered ENOENT (fallback: the entry epoch)",
            self.learnt.misses_dropped.load(Ordering::Relaxed),
            self.learnt.misses_enoent.load(Ordering::Relaxed)
        );
        vec![
            ("inc_epoch".into(), epoch.into()),
            ("negative_entry_invalidation".into(), negative),
        ]
    }
}

impl Invalidator for NotifyInvalidator {
    fn entry(&self, parent: Ino, name: &OsStr) {
        self.send(Report::Entry(parent, name.to_os_string()));
    }

    fn deleted(&self, parent: Ino, child: Ino, name: &OsStr) {
        self.send(Report::Deleted(parent, child, name.to_os_string()));
    }

    fn inode(&self, ino: Ino) {
        self.send(Report::Inode(ino));
    }

    fn everything(&self) {
        self.send(Report::Untracked);
    }
}

#[cfg(test)]
#[path = "invalidate_tests.rs"]
mod tests;
