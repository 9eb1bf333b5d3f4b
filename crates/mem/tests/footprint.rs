//! What an empty file costs the server, counted by the allocator: the inode, its slot in the
//! inode table and its directory entry, each rounded up to the chunk glibc's malloc hands
//! out. The memory report measures the same thing as resident memory of a mounted server.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use memofs_core::atime::AtimeMode;
use memofs_core::{Backend, ROOT_INO};
use memofs_mem::MemFs;

mod common;
use common::{fs, kernel_fs, C};

/// The chunk glibc's malloc takes for `size` bytes: the size plus an 8-byte header,
/// rounded up to 16, at least 32.
fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counter only
// observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(chunk(new_size) - chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Measurements run one at a time: the counter is the whole process's.
static SERIAL: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Files created per measurement: enough that the tables' growth steps average out.
const FILES: usize = 100_000;

/// Bytes the server holds per empty file created in one directory and still known to the
/// kernel (one lookup reference each, as after `open(O_CREAT)` and `close`).
fn bytes_per_empty_file(fs: &MemFs) -> f64 {
    let names: Vec<String> = (0..FILES).map(|i| format!("f{i}")).collect();
    let before = LIVE.load(Ordering::Relaxed);
    for name in &names {
        let (attr, opened) = fs
            .create(&C, ROOT_INO, name.as_ref(), 0o644, 0, libc::O_WRONLY)
            .unwrap();
        fs.release(attr.ino, opened.fh).unwrap();
    }
    let grown = LIVE.load(Ordering::Relaxed) - before;
    grown as f64 / FILES as f64
}

/// Bytes the server holds per empty directory made in one directory and still known to
/// the kernel.
fn bytes_per_empty_directory(fs: &MemFs) -> f64 {
    let names: Vec<String> = (0..FILES).map(|i| format!("d{i}")).collect();
    let before = LIVE.load(Ordering::Relaxed);
    for name in &names {
        fs.mkdir(&C, ROOT_INO, name.as_ref(), 0o755, 0).unwrap();
    }
    let grown = LIVE.load(Ordering::Relaxed) - before;
    grown as f64 / FILES as f64
}

/// The goal: what an empty tmpfs file costs the kernel in its inode and dentry caches is
/// about this much, and the server's share should not be more.
const GOAL: f64 = 250.0;

#[test]
fn an_empty_file_in_the_page_store_costs_at_most_the_goal() {
    let _alone = alone();
    let per_file = bytes_per_empty_file(&fs());
    eprintln!("page store: {per_file:.1} bytes per empty file");
    assert!(per_file <= GOAL, "{per_file:.1} bytes per empty file");
}

#[test]
fn an_empty_kernel_backed_file_costs_at_most_the_goal() {
    let _alone = alone();
    let Some(fs) = kernel_fs(0, AtimeMode::Relatime) else {
        return;
    };
    let per_file = bytes_per_empty_file(&fs);
    eprintln!("kernel-backed: {per_file:.1} bytes per empty file");
    assert!(per_file <= GOAL, "{per_file:.1} bytes per empty file");
}

/// A directory has an inode and a name as a file does, and its own entry table besides
/// (an empty hash table, listing order and counts: a 112-byte allocation).
const DIRECTORY_GOAL: f64 = GOAL + 112.0;

#[test]
fn an_empty_directory_costs_at_most_a_file_and_its_table() {
    let _alone = alone();
    let per_dir = bytes_per_empty_directory(&fs());
    eprintln!("directory: {per_dir:.1} bytes per empty directory");
    assert!(
        per_dir <= DIRECTORY_GOAL,
        "{per_dir:.1} bytes per empty directory"
    );
}
