//! Handles: OPEN, CREATE, TMPFILE, OPENDIR and the listings read through them, FLUSH and
//! the releases; which kernel caches an open may use, and its backing file.

use std::sync::Arc;

use memofs_core::cache::DIRECT_READ_SIZE;
use memofs_core::options::DirectIo;
use memofs_core::plan::BackendKind;
use memofs_core::{Attr, Backend, Caller, Errno, FileKind, Ino, Invalidator, Result};

use super::{answer, Server};
use crate::kernel::BackingWrites;
use crate::privs::privileged;
use crate::reply::{OpenOut, ReplyOut};
use crate::request::{Label, Op};
use crate::running::Running;

impl<B: Backend> Server<B> {
    /// OPEN, CREATE, TMPFILE, FLUSH, RELEASE, OPENDIR, READDIR(PLUS) and RELEASEDIR; a file
    /// made gets `label` (see [`super::labels`]).
    pub(super) fn handles(
        &self,
        ino: Ino,
        caller: &Caller,
        op: &Op<'_>,
        label: Option<&Label<'_>>,
        out: &mut dyn ReplyOut,
    ) {
        let b = &*self.backend;
        let labelled = |name, r: Result<(Attr, memofs_core::Opened)>| {
            r.and_then(|(a, o)| {
                self.label_new(ino, name, (&a, Some(o.fh)), label)
                    .map(|()| (a, o))
            })
        };
        match *op {
            Op::Open {
                flags,
                kill_suidgid,
            } => self.open(caller, ino, flags, kill_suidgid, out),
            Op::Create {
                name,
                mode,
                umask,
                flags,
            } => {
                let (umask, flags) = (self.umask(umask), self.open_flags(flags));
                let r = b.create(caller, ino, name, mode, umask, flags);
                self.created(caller, out, labelled(Some(name), r));
            }
            Op::Tmpfile { mode, umask, flags } => {
                let (umask, flags) = (self.umask(umask), self.open_flags(flags));
                let r = b.tmpfile(caller, ino, mode, umask, flags);
                self.created(caller, out, labelled(None, r));
            }
            // Under the writeback cache the kernel sends FLUSH at every close, after writing
            // back and checking for writeback errors itself; a backend that is its files' only
            // writer has nothing to add, and ENOSYS stops the kernel sending it (a round trip
            // per close of a file that was opened).
            Op::Flush { .. } if self.granted.writeback && self.plan.sole_writer => {
                answer(out, Err(Errno::ENOSYS), |_, ()| {})
            }
            Op::Flush { fh } => answer(out, b.flush(ino, fh), |out, ()| out.empty()),
            Op::Release { fh } => {
                self.running.released(ino, fh);
                if self.backings.writer_released(ino, fh) {
                    self.attrs_changed(ino);
                }
                answer(out, self.release(ino, fh), |out, ()| out.empty())
            }
            Op::Opendir { flags } => self.opendir(caller, ino, flags, out),
            Op::Readdir {
                fh, offset, plus, ..
            } => self.readdir(ino, fh, offset, plus, out),
            Op::Releasedir { fh } => answer(out, b.releasedir(ino, fh), |out, ()| out.empty()),
            // Not of this family (see `Server::dispatch`).
            _ => out.error(Errno::ENOSYS),
        }
    }

    /// OPEN. With passthrough the server never sees the writes, so an unprivileged open for
    /// writing drops setuid and setgid now rather than at the first write. A truncating open
    /// of a running program fails before the backend truncates (see [`crate::running`]).
    fn open(&self, caller: &Caller, ino: Ino, flags: i32, kill: bool, out: &mut dyn ReplyOut) {
        if self.running.refuses(ino, flags) {
            return out.error(Errno::ETXTBSY);
        }
        let r = self
            .backend
            .open(caller, ino, self.open_flags(self.noatime_flag(flags)))
            .and_then(|o| {
                let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
                let direct = self.reads_directly(ino, flags);
                self.open_out(caller, ino, o, writing, direct)
            });
        let o = match r {
            Ok(o) => o,
            Err(e) => return out.error(e),
        };
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let due = kill || (writing && o.backing_id.is_some() && !privileged(caller));
        match self.kill_privs(due, caller, ino) {
            Ok(()) => {
                if Running::is_exec(flags) {
                    self.running.opened(ino, o.fh);
                }
                out.opened(&o)
            }
            Err(e) => {
                // The kernel never sees this open: nothing may stay open for it.
                self.backings.writer_released(ino, o.fh);
                let _ = self.release(ino, o.fh);
                out.error(e);
            }
        }
    }

    /// `ino`'s attributes changed, or may change, in a way the kernel does not learn from the
    /// request: the attributes it caches go now, before the reply. A passthrough open that
    /// writes, at its OPEN and its RELEASE: what it writes through a shared mapping moves the
    /// backing file's mtime and ctime, and attributes given meanwhile have no validity (see
    /// `Server::entry`), so a `stat` during or after it asks afresh; an ioctl that set inode
    /// flags moved ctime.
    pub(super) fn attrs_changed(&self, ino: Ino) {
        if let Some(inv) = &self.invalidator {
            inv.attrs_now(ino);
        }
    }

    /// OPENDIR: declined where the kernel keeps every listing, else the backend's handle,
    /// with the listing kept while no listing could move atime (see `may_keep_listings`).
    fn opendir(&self, caller: &Caller, ino: Ino, flags: i32, out: &mut dyn ReplyOut) {
        // The flag first, then the rule again: a remount to `strictatime` that stored its
        // rule before this saw it either sees the flag or is seen here (`Server::remount`).
        if self.declines_opendir() {
            self.note_opendir_declined();
            if self.declines_opendir() {
                return out.error(Errno::ENOSYS);
            }
        }
        let flags = self.noatime_flag(flags);
        answer(out, self.backend.opendir(caller, ino, flags), |out, o| {
            let keep = self.may_keep_listings() && self.keep(ino, true);
            out.opened(&OpenOut {
                fh: o.fh,
                keep_cache: keep,
                cache_dir: keep,
                ..OpenOut::default()
            })
        })
    }

    /// How an open file of `ino` is served: through a backing file if the backend lends
    /// one and passthrough was granted, else through the server, keeping the pages the
    /// kernel has from earlier opens when nothing but the mount changes the file and no
    /// read could move atime now (see [`crate::keep`]).
    ///
    /// The kernel sends FLUSH at each `close(2)` only where the backend's close can fail
    /// ([`memofs_core::Opened::flush`]). No open of an append-only file gets a backing file
    /// ([`memofs_core::Opened::append_only`]; the kernel refuses to mix opens with and
    /// without one), and one that writes (`writing`) gets no page cache either: every write
    /// reaches the backend, and the kernel refuses shared writable mappings of it.
    ///
    /// An open the server serves bypasses the page cache where `direct_io=all` says so, where
    /// it appends to an append-only file, and where [`Self::reads_directly`] chose it
    /// (`direct`).
    ///
    /// An error: the kernel refused the backing file for a passing reason (see
    /// [`crate::backing`]); the backend's handle is released again and the open fails.
    fn open_out(
        &self,
        caller: &Caller,
        ino: Ino,
        opened: memofs_core::Opened,
        writing: bool,
        direct: bool,
    ) -> Result<OpenOut> {
        let fh = opened.fh;
        let backing_id = match self.kernel.as_deref() {
            Some(_) if opened.append_only || self.backing_moves_atime() => Ok(None),
            Some(k) => {
                let writes = self.backing_writes(caller);
                self.backings
                    .open(&*self.backend, k, &self.stats, (ino, fh), writes)
            }
            None => Ok(None),
        };
        let backing_id = backing_id.inspect_err(|_| {
            let _ = self.backend.release(ino, fh);
        })?;
        // See `attrs_changed`.
        if backing_id.is_some() && writing {
            self.backings.writer_opened(ino, fh);
            self.attrs_changed(ino);
        }
        let append_writer = opened.append_only && writing;
        let direct_io = backing_id.is_none()
            && (self.plan.direct_io == DirectIo::All || append_writer || direct);
        let keep_cache = !direct_io
            && backing_id.is_none()
            && (self.plan.keeps_across_opens() || self.backend.data_changes_reported())
            && self.keep(ino, false);
        Ok(OpenOut {
            fh,
            noflush: !opened.flush,
            direct_io,
            keep_cache,
            backing_id,
            ..OpenOut::default()
        })
    }

    /// Whether a backing file would move atime that the mount's rule keeps still: the kernel
    /// opens an export's backing file with the opener's flags, not the server's `O_NOATIME`,
    /// and its reads and mappings then touch the host file's atime by the host mount's rules.
    /// Under `noatime` an export's files are served through the server instead. (The mem
    /// backend's private tmpfs is mounted with the mount's rule.)
    fn backing_moves_atime(&self) -> bool {
        self.plan.backend == BackendKind::Passthrough && self.keeper.policy().never(false)
    }

    /// `direct_io=large`: whether an OPEN with `flags` of `ino` bypasses the page cache. Only
    /// read-only opens qualify (under the writeback cache the kernel keeps files' mtime
    /// itself and a direct write would never move it), only of regular files of at least
    /// [`DIRECT_READ_SIZE`] (a smaller file is read in one READ either way), not an exec
    /// open (the loader maps the program, and its pages are best kept). The plan in effect
    /// says `Large` only where the kernel keeps shared mappings of such opens
    /// (`FUSE_DIRECT_IO_ALLOW_MMAP`, see `memofs_proto::init::in_effect`), so that nothing a
    /// cached open allows fails on them.
    fn reads_directly(&self, ino: Ino, flags: i32) -> bool {
        self.plan.direct_io == DirectIo::Large
            && flags & libc::O_ACCMODE == libc::O_RDONLY
            && !Running::is_exec(flags)
            && self
                .backend
                .getattr(ino)
                .is_ok_and(|a| a.kind == FileKind::Regular && a.size >= DIRECT_READ_SIZE)
    }

    /// Whose privilege writes through a new backing registration carry (the kernel does a
    /// backing file's I/O with the credentials it was registered with, whoever writes): the
    /// server's where the backend is the files' only writer, since the mode the kernel checks
    /// and clears is then the real one; elsewhere the opener's, so that a setuid bit set
    /// behind the kernel's back after an unprivileged caller's open goes at that caller's
    /// next write, as the host would clear it. (A registration is shared by the inode's later
    /// opens: an unprivileged open of a file root already holds open writes with root's.)
    fn backing_writes(&self, caller: &Caller) -> BackingWrites {
        if self.plan.sole_writer || privileged(caller) {
            BackingWrites::Server
        } else {
            BackingWrites::Unprivileged
        }
    }

    /// Whether the kernel may keep its copy of `ino` (a directory: `dir`) now; if so, it is
    /// dropped again when relatime's day is up. Where no read of such an inode ever moves
    /// atime, the inode's attributes are not needed (nor asked of the backend).
    fn keep(&self, ino: Ino, dir: bool) -> bool {
        if self.keeper.keeps_always(dir) {
            return true;
        }
        let Ok(attr) = self.backend.getattr(ino) else {
            return false;
        };
        let keep = self.keeper.may_keep(&attr);
        if keep {
            self.relatime_refresh(&attr);
        }
        keep
    }

    /// See [`Keeper::served`].
    fn relatime_refresh(&self, attr: &Attr) {
        if let Some(inv) = &self.invalidator {
            let inv: Arc<dyn Invalidator> = inv.clone();
            self.keeper.served(attr, &inv);
        }
    }

    /// CREATE and TMPFILE: the new file's entry and its open. If the open cannot be given
    /// (a passing refusal of its backing file), the file stays created and the request fails.
    fn created(
        &self,
        caller: &Caller,
        out: &mut dyn ReplyOut,
        r: Result<(Attr, memofs_core::Opened)>,
    ) {
        let r = r.and_then(
            |(attr, o)| match self.open_out(caller, attr.ino, o, true, false) {
                Ok(open) => Ok((open, attr)),
                Err(e) => {
                    // The kernel never learns of the entry: its lookup is given back.
                    self.forget(attr.ino, 1);
                    Err(e)
                }
            },
        );
        answer(out, r, |out, (open, attr)| {
            out.created(&self.entry(attr), &open)
        });
    }
    /// Gives up an open handle of `ino`: the backend's handle, then the open's use of the
    /// backing file (which may outlive it: see [`crate::backing`]).
    fn release(&self, ino: Ino, fh: u64) -> Result<()> {
        let r = self.backend.release(ino, fh);
        if let Some(k) = &self.kernel {
            self.backings
                .release(&*self.backend, &**k, &self.stats, ino);
        }
        r
    }

    fn readdir(&self, ino: Ino, fh: u64, offset: u64, plus: bool, out: &mut dyn ReplyOut) {
        let r = self.backend.readdir(ino, fh, offset, plus, &mut |e| {
            let entry = e.attr.map(|a| self.entry_unsent(a));
            let taken = out.dirent(e, entry.as_ref());
            if let (true, Some(a)) = (taken, &e.attr) {
                self.backend.attr_sent(a);
            }
            taken
        });
        match r {
            Ok(()) => out.dir_done(),
            Err(e) => return out.error(e),
        }
        // A listing the kernel keeps (see `opendir`): drop it when relatime's day is up.
        if offset == 0 && self.declines_opendir() {
            if let Ok(attr) = self.backend.getattr(ino) {
                self.relatime_refresh(&attr);
            }
        }
    }

    /// Whether the kernel keeps directory listings: the backend is the only writer (so the
    /// kernel drops a listing whenever it changes through the mount) or it reports every
    /// other change as it happens ([`Backend::sees_every_change`]), and no atime rule forbids
    /// it; or the mount keeps what it was given anyway (a guest's `--cache=always`: a
    /// listing goes when a change of the directory's mtime shows after the long timeout)
    /// and no listing ever moves a directory's atime (`noatime`, `nodiratime`, a read-only
    /// mount), since under `relatime` only the check at each OPENDIR keeps the rule there
    /// (see [`Self::may_keep_listings`]). Then OPENDIR is answered `ENOSYS`, once: the
    /// kernel stops sending OPENDIR and RELEASEDIR (two round trips per listing) and keeps
    /// every listing (`FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR`); each READDIR is served from the
    /// offset it names.
    fn declines_opendir(&self) -> bool {
        let kept = self.plan.sole_writer || self.backend.sees_every_change();
        let kept_anyway = self.plan.keeps_across_opens() && self.keeper.keeps_always(true);
        (kept || kept_anyway) && self.keeper.listings_kept()
    }

    /// Whether the kernel may keep directory listings at all: as above, or the backend
    /// reports every change to names made behind the kernel's back (a passthrough export
    /// whose watcher marks the whole filesystem), or the mount keeps what it was given
    /// anyway (a guest's `--cache=always`, see
    /// [`memofs_core::plan::MountPlan::keeps_across_opens`]). Then each OPENDIR the backend
    /// answers asks the kernel to keep the listing (`FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR`)
    /// while no listing could move the directory's atime, as for file pages at OPEN.
    pub(super) fn may_keep_listings(&self) -> bool {
        (self.plan.keeps_across_opens() || self.backend.name_changes_reported())
            && self.keeper.listings_kept()
    }

    /// An OPEN's or OPENDIR's `flags` without `O_NOATIME` where the plan drops it.
    fn noatime_flag(&self, flags: i32) -> i32 {
        match self.plan.noatime_opens {
            true => flags,
            false => flags & !libc::O_NOATIME,
        }
    }

    /// Open flags as the backend honours them: under the writeback cache the kernel reads
    /// pages of write-only files too, so those are opened read-write.
    fn open_flags(&self, flags: i32) -> i32 {
        if self.granted.writeback && flags & libc::O_ACCMODE == libc::O_WRONLY {
            (flags & !libc::O_ACCMODE) | libc::O_RDWR
        } else {
            flags
        }
    }
}
