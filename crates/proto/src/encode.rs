//! [`memofs_request::ReplyOut`] to kernel reply bytes.
//!
//! A reply is a `fuse_out_header` (written by the channel: `/dev/fuse` prepends it, a ring
//! entry has a place for it) followed by the reply's parts. [`Encoder`] builds the parts in a
//! reusable buffer and hands them to a [`ReplySink`] once per request.

use std::time::Duration;

use memofs_core::{Attr, DirEntry, Entry, Errno, FileKind, StatFs};
use memofs_request::{FdSource, Op, OpenOut, ReplyOut};
use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{self, fopen};

/// Where an encoded reply goes: the channel writes a `fuse_out_header` for request
/// `unique` with `error` (0 or a negative errno) and then `parts`, back to back.
pub trait ReplySink {
    /// Sends one reply.
    fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]);
    /// The reply to READ `unique`, its bytes read from a descriptor into place where the
    /// channel can (see [`ReplyOut::data_from_fd`]); whether it answered.
    fn data_from_fd(&mut self, _unique: u64, _source: &mut FdSource<'_>) -> bool {
        false
    }
}

/// The most bytes a successful reply to `op` may take after its `fuse_out_header`: the size
/// of its fixed reply, or what it asked for (READ, READDIR, the xattr calls, IOCTL), or the
/// longest path (READLINK). A transport whose reply room the sender chose (a guest's
/// descriptor chain) refuses a request before its work when this does not fit: a LOOKUP or
/// CREATE whose answer is lost would leave references and handles nobody knows of.
pub fn reply_bound(op: &Op<'_>) -> usize {
    use std::mem::size_of;
    let entry = size_of::<abi::fuse_entry_out>();
    match *op {
        Op::Lookup { .. }
        | Op::Mknod { .. }
        | Op::Mkdir { .. }
        | Op::Symlink { .. }
        | Op::Link { .. } => entry,
        Op::Create { .. } | Op::Tmpfile { .. } => entry + size_of::<abi::fuse_open_out>(),
        Op::Open { .. } | Op::Opendir { .. } => size_of::<abi::fuse_open_out>(),
        Op::Getattr { .. } | Op::Setattr { .. } => size_of::<abi::fuse_attr_out>(),
        Op::Statx { .. } => size_of::<abi::fuse_statx_out>(),
        Op::Statfs => size_of::<abi::fuse_kstatfs>(),
        Op::Write { .. } | Op::CopyFileRange { .. } => size_of::<abi::fuse_write_out>(),
        Op::Lseek { .. } => 8,
        Op::Readlink => libc::PATH_MAX as usize - 1,
        Op::Read { size, .. } | Op::Readdir { size, .. } => size as usize,
        Op::Getxattr { size, .. } | Op::Listxattr { size } if size == 0 => {
            size_of::<abi::fuse_getxattr_out>()
        }
        Op::Getxattr { size, .. } | Op::Listxattr { size } => size as usize,
        Op::Ioctl { out_size, .. } => size_of::<abi::fuse_ioctl_out>() + out_size as usize,
        _ => 0,
    }
}

/// Encodes the reply to one request.
pub struct Encoder<'a> {
    unique: u64,
    /// Scratch for the reply's structs and directory entries (reused across requests).
    buf: &'a mut Vec<u8>,
    /// Most bytes a READDIR answer may hold.
    dir_limit: usize,
    /// READDIRPLUS: entries carry attributes.
    plus: bool,
    out: &'a mut dyn ReplySink,
}

fn split(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

fn file_type(kind: FileKind) -> u32 {
    kind.mode_bits() >> 12
}

/// The kernel's attributes for ours.
pub fn fuse_attr(a: &Attr) -> abi::fuse_attr {
    let (atime, atimensec) = a.atime.to_timespec();
    let (mtime, mtimensec) = a.mtime.to_timespec();
    let (ctime, ctimensec) = a.ctime.to_timespec();
    abi::fuse_attr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime: atime as u64,
        mtime: mtime as u64,
        ctime: ctime as u64,
        atimensec,
        mtimensec,
        ctimensec,
        mode: a.kind.mode_bits() | a.perm as u32,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: if a.mount_root {
            abi::FUSE_ATTR_SUBMOUNT
        } else {
            0
        },
    }
}

fn entry_out(e: &Entry) -> abi::fuse_entry_out {
    let (entry_valid, entry_valid_nsec) = split(e.entry_timeout);
    let (attr_valid, attr_valid_nsec) = split(e.attr_timeout);
    abi::fuse_entry_out {
        // A negative entry: nodeid 0 with a timeout.
        nodeid: e.attr.map_or(0, |a| a.ino),
        // The kernel made the root's inode with generation 0 and takes any other for a
        // reused node id, which would make the root unusable (a lookup of `..` answers it).
        generation: e.attr.map_or(0, |a| match a.ino {
            memofs_core::ROOT_INO => 0,
            _ => a.generation,
        }),
        entry_valid,
        attr_valid,
        entry_valid_nsec,
        attr_valid_nsec,
        attr: e
            .attr
            .as_ref()
            .map_or_else(abi::fuse_attr::new_zeroed, fuse_attr),
    }
}

fn open_out(o: &OpenOut) -> abi::fuse_open_out {
    let flags = [
        (o.direct_io, fopen::DIRECT_IO),
        (o.keep_cache, fopen::KEEP_CACHE),
        (o.cache_dir, fopen::CACHE_DIR),
        (o.noflush, fopen::NOFLUSH),
        (o.backing_id.is_some(), fopen::PASSTHROUGH),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |f, (_, bit)| f | bit);
    abi::fuse_open_out {
        fh: o.fh,
        open_flags: flags,
        backing_id: o.backing_id.map_or(0, |id| id as i32),
    }
}

fn sx_time(t: memofs_core::Timestamp) -> abi::fuse_sx_time {
    let (tv_sec, tv_nsec) = t.to_timespec();
    abi::fuse_sx_time {
        tv_sec,
        tv_nsec,
        reserved: 0,
    }
}

/// `STATX_BASIC_STATS | STATX_BTIME`: what a statx answer fills.
const STATX_FILLED: u32 = 0x7ff | 0x800;

/// The statx attributes an inode's flags tell: `STATX_ATTR_COMPRESSED`, `_IMMUTABLE`,
/// `_APPEND` and `_NODUMP` have the bit values of `FS_COMPR_FL`, `FS_IMMUTABLE_FL`,
/// `FS_APPEND_FL` and `FS_NODUMP_FL`. Linux copies neither field of a FUSE statx answer to
/// the caller as of 7.3 (`fuse_statx_to_attr`, fs/fuse/dir.c); they are filled for a kernel
/// that does.
const STATX_ATTRS_FROM_FLAGS: u64 = (libc::STATX_ATTR_COMPRESSED
    | libc::STATX_ATTR_IMMUTABLE
    | libc::STATX_ATTR_APPEND
    | libc::STATX_ATTR_NODUMP) as u64;

fn statx_out(a: &Attr, iflags: Option<u32>, ttl: Duration) -> abi::fuse_statx_out {
    let (attr_valid, attr_valid_nsec) = split(ttl);
    let mut out = abi::fuse_statx_out::new_zeroed();
    out.attr_valid = attr_valid;
    out.attr_valid_nsec = attr_valid_nsec;
    let s = &mut out.stat;
    s.mask = STATX_FILLED;
    s.blksize = a.blksize;
    s.nlink = a.nlink;
    s.uid = a.uid;
    s.gid = a.gid;
    s.mode = (a.kind.mode_bits() | a.perm as u32) as u16;
    s.ino = a.ino;
    s.size = a.size;
    s.blocks = a.blocks;
    s.atime = sx_time(a.atime);
    s.btime = sx_time(a.crtime);
    s.ctime = sx_time(a.ctime);
    s.mtime = sx_time(a.mtime);
    s.rdev_major = libc::major(a.rdev as libc::dev_t);
    s.rdev_minor = libc::minor(a.rdev as libc::dev_t);
    if let Some(flags) = iflags {
        s.attributes = flags as u64 & STATX_ATTRS_FROM_FLAGS;
        s.attributes_mask = STATX_ATTRS_FROM_FLAGS;
    }
    out
}

impl<'a> Encoder<'a> {
    /// An encoder for request `unique`, answering through `out`. `buf` is scratch space
    /// kept by the caller across requests.
    pub fn new(unique: u64, buf: &'a mut Vec<u8>, out: &'a mut dyn ReplySink) -> Encoder<'a> {
        buf.clear();
        Encoder {
            unique,
            buf,
            dir_limit: 0,
            plus: false,
            out,
        }
    }

    /// For a READDIR (`plus`: READDIRPLUS) of at most `size` bytes.
    pub fn for_readdir(mut self, size: u32, plus: bool) -> Self {
        self.dir_limit = size as usize;
        self.plus = plus;
        self
    }

    fn send(&mut self, parts: &[&[u8]]) {
        self.out.send(self.unique, 0, parts);
    }
}

impl ReplyOut for Encoder<'_> {
    fn error(&mut self, e: Errno) {
        self.out.send(self.unique, -e.0, &[]);
    }

    fn empty(&mut self) {
        self.send(&[]);
    }

    fn entry(&mut self, e: &Entry) {
        self.send(&[entry_out(e).as_bytes()]);
    }

    fn attr(&mut self, attr: &Attr, ttl: Duration) {
        let (attr_valid, attr_valid_nsec) = split(ttl);
        let out = abi::fuse_attr_out {
            attr_valid,
            attr_valid_nsec,
            dummy: 0,
            attr: fuse_attr(attr),
        };
        self.send(&[out.as_bytes()]);
    }

    fn statx(&mut self, attr: &Attr, iflags: Option<u32>, ttl: Duration) {
        self.send(&[statx_out(attr, iflags, ttl).as_bytes()]);
    }

    fn opened(&mut self, o: &OpenOut) {
        self.send(&[open_out(o).as_bytes()]);
    }

    fn created(&mut self, e: &Entry, o: &OpenOut) {
        self.send(&[entry_out(e).as_bytes(), open_out(o).as_bytes()]);
    }

    fn data(&mut self, data: &[u8]) {
        self.send(&[data]);
    }

    fn data_parts(&mut self, parts: &[&[u8]]) {
        self.send(parts);
    }

    fn data_from_fd(&mut self, source: &mut FdSource<'_>) -> bool {
        self.out.data_from_fd(self.unique, source)
    }

    fn written(&mut self, n: u32) {
        let out = abi::fuse_write_out {
            size: n,
            padding: 0,
        };
        self.send(&[out.as_bytes()]);
    }

    fn xattr_size(&mut self, n: u32) {
        let out = abi::fuse_getxattr_out {
            size: n,
            padding: 0,
        };
        self.send(&[out.as_bytes()]);
    }

    fn statfs(&mut self, s: &StatFs) {
        let out = abi::fuse_kstatfs {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.bsize,
            padding: 0,
            spare: [0; 6],
        };
        self.send(&[out.as_bytes()]);
    }

    fn offset(&mut self, offset: u64) {
        self.send(&[abi::fuse_lseek_out { offset }.as_bytes()]);
    }

    fn ioctl(&mut self, result: i32, out: &[u8]) {
        let head = abi::fuse_ioctl_out {
            result,
            flags: 0,
            in_iovs: 0,
            out_iovs: 0,
        };
        self.send(&[head.as_bytes(), out]);
    }

    fn dirent(&mut self, e: &DirEntry, plus: Option<&Entry>) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let name = e.name.as_bytes();
        let head = if self.plus { abi::DIRENTPLUS_HEAD } else { 24 };
        let len = abi::dirent_align(head + name.len());
        if self.buf.len() + len > self.dir_limit {
            return false;
        }
        if self.plus {
            // `.` and `..` carry no entry: the kernel links neither.
            let entry = plus.map_or_else(abi::fuse_entry_out::new_zeroed, entry_out);
            self.buf.extend_from_slice(entry.as_bytes());
        }
        let d = abi::fuse_dirent {
            // readdir(3) hides entries with d_ino 0, so `.` and `..` keep theirs.
            ino: e.ino,
            off: e.offset,
            namelen: name.len() as u32,
            typ: file_type(e.kind),
        };
        self.buf.extend_from_slice(d.as_bytes());
        self.buf.extend_from_slice(name);
        let padded = self.buf.len().next_multiple_of(8);
        self.buf.resize(padded, 0);
        true
    }

    fn dir_done(&mut self) {
        let buf = std::mem::take(self.buf);
        self.send(&[&buf]);
        *self.buf = buf;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::Timestamp;
    use zerocopy::FromBytes;

    #[derive(Default)]
    struct Captured(Vec<(u64, i32, Vec<u8>)>);

    impl ReplySink for Captured {
        fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
            self.0.push((unique, error, parts.concat()));
        }
    }

    fn attr() -> Attr {
        Attr {
            ino: 5,
            generation: 1,
            size: 10,
            blocks: 8,
            atime: Timestamp::from_timespec(-1, 500_000_000),
            mtime: Timestamp::from_timespec(100, 1),
            ctime: Timestamp::from_timespec(100, 2),
            crtime: Timestamp::from_timespec(50, 3),
            kind: FileKind::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 1,
            gid: 2,
            rdev: 0,
            blksize: 4096,
            mount_root: false,
        }
    }

    #[test]
    fn negative_entries_have_nodeid_zero_and_a_timeout() {
        let (mut buf, mut cap) = (Vec::new(), Captured::default());
        let neg = Entry {
            attr: None,
            entry_timeout: Duration::from_millis(1500),
            attr_timeout: Duration::ZERO,
        };
        Encoder::new(9, &mut buf, &mut cap).entry(&neg);
        let (unique, error, bytes) = &cap.0[0];
        assert_eq!((*unique, *error, bytes.len()), (9, 0, 128));
        let e = abi::fuse_entry_out::read_from_bytes(bytes).unwrap();
        assert_eq!(
            (e.nodeid, e.entry_valid, e.entry_valid_nsec),
            (0, 1, 500_000_000)
        );
    }

    #[test]
    fn times_before_1970_are_floor_seconds_and_positive_nanoseconds() {
        let a = fuse_attr(&attr());
        assert_eq!((a.atime as i64, a.atimensec), (-1, 500_000_000));
        assert_eq!(a.mode, libc::S_IFREG | 0o644);
        let s = statx_out(&attr(), None, Duration::ZERO);
        assert_eq!((s.stat.btime.tv_sec, s.stat.btime.tv_nsec), (50, 3));
        assert_eq!((s.stat.attributes, s.stat.attributes_mask), (0, 0));
    }

    #[test]
    fn statx_attributes_from_inode_flags() {
        // chattr +a +d +i (FS_APPEND_FL, FS_NODUMP_FL, FS_IMMUTABLE_FL), and FS_NOATIME_FL,
        // which statx has no attribute for.
        let flags: u32 = 0x20 | 0x40 | 0x10 | 0x80;
        let s = statx_out(&attr(), Some(flags), Duration::ZERO);
        let want = libc::STATX_ATTR_APPEND | libc::STATX_ATTR_NODUMP | libc::STATX_ATTR_IMMUTABLE;
        assert_eq!(s.stat.attributes, want as u64);
        assert_eq!(s.stat.attributes_mask & want as u64, want as u64);
        assert_eq!(
            s.stat.attributes_mask & 0x80,
            0,
            "no attribute stands for noatime"
        );
    }

    #[test]
    fn errors_and_open_flags() {
        let (mut buf, mut cap) = (Vec::new(), Captured::default());
        Encoder::new(1, &mut buf, &mut cap).error(Errno::ENOENT);
        assert_eq!(cap.0[0].1, -libc::ENOENT);
        let o = OpenOut {
            fh: 3,
            noflush: true,
            backing_id: Some(4),
            ..OpenOut::default()
        };
        let out = open_out(&o);
        assert_eq!(out.open_flags, fopen::NOFLUSH | fopen::PASSTHROUGH);
        assert_eq!(out.backing_id, 4);
    }

    #[test]
    fn dirents_stop_at_the_limit_and_are_aligned() {
        let (mut buf, mut cap) = (Vec::new(), Captured::default());
        let mut enc = Encoder::new(1, &mut buf, &mut cap).for_readdir(64, false);
        let e = |name: &str, off| DirEntry {
            ino: 2,
            offset: off,
            kind: FileKind::Directory,
            name: name.into(),
            attr: None,
        };
        assert!(enc.dirent(&e("a", 1), None)); // 24 + 1 -> 32
        assert!(enc.dirent(&e("bbbbbbbb", 2), None)); // 24 + 8 -> 32
        assert!(!enc.dirent(&e("c", 3), None));
        enc.dir_done();
        assert_eq!(cap.0[0].2.len(), 64);
        let mut enc = Encoder::new(2, &mut buf, &mut cap).for_readdir(4096, true);
        assert!(enc.dirent(&e(".", 1), None));
        enc.dir_done();
        let bytes = &cap.0[1].2;
        assert_eq!(bytes.len(), abi::dirent_align(abi::DIRENTPLUS_HEAD + 1));
        let entry = abi::fuse_entry_out::read_from_bytes(&bytes[..128]).unwrap();
        assert_eq!(entry.nodeid, 0);
        let d = abi::fuse_dirent::read_from_bytes(&bytes[128..152]).unwrap();
        assert_eq!((d.ino, d.typ), (2, libc::DT_DIR as u32));
    }
}
