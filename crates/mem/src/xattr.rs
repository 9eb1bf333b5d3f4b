//! Extended attributes: `user.`, `trusted.` and `security.` namespaces, and the two POSIX
//! ACLs of the `system.` namespace (whose meaning [`crate::acl`] gives them), as tmpfs.

use std::collections::BTreeMap;

use memofs_core::{Errno, Result};

/// Namespaces stored; other names, but for the ACLs, are `EOPNOTSUPP`.
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// Largest value, as the VFS (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;

/// One inode's extended attributes: nothing but a null pointer until the first is set,
/// since most inodes never have any.
#[derive(Default)]
pub struct Xattrs {
    inner: Option<Box<Stored>>,
}

#[derive(Default)]
struct Stored {
    map: BTreeMap<Box<[u8]>, Box<[u8]>>,
    charged: u64,
}

/// Bytes an attribute is charged against `size=`.
pub fn cost(name: &[u8], value: &[u8]) -> u64 {
    (name.len() + value.len()) as u64
}

/// Checks that `name` is in a supported namespace and well formed.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > 255 {
        return Err(if name.is_empty() {
            Errno::EINVAL
        } else {
            Errno::ERANGE
        });
    }
    if crate::acl::AclType::of(name).is_some() {
        return Ok(());
    }
    match NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        Some(ns) if name.len() > ns.len() => Ok(()),
        Some(_) => Err(Errno::EINVAL),
        None => Err(Errno::EOPNOTSUPP),
    }
}

impl Xattrs {
    /// Value of `name`.
    pub fn get(&self, name: &[u8]) -> Result<&[u8]> {
        check_name(name)?;
        self.value(name).ok_or(Errno::ENODATA)
    }

    /// Value of `name`, if set (no name check).
    pub fn value(&self, name: &[u8]) -> Option<&[u8]> {
        Some(&self.inner.as_ref()?.map.get(name)?[..])
    }

    /// Works out the byte-count change of a set, checking flags, before anything changes.
    /// Returns `(old_cost, new_cost)`.
    pub fn plan_set(&self, name: &[u8], value: &[u8], flags: i32) -> Result<(u64, u64)> {
        check_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let old = self.value(name);
        if flags & libc::XATTR_CREATE != 0 && old.is_some() {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && old.is_none() {
            return Err(Errno::ENODATA);
        }
        Ok((old.map_or(0, |v| cost(name, v)), cost(name, value)))
    }

    /// Stores `name` = `value` (after [`Xattrs::plan_set`] and the byte charge).
    pub fn set(&mut self, name: &[u8], value: &[u8]) {
        let stored = self.inner.get_or_insert_with(Box::default);
        if let Some(old) = stored.map.insert(name.into(), value.into()) {
            stored.charged -= cost(name, &old);
        }
        stored.charged += cost(name, value);
    }

    /// Removes `name`, returning the bytes it held.
    pub fn remove(&mut self, name: &[u8]) -> Result<u64> {
        check_name(name)?;
        let stored = self.inner.as_mut().ok_or(Errno::ENODATA)?;
        let v = stored.map.remove(name).ok_or(Errno::ENODATA)?;
        let c = cost(name, &v);
        stored.charged -= c;
        if stored.map.is_empty() {
            self.inner = None;
        }
        Ok(c)
    }

    /// Names, each NUL-terminated.
    pub fn list(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for name in self.inner.iter().flat_map(|s| s.map.keys()) {
            out.extend_from_slice(name);
            out.push(0);
        }
        out
    }

    /// Bytes held against `size=`.
    pub fn charged_bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, |s| s.charged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_namespaces_and_accounting() {
        let mut x = Xattrs::default();
        assert_eq!(x.plan_set(b"system.other", b"", 0), Err(Errno::EOPNOTSUPP));
        assert_eq!(x.plan_set(b"user.", b"v", 0), Err(Errno::EINVAL));
        assert_eq!(
            x.plan_set(b"user.a", b"v", libc::XATTR_REPLACE),
            Err(Errno::ENODATA)
        );
        x.plan_set(b"user.a", b"v", libc::XATTR_CREATE).unwrap();
        x.set(b"user.a", b"v");
        assert_eq!(
            x.plan_set(b"user.a", b"w", libc::XATTR_CREATE),
            Err(Errno::EEXIST)
        );
        x.set(b"user.a", b"www");
        assert_eq!(x.charged_bytes(), 9);
        assert_eq!(x.get(b"user.a").unwrap(), b"www");
        assert_eq!(x.list(), b"user.a\0");
        assert_eq!(x.remove(b"user.a"), Ok(9));
        assert_eq!(x.charged_bytes(), 0);
        assert_eq!(x.get(b"user.a"), Err(Errno::ENODATA));
    }
}
