//! memofs's FUSE transport, on the `fuser` crate.
//!
//! [`adapter::Adapter`] maps FUSE requests onto any [`memofs_core::Backend`], adding the
//! mount's cache policy and counting every request in [`stats::Stats`]; [`mount`] checks the
//! mount point, mounts with several request threads each on its own cloned `/dev/fuse`
//! queue, and hands back a [`Mounted`] session to run.
#![deny(missing_docs)]

pub mod adapter;
mod backing;
pub mod blocking;
pub mod busy_poll;
pub mod config;
pub mod control;
pub mod convert;
mod fileattr;
pub mod gate;
pub mod invalidator;
pub mod mountinfo;
pub mod stats;

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Config, MountOption, SessionACL};
use memofs_core::options::{KernelFlag, MountOptions};
use memofs_core::Backend;

pub use adapter::Adapter;
pub use config::TransportConfig;
use invalidator::NotifyInvalidator;
pub use stats::Stats;

/// Why a mount could not be set up, with what the user can do about it.
#[derive(Debug)]
pub enum SetupError {
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
    /// mount(2) or the FUSE handshake failed.
    Mount(io::Error),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::NoDevFuse(e) => write!(
                f,
                "cannot open /dev/fuse ({e}): load the fuse module (modprobe fuse) or, in a container, pass the device through (--device /dev/fuse)"
            ),
            SetupError::MountpointMissing(p) => write!(f, "mount point {} does not exist (create it with mkdir -p)", p.display()),
            SetupError::NotADirectory(p) => write!(f, "mount point {} is not a directory", p.display()),
            SetupError::AlreadyMounted(p) => write!(f, "{} is already a mount point (unmount it first: memofs umount {})", p.display(), p.display()),
            SetupError::Mountpoint(p, e) => write!(
                f,
                "cannot use mount point {} ({e}); if a memofs server died there, run: memofs umount {}",
                p.display(),
                p.display()
            ),
            SetupError::Mount(e) => write!(f, "mount failed: {e}"),
        }
    }
}

impl std::error::Error for SetupError {}

/// Checks the mount point and `/dev/fuse` before anything is mounted; returns the canonical
/// mount point.
pub fn preflight(mountpoint: &Path) -> Result<PathBuf, SetupError> {
    let meta = match std::fs::metadata(mountpoint) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SetupError::MountpointMissing(mountpoint.into()))
        }
        Err(e) => return Err(SetupError::Mountpoint(mountpoint.into(), e)),
    };
    if !meta.is_dir() {
        return Err(SetupError::NotADirectory(mountpoint.into()));
    }
    let canonical = mountpoint
        .canonicalize()
        .map_err(|e| SetupError::Mountpoint(mountpoint.into(), e))?;
    if mountinfo::is_mount_point(&canonical)
        .map_err(|e| SetupError::Mountpoint(canonical.clone(), e))?
    {
        return Err(SetupError::AlreadyMounted(canonical));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(SetupError::NoDevFuse)?;
    Ok(canonical)
}

/// fuser's configuration for our options.
pub fn fuser_config(opts: &MountOptions) -> Config {
    let mut mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("memofs".into()),
        MountOption::DefaultPermissions,
    ];
    for flag in &opts.kernel_flags {
        mount_options.push(match flag {
            KernelFlag::ReadOnly => MountOption::RO,
            KernelFlag::NoSuid => MountOption::NoSuid,
            KernelFlag::NoDev => MountOption::NoDev,
            KernelFlag::NoExec => MountOption::NoExec,
            KernelFlag::Sync => MountOption::Sync,
            KernelFlag::DirSync => MountOption::DirSync,
        });
    }
    // fuser mounts nodev,nosuid unless told otherwise.
    if !opts.kernel_flags.contains(&KernelFlag::NoDev) {
        mount_options.push(MountOption::Dev);
    }
    if !opts.kernel_flags.contains(&KernelFlag::NoSuid) {
        mount_options.push(MountOption::Suid);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    config
}

/// A live mount, ready to serve.
pub struct Mounted<B: Backend> {
    session: fuser::Session<Adapter<B>>,
    /// The mount's counters.
    pub stats: Arc<Stats>,
    /// Sends cache invalidations to the kernel (from its own thread).
    pub invalidator: Arc<dyn memofs_core::Invalidator>,
}

impl<B: Backend> Mounted<B> {
    /// Something that unmounts the filesystem from another thread (signal handling).
    pub fn unmounter(&mut self) -> fuser::SessionUnmounter {
        self.session.unmount_callable()
    }

    /// Serves requests until the filesystem is unmounted.
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }
}

/// Mounts `backend` at `mountpoint` (already checked by [`preflight`]). Returns once the
/// kernel's INIT handshake is done, so the mount is live.
pub fn mount<B: Backend>(
    backend: Arc<B>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<Mounted<B>, SetupError> {
    let stats = Arc::new(Stats::new());
    let transport = TransportConfig::for_mount(opts, backend.capabilities().backing_fds);
    let adapter = Adapter::new(backend.clone(), opts.cache, transport, stats.clone());
    let slot = adapter.invalidator_slot();
    let busy_poll = adapter.busy_poll();
    let session =
        fuser::Session::new(adapter, mountpoint, &fuser_config(opts)).map_err(SetupError::Mount)?;
    let device = || {
        session
            .as_fd()
            .try_clone_to_owned()
            .map_err(SetupError::Mount)
    };
    busy_poll.attach(device()?);
    let dev = device()?;
    let invalidator = NotifyInvalidator::start(session.notifier(), dev, stats.clone())
        .map_err(SetupError::Mount)?;
    let invalidator: Arc<dyn memofs_core::Invalidator> = Arc::new(invalidator);
    let _ = slot.set(invalidator.clone());
    backend.attach_invalidator(invalidator.clone());
    Ok(Mounted {
        session,
        stats,
        invalidator,
    })
}
