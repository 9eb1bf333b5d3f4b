//! RENAME_WHITEOUT, and overlayfs with its upper layer on the mount (which needs whiteouts).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::process::Command;

use memofs_e2e::user::{as_user, USER1};
use memofs_e2e::{assert_errno, is_root, ok, skip, sys, Mount, TempDir, UnmountGuard};

const RENAME_NOREPLACE: u32 = libc::RENAME_NOREPLACE;
const RENAME_EXCHANGE: u32 = libc::RENAME_EXCHANGE;
const RENAME_WHITEOUT: u32 = libc::RENAME_WHITEOUT;

macro_rules! need_mount {
    () => {{
        if !is_root() {
            skip!(Root, "needs root to mount and for CAP_MKNOD");
        }
        Mount::mem(&["size=64m", "allow_other"])
    }};
}

#[test]
fn rename_whiteout_leaves_a_0_0_character_device() {
    let m = need_mount!();
    ok!(fs::write(m.join("a"), b"A"));
    ok!(fs::create_dir(m.join("d")));
    ok!(sys::renameat2(m.join("a"), m.join("d/b"), RENAME_WHITEOUT));
    let w = ok!(fs::symlink_metadata(m.join("a")));
    assert!(w.file_type().is_char_device());
    assert_eq!((w.rdev(), w.mode() & 0o7777, w.nlink()), (0, 0, 1));
    assert_eq!(ok!(fs::read(m.join("d/b"))), b"A");
    // A directory too; and with NOREPLACE, but never with EXCHANGE.
    ok!(fs::create_dir(m.join("sub")));
    ok!(sys::renameat2(
        m.join("sub"),
        m.join("d/sub"),
        RENAME_WHITEOUT | RENAME_NOREPLACE
    ));
    assert!(ok!(fs::symlink_metadata(m.join("sub")))
        .file_type()
        .is_char_device());
    assert_eq!(ok!(fs::metadata(m.join("d"))).nlink(), 3);
    assert_errno!(
        sys::renameat2(
            m.join("d/b"),
            m.join("a"),
            RENAME_WHITEOUT | RENAME_EXCHANGE
        ),
        libc::EINVAL
    );
    // It needs CAP_MKNOD.
    ok!(fs::write(m.join("u"), b""));
    let (from, to) = (m.join("u"), m.join("v"));
    let r = as_user(USER1.0, USER1.1, &[], move || {
        sys::renameat2(from, to, RENAME_WHITEOUT).map_err(|e| sys::errno_of(&e))
    });
    assert_eq!(r, Err(libc::EPERM));
}

#[test]
fn overlayfs_upper_layer_on_the_mount() {
    let m = need_mount!();
    let lower = TempDir::new("memofs-e2e-lower-");
    ok!(fs::write(lower.path().join("old"), b"lower"));
    let merged = m.scratch().join("merged");
    ok!(fs::create_dir(&merged));
    ok!(fs::create_dir(m.join("upper")));
    ok!(fs::create_dir(m.join("work")));
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.path().display(),
        m.join("upper").display(),
        m.join("work").display()
    );
    let out = ok!(Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(&merged)
        .output());
    if !out.status.success() {
        skip!(
            Kernel("overlayfs"),
            "overlayfs does not mount here: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _guard = UnmountGuard(merged.clone());
    assert_eq!(ok!(fs::read(merged.join("old"))), b"lower");
    ok!(fs::remove_file(merged.join("old")));
    assert!(!merged.join("old").exists());
    let w = ok!(fs::symlink_metadata(m.join("upper/old")));
    assert!(
        w.file_type().is_char_device() && w.rdev() == 0,
        "a whiteout in the upper layer"
    );
    ok!(fs::write(merged.join("new"), b"upper"));
    assert_eq!(ok!(fs::read(m.join("upper/new"))), b"upper");
    ok!(fs::rename(merged.join("new"), merged.join("renamed")));
    assert_eq!(ok!(fs::read(merged.join("renamed"))), b"upper");
}
