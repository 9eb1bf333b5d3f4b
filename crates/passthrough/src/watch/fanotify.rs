//! fanotify source: an inode mark per known directory (or one filesystem mark), file
//! handles to name inodes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;

use memofs_core::{Errno, FileKind, Ino, Result};
use parking_lot::Mutex;

use super::{Change, ExportMount, Parts, Source};
use crate::fd::ProcSelf;
use crate::host::HostId;
use crate::inode::{Inode, TableHook};
use crate::sys;

/// Events watched on each known directory and its children.
const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ATTRIB
    | libc::FAN_MODIFY
    | libc::FAN_ONDIR
    | libc::FAN_EVENT_ON_CHILD;

/// Name-changing events.
const DIRENT_EVENTS: u64 =
    libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO;

/// `FAN_UNLIMITED_MARKS`, missing from libc.
const FAN_UNLIMITED_MARKS: u32 = 0x0000_0020;

const INIT_FLAGS: u32 = libc::FAN_CLASS_NOTIF
    | libc::FAN_CLOEXEC
    | libc::FAN_NONBLOCK
    | libc::FAN_REPORT_DFID_NAME
    | libc::FAN_REPORT_FID;

/// Optional flags, tried in order until the kernel accepts: `FAN_REPORT_TARGET_FID` (5.17)
/// names the created or deleted child in name events; the unlimited queue and marks need
/// `CAP_SYS_ADMIN`.
const EXTRA_FLAGS: [u32; 4] = [
    libc::FAN_REPORT_TARGET_FID | libc::FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS,
    libc::FAN_REPORT_TARGET_FID,
    libc::FAN_UNLIMITED_QUEUE | FAN_UNLIMITED_MARKS,
    0,
];

/// Bytes of events read at once.
const EVENT_BUF: usize = 64 * 1024;

/// A file handle qualified by its filesystem: `(fsid, handle_type, handle)`.
type HandleKey = ([u8; 8], i32, Vec<u8>);

#[derive(Default)]
struct Maps {
    by_handle: HashMap<HandleKey, Ino>,
    by_ino: HashMap<Ino, HandleKey>,
    /// fsid of each host device seen.
    fsids: HashMap<u64, [u8; 8]>,
    /// Devices whose directories could not be marked (warned about once).
    unmarkable: HashSet<u64>,
}

struct Shared {
    fan: OwnedFd,
    proc: Arc<ProcSelf>,
    /// The device whose whole filesystem one mark watches (its directories need none).
    fs_marked: Option<u64>,
    /// Handles of the marked filesystem's non-directories are decoded when an event needs
    /// them instead of recorded for every inode (see [`Lazy`]).
    lazy: Option<Lazy>,
    /// Lock order 4.
    maps: Mutex<Maps>,
}

/// Handles decoded on demand, for the filesystem the one filesystem mark watches, when the
/// server may open handles (`CAP_DAC_READ_SEARCH`). Recording a handle costs every lookup,
/// create and forget of a file a `name_to_handle_at` and two map updates under the lock the
/// table hook takes, on the request path; an event
/// about a file, rare next to them and never one the server caused (skipped by pid first),
/// instead costs an `open_by_handle_at` and a `statx`. Directories
/// are still recorded: name events carry their handles, and `Everything` needs none.
struct Lazy {
    /// The filesystem's `fsid` as events report it.
    fsid: [u8; 8],
    /// The host device of that filesystem.
    dev: u64,
    /// A descriptor on it to open handles against.
    mount: OwnedFd,
}

impl Lazy {
    /// Set up for the root's filesystem when it is a tmpfs and opening the root's own handle
    /// works. Only tmpfs: it opens the handle of a file deleted while the server holds it
    /// (tested), which a host delete needs to name the deleted inode; other filesystems may
    /// answer `ESTALE` there (ext4 for unlinked inodes), and keep recording every handle.
    fn probe(proc: &ProcSelf, root: &Inode, key: &HandleKey) -> Option<Lazy> {
        let fd = root.fd().ok()?;
        let tmpfs = sys::io::fstatfs(fd.as_fd()).is_ok_and(|st| st.f_type == libc::TMPFS_MAGIC);
        if !tmpfs {
            return None;
        }
        // open_by_handle_at refuses an O_PATH descriptor as its mount argument.
        let opened = proc
            .reopen(fd.as_fd(), libc::O_RDONLY | libc::O_DIRECTORY)
            .and_then(|mount| sys::at::open_by_handle(mount.as_fd(), key.1, &key.2).map(|_| mount));
        let mount = match opened {
            Ok(mount) => mount,
            Err(e) => {
                log::info!("passthrough: recording every file's handle (open_by_handle_at: {e})");
                return None;
            }
        };
        Some(Lazy {
            fsid: key.0,
            dev: root.host.dev,
            mount,
        })
    }

    /// Whether `inode`'s handle is left to be decoded on demand.
    fn covers(&self, inode: &Inode) -> bool {
        inode.kind != FileKind::Directory && inode.host.dev == self.dev
    }

    /// The host identity of the object `key` names, if it is on this filesystem and still
    /// exists.
    fn resolve(&self, key: &HandleKey) -> Option<HostId> {
        if key.0 != self.fsid {
            return None;
        }
        let fd = sys::at::open_by_handle(self.mount.as_fd(), key.1, &key.2).ok()?;
        let st = sys::at::statx_fd(fd.as_fd()).ok()?;
        Some(HostId::of(&st))
    }
}

impl Shared {
    /// Whether `inode` is a directory that needs its own mark.
    fn needs_mark(&self, inode: &Inode) -> bool {
        inode.kind == FileKind::Directory && self.fs_marked != Some(inode.host.dev)
    }

    fn mark(&self, dir: &Inode, flags: u32) -> Result<()> {
        let fd = dir.fd_for_hook()?;
        let name = ProcSelf::name(fd.as_fd());
        let flags = flags | libc::FAN_MARK_ONLYDIR;
        sys::notify::fanotify_mark(self.fan.as_fd(), flags, MASK, self.proc.dir(), &name)
    }

    fn key_locked(maps: &mut Maps, inode: &Inode) -> Result<HandleKey> {
        let fd = inode.fd_for_hook()?;
        let fsid = match maps.fsids.get(&inode.host.dev) {
            Some(f) => *f,
            None => {
                let st = sys::io::fstatfs(fd.as_fd())?;
                // SAFETY: `fsid_t` is two C ints (the kernel's `__kernel_fsid_t`), 8 bytes
                // with no padding; reading them as bytes is what fanotify reports.
                let f: [u8; 8] = unsafe { std::mem::transmute(st.f_fsid) };
                maps.fsids.insert(inode.host.dev, f);
                f
            }
        };
        let (ty, handle) = sys::at::file_handle(fd.as_fd())?;
        Ok((fsid, ty, handle))
    }
}

/// The table hook: records handles of every inode, marks every directory.
struct Hook(Arc<Shared>);

impl TableHook for Hook {
    fn added(&self, inode: &Inode) {
        if self.0.lazy.as_ref().is_some_and(|l| l.covers(inode)) {
            return;
        }
        let mut maps = self.0.maps.lock();
        match Shared::key_locked(&mut maps, inode) {
            Ok(key) => {
                maps.by_handle.insert(key.clone(), inode.ino);
                maps.by_ino.insert(inode.ino, key);
            }
            Err(e) => log::debug!("passthrough: no file handle for inode {}: {e}", inode.ino),
        }
        if self.0.needs_mark(inode) {
            inode.keep_for_watcher();
            if let Err(e) = self.0.mark(inode, libc::FAN_MARK_ADD) {
                if maps.unmarkable.insert(inode.host.dev) {
                    log::warn!(
                        "passthrough: cannot watch directories on device {:#x} (first: inode {}): {e}",
                        inode.host.dev,
                        inode.ino
                    );
                }
            }
        }
    }

    fn removed(&self, inode: &Inode) {
        if self.0.lazy.as_ref().is_some_and(|l| l.covers(inode)) {
            return;
        }
        let mut maps = self.0.maps.lock();
        if let Some(key) = maps.by_ino.remove(&inode.ino) {
            maps.by_handle.remove(&key);
        }
        if self.0.needs_mark(inode) {
            let _ = self.0.mark(inode, libc::FAN_MARK_REMOVE);
        }
    }
}

/// Opens a fanotify group and checks that the export root can be marked. When the export is
/// its filesystem's root, one filesystem mark replaces the per-directory marks (see
/// [`mark_filesystem`]); with a private mount, data writes made through it are ignored at
/// the source (see [`ignore_own_writes`]).
pub(super) fn open(proc: &Arc<ProcSelf>, root: &Inode, export: ExportMount) -> Result<Parts> {
    let mut fan = Err(Errno::EINVAL);
    for extra in EXTRA_FLAGS {
        fan = sys::notify::fanotify_init(INIT_FLAGS | extra);
        if !matches!(fan, Err(Errno::EINVAL | Errno::EPERM)) {
            break;
        }
    }
    let fan = fan?;
    let fs_marked = match export.whole_filesystem {
        true => match mark_filesystem(&fan, proc, root) {
            Ok(()) => Some(root.host.dev),
            Err(e) => {
                log::info!("passthrough: marking directories one by one (filesystem mark: {e})");
                None
            }
        },
        false => None,
    };
    let mut maps = Maps::default();
    let root_key = Shared::key_locked(&mut maps, root)?;
    let lazy = fs_marked.and_then(|_| Lazy::probe(proc, root, &root_key));
    let shared = Arc::new(Shared {
        fan,
        proc: proc.clone(),
        fs_marked,
        lazy,
        maps: Mutex::new(maps),
    });
    if shared.needs_mark(root) {
        shared.mark(root, libc::FAN_MARK_ADD)?;
    }
    if export.private {
        if let Err(e) = ignore_own_writes(&shared, root) {
            log::info!("passthrough: the server's own writes still generate events ({e})");
        }
    }
    let source = FanSource {
        shared: shared.clone(),
        buf: vec![0; EVENT_BUF],
        own_pid: std::process::id() as i32,
        decoded: Vec::new(),
    };
    Ok(Parts {
        source: Box::new(source),
        hook: Arc::new(Hook(shared)),
        whole_filesystem: fs_marked.is_some(),
    })
}

/// Marks the whole filesystem the export root is the root of (`FAN_MARK_FILESYSTEM`, needs
/// `CAP_SYS_ADMIN`). Every change on it is a change in the export, so one mark reports the
/// same events as a mark per known directory (events in directories the kernel does not
/// hold are dropped by handle, as before), without the marks' cost: no mark to add or
/// remove as directories enter and leave the table, and no watched parent on every file,
/// which made the host kernel take a reference to the parent directory on every
/// `read(2)` and `write(2)` of a file in it (Linux's `__fsnotify_parent`).
fn mark_filesystem(fan: &OwnedFd, proc: &ProcSelf, root: &Inode) -> Result<()> {
    let flags = libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM;
    let fd = root.fd()?;
    let name = ProcSelf::name(fd.as_fd());
    sys::notify::fanotify_mark(fan.as_fd(), flags, MASK, proc.dir(), &name)
}

/// Adds an ignore mark for `FAN_MODIFY` on the mount `root` lives on, the server's private
/// copy: every write made through it (the server's own, and the reads and writes the kernel
/// passes through to host files the server opened, which carry the writer's pid, not the
/// server's) is dropped before the host kernel builds an event, while writes by host
/// processes, through their own mount, are still reported. Attribute and name events carry
/// no mount (the kernel raises them on the dentry) and cannot be filtered this way; the
/// server's own are skipped by pid when read.
fn ignore_own_writes(shared: &Shared, root: &Inode) -> Result<()> {
    let fd = root.fd()?;
    let name = ProcSelf::name(fd.as_fd());
    let mark = |how: u32| {
        let flags = libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT | how;
        sys::notify::fanotify_mark(
            shared.fan.as_fd(),
            flags,
            libc::FAN_MODIFY,
            shared.proc.dir(),
            &name,
        )
    };
    // FAN_MARK_IGNORE (Linux 6.0), else the older ignored-mask form.
    mark(libc::FAN_MARK_IGNORE_SURV)
        .or_else(|_| mark(libc::FAN_MARK_IGNORED_MASK | libc::FAN_MARK_IGNORED_SURV_MODIFY))
}

struct FanSource {
    shared: Arc<Shared>,
    buf: Vec<u8>,
    own_pid: i32,
    /// The events of one read, decoded under the maps lock; handles are opened after.
    decoded: Vec<Decoded>,
}

/// A change as decoded under the maps lock: ready, or naming an object by a handle that is
/// opened afterwards (see [`Lazy`]), so that no `open_by_handle_at` runs while the table
/// hook may wait for the lock.
enum Decoded {
    Ready(Change),
    /// Attributes or data of the object `key` names changed; if it cannot be opened, of
    /// whatever `name` in the directory is (found by name).
    Object(HandleKey, Option<(Ino, OsString)>),
    /// The object `key` names was deleted as `name` in the directory.
    Deleted(Ino, HandleKey, OsString),
}

impl Decoded {
    /// The change to report, opening the handle if there is one.
    fn resolve(self, lazy: Option<&Lazy>) -> Option<Change> {
        let host = |key: &HandleKey| lazy.and_then(|l| l.resolve(key));
        match self {
            Decoded::Ready(c) => Some(c),
            Decoded::Object(key, by_name) => match host(&key) {
                Some(h) => Some(Change::Host(h)),
                None => by_name.map(|(dir, name)| Change::Child(dir, name)),
            },
            Decoded::Deleted(dir, key, name) => Some(match host(&key) {
                Some(h) => Change::DeletedHost(dir, h, name),
                None => Change::Entry(dir, name),
            }),
        }
    }
}

impl Source for FanSource {
    fn fd(&self) -> BorrowedFd<'_> {
        self.shared.fan.as_fd()
    }

    fn read(&mut self, out: &mut Vec<Change>) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = sys::notify::read_events(self.shared.fan.as_fd(), &mut self.buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            let lazy = self.shared.lazy.as_ref();
            {
                let maps = self.shared.maps.lock();
                for event in Events::new(&self.buf[..n]) {
                    decode(
                        &event,
                        self.own_pid,
                        &maps,
                        lazy.is_some(),
                        &mut self.decoded,
                    );
                }
            }
            out.extend(self.decoded.drain(..).filter_map(|d| d.resolve(lazy)));
        }
    }
}

/// One event: its header fields and its info records.
struct Event<'a> {
    mask: u64,
    pid: i32,
    fd: i32,
    records: &'a [u8],
}

/// Iterates over the events in a read buffer.
struct Events<'a> {
    buf: &'a [u8],
}

impl<'a> Events<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Events { buf }
    }
}

const META_LEN: usize = std::mem::size_of::<libc::fanotify_event_metadata>();

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        if self.buf.len() < META_LEN {
            return None;
        }
        // SAFETY: at least META_LEN bytes are present; `read_unaligned` copes with any
        // alignment and every bit pattern is a valid metadata struct.
        let meta: libc::fanotify_event_metadata =
            unsafe { std::ptr::read_unaligned(self.buf.as_ptr().cast()) };
        let len = meta.event_len as usize;
        let head = meta.metadata_len as usize;
        if meta.vers != libc::FANOTIFY_METADATA_VERSION
            || len < META_LEN
            || len > self.buf.len()
            || head > len
        {
            log::error!("passthrough: malformed fanotify event");
            self.buf = &[];
            return None;
        }
        let event = Event {
            mask: meta.mask,
            pid: meta.pid,
            fd: meta.fd,
            records: &self.buf[head..len],
        };
        self.buf = &self.buf[len..];
        Some(event)
    }
}

/// One info record: its type, handle key and (for `DFID_NAME`) name.
struct Record {
    kind: u8,
    key: HandleKey,
    name: Option<OsString>,
}

/// Offsets inside an info record: header (type u8, pad u8, len u16), fsid (8 bytes),
/// `file_handle` (handle_bytes u32, handle_type i32, bytes), then the name.
const FSID_AT: usize = 4;
const HANDLE_AT: usize = 12;
const HANDLE_BYTES_AT: usize = HANDLE_AT + 8;

fn records(mut buf: &[u8]) -> impl Iterator<Item = Record> + '_ {
    std::iter::from_fn(move || {
        if buf.len() < HANDLE_BYTES_AT {
            return None;
        }
        let kind = buf[0];
        let len = u16::from_ne_bytes([buf[2], buf[3]]) as usize;
        if len < HANDLE_BYTES_AT || len > buf.len() {
            return None;
        }
        let rec = &buf[..len];
        buf = &buf[len..];
        let word = |i: usize| u32::from_ne_bytes(rec[i..i + 4].try_into().expect("4 bytes"));
        let fsid: [u8; 8] = rec[FSID_AT..HANDLE_AT].try_into().expect("8 bytes");
        let handle_len = word(HANDLE_AT) as usize;
        let handle_type = word(HANDLE_AT + 4) as i32;
        let handle = rec.get(HANDLE_BYTES_AT..HANDLE_BYTES_AT + handle_len)?;
        let name = (kind == libc::FAN_EVENT_INFO_TYPE_DFID_NAME).then(|| {
            let tail = &rec[HANDLE_BYTES_AT + handle_len..];
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            OsString::from_vec(tail[..end].to_vec())
        });
        Some(Record {
            kind,
            key: (fsid, handle_type, handle.to_vec()),
            name,
        })
    })
}

/// Turns one event into changes for the inodes the kernel knows; with `lazy`, objects not
/// recorded are left to be opened by handle.
fn decode(event: &Event<'_>, own_pid: i32, maps: &Maps, lazy: bool, out: &mut Vec<Decoded>) {
    if event.fd >= 0 {
        // Not expected in FID mode; never leak it.
        // SAFETY: the kernel handed us this descriptor with the event; nothing else owns it.
        drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(event.fd) });
    }
    if event.mask & libc::FAN_Q_OVERFLOW != 0 {
        out.push(Decoded::Ready(Change::Everything));
        return;
    }
    if event.pid == own_pid {
        return;
    }
    let mut dir_entry = None;
    let mut object = None;
    let mut object_key = None;
    for rec in records(event.records) {
        let ino = maps.by_handle.get(&rec.key).copied();
        match rec.kind {
            libc::FAN_EVENT_INFO_TYPE_DFID_NAME => dir_entry = ino.zip(rec.name),
            libc::FAN_EVENT_INFO_TYPE_FID => (object, object_key) = (ino, Some(rec.key)),
            _ => {}
        }
    }
    let object_key = object_key.filter(|_| lazy && object.is_none());
    let dir_entry = dir_entry.filter(|(_, name)| name.as_encoded_bytes() != b".");
    let ready = |c| Decoded::Ready(c);
    if event.mask & DIRENT_EVENTS != 0 {
        if let Some((dir, name)) = dir_entry.clone() {
            let deleted = event.mask & libc::FAN_DELETE != 0;
            out.push(match (object, object_key.clone()) {
                (Some(child), _) if deleted => ready(Change::Deleted(dir, child, name)),
                (None, Some(key)) if deleted => Decoded::Deleted(dir, key, name),
                _ => ready(Change::Entry(dir, name)),
            });
            out.push(ready(Change::Inode(dir)));
        }
    }
    if event.mask & (libc::FAN_ATTRIB | libc::FAN_MODIFY) != 0 {
        match (object, object_key, dir_entry) {
            (Some(ino), _, _) => out.push(ready(Change::Inode(ino))),
            (None, Some(key), by_name) => out.push(Decoded::Object(key, by_name)),
            (None, None, Some((dir, name))) => out.push(ready(Change::Child(dir, name))),
            (None, None, None) => {}
        }
    }
}
