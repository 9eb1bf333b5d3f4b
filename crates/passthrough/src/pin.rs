//! Inode descriptors the backend may close while the kernel still holds the inode, and
//! open again from the inode's file handle when it is next needed.
//!
//! An export can hold far more inodes than the process may keep descriptors (a `find` over a
//! large tree makes the kernel hold every inode it saw). So when the descriptor budget is
//! spent ([`crate::fd::FdBudget`]), the budget asks [`Pins`] to close cold inode
//! descriptors: a clock over the inodes holding one, where each use sets a bit that buys one
//! more round. Before closing a descriptor the inode's file handle is taken
//! (`name_to_handle_at`); the next use opens the handle again (`open_by_handle_at` on the
//! private mount of the export, which needs `CAP_DAC_READ_SEARCH`) and checks that it found
//! the same host inode.
//!
//! Never closed: the export root's descriptor; an inode with an open file or directory
//! handle (an open file may be unlinked on the host, and some filesystems refuse the
//! handle of an unlinked inode); a directory the watcher marks or watches one by one (the
//! mark holds the host inode anyway, and removing it needs the descriptor); one whose handle
//! cannot be taken; one on another filesystem than the export root's (its handle would need
//! a mount descriptor of its own); every inode of a filesystem not known to open the
//! handles of inodes it no longer caches ([`REOPENS`]: a FUSE or network filesystem may
//! give handles it can only open while the inode is cached); and any inode while the server
//! cannot open handles (not root). There the budget's limit stands, and a request that
//! needs one more descriptor fails with `ENFILE`.
//!
//! A closed descriptor no longer pins the host inode, so its `(st_dev, st_ino)` may be
//! reused by a new file once the old one is deleted. The handle tells the two apart (it
//! carries the inode's generation): [`PinnedFd::same_object`] compares it before a lookup
//! joins an entry whose descriptor is closed, and reopening a handle whose inode is gone
//! fails with `ESTALE`.
//!
//! # Lock order
//! The clock ([`Pins::clock`]) before an inode's slot, which the clock only `try_lock`s;
//! otherwise a slot is a leaf lock. Neither is held while opening a descriptor or asking the
//! budget for a slot, and eviction takes no other lock (it runs inside
//! [`crate::fd::FdBudget::keep`], which callers may reach holding a directory stream's lock).

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use memofs_core::{Errno, Result};
use parking_lot::Mutex;

use crate::creds;
use crate::fd::{CountedFd, Evict, FdBudget};
use crate::host::HostId;
use crate::sys;
use crate::sys::at::FileHandle;

/// What holds a [`PinnedFd`] (an inode): the clock keeps these weakly and closes the
/// descriptors of those that are cold.
pub(crate) trait Pinned: Send + Sync {
    /// The descriptor held.
    fn pinned(&self) -> &PinnedFd;
}

/// Filesystems (`statfs` magic numbers) that open a handle of any inode that still exists,
/// cached or not: ext2/3/4, XFS, Btrfs, F2FS, and tmpfs (whose inodes stay cached while they
/// exist).
const REOPENS: [i64; 5] = [0xEF53, 0x5846_5342, 0x9123_683E, 0xF2F5_2010, 0x0102_1994];

/// What the inodes of one export share: the clock of descriptors that may be closed, and
/// how to open a handle again.
pub(crate) struct Pins {
    /// The budget the descriptors count against.
    pub(crate) budget: Arc<FdBudget>,
    /// Inodes holding a descriptor that may be closed, in clock order (lock order: first).
    clock: Mutex<VecDeque<Weak<dyn Pinned>>>,
    /// A descriptor of the export root's filesystem to open handles against (not `O_PATH`:
    /// `open_by_handle_at` refuses those), when the server may open handles.
    mount: Option<OwnedFd>,
    /// The export root's filesystem.
    root_dev: u64,
    /// Every inode must have a file handle ([`crate::FileHandles::Mandatory`]).
    mandatory: bool,
    /// Why handles cannot be opened here, where they cannot.
    why_not: Option<String>,
    /// Descriptors closed to stay within the budget.
    pub(crate) closed: AtomicU64,
    /// Descriptors opened again from a handle.
    pub(crate) reopened: AtomicU64,
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins")
            .field("can_reopen", &self.can_reopen())
            .finish()
    }
}

impl Pins {
    /// For an export whose root is `root` (an `O_PATH` descriptor) on device `root_dev`:
    /// descriptors may be closed if the root's own handle opens again from `mount`.
    /// `mandatory`: every inode must have a file handle (see [`Pins::required_handle`]).
    pub(crate) fn new(
        budget: Arc<FdBudget>,
        root: BorrowedFd<'_>,
        root_dev: u64,
        mount: Option<OwnedFd>,
        mandatory: bool,
    ) -> Arc<Pins> {
        let known = sys::io::fstatfs(root).map(|st| st.f_type);
        let why_not = match &mount {
            None => Some("the export holds its inodes by descriptor only".to_string()),
            Some(_) if !known.is_ok_and(|t| REOPENS.contains(&t)) => Some(match known {
                Ok(t) => format!(
                    "a filesystem (type {t:#x}) not known to open handles of uncached inodes"
                ),
                Err(e) => format!("its filesystem cannot be told: {e}"),
            }),
            Some(m) => sys::at::file_handle(root)
                .and_then(|(ty, bytes)| sys::at::open_by_handle(m.as_fd(), ty, &bytes))
                .err()
                .map(|e| format!("open_by_handle_at: {e}")),
        };
        if let Some(why) = &why_not {
            log::info!("passthrough: inode descriptors stay open ({why})");
        }
        let pins = Arc::new(Pins {
            budget,
            clock: Mutex::new(VecDeque::new()),
            mount: if why_not.is_none() { mount } else { None },
            root_dev,
            mandatory,
            why_not,
            closed: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
        });
        let evict: Weak<dyn Evict> = Arc::downgrade(&pins) as Weak<Pins>;
        pins.budget.set_evictor(evict);
        pins
    }

    /// Whether inode descriptors can be closed and opened again here.
    pub(crate) fn can_reopen(&self) -> bool {
        self.mount.is_some()
    }

    /// Why inode descriptors cannot be opened again here (empty where they can).
    pub(crate) fn why_not_reopen(&self) -> String {
        self.why_not.clone().unwrap_or_default()
    }

    /// Where every inode must have a file handle, the handle of the new inode `fd` refers
    /// to (a lookup of a file that has none fails with the host's error); `None` elsewhere.
    pub(crate) fn required_handle(&self, fd: BorrowedFd<'_>) -> Result<Option<FileHandle>> {
        match self.mandatory {
            true => sys::at::file_handle(fd).map(Some),
            false => Ok(None),
        }
    }

    /// Puts `inode`, which just got a descriptor, on the clock. Drops the records of
    /// inodes gone from memory once they would be most of it.
    fn enlist<P: Pinned + 'static>(&self, inode: Weak<P>) {
        let inode: Weak<dyn Pinned> = inode;
        let held = self.budget.used();
        let mut clock = self.clock.lock();
        clock.push_back(inode);
        if clock.len() > 2 * held + 64 {
            clock.retain(|w| w.strong_count() > 0);
        }
    }

    /// Opens `handle` of an inode on the root's filesystem: an `O_PATH` descriptor, or
    /// `ESTALE` when the object is gone (`EOPNOTSUPP` where handles cannot be opened here).
    pub(crate) fn open_handle(&self, handle: &FileHandle) -> Result<OwnedFd> {
        let mount = self.mount.as_ref().ok_or(Errno::EOPNOTSUPP)?;
        creds::as_server(|| sys::at::open_by_handle(mount.as_fd(), handle.0, &handle.1))
    }

    /// Opens `handle` of an inode on the root's filesystem: an `O_PATH` descriptor of the
    /// host inode `host`, or `ESTALE` when it is gone (or its number now names another).
    fn reopen(&self, handle: &FileHandle, host: HostId) -> Result<OwnedFd> {
        let fd = self.open_handle(handle).map_err(|_| Errno::ESTALE)?;
        if HostId::of(&sys::at::statx_fd(fd.as_fd())?) != host {
            return Err(Errno::ESTALE);
        }
        self.reopened.fetch_add(1, Ordering::Relaxed);
        Ok(fd)
    }
}

impl Evict for Pins {
    /// Closes up to `want` cold descriptors; returns how many it closed. Each inode is
    /// looked at most twice (one round to clear its bit, one to close).
    fn evict(&self, want: usize) -> usize {
        let mut taken = Vec::new();
        let mut clock = self.clock.lock();
        let mut looks = 2 * clock.len();
        while taken.len() < want && looks > 0 {
            looks -= 1;
            let Some(weak) = clock.pop_front() else {
                break;
            };
            let Some(inode) = weak.upgrade() else {
                continue;
            };
            match inode.pinned().try_close() {
                Closing::Closed(fd) => taken.push(fd),
                Closing::Later => clock.push_back(weak),
                Closing::Never => {}
            }
        }
        drop(clock);
        // Closed here, outside the clock's lock: the last descriptor of a file deleted on
        // the host frees it, which takes a while.
        let closed = taken.len();
        drop(taken);
        self.closed.fetch_add(closed as u64, Ordering::Relaxed);
        closed
    }
}

/// What [`PinnedFd::try_close`] did.
enum Closing {
    /// Taken out: closes when dropped.
    Closed(Arc<CountedFd>),
    /// In use, recently used or open: look again next round.
    Later,
    /// Not held, or can never be closed: off the clock.
    Never,
}

/// An inode's `O_PATH` descriptor, held or closed.
pub(crate) struct PinnedFd {
    /// The descriptor while held (requests clone the `Arc`: a closed slot frees the
    /// descriptor once the last request using it is done).
    slot: Mutex<Option<Arc<CountedFd>>>,
    /// The file handle, taken before the descriptor is first closed; `None` inside when it
    /// cannot be taken (the descriptor then stays).
    handle: OnceLock<Option<FileHandle>>,
    /// Used since the clock last passed.
    used: AtomicBool,
    /// Open file and directory handles of the inode (see [`OpenPin`]).
    opens: AtomicU32,
    /// The watcher marks or watches this directory by itself (see [`PinnedFd::keep_for_watcher`]).
    watched: AtomicBool,
    /// May ever be closed (not the root, on the root's filesystem, the server can reopen).
    closable: bool,
}

impl std::fmt::Debug for PinnedFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedFd")
            .field("held", &self.slot.lock().is_some())
            .finish()
    }
}

impl PinnedFd {
    /// Holding `fd`; `closable` says whether it may ever be closed.
    pub(crate) fn new(fd: CountedFd, closable: bool) -> PinnedFd {
        PinnedFd {
            slot: Mutex::new(Some(Arc::new(fd))),
            handle: OnceLock::new(),
            used: AtomicBool::new(true),
            opens: AtomicU32::new(0),
            watched: AtomicBool::new(false),
            closable,
        }
    }

    /// Whether a new inode with this descriptor goes on the clock.
    pub(crate) fn closable(host: HostId, pins: &Pins) -> bool {
        pins.can_reopen() && host.dev == pins.root_dev
    }

    /// The inode's file handle, taken when it was looked up (see
    /// [`Pins::required_handle`]).
    pub(crate) fn know_handle(&self, handle: FileHandle) {
        let _ = self.handle.set(Some(handle));
    }

    /// The descriptor if it is held now (no reopening).
    pub(crate) fn held(&self) -> Option<Arc<CountedFd>> {
        let fd = self.slot.lock().clone();
        if fd.is_some() {
            self.used.store(true, Ordering::Relaxed);
        }
        fd
    }

    /// Whether the host object `fd` refers to (with the same `(st_dev, st_ino)` as this
    /// inode) is this inode's: certainly while the descriptor is held (it pins the inode),
    /// unless the source's inode numbers are `unstable` (a FUSE or network filesystem may
    /// show two live objects under one number, or move an object to another: SeaweedFS's
    /// mount does), where the handles must match too; otherwise when its handle matches the
    /// one taken before closing. Without a handle to compare, the numbers decide.
    pub(crate) fn same_object(&self, fd: BorrowedFd<'_>, unstable: bool) -> bool {
        let held = self.slot.lock().clone();
        let handle = match held {
            Some(_) if !unstable => return true,
            Some(own) => self
                .handle
                .get_or_init(|| sys::at::file_handle(own.as_fd()).ok()),
            None => match self.handle.get() {
                Some(h) => h,
                None => return true,
            },
        };
        match handle {
            Some(handle) => sys::at::file_handle(fd).is_ok_and(|h| h == *handle),
            None => true,
        }
    }

    /// Closes the descriptor if nothing uses it, it was not used since the clock last
    /// passed, and its handle can be taken.
    fn try_close(&self) -> Closing {
        if !self.closable || self.watched.load(Ordering::Acquire) {
            return Closing::Never;
        }
        if self.used.swap(false, Ordering::Relaxed) || self.opens.load(Ordering::Acquire) > 0 {
            return Closing::Later;
        }
        let Some(mut slot) = self.slot.try_lock() else {
            return Closing::Later;
        };
        let fd = match &*slot {
            None => return Closing::Never,
            Some(fd) if Arc::strong_count(fd) > 1 => return Closing::Later,
            Some(fd) => fd,
        };
        let handle = self
            .handle
            .get_or_init(|| sys::at::file_handle(fd.as_fd()).ok());
        if handle.is_none() {
            return Closing::Never;
        }
        match slot.take() {
            Some(fd) => Closing::Closed(fd),
            None => Closing::Never,
        }
    }
}

impl PinnedFd {
    /// The descriptor, opened again from the handle if it was closed; `ESTALE` if the host
    /// inode `host` is gone. `me` is what holds this descriptor, for the clock. Held by the
    /// caller while it uses it.
    pub(crate) fn get<P: Pinned + 'static>(
        &self,
        pins: &Pins,
        host: HostId,
        me: &Weak<P>,
    ) -> Result<Arc<CountedFd>> {
        if let Some(fd) = self.held() {
            return Ok(fd);
        }
        let counted = pins.budget.keep(self.reopen(pins, host)?)?;
        Ok(self.install(pins, me, counted).unwrap_or_else(|held| held))
    }

    /// Makes `fd` the held descriptor, unless one is held already (then returned as
    /// `Err`, and `fd` closes).
    fn install<P: Pinned + 'static>(
        &self,
        pins: &Pins,
        me: &Weak<P>,
        fd: CountedFd,
    ) -> std::result::Result<Arc<CountedFd>, Arc<CountedFd>> {
        let mut slot = self.slot.lock();
        if let Some(held) = &*slot {
            return Err(held.clone());
        }
        let fd = Arc::new(fd);
        *slot = Some(fd.clone());
        drop(slot);
        self.used.store(true, Ordering::Relaxed);
        pins.enlist(me.clone());
        Ok(fd)
    }

    /// The watcher marks or watches this directory by itself: its descriptor stays open
    /// from now on (a mark holds the host inode anyway, and removing it needs the
    /// descriptor, under the table's lock where nothing may be opened again).
    pub(crate) fn keep_for_watcher(&self) {
        self.watched.store(true, Ordering::Release);
    }

    /// The descriptor for the watcher's table hook, which runs under the table's lock and
    /// must not ask the budget: the held one (always, for a directory kept for the watcher
    /// and for an inode being added), or one opened from the handle for this call only
    /// (within the descriptors kept out of the budget), which happens only when a watcher
    /// starts and is told of inodes already known.
    pub(crate) fn for_hook(&self, pins: &Pins, host: HostId) -> Result<HookFd> {
        match self.held() {
            Some(fd) => Ok(HookFd::Held(fd)),
            None => Ok(HookFd::Once(self.reopen(pins, host)?)),
        }
    }

    /// A new descriptor of the host inode `host` from the handle taken before this one was
    /// closed; `ESTALE` if there is none, or the host inode is gone.
    fn reopen(&self, pins: &Pins, host: HostId) -> Result<OwnedFd> {
        match self.handle.get() {
            Some(Some(handle)) => pins.reopen(handle, host),
            _ => Err(Errno::ESTALE),
        }
    }

    /// A lookup found the inode again through `fd` (the same object, see
    /// [`PinnedFd::same_object`]): if this descriptor was closed, `fd` takes its place.
    pub(crate) fn adopt<P: Pinned + 'static>(&self, pins: &Pins, me: &Weak<P>, fd: OwnedFd) {
        if self.slot.lock().is_some() {
            return;
        }
        if let Ok(counted) = pins.budget.keep(fd) {
            let _ = self.install(pins, me, counted);
        }
    }

    /// Puts a new inode, `me`, on the clock if its descriptor may be closed.
    pub(crate) fn enlist<P: Pinned + 'static>(&self, pins: &Pins, me: &Weak<P>) {
        if self.closable {
            pins.enlist(me.clone());
        }
    }

    /// A file or directory handle of the inode was opened: the descriptor stays open until
    /// [`PinnedFd::open_ended`].
    pub(crate) fn open_started(&self) {
        self.opens.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle counted by [`PinnedFd::open_started`] is released.
    pub(crate) fn open_ended(&self) {
        self.opens.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A descriptor for the table hook: held by the inode, or opened for one call.
pub(crate) enum HookFd {
    Held(Arc<CountedFd>),
    Once(OwnedFd),
}

impl AsFd for HookFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            HookFd::Held(fd) => fd.as_fd(),
            HookFd::Once(fd) => fd.as_fd(),
        }
    }
}
