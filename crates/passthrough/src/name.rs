//! Checks names from the kernel before they reach a host system call.
//!
//! Every host access is one `*at()` call with one path component relative to a descriptor
//! the backend resolved beneath the export root. A name is accepted only if it *is* one
//! component: not empty, no `/`, no NUL, not `.` or `..` (those two are handled by
//! [`crate::PassthroughFs`]'s lookup explicitly, and refused everywhere else), at most
//! [`memofs_core::NAME_MAX`] bytes (checked by [`memofs_core::check_component`]).

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;

#[cfg(test)]
use memofs_core::NAME_MAX;
use memofs_core::{Errno, Result};

/// What a lookup name turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// `.`: the directory itself.
    Dot,
    /// `..`: the parent directory (the root's parent is the root).
    DotDot,
    /// An ordinary entry name.
    Name(CString),
}

/// Classifies a name given to `lookup`.
pub(crate) fn lookup(name: &OsStr) -> Result<Lookup> {
    match name.as_bytes() {
        b"." => Ok(Lookup::Dot),
        b".." => Ok(Lookup::DotDot),
        _ => component(name).map(Lookup::Name),
    }
}

/// A name that creates, removes or renames an entry: exactly one ordinary component.
pub(crate) fn component(name: &OsStr) -> Result<CString> {
    memofs_core::check_component(name.as_bytes())?;
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

/// A symlink target or an xattr name: any bytes but NUL.
pub(crate) fn c_string(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_components_pass() {
        for bad in ["", ".", "..", "a/b", "/", "../x", "a\0b"] {
            assert_eq!(component(OsStr::new(bad)), Err(Errno::EINVAL), "{bad:?}");
        }
        let long = "x".repeat(NAME_MAX + 1);
        assert_eq!(component(OsStr::new(&long)), Err(Errno::ENAMETOOLONG));
        assert_eq!(component(OsStr::new("...")).unwrap().as_bytes(), b"...");
        assert_eq!(
            component(OsStr::new(&long[1..])).unwrap().as_bytes().len(),
            NAME_MAX
        );
    }

    #[test]
    fn lookup_separates_dots() {
        assert_eq!(lookup(OsStr::new(".")), Ok(Lookup::Dot));
        assert_eq!(lookup(OsStr::new("..")), Ok(Lookup::DotDot));
        assert_eq!(lookup(OsStr::new("a/..")), Err(Errno::EINVAL));
    }
}
