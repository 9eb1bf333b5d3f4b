//! `memofs umount`: unmount a memofs mount, including one whose server died.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
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
    match unmount(&path, lazy) {
        Ok(()) => done(),
        Err(Failed::Busy) if server_gone(&path) => {
            // Nothing can serve it again: detach it, and say who still holds it.
            let holders = holders(&path);
            if let Err(e) = unmount(&path, true) {
                return fail(EXIT_FAILURE, e.describe(&path));
            }
            eprintln!(
                "memofs: {}: its server is gone; detached it, still held by {}: their writes \
                 fail or go nowhere",
                path.display(),
                holders.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(EXIT_FAILURE, e.describe(&path)),
    }
}

/// Why an unmount failed.
enum Failed {
    /// Files are open or a process is inside.
    Busy,
    /// Anything else, said.
    Other(String),
}

impl Failed {
    /// The message for the mount at `path`; a busy one names who holds it.
    fn describe(&self, path: &Path) -> String {
        match self {
            Failed::Busy => {
                let holders = holders(path);
                format!(
                    "{} is busy ({}); retry, or use 'memofs umount -l' to detach it now",
                    path.display(),
                    if holders.is_empty() {
                        "files open or a process inside".to_string()
                    } else {
                        format!("held by {}", holders.join(", "))
                    }
                )
            }
            Failed::Other(e) => e.clone(),
        }
    }
}

/// Unmounts `path` (detaching it if `lazy`): as root with umount2, otherwise through
/// fusermount3.
fn unmount(path: &Path, lazy: bool) -> Result<(), Failed> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let mut cmd = Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        let out = cmd.arg("--").arg(path).stderr(Stdio::piped()).output();
        return match out {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
                if err.contains("busy") {
                    Err(Failed::Busy)
                } else {
                    Err(Failed::Other(err))
                }
            }
            Err(e) => Err(Failed::Other(format!(
                "cannot run fusermount3 ({e}): as root, apt-get install fuse3"
            ))),
        };
    }
    let c = CString::new(path.as_os_str().as_bytes()).expect("paths have no NUL");
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EBUSY) => Err(Failed::Busy),
        _ => Err(Failed::Other(format!(
            "cannot unmount {}: {err}",
            path.display()
        ))),
    }
}

/// Whether the mount at `path` has lost its server for good (its connection is gone).
fn server_gone(path: &Path) -> bool {
    std::fs::metadata(path).is_err_and(|e| e.raw_os_error() == Some(libc::ENOTCONN))
}

/// The processes with a file, working directory or root on the mount at `path`, as
/// `PID (COMMAND)`; those this user may not look into are not seen.
fn holders(path: &Path) -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let mut links = ["cwd", "root"]
            .into_iter()
            .filter_map(|l| std::fs::read_link(dir.join(l)).ok())
            .chain(
                std::fs::read_dir(dir.join("fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok()),
            );
        if links.any(|l| l.starts_with(path)) {
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            out.push(format!("{pid} ({})", comm.trim()));
        }
    }
    out
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
