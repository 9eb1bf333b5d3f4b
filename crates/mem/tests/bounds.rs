//! Requests whose size the caller chooses, in-process through the `Backend` trait, in both
//! data modes: each answers at once, costs what exists, and fails whole when it cannot be
//! met; and times over the kernel's whole range round-trip exactly.

use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use memofs_core::time::EDGE_TIMES;
use memofs_core::{Backend, Caller, Errno, SetAttr, TimeSet, Timestamp, ROOT_INO};
use memofs_mem::{MemConfig, MemFs};

const C: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 1,
};
const PAGE: u64 = 4096;
const PIB: u64 = 1 << 50;

/// How long a request may take before the test calls it a hang (each one here is a few
/// map lookups or system calls; the unbounded versions ran for hours).
const HANG: Duration = Duration::from_secs(60);

/// Filesystems with `size=0`: the page store, and kernel-backed data where root may mount
/// its private tmpfs.
fn unlimited() -> Vec<(&'static str, Arc<MemFs>)> {
    let mut out = vec![(
        "page store",
        Arc::new(MemFs::new(MemConfig::default()).unwrap()),
    )];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let config = MemConfig {
            kernel_data: true,
            ..Default::default()
        };
        out.push(("kernel-backed", Arc::new(MemFs::new(config).unwrap())));
    } else {
        let why = "the kernel-backed cases need root (a private tmpfs)";
        memofs_e2e::skip::report(module_path!(), memofs_e2e::skip::Need::Root, why);
    }
    out
}

/// Runs `f` on another thread, failing the test if it has not answered within [`HANG`].
fn answers<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what}: no answer within {HANG:?} (a hang)"))
}

fn create(fs: &MemFs, name: &str) -> (u64, u64) {
    let (attr, o) = fs
        .create(&C, ROOT_INO, OsStr::new(name), 0o644, 0, libc::O_RDWR)
        .unwrap();
    (attr.ino, o.fh)
}

fn read(fs: &MemFs, ino: u64, offset: u64, len: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    fs.read(ino, 0, offset, len, &mut buf).unwrap();
    buf
}

fn set_size(fs: &MemFs, ino: u64, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(&C, ino, &set).unwrap();
}

#[test]
fn allocations_beyond_the_machine_fail_whole_at_once() {
    for (mode, fs) in unlimited() {
        let (f, fh) = create(&fs, "f");
        fs.write(f, fh, 0, b"keep").unwrap();
        let used = fs.usage().bytes_used;
        for falloc in [0, libc::FALLOC_FL_KEEP_SIZE] {
            let fs2 = fs.clone();
            let r = answers("fallocate of 1 PiB", move || {
                fs2.fallocate(f, fh, 0, PIB, falloc)
            });
            assert_eq!(r, Err(Errno::ENOSPC), "{mode}: fallocate mode {falloc}");
            let fs2 = fs.clone();
            let r = answers("fallocate of 1 PiB far out", move || {
                fs2.fallocate(f, fh, PIB, PIB, falloc)
            });
            assert_eq!(
                r,
                Err(Errno::ENOSPC),
                "{mode}: fallocate mode {falloc} at 1 PiB"
            );
        }
        let a = fs.getattr(f).unwrap();
        assert_eq!((a.size, a.blocks), (4, 8), "{mode}: the file is unchanged");
        assert_eq!(fs.usage().bytes_used, used, "{mode}: nothing allocated");
        assert_eq!(read(&fs, f, 0, 100), b"keep", "{mode}");
        // What fits still works.
        fs.fallocate(f, fh, 0, 16 * PAGE, 0).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, 16 * PAGE, "{mode}");
    }
}

#[test]
fn range_requests_on_a_petabyte_sparse_file_cost_what_exists() {
    for (mode, fs) in unlimited() {
        let (f, fh) = create(&fs, "f");
        set_size(&fs, f, PIB);
        fs.write(f, fh, PIB - 1, b"x").unwrap();
        let fs2 = fs.clone();
        let seeks = answers("SEEK_DATA/SEEK_HOLE over 1 PiB", move || {
            [
                fs2.lseek(f, fh, 0, libc::SEEK_DATA),
                fs2.lseek(f, fh, 0, libc::SEEK_HOLE),
                fs2.lseek(f, fh, PIB - 1, libc::SEEK_HOLE),
                fs2.lseek(f, fh, PIB - PAGE, libc::SEEK_DATA),
                fs2.lseek(f, fh, PIB, libc::SEEK_DATA),
            ]
        });
        assert_eq!(
            seeks,
            [
                Ok(PIB - PAGE),
                Ok(0),
                Ok(PIB),
                Ok(PIB - PAGE),
                Err(Errno::ENXIO)
            ],
            "{mode}"
        );
        let fs2 = fs.clone();
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        answers("punching 1 PiB", move || {
            fs2.fallocate(f, fh, 0, PIB - PAGE, punch)
        })
        .unwrap();
        let tail = read(&fs, f, PIB - 10, 100);
        assert_eq!(tail, b"\0\0\0\0\0\0\0\0\0x", "{mode}");
        assert!(read(&fs, f, PIB / 2, 1 << 20).iter().all(|b| *b == 0));
        let fs2 = fs.clone();
        answers("punching the whole file", move || {
            fs2.fallocate(f, fh, 0, PIB, punch)
        })
        .unwrap();
        assert_eq!(fs.getattr(f).unwrap().blocks, 0, "{mode}");
        let fs2 = fs.clone();
        answers("truncating 1 PiB away", move || set_size(&fs2, f, 1));
        assert_eq!(fs.getattr(f).unwrap().size, 1, "{mode}");
    }
}

#[test]
fn copying_a_petabyte_hole_allocates_nothing() {
    for (mode, fs) in unlimited() {
        let (src, sfh) = create(&fs, "src");
        let (dst, dfh) = create(&fs, "dst");
        set_size(&fs, src, PIB);
        fs.write(src, sfh, PIB - 1, b"x").unwrap();
        // Old data in the destination must not survive a copied hole.
        fs.write(dst, dfh, 0, &[7u8; 2 * PAGE as usize]).unwrap();
        let used = fs.usage().bytes_used;
        let fs2 = fs.clone();
        let n = answers("copy_file_range of 1 PiB of holes", move || {
            fs2.copy_file_range(src, sfh, 0, dst, dfh, 0, PIB)
        })
        .unwrap();
        assert!(n > 0 && n <= PIB, "{mode}: copied {n}");
        assert_eq!(fs.getattr(dst).unwrap().size, n, "{mode}");
        assert!(
            read(&fs, dst, 0, 2 * PAGE as u32).iter().all(|b| *b == 0),
            "{mode}: old data inside a copied hole"
        );
        let now = fs.usage().bytes_used;
        assert!(
            now <= used + PAGE,
            "{mode}: a copied hole allocated {} bytes",
            now - used
        );
        // The data at the end arrives when the copy gets there.
        let n = fs
            .copy_file_range(src, sfh, PIB - PAGE, dst, dfh, PIB - PAGE, PAGE)
            .unwrap();
        assert_eq!(n, PAGE, "{mode}");
        assert_eq!(read(&fs, dst, PIB - 1, 1), b"x", "{mode}");
    }
}

#[test]
fn times_round_trip_over_the_kernels_range() {
    for (mode, fs) in unlimited() {
        let (f, _) = create(&fs, "f");
        for (i, &(sec, nsec)) in EDGE_TIMES.iter().enumerate() {
            let t = Timestamp::from_timespec(sec, nsec);
            // atime and mtime set apart, so neither can be read for the other.
            let other = Timestamp::from_timespec(EDGE_TIMES[(i + 1) % EDGE_TIMES.len()].0, 0);
            let set = SetAttr {
                atime: Some(TimeSet::At(t)),
                mtime: Some(TimeSet::At(other)),
                ..Default::default()
            };
            let a = fs.setattr(&C, f, &set).unwrap();
            assert_eq!(a.atime.to_timespec(), (sec, nsec), "{mode}: atime set");
            assert_eq!(a.mtime, other, "{mode}: mtime set");
            let a = fs.getattr(f).unwrap();
            assert_eq!(
                a.atime.to_timespec(),
                (sec, nsec),
                "{mode}: atime read back"
            );
            let set = SetAttr {
                mtime: Some(TimeSet::At(t)),
                ..Default::default()
            };
            fs.setattr(&C, f, &set).unwrap();
            let a = fs.getattr(f).unwrap();
            assert_eq!(
                a.mtime.to_timespec(),
                (sec, nsec),
                "{mode}: mtime read back"
            );
        }
    }
}

#[test]
fn readdir_from_any_offset_answers_from_what_exists() {
    let fs = Arc::new(MemFs::new(MemConfig::default()).unwrap());
    for i in 0..100 {
        create(&fs, &format!("f{i}"));
    }
    let count = |offset: u64| {
        let fs = fs.clone();
        answers("readdir", move || {
            let mut n = 0;
            fs.readdir(ROOT_INO, 0, offset, false, &mut |_| {
                n += 1;
                true
            })
            .unwrap();
            n
        })
    };
    assert_eq!(count(0), 102, "`.`, `..` and every entry");
    assert_eq!(count(2), 100);
    assert_eq!(count(u64::MAX / 2), 0);
    assert_eq!(count(u64::MAX), 0);
}
