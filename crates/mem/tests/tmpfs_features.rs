//! RENAME_WHITEOUT, O_TMPFILE and inode flags in the mem backend, through the `Backend`
//! trait; expected answers are kernel tmpfs's for the same calls.

mod common;

use common::{fs, kernel_fs, n, names, read_all, C};
use memofs_core::atime::AtimeMode;
use memofs_core::inode_flags::{APPEND, IMMUTABLE, NOATIME, NODUMP, SYNC};
use memofs_core::{rename_flags, Backend, Errno, FileKind, SetAttr, TimeSet, Timestamp, ROOT_INO};
use memofs_mem::{MemConfig, MemFs};

const DATA_WRITE: i32 = libc::O_WRONLY;

fn file(fs: &MemFs, dir: u64, name: &str) -> u64 {
    let (a, o) = fs.create(&C, dir, n(name), 0o644, 0, libc::O_RDWR).unwrap();
    fs.write(a.ino, o.fh, 0, b"data").unwrap();
    fs.release(a.ino, o.fh).unwrap();
    a.ino
}

#[test]
fn rename_whiteout_leaves_a_character_device_0_0() {
    let fs = MemFs::new(MemConfig {
        inode_limit: 4,
        ..Default::default()
    })
    .unwrap();
    let a = file(&fs, ROOT_INO, "a");
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.rename(&C, ROOT_INO, n("a"), d, n("b"), rename_flags::WHITEOUT)
        .unwrap();
    let w = fs.lookup(&C, ROOT_INO, n("a")).unwrap();
    assert_eq!(
        (w.kind, w.perm, w.rdev, w.nlink, w.uid, w.gid),
        (FileKind::CharDevice, 0, 0, 1, C.uid, C.gid)
    );
    assert_eq!(fs.lookup(&C, d, n("b")).unwrap().ino, a);
    assert_eq!(fs.usage().inodes_used, 4, "the whiteout is an inode");
    // No inode left for another whiteout: nothing changes.
    assert_eq!(
        fs.rename(&C, d, n("b"), d, n("c"), rename_flags::WHITEOUT),
        Err(Errno::ENOSPC)
    );
    assert_eq!(names(&fs, d), [".", "..", "b"]);
    // Whiteout with exchange is invalid; with noreplace it is fine.
    assert_eq!(
        fs.rename(
            &C,
            d,
            n("b"),
            ROOT_INO,
            n("a"),
            rename_flags::WHITEOUT | rename_flags::EXCHANGE
        ),
        Err(Errno::EINVAL)
    );
}

#[test]
fn rename_whiteout_of_a_directory_moves_the_link_count() {
    let fs = fs();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.mkdir(&C, d, n("sub"), 0o755, 0).unwrap();
    let flags = rename_flags::WHITEOUT | rename_flags::NOREPLACE;
    fs.rename(&C, d, n("sub"), ROOT_INO, n("sub"), flags)
        .unwrap();
    assert_eq!(
        fs.lookup(&C, d, n("sub")).unwrap().kind,
        FileKind::CharDevice
    );
    assert_eq!(fs.getattr(d).unwrap().nlink, 2);
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 4);
    assert_eq!(
        fs.rename(&C, ROOT_INO, n("sub"), ROOT_INO, n("d"), flags),
        Err(Errno::EEXIST)
    );
}

#[test]
fn tmpfile_has_no_name_until_linked() {
    let fs = fs();
    let base = fs.usage().inodes_used;
    let (t, o) = fs
        .tmpfile(&C, ROOT_INO, 0o644, 0o022, libc::O_RDWR)
        .unwrap();
    assert_eq!((t.nlink, t.perm, t.kind), (0, 0o644, FileKind::Regular));
    assert_eq!(fs.usage().inodes_used, base + 1);
    assert_eq!(names(&fs, ROOT_INO), [".", ".."]);
    fs.write(t.ino, o.fh, 0, b"hidden").unwrap();
    let l = fs.link(&C, t.ino, ROOT_INO, n("named")).unwrap();
    assert_eq!((l.ino, l.nlink), (t.ino, 1));
    assert_eq!(read_all(&fs, t.ino), b"hidden");
    fs.release(t.ino, o.fh).unwrap();
    fs.forget(t.ino, 2);
    assert_eq!(fs.lookup(&C, ROOT_INO, n("named")).unwrap().ino, t.ino);
    // With O_EXCL it never gets a name; released and forgotten, it is gone.
    let (x, o) = fs
        .tmpfile(&C, ROOT_INO, 0o600, 0, libc::O_RDWR | libc::O_EXCL)
        .unwrap();
    assert_eq!(
        fs.link(&C, x.ino, ROOT_INO, n("x")).unwrap_err(),
        Errno::ENOENT
    );
    fs.release(x.ino, o.fh).unwrap();
    fs.forget(x.ino, 1);
    assert_eq!(fs.getattr(x.ino), Err(Errno::ESTALE));
    // An unlinked file does not get a name again.
    fs.unlink(&C, ROOT_INO, n("named")).unwrap();
    assert_eq!(
        fs.link(&C, t.ino, ROOT_INO, n("again")).unwrap_err(),
        Errno::ENOENT
    );
    // The directory must still exist.
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.rmdir(&C, ROOT_INO, n("d")).unwrap();
    assert_eq!(
        fs.tmpfile(&C, d, 0o600, 0, libc::O_RDWR).unwrap_err(),
        Errno::ENOENT
    );
}

#[test]
fn flags_are_kept_inherited_and_limited_to_what_tmpfs_keeps() {
    let fs = fs();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    assert_eq!(fs.get_flags(d), Ok(0));
    let before = fs.getattr(d).unwrap().ctime;
    fs.set_flags(&C, d, NODUMP | NOATIME).unwrap();
    assert_eq!(fs.get_flags(d), Ok(NODUMP | NOATIME));
    assert!(fs.getattr(d).unwrap().ctime >= before);
    assert_eq!(fs.set_flags(&C, d, SYNC), Err(Errno::EOPNOTSUPP));
    let f = file(&fs, d, "f");
    assert_eq!(fs.get_flags(f), Ok(NODUMP | NOATIME), "inherited");
    let sub = fs.mkdir(&C, d, n("sub"), 0o755, 0).unwrap().ino;
    fs.set_flags(&C, d, IMMUTABLE | NODUMP).unwrap();
    assert_eq!(fs.get_flags(sub), Ok(NODUMP | NOATIME));
    let l = fs.symlink(&C, ROOT_INO, n("l"), n("x")).unwrap().ino;
    assert_eq!(fs.get_flags(l), Err(Errno::ENOTTY));
    assert_eq!(fs.set_flags(&C, l, 0), Err(Errno::ENOTTY));
}

fn set(f: impl FnOnce(&mut SetAttr)) -> SetAttr {
    let mut s = SetAttr::default();
    f(&mut s);
    s
}

#[test]
fn immutable_inodes_refuse_changes() {
    let fs = fs();
    let f = file(&fs, ROOT_INO, "f");
    let before_flag = fs.open(&C, f, libc::O_RDWR).unwrap();
    fs.set_flags(&C, f, IMMUTABLE).unwrap();
    let eperm = Err(Errno::EPERM);
    assert_eq!(fs.open(&C, f, DATA_WRITE).map(drop), eperm);
    assert_eq!(
        fs.open(&C, f, libc::O_WRONLY | libc::O_APPEND).map(drop),
        eperm
    );
    assert_eq!(
        fs.open(&C, f, libc::O_RDONLY | libc::O_TRUNC).map(drop),
        eperm
    );
    let r = fs.open(&C, f, libc::O_RDONLY).unwrap();
    fs.release(f, r.fh).unwrap();
    // A descriptor opened before keeps writing, and may truncate (as on tmpfs).
    fs.write(f, before_flag.fh, 0, b"DA").unwrap();
    let ftruncate = set(|s| {
        s.size = Some(2);
        s.fh = Some(before_flag.fh);
    });
    fs.setattr(&C, f, &ftruncate).unwrap();
    fs.release(f, before_flag.fh).unwrap();
    for s in [
        set(|s| s.size = Some(0)),
        set(|s| s.mode = Some(0o600)),
        set(|s| s.uid = Some(0)),
        set(|s| s.atime = Some(TimeSet::Now)),
        set(|s| s.mtime = Some(TimeSet::At(Timestamp::from_timespec(5, 0)))),
    ] {
        assert_eq!(fs.setattr(&C, f, &s).map(drop), eperm, "{s:?}");
    }
    assert_eq!(fs.setxattr(&C, f, n("user.a"), b"1", 0), eperm);
    assert_eq!(fs.removexattr(&C, f, n("user.a")), eperm);
    assert_eq!(fs.fallocate(f, 0, 0, 4096, 0), eperm);
    assert_eq!(fs.link(&C, f, ROOT_INO, n("g")).map(drop), eperm);
    assert_eq!(fs.unlink(&C, ROOT_INO, n("f")), eperm);
    assert_eq!(fs.rename(&C, ROOT_INO, n("f"), ROOT_INO, n("g"), 0), eperm);
    let g = file(&fs, ROOT_INO, "g");
    assert_eq!(fs.rename(&C, ROOT_INO, n("g"), ROOT_INO, n("f"), 0), eperm);
    let (src, dst) = (fs.open(&C, g, libc::O_RDONLY).unwrap(), 0);
    assert_eq!(
        fs.copy_file_range(g, src.fh, 0, f, dst, 0, 2).map(drop),
        eperm
    );
    fs.release(g, src.fh).unwrap();
    // An immutable directory: no entry comes or goes.
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    let inside = file(&fs, d, "in");
    fs.set_flags(&C, d, IMMUTABLE).unwrap();
    assert_eq!(fs.mkdir(&C, d, n("x"), 0o755, 0).map(drop), eperm);
    assert_eq!(fs.symlink(&C, d, n("x"), n("y")).map(drop), eperm);
    assert_eq!(fs.tmpfile(&C, d, 0o600, 0, libc::O_RDWR).map(drop), eperm);
    assert_eq!(fs.unlink(&C, d, n("in")), eperm);
    assert_eq!(fs.link(&C, g, d, n("x")).map(drop), eperm);
    assert_eq!(fs.rename(&C, ROOT_INO, n("g"), d, n("x"), 0), eperm);
    let w = fs.open(&C, inside, DATA_WRITE).unwrap();
    fs.release(inside, w.fh).unwrap();
    // Flags come off again, and everything works.
    fs.set_flags(&C, f, 0).unwrap();
    fs.set_flags(&C, d, 0).unwrap();
    fs.unlink(&C, ROOT_INO, n("f")).unwrap();
    fs.unlink(&C, d, n("in")).unwrap();
}

#[test]
fn append_only_files_take_appends_only() {
    let fs = fs();
    let f = file(&fs, ROOT_INO, "f");
    fs.set_flags(&C, f, APPEND).unwrap();
    let eperm = Err(Errno::EPERM);
    assert_eq!(fs.open(&C, f, libc::O_WRONLY).map(drop), eperm);
    assert_eq!(fs.open(&C, f, libc::O_RDWR).map(drop), eperm);
    let trunc = libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC;
    assert_eq!(fs.open(&C, f, trunc).map(drop), eperm);
    let o = fs.open(&C, f, libc::O_WRONLY | libc::O_APPEND).unwrap();
    fs.write(f, o.fh, 4, b"+more").unwrap();
    let ftruncate = set(|s| {
        s.size = Some(0);
        s.fh = Some(o.fh);
    });
    assert_eq!(fs.setattr(&C, f, &ftruncate).map(drop), eperm);
    fs.release(f, o.fh).unwrap();
    assert_eq!(read_all(&fs, f), b"data+more");
    // Touching is allowed, explicit times are not.
    let touch = set(|s| {
        s.atime = Some(TimeSet::Now);
        s.mtime = Some(TimeSet::Now);
    });
    fs.setattr(&C, f, &touch).unwrap();
    let at = set(|s| s.atime = Some(TimeSet::At(Timestamp::from_timespec(1, 0))));
    assert_eq!(fs.setattr(&C, f, &at).map(drop), eperm);
    assert_eq!(
        fs.setattr(&C, f, &set(|s| s.mode = Some(0o600))).map(drop),
        eperm
    );
    // Plain allocation only.
    fs.fallocate(f, 0, 0, 8192, libc::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(fs.fallocate(f, 0, 0, 4096, punch), eperm);
    assert_eq!(fs.setxattr(&C, f, n("user.a"), b"1", 0), eperm);
    assert_eq!(fs.unlink(&C, ROOT_INO, n("f")), eperm);
    assert_eq!(fs.link(&C, f, ROOT_INO, n("g")).map(drop), eperm);
    // An append-only directory takes new entries and keeps them.
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.set_flags(&C, d, APPEND).unwrap();
    file(&fs, d, "new");
    assert_eq!(fs.unlink(&C, d, n("new")), eperm);
    assert_eq!(fs.rename(&C, d, n("new"), d, n("newer"), 0), eperm);
    let g = file(&fs, ROOT_INO, "g");
    fs.rename(&C, ROOT_INO, n("g"), d, n("g"), 0).unwrap();
    let h = file(&fs, ROOT_INO, "h");
    assert_eq!(fs.rename(&C, ROOT_INO, n("h"), d, n("g"), 0), eperm);
    assert_ne!(g, h);
}

#[test]
fn noatime_flag_keeps_atime() {
    let fs = MemFs::new(MemConfig {
        atime: memofs_core::AtimePolicy {
            mode: AtimeMode::Strict,
            nodiratime: false,
        },
        ..Default::default()
    })
    .unwrap();
    check_noatime(&fs);
}

#[test]
fn noatime_flag_keeps_atime_of_kernel_backed_data() {
    let Some(fs) = kernel_fs(0, AtimeMode::Strict) else {
        return;
    };
    check_noatime(&fs);
}

/// On a strictatime filesystem, reads update atime except with `chattr +A`.
fn check_noatime(fs: &MemFs) {
    let f = file(fs, ROOT_INO, "f");
    let t = Timestamp::from_timespec(1_000, 0);
    let times = set(|s| {
        s.atime = Some(TimeSet::At(t));
        s.mtime = Some(TimeSet::At(t));
    });
    fs.set_flags(&C, f, NOATIME).unwrap();
    fs.setattr(&C, f, &times).unwrap();
    read_all(fs, f);
    assert_eq!(fs.getattr(f).unwrap().atime, t, "+A: reads leave atime");
    fs.set_flags(&C, f, 0).unwrap();
    read_all(fs, f);
    assert_ne!(fs.getattr(f).unwrap().atime, t, "-A: reads update atime");
}
