//! Attributes: GETATTR, STATX, SETATTR (with what a chown or truncate clears), READLINK,
//! STATFS, ACCESS; and extended attributes.

use std::ffi::OsStr;

use memofs_core::plan::BackendKind;
use memofs_core::{Attr, Backend, Caller, Errno, FileKind, Ino, Result, SetAttr, TimeSet};

use super::{answer, Server};
use crate::privs::{kill_privs, kill_suidgid, privileged};
use crate::reply::ReplyOut;
use crate::request::Op;

/// xattr names only privileged callers may see (as Linux filesystems hide them).
const TRUSTED: &[u8] = b"trusted.";

impl<B: Backend> Server<B> {
    /// GETATTR, STATX, SETATTR, READLINK, STATFS and ACCESS.
    pub(super) fn attributes(
        &self,
        ino: Ino,
        caller: &Caller,
        op: &Op<'_>,
        out: &mut dyn ReplyOut,
    ) {
        let b = &*self.backend;
        match *op {
            Op::Getattr { .. } => answer(out, b.getattr(ino), |out, a| {
                out.attr(&self.shown_attr(&a), self.attr_timeout(&a))
            }),
            Op::Statx { .. } => answer(out, b.getattr(ino), |out, a| {
                // The mem backend keeps the flags with the inode; an export would open the
                // host file to ask, for attributes Linux does not pass on yet (see
                // `memofs_proto::encode`).
                let iflags = match a.kind {
                    FileKind::Regular | FileKind::Directory
                        if self.plan.backend == BackendKind::Mem =>
                    {
                        b.get_flags(ino).ok()
                    }
                    _ => None,
                };
                out.statx(&self.shown_attr(&a), iflags, self.attr_timeout(&a))
            }),
            Op::Setattr {
                ref set,
                kill_suidgid,
            } => {
                let r = self.setattr(caller, ino, set, kill_suidgid);
                self.moved_times_if(&r, ino);
                answer(out, r, |out, a| {
                    out.attr(&self.shown_attr(&a), self.attr_timeout(&a))
                })
            }
            Op::Readlink => answer(out, b.readlink(ino), |out, t| out.data(&t)),
            Op::Statfs => answer(out, b.statfs(), |out, s| out.statfs(&s)),
            Op::Access => answer(out, b.getattr(ino), |out, _| out.empty()),
            // Not of this family (see `Server::dispatch`).
            _ => out.error(Errno::ENOSYS),
        }
    }

    /// `attr` as the kernel is shown it: the guest's owners, and a mount root flagged only
    /// where the kernel asked for submounts.
    pub(super) fn shown_attr(&self, attr: &Attr) -> Attr {
        Attr {
            mount_root: attr.mount_root && self.granted.submounts,
            ..crate::ids::guest_attr(&self.plan.ids, attr)
        }
    }

    /// SETXATTR, GETXATTR, LISTXATTR and REMOVEXATTR.
    /// Without extended attributes (`xattr=off`) each is answered `ENOSYS` (on a read-only
    /// mount SETXATTR and REMOVEXATTR get `EROFS` first, see `Server::dispatch`): the kernel
    /// then remembers that this kind of request is not served and fails it itself from then
    /// on (`EOPNOTSUPP`), so no request follows, not even the `security.capability` lookups
    /// it makes before each chown and a file's first write.
    pub(super) fn xattrs(&self, ino: Ino, caller: &Caller, op: &Op<'_>, out: &mut dyn ReplyOut) {
        if !self.plan.xattr {
            return out.error(Errno::ENOSYS);
        }
        let b = &*self.backend;
        let host_name = |name| crate::xattrs::host_name(&self.plan, name);
        match *op {
            Op::Setxattr {
                name,
                value,
                flags,
                acl_kill_sgid,
            } => match host_name(name) {
                Ok(name) => self.setxattr(caller, ino, (&name, value, flags), acl_kill_sgid, out),
                Err(e) => out.error(e),
            },
            Op::Getxattr { name, size } => {
                let r = host_name(name).and_then(|name| b.getxattr(ino, &name));
                xattr_reply(out, size, r)
            }
            Op::Listxattr { size } => self.listxattr(caller, ino, size, out),
            Op::Removexattr { name } => {
                let r = host_name(name).and_then(|name| b.removexattr(caller, ino, &name));
                self.moved_times_if(&r, ino);
                answer(out, r, |out, ()| out.empty())
            }
            // Not of this family (see `Server::dispatch`).
            _ => out.error(Errno::ENOSYS),
        }
    }

    /// SETATTR. A chown (and `chown(f, -1, -1)`, which arrives as a SETATTR that sets
    /// nothing) clears setuid, setgid and capabilities of a non-directory, as Linux's
    /// `chown_common` does; a truncate the kernel flags clears them on a regular file. The
    /// reply carries the new attributes, so the kernel needs no invalidation.
    fn setattr(&self, caller: &Caller, ino: Ino, set: &SetAttr, kill: bool) -> Result<Attr> {
        let b = &*self.backend;
        let mut set = *set;
        crate::ids::host_setattr(&self.plan.ids, &mut set)?;
        if set
            == (SetAttr {
                fh: set.fh,
                ..SetAttr::default()
            })
        {
            set.uid = Some(b.getattr(ino)?.uid);
        }
        if self.granted.writeback
            && set.size.is_some()
            && set.mtime.is_none()
            && set.ctime.is_none()
        {
            // Under the writeback cache the kernel keeps a regular file's mtime and ctime and
            // sends them whenever it moves them, as at a truncate that changes the size. A
            // truncate(2) to the size the file has comes without them: the kernel keeps both,
            // and so does the server, or they would jump once the kernel forgot the inode.
            let now = b.getattr(ino)?;
            if now.kind == FileKind::Regular && set.size == Some(now.size) {
                set.mtime = Some(TimeSet::At(now.mtime));
                set.ctime = Some(now.ctime);
            }
        }
        let attr = b.setattr(caller, ino, &set)?;
        let chown = set.uid.is_some() || set.gid.is_some();
        let killed = if chown && attr.kind != FileKind::Directory {
            kill_privs(b, caller, &attr, self.caps.as_deref())?
        } else {
            kill && kill_suidgid(b, caller, ino, self.caps.as_deref())?
        };
        if killed {
            b.getattr(ino)
        } else {
            Ok(attr)
        }
    }

    /// After a request that moved the times of `ino` without changing any entry (SETATTR,
    /// SETXATTR, REMOVEXATTR): a directory whose listing the kernel keeps must have it dropped
    /// if relatime now wants the next listing to reach the server. Sent before the reply, so
    /// the caller's next listing already finds the cache gone (the notification takes no lock
    /// the request holds: the kernel only bumps the inode's attribute version and drops the
    /// directory's pages).
    fn times_moved(&self, ino: Ino) {
        if !self.may_keep_listings() {
            return;
        }
        let Ok(attr) = self.backend.getattr(ino) else {
            return;
        };
        if attr.kind == FileKind::Directory && !self.keeper.may_keep(&attr) {
            if let Some(inv) = &self.invalidator {
                inv.inode_now(ino);
            }
        }
    }

    /// [`Server::times_moved`] after a request that succeeded.
    fn moved_times_if<T>(&self, r: &Result<T>, ino: Ino) {
        if r.is_ok() {
            self.times_moved(ino);
        }
    }

    /// SETXATTR (`what`: name, value, flags); setting an access ACL may clear setgid.
    fn setxattr(
        &self,
        caller: &Caller,
        ino: Ino,
        (name, value, flags): (&OsStr, &[u8], i32),
        acl_kill_sgid: bool,
        out: &mut dyn ReplyOut,
    ) {
        let b = &*self.backend;
        let mut r = b.setxattr(caller, ino, name, value, flags);
        if r.is_ok() && acl_kill_sgid {
            r = clear_setgid(b, caller, ino);
        }
        self.moved_times_if(&r, ino);
        answer(out, r, |out, ()| out.empty());
    }

    fn listxattr(&self, caller: &Caller, ino: Ino, size: u32, out: &mut dyn ReplyOut) {
        let r = self.backend.listxattr(ino).map(|list| {
            let mut list = crate::xattrs::guest_list(&self.plan, list);
            if !privileged(caller) {
                list = list
                    .split_inclusive(|&b| b == 0)
                    .filter(|name| !name.starts_with(TRUSTED))
                    .flatten()
                    .copied()
                    .collect();
            }
            list
        });
        xattr_reply(out, size, r);
    }
}

/// Clears setgid, as setting an access ACL does for a caller outside the file's group.
fn clear_setgid<B: Backend>(b: &B, caller: &Caller, ino: Ino) -> Result<()> {
    let mode = b.getattr(ino)?.perm as u32;
    if mode & libc::S_ISGID != 0 {
        let set = memofs_core::SetAttr {
            mode: Some(mode & !libc::S_ISGID),
            ..Default::default()
        };
        b.setattr(caller, ino, &set)?;
    }
    Ok(())
}

/// A GETXATTR/LISTXATTR answer: the size when asked with size 0, `ERANGE` when the value
/// does not fit.
fn xattr_reply(out: &mut dyn ReplyOut, size: u32, r: Result<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => out.xattr_size(v.len() as u32),
        Ok(v) if v.len() > size as usize => out.error(Errno::ERANGE),
        Ok(v) => out.data(&v),
        Err(e) => out.error(e),
    }
}
