//! Describing a directory tree, to compare two trees entry by entry.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::sys;

/// What to record about each entry besides type, permissions and ownership.
#[derive(Clone, Copy, Debug, Default)]
pub struct Detail {
    /// Link counts.
    pub nlink: bool,
    /// Directory sizes (regular file and symlink sizes are always recorded).
    pub dir_size: bool,
    /// Modification times (seconds and nanoseconds); symlinks included.
    pub mtime: bool,
    /// File contents.
    pub content: bool,
    /// Extended attributes and their values.
    pub xattrs: bool,
}

/// Sorted (name, value) pairs.
pub type Xattrs = Vec<(String, Vec<u8>)>;

/// One entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// `st_uid`
    pub uid: u32,
    /// `st_gid`
    pub gid: u32,
    /// `st_nlink` (if recorded).
    pub nlink: Option<u64>,
    /// `st_size` (directories only if recorded).
    pub size: Option<u64>,
    /// `st_rdev` of device nodes.
    pub rdev: u64,
    /// mtime (if recorded).
    pub mtime: Option<(i64, i64)>,
    /// Symlink target.
    pub target: Option<Vec<u8>>,
    /// Regular file content (if recorded).
    pub content: Option<Vec<u8>>,
    /// Sorted (name, value) xattrs (if recorded), or the errno listing them gave.
    pub xattrs: Option<Result<Xattrs, i32>>,
}

/// Relative path (root is "") → entry.
pub type Tree = BTreeMap<String, Entry>;

/// Describe `root` and everything below it (does not follow symlinks).
pub fn describe(root: &Path, d: Detail) -> io::Result<Tree> {
    let mut out = Tree::new();
    walk(root, "", d, &mut out)?;
    Ok(out)
}

fn walk(p: &Path, rel: &str, d: Detail, out: &mut Tree) -> io::Result<()> {
    let md = fs::symlink_metadata(p)?;
    let ft = md.file_type();
    let e = Entry {
        mode: md.mode(),
        uid: md.uid(),
        gid: md.gid(),
        nlink: d.nlink.then(|| md.nlink()),
        size: if ft.is_dir() && !d.dir_size {
            None
        } else {
            Some(md.size())
        },
        rdev: if ft.is_char_device() || ft.is_block_device() {
            md.rdev()
        } else {
            0
        },
        mtime: d.mtime.then(|| (md.mtime(), md.mtime_nsec())),
        target: if ft.is_symlink() {
            Some(sys::bytes(fs::read_link(p)?.as_os_str()).to_vec())
        } else {
            None
        },
        content: if d.content && ft.is_file() {
            Some(fs::read(p)?)
        } else {
            None
        },
        xattrs: if d.xattrs {
            Some(xattrs(p).map_err(|e| sys::errno_of(&e)))
        } else {
            None
        },
    };
    out.insert(rel.to_string(), e);
    if ft.is_dir() {
        let mut names: Vec<_> = fs::read_dir(p)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        for n in names {
            let child_rel = if rel.is_empty() {
                n.to_string_lossy().into_owned()
            } else {
                format!("{rel}/{}", n.to_string_lossy())
            };
            walk(&p.join(&n), &child_rel, d, out)?;
        }
    }
    Ok(())
}

fn xattrs(p: &Path) -> io::Result<Xattrs> {
    let mut v = Vec::new();
    for name in sys::llistxattr(p)? {
        let val = sys::lgetxattr(p, &name)?;
        v.push((name, val));
    }
    Ok(v)
}

/// Differences between two trees, one line each (empty when equal).
pub fn diff(a: &Tree, b: &Tree, a_name: &str, b_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (k, ea) in a {
        match b.get(k) {
            None => out.push(format!("{k:?}: only in {a_name}")),
            Some(eb) if ea != eb => {
                out.push(format!("{k:?}: {}", entry_diff(ea, eb, a_name, b_name)))
            }
            _ => {}
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            out.push(format!("{k:?}: only in {b_name}"));
        }
    }
    out
}

fn entry_diff(a: &Entry, b: &Entry, an: &str, bn: &str) -> String {
    let mut parts = Vec::new();
    macro_rules! field {
        ($f:ident, $fmt:literal) => {
            if a.$f != b.$f {
                parts.push(format!(
                    concat!(stringify!($f), " ", $fmt, " in {} vs ", $fmt, " in {}"),
                    a.$f, an, b.$f, bn
                ));
            }
        };
    }
    field!(mode, "{:o}");
    field!(uid, "{}");
    field!(gid, "{}");
    field!(nlink, "{:?}");
    field!(size, "{:?}");
    field!(rdev, "{:x}");
    field!(mtime, "{:?}");
    if a.target != b.target {
        parts.push(format!(
            "symlink target {:?} in {an} vs {:?} in {bn}",
            a.target
                .as_ref()
                .map(|t| String::from_utf8_lossy(t).into_owned()),
            b.target
                .as_ref()
                .map(|t| String::from_utf8_lossy(t).into_owned())
        ));
    }
    if a.content != b.content {
        let (x, y) = (
            a.content.as_deref().unwrap_or(&[]),
            b.content.as_deref().unwrap_or(&[]),
        );
        parts.push(format!(
            "content differs ({} bytes in {an}, {} in {bn}, first difference at {:?})",
            x.len(),
            y.len(),
            crate::first_difference(x, y)
        ));
    }
    if a.xattrs != b.xattrs {
        parts.push(format!(
            "xattrs {:?} in {an} vs {:?} in {bn}",
            a.xattrs, b.xattrs
        ));
    }
    parts.join("; ")
}
