//! The access-time rule: `strictatime`, `relatime` (default) and `noatime`, plus `nodiratime`.
//!
//! The kernel marks every FUSE inode `S_NOATIME` and leaves atime to the server, so this rule
//! is the server's. Backends call [`AtimePolicy::needs_update`] from exactly one place (their
//! atime choke point). Inodes with no lookup path never reach it: the backend checks that
//! first, without reading a clock or taking a lock.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::time::Timestamp;

/// How often atime is updated on read and readdir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtimeMode {
    /// Every access updates atime.
    Strict,
    /// Update only when atime is not newer than mtime or ctime, or is over 24 h old (Linux's
    /// default since 2.6.30).
    Relatime,
    /// Never update atime on access (`utimensat` still works).
    Noatime,
}

/// The mount's atime rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtimePolicy {
    /// Rule for all inodes.
    pub mode: AtimeMode,
    /// Never update directories' atime.
    pub nodiratime: bool,
}

impl Default for AtimePolicy {
    fn default() -> Self {
        AtimePolicy {
            mode: AtimeMode::Relatime,
            nodiratime: false,
        }
    }
}

/// relatime refreshes an atime older than this even when it is newer than mtime and ctime.
pub const RELATIME_MAX_AGE_NS: i128 = 24 * 3600 * 1_000_000_000;

impl AtimePolicy {
    /// The rule of a read-only mount: nothing changes, atime neither (as the kernel's
    /// `touch_atime` skips read-only mounts).
    pub const READ_ONLY: AtimePolicy = AtimePolicy {
        mode: AtimeMode::Noatime,
        nodiratime: true,
    };

    /// The rule in effect on a mount that is `read_only` or not: none while read-only.
    pub fn in_effect(self, read_only: bool) -> AtimePolicy {
        match read_only {
            true => AtimePolicy::READ_ONLY,
            false => self,
        }
    }

    /// Whether every listing of a directory moves its atime (`strictatime` without
    /// `nodiratime`): then no listing may be served from a copy the kernel keeps.
    pub fn moves_every_listing(&self) -> bool {
        self.mode == AtimeMode::Strict && !self.nodiratime
    }

    /// The rule as mount options spell it (`relatime`, `noatime,nodiratime`, ...).
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            AtimeMode::Strict => "strictatime",
            AtimeMode::Relatime => "relatime",
            AtimeMode::Noatime => "noatime",
        };
        if self.nodiratime {
            format!("{mode},nodiratime")
        } else {
            mode.to_string()
        }
    }

    /// True when no access can ever update atime for this kind of inode, so the caller can
    /// skip reading the clock.
    pub fn never(&self, is_dir: bool) -> bool {
        self.mode == AtimeMode::Noatime || (is_dir && self.nodiratime)
    }

    /// Whether an access at `now` must store a new atime, given the inode's current times.
    pub fn needs_update(
        &self,
        is_dir: bool,
        atime: Timestamp,
        mtime: Timestamp,
        ctime: Timestamp,
        now: Timestamp,
    ) -> bool {
        if self.never(is_dir) {
            return false;
        }
        match self.mode {
            AtimeMode::Noatime => false,
            AtimeMode::Strict => atime != now,
            AtimeMode::Relatime => {
                atime <= mtime
                    || atime <= ctime
                    || now.0.saturating_sub(atime.0) >= RELATIME_MAX_AGE_NS
            }
        }
    }
}

/// A rule that a remount may change while requests read it: one byte, so a reader sees
/// either the old rule or the new one, never half of each.
#[derive(Debug)]
pub struct AtomicAtime(AtomicU8);

impl AtomicAtime {
    const NODIRATIME: u8 = 0b100;

    fn encode(p: AtimePolicy) -> u8 {
        let mode = match p.mode {
            AtimeMode::Strict => 0,
            AtimeMode::Relatime => 1,
            AtimeMode::Noatime => 2,
        };
        mode | if p.nodiratime { Self::NODIRATIME } else { 0 }
    }

    /// The rule `p`, changeable.
    pub fn new(p: AtimePolicy) -> AtomicAtime {
        AtomicAtime(AtomicU8::new(Self::encode(p)))
    }

    /// The rule in effect.
    pub fn load(&self) -> AtimePolicy {
        let v = self.0.load(Ordering::SeqCst);
        AtimePolicy {
            mode: match v & 0b11 {
                0 => AtimeMode::Strict,
                2 => AtimeMode::Noatime,
                _ => AtimeMode::Relatime,
            },
            nodiratime: v & Self::NODIRATIME != 0,
        }
    }

    /// Puts `p` in effect for the accesses that follow.
    pub fn store(&self, p: AtimePolicy) {
        self.0.store(Self::encode(p), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = 1_000_000_000;

    #[test]
    fn relatime_rules() {
        let p = AtimePolicy::default();
        let now = Timestamp(100_000 * S);
        // atime newer than mtime and ctime, recent: no update.
        assert!(!p.needs_update(
            false,
            Timestamp(now.0 - S),
            Timestamp(now.0 - 2 * S),
            Timestamp(now.0 - 2 * S),
            now
        ));
        // atime == mtime: update.
        assert!(p.needs_update(false, Timestamp(5 * S), Timestamp(5 * S), Timestamp(S), now));
        // atime older than ctime: update.
        assert!(p.needs_update(false, Timestamp(5 * S), Timestamp(S), Timestamp(6 * S), now));
        // atime over 24 h old: update.
        assert!(p.needs_update(
            false,
            Timestamp(now.0 - RELATIME_MAX_AGE_NS),
            Timestamp(0),
            Timestamp(0),
            now
        ));
    }

    #[test]
    fn strict_noatime_nodiratime() {
        let strict = AtimePolicy {
            mode: AtimeMode::Strict,
            nodiratime: true,
        };
        let t = Timestamp(10 * S);
        assert!(strict.needs_update(false, t, Timestamp(0), Timestamp(0), Timestamp(11 * S)));
        assert!(!strict.needs_update(true, t, Timestamp(0), Timestamp(0), Timestamp(11 * S)));
        let no = AtimePolicy {
            mode: AtimeMode::Noatime,
            nodiratime: false,
        };
        assert!(!no.needs_update(false, t, t, t, Timestamp::MAX));
    }

    #[test]
    fn a_stored_rule_loads_back_whole() {
        let live = AtomicAtime::new(AtimePolicy::default());
        assert_eq!(live.load(), AtimePolicy::default());
        for mode in [AtimeMode::Strict, AtimeMode::Relatime, AtimeMode::Noatime] {
            for nodiratime in [false, true] {
                let p = AtimePolicy { mode, nodiratime };
                live.store(p);
                assert_eq!(live.load(), p);
            }
        }
    }
}
