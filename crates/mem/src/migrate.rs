//! The whole filesystem as a state stream (see [`memofs_core::migrate`]), so that it moves
//! with its virtual machine: every inode under its own number (the guest's kernel holds
//! node ids), with its lookup and open counts (references and handles the guest holds,
//! unlinked files among them), every name under its readdir cookie (a listing in progress
//! goes on), every extended attribute and every byte of data.
//!
//! The stream is written while no request runs and read into a new filesystem before any
//! request is served. Records, in order: [`Record::Fs`]; per inode, in number order,
//! [`Record::Inode`], then its [`Record::Xattr`]s, then its directory [`Record::Entry`]s or
//! its file data, each [`Record::Data`] followed by a frame of raw bytes (at most
//! [`CHUNK`]); last [`Record::End`] with the totals the reader checks. Only holes are left
//! out, so the destination holds what the source held, no more.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use memofs_core::migrate::{invalid, FrameReader, FrameWriter, Migrate, Sent};
use memofs_core::{Errno, FileKind, Ino, Timestamp, ROOT_INO};
use serde::{Deserialize, Serialize};
use triomphe::Arc;

use crate::dir::Slot;
use crate::inode::{Inode, Meta, NodeData, Saved};
use crate::precopy::{chunk_extents, extents, CHUNK};
use crate::regular::RegularFile;
use crate::symlink::Symlink;
use crate::MemFs;

/// The room a load makes at once for the inodes a stream says it holds (past it, the tables
/// grow as they fill: a stream's word is not memory to hand out).
fn reserved(inodes: u64) -> usize {
    inodes.min(1 << 22) as usize
}

/// Open counts past this are a corrupt stream (each costs the reader a step).
const MAX_OPENS: u32 = 1 << 20;

/// One record of the stream.
#[derive(Serialize, Deserialize, Debug)]
enum Record {
    /// The filesystem as a whole; with `precopy`, the data a pre-copy channel carried
    /// (its session, frames and digest) is the files' data, and the records of each file
    /// give only the chunks it did not carry, each cleared and then filled.
    Fs {
        next_ino: Ino,
        inodes: u64,
        precopy: Option<([u8; 16], u64, [u8; 32])>,
    },
    /// An inode; the records up to the next one are its own.
    Inode {
        ino: Ino,
        mode: u32,
        uid: u32,
        gid: u32,
        nlink: u32,
        flags: u32,
        lookups: u32,
        opens: u32,
        /// atime, mtime, ctime, crtime in nanoseconds.
        times: [i128; 4],
        kind: Kind,
    },
    /// An extended attribute of the current inode.
    Xattr { name: Vec<u8>, value: Vec<u8> },
    /// An entry of the current inode, a directory.
    Entry {
        cookie: u64,
        name: Vec<u8>,
        ino: Ino,
        /// The target's `S_IFMT` bits.
        kind: u32,
    },
    /// Data of the current inode, a regular file, at `offset`: the next frame's bytes.
    Data { offset: u64 },
    /// The current inode, a regular file, holds nothing in `[offset, offset + len)` but
    /// what `Data` records put there (pre-copy: the chunk's content as the channel sent it
    /// is dropped).
    Clear { offset: u64, len: u64 },
    /// The end: what the reader must have arrived at.
    End { inodes: u64, bytes: u64 },
    /// The current inode, a regular file, has `[offset, offset + len)` allocated past its
    /// end (`fallocate` keeping the size): zeros that count against `size=`.
    Allocated { offset: u64, len: u64 },
}

/// What an inode's kind keeps besides data and entries.
#[derive(Serialize, Deserialize, Debug)]
enum Kind {
    Dir {
        parent: Ino,
        next_cookie: u64,
        removed: bool,
    },
    File {
        size: u64,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// FIFO, socket or device node (the kind is in the mode).
    Special {
        rdev: u32,
    },
    /// A regular file whose data stays where it is: the data file of this number in the
    /// private tmpfs handed over with the state (a handover between two server processes on
    /// one machine, [`MemFs::save_handover`]; refused in any other stream).
    Adopted {
        data: u64,
    },
}

fn put(out: &mut FrameWriter<'_>, r: &Record, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    let bytes = postcard::to_extend(r, std::mem::take(buf)).map_err(invalid)?;
    out.frame(&bytes)?;
    *buf = bytes;
    Ok(())
}

fn get(input: &mut FrameReader<'_>) -> io::Result<Record> {
    let frame = input.frame()?;
    postcard::from_bytes(frame).map_err(|e| invalid(format!("frame {}: {e}", input.frames)))
}

fn errno(what: &str, e: Errno) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Migrate for MemFs {
    fn save(&self, out: &mut FrameWriter<'_>) -> io::Result<()> {
        self.save_stream(out, false)
    }

    fn load(&self, input: &mut FrameReader<'_>) -> io::Result<()> {
        self.load_stream(input, false)
    }

    fn precopy(&self) -> Option<&dyn memofs_core::migrate::Precopy> {
        Some(self)
    }
}

impl MemFs {
    /// Writes the state for another server process on this machine that takes over the
    /// private tmpfs too ([`kernel_data::BackingStore::handover`]): kernel-backed files are
    /// named by their data file's number instead of carrying their data.
    ///
    /// [`kernel_data::BackingStore::handover`]: crate::kernel_data::BackingStore::handover
    pub fn save_handover(&self, out: &mut FrameWriter<'_>) -> io::Result<()> {
        self.save_stream(out, true)
    }

    /// Reads what [`MemFs::save_handover`] wrote, into a new filesystem on the handed-over
    /// store ([`MemFs::adopting`]).
    pub fn load_handover(&self, input: &mut FrameReader<'_>) -> io::Result<()> {
        self.load_stream(input, true)
    }

    fn save_stream(&self, out: &mut FrameWriter<'_>, by_number: bool) -> io::Result<()> {
        let precopy = match by_number {
            true => None,
            false => self.take_precopy(),
        };
        let mut inodes = self.table.all();
        inodes.sort_unstable_by_key(|i| i.ino);
        let mut buf = Vec::new();
        let fs = Record::Fs {
            next_ino: self.table.next_ino(),
            inodes: inodes.len() as u64,
            precopy: precopy
                .as_ref()
                .map(|(s, _)| (s.session, s.frames, s.digest)),
        };
        put(out, &fs, &mut buf)?;
        let left = precopy.as_ref().map(|(_, dirty)| dirty);
        for inode in &inodes {
            self.save_inode(inode, (left, by_number), out, &mut buf)?;
        }
        let end = Record::End {
            inodes: self.limits.inodes(),
            bytes: self.limits.bytes(),
        };
        put(out, &end, &mut buf)?;
        out.flush()
    }

    fn load_stream(&self, input: &mut FrameReader<'_>, by_number: bool) -> io::Result<()> {
        if self.table.len() != 1
            || !self
                .table
                .get(ROOT_INO)
                .is_ok_and(|r| r.dir().is_ok_and(|d| d.read().is_empty()))
        {
            return Err(io::Error::other(
                "the filesystem to load into already holds files",
            ));
        }
        let Record::Fs {
            next_ino,
            inodes,
            precopy,
        } = get(input)?
        else {
            return Err(invalid("does not start with the filesystem's record"));
        };
        if let Some((session, frames, digest)) = precopy {
            self.await_staged(&Sent {
                session,
                frames,
                digest,
            })?;
        }
        self.table.reserve(reserved(inodes));
        let mut loader = Loader {
            fs: self,
            current: None,
            names: Names::with_capacity(reserved(inodes)),
            inodes: 0,
            data_ctime: Timestamp::default(),
            staged: precopy.is_some(),
            by_number,
            past_end: Vec::new(),
        };
        let loaded = loader.load(input, inodes, next_ino);
        self.drop_staged();
        loaded
    }
}

impl Loader<'_> {
    /// The records after the filesystem's, up to the end.
    fn load(&mut self, input: &mut FrameReader<'_>, inodes: u64, next_ino: Ino) -> io::Result<()> {
        loop {
            match get(input)? {
                Record::End {
                    inodes: want_inodes,
                    bytes,
                } => {
                    self.finish_inode()?;
                    // What a pre-copy sent of files deleted since is not theirs to count.
                    self.fs.drop_staged();
                    self.check(inodes, want_inodes, bytes)?;
                    match &self.fs.store {
                        // A handed-over store keeps what its first server loaded.
                        Some(store) if !self.by_number => store.loaded(self.data_ctime),
                        _ => {}
                    }
                    self.fs.table.skip_to(next_ino);
                    return Ok(());
                }
                Record::Data { offset } => {
                    let data = input.frame()?;
                    self.data(offset, data)?;
                }
                Record::Clear { offset, len } => self.clear(offset, len)?,
                Record::Allocated { offset, len } => {
                    self.current("an allocated range")?;
                    if self.past_end.len() >= MAX_PAST_END {
                        return Err(invalid("too many ranges allocated past an end"));
                    }
                    self.past_end.push((offset, len));
                }
                r => self.record(r)?,
            }
        }
    }
}

impl MemFs {
    /// Writes one inode's records.
    /// `left`: after a pre-copy, the chunks of each file it did not carry (only those are
    /// written); `by_number`: kernel-backed files are named by their data file's number.
    fn save_inode(
        &self,
        inode: &Inode,
        (left, by_number): (Option<&HashMap<Ino, BTreeSet<u64>>>, bool),
        out: &mut FrameWriter<'_>,
        buf: &mut Vec<u8>,
    ) -> io::Result<()> {
        let s = inode.saved();
        let mut times = s.times.map(|t| t.0);
        // A file's size and, kernel-backed, the times its data file keeps (atime, mtime,
        // the ctime of its data), which a stream carrying the data sets on the new one; a
        // handed-over data file keeps them itself (and asking costs a stat of it).
        let mut size = 0;
        if let NodeData::File(f) = &inode.data {
            if !(by_number && f.kernel().is_some()) {
                let attr = inode.attr();
                size = attr.size;
                if f.kernel().is_some() {
                    times[0] = attr.atime.0;
                    times[1] = attr.mtime.0;
                    times[2] = attr.ctime.0;
                }
            }
        }
        let kind = match &inode.data {
            NodeData::Dir(d) => {
                let d = d.read();
                Kind::Dir {
                    parent: d.parent,
                    next_cookie: d.next_cookie(),
                    removed: d.removed,
                }
            }
            NodeData::File(f) => match f.kernel() {
                Some(k) if by_number => Kind::Adopted { data: k.number() },
                _ => Kind::File { size },
            },
            NodeData::Symlink(l) => Kind::Symlink {
                target: l.target().to_vec(),
            },
            NodeData::Special { rdev, .. } => Kind::Special { rdev: *rdev },
        };
        let record = Record::Inode {
            ino: s.ino,
            mode: s.meta.mode,
            uid: s.meta.uid,
            gid: s.meta.gid,
            nlink: s.nlink,
            flags: s.flags,
            lookups: s.lookups,
            opens: s.opens,
            times,
            kind,
        };
        put(out, &record, buf)?;
        let xattrs: Vec<(Vec<u8>, Vec<u8>)> = {
            let x = inode.xattrs.lock();
            x.list()
                .split(|&b| b == 0)
                .filter(|n| !n.is_empty())
                .filter_map(|n| Some((n.to_vec(), x.value(n)?.to_vec())))
                .collect()
        };
        for (name, value) in xattrs {
            put(out, &Record::Xattr { name, value }, buf)?;
        }
        match &inode.data {
            NodeData::Dir(d) => {
                let d = d.read();
                for (cookie, name, slot) in d.entries_after(0) {
                    let e = Record::Entry {
                        cookie,
                        name: name.as_bytes().to_vec(),
                        ino: slot.ino,
                        kind: slot.kind.mode_bits(),
                    };
                    put(out, &e, buf)?;
                }
                Ok(())
            }
            NodeData::File(f) if by_number && f.kernel().is_some() => Ok(()),
            NodeData::File(f) => {
                for (offset, len) in f.allocated_past_end() {
                    put(out, &Record::Allocated { offset, len }, buf)?;
                }
                match left {
                    None => save_data(f, 0, size, out, buf),
                    Some(left) => {
                        let Some(chunks) = left.get(&inode.ino) else {
                            return Ok(());
                        };
                        for (chunk, pieces) in chunk_extents(f, chunks)? {
                            let (offset, len) = (chunk * CHUNK, CHUNK);
                            put(out, &Record::Clear { offset, len }, buf)?;
                            save_pieces(f, &pieces, out, buf)?;
                        }
                        Ok(())
                    }
                }
            }
            _ => Ok(()),
        }
    }
}

/// Writes the data of `f` in `[start, end)`, extent by extent (holes left out).
fn save_data(
    f: &RegularFile,
    start: u64,
    end: u64,
    out: &mut FrameWriter<'_>,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    save_pieces(f, &extents(f, start, end)?, out, buf)
}

/// Writes the data of `f` in each of `pieces` (offset, length of at most [`CHUNK`]).
fn save_pieces(
    f: &RegularFile,
    pieces: &[(u64, u64)],
    out: &mut FrameWriter<'_>,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let mut data = Vec::with_capacity(CHUNK as usize);
    for &(offset, len) in pieces {
        data.clear();
        f.read(offset, len as u32, &mut data, true)
            .map_err(|e| errno("reading data", e))?;
        if data.is_empty() {
            return Err(io::Error::other(format!("no data at {offset}")));
        }
        put(out, &Record::Data { offset }, buf)?;
        out.frame(&data)?;
    }
    Ok(())
}

/// What a stream's entries say of the inodes they name, checked against what the inodes say
/// once every record is in: each names an inode of its kind; a directory has one name (none
/// once removed), in the directory its `..` says, and leads up to the root; every link
/// count is what the names make it (as tmpfs: 2 and a directory's subdirectories, a file's
/// names). Every name past a file's first is charged as an inode as it arrives (as tmpfs),
/// so that a stream cannot make more names than the limits allow.
#[derive(Default)]
struct Names {
    /// Each entry's directory, target and the kind the entry says.
    entries: Vec<(Ino, Ino, FileKind)>,
    /// Names per inode.
    count: HashMap<Ino, u32>,
}

impl Names {
    fn with_capacity(n: usize) -> Names {
        Names {
            entries: Vec::with_capacity(n),
            count: HashMap::with_capacity(n),
        }
    }

    fn add(&mut self, fs: &MemFs, dir: Ino, ino: Ino, kind: FileKind) -> io::Result<()> {
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

    fn check(&self, fs: &MemFs) -> io::Result<()> {
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

/// Rebuilds a filesystem record by record.
struct Loader<'a> {
    fs: &'a MemFs,
    /// The inode the records are about, with what is set once its data is in (and a
    /// file's size).
    current: Option<(Arc<Inode>, Saved, Option<u64>)>,
    /// What the entries say, checked at the end against the inodes.
    names: Names,
    inodes: u64,
    /// The latest ctime a kernel-backed data file got from the load.
    data_ctime: Timestamp,
    /// Regular files start from what a pre-copy channel sent (see [`crate::precopy`]).
    staged: bool,
    /// A handover's state: kernel-backed files are named by their data file's number.
    by_number: bool,
    /// The current file's ranges allocated past its end, allocated once its size is set.
    past_end: Vec<(u64, u64)>,
}

/// Ranges allocated past one file's end that a stream may name (each costs the reader an
/// entry until the file is done).
const MAX_PAST_END: usize = 1 << 16;

impl Loader<'_> {
    fn current(&self, what: &str) -> io::Result<&Arc<Inode>> {
        match &self.current {
            Some((inode, _, _)) => Ok(inode),
            None => Err(invalid(format!("{what} before any inode"))),
        }
    }

    fn record(&mut self, r: Record) -> io::Result<()> {
        match r {
            Record::Inode {
                ino,
                mode,
                uid,
                gid,
                nlink,
                flags,
                lookups,
                opens,
                times,
                kind,
            } => {
                self.finish_inode()?;
                if opens > MAX_OPENS {
                    return Err(invalid(format!("inode {ino} open {opens} times")));
                }
                let saved = Saved {
                    ino,
                    meta: Meta { mode, uid, gid },
                    nlink,
                    flags,
                    lookups,
                    opens,
                    times: times.map(Timestamp),
                };
                self.inode(saved, kind)
            }
            Record::Xattr { name, value } => {
                let inode = self.current("an extended attribute")?.clone();
                if crate::xattr::check_name(&name).is_err()
                    || value.len() > crate::xattr::XATTR_SIZE_MAX
                {
                    return Err(invalid(format!("extended attribute {name:?}")));
                }
                let cost = crate::xattr::cost(&name, &value);
                self.fs
                    .charge_meta(cost)
                    .map_err(|e| errno("room for an extended attribute", e))?;
                inode.xattrs.lock().set(&name, &value);
                Ok(())
            }
            Record::Entry {
                cookie,
                name,
                ino,
                kind,
            } => {
                let dir = self.current("an entry")?.clone();
                let kind = FileKind::from_mode(kind)
                    .ok_or_else(|| invalid(format!("entry of kind {kind:o}")))?;
                let name = OsStr::from_bytes(&name);
                if name.is_empty() || name.len() > 255 || name.as_bytes().contains(&b'/') {
                    return Err(invalid(format!("entry name {name:?}")));
                }
                dir.dir()
                    .map_err(|_| invalid("an entry for a non-directory"))?
                    .write()
                    .insert_saved(name, Slot { ino, kind }, cookie)
                    .map_err(|e| invalid(format!("entry {name:?} ({e})")))?;
                self.names.add(self.fs, dir.ino, ino, kind)
            }
            other => Err(invalid(format!("unexpected record {other:?}"))),
        }
    }

    /// Creates (or, for the root, updates) the inode `saved` describes.
    fn inode(&mut self, saved: Saved, kind: Kind) -> io::Result<()> {
        let fs = self.fs;
        let want = FileKind::from_mode(saved.meta.mode)
            .ok_or_else(|| invalid(format!("inode {} of mode {:o}", saved.ino, saved.meta.mode)))?;
        let size = match kind {
            Kind::File { size } => Some(size),
            _ => None,
        };
        let data = match kind {
            Kind::Dir { parent, .. } => NodeData::new_dir(parent),
            Kind::File { .. } => NodeData::File(
                match self.staged {
                    true => fs.take_staged(saved.ino),
                    false => None,
                }
                .map_or_else(|| fs.new_regular(saved.opens > 0), Ok)
                .map_err(|e| errno("a data file", e))?,
            ),
            Kind::Symlink { ref target } if !target.is_empty() && target.len() <= 4096 => {
                NodeData::Symlink(Symlink::new(target))
            }
            Kind::Symlink { .. } => return Err(invalid("a symlink target's length")),
            Kind::Special { rdev } => NodeData::Special { kind: want, rdev },
            Kind::Adopted { data } => match (&fs.store, self.by_number) {
                (Some(store), true) => NodeData::File(RegularFile::Kernel(
                    store
                        .existing_file(data)
                        .map_err(|e| errno(&format!("data file {data}"), e))?,
                )),
                _ => return Err(invalid("a file by data file number outside a handover")),
            },
        };
        if data.kind() != want {
            return Err(invalid(format!(
                "inode {}: mode and kind differ",
                saved.ino
            )));
        }
        let inode = if saved.ino == ROOT_INO {
            if want != FileKind::Directory {
                return Err(invalid("a root that is no directory"));
            }
            let root = fs.table.get(ROOT_INO).map_err(|e| errno("the root", e))?;
            root.restore(&saved);
            root
        } else {
            fs.limits
                .charge_inode()
                .map_err(|e| errno("room for an inode", e))?;
            let sym = match &data {
                NodeData::Symlink(s) => s.charged_bytes(),
                _ => 0,
            };
            fs.charge_meta(sym)
                .map_err(|e| errno("room for a symlink", e))?;
            fs.table
                .insert_saved(&saved, data)
                .map_err(|_| invalid(format!("inode {} twice", saved.ino)))?
        };
        if let (
            Kind::Dir {
                parent,
                next_cookie,
                removed,
            },
            Ok(d),
        ) = (kind, inode.dir())
        {
            d.write().restore(parent, next_cookie, removed);
        }
        if let Some(k) = inode.kernel_file() {
            for _ in 0..saved.opens {
                k.open();
            }
            if saved.flags & memofs_core::inode_flags::NOATIME != 0 {
                k.set_noatime(true).map_err(|e| errno("noatime", e))?;
            }
        }
        self.inodes += 1;
        self.current = Some((inode, saved, size));
        Ok(())
    }

    /// File data for the current inode.
    fn data(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let inode = self.current("data")?;
        let file = inode.file().map_err(|_| invalid("data for a non-file"))?;
        let n = file
            .write(&self.fs.limits, offset, data)
            .map_err(|e| errno("writing data", e))?;
        if n as usize != data.len() {
            return Err(io::Error::other(format!(
                "{n} of {} bytes written",
                data.len()
            )));
        }
        Ok(())
    }

    /// The current inode's data in `[offset, offset + len)` goes (pre-copy).
    fn clear(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let inode = self.current("a cleared range")?;
        let file = inode
            .file()
            .map_err(|_| invalid("a cleared range of a non-file"))?;
        crate::precopy::clear(file, &self.fs.limits, offset, len)
    }

    /// Sets what the data alone does not give: the size a file ends with (past its last
    /// extent) and a kernel-backed file's times, which writing its data file moved (the
    /// inode's own fields were set when it was made, and nothing since changed them).
    fn finish_inode(&mut self) -> io::Result<()> {
        let Some((inode, saved, size)) = self.current.take() else {
            return Ok(());
        };
        if let (Some(size), Ok(file)) = (size, inode.file()) {
            file.truncate(&self.fs.limits, size)
                .map_err(|e| errno("setting the size", e))?;
            for (offset, len) in std::mem::take(&mut self.past_end) {
                if offset < size {
                    return Err(invalid("a range allocated past the end starts before it"));
                }
                file.fallocate(&self.fs.limits, offset, len, libc::FALLOC_FL_KEEP_SIZE)
                    .map_err(|e| errno("allocating past the end", e))?;
            }
        }
        if !self.past_end.is_empty() {
            return Err(invalid("a range allocated past the end of no regular file"));
        }
        // A file whose data stayed in its data file (`size` is `None`) keeps its times too.
        if let (Some(k), Some(_)) = (inode.kernel_file(), size) {
            let [atime, mtime, ..] = saved.times;
            k.set_times(Some(atime), Some(mtime))
                .map_err(|e| errno("setting times", e))?;
            self.data_ctime = self.data_ctime.max(k.data_ctime().unwrap_or_default());
        }
        Ok(())
    }

    /// The totals the source counted against what was rebuilt.
    fn check(&self, inodes: u64, want_inodes: u64, bytes: u64) -> io::Result<()> {
        if self.inodes != inodes || self.fs.limits.inodes() != want_inodes {
            return Err(invalid(format!(
                "{} inodes rebuilt, {} counted; the source had {inodes} ({want_inodes} counted)",
                self.inodes,
                self.fs.limits.inodes()
            )));
        }
        self.names.check(self.fs)?;
        if self.fs.limits.bytes() != bytes {
            return Err(invalid(format!(
                "{} bytes rebuilt, the source had {bytes}",
                self.fs.limits.bytes()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "migrate_tests.rs"]
mod tests;
