//! Handing freed page-store memory back to the kernel.
//!
//! The C allocator keeps freed 4 KiB pages for reuse and returns little of it by itself.
//! Reuse is what makes a rewrite fast (fresh memory costs a page fault and zeroing per page),
//! so memory is not returned at once: once at least [`TRIM_AFTER`] bytes were freed and no
//! page has been freed for [`QUIET`], a background thread calls `malloc_trim(0)`, which
//! returns every free page of every arena. A file deleted and rewritten at once reuses its
//! memory; memory nobody reuses leaves the server within about a second.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Freed bytes that make a trim worthwhile.
pub const TRIM_AFTER: u64 = 16 << 20;
/// How long frees must have stopped before trimming.
pub const QUIET: Duration = Duration::from_millis(500);

struct Pending {
    bytes: u64,
    last_free: Instant,
}

struct Reclaimer {
    pending: Mutex<Pending>,
    wake: Condvar,
}

fn reclaimer() -> &'static Reclaimer {
    static R: OnceLock<&'static Reclaimer> = OnceLock::new();
    R.get_or_init(|| {
        let r: &'static Reclaimer = Box::leak(Box::new(Reclaimer {
            pending: Mutex::new(Pending {
                bytes: 0,
                last_free: Instant::now(),
            }),
            wake: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("memofs-reclaim".into())
            .spawn(move || r.run());
        if let Err(e) = spawned {
            log::warn!("no reclaim thread ({e}): freed memory stays with the allocator");
        }
        r
    })
}

impl Reclaimer {
    fn run(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            while p.bytes < TRIM_AFTER {
                p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            let quiet_for = p.last_free.elapsed();
            if quiet_for < QUIET {
                p = self
                    .wake
                    .wait_timeout(p, QUIET - quiet_for)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            p.bytes = 0;
            drop(p);
            trim();
            p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the arena
    // locks itself and may be called from any thread.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Records `bytes` of freed pages (call with no file lock held).
pub fn pages_freed(bytes: u64) {
    if bytes == 0 {
        return;
    }
    let r = reclaimer();
    let mut p = r.pending.lock().unwrap_or_else(|e| e.into_inner());
    p.bytes += bytes;
    p.last_free = Instant::now();
    if p.bytes >= TRIM_AFTER {
        r.wake.notify_one();
    }
}
