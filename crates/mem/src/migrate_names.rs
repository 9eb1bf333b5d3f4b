//! The names a state stream's entries make, checked once every record is in (see
//! [`Names`]); part of [`super`] (`migrate.rs`), kept apart for the length of the module.

use std::collections::{HashMap, HashSet};
use std::io;

use memofs_core::migrate::invalid;
use memofs_core::{FileKind, Ino, ROOT_INO};

use super::errno;
use crate::MemFs;

/// What a stream's entries say of the inodes they name, checked against what the inodes say
/// once every record is in: each names an inode of its kind; a directory has one name (none
/// once removed), in the directory its `..` says, and leads up to the root; every link
/// count is what the names make it (as tmpfs: 2 and a directory's subdirectories, a file's
/// names). Every name past a file's first is charged as an inode as it arrives (as tmpfs),
/// so that a stream cannot make more names than the limits allow.
#[derive(Default)]
pub(super) struct Names {
    /// Each entry's directory, target and the kind the entry says.
    entries: Vec<(Ino, Ino, FileKind)>,
    /// Names per inode.
    count: HashMap<Ino, u32>,
}

impl Names {
    pub(super) fn with_capacity(n: usize) -> Names {
        Names {
            entries: Vec::with_capacity(n),
            count: HashMap::with_capacity(n),
        }
    }

    pub(super) fn add(&mut self, fs: &MemFs, dir: Ino, ino: Ino, kind: FileKind) -> io::Result<()> {
        let n = self.count.entry(ino).or_default();
        *n += 1;
        match (kind, *n) {
            (FileKind::Directory, 2..) => {
                return Err(invalid(format!("directory {ino} named twice")))
            }
            (FileKind::Directory, _) | (_, 1) => {}
            _ => fs
                .limits
                .charge_inode()
                .map_err(|e| errno("room for a name", e))?,
        }
        self.entries.push((dir, ino, kind));
        Ok(())
    }

    pub(super) fn check(&self, fs: &MemFs) -> io::Result<()> {
        for &(dir, ino, kind) in &self.entries {
            let target = fs
                .table
                .get(ino)
                .map_err(|_| invalid(format!("an entry names inode {ino}, which is not there")))?;
            if target.kind() != kind {
                return Err(invalid(format!(
                    "an entry names inode {ino} a {kind:?}, which is a {:?}",
                    target.kind()
                )));
            }
            if let Ok(d) = target.dir() {
                let parent = d.read().parent;
                if parent != dir {
                    return Err(invalid(format!(
                        "directory {ino} is named in {dir} and its parent is {parent}"
                    )));
                }
            }
        }
        let all = fs.table.all();
        let mut rooted = HashSet::new();
        for inode in &all {
            let names = self.count.get(&inode.ino).copied().unwrap_or(0);
            let want = match inode.dir() {
                Ok(d) => {
                    let d = d.read();
                    let named = if inode.ino == ROOT_INO || d.removed {
                        0
                    } else {
                        1
                    };
                    if names != named {
                        return Err(invalid(format!(
                            "directory {} has {names} names",
                            inode.ino
                        )));
                    }
                    if inode.ino != ROOT_INO && !d.removed {
                        reaches_root(fs, inode.ino, &mut rooted, all.len())?;
                    }
                    if d.removed {
                        0
                    } else {
                        2 + d.subdirs
                    }
                }
                Err(_) => names,
            };
            let nlink = inode.nlink.load(std::sync::atomic::Ordering::SeqCst);
            if nlink != want {
                return Err(invalid(format!(
                    "inode {}: {nlink} links, its names make {want}",
                    inode.ino
                )));
            }
        }
        Ok(())
    }
}

/// Whether directory `ino` leads up to the root through its parents in at most `steps`;
/// `rooted` holds the directories known to, each directory's parents being walked once for
/// all of them (a deep tree costs its size, not its size times its depth).
fn reaches_root(fs: &MemFs, ino: Ino, rooted: &mut HashSet<Ino>, steps: usize) -> io::Result<()> {
    let mut walked = Vec::new();
    let mut at = ino;
    while at != ROOT_INO && !rooted.contains(&at) {
        if walked.len() == steps {
            return Err(invalid(format!(
                "directory {ino} is in a cycle of directories"
            )));
        }
        walked.push(at);
        at = fs
            .table
            .get(at)
            .ok()
            .and_then(|i| i.dir().ok().map(|d| d.read().parent))
            .ok_or_else(|| invalid(format!("directory {ino}'s parents end at {at}")))?;
    }
    rooted.extend(walked);
    Ok(())
}
