//! Credentials: inodes created through the backend belong to the caller, and the host
//! checks those operations as the caller. Needs root (skipped otherwise).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{is_root, n, setup, walk, USER};
use memofs_core::{Backend, Caller, Errno, ROOT_INO};

#[test]
fn created_inodes_belong_to_the_caller() {
    if !is_root() {
        memofs_e2e::skip!(Root);
    }
    let (_t, export, fs) = setup("owner");
    let (f, o) = fs
        .create(&USER, ROOT_INO, n("file"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    fs.release(f.ino, o.fh).unwrap();
    let d = fs.mkdir(&USER, ROOT_INO, n("dir"), 0o755, 0).unwrap();
    let p = fs
        .mknod(&USER, ROOT_INO, n("fifo"), libc::S_IFIFO | 0o644, 0, 0)
        .unwrap();
    let l = fs.symlink(&USER, ROOT_INO, n("link"), n("file")).unwrap();
    for a in [d, p, l] {
        assert_eq!((a.uid, a.gid), (1000, 1000));
    }
    for name in ["file", "dir", "fifo", "link"] {
        let m = std::fs::symlink_metadata(export.join(name)).unwrap();
        assert_eq!((m.uid(), m.gid()), (1000, 1000), "{name} on the host");
    }
    // The request thread is back to root afterwards: a root-only create works.
    let (r, o) = fs
        .create(&Caller::ROOT, d.ino, n("by-root"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!((r.uid, r.gid), (0, 0));
    fs.release(r.ino, o.fh).unwrap();
}

#[test]
fn the_host_checks_creation_as_the_caller() {
    if !is_root() {
        memofs_e2e::skip!(Root);
    }
    let (_t, export, fs) = setup("deny");
    std::fs::create_dir(export.join("rootonly")).unwrap();
    std::fs::set_permissions(
        export.join("rootonly"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let d = walk(&fs, "rootonly").unwrap();
    assert_eq!(fs.mkdir(&USER, d.ino, n("x"), 0o755, 0), Err(Errno::EACCES));
    assert_eq!(
        fs.create(&USER, d.ino, n("x"), 0o644, 0, libc::O_RDWR)
            .map(|_| ()),
        Err(Errno::EACCES)
    );
    // Device nodes need CAP_MKNOD, which a non-root caller does not have.
    assert_eq!(
        fs.mknod(
            &USER,
            ROOT_INO,
            n("null"),
            libc::S_IFCHR | 0o666,
            0,
            (1 << 8) | 3
        ),
        Err(Errno::EPERM)
    );
    assert!(std::fs::read_dir(export.join("rootonly"))
        .unwrap()
        .next()
        .is_none());
}

#[test]
fn setgid_directories_pass_their_group_on() {
    if !is_root() {
        memofs_e2e::skip!(Root);
    }
    let (_t, export, fs) = setup("setgid");
    let shared = export.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, None, Some(2000)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o2777)).unwrap();
    let d = walk(&fs, "shared").unwrap();
    let sub = fs.mkdir(&USER, d.ino, n("sub"), 0o755, 0).unwrap();
    assert_eq!((sub.uid, sub.gid), (1000, 2000));
    assert_ne!(sub.perm & 0o2000, 0, "subdirectories inherit set-gid");
}

#[test]
fn xattr_changes_are_checked_as_the_caller() {
    if !is_root() {
        memofs_e2e::skip!(Root);
    }
    let (_t, export, fs) = setup("xattrcreds");
    std::fs::write(export.join("root-file"), b"").unwrap();
    std::fs::set_permissions(
        export.join("root-file"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let f = walk(&fs, "root-file").unwrap();
    assert_eq!(
        fs.setxattr(&USER, f.ino, n("user.k"), b"v", 0),
        Err(Errno::EACCES)
    );
    fs.setxattr(&Caller::ROOT, f.ino, n("user.k"), b"v", 0)
        .unwrap();
    assert_eq!(
        fs.removexattr(&USER, f.ino, n("user.k")),
        Err(Errno::EACCES)
    );
    // Reading is checked by the kernel, not here.
    assert_eq!(fs.getxattr(f.ino, n("user.k")).unwrap(), b"v");
    let (mine, o) = fs
        .create(&USER, ROOT_INO, n("mine"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.release(mine.ino, o.fh).unwrap();
    fs.setxattr(&USER, mine.ino, n("user.k"), b"mine", 0)
        .unwrap();
    fs.removexattr(&USER, mine.ino, n("user.k")).unwrap();
}
