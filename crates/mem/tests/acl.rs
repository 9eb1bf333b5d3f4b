//! POSIX ACLs in the mem backend, through the `Backend` trait: the expected modes and ACLs
//! are what kernel tmpfs gave for the same calls.

mod common;

use common::{fs, n, C};
use memofs_core::{Backend, Caller, Errno, SetAttr, ROOT_INO};
use memofs_mem::acl::{GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
use memofs_mem::{MemConfig, MemFs};

const ACCESS: &str = "system.posix_acl_access";
const DEFAULT: &str = "system.posix_acl_default";
const U: u32 = u32::MAX;

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// user::rwx user:1234:rw- group::r-x mask::rwx other::---
fn with_named_user() -> Vec<u8> {
    acl(&[
        (USER_OBJ, 7, U),
        (USER, 6, 1234),
        (GROUP_OBJ, 5, U),
        (MASK, 7, U),
        (OTHER, 0, U),
    ])
}

fn mode_of(fs: &MemFs, ino: u64) -> u16 {
    fs.getattr(ino).unwrap().perm
}

fn file(fs: &MemFs, name: &str, mode: u32) -> u64 {
    fs.mknod(&C, ROOT_INO, n(name), libc::S_IFREG | mode, 0, 0)
        .unwrap()
        .ino
}

#[test]
fn an_access_acl_sets_the_mode_and_an_equivalent_one_is_not_stored() {
    let fs = fs();
    let f = file(&fs, "f", 0o640);
    let before = fs.getattr(f).unwrap().ctime;
    let plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
    fs.setxattr(&C, f, n(ACCESS), &plain, 0).unwrap();
    assert_eq!(mode_of(&fs, f), 0o751);
    assert_eq!(fs.getxattr(f, n(ACCESS)), Err(Errno::ENODATA));
    assert!(fs.listxattr(f).unwrap().is_empty());
    assert!(fs.getattr(f).unwrap().ctime >= before);
    // A named entry needs the ACL: stored in canonical form, group bits from the mask.
    let mut named = with_named_user();
    named[4 + 4..4 + 8].copy_from_slice(&77u32.to_le_bytes()); // an id on user::
    fs.setxattr(&C, f, n(ACCESS), &named, 0).unwrap();
    assert_eq!(mode_of(&fs, f), 0o770);
    assert_eq!(fs.getxattr(f, n(ACCESS)).unwrap(), with_named_user());
    assert_eq!(fs.listxattr(f).unwrap(), b"system.posix_acl_access\0");
    // A bare header, or an empty value, removes it; so does removexattr, also when absent.
    fs.setxattr(&C, f, n(ACCESS), &acl(&[]), 0).unwrap();
    assert_eq!(fs.getxattr(f, n(ACCESS)), Err(Errno::ENODATA));
    fs.setxattr(&C, f, n(ACCESS), &with_named_user(), 0)
        .unwrap();
    fs.setxattr(&C, f, n(ACCESS), b"", 0).unwrap();
    assert_eq!(fs.getxattr(f, n(ACCESS)), Err(Errno::ENODATA));
    fs.removexattr(&C, f, n(ACCESS)).unwrap();
    // XATTR_CREATE/REPLACE do not apply to ACLs.
    fs.setxattr(&C, f, n(ACCESS), &with_named_user(), libc::XATTR_REPLACE)
        .unwrap();
    fs.setxattr(&C, f, n(ACCESS), &with_named_user(), libc::XATTR_CREATE)
        .unwrap();
    fs.removexattr(&C, f, n(ACCESS)).unwrap();
    assert_eq!(mode_of(&fs, f), 0o770, "removal leaves the mode");
}

#[test]
fn malformed_acls_are_refused() {
    let fs = fs();
    let f = file(&fs, "f", 0o640);
    let out_of_order = acl(&[(GROUP_OBJ, 5, U), (USER_OBJ, 7, U), (OTHER, 1, U)]);
    let no_mask = acl(&[
        (USER_OBJ, 7, U),
        (USER, 7, 5),
        (GROUP_OBJ, 5, U),
        (OTHER, 1, U),
    ]);
    for bad in [out_of_order, no_mask, vec![2, 0, 0]] {
        assert_eq!(fs.setxattr(&C, f, n(ACCESS), &bad, 0), Err(Errno::EINVAL));
    }
    let v1 = 1u32.to_le_bytes();
    assert_eq!(
        fs.setxattr(&C, f, n(ACCESS), &v1, 0),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        fs.setxattr(&C, f, n("system.other"), b"x", 0),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(mode_of(&fs, f), 0o640);
}

#[test]
fn default_acls_are_for_directories_only() {
    let fs = fs();
    let f = file(&fs, "f", 0o640);
    assert_eq!(
        fs.setxattr(&C, f, n(DEFAULT), &with_named_user(), 0),
        Err(Errno::EACCES)
    );
    fs.removexattr(&C, f, n(DEFAULT)).unwrap();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.setxattr(&C, d, n(DEFAULT), &with_named_user(), 0)
        .unwrap();
    assert_eq!(fs.getxattr(d, n(DEFAULT)).unwrap(), with_named_user());
    assert_eq!(mode_of(&fs, d), 0o755, "a default ACL leaves the mode");
}

/// The figures are those of tmpfs for the same default ACL, under umask 077.
#[test]
fn new_inodes_inherit_the_default_acl_instead_of_the_umask() {
    let fs = fs();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    fs.setxattr(&C, d, n(DEFAULT), &with_named_user(), 0)
        .unwrap();
    let (f, o) = fs
        .create(&C, d, n("f"), 0o666, 0o077, libc::O_RDWR)
        .unwrap();
    fs.release(f.ino, o.fh).unwrap();
    assert_eq!(f.perm, 0o660);
    assert_eq!(
        fs.getxattr(f.ino, n(ACCESS)).unwrap(),
        acl(&[
            (USER_OBJ, 6, U),
            (USER, 6, 1234),
            (GROUP_OBJ, 5, U),
            (MASK, 6, U),
            (OTHER, 0, U)
        ])
    );
    assert_eq!(fs.getxattr(f.ino, n(DEFAULT)), Err(Errno::ENODATA));
    let sub = fs.mkdir(&C, d, n("sub"), 0o777, 0o077).unwrap();
    assert_eq!(sub.perm, 0o770);
    assert_eq!(fs.getxattr(sub.ino, n(DEFAULT)).unwrap(), with_named_user());
    let fifo = fs
        .mknod(&C, d, n("p"), libc::S_IFIFO | 0o644, 0o077, 0)
        .unwrap();
    assert_eq!(fifo.perm, 0o640);
    let (t, o) = fs.tmpfile(&C, d, 0o600, 0o077, libc::O_RDWR).unwrap();
    fs.release(t.ino, o.fh).unwrap();
    assert_eq!(t.perm, 0o600);
    // Symlinks take no ACL.
    let l = fs.symlink(&C, d, n("l"), n("f")).unwrap();
    assert_eq!(l.perm, 0o777);
    assert_eq!(fs.getxattr(l.ino, n(ACCESS)), Err(Errno::ENODATA));
    // Without a default ACL, the umask.
    let g = fs
        .mknod(&C, ROOT_INO, n("g"), libc::S_IFREG | 0o666, 0o027, 0)
        .unwrap();
    assert_eq!(g.perm, 0o640);
    assert_eq!(fs.getxattr(g.ino, n(ACCESS)), Err(Errno::ENODATA));
}

#[test]
fn chmod_rewrites_the_access_acl() {
    let fs = fs();
    let f = file(&fs, "f", 0o640);
    fs.setxattr(&C, f, n(ACCESS), &with_named_user(), 0)
        .unwrap();
    let set = SetAttr {
        mode: Some(0o751),
        ..Default::default()
    };
    fs.setattr(&C, f, &set).unwrap();
    assert_eq!(
        fs.getxattr(f, n(ACCESS)).unwrap(),
        acl(&[
            (USER_OBJ, 7, U),
            (USER, 6, 1234),
            (GROUP_OBJ, 5, U),
            (MASK, 5, U),
            (OTHER, 1, U)
        ])
    );
}

#[test]
fn setting_an_access_acl_outside_the_group_clears_setgid() {
    let fs = fs();
    let f = file(&fs, "f", 0o2770);
    fs.setattr(
        &Caller::ROOT,
        f,
        &SetAttr {
            gid: Some(5000),
            mode: Some(0o2770),
            ..Default::default()
        },
    )
    .unwrap();
    // pid 0: no process to read supplementary groups from.
    let member = Caller {
        uid: 1000,
        gid: 5000,
        pid: 0,
    };
    let outsider = Caller {
        uid: 1000,
        gid: 1000,
        pid: 0,
    };
    fs.setxattr(&member, f, n(ACCESS), &with_named_user(), 0)
        .unwrap();
    assert_eq!(mode_of(&fs, f), 0o2770);
    fs.setxattr(&outsider, f, n(ACCESS), &with_named_user(), 0)
        .unwrap();
    assert_eq!(mode_of(&fs, f), 0o770);
}

#[test]
fn acls_are_charged_against_size() {
    let fs = MemFs::new(MemConfig {
        size_limit: 4096,
        ..Default::default()
    })
    .unwrap();
    let d = fs.mkdir(&C, ROOT_INO, n("d"), 0o755, 0).unwrap().ino;
    let base = fs.usage().bytes_used;
    fs.setxattr(&C, d, n(DEFAULT), &with_named_user(), 0)
        .unwrap();
    let one = (DEFAULT.len() + with_named_user().len()) as u64;
    assert_eq!(fs.usage().bytes_used, base + one);
    // A subdirectory inherits both ACLs and pays for them.
    let sub = fs.mkdir(&C, d, n("sub"), 0o777, 0).unwrap().ino;
    let both = one + (ACCESS.len() + with_named_user().len()) as u64;
    assert_eq!(fs.usage().bytes_used, base + one + both);
    // Full: an ACL that does not fit fails whole.
    let mut big = vec![(USER_OBJ, 7, U)];
    big.extend((0..600).map(|i| (USER, 7, i)));
    big.extend([(GROUP_OBJ, 5, U), (MASK, 7, U), (OTHER, 0, U)]);
    assert_eq!(
        fs.setxattr(&C, sub, n(ACCESS), &acl(&big), 0),
        Err(Errno::ENOSPC)
    );
    fs.rmdir(&C, d, n("sub")).unwrap();
    fs.forget(sub, 1);
    fs.removexattr(&C, d, n(DEFAULT)).unwrap();
    assert_eq!(fs.usage().bytes_used, base);
}

#[test]
fn the_backend_declares_posix_acls() {
    assert!(fs().capabilities().posix_acl);
}
