//! Transport settings: what a mount asks of the kernel besides cache timeouts.

use memofs_core::options::{MountOptions, PassthroughMode};

/// Transport settings that are not cache timeouts.
#[derive(Clone, Copy, Debug)]
pub struct TransportConfig {
    /// Ask for the kernel writeback cache.
    pub writeback: bool,
    /// Open every file with `FOPEN_DIRECT_IO`.
    pub direct_io: bool,
    /// Hand regular files' backing fds to the kernel (FUSE passthrough) where the backend has
    /// them and the kernel allows it.
    pub passthrough: bool,
    /// Fail the mount if passthrough was asked for and the kernel does not offer it.
    pub passthrough_required: bool,
    /// Request threads.
    pub threads: usize,
    /// How long the reading thread polls for the next request (see [`crate::busy_poll`]).
    pub busy_poll: std::time::Duration,
}

impl TransportConfig {
    /// The settings a mount with `opts` uses, for a backend that can (`backing_fds`) or
    /// cannot hand the kernel file descriptors.
    pub fn for_mount(opts: &MountOptions, backing_fds: bool) -> TransportConfig {
        TransportConfig {
            writeback: opts.writeback,
            direct_io: opts.direct_io,
            passthrough: opts.passthrough != PassthroughMode::Off && backing_fds,
            passthrough_required: opts.passthrough == PassthroughMode::On && backing_fds,
            threads: opts.threads,
            busy_poll: opts.busy_poll,
        }
    }

    /// Whether INIT asks for the writeback cache: never together with passthrough, which
    /// excludes it. Backends that serve file data must know this before they are mounted.
    pub fn writeback_cache(&self) -> bool {
        self.writeback && !self.passthrough
    }
}
