//! inotify source: a watch per known directory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;

use memofs_core::{FileKind, Ino, Result};
use parking_lot::Mutex;

use super::{Change, Parts, Source};
use crate::fd::ProcSelf;
use crate::inode::{Inode, TableHook};
use crate::sys;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_MODIFY
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR;

const DIRENT_EVENTS: u32 =
    libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;

/// Bytes of events read at once.
const EVENT_BUF: usize = 64 * 1024;

/// Size of `struct inotify_event` before the name.
const HEADER: usize = std::mem::size_of::<libc::inotify_event>();

#[derive(Default)]
struct Maps {
    by_wd: HashMap<i32, Ino>,
    by_ino: HashMap<Ino, i32>,
}

struct Shared {
    fd: OwnedFd,
    proc: Arc<ProcSelf>,
    /// Lock order 4.
    maps: Mutex<Maps>,
}

impl Shared {
    fn watch(&self, dir: &Inode) -> Result<()> {
        let fd = dir.fd_for_hook()?;
        let wd = self.proc.with_path(fd.as_fd(), |path| {
            sys::notify::inotify_add_watch(self.fd.as_fd(), path, MASK)
        })?;
        let mut maps = self.maps.lock();
        maps.by_wd.insert(wd, dir.ino);
        maps.by_ino.insert(dir.ino, wd);
        Ok(())
    }
}

struct Hook(Arc<Shared>);

impl TableHook for Hook {
    fn added(&self, inode: &Inode) {
        if inode.kind != FileKind::Directory {
            return;
        }
        inode.keep_for_watcher();
        if let Err(e) = self.0.watch(inode) {
            log::warn!(
                "passthrough: cannot watch directory inode {}: {e}",
                inode.ino
            );
        }
    }

    fn removed(&self, inode: &Inode) {
        let mut maps = self.0.maps.lock();
        if let Some(wd) = maps.by_ino.remove(&inode.ino) {
            maps.by_wd.remove(&wd);
            let _ = sys::notify::inotify_rm_watch(self.0.fd.as_fd(), wd);
        }
    }
}

/// Opens an inotify instance and watches the export root.
pub(super) fn open(proc: &Arc<ProcSelf>, root: &Inode) -> Result<Parts> {
    let shared = Arc::new(Shared {
        fd: sys::notify::inotify_init()?,
        proc: proc.clone(),
        maps: Mutex::new(Maps::default()),
    });
    shared.watch(root)?;
    let source = InoSource {
        shared: shared.clone(),
        buf: vec![0; EVENT_BUF],
    };
    Ok(Parts {
        source: Box::new(source),
        hook: Arc::new(Hook(shared)),
        whole_filesystem: false,
    })
}

struct InoSource {
    shared: Arc<Shared>,
    buf: Vec<u8>,
}

impl Source for InoSource {
    fn fd(&self) -> BorrowedFd<'_> {
        self.shared.fd.as_fd()
    }

    fn read(&mut self, out: &mut Vec<Change>) -> Result<usize> {
        let mut total = 0;
        loop {
            let n = sys::notify::read_events(self.shared.fd.as_fd(), &mut self.buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            let mut maps = self.shared.maps.lock();
            let mut buf = &self.buf[..n];
            while buf.len() >= HEADER {
                // SAFETY: HEADER bytes are present; `read_unaligned` copes with alignment and
                // every bit pattern is a valid `inotify_event` header.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
                let end = (HEADER + ev.len as usize).min(buf.len());
                let name = &buf[HEADER..end];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                decode_locked(&mut maps, &ev, name, out);
                buf = &buf[end..];
            }
        }
    }
}

fn decode_locked(maps: &mut Maps, ev: &libc::inotify_event, name: &[u8], out: &mut Vec<Change>) {
    if ev.mask & libc::IN_Q_OVERFLOW != 0 {
        out.push(Change::Everything);
        return;
    }
    let Some(&dir) = maps.by_wd.get(&ev.wd) else {
        return;
    };
    if ev.mask & libc::IN_IGNORED != 0 {
        maps.by_wd.remove(&ev.wd);
        if maps.by_ino.get(&dir) == Some(&ev.wd) {
            maps.by_ino.remove(&dir);
        }
        return;
    }
    if name.is_empty() {
        // The directory itself.
        out.push(Change::Inode(dir));
        return;
    }
    let name = OsString::from_vec(name.to_vec());
    if ev.mask & DIRENT_EVENTS != 0 {
        out.push(Change::Entry(dir, name));
        out.push(Change::Inode(dir));
    } else if ev.mask & (libc::IN_ATTRIB | libc::IN_MODIFY) != 0 {
        out.push(Change::Child(dir, name));
    }
}
