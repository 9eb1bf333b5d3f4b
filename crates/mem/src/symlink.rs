//! Symbolic links: an immutable target.

/// A symlink's target.
pub struct Symlink {
    target: Box<[u8]>,
}

impl Symlink {
    /// A link to `target`.
    pub fn new(target: &[u8]) -> Symlink {
        Symlink {
            target: target.into(),
        }
    }

    /// The target bytes.
    pub fn target(&self) -> &[u8] {
        &self.target
    }

    /// What the target holds against `size=`.
    pub fn charged_bytes(&self) -> u64 {
        self.target.len() as u64
    }
}
