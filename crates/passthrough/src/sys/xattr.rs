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

/// Size queries made before reading with the largest buffer instead.
const SIZE_TRIES: usize = 4;

/// Calls `get` (a size query with an empty buffer, then a read) until the value fits: a
/// few times, then once with the largest buffer the kernel allows, so a host attribute
/// that keeps changing cannot hold the request in a loop.
fn read_sized(mut get: impl FnMut(*mut libc::c_void, usize) -> isize) -> Result<Vec<u8>> {
    for _ in 0..SIZE_TRIES {
        let size = check(get(std::ptr::null_mut(), 0))? as usize;
        if size >= XATTR_SIZE_MAX {
            break;
        }
        let mut buf = vec![0u8; size];
        match check(get(buf.as_mut_ptr().cast(), buf.len())) {
            // With an empty buffer the call answers the size: more than 0 means it grew.
            Ok(n) if n as usize <= buf.len() => {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            // Grew between the two calls: ask again.
            Ok(_) | Err(Errno::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    let mut buf = vec![0u8; XATTR_SIZE_MAX];
    let n = check(get(buf.as_mut_ptr().cast(), buf.len()))?;
    buf.truncate(n as usize);
    Ok(buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `get` over a value of `start` bytes that grows by `grow` after every call, up to
    /// `most`; counts calls.
    fn growing(
        start: usize,
        grow: usize,
        most: usize,
        calls: &mut usize,
    ) -> impl FnMut(*mut libc::c_void, usize) -> isize + '_ {
        let mut len = start;
        move |buf, cap| {
            *calls += 1;
            let now = len;
            len = (len + grow).min(most);
            if cap == 0 {
                now as isize
            } else if now > cap {
                // SAFETY: sets this thread's errno, as the real call would.
                unsafe { *libc::__errno_location() = libc::ERANGE };
                -1
            } else {
                // SAFETY: the caller's buffer holds `cap >= now` bytes.
                unsafe { std::ptr::write_bytes(buf.cast::<u8>(), 7, now) };
                now as isize
            }
        }
    }

    #[test]
    fn a_value_that_keeps_growing_is_read_in_a_bounded_number_of_calls() {
        let mut calls = 0;
        let got = read_sized(growing(10, 1, usize::MAX, &mut calls)).unwrap();
        // Every sized read sees one byte more than was asked for; the last read takes the
        // largest buffer.
        assert_eq!(calls, 2 * SIZE_TRIES + 1);
        assert_eq!(got.len(), 10 + 2 * SIZE_TRIES);
        let mut calls = 0;
        assert_eq!(read_sized(growing(3, 0, 3, &mut calls)).unwrap(), [7; 3]);
        assert_eq!(calls, 2);
        // An empty value that gains bytes between the two calls is asked for again.
        let mut calls = 0;
        assert_eq!(read_sized(growing(0, 5, 5, &mut calls)).unwrap(), [7; 5]);
        assert_eq!(calls, 4);
    }
}
