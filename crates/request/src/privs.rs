//! Clearing setuid, setgid and file capabilities where the kernel leaves it to the server.
//!
//! memofs asks for `FUSE_HANDLE_KILLPRIV_V2`, so the kernel does not look up
//! `security.capability` before every write; in exchange the server clears the privilege
//! bits itself, when the kernel flags a request (a write, a truncate or an `O_TRUNC` open by
//! a caller without `CAP_FSETID`), and for requests that change data without such a flag
//! (fallocate, copy_file_range by an unprivileged caller), and after every chown of a
//! non-directory (as Linux's `chown_common` does for FIFOs, sockets and devices too).

use std::ffi::OsStr;

use memofs_core::{Attr, Backend, Caller, Errno, FileKind, Ino, Result, SetAttr};

/// The name of file capabilities (as a guest names them: see [`crate::xattrs`]).
pub(crate) const CAPS: &str = "security.capability";

/// Whether `caller` counts as privileged for keeping setuid/setgid (the kernel's
/// `CAP_FSETID`, approximated by uid 0: FUSE requests do not carry capabilities).
pub fn privileged(caller: &Caller) -> bool {
    caller.uid == 0
}

/// The mode a write, truncate or fallocate by a caller without `CAP_FSETID` leaves, by
/// Linux's `setattr_should_drop_suidgid`: setuid cleared; setgid cleared where the file is
/// group-executable, or where the caller is not in the file's group (`in_group`, asked only
/// when it decides).
pub fn killed_mode(mode: u32, in_group: impl FnOnce() -> bool) -> u32 {
    let mut new = mode & !libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group()) {
        new &= !libc::S_ISGID;
    }
    new
}

/// Clears setuid/setgid (see [`killed_mode`]) and file capabilities (`caps`: their name on
/// the backend, `None` where there can be none) on regular file `ino`. Returns true if
/// anything changed.
pub fn kill_suidgid<B: Backend>(
    backend: &B,
    caller: &Caller,
    ino: Ino,
    caps: Option<&OsStr>,
) -> Result<bool> {
    let attr = backend.getattr(ino)?;
    if attr.kind != FileKind::Regular {
        return Ok(false);
    }
    kill_privs(backend, caller, &attr, caps)
}

/// Clears setuid/setgid (see [`killed_mode`]) and file capabilities (`caps`, as for
/// [`kill_suidgid`]) on the inode whose attributes are `attr`, whatever its kind. Returns
/// true if anything changed.
pub fn kill_privs<B: Backend>(
    backend: &B,
    caller: &Caller,
    attr: &Attr,
    caps: Option<&OsStr>,
) -> Result<bool> {
    let ino = attr.ino;
    let mode = attr.perm as u32;
    let new = killed_mode(mode, || caller.in_group(attr.gid));
    let mut changed = false;
    if new != mode {
        let set = SetAttr {
            mode: Some(new),
            ..SetAttr::default()
        };
        backend.setattr(caller, ino, &set)?;
        changed = true;
    }
    let Some(caps) = caps else {
        return Ok(changed);
    };
    // Asked first, and removed only if there: removing is a change an append-only or
    // immutable file refuses even when there is nothing to remove.
    match backend.getxattr(ino, caps) {
        Ok(_) => {
            backend.removexattr(caller, ino, caps)?;
            changed = true;
        }
        Err(e) if e == Errno::ENODATA || e == Errno::EOPNOTSUPP => {}
        Err(e) => return Err(e),
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setgid_goes_with_group_execute_or_for_others() {
        let member = || true;
        let other = || false;
        assert_eq!(killed_mode(0o6755, member), 0o0755);
        assert_eq!(killed_mode(0o6745, member), 0o2745);
        assert_eq!(killed_mode(0o6745, other), 0o0745);
        assert_eq!(killed_mode(0o0644, other), 0o0644);
    }
}
