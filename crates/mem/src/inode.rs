//! What every kind of inode shares, the inode table, and the atime choke point.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use triomphe::Arc;

use hashbrown::HashTable;
use memofs_core::{
    AtimePolicy, AtomicTimestamp, Attr, Errno, FileKind, Ino, Result, Timestamp, ROOT_INO,
};
use parking_lot::{Mutex, RwLock};

use crate::dir::DirNode;
use crate::kernel_data::KernelFile;
use crate::regular::RegularFile;
use crate::symlink::Symlink;
use crate::xattr::Xattrs;

/// Owner and group of a new inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Kind-specific contents.
pub enum NodeData {
    /// A directory's entries (boxed: a directory is much larger than what the other kinds
    /// keep inline, and most inodes are not directories).
    Dir(Box<DirNode>),
    /// A regular file's pages.
    File(RegularFile),
    /// A symlink's target.
    Symlink(Symlink),
    /// FIFO, socket or device node: no data besides the kind and, for a device, its number.
    Special {
        /// Which of the four kinds.
        kind: FileKind,
        /// Device number (device nodes; 0 for the others).
        rdev: u32,
    },
}

impl NodeData {
    /// An empty directory whose `..` is `parent`.
    pub fn new_dir(parent: Ino) -> NodeData {
        NodeData::Dir(Box::new(DirNode::new(parent)))
    }

    /// The object kind the data is for.
    pub fn kind(&self) -> FileKind {
        match self {
            NodeData::Dir(_) => FileKind::Directory,
            NodeData::File(_) => FileKind::Regular,
            NodeData::Symlink(_) => FileKind::Symlink,
            NodeData::Special { kind, .. } => *kind,
        }
    }
}

/// Attributes changed under the `meta` lock.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// Full mode including the kind bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// One inode.
///
/// Every empty file has one, so its size is kept at 120 bytes (with the reference count,
/// a 144-byte allocation): the kind and device number live in [`NodeData`], timestamps are
/// one word each ([`AtomicTimestamp`]), and the counters are 32-bit.
pub struct Inode {
    /// Inode number, never reused during the filesystem's life.
    pub ino: Ino,
    /// Mode, owner, group.
    pub meta: Mutex<Meta>,
    /// Hard links; 0 means the inode has no lookup path (a pseudo inode).
    pub nlink: AtomicU32,
    /// Inode flags (`FS_IOC_GETFLAGS` bits and internal ones; see [`crate::iflags`]).
    pub(crate) flags: AtomicU32,
    /// Kernel references; [`PINNED`] once they no longer fit (see [`Inode::inc_lookup`]).
    lookups: AtomicU32,
    opens: AtomicU32,
    atime: AtomicTimestamp,
    mtime: AtomicTimestamp,
    ctime: AtomicTimestamp,
    /// Set once, at creation.
    crtime: AtomicTimestamp,
    /// Kind-specific data.
    pub data: NodeData,
    /// Extended attributes.
    pub xattrs: Mutex<Xattrs>,
}

/// A lookup count that reached this stays there: the inode is kept for the filesystem's
/// life. The kernel would have to send four billion lookups of one inode without a FORGET
/// to get here (a cached dentry is looked up again only when its timeout passes); keeping
/// one inode is the safe answer, freeing one still referenced is not.
const PINNED: u32 = u32::MAX;

impl Inode {
    /// Object kind (never changes).
    pub fn kind(&self) -> FileKind {
        self.data.kind()
    }

    /// Current attributes.
    pub fn attr(&self) -> Attr {
        let meta = *self.meta.lock();
        // A kernel-backed file's size, blocks and times come from one stat of its data file.
        let (size, blocks, kernel_times) = match &self.data {
            NodeData::File(RegularFile::Kernel(k)) => match k.attrs() {
                Some((size, blocks, times)) => (size, blocks, Some(times)),
                None => (0, 0, None),
            },
            NodeData::File(f) => {
                let (size, blocks) = f.size_and_blocks();
                (size, blocks, None)
            }
            NodeData::Dir(d) => (d.bogo_size(), 0, None),
            NodeData::Symlink(s) => (s.target().len() as u64, 0, None),
            NodeData::Special { .. } => (0, 0, None),
        };
        let nlink = self.nlink.load(Ordering::Relaxed);
        let mut atime = self.atime.load();
        let mut mtime = self.mtime.load();
        let mut ctime = self.ctime.load();
        if let Some([a, m, c]) = kernel_times {
            // Kernel-backed data: the data file keeps atime, mtime and data ctime; an unlinked
            // file keeps the atime it had when its last name went (see `drop_link`).
            if nlink != 0 {
                atime = a;
            }
            mtime = m;
            ctime = ctime.max(c);
        }
        Attr {
            ino: self.ino,
            generation: 1,
            size,
            blocks,
            atime,
            mtime,
            ctime,
            crtime: self.crtime.load(),
            kind: self.kind(),
            perm: (meta.mode & 0o7777) as u16,
            nlink,
            uid: meta.uid,
            gid: meta.gid,
            rdev: match self.data {
                NodeData::Special { rdev, .. } => rdev,
                _ => 0,
            },
            blksize: 4096,
            mount_root: false,
        }
    }

    /// The directory contents, or `ENOTDIR`.
    pub fn dir(&self) -> Result<&DirNode> {
        match &self.data {
            NodeData::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// The file contents: `EISDIR` for directories, `EINVAL` for other kinds.
    pub fn file(&self) -> Result<&RegularFile> {
        match &self.data {
            NodeData::File(f) => Ok(f),
            NodeData::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The kernel-backed data file, if this is a regular file whose data lives there.
    pub fn kernel_file(&self) -> Option<&KernelFile> {
        match &self.data {
            NodeData::File(f) => f.kernel(),
            _ => None,
        }
    }

    /// Times of kernel-backed file data, if this is such a file.
    fn kernel_times(&self) -> Option<[Timestamp; 3]> {
        self.kernel_file()?.times()
    }

    /// Removes one hard link; the links left. When the last goes, a kernel-backed file's
    /// atime is frozen here: with no name left it must never change again.
    pub fn drop_link(&self) -> u32 {
        let left = self.nlink.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
        if left == 0 {
            if let Some([a, _, _]) = self.kernel_times() {
                self.atime.store(a);
            }
        }
        left
    }

    /// True for kernel-backed data: the kernel applies the same atime rule to the data
    /// file (its private tmpfs is mounted with it), so the server stores nothing.
    fn kernel_times_kept(&self) -> bool {
        self.kernel_file().is_some()
    }

    /// The atime choke point: the only place where reads and readdir update atime.
    ///
    /// An inode with no lookup path (unlinked but open, or internal) returns at once: no
    /// clock read, no store, no lock. Otherwise the policy (and `chattr +A`) decides; the store is one atomic,
    /// so readers of the same file never serialize on the inode to record an access.
    pub fn touch_atime(&self, policy: &AtimePolicy) {
        if self.nlink.load(Ordering::Relaxed) == 0 {
            return;
        }
        let is_dir = self.kind() == FileKind::Directory;
        if policy.never(is_dir) || self.kernel_times_kept() || self.noatime() {
            return;
        }
        let now = Timestamp::now();
        let (atime, mtime, ctime) = (self.atime.load(), self.mtime.load(), self.ctime.load());
        if policy.needs_update(is_dir, atime, mtime, ctime, now) {
            self.atime.store(now);
        }
    }

    /// Sets atime explicitly (utimensat).
    pub fn set_atime(&self, t: Timestamp) {
        self.atime.store(t);
    }

    /// Sets mtime explicitly.
    pub fn set_mtime(&self, t: Timestamp) {
        self.mtime.store(t);
    }

    /// Sets ctime.
    pub fn set_ctime(&self, t: Timestamp) {
        self.ctime.store(t);
    }

    /// Data or entries changed: mtime and ctime become `now`.
    pub fn touch_modified(&self, now: Timestamp) {
        self.mtime.store(now);
        self.ctime.store(now);
    }

    /// `n` more kernel references; a count that would pass [`PINNED`] stays there.
    pub fn inc_lookup(&self, n: u32) {
        let _ = self
            .lookups
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_add(n))
            });
    }

    /// One more open file, unless the file's data went with its last name
    /// ([`crate::iflags::DATA_FREED`]): an open that raced the unlink and lost. Counted
    /// before the flag is read, as the unlink sets the flag before it reads the count (both
    /// sequentially consistent), so that of the two one sees the other.
    pub fn open_if_reachable(&self) -> bool {
        // As many opens as fit in memory: far fewer than 2^32 file structures.
        self.opens.fetch_add(1, Ordering::SeqCst);
        if self.flags.load(Ordering::SeqCst) & crate::iflags::DATA_FREED != 0 {
            self.opens.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// With no name left: whether no open has the file either, in which case nothing can
    /// reach its data again and [`crate::iflags::DATA_FREED`] is set (see
    /// [`Inode::open_if_reachable`]); false where it was set already.
    pub fn unreachable_after_unlink(&self) -> bool {
        let before = self
            .flags
            .fetch_or(crate::iflags::DATA_FREED, Ordering::SeqCst);
        if before & crate::iflags::DATA_FREED != 0 {
            return false;
        }
        if self.opens.load(Ordering::SeqCst) == 0 {
            return true;
        }
        self.flags
            .fetch_and(!crate::iflags::DATA_FREED, Ordering::SeqCst);
        false
    }

    /// True while the kernel holds a reference (a lookup not yet forgotten).
    pub fn looked_up(&self) -> bool {
        self.lookups.load(Ordering::SeqCst) != 0
    }

    /// True when nothing can reach the inode any more: no name, no kernel reference, not
    /// open.
    fn is_dead(&self) -> bool {
        self.nlink.load(Ordering::SeqCst) == 0
            && self.lookups.load(Ordering::SeqCst) == 0
            && self.opens.load(Ordering::SeqCst) == 0
    }

    /// Bytes this inode holds against `size=` besides file pages.
    fn charged_bytes(&self) -> u64 {
        let sym = match &self.data {
            NodeData::Symlink(s) => s.charged_bytes(),
            _ => 0,
        };
        sym + self.xattrs.lock().charged_bytes()
    }
}

/// What a state stream says of an inode besides its kind's contents (see
/// [`crate::migrate`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    pub ino: Ino,
    pub meta: Meta,
    pub nlink: u32,
    pub flags: u32,
    pub lookups: u32,
    pub opens: u32,
    /// atime, mtime, ctime, crtime as the inode keeps them.
    pub times: [Timestamp; 4],
}

impl Inode {
    /// What [`Saved`] describes of this inode.
    pub(crate) fn saved(&self) -> Saved {
        Saved {
            ino: self.ino,
            meta: *self.meta.lock(),
            nlink: self.nlink.load(Ordering::SeqCst),
            flags: self.flags.load(Ordering::SeqCst),
            lookups: self.lookups.load(Ordering::SeqCst),
            opens: self.opens.load(Ordering::SeqCst),
            times: [
                self.atime.load(),
                self.mtime.load(),
                self.ctime.load(),
                self.crtime.load(),
            ],
        }
    }

    /// Takes on what `saved` says (its number aside).
    pub(crate) fn restore(&self, saved: &Saved) {
        *self.meta.lock() = saved.meta;
        self.nlink.store(saved.nlink, Ordering::SeqCst);
        self.flags.store(saved.flags, Ordering::SeqCst);
        self.lookups.store(saved.lookups, Ordering::SeqCst);
        self.opens.store(saved.opens, Ordering::SeqCst);
        let [a, m, c, cr] = saved.times;
        self.atime.store(a);
        self.mtime.store(m);
        self.ctime.store(c);
        self.crtime.store(cr);
    }
}

const SHARDS: usize = 64;

/// One shard of the inode table: inodes found by their number, which the inode itself holds
/// (one pointer per slot).
type Shard = RwLock<HashTable<Arc<Inode>>>;

/// Hash of an inode number within its shard. Numbers are handed out in sequence by the
/// server (no caller can choose them); a shard holds every [`SHARDS`]th, so the shard's own
/// sequence `ino / SHARDS` is multiplied to spread it over the hash's bits (the table
/// starts probing at the low bits, which `ino` itself would leave equal in one shard).
fn ino_hash(ino: Ino) -> u64 {
    (ino / SHARDS as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Inode number → inode, sharded so that requests on different inodes rarely share a lock.
pub struct InodeTable {
    shards: Box<[Shard]>,
    next_ino: AtomicU64,
}

impl InodeTable {
    /// An empty table; the first inode allocated is the root.
    pub fn new() -> InodeTable {
        InodeTable {
            shards: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            next_ino: AtomicU64::new(ROOT_INO),
        }
    }

    /// Makes room for about `n` more inodes at once (a load that knows how many come).
    pub(crate) fn reserve(&self, n: usize) {
        let each = n / self.shards.len() + 1;
        for shard in self.shards.iter() {
            shard.write().reserve(each, |i| ino_hash(i.ino));
        }
    }

    fn shard(&self, ino: Ino) -> &Shard {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The live inode `ino`, or `ESTALE` once it was forgotten and removed.
    pub fn get(&self, ino: Ino) -> Result<Arc<Inode>> {
        self.shard(ino)
            .read()
            .find(ino_hash(ino), |i| i.ino == ino)
            .cloned()
            .ok_or(Errno::ESTALE)
    }

    pub(crate) fn insert_root(
        &self,
        mode: u32,
        owner: Owner,
        data: NodeData,
        now: Timestamp,
    ) -> Arc<Inode> {
        let root = self.insert(mode, owner, data, now);
        root.nlink.store(2, Ordering::SeqCst);
        root
    }

    /// Allocates a new inode number and inserts a new inode with nlink 0 and no lookups;
    /// the caller links it into a directory.
    pub fn insert(&self, mode: u32, owner: Owner, data: NodeData, now: Timestamp) -> Arc<Inode> {
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        debug_assert_eq!(FileKind::from_mode(mode), Some(data.kind()));
        let inode = Arc::new(Inode {
            ino,
            meta: Mutex::new(Meta {
                mode,
                uid: owner.uid,
                gid: owner.gid,
            }),
            nlink: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            lookups: AtomicU32::new(0),
            opens: AtomicU32::new(0),
            atime: AtomicTimestamp::new(now),
            mtime: AtomicTimestamp::new(now),
            ctime: AtomicTimestamp::new(now),
            crtime: AtomicTimestamp::new(now),
            data,
            xattrs: Mutex::new(Xattrs::default()),
        });
        self.shard(ino)
            .write()
            .insert_unique(ino_hash(ino), inode.clone(), |i| ino_hash(i.ino));
        inode
    }

    /// Inserts an inode with the number and state `saved` gives (a state stream's), or
    /// `EEXIST` if the number is taken; numbers handed out later start past it.
    pub(crate) fn insert_saved(&self, saved: &Saved, data: NodeData) -> Result<Arc<Inode>> {
        let ino = saved.ino;
        let inode = Arc::new(Inode {
            ino,
            meta: Mutex::new(saved.meta),
            nlink: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            lookups: AtomicU32::new(0),
            opens: AtomicU32::new(0),
            atime: AtomicTimestamp::new(Timestamp::default()),
            mtime: AtomicTimestamp::new(Timestamp::default()),
            ctime: AtomicTimestamp::new(Timestamp::default()),
            crtime: AtomicTimestamp::new(Timestamp::default()),
            data,
            xattrs: Mutex::new(Xattrs::default()),
        });
        inode.restore(saved);
        {
            let mut shard = self.shard(ino).write();
            if shard.find(ino_hash(ino), |i| i.ino == ino).is_some() {
                return Err(Errno::EEXIST);
            }
            shard.insert_unique(ino_hash(ino), inode.clone(), |i| ino_hash(i.ino));
        }
        self.next_ino.fetch_max(ino + 1, Ordering::SeqCst);
        Ok(inode)
    }

    /// The number the next new inode gets.
    pub(crate) fn next_ino(&self) -> Ino {
        self.next_ino.load(Ordering::SeqCst)
    }

    /// Numbers handed out from now on start at `ino` or later (never reused: the source of
    /// a state stream had handed out every number below its own next one).
    pub(crate) fn skip_to(&self, ino: Ino) {
        self.next_ino.fetch_max(ino, Ordering::SeqCst);
    }

    /// Removes `inode` if nothing can reach it any more, returning what it held against
    /// the limits as `(bytes, inodes)`. Safe to call from racing threads: only the caller
    /// that removes it gets a non-zero answer.
    pub fn evict_if_dead(&self, inode: &Inode) -> (u64, u64) {
        if inode.ino == ROOT_INO || !inode.is_dead() {
            return (0, 0);
        }
        let removed = {
            let mut shard = self.shard(inode.ino).write();
            let removed = shard
                .find_entry(ino_hash(inode.ino), |i| i.ino == inode.ino)
                .ok()
                .map(|found| found.remove().0);
            // Give memory back as the table empties.
            let len = shard.len();
            if shard.capacity() > 4 * len.max(8) {
                shard.shrink_to(len * 2, |i| ino_hash(i.ino));
            }
            removed
        };
        match removed {
            Some(node) => {
                let pages = match &node.data {
                    NodeData::File(f) => f.release_all(),
                    _ => 0,
                };
                (pages + node.charged_bytes(), 1)
            }
            None => (0, 0),
        }
    }

    /// Drops `n` kernel references; true if the count reached zero. A pinned count stays.
    pub fn forget(&self, inode: &Inode, n: u64) -> bool {
        let dropped = inode
            .lookups
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| match c {
                PINNED => None,
                c => Some(c.saturating_sub(u32::try_from(n).unwrap_or(u32::MAX))),
            });
        matches!(dropped, Ok(prev) if u64::from(prev) <= n)
    }

    /// Drops every kernel reference, a pinned count's too.
    pub fn forget_every(&self, inode: &Inode) {
        inode.lookups.store(0, Ordering::SeqCst);
    }

    /// Every inode (a snapshot).
    pub fn all(&self) -> Vec<Arc<Inode>> {
        self.shards
            .iter()
            .flat_map(|s| s.read().iter().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// Drops every open reference; returns how many there were.
    pub fn close_all(&self, inode: &Inode) -> u32 {
        inode.opens.swap(0, Ordering::SeqCst)
    }

    /// Drops one open reference.
    pub fn close(&self, inode: &Inode) {
        let _ = inode
            .opens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_sub(1))
            });
    }

    /// Number of live inodes (for tests).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// Never true: the root always exists.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inode_fits_a_144_byte_allocation() {
        // The reference count (8 bytes) and glibc's chunk header (8) come on top.
        assert!(std::mem::size_of::<Inode>() <= 128);
        assert!(std::mem::size_of::<NodeData>() <= 40);
    }

    #[test]
    fn a_lookup_count_that_overflows_pins_the_inode() {
        let table = InodeTable::new();
        let owner = Owner { uid: 0, gid: 0 };
        let data = NodeData::Special {
            kind: FileKind::Fifo,
            rdev: 0,
        };
        let inode = table.insert(libc::S_IFIFO | 0o644, owner, data, Timestamp::now());
        inode.inc_lookup(u32::MAX - 1);
        assert!(!table.forget(&inode, 1));
        assert!(
            table.forget(&inode, u64::from(u32::MAX - 2)),
            "counted exactly"
        );
        inode.inc_lookup(u32::MAX - 1);
        inode.inc_lookup(2);
        assert!(!table.forget(&inode, u64::MAX), "pinned");
        assert_eq!(table.evict_if_dead(&inode), (0, 0));
        assert!(table.get(inode.ino).is_ok());
    }
}
