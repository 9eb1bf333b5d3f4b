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
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use memofs_core::atime::{AtimeMode, RELATIME_MAX_AGE_NS};
use memofs_core::{AtimePolicy, AtomicAtime, Attr, FileKind, Ino, Invalidator, Timestamp};

/// Decides which caches may be kept, and drops them when relatime's day is up.
pub(crate) struct Keeper {
    /// The atime rule in effect; a remount may change it ([`Keeper::set_policy`]).
    policy: AtomicAtime,
    /// The rule the mount names, which a read-only mount returns to when made writable.
    rule: AtomicAtime,
    /// When each kept copy is to be dropped, shared with the refresh thread (started on
    /// first use).
    refresh: Arc<Refresh>,
    started: OnceLock<()>,
}

/// The kept copies to drop, by when.
#[derive(Default)]
struct Refresh {
    due: Mutex<Due>,
    /// Signalled when a copy is due sooner than the refresh thread is waiting for.
    sooner: Condvar,
}

/// One time per inode (the latest asked for), and a heap of times to look at. The heap may
/// hold times an inode no longer has (a later one replaced it); it is rebuilt from `at` once
/// those would be most of it, so it never holds more than about twice the inodes due.
#[derive(Default)]
struct Due {
    at: HashMap<Ino, Instant>,
    heap: BinaryHeap<Reverse<(Instant, Ino)>>,
    /// The keeper is gone: the refresh thread ends, and nothing more is kept.
    ended: bool,
}

/// Times closer than this are the same time: a copy served again with the same atime is
/// due at the same moment, give or take the time between the two clocks' readings.
const SAME_TIME: Duration = Duration::from_secs(1);

impl Due {
    /// `ino` is due at `at` (replacing what it had); whether the heap's first time moved.
    fn insert(&mut self, ino: Ino, at: Instant) -> bool {
        if let Some(&old) = self.at.get(&ino) {
            if at <= old + SAME_TIME && old <= at + SAME_TIME {
                return false;
            }
            if at > old {
                // Its heap entry fires first and finds the later time (see `take_due`).
                self.at.insert(ino, at);
                return false;
            }
        }
        self.at.insert(ino, at);
        let sooner = self
            .heap
            .peek()
            .is_none_or(|Reverse((first, _))| at < *first);
        self.heap.push(Reverse((at, ino)));
        if self.heap.len() > 2 * self.at.len() + 64 {
            self.heap = self.at.iter().map(|(&i, &t)| Reverse((t, i))).collect();
        }
        sooner
    }

    /// The inodes due by `now`, taken out; and how long until the next.
    fn take_due(&mut self, now: Instant) -> (Vec<Ino>, Option<Duration>) {
        let mut taken = Vec::new();
        while let Some(&Reverse((at, ino))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            match self.at.get(&ino) {
                Some(&t) if t == at => {
                    self.at.remove(&ino);
                    taken.push(ino);
                }
                // Moved later while this entry waited: look again then.
                Some(&t) if t > at => self.heap.push(Reverse((t, ino))),
                _ => {}
            }
        }
        let next = self
            .heap
            .peek()
            .map(|Reverse((at, _))| at.saturating_duration_since(now));
        (taken, next)
    }
}

impl Keeper {
    pub(crate) fn new(policy: AtimePolicy, rule: AtimePolicy) -> Keeper {
        Keeper {
            policy: AtomicAtime::new(policy),
            rule: AtomicAtime::new(rule),
            refresh: Arc::new(Refresh::default()),
            started: OnceLock::new(),
        }
    }

    /// Whether the kernel may keep what it caches of the inode with `attr` (pages or
    /// listing) across opens: no read it serves could move atime now.
    pub(crate) fn may_keep(&self, attr: &Attr) -> bool {
        let dir = attr.kind == FileKind::Directory;
        let policy = self.policy.load();
        match policy.mode {
            _ if policy.never(dir) => true,
            AtimeMode::Strict => false,
            _ => !policy.needs_update(dir, attr.atime, attr.mtime, attr.ctime, Timestamp::now()),
        }
    }

    /// The rule in effect.
    pub(crate) fn policy(&self) -> AtimePolicy {
        self.policy.load()
    }

    /// The rule the mount names.
    pub(crate) fn rule(&self) -> AtimePolicy {
        self.rule.load()
    }

    /// Puts the rule `p` in effect for the opens and reads that follow, and `rule` as the
    /// one the mount names (a remount).
    pub(crate) fn set_policy(&self, p: AtimePolicy, rule: AtimePolicy) {
        self.rule.store(rule);
        self.policy.store(p);
    }

    /// Whether the kernel may always keep what it caches of an inode of this kind (a
    /// directory: `dir`): no read of one ever moves atime.
    pub(crate) fn keeps_always(&self, dir: bool) -> bool {
        self.policy.load().never(dir)
    }

    /// Whether directory listings may live in the kernel at all (no OPENDIR needed to
    /// decide per open).
    /// Never while the rule the mount names moves directories' atime at every listing: the
    /// kernel keeps listings for good once told, and a read-only mount made writable again
    /// returns to that rule.
    pub(crate) fn listings_kept(&self) -> bool {
        self.policy.load().mode != AtimeMode::Strict && !self.rule.load().moves_every_listing()
    }

    /// The server served a read of the inode with `attr` (after its atime was updated) whose
    /// result the kernel keeps: under relatime, drop the kernel's copy through `inv` when
    /// the day since that atime is up. The same copy served again asks nothing new.
    pub(crate) fn served(&self, attr: &Attr, inv: &Arc<dyn Invalidator>) {
        let policy = self.policy.load();
        if policy.mode != AtimeMode::Relatime || policy.never(attr.kind == FileKind::Directory) {
            return;
        }
        let age = Timestamp::now().0.saturating_sub(attr.atime.0);
        let left =
            Duration::from_nanos((RELATIME_MAX_AGE_NS - age).clamp(0, u64::MAX as i128) as u64);
        self.started
            .get_or_init(|| start(self.refresh.clone(), inv.clone()));
        let mut due = self.refresh.due.lock().unwrap_or_else(|e| e.into_inner());
        if !due.ended && due.insert(attr.ino, Instant::now() + left) {
            self.refresh.sooner.notify_one();
        }
    }

    /// Inode times waiting in the refresh heap (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.refresh.due.lock().unwrap().heap.len()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.refresh
            .due
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ended = true;
        self.refresh.sooner.notify_one();
    }
}

/// The refresh thread: invalidates each inode when its time comes (only the latest time
/// asked for an inode counts). It ends with the keeper.
fn start(refresh: Arc<Refresh>, inv: Arc<dyn Invalidator>) {
    let spawned = std::thread::Builder::new()
        .name("memofs-relatime".into())
        .spawn(move || loop {
            let mut due = refresh.due.lock().unwrap_or_else(|e| e.into_inner());
            if due.ended {
                return;
            }
            let (taken, next) = due.take_due(Instant::now());
            if taken.is_empty() {
                let wait = next.unwrap_or(Duration::from_secs(3600));
                drop(refresh.sooner.wait_timeout(due, wait));
                continue;
            }
            drop(due);
            for ino in taken {
                inv.inode(ino);
            }
        });
    if let Err(e) = spawned {
        log::warn!("no relatime refresh thread ({e}): kept caches stay until the inode changes");
    }
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
            mount_root: false,
        }
    }

    fn now() -> i64 {
        Timestamp::now().to_timespec().0
    }

    fn keeper(mode: AtimeMode, nodiratime: bool) -> Keeper {
        let p = AtimePolicy { mode, nodiratime };
        Keeper::new(p, p)
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

    #[test]
    fn the_same_copy_served_again_and_again_waits_once() {
        let inv: Arc<dyn Invalidator> = Arc::new(Seen(Mutex::new(Vec::new())));
        let k = keeper(AtimeMode::Relatime, false);
        let a = attr(FileKind::Directory, now() - 10, now() - 100);
        for _ in 0..500_000 {
            k.served(&a, &inv);
        }
        assert_eq!(k.waiting(), 1);
        // Many inodes each served many times: one time each, give or take the rebuild slack.
        for ino in 0..1000 {
            for _ in 0..100 {
                k.served(&Attr { ino, ..a }, &inv);
            }
        }
        assert!(k.waiting() <= 2 * 1001 + 64, "{}", k.waiting());
    }

    #[test]
    fn only_the_latest_time_asked_for_an_inode_counts() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut due = Due::default();
        due.insert(7, t0 + s(10));
        due.insert(7, t0 + s(20));
        assert_eq!(due.take_due(t0 + s(15)).0, Vec::<Ino>::new());
        assert_eq!(due.take_due(t0 + s(21)).0, vec![7]);
        due.insert(8, t0 + s(30));
        assert!(due.insert(8, t0 + s(25)), "an earlier time moves the first");
        assert_eq!(due.take_due(t0 + s(26)).0, vec![8]);
        assert_eq!(due.take_due(t0 + s(31)).0, Vec::<Ino>::new());
        assert!(due.heap.is_empty() && due.at.is_empty());
    }
}
