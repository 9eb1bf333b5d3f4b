//! Handing freed page-store memory back to the kernel.
//!
//! The C allocator keeps freed 4 KiB pages for reuse and returns little of it by itself.
//! Reuse is what makes a rewrite fast (fresh memory costs a page fault and zeroing per page),
//! so memory is not returned at once: once at least [`TRIM_AFTER`] bytes were freed and no
//! page has been freed for [`QUIET`], a background thread calls `malloc_trim(0)`, which
//! returns every free page of every arena. A file deleted and rewritten at once reuses its
//! memory; memory nobody reuses leaves the server within about a second.

use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// Freed bytes that make a trim worthwhile.
pub const TRIM_AFTER: u64 = 16 << 20;
/// How long frees must have stopped before trimming.
pub const QUIET: Duration = Duration::from_millis(500);

struct Pending {
    bytes: u64,
    last_free: Option<Instant>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    bytes: 0,
    last_free: None,
});
static WAKE: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the reclaim thread, once.
fn start() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("memofs-reclaim".into())
            .spawn(run);
        if let Err(e) = spawned {
            log::warn!("no reclaim thread ({e}): freed memory stays with the allocator");
        }
    });
}

fn run() {
    let mut p = lock();
    loop {
        while p.bytes < TRIM_AFTER {
            p = WAKE.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        let quiet_for = p.last_free.map_or(QUIET, |t| t.elapsed());
        if quiet_for < QUIET {
            p = WAKE
                .wait_timeout(p, QUIET - quiet_for)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        }
        p.bytes = 0;
        drop(p);
        trim();
        p = lock();
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

/// Heap growth step for the page store. glibc gives each request thread an arena of its
/// own, and a thread arena grows its heap by exactly what an allocation needs, with an
/// `mprotect` each time: one system call per new 4 KiB page (measured: 48 959 for 65 536
/// page writes). The main arena grows with `brk` by the allocation plus this pad instead.
/// Address space only: untouched pages cost no memory, and a trim gives everything back
/// (`malloc_trim(0)` keeps no pad).
pub const HEAP_GROWTH: i32 = 16 << 20;

/// Sets the allocator up for the page store (called before any request thread starts):
/// one arena, the main one, growing [`HEAP_GROWTH`] at a time. Request threads then share
/// the arena lock for page allocations, a short critical section next to a FUSE round trip.
pub fn tune_allocator() {
    // SAFETY: mallopt only changes the allocator's parameters.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TOP_PAD, HEAP_GROWTH);
    }
}

/// Records `bytes` of freed pages (call with no file lock held).
pub fn pages_freed(bytes: u64) {
    if bytes == 0 {
        return;
    }
    start();
    let mut p = lock();
    p.bytes += bytes;
    p.last_free = Some(Instant::now());
    if p.bytes >= TRIM_AFTER {
        WAKE.notify_one();
    }
}
