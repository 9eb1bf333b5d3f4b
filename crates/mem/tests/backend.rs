//! In-process tests of the mem backend through the `Backend` trait: no mount.

use memofs_core::atime::AtimeMode;
use memofs_core::{
    rename_flags, AtimePolicy, Backend, Caller, Errno, FileKind, SetAttr, TimeSet, Timestamp,
    ROOT_INO,
};
use memofs_mem::{MemConfig, MemFs};

mod common;
use common::{fs, kernel_fs, n, names, read_all, C, PAGE};

#[test]
fn create_write_read_unlink_frees_everything() {
    let fs = fs();
    let base = fs.usage();
    let (attr, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!(
        (attr.uid, attr.gid, attr.perm, attr.kind),
        (1000, 1000, 0o644, FileKind::Regular)
    );
    assert_eq!(fs.write(attr.ino, o.fh, 5, b"hello").unwrap(), 5);
    assert_eq!(read_all(&fs, attr.ino), b"\0\0\0\0\0hello");
    assert_eq!(fs.usage().bytes_used, PAGE);
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    // Still open and referenced: readable, not freed.
    assert_eq!(read_all(&fs, attr.ino), b"\0\0\0\0\0hello");
    assert_eq!(fs.getattr(attr.ino).unwrap().nlink, 0);
    fs.release(attr.ino, o.fh).unwrap();
    assert!(
        fs.getattr(attr.ino).is_ok(),
        "the kernel still holds a lookup reference"
    );
    fs.forget(attr.ino, 1);
    assert_eq!(fs.getattr(attr.ino), Err(Errno::ESTALE));
    assert_eq!(fs.usage(), base);
}

#[test]
fn lookup_misses_and_name_rules() {
    let fs = fs();
    assert_eq!(
        fs.lookup(&C, ROOT_INO, n("missing")).unwrap_err(),
        Errno::ENOENT
    );
    let long = "x".repeat(256);
    assert_eq!(
        fs.mkdir(&C, ROOT_INO, n(&long), 0o755, 0).unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert!(fs.mkdir(&C, ROOT_INO, n(&long[..255]), 0o755, 0).is_ok());
    assert_eq!(
        fs.mkdir(&C, ROOT_INO, n(&long[..255]), 0o755, 0)
            .unwrap_err(),
        Errno::EEXIST
    );
    // Case matters: no casefolding.
    fs.mknod(&C, ROOT_INO, n("Readme"), libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    assert_eq!(
        fs.lookup(&C, ROOT_INO, n("README")).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn directories_count_links_and_refuse_nonempty_removal() {
    let fs = fs();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    assert_eq!(d.nlink, 2);
    fs.mkdir(&C, d.ino, n("sub"), 0o755, 0).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 3);
    assert_eq!(
        fs.rmdir(&C, ROOT_INO, n("d")).unwrap_err(),
        Errno::ENOTEMPTY
    );
    assert_eq!(fs.unlink(&C, ROOT_INO, n("d")).unwrap_err(), Errno::EISDIR);
    fs.rmdir(&C, d.ino, n("sub")).unwrap();
    fs.rmdir(&C, ROOT_INO, n("d")).unwrap();
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    // Nothing can be created in a removed directory the kernel still references.
    assert_eq!(
        fs.mkdir(&C, d.ino, n("x"), 0o755, 0).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn rename_replace_exchange_noreplace_and_loops() {
    let fs = fs();
    let a = fs
        .mknod(&C, ROOT_INO, n("a"), libc::S_IFREG | 0o600, 0, 0)
        .unwrap();
    let b = fs
        .mknod(&C, ROOT_INO, n("b"), libc::S_IFREG | 0o600, 0, 0)
        .unwrap();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    let e = fs.mkdir(&C, ROOT_INO, n("e"), 0o755, 0).unwrap();
    assert_eq!(
        fs.rename(
            &C,
            ROOT_INO,
            n("a"),
            ROOT_INO,
            n("b"),
            rename_flags::NOREPLACE
        )
        .unwrap_err(),
        Errno::EEXIST
    );
    fs.rename(&C, ROOT_INO, n("a"), ROOT_INO, n("b"), 0)
        .unwrap();
    assert_eq!(fs.lookup(&C, ROOT_INO, n("b")).unwrap().ino, a.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 0);
    assert_eq!(
        fs.rename(&C, ROOT_INO, n("b"), ROOT_INO, n("d"), 0)
            .unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(
        fs.rename(&C, ROOT_INO, n("d"), ROOT_INO, n("b"), 0)
            .unwrap_err(),
        Errno::ENOTDIR
    );
    // Directory over empty directory.
    fs.rename(&C, ROOT_INO, n("d"), ROOT_INO, n("e"), 0)
        .unwrap();
    assert_eq!(fs.getattr(e.ino).unwrap().nlink, 0);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    // Into its own subdirectory.
    let sub = fs.mkdir(&C, d.ino, n("sub"), 0o755, 0).unwrap();
    assert_eq!(
        fs.rename(&C, ROOT_INO, n("e"), sub.ino, n("x"), 0)
            .unwrap_err(),
        Errno::EINVAL
    );
    // Exchange a file and a directory across parents.
    fs.rename(&C, ROOT_INO, n("b"), sub.ino, n("f"), 0).unwrap();
    fs.mkdir(&C, ROOT_INO, n("z"), 0o755, 0).unwrap();
    fs.rename(
        &C,
        sub.ino,
        n("f"),
        ROOT_INO,
        n("z"),
        rename_flags::EXCHANGE,
    )
    .unwrap();
    assert_eq!(fs.lookup(&C, ROOT_INO, n("z")).unwrap().ino, a.ino);
    assert_eq!(
        fs.lookup(&C, sub.ino, n("f")).unwrap().kind,
        FileKind::Directory
    );
    assert_eq!(fs.getattr(sub.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
    assert_eq!(
        fs.rename(
            &C,
            ROOT_INO,
            n("q"),
            ROOT_INO,
            n("z"),
            rename_flags::EXCHANGE
        )
        .unwrap_err(),
        Errno::ENOENT
    );
    // A directory moved elsewhere knows its new `..`.
    let f = fs.lookup(&C, sub.ino, n("f")).unwrap();
    fs.rename(&C, sub.ino, n("f"), ROOT_INO, n("moved"), 0)
        .unwrap();
    assert_eq!(fs.lookup(&C, f.ino, n("..")).unwrap().ino, ROOT_INO);
}

#[test]
fn hard_links_and_link_counts() {
    let fs = fs();
    let f = fs
        .mknod(&C, ROOT_INO, n("f"), libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let l = fs.link(&C, f.ino, ROOT_INO, n("g")).unwrap();
    assert_eq!((l.ino, l.nlink), (f.ino, 2));
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert_eq!(
        fs.link(&C, d.ino, ROOT_INO, n("dl")).unwrap_err(),
        Errno::EPERM
    );
    // Renaming one link onto another of the same inode changes nothing.
    fs.rename(&C, ROOT_INO, n("f"), ROOT_INO, n("g"), 0)
        .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
}

#[test]
fn readdir_offsets_and_plus_lookups() {
    let fs = fs();
    for i in 0..10 {
        fs.mknod(
            &C,
            ROOT_INO,
            n(&format!("f{i}")),
            libc::S_IFREG | 0o644,
            0,
            0,
        )
        .unwrap();
    }
    assert_eq!(names(&fs, ROOT_INO).len(), 12);
    // Stop after 4 entries, resume from the last offset.
    let mut first = Vec::new();
    fs.readdir(ROOT_INO, 0, 0, false, &mut |e| {
        if first.len() == 4 {
            return false;
        }
        first.push((e.offset, e.name.clone()));
        true
    })
    .unwrap();
    fs.unlink(&C, ROOT_INO, n("f5")).unwrap();
    let mut rest = Vec::new();
    fs.readdir(ROOT_INO, 0, first[3].0, false, &mut |e| {
        rest.push(e.name.to_string_lossy().into_owned());
        true
    })
    .unwrap();
    assert_eq!(rest, vec!["f2", "f3", "f4", "f6", "f7", "f8", "f9"]);
    // READDIRPLUS gives a reference per real entry taken: one forget evicts an unlinked one.
    let f0 = fs.lookup(&C, ROOT_INO, n("f0")).unwrap();
    fs.forget(f0.ino, 1);
    fs.readdir(ROOT_INO, 0, 0, true, &mut |e| {
        assert_eq!(e.attr.is_some(), e.name != "." && e.name != "..");
        true
    })
    .unwrap();
    fs.unlink(&C, ROOT_INO, n("f0")).unwrap();
    assert!(fs.getattr(f0.ino).is_ok());
    fs.forget(f0.ino, 2); // create's and readdirplus's references
    assert_eq!(fs.getattr(f0.ino), Err(Errno::ESTALE));
}

#[test]
fn setgid_directories_pass_their_group_on() {
    let fs = fs();
    let d = fs
        .mkdir(
            &Caller {
                uid: 0,
                gid: 50,
                pid: 1,
            },
            ROOT_INO,
            n("shared"),
            0o2775,
            0,
        )
        .unwrap();
    assert_eq!(d.perm & 0o2000, 0o2000);
    let f = fs
        .mknod(&C, d.ino, n("f"), libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    assert_eq!((f.uid, f.gid), (1000, 50));
    let sub = fs.mkdir(&C, d.ino, n("sub"), 0o755, 0).unwrap();
    assert_eq!((sub.gid, sub.perm & 0o2000), (50, 0o2000));
}

#[test]
fn setattr_truncates_and_sets_times() {
    let fs = fs();
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_WRONLY)
        .unwrap();
    fs.write(f.ino, o.fh, 0, &[1u8; 10_000]).unwrap();
    let t = Timestamp::from_timespec(1_000_000, 123_456_789);
    let set = SetAttr {
        size: Some(10),
        mode: Some(0o4755),
        atime: Some(TimeSet::At(t)),
        ..Default::default()
    };
    let a = fs.setattr(&C, f.ino, &set).unwrap();
    assert_eq!((a.size, a.perm, a.atime, a.blocks), (10, 0o4755, t, 8));
    assert_eq!(fs.usage().bytes_used, PAGE);
    let a = fs
        .setattr(
            &C,
            f.ino,
            &SetAttr {
                size: Some(8192),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, 8192);
    assert_eq!(
        &read_all(&fs, f.ino)[..12],
        &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    );
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert_eq!(
        fs.setattr(
            &C,
            d.ino,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            }
        )
        .unwrap_err(),
        Errno::EISDIR
    );
}

#[test]
fn limits_hold_for_inodes_bytes_and_xattrs() {
    let fs = MemFs::new(MemConfig {
        size_limit: 4 * PAGE,
        inode_limit: 3,
        ..Default::default()
    })
    .unwrap();
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_WRONLY)
        .unwrap();
    fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert_eq!(
        fs.mknod(&C, ROOT_INO, n("x"), libc::S_IFIFO | 0o644, 0, 0)
            .unwrap_err(),
        Errno::ENOSPC
    );
    assert_eq!(
        fs.write(f.ino, o.fh, 0, &[7u8; 5 * PAGE as usize])
            .unwrap_err(),
        Errno::ENOSPC
    );
    assert_eq!(
        fs.getattr(f.ino).unwrap().size,
        0,
        "a failed write changes nothing"
    );
    fs.write(f.ino, o.fh, 0, &[7u8; 3 * PAGE as usize]).unwrap();
    fs.setxattr(&C, f.ino, n("user.big"), &[0u8; 4000], 0)
        .unwrap();
    assert_eq!(
        fs.setxattr(&C, f.ino, n("user.more"), &[0u8; 200], 0)
            .unwrap_err(),
        Errno::ENOSPC
    );
    fs.removexattr(&C, f.ino, n("user.big")).unwrap();
    let s = fs.statfs().unwrap();
    assert_eq!((s.blocks, s.bfree, s.files, s.ffree), (4, 1, 3, 0));
    fs.setattr(
        &C,
        f.ino,
        &SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.usage().bytes_used, 0);
}

fn atime_fs(mode: AtimeMode) -> (MemFs, u64) {
    let fs = MemFs::new(MemConfig {
        atime: AtimePolicy {
            mode,
            nodiratime: false,
        },
        ..Default::default()
    })
    .unwrap();
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(f.ino, o.fh, 0, b"data").unwrap();
    (fs, f.ino)
}

fn set_times(fs: &MemFs, ino: u64, atime: Timestamp, mtime: Timestamp) {
    let set = SetAttr {
        atime: Some(TimeSet::At(atime)),
        mtime: Some(TimeSet::At(mtime)),
        ..Default::default()
    };
    fs.setattr(&C, ino, &set).unwrap();
}

#[test]
fn atime_policies() {
    let old = Timestamp::from_timespec(1_000, 0);
    let older = Timestamp::from_timespec(500, 0);
    for (mode, expect_update_when_newer) in [
        (AtimeMode::Strict, true),
        (AtimeMode::Relatime, false),
        (AtimeMode::Noatime, false),
    ] {
        let (fs, ino) = atime_fs(mode);
        // atime newer than mtime, but also older than ctime (setattr sets ctime = now):
        // relatime updates when atime <= ctime, so compare against a recent atime instead.
        let now = Timestamp::now();
        set_times(&fs, ino, Timestamp(now.0 + 10_000_000_000), older);
        let before = fs.getattr(ino).unwrap().atime;
        read_all(&fs, ino);
        let after = fs.getattr(ino).unwrap().atime;
        assert_eq!(
            after != before,
            expect_update_when_newer,
            "{mode:?}: atime newer than mtime/ctime"
        );
        // atime == mtime: relatime and strict update, noatime does not.
        set_times(&fs, ino, old, old);
        read_all(&fs, ino);
        let after = fs.getattr(ino).unwrap().atime;
        assert_eq!(
            after != old,
            mode != AtimeMode::Noatime,
            "{mode:?}: atime == mtime"
        );
    }
}

#[test]
fn unlinked_open_files_never_update_atime() {
    let (fs, ino) = atime_fs(AtimeMode::Strict);
    let o = fs.open(&C, ino, libc::O_RDONLY).unwrap();
    let t = Timestamp::from_timespec(42, 0);
    set_times(&fs, ino, t, t);
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    read_all(&fs, ino);
    assert_eq!(fs.getattr(ino).unwrap().atime, t);
    fs.release(ino, o.fh).unwrap();
}

#[test]
fn xattrs_and_seek() {
    let fs = fs();
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!(
        fs.getxattr(f.ino, n("user.none")).unwrap_err(),
        Errno::ENODATA
    );
    fs.setxattr(&C, f.ino, n("trusted.t"), b"1", libc::XATTR_CREATE)
        .unwrap();
    fs.setxattr(&C, f.ino, n("security.s"), b"2", 0).unwrap();
    assert_eq!(fs.listxattr(f.ino).unwrap(), b"security.s\0trusted.t\0");
    assert_eq!(
        fs.setxattr(&C, f.ino, n("trusted.t"), b"1", libc::XATTR_CREATE)
            .unwrap_err(),
        Errno::EEXIST
    );
    fs.write(f.ino, o.fh, 3 * PAGE, b"x").unwrap();
    assert_eq!(fs.lseek(f.ino, o.fh, 0, libc::SEEK_DATA).unwrap(), 3 * PAGE);
    assert_eq!(fs.lseek(f.ino, o.fh, 0, libc::SEEK_HOLE).unwrap(), 0);
    let (g, og) = fs
        .create(&C, ROOT_INO, n("g"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!(
        fs.copy_file_range(f.ino, o.fh, 3 * PAGE, g.ino, og.fh, 1, 100)
            .unwrap(),
        1
    );
    assert_eq!(read_all(&fs, g.ino), b"\0x");
}

#[test]
fn concurrent_writers_and_renamers_keep_counts_consistent() {
    let fs = std::sync::Arc::new(fs());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let d = fs
                    .mkdir(&C, ROOT_INO, n(&format!("d{t}")), 0o755, 0)
                    .unwrap();
                for i in 0..200 {
                    let name = format!("f{i}");
                    let (f, o) = fs
                        .create(&C, d.ino, n(&name), 0o644, 0, libc::O_RDWR)
                        .unwrap();
                    fs.write(f.ino, o.fh, 0, &[t as u8; 5000]).unwrap();
                    fs.release(f.ino, o.fh).unwrap();
                    let other = format!("d{}", (t + 1) % 4);
                    if let Ok(od) = fs.lookup(&C, ROOT_INO, n(&other)) {
                        let _ = fs.rename(&C, d.ino, n(&name), od.ino, n(&format!("m{t}-{i}")), 0);
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut files = 0;
    for t in 0..4 {
        let d = fs.lookup(&C, ROOT_INO, n(&format!("d{t}"))).unwrap();
        files += names(&fs, d.ino).len() - 2;
    }
    assert_eq!(files, 800);
    assert_eq!(fs.usage().bytes_used, 800 * 2 * PAGE);
}

/// READDIRPLUS holds the listed directory's lock while it answers each child's attributes;
/// a rename locks both parents. With `c` inside `q` and the lower inode number, a rename
/// from `c` into `q` locks `c` then `q`, while READDIRPLUS of `q` holds `q` and answers `c`'s
/// attributes: if those needed `c`'s lock, the two would wait for each other forever.
#[test]
fn readdirplus_and_renames_of_children_and_parents_never_deadlock() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    let fs = Arc::new(fs());
    let c = fs.mkdir(&C, ROOT_INO, n("c"), 0o755, 0).unwrap().ino;
    let q = fs.mkdir(&C, ROOT_INO, n("q"), 0o755, 0).unwrap().ino;
    assert!(c < q, "the child must have the lower inode number");
    fs.rename(&C, ROOT_INO, n("c"), q, n("c"), 0).unwrap();
    fs.mkdir(&C, c, n("x"), 0o755, 0).unwrap();
    fs.mknod(&C, c, n("f"), libc::S_IFREG | 0o644, 0, 0)
        .unwrap();

    const ROUNDS: usize = 5_000;
    let stop = Arc::new(AtomicBool::new(false));
    let (done, finished) = mpsc::channel();
    let mut workers = Vec::new();
    // Entries move from the child into the parent and back (locks c, then q).
    let renamer = |from: u64, to: u64, name: &'static str| {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                fs.rename(&C, from, n(name), to, n(name), 0).unwrap();
                fs.rename(&C, to, n(name), from, n(name), 0).unwrap();
            }
            done.send(()).unwrap();
        })
    };
    workers.push(renamer(c, q, "x"));
    workers.push(renamer(c, q, "f"));
    // The parent and the child are listed with attributes all the while.
    for dir in [q, c, ROOT_INO] {
        let (fs, stop) = (fs.clone(), stop.clone());
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut seen = 0;
                fs.readdir(dir, 0, 0, true, &mut |e| {
                    let dot = e.name == "." || e.name == "..";
                    assert!(
                        dot || e.attr.is_some(),
                        "{:?} came without attributes",
                        e.name
                    );
                    seen += 1;
                    true
                })
                .unwrap();
                assert!(seen >= 2);
                // Under valgrind threads take turns: without this the listers could keep
                // the renamers from running for minutes.
                std::thread::yield_now();
            }
        }));
    }
    for _ in 0..2 {
        finished
            .recv_timeout(Duration::from_secs(300))
            .expect("renames stopped making progress: a lock cycle with READDIRPLUS");
    }
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    // Entries are where the last rename left them, and the sizes say so.
    assert_eq!(names(&fs, c).len(), 4);
    assert_eq!(fs.getattr(c).unwrap().size, 4 * 20);
    assert_eq!(fs.getattr(q).unwrap().size, 3 * 20);
}

#[test]
fn kernel_backed_files_read_write_truncate_punch_and_seek() {
    let Some(fs) = kernel_fs(64 * PAGE, AtimeMode::Relatime) else {
        return;
    };
    assert!(fs.capabilities().backing_fds);
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    let mut lent = None;
    assert!(fs.with_backing_fd(f.ino, o.fh, &mut |fd| lent =
        Some(std::os::fd::AsRawFd::as_raw_fd(&fd))));
    assert!(lent.is_some_and(|fd| fd >= 0));
    fs.write(f.ino, o.fh, 10_000, b"abc").unwrap();
    let data = read_all(&fs, f.ino);
    assert_eq!(data.len(), 10_003);
    assert!(data[..10_000].iter().all(|b| *b == 0));
    assert_eq!(fs.lseek(f.ino, o.fh, 0, libc::SEEK_DATA).unwrap(), 2 * PAGE);
    fs.setattr(
        &C,
        f.ino,
        &SetAttr {
            size: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 5);
    fs.write(f.ino, o.fh, 0, &[1u8; 3 * PAGE as usize]).unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fs.fallocate(f.ino, o.fh, PAGE, PAGE, punch).unwrap();
    let data = read_all(&fs, f.ino);
    assert!(data[PAGE as usize..2 * PAGE as usize]
        .iter()
        .all(|b| *b == 0));
    assert_eq!(data[0], 1);
    // The kernel enforces size=: writes stop short, earlier data intact.
    let big = vec![2u8; 128 * PAGE as usize];
    let written = fs.write(f.ino, o.fh, 0, &big).unwrap() as usize;
    assert!(written < big.len());
    assert!(read_all(&fs, f.ino)[..written].iter().all(|b| *b == 2));
    let t = Timestamp::from_timespec(77, 5);
    let a = fs
        .setattr(
            &C,
            f.ino,
            &SetAttr {
                mtime: Some(TimeSet::At(t)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.mtime, t);
    assert!(fs.statfs().unwrap().blocks == 64);
}

#[test]
fn kernel_backed_files_keep_their_backing_while_named() {
    let page_store = fs();
    let (f, _) = page_store
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert!(
        !page_store.keeps_backing(f.ino),
        "the page store lends none"
    );
    let Some(fs) = kernel_fs(0, AtimeMode::Relatime) else {
        return;
    };
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert!(fs.keeps_backing(f.ino));
    fs.release(f.ino, o.fh).unwrap();
    assert!(fs.keeps_backing(f.ino), "closed, still named");
    let o = fs.open(&C, f.ino, libc::O_RDONLY).unwrap();
    let mut lent = false;
    assert!(fs.with_backing_fd(f.ino, o.fh, &mut |_| lent = true) && lent);
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    assert!(!fs.keeps_backing(f.ino), "unlinked");
    fs.release(f.ino, o.fh).unwrap();
    fs.forget(f.ino, 1);
    assert!(!fs.keeps_backing(f.ino), "gone");
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert!(!fs.keeps_backing(d.ino), "a directory has no data file");
}

#[test]
fn kernel_backed_unlinked_files_keep_their_atime() {
    let Some(fs) = kernel_fs(0, AtimeMode::Strict) else {
        return;
    };
    let (f, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(f.ino, o.fh, 0, b"data").unwrap();
    let t = Timestamp::from_timespec(1_000, 0);
    set_times(&fs, f.ino, t, t);
    read_all(&fs, f.ino);
    assert_ne!(
        fs.getattr(f.ino).unwrap().atime,
        t,
        "strictatime: a read updates atime"
    );
    set_times(&fs, f.ino, t, t);
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    read_all(&fs, f.ino);
    assert_eq!(fs.getattr(f.ino).unwrap().atime, t);
    fs.release(f.ino, o.fh).unwrap();
}

#[test]
fn forgetting_everything_frees_what_only_the_kernel_held() {
    let fs = fs();
    let base = fs.usage();
    let (attr, o) = fs
        .create(&C, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(attr.ino, o.fh, 0, b"data").unwrap();
    fs.release(attr.ino, o.fh).unwrap();
    let kept = fs
        .create(&C, ROOT_INO, n("kept"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.release(kept.0.ino, kept.1.fh).unwrap();
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    assert!(
        fs.getattr(attr.ino).is_ok(),
        "the kernel's reference keeps it"
    );
    fs.forget_all();
    assert_eq!(
        fs.getattr(attr.ino),
        Err(Errno::ESTALE),
        "freed with its data"
    );
    assert_eq!(
        fs.getattr(kept.0.ino).unwrap().nlink,
        1,
        "a named file stays"
    );
    assert!(fs.getattr(ROOT_INO).is_ok());
    fs.unlink(&C, ROOT_INO, n("kept")).unwrap();
    assert_eq!(fs.usage(), base);
}
