//! FUSE passthrough backing ids: one per inode with passthrough opens, registered with the
//! kernel at the inode's first passthrough open and released (which unregisters it) with the
//! last.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::BackingId;
use memofs_core::{Backend, Ino};
use parking_lot::Mutex;

/// The backing ids of open files.
#[derive(Default)]
pub(crate) struct Backings {
    /// Set once INIT granted passthrough; cleared if the kernel refuses a backing fd.
    enabled: AtomicBool,
    /// One backing id per inode with passthrough opens, with its open count.
    map: Mutex<HashMap<Ino, (Arc<BackingId>, usize)>>,
}

impl Backings {
    /// INIT granted passthrough.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether opens may use passthrough.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The backing id to open `ino`/`fh` with, registering `backend`'s fd with the kernel
    /// on the inode's first passthrough open. `None`: serve this open through the server.
    pub(crate) fn backing_for<B: Backend>(
        &self,
        backend: &B,
        ino: Ino,
        fh: u64,
        register: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.enabled() {
            return None;
        }
        let mut map = self.map.lock();
        if let Some((id, opens)) = map.get_mut(&ino) {
            *opens += 1;
            return Some(id.clone());
        }
        let mut register = Some(register);
        let mut registered = None;
        backend.with_backing_fd(ino, fh, &mut |fd| {
            registered = register.take().map(|r| r(fd));
        });
        match registered? {
            Ok(id) => {
                let id = Arc::new(id);
                map.insert(ino, (id.clone(), 1));
                Some(id)
            }
            Err(e) => {
                log::warn!("kernel refused a passthrough backing fd ({e}); serving file data through the server");
                self.enabled.store(false, Ordering::Relaxed);
                None
            }
        }
    }

    /// A passthrough open of `ino` was released.
    pub(crate) fn release(&self, ino: Ino) {
        let mut map = self.map.lock();
        if let Some((_, opens)) = map.get_mut(&ino) {
            *opens -= 1;
            if *opens == 0 {
                map.remove(&ino);
            }
        }
    }
}
