//! Directory handles: a host directory stream per handle, listed with `getdents64`.
//!
//! Offsets are the host's `d_off` cookies: the offset of an entry is where the host stream
//! continues after it, so a READDIR at any offset the kernel got from us seeks the host
//! stream there (`lseek(SEEK_SET)`) and carries on exactly, even when entries were added or
//! removed in between. An entry the sink refuses stays buffered for the next call.

use std::ffi::{CString, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Arc;

use memofs_core::{Caller, DirEntry, Errno, FileKind, Ino, Opened, Result, ROOT_INO};
use parking_lot::Mutex;

use crate::attr::attr_of;
use crate::fd::CountedFd;
use crate::host::HostId;
use crate::inode::Inode;
use crate::inode::OpenPin;
use crate::sys;
use crate::PassthroughFs;

/// The `fh` of a READDIR with no OPENDIR before it (handles start at 1).
const NO_HANDLE: u64 = 0;

/// Bytes of `getdents64` records read at once.
const DIRENT_BUF: usize = 32 * 1024;

/// Offset of `d_name` in a `linux_dirent64` (`d_ino` u64, `d_off` i64, `d_reclen` u16,
/// `d_type` u8).
const NAME_OFFSET: usize = 19;

/// An open directory: a host directory stream, opened with the handle or, while a change
/// feed follows the source, by the first READDIR that reaches the server (the kernel keeps
/// listings there, so a directory listed again is listed from its copy, and the host
/// directory, on a distributed filesystem an open and a close through its own client, need
/// not be opened at all).
#[derive(Debug)]
pub(crate) struct OpenDir {
    /// The inode it was opened through.
    pub ino: Ino,
    /// The stream (`None` until a deferred one is opened), one reader at a time.
    pub stream: Mutex<Option<DirStream>>,
    /// Keeps the inode's own descriptor open while the directory is.
    pub _pin: OpenPin,
}

/// One host directory stream.
#[derive(Debug)]
pub(crate) struct DirStream {
    fd: CountedFd,
    buf: Box<[u8]>,
    /// Unconsumed records are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The host offset the stream is at: the `d_off` of the last consumed entry.
    pos: u64,
}

/// One `linux_dirent64` record, copied out of the buffer.
struct RawEntry {
    ino: u64,
    off: u64,
    kind: u8,
    name: OsString,
    len: usize,
}

impl DirStream {
    fn new(fd: CountedFd) -> DirStream {
        DirStream {
            fd,
            buf: vec![0; DIRENT_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            pos: 0,
        }
    }

    /// Positions the stream at `offset` (0 = the beginning).
    fn seek(&mut self, offset: u64) -> Result<()> {
        if offset != self.pos {
            sys::io::lseek(self.fd.as_fd(), offset, libc::SEEK_SET)?;
            self.start = 0;
            self.end = 0;
            self.pos = offset;
        }
        Ok(())
    }

    /// The next entry, without consuming it; `None` at the end.
    fn peek(&mut self) -> Result<Option<RawEntry>> {
        if self.start >= self.end {
            self.end = sys::io::getdents64(self.fd.as_fd(), &mut self.buf)?;
            self.start = 0;
            if self.end == 0 {
                return Ok(None);
            }
        }
        let rec = &self.buf[self.start..self.end];
        let u64_at = |i: usize| u64::from_ne_bytes(rec[i..i + 8].try_into().expect("8 bytes"));
        let len = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
        if len < NAME_OFFSET || len > rec.len() {
            return Err(Errno::EIO);
        }
        let name = &rec[NAME_OFFSET..len];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        Ok(Some(RawEntry {
            ino: u64_at(0),
            off: u64_at(8),
            kind: rec[18],
            name: OsString::from_vec(name.to_vec()),
            len,
        }))
    }

    /// Consumes the entry `peek` returned.
    fn consume(&mut self, e: &RawEntry) {
        self.start += e.len;
        self.pos = e.off;
    }
}

fn kind_of_dtype(t: u8) -> Option<FileKind> {
    Some(match t {
        libc::DT_REG => FileKind::Regular,
        libc::DT_DIR => FileKind::Directory,
        libc::DT_LNK => FileKind::Symlink,
        libc::DT_FIFO => FileKind::Fifo,
        libc::DT_SOCK => FileKind::Socket,
        libc::DT_CHR => FileKind::CharDevice,
        libc::DT_BLK => FileKind::BlockDevice,
        _ => return None,
    })
}

impl PassthroughFs {
    /// OPENDIR: a host stream opened from the directory's `O_PATH` descriptor (`openat` of
    /// `.`, no path resolved). `O_NOATIME` when the atime policy never updates directories.
    /// Deferred while a change feed follows the source (see [`OpenDir`]).
    pub(crate) fn open_dir(&self, _caller: &Caller, ino: Ino) -> Result<Opened> {
        let dir = self.dir_handle(ino, !self.opens_deferred())?;
        Ok(Opened {
            fh: self.dirs.insert(dir),
            ..Opened::default()
        })
    }

    /// A new host stream of directory `ino`, at its beginning.
    pub(crate) fn dir_stream(&self, ino: Ino) -> Result<OpenDir> {
        self.dir_handle(ino, true)
    }

    /// A handle of directory `ino`, its host stream opened now or (`now` false) at the
    /// first READDIR.
    fn dir_handle(&self, ino: Ino, now: bool) -> Result<OpenDir> {
        let inode = self.table.get(ino)?;
        if inode.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        // Pinned first: the descriptor the stream is opened through stays while it is open.
        let pin = OpenPin::new(&inode);
        let stream = if now {
            Some(self.host_stream(&inode)?)
        } else {
            None
        };
        Ok(OpenDir {
            ino,
            _pin: pin,
            stream: Mutex::new(stream),
        })
    }

    /// A host stream of directory `inode`, from its `O_PATH` descriptor.
    fn host_stream(&self, inode: &Inode) -> Result<DirStream> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let fd = self.open_noatime(true, flags, |f| {
            sys::at::openat(inode.fd()?.as_fd(), c".", f)
        })?;
        Ok(DirStream::new(self.budget.keep(fd)?))
    }

    /// READDIR / READDIRPLUS from host offset `offset`. With `plus`, each entry but `.` and
    /// `..` is looked up (one reference, given back with `forget` if the sink refuses it);
    /// names that vanished meanwhile are skipped. Without a handle (`fh` 0: the request
    /// layer declined OPENDIR, see `Backend::sees_every_change`) a stream opened for this
    /// call serves it, sought to `offset` like a handle's.
    pub(crate) fn read_dir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        plus: bool,
        sink: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        let handle = match fh {
            NO_HANDLE => Arc::new(self.dir_stream(ino)?),
            fh => self.dirs.get(fh)?,
        };
        let dir = self.table.get(handle.ino)?;
        let mut stream = handle.stream.lock();
        let stream = match &mut *stream {
            Some(stream) => stream,
            none => none.insert(self.host_stream(&dir)?),
        };
        stream.seek(offset)?;
        let mut emitted = false;
        while let Some(raw) = stream.peek()? {
            let entry = match self.dir_entry(&dir, &raw, plus) {
                Ok(Some(e)) => e,
                Ok(None) => {
                    stream.consume(&raw);
                    continue;
                }
                Err(e) if !emitted => return Err(e),
                // Report what was listed; the error comes back on the next call.
                Err(_) => break,
            };
            if !sink(&entry) {
                if entry.attr.is_some() {
                    self.table.forget(entry.ino, 1);
                }
                break;
            }
            stream.consume(&raw);
            emitted = true;
        }
        Ok(())
    }

    /// The entry to report for `raw`, or `None` when its name no longer exists (here, or
    /// on another machine a moment ago: see [`crate::settling`]).
    fn dir_entry(&self, dir: &Inode, raw: &RawEntry, plus: bool) -> Result<Option<DirEntry>> {
        if self.table.settling.is_gone(dir.ino, raw.name.as_bytes()) {
            return Ok(None);
        }
        let mut entry = DirEntry {
            ino: 0,
            offset: raw.off,
            kind: FileKind::Directory,
            name: raw.name.clone(),
            attr: None,
        };
        let host = HostId {
            dev: dir.host.dev,
            ino: raw.ino,
        };
        match raw.name.as_bytes() {
            b"." => entry.ino = dir.ino,
            b".." if dir.ino == ROOT_INO => entry.ino = ROOT_INO,
            b".." => entry.ino = self.table.ino_hint(host),
            name if plus => {
                let name = CString::new(name).map_err(|_| Errno::EIO)?;
                match self.lookup_name(dir, &name) {
                    Ok((inode, attr)) => {
                        entry.ino = inode.ino;
                        entry.kind = attr.kind;
                        entry.attr = Some(attr);
                    }
                    Err(Errno::ENOENT) => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            name => {
                entry.ino = self.table.ino_hint(host);
                entry.kind = match kind_of_dtype(raw.kind) {
                    Some(kind) => kind,
                    None => {
                        let name = CString::new(name).map_err(|_| Errno::EIO)?;
                        match sys::at::statx(dir.fd()?.as_fd(), &name) {
                            Ok(st) => attr_of(entry.ino, &st)?.kind,
                            Err(Errno::ENOENT) => return Ok(None),
                            Err(e) => return Err(e),
                        }
                    }
                };
            }
        }
        Ok(Some(entry))
    }
}
