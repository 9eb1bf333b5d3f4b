//! Extended attributes, on the host inode itself through its `/proc/self/fd/N` path (see
//! [`crate::sys::xattr`]): works for every kind without opening the inode. Host errors
//! (`ENODATA`, `ENOTSUP`, `EPERM` for `user.*` on symlinks, ...) come back unchanged.
//!
//! # `security.capability`
//! The kernel asks for `security.capability` before the first write to each file and
//! before every `chown` (to know whether file capabilities must be dropped): two round trips
//! per file of an untar, each a path walk through `/proc` on the server. While the watcher
//! marks the export's whole filesystem (fanotify filesystem mark: every change on it is
//! seen, whichever name or hard link it was made through), the server remembers per inode
//! of that filesystem that the host file has none ([`crate::caps::NoCaps`]: files it created itself, and
//! files the host said `ENODATA` for) and answers `ENODATA` without a system call. What may
//! add the attribute clears the memory: a `setxattr`/`removexattr` through the mount, and
//! any attribute change the watcher sees on the host (a host `setxattr` is one), so the
//! answer is as fresh as the kernel's cached attributes. A file just created counts only if
//! the watcher delivered nothing between its creation and its entry in the table (an event
//! about it could not have found it). With per-directory marks, inotify or no watcher (some
//! changes could go unseen), every request asks the host.

use std::ffi::{CStr, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use memofs_core::{Caller, Errno, Ino, Result};

use crate::name;
use crate::sys;
use crate::PassthroughFs;

/// The attribute the kernel checks before writes and `chown`.
const CAPABILITY: &[u8] = b"security.capability";

impl PassthroughFs {
    /// Runs `call` with a path to `inode` ([`crate::fd::ProcSelf::with_path`]), its
    /// descriptor held for the call (a closed number could be reused for another file).
    fn with_path<T>(
        &self,
        inode: &crate::inode::Inode,
        call: impl FnOnce(&CStr) -> Result<T>,
    ) -> Result<T> {
        let fd = inode.fd()?;
        self.proc.with_path(fd.as_fd(), call)
    }

    /// GETXATTR.
    pub(crate) fn get_xattr(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        let inode = self.table.get(ino)?;
        let caps = name.as_bytes() == CAPABILITY && self.caps_cached(&inode);
        if caps && inode.no_caps.known() {
            return Err(Errno::ENODATA);
        }
        let snapshot = inode.no_caps.snapshot();
        let name = name::c_string(name)?;
        let got = self.with_path(&inode, |path| sys::xattr::get(path, &name));
        if caps && got == Err(Errno::ENODATA) {
            inode.no_caps.record(snapshot);
        }
        got
    }

    /// LISTXATTR.
    pub(crate) fn list_xattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.table.get(ino)?;
        self.with_path(&inode, sys::xattr::list)
    }

    /// SETXATTR, with the caller's credentials: the kernel leaves `system.*` (POSIX ACLs)
    /// and `security.*` to the filesystem, so the host must check them as the caller.
    pub(crate) fn set_xattr(
        &self,
        caller: &Caller,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let inode = self.table.get(ino)?;
        let name = name::c_string(name)?;
        let _creds = self.as_caller(caller);
        let done = self.with_path(&inode, |path| sys::xattr::set(path, &name, value, flags));
        inode.no_caps.forget();
        done
    }

    /// REMOVEXATTR, with the caller's credentials (as [`PassthroughFs::set_xattr`]).
    pub(crate) fn remove_xattr(&self, caller: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        let inode = self.table.get(ino)?;
        let name = name::c_string(name)?;
        let _creds = self.as_caller(caller);
        let done = self.with_path(&inode, |path| sys::xattr::remove(path, &name));
        inode.no_caps.forget();
        done
    }
}
