//! [`memofs_core::Invalidator`] on FUSE notifications.
//!
//! Reports are queued and sent by one dedicated thread: a notification must never be written
//! from inside the handler of a request it relates to (the kernel may hold locks that request
//! waits on), and a backend's watcher should not block on the device either.
//!
//! fuser 0.18 has no call for `FUSE_NOTIFY_INC_EPOCH` (Linux 6.16+: every dentry looked up
//! before the increment is revalidated, negative ones included), so that one notification is
//! written here, as a bare `fuse_out_header`, to a duplicate of the session's device fd.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use fuser::{INodeNo, Notifier};
use memofs_core::{Ino, Invalidator};

use crate::stats::{Event, Stats};

enum Report {
    Entry(Ino, OsString),
    Deleted(Ino, Ino, OsString),
    Inode(Ino),
    Everything,
}

/// `FUSE_NOTIFY_INC_EPOCH` from `<linux/fuse.h>` (protocol 7.44).
const FUSE_NOTIFY_INC_EPOCH: i32 = 8;

/// Writes a `FUSE_NOTIFY_INC_EPOCH` notification (a header with no body) to `dev`.
fn inc_epoch(dev: &OwnedFd) -> io::Result<()> {
    // struct fuse_out_header { u32 len; i32 error (the notify code); u64 unique (0) }
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&16u32.to_ne_bytes());
    header[4..8].copy_from_slice(&FUSE_NOTIFY_INC_EPOCH.to_ne_bytes());
    // SAFETY: `dev` is an open /dev/fuse descriptor and `header` a live 16-byte buffer.
    let n = unsafe { libc::write(dev.as_raw_fd(), header.as_ptr().cast(), header.len()) };
    match n {
        16 => Ok(()),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::from_raw_os_error(libc::EIO)),
    }
}

/// Sends invalidations to the kernel from its own thread.
pub struct NotifyInvalidator {
    queue: Sender<Report>,
}

impl NotifyInvalidator {
    /// Starts the sending thread; it ends when the invalidator is dropped. `dev` is a
    /// duplicate of the session's `/dev/fuse` descriptor, for the epoch notification.
    pub fn start(
        notifier: Notifier,
        dev: OwnedFd,
        stats: Arc<Stats>,
    ) -> std::io::Result<NotifyInvalidator> {
        let (tx, rx) = channel::<Report>();
        std::thread::Builder::new()
            .name("memofs-notify".into())
            .spawn(move || {
                for report in rx {
                    let (event, result) = match &report {
                        Report::Entry(parent, name) => (
                            Event::InvalEntry,
                            notifier.inval_entry(INodeNo(*parent), name),
                        ),
                        Report::Deleted(parent, child, name) => (
                            Event::InvalEntry,
                            notifier.delete(INodeNo(*parent), INodeNo(*child), name),
                        ),
                        Report::Inode(ino) => {
                            (Event::InvalInode, notifier.inval_inode(INodeNo(*ino), 0, 0))
                        }
                        Report::Everything => (Event::IncEpoch, inc_epoch(&dev)),
                    };
                    match result {
                        Ok(()) => stats.event(event),
                        // ENOENT: the kernel did not have the entry or inode cached; nothing to do.
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => stats.event(event),
                        Err(e) => {
                            stats.event(Event::InvalFailed);
                            log::debug!("invalidation failed: {e}");
                        }
                    }
                }
            })?;
        Ok(NotifyInvalidator { queue: tx })
    }

    fn send(&self, r: Report) {
        let _ = self.queue.send(r);
    }
}

impl Invalidator for NotifyInvalidator {
    fn entry(&self, parent: Ino, name: &OsStr) {
        self.send(Report::Entry(parent, name.to_os_string()));
    }

    fn deleted(&self, parent: Ino, child: Ino, name: &OsStr) {
        self.send(Report::Deleted(parent, child, name.to_os_string()));
    }

    fn inode(&self, ino: Ino) {
        self.send(Report::Inode(ino));
    }

    fn everything(&self) {
        self.send(Report::Everything);
    }
}
