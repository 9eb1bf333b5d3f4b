//! memofs's passthrough backend: exports a host directory through FUSE, confined to it, like
//! virtiofsd or libfuse's `passthrough_ll`.
//!
//! # Layout
//! `inode` maps our inode numbers to host inodes, each pinned by an `O_PATH` descriptor;
//! `namespace` resolves and changes names; `file` opens files and does I/O on handles
//! (`handles`); `dir` lists directories; `attr` converts and sets attributes;
//! `xattr` extended attributes; `creds` switches to the caller's filesystem ids; `fd`
//! the descriptor budget and `/proc/self/fd`; `name` checks names; `sys` wraps the
//! system calls; `watch` reports host-side changes to the kernel; `ops` is the
//! `Backend` implementation on top.
//!
//! # Confinement
//! The server never builds a host path. Every access is a system call on a descriptor the
//! server resolved beneath the export root, with at most one name component:
//! - names from the kernel must be single components (`name`): no `/`, not empty, at most
//!   255 bytes; `.` and `..` only in LOOKUP, where `..` of the root is the root and `..`
//!   elsewhere is checked to lead back to the root;
//! - lookups use `openat2(dir, name, O_PATH | O_NOFOLLOW, RESOLVE_BENEATH |
//!   RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS)`: a symlink is returned as itself and never
//!   followed by the server (readlink returns its text; stat, chown and utimens act on the
//!   link with `AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW`);
//! - mount points below the source are crossed by default (their inodes keep their own
//!   `st_dev`); [`PassthroughConfig::cross_mounts`] = false adds `RESOLVE_NO_XDEV`. A
//!   single-component lookup cannot leave the export either way, but a bind mount of an
//!   outside directory placed below the source by the host administrator is exported;
//! - files are opened for I/O by re-opening their `O_PATH` descriptor through
//!   `/proc/self/fd/N` (as virtiofsd does) only after checking that they are regular files
//!   (directories are opened with `openat(fd, ".")`): the descriptor pins the inode, so a
//!   name swapped for a symlink after the lookup changes nothing;
//! - create, mknod, mkdir, symlink, unlink, rmdir, rename and link take parent descriptors
//!   and single names; link only gives new names to inodes the server resolved.
//!
//! What the host does behind the server: a directory the kernel knows that a host user moves
//! out of the export keeps serving the files already open in it, but `..` from it is
//! refused, and no name is made, removed or renamed in it (`ENOENT`): before every such
//! change the server checks that the directory still leads up to the export root, unless
//! nothing can be moved out (the source is its filesystem's root and nothing is mounted
//! below it). A move made between that check and the change is not caught.
//!
//! # Credentials
//! Operations that create inodes (create, mknod, mkdir, symlink) and that change extended
//! attributes run with the caller's `fsuid`/`fsgid` (`creds`), so new files belong to the
//! caller (with the host's set-gid directory rules) and the host checks ACL and xattr
//! changes as the caller. The others run with the server's ids: the mount uses
//! `default_permissions`, so the kernel has already checked them against the caller, with
//! its supplementary groups, which FUSE does not pass to the server. When the server is not
//! root, ids cannot be switched and everything belongs to the server's user.
//!
//! # Descriptors
//! One `O_PATH` descriptor per inode the kernel knows, one per open file or directory
//! handle; see `fd` and [`PassthroughConfig::max_open_fds`]. At startup the soft
//! `RLIMIT_NOFILE` is raised to the hard limit.
//!
//! # atime
//! The host kernel updates atime for the reads the server makes and for the kernel's
//! passthrough I/O, by the rule of the mount the file was opened through: the host's, or,
//! where the server works on a private copy of the source's mount and an atime option was
//! given (or a remount changed it, [`PassthroughFs::change_atime`]), the mount's
//! [`AtimePolicy`](memofs_core::AtimePolicy), set as that copy's flags. Where the rule
//! says never (`noatime`, or `nodiratime` for directories) files are also opened with
//! `O_NOATIME`.
//!
//! # Host changes
//! `attach_invalidator` starts a watcher thread ([`WatchMode`] picks the mechanism;
//! [`PassthroughFs::watch_mechanism`] says which runs); [`PassthroughFs::stop_watcher`] or
//! dropping the backend stops it. It watches every directory the kernel holds, with
//! fanotify (per-directory inode marks, file handles, events of the server's own process
//! skipped) or else inotify (a watch per directory, `max_user_watches` bounds it, the
//! server's own changes are reported too), and reports to the invalidator within ~5 ms of
//! a change (events are batched for 5 ms so the host kernel merges write storms):
//! `entry(parent, name)` or `deleted(parent, child, name)` for names created, deleted or
//! renamed, `inode(ino)` for attribute or data changes. Changes made on another machine to a
//! network filesystem underneath are not seen; see the `watch` module for details.
//!
//! # Private mount
//! As root, [`PassthroughFs::new`] clones the source's mount tree (`open_tree(OPEN_TREE_CLONE
//! | AT_RECURSIVE)`) and works only through the detached copy, so that writes made through
//! it can be told from host processes' by mount (the watcher ignores the former at the
//! source). Mounts made on the host below the source later are not seen in the copy.
//!
//! # Lock order
//! Take locks only in this order; functions that need a lock held end in `_locked`.
//! 1. [`PassthroughFs`]'s watcher slot (starting and stopping the watcher installs the
//!    table hook);
//! 2. an open directory's stream mutex (READDIRPLUS looks names up while holding it);
//! 3. the inode table's `RwLock` (its hook runs under the write lock);
//! 4. the watcher's maps (marks, handles, watch descriptors), taken by the table hook and
//!    by the watcher thread;
//! 5. the descriptor clock ([`pin`]), which takes only inode descriptor slots, with
//!    `try_lock`; eviction runs under whatever lock the caller asking the budget holds;
//! 6. leaf locks, never held while taking another: each inode's descriptor slot, the file
//!    and directory handle tables,
//!    the watcher's invalidator slot, each inode's record of the attributes the kernel was
//!    given (`Inode::told`), the host filesystems lent no backing files
//!    (`PassthroughFs::unlendable`), the working directory a sandboxed server borrows for a
//!    call that takes only a path (`fd::CWD`, also taken while a thread copies it for its
//!    own), and the reaper's queue (the reaper thread takes its `dropping` lock while still
//!    holding the queue, and nothing else).
//!
//! The watcher thread holds no lock while it calls the invalidator.
#![deny(missing_docs)]

mod attr;
mod caps;
mod config;
mod creds;
mod dir;
mod error;
mod fd;
mod file;
mod handles;
mod host;
mod inode;
mod migrate;
mod name;
mod namespace;
mod ops;
mod pin;
mod reaper;
mod settling;
mod sys;
mod watch;
mod xattr;

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use memofs_core::{Caller, Errno, Ino, Invalidator};
use parking_lot::{Mutex, RwLock};

pub use crate::config::{FileHandles, PassthroughConfig, WatchMode, DEFAULT_MAX_OPEN_FDS};
pub use crate::error::SetupError;
pub use crate::fd::RESERVED_FDS;
pub use crate::inode::SPARE_TOP;
pub use crate::sys::at::{make_read_only, SYS_FCHMODAT2};
pub use crate::watch::WatchMechanism;

use crate::creds::AsCaller;
use crate::dir::OpenDir;
use crate::fd::{FdBudget, ProcSelf};
use crate::handles::{HandleTable, OpenFile};
use crate::host::HostId;
use crate::inode::InodeTable;
use crate::pin::Pins;
use crate::watch::feed::{Feed, FeedSpec};
use crate::watch::{ExportMount, Watcher};

/// The passthrough filesystem: a host directory exported through a `Backend`.
pub struct PassthroughFs {
    pub(crate) table: Arc<InodeTable>,
    pub(crate) files: HandleTable<OpenFile>,
    pub(crate) dirs: HandleTable<OpenDir>,
    pub(crate) proc: Arc<ProcSelf>,
    pub(crate) budget: Arc<FdBudget>,
    /// Closing and reopening inode descriptors.
    pub(crate) pins: Arc<Pins>,
    pub(crate) config: PassthroughConfig,
    /// The atime rule in effect (a remount may change it).
    pub(crate) atime: memofs_core::AtomicAtime,
    /// `RESOLVE_*` flags of every lookup.
    pub(crate) resolve: u64,
    /// Whether this process may switch filesystem ids.
    switch_creds: bool,
    /// Where the export lives (for the watcher).
    pub(crate) export: ExportMount,
    /// Nothing can be moved out of the export: the source is the root of its filesystem,
    /// nothing was mounted below it at start, and the server works on its private copy of
    /// the mount (in which no mount can appear later).
    pub(crate) names_stay_inside: bool,
    /// The source is the root of its filesystem: every object a file handle of that
    /// filesystem names is in the export (or deleted).
    pub(crate) handles_stay_inside: bool,
    /// Lock order 1.
    watcher: Mutex<Option<Watcher>>,
    /// The feed of changes made on other machines (`-o changes=`), if this source has one;
    /// it runs from the watcher's start ([`watch::feed`]).
    feed_spec: Option<FeedSpec>,
    /// Lock order 1, after `watcher`.
    feed: Mutex<Option<Feed>>,
    /// The change feed runs: every name change made elsewhere is reported, with the
    /// directory it was made in.
    following: AtomicBool,
    /// A watcher marks the root's whole filesystem, so per-inode knowledge of host
    /// attributes on it stays fresh.
    watching: AtomicBool,
    /// Host filesystems (by device) whose files the kernel refuses as backing files
    /// (`Backend::backing_refused`): none of their files is lent again. A leaf lock.
    unlendable: RwLock<Vec<u64>>,
}

impl PassthroughFs {
    /// Exports the directory `source` (symlinks in `source` itself are followed, once, here).
    pub fn new(source: &Path, config: PassthroughConfig) -> Result<PassthroughFs, SetupError> {
        let proc = ProcSelf::open().map_err(SetupError::NoProc)?;
        let budget = FdBudget::new(fd_limit(config.max_open_fds, config.reserved_fds));
        let cannot_open = |e: Errno| SetupError::CannotOpen {
            path: source.to_path_buf(),
            source: e.into(),
        };
        let path =
            CString::new(source.as_os_str().as_bytes()).map_err(|_| cannot_open(Errno::EINVAL))?;
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let fd = match sys::at::openat(fd::at_fdcwd(), &path, flags) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Err(SetupError::SourceMissing(source.to_path_buf())),
            Err(Errno::ENOTDIR) => return Err(SetupError::NotADirectory(source.to_path_buf())),
            Err(e) => return Err(cannot_open(e)),
        };
        // Work on a private copy of the source's mount: host processes keep changing the
        // tree through their own mount, the server (and the kernel's passthrough I/O on the
        // files it opens) through this one, which lets the watcher drop the server's data
        // writes at the source (see `watch`). Needs CAP_SYS_ADMIN; otherwise the host mount.
        // Only a fanotify watcher can use a filesystem mark; what the mount table says also
        // spares the check that a directory is still in the export where nothing can leave
        // it (`PassthroughFs::exported_dir`).
        let fanotify = matches!(config.watch, WatchMode::Auto | WatchMode::Fanotify);
        let mnt_id = sys::at::mount_of(fd.as_fd()).map(|(id, _)| id);
        let feed_spec =
            FeedSpec::choose(&config.changes, source, mnt_id).map_err(SetupError::NoChangeFeed)?;
        let source = ExportMount::inspect(fd.as_fd());
        let remote = sys::io::fstatfs(fd.as_fd()).is_ok_and(|st| watch::is_remote(st.f_type));
        let whole_filesystem = fanotify && source.filesystem_root;
        let alone = source.alone && source.local;
        let (fd, private) = match sys::at::clone_mount(fd.as_fd()) {
            Ok(clone) => {
                if config.apply_atime {
                    apply_atime(clone.as_fd(), true, config.atime)
                        .map_err(SetupError::NoAtimeRule)?;
                }
                if config.read_only {
                    if let Err(e) = sys::at::make_read_only(clone.as_fd(), false) {
                        log::warn!(
                            "passthrough: the private mount could not be made read-only ({e}; \
                             mount_setattr needs Linux 5.12): only the requests' checks \
                             refuse changes"
                        );
                    }
                }
                (clone, true)
            }
            Err(e) => {
                log::info!("passthrough: no private mount of the source ({e}); using the host's");
                (fd, false)
            }
        };
        let st = sys::at::statx_fd(fd.as_fd()).map_err(cannot_open)?;
        let mut resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_SYMLINKS;
        if !config.cross_mounts {
            resolve |= libc::RESOLVE_NO_XDEV;
        }
        // Probe openat2 once, so a kernel without it fails here and not on every lookup.
        sys::at::openat2(fd.as_fd(), c".", libc::O_PATH, 0, resolve)
            .map_err(|e| SetupError::NoOpenat2(e.into()))?;
        // Handles are opened against a real descriptor of the root (see `pin`), unless the
        // export holds its inodes by descriptor alone.
        let mount = match config.file_handles {
            FileHandles::Never => None,
            _ => proc
                .reopen(fd.as_fd(), libc::O_RDONLY | libc::O_DIRECTORY)
                .ok(),
        };
        let mandatory = config.file_handles == FileHandles::Mandatory;
        let pins = Pins::new(
            budget.clone(),
            fd.as_fd(),
            HostId::of(&st).dev,
            mount,
            mandatory,
        );
        if mandatory && !pins.can_reopen() {
            return Err(SetupError::NoFileHandles(pins.why_not_reopen()));
        }
        let root = budget.keep(fd).map_err(cannot_open)?;
        attr::probe_fchmodat2();
        Ok(PassthroughFs {
            table: Arc::new(InodeTable::new(root, &st, pins.clone(), remote)),
            pins,
            files: HandleTable::new(),
            dirs: HandleTable::new(),
            proc: Arc::new(proc),
            budget,
            atime: memofs_core::AtomicAtime::new(config.atime),
            config,
            resolve,
            switch_creds: creds::can_switch(),
            export: ExportMount {
                private,
                whole_filesystem,
                sealed: whole_filesystem && alone && private,
                remote,
            },
            names_stay_inside: source.filesystem_root && source.alone && private,
            handles_stay_inside: source.filesystem_root,
            watcher: Mutex::new(None),
            feed_spec,
            feed: Mutex::new(None),
            following: AtomicBool::new(false),
            unlendable: RwLock::new(Vec::new()),
            watching: AtomicBool::new(false),
        })
    }

    /// The configuration in effect; `max_open_fds` is the budget after the `RLIMIT_NOFILE`
    /// cap.
    pub fn config(&self) -> PassthroughConfig {
        PassthroughConfig {
            max_open_fds: self.budget.max(),
            ..self.config.clone()
        }
    }

    /// The server has lost the host's view of the filesystem (a sandbox's root is the export
    /// itself, or an empty directory, and the working directory that root): the calls that
    /// take only a path reach the backend's descriptors through a working directory borrowed
    /// for each call ([`crate::fd::ProcSelf::with_path`]). Everything else already works
    /// through descriptors the backend opened in [`PassthroughFs::new`].
    pub fn work_without_host_paths(&self) -> std::io::Result<()> {
        self.proc.confine()
    }

    /// The change feed's command line, if the source has one (`-o changes=`).
    pub fn change_feed(&self) -> Option<String> {
        self.feed_spec.as_ref().map(FeedSpec::describe)
    }

    /// Descriptors currently held against the budget.
    pub fn open_fds(&self) -> usize {
        self.budget.used()
    }

    /// Whether inode descriptors are closed when the budget runs out and opened again from
    /// their file handles (the server can open handles: root).
    pub fn closes_inode_fds(&self) -> bool {
        self.pins.can_reopen()
    }

    /// Inode descriptors closed to stay within the budget, and opened again from their
    /// handles, so far.
    pub fn fds_closed_and_reopened(&self) -> (u64, u64) {
        (
            self.pins.closed.load(Ordering::Relaxed),
            self.pins.reopened.load(Ordering::Relaxed),
        )
    }

    /// The kernel's lookup references to `ino` (0 when the inode is not known), for tests
    /// and diagnostics.
    pub fn lookups(&self, ino: Ino) -> u64 {
        self.table.lookups(ino)
    }

    /// Open file and directory handles.
    pub fn open_handles(&self) -> usize {
        self.files.len() + self.dirs.len()
    }

    /// Switches this thread to `caller`'s filesystem ids until the guard drops (no-op when
    /// the server cannot switch).
    pub(crate) fn as_caller(&self, caller: &Caller) -> Option<AsCaller> {
        self.switch_creds.then(|| AsCaller::switch(caller))
    }

    /// Starts the watcher and the change feed with `invalidator`, or hands running ones
    /// the new one.
    pub(crate) fn start_watcher(&self, invalidator: Arc<dyn Invalidator>) {
        let mut slot = self.watcher.lock();
        if let Some(spec) = &self.feed_spec {
            let mut feed = self.feed.lock();
            match &*feed {
                Some(f) => f.set_invalidator(invalidator.clone()),
                None => *feed = Feed::start(spec.clone(), &self.table, invalidator.clone()),
            }
            self.following.store(feed.is_some(), Ordering::Release);
        }
        match &*slot {
            Some(w) => w.set_invalidator(invalidator),
            None => {
                *slot = Watcher::start(
                    &self.table,
                    &self.proc,
                    self.config.watch,
                    self.export,
                    invalidator,
                );
                if slot.as_ref().is_some_and(Watcher::whole_filesystem) {
                    // Nothing learnt while unwatched may be trusted.
                    for inode in self.table.all() {
                        inode.no_caps.forget();
                    }
                    self.watching.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Whether answers about `inode`'s `security.capability` may come from memory
    /// ([`crate::xattr`]): the watcher marks the whole filesystem `inode` is on.
    pub(crate) fn caps_cached(&self, inode: &crate::inode::Inode) -> bool {
        self.watching.load(Ordering::Acquire) && self.table.on_root_filesystem(inode)
    }

    /// Puts the atime rule `p` in effect: one the mount names (`named`) goes to the private
    /// copy of the source's mount as its flags (see the module documentation); where there
    /// is no copy, or its flags are locked (a copy made in a user namespace), only a rule
    /// the server can keep itself is taken: one that never moves atime (`O_NOATIME`) or
    /// the one the mount already has. A rule not named leaves the host's mount alone: the
    /// server then only opens with `O_NOATIME` where the rule says never (a read-only
    /// mount).
    pub fn change_atime(
        &self,
        p: memofs_core::AtimePolicy,
        named: bool,
    ) -> std::result::Result<(), String> {
        if named {
            let root = self.table.root().fd().map_err(|e| e.to_string())?;
            apply_atime(root.as_fd(), self.export.private, p)?;
        }
        self.atime.store(p);
        Ok(())
    }

    /// Makes the export read-only or writable again (a remount). Read-only needs nothing
    /// more here: the kernel refuses changes on its read-only mount, the request layer on a
    /// guest's. An export mounted read-only stays so: its private copy of the host's mounts
    /// was made read-only, the mounts below it included, and which of them the host had
    /// made read-only itself is not known any more.
    pub fn change_read_only(&self, read_only: bool) -> std::result::Result<(), String> {
        if !read_only && self.config.read_only && self.export.private {
            return Err(
                "this export was mounted read-only, and its private copy of the \
                 host's mounts with it (which of them the host had made read-only is \
                 not kept): unmount and mount it again to write"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether the server works on a private, detached copy of the source's mount (as
    /// root) rather than on the host's mount.
    pub fn private_mount(&self) -> bool {
        self.export.private
    }

    /// Whether the running watcher marks the source's whole filesystem at once (the source
    /// is its filesystem's root and fanotify is in use) rather than each known directory.
    pub fn watches_whole_filesystem(&self) -> bool {
        self.watcher
            .lock()
            .as_ref()
            .is_some_and(Watcher::whole_filesystem)
    }

    /// Whether chmod sets modes with `fchmodat2(AT_EMPTY_PATH)` (Linux 6.6+) rather than
    /// through the descriptor's `/proc/self/fd` name.
    pub fn uses_fchmodat2(&self) -> bool {
        attr::uses_fchmodat2()
    }

    /// The mechanism of the running watcher, if any.
    pub fn watch_mechanism(&self) -> Option<WatchMechanism> {
        self.watcher.lock().as_ref().map(Watcher::mechanism)
    }

    /// Stops the watcher (waits for its thread); `attach_invalidator` starts a new one.
    pub fn stop_watcher(&self) {
        let mut slot = self.watcher.lock();
        self.watching.store(false, Ordering::Release);
        let w = slot.take();
        let f = self.feed.lock().take();
        self.following.store(false, Ordering::Release);
        drop(slot);
        drop(w);
        drop(f);
    }
}

impl Drop for PassthroughFs {
    fn drop(&mut self) {
        self.stop_watcher();
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the descriptor budget: the
/// configured maximum, capped at the limit minus `reserved`.
fn fd_limit(configured: usize, reserved: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid `rlimit` for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return configured;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid `rlimit`; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let allowed = usize::try_from(lim.rlim_cur)
        .unwrap_or(usize::MAX)
        .saturating_sub(reserved);
    if allowed < configured {
        log::info!(
            "passthrough: descriptor budget {allowed} (RLIMIT_NOFILE {}), not {configured}",
            lim.rlim_cur
        );
    }
    configured.min(allowed)
}

/// Gives the mount at `dir` (and those below it) the atime rule `p`, where it is the
/// server's own copy (`private`) and its flags are not locked; otherwise succeeds only for a
/// rule the server keeps without it (see [`PassthroughFs::change_atime`]).
fn apply_atime(
    dir: BorrowedFd<'_>,
    private: bool,
    p: memofs_core::AtimePolicy,
) -> std::result::Result<(), String> {
    let attrs = memofs_core::mount_api::atime_attrs(p);
    let on_copy = match private {
        true => memofs_core::mount_api::set_attrs(dir, attrs, 0, true).map_err(|e| e.to_string()),
        false => Err(
            "the export works on the host's own mount (a private copy of it takes \
             CAP_SYS_ADMIN)"
                .to_string(),
        ),
    };
    match on_copy {
        Ok(()) => Ok(()),
        Err(_) if p.never(false) || sys::io::atime_rule(dir) == Some(p) => Ok(()),
        Err(why) => Err(format!(
            "{why}; the host's rule for its mount is {}, which the server cannot change",
            sys::io::atime_rule(dir).map_or("unknown".into(), |r| r.describe())
        )),
    }
}
