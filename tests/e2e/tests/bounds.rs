//! Requests whose size the caller chooses: a petabyte `fallocate` on a mount without `size=`,
//! `SEEK_DATA` and `copy_file_range` over a petabyte of holes. Each must answer within a
//! deadline (a hang detector, not a timing), cost what exists, and leave the server alive.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use memofs_e2e::checks::process_alive;
use memofs_e2e::mount::reference_is_tmpfs;
use memofs_e2e::{assert_errno, is_root, ok, skip, sys, with_timeout, Mount};

const PIB: u64 = 1 << 50;

/// How long one of these requests may take before the test calls it a hang (each is a few
/// lookups in the server; the unbounded versions ran for hours).
const HANG: Duration = Duration::from_secs(60);

/// Runs `f` on another thread; fails the test if it has not answered within [`HANG`].
fn answers<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    with_timeout(HANG, f).unwrap_or_else(|| panic!("{what}: no answer within {HANG:?} (a hang)"))
}

fn rw(p: &Path) -> File {
    ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(p))
}

/// A file of 1 PiB whose only data is an `x` in its last byte.
fn petabyte_sparse(p: &Path) -> File {
    let f = rw(p);
    ok!(f.set_len(PIB));
    ok!(f.write_all_at(b"x", PIB - 1));
    f
}

#[test]
fn a_petabyte_fallocate_without_size_limit_fails_and_the_server_lives() {
    if !is_root() {
        skip!(Root, "needs root to mount");
    }
    if reference_is_tmpfs() {
        skip!(
            Config("reference_tmpfs"),
            "kernel tmpfs with size=0 allocates until the OOM killer acts: not run on it"
        );
    }
    let m = Mount::memofs(&["size=0"]);
    let pid = m.server_pid().expect("server pid");
    let p = m.join("f");
    ok!(fs::write(&p, b"keep"));
    for mode in [0, libc::FALLOC_FL_KEEP_SIZE] {
        let q: PathBuf = p.clone();
        let r = answers("fallocate of 1 PiB", move || {
            sys::fallocate(&rw(&q), mode, 0, PIB)
        });
        assert_errno!(
            r,
            libc::ENOSPC,
            "fallocate mode {mode} of 1 PiB with size=0"
        );
    }
    assert!(process_alive(pid), "the server survived");
    let md = ok!(fs::metadata(&p));
    assert_eq!((md.len(), md.blocks()), (4, 8), "the file is unchanged");
    assert_eq!(ok!(fs::read(&p)), b"keep");
    // What fits still works.
    ok!(sys::fallocate(&rw(&p), 0, 0, 1 << 20));
    ok!(fs::write(m.join("g"), vec![1u8; 1 << 20]));
    assert_eq!(ok!(fs::metadata(&p)).len(), 1 << 20);
}

#[test]
fn seek_data_on_a_petabyte_sparse_file_answers() {
    if !is_root() {
        skip!(Root, "needs root to mount");
    }
    // The server's answer: under the writeback cache the kernel answers from its size.
    let m = Mount::mem(&["writeback=off"]);
    let f = petabyte_sparse(&m.join("sparse"));
    let (data, hole, end) = answers("SEEK_DATA/SEEK_HOLE over 1 PiB", move || {
        let data = sys::lseek(&f, 0, libc::SEEK_DATA);
        let hole = sys::lseek(&f, 0, libc::SEEK_HOLE);
        let end = data
            .as_ref()
            .ok()
            .map(|&d| sys::lseek(&f, d, libc::SEEK_HOLE));
        (data, hole, end)
    });
    let data = ok!(data) as u64;
    // The page (or large folio, up to 2 MiB) holding the last byte.
    assert!(
        (PIB - (2 << 20)..PIB).contains(&data) && data.is_multiple_of(4096),
        "SEEK_DATA from 0 found {data}"
    );
    assert_eq!(ok!(hole), 0, "SEEK_HOLE from 0");
    assert_eq!(ok!(end.unwrap()) as u64, PIB, "SEEK_HOLE after the data");
}

#[test]
fn copy_file_range_over_a_petabyte_hole_allocates_nothing() {
    if !is_root() {
        skip!(Root, "needs root to mount");
    }
    let m = Mount::mem(&[]);
    let src = petabyte_sparse(&m.join("src"));
    let dst = rw(&m.join("dst"));
    // Old data in the destination must read as zeros after a hole is copied over it.
    ok!(dst.write_all_at(&[7u8; 8192], 0));
    let (n, dst) = answers("copy_file_range of 1 PiB of holes", move || {
        let (mut oi, mut oo) = (0i64, 0i64);
        let n = sys::copy_file_range(&src, &mut oi, &dst, &mut oo, PIB as usize);
        (n, dst)
    });
    let n = ok!(n) as u64;
    assert!(n > 0, "nothing copied");
    let md = ok!(dst.metadata());
    assert_eq!(md.len(), n, "the destination grew to what was copied");
    assert!(
        ok!(sys::pread_full(&dst, 0, 8192)).iter().all(|b| *b == 0),
        "old data inside a copied hole"
    );
    // Kernel tmpfs copies holes as zero-filled pages; memofs keeps them holes.
    if m.is_memofs() {
        assert!(
            md.blocks() * 512 <= 64 << 10,
            "a copied hole of {n} bytes allocated {} bytes",
            md.blocks() * 512
        );
    }
}
