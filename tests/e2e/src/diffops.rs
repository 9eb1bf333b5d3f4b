//! The operation model of the differential test (`tests/differential.rs`): random operations
//! over a tiny name space, applied to a directory, with results that can be compared between
//! two file systems.

#![allow(missing_docs)]

use std::fmt;
use std::fs::{self, File};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use crate::sys::{self, outcome, Errno};
use crate::tree::{self, Detail};
use crate::{errno_name, Rng};

pub const NAMES: &[&str] = &["a", "b", "c", "d"];
pub const XATTRS: &[&str] = &["user.a", "user.b", "trusted.t", "security.s", "bogus.x"];
pub const MODES: &[u32] = &[0o644, 0o600, 0o755, 0o000, 0o4755, 0o2755, 0o1777, 0o444];
pub const SYMLINK_TARGETS: &[&str] = &[
    "a", "b", "../a", "c/d", "../../b", "nowhere", ".", "..", "a/b/c",
];
pub const SLOTS: usize = 4;

#[derive(Clone, Debug)]
pub enum Op {
    Create {
        path: String,
        excl: bool,
        trunc: bool,
        mode: u32,
    },
    Open {
        slot: usize,
        path: String,
        flags: i32,
        mode: u32,
    },
    Close {
        slot: usize,
    },
    Pwrite {
        slot: usize,
        off: u64,
        len: usize,
        seed: u64,
    },
    Pread {
        slot: usize,
        off: u64,
        len: usize,
    },
    Ftruncate {
        slot: usize,
        size: i64,
    },
    Fallocate {
        slot: usize,
        mode: i32,
        off: u64,
        len: u64,
    },
    Fsync {
        slot: usize,
    },
    CopyRange {
        from: usize,
        to: usize,
        off_in: i64,
        off_out: i64,
        len: usize,
    },
    WriteFile {
        path: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    ReadFile {
        path: String,
    },
    Truncate {
        path: String,
        size: i64,
    },
    Rename {
        from: String,
        to: String,
        flags: u32,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink {
        path: String,
    },
    Mkdir {
        path: String,
        mode: u32,
    },
    Rmdir {
        path: String,
    },
    Symlink {
        target: String,
        path: String,
    },
    Readlink {
        path: String,
    },
    Mknod {
        path: String,
        kind: u32,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    Stat {
        path: String,
        follow: bool,
    },
    List {
        path: String,
    },
    SetXattr {
        path: String,
        name: String,
        value: Vec<u8>,
        flags: i32,
    },
    GetXattr {
        path: String,
        name: String,
        size: usize,
    },
    ListXattr {
        path: String,
    },
    RemoveXattr {
        path: String,
        name: String,
    },
}

impl Op {
    /// Paths whose attributes are compared after the operation.
    pub fn touched(&self) -> Vec<&str> {
        use Op::*;
        match self {
            Create { path, .. }
            | Open { path, .. }
            | WriteFile { path, .. }
            | Truncate { path, .. }
            | Unlink { path }
            | Mkdir { path, .. }
            | Rmdir { path }
            | Symlink { path, .. }
            | Mknod { path, .. }
            | Chmod { path, .. }
            | SetXattr { path, .. }
            | RemoveXattr { path, .. } => vec![path, parent(path)],
            Rename { from, to, .. } | Link { from, to } => vec![from, to, parent(from), parent(to)],
            _ => vec![],
        }
    }
}

pub fn parent(p: &str) -> &str {
    p.trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(d, _)| d)
}

#[derive(Clone, PartialEq, Eq)]
pub enum Val {
    Unit,
    Num(i64),
    Data(Vec<u8>),
    Stat {
        kind: u32,
        perm: u32,
        nlink: u64,
        size: Option<u64>,
        uid: u32,
        gid: u32,
    },
    Names(Vec<String>),
}

impl fmt::Debug for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Unit => write!(f, "ok"),
            Val::Num(n) => write!(f, "{n}"),
            Val::Data(d) if d.len() > 32 => write!(f, "{} bytes {:?}..", d.len(), &d[..32]),
            Val::Data(d) => write!(f, "{d:?}"),
            Val::Stat {
                kind,
                perm,
                nlink,
                size,
                uid,
                gid,
            } => {
                write!(
                    f,
                    "{{type {kind:o} mode {perm:o} nlink {nlink} size {size:?} owner {uid}:{gid}}}"
                )
            }
            Val::Names(n) => write!(f, "{n:?}"),
        }
    }
}

pub struct Res(pub Result<Val, Errno>);

impl fmt::Debug for Res {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ok(v) => write!(f, "{v:?}"),
            Err(e) => write!(f, "{}", errno_name(*e)),
        }
    }
}

impl PartialEq for Res {
    fn eq(&self, o: &Res) -> bool {
        self.0 == o.0
    }
}

pub struct Side {
    /// The directory operations are relative to.
    pub root: PathBuf,
    /// Open descriptors, by slot.
    pub slots: Vec<Option<File>>,
}

impl Side {
    /// `open(2)` of `path`, except that FIFOs are never opened: whether a FIFO open succeeds
    /// depends on readers, and a reader can exist for a moment in a process another test
    /// forks in parallel (descriptors are copied before exec closes them), which would make
    /// two identical runs differ. FIFOs answer ENXIO, as a writer without a reader gets.
    fn open(&self, path: &str, flags: i32, mode: u32) -> Result<File, i32> {
        if fs::symlink_metadata(self.p(path)).is_ok_and(|m| m.file_type().is_fifo()) {
            return Err(libc::ENXIO);
        }
        outcome(sys::open(self.p(path), flags, mode))
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            let mut s = self.root.clone().into_os_string();
            s.push("/");
            s.push(rel); // keeps a trailing slash, unlike Path::join
            s.into()
        }
    }

    pub fn slot(&self, i: usize) -> Result<&File, Errno> {
        self.slots[i].as_ref().ok_or(libc::EBADF)
    }

    pub fn stat(&self, rel: &str, follow: bool) -> Result<Val, Errno> {
        let p = self.p(rel);
        let md = outcome(if follow {
            fs::metadata(&p)
        } else {
            fs::symlink_metadata(&p)
        })?;
        let kind = md.mode() & libc::S_IFMT;
        Ok(Val::Stat {
            kind,
            perm: md.mode() & 0o7777,
            nlink: md.nlink(),
            size: (kind != libc::S_IFDIR).then(|| md.size()),
            uid: md.uid(),
            gid: md.gid(),
        })
    }

    pub fn apply(&mut self, op: &Op) -> Result<Val, Errno> {
        use Op::*;
        let unit = |r: std::io::Result<()>| outcome(r).map(|_| Val::Unit);
        match op {
            Create {
                path,
                excl,
                trunc,
                mode,
            } => {
                let mut flags = libc::O_CREAT | libc::O_WRONLY | libc::O_NONBLOCK;
                if *excl {
                    flags |= libc::O_EXCL;
                }
                if *trunc {
                    flags |= libc::O_TRUNC;
                }
                self.open(path, flags, *mode).map(|_| Val::Unit)
            }
            Open {
                slot,
                path,
                flags,
                mode,
            } => {
                self.slots[*slot] = None;
                let f = self.open(path, *flags | libc::O_NONBLOCK, *mode)?;
                self.slots[*slot] = Some(f);
                Ok(Val::Unit)
            }
            Close { slot } => self.slots[*slot]
                .take()
                .map(|_| Val::Unit)
                .ok_or(libc::EBADF),
            Pwrite {
                slot,
                off,
                len,
                seed,
            } => {
                let data = crate::pattern(*seed, *len);
                outcome(self.slot(*slot)?.write_at(&data, *off)).map(|n| Val::Num(n as i64))
            }
            Pread { slot, off, len } => {
                outcome(sys::pread_full(self.slot(*slot)?, *off, *len)).map(Val::Data)
            }
            Ftruncate { slot, size } => {
                let fd = std::os::unix::io::AsRawFd::as_raw_fd(self.slot(*slot)?);
                // SAFETY: `fd` is an open descriptor of the file under test; the call takes integers.
                let r = unsafe { libc::ftruncate(fd, *size) };
                if r == 0 {
                    Ok(Val::Unit)
                } else {
                    Err(sys::errno_of(&std::io::Error::last_os_error()))
                }
            }
            Fallocate {
                slot,
                mode,
                off,
                len,
            } => unit(sys::fallocate(self.slot(*slot)?, *mode, *off, *len)),
            Fsync { slot } => unit(self.slot(*slot)?.sync_all()),
            CopyRange {
                from,
                to,
                off_in,
                off_out,
                len,
            } => {
                let (src, dst) = (self.slot(*from)?, self.slot(*to)?);
                let (mut i, mut o, mut total) = (*off_in, *off_out, 0usize);
                while total < *len {
                    let n = outcome(sys::copy_file_range(src, &mut i, dst, &mut o, len - total))?;
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                Ok(Val::Num(total as i64))
            }
            WriteFile {
                path,
                off,
                len,
                seed,
            } => {
                let f = self.open(
                    path,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_NONBLOCK,
                    0o644,
                )?;
                let data = crate::pattern(*seed, *len);
                outcome(f.write_all_at(&data, *off)).map(|_| Val::Unit)
            }
            ReadFile { path } => {
                let f = self.open(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
                outcome(sys::pread_full(&f, 0, 4 << 20)).map(Val::Data)
            }
            Truncate { path, size } => unit(sys::truncate(self.p(path), *size)),
            Rename { from, to, flags } => unit(sys::renameat2(self.p(from), self.p(to), *flags)),
            Link { from, to } => unit(sys::link_nofollow(self.p(from), self.p(to))),
            Unlink { path } => unit(fs::remove_file(self.p(path))),
            Mkdir { path, mode } => {
                let c = sys::cpath(self.p(path));
                // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
                if unsafe { libc::mkdir(c.as_ptr(), *mode) } == 0 {
                    Ok(Val::Unit)
                } else {
                    Err(sys::errno_of(&std::io::Error::last_os_error()))
                }
            }
            Rmdir { path } => unit(fs::remove_dir(self.p(path))),
            Symlink { target, path } => unit(std::os::unix::fs::symlink(target, self.p(path))),
            Readlink { path } => outcome(fs::read_link(self.p(path)))
                .map(|t| Val::Data(sys::bytes(t.as_os_str()).to_vec())),
            Mknod { path, kind } => unit(sys::mknod(self.p(path), kind | 0o644, 0)),
            Chmod { path, mode } => unit(sys::chmod(self.p(path), *mode)),
            Stat { path, follow } => self.stat(path, *follow),
            List { path } => outcome(sys::list(self.p(path))).map(Val::Names),
            SetXattr {
                path,
                name,
                value,
                flags,
            } => unit(sys::setxattr(self.p(path), name, value, *flags)),
            GetXattr { path, name, size } => {
                outcome(sys::getxattr_sized(self.p(path), name, *size)).map(|(n, v)| {
                    if *size == 0 {
                        Val::Num(n as i64)
                    } else {
                        Val::Data(v)
                    }
                })
            }
            ListXattr { path } => outcome(sys::listxattr(self.p(path))).map(Val::Names),
            RemoveXattr { path, name } => unit(sys::removexattr(self.p(path), name)),
        }
    }
}

/// The directory the operations work in: three levels below the mount root, so that symlink
/// targets climbing with `..` (at most two levels per link) stay inside the mount, where the
/// wrapper directories hold nothing but each other. (At the mount root `../../b` would reach the
/// same file outside both mounts, shared by the two sides.)
pub fn work_root(mount_root: &std::path::Path) -> PathBuf {
    let root = mount_root.join("w1/w2/w3");
    fs::create_dir_all(&root).expect("make the work directory");
    sys::chmod(&root, 0o1777).expect("chmod the work directory");
    root
}

/// Relative paths of everything in the reference tree (for choosing existing names often).
pub fn existing(root: &std::path::Path) -> Vec<String> {
    tree::describe(root, Detail::default())
        .map(|t| t.into_keys().filter(|k| !k.is_empty()).collect())
        .unwrap_or_default()
}

pub struct Gen {
    /// The random source.
    pub rng: Rng,
}

impl Gen {
    fn random_path(&mut self) -> String {
        let depth = self.rng.weighted(&[5, 3, 2]) + 1;
        (0..depth)
            .map(|_| *self.rng.pick(NAMES))
            .collect::<Vec<_>>()
            .join("/")
    }

    pub fn path(&mut self, existing: &[String]) -> String {
        let mut p = if !existing.is_empty() && self.rng.chance(3, 5) {
            self.rng.pick(existing).clone()
        } else {
            self.random_path()
        };
        if self.rng.chance(1, 30) {
            p.push('/');
        }
        p
    }

    fn offset(&mut self) -> u64 {
        match self.rng.weighted(&[5, 3, 2]) {
            0 => self.rng.below(8192),
            1 => self.rng.below(300_000),
            _ => (self.rng.range(0, 40) * 4096)
                .saturating_add(self.rng.range(0, 2))
                .saturating_sub(1),
        }
    }

    fn len(&mut self) -> usize {
        match self.rng.weighted(&[5, 3, 1]) {
            0 => self.rng.range(1, 100) as usize,
            1 => self.rng.range(1, 10_000) as usize,
            _ => self.rng.range(1, 70_000) as usize,
        }
    }

    pub fn op(&mut self, ex: &[String]) -> Op {
        use Op::*;
        let r = &mut self.rng;
        let slot = r.below(SLOTS as u64) as usize;
        let weights = [
            6, 8, 3, 10, 6, 3, 4, 1, 2, 6, 4, 3, 8, 3, 5, 5, 3, 3, 2, 2, 3, 5, 3, 4, 3, 2, 2,
        ];
        match self.rng.weighted(&weights) {
            0 => Create {
                path: self.path(ex),
                excl: self.rng.chance(1, 3),
                trunc: self.rng.chance(1, 3),
                mode: *self.rng.pick(MODES),
            },
            1 => {
                let acc =
                    *self
                        .rng
                        .pick(&[libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR, libc::O_RDWR]);
                let mut flags = acc;
                for (f, p) in [
                    (libc::O_CREAT, 3),
                    (libc::O_APPEND, 6),
                    (libc::O_TRUNC, 10),
                    (libc::O_EXCL, 12),
                    (libc::O_DIRECTORY, 20),
                ] {
                    if self.rng.chance(1, p) {
                        flags |= f;
                    }
                }
                Open {
                    slot,
                    path: self.path(ex),
                    flags,
                    mode: *self.rng.pick(MODES),
                }
            }
            2 => Close { slot },
            3 => Pwrite {
                slot,
                off: self.offset(),
                len: self.len(),
                seed: self.rng.next_u64(),
            },
            4 => Pread {
                slot,
                off: self.offset(),
                len: self.len(),
            },
            5 => Ftruncate {
                slot,
                size: self.offset() as i64,
            },
            6 => {
                let mode = *self.rng.pick(&[
                    0,
                    libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                ]);
                Fallocate {
                    slot,
                    mode,
                    off: self.offset(),
                    len: self.len() as u64,
                }
            }
            7 => Fsync { slot },
            8 => CopyRange {
                from: slot,
                to: self.rng.below(SLOTS as u64) as usize,
                off_in: self.offset() as i64,
                off_out: self.offset() as i64,
                len: self.len(),
            },
            9 => WriteFile {
                path: self.path(ex),
                off: self.offset(),
                len: self.len(),
                seed: self.rng.next_u64(),
            },
            10 => ReadFile {
                path: self.path(ex),
            },
            11 => Truncate {
                path: self.path(ex),
                size: if self.rng.chance(1, 40) {
                    -1
                } else {
                    self.offset() as i64
                },
            },
            12 => {
                let flags = *self.rng.pick(&[0, 0, 0, 1, 2, 3]); // NOREPLACE=1, EXCHANGE=2, both=EINVAL
                Rename {
                    from: self.path(ex),
                    to: self.path(ex),
                    flags,
                }
            }
            13 => Link {
                from: self.path(ex),
                to: self.path(ex),
            },
            14 => Unlink {
                path: self.path(ex),
            },
            15 => Mkdir {
                path: self.path(ex),
                mode: *self.rng.pick(&[0o755, 0o700, 0o2775, 0o1777]),
            },
            16 => Rmdir {
                path: self.path(ex),
            },
            17 => Symlink {
                target: self.rng.pick(SYMLINK_TARGETS).to_string(),
                path: self.path(ex),
            },
            18 => Readlink {
                path: self.path(ex),
            },
            19 => Mknod {
                path: self.path(ex),
                kind: *self.rng.pick(&[libc::S_IFIFO, libc::S_IFSOCK]),
            },
            20 => Chmod {
                path: self.path(ex),
                mode: *self.rng.pick(MODES),
            },
            21 => Stat {
                path: if self.rng.chance(1, 10) {
                    String::new()
                } else {
                    self.path(ex)
                },
                follow: self.rng.chance(1, 2),
            },
            22 => List {
                path: if self.rng.chance(1, 4) {
                    String::new()
                } else {
                    self.path(ex)
                },
            },
            23 => {
                let mut value = vec![0u8; self.rng.below(64) as usize];
                self.rng.fill(&mut value);
                let flags = *self.rng.pick(&[0, 0, 1, 2]);
                SetXattr {
                    path: self.path(ex),
                    name: self.rng.pick(XATTRS).to_string(),
                    value,
                    flags,
                }
            }
            24 => GetXattr {
                path: self.path(ex),
                name: self.rng.pick(XATTRS).to_string(),
                size: *self.rng.pick(&[0, 4, 4096]),
            },
            25 => ListXattr {
                path: self.path(ex),
            },
            _ => RemoveXattr {
                path: self.path(ex),
                name: self.rng.pick(XATTRS).to_string(),
            },
        }
    }
}
