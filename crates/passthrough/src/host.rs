//! A host inode's identity, as the kernel gives it.

/// A host inode's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HostId {
    pub dev: u64,
    pub ino: u64,
}

impl HostId {
    pub(crate) fn of(st: &libc::statx) -> HostId {
        HostId {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
        }
    }
}
