//! The inode-flag ioctls the kernel sends as FUSE_IOCTL (`chattr`, `lsattr`, `xfs_io
//! lsattr/chattr`): `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` carry the flags as they are,
//! `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR` a `struct fsxattr` whose `fsx_xflags` translate to
//! and from them as the kernel's `fileattr_fill_flags`/`fileattr_fill_xflags` do. Both map
//! onto [`Backend::get_flags`]/[`Backend::set_flags`]; extent sizes, project ids and xflags
//! with no flag equivalent are `EOPNOTSUPP`, as on tmpfs. Other commands are `ENOTTY`, but
//! for memofs's own [`CONTROL_ADDRESS`], which the request layer answers itself.

use memofs_core::inode_flags::{APPEND, DAX, IMMUTABLE, NOATIME, NODUMP, PROJINHERIT, SYNC};
use memofs_core::{Backend, Caller, Errno, Ino, Result};

const FS_IOC_GETFLAGS: u32 = libc::FS_IOC_GETFLAGS as u32;
const FS_IOC_SETFLAGS: u32 = libc::FS_IOC_SETFLAGS as u32;
/// `_IOR('X', 31, struct fsxattr)`.
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// memofs's own command, `_IOR('m', 0x4d, char[64])`: where the mount's control socket
/// listens when it has no file of its own (an abstract socket name, NUL-padded), asked of
/// the mount by `memofs stats` and answered to root and the server's user only.
pub const CONTROL_ADDRESS: u32 = 0x8040_6d4d;

/// The size of [`CONTROL_ADDRESS`]'s answer.
pub const CONTROL_ADDRESS_SIZE: usize = 64;

/// Size of `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize, 8 spare bytes.
const FSXATTR_SIZE: usize = 28;

/// Each flag with its `FS_XFLAG_*` twin (`FS_COMMON_FL` and `FS_XFLAG_COMMON`).
const XFLAGS: [(u32, u32); 7] = [
    (SYNC, 0x20),
    (IMMUTABLE, 0x08),
    (APPEND, 0x10),
    (NODUMP, 0x80),
    (NOATIME, 0x40),
    (DAX, 0x8000),
    (PROJINHERIT, 0x200),
];

fn to_xflags(flags: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .fold(0, |x, (_, xf)| x | xf)
}

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data.get(at..at + 4).ok_or(Errno::EINVAL)?;
    Ok(u32::from_ne_bytes(bytes.try_into().expect("4 bytes")))
}

/// Whether `cmd` changes the inode (refused on a read-only mount).
pub(crate) fn modifies(cmd: u32) -> bool {
    matches!(cmd, FS_IOC_SETFLAGS | FS_IOC_FSSETXATTR)
}

/// Runs the ioctl `cmd` with input `data` on inode `ino`; returns the output bytes.
pub(crate) fn ioctl<B: Backend + ?Sized>(
    backend: &B,
    caller: &Caller,
    ino: Ino,
    cmd: u32,
    data: &[u8],
) -> Result<Vec<u8>> {
    match cmd {
        FS_IOC_GETFLAGS => Ok(backend.get_flags(ino)?.to_ne_bytes().to_vec()),
        FS_IOC_SETFLAGS => backend
            .set_flags(caller, ino, u32_at(data, 0)?)
            .map(|()| vec![]),
        FS_IOC_FSGETXATTR => {
            let mut out = vec![0u8; FSXATTR_SIZE];
            out[..4].copy_from_slice(&to_xflags(backend.get_flags(ino)?).to_ne_bytes());
            Ok(out)
        }
        FS_IOC_FSSETXATTR => {
            let xflags = u32_at(data, 0)?;
            let (extsize, projid, cowextsize) =
                (u32_at(data, 4)?, u32_at(data, 12)?, u32_at(data, 16)?);
            let common = XFLAGS.iter().fold(0, |x, (_, xf)| x | xf);
            if xflags & !common != 0 || extsize != 0 || projid != 0 || cowextsize != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            // As the VFS does: flags with no xflag twin stay as they are.
            let all_common = XFLAGS.iter().fold(0, |x, (f, _)| x | f);
            let mut flags = backend.get_flags(ino)? & !all_common;
            for (f, xf) in XFLAGS {
                if xflags & xf != 0 {
                    flags |= f;
                }
            }
            backend.set_flags(caller, ino, flags).map(|()| vec![])
        }
        _ => Err(Errno::ENOTTY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xflags_translate_as_the_kernel_does() {
        assert_eq!(to_xflags(IMMUTABLE | NOATIME | NODUMP), 0x08 | 0x40 | 0x80);
        assert_eq!(
            to_xflags(0x0008_0000),
            0,
            "flags with no twin have no xflag"
        );
        assert_eq!(FS_IOC_GETFLAGS, 0x8008_6601);
        assert_eq!(FS_IOC_SETFLAGS, 0x4008_6602);
    }
}
