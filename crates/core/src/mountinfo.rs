//! Reading `/proc/self/mountinfo`: the transport's mount checks and the passthrough
//! backend's question whether an export is a whole filesystem.

use std::io;
use std::path::{Path, PathBuf};

/// Undoes the octal escapes (`\040` for space...) mountinfo uses in paths.
pub fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// One mount: its mount point and filesystem type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id (`statx`'s `stx_mnt_id`).
    pub id: u64,
    /// The directory of its filesystem that the mount shows (`/` for a whole filesystem).
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type, e.g. `fuse.memofs`.
    pub fstype: String,
    /// Source, e.g. `memofs`.
    pub source: String,
    /// Device number (`st_dev` of files on this mount).
    pub dev: u64,
    /// The filesystem's own options (for FUSE: `user_id=`, `group_id=`, ...).
    pub super_options: String,
    /// The mount's own options (`ro`, `nosuid`, `relatime`, ...).
    pub options: String,
}

impl MountEntry {
    /// The uid a FUSE mount belongs to (its `user_id=` option).
    pub fn owner(&self) -> Option<u32> {
        self.super_options
            .split(',')
            .find_map(|o| o.strip_prefix("user_id="))
            .and_then(|v| v.parse().ok())
    }
}

/// Parses mountinfo text.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
                id: fields.first()?.parse().ok()?,
                root: unescape(fields.get(3)?),
                mount_point: unescape(fields.get(4)?),
                fstype: fields.get(sep + 1)?.to_string(),
                source: unescape(fields.get(sep + 2)?)
                    .to_string_lossy()
                    .into_owned(),
                super_options: fields.get(sep + 3).map_or(String::new(), |o| o.to_string()),
                options: fields.get(5)?.to_string(),
                dev: {
                    let (maj, min) = fields.get(2)?.split_once(':')?;
                    libc::makedev(maj.parse().ok()?, min.parse().ok()?)
                },
            })
        })
        .collect()
}

/// The current mounts.
pub fn mounts() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The st_dev of the topmost mount at `mountpoint`, from mountinfo (no stat: it must not
/// wait for the mount's own server, which may not serve yet, or may be stuck).
pub fn dev_of(mountpoint: &Path) -> Option<u64> {
    mounts()
        .ok()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == mountpoint)
        .map(|m| m.dev)
}

/// True if `path` (canonical) is a mount point.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(mounts()?.iter().any(|m| m.mount_point == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escaped_mount_points() {
        let text =
            "36 35 98:0 / /mnt/my\\040dir rw,noatime master:1 - fuse.memofs memofs rw,user_id=0\n\
                    37 35 0:5 /srv/share /tmp rw shared:2 - tmpfs tmpfs rw";
        let m = parse(text);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/my dir"));
        assert_eq!(m[0].fstype, "fuse.memofs");
        assert_eq!(m[1].source, "tmpfs");
        assert_eq!(m[0].dev, libc::makedev(98, 0));
        assert_eq!((m[0].id, m[0].root.as_path()), (36, Path::new("/")));
        assert_eq!(m[1].root, PathBuf::from("/srv/share"));
        assert_eq!(m[0].owner(), Some(0));
        assert_eq!(m[1].owner(), None);
    }
}
