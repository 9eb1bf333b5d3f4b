//! What the server knows of an inode's `security.capability` without asking the host (see
//! [`crate::xattr`] for when it may know it).

use std::sync::atomic::{AtomicU64, Ordering};

/// Whether an inode is known to have no `security.capability` on the host: bit 0 is the
/// knowledge, the other bits a generation bumped by every [`NoCaps::forget`], so that an
/// answer read from the host before a change cannot be recorded after it.
#[derive(Debug, Default)]
pub(crate) struct NoCaps(AtomicU64);

impl NoCaps {
    /// Known to have none.
    pub(crate) fn known(&self) -> bool {
        self.0.load(Ordering::Acquire) & 1 == 1
    }

    /// The state before asking the host (for [`NoCaps::record`]).
    pub(crate) fn snapshot(&self) -> u64 {
        self.0.load(Ordering::Acquire) & !1
    }

    /// The host said `ENODATA` to a question asked after `snapshot`: remember it, unless
    /// something was forgotten since.
    pub(crate) fn record(&self, snapshot: u64) {
        let _ =
            self.0
                .compare_exchange(snapshot, snapshot | 1, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// A file the server has just created (nobody can have given it capabilities yet):
    /// remember it has none, unless something was forgotten since its inode was made.
    pub(crate) fn created(&self) {
        self.record(0);
    }

    /// The attribute may have changed.
    pub(crate) fn forget(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some((v & !1).wrapping_add(2))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::NoCaps;

    #[test]
    fn an_answer_from_before_a_change_is_not_remembered() {
        let c = NoCaps::default();
        let before = c.snapshot();
        c.forget(); // the host changed attributes while the question was out
        c.record(before);
        assert!(!c.known());
        let s = c.snapshot();
        c.record(s);
        assert!(c.known());
        c.forget();
        assert!(!c.known());
    }

    #[test]
    fn created_counts_only_if_nothing_changed_since_the_inode_was_made() {
        let c = NoCaps::default();
        c.created();
        assert!(c.known());
        let d = NoCaps::default();
        d.forget();
        d.created();
        assert!(!d.known());
    }
}
