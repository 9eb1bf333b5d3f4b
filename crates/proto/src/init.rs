//! The INIT handshake: what memofs asks of the kernel, from the mount plan, and what the
//! kernel granted.

use memofs_core::options::{DirectIo, Want};
use memofs_core::plan::{MountPlan, Passthrough};
use memofs_request::Granted;
use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{self, init};
use crate::decode::Proto;

/// Largest WRITE (and READ) the kernel may send: it caps requests at
/// `fs.fuse.max_pages_limit` pages (256 here, so 1 MiB).
pub const MAX_WRITE: u32 = 1 << 20;
/// Requests the kernel may have in flight in the background (readahead, writeback).
const MAX_BACKGROUND: u16 = 64;

/// What every memofs mount asks for.
const ALWAYS: u64 = init::ASYNC_READ
    | init::BIG_WRITES
    | init::MAX_PAGES
    | init::DO_READDIRPLUS
    | init::READDIRPLUS_AUTO
    | init::PARALLEL_DIROPS
    | init::ATOMIC_O_TRUNC
    | init::CACHE_SYMLINKS
    | init::ASYNC_DIO
    | init::SETXATTR_EXT
    | init::INIT_EXT
    // Every backend applies the caller's umask itself (or a default ACL instead of it), so
    // the kernel must not apply it first.
    | init::DONT_MASK
    // The server clears setuid/setgid on write, truncate and chown, so the kernel need not
    // look up security.capability before every write.
    | init::HANDLE_KILLPRIV_V2
    // A kernel capability, not a request (echoing it changes nothing): names changed
    // elsewhere are expired rather than unhashed, so a working directory stays one.
    | init::HAS_EXPIRE_ONLY;

/// The outcome of INIT.
#[derive(Clone, Debug)]
pub struct Negotiated {
    /// The reply to send (already cut to the size the kernel's minor version expects).
    pub reply: Vec<u8>,
    /// What the request layer must know.
    pub granted: Granted,
    /// What decoding must know.
    pub proto: Proto,
    /// The protocol minor version in use.
    pub minor: u32,
    /// The kernel offered FUSE passthrough (whether or not the plan asked for it).
    pub passthrough_offered: bool,
    /// Requests come through io_uring ring entries.
    pub uring: bool,
    /// The kernel offered FUSE-over-io_uring.
    pub uring_offered: bool,
    /// What the kernel offered that this mount did not take (INIT capability bits).
    pub offered_unused: u64,
}

/// INIT's arguments from a request body: an older kernel sends a shorter `fuse_init_in`, and
/// what it leaves out reads as zero.
pub fn init_in(body: &[u8]) -> abi::fuse_init_in {
    let mut i = abi::fuse_init_in::new_zeroed();
    let len = body.len().min(std::mem::size_of::<abi::fuse_init_in>());
    i.as_mut_bytes()[..len].copy_from_slice(&body[..len]);
    i
}

/// The kernel's INIT capability bits by name (`include/uapi/linux/fuse.h`), for
/// [`offered_names`].
const NAMES: [&str; 43] = [
    "ASYNC_READ",
    "POSIX_LOCKS",
    "FILE_OPS",
    "ATOMIC_O_TRUNC",
    "EXPORT_SUPPORT",
    "BIG_WRITES",
    "DONT_MASK",
    "SPLICE_WRITE",
    "SPLICE_MOVE",
    "SPLICE_READ",
    "FLOCK_LOCKS",
    "HAS_IOCTL_DIR",
    "AUTO_INVAL_DATA",
    "DO_READDIRPLUS",
    "READDIRPLUS_AUTO",
    "ASYNC_DIO",
    "WRITEBACK_CACHE",
    "NO_OPEN_SUPPORT",
    "PARALLEL_DIROPS",
    "HANDLE_KILLPRIV",
    "POSIX_ACL",
    "ABORT_ERROR",
    "MAX_PAGES",
    "CACHE_SYMLINKS",
    "NO_OPENDIR_SUPPORT",
    "EXPLICIT_INVAL_DATA",
    "MAP_ALIGNMENT",
    "SUBMOUNTS",
    "HANDLE_KILLPRIV_V2",
    "SETXATTR_EXT",
    "INIT_EXT",
    "INIT_RESERVED",
    "SECURITY_CTX",
    "HAS_INODE_DAX",
    "CREATE_SUPP_GROUP",
    "HAS_EXPIRE_ONLY",
    "DIRECT_IO_ALLOW_MMAP",
    "PASSTHROUGH",
    "NO_EXPORT_SUPPORT",
    "HAS_RESEND",
    "ALLOW_IDMAP",
    "OVER_IO_URING",
    "REQUEST_TIMEOUT",
];

/// The names of the INIT capability bits in `bits` (a bit with no name here as `bit N`):
/// what `memofs stats` lists as offered and not taken, so a capability a newer kernel
/// offers shows up by itself.
pub fn offered_names(bits: u64) -> Vec<String> {
    (0..64)
        .filter(|b| bits & (1 << b) != 0)
        .map(|b| {
            NAMES
                .get(b)
                .map_or_else(|| format!("bit {b}"), |n| n.to_string())
        })
        .collect()
}

/// Why INIT could not complete.
#[derive(Debug, PartialEq, Eq)]
pub enum InitError {
    /// The kernel speaks another major version.
    Version(u32, u32),
    /// The plan requires FUSE passthrough, which the kernel did not offer.
    NoPassthrough,
    /// The plan requires FUSE-over-io_uring, which the kernel did not offer.
    NoUring,
    /// The plan labels new nodes, and the kernel does not send their labels.
    NoSecurityCtx,
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Version(major, minor) => write!(
                f,
                "the kernel speaks FUSE protocol {major}.{minor}; memofs needs 7.x"
            ),
            InitError::NoPassthrough => write!(
                f,
                "passthrough=on, but this kernel does not offer FUSE passthrough (Linux 6.9+, root): mount with passthrough=auto or off"
            ),
            InitError::NoSecurityCtx => write!(
                f,
                "--security-label, but this kernel does not send security labels of new files (FUSE_SECURITY_CTX, Linux 5.17+): start without --security-label"
            ),
            InitError::NoUring => write!(
                f,
                "io_uring=on, but this kernel does not offer FUSE-over-io_uring: it needs Linux 6.14+ and the module parameter set by root for the whole host (echo Y > /sys/module/fuse/parameters/enable_uring; memofs never sets it), or mount with io_uring=auto or off"
            ),
        }
    }
}

/// The kernel's 64 capability bits from its INIT request.
fn offered(i: &abi::fuse_init_in) -> u64 {
    let low = i.flags as u64;
    if low & init::INIT_EXT != 0 {
        low | (i.flags2 as u64) << 32
    } else {
        low
    }
}

/// The plan as INIT left it: what it asked for and the kernel did not grant is off (the plan
/// is what `memofs stats` shows as the mount's settings).
pub fn in_effect(mut plan: MountPlan, granted: Granted) -> MountPlan {
    plan.posix_acl &= granted.posix_acl;
    if plan.direct_io == DirectIo::Large && !granted.direct_io_allow_mmap {
        log::warn!(
            "direct_io=large: this kernel keeps no shared mappings of direct opens \
             (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6+), so every open stays cached"
        );
        plan.direct_io = DirectIo::Off;
    }
    plan
}

/// Answers the kernel's INIT `i` as `plan` says.
pub fn negotiate(i: &abi::fuse_init_in, plan: &MountPlan) -> Result<Negotiated, InitError> {
    if i.major != abi::KERNEL_VERSION {
        return Err(InitError::Version(i.major, i.minor));
    }
    let minor = i.minor.min(abi::KERNEL_MINOR_VERSION);
    let offered = offered(i);
    let mut wanted = ALWAYS;
    if plan.passthrough != Passthrough::Off {
        wanted |= init::PASSTHROUGH;
    }
    if plan.writeback() {
        wanted |= init::WRITEBACK_CACHE;
    }
    if plan.posix_acl {
        wanted |= init::POSIX_ACL;
    }
    if plan.io_uring != Want::Off {
        wanted |= init::OVER_IO_URING;
    }
    if plan.announce_submounts {
        wanted |= init::SUBMOUNTS;
    }
    if plan.exports_handles() {
        wanted |= init::EXPORT_SUPPORT;
    }
    if plan.security_label != Want::Off {
        wanted |= init::SECURITY_CTX;
    }
    if plan.keeps_across_opens() && !plan.sole_writer {
        // Pages kept from one open to the next while changes made elsewhere cannot be told:
        // a new mtime in attributes fetched again drops them (a new size does anyway).
        wanted |= init::AUTO_INVAL_DATA;
    }
    if plan.direct_io == DirectIo::Large {
        // Shared mappings of a file opened for direct reads, kept coherent by the kernel
        // (it writes dirty pages back before each direct read of their range).
        wanted |= init::DIRECT_IO_ALLOW_MMAP;
    }
    let flags = wanted & offered;
    let has = |f| flags & f != 0;
    if plan.passthrough == Passthrough::Required && !has(init::PASSTHROUGH) {
        return Err(InitError::NoPassthrough);
    }
    if plan.io_uring == Want::On && !has(init::OVER_IO_URING) {
        return Err(InitError::NoUring);
    }
    if plan.security_label == Want::On && !has(init::SECURITY_CTX) {
        return Err(InitError::NoSecurityCtx);
    }
    let mut out = abi::fuse_init_out::new_zeroed();
    out.major = abi::KERNEL_VERSION;
    out.minor = abi::KERNEL_MINOR_VERSION;
    out.max_readahead = i.max_readahead.min(MAX_WRITE);
    out.flags = flags as u32;
    out.flags2 = (flags >> 32) as u32;
    out.max_background = MAX_BACKGROUND;
    out.congestion_threshold = MAX_BACKGROUND * 3 / 4;
    out.max_write = MAX_WRITE;
    out.time_gran = 1;
    out.max_pages = (MAX_WRITE / 4096) as u16;
    if has(init::PASSTHROUGH) {
        // Backing files are on ordinary filesystems: one level of stacking.
        out.max_stack_depth = 1;
    }
    let size = match i.minor {
        0..5 => 8,
        5..23 => 24,
        _ => std::mem::size_of::<abi::fuse_init_out>(),
    };
    Ok(Negotiated {
        reply: out.as_bytes()[..size].to_vec(),
        granted: Granted {
            passthrough: has(init::PASSTHROUGH),
            writeback: has(init::WRITEBACK_CACHE),
            dont_mask: has(init::DONT_MASK),
            posix_acl: has(init::POSIX_ACL),
            inc_epoch: minor >= 44,
            expire_only: has(init::HAS_EXPIRE_ONLY),
            direct_io_allow_mmap: has(init::DIRECT_IO_ALLOW_MMAP),
            submounts: has(init::SUBMOUNTS),
        },
        proto: Proto {
            setxattr_ext: has(init::SETXATTR_EXT),
            security_ctx: has(init::SECURITY_CTX),
        },
        minor,
        passthrough_offered: offered & init::PASSTHROUGH != 0,
        uring: has(init::OVER_IO_URING),
        uring_offered: offered & init::OVER_IO_URING != 0,
        offered_unused: offered & !flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::options::parse_options;
    use memofs_core::plan::BackendKind;
    use memofs_core::Capabilities;
    use zerocopy::FromBytes;

    fn kernel(minor: u32, flags: u64) -> abi::fuse_init_in {
        let mut i = abi::fuse_init_in::new_zeroed();
        i.major = 7;
        i.minor = minor;
        i.max_readahead = 128 << 10;
        i.flags = (flags as u32) | init::INIT_EXT as u32;
        i.flags2 = (flags >> 32) as u32;
        i
    }

    fn plan(opts: &[&str], caps: Capabilities) -> MountPlan {
        let o = parse_options(opts, 8 << 30).unwrap();
        let mut p = MountPlan::new(&o, BackendKind::Mem, true);
        p.adopt(caps);
        p
    }

    const ALL: u64 = u64::MAX;

    #[test]
    fn capabilities_offered_and_not_taken_are_named() {
        assert_eq!(
            offered_names(init::PASSTHROUGH | init::ASYNC_READ | 1 << 50),
            ["ASYNC_READ", "PASSTHROUGH", "bit 50"]
        );
        let n = negotiate(
            &kernel(45, init::ASYNC_READ | 1 << 1),
            &plan(&[], Capabilities::default()),
        );
        let unused = offered_names(n.unwrap().offered_unused);
        assert_eq!(unused, ["POSIX_LOCKS"], "INIT_EXT is taken");
    }

    #[test]
    fn asks_only_for_what_the_plan_wants_and_the_kernel_offers() {
        let caps = Capabilities {
            backing_fds: true,
            sole_writer: true,
            posix_acl: false,
            unseen_writers: false,
            atime_elsewhere: false,
        };
        let n = negotiate(&kernel(45, ALL), &plan(&[], caps)).unwrap();
        assert!(n.granted.passthrough && !n.granted.writeback && !n.granted.posix_acl);
        assert!(n.granted.inc_epoch && n.proto.setxattr_ext);
        assert!(
            n.granted.expire_only,
            "offered by the kernel, nothing to ask"
        );
        assert!(
            !n.granted.direct_io_allow_mmap,
            "asked only for direct reads"
        );
        let large_plan = plan(&["direct_io=large"], caps);
        let large = negotiate(&kernel(45, ALL), &large_plan).unwrap();
        assert!(large.granted.direct_io_allow_mmap);
        let kept = in_effect(large_plan.clone(), large.granted);
        assert_eq!(kept.direct_io, DirectIo::Large);
        // Without shared mappings of direct opens, every open stays cached.
        let refused = in_effect(large_plan, Granted::default());
        assert_eq!(refused.direct_io, DirectIo::Off);
        let out = abi::fuse_init_out::read_from_bytes(&n.reply).unwrap();
        assert_eq!(out.max_stack_depth, 1);
        assert_eq!(out.max_readahead, 128 << 10);
        // 6.1 speaks 7.38: no epoch; nothing offered, nothing granted.
        let n = negotiate(&kernel(38, 0), &plan(&[], caps)).unwrap();
        assert_eq!(n.granted, Granted::default());
        assert_eq!(n.minor, 38);
    }

    #[test]
    fn a_guest_keeping_a_host_directorys_pages_drops_them_at_a_new_mtime() {
        let taken = |opts: &[&str], backend, caps| {
            let o = parse_options(opts, 8 << 30).unwrap();
            let mut p = MountPlan::new(&o, backend, true);
            p.without_notifications().unwrap();
            p.adopt(caps);
            let n = negotiate(&kernel(45, ALL), &p).unwrap();
            !offered_names(n.offered_unused).contains(&"AUTO_INVAL_DATA".to_string())
        };
        let host = Capabilities::default();
        assert!(taken(&["cache=always"], BackendKind::Passthrough, host));
        assert!(!taken(&["cache=auto"], BackendKind::Passthrough, host));
        let mem = Capabilities {
            sole_writer: true,
            ..host
        };
        assert!(!taken(&["cache=always"], BackendKind::Mem, mem));
    }

    #[test]
    fn required_passthrough_fails_without_it_and_old_kernels_get_short_replies() {
        let caps = Capabilities {
            backing_fds: true,
            ..Capabilities::default()
        };
        let p = plan(&["passthrough=on"], caps);
        assert_eq!(
            negotiate(&kernel(45, ALL & !init::PASSTHROUGH), &p).unwrap_err(),
            InitError::NoPassthrough
        );
        let n = negotiate(&kernel(22, 0), &plan(&[], caps)).unwrap();
        assert_eq!(n.reply.len(), 24);
        let mut bad = kernel(45, 0);
        bad.major = 8;
        assert!(matches!(
            negotiate(&bad, &p),
            Err(InitError::Version(8, 45))
        ));
    }
}
