//! POSIX ACLs on the mem backend as on kernel tmpfs (`MEMOFS_E2E_REFERENCE=tmpfs` runs the
//! same checks there): the kernel enforces them, a set ACL updates the mode, new inodes
//! inherit a directory's default ACL instead of the umask, chmod rewrites the mask. ACLs are
//! written as raw `system.posix_acl_*` values; `setfacl`/`getfacl` (Debian `acl`) are
//! checked too where installed.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use memofs_e2e::sys::acl_xattr as acl;
use memofs_e2e::user::{as_user, USER1, USER2};
use memofs_e2e::{assert_errno, is_root, ok, skip, sys, tool, which, Mount};

const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";
const U: u32 = u32::MAX;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

macro_rules! need_mount {
    () => {{
        if !is_root() {
            skip!(Root, "needs root to mount and to switch users");
        }
        Mount::mem(&["size=64m", "allow_other"])
    }};
}

/// user::rwx user:USER1:rw- group::r-x mask::rwx other::---
fn named_user() -> Vec<u8> {
    acl(&[
        (USER_OBJ, 7, U),
        (USER, 6, USER1.0),
        (GROUP_OBJ, 5, U),
        (MASK, 7, U),
        (OTHER, 0, U),
    ])
}

fn perm(p: &Path) -> u32 {
    ok!(fs::symlink_metadata(p)).mode() & 0o7777
}

#[test]
fn a_named_user_entry_grants_access_the_mode_does_not() {
    let m = need_mount!();
    let f = m.join("secret");
    ok!(fs::write(&f, b"for user1"));
    ok!(fs::set_permissions(&f, fs::Permissions::from_mode(0o600)));
    let read = |who: (u32, u32), p: std::path::PathBuf| {
        as_user(who.0, who.1, &[], move || {
            fs::read(p).map_err(|e| sys::errno_of(&e))
        })
    };
    assert_eq!(read(USER1, f.clone()), Err(libc::EACCES));
    ok!(sys::setxattr(&f, ACCESS, &named_user(), 0));
    assert_eq!(perm(&f), 0o770, "the group bits show the mask");
    assert_eq!(read(USER1, f.clone()).as_deref(), Ok(&b"for user1"[..]));
    assert_eq!(read(USER2, f.clone()), Err(libc::EACCES));
    // chmod narrows the mask, and with it the named entry.
    ok!(fs::set_permissions(&f, fs::Permissions::from_mode(0o600)));
    assert_eq!(read(USER1, f.clone()), Err(libc::EACCES));
    assert_eq!(
        ok!(sys::getxattr(&f, ACCESS)),
        acl(&[
            (USER_OBJ, 6, U),
            (USER, 6, USER1.0),
            (GROUP_OBJ, 5, U),
            (MASK, 0, U),
            (OTHER, 0, U)
        ])
    );
    // Removing the ACL leaves the mode.
    ok!(sys::removexattr(&f, ACCESS));
    assert_errno!(sys::getxattr(&f, ACCESS), libc::ENODATA);
    assert_eq!(perm(&f), 0o600);
}

#[test]
fn an_acl_equivalent_to_the_mode_sets_the_mode_only() {
    let m = need_mount!();
    let f = m.join("f");
    ok!(fs::write(&f, b""));
    ok!(fs::set_permissions(&f, fs::Permissions::from_mode(0o640)));
    let plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
    ok!(sys::setxattr(&f, ACCESS, &plain, 0));
    assert_eq!(perm(&f), 0o751);
    assert_errno!(sys::getxattr(&f, ACCESS), libc::ENODATA);
    assert!(!ok!(sys::listxattr(&f)).iter().any(|n| n == ACCESS));
    ok!(sys::setxattr(&f, ACCESS, &named_user(), 0));
    assert!(ok!(sys::listxattr(&f)).iter().any(|n| n == ACCESS));
}

#[test]
fn malformed_acls_and_misplaced_default_acls_are_refused() {
    let m = need_mount!();
    let f = m.join("f");
    ok!(fs::write(&f, b""));
    let out_of_order = acl(&[(GROUP_OBJ, 5, U), (USER_OBJ, 7, U), (OTHER, 1, U)]);
    assert_errno!(sys::setxattr(&f, ACCESS, &out_of_order, 0), libc::EINVAL);
    let no_mask = acl(&[
        (USER_OBJ, 7, U),
        (USER, 7, 5),
        (GROUP_OBJ, 5, U),
        (OTHER, 0, U),
    ]);
    assert_errno!(sys::setxattr(&f, ACCESS, &no_mask, 0), libc::EINVAL);
    assert_errno!(
        sys::setxattr(&f, ACCESS, &1u32.to_le_bytes(), 0),
        libc::EOPNOTSUPP
    );
    assert_errno!(sys::setxattr(&f, DEFAULT, &named_user(), 0), libc::EACCES);
    assert_errno!(sys::getxattr(&f, DEFAULT), libc::ENODATA);
}

/// The figures are those of kernel tmpfs with the same default ACL, under umask 077.
#[test]
fn new_inodes_take_the_default_acl_instead_of_the_umask() {
    let m = need_mount!();
    let d = m.join("d");
    ok!(fs::create_dir(&d));
    ok!(sys::setxattr(&d, DEFAULT, &named_user(), 0));
    sys::with_umask(0o077, || {
        ok!(sys::open(
            d.join("f"),
            libc::O_CREAT | libc::O_WRONLY,
            0o666
        ));
        ok!(sys::mkfifo(d.join("p"), 0o644));
        ok!(fs::create_dir(d.join("sub")));
        ok!(fs::write(m.join("outside"), b""));
    });
    assert_eq!(perm(&d.join("f")), 0o660);
    assert_eq!(perm(&d.join("p")), 0o640);
    assert_eq!(perm(&d.join("sub")), 0o770);
    assert_eq!(perm(&m.join("outside")), 0o600, "no default ACL: the umask");
    assert_eq!(
        ok!(sys::getxattr(d.join("f"), ACCESS)),
        acl(&[
            (USER_OBJ, 6, U),
            (USER, 6, USER1.0),
            (GROUP_OBJ, 5, U),
            (MASK, 6, U),
            (OTHER, 0, U)
        ])
    );
    assert_errno!(sys::getxattr(d.join("f"), DEFAULT), libc::ENODATA);
    assert_eq!(ok!(sys::getxattr(d.join("sub"), DEFAULT)), named_user());
    // The inherited ACL is enforced: user1 may write the new file.
    let f = d.join("f");
    as_user(USER1.0, USER1.1, &[], move || ok!(fs::write(f, b"mine")));
}

#[test]
fn setfacl_and_getfacl() {
    let m = need_mount!();
    if which("setfacl").is_none() || which("getfacl").is_none() {
        skip!(
            Tool("setfacl"),
            "setfacl/getfacl are not installed (Debian package acl)"
        );
    }
    let f = m.join("f");
    ok!(fs::write(&f, b""));
    ok!(fs::set_permissions(&f, fs::Permissions::from_mode(0o644)));
    let run = |args: &[&str]| tool(args, &f);
    run(&["setfacl", "-m", "u:4001:rw,g:4002:r"]);
    assert_eq!(
        run(&["getfacl", "-n", "--omit-header"]),
        "user::rw-\nuser:4001:rw-\ngroup::r--\ngroup:4002:r--\nmask::rw-\nother::r--\n\n"
    );
    assert_eq!(perm(&f), 0o664);
    run(&["setfacl", "-b"]);
    assert_eq!(
        run(&["getfacl", "-n", "--omit-header"]),
        "user::rw-\ngroup::r--\nother::r--\n\n"
    );
    assert_eq!(perm(&f), 0o644);
}
