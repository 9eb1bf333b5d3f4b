//! Confinement: nothing done through the backend reaches outside the exported directory,
//! whatever symlinks, `..` names or host-side swaps it meets.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{n, setup, walk, TempDir};
use memofs_core::{Backend, Caller, Errno, FileKind, SetAttr, TimeSet, Timestamp, ROOT_INO};

const ROOT: Caller = Caller::ROOT;

/// A directory outside the export with a file in it, to check nothing touches it.
fn outside(tmp: &TempDir) -> std::path::PathBuf {
    let out = tmp.join("outside");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("secret"), b"secret").unwrap();
    out
}

#[test]
fn symlinks_are_returned_as_themselves_and_never_followed() {
    let (tmp, export, fs) = setup("symlink");
    let out = outside(&tmp);
    std::os::unix::fs::symlink(&out, export.join("abs")).unwrap();
    std::os::unix::fs::symlink("../outside", export.join("rel")).unwrap();
    std::os::unix::fs::symlink("/etc", export.join("etc")).unwrap();
    let secret_before = std::fs::metadata(out.join("secret")).unwrap();
    for (name, target) in [
        ("abs", out.to_str().unwrap()),
        ("rel", "../outside"),
        ("etc", "/etc"),
    ] {
        let l = fs.lookup(&ROOT, ROOT_INO, n(name)).unwrap();
        assert_eq!(l.kind, FileKind::Symlink, "{name}");
        assert_eq!(fs.readlink(l.ino).unwrap(), target.as_bytes());
        // Nothing resolves through it.
        assert_eq!(fs.lookup(&ROOT, l.ino, n("secret")), Err(Errno::ENOTDIR));
        assert_eq!(fs.lookup(&ROOT, l.ino, n("passwd")), Err(Errno::ENOTDIR));
        assert_eq!(fs.opendir(&ROOT, l.ino, 0), Err(Errno::ENOTDIR));
        assert_eq!(fs.open(&ROOT, l.ino, libc::O_RDWR), Err(Errno::ELOOP));
        assert_eq!(
            fs.mkdir(&ROOT, l.ino, n("x"), 0o755, 0),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(
            fs.mknod(&ROOT, l.ino, n("x"), libc::S_IFREG | 0o644, 0, 0),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(
            fs.symlink(&ROOT, l.ino, n("x"), n("y")),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(
            fs.create(&ROOT, l.ino, n("x"), 0o644, 0, libc::O_RDWR)
                .map(|_| ()),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(fs.unlink(&ROOT, l.ino, n("secret")), Err(Errno::ENOTDIR));
        assert_eq!(
            fs.rename(&ROOT, l.ino, n("secret"), ROOT_INO, n("stolen"), 0),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(fs.link(&ROOT, l.ino, l.ino, n("x")), Err(Errno::ENOTDIR));
        let trunc = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(fs.setattr(&ROOT, l.ino, &trunc), Err(Errno::EINVAL));
        let chmod = SetAttr {
            mode: Some(0o777),
            ..SetAttr::default()
        };
        assert_eq!(fs.setattr(&ROOT, l.ino, &chmod), Err(Errno::EOPNOTSUPP));
        // chown and utimens change the link itself.
        let set = SetAttr {
            uid: Some(4242),
            mtime: Some(TimeSet::At(Timestamp::from_timespec(7, 0))),
            ..SetAttr::default()
        };
        let a = fs.setattr(&ROOT, l.ino, &set).unwrap();
        assert_eq!(
            (a.uid, a.mtime, a.kind),
            (4242, Timestamp::from_timespec(7, 0), FileKind::Symlink)
        );
        let host_link = std::fs::symlink_metadata(export.join(name)).unwrap();
        assert_eq!((host_link.uid(), host_link.mtime()), (4242, 7));
    }
    let secret_after = std::fs::metadata(out.join("secret")).unwrap();
    assert_eq!(secret_before.uid(), secret_after.uid());
    assert_eq!(secret_before.mtime(), secret_after.mtime());
    assert_ne!(std::fs::metadata("/etc").unwrap().uid(), 4242);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn a_link_to_a_symlink_links_the_symlink() {
    let (tmp, export, fs) = setup("linklink");
    let out = outside(&tmp);
    std::os::unix::fs::symlink(out.join("secret"), export.join("s")).unwrap();
    let s = fs.lookup(&ROOT, ROOT_INO, n("s")).unwrap();
    let l = fs.link(&ROOT, s.ino, ROOT_INO, n("hard")).unwrap();
    assert_eq!((l.ino, l.kind, l.nlink), (s.ino, FileKind::Symlink, 2));
    assert!(std::fs::symlink_metadata(export.join("hard"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::metadata(out.join("secret")).unwrap().nlink(), 1);
}

#[test]
fn dot_and_dotdot_stay_inside() {
    let (_tmp, export, fs) = setup("dots");
    std::fs::create_dir_all(export.join("a/b")).unwrap();
    let up = fs.lookup(&ROOT, ROOT_INO, n("..")).unwrap();
    assert_eq!(up.ino, ROOT_INO, "the root's parent is the root");
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n(".")).unwrap().ino, ROOT_INO);
    let a = walk(&fs, "a").unwrap();
    let b = walk(&fs, "a/b").unwrap();
    assert_eq!(fs.lookup(&ROOT, b.ino, n("..")).unwrap().ino, a.ino);
    assert_eq!(fs.lookup(&ROOT, a.ino, n("..")).unwrap().ino, ROOT_INO);
    assert_eq!(fs.lookup(&ROOT, b.ino, n(".")).unwrap().ino, b.ino);
    assert_eq!(fs.lookups(b.ino), 2);
}

#[test]
fn dotdot_of_a_directory_moved_out_on_the_host_is_refused() {
    let (tmp, export, fs) = setup("movedout");
    std::fs::create_dir(export.join("d")).unwrap();
    let d = walk(&fs, "d").unwrap();
    std::fs::rename(export.join("d"), tmp.join("d")).unwrap();
    assert_eq!(fs.lookup(&ROOT, d.ino, n("..")), Err(Errno::ENOENT));
}

#[test]
fn names_that_are_not_single_components_are_rejected() {
    let (tmp, export, fs) = setup("names");
    let out = outside(&tmp);
    std::fs::write(export.join("f"), b"").unwrap();
    let f = walk(&fs, "f").unwrap();
    let bad = [
        "a/b",
        "../outside",
        "../outside/secret",
        "/etc/passwd",
        "",
        "x\0y",
    ];
    for name in bad {
        assert_eq!(
            fs.lookup(&ROOT, ROOT_INO, n(name)),
            Err(Errno::EINVAL),
            "{name:?}"
        );
        assert_eq!(
            fs.mkdir(&ROOT, ROOT_INO, n(name), 0o755, 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            fs.mknod(&ROOT, ROOT_INO, n(name), libc::S_IFREG, 0, 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            fs.symlink(&ROOT, ROOT_INO, n(name), n("t")),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            fs.create(&ROOT, ROOT_INO, n(name), 0o644, 0, libc::O_RDWR)
                .map(|_| ()),
            Err(Errno::EINVAL)
        );
        assert_eq!(fs.unlink(&ROOT, ROOT_INO, n(name)), Err(Errno::EINVAL));
        assert_eq!(fs.rmdir(&ROOT, ROOT_INO, n(name)), Err(Errno::EINVAL));
        assert_eq!(
            fs.rename(&ROOT, ROOT_INO, n("f"), ROOT_INO, n(name), 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            fs.rename(&ROOT, ROOT_INO, n(name), ROOT_INO, n("g"), 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(fs.link(&ROOT, f.ino, ROOT_INO, n(name)), Err(Errno::EINVAL));
    }
    for name in [".", ".."] {
        assert_eq!(
            fs.mkdir(&ROOT, ROOT_INO, n(name), 0o755, 0),
            Err(Errno::EINVAL)
        );
        assert_eq!(fs.unlink(&ROOT, ROOT_INO, n(name)), Err(Errno::EINVAL));
        assert_eq!(fs.rmdir(&ROOT, ROOT_INO, n(name)), Err(Errno::EINVAL));
        assert_eq!(
            fs.rename(&ROOT, ROOT_INO, n("f"), ROOT_INO, n(name), 0),
            Err(Errno::EINVAL)
        );
    }
    assert!(export.join("f").exists());
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    assert!(!tmp.join("g").exists());
}

#[test]
fn create_over_a_dangling_symlink_creates_nothing_outside() {
    let (tmp, export, fs) = setup("dangling");
    let out = outside(&tmp);
    std::os::unix::fs::symlink(out.join("new"), export.join("dang")).unwrap();
    for flags in [
        libc::O_RDWR,
        libc::O_RDWR | libc::O_EXCL,
        libc::O_WRONLY | libc::O_TRUNC,
    ] {
        let r = fs
            .create(&ROOT, ROOT_INO, n("dang"), 0o644, 0, flags)
            .map(|_| ());
        assert!(matches!(r, Err(Errno::ELOOP | Errno::EEXIST)), "{r:?}");
    }
    assert!(!out.join("new").exists());
    assert_eq!(
        fs.mkdir(&ROOT, ROOT_INO, n("dang"), 0o755, 0),
        Err(Errno::EEXIST)
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_after_lookup_keeps_operations_inside() {
    let (tmp, export, fs) = setup("swap");
    let out = outside(&tmp);
    std::fs::create_dir(export.join("d")).unwrap();
    std::fs::write(export.join("d/inside"), b"inside").unwrap();
    let d = walk(&fs, "d").unwrap();
    // The host swaps the directory for a symlink to the outside.
    std::fs::rename(export.join("d"), export.join("d.old")).unwrap();
    std::os::unix::fs::symlink(&out, export.join("d")).unwrap();

    // The old handle still means the pinned directory, now `d.old`.
    assert_eq!(fs.lookup(&ROOT, d.ino, n("secret")), Err(Errno::ENOENT));
    let inside = fs.lookup(&ROOT, d.ino, n("inside")).unwrap();
    assert_eq!(common::read_all(&fs, inside.ino), b"inside");
    let (c, o) = fs
        .create(&ROOT, d.ino, n("created"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(c.ino, o.fh, 0, b"x").unwrap();
    fs.mkdir(&ROOT, d.ino, n("sub"), 0o755, 0).unwrap();
    fs.symlink(&ROOT, d.ino, n("sym"), n("t")).unwrap();
    fs.rename(&ROOT, d.ino, n("inside"), d.ino, n("renamed"), 0)
        .unwrap();
    assert_eq!(fs.unlink(&ROOT, d.ino, n("secret")), Err(Errno::ENOENT));
    let names = common::names(&fs, d.ino);
    assert_eq!(names, ["created", "renamed", "sub", "sym"]);
    assert!(export.join("d.old/created").exists());
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "nothing appeared outside"
    );

    // A fresh lookup of `d` finds the symlink, not what it points to.
    let now = fs.lookup(&ROOT, ROOT_INO, n("d")).unwrap();
    assert_eq!(now.kind, FileKind::Symlink);
    assert_eq!(fs.lookup(&ROOT, now.ino, n("secret")), Err(Errno::ENOTDIR));
}

#[test]
fn a_file_swapped_for_a_symlink_after_lookup_opens_the_pinned_file() {
    let (tmp, export, fs) = setup("fileswap");
    let out = outside(&tmp);
    std::fs::write(export.join("f"), b"mine").unwrap();
    let f = walk(&fs, "f").unwrap();
    std::fs::rename(export.join("f"), export.join("f.old")).unwrap();
    std::os::unix::fs::symlink(out.join("secret"), export.join("f")).unwrap();
    let o = fs.open(&ROOT, f.ino, libc::O_RDWR | libc::O_TRUNC).unwrap();
    fs.write(f.ino, o.fh, 0, b"new").unwrap();
    fs.release(f.ino, o.fh).unwrap();
    assert_eq!(std::fs::read(export.join("f.old")).unwrap(), b"new");
    assert_eq!(std::fs::read(out.join("secret")).unwrap(), b"secret");
    let set = SetAttr {
        mode: Some(0o600),
        uid: Some(777),
        ..SetAttr::default()
    };
    fs.setattr(&ROOT, f.ino, &set).unwrap();
    assert_ne!(std::fs::metadata(out.join("secret")).unwrap().uid(), 777);
    fs.setxattr(&ROOT, f.ino, n("user.t"), b"1", 0).unwrap();
    assert!(std::fs::metadata(export.join("f.old")).unwrap().uid() == 777);
}

#[test]
fn rename_and_link_take_only_names_inside() {
    // Both ends of a rename or link are (directory inode, single name) pairs, and every
    // directory inode was resolved beneath the root, so the only way to name something
    // outside would be a name with a slash or `..`, which is refused above. Here: the
    // parent of the export is unreachable even from the root.
    let (tmp, export, fs) = setup("boundary");
    std::fs::write(export.join("f"), b"").unwrap();
    std::fs::write(tmp.join("beside"), b"").unwrap();
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("beside")), Err(Errno::ENOENT));
    let up = fs.lookup(&ROOT, ROOT_INO, n("..")).unwrap();
    assert_eq!(fs.lookup(&ROOT, up.ino, n("beside")), Err(Errno::ENOENT));
    std::fs::write(tmp.join("beside"), b"outside").unwrap();
    fs.rename(&ROOT, up.ino, n("f"), up.ino, n("beside"), 0)
        .unwrap();
    fs.link(&ROOT, walk(&fs, "beside").unwrap().ino, up.ino, n("linked"))
        .unwrap();
    assert!(export.join("beside").exists() && export.join("linked").exists());
    assert_eq!(std::fs::read(tmp.join("beside")).unwrap(), b"outside");
    assert!(!tmp.join("linked").exists());
    assert!(tmp.join("beside").exists());
}
