//! Extended attributes through a `/proc/self/fd/N` path.
//!
//! `f*xattr` calls refuse `O_PATH` descriptors, and the backend holds only `O_PATH`
//! descriptors for inodes. The path-based calls, given `/proc/self/fd/N`, follow that magic
//! link to exactly the inode the descriptor pins, whatever its kind (a symlink's own
//! attributes included: the jump through the magic link is not followed again), without
//! opening it: no device is opened and no FIFO blocks.

use std::ffi::CStr;

use memofs_core::{Errno, Result};

use super::check;

/// Largest attribute value or name list (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65536;

/// Calls `get` (a size query with an empty buffer, then a read) until the value fits.
fn read_sized(mut get: impl FnMut(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>> {
    loop {
        let size = check(get(std::ptr::null_mut(), 0))? as usize;
        let mut buf = vec![0u8; size.min(XATTR_SIZE_MAX)];
        match check(get(buf.as_mut_ptr().cast(), buf.len())) {
            Ok(n) => {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            // Grew between the two calls: ask again.
            Err(Errno::ERANGE) if size < XATTR_SIZE_MAX => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `getxattr(path, name)`.
pub(crate) fn get(path: &CStr, name: &CStr) -> Result<Vec<u8>> {
    read_sized(|buf, len| {
        // SAFETY: both strings are NUL-terminated; the kernel writes at most `len` bytes to
        // `buf` (nothing when `len` is 0).
        unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf, len) }
    })
}

/// `listxattr(path)`: NUL-terminated names.
pub(crate) fn list(path: &CStr) -> Result<Vec<u8>> {
    read_sized(|buf, len| {
        // SAFETY: `path` is NUL-terminated; the kernel writes at most `len` bytes to `buf`.
        unsafe { libc::listxattr(path.as_ptr(), buf.cast(), len) }
    })
}

/// `setxattr(path, name, value, flags)`.
pub(crate) fn set(path: &CStr, name: &CStr, value: &[u8], flags: i32) -> Result<()> {
    // SAFETY: both strings are NUL-terminated; the kernel reads `value.len()` bytes.
    check(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

/// `removexattr(path, name)`.
pub(crate) fn remove(path: &CStr, name: &CStr) -> Result<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}
