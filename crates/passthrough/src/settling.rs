//! What another machine changed a moment ago, while the source's own client on this host
//! may still answer from its caches.
//!
//! A change feed ([`crate::watch::feed`]) names a change as soon as the engine publishes
//! it, but the source's own mount may keep the old answer for its timeouts (SeaweedFS's
//! mount keeps a name deleted elsewhere, and old attributes, for 1 s), and a lookup through
//! it would find the old answer. So for [`SETTLE`] after a feed names a change, lookups in
//! the directory it was in, and attribute requests of the inode it was about, ask the
//! source's client to check with its server first (`AT_STATX_FORCE_SYNC`: a FUSE source
//! sends a GETATTR, which answers `ENOENT` for a name deleted elsewhere): the change shows
//! through memofs as soon as the engine has it, not when the source's caches expire.
//!
//! The feed also says which names are gone (deleted or renamed away on another machine),
//! which a check of the object cannot tell where it still exists under another name: for
//! [`SETTLE`], such a name is missing to lookups and listings through memofs, until the
//! feed or memofs itself makes it again. And which names were made: the source's client
//! may not show such a name yet, and a miss of it is then answered without a negative
//! entry, so that the next lookup asks again. The feed reports memofs's own changes too, a
//! moment after they are made: a name memofs itself made within [`SETTLE`] is not taken
//! as gone (the report may be of an earlier change, such as the rename that moved a lock
//! file away before the next lock of the same name was made).
//!
//! Lock order: `Settling::until` and `Settling::names` are leaves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memofs_core::Ino;
use parking_lot::Mutex;

/// How long a change is checked with the source's server: past the source client's own
/// timeouts (SeaweedFS's 1 s) and the feed's last invalidation of it
/// ([`crate::watch::feed::AGAIN`]).
pub(crate) const SETTLE: Duration = Duration::from_secs(3);

/// Entries past this many are pruned of those that no longer count.
const PRUNE_AT: usize = 4096;

/// What a feed named a change of within [`SETTLE`], and names made here meanwhile.
pub(crate) struct Settling {
    base: Instant,
    /// When the feed last named a change, in nanoseconds since `base` (0: never): while
    /// it is older than [`SETTLE`], nothing settles and no lock is taken.
    last: AtomicU64,
    /// Inodes changed (or changed in, for a directory), and until when that counts.
    until: Mutex<HashMap<Ino, Instant>>,
    /// Names in directories: gone elsewhere, or made here, and until when that counts.
    names: Mutex<HashMap<Ino, HashMap<Vec<u8>, Name>>>,
    /// A feed runs: names made here are noted.
    following: AtomicBool,
}

/// What is known of a name for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    /// Deleted or renamed away elsewhere (missing to lookups and listings).
    Gone(Instant),
    /// Made elsewhere: a miss is the source's client not having caught up yet, and is not
    /// kept.
    Expected(Instant),
    /// Made by memofs itself (a report of it gone is older).
    MadeHere(Instant),
}

impl Name {
    fn until(self) -> Instant {
        match self {
            Name::Gone(t) | Name::Expected(t) | Name::MadeHere(t) => t,
        }
    }
}

impl Default for Settling {
    fn default() -> Self {
        Settling {
            base: Instant::now(),
            last: AtomicU64::new(0),
            until: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::new()),
            following: AtomicBool::new(false),
        }
    }
}

impl Settling {
    /// A feed runs from now on: names memofs makes are noted.
    pub(crate) fn follow(&self) {
        self.following.store(true, Ordering::Release);
    }

    /// The feed named a change of (or in) `ino` now.
    pub(crate) fn mark(&self, ino: Ino) {
        let now = Instant::now();
        self.marked(now);
        let mut until = self.until.lock();
        if until.len() >= PRUNE_AT {
            until.retain(|_, t| *t > now);
        }
        until.insert(ino, now + SETTLE);
    }

    /// The feed says `name` in `dir` was deleted or renamed away: gone, unless memofs
    /// itself made it within [`SETTLE`].
    pub(crate) fn gone(&self, dir: Ino, name: &[u8]) {
        self.reported(dir, name, Name::Gone);
    }

    /// The feed says `name` in `dir` is there now: not gone, and a miss of it is the
    /// source's client lagging, for [`SETTLE`] (unless memofs itself made it).
    pub(crate) fn present(&self, dir: Ino, name: &[u8]) {
        self.reported(dir, name, Name::Expected);
    }

    /// Notes what the feed reported of `name` in `dir` (`what`, until [`SETTLE`] from
    /// now), unless memofs itself made the name within [`SETTLE`]: the report is older.
    fn reported(&self, dir: Ino, name: &[u8], what: fn(Instant) -> Name) {
        let now = Instant::now();
        let mut names = self.names.lock();
        if let Some(Name::MadeHere(t)) = names.get(&dir).and_then(|n| n.get(name)) {
            if *t > now {
                return;
            }
        }
        self.marked(now);
        put_locked(&mut names, now, (dir, name), what(now + SETTLE));
    }

    /// memofs made `name` in `dir` (created, linked, renamed to).
    pub(crate) fn made(&self, dir: Ino, name: &[u8]) {
        if !self.following.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let what = Name::MadeHere(now + SETTLE);
        put_locked(&mut self.names.lock(), now, (dir, name), what);
    }

    /// Whether `name` in `dir` was deleted or renamed away elsewhere within [`SETTLE`].
    pub(crate) fn is_gone(&self, dir: Ino, name: &[u8]) -> bool {
        matches!(self.known(dir, name), Some(Name::Gone(_)))
    }

    /// Whether the feed said within [`SETTLE`] that `name` in `dir` was made, and memofs
    /// has not made it itself since.
    pub(crate) fn is_expected(&self, dir: Ino, name: &[u8]) -> bool {
        matches!(self.known(dir, name), Some(Name::Expected(_)))
    }

    /// What is known of `name` in `dir` that still counts.
    fn known(&self, dir: Ino, name: &[u8]) -> Option<Name> {
        let now = Instant::now();
        if self.quiet(now) {
            return None;
        }
        let names = self.names.lock();
        let w = *names.get(&dir)?.get(name)?;
        (w.until() > now).then_some(w)
    }

    /// Whether `ino` changed elsewhere within [`SETTLE`].
    pub(crate) fn is_settling(&self, ino: Ino) -> bool {
        let now = Instant::now();
        !self.quiet(now) && self.until.lock().get(&ino).is_some_and(|t| *t > now)
    }

    /// Notes that the feed named a change at `now`.
    fn marked(&self, now: Instant) {
        let since = now.duration_since(self.base).as_nanos() as u64;
        self.last.store(since.max(1), Ordering::Release);
    }

    /// Whether the feed named no change within [`SETTLE`] of `now` (then nothing settles).
    fn quiet(&self, now: Instant) -> bool {
        match self.last.load(Ordering::Acquire) {
            0 => true,
            last => {
                let marked = self.base + Duration::from_nanos(last);
                now.saturating_duration_since(marked) >= SETTLE
            }
        }
    }
}

/// Sets what is known of `name` in `dir`, pruning what no longer counts when there is
/// much.
fn put_locked(
    names: &mut HashMap<Ino, HashMap<Vec<u8>, Name>>,
    now: Instant,
    (dir, name): (Ino, &[u8]),
    what: Name,
) {
    if names.values().map(HashMap::len).sum::<usize>() >= PRUNE_AT {
        names.retain(|_, n| {
            n.retain(|_, w| w.until() > now);
            !n.is_empty()
        });
    }
    names.entry(dir).or_default().insert(name.to_vec(), what);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_settles_its_inode_alone_for_a_while() {
        let s = Settling::default();
        assert!(!s.is_settling(5));
        s.mark(5);
        assert!(s.is_settling(5));
        assert!(!s.is_settling(6));
        // Once settled: the mark is in the past.
        s.until
            .lock()
            .insert(5, Instant::now() - Duration::from_millis(1));
        assert!(!s.is_settling(5));
        // Many marks: the settled ones are pruned.
        for ino in 10..10 + PRUNE_AT as u64 {
            s.mark(ino);
        }
        s.until
            .lock()
            .insert(7, Instant::now() - Duration::from_millis(1));
        s.mark(1);
        assert!(!s.until.lock().contains_key(&7));
        assert!(s.is_settling(10) && s.is_settling(1));
    }

    #[test]
    fn a_gone_name_is_gone_until_made_again() {
        let s = Settling::default();
        s.follow();
        assert!(!s.is_gone(1, b"x"));
        s.gone(1, b"x");
        assert!(s.is_gone(1, b"x"));
        assert!(!s.is_gone(1, b"y") && !s.is_gone(2, b"x"));
        s.present(1, b"x");
        assert!(!s.is_gone(1, b"x"));
        assert!(s.is_expected(1, b"x"), "a miss of it is the source lagging");
        s.gone(1, b"x");
        s.made(1, b"x");
        assert!(!s.is_gone(1, b"x"), "made here again");
        s.gone(1, b"x");
        assert!(
            !s.is_gone(1, b"x"),
            "a report older than memofs's own making"
        );
        let settled = Name::Gone(Instant::now());
        s.names
            .lock()
            .get_mut(&1)
            .unwrap()
            .insert(b"x".to_vec(), settled);
        assert!(!s.is_gone(1, b"x"), "settled");
    }
}
