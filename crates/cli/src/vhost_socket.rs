//! The vhost-user socket of `memofs virtiofsd`: who may connect (its file's mode), and
//! whether a server already listens there (a lock, never a connection).
//!
//! As virtiofsd does, a pid file beside the socket (`SOCKET.pid`) holds an exclusive
//! `flock` for as long as its server lives: a second server started on the same path finds
//! it held and exits, naming the first, without connecting to the socket (whoever connects
//! is taken for the VMM, and the first server would serve it and end). A socket file there
//! without a held lock is left over from a server that died: it is replaced.
//!
//! The socket is created `0600` whatever the umask (`0660` and the group `--socket-group`
//! names with one): whoever can connect is the guest.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// A socket path this server holds: the lock, and what to remove when it ends.
pub struct SocketFile {
    path: PathBuf,
    lock_path: PathBuf,
    /// Holds the lock while open.
    _lock: Flock<File>,
    /// The socket file's inode, so that only this server's socket is removed.
    ino: u64,
}

/// The pid file beside `socket`.
fn lock_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".pid");
    PathBuf::from(p)
}

/// Takes `socket`'s lock: `Err` naming the server that holds it.
fn lock(socket: &Path) -> Result<Flock<File>, String> {
    let path = lock_path(socket);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open the pid file {}: {e}", path.display()))?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((mut file, e)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(match (e, pid.trim()) {
                (nix::errno::Errno::EWOULDBLOCK, "") => format!(
                    "{} is in use: another server holds {}",
                    socket.display(),
                    path.display()
                ),
                (nix::errno::Errno::EWOULDBLOCK, pid) => format!(
                    "{} is in use: the server with pid {pid} listens on it ({} is locked)",
                    socket.display(),
                    path.display()
                ),
                (e, _) => format!("cannot lock {}: {e}", path.display()),
            });
        }
    };
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .map_err(|e| format!("cannot write the pid file {}: {e}", path.display()))?;
    Ok(file)
}

/// Listens on `socket`: locks it, replaces a stale socket file, and binds a new one with
/// mode `0600`, or `0660` owned by `group`.
pub fn bind(
    socket: &Path,
    group: Option<nix::unistd::Gid>,
) -> Result<(UnixListener, SocketFile), String> {
    let lock = lock(socket)?;
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_dir() => {
            return Err(format!("{} is a directory", socket.display()))
        }
        Ok(_) => std::fs::remove_file(socket)
            .map_err(|e| format!("cannot replace the stale {}: {e}", socket.display()))?,
        Err(_) => {}
    }
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    let listener = memofs_control::bind_socket(socket, mode)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    let cannot = |e: std::io::Error| format!("cannot set up {}: {e}", socket.display());
    if let Some(gid) = group {
        nix::unistd::chown(socket, None, Some(gid)).map_err(|e| cannot(e.into()))?;
        // The umask may have taken the group's bits at bind.
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode)).map_err(cannot)?;
    }
    let ino = std::fs::symlink_metadata(socket).map_err(cannot)?.ino();
    Ok((
        listener,
        SocketFile {
            path: socket.to_path_buf(),
            lock_path: lock_path(socket),
            _lock: lock,
            ino,
        },
    ))
}

/// The group `name` (a name or a number), for `--socket-group`.
pub fn group(name: &str) -> Result<nix::unistd::Gid, String> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(nix::unistd::Gid::from_raw(gid));
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => Err(format!("--socket-group: no group {name}")),
        Err(e) => Err(format!("--socket-group {name}: {e}")),
    }
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file (if it is still this server's), its control socket and the
    /// pid file; the lock goes when this is dropped.
    pub fn remove(&self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            memofs_control::remove_device_socket(&self.path);
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("memofs-vhost-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_second_server_is_refused_and_names_the_first() {
        let d = dir("lock");
        let sock = d.join("fs.sock");
        let (_l, held) = bind(&sock, None).unwrap();
        let err = bind(&sock, None).err().expect("refused");
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        assert!(sock.exists(), "the first server's socket stays");
        held.remove();
        drop(held);
        assert!(!sock.exists());
        let (_l, again) = bind(&sock, None).expect("free once the first is gone");
        again.remove();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_socket_is_private_whatever_the_umask() {
        let d = dir("mode");
        let sock = d.join("fs.sock");
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let bound = bind(&sock, None);
        nix::sys::stat::umask(old);
        let (_l, held) = bound.unwrap();
        let mode = std::fs::symlink_metadata(&sock).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        held.remove();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stale_socket_file_is_replaced() {
        let d = dir("stale");
        let sock = d.join("fs.sock");
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        assert!(sock.exists(), "left by a server that died");
        let (_l, held) = bind(&sock, None).expect("replaced");
        held.remove();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
