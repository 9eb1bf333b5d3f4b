//! FUSE passthrough backing ids: one per inode with passthrough opens, registered with the
//! kernel at the inode's first passthrough open and unregistered at its last release (an
//! open file keeps the kernel's own reference to the backing file).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use memofs_core::{Backend, Ino};
use parking_lot::Mutex;

use crate::kernel::Kernel;

/// The backing ids of open files.
#[derive(Default)]
pub(crate) struct Backings {
    /// Set once INIT granted passthrough; cleared if the kernel refuses a backing fd.
    enabled: AtomicBool,
    /// One backing id per inode with passthrough opens, with its open count.
    map: Mutex<HashMap<Ino, (u32, usize)>>,
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

    /// The backing id to open `ino`/`fh` with, registering the backend's descriptor with
    /// the kernel on the inode's first passthrough open. `None`: serve this open through
    /// the server.
    pub(crate) fn open<B: Backend>(
        &self,
        backend: &B,
        kernel: &dyn Kernel,
        ino: Ino,
        fh: u64,
    ) -> Option<u32> {
        if !self.enabled() {
            return None;
        }
        let mut map = self.map.lock();
        if let Some((id, opens)) = map.get_mut(&ino) {
            *opens += 1;
            return Some(*id);
        }
        let mut registered = None;
        backend.with_backing_fd(ino, fh, &mut |fd| {
            registered = Some(kernel.open_backing(fd))
        });
        match registered? {
            Ok(id) => {
                map.insert(ino, (id, 1));
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
    pub(crate) fn release(&self, kernel: &dyn Kernel, ino: Ino) {
        let mut map = self.map.lock();
        if let Some((id, opens)) = map.get_mut(&ino) {
            *opens -= 1;
            if *opens == 0 {
                let id = *id;
                map.remove(&ino);
                if let Err(e) = kernel.close_backing(id) {
                    log::debug!("closing backing id {id}: {e}");
                }
            }
        }
    }
}
