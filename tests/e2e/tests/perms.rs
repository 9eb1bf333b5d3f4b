//! Ownership of new files, setgid directories, permission checks, sticky directories and
//! set-user-ID clearing, acting as unprivileged users (per-thread credentials).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use memofs_e2e::user::{as_user, USER1, USER2};
use memofs_e2e::{assert_errno, ok, require_mount, skip, sys, Mount};

macro_rules! need_mount {
    () => {{
        require_mount!();
        Mount::mem(&["size=64m", "allow_other"])
    }};
}

fn owner(p: &std::path::Path) -> (u32, u32) {
    let md = ok!(fs::symlink_metadata(p), "lstat {}", p.display());
    (md.uid(), md.gid())
}

#[test]
fn new_files_belong_to_the_caller() {
    let m = need_mount!();
    let (uid, gid) = USER1;
    let root: PathBuf = m.path().into();
    as_user(uid, gid, &[], move || {
        ok!(fs::write(root.join("file"), b"mine"), "create as uid {uid}");
        ok!(fs::create_dir(root.join("dir")), "mkdir as uid {uid}");
        ok!(std::os::unix::fs::symlink("file", root.join("link")));
        ok!(sys::mkfifo(root.join("fifo"), 0o644));
        ok!(fs::write(root.join("dir/inner"), b""));
    });
    for p in ["file", "dir", "link", "fifo", "dir/inner"] {
        assert_eq!(
            owner(&m.join(p)),
            (uid, gid),
            "owner of {p} created by {uid}:{gid}"
        );
    }
    // Root's files are root's.
    ok!(fs::write(m.join("rootfile"), b""));
    assert_eq!(owner(&m.join("rootfile")), (0, 0));
}

#[test]
fn setgid_directories_pass_their_group_on() {
    let m = need_mount!();
    let d = m.join("shared");
    ok!(fs::create_dir(&d));
    ok!(sys::chown(&d, 0, 5555));
    ok!(sys::chmod(&d, 0o2777));
    let (uid, gid) = USER1;
    let dd = d.clone();
    as_user(uid, gid, &[], move || {
        ok!(fs::write(dd.join("f"), b""));
        ok!(fs::create_dir(dd.join("sub")));
        ok!(sys::mknod(dd.join("p"), libc::S_IFIFO | 0o644, 0));
    });
    assert_eq!(
        owner(&d.join("f")),
        (uid, 5555),
        "file in a setgid dir gets the dir's group"
    );
    assert_eq!(
        owner(&d.join("p")),
        (uid, 5555),
        "fifo in a setgid dir gets the dir's group"
    );
    assert_eq!(
        owner(&d.join("sub")),
        (uid, 5555),
        "subdir in a setgid dir gets the dir's group"
    );
    let sub_mode = ok!(fs::metadata(d.join("sub"))).mode();
    assert!(
        sub_mode & libc::S_ISGID != 0,
        "subdir of a setgid dir is setgid too (mode {sub_mode:o})"
    );
    // A user not in the group creating a file with S_ISGID there: the bit is dropped.
    let dd = d.clone();
    as_user(uid, gid, &[], move || {
        drop(ok!(sys::open(
            dd.join("g"),
            libc::O_CREAT | libc::O_WRONLY,
            0o2755
        )));
    });
    let g_mode = ok!(fs::metadata(d.join("g"))).mode();
    assert_eq!(
        g_mode & libc::S_ISGID,
        0,
        "S_ISGID dropped for a creator outside the file's group (mode {g_mode:o})"
    );
}

#[test]
fn permission_checks_for_other_users() {
    let m = need_mount!();
    let f = m.join("rootfile");
    ok!(fs::write(&f, b"secret"));
    ok!(sys::chmod(&f, 0o644));
    let priv_ = m.join("private");
    ok!(fs::create_dir(&priv_));
    ok!(sys::chmod(&priv_, 0o700));
    ok!(fs::write(priv_.join("x"), b""));
    let (uid, gid) = USER1;
    let (f2, p2, root) = (f.clone(), priv_.clone(), m.path().to_path_buf());
    as_user(uid, gid, &[], move || {
        assert_eq!(ok!(fs::read(&f2)), b"secret", "others may read a 0644 file");
        assert_errno!(
            OpenOptions::new().write(true).open(&f2),
            libc::EACCES,
            "open a 0644 root file for writing"
        );
        assert_errno!(
            sys::truncate(&f2, 0),
            libc::EACCES,
            "truncate a 0644 root file"
        );
        assert_errno!(
            sys::chmod(&f2, 0o666),
            libc::EPERM,
            "chmod someone else's file"
        );
        assert_errno!(
            sys::chown(&f2, uid, gid),
            libc::EPERM,
            "chown someone else's file"
        );
        assert_errno!(
            sys::utimensat(&f2, sys::Ts::At(1, 0), sys::Ts::At(1, 0), 0),
            libc::EPERM,
            "set explicit times on someone else's file"
        );
        assert_errno!(
            sys::utimensat(&f2, sys::Ts::Now, sys::Ts::Now, 0),
            libc::EACCES,
            "touch a file without write permission"
        );
        assert_errno!(
            sys::setxattr(&f2, "user.x", b"v", 0),
            libc::EACCES,
            "user.* xattr without write permission"
        );
        assert_errno!(
            sys::setxattr(&f2, "trusted.x", b"v", 0),
            libc::EPERM,
            "trusted.* xattr as a user"
        );
        assert_errno!(
            fs::read_dir(&p2),
            libc::EACCES,
            "list a 0700 root directory"
        );
        assert_errno!(
            fs::metadata(p2.join("x")),
            libc::EACCES,
            "search a 0700 root directory"
        );
        assert_errno!(
            fs::write(p2.join("y"), b""),
            libc::EACCES,
            "create in a 0700 root directory"
        );
        // The root directory is 1777 by default: anyone may create.
        ok!(fs::write(root.join("userfile"), b"u"));
        // A user can chmod and chown (to a group they are in) their own file.
        ok!(sys::chmod(root.join("userfile"), 0o600));
        ok!(sys::chown(root.join("userfile"), u32::MAX, gid));
        assert_errno!(
            sys::chown(root.join("userfile"), u32::MAX, 9999),
            libc::EPERM,
            "chgrp to a group one is not in"
        );
        assert_errno!(
            sys::chown(root.join("userfile"), 0, u32::MAX),
            libc::EPERM,
            "give a file away"
        );
    });
    // Root is not restricted by mode bits.
    ok!(sys::chmod(&f, 0o000));
    assert_eq!(ok!(fs::read(&f)), b"secret");
    // A user's 0600 file is closed to another user.
    let uf = m.join("userfile");
    let (uid2, gid2) = USER2;
    as_user(uid2, gid2, &[], move || {
        assert_errno!(
            File::open(&uf),
            libc::EACCES,
            "read another user's 0600 file"
        );
    });
}

#[test]
fn group_and_supplementary_group_permissions() {
    let m = need_mount!();
    let f = m.join("groupfile");
    ok!(fs::write(&f, b"g"));
    ok!(sys::chown(&f, 0, 7777));
    ok!(sys::chmod(&f, 0o660));
    let (uid, gid) = USER1;
    let f2 = f.clone();
    as_user(uid, gid, &[7777], move || {
        ok!(
            OpenOptions::new().write(true).open(&f2),
            "write as a member of the file's group (supplementary)"
        );
    });
    let f3 = f.clone();
    as_user(uid, gid, &[], move || {
        assert_errno!(File::open(&f3), libc::EACCES, "read as a non-member");
    });
}

#[test]
fn sticky_directory_protects_other_users_files() {
    let m = need_mount!();
    let t = m.join("tmp");
    ok!(fs::create_dir(&t));
    ok!(sys::chmod(&t, 0o1777));
    let t1 = t.clone();
    as_user(USER1.0, USER1.1, &[], move || {
        ok!(fs::write(t1.join("mine"), b"1"))
    });
    let t2 = t.clone();
    as_user(USER2.0, USER2.1, &[], move || {
        assert_errno!(
            fs::remove_file(t2.join("mine")),
            libc::EPERM,
            "unlink another user's file in a sticky dir"
        );
        assert_errno!(
            fs::rename(t2.join("mine"), t2.join("stolen")),
            libc::EPERM,
            "rename another user's file in a sticky dir"
        );
        ok!(fs::write(t2.join("theirs"), b"2"));
        ok!(
            fs::remove_file(t2.join("theirs")),
            "unlink one's own file in a sticky dir"
        );
    });
    let t3 = t.clone();
    as_user(USER1.0, USER1.1, &[], move || {
        ok!(fs::remove_file(t3.join("mine")))
    });
}

#[test]
fn writing_clears_setuid_and_setgid() {
    let m = need_mount!();
    let f = m.join("suid");
    ok!(fs::write(&f, b"#!/bin/sh\n"));
    ok!(sys::chown(&f, USER1.0, USER1.1));
    ok!(sys::chmod(&f, 0o6775));
    let f2 = f.clone();
    as_user(USER1.0, USER1.1, &[], move || {
        let w = ok!(OpenOptions::new().write(true).open(&f2));
        ok!(w.write_all_at(b"# changed\n", 10));
    });
    let mode = ok!(fs::metadata(&f)).mode() & 0o7777;
    assert_eq!(
        mode, 0o0775,
        "a write by a non-root user clears S_ISUID and S_ISGID (got {mode:o})"
    );
    // Truncation by a non-root owner clears them too.
    ok!(sys::chmod(&f, 0o4755));
    let f3 = f.clone();
    as_user(USER1.0, USER1.1, &[], move || ok!(sys::truncate(&f3, 1)));
    assert_eq!(
        ok!(fs::metadata(&f)).mode() & 0o7777,
        0o0755,
        "truncate by the owner clears S_ISUID"
    );
    // Root keeps them (CAP_FSETID).
    ok!(sys::chmod(&f, 0o4755));
    ok!(ok!(OpenOptions::new().write(true).open(&f)).write_all_at(b"x", 0));
    assert_eq!(
        ok!(fs::metadata(&f)).mode() & 0o7777,
        0o4755,
        "a write by root keeps S_ISUID"
    );
}

#[test]
fn chown_clears_setuid_and_setgid_on_every_non_directory() {
    let m = need_mount!();
    let other_group = 5555;
    let nodes: [(&str, u32, u64); 5] = [
        ("file", libc::S_IFREG, 0),
        ("fifo", libc::S_IFIFO, 0),
        ("socket", libc::S_IFSOCK, 0),
        ("chardev", libc::S_IFCHR, sys::makedev(1, 3)),
        ("blockdev", libc::S_IFBLK, sys::makedev(7, 0)),
    ];
    for (name, kind, dev) in nodes {
        let p = m.join(name);
        ok!(sys::mknod(&p, kind | 0o644, dev), "mknod {name}");
        ok!(sys::chown(&p, USER1.0, USER1.1));
        // The owner gives it to another of its groups.
        ok!(sys::chmod(&p, 0o6555));
        let q = p.clone();
        as_user(USER1.0, USER1.1, &[USER1.1, other_group], move || {
            ok!(
                sys::chown(&q, u32::MAX, other_group),
                "chown {name} as its owner"
            )
        });
        let md = ok!(fs::symlink_metadata(&p));
        assert_eq!(
            (md.mode() & 0o7777, md.gid()),
            (0o0555, other_group),
            "{name} 06555 after its owner chowns it to another of its groups"
        );
        // Root's chown clears them too.
        ok!(sys::chmod(&p, 0o6555));
        ok!(sys::chown(&p, 0, 0), "chown {name} as root");
        let mode = ok!(fs::symlink_metadata(&p)).mode() & 0o7777;
        assert_eq!(mode, 0o0555, "{name} 06555 after root chowns it");
    }
    // Directories keep them.
    let d = m.join("dir");
    ok!(fs::create_dir(&d));
    ok!(sys::chmod(&d, 0o6755));
    ok!(sys::chown(&d, USER1.0, USER1.1));
    let mode = ok!(fs::metadata(&d)).mode() & 0o7777;
    assert_eq!(mode, 0o6755, "a directory keeps setuid/setgid across chown");
}

#[test]
fn without_allow_other_other_users_are_refused() {
    require_mount!();
    let m = Mount::mem(&["size=16m"]);
    if !m.is_memofs() {
        skip!(Config("tmpfs_reference"), "FUSE-specific (allow_other)");
    }
    ok!(fs::write(m.join("f"), b""));
    ok!(sys::chmod(m.join("f"), 0o666));
    let p = m.join("f");
    as_user(USER1.0, USER1.1, &[], move || {
        assert_errno!(
            fs::metadata(&p),
            libc::EACCES,
            "stat in a FUSE mount without allow_other as another user"
        );
    });
}
