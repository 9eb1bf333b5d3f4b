//! `memofs umount`: unmount a memofs mount, including one whose server died.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use crate::cli::UmountArgs;
use crate::{fail, EXIT_FAILURE};

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

pub fn main(args: &UmountArgs) -> ExitCode {
    let lazy = args.lazy;
    let path = absolute(&args.mountpoint);
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
    let server = ServerExit::find(&path);
    let done = || {
        if !lazy {
            server.wait();
        }
        ExitCode::SUCCESS
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let mut cmd = Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        return match cmd.arg("--").arg(&path).status() {
            Ok(s) if s.success() => done(),
            Ok(_) => ExitCode::from(EXIT_FAILURE),
            Err(e) => fail(
                EXIT_FAILURE,
                format!("cannot run fusermount3 ({e}): as root, apt-get install fuse3"),
            ),
        };
    }
    let c = CString::new(path.as_os_str().as_bytes()).expect("paths have no NUL");
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return done();
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

/// The server of a mount, to wait for once it is unmounted: `memofs umount` returns only
/// once the server has exited (at most [`SERVER_EXIT`] later), so nothing of the old server
/// is left when the caller mounts again or removes the source. A lazy unmount of a busy
/// mount does not wait: its server runs on until the last user leaves.
struct ServerExit(Option<OwnedFd>);

/// Longest `memofs umount` waits for the server to exit.
const SERVER_EXIT: Duration = Duration::from_secs(5);

impl ServerExit {
    /// The server of the memofs mount at `path`, found through its control socket; none for
    /// a mount whose server is gone or cannot be told.
    fn find(path: &Path) -> ServerExit {
        let pid = memofs_fuse::mountinfo::dev_of(path)
            .and_then(|dev| memofs_control::server_pid(dev, path));
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = pid.map(|pid| unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) });
        ServerExit(fd.filter(|&fd| fd >= 0).map(|fd| {
            // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        }))
    }

    /// Waits until the server has exited, or [`SERVER_EXIT`] has passed.
    fn wait(&self) {
        let Some(fd) = &self.0 else {
            return;
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `p` is one live pollfd for an open descriptor.
        unsafe { libc::poll(&mut p, 1, SERVER_EXIT.as_millis() as i32) };
    }
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
