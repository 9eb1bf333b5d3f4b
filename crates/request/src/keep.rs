//! Which kernel caches may outlive an open, with atime still following the mount's rule.
//!
//! FUSE inodes are `S_NOATIME`: the server keeps atime, and sees an access only when a READ
//! or READDIR reaches it. A kernel that keeps a file's pages (`FOPEN_KEEP_CACHE`) or a
//! directory's listing (`FOPEN_CACHE_DIR`, or no OPENDIR at all) across opens serves later
//! reads without the server. That is right exactly while no such read could move atime:
//! - `noatime` (and `nodiratime` for directories): never;
//! - `strictatime`: always, so nothing is kept;
//! - `relatime`: an access moves atime only if atime is not newer than mtime and ctime, or is
//!   more than a day old. Any change to the inode's data or entries drops the kernel's copy
//!   (the change comes through the mount, or, for a host export, through the invalidations),
//!   so the next read reaches the server, which updates atime. What is left is the day: when
//!   a kept copy is served, the server asks for the copy to be dropped when that day is up
//!   ([`Keeper::served`]), so the first read after it reaches the server again. A request
//!   that moves a directory's times without changing its entries (utimensat, chmod, an xattr)
//!   drops its listing at once when relatime now wants an update. One case stays approximate:
//!   a directory moved by rename gets a new ctime but keeps its listing, so its atime moves
//!   at the next change or when the day is up.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use memofs_core::atime::{AtimeMode, RELATIME_MAX_AGE_NS};
use memofs_core::{AtimePolicy, Attr, FileKind, Ino, Invalidator, Timestamp};

/// Decides which caches may be kept, and drops them when relatime's day is up.
pub(crate) struct Keeper {
    policy: AtimePolicy,
    /// Where relatime's day ends: the refresh thread, started on first use.
    refresh: OnceLock<Mutex<Sender<(Instant, Ino)>>>,
}

impl Keeper {
    pub(crate) fn new(policy: AtimePolicy) -> Keeper {
        Keeper {
            policy,
            refresh: OnceLock::new(),
        }
    }

    /// Whether the kernel may keep what it caches of the inode with `attr` (pages or
    /// listing) across opens: no read it serves could move atime now.
    pub(crate) fn may_keep(&self, attr: &Attr) -> bool {
        let dir = attr.kind == FileKind::Directory;
        match self.policy.mode {
            _ if self.policy.never(dir) => true,
            AtimeMode::Strict => false,
            _ => {
                !self
                    .policy
                    .needs_update(dir, attr.atime, attr.mtime, attr.ctime, Timestamp::now())
            }
        }
    }

    /// Whether directory listings may live in the kernel at all (no OPENDIR needed to
    /// decide per open).
    pub(crate) fn listings_kept(&self) -> bool {
        self.policy.mode != AtimeMode::Strict
    }

    /// The server served a read of the inode with `attr` (after its atime was updated) whose
    /// result the kernel keeps: under relatime, drop the kernel's copy through `inv` when
    /// the day since that atime is up.
    pub(crate) fn served(&self, attr: &Attr, inv: &Arc<dyn Invalidator>) {
        if self.policy.mode != AtimeMode::Relatime
            || self.policy.never(attr.kind == FileKind::Directory)
        {
            return;
        }
        let age = Timestamp::now().0.saturating_sub(attr.atime.0);
        let left =
            Duration::from_nanos((RELATIME_MAX_AGE_NS - age).clamp(0, u64::MAX as i128) as u64);
        let tx = self.refresh.get_or_init(|| Mutex::new(start(inv.clone())));
        let _ = tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((Instant::now() + left, attr.ino));
    }
}

/// The refresh thread: invalidates each inode when its time comes (only the latest time
/// asked for an inode counts).
fn start(inv: Arc<dyn Invalidator>) -> Sender<(Instant, Ino)> {
    let (tx, rx) = channel::<(Instant, Ino)>();
    let spawned = std::thread::Builder::new()
        .name("memofs-relatime".into())
        .spawn(move || {
            let mut due: HashMap<Ino, Instant> = HashMap::new();
            let mut heap = BinaryHeap::new();
            loop {
                let wait = heap
                    .peek()
                    .map(|Reverse((at, _)): &Reverse<(Instant, Ino)>| {
                        at.saturating_duration_since(Instant::now())
                    })
                    .unwrap_or(Duration::from_secs(3600));
                match rx.recv_timeout(wait) {
                    Ok((at, ino)) => {
                        due.insert(ino, at);
                        heap.push(Reverse((at, ino)));
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                let now = Instant::now();
                while let Some(Reverse((at, ino))) = heap.peek().copied() {
                    if at > now {
                        break;
                    }
                    heap.pop();
                    if due.get(&ino) == Some(&at) {
                        due.remove(&ino);
                        inv.inode(ino);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("no relatime refresh thread ({e}): kept caches stay until the inode changes");
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn attr(kind: FileKind, atime: i64, mtime: i64) -> Attr {
        let t = |s: i64| Timestamp::from_timespec(s, 0);
        Attr {
            ino: 7,
            generation: 1,
            size: 0,
            blocks: 0,
            atime: t(atime),
            mtime: t(mtime),
            ctime: t(mtime),
            crtime: t(0),
            kind,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        }
    }

    fn now() -> i64 {
        Timestamp::now().to_timespec().0
    }

    fn keeper(mode: AtimeMode, nodiratime: bool) -> Keeper {
        Keeper::new(AtimePolicy { mode, nodiratime })
    }

    #[test]
    fn relatime_keeps_only_what_a_read_would_not_touch() {
        let k = keeper(AtimeMode::Relatime, false);
        let fresh = attr(FileKind::Regular, now() - 10, now() - 100);
        assert!(k.may_keep(&fresh));
        let modified = attr(FileKind::Regular, now() - 100, now() - 10);
        assert!(
            !k.may_keep(&modified),
            "atime older than mtime: a read moves it"
        );
        let old = attr(FileKind::Regular, now() - 2 * 86_400, now() - 3 * 86_400);
        assert!(!k.may_keep(&old), "a day old: a read moves it");
    }

    #[test]
    fn strict_keeps_nothing_noatime_everything() {
        let fresh = attr(FileKind::Directory, now() - 10, now() - 100);
        assert!(!keeper(AtimeMode::Strict, false).may_keep(&fresh));
        assert!(!keeper(AtimeMode::Strict, false).listings_kept());
        let modified = attr(FileKind::Directory, now() - 100, now() - 10);
        assert!(keeper(AtimeMode::Noatime, false).may_keep(&modified));
        assert!(keeper(AtimeMode::Relatime, true).may_keep(&modified));
        assert!(keeper(AtimeMode::Strict, true).may_keep(&modified));
    }

    struct Seen(Mutex<Vec<Ino>>);

    impl Invalidator for Seen {
        fn entry(&self, _p: Ino, _n: &OsStr) {}
        fn deleted(&self, _p: Ino, _c: Ino, _n: &OsStr) {}
        fn inode(&self, ino: Ino) {
            self.0.lock().unwrap().push(ino);
        }
        fn everything(&self) {}
    }

    #[test]
    fn the_copy_is_dropped_when_relatime_s_day_is_up() {
        let seen = Arc::new(Seen(Mutex::new(Vec::new())));
        let inv: Arc<dyn Invalidator> = seen.clone();
        let k = keeper(AtimeMode::Relatime, false);
        // An atime a day old: due at once.
        let a = attr(
            FileKind::Regular,
            now() - (RELATIME_MAX_AGE_NS / 1_000_000_000) as i64,
            0,
        );
        k.served(&a, &inv);
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.0.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(*seen.0.lock().unwrap(), [7]);
        // noatime schedules nothing.
        keeper(AtimeMode::Noatime, false).served(&a, &inv);
    }
}
