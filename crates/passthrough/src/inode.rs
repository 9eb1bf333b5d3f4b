//! The inode table: our inode numbers ↔ host inodes, each with an `O_PATH` descriptor.
//!
//! # Inode numbers
//! A host inode is identified by `(st_dev, st_ino)` ([`HostId`]), and the same host inode
//! reached by two names (hard links) is one table entry. While an entry holds its `O_PATH`
//! descriptor, the host cannot reuse that identity; an entry whose descriptor was closed to
//! stay within the descriptor budget is told from a new host inode with the same identity by
//! its file handle (see [`crate::pin`]): a lookup that finds another object detaches the old
//! entry from the identity, and the old entry's requests fail with `ESTALE`.
//!
//! Our number for a host inode is, when possible, the host's own `st_ino` ("inode number
//! passthrough", as virtiofsd reports it): the export root is [`ROOT_INO`], and an inode on
//! the root's filesystem keeps its host number unless that number is taken (host inode 1,
//! or a number already handed out for another entry). Inodes on other filesystems mounted
//! below the export, and those collisions, get numbers counted down from [`SPARE_TOP`].
//! So `stat` through the mount shows the host's inode numbers, plain READDIR can report
//! them without a lookup, and a number is never given to two live entries. The kernel may
//! see a number again only after it forgot it, which FUSE allows.
//!
//! # Lookup counts
//! Each entry counts the kernel's references (FUSE lookup semantics). New references are
//! taken under the read lock with an atomic add; `forget` subtracts under the write lock
//! and removes the entry at zero, so a lookup never revives a removed entry. The root is
//! never removed.

use crate::settling::Settling;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use memofs_core::{Errno, FileKind, Ino, Result, ROOT_INO};
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use crate::caps::NoCaps;
use crate::fd::CountedFd;
use crate::host::HostId;
use crate::pin::{HookFd, Pinned, PinnedFd, Pins};

/// Spare inode numbers are counted down from here.
pub const SPARE_TOP: Ino = u64::MAX - 1;

/// One host inode the kernel knows.
#[derive(Debug)]
pub(crate) struct Inode {
    /// Our inode number.
    pub ino: Ino,
    /// The host identity.
    pub host: HostId,
    /// The kind (a host inode never changes kind).
    pub kind: FileKind,
    /// `O_PATH | O_NOFOLLOW` descriptor of the host inode, held or closed (see
    /// [`Inode::fd`]).
    pub(crate) fd: PinnedFd,
    /// This entry, for the descriptor clock.
    pub(crate) me: Weak<Inode>,
    /// What the export's inodes share about their descriptors.
    pub(crate) pins: Arc<Pins>,
    /// Known to have no `security.capability` (see [`crate::xattr`]).
    pub no_caps: NoCaps,
    /// What the kernel was last given of the attributes it checks permissions against.
    pub told: Mutex<Option<Told>>,
    /// The kernel's references.
    nlookup: AtomicU64,
}

impl Inode {
    /// The inode's `O_PATH` descriptor, opened again from its handle if it was closed;
    /// `ESTALE` if the host inode is gone. Held by the caller while it uses it.
    pub(crate) fn fd(&self) -> Result<Arc<CountedFd>> {
        self.fd.get(&self.pins, self.host, &self.me)
    }

    /// See [`PinnedFd::keep_for_watcher`].
    pub(crate) fn keep_for_watcher(&self) {
        self.fd.keep_for_watcher();
    }

    /// See [`PinnedFd::for_hook`].
    pub(crate) fn fd_for_hook(&self) -> Result<HookFd> {
        self.fd.for_hook(&self.pins, self.host)
    }
}

impl Pinned for Inode {
    fn pinned(&self) -> &PinnedFd {
        &self.fd
    }
}

/// Keeps an inode's descriptor from being closed while a file or directory handle of the
/// inode is open.
#[derive(Debug)]
pub(crate) struct OpenPin {
    ino: Ino,
    inode: Option<Arc<Inode>>,
}

impl OpenPin {
    pub(crate) fn new(inode: &Inode) -> OpenPin {
        inode.fd.open_started();
        OpenPin {
            ino: inode.ino,
            inode: inode.me.upgrade(),
        }
    }

    /// The inode's number.
    pub(crate) fn ino(&self) -> Ino {
        self.ino
    }
}

impl Drop for OpenPin {
    fn drop(&mut self) {
        if let Some(inode) = &self.inode {
            inode.fd.open_ended();
        }
    }
}

/// The attributes the kernel checks an open's permission against (see
/// [`crate::PassthroughFs::open_file`]), and whether the file had one name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Told {
    mode: u32,
    uid: u32,
    gid: u32,
    links: u32,
}

impl Told {
    /// From attributes (given to the kernel, or the host's now).
    pub(crate) fn of(attr: &memofs_core::Attr) -> Told {
        Told {
            mode: attr.perm as u32,
            uid: attr.uid,
            gid: attr.gid,
            links: attr.nlink,
        }
    }

    /// Whether `now` grants what these attributes granted (mode, owner and group).
    pub(crate) fn grants_as(&self, now: &Told) -> bool {
        (self.mode, self.uid, self.gid) == (now.mode, now.uid, now.gid)
    }

    /// Whether the file had a single name: no hard link elsewhere could change it.
    pub(crate) fn one_name(&self) -> bool {
        self.links == 1
    }
}

/// Told about entries entering and leaving the table (the watcher), under the table's
/// write lock. Implementations take only leaf locks.
pub(crate) trait TableHook: Send + Sync {
    /// `inode` entered the table.
    fn added(&self, inode: &Inode);
    /// `inode` is leaving the table (its descriptor may have been closed: see
    /// [`PinnedFd::for_hook`]).
    fn removed(&self, inode: &Inode);
}

struct Maps {
    by_ino: HashMap<Ino, Arc<Inode>>,
    by_host: HashMap<HostId, Ino>,
    /// Nodes a guest holds that a migration could not find again here
    /// ([`memofs_core::migrate::OnError::GuestError`]), with the guest's references: every
    /// request on one answers `EIO` until the guest forgets it.
    lost: HashMap<Ino, u64>,
    next_spare: Ino,
    hook: Option<Arc<dyn TableHook>>,
}

/// The table. See the module documentation.
pub(crate) struct InodeTable {
    maps: RwLock<Maps>,
    root_dev: u64,
    /// The source's inode numbers do not identify its objects on their own (see
    /// [`PinnedFd::same_object`]).
    numbers_unstable: bool,
    /// Batches of host changes the watcher has delivered (see [`crate::xattr`]).
    host_changes: AtomicU64,
    /// What a change feed named a change of a moment ago (see [`crate::settling`]).
    pub(crate) settling: Settling,
}

impl InodeTable {
    /// A table holding only the export root, `fd` with attributes `st`; `numbers_unstable`
    /// for a source whose inode numbers alone do not identify its objects.
    pub(crate) fn new(
        fd: CountedFd,
        st: &libc::statx,
        pins: Arc<Pins>,
        numbers_unstable: bool,
    ) -> InodeTable {
        let host = HostId::of(st);
        let root = Arc::new_cyclic(|me| Inode {
            ino: ROOT_INO,
            host,
            kind: FileKind::Directory,
            fd: PinnedFd::new(fd, false),
            me: me.clone(),
            pins,
            no_caps: NoCaps::default(),
            told: Mutex::new(None),
            nlookup: AtomicU64::new(1),
        });
        InodeTable {
            maps: RwLock::new(Maps {
                by_ino: HashMap::from([(ROOT_INO, root)]),
                by_host: HashMap::from([(host, ROOT_INO)]),
                lost: HashMap::new(),
                next_spare: SPARE_TOP,
                hook: None,
            }),
            root_dev: host.dev,
            numbers_unstable,
            host_changes: AtomicU64::new(0),
            settling: Settling::default(),
        }
    }

    /// The entry for `ino`; `EIO` for one a migration lost, `ESTALE` for a number the
    /// kernel should not hold.
    pub(crate) fn get(&self, ino: Ino) -> Result<Arc<Inode>> {
        let maps = self.maps.read();
        match maps.by_ino.get(&ino) {
            Some(inode) => Ok(inode.clone()),
            None if maps.lost.contains_key(&ino) => Err(Errno::EIO),
            None => Err(Errno::ESTALE),
        }
    }

    /// A node the guest holds `lookups` references to that a migration could not find again
    /// here: it answers `EIO` until the guest forgets it.
    pub(crate) fn restore_lost(&self, ino: Ino, lookups: u64) -> Result<()> {
        let mut maps = self.maps.write();
        if ino == ROOT_INO || lookups == 0 {
            return Err(Errno::EINVAL);
        }
        if maps.by_ino.contains_key(&ino) || maps.lost.contains_key(&ino) {
            return Err(Errno::EEXIST);
        }
        maps.lost.insert(ino, lookups);
        Ok(())
    }

    /// The nodes lost in a migration, with the guest's references.
    pub(crate) fn lost(&self) -> Vec<(Ino, u64)> {
        let mut lost: Vec<_> = self
            .maps
            .read()
            .lost
            .iter()
            .map(|(&i, &n)| (i, n))
            .collect();
        lost.sort_unstable();
        lost
    }

    /// The root entry.
    pub(crate) fn root(&self) -> Arc<Inode> {
        self.get(ROOT_INO).expect("the root is never removed")
    }

    /// The entry for a host inode, if the kernel knows it.
    pub(crate) fn find(&self, host: HostId) -> Option<Arc<Inode>> {
        Self::find_locked(&self.maps.read(), host)
    }

    /// The number a host inode has or would most likely get, without taking a reference
    /// (plain READDIR's `d_ino`).
    pub(crate) fn ino_hint(&self, host: HostId) -> Ino {
        let maps = self.maps.read();
        match maps.by_host.get(&host) {
            Some(&ino) => ino,
            None if self.passes_through(&maps, host) => host.ino,
            None => SPARE_TOP,
        }
    }

    /// Whether `host` may use its host number as ours.
    fn passes_through(&self, maps: &Maps, host: HostId) -> bool {
        host.dev == self.root_dev
            && host.ino > ROOT_INO
            && host.ino < maps.next_spare
            && !maps.by_ino.contains_key(&host.ino)
            && !maps.lost.contains_key(&host.ino)
    }

    /// Takes one reference to the host inode `fd` refers to (attributes `st`), adding an
    /// entry when it is new. `keep` turns `fd` into a counted descriptor when the inode was
    /// not known (an entry known with its descriptor closed takes `fd` instead; otherwise
    /// `fd` is just closed); it runs outside the table lock, since a spent budget first
    /// closes other descriptors (see [`crate::fd`]).
    pub(crate) fn reference(
        &self,
        fd: OwnedFd,
        st: &libc::statx,
        pins: &Arc<Pins>,
        keep: impl FnOnce(OwnedFd) -> Result<CountedFd>,
    ) -> Result<Arc<Inode>> {
        let host = HostId::of(st);
        if let Some(known) = self.find(host) {
            if known.fd.same_object(fd.as_fd(), self.numbers_unstable) {
                if self.reference_again(&known).is_ok() {
                    known.fd.adopt(&known.pins, &known.me, fd);
                    return Ok(known);
                }
            } else {
                self.detach(&known);
            }
        }
        let kind = FileKind::from_mode(u32::from(st.stx_mode)).ok_or(Errno::EIO)?;
        let handle = pins.required_handle(fd.as_fd())?;
        let counted = keep(fd)?;
        let mut maps = self.maps.write();
        let meanwhile = Self::find_locked(&maps, host);
        if let Some(known) = meanwhile {
            if known.fd.same_object(counted.as_fd(), self.numbers_unstable) {
                // Entered meanwhile by another lookup: the new descriptor closes after the
                // lock is gone.
                known.nlookup.fetch_add(1, Ordering::Relaxed);
                drop(maps);
                drop(counted);
                return Ok(known);
            }
            Self::detach_locked(&mut maps, &known);
        }
        let ino = self.allocate_locked(&mut maps, host);
        let inode = Self::enter(maps, ino, host, kind, counted, pins, 1);
        if let Some(handle) = handle {
            inode.fd.know_handle(handle);
        }
        Ok(inode)
    }

    /// Adds the entry `ino` for `host` with `lookups` references, and releases the lock.
    fn enter(
        mut maps: RwLockWriteGuard<'_, Maps>,
        ino: Ino,
        host: HostId,
        kind: FileKind,
        counted: CountedFd,
        pins: &Arc<Pins>,
        lookups: u64,
    ) -> Arc<Inode> {
        let closable = PinnedFd::closable(host, pins);
        let inode = Arc::new_cyclic(|me| Inode {
            ino,
            host,
            kind,
            fd: PinnedFd::new(counted, closable),
            me: me.clone(),
            pins: pins.clone(),
            no_caps: NoCaps::default(),
            told: Mutex::new(None),
            nlookup: AtomicU64::new(lookups),
        });
        maps.by_ino.insert(ino, inode.clone());
        maps.by_host.insert(host, ino);
        if let Some(hook) = &maps.hook {
            hook.added(&inode);
        }
        drop(maps);
        inode.fd.enlist(pins, &inode.me);
        inode
    }

    /// Enters the host inode `fd` refers to (attributes `st`) as `ino` with `lookups`
    /// references, as the server a guest migrated from numbered it. The root only takes
    /// the count. `EEXIST` if `ino` or the host inode already has an entry, `EINVAL` for
    /// no references.
    pub(crate) fn restore(
        &self,
        ino: Ino,
        fd: CountedFd,
        st: &libc::statx,
        pins: &Arc<Pins>,
        lookups: u64,
    ) -> Result<()> {
        let host = HostId::of(st);
        let kind = FileKind::from_mode(u32::from(st.stx_mode)).ok_or(Errno::EIO)?;
        let maps = self.maps.write();
        if ino == ROOT_INO {
            let root = maps
                .by_ino
                .get(&ROOT_INO)
                .expect("the root is never removed");
            root.nlookup.store(lookups.max(1), Ordering::Relaxed);
            return Ok(());
        }
        if lookups == 0 {
            return Err(Errno::EINVAL);
        }
        if maps.by_ino.contains_key(&ino)
            || maps.by_host.contains_key(&host)
            || maps.lost.contains_key(&ino)
        {
            return Err(Errno::EEXIST);
        }
        Self::enter(maps, ino, host, kind, fd, pins, lookups);
        Ok(())
    }

    /// Removes `inode` from its host identity, which now names another object (the one
    /// `inode` had was deleted while its descriptor was closed). The entry stays until the
    /// kernel forgets it; its descriptor cannot be opened again.
    fn detach(&self, inode: &Inode) {
        Self::detach_locked(&mut self.maps.write(), inode);
    }

    /// Removes `inode` from its host identity if the identity still names it.
    fn detach_locked(maps: &mut Maps, inode: &Inode) {
        if maps.by_host.get(&inode.host) == Some(&inode.ino) {
            maps.by_host.remove(&inode.host);
        }
    }

    /// Forgets which entry `host` identifies: the object is gone and its number may name
    /// another one from now on. The entry stays until the kernel forgets it.
    pub(crate) fn detach_host(&self, host: HostId) {
        self.maps.write().by_host.remove(&host);
    }

    fn find_locked(maps: &Maps, host: HostId) -> Option<Arc<Inode>> {
        maps.by_ino.get(maps.by_host.get(&host)?).cloned()
    }

    /// Takes one more reference to `inode`, which the caller got from this table; `ESTALE`
    /// if it has left the table since (the kernel forgot it meanwhile).
    pub(crate) fn reference_again(&self, inode: &Arc<Inode>) -> Result<()> {
        let maps = self.maps.read();
        match maps.by_ino.get(&inode.ino) {
            Some(current) if Arc::ptr_eq(current, inode) => {
                inode.nlookup.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(Errno::ESTALE),
        }
    }

    fn allocate_locked(&self, maps: &mut Maps, host: HostId) -> Ino {
        if self.passes_through(maps, host) {
            return host.ino;
        }
        while maps.by_ino.contains_key(&maps.next_spare) || maps.lost.contains_key(&maps.next_spare)
        {
            maps.next_spare -= 1;
        }
        let ino = maps.next_spare;
        maps.next_spare -= 1;
        ino
    }

    /// The kernel dropped `n` references to `ino`; the entry goes at zero (never the root).
    pub(crate) fn forget(&self, ino: Ino, n: u64) {
        let mut maps = self.maps.write();
        if let Some(lookups) = maps.lost.get_mut(&ino) {
            *lookups = lookups.saturating_sub(n);
            if *lookups == 0 {
                maps.lost.remove(&ino);
            }
            return;
        }
        let Some(inode) = maps.by_ino.get(&ino) else {
            return;
        };
        let left = inode.nlookup.load(Ordering::Relaxed).saturating_sub(n);
        inode.nlookup.store(left, Ordering::Relaxed);
        if left > 0 || ino == ROOT_INO {
            return;
        }
        let inode = maps.by_ino.remove(&ino).expect("present");
        Self::detach_locked(&mut maps, &inode);
        if let Some(hook) = &maps.hook {
            hook.removed(&inode);
        }
        // The descriptor closes with the last Arc (in-flight requests may still hold one),
        // never under the table lock and not on the request thread: `close` is a system
        // call, and the one that frees a deleted host file costs most of a FORGET.
        drop(maps);
        let pins = inode.pins.clone();
        pins.budget.close_later(inode);
    }

    /// Whether `inode` is on the export root's filesystem.
    pub(crate) fn on_root_filesystem(&self, inode: &Inode) -> bool {
        inode.host.dev == self.root_dev
    }

    /// Counts a batch of host changes about to be delivered.
    pub(crate) fn note_host_changes(&self) {
        self.host_changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Batches of host changes delivered so far.
    pub(crate) fn host_changes(&self) -> u64 {
        self.host_changes.load(Ordering::Acquire)
    }

    /// The kernel's references to `ino` (0 when unknown), for tests and diagnostics.
    pub(crate) fn lookups(&self, ino: Ino) -> u64 {
        self.maps
            .read()
            .by_ino
            .get(&ino)
            .map_or(0, |i| i.nlookup.load(Ordering::Relaxed))
    }

    /// Every entry (a snapshot).
    pub(crate) fn all(&self) -> Vec<Arc<Inode>> {
        self.maps.read().by_ino.values().cloned().collect()
    }

    /// Installs (or with `None` removes) the hook, telling a new hook about every entry
    /// already present, atomically with respect to additions and removals.
    pub(crate) fn set_hook(&self, hook: Option<Arc<dyn TableHook>>) {
        let mut maps = self.maps.write();
        if let Some(h) = &hook {
            for inode in maps.by_ino.values() {
                h.added(inode);
            }
        }
        maps.hook = hook;
    }
}
