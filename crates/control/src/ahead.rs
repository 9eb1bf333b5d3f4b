//! `memofs migrate`: a socket connected to the server a VM will move to, handed to the
//! server it runs on now over that device's control socket (`SCM_RIGHTS`), so that the server
//! sends its files' data ahead of the VM's state (see `memofs_virtiofs::VirtioFs::send_ahead`)
//! without opening any connection itself, whatever its sandbox allows.

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// The command that hands a channel over.
pub const COMMAND: &str = "send-ahead";

/// How long a client waits for every file's data to have gone once.
const FIRST_ROUND: Duration = Duration::from_secs(3600);

/// Hands `channel` to the virtio-fs device listening on `vhost_socket` and waits for its
/// answer: once every file's data went once, the bytes sent (JSON), or why not.
pub fn send_ahead(vhost_socket: &Path, channel: BorrowedFd<'_>) -> io::Result<String> {
    let conn = crate::device_connection(vhost_socket)?;
    exchange_with_fd(conn, COMMAND, channel, FIRST_ROUND)
}

/// Sends `command` with `fd` on `conn`, and waits up to `wait` for the whole answer.
pub(crate) fn exchange_with_fd(
    mut conn: UnixStream,
    command: &str,
    fd: BorrowedFd<'_>,
    wait: Duration,
) -> io::Result<String> {
    conn.set_read_timeout(Some(wait))?;
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(command.as_bytes())],
        &cmsg,
        MsgFlags::empty(),
        None,
    )
    .map_err(io::Error::from)?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}

/// A client's command (at most 64 bytes) and the descriptors that came with it.
pub(crate) fn read_command(conn: &UnixStream) -> (String, Vec<OwnedFd>) {
    let (mut command, mut fds) = (Vec::new(), Vec::new());
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    while command.len() < 64 {
        let mut buf = [0u8; 64];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let Ok(msg) = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) else {
            break;
        };
        for c in msg.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(got) = c {
                // SAFETY: the kernel just gave this process these descriptors; nothing
                // else owns them.
                fds.extend(
                    got.into_iter()
                        .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
                );
            }
        }
        let n = msg.bytes;
        if n == 0 {
            break;
        }
        command.extend_from_slice(&buf[..n]);
    }
    command.truncate(64);
    (String::from_utf8_lossy(&command).into_owned(), fds)
}
