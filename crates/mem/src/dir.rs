//! Directories: entries with stable readdir offsets.
//!
//! Every entry gets a cookie from a per-directory counter when it is inserted; readdir
//! offsets are cookies, so a listing continues correctly while entries come and go: removed
//! entries vanish, surviving ones are returned exactly once, and entries added during the
//! listing appear at most once. Offsets 1 and 2 are `.` and `..`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::hash::RandomState;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use hashbrown::HashTable;
use memofs_core::{FileKind, Ino};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// tmpfs reports a directory's size as this many bytes per entry (plus two for `.`/`..`).
pub const BOGO_DIRENT_SIZE: u64 = 20;

/// Size as tmpfs reports it for a directory of `entries` entries (`.` and `..` besides).
fn bogo_size_of(entries: u64) -> u64 {
    (entries + 2) * BOGO_DIRENT_SIZE
}

/// First cookie handed to a real entry.
const FIRST_COOKIE: u64 = 3;

/// A directory entry's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Inode number.
    pub ino: Ino,
    /// Kind, for readdir's `d_type`.
    pub kind: FileKind,
}

/// One entry: the name is stored once, here.
struct Entry {
    name: Box<[u8]>,
    ino: Ino,
    cookie: u64,
    kind: FileKind,
}

impl Entry {
    fn slot(&self) -> Slot {
        Slot {
            ino: self.ino,
            kind: self.kind,
        }
    }
}

/// Hash of a name: SipHash with keys chosen once per process (a local user picking names
/// cannot aim for collisions), shared by every directory so that none carries its own keys.
fn name_hash(name: &[u8]) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(name)
}

/// A directory inode's entries behind their lock, with the entry count readable without it.
///
/// Attributes of a directory need its size; reading it from the atomic means a thread that
/// holds one directory's lock (READDIRPLUS, LOOKUP) never waits for another directory's lock
/// to answer a child's attributes (see the crate's lock order).
pub struct DirNode {
    entries: RwLock<Directory>,
    len: AtomicU64,
}

impl DirNode {
    /// An empty directory whose `..` is `parent`.
    pub fn new(parent: Ino) -> DirNode {
        DirNode {
            entries: RwLock::new(Directory::new(parent)),
            len: AtomicU64::new(0),
        }
    }

    /// The entries, shared.
    pub fn read(&self) -> RwLockReadGuard<'_, Directory> {
        self.entries.read()
    }

    /// The entries, exclusively; the count is published when the guard goes.
    pub fn write(&self) -> DirWriteGuard<'_> {
        DirWriteGuard {
            guard: self.entries.write(),
            len: &self.len,
        }
    }

    /// Size as tmpfs reports it, without taking the lock.
    pub fn bogo_size(&self) -> u64 {
        bogo_size_of(self.len.load(Ordering::Relaxed))
    }
}

/// Exclusive access to a directory's entries; stores the entry count as it is released.
pub struct DirWriteGuard<'a> {
    guard: RwLockWriteGuard<'a, Directory>,
    len: &'a AtomicU64,
}

impl Deref for DirWriteGuard<'_> {
    type Target = Directory;
    fn deref(&self) -> &Directory {
        &self.guard
    }
}

impl DerefMut for DirWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut Directory {
        &mut self.guard
    }
}

impl Drop for DirWriteGuard<'_> {
    fn drop(&mut self) {
        // Runs before the lock itself is released (fields drop after this body).
        self.len.store(self.guard.len() as u64, Ordering::Relaxed);
    }
}

/// One directory's entries.
///
/// `entries` finds a name; `order` lists cookies in insertion order with each entry's name
/// hash, which finds the entry again in `entries` without a second copy of the name.
pub struct Directory {
    entries: HashTable<Entry>,
    order: BTreeMap<u64, u64>,
    next_cookie: u64,
    /// Inode number of `..`.
    pub parent: Ino,
    /// Number of subdirectories (for nlink).
    pub subdirs: u32,
    /// Set by rmdir: nothing may be created here any more.
    pub removed: bool,
}

impl Directory {
    /// An empty directory.
    pub fn new(parent: Ino) -> Directory {
        Directory {
            entries: HashTable::new(),
            order: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            parent,
            subdirs: 0,
            removed: false,
        }
    }

    fn find(&self, name: &OsStr) -> Option<&Entry> {
        let name = name.as_bytes();
        self.entries.find(name_hash(name), |e| *e.name == *name)
    }

    fn find_mut(&mut self, name: &OsStr) -> Option<&mut Entry> {
        let name = name.as_bytes();
        self.entries.find_mut(name_hash(name), |e| *e.name == *name)
    }

    /// The entry called `name`.
    pub fn get(&self, name: &OsStr) -> Option<Slot> {
        self.find(name).map(Entry::slot)
    }

    /// Number of entries (without `.` and `..`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Size as tmpfs reports it.
    pub fn bogo_size(&self) -> u64 {
        bogo_size_of(self.entries.len() as u64)
    }

    /// Adds `name`; the caller checked that it is absent.
    pub fn insert(&mut self, name: &OsStr, ino: Ino, kind: FileKind) {
        debug_assert!(self.find(name).is_none(), "insert over an existing name");
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let hash = name_hash(name.as_bytes());
        let entry = Entry {
            name: name.as_bytes().into(),
            ino,
            cookie,
            kind,
        };
        self.entries
            .insert_unique(hash, entry, |e| name_hash(&e.name));
        self.order.insert(cookie, hash);
        if kind == FileKind::Directory {
            self.subdirs += 1;
        }
    }

    /// Removes `name`, returning its slot.
    pub fn remove(&mut self, name: &OsStr) -> Option<Slot> {
        let bytes = name.as_bytes();
        let found = self
            .entries
            .find_entry(name_hash(bytes), |e| *e.name == *bytes)
            .ok()?;
        let (entry, _) = found.remove();
        self.order.remove(&entry.cookie);
        if entry.kind == FileKind::Directory {
            self.subdirs -= 1;
        }
        Some(entry.slot())
    }

    /// Points existing `name` at another inode (rename over, exchange), keeping its place
    /// in the listing order.
    pub fn replace(&mut self, name: &OsStr, ino: Ino, kind: FileKind) -> Option<Slot> {
        let entry = self.find_mut(name)?;
        let old = entry.slot();
        entry.ino = ino;
        entry.kind = kind;
        if old.kind == FileKind::Directory {
            self.subdirs -= 1;
        }
        if kind == FileKind::Directory {
            self.subdirs += 1;
        }
        Some(old)
    }

    /// Entries after readdir offset `offset`, as `(cookie, name, slot)`, in order.
    pub fn entries_after(&self, offset: u64) -> impl Iterator<Item = (u64, &OsStr, Slot)> + '_ {
        // Past the last possible cookie: nothing (never wrapped round to the start).
        let start = offset.max(FIRST_COOKIE - 1).checked_add(1);
        let order = match start {
            Some(start) => self.order.range(start..),
            None => self.order.range(0..0),
        };
        order.map(move |(&cookie, &hash)| {
            let e = self
                .entries
                .find(hash, |e| e.cookie == cookie)
                .expect("every cookie in the order has its entry");
            (cookie, OsStr::from_bytes(&e.name), e.slot())
        })
    }

    /// Names of all entries (for recursive removal in tests).
    pub fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.entries_after(0).map(|(_, name, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::ffi::OsString;

    fn name(i: u32) -> OsString {
        OsString::from(format!("f{i}"))
    }

    #[test]
    fn offsets_stay_valid_while_entries_change() {
        let mut d = Directory::new(1);
        for i in 0..100 {
            d.insert(&name(i), 10 + i as u64, FileKind::Regular);
        }
        let first: Vec<_> = d
            .entries_after(0)
            .take(10)
            .map(|(c, n, _)| (c, n.to_os_string()))
            .collect();
        let resume = first.last().unwrap().0;
        // Remove some already-listed and some not-yet-listed entries.
        for i in (0..100).step_by(3) {
            d.remove(&name(i));
        }
        d.insert(OsStr::new("late"), 999, FileKind::Directory);
        let rest: Vec<OsString> = d
            .entries_after(resume)
            .map(|(_, n, _)| n.to_os_string())
            .collect();
        let mut seen: Vec<OsString> = first.into_iter().map(|(_, n)| n).collect();
        seen.extend(rest);
        for i in 0..100 {
            let count = seen.iter().filter(|n| **n == name(i)).count();
            assert!(count <= 1, "entry f{i} listed twice");
            if i % 3 != 0 {
                assert_eq!(count, 1, "surviving entry f{i} missed");
            }
        }
        assert!(seen.iter().any(|n| n == "late"));
        assert_eq!(d.subdirs, 1);
        assert_eq!(d.bogo_size(), (d.len() as u64 + 2) * BOGO_DIRENT_SIZE);
    }

    #[test]
    fn node_size_follows_writes_without_the_lock() {
        let node = DirNode::new(1);
        assert_eq!(node.bogo_size(), 2 * BOGO_DIRENT_SIZE);
        {
            let mut d = node.write();
            d.insert(OsStr::new("a"), 5, FileKind::Regular);
            d.insert(OsStr::new("b"), 6, FileKind::Directory);
        }
        assert_eq!(node.bogo_size(), 4 * BOGO_DIRENT_SIZE);
        let held = node.read();
        // A reader holding the lock does not keep the size from being read.
        assert_eq!(node.bogo_size(), held.bogo_size());
        drop(held);
        node.write().remove(OsStr::new("a"));
        assert_eq!(node.bogo_size(), 3 * BOGO_DIRENT_SIZE);
    }

    #[test]
    fn replace_keeps_position_and_counts_subdirs() {
        let mut d = Directory::new(1);
        d.insert(OsStr::new("a"), 5, FileKind::Directory);
        d.insert(OsStr::new("b"), 6, FileKind::Regular);
        let old = d.replace(OsStr::new("a"), 7, FileKind::Regular).unwrap();
        assert_eq!(old.ino, 5);
        assert_eq!(d.subdirs, 0);
        let order: Vec<_> = d
            .entries_after(0)
            .map(|(_, n, s)| (n.to_os_string(), s.ino))
            .collect();
        assert_eq!(order, vec![("a".into(), 7), ("b".into(), 6)]);
    }
}
