//! POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`) with the semantics
//! kernel tmpfs gets from `fs/posix_acl.c`.
//!
//! ACLs are kept as extended attributes in the kernel's xattr format (a little-endian
//! `u32` version 2, then entries of `{e_tag: u16, e_perm: u16, e_id: u32}`), always in the
//! canonical form the kernel returns (`e_id` of the owner, owning group, mask and other
//! entries is `ACL_UNDEFINED_ID`), and are charged like other xattrs. What an ACL does to
//! the mode happens here:
//! - setting an access ACL sets the mode's permission bits from it, and stores nothing when
//!   the ACL says no more than the mode (`posix_acl_update_mode`);
//! - chmod rewrites the owner, mask (or owning group) and other entries of the access ACL
//!   (`posix_acl_chmod`);
//! - a new inode in a directory with a default ACL gets its mode masked by that ACL instead
//!   of by the umask, an access ACL when the result is not plain mode bits, and, if it is a
//!   directory, the default ACL too (`posix_acl_create`).
//!
//! Permission checks with ACLs are the kernel's (FUSE_POSIX_ACL): it reads them back with
//! GETXATTR.

use memofs_core::{Errno, Result};

/// Name of the access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// Name of the default ACL (directories only).
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
const UNDEFINED_ID: u32 = u32::MAX;

/// Entry tag (`e_tag`) of the owner.
pub const USER_OBJ: u16 = 0x01;
/// Entry tag of a named user.
pub const USER: u16 = 0x02;
/// Entry tag of the owning group.
pub const GROUP_OBJ: u16 = 0x04;
/// Entry tag of a named group.
pub const GROUP: u16 = 0x08;
/// Entry tag of the mask.
pub const MASK: u16 = 0x10;
/// Entry tag of everyone else.
pub const OTHER: u16 = 0x20;

/// Read, write and execute: the only permission bits an entry may have.
const RWX: u16 = 0o7;

/// Which of the two ACLs an xattr name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclType {
    /// `system.posix_acl_access`.
    Access,
    /// `system.posix_acl_default`.
    Default,
}

impl AclType {
    /// The ACL `name` stands for, if it is one.
    pub fn of(name: &[u8]) -> Option<AclType> {
        match name {
            ACCESS => Some(AclType::Access),
            DEFAULT => Some(AclType::Default),
            _ => None,
        }
    }

    /// The xattr name.
    pub fn name(self) -> &'static [u8] {
        match self {
            AclType::Access => ACCESS,
            AclType::Default => DEFAULT,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A valid ACL, entries in the order they were given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl(Vec<Entry>);

impl Acl {
    /// Decodes and checks an xattr value as the kernel does (`posix_acl_from_xattr`, then
    /// `posix_acl_valid`). `None` for an ACL with no entries (an empty value or a bare
    /// header), which removes the ACL. `EOPNOTSUPP` for another version, `EINVAL` for
    /// anything malformed.
    pub fn from_xattr(value: &[u8]) -> Result<Option<Acl>> {
        if value.is_empty() {
            return Ok(None);
        }
        let (header, body) = value.split_at_checked(HEADER).ok_or(Errno::EINVAL)?;
        if u32::from_le_bytes(header.try_into().expect("4 bytes")) != VERSION {
            return Err(Errno::EOPNOTSUPP);
        }
        if body.len() % ENTRY != 0 {
            return Err(Errno::EINVAL);
        }
        if body.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(body.len() / ENTRY);
        for e in body.chunks_exact(ENTRY) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let raw_id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let id = match tag {
                USER_OBJ | GROUP_OBJ | MASK | OTHER => UNDEFINED_ID,
                // (uid_t)-1 is no valid id.
                USER | GROUP if raw_id != UNDEFINED_ID => raw_id,
                _ => return Err(Errno::EINVAL),
            };
            entries.push(Entry { tag, perm, id });
        }
        let acl = Acl(entries);
        acl.check()?;
        Ok(Some(acl))
    }

    /// `posix_acl_valid`: one owner entry, then named users, the owning group, named
    /// groups, a mask (required once there are named entries) and one other entry, in
    /// that order, with read/write/execute permissions only. Named entries need not be
    /// sorted by id (the kernel does not check that either).
    fn check(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            Users,
            Groups,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.0 {
            if e.perm & !RWX != 0 {
                return Err(Errno::EINVAL);
            }
            state = match (e.tag, state) {
                (USER_OBJ, State::UserObj) => State::Users,
                (USER, State::Users) => {
                    needs_mask = true;
                    State::Users
                }
                (GROUP_OBJ, State::Users) => State::Groups,
                (GROUP, State::Groups) => {
                    needs_mask = true;
                    State::Groups
                }
                (MASK, State::Groups) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Groups) if !needs_mask => State::Done,
                _ => return Err(Errno::EINVAL),
            };
        }
        if state == State::Done {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    /// The xattr value (`posix_acl_to_xattr`).
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + ENTRY * self.0.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.0 {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    /// `posix_acl_equiv_mode`: `mode` with its permission bits taken from the ACL (the
    /// group bits from the mask when there is one), and whether the ACL says more than
    /// those bits (named entries or a mask).
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0u32;
        let mut not_equiv = false;
        for e in &self.0 {
            let p = u32::from(e.perm & RWX);
            match e.tag {
                USER_OBJ => bits |= p << 6,
                GROUP_OBJ => bits |= p << 3,
                OTHER => bits |= p,
                MASK => {
                    bits = (bits & !0o070) | (p << 3);
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        ((mode & !0o777) | bits, not_equiv)
    }

    /// `posix_acl_chmod`: the owner, other, and mask entries (the owning group's when
    /// there is no mask) take the new mode's bits.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 0o7) as u16,
                OTHER => e.perm = (mode & 0o7) as u16,
                MASK => e.perm = ((mode >> 3) & 0o7) as u16,
                GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 0o7) as u16,
                _ => {}
            }
        }
    }

    /// `posix_acl_create_masq`: masks the ACL's owner, other, and mask (or owning group)
    /// entries with the requested `mode` and the mode with them. Returns whether the ACL
    /// says more than the mode bits.
    fn create_masq(&mut self, mode: &mut u32) -> bool {
        let mut m = *mode;
        let mut not_equiv = false;
        let has_mask = self.0.iter().any(|e| e.tag == MASK);
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 0o7) as u16;
                    m &= (u32::from(e.perm) << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= (m & 0o7) as u16;
                    m &= u32::from(e.perm) | !0o007;
                }
                USER | GROUP => not_equiv = true,
                MASK => not_equiv = true,
                GROUP_OBJ => {}
                _ => {}
            }
        }
        let group_tag = if has_mask { MASK } else { GROUP_OBJ };
        if let Some(g) = self.0.iter_mut().find(|e| e.tag == group_tag) {
            g.perm &= ((m >> 3) & 0o7) as u16;
            m &= (u32::from(g.perm) << 3) | !0o070;
        }
        *mode &= (m & 0o777) | !0o777;
        not_equiv
    }
}

/// What a new inode gets from its directory: its mode, and its ACLs as xattr values.
#[derive(Debug, PartialEq, Eq)]
pub struct Inherited {
    /// The mode (with its kind bits) after the default ACL or the umask.
    pub mode: u32,
    /// The access ACL, when the default ACL says more than the mode.
    pub access: Option<Vec<u8>>,
    /// The default ACL, for a directory made in a directory that has one.
    pub default: Option<Vec<u8>>,
}

/// `posix_acl_create`: the mode and ACLs of a new inode of `mode` (with its kind bits) in a
/// directory whose default ACL is `parent_default` (stored, so valid). With no default ACL,
/// the umask applies; with one, the umask is ignored.
pub fn inherit(parent_default: Option<&[u8]>, mode: u32, umask: u32) -> Result<Inherited> {
    let Some(default) = parent_default else {
        return Ok(Inherited {
            mode: mode & !(umask & 0o777),
            access: None,
            default: None,
        });
    };
    let mut acl = Acl::from_xattr(default)?.ok_or(Errno::EIO)?;
    let mut mode = mode;
    let not_equiv = acl.create_masq(&mut mode);
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    Ok(Inherited {
        mode,
        access: not_equiv.then(|| acl.to_xattr()),
        default: is_dir.then(|| default.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: u32 = UNDEFINED_ID;

    fn value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl::from_xattr(&value(entries)).unwrap().unwrap()
    }

    #[test]
    fn decoding_accepts_what_the_kernel_accepts() {
        assert_eq!(Acl::from_xattr(b""), Ok(None));
        assert_eq!(Acl::from_xattr(&value(&[])), Ok(None));
        assert_eq!(Acl::from_xattr(&[2, 0, 0]), Err(Errno::EINVAL));
        assert_eq!(Acl::from_xattr(&1u32.to_le_bytes()), Err(Errno::EOPNOTSUPP));
        let mut junk = value(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
        junk.push(0);
        assert_eq!(Acl::from_xattr(&junk), Err(Errno::EINVAL));
        // Out of order, a named entry without a mask, a bad permission, a bad id, an
        // unknown tag, a duplicate owner, no other entry.
        for bad in [
            vec![(GROUP_OBJ, 5, U), (USER_OBJ, 7, U), (OTHER, 1, U)],
            vec![
                (USER_OBJ, 7, U),
                (USER, 7, 5),
                (GROUP_OBJ, 5, U),
                (OTHER, 1, U),
            ],
            vec![(USER_OBJ, 0o17, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)],
            vec![
                (USER_OBJ, 7, U),
                (USER, 7, U),
                (GROUP_OBJ, 5, U),
                (MASK, 7, U),
                (OTHER, 0, U),
            ],
            vec![
                (USER_OBJ, 7, U),
                (0x40, 7, 1),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
            ],
            vec![
                (USER_OBJ, 7, U),
                (USER_OBJ, 7, U),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
            ],
            vec![(USER_OBJ, 7, U), (GROUP_OBJ, 5, U)],
            vec![
                (USER_OBJ, 7, U),
                (GROUP_OBJ, 5, U),
                (OTHER, 0, U),
                (OTHER, 0, U),
            ],
        ] {
            assert_eq!(Acl::from_xattr(&value(&bad)), Err(Errno::EINVAL), "{bad:?}");
        }
        // Unsorted and repeated named entries pass, as in the kernel; ids of the unnamed
        // entries are canonicalised.
        let a = acl(&[
            (USER_OBJ, 7, 5),
            (USER, 7, 9),
            (USER, 7, 5),
            (USER, 1, 5),
            (GROUP_OBJ, 5, 3),
            (MASK, 7, 0),
            (OTHER, 1, 0),
        ]);
        assert_eq!(
            a.to_xattr(),
            value(&[
                (USER_OBJ, 7, U),
                (USER, 7, 9),
                (USER, 7, 5),
                (USER, 1, 5),
                (GROUP_OBJ, 5, U),
                (MASK, 7, U),
                (OTHER, 1, U),
            ])
        );
    }

    #[test]
    fn equivalent_acls_become_mode_bits() {
        let plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
        assert_eq!(
            plain.equiv_mode(libc::S_IFREG | 0o4640),
            (libc::S_IFREG | 0o4751, false)
        );
        // A mask alone is not equivalent, and sets the group bits.
        let masked = acl(&[
            (USER_OBJ, 6, U),
            (GROUP_OBJ, 4, U),
            (MASK, 6, U),
            (OTHER, 0, U),
        ]);
        assert_eq!(masked.equiv_mode(0o777), (0o660, true));
    }

    #[test]
    fn chmod_rewrites_owner_mask_and_other() {
        let mut a = acl(&[
            (USER_OBJ, 7, U),
            (USER, 6, 1234),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]);
        a.chmod(0o751);
        assert_eq!(
            a,
            acl(&[
                (USER_OBJ, 7, U),
                (USER, 6, 1234),
                (GROUP_OBJ, 5, U),
                (MASK, 5, U),
                (OTHER, 1, U)
            ])
        );
        let mut plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
        plain.chmod(0o640);
        assert_eq!(
            plain,
            acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)])
        );
    }

    /// The figures are what kernel tmpfs gave for the same default ACL under umask 077.
    #[test]
    fn inheritance_masks_with_the_default_acl_and_ignores_the_umask() {
        let default = value(&[
            (USER_OBJ, 7, U),
            (USER, 6, 1234),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]);
        let file = inherit(Some(&default), libc::S_IFREG | 0o666, 0o077).unwrap();
        assert_eq!(file.mode, libc::S_IFREG | 0o660);
        assert_eq!(
            file.access,
            Some(value(&[
                (USER_OBJ, 6, U),
                (USER, 6, 1234),
                (GROUP_OBJ, 5, U),
                (MASK, 6, U),
                (OTHER, 0, U)
            ]))
        );
        assert_eq!(file.default, None);
        let dir = inherit(Some(&default), libc::S_IFDIR | 0o777, 0o077).unwrap();
        assert_eq!(dir.mode, libc::S_IFDIR | 0o770);
        assert_eq!(dir.default, Some(default.clone()));
        let fifo = inherit(Some(&default), libc::S_IFIFO | 0o644, 0o077).unwrap();
        assert_eq!(fifo.mode, libc::S_IFIFO | 0o640);
        // An equivalent default ACL leaves no access ACL.
        let plain = value(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 0, U)]);
        let f = inherit(Some(&plain), libc::S_IFREG | 0o666, 0o077).unwrap();
        assert_eq!((f.mode, f.access), (libc::S_IFREG | 0o640, None));
        // No default ACL: the umask.
        let f = inherit(None, libc::S_IFREG | 0o4666, 0o027).unwrap();
        assert_eq!(
            (f.mode, f.access, f.default),
            (libc::S_IFREG | 0o4640, None, None)
        );
    }
}
