//! `memofs umount`: unmount a memofs mount, including one whose server died.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

/// Absolute, lexically normalized path: no stat, so it works on a dead (ENOTCONN) mount.
pub fn absolute(p: &Path) -> PathBuf {
    let base = if p.is_absolute() {
        PathBuf::new()
    } else {
        std::env::current_dir().unwrap_or_default()
    };
    let mut out = PathBuf::from("/");
    for c in base.join(p).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

pub fn main(args: &[String]) -> ExitCode {
    let mut lazy = false;
    let mut target = None;
    for a in args {
        match a.as_str() {
            "-l" | "--lazy" | "-z" => lazy = true,
            "-h" | "--help" => {
                println!("usage: memofs umount [-l] MOUNTPOINT\n  -l  detach now, finish when no longer busy");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => {
                return fail(EXIT_USAGE, format!("umount: unknown flag '{s}'"))
            }
            s if target.is_none() => target = Some(s.to_string()),
            _ => return fail(EXIT_USAGE, "umount: too many arguments"),
        }
    }
    let Some(target) = target else {
        return fail(EXIT_USAGE, "umount: missing MOUNTPOINT");
    };
    let path = absolute(Path::new(&target));
    match memofs_fuse::mountinfo::is_mount_point(&path) {
        Ok(true) => {}
        Ok(false) => return fail(EXIT_FAILURE, format!("{} is not mounted", path.display())),
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("cannot read /proc/self/mountinfo: {e}"),
            )
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let mut cmd = Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        return match cmd.arg("--").arg(&path).status() {
            Ok(s) if s.success() => ExitCode::SUCCESS,
            Ok(_) => ExitCode::from(EXIT_FAILURE),
            Err(e) => fail(
                EXIT_FAILURE,
                format!("cannot run fusermount3 ({e}); install the fuse3 package"),
            ),
        };
    }
    let c = CString::new(path.as_os_str().as_bytes()).expect("paths have no NUL");
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return ExitCode::SUCCESS;
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EBUSY) {
        return fail(EXIT_FAILURE, format!("{} is busy (files open or a process inside); retry, or use 'memofs umount -l' to detach it now", path.display()));
    }
    fail(
        EXIT_FAILURE,
        format!("cannot unmount {}: {err}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_normalizes_without_touching_the_filesystem() {
        assert_eq!(
            absolute(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(absolute(Path::new("/..")), PathBuf::from("/"));
    }
}
