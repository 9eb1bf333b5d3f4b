//! Created modes under the caller's umask, O_TMPFILE, RENAME_WHITEOUT, inode flags and birth
//! times of the passthrough backend, checked against the host.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use common::{is_root, n, read_all, setup, USER};
use memofs_core::inode_flags::NODUMP;
use memofs_core::{rename_flags, Backend, Caller, Errno, FileKind, Timestamp, ROOT_INO};
use memofs_passthrough::PassthroughFs;

const ROOT: Caller = Caller::ROOT;

fn host_mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Runs `f` on a thread of its own whose umask is `umask`: the server's umask, which no
/// created inode may show.
fn with_server_umask<T: Send>(umask: u32, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare(CLONE_FS) and umask only change this thread's fs context.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_FS), 0);
                libc::umask(umask as libc::mode_t);
            }
            f()
        })
        .join()
        .unwrap()
    })
}

fn create_all(fs: &PassthroughFs, export: &Path, tag: &str, umask: u32) -> [u32; 4] {
    let name = |what: &str| format!("{tag}-{what}");
    let f = fs
        .mknod(
            &USER,
            ROOT_INO,
            n(&name("f")),
            libc::S_IFREG | 0o620,
            umask,
            0,
        )
        .unwrap();
    assert_eq!(f.perm as u32, host_mode(&export.join(name("f"))));
    fs.mkdir(&USER, ROOT_INO, n(&name("d")), 0o777, umask)
        .unwrap();
    fs.mknod(
        &USER,
        ROOT_INO,
        n(&name("p")),
        libc::S_IFIFO | 0o666,
        umask,
        0,
    )
    .unwrap();
    let (c, o) = fs
        .create(&USER, ROOT_INO, n(&name("c")), 0o666, umask, libc::O_RDWR)
        .unwrap();
    fs.release(c.ino, o.fh).unwrap();
    ["f", "d", "p", "c"].map(|w| host_mode(&export.join(name(w))))
}

#[test]
fn created_modes_follow_the_callers_umask_never_the_servers() {
    let (_t, export, fs) = setup("umask");
    with_server_umask(0o077, || {
        assert_eq!(
            create_all(&fs, &export, "u0", 0),
            [0o620, 0o777, 0o666, 0o666]
        );
        assert_eq!(
            create_all(&fs, &export, "u22", 0o022),
            [0o600, 0o755, 0o644, 0o644]
        );
        // SAFETY: reads this thread's umask back at once.
        let left = unsafe {
            let u = libc::umask(0);
            libc::umask(u);
            u
        };
        assert_eq!(left, 0o077, "the request thread's umask is put back");
    });
}

/// A host default ACL applies instead of the umask, as for a local caller.
#[test]
fn a_host_default_acl_replaces_the_umask() {
    let (_t, export, fs) = setup("acl");
    std::fs::create_dir(export.join("d")).unwrap();
    std::fs::set_permissions(
        export.join("d"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    // user::rwx group::rwx other::--- (an equivalent default ACL: modes only).
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(0x01u16, 7u16), (0x04, 7), (0x20, 0)] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    let path = CString::new(export.join("d").as_os_str().as_bytes()).unwrap();
    let name = c"system.posix_acl_default";
    // SAFETY: both strings are NUL-terminated; the value is `acl.len()` bytes.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            acl.as_ptr().cast(),
            acl.len(),
            0,
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        memofs_e2e::skip!(
            Kernel("posix_acl"),
            "the host filesystem takes no default ACL ({e})"
        );
    }
    let d = fs.lookup(&ROOT, ROOT_INO, n("d")).unwrap().ino;
    with_server_umask(0o022, || {
        let f = fs
            .mknod(&USER, d, n("f"), libc::S_IFREG | 0o666, 0o077, 0)
            .unwrap();
        assert_eq!(f.perm, 0o660, "masked by the ACL, not by umask 077");
    });
}

#[test]
fn tmpfile_gets_a_name_only_by_link() {
    let (_t, export, fs) = setup("tmpfile");
    let (t, o) = fs
        .tmpfile(&USER, ROOT_INO, 0o640, 0o022, libc::O_RDWR)
        .unwrap();
    assert_eq!((t.nlink, t.perm, t.uid), (0, 0o640, USER.uid));
    assert!(std::fs::read_dir(&export).unwrap().next().is_none());
    fs.write(t.ino, o.fh, 0, b"hidden").unwrap();
    let l = fs.link(&ROOT, t.ino, ROOT_INO, n("named")).unwrap();
    assert_eq!((l.ino, l.nlink), (t.ino, 1));
    fs.release(t.ino, o.fh).unwrap();
    assert_eq!(std::fs::read(export.join("named")).unwrap(), b"hidden");
    assert_eq!(read_all(&fs, t.ino), b"hidden");
    let (x, o) = fs
        .tmpfile(&ROOT, ROOT_INO, 0o600, 0, libc::O_RDWR | libc::O_EXCL)
        .unwrap();
    assert_eq!(fs.link(&ROOT, x.ino, ROOT_INO, n("x")), Err(Errno::ENOENT));
    fs.release(x.ino, o.fh).unwrap();
}

#[test]
fn rename_whiteout_reaches_the_host() {
    if !is_root() {
        memofs_e2e::skip!(Root, "a whiteout needs CAP_MKNOD");
    }
    let (_t, export, fs) = setup("whiteout");
    std::fs::write(export.join("a"), b"A").unwrap();
    fs.rename(
        &ROOT,
        ROOT_INO,
        n("a"),
        ROOT_INO,
        n("b"),
        rename_flags::WHITEOUT,
    )
    .unwrap();
    let w = std::fs::symlink_metadata(export.join("a")).unwrap();
    assert!(w.file_type().is_char_device());
    assert_eq!(w.rdev(), 0);
    assert_eq!(std::fs::read(export.join("b")).unwrap(), b"A");
    assert_eq!(
        fs.lookup(&ROOT, ROOT_INO, n("a")).unwrap().kind,
        FileKind::CharDevice
    );
}

#[test]
fn inode_flags_are_the_hosts() {
    let (_t, export, fs) = setup("flags");
    std::fs::write(export.join("f"), b"x").unwrap();
    std::fs::create_dir(export.join("d")).unwrap();
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap().ino;
    let d = fs.lookup(&ROOT, ROOT_INO, n("d")).unwrap().ino;
    let before = match fs.get_flags(f) {
        Ok(flags) => flags,
        Err(e) => memofs_e2e::skip!(Kernel("inode_flags"), "the host filesystem has none ({e})"),
    };
    fs.set_flags(&ROOT, f, before | NODUMP).unwrap();
    fs.set_flags(&ROOT, d, fs.get_flags(d).unwrap() | NODUMP)
        .unwrap();
    assert_eq!(fs.get_flags(f).unwrap() & NODUMP, NODUMP);
    assert_eq!(fs.get_flags(d).unwrap() & NODUMP, NODUMP);
    let out = std::process::Command::new("lsattr")
        .arg("-d")
        .arg(export.join("f"))
        .output();
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.split_whitespace().next().unwrap_or("").contains('d'),
            "{text}"
        );
    }
    fs.set_flags(&ROOT, f, before).unwrap();
    assert_eq!(fs.get_flags(f).unwrap(), before);
    std::os::unix::fs::symlink("f", export.join("l")).unwrap();
    let l = fs.lookup(&ROOT, ROOT_INO, n("l")).unwrap().ino;
    assert_eq!(fs.get_flags(l), Err(Errno::ENOTTY));
}

#[test]
fn birth_time_comes_from_the_host() {
    let (_t, export, fs) = setup("btime");
    std::fs::write(export.join("f"), b"x").unwrap();
    let a = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    let Ok(created) = std::fs::metadata(export.join("f")).unwrap().created() else {
        memofs_e2e::skip!(Kernel("btime"), "the host filesystem keeps no birth time");
    };
    assert_ne!(a.crtime, Timestamp::default());
    assert_eq!(a.crtime, Timestamp::from_system_time(created));
}
