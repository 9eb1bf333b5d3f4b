//! Configuration of a passthrough export.

use memofs_core::AtimePolicy;

/// Default for [`PassthroughConfig::max_open_fds`].
///
/// Every inode the kernel holds costs one descriptor, and the kernel keeps inodes cached
/// until memory pressure, so a `find` over a large tree needs one descriptor per entry
/// walked. The default is therefore high; it is lowered at startup to what `RLIMIT_NOFILE`
/// allows after raising the soft limit to the hard one (minus
/// [`PassthroughConfig::reserved_fds`]).
pub const DEFAULT_MAX_OPEN_FDS: usize = 1 << 20;

pub use memofs_core::options::{ChangeFeed, WatchMode};
pub use memofs_core::plan::FileHandles;

/// Configuration of a [`crate::PassthroughFs`].
#[derive(Clone, Debug)]
pub struct PassthroughConfig {
    /// The atime rule: files are opened with `O_NOATIME` where it never moves atime
    /// (`noatime`, or `nodiratime` for directories). The host kernel moves atime for every
    /// other read, by the rule of the mount the file was opened through: with
    /// `apply_atime`, the private copy of the source's mount takes this rule; otherwise the
    /// host mount's rule applies.
    pub atime: AtimePolicy,
    /// Give the private copy of the source's mount the rule `atime` (an atime option was
    /// given), where there is one.
    pub apply_atime: bool,
    /// Most descriptors kept at once: one per inode the kernel knows plus one per open file
    /// and directory handle. Beyond it, lookups and opens fail with `ENFILE`. Capped at
    /// startup by `RLIMIT_NOFILE` (see [`DEFAULT_MAX_OPEN_FDS`]).
    pub max_open_fds: usize,
    /// Export filesystems mounted below the source (default). When false, lookups do not
    /// cross mount points (`RESOLVE_NO_XDEV`) and fail with `EXDEV`.
    pub cross_mounts: bool,
    /// The host-change watcher, started by `attach_invalidator`.
    pub watch: WatchMode,
    /// The feed of changes made on other machines, started with the watcher.
    pub changes: ChangeFeed,
    /// Descriptors left below `RLIMIT_NOFILE` for what the process holds besides the
    /// backend's (the transport's, a VMM's shared memory regions and queue events).
    pub reserved_fds: usize,
    /// How a migrating guest's files are found again (see `migrate`).
    pub migration: memofs_core::migrate::Choices,
    /// A kernel's `O_DIRECT` reaches the host file (virtiofsd's `--allow-direct-io`): only
    /// where every read and write of the file goes straight between the host file and the
    /// requester's own aligned memory (a virtio-fs guest's pages); otherwise the flag is
    /// dropped (see `file`).
    pub direct_io: bool,
    /// How inodes are held (virtiofsd's `--inode-file-handles`).
    pub file_handles: FileHandles,
    /// The export is read-only: the server's private copy of the source's mount (see
    /// `PassthroughFs::private_mount`) is made read-only, submounts included, so the host's
    /// kernel refuses every change the server could make, whatever reaches it. Without a
    /// private copy (no `CAP_SYS_ADMIN`), or where it cannot be made read-only (before
    /// Linux 5.12: a warning says so), the request layer alone refuses changes.
    pub read_only: bool,
}

impl Default for PassthroughConfig {
    fn default() -> Self {
        PassthroughConfig {
            atime: AtimePolicy::default(),
            apply_atime: false,
            max_open_fds: DEFAULT_MAX_OPEN_FDS,
            cross_mounts: true,
            watch: WatchMode::Auto,
            changes: ChangeFeed::Auto,
            reserved_fds: crate::RESERVED_FDS,
            migration: Default::default(),
            direct_io: false,
            file_handles: FileHandles::default(),
            read_only: false,
        }
    }
}
