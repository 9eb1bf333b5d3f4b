//! memofs's request layer: what a FUSE request means, for any backend and any transport.
//!
//! A transport (the `/dev/fuse` reader threads, the io_uring queues) decodes the kernel's
//! bytes into a [`Request`] and hands it to [`Server::handle`] with a [`ReplyOut`] that
//! encodes the answer. Everything FUSE adds on top of a [`memofs_core::Backend`] happens
//! here, once, for every transport:
//! - reply timeouts and negative entries, from the mount's [`memofs_core::CachePolicy`];
//! - which kernel caches an open may use, and FUSE passthrough backing files
//!   (one backing id per inode, registered through [`Kernel`] and, where the backend
//!   keeps the file, kept for the next open);
//! - clearing setuid/setgid/capabilities where the kernel leaves it to the server
//!   ([`privs`]);
//! - open-flag normalization, the umask the backend must apply, hiding `trusted.*` xattr
//!   names from unprivileged callers, the inode-flag ioctls;
//! - invalidations after changes the kernel did not see, sent from their own thread;
//! - request counters and latencies ([`stats`]).
//!
//! Lookup counting is the backend's (see [`memofs_core::Backend`]): an inode lives in the
//! backend's table until the kernel forgets it, so the count is taken where the inode is
//! handed out, under the lock that finds it, and a concurrent FORGET cannot free it between
//! the two. The layer only makes sure every request that wants a reply gets exactly one.
#![deny(missing_docs)]

mod backing;
mod ids;
pub mod invalidate;
pub mod ioctl;
mod keep;
pub mod kernel;
pub mod privs;
pub mod reply;
pub mod request;
mod running;
mod server;
pub mod stats;
mod xattrs;

pub use backing::BackingState;
pub use kernel::Kernel;
pub use reply::{FdSource, OpenOut, ReplyOut};
pub use request::{Kind, Label, Op, Payload, Request, WriteData};
pub use server::{Granted, Handled, Server};
pub use stats::Stats;
