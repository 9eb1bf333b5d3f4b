//! Names: looking them up, making, removing, renaming and linking them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use memofs_core::{Attr, Backend, Caller, Errno, Ino, Result};

use super::{answer, Server};
use crate::reply::ReplyOut;
use crate::request::{Label, Op};
use crate::stats::Event;

impl<B: Backend> Server<B> {
    /// LOOKUP, SYMLINK, MKNOD, MKDIR, UNLINK, RMDIR, RENAME and LINK; a node made gets
    /// `label` (see [`super::labels`]).
    pub(super) fn names(
        &self,
        ino: Ino,
        caller: &Caller,
        op: &Op<'_>,
        label: Option<&Label<'_>>,
        out: &mut dyn ReplyOut,
    ) {
        let b = &*self.backend;
        let made = |out: &mut dyn ReplyOut, name, r: Result<Attr>| {
            let r = r.and_then(|a| {
                self.label_new(ino, Some(name), (&a, None), label)
                    .map(|()| a)
            });
            self.entry_reply(out, r)
        };
        match *op {
            Op::Lookup { name } => self.lookup(ino, caller, name, out),
            Op::Symlink { name, target } => made(out, name, b.symlink(caller, ino, name, target)),
            Op::Mknod {
                name,
                mode,
                rdev,
                umask,
            } => made(
                out,
                name,
                b.mknod(caller, ino, name, mode, self.umask(umask), rdev),
            ),
            Op::Mkdir { name, mode, umask } => made(
                out,
                name,
                b.mkdir(caller, ino, name, mode, self.umask(umask)),
            ),
            Op::Unlink { name } => answer(out, b.unlink(caller, ino, name), |out, ()| out.empty()),
            Op::Rmdir { name } => answer(out, b.rmdir(caller, ino, name), |out, ()| out.empty()),
            Op::Rename {
                name,
                new_parent,
                new_name,
                flags,
            } => answer(
                out,
                b.rename(caller, ino, name, new_parent, new_name, flags),
                |out, ()| out.empty(),
            ),
            Op::Link { inode, new_name } => {
                self.entry_reply(out, b.link(caller, inode, ino, new_name))
            }
            // Not of this family (see `Server::dispatch`).
            _ => out.error(Errno::ENOSYS),
        }
    }

    /// LOOKUP: a miss is a negative entry where the cache policy keeps them, noted where
    /// something other than the mount may create the name.
    fn lookup(&self, parent: Ino, caller: &Caller, name: &OsStr, out: &mut dyn ReplyOut) {
        let r = self.backend.lookup(caller, parent, name);
        self.stats.event(match r {
            Ok(_) => Event::LookupHit,
            Err(_) => Event::LookupMiss,
        });
        match r {
            // `.` and `..` of a node id: the kernel finding a file by its handle. A node that
            // is gone is a stale handle, never a name to remember as missing.
            Err(Errno::ENOENT | Errno::ESTALE) if matches!(name.as_bytes(), b"." | b"..") => {
                out.error(Errno::ESTALE)
            }
            Err(Errno::ENOENT) => match self.plan.cache.negative() {
                Some(neg) if self.backend.miss_may_be_kept(parent, name) => {
                    self.stats.event(Event::NegativeReply);
                    if !self.plan.sole_writer {
                        self.misses.note(parent, name);
                    }
                    out.entry(&neg);
                }
                _ => out.error(Errno::ENOENT),
            },
            r => self.entry_reply(out, r),
        }
    }
}
