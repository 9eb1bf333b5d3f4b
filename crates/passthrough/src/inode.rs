//! The inode table: our inode numbers ↔ host inodes, each pinned by an `O_PATH` descriptor.
//!
//! # Inode numbers
//! A host inode is identified by `(st_dev, st_ino)` ([`HostId`]). While the table holds it,
//! its `O_PATH` descriptor pins the host inode, so the host cannot reuse that identity, and
//! the same host inode reached by two names (hard links) is one table entry.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memofs_core::{Errno, FileKind, Ino, Result, ROOT_INO};
use parking_lot::{Mutex, RwLock};

use crate::fd::CountedFd;
use crate::xattr::NoCaps;

/// Spare inode numbers are counted down from here.
pub const SPARE_TOP: Ino = u64::MAX - 1;

/// A host inode's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HostId {
    pub dev: u64,
    pub ino: u64,
}

impl HostId {
    pub(crate) fn of(st: &libc::statx) -> HostId {
        HostId {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
        }
    }
}

/// One host inode the kernel knows.
#[derive(Debug)]
pub(crate) struct Inode {
    /// Our inode number.
    pub ino: Ino,
    /// The host identity.
    pub host: HostId,
    /// The kind (a host inode never changes kind).
    pub kind: FileKind,
    /// `O_PATH | O_NOFOLLOW` descriptor pinning the host inode.
    pub fd: CountedFd,
    /// Known to have no `security.capability` (see [`crate::xattr`]).
    pub no_caps: NoCaps,
    /// What the kernel was last given of the attributes it checks permissions against.
    pub told: Mutex<Option<Told>>,
    /// The kernel's references.
    nlookup: AtomicU64,
}

/// The attributes the kernel checks an open's permission against (see
/// [`crate::PassthroughFs::open_file`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Told {
    mode: u32,
    uid: u32,
    gid: u32,
}

impl Told {
    /// From attributes (given to the kernel, or the host's now).
    pub(crate) fn of(attr: &memofs_core::Attr) -> Told {
        Told {
            mode: attr.perm as u32,
            uid: attr.uid,
            gid: attr.gid,
        }
    }
}

/// Told about entries entering and leaving the table (the watcher), under the table's
/// write lock. Implementations take only leaf locks.
pub(crate) trait TableHook: Send + Sync {
    /// `inode` entered the table.
    fn added(&self, inode: &Inode);
    /// `inode` is leaving the table (its descriptor is still open).
    fn removed(&self, inode: &Inode);
}

struct Maps {
    by_ino: HashMap<Ino, Arc<Inode>>,
    by_host: HashMap<HostId, Ino>,
    next_spare: Ino,
    hook: Option<Arc<dyn TableHook>>,
}

/// The table. See the module documentation.
pub(crate) struct InodeTable {
    maps: RwLock<Maps>,
    root_dev: u64,
    /// Batches of host changes the watcher has delivered (see [`crate::xattr`]).
    host_changes: AtomicU64,
}

impl InodeTable {
    /// A table holding only the export root, `fd` with attributes `st`.
    pub(crate) fn new(fd: CountedFd, st: &libc::statx) -> InodeTable {
        let host = HostId::of(st);
        let root = Arc::new(Inode {
            ino: ROOT_INO,
            host,
            kind: FileKind::Directory,
            fd,
            no_caps: NoCaps::default(),
            told: Mutex::new(None),
            nlookup: AtomicU64::new(1),
        });
        InodeTable {
            maps: RwLock::new(Maps {
                by_ino: HashMap::from([(ROOT_INO, root)]),
                by_host: HashMap::from([(host, ROOT_INO)]),
                next_spare: SPARE_TOP,
                hook: None,
            }),
            root_dev: host.dev,
            host_changes: AtomicU64::new(0),
        }
    }

    /// The entry for `ino`; `ESTALE` for a number the kernel should not hold.
    pub(crate) fn get(&self, ino: Ino) -> Result<Arc<Inode>> {
        self.maps
            .read()
            .by_ino
            .get(&ino)
            .cloned()
            .ok_or(Errno::ESTALE)
    }

    /// The root entry.
    pub(crate) fn root(&self) -> Arc<Inode> {
        self.get(ROOT_INO).expect("the root is never removed")
    }

    /// The entry for a host inode, if the kernel knows it.
    pub(crate) fn find(&self, host: HostId) -> Option<Arc<Inode>> {
        let maps = self.maps.read();
        maps.by_host
            .get(&host)
            .and_then(|i| maps.by_ino.get(i))
            .cloned()
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
    }

    /// Takes one reference to the host inode `fd` refers to (attributes `st`), adding an
    /// entry when it is new. `keep` turns `fd` into a counted descriptor when the inode was
    /// not known (otherwise `fd` is just closed); it runs outside the table lock, since a
    /// spent budget first closes the descriptors waiting on the reaper (see [`crate::fd`]).
    pub(crate) fn reference(
        &self,
        fd: std::os::fd::OwnedFd,
        st: &libc::statx,
        keep: impl FnOnce(std::os::fd::OwnedFd) -> Result<CountedFd>,
    ) -> Result<Arc<Inode>> {
        let host = HostId::of(st);
        if let Some(inode) = self.reference_known(host) {
            return Ok(inode);
        }
        let kind = FileKind::from_mode(u32::from(st.stx_mode)).ok_or(Errno::EIO)?;
        let counted = keep(fd)?;
        let mut maps = self.maps.write();
        if let Some(inode) = Self::reference_known_locked(&maps, host) {
            // Found meanwhile: the new descriptor closes after the lock is gone.
            drop(maps);
            drop(counted);
            return Ok(inode);
        }
        let ino = self.allocate_locked(&mut maps, host);
        let inode = Arc::new(Inode {
            ino,
            host,
            kind,
            fd: counted,
            no_caps: NoCaps::default(),
            told: Mutex::new(None),
            nlookup: AtomicU64::new(1),
        });
        maps.by_ino.insert(ino, inode.clone());
        maps.by_host.insert(host, ino);
        if let Some(hook) = &maps.hook {
            hook.added(&inode);
        }
        Ok(inode)
    }

    /// Takes one more reference to an entry already in the table.
    pub(crate) fn reference_known(&self, host: HostId) -> Option<Arc<Inode>> {
        Self::reference_known_locked(&self.maps.read(), host)
    }

    fn reference_known_locked(maps: &Maps, host: HostId) -> Option<Arc<Inode>> {
        let inode = maps.by_ino.get(maps.by_host.get(&host)?)?;
        inode.nlookup.fetch_add(1, Ordering::Relaxed);
        Some(inode.clone())
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
        while maps.by_ino.contains_key(&maps.next_spare) {
            maps.next_spare -= 1;
        }
        let ino = maps.next_spare;
        maps.next_spare -= 1;
        ino
    }

    /// The kernel dropped `n` references to `ino`; the entry goes at zero (never the root).
    pub(crate) fn forget(&self, ino: Ino, n: u64) {
        let mut maps = self.maps.write();
        let Some(inode) = maps.by_ino.get(&ino) else {
            return;
        };
        let left = inode.nlookup.load(Ordering::Relaxed).saturating_sub(n);
        inode.nlookup.store(left, Ordering::Relaxed);
        if left > 0 || ino == ROOT_INO {
            return;
        }
        let inode = maps.by_ino.remove(&ino).expect("present");
        maps.by_host.remove(&inode.host);
        if let Some(hook) = &maps.hook {
            hook.removed(&inode);
        }
        // The descriptor closes with the last Arc (in-flight requests may still hold one),
        // never under the table lock and not on the request thread: `close` is a system
        // call, and the one that frees a deleted host file costs most of a FORGET.
        drop(maps);
        let budget = inode.fd.budget().clone();
        budget.close_later(inode);
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
