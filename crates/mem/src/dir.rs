//! Directories: entries with stable readdir offsets.
//!
//! Every entry gets a cookie from a per-directory counter when it is inserted, and keeps it
//! when renamed within its directory; readdir offsets are cookies, so a listing continues
//! correctly while entries come and go: removed entries vanish, surviving ones are returned
//! exactly once, and entries added during the listing appear at most once. Offsets 1 and 2
//! are `.` and `..`.

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

/// Bytes of a name kept inside the entry; longer names go to the heap.
const INLINE_NAME: usize = 22;

/// A name, stored once: inline when it is short (most are), so that it costs no
/// allocation of its own. 24 bytes either way.
enum Name {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<[u8]>),
}

impl Name {
    fn new(name: &[u8]) -> Name {
        if name.len() > INLINE_NAME {
            return Name::Heap(name.into());
        }
        let mut bytes = [0; INLINE_NAME];
        bytes[..name.len()].copy_from_slice(name);
        Name::Inline {
            len: name.len() as u8,
            bytes,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..*len as usize],
            Name::Heap(b) => b,
        }
    }
}

/// Bits of [`Entry::cookie_kind`] below the kind: a directory hands out fewer than 2^56
/// cookies in its life (one per insert).
const COOKIE_BITS: u32 = 56;
const COOKIE_MASK: u64 = (1 << COOKIE_BITS) - 1;

/// One entry: 40 bytes, the name with its kind and cookie in one word.
struct Entry {
    name: Name,
    ino: Ino,
    /// The cookie in the low [`COOKIE_BITS`], the kind's `S_IFMT` bits above.
    cookie_kind: u64,
}

/// A cookie and a kind in one word.
fn pack(cookie: u64, kind: FileKind) -> u64 {
    debug_assert!(cookie <= COOKIE_MASK);
    cookie | (u64::from(kind.mode_bits() >> 12) << COOKIE_BITS)
}

impl Entry {
    fn new(name: &[u8], ino: Ino, cookie: u64, kind: FileKind) -> Entry {
        Entry {
            name: Name::new(name),
            ino,
            cookie_kind: pack(cookie, kind),
        }
    }

    fn name(&self) -> &[u8] {
        self.name.as_bytes()
    }

    fn cookie(&self) -> u64 {
        self.cookie_kind & COOKIE_MASK
    }

    fn kind(&self) -> FileKind {
        let bits = ((self.cookie_kind >> COOKIE_BITS) as u32) << 12;
        FileKind::from_mode(bits).expect("stored from a kind")
    }

    fn set_target(&mut self, ino: Ino, kind: FileKind) {
        self.ino = ino;
        self.cookie_kind = pack(self.cookie(), kind);
    }

    fn slot(&self) -> Slot {
        Slot {
            ino: self.ino,
            kind: self.kind(),
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
/// `entries` finds a name. `order` lists `(cookie, name hash)` in cookie order, which is
/// insertion order: the hash finds the entry again in `entries` without a second copy of the
/// name. A removed entry stays in `order`, marked, until marked ones are half of it; then
/// they are dropped in one pass (cookies never change, so listings in progress continue).
/// Both shrink as the directory does.
pub struct Directory {
    entries: HashTable<Entry>,
    order: Vec<(u64, u64)>,
    /// Marked (removed) records in `order`.
    gone: usize,
    next_cookie: u64,
    /// Inode number of `..`.
    pub parent: Ino,
    /// Number of subdirectories (for nlink).
    pub subdirs: u32,
    /// Set by rmdir: nothing may be created here any more.
    pub removed: bool,
}

/// Marks a removed record in [`Directory::order`] (cookies are below 2^56).
const GONE: u64 = 1 << 63;

/// Fewer marked records than this are never dropped (not worth a pass).
const MIN_SWEEP: usize = 32;

impl Directory {
    /// An empty directory.
    pub fn new(parent: Ino) -> Directory {
        Directory {
            entries: HashTable::new(),
            order: Vec::new(),
            gone: 0,
            next_cookie: FIRST_COOKIE,
            parent,
            subdirs: 0,
            removed: false,
        }
    }

    fn find(&self, name: &OsStr) -> Option<&Entry> {
        let name = name.as_bytes();
        self.entries.find(name_hash(name), |e| e.name() == name)
    }

    fn find_mut(&mut self, name: &OsStr) -> Option<&mut Entry> {
        let name = name.as_bytes();
        self.entries.find_mut(name_hash(name), |e| e.name() == name)
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
        self.push(name, Slot { ino, kind }, cookie);
    }

    /// Adds `name` at `cookie`, past every cookie in `order`.
    fn push(&mut self, name: &OsStr, slot: Slot, cookie: u64) {
        let hash = self.put(name, slot, cookie);
        self.order.push((cookie, hash));
        if slot.kind == FileKind::Directory {
            self.subdirs += 1;
        }
    }

    /// Puts `name` into `entries` at `cookie` (not into `order`); returns its name's hash.
    fn put(&mut self, name: &OsStr, slot: Slot, cookie: u64) -> u64 {
        let hash = name_hash(name.as_bytes());
        let entry = Entry::new(name.as_bytes(), slot.ino, cookie, slot.kind);
        self.entries
            .insert_unique(hash, entry, |e| name_hash(e.name()));
        hash
    }

    /// Takes `name` out of `entries` (not out of `order`).
    fn take(&mut self, name: &OsStr) -> Option<Entry> {
        let bytes = name.as_bytes();
        let found = self
            .entries
            .find_entry(name_hash(bytes), |e| e.name() == bytes)
            .ok()?;
        Some(found.remove().0)
    }

    /// Takes on what a state stream says of the directory itself: its parent, the cookie
    /// its next entry gets, whether it was removed. Comes before its entries.
    pub(crate) fn restore(&mut self, parent: Ino, next_cookie: u64, removed: bool) {
        self.parent = parent;
        self.next_cookie = next_cookie.clamp(FIRST_COOKIE, COOKIE_MASK);
        self.removed = removed;
    }

    /// Adds `name` with the readdir cookie it had where a state stream was written, so that
    /// a listing in progress goes on where it was: cookies come in ascending order, each
    /// below the directory's next one (`EINVAL` otherwise; `EEXIST` for a name twice).
    pub(crate) fn insert_saved(
        &mut self,
        name: &OsStr,
        slot: Slot,
        cookie: u64,
    ) -> memofs_core::Result<()> {
        let after_last = self.order.last().is_none_or(|(c, _)| c & !GONE < cookie);
        if cookie < FIRST_COOKIE || cookie >= self.next_cookie || !after_last {
            return Err(memofs_core::Errno::EINVAL);
        }
        if self.find(name).is_some() {
            return Err(memofs_core::Errno::EEXIST);
        }
        self.push(name, slot, cookie);
        Ok(())
    }

    /// The cookie the next entry gets.
    pub(crate) fn next_cookie(&self) -> u64 {
        self.next_cookie
    }

    /// Removes `name`, returning its slot.
    pub fn remove(&mut self, name: &OsStr) -> Option<Slot> {
        let entry = self.take(name)?;
        let at = self.position(entry.cookie());
        self.order[at].0 |= GONE;
        self.gone += 1;
        self.shrink();
        if entry.kind() == FileKind::Directory {
            self.subdirs -= 1;
        }
        Some(entry.slot())
    }

    /// Index in `order` of the first record whose cookie is at least `cookie`.
    fn position(&self, cookie: u64) -> usize {
        self.order.partition_point(|(c, _)| c & !GONE < cookie)
    }

    /// Drops marked records once they are half of `order`, and gives memory back as the
    /// directory empties.
    fn shrink(&mut self) {
        if self.gone >= MIN_SWEEP && self.gone * 2 >= self.order.len() {
            self.order.retain(|(c, _)| c & GONE == 0);
            self.gone = 0;
            if self.order.capacity() > 2 * self.order.len() {
                self.order.shrink_to(self.order.len() * 3 / 2);
            }
        }
        let len = self.entries.len();
        if self.entries.capacity() > 4 * len.max(8) {
            self.entries.shrink_to(len * 2, |e| name_hash(e.name()));
        }
    }

    /// Renames `from` to `to` (absent) in this directory, keeping the entry's place in the
    /// listing order: a listing under way that has passed it does not meet it again under
    /// its new name, and one that has not meets it once, under that name. (A new cookie
    /// would put it after every other: a program that renames each entry it reads, and back,
    /// would never reach the end.)
    pub fn rename_in_place(&mut self, from: &OsStr, to: &OsStr) -> Option<Slot> {
        debug_assert!(self.find(to).is_none(), "rename over an existing name");
        let entry = self.take(from)?;
        let (cookie, slot) = (entry.cookie(), entry.slot());
        let hash = self.put(to, slot, cookie);
        let at = self.position(cookie);
        self.order[at].1 = hash;
        Some(slot)
    }

    /// Points existing `name` at another inode (rename over, exchange), keeping its place
    /// in the listing order.
    pub fn replace(&mut self, name: &OsStr, ino: Ino, kind: FileKind) -> Option<Slot> {
        let entry = self.find_mut(name)?;
        let old = entry.slot();
        entry.set_target(ino, kind);
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
        let start = match offset.max(FIRST_COOKIE - 1).checked_add(1) {
            Some(first) => self.position(first),
            None => self.order.len(),
        };
        self.order[start..]
            .iter()
            .filter(|(c, _)| c & GONE == 0)
            .map(move |&(cookie, hash)| {
                let e = self
                    .entries
                    .find(hash, |e| e.cookie() == cookie)
                    .expect("every unmarked cookie in the order has its entry");
                (cookie, OsStr::from_bytes(e.name()), e.slot())
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

    /// xfstests' generic/736: renaming each entry as it is read, and back, ends the listing
    /// with each entry read once.
    #[test]
    fn renaming_each_entry_read_and_back_ends_the_listing() {
        let mut d = Directory::new(1);
        for i in 0..500 {
            d.insert(&name(i), 10 + i as u64, FileKind::Regular);
        }
        let (mut at, mut read) = (0, Vec::new());
        loop {
            let next = d.entries_after(at).next();
            let Some((cookie, n)) = next.map(|(c, n, _)| (c, n.to_os_string())) else {
                break;
            };
            assert!(read.len() < 500, "read past the end: {n:?}");
            d.rename_in_place(&n, OsStr::new("TEMPFILE")).unwrap();
            d.rename_in_place(OsStr::new("TEMPFILE"), &n).unwrap();
            read.push(n);
            at = cookie;
        }
        read.sort();
        let mut all: Vec<_> = (0..500).map(name).collect();
        all.sort();
        assert_eq!(read, all);
        assert_eq!(d.get(&name(7)).map(|s| s.ino), Some(17));
        assert!(d.get(OsStr::new("TEMPFILE")).is_none());
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

    #[test]
    fn names_of_every_length_and_every_kind_round_trip() {
        assert_eq!(std::mem::size_of::<Entry>(), 40);
        let kinds = [
            FileKind::Regular,
            FileKind::Directory,
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDevice,
            FileKind::BlockDevice,
        ];
        let mut d = Directory::new(1);
        for len in 1..=255usize {
            let name = OsString::from("n".repeat(len - 1) + &(len % 10).to_string());
            d.insert(&name, len as u64, kinds[len % kinds.len()]);
        }
        for len in 1..=255usize {
            let name = OsString::from("n".repeat(len - 1) + &(len % 10).to_string());
            let slot = d.get(&name).expect("inserted");
            assert_eq!(
                (slot.ino, slot.kind),
                (len as u64, kinds[len % kinds.len()])
            );
        }
        let listed: Vec<usize> = d.entries_after(0).map(|(_, n, _)| n.len()).collect();
        assert_eq!(listed, (1..=255).collect::<Vec<_>>(), "insertion order");
    }

    #[test]
    fn a_listing_continues_across_the_sweep_of_removed_records() {
        let mut d = Directory::new(1);
        for i in 0..1000 {
            d.insert(&name(i), i as u64, FileKind::Regular);
        }
        let first: Vec<_> = d
            .entries_after(0)
            .take(500)
            .collect::<Vec<_>>()
            .iter()
            .map(|(c, _, _)| *c)
            .collect();
        let resume = *first.last().unwrap();
        // Remove everything listed and every other one after it: the sweep runs.
        for i in 0..500 {
            d.remove(&name(i));
        }
        for i in (500..1000).step_by(2) {
            d.remove(&name(i));
        }
        assert!(d.order.len() < 1000, "marked records were dropped");
        let rest: Vec<u32> = d
            .entries_after(resume)
            .map(|(_, n, _)| n.to_str().unwrap()[1..].parse().unwrap())
            .collect();
        assert_eq!(rest, (501..1000).step_by(2).collect::<Vec<_>>());
    }

    #[test]
    fn an_emptied_directory_gives_its_tables_back() {
        let mut d = Directory::new(1);
        for i in 0..100_000 {
            d.insert(&name(i), i as u64, FileKind::Regular);
        }
        let (table, order) = (d.entries.capacity(), d.order.capacity());
        for i in 0..99_990 {
            d.remove(&name(i));
        }
        assert!(
            d.entries.capacity() * 100 < table,
            "{} of {table}",
            d.entries.capacity()
        );
        assert!(
            d.order.capacity() * 100 < order,
            "{} of {order}",
            d.order.capacity()
        );
        assert_eq!(d.names().count(), 10);
    }
}
