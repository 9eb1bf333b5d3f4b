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

use std::collections::{BTreeSet, HashMap};
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
use names::Names;

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
        let (kind, times, size) = kind_of(inode, &s, by_number);
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

/// What an inode's record says of its kind, its times and (a file) its size.
///
/// A kernel-backed file's data file keeps its times (atime, mtime, the ctime of its data),
/// which a stream carrying the data sets on the new data file; with `by_number` the data
/// file is handed over and keeps them itself (asking would cost a stat of it).
fn kind_of(inode: &Inode, s: &Saved, by_number: bool) -> (Kind, [i128; 4], u64) {
    let mut times = s.times.map(|t| t.0);
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
            kernel => {
                let attr = inode.attr();
                if kernel.is_some() {
                    times[..3].copy_from_slice(&[attr.atime.0, attr.mtime.0, attr.ctime.0]);
                }
                Kind::File { size: attr.size }
            }
        },
        NodeData::Symlink(l) => Kind::Symlink {
            target: l.target().to_vec(),
        },
        NodeData::Special { rdev, .. } => Kind::Special { rdev: *rdev },
    };
    let size = match kind {
        Kind::File { size } => size,
        _ => 0,
    };
    (kind, times, size)
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
        let stated = match kind {
            Kind::Dir { .. } => FileKind::Directory,
            Kind::File { .. } | Kind::Adopted { .. } => FileKind::Regular,
            Kind::Symlink { .. } => FileKind::Symlink,
            Kind::Special { .. } => match want {
                FileKind::Regular | FileKind::Directory | FileKind::Symlink => FileKind::Fifo,
                special => special,
            },
        };
        if stated != want {
            return Err(invalid(format!(
                "inode {}: mode and kind differ",
                saved.ino
            )));
        }
        let size = match kind {
            Kind::File { size } => Some(size),
            _ => None,
        };
        let inode = if saved.ino == ROOT_INO {
            if want != FileKind::Directory {
                return Err(invalid("a root that is no directory"));
            }
            let root = fs.table.get(ROOT_INO).map_err(|e| errno("the root", e))?;
            root.restore(&saved);
            root
        } else {
            // Everything that can fail is checked before the data is taken: a handed-over
            // data file is unlinked when its inode goes.
            if fs.table.get(saved.ino).is_ok() {
                return Err(invalid(format!("inode {} twice", saved.ino)));
            }
            fs.limits
                .charge_inode()
                .map_err(|e| errno("room for an inode", e))?;
            let symlink = match &kind {
                Kind::Symlink { target } if !target.is_empty() && target.len() <= 4096 => {
                    Some(Symlink::new(target))
                }
                Kind::Symlink { .. } => return Err(invalid("a symlink target's length")),
                _ => None,
            };
            fs.charge_meta(symlink.as_ref().map_or(0, Symlink::charged_bytes))
                .map_err(|e| errno("room for a symlink", e))?;
            let data = self.contents(&saved, &kind, want, symlink)?;
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

    /// What an inode of `kind` holds (`symlink`: its target, made already).
    fn contents(
        &self,
        saved: &Saved,
        kind: &Kind,
        want: FileKind,
        symlink: Option<Symlink>,
    ) -> io::Result<NodeData> {
        let fs = self.fs;
        Ok(match *kind {
            Kind::Dir { parent, .. } => NodeData::new_dir(parent),
            Kind::File { .. } => NodeData::File(
                match self.staged {
                    true => fs.take_staged(saved.ino),
                    false => None,
                }
                .map_or_else(|| fs.new_regular(saved.opens > 0), Ok)
                .map_err(|e| errno("a data file", e))?,
            ),
            Kind::Symlink { .. } => match symlink {
                Some(s) => NodeData::Symlink(s),
                None => return Err(invalid("a symlink without its target")),
            },
            Kind::Special { rdev } => NodeData::Special { kind: want, rdev },
            Kind::Adopted { data } => match (&fs.store, self.by_number) {
                (Some(store), true) => NodeData::File(RegularFile::Kernel(
                    store
                        .existing_file(data)
                        .map_err(|e| errno(&format!("data file {data}"), e))?,
                )),
                _ => return Err(invalid("a file by data file number outside a handover")),
            },
        })
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

#[path = "migrate_names.rs"]
mod names;

#[cfg(test)]
#[path = "migrate_tests.rs"]
mod tests;
