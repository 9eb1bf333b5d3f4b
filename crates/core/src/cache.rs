//! Kernel cache policy: the one place where entry, attribute and negative-entry timeouts are
//! derived from the mount options.
//!
//! The kernel keeps three kinds of answers from a FUSE server:
//! - **entries** (name → inode), for `entry_timeout`;
//! - **attributes** (`stat` data), for `attr_timeout`;
//! - **negative entries** (name → "does not exist"), for `negative_timeout`: a LOOKUP miss
//!   answered with nodeid 0 and this timeout is cached as a negative dentry, so the next
//!   `stat` of the same missing path never reaches the server. With `negative_timeout=0` a miss
//!   is answered with plain `ENOENT`, which the kernel does not cache.
//!
//! Presets (`-o cache=`), in seconds:
//!
//! | preset   | entry_timeout | attr_timeout | negative_timeout |
//! |----------|---------------|--------------|------------------|
//! | `never`  | 0             | 0            | 0                |
//! | `auto`   | 1             | 1            | 1                |
//! | `always` | 3600          | 3600         | 3600             |
//! | `metadata` | 3600        | 3600         | 3600             |
//!
//! `metadata` (virtiofsd's) keeps names and attributes as `always` does, but no file data:
//! it also sets `direct_io`, so every read and write of a file reaches the server.
//!
//! The mem backend defaults to `always`: the server is the only writer and every change
//! reaches it through the kernel, which updates or drops its own cached entries for the
//! changes it forwards; where it would not, the server sends invalidations. Explicit
//! `entry_timeout=`, `attr_timeout=` and `negative_timeout=` options override the preset.

use std::time::Duration;

use crate::types::{Attr, Entry, FileKind};

/// `-o direct_io=large`: the size from which a read-only open bypasses the page cache. A
/// `read(2)` of this much is one READ (the kernel's largest, `max_pages`) on such an open,
/// eight 128 KiB readahead READs on a cached one.
pub const DIRECT_READ_SIZE: u64 = 1 << 20;

/// A `-o cache=` preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Cache nothing: every lookup and `stat` reaches the server.
    Never,
    /// Short (1 s) timeouts, libfuse-like.
    Auto,
    /// Long (1 h) timeouts; coherence comes from invalidations.
    Always,
    /// `Always`'s timeouts, and no file data kept by the kernel (`direct_io`).
    Metadata,
}

impl CacheMode {
    /// Parses `never`, `auto`, `always` or `metadata`.
    pub fn parse(s: &str) -> Option<CacheMode> {
        match s {
            "never" | "none" => Some(CacheMode::Never),
            "auto" => Some(CacheMode::Auto),
            "always" => Some(CacheMode::Always),
            "metadata" => Some(CacheMode::Metadata),
            _ => None,
        }
    }

    /// The option's spelling.
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Never => "never",
            CacheMode::Auto => "auto",
            CacheMode::Always => "always",
            CacheMode::Metadata => "metadata",
        }
    }

    /// The timeout every kind of entry gets under this preset.
    fn timeout(self) -> Duration {
        match self {
            CacheMode::Never => Duration::ZERO,
            CacheMode::Auto => Duration::from_secs(1),
            CacheMode::Always | CacheMode::Metadata => Duration::from_secs(3600),
        }
    }
}

/// The preset a mount gets when `-o cache=` is not given.
pub const DEFAULT_CACHE_MODE: CacheMode = CacheMode::Always;

/// Resolved timeouts for one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// Name → inode validity.
    pub entry_timeout: Duration,
    /// Attribute validity.
    pub attr_timeout: Duration,
    /// Negative entry validity; zero means "reply ENOENT, cache nothing".
    pub negative_timeout: Duration,
    /// The preset these were derived from.
    pub mode: CacheMode,
}

impl CachePolicy {
    /// Derives the policy: the preset's timeouts, each overridden by its explicit option.
    pub fn derive(
        mode: Option<CacheMode>,
        entry: Option<Duration>,
        attr: Option<Duration>,
        negative: Option<Duration>,
    ) -> CachePolicy {
        let mode = mode.unwrap_or(DEFAULT_CACHE_MODE);
        let t = mode.timeout();
        CachePolicy {
            entry_timeout: entry.unwrap_or(t),
            attr_timeout: attr.unwrap_or(t),
            negative_timeout: negative.unwrap_or(t),
            mode,
        }
    }

    /// How long the kernel may keep `attr`: `attr_timeout`, except not at all for
    /// - a set-user-ID or set-group-ID regular file: a write the kernel passes straight to
    ///   the file's data (FUSE passthrough) clears those bits where the server does not see
    ///   it, and every exec and permission check must then see them gone;
    /// - attributes the backend says may change unseen (`unseen`, from
    ///   [`crate::Backend::attr_unseen_changes`]).
    ///
    /// Such files are rare, so asking each time costs little.
    pub fn attr_timeout_for(&self, attr: &Attr, unseen: bool) -> Duration {
        let set_id = u32::from(attr.perm) & (libc::S_ISUID | libc::S_ISGID) != 0;
        if unseen || (set_id && attr.kind == FileKind::Regular) {
            Duration::ZERO
        } else {
            self.attr_timeout
        }
    }

    /// A positive entry for `attr` (`unseen` as for [`CachePolicy::attr_timeout_for`]).
    pub fn entry(&self, attr: Attr, unseen: bool) -> Entry {
        Entry {
            attr_timeout: self.attr_timeout_for(&attr, unseen),
            attr: Some(attr),
            entry_timeout: self.entry_timeout,
        }
    }

    /// The reply to a lookup miss: a negative entry, or `None` to reply plain `ENOENT`.
    pub fn negative(&self) -> Option<Entry> {
        (!self.negative_timeout.is_zero()).then_some(Entry {
            attr: None,
            entry_timeout: self.negative_timeout,
            attr_timeout: Duration::ZERO,
        })
    }
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy::derive(None, None, None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_options_override_the_preset() {
        let p = CachePolicy::derive(
            Some(CacheMode::Never),
            None,
            None,
            Some(Duration::from_millis(2500)),
        );
        assert_eq!(p.entry_timeout, Duration::ZERO);
        assert_eq!(p.negative_timeout, Duration::from_millis(2500));
        assert!(p.negative().is_some());
        let d = CachePolicy::default();
        assert_eq!(d.mode, DEFAULT_CACHE_MODE);
        assert_eq!(d.entry_timeout, Duration::from_secs(3600));
    }

    #[test]
    fn zero_negative_timeout_means_plain_enoent() {
        let p = CachePolicy::derive(None, None, None, Some(Duration::ZERO));
        assert!(p.negative().is_none());
    }
}
