//! FUSE passthrough backing ids: one per inode, registered with the kernel at the inode's
//! first passthrough open.
//!
//! At the inode's last release the registration is closed, or, where the backend keeps
//! lending the same file ([`Backend::keeps_backing`]), kept idle for the next open: that
//! open costs no registration ioctl, and the backend need not open its file at all. A
//! warm `grep -r` or build opens every file again and again; each of those opens is then a
//! map lookup. Idle registrations are bounded ([`IDLE_MAX`], the longest idle closed
//! first) and closed as soon as the backend stops keeping the file: asked at the last
//! release and at every FORGET of an inode that has one (an unlinked file's last FORGET
//! arrives before its `unlink(2)` returns, unless it is still open).
//!
//! An idle registration holds the kernel's reference to the backing file, not a descriptor
//! of the server's, so it costs no slot of the server's descriptor limit.
//!
//! # When the kernel refuses a backing file
//! What a refusal means decides what it costs ([`Refusal`]): a kernel that cannot lend
//! passthrough to this server at all (no privilege, no such ioctl) turns it off for the mount
//! and the open is served through the server; a file the kernel cannot pass through (one
//! stacked too deep, a filesystem without the needed operations) is served through the server
//! alone; anything else (a full descriptor table, no memory) is passing, and fails that
//! open alone, which the caller can retry. Serving such an open through the server instead
//! would stop every later passthrough open of the same file while it stays open (the kernel
//! refuses to mix the two on one inode). Each refusal is counted (`backing_refused`).
//!
//! Lock order: the map's lock, then the backend's (`with_backing_fd`, `keeps_backing`
//! are called with the map locked: an open and a release of one inode never interleave).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memofs_core::{Backend, Errno, Ino};
use parking_lot::Mutex;

use crate::kernel::{BackingWrites, Kernel};
use crate::stats::{Event, Stats};

/// Idle registrations kept at most; past it, the longest idle is closed.
pub(crate) const IDLE_MAX: usize = 16 * 1024;

/// What the kernel's refusal of a backing file means (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No passthrough for this mount: every open is served through the server.
    Mount,
    /// This file cannot be passed through: its open is served through the server.
    File,
    /// Passing: this open fails with the error.
    Open(Errno),
}

impl Refusal {
    /// What the error of `FUSE_DEV_IOC_BACKING_OPEN` means.
    pub(crate) fn of(e: &std::io::Error) -> Refusal {
        match e.raw_os_error() {
            Some(libc::EPERM | libc::ENOTTY | libc::ENOSYS) => Refusal::Mount,
            // Too deeply stacked, or a file without the operations the kernel needs.
            Some(libc::ELOOP | libc::EINVAL | libc::EOPNOTSUPP) => Refusal::File,
            // The server's own table is full: to the caller that is the system's.
            Some(libc::EMFILE) => Refusal::Open(Errno::ENFILE),
            Some(n) => Refusal::Open(Errno(n)),
            None => Refusal::Open(Errno::EIO),
        }
    }
}

/// One inode's registration.
struct Registration {
    id: u32,
    /// Opens using it; 0 while idle.
    opens: usize,
    /// Its key in [`Map::idle`] while idle.
    idle_key: u64,
}

#[derive(Default)]
struct Map {
    by_ino: HashMap<Ino, Registration>,
    /// Idle registrations, oldest first (key: a counter taken when they went idle).
    idle: BTreeMap<u64, Ino>,
    next_key: u64,
}

impl Map {
    /// Closes and forgets the registration of `ino`.
    fn close_locked(&mut self, kernel: &dyn Kernel, ino: Ino) {
        if let Some(r) = self.by_ino.remove(&ino) {
            if r.opens == 0 {
                self.idle.remove(&r.idle_key);
            }
            if let Err(e) = kernel.close_backing(r.id) {
                log::debug!("closing backing id {}: {e}", r.id);
            }
        }
    }
}

/// The registrations and the passthrough writers of a mount, as a server process that takes
/// the connection over from another takes them on (the kernel keeps the ids: they belong
/// to the connection, not to the process).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackingState {
    /// Opens may use passthrough (the kernel has refused none for the whole mount).
    pub enabled: bool,
    /// (inode, backing id, opens using it): the open ones, then the idle ones (0 opens),
    /// the longest idle first.
    pub registrations: Vec<(Ino, u32, usize)>,
    /// The passthrough opens that write, by (inode, handle).
    pub writers: Vec<(Ino, u64)>,
}

/// The backing ids of open files, and of files whose registration is kept.
#[derive(Default)]
pub(crate) struct Backings {
    /// Set once INIT granted passthrough; cleared if the kernel refuses a backing fd.
    enabled: AtomicBool,
    map: Mutex<Map>,
    /// Passthrough opens for writing. A write through a shared mapping of one reaches the
    /// backing file and moves its times without the kernel dropping the attributes it caches
    /// (a write(2) drops them, a mapped write does not), so while one is open the inode's
    /// attributes are given with no validity (see `Server::entry`).
    writers: Mutex<Writers>,
    /// How many there are: the common case, none, is one load.
    writer_count: AtomicUsize,
}

/// The passthrough opens that write: each by (inode, handle), and how many each inode has.
#[derive(Default)]
struct Writers {
    opens: HashSet<(Ino, u64)>,
    per_inode: HashMap<Ino, usize>,
}

impl Backings {
    /// INIT granted passthrough.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether opens may use passthrough.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The backing id to open `ino`/`fh` with: the inode's registration (open or idle),
    /// or a new one of the backend's descriptor. `Ok(None)`: serve this open through the
    /// server; an error: the kernel refused the file for a passing reason, and the open
    /// fails with it (see the module documentation).
    /// Writes through a new registration carry `writes`' privilege (see [`BackingWrites`]).
    pub(crate) fn open<B: Backend>(
        &self,
        backend: &B,
        kernel: &dyn Kernel,
        stats: &Stats,
        (ino, fh): (Ino, u64),
        writes: BackingWrites,
    ) -> Result<Option<u32>, Errno> {
        if !self.enabled() {
            return Ok(None);
        }
        let mut map = self.map.lock();
        let map = &mut *map;
        if let Some(r) = map.by_ino.get_mut(&ino) {
            if r.opens == 0 {
                map.idle.remove(&r.idle_key);
            }
            r.opens += 1;
            return Ok(Some(r.id));
        }
        let mut registered = None;
        backend.with_backing_fd(ino, fh, &mut |fd| {
            registered = Some(kernel.open_backing(fd, writes))
        });
        let Some(registered) = registered else {
            return Ok(None);
        };
        let e = match registered {
            Ok(id) => {
                stats.event(Event::BackingRegistered);
                let r = Registration {
                    id,
                    opens: 1,
                    idle_key: 0,
                };
                map.by_ino.insert(ino, r);
                return Ok(Some(id));
            }
            Err(e) => e,
        };
        stats.event(Event::BackingRefused);
        match Refusal::of(&e) {
            Refusal::Mount => {
                log::warn!("the kernel refused a passthrough backing file ({e}): file data of this mount goes through the server");
                self.enabled.store(false, Ordering::Relaxed);
                Ok(None)
            }
            Refusal::File => {
                log::debug!("the kernel refused inode {ino} as a backing file ({e}): served through the server");
                backend.backing_refused(ino);
                Ok(None)
            }
            Refusal::Open(errno) => {
                log::debug!("the kernel refused a backing file for now ({e}): that open fails");
                Err(errno)
            }
        }
    }

    /// A passthrough open of `ino` was released (after the backend's own release): at the
    /// last one the registration goes idle if the backend keeps the file, else it closes.
    pub(crate) fn release<B: Backend>(
        &self,
        backend: &B,
        kernel: &dyn Kernel,
        stats: &Stats,
        ino: Ino,
    ) {
        let mut map = self.map.lock();
        let map = &mut *map;
        let Some(r) = map.by_ino.get_mut(&ino) else {
            return;
        };
        if r.opens == 0 {
            // Not an open this map counted (the kernel releases only what it opened).
            return;
        }
        r.opens -= 1;
        if r.opens > 0 {
            return;
        }
        if !backend.keeps_backing(ino) {
            map.close_locked(kernel, ino);
            return;
        }
        r.idle_key = map.next_key;
        map.next_key += 1;
        map.idle.insert(r.idle_key, ino);
        stats.event(Event::BackingKept);
        while map.idle.len() > IDLE_MAX {
            let Some((_, oldest)) = map.idle.pop_first() else {
                break;
            };
            map.close_locked(kernel, oldest);
        }
    }

    /// The registrations and writers, for another server process ([`Backings::restore`]).
    pub(crate) fn state(&self) -> BackingState {
        let map = self.map.lock();
        let open = map.by_ino.iter().filter(|(_, r)| r.opens > 0);
        let mut registrations: Vec<_> = open.map(|(&ino, r)| (ino, r.id, r.opens)).collect();
        registrations.extend(
            map.idle
                .values()
                .filter_map(|ino| map.by_ino.get(ino).map(|r| (*ino, r.id, 0))),
        );
        BackingState {
            enabled: self.enabled(),
            registrations,
            writers: self.writers.lock().opens.iter().copied().collect(),
        }
    }

    /// Takes on what another server process held ([`Backings::state`]); call before the
    /// first request.
    pub(crate) fn restore(&self, state: &BackingState) {
        if !state.enabled {
            self.enabled.store(false, Ordering::Relaxed);
        }
        let mut map = self.map.lock();
        let map = &mut *map;
        for &(ino, id, opens) in &state.registrations {
            let idle_key = map.next_key;
            if opens == 0 {
                map.next_key += 1;
                map.idle.insert(idle_key, ino);
            }
            let r = Registration {
                id,
                opens,
                idle_key,
            };
            map.by_ino.insert(ino, r);
        }
        for &(ino, fh) in &state.writers {
            self.writer_opened(ino, fh);
        }
    }

    /// `fh`, a passthrough open of `ino`, writes.
    pub(crate) fn writer_opened(&self, ino: Ino, fh: u64) {
        let mut w = self.writers.lock();
        if w.opens.insert((ino, fh)) {
            *w.per_inode.entry(ino).or_default() += 1;
            self.writer_count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether a passthrough open of `ino` writes (and may write through a mapping).
    pub(crate) fn has_writer(&self, ino: Ino) -> bool {
        self.writer_count.load(Ordering::Acquire) != 0
            && self.writers.lock().per_inode.contains_key(&ino)
    }

    /// `fh` of `ino` was released: whether it was a passthrough open that writes.
    pub(crate) fn writer_released(&self, ino: Ino, fh: u64) -> bool {
        let mut w = self.writers.lock();
        if !w.opens.remove(&(ino, fh)) {
            return false;
        }
        if let Some(n) = w.per_inode.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                w.per_inode.remove(&ino);
            }
        }
        self.writer_count.fetch_sub(1, Ordering::AcqRel);
        true
    }

    /// The kernel forgot `ino` (after the backend's FORGET): an idle registration closes
    /// unless the backend still keeps the file.
    pub(crate) fn forgotten<B: Backend>(&self, backend: &B, kernel: &dyn Kernel, ino: Ino) {
        let mut map = self.map.lock();
        if map.by_ino.get(&ino).is_some_and(|r| r.opens == 0) && !backend.keeps_backing(ino) {
            map.close_locked(kernel, ino);
        }
    }
}
