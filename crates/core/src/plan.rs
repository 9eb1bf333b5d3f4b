//! The mount plan: every mount-time choice, made once.
//!
//! The options say what the user asked for; the backend's [`Capabilities`] say what it can
//! do; privileges and the kernel say what is allowed. [`MountPlan`] combines them in one
//! place, in two steps:
//! 1. [`MountPlan::new`], before the backend exists, from the options, the backend kind and
//!    the server's privileges: where the mem backend keeps file data (a private kernel tmpfs
//!    for FUSE passthrough, or the server's page store) is decided here, because the backend
//!    is built with it;
//! 2. [`MountPlan::adopt`], once the backend is built, from its capabilities: whether file
//!    data may use FUSE passthrough, and therefore whether the writeback cache can be used
//!    (the two exclude each other: passthrough wins).
//!
//! The transport asks the kernel for what the plan says (and the kernel may still refuse:
//! the transport reports what was granted); the CLI builds the backend from it; `memofs
//! stats` shows it ([`MountPlan::describe`]).

use std::time::Duration;

use crate::atime::{AtimeMode, AtimePolicy};
use crate::cache::{CacheMode, CachePolicy};
use crate::idmap::IdMaps;
use crate::options::{ChangeFeed, DirectIo, HugeMode, KernelFlag, MountOptions, Want, WatchMode};
use crate::types::Capabilities;
use crate::xattrmap::XattrMap;

/// Which backend serves the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// The in-memory backend.
    Mem,
    /// The host-directory export.
    Passthrough,
}

/// Whether FUSE passthrough (the kernel reading and writing a backing file directly) is
/// used for regular files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passthrough {
    /// Never.
    Off,
    /// Where the kernel grants it.
    IfGranted,
    /// Required: the mount fails if the kernel does not grant it.
    Required,
}

/// How a passthrough export holds the inodes the kernel knows (virtiofsd's
/// `--inode-file-handles`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileHandles {
    /// An `O_PATH` descriptor each, never closed: no file handle is taken or opened (and the
    /// server needs no `CAP_DAC_READ_SEARCH`); past the descriptor budget a lookup fails with
    /// `ENFILE`.
    Never,
    /// Descriptors, the cold ones closed past the budget and opened again from their file
    /// handles where the filesystem allows it.
    #[default]
    Prefer,
    /// As `Prefer`, and the export's filesystem must open file handles (else the backend is
    /// not built); a file whose handle cannot be taken is refused to the kernel with that
    /// error instead of being held by descriptor alone.
    Mandatory,
}

/// Every mount-time choice of one mount.
#[derive(Clone, Debug, PartialEq)]
pub struct MountPlan {
    /// The backend.
    pub backend: BackendKind,
    /// Kernel cache timeouts.
    pub cache: CachePolicy,
    /// The atime rule the mount names (or the backend chose): the mount table shows it, and
    /// a read-only mount keeps it for when it is made writable again
    /// ([`MountPlan::atime_in_effect`]).
    pub atime: AtimePolicy,
    /// Mem backend: regular files keep their data in a private kernel tmpfs (so the kernel
    /// can serve it with FUSE passthrough) instead of the server's page store.
    pub kernel_data: bool,
    /// Mem backend: large folios for kernel-backed data.
    pub huge: HugeMode,
    /// Passthrough backend: how host-side changes are seen.
    pub watch: WatchMode,
    /// Passthrough backend: the feed of changes made on other machines.
    pub changes: ChangeFeed,
    /// FUSE passthrough for regular files.
    pub passthrough: Passthrough,
    /// What `writeback=` asked ([`MountPlan::writeback`] decides).
    writeback: Want,
    /// Requests through FUSE-over-io_uring ring entries.
    pub io_uring: Want,
    /// A CPU latency request while requests stream.
    pub cpu_latency: Want,
    /// Which opens bypass the page cache.
    pub direct_io: DirectIo,
    /// The backend keeps POSIX ACLs: the kernel enforces them and leaves the umask to the
    /// backend (FUSE_POSIX_ACL, FUSE_DONT_MASK).
    pub posix_acl: bool,
    /// Nothing changes behind the kernel's back: it may keep names, attributes, listings
    /// and pages until told otherwise.
    pub sole_writer: bool,
    /// Request threads.
    pub threads: usize,
    /// Busy-polling window of the reading thread.
    pub busy_poll: Duration,
    /// Other users may use the mount.
    pub allow_other: bool,
    /// Kernel mount flags.
    pub kernel_flags: Vec<KernelFlag>,
    /// Source shown in the mount table.
    pub fsname: String,
    /// How the ids of requests and replies translate (a guest's, over virtio-fs).
    pub ids: IdMaps,
    /// How extended attribute names map between the kernel's and the backend's (a guest's
    /// `--xattrmap`).
    pub xattrs: Option<XattrMap>,
    /// Tell the kernel which directories are mount points of other filesystems (a guest's
    /// `--announce-submounts`): each then has its own device number there.
    pub announce_submounts: bool,
    /// Label new nodes with the security context the kernel sends (a guest's
    /// `--security-label`: `FUSE_SECURITY_CTX`; the attribute goes through
    /// [`MountPlan::xattrs`]): `Auto` where the kernel sends labels, `On` required (the
    /// kernel's INIT fails without them).
    pub security_label: Want,
    /// Extended attributes are served; without them every xattr request is answered
    /// `ENOSYS`, which the kernel remembers (`xattr=off`).
    pub xattr: bool,
    /// How a guest's files are found again where its VM migrates (virtiofsd's
    /// `--migration-*`).
    pub migration: crate::migrate::Choices,
    /// A kernel's `O_NOATIME` on OPEN and OPENDIR reaches the backend; without it the flag is
    /// dropped (a virtio-fs guest's, unless virtiofsd's `--preserve-noatime`).
    pub noatime_opens: bool,
    /// Passthrough backend: a kernel's `O_DIRECT` reaches the host file (a virtio-fs
    /// guest's, with virtiofsd's `--allow-direct-io`; see `PassthroughConfig::direct_io`).
    pub host_direct_io: bool,
    /// Passthrough backend: how inodes are held.
    pub file_handles: FileHandles,
    /// The transport can tell the kernel of changes (not virtio-fs).
    notifications: bool,
    /// Whether the mount's options set the cache timeouts (else [`MountPlan::adopt`] may
    /// shorten them).
    cache_given: bool,
    /// An atime option was given.
    atime_given: bool,
    /// POSIX ACLs asked for: `Auto` where the backend keeps them, `Off` none (the kernel
    /// gets none, requests for ACL attributes are refused), `On` required.
    pub acl: Want,
}

impl MountPlan {
    /// The plan before the backend exists: `privileged` is whether the server runs as root
    /// (FUSE passthrough and the private tmpfs need it).
    pub fn new(opts: &MountOptions, backend: BackendKind, privileged: bool) -> MountPlan {
        let kernel_data = backend == BackendKind::Mem
            && match opts.passthrough {
                Want::On => true,
                Want::Off => false,
                // The server's own data path is what direct_io and writeback=on ask for.
                Want::Auto => {
                    privileged && opts.direct_io != DirectIo::All && opts.writeback != Want::On
                }
            };
        MountPlan {
            backend,
            cache: opts.cache,
            atime: opts.atime,
            kernel_data,
            huge: opts.huge,
            watch: opts.watch,
            changes: opts.changes.clone(),
            passthrough: match opts.passthrough {
                Want::Off => Passthrough::Off,
                Want::Auto => Passthrough::IfGranted,
                Want::On => Passthrough::Required,
            },
            writeback: opts.writeback,
            io_uring: opts.io_uring,
            cpu_latency: opts.cpu_latency,
            direct_io: opts.direct_io,
            posix_acl: false,
            sole_writer: false,
            threads: opts.threads,
            busy_poll: opts.busy_poll,
            allow_other: opts.allow_other,
            kernel_flags: opts.kernel_flags.clone(),
            fsname: opts.fsname.clone().unwrap_or_else(|| "memofs".into()),
            ids: IdMaps::default(),
            acl: Want::Auto,
            cache_given: opts.cache_given,
            atime_given: opts.atime_given,
            xattrs: None,
            announce_submounts: false,
            security_label: Want::Off,
            xattr: opts.xattr,
            migration: Default::default(),
            noatime_opens: true,
            host_direct_io: false,
            file_handles: FileHandles::Prefer,
            notifications: true,
        }
    }

    /// Read-only (`ro`): the kernel refuses changes on a mount it was told is read-only,
    /// and the request layer refuses every request that would change something (`EROFS`),
    /// for a transport whose kernel was not told (a guest's, over virtio-fs).
    pub fn read_only(&self) -> bool {
        self.kernel_flags.contains(&KernelFlag::ReadOnly)
    }

    /// Whether ACLs are refused: asked off, ids are translated (an ACL names ids inside its
    /// value, which the request layer does not translate), or no extended attributes are
    /// served (ACLs are kept as such).
    pub fn acls_refused(&self) -> bool {
        self.acl == Want::Off || !self.ids.is_identity() || !self.xattr
    }

    /// Completes the plan with what the built backend can do.
    pub fn adopt(&mut self, caps: Capabilities) {
        if !caps.backing_fds {
            self.passthrough = Passthrough::Off;
        }
        self.posix_acl = caps.posix_acl && !self.acls_refused();
        // Others change such a backend where no watcher sees it: unless the mount said
        // otherwise, the kernel keeps names, misses and attributes for `cache=auto`'s second.
        if caps.unseen_writers && !self.cache_given {
            self.cache = CachePolicy::derive(Some(CacheMode::Auto), None, None, None);
        }
        // No read through this server keeps another system's atime by any rule.
        if caps.atime_elsewhere && !self.atime_given {
            self.atime = AtimePolicy {
                mode: AtimeMode::Noatime,
                nodiratime: true,
            };
        }
        self.sole_writer = caps.sole_writer;
    }

    /// The atime rule in effect: the mount's, or none on a read-only mount.
    pub fn atime_in_effect(&self) -> AtimePolicy {
        self.atime.in_effect(self.read_only())
    }

    /// Whether the mount's options named an atime rule (else the backend's own rule
    /// stands: an export keeps its host mount's).
    pub fn atime_given(&self) -> bool {
        self.atime_given
    }

    /// Whether the kernel may keep file pages and directory listings from one open to the
    /// next (once [`MountPlan::adopt`] has run): where nothing changes behind its back (the
    /// backend is the only writer), and where the mount chose `cache=always` and no change
    /// could be told to the kernel anyway (virtio-fs), virtiofsd's `--cache=always`: the
    /// guest keeps everything it was given, data too, and sees changes made elsewhere
    /// only when a change of size or mtime shows in attributes it asks for again after the
    /// long timeout.
    pub fn keeps_across_opens(&self) -> bool {
        self.sole_writer || (!self.notifications && self.cache.mode == CacheMode::Always)
    }

    /// Whether the kernel may reopen files by their handles once it has forgotten them
    /// (`FUSE_EXPORT_SUPPORT`: `open_by_handle_at`, NFS export): it then looks up `.` and
    /// `..` of a node id it has forgotten. The mem backend never reuses an inode number and
    /// keeps every inode with a name, so it answers those; an export's inodes go when the
    /// kernel forgets them.
    pub fn exports_handles(&self) -> bool {
        self.backend == BackendKind::Mem
    }

    /// Whether to ask for the kernel's writeback cache (once [`MountPlan::adopt`] has run).
    /// `writeback=auto` is on where the server holds the file data itself and nothing
    /// changes it behind the kernel's back (the kernel trusts its own sizes and times under
    /// the writeback cache): the mem backend's page store without `direct_io`. Passthrough
    /// always wins over the writeback cache (the kernel refuses the two together).
    pub fn writeback(&self) -> bool {
        (match self.writeback {
            Want::On => true,
            Want::Off => false,
            Want::Auto => {
                self.backend == BackendKind::Mem
                    && self.sole_writer
                    && !self.kernel_data
                    && self.direct_io != DirectIo::All
            }
        }) && self.passthrough == Passthrough::Off
    }

    /// The mem backend fell back to the server's page store (the private tmpfs could not be
    /// mounted): no file descriptors to pass through.
    pub fn without_kernel_data(&mut self) {
        self.kernel_data = false;
    }

    /// The transport cannot notify the kernel (virtio-fs): `writeback=auto` stays off, since
    /// pages whose writeback failed could not be dropped from the guest's cache, and no
    /// host-change watcher runs (`watch=auto` is off), since what it sees could not be told.
    /// A watcher asked for by name is refused: it would watch for nothing.
    pub fn without_notifications(&mut self) -> Result<(), String> {
        self.notifications = false;
        if self.writeback == Want::Auto {
            self.writeback = Want::Off;
        }
        match &self.changes {
            ChangeFeed::Auto | ChangeFeed::Off => self.changes = ChangeFeed::Off,
            _ => {
                return Err(
                    "changes= cannot work here: virtio-fs carries no notifications to \
                            the guest, so changes made elsewhere show when the cache timeouts \
                            run out (--cache=auto or never)"
                        .into(),
                )
            }
        }
        match self.watch {
            WatchMode::Auto | WatchMode::Off => {
                self.watch = WatchMode::Off;
                Ok(())
            }
            asked => Err(format!(
                "watch={} cannot work here: virtio-fs carries no notifications to the guest, so \
                 host changes show when the cache timeouts run out (--cache=auto or never)",
                format!("{asked:?}").to_lowercase()
            )),
        }
    }

    /// What a guest can tell apart of two servers' plans, besides what INIT answers: how
    /// long names and attributes are kept, the atime rule, what is refused and how ids and
    /// extended attribute names translate. A VM moves only between servers that agree on
    /// these (see `memofs_virtiofs`'s migration).
    pub fn guest_visible(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cache", format!("{:?}", self.cache)),
            ("atime", self.atime_in_effect().describe()),
            ("read_only", self.read_only().to_string()),
            ("direct_io", self.direct_io.name().to_string()),
            ("xattr", self.xattr.to_string()),
            ("posix_acl", self.posix_acl.to_string()),
            ("ids", format!("{:?}", self.ids)),
            ("xattrmap", format!("{:?}", self.xattrs)),
            ("security_label", self.security_label.to_string()),
            ("noatime_opens", self.noatime_opens.to_string()),
        ]
    }

    /// The choices worth showing in `memofs stats`, as (name, value).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (
                "backend",
                match self.backend {
                    BackendKind::Mem => "mem",
                    BackendKind::Passthrough => "passthrough",
                }
                .to_string(),
            ),
            ("atime", self.atime_in_effect().describe()),
            (
                "passthrough",
                match self.passthrough {
                    Passthrough::Off => "off",
                    Passthrough::IfGranted => "if granted",
                    Passthrough::Required => "required",
                }
                .to_string(),
            ),
            ("writeback", self.writeback().to_string()),
            ("direct_io", self.direct_io.name().to_string()),
            ("posix_acl", self.posix_acl.to_string()),
            ("xattr", self.xattr.to_string()),
            ("threads", self.threads.to_string()),
            ("busy_poll_us", self.busy_poll.as_micros().to_string()),
        ];
        match self.backend {
            BackendKind::Mem => {
                v.push((
                    "file_data",
                    if self.kernel_data {
                        "kernel tmpfs"
                    } else {
                        "server pages"
                    }
                    .to_string(),
                ));
                if self.kernel_data {
                    v.push(("huge", self.huge.as_str().to_string()));
                }
            }
            BackendKind::Passthrough => {
                v.push(("watch", format!("{:?}", self.watch).to_lowercase()))
            }
        }
        if self.read_only() {
            v.push(("read_only", "true".to_string()));
        }
        if !self.ids.is_identity() {
            v.push(("ids", "translated".to_string()));
        }
        if self.announce_submounts {
            v.push(("submounts", "announced".to_string()));
        }
        if self.security_label != Want::Off {
            v.push(("security_label", self.security_label.to_string()));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::parse_options;

    #[test]
    fn read_only_mounts_leave_atime_alone_and_translated_ids_take_no_acls() {
        let caps = Capabilities {
            posix_acl: true,
            ..Capabilities::default()
        };
        let ro = plan(&["ro", "strictatime"], BackendKind::Mem, true, caps);
        assert!(ro.read_only());
        assert_eq!(ro.atime_in_effect(), AtimePolicy::READ_ONLY);
        assert_eq!(ro.atime.mode, AtimeMode::Strict, "kept for a remount rw");
        assert!(ro.posix_acl);
        let mut p = MountPlan::new(
            &parse_options::<&str>(&[], 8 << 30).unwrap(),
            BackendKind::Mem,
            true,
        );
        assert!(!p.read_only());
        p.ids.uid.push("map:0:1000:1").unwrap();
        p.adopt(caps);
        assert!(!p.posix_acl);
        assert!(p.describe().contains(&("ids", "translated".to_string())));
        let mut never = plan(&[], BackendKind::Mem, true, caps);
        assert!(never.posix_acl && !never.acls_refused());
        never.acl = Want::Off;
        never.adopt(caps);
        assert!(!never.posix_acl && never.acls_refused());
    }

    fn plan(opts: &[&str], backend: BackendKind, root: bool, caps: Capabilities) -> MountPlan {
        let o = parse_options(opts, 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, backend, root);
        p.adopt(caps);
        p
    }

    const KERNEL: Capabilities = Capabilities {
        backing_fds: true,
        sole_writer: true,
        posix_acl: true,
        unseen_writers: false,
        atime_elsewhere: false,
    };

    #[test]
    fn atime_kept_elsewhere_holds_back_no_cache_unless_the_mount_names_a_rule() {
        let remote = Capabilities {
            atime_elsewhere: true,
            ..KERNEL
        };
        let p = plan(&[], BackendKind::Passthrough, true, remote);
        assert_eq!(p.atime.mode, AtimeMode::Noatime);
        let p = plan(&["strictatime"], BackendKind::Passthrough, true, remote);
        assert_eq!(p.atime.mode, AtimeMode::Strict);
        let p = plan(&[], BackendKind::Passthrough, true, KERNEL);
        assert_eq!(p.atime.mode, AtimeMode::Relatime);
    }

    #[test]
    fn a_backend_others_change_unseen_gets_short_timeouts_unless_the_mount_set_them() {
        let remote = Capabilities {
            sole_writer: false,
            unseen_writers: true,
            ..KERNEL
        };
        let second = Duration::from_secs(1);
        let p = plan(&[], BackendKind::Passthrough, true, remote);
        assert_eq!(p.cache.negative_timeout, second);
        assert_eq!(p.cache.entry_timeout, second);
        let p = plan(&["cache=always"], BackendKind::Passthrough, true, remote);
        assert_eq!(p.cache.negative_timeout, Duration::from_secs(3600));
        let p = plan(
            &["negative_timeout=30"],
            BackendKind::Passthrough,
            true,
            remote,
        );
        assert_eq!(p.cache.negative_timeout, Duration::from_secs(30));
        let local = Capabilities {
            sole_writer: false,
            ..KERNEL
        };
        let p = plan(&[], BackendKind::Passthrough, true, local);
        assert_eq!(p.cache.negative_timeout, Duration::from_secs(3600));
    }

    #[test]
    fn mem_data_goes_to_the_kernel_only_for_root_and_the_plain_data_path() {
        assert!(plan(&[], BackendKind::Mem, true, KERNEL).kernel_data);
        assert!(!plan(&[], BackendKind::Mem, false, KERNEL).kernel_data);
        assert!(!plan(&["direct_io"], BackendKind::Mem, true, KERNEL).kernel_data);
        assert!(!plan(&["writeback=on"], BackendKind::Mem, true, KERNEL).kernel_data);
        assert!(plan(&["passthrough=on"], BackendKind::Mem, false, KERNEL).kernel_data);
        assert!(!plan(&["passthrough=off"], BackendKind::Mem, true, KERNEL).kernel_data);
        assert!(!plan(&[], BackendKind::Passthrough, true, KERNEL).kernel_data);
    }

    #[test]
    fn passthrough_and_writeback_exclude_each_other() {
        let p = plan(&["writeback=on"], BackendKind::Passthrough, true, KERNEL);
        assert_eq!(p.passthrough, Passthrough::IfGranted);
        assert!(!p.writeback());
        let p = plan(
            &["writeback=on", "passthrough=off"],
            BackendKind::Passthrough,
            true,
            KERNEL,
        );
        assert_eq!(p.passthrough, Passthrough::Off);
        assert!(p.writeback());
        // A backend without descriptors never passes through; writeback stays as asked.
        let pages = Capabilities {
            backing_fds: false,
            ..KERNEL
        };
        let p = plan(&["writeback=on"], BackendKind::Mem, true, pages);
        assert_eq!(p.passthrough, Passthrough::Off);
        assert!(p.writeback());
    }

    #[test]
    fn writeback_auto_is_on_for_the_page_store_only() {
        let pages = Capabilities {
            backing_fds: false,
            ..KERNEL
        };
        // Root: kernel-backed data with passthrough, no writeback cache.
        assert!(!plan(&[], BackendKind::Mem, true, KERNEL).writeback());
        // Not root, or passthrough=off: the page store, with the writeback cache.
        assert!(plan(&[], BackendKind::Mem, false, pages).writeback());
        assert!(plan(&["passthrough=off"], BackendKind::Mem, true, pages).writeback());
        assert!(!plan(
            &["passthrough=off", "writeback=off"],
            BackendKind::Mem,
            true,
            pages
        )
        .writeback());
        assert!(!plan(&["direct_io"], BackendKind::Mem, false, pages).writeback());
        // A host export has other writers: only when asked.
        let host = Capabilities {
            sole_writer: false,
            ..pages
        };
        assert!(!plan(&[], BackendKind::Passthrough, false, host).writeback());
        assert!(plan(&["writeback"], BackendKind::Passthrough, false, host).writeback());
        // The private tmpfs failed: the page store, and the writeback cache with it.
        let o = parse_options(&[""; 0], 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Mem, true);
        p.without_kernel_data();
        p.adopt(pages);
        assert!(p.writeback());
        // No notifications (virtio-fs): auto stays off, an explicit on holds.
        let mut p = MountPlan::new(&o, BackendKind::Mem, false);
        p.without_notifications().unwrap();
        p.adopt(pages);
        assert!(!p.writeback());
        let o = parse_options(&["writeback=on"], 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Mem, false);
        p.without_notifications().unwrap();
        p.adopt(pages);
        assert!(p.writeback());
    }

    #[test]
    fn a_guest_keeps_pages_across_opens_of_a_host_directory_only_under_cache_always() {
        let host = Capabilities {
            sole_writer: false,
            ..Capabilities::default()
        };
        let keeps = |opts: &[&str], notifications: bool| {
            let o = parse_options(opts, 8 << 30).unwrap();
            let mut p = MountPlan::new(&o, BackendKind::Passthrough, true);
            if !notifications {
                p.without_notifications().unwrap();
            }
            p.adopt(host);
            p.keeps_across_opens()
        };
        assert!(keeps(&["cache=always"], false));
        assert!(!keeps(&["cache=auto"], false));
        assert!(!keeps(&["cache=metadata"], false));
        // A host mount is told of host changes only where its watcher sees them.
        assert!(!keeps(&["cache=always"], true));
    }

    #[test]
    fn without_notifications_no_watcher_runs_and_one_asked_for_is_refused() {
        let o = parse_options(&[""; 0], 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Passthrough, true);
        p.without_notifications().unwrap();
        assert_eq!(p.watch, WatchMode::Off);
        let o = parse_options(&["watch=inotify"], 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Passthrough, true);
        assert!(p
            .without_notifications()
            .unwrap_err()
            .contains("watch=inotify"));
        let o = parse_options(&["changes=seaweedfs"], 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Passthrough, true);
        assert!(p.without_notifications().unwrap_err().contains("changes="));
        assert!(parse_options(&["changes=exec:relative"], 8 << 30).is_err());
        let o = parse_options(&["changes=exec:/bin/feed"], 8 << 30).unwrap();
        assert_eq!(o.changes, ChangeFeed::Exec("/bin/feed".into()));
    }

    #[test]
    fn capabilities_carry_over() {
        let p = plan(&[], BackendKind::Mem, true, KERNEL);
        assert!(p.posix_acl && p.sole_writer);
        let d = p.describe();
        assert!(d.contains(&("file_data", "kernel tmpfs".to_string())));
    }
}
