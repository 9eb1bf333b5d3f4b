//! The host-change watcher: tells the kernel about changes it did not make.
//!
//! Changes made through the mount need nothing (the kernel updates its caches itself), but a
//! file created or deleted on the host, next to the export, must not stay hidden behind a
//! cached negative or positive entry. The watcher thread reports such changes to the
//! transport's [`Invalidator`] as soon as the host kernel delivers them:
//! - a name created, deleted or renamed in directory `P` → `entry(P, name)` (and
//!   `deleted(P, child, name)` when the deleted inode is known), plus `inode(P)` for the
//!   directory's own times and link count;
//! - attributes or data of a known inode changed → `inode(ino)`.
//!
//! Names (creates, deletes, renames) and one-off attribute or data changes are read and
//! reported at once. Streams are not: data changes of an inode that also changed in the
//! previous batch (every `write(2)` is an event), and batches of events the server caused
//! itself while it works (read only to be skipped). After a stream batch the thread waits
//! [`COALESCE_MS`] (5 ms) before its next read if events keep coming. The host kernel
//! merges repeated events in its queue meanwhile (a stream of small writes costs the
//! watcher one read per window, not one per write), the server's own bursts cost one wakeup
//! per window instead of one per operation, and each change is reported once per batch.
//!
//! Only changes in directories of the inode table are reported: the kernel can cache names
//! (positive or negative) only in directories it holds, and every inode it holds sits in
//! such a directory. Per-directory watches follow the table through [`TableHook`].
//!
//! # Mechanisms
//! - [`WatchMechanism::Fanotify`] (preferred): one fanotify group with
//!   `FAN_REPORT_DFID_NAME | FAN_REPORT_FID` and an inode mark (`FAN_EVENT_ON_CHILD |
//!   FAN_ONDIR`) per known directory. Events carry file handles, matched against handles the
//!   hook records for every table inode, and the pid of the process that made the change:
//!   events caused by the server itself are skipped (the kernel already knows those), so
//!   writes through the mount do not drop the kernel's page cache. As root the server works
//!   on a private, detached copy of the source's mount, and an ignore mark for `FAN_MODIFY`
//!   on that mount drops the events of every data write made through it before they are
//!   built: the server's own, and those the kernel passes through to host files on behalf
//!   of processes using the memofs mount (they carry the writer's pid, so the pid check
//!   alone would report each one). When the source is the root of its filesystem (a
//!   dedicated disk or tmpfs; [`ExportMount::whole_filesystem`]) and the server has
//!   `CAP_SYS_ADMIN`, one filesystem mark (`FAN_MARK_FILESYSTEM`) replaces the
//!   per-directory marks: every change on that filesystem is in the export, no mark is
//!   added or removed as directories come and go, and no directory is "watched", which
//!   spares every `read(2)` and `write(2)` of a file in it the host kernel's parent lookup.
//!   With that mark on a tmpfs, when the server may open handles, only directories' handles
//!   are recorded; a file an event names by handle is opened by it and found by identity
//!   ([`Change::Host`]), which spares every lookup and forget of a file a
//!   `name_to_handle_at` and finds files changed through a hard link in a directory the
//!   kernel does not hold. Otherwise a filesystem mark would deliver changes from outside the export, so
//!   per-directory marks deliver only what the kernel can have cached. Needs Linux 5.9 and
//!   a filesystem with file handles and an fsid (not every FUSE or network filesystem has
//!   them). Without `CAP_SYS_ADMIN` the queue and mark counts are limited
//!   (`/proc/sys/fs/fanotify/max_queued_events`, `max_user_marks`).
//! - [`WatchMechanism::Inotify`] (fallback): a watch per known directory, bounded by
//!   `/proc/sys/fs/inotify/max_user_watches` (a directory past the limit is not watched).
//!   inotify does not say who made a change, so the server's own writes are reported too
//!   (harmless for coherence, but each one invalidates the file's cached pages).
//!
//! Both pin the watched directories (the table's descriptors pin them anyway) and see
//! changes made by any process on this host's kernel, in any mount namespace; they do not
//! see changes made on another machine to a network filesystem underneath. A change made
//! through another hard link of a file, in a directory the kernel does not hold, is not
//! seen either. If events were lost (queue overflow), every known inode is invalidated and
//! every cached name dropped ([`Invalidator::everything`]: the kernel's entry epoch is
//! raised, Linux 6.16+).

mod fanotify;
pub(crate) mod feed;
mod inotify;

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::thread::JoinHandle;

use memofs_core::{Ino, Invalidator, Result};
use parking_lot::RwLock;

use crate::config::WatchMode;
use crate::fd::ProcSelf;
use crate::host::HostId;
use crate::inode::{InodeTable, TableHook};
use crate::sys;

/// Which kernel interface the watcher uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchMechanism {
    /// fanotify with per-directory inode marks.
    Fanotify,
    /// inotify with per-directory watches.
    Inotify,
}

/// Where the export lives, which decides how it can be watched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExportMount {
    /// The server works on its own detached copy of the source's mount.
    pub private: bool,
    /// The source is the root of its filesystem (a mount whose root is the filesystem's
    /// root): every change on that filesystem is a change in the export.
    pub whole_filesystem: bool,
    /// Nothing but that one filesystem's own changes can change the export: it is the
    /// whole of a local filesystem (no network or cluster filesystem, whose other machines'
    /// writes no watcher sees), nothing was mounted below it when the server started, and
    /// the server's private copy will never gain a mount (it receives no propagation).
    pub sealed: bool,
    /// The source is on a filesystem others change behind this host's kernel
    /// ([`is_remote`]): no watcher here sees their changes.
    pub remote: bool,
}

/// Filesystems whose every change is made by this host's kernel (`statfs` `f_type`).
const LOCAL_FILESYSTEMS: [libc::c_long; 5] = [
    libc::TMPFS_MAGIC,
    libc::EXT4_SUPER_MAGIC,
    libc::XFS_SUPER_MAGIC,
    libc::BTRFS_SUPER_MAGIC,
    libc::F2FS_SUPER_MAGIC,
];

/// Filesystems that other machines (or a userspace server) change behind this host's
/// kernel (`statfs` `f_type`): FUSE (SeaweedFS, JuiceFS, GlusterFS, sshfs...), NFS, SMB (two),
/// CephFS, 9P, AFS, OCFS2, GFS2, Lustre.
const REMOTE_FILESYSTEMS: [libc::c_long; 11] = [
    0x6573_5546,
    0x6969,
    0xFF53_4D42,
    0xFE53_4D42,
    0x00C3_6400,
    0x0102_1997,
    0x5346_414F,
    0x7461_636F,
    0x0116_1970,
    0x0BD0_0BD0,
    0x517B,
];

/// Whether `f_type` is a filesystem changed behind this host's kernel ([`REMOTE_FILESYSTEMS`]).
pub(crate) fn is_remote(f_type: libc::c_long) -> bool {
    REMOTE_FILESYSTEMS.contains(&f_type)
}

/// Whether `f_type` (from `statfs`) is a filesystem whose every change this host's kernel
/// makes.
pub(crate) fn is_local(f_type: libc::c_long) -> bool {
    LOCAL_FILESYSTEMS.contains(&f_type)
}

/// What the host's mount table says of an export's source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SourceMount {
    /// The source is the root of a mount showing its whole filesystem.
    pub filesystem_root: bool,
    /// ... with no other mount at or below its mount point.
    pub alone: bool,
    /// ... of a local type ([`is_local`]).
    pub local: bool,
}

impl ExportMount {
    /// What `/proc/self/mountinfo` and `statfs` say of `source` (the host's descriptor,
    /// before any private copy), as [`SourceMount`].
    pub(crate) fn inspect(source: BorrowedFd<'_>) -> SourceMount {
        let none = SourceMount::default();
        let Some((mnt_id, true)) = sys::at::mount_of(source) else {
            return none;
        };
        let Ok(mounts) = memofs_core::mountinfo::mounts() else {
            return none;
        };
        let Some(own) = mounts
            .iter()
            .find(|m| m.id == mnt_id && m.root == std::path::Path::new("/"))
        else {
            return none;
        };
        let alone = !mounts
            .iter()
            .any(|m| m.id != mnt_id && m.mount_point.starts_with(&own.mount_point));
        SourceMount {
            filesystem_root: true,
            alone,
            local: sys::io::fstatfs(source).is_ok_and(|st| is_local(st.f_type)),
        }
    }
}

/// One thing to report, as decoded from the host's events.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Change {
    /// `name` in the directory appeared, disappeared or now names another inode.
    Entry(Ino, OsString),
    /// The inode `child`, known as `name` in the directory, was deleted.
    Deleted(Ino, Ino, OsString),
    /// Attributes or data changed.
    Inode(Ino),
    /// Attributes or data of whatever `name` in the directory is changed: found by name.
    Child(Ino, OsString),
    /// Attributes or data of this host inode changed: found by identity.
    Host(HostId),
    /// As `Deleted`, with the child found by identity.
    DeletedHost(Ino, HostId, OsString),
    /// Events were lost.
    Everything,
}

/// A kernel event source the watcher thread reads.
pub(crate) trait Source: Send {
    /// The descriptor that becomes readable when events are pending.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Reads every pending event, appending what it reports to `out`; returns the bytes
    /// of events read (events the server caused itself are read but report nothing).
    fn read(&mut self, out: &mut Vec<Change>) -> Result<usize>;
}

/// What a mechanism provides: its source (for the thread) and its hook (for the table).
pub(crate) struct Parts {
    source: Box<dyn Source>,
    hook: Arc<dyn TableHook>,
    /// The source's whole filesystem is watched with one mark.
    whole_filesystem: bool,
}

type InvalidatorSlot = Arc<RwLock<Arc<dyn Invalidator>>>;

/// After a batch with data or attribute changes, the watcher waits this long before reading
/// events that arrive within the same span, so that the host kernel merges repeated events
/// (a stream of writes to one file) in its queue: one read and one report per file per
/// window instead of one per `write(2)`. Well inside the 100 ms in which a host change
/// should show through the mount; name changes never wait.
pub(crate) const COALESCE_MS: i32 = 5;

/// A running watcher; dropping it stops the thread.
pub(crate) struct Watcher {
    mechanism: WatchMechanism,
    whole_filesystem: bool,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    invalidator: InvalidatorSlot,
    table: Arc<InodeTable>,
}

impl Watcher {
    /// Starts the mechanism `mode` asks for (or the best available); `None` when none is
    /// available or `mode` is `Off`.
    pub(crate) fn start(
        table: &Arc<InodeTable>,
        proc: &Arc<ProcSelf>,
        mode: WatchMode,
        export: ExportMount,
        invalidator: Arc<dyn Invalidator>,
    ) -> Option<Watcher> {
        let root = table.root();
        let fan = || fanotify::open(proc, &root, export).map(|p| (WatchMechanism::Fanotify, p));
        let ino = || inotify::open(proc, &root).map(|p| (WatchMechanism::Inotify, p));
        let found = match mode {
            WatchMode::Off => return None,
            WatchMode::Fanotify => fan(),
            WatchMode::Inotify => ino(),
            WatchMode::Auto => fan().or_else(|e| {
                log::info!("passthrough: fanotify unavailable ({e}), using inotify");
                ino()
            }),
        };
        let (mechanism, parts) = match found {
            Ok(found) => found,
            Err(e) => {
                log::warn!("passthrough: no host-change watcher ({e}); host changes show up when cache timeouts expire");
                return None;
            }
        };
        let stop = match sys::notify::eventfd().and_then(|fd| Ok((fd.try_clone()?, fd))) {
            Ok(pair) => pair,
            Err(e) => {
                log::warn!("passthrough: no host-change watcher (eventfd: {e})");
                return None;
            }
        };
        let Parts {
            source,
            hook,
            whole_filesystem,
        } = parts;
        table.set_hook(Some(hook));
        let slot: InvalidatorSlot = Arc::new(RwLock::new(invalidator));
        let thread = {
            let (table, slot, stop_rx) = (table.clone(), slot.clone(), stop.0);
            std::thread::Builder::new()
                .name("memofs-watch".into())
                .spawn(move || run(&table, source, &stop_rx, &slot))
        };
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                table.set_hook(None);
                log::warn!("passthrough: no host-change watcher (thread: {e})");
                return None;
            }
        };
        log::info!("passthrough: watching host changes with {mechanism:?}");
        Some(Watcher {
            mechanism,
            whole_filesystem,
            stop: stop.1,
            thread: Some(thread),
            invalidator: slot,
            table: table.clone(),
        })
    }

    /// The mechanism in use.
    pub(crate) fn mechanism(&self) -> WatchMechanism {
        self.mechanism
    }

    /// Whether one mark covers the source's whole filesystem.
    pub(crate) fn whole_filesystem(&self) -> bool {
        self.whole_filesystem
    }

    /// Reports to `invalidator` from now on.
    pub(crate) fn set_invalidator(&self, invalidator: Arc<dyn Invalidator>) {
        *self.invalidator.write() = invalidator;
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.table.set_hook(None);
        if let Err(e) = sys::notify::eventfd_signal(self.stop.as_fd()) {
            log::error!("passthrough: cannot stop the watcher: {e}");
            return;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watcher thread: waits for events or the stop signal.
fn run(table: &InodeTable, mut source: Box<dyn Source>, stop: &OwnedFd, slot: &InvalidatorSlot) {
    let mut changes = Vec::new();
    let window = std::time::Duration::from_millis(COALESCE_MS as u64);
    // When the last stream-like batch was read (data or attribute changes, or only the
    // server's own events).
    let mut last_stream: Option<std::time::Instant> = None;
    // The data and attribute changes of the last batch.
    let mut previous: HashSet<Change> = HashSet::new();
    loop {
        match sys::notify::poll([source.fd(), stop.as_fd()], -1) {
            Ok([_, true]) => return,
            Ok([true, false]) => {}
            Ok([false, false]) => continue,
            Err(e) => {
                log::error!("passthrough: watcher stopped: poll: {e}");
                return;
            }
        }
        // In a burst, let the queue merge what follows; the stop signal still ends the wait.
        if last_stream.is_some_and(|t| t.elapsed() < window) {
            if let Ok([true]) = sys::notify::poll([stop.as_fd()], COALESCE_MS) {
                return;
            }
        }
        changes.clear();
        let read = match source.read(&mut changes) {
            Ok(n) => n,
            Err(e) => {
                log::error!("passthrough: watcher stopped: read: {e}");
                return;
            }
        };
        let invalidator = slot.read().clone();
        deliver(table, &changes, &*invalidator);
        // Streams wait: an inode's data or attributes changing batch after batch, and the
        // echo of the server's own work (events it caused, read only to be skipped).
        let data = data_changes(&changes);
        if data.iter().any(|c| previous.contains(c)) || (read > 0 && changes.is_empty()) {
            last_stream = Some(std::time::Instant::now());
        }
        previous = data;
    }
}

/// The data and attribute changes in `changes`, without those that come with a name change:
/// the times and link count of the directory it was made in, and the link count of an
/// inode deleted.
fn data_changes(changes: &[Change]) -> HashSet<Change> {
    let mut named: HashSet<Ino> = HashSet::new();
    let mut deleted_hosts: HashSet<HostId> = HashSet::new();
    for c in changes {
        match c {
            Change::Entry(p, _) => drop(named.insert(*p)),
            Change::Deleted(p, child, _) => named.extend([*p, *child]),
            Change::DeletedHost(p, child, _) => {
                named.insert(*p);
                deleted_hosts.insert(*child);
            }
            _ => {}
        }
    }
    changes
        .iter()
        .filter(|c| match c {
            Change::Inode(ino) => !named.contains(ino),
            Change::Host(host) => !deleted_hosts.contains(host),
            Change::Child(..) => true,
            _ => false,
        })
        .cloned()
        .collect()
}

/// Reports `changes` once each, in order, holding no lock.
fn deliver(table: &InodeTable, changes: &[Change], invalidator: &dyn Invalidator) {
    if !changes.is_empty() {
        table.note_host_changes();
    }
    let mut seen = HashSet::new();
    for change in changes {
        let change = match change {
            Change::Child(parent, name) => match child_ino(table, *parent, name) {
                Some(ino) => Change::Inode(ino),
                None => continue,
            },
            Change::Host(host) => match table.find(*host) {
                Some(inode) => Change::Inode(inode.ino),
                None => continue,
            },
            Change::DeletedHost(parent, host, name) => match table.find(*host) {
                Some(child) => Change::Deleted(*parent, child.ino, name.clone()),
                None => Change::Entry(*parent, name.clone()),
            },
            c => c.clone(),
        };
        if !seen.insert(change.clone()) {
            continue;
        }
        match change {
            Change::Entry(parent, name) => invalidator.entry(parent, &name),
            Change::Deleted(parent, child, name) => invalidator.deleted(parent, child, &name),
            Change::Inode(ino) => {
                if let Ok(inode) = table.get(ino) {
                    inode.no_caps.forget();
                }
                invalidator.inode(ino)
            }
            Change::Everything => {
                log::warn!(
                    "passthrough: host events lost; invalidating every cached name and inode"
                );
                invalidator.everything();
                for inode in table.all() {
                    inode.no_caps.forget();
                    invalidator.inode(inode.ino);
                }
            }
            Change::Child(..) | Change::Host(_) | Change::DeletedHost(..) => {
                unreachable!("resolved above")
            }
        }
    }
}

/// Our number for what `name` in directory `parent` is now, if the kernel knows it.
fn child_ino(table: &InodeTable, parent: Ino, name: &OsString) -> Option<Ino> {
    let dir = table.get(parent).ok()?;
    let name = CString::new(name.as_bytes()).ok()?;
    let st = sys::at::statx(dir.fd().ok()?.as_fd(), &name).ok()?;
    table.find(HostId::of(&st)).map(|i| i.ino)
}

#[cfg(test)]
mod tests {
    use super::{data_changes, Change, HostId};
    use std::collections::HashSet;

    #[test]
    fn name_changes_are_not_data_changes() {
        let entry = Change::Entry(5, "a".into());
        assert!(data_changes(&[entry.clone(), Change::Inode(5)]).is_empty());
        assert_eq!(
            data_changes(&[entry, Change::Inode(6)]),
            HashSet::from([Change::Inode(6)])
        );
        let child = Change::Child(5, "a".into());
        assert_eq!(
            data_changes(std::slice::from_ref(&child)),
            HashSet::from([child])
        );
        // A delete changes the directory's times and the deleted inode's link count.
        assert!(data_changes(&[
            Change::Inode(9),
            Change::Deleted(5, 9, "b".into()),
            Change::Inode(5)
        ])
        .is_empty());
        // The same with the deleted file known by identity only.
        let host = HostId { dev: 1, ino: 9 };
        assert!(data_changes(&[
            Change::Host(host),
            Change::DeletedHost(5, host, "b".into()),
            Change::Inode(5)
        ])
        .is_empty());
        let other = Change::Host(HostId { dev: 1, ino: 10 });
        assert_eq!(
            data_changes(std::slice::from_ref(&other)),
            HashSet::from([other])
        );
    }
}
