//! What the kernel offered at INIT, as `memofs stats` shows it.

use std::sync::atomic::{AtomicU8, Ordering};

const NOT_OFFERED: u8 = 1;
const NOT_ASKED: u8 = 2;
const IN_USE: u8 = 3;

/// Kernel features learnt from the INIT handshake.
#[derive(Default)]
pub struct KernelFeatures {
    passthrough: AtomicU8,
}

impl KernelFeatures {
    /// INIT: whether the kernel offered FUSE passthrough (Linux 6.9+) and whether the mount
    /// uses it.
    pub fn passthrough_at_init(&self, offered: bool, used: bool) {
        let v = match (offered, used) {
            (_, true) => IN_USE,
            (true, false) => NOT_ASKED,
            (false, false) => NOT_OFFERED,
        };
        self.passthrough.store(v, Ordering::Relaxed);
    }

    /// `memofs stats` lines.
    pub fn lines(&self) -> Vec<(String, String)> {
        let passthrough = match self.passthrough.load(Ordering::Relaxed) {
            IN_USE => "yes: the kernel reads and writes backing files itself",
            NOT_ASKED => {
                "offered by the kernel, not used by this mount (the server serves file data)"
            }
            NOT_OFFERED => "no (needs Linux 6.9+ and root): the server serves file data",
            _ => "not known yet (before INIT)",
        };
        vec![("fuse_passthrough".into(), passthrough.into())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_init() {
        let f = KernelFeatures::default();
        assert!(f.lines()[0].1.contains("not known"));
        f.passthrough_at_init(false, false);
        assert!(f.lines()[0].1.starts_with("no"));
        f.passthrough_at_init(true, false);
        assert!(f.lines()[0].1.starts_with("offered"));
        f.passthrough_at_init(true, true);
        assert!(f.lines()[0].1.starts_with("yes"));
    }
}
