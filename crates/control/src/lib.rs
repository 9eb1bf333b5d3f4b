//! The control socket behind `memofs stats` and `memofs invalidate`, the same for every
//! transport: the server's side ([`serve`], fed a [`StatsSource`]) and the client's
//! ([`request`]).
//!
//! Each mount listens on a Unix socket named after the mount's device number, in a
//! directory only the server's user can write (`/run/memofs/DEV.sock` for root, the user's
//! runtime directory otherwise), readable and writable by that user alone from the moment
//! it exists (its mode is set on the socket before it is bound).
//!
//! Where no such directory can be had (no `/run`, a read-only one, a user with no runtime
//! directory: `su`, cron, a container, a guest), the socket is an abstract one (no file)
//! under a random name, and the mount itself tells it: the request layer answers
//! `memofs_request::ioctl::CONTROL_ADDRESS` on any of the mount's directories, to root and
//! the server's user only. The name cannot be taken first (nobody knows it before the server
//! binds it), and the server answers only connections from root and its own user.
//!
//! A
//! client writes one command (`stats` or `invalidate`), shuts down its sending side, and
//! gets one JSON document back. The socket is found from the mount point alone (its device
//! number and, in mountinfo, its owner), and only a server run by root or by the mount's
//! owner is believed: no other user can take the name or read the answers. Reading counters sums
//! per-thread slots: it never stops the request threads. `invalidate` (drop every name the
//! kernel caches) is refused unless the caller is root or the server's own user.

#![deny(missing_docs)]

pub mod ahead;

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use memofs_core::{BackendUsage, CachePolicy};

use memofs_request::invalidate::Invalidated;
use memofs_request::ioctl::{CONTROL_ADDRESS, CONTROL_ADDRESS_SIZE};
use memofs_request::Stats;

/// Where a server run by `uid` keeps its mounts' control sockets: `/run/memofs` for root
/// (only root can create files there), else the user's runtime directory
/// (`$XDG_RUNTIME_DIR`, or `/run/user/UID`), which only the user can write.
fn socket_dir(uid: u32) -> PathBuf {
    if uid == 0 {
        return PathBuf::from(ROOT_DIR);
    }
    // SAFETY: getuid has no preconditions.
    let runtime = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if uid == unsafe { libc::getuid() } => PathBuf::from(d),
        _ => PathBuf::from(format!("/run/user/{uid}")),
    };
    runtime.join("memofs")
}

/// The control socket directory of root's servers.
const ROOT_DIR: &str = "/run/memofs";

/// The control socket of the mount with device `dev` served by `uid`.
pub fn socket_path(uid: u32, dev: u64) -> PathBuf {
    socket_dir(uid).join(format!("{dev}.sock"))
}

/// The control socket of the virtio-fs device listening on the vhost-user socket file with
/// identity `(dev, ino)`, served by `uid`.
fn device_socket_path(uid: u32, (dev, ino): (u64, u64)) -> PathBuf {
    socket_dir(uid).join(format!("vhost-{dev}-{ino}.sock"))
}

/// The uid that owns the mount with device `dev` (its `user_id=`; root if unknown).
fn mount_owner(dev: u64) -> u32 {
    memofs_core::mountinfo::mounts()
        .ok()
        .and_then(|m| m.into_iter().rev().find(|m| m.dev == dev))
        .and_then(|m| m.owner())
        .unwrap_or(0)
}

/// Connects to the control socket of the mount whose root has device `dev`: the one in
/// root's directory, then the one in the mount owner's, then the caller's own; only a
/// server run by root, the owner or the caller is believed (nobody else can put a socket in
/// those directories, but the peer's uid is checked all the same).
fn connect(dev: u64, mountpoint: &Path) -> io::Result<UnixStream> {
    let owner = mount_owner(dev);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let last = match connect_file(owner, |uid| socket_path(uid, dev)) {
        Ok(conn) => return Ok(conn),
        Err(e) => e,
    };
    if last.kind() != io::ErrorKind::NotFound {
        return Err(last);
    }
    let conn =
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(asked_address(mountpoint)?)?)?;
    match peer_cred(&conn).map(|c| c.uid()) {
        Some(p) if p == 0 || p == owner || p == me => Ok(conn),
        peer => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the mount's control socket is served by uid {peer:?}"),
        )),
    }
}

/// Connects to the control socket file `path_of(uid)` in root's directory, then the
/// owner's, then the caller's own; only a server run by root, the owner or the caller is
/// believed.
fn connect_file(owner: u32, path_of: impl Fn(u32) -> PathBuf) -> io::Result<UnixStream> {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let mut last = io::Error::from(io::ErrorKind::NotFound);
    let mut uids = vec![0];
    for uid in [owner, me] {
        if !uids.contains(&uid) {
            uids.push(uid);
        }
    }
    for uid in uids {
        let path = path_of(uid);
        match UnixStream::connect(&path) {
            Ok(conn) => {
                let peer = peer_cred(&conn).map(|c| c.uid());
                if peer.is_some_and(|p| p == 0 || p == owner || p == me) {
                    return Ok(conn);
                }
                last = io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is served by uid {peer:?}, neither root nor the owner",
                        path.display()
                    ),
                );
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The abstract control socket name the mount at `mountpoint` tells (see the module
/// documentation).
fn asked_address(mountpoint: &Path) -> io::Result<Vec<u8>> {
    let dir = std::fs::File::open(mountpoint)?;
    let mut answer = [0u8; CONTROL_ADDRESS_SIZE];
    // SAFETY: the command's size is CONTROL_ADDRESS_SIZE, the buffer's; the kernel writes
    // at most that many bytes into it.
    let r = unsafe {
        libc::ioctl(
            dir.as_raw_fd(),
            CONTROL_ADDRESS as libc::Ioctl,
            answer.as_mut_ptr(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        // Not a memofs mount, or one whose socket has a file: nothing to find this way.
        return Err(match e.raw_os_error() {
            Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL) => io::ErrorKind::NotFound.into(),
            _ => e,
        });
    }
    let len = answer.iter().position(|&b| b == 0).unwrap_or(answer.len());
    if len == 0 {
        return Err(io::ErrorKind::NotFound.into());
    }
    Ok(answer[..len].to_vec())
}

/// The process id of the server of the mount at `mountpoint`, whose root has device `dev`
/// (the process that listens on its control socket), or `None` if it cannot be told.
pub fn server_pid(dev: u64, mountpoint: &Path) -> Option<i32> {
    peer_cred(&connect(dev, mountpoint).ok()?).map(|c| c.pid())
}

/// Everything `memofs stats` reports, and what `memofs invalidate` acts on.
pub struct StatsSource {
    /// What `invalidate` runs (the mount's notification sender).
    pub invalidate: Box<dyn Fn() -> Invalidated + Send + Sync>,
    /// Which kernel features the mount found and uses, read on demand (name, what).
    pub features: Box<dyn Fn() -> Vec<(String, String)> + Send + Sync>,
    /// Request counters.
    pub stats: Arc<Stats>,
    /// Effective cache policy.
    pub policy: CachePolicy,
    /// Backend usage, read on demand.
    pub usage: Box<dyn Fn() -> BackendUsage + Send + Sync>,
    /// Other settings worth showing (name, value).
    pub settings: Vec<(String, String)>,
    /// What `send-ahead` runs with the socket handed over (a virtio-fs device whose files
    /// move with its VM: see [`ahead`]).
    pub send_ahead: Option<SendAhead>,
    /// What `remount OPTS` runs: the server takes the options that change on a live
    /// mount (`mount -o remount,...`), or says why not.
    pub remount: Option<Remount>,
    /// What `upgrade` runs with the client's connection and the new server's executable:
    /// hands the mount to it (the answer then comes from the new server), or says why not.
    pub upgrade: Option<Upgrade>,
}

/// Hands a mount over to the executable given (`memofs upgrade`); returns only on failure,
/// with the reason.
pub type Upgrade = Box<dyn Fn(&UnixStream, OwnedFd) -> String + Send + Sync>;

/// The command that hands a mount to a new server process.
pub const UPGRADE: &str = "upgrade";

/// How long `memofs upgrade` waits for the new server's answer (the old server writes its
/// whole state first: all file data, where the data is the server's own).
const UPGRADE_WAIT: Duration = Duration::from_secs(600);

/// The answer to `upgrade`, from the new server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpgradedDoc {
    /// The serving process (the same process id: the new executable replaced the old).
    pub pid: u32,
    /// The new server's version.
    pub version: String,
    /// How long requests waited, from the old server's pause to the new one's first read,
    /// in milliseconds.
    pub pause_ms: f64,
    /// Bytes of state handed over.
    pub state_bytes: u64,
}

/// Asks the server of the mount at `mountpoint` (device `dev`) to hand it over to the
/// executable `exe`; the answer (JSON: [`UpgradedDoc`] or an error).
pub fn upgrade(
    dev: u64,
    mountpoint: &Path,
    exe: std::os::fd::BorrowedFd<'_>,
) -> io::Result<String> {
    ahead::exchange_with_fd(connect(dev, mountpoint)?, UPGRADE, exe, UPGRADE_WAIT)
}

/// Takes the options of a `remount` (comma-separated); what changed, or why not.
pub type Remount = Box<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

/// The command that changes a live mount's options (followed by a space and the options).
pub const REMOUNT: &str = "remount";

/// The answer to `remount`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RemountDoc {
    /// What changed, as options (empty: nothing).
    pub changed: String,
}

/// Sends a device's data ahead on a connected socket; once every file went, the bytes.
pub type SendAhead = Box<dyn Fn(std::fs::File) -> Result<u64, String> + Send + Sync>;

/// The answer to `send-ahead`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AheadDoc {
    /// Bytes of file data sent in the first round (every file once).
    pub bytes: u64,
}

/// One request kind's counters in [`StatsDoc`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpDoc {
    /// Requests answered.
    pub count: u64,
    /// Mean latency, arrival to reply, in nanoseconds.
    #[serde(default)]
    pub mean_ns: u64,
    /// Median latency in nanoseconds (interpolated within its histogram bucket).
    pub p50_ns: u64,
    /// 99th percentile latency, the same way.
    pub p99_ns: u64,
}

/// The kernel cache timeouts in [`StatsDoc`], in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheDoc {
    /// `cache=` preset.
    pub mode: String,
    /// Names.
    pub entry_timeout: f64,
    /// Attributes.
    pub attr_timeout: f64,
    /// Misses.
    pub negative_timeout: f64,
}

/// Space and inodes in [`StatsDoc`] (limits 0 = none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageDoc {
    /// Bytes charged against `size=`.
    pub bytes_used: u64,
    /// `size=`.
    pub bytes_limit: u64,
    /// Inodes in use.
    pub inodes_used: u64,
    /// `nr_inodes=`.
    pub inodes_limit: u64,
    /// Host descriptors the server holds (a passthrough export; 0 otherwise).
    #[serde(default)]
    pub descriptors_used: u64,
    /// The most it may hold (0: it holds none).
    #[serde(default)]
    pub descriptors_limit: u64,
    /// Descriptors opened again after being closed to stay within the limit.
    #[serde(default)]
    pub descriptors_reopened: u64,
}

/// The answer to `stats`: what `memofs stats --json` prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsDoc {
    /// Counters per request kind (opcode name).
    pub requests: BTreeMap<String, OpDoc>,
    /// Event counters (negative entries, invalidations, ...).
    pub events: BTreeMap<String, u64>,
    /// The effective cache policy.
    pub cache: CacheDoc,
    /// Space and inodes.
    pub usage: UsageDoc,
    /// The mount's settings (name, value).
    pub settings: BTreeMap<String, String>,
    /// Kernel features found and used (name, what).
    pub features: BTreeMap<String, String>,
}

/// The answer to `invalidate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InvalidateDoc {
    /// Whether anything was invalidated.
    pub ok: bool,
    /// Whether the entry epoch was incremented (everything dropped).
    pub epoch: bool,
    /// Remembered misses dropped by name.
    pub names: u64,
    /// What could not be done.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub not_done: Option<String>,
}

/// The answer to a command that was refused or unknown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDoc {
    /// Why.
    pub error: String,
}

fn to_json<T: Serialize>(doc: &T) -> String {
    serde_json::to_string(doc).unwrap_or_else(|e| {
        let refused = ErrorDoc {
            error: e.to_string(),
        };
        serde_json::to_string(&refused).expect("a string field always serializes")
    })
}

impl StatsSource {
    /// The document served.
    pub fn doc(&self) -> StatsDoc {
        let snap = self.stats.snapshot();
        let u = (self.usage)();
        let p = &self.policy;
        let map = |list: &[(String, String)]| list.iter().cloned().collect();
        StatsDoc {
            requests: snap
                .ops
                .iter()
                .map(|o| {
                    let op = OpDoc {
                        count: o.count,
                        mean_ns: o.mean_ns,
                        p50_ns: o.p50_ns,
                        p99_ns: o.p99_ns,
                    };
                    (o.name.to_string(), op)
                })
                .collect(),
            events: snap
                .events
                .iter()
                .map(|(n, v)| (n.to_string(), *v))
                .collect(),
            cache: CacheDoc {
                mode: p.mode.name().into(),
                entry_timeout: p.entry_timeout.as_secs_f64(),
                attr_timeout: p.attr_timeout.as_secs_f64(),
                negative_timeout: p.negative_timeout.as_secs_f64(),
            },
            usage: UsageDoc {
                bytes_used: u.bytes_used,
                bytes_limit: u.bytes_limit,
                inodes_used: u.inodes_used,
                inodes_limit: u.inodes_limit,
                descriptors_used: u.descriptors_used,
                descriptors_limit: u.descriptors_limit,
                descriptors_reopened: u.descriptors_reopened,
            },
            settings: map(&self.settings),
            features: map(&(self.features)()),
        }
    }
}

/// Credentials of the process at the other end of `conn`.
fn peer_cred(conn: &UnixStream) -> Option<nix::sys::socket::UnixCredentials> {
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials).ok()
}

/// Whether a peer with uid `peer` is root or this server's own user.
fn root_or_own(peer: Option<u32>) -> bool {
    let own = nix::unistd::geteuid().as_raw();
    peer.is_some_and(|uid| uid == 0 || uid == own)
}

/// Uid of the process at the other end of `conn`.
fn peer_uid(conn: &UnixStream) -> Option<u32> {
    peer_cred(conn).map(|c| c.uid())
}

impl StatsSource {
    /// The answer to one command from a client with uid `peer`, with the descriptors it
    /// sent.
    fn answer(
        &self,
        conn: &UnixStream,
        command: &str,
        peer: Option<u32>,
        mut fds: Vec<OwnedFd>,
    ) -> String {
        let error = |error: String| to_json(&ErrorDoc { error });
        match command.trim() {
            UPGRADE => match (&self.upgrade, root_or_own(peer), fds.pop()) {
                (None, ..) => error("this server cannot hand its mount over".into()),
                (Some(_), false, _) => error("only root or the server's owner may".into()),
                (Some(_), true, None) => error("no executable came with the command".into()),
                (Some(upgrade), true, Some(exe)) => error(upgrade(conn, exe)),
            },
            ahead::COMMAND => match (&self.send_ahead, root_or_own(peer), fds.pop()) {
                (None, ..) => error("this server sends no data ahead".into()),
                (Some(_), false, _) => error("only root or the server's owner may".into()),
                (Some(_), true, None) => error("no socket came with the command".into()),
                (Some(send), true, Some(fd)) => match send(std::fs::File::from(fd)) {
                    Ok(bytes) => to_json(&AheadDoc { bytes }),
                    Err(e) => error(e),
                },
            },
            "" | "stats" => to_json(&self.doc()),
            cmd if cmd.split_once(' ').is_some_and(|(c, _)| c == REMOUNT) => {
                let opts = cmd.split_once(' ').map_or("", |(_, o)| o);
                match (&self.remount, root_or_own(peer)) {
                    (None, _) => error("this server takes no remount".into()),
                    (Some(_), false) => error("only root or the mount's owner may remount".into()),
                    (Some(remount), true) => match remount(opts) {
                        Ok(changed) => to_json(&RemountDoc { changed }),
                        Err(e) => error(e),
                    },
                }
            }
            "invalidate" => {
                if root_or_own(peer) {
                    let done = (self.invalidate)();
                    to_json(&InvalidateDoc {
                        ok: done.did_something(),
                        epoch: done.epoch,
                        names: done.names as u64,
                        not_done: done.not_done,
                    })
                } else {
                    error("only root or the mount's owner may invalidate".into())
                }
            }
            other => error(format!("unknown command '{other}'")),
        }
    }
}

/// A mount's control socket; its file, if it has one, is removed when this is dropped,
/// unless another server of a mount with the same device number replaced it meanwhile.
pub struct Control {
    at: Listening,
}

/// Where a control socket listens.
enum Listening {
    /// A socket file (path, inode).
    File(PathBuf, u64),
    /// An abstract socket of this name.
    Abstract(Vec<u8>),
}

impl Control {
    /// The abstract socket name, where the socket has no file: what the mount is to tell
    /// (see the module documentation).
    pub fn abstract_name(&self) -> Option<&[u8]> {
        match &self.at {
            Listening::Abstract(name) => Some(name),
            Listening::File(..) => None,
        }
    }

    /// Ends without removing the socket file: for a server that no longer sees the host's
    /// files (a sandbox), where its path may name another file; someone outside removes it
    /// ([`remove_device_socket`]).
    pub fn close_only(mut self) {
        self.at = Listening::Abstract(Vec::new());
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Listening::File(path, ino) = &self.at {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.ino() == *ino) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Makes `dir` (owned by this process's user, writable by nobody else) if it is missing,
/// and checks it is so: a socket in a directory others can write could be replaced.
fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let m = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory only this user can write",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// A listening socket at `path` that only this user (and root) may connect to from the
/// moment it exists: the socket's mode is set before `bind(2)` creates the file, which
/// takes it from there (less the umask), so no other user can connect in between.
fn bind_private(path: &Path) -> io::Result<UnixListener> {
    bind_socket(path, 0o600)
}

/// A listening socket at `path` whose file has at most the permission bits `mode` from
/// the moment it exists (the socket's mode is set before `bind(2)` creates the file; the
/// umask can only take bits away).
pub fn bind_socket(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let mut addr: libc::sockaddr_un = zeroed_sockaddr();
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is too long for a socket path", path.display()),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: socket takes integer arguments; the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: fchmod, bind and listen on the socket this function owns; `addr` is a
    // sockaddr_un whose first `len` bytes hold the family and the NUL-terminated path.
    let r = unsafe {
        if libc::fchmod(sock.as_raw_fd(), mode as libc::mode_t) < 0
            || libc::bind(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            ) < 0
            || libc::listen(sock.as_raw_fd(), 16) < 0
        {
            -1
        } else {
            0
        }
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixListener::from(sock))
}

/// An all-zero `sockaddr_un` (a valid value: family 0, empty path).
fn zeroed_sockaddr() -> libc::sockaddr_un {
    // SAFETY: sockaddr_un is plain bytes; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The socket file for the mount with device `dev`, in the directory of [`socket_path`],
/// replacing a stale one of an earlier mount with the same device number.
fn listen_on_file(dev: u64) -> io::Result<(UnixListener, Listening)> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    listen_at(socket_path(uid, dev))
}

/// A private socket file at `path` in a private directory, replacing a stale one.
fn listen_at(path: PathBuf) -> io::Result<(UnixListener, Listening)> {
    private_dir(path.parent().expect("a socket path has a directory"))?;
    replace_socket(path)
}

/// A private socket file at `path`, replacing a stale one.
fn replace_socket(path: PathBuf) -> io::Result<(UnixListener, Listening)> {
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = bind_private(&path)?;
    let ino = std::fs::symlink_metadata(&path)?.ino();
    Ok((listener, Listening::File(path, ino)))
}

/// An abstract socket under a random name (see the module documentation).
fn listen_abstract() -> io::Result<(UnixListener, Listening)> {
    let mut random = [0u8; 16];
    // SAFETY: getrandom writes at most `random.len()` bytes into `random`.
    let n = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if n != random.len() as isize {
        return Err(io::Error::other(
            "no random bytes for the control socket's name",
        ));
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("memofs-{hex}").into_bytes();
    let listener = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
    Ok((listener, Listening::Abstract(name)))
}

/// Starts the control socket for the mount with device `dev` on a background thread: a
/// socket file only this user (and root) may connect to, or, where no private directory
/// can be had, an abstract socket the mount tells of ([`Control::abstract_name`]). Only
/// connections from root and this user are answered.
pub fn serve(dev: u64, source: StatsSource) -> io::Result<Control> {
    let (listener, at) = listen_on_file(dev).or_else(|e| {
        log::debug!("no control socket file ({e}): an abstract socket instead");
        listen_abstract()
    })?;
    answer_on(listener, source)?;
    Ok(Control { at })
}

/// Answers connections on `listener` from a background thread.
fn answer_on(listener: UnixListener, source: StatsSource) -> io::Result<()> {
    std::thread::Builder::new()
        .name("memofs-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let peer = peer_uid(&conn);
                if !root_or_own(peer) {
                    continue;
                }
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                let (command, fds) = ahead::read_command(&conn);
                let answer = source.answer(&conn, &command, peer, fds);
                let _ = conn.write_all(answer.as_bytes());
            }
        })?;
    Ok(())
}

/// The identity `(st_dev, st_ino)` of a virtio-fs device's vhost-user socket file.
fn device_identity(vhost_socket: &Path) -> io::Result<(u64, u64)> {
    let meta = std::fs::metadata(vhost_socket)?;
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a socket", vhost_socket.display()),
        ));
    }
    Ok((meta.dev(), meta.ino()))
}

/// The control socket of a virtio-fs device listening on the vhost-user socket file
/// `vhost_socket` (as [`serve`] makes one for a mount, in the same private directory; a
/// user without a runtime directory gets it beside the vhost-user socket instead,
/// [`beside`]), bound but not yet answered: a sandboxed server binds it while it still sees
/// the host's files, and answers it ([`answer_device`]) from inside.
pub fn bind_device(vhost_socket: &Path) -> io::Result<(UnixListener, Control)> {
    let id = device_identity(vhost_socket)?;
    let uid = nix::unistd::geteuid().as_raw();
    let (listener, at) = listen_at(device_socket_path(uid, id)).or_else(|e| {
        log::debug!("no control socket in the runtime directory ({e}): one beside the device's");
        replace_socket(beside(vhost_socket))
    })?;
    Ok((listener, Control { at }))
}

/// The control socket beside the vhost-user socket `vhost_socket`: `SOCKET.stats`, where
/// the server's user has no runtime directory (its connections are believed only from the
/// users [`request_device`] believes, as any other).
fn beside(vhost_socket: &Path) -> PathBuf {
    let mut p = vhost_socket.as_os_str().to_owned();
    p.push(".stats");
    PathBuf::from(p)
}

/// Answers `memofs stats` on a device's control socket from a background thread.
pub fn answer_device(listener: UnixListener, source: StatsSource) -> io::Result<()> {
    answer_on(listener, source)
}

/// Removes the control socket file of the device listening on `vhost_socket`: for a server
/// whose own end cannot (a sandboxed one no longer sees the host's files).
pub fn remove_device_socket(vhost_socket: &Path) {
    let uid = nix::unistd::geteuid().as_raw();
    if let Ok(id) = device_identity(vhost_socket) {
        let _ = std::fs::remove_file(device_socket_path(uid, id));
    }
    let _ = std::fs::remove_file(beside(vhost_socket));
}

/// Sends `command` to the virtio-fs device listening on `vhost_socket` and returns its JSON
/// answer; only a server run by root, the socket file's owner or the caller is believed.
pub fn request_device(vhost_socket: &Path, command: &str) -> io::Result<String> {
    exchange(device_connection(vhost_socket)?, command)
}

/// A connection to the control socket of the virtio-fs device listening on `vhost_socket`.
fn device_connection(vhost_socket: &Path) -> io::Result<UnixStream> {
    let id = device_identity(vhost_socket)?;
    let owner = std::fs::metadata(vhost_socket)?.uid();
    connect_file(owner, |uid| device_socket_path(uid, id))
        .or_else(|e| connect_file(owner, |_| beside(vhost_socket)).map_err(|_| e))
}

/// Sends `command` to the mount at `mountpoint`, with device `dev`, and returns its JSON
/// answer.
pub fn request(dev: u64, mountpoint: &Path, command: &str) -> io::Result<String> {
    exchange(connect(dev, mountpoint)?, command)
}

/// One command and its answer on a control connection.
fn exchange(mut conn: UnixStream, command: &str) -> io::Result<String> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.write_all(command.as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
