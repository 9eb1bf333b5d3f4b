//! The kernel's new mount calls that more than one backend uses on a detached mount:
//! `open_tree` to make one, `mount_setattr` to change its flags (Linux 5.12). A detached
//! copy made by `open_tree(OPEN_TREE_CLONE)` belongs to an anonymous mount namespace, the
//! one kind of mount outside the caller's namespace whose flags the kernel lets change.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::atime::{AtimeMode, AtimePolicy};

/// `OPEN_TREE_CLONE` (missing from libc for glibc targets).
const OPEN_TREE_CLONE: u32 = 1;

const EMPTY: &std::ffi::CStr = c"";

/// `open_tree(dir, "", OPEN_TREE_CLONE)`: a detached copy of the mount at `dir` (with every
/// mount below it if `recursive`), as an `O_PATH` descriptor of its root, close-on-exec.
/// Needs `CAP_SYS_ADMIN` (Linux 5.2).
pub fn clone_tree(dir: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    // SAFETY: `EMPTY` is NUL-terminated and `dir` is open; integer flags otherwise.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), EMPTY.as_ptr(), flags) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}

/// `mount_setattr(dir, "", AT_EMPTY_PATH)`: sets the flags `set` and clears `clear` on the
/// mount at `dir` (and every mount below it if `recursive`), and makes its propagation
/// `propagation` (0: unchanged). Needs `CAP_SYS_ADMIN` over the mount (Linux 5.12).
pub fn set_attrs(
    dir: BorrowedFd<'_>,
    (set, clear): (u64, u64),
    propagation: u64,
    recursive: bool,
) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clear,
        propagation,
        userns_fd: 0,
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `EMPTY` is NUL-terminated, `dir` is open, and `attr` is a `mount_attr` of the
    // size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir.as_raw_fd(),
            EMPTY.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    match ret {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The `mount_setattr` flags (set, cleared) that give a mount the atime rule `p`.
pub fn atime_attrs(p: AtimePolicy) -> (u64, u64) {
    let mode = match p.mode {
        AtimeMode::Strict => libc::MOUNT_ATTR_STRICTATIME,
        AtimeMode::Relatime => libc::MOUNT_ATTR_RELATIME,
        AtimeMode::Noatime => libc::MOUNT_ATTR_NOATIME,
    };
    match p.nodiratime {
        true => (mode | libc::MOUNT_ATTR_NODIRATIME, libc::MOUNT_ATTR__ATIME),
        false => (mode, libc::MOUNT_ATTR__ATIME | libc::MOUNT_ATTR_NODIRATIME),
    }
}
