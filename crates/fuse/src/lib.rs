//! memofs's kernel transport: mounting, and the channels that carry the FUSE protocol
//! (`memofs-proto`) between the kernel and the request layer.
//!
//! - [`mount`]: mounting (`mount(2)` as root, `fusermount3` otherwise) and unmounting; the
//!   INIT handshake on the new connection, answered as `memofs_proto::init` negotiates.
//! - [`dev`]: the `/dev/fuse` channel (request threads on cloned queues, [`gate`] and
//!   [`busy_poll`] deciding which thread reads and how it waits; [`blocking`] for requests
//!   that may wait for a disk); [`cpu_latency`] keeping idle CPUs awake while requests
//!   stream (both channels); [`device`]: the descriptors, notifications and passthrough
//!   backing files.
//! - [`uring`]: the io_uring channel (FUSE over io_uring, Linux 6.14+): one ring per CPU
//!   queue, with `/dev/fuse` still read for FORGET and INTERRUPT.
//!
//! What a request means is not decided here but in `memofs-request`; how it is laid out in
//! bytes, in `memofs-proto`.
#![deny(missing_docs)]

pub mod blocking;
pub mod busy_poll;
pub mod cpu_latency;
pub mod dev;
pub mod device;
pub mod gate;
pub mod mount;
pub use memofs_core::mountinfo;
pub mod uring;

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memofs_core::options::Want;
use memofs_core::plan::MountPlan;
use memofs_core::Backend;
use memofs_request::invalidate::NotifyInvalidator;
use memofs_request::{Granted, Server, Stats};
use zerocopy::{FromBytes, IntoBytes};

use crate::busy_poll::BusyPoll;
use crate::cpu_latency::{CpuLatency, Timing};
use crate::dev::DevChannel;
use crate::device::{Connection, FdSink};
use memofs_proto::decode::Proto;
use memofs_proto::encode::ReplySink;
use memofs_proto::{abi, init};

/// Why a mount could not be set up, with what the user can do about it.
#[derive(Debug)]
pub enum MountError {
    /// `/dev/fuse` is missing or cannot be opened.
    NoDevFuse(io::Error),
    /// The mount point does not exist.
    MountpointMissing(PathBuf),
    /// The mount point is not a directory.
    NotADirectory(PathBuf),
    /// Something is already mounted there.
    AlreadyMounted(PathBuf),
    /// The mount point cannot be used (permissions, stale mount...).
    Mountpoint(PathBuf, io::Error),
    /// mount(2) or fusermount3 failed.
    Mount(io::Error),
    /// The FUSE handshake (INIT) failed.
    Init(String),
    /// `cpu_latency=on`, and the CPU latency request cannot be made (the device cannot be
    /// opened, or its thread started).
    CpuLatency(io::Error),
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountError::NoDevFuse(e) if e.kind() == io::ErrorKind::PermissionDenied => write!(
                f,
                "cannot open /dev/fuse ({e}): only root may use it on this machine; as root, `chmod 0666 /dev/fuse` lets every user mount FUSE filesystems (the mode Debian's fuse3 package gives it)"
            ),
            MountError::NoDevFuse(e) => write!(
                f,
                "cannot open /dev/fuse ({e}): load the fuse module (modprobe fuse) or, in a container, pass the device through (--device /dev/fuse)"
            ),
            MountError::MountpointMissing(p) => write!(f, "mount point {} does not exist (create it with mkdir -p)", p.display()),
            MountError::NotADirectory(p) => write!(f, "mount point {} is not a directory", p.display()),
            MountError::AlreadyMounted(p) => write!(f, "{} is already a mount point (unmount it first: memofs umount {})", p.display(), p.display()),
            MountError::Mountpoint(p, e) => write!(
                f,
                "cannot use mount point {} ({e}); if a memofs server died there, run: memofs umount {}",
                p.display(),
                p.display()
            ),
            MountError::Mount(e) => write!(f, "mount failed: {e}"),
            MountError::Init(e) => write!(f, "FUSE handshake failed: {e}"),
            MountError::CpuLatency(e) => write!(
                f,
                "cpu_latency=on, but the CPU latency request cannot be made ({}: {e}){}; mount with cpu_latency=auto or off",
                cpu_latency::DEVICE,
                match e.kind() {
                    io::ErrorKind::PermissionDenied => ": it takes root",
                    io::ErrorKind::NotFound => ": this kernel or container has no such device",
                    _ => "",
                }
            ),
        }
    }
}

impl std::error::Error for MountError {}

/// Checks the mount point and `/dev/fuse` before anything is mounted; returns the canonical
/// mount point. Something mounted there already is refused unless the new mount is to cover
/// it (`over`).
pub fn preflight(mountpoint: &Path, over: bool) -> Result<PathBuf, MountError> {
    let meta = match std::fs::metadata(mountpoint) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(MountError::MountpointMissing(mountpoint.into()))
        }
        Err(e) => return Err(MountError::Mountpoint(mountpoint.into(), e)),
    };
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(mountpoint.into()));
    }
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| MountError::Mountpoint(mountpoint.into(), e))?;
    if !over
        && mountinfo::is_mount_point(&canonical)
            .map_err(|e| MountError::Mountpoint(canonical.clone(), e))?
    {
        return Err(MountError::AlreadyMounted(canonical));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(MountError::NoDevFuse)?;
    Ok(canonical)
}

/// A live `/dev/fuse` mount, its INIT answered, ready to serve.
pub struct KernelMount<B: Backend> {
    server: Arc<Server<B>>,
    /// Requests come through io_uring ring entries.
    uring: bool,
    /// What INIT found, for `memofs stats`.
    features: Vec<(String, String)>,
    fd: OwnedFd,
    proto: Proto,
    poll: Arc<BusyPoll>,
    latency: Arc<CpuLatency>,
    mountpoint: PathBuf,
    /// The kernel's INIT arguments, and the reply they got.
    init: (Vec<u8>, Vec<u8>),
}

/// What another server process needs to take a live connection over (`memofs upgrade`):
/// the connection, and the INIT it was established with.
pub struct Session {
    /// The connection (`/dev/fuse`).
    pub fd: OwnedFd,
    /// The kernel's INIT arguments (the request's body).
    pub init: Vec<u8>,
    /// The reply INIT got: the new server must arrive at the same one.
    pub reply: Vec<u8>,
}

/// Reads the kernel's INIT from `fd` and answers it as `plan` says (with `io_uring=auto`
/// turned off where this process may not create io_uring instances); returns what was
/// agreed and INIT's arguments.
fn handshake(
    fd: &OwnedFd,
    plan: &mut MountPlan,
) -> Result<(init::Negotiated, Vec<u8>), MountError> {
    let mut buf = vec![0u64; 64 * 1024];
    let init_err = |e: io::Error| MountError::Init(e.to_string());
    // SAFETY: reads into a live buffer of the stated length.
    let n = unsafe {
        let b = buf.as_mut_bytes();
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            b.as_mut_ptr().cast(),
            b.len(),
        )
    };
    if n < 0 {
        return Err(init_err(io::Error::last_os_error()));
    }
    let bytes = &buf.as_bytes()[..n as usize];
    let (h, body) = abi::fuse_in_header::read_from_prefix(bytes)
        .map_err(|_| MountError::Init("short INIT request".into()))?;
    if h.opcode != abi::opcode::INIT {
        return Err(MountError::Init(format!(
            "expected INIT, got opcode {}",
            h.opcode
        )));
    }
    let i = init::init_in(body);
    let mut sink = FdSink(fd.as_fd());
    let negotiated = rings_allowed(plan)
        .and_then(|()| init::negotiate(&i, plan).map_err(|e| MountError::Init(e.to_string())));
    match negotiated {
        Ok(n) => {
            sink.send(h.unique, 0, &[&n.reply]);
            Ok((n, body.to_vec()))
        }
        Err(e) => {
            sink.send(h.unique, -libc::EPROTO, &[]);
            Err(e)
        }
    }
}

/// Turns `io_uring=auto` off where this process may not create io_uring instances; an
/// error for `io_uring=on` there.
fn rings_allowed(plan: &mut MountPlan) -> Result<(), MountError> {
    if plan.io_uring == Want::Off {
        return Ok(());
    }
    if let Some(e) = uring::rings_refused() {
        if plan.io_uring == Want::On {
            return Err(MountError::Init(format!(
                "io_uring=on, but this process may not create io_uring instances ({e}; a \
                 container's seccomp profile commonly refuses them): mount with \
                 io_uring=auto or off"
            )));
        }
        log::info!("requests through /dev/fuse: io_uring instances are refused here ({e})");
        plan.io_uring = Want::Off;
    }
    Ok(())
}

/// The kernel features INIT found, each with what memofs does without it.
fn features(n: &init::Negotiated) -> Vec<(String, String)> {
    let passthrough = match (n.passthrough_offered, n.granted.passthrough) {
        (_, true) => "yes: the kernel reads and writes backing files itself",
        (true, false) => {
            "offered by the kernel, not used by this mount (the server serves file data)"
        }
        (false, false) => "no (needs Linux 6.9+ and root): the server serves file data",
    };
    let transport = match (n.uring, n.uring_offered) {
        (true, _) => format!(
            "io_uring: {} queues of {} entries, /dev/fuse for FORGET and INTERRUPT",
            uring::possible_cpus().map_or(0, |c| c.len()),
            uring::DEPTH
        ),
        (false, true) => {
            "/dev/fuse (the kernel offers io_uring; io_uring=off, or io_uring instances refused here)"
                .into()
        }
        (false, false) => {
            "/dev/fuse (no FUSE-over-io_uring: Linux 6.14+ with fuse.enable_uring=Y)".into()
        }
    };
    let unused = init::offered_names(n.offered_unused);
    vec![
        ("transport".into(), transport),
        ("fuse_passthrough".into(), passthrough.into()),
        ("protocol".into(), format!("7.{}", n.minor)),
        (
            "init_offered_not_taken".into(),
            if unused.is_empty() {
                "none".into()
            } else {
                unused.join(" ")
            },
        ),
    ]
}

/// Mounts `backend` at `mountpoint` (already checked by [`preflight`]) as `plan` says.
/// Returns once the kernel's INIT handshake is done, so the mount is live; on failure,
/// nothing stays mounted.
pub fn mount<B: Backend>(
    backend: Arc<B>,
    mountpoint: &Path,
    plan: MountPlan,
) -> Result<KernelMount<B>, MountError> {
    let fd = mount::mount(mountpoint, &plan).map_err(MountError::Mount)?;
    let session = start(backend, mountpoint, plan, fd);
    if session.is_err() {
        let _ = mount::unmount(mountpoint, true);
    }
    session
}

fn start<B: Backend>(
    backend: Arc<B>,
    mountpoint: &Path,
    mut plan: MountPlan,
    fd: OwnedFd,
) -> Result<KernelMount<B>, MountError> {
    let (negotiated, init) = handshake(&fd, &mut plan)?;
    established(backend, mountpoint, plan, fd, negotiated, init)
}

/// Takes over the live connection of `session` (handed over by the server that made it,
/// which answers no more requests): `plan` must arrive at the reply INIT got, else nothing
/// is taken.
pub fn resume<B: Backend>(
    backend: Arc<B>,
    mountpoint: &Path,
    mut plan: MountPlan,
    session: Session,
) -> Result<KernelMount<B>, MountError> {
    rings_allowed(&mut plan)?;
    let negotiated = init::negotiate(&init::init_in(&session.init), &plan)
        .map_err(|e| MountError::Init(e.to_string()))?;
    if negotiated.reply != session.reply {
        return Err(MountError::Init(
            "this server would answer the mount's INIT otherwise than the server it takes \
             over from did (another version's choices): the connection cannot change hands"
                .into(),
        ));
    }
    if negotiated.uring {
        return Err(MountError::Init(
            "the mount's requests come through io_uring rings, which cannot change hands".into(),
        ));
    }
    established(
        backend,
        mountpoint,
        plan,
        session.fd,
        negotiated,
        session.init,
    )
}

/// A connection whose INIT (arguments `init`) was answered as `negotiated` says.
fn established<B: Backend>(
    backend: Arc<B>,
    mountpoint: &Path,
    plan: MountPlan,
    fd: OwnedFd,
    negotiated: init::Negotiated,
    init: Vec<u8>,
) -> Result<KernelMount<B>, MountError> {
    let setup = MountError::Mount;
    let kernel = Arc::new(Connection::new(fd.as_fd()).map_err(setup)?);
    let stats = Arc::new(Stats::new());
    let poll = Arc::new(BusyPoll::new(plan.busy_poll, stats.clone()));
    poll.attach(fd.try_clone().map_err(setup)?);
    let (latency, latency_feature) = cpu_latency(plan.cpu_latency, &stats)?;
    let mut features = features(&negotiated);
    features.push(("cpu_latency".into(), latency_feature));
    let plan = init::in_effect(plan, negotiated.granted);
    let mut server = Server::new(backend, plan, stats);
    server.start(negotiated.granted, kernel).map_err(setup)?;
    Ok(KernelMount {
        uring: negotiated.uring,
        features,
        server: Arc::new(server),
        fd,
        proto: negotiated.proto,
        poll,
        latency: Arc::new(latency),
        mountpoint: mountpoint.to_path_buf(),
        init: (init, negotiated.reply),
    })
}

/// The mount's CPU latency request as `want` says, and what `memofs stats` says of it.
fn cpu_latency(want: Want, stats: &Arc<Stats>) -> Result<(CpuLatency, String), MountError> {
    let without = |why: String| {
        (
            CpuLatency::off(),
            format!("not asked ({why}): idle CPUs sleep as the kernel decides"),
        )
    };
    if want == Want::Off {
        return Ok(without("cpu_latency=off".into()));
    }
    // Without a cpuidle driver the kernel halts idle CPUs whatever is asked.
    let driver = std::fs::read_to_string(cpu_latency::CPUIDLE_DRIVER)
        .map(|d| d.trim().to_string())
        .unwrap_or_else(|_| "none".into());
    if driver == "none" && want == Want::Auto {
        return Ok(without("no cpuidle driver".into()));
    }
    let started = std::fs::File::options()
        .write(true)
        .open(cpu_latency::DEVICE)
        .and_then(|device| CpuLatency::start(device, Timing::DEFAULT, stats.clone()));
    match started {
        Ok(latency) => Ok((
            latency,
            format!(
                "0 while requests stream ({}, cpuidle driver {driver}): idle CPUs stay in their shallowest state then",
                cpu_latency::DEVICE
            ),
        )),
        Err(e) if want == Want::On => Err(MountError::CpuLatency(e)),
        Err(e) => Ok(without(format!("{}: {e}", cpu_latency::DEVICE))),
    }
}

/// Unmounts a mount from another thread (signal handling).
pub struct Unmounter(PathBuf);

impl Unmounter {
    /// Unmounts; if something is still inside, detaches now and lets the kernel finish
    /// when the last user leaves.
    pub fn unmount(&self) {
        if mount::unmount(&self.0, false).is_err() {
            let _ = mount::unmount(&self.0, true);
        }
    }
}

impl<B: Backend> KernelMount<B> {
    /// The mount's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.server.stats().clone()
    }

    /// Where invalidations go.
    pub fn invalidator(&self) -> Arc<NotifyInvalidator> {
        self.server
            .invalidator()
            .expect("the server is started before the session is handed out")
    }

    /// What INIT found about the kernel, as `memofs stats` lines (name, what).
    pub fn features(&self) -> Vec<(String, String)> {
        self.features.clone()
    }

    /// The mount plan.
    pub fn plan(&self) -> &MountPlan {
        self.server.plan()
    }

    /// The control socket listens on the abstract socket `name`; the mount tells it to root
    /// and the server's user (see [`Server::set_control_address`]).
    pub fn set_control_address(&self, name: &[u8]) {
        self.server.set_control_address(name);
    }

    /// What the kernel granted at INIT.
    pub fn granted(&self) -> Granted {
        self.server.granted()
    }

    /// The request layer.
    pub fn server(&self) -> &Arc<Server<B>> {
        &self.server
    }

    /// What another process needs to take this connection over; `None` where requests
    /// come through io_uring rings (their queues are the ring's, and cannot change hands).
    pub fn session(&self) -> io::Result<Option<Session>> {
        if self.uring {
            return Ok(None);
        }
        Ok(Some(Session {
            fd: self.fd.try_clone()?,
            init: self.init.0.clone(),
            reply: self.init.1.clone(),
        }))
    }

    /// Something that unmounts the filesystem from another thread.
    pub fn unmounter(&self) -> Unmounter {
        Unmounter(self.mountpoint.clone())
    }

    /// Starts serving requests, and asks for the root's attributes once: until the first
    /// GETATTR of the root succeeds, the kernel gives it a mode without permission bits, and
    /// a GETATTR reply that races a notification is discarded, so an early permission check
    /// on a busy export could fail with `EACCES`. Invalidations of the root are held until
    /// then (see `memofs_request::invalidate`). Returns once that is done: the mount is ready
    /// for every user.
    ///
    /// With io_uring, the ring queues serve the requests and one `/dev/fuse` thread the
    /// FORGETs and INTERRUPTs that still come that way.
    pub fn serve(self) -> io::Result<dev::Serving> {
        let mut threads = self.server.plan().threads;
        let mut ring = Vec::new();
        if self.uring {
            let channel = Arc::new(uring::UringChannel::new(
                self.server.clone(),
                self.proto,
                self.fd.try_clone()?,
                self.latency.clone(),
            ));
            ring = channel.start()?;
            threads = 1;
        }
        let invalidator = self.server.invalidator();
        let channel = Arc::new(DevChannel::new(
            self.server,
            self.proto,
            threads,
            self.poll,
            self.latency,
        ));
        let mut serving = channel.start(self.fd, threads)?;
        if !ring.is_empty() {
            serving.1 = None;
        }
        serving.0.extend(ring);
        stat_from_outside(&self.mountpoint)?;
        if let Some(invalidator) = invalidator {
            invalidator.release_root();
        }
        Ok(serving)
    }
}

/// `stat` of `path` on this process's own mount, from a child process that holds none of
/// the connection's descriptors: a process killed while its own request waits for an
/// answer its request threads took would wait for ever (the kernel waits for a request it
/// sent out without a time limit, and the connection ends only when every descriptor of it
/// is closed, which the waiting thread keeps open).
fn stat_from_outside(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: the child calls only async-signal-safe functions (close_range, stat, _exit)
    // on memory made before the fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; the child ends in _exit.
        unsafe {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            let mut st: libc::stat = std::mem::zeroed();
            let code = match libc::stat(path.as_ptr(), &mut st) {
                0 => 0,
                _ => *libc::__errno_location(),
            };
            libc::_exit(code);
        }
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut status = 0;
    // SAFETY: waits for the child just made, into a live int.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, errno) => Err(io::Error::from_raw_os_error(errno)),
        _ => Err(io::Error::other("the stat of the mount point did not end")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::options::parse_options;
    use memofs_core::plan::BackendKind;

    #[test]
    fn a_dev_fuse_only_root_may_open_is_not_called_missing() {
        let denied = MountError::NoDevFuse(io::Error::from_raw_os_error(libc::EACCES));
        let text = denied.to_string();
        assert!(
            text.contains("chmod 0666 /dev/fuse") && !text.contains("modprobe"),
            "{text}"
        );
        let missing = MountError::NoDevFuse(io::Error::from_raw_os_error(libc::ENOENT));
        assert!(missing.to_string().contains("modprobe fuse"));
    }

    #[test]
    fn stats_show_posix_acls_as_granted_not_as_planned() {
        let opts = parse_options::<&str>(&[], 8 << 30).unwrap();
        let mut plan = MountPlan::new(&opts, BackendKind::Mem, true);
        plan.posix_acl = true;
        let shown = |p: &MountPlan| p.describe().into_iter().find(|(k, _)| *k == "posix_acl");
        let refused = init::in_effect(plan.clone(), Granted::default());
        assert_eq!(shown(&refused).unwrap().1, "false");
        let granted = Granted {
            posix_acl: true,
            ..Granted::default()
        };
        assert_eq!(shown(&init::in_effect(plan, granted)).unwrap().1, "true");
    }
}
