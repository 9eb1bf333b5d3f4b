//! The ioctls a FUSE server sees: the kernel's `fileattr` calls (`chattr`, `lsattr`,
//! `FS_IOC_GETFLAGS`/`SETFLAGS`, `FS_IOC_FSGETXATTR`/`FSSETXATTR` on a file or directory of
//! the mount arrive as these four), mapped onto the backend's inode flags.

use memofs_core::{Backend, Caller, Errno, Ino, Result};

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`).
const GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`).
const SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`).
const FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`).
const FSSETXATTR: u32 = 0x401c_5820;
/// `sizeof(struct fsxattr)`: xflags, extsize, nextents, projid, cowextsize, 8 pad bytes.
const FSXATTR_SIZE: usize = 28;

/// `FS_*_FL` inode flags and the `FS_XFLAG_*` flags that mean the same.
const FLAG_PAIRS: [(u32, u32); 5] = [
    (0x0000_0008, 0x0000_0020), // FS_SYNC_FL, FS_XFLAG_SYNC
    (0x0000_0010, 0x0000_0008), // FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE
    (0x0000_0020, 0x0000_0010), // FS_APPEND_FL, FS_XFLAG_APPEND
    (0x0000_0040, 0x0000_0080), // FS_NODUMP_FL, FS_XFLAG_NODUMP
    (0x0000_0080, 0x0000_0040), // FS_NOATIME_FL, FS_XFLAG_NOATIME
];

fn to_xflags(flags: u32) -> u32 {
    FLAG_PAIRS
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .fold(0, |x, (_, xf)| x | xf)
}

fn from_xflags(xflags: u32) -> Result<u32> {
    let known = FLAG_PAIRS.iter().fold(0, |x, (_, xf)| x | xf);
    if xflags & !known != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(FLAG_PAIRS
        .iter()
        .filter(|(_, xf)| xflags & xf != 0)
        .fold(0, |f, (fl, _)| f | fl))
}

fn u32_at(input: &[u8], at: usize) -> Result<u32> {
    input
        .get(at..at + 4)
        .map(|b| u32::from_ne_bytes(b.try_into().unwrap_or_default()))
        .ok_or(Errno::EINVAL)
}

/// Runs ioctl `cmd` with `input` on inode `ino`; returns the output argument.
pub(crate) fn ioctl<B: Backend>(
    backend: &B,
    caller: &Caller,
    ino: Ino,
    cmd: u32,
    input: &[u8],
) -> Result<Vec<u8>> {
    match cmd {
        GETFLAGS => Ok(backend.get_flags(ino)?.to_ne_bytes().to_vec()),
        SETFLAGS => backend
            .set_flags(caller, ino, u32_at(input, 0)?)
            .map(|()| Vec::new()),
        FSGETXATTR => {
            let mut out = vec![0u8; FSXATTR_SIZE];
            out[..4].copy_from_slice(&to_xflags(backend.get_flags(ino)?).to_ne_bytes());
            Ok(out)
        }
        FSSETXATTR => {
            // extsize, projid and cowextsize (offsets 4, 12, 16) have no meaning here.
            if [4, 12, 16]
                .iter()
                .any(|&at| u32_at(input, at).is_ok_and(|v| v != 0))
            {
                return Err(Errno::EOPNOTSUPP);
            }
            let flags = from_xflags(u32_at(input, 0)?)?;
            backend.set_flags(caller, ino, flags).map(|()| Vec::new())
        }
        _ => Err(Errno::ENOTTY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xflags_map_both_ways() {
        let all = 0x08 | 0x10 | 0x20 | 0x40 | 0x80;
        assert_eq!(from_xflags(to_xflags(all)), Ok(all));
        assert_eq!(to_xflags(0x10), 0x08);
        assert_eq!(from_xflags(0x1000), Err(Errno::EOPNOTSUPP));
    }
}
