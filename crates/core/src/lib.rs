//! Backend-neutral core of memofs.
//!
//! Everything a backend and the FUSE transport agree on lives here:
//! - [`ops::Backend`], the operations trait every backend implements;
//! - [`types`], the attribute, entry and directory-entry types;
//! - [`errno::Errno`], the error type every operation returns;
//! - [`cache::CachePolicy`], the one place where kernel cache timeouts are derived;
//! - [`atime::AtimePolicy`], the strictatime/relatime/noatime rule;
//! - [`invalidate::Invalidator`], how a backend reports changes the kernel did not see;
//! - [`options`], the `-o` option parser shared by the CLI, the tests and the benchmarks;
//! - [`migrate`], the state stream a backend that moves to another process writes;
//! - [`plan::MountPlan`], every mount-time choice, made once from the options and the
//!   backend's capabilities.
#![deny(missing_docs)]

pub mod atime;
pub mod cache;
pub mod errno;
pub mod idmap;
pub mod invalidate;
pub mod migrate;
pub mod mount_api;
pub mod mountinfo;
pub mod ops;
pub mod options;
pub mod plan;
pub mod time;
pub mod types;
pub mod xattrmap;

pub use atime::{AtimePolicy, AtomicAtime};
pub use cache::CachePolicy;
pub use errno::{Errno, Result};
pub use invalidate::Invalidator;
pub use ops::Backend;
pub use time::{AtomicTimestamp, Timestamp};
pub use types::*;
