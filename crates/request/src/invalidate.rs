//! [`memofs_core::Invalidator`] on FUSE notifications.
//!
//! Reports are queued and sent by one dedicated thread: a notification must never be written
//! from inside the handler of a request it relates to (the kernel may hold locks that request
//! waits on), and a backend's watcher should not block on the device either.

use std::ffi::{OsStr, OsString};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use memofs_core::{Ino, Invalidator};

use crate::kernel::Kernel;
use crate::stats::{Event, Stats};

enum Report {
    Entry(Ino, OsString),
    Deleted(Ino, Ino, OsString),
    Inode(Ino),
    Everything,
}

/// Sends invalidations to the kernel from its own thread.
pub struct NotifyInvalidator {
    queue: Sender<Report>,
}

impl NotifyInvalidator {
    /// Starts the sending thread; it ends when the invalidator is dropped.
    pub fn start(kernel: Arc<dyn Kernel>, stats: Arc<Stats>) -> std::io::Result<NotifyInvalidator> {
        let (tx, rx) = channel::<Report>();
        std::thread::Builder::new()
            .name("memofs-notify".into())
            .spawn(move || {
                for report in rx {
                    let (event, result) = match &report {
                        Report::Entry(parent, name) => {
                            (Event::InvalEntry, kernel.inval_entry(*parent, name))
                        }
                        Report::Deleted(parent, child, name) => {
                            (Event::InvalEntry, kernel.delete(*parent, *child, name))
                        }
                        Report::Inode(ino) => (Event::InvalInode, kernel.inval_inode(*ino, 0, 0)),
                        Report::Everything => (Event::IncEpoch, kernel.inc_epoch()),
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
