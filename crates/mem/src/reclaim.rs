//! Handing freed page-store memory back to the kernel.
//!
//! The C allocator keeps freed 4 KiB pages for reuse and returns little of it by itself.
//! Reuse is what makes a rewrite fast (fresh memory costs a page fault and zeroing per page),
//! so memory is not returned at once. A background thread keeps the *net* freed bytes: pages
//! freed since the last trim, less pages allocated since (which the allocator serves from
//! those free pages first). It looks every [`QUIET`], and calls `malloc_trim(0)`, which
//! returns every free page of every arena, only when at least [`TRIM_AFTER`] net bytes wait,
//! no page was freed in the last [`QUIET`], and the last [`QUIET`] reused less than
//! `1/`[`REUSE_SHARE`] of what waits (see [`decide`]).
//!
//! So a file deleted and rewritten, even slowly (a 512 MiB `dd bs=4k` takes seconds), reuses
//! its memory instead of faulting it back in page by page after a trim half way through;
//! memory nobody reuses leaves the server within about a second of the last free.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// Freed bytes that make a trim worthwhile.
pub const TRIM_AFTER: u64 = 16 << 20;
/// How long frees must have stopped before trimming; also how often the thread looks.
pub const QUIET: Duration = Duration::from_millis(500);
/// A trim waits while the last [`QUIET`] reused more than `1/REUSE_SHARE` of the net freed
/// bytes (at that pace the memory is taken again within `REUSE_SHARE` × [`QUIET`]).
pub const REUSE_SHARE: u64 = 8;

/// Page bytes allocated since the reclaim thread last looked, counted only while freed
/// memory waits (one relaxed add per allocating write, not per page).
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// Set while freed memory waits for a trim.
static WAITING: AtomicBool = AtomicBool::new(false);

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

/// What the reclaim thread does after a look.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing worth returning waits: sleep until the next free.
    Idle,
    /// Look again after [`QUIET`].
    Wait,
    /// Return free memory to the kernel now.
    Trim,
}

/// The trim rule: `net` bytes freed and not reused wait, `reused` bytes were allocated
/// since the last look, and the last page was freed `since_free` ago.
pub fn decide(net: u64, reused: u64, since_free: Duration) -> Decision {
    if net < TRIM_AFTER {
        Decision::Idle
    } else if since_free < QUIET || reused.saturating_mul(REUSE_SHARE) > net {
        Decision::Wait
    } else {
        Decision::Trim
    }
}

fn run() {
    let mut p = lock();
    loop {
        while p.bytes < TRIM_AFTER {
            p = WAKE.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        WAITING.store(true, Ordering::Relaxed);
        ALLOCATED.store(0, Ordering::Relaxed);
        loop {
            p = WAKE
                .wait_timeout(p, QUIET)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            let reused = ALLOCATED.swap(0, Ordering::Relaxed);
            p.bytes = p.bytes.saturating_sub(reused);
            let since_free = p.last_free.map_or(QUIET, |t| t.elapsed());
            match decide(p.bytes, reused, since_free) {
                Decision::Wait => continue,
                Decision::Idle => {}
                Decision::Trim => {
                    p.bytes = 0;
                    drop(p);
                    trim();
                    p = lock();
                }
            }
            break;
        }
        WAITING.store(false, Ordering::Relaxed);
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
/// `mprotect` each time: about one system call per new 4 KiB page (docs/performance.md).
/// The main arena grows with `brk` by the allocation plus this pad instead.
/// Address space only: untouched pages cost no memory, and a trim gives everything back
/// (`malloc_trim(0)` keeps no pad).
pub const HEAP_GROWTH: i32 = 16 << 20;

/// Sets the allocator up for the mem backend (called before any request thread starts):
/// one arena, the main one, growing [`HEAP_GROWTH`] at a time. Request threads then share
/// the arena lock for allocations, a short critical section next to a FUSE round trip. With
/// an arena per thread, `malloc_trim` hands back too little of what was freed
/// (docs/performance.md has the figures).
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
    if p.bytes >= TRIM_AFTER && !WAITING.load(Ordering::Relaxed) {
        WAKE.notify_one();
    }
}

/// Page-store bytes freed and still held by the allocator for reuse (not yet returned to
/// the kernel): room the machine's free memory does not show.
pub fn bytes_held() -> u64 {
    let held = lock().bytes;
    match WAITING.load(Ordering::Relaxed) {
        // Pages allocated since the reclaim thread last looked came out of those.
        true => held.saturating_sub(ALLOCATED.load(Ordering::Relaxed)),
        false => held,
    }
}

/// Records `bytes` of newly allocated pages (call after a write or fallocate added pages).
pub fn pages_allocated(bytes: u64) {
    if bytes != 0 && WAITING.load(Ordering::Relaxed) {
        ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(1);

    #[test]
    fn trims_memory_nobody_reuses_once_frees_stop() {
        assert_eq!(decide(TRIM_AFTER - 1, 0, LONG), Decision::Idle);
        assert_eq!(decide(TRIM_AFTER, 0, LONG), Decision::Trim);
        assert_eq!(
            decide(1 << 30, 0, QUIET / 2),
            Decision::Wait,
            "frees still going on"
        );
    }

    #[test]
    fn waits_while_a_writer_takes_the_freed_pages_back() {
        // A 4 KiB dd at ~200 MiB/s into 512 MiB just freed: ~100 MiB reused per look.
        let mut net = 512 << 20;
        let per_look = 100 << 20;
        while net >= TRIM_AFTER {
            net -= per_look.min(net);
            if net < TRIM_AFTER {
                break;
            }
            assert_eq!(decide(net, per_look, LONG), Decision::Wait, "net {net}");
        }
        assert_eq!(decide(net, per_look, LONG), Decision::Idle);
        // A trickle does not hold a large free pool back.
        assert_eq!(decide(1 << 30, 4096, LONG), Decision::Trim);
    }
}
