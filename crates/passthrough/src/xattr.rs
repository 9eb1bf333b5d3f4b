//! Extended attributes, on the host inode itself through its `/proc/self/fd/N` path (see
//! [`crate::sys::xattr`]): works for every kind without opening the inode. Host errors
//! (`ENODATA`, `ENOTSUP`, `EPERM` for `user.*` on symlinks, ...) come back unchanged.

use std::ffi::OsStr;
use std::os::fd::AsFd;

use memofs_core::{Caller, Ino, Result};

use crate::fd::ProcSelf;
use crate::name;
use crate::sys;
use crate::PassthroughFs;

impl PassthroughFs {
    fn xattr_path(
        &self,
        ino: Ino,
    ) -> Result<(std::sync::Arc<crate::inode::Inode>, std::ffi::CString)> {
        let inode = self.table.get(ino)?;
        let path = ProcSelf::path(inode.fd.as_fd());
        Ok((inode, path))
    }

    /// GETXATTR.
    pub(crate) fn get_xattr(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        let (_inode, path) = self.xattr_path(ino)?;
        sys::xattr::get(&path, &name::c_string(name)?)
    }

    /// LISTXATTR.
    pub(crate) fn list_xattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let (_inode, path) = self.xattr_path(ino)?;
        sys::xattr::list(&path)
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
        let (_inode, path) = self.xattr_path(ino)?;
        let name = name::c_string(name)?;
        let _creds = self.as_caller(caller);
        sys::xattr::set(&path, &name, value, flags)
    }

    /// REMOVEXATTR, with the caller's credentials (as [`PassthroughFs::set_xattr`]).
    pub(crate) fn remove_xattr(&self, caller: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        let (_inode, path) = self.xattr_path(ino)?;
        let name = name::c_string(name)?;
        let _creds = self.as_caller(caller);
        sys::xattr::remove(&path, &name)
    }
}
