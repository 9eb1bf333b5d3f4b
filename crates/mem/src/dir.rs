//! Directories: entries with stable readdir offsets.
//!
//! Every entry gets a cookie from a per-directory counter when it is inserted; readdir
//! offsets are cookies, so a listing continues correctly while entries come and go: removed
//! entries vanish, surviving ones are returned exactly once, and entries added during the
//! listing appear at most once. Offsets 1 and 2 are `.` and `..`.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};

use memofs_core::{FileKind, Ino};

/// tmpfs reports a directory's size as this many bytes per entry (plus two for `.`/`..`).
pub const BOGO_DIRENT_SIZE: u64 = 20;

/// First cookie handed to a real entry.
const FIRST_COOKIE: u64 = 3;

/// A directory entry's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Inode number.
    pub ino: Ino,
    /// Kind, for readdir's `d_type`.
    pub kind: FileKind,
    cookie: u64,
}

/// One directory's entries.
pub struct Directory {
    by_name: HashMap<OsString, Slot>,
    by_cookie: BTreeMap<u64, OsString>,
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
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
            parent,
            subdirs: 0,
            removed: false,
        }
    }

    /// The entry called `name`.
    pub fn get(&self, name: &OsStr) -> Option<Slot> {
        self.by_name.get(name).copied()
    }

    /// Number of entries (without `.` and `..`).
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True if the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Size as tmpfs reports it.
    pub fn bogo_size(&self) -> u64 {
        (self.by_name.len() as u64 + 2) * BOGO_DIRENT_SIZE
    }

    /// Adds `name`; the caller checked that it is absent.
    pub fn insert(&mut self, name: &OsStr, ino: Ino, kind: FileKind) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let old = self
            .by_name
            .insert(name.to_os_string(), Slot { ino, kind, cookie });
        debug_assert!(old.is_none(), "insert over an existing name");
        self.by_cookie.insert(cookie, name.to_os_string());
        if kind == FileKind::Directory {
            self.subdirs += 1;
        }
    }

    /// Removes `name`, returning its slot.
    pub fn remove(&mut self, name: &OsStr) -> Option<Slot> {
        let slot = self.by_name.remove(name)?;
        self.by_cookie.remove(&slot.cookie);
        if slot.kind == FileKind::Directory {
            self.subdirs -= 1;
        }
        Some(slot)
    }

    /// Points existing `name` at another inode (rename over, exchange), keeping its place
    /// in the listing order.
    pub fn replace(&mut self, name: &OsStr, ino: Ino, kind: FileKind) -> Option<Slot> {
        let slot = self.by_name.get_mut(name)?;
        let old = *slot;
        slot.ino = ino;
        slot.kind = kind;
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
        let start = offset.max(FIRST_COOKIE - 1) + 1;
        self.by_cookie
            .range(start..)
            .map(move |(c, name)| (*c, name.as_os_str(), self.by_name[name]))
    }

    /// Names of all entries (for recursive removal in tests).
    pub fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.by_cookie.values().map(|n| n.as_os_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
