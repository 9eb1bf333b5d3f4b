//! Telling the kernel that its cached answers went stale.
//!
//! Changes made through the mount need nothing: the kernel updates its own caches for the
//! requests it forwards. A backend that learns of changes another way (the host side of a
//! passthrough export) reports them to an [`Invalidator`], which the transport implements with
//! FUSE notifications (`NOTIFY_INVAL_ENTRY`, `NOTIFY_DELETE`, `NOTIFY_INVAL_INODE`, and
//! `NOTIFY_INC_EPOCH` for [`Invalidator::everything`]) sent from its own thread, never from
//! inside a request handler.

use std::ffi::OsStr;

use crate::types::Ino;

/// Receives "this cached answer is stale" reports from a backend.
pub trait Invalidator: Send + Sync {
    /// The name `name` in directory `parent` changed (appeared, disappeared or now names
    /// another inode): drop the kernel's positive or negative entry for it.
    fn entry(&self, parent: Ino, name: &OsStr);
    /// `child`, known as `name` in `parent`, was deleted.
    fn deleted(&self, parent: Ino, child: Ino, name: &OsStr);
    /// The attributes or data of `ino` changed.
    fn inode(&self, ino: Ino);
    /// Any cached name may be stale (reports were lost, or the user asked): drop every
    /// cached entry, positive and negative, so each name is looked up again.
    fn everything(&self);
}

/// An invalidator that drops every report (for backends used without a mount).
pub struct NoInvalidator;

impl Invalidator for NoInvalidator {
    fn entry(&self, _parent: Ino, _name: &OsStr) {}
    fn deleted(&self, _parent: Ino, _child: Ino, _name: &OsStr) {}
    fn inode(&self, _ino: Ino) {}
    fn everything(&self) {}
}
