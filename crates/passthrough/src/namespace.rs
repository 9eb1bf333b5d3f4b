//! Names: lookup, creating and removing entries, rename and link.
//!
//! Every call names one component (checked by [`crate::name`]) relative to the `O_PATH`
//! descriptor of a directory in the inode table. Lookups go through `openat2` with
//! [`PassthroughFs::resolve`] (`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_SYMLINKS`): with `O_PATH | O_NOFOLLOW` a symlink is returned as itself, never
//! followed, and nothing can resolve above the directory. `..` is the one name that must go
//! up; it is resolved by hand and checked to lead back to the export root.

use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use memofs_core::{rename_flags, Attr, Caller, Errno, Ino, Result, ROOT_INO};

use crate::attr::{attr_of, host_dev};
use crate::creds::CallerUmask;
use crate::fd::ProcSelf;
use crate::host::HostId;
use crate::inode::Inode;
use crate::name::{self, Lookup};
use crate::sys;
use crate::PassthroughFs;

/// Flags of the `O_PATH` descriptor each inode keeps.
pub(crate) const PATH_FLAGS: i32 = libc::O_PATH | libc::O_NOFOLLOW;

impl PassthroughFs {
    /// Takes a reference to the host inode `fd` refers to; returns it with its attributes.
    pub(crate) fn reference_fd(&self, fd: OwnedFd) -> Result<(Arc<Inode>, Attr)> {
        let st = sys::at::statx_fd(fd.as_fd())?;
        self.reference_stat(fd, &st)
    }

    /// [`Self::reference_fd`] of `fd`, whose attributes are `st`.
    fn reference_stat(&self, fd: OwnedFd, st: &libc::statx) -> Result<(Arc<Inode>, Attr)> {
        let inode = self
            .table
            .reference(fd, st, &self.pins, |fd| self.budget.keep(fd))?;
        let attr = attr_of(inode.ino, st)?;
        Ok((inode, attr))
    }

    /// Resolves the ordinary name `name` in `dir` and takes a reference to what it names.
    pub(crate) fn lookup_name(&self, dir: &Inode, name: &CStr) -> Result<(Arc<Inode>, Attr)> {
        let fd = sys::at::openat2(dir.fd()?.as_fd(), name, PATH_FLAGS, 0, self.resolve)?;
        // A name changed elsewhere a moment ago: the source's client may still hold it.
        let st = if self.table.settling.is_settling(dir.ino) {
            sys::at::statx_fd_sync(fd.as_fd()).map_err(|e| match e {
                Errno::ESTALE => Errno::ENOENT,
                e => e,
            })?
        } else {
            sys::at::statx_fd(fd.as_fd())?
        };
        self.reference_stat(fd, &st)
    }

    /// LOOKUP, including `.` and `..`.
    pub(crate) fn lookup_any(&self, parent: Ino, name: &OsStr) -> Result<Attr> {
        let dir = self.table.get(parent)?;
        let (_inode, attr) = match name::lookup(name)? {
            // Gone on another machine a moment ago, though the source may still show it.
            Lookup::Name(name) if self.table.settling.is_gone(dir.ino, name.as_bytes()) => {
                return Err(Errno::ENOENT)
            }
            Lookup::Name(name) => self.lookup_name(&dir, &name)?,
            Lookup::Dot => self.reference_again(&dir)?,
            Lookup::DotDot if dir.ino == ROOT_INO => self.reference_again(&dir)?,
            Lookup::DotDot => self.reference_fd(self.parent_beneath_root(&dir)?)?,
        };
        Ok(attr)
    }

    fn reference_again(&self, inode: &Arc<Inode>) -> Result<(Arc<Inode>, Attr)> {
        let attr = self.attr(inode)?;
        self.table.reference_again(inode)?;
        Ok((inode.clone(), attr))
    }

    /// `..` of `dir`, after checking that walking up from it reaches the export root: a
    /// directory moved out of the export on the host must not lead the kernel above it.
    fn parent_beneath_root(&self, dir: &Inode) -> Result<OwnedFd> {
        let flags = PATH_FLAGS | libc::O_DIRECTORY;
        let parent = sys::at::openat(dir.fd()?.as_fd(), c"..", flags)?;
        self.walks_up_to_root(parent.as_fd())?;
        Ok(parent)
    }

    /// Whether walking up from the directory `start` reaches the export root (`ENOENT` if it
    /// reaches the host's `/` first: the directory is not in the export).
    ///
    /// On the server's private copy of the source's mount, whose root is the export root,
    /// the kernel answers in one `openat(start, "..")`: it refuses (`ENOENT`) to go up from
    /// a directory that is no longer below its mount's root (`path_connected`, a walk of
    /// the directory's ancestors in memory), so the cost does not grow with depth. On the
    /// host's own mount the server walks up itself: a directory tree has no cycles, so the
    /// walk ends, at any depth (as tmpfs, the export sets no limit on nesting), at two
    /// system calls per level.
    fn walks_up_to_root(&self, start: BorrowedFd<'_>) -> Result<()> {
        let flags = PATH_FLAGS | libc::O_DIRECTORY;
        if self.export.private {
            sys::at::openat(start, c"..", flags)?;
            return Ok(());
        }
        let root = self.table.root().host;
        let mut cur = sys::at::openat(start, c".", flags)?;
        loop {
            let here = HostId::of(&sys::at::statx_fd(cur.as_fd())?);
            if here == root {
                return Ok(());
            }
            let up = sys::at::openat(cur.as_fd(), c"..", flags)?;
            if HostId::of(&sys::at::statx_fd(up.as_fd())?) == here {
                // At the host's `/` without passing the export root.
                return Err(Errno::ENOENT);
            }
            cur = up;
        }
    }

    /// The directory `dir` to change names in, if it is still in the export: one a host user
    /// moved out is no longer part of it, and names are neither made nor removed there
    /// (`ENOENT`, as for a directory removed). Nothing to check where nothing can leave the
    /// export (its source is its filesystem's root, with no other filesystem mounted below
    /// it). A directory moved out between this check and the change is not caught: the
    /// check narrows what a host user's move can do, it does not lock the host's tree.
    pub(crate) fn exported_dir(&self, dir: Arc<Inode>) -> Result<Arc<Inode>> {
        if dir.ino != ROOT_INO && !self.names_stay_inside {
            self.walks_up_to_root(dir.fd()?.as_fd())?;
        }
        Ok(dir)
    }

    /// Runs `make(parent_fd, name)` with the caller's credentials, then looks the new entry
    /// up (one reference, as FUSE counts for mknod/mkdir/symlink).
    fn make_node(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        make: impl FnOnce(BorrowedFd<'_>, &CStr) -> Result<()>,
    ) -> Result<Attr> {
        let dir = self.exported_dir(self.table.get(parent)?)?;
        let name = name::component(name)?;
        {
            let _creds = self.as_caller(caller);
            make(dir.fd()?.as_fd(), &name)?;
        }
        self.table.settling.made(dir.ino, name.as_bytes());
        Ok(self.lookup_name(&dir, &name)?.1)
    }

    /// MKNOD (`rdev` in the kernel's FUSE encoding), under the caller's `umask`.
    pub(crate) fn mknod_node(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<Attr> {
        self.make_node(caller, parent, name, |dir, name| {
            let guard = CallerUmask::set(umask);
            let mode = CallerUmask::mode(&guard, mode, umask);
            sys::at::mknodat(dir, name, mode, host_dev(rdev))
        })
    }

    /// MKDIR, under the caller's `umask`.
    pub(crate) fn mkdir_node(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        self.make_node(caller, parent, name, |dir, name| {
            let guard = CallerUmask::set(umask);
            sys::at::mkdirat(dir, name, CallerUmask::mode(&guard, mode, umask))
        })
    }

    /// SYMLINK: the target is stored as text and never resolved by the server.
    pub(crate) fn symlink_node(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        target: &OsStr,
    ) -> Result<Attr> {
        let target = name::c_string(target)?;
        self.make_node(caller, parent, name, |dir, name| {
            sys::at::symlinkat(&target, dir, name)
        })
    }

    /// UNLINK (`flags` 0) or RMDIR (`AT_REMOVEDIR`). Entries stay in the inode table until
    /// the kernel forgets them; their descriptors keep unlinked files readable.
    pub(crate) fn remove(&self, parent: Ino, name: &OsStr, flags: i32) -> Result<()> {
        let dir = self.exported_dir(self.table.get(parent)?)?;
        let name = name::component(name)?;
        let dir_fd = dir.fd()?;
        let last = self.last_link(dir_fd.as_fd(), &name);
        sys::at::unlinkat(dir_fd.as_fd(), &name, flags)?;
        self.number_freed(last);
        Ok(())
    }

    /// On a source that may give a removed object's inode number to the next one it makes
    /// ([`crate::watch::ExportMount::remote`]: SeaweedFS's mount does, at once, even while the
    /// server still holds a descriptor of the removed one), the host identity of `name` in
    /// `dir` if removing that name removes the object (its last link); `None` elsewhere.
    fn last_link(&self, dir: BorrowedFd<'_>, name: &CStr) -> Option<HostId> {
        if !self.export.remote {
            return None;
        }
        let st = sys::at::statx(dir, name).ok()?;
        let dir_kind = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        (dir_kind || st.stx_nlink <= 1).then(|| HostId::of(&st))
    }

    /// The object `last_link` named is gone: its number no longer identifies it, so the next
    /// object found under that number gets an inode of its own (the entry stays until the
    /// kernel forgets it).
    fn number_freed(&self, host: Option<HostId>) {
        if let Some(host) = host {
            self.table.detach_host(host);
        }
    }

    /// RENAME with `renameat2` flags; both names are single components in directories the
    /// kernel knows, so nothing can be moved across the export boundary.
    pub(crate) fn rename_entry(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        let known = rename_flags::NOREPLACE | rename_flags::EXCHANGE | rename_flags::WHITEOUT;
        if flags & !known != 0 {
            return Err(Errno::EINVAL);
        }
        let dir = self.exported_dir(self.table.get(parent)?)?;
        let new_dir = self.exported_dir(self.table.get(new_parent)?)?;
        let name = name::component(name)?;
        let new_name = name::component(new_name)?;
        let new_dir_fd = new_dir.fd()?;
        let replaced = match flags & rename_flags::EXCHANGE {
            0 => self.last_link(new_dir_fd.as_fd(), &new_name),
            _ => None,
        };
        sys::at::renameat2(
            dir.fd()?.as_fd(),
            &name,
            new_dir_fd.as_fd(),
            &new_name,
            flags,
        )?;
        self.table.settling.made(new_dir.ino, new_name.as_bytes());
        if flags & rename_flags::EXCHANGE != 0 {
            self.table.settling.made(dir.ino, name.as_bytes());
        }
        self.number_freed(replaced);
        Ok(())
    }

    /// LINK: a new name for an inode the server resolved beneath the root. Links through the
    /// inode's own descriptor (`AT_EMPTY_PATH`, which needs `CAP_DAC_READ_SEARCH`), else
    /// through its `/proc/self/fd` entry; neither resolves a host path.
    pub(crate) fn link_node(&self, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr> {
        let inode = self.table.get(ino)?;
        let new_dir = self.exported_dir(self.table.get(new_parent)?)?;
        let new_name = name::component(new_name)?;
        let (held, new_held) = (inode.fd()?, new_dir.fd()?);
        let (fd, new_fd) = (held.as_fd(), new_held.as_fd());
        let empty = sys::at::EMPTY;
        match sys::at::linkat(fd, empty, new_fd, &new_name, libc::AT_EMPTY_PATH) {
            Err(Errno::ENOENT | Errno::EPERM) => {
                let proc_name = ProcSelf::name(fd);
                let follow = libc::AT_SYMLINK_FOLLOW;
                sys::at::linkat(self.proc.dir(), &proc_name, new_fd, &new_name, follow)?
            }
            r => r?,
        }
        self.table.settling.made(new_dir.ino, new_name.as_bytes());
        Ok(self.reference_again(&inode)?.1)
    }
}
