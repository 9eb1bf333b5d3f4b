//! Operations that change names: create, link, unlink, rmdir, rename.
//!
//! Single-directory operations hold exactly one directory lock. Operations that need two
//! (rmdir: parent and victim; rename: both parents, and moved or replaced directories) take
//! `rename_lock` first, so at most one thread holds several directory locks at a time and
//! the others, holding one each, never wait for a second: no lock cycle can form.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use triomphe::Arc;

use memofs_core::{
    inode_flags, rename_flags, Caller, Errno, FileKind, Ino, Result, Timestamp, NAME_MAX, ROOT_INO,
};

use crate::dir::{Directory, Slot};
use crate::inode::{Inode, NodeData, Owner};
use crate::regular::RegularFile;
use crate::{acl, iflags, xattr, MemFs};

/// What a new inode is made of, besides its name.
pub(crate) struct NewInode {
    /// The requested mode, with the kind bits.
    pub mode: u32,
    /// The caller's umask, applied unless the directory has a default ACL; `None` for
    /// symlinks, whose mode is fixed and which take no ACL.
    pub umask: Option<u32>,
    /// The contents.
    pub data: NodeData,
}

/// About what a directory entry holds in memory besides the inode (name, slot, table): what
/// removing one lets the allocator reuse or hand back.
const NAME_MEMORY: u64 = 256;

/// What a directory's inode, its entry table and its name take of the heap, roughly, for the
/// same count when one goes.
const DIRECTORY_MEMORY: u64 = 512;

/// Rejects names the kernel would never send and the ones no filesystem may hold.
pub(crate) fn check_name(name: &OsStr) -> Result<()> {
    memofs_core::check_component(name.as_bytes())
}

/// Sets a directory inode's link count from its entries: 2 + subdirectories, or 0 once
/// removed.
fn sync_nlink_locked(inode: &Inode, dir: &Directory) {
    let n = if dir.removed { 0 } else { 2 + dir.subdirs };
    inode.nlink.store(n, Ordering::SeqCst);
}

impl MemFs {
    /// Owner and final mode of a new inode in `parent` (setgid directories pass their group
    /// on, and their setgid bit to new subdirectories).
    fn new_owner(caller: &Caller, parent: &Inode, mode: u32) -> (Owner, u32) {
        let pmeta = *parent.meta.lock();
        if pmeta.mode & libc::S_ISGID != 0 {
            let mode = if mode & libc::S_IFMT == libc::S_IFDIR {
                mode | libc::S_ISGID
            } else {
                mode
            };
            (
                Owner {
                    uid: caller.uid,
                    gid: pmeta.gid,
                },
                mode,
            )
        } else {
            (
                Owner {
                    uid: caller.uid,
                    gid: caller.gid,
                },
                mode,
            )
        }
    }

    /// Makes the inode `spec` describes for directory `pinode` (whose entries the caller
    /// has locked, or at least checked): charges it, gives it its owner, its mode after
    /// the directory's default ACL or the umask, its inherited ACLs and flags. It has no
    /// name, no link and no lookup reference yet.
    fn make_inode(&self, caller: &Caller, pinode: &Inode, spec: NewInode) -> Result<Arc<Inode>> {
        pinode.check_writable()?;
        let inherited = match spec.umask {
            Some(umask) => {
                let default = pinode.xattrs.lock().value(acl::DEFAULT).map(<[u8]>::to_vec);
                acl::inherit(default.as_deref(), spec.mode, umask)?
            }
            None => acl::Inherited {
                mode: spec.mode,
                access: None,
                default: None,
            },
        };
        let acls = [
            (acl::ACCESS, inherited.access),
            (acl::DEFAULT, inherited.default),
        ];
        let sym_bytes = match &spec.data {
            NodeData::Symlink(s) => s.charged_bytes(),
            _ => 0,
        };
        let acl_bytes: u64 = acls
            .iter()
            .filter_map(|(name, v)| Some(xattr::cost(name, v.as_ref()?)))
            .sum();
        let flags = pinode.iflags() & iflags::INHERITED;
        if let (true, NodeData::File(RegularFile::Kernel(k))) =
            (flags & inode_flags::NOATIME != 0, &spec.data)
        {
            k.set_noatime(true)?;
        }
        self.limits.charge_inode()?;
        if let Err(e) = self.charge_meta(sym_bytes + acl_bytes) {
            self.limits.uncharge_inode();
            return Err(e);
        }
        let (owner, mode) = Self::new_owner(caller, pinode, inherited.mode);
        // One reading for all four times, and none later than a time the kernel stamps on
        // the file afterwards (it keeps a file's mtime itself under the writeback cache): a
        // kernel-backed file's atime and mtime are its data file's, stamped when it was made,
        // so that instant is its birth; anything else is born at the kernel's coarse clock.
        let born = match &spec.data {
            NodeData::File(RegularFile::Kernel(k)) => k.times().map(|[_, mtime, _]| mtime),
            _ => None,
        };
        let born = born.unwrap_or_else(Timestamp::coarse_now);
        let inode = self.table.insert(mode, owner, spec.data, born);
        inode.flags.store(flags, Ordering::Release);
        let mut x = inode.xattrs.lock();
        for (name, value) in &acls {
            if let Some(v) = value {
                x.set(name, v);
            }
        }
        drop(x);
        Ok(inode)
    }

    /// Creates a new inode called `name` in `parent`; the kernel gets one lookup reference.
    pub(crate) fn create_node(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        spec: NewInode,
    ) -> Result<Arc<Inode>> {
        check_name(name)?;
        let pinode = self.table.get(parent)?;
        let mut dir = pinode.dir()?.write();
        if dir.removed {
            return Err(Errno::ENOENT);
        }
        if dir.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let inode = self.make_inode(caller, &pinode, spec)?;
        inode.nlink.store(
            if inode.kind() == FileKind::Directory {
                2
            } else {
                1
            },
            Ordering::SeqCst,
        );
        inode.inc_lookup(1);
        dir.insert(name, inode.ino, inode.kind());
        sync_nlink_locked(&pinode, &dir);
        pinode.touch_modified(Timestamp::now());
        Ok(inode)
    }

    /// Creates an inode with no name in directory `parent` (`O_TMPFILE`; `linkable` unless
    /// `O_EXCL`); the kernel gets one lookup reference. The directory does not change.
    pub(crate) fn create_unnamed(
        &self,
        caller: &Caller,
        parent: Ino,
        spec: NewInode,
        linkable: bool,
    ) -> Result<Arc<Inode>> {
        let pinode = self.table.get(parent)?;
        let dir = pinode.dir()?.read();
        if dir.removed {
            return Err(Errno::ENOENT);
        }
        let inode = self.make_inode(caller, &pinode, spec)?;
        drop(dir);
        if linkable {
            inode.flags.fetch_or(iflags::LINKABLE, Ordering::AcqRel);
        }
        inode.inc_lookup(1);
        Ok(inode)
    }

    /// Looks `name` up in `parent` without taking a reference.
    pub(crate) fn find(&self, parent: Ino, name: &OsStr) -> Result<Arc<Inode>> {
        if name.as_bytes().len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let pinode = self.table.get(parent)?;
        if name.as_bytes() == b"." {
            // Any kind: the kernel finds a node it forgot by its id this way (a file handle),
            // unless its data went with its last name.
            return match pinode.iflags() & iflags::DATA_FREED {
                0 => Ok(pinode),
                _ => Err(Errno::ESTALE),
            };
        }
        let ino = {
            let dir = pinode.dir()?.read();
            match name.as_bytes() {
                b".." => dir.parent,
                _ => dir.get(name).ok_or(Errno::ENOENT)?.ino,
            }
        };
        self.table.get(ino).map_err(|_| Errno::ENOENT)
    }

    /// One name of the non-directory `inode` went: an extra name's inode charge goes back
    /// (the last name's goes with the inode, in [`Self::evict_if_dead`]), and the memory of
    /// the name counts towards handing freed memory back to the system.
    fn link_removed(&self, inode: &Inode) {
        if inode.drop_link() > 0 {
            self.limits.uncharge_inode();
        } else {
            self.free_if_unreachable(inode);
        }
        crate::reclaim::pages_freed(NAME_MEMORY);
    }

    /// A regular file with no name left and no open (after its last unlink, or its last
    /// close) gives its data back at once, as on tmpfs, rather than when the kernel forgets
    /// the inode: its FORGET comes later, and a `df` right after `rm` would still count it.
    pub(crate) fn free_if_unreachable(&self, inode: &Inode) {
        let NodeData::File(f) = &inode.data else {
            return;
        };
        if inode.nlink.load(Ordering::SeqCst) == 0 && inode.unreachable_after_unlink() {
            let _ = self.empty_file(inode, f);
        }
    }

    /// Truncates regular file `inode` (its data `f`) to nothing, as an `O_TRUNC` open does:
    /// the charges go back, and the data counts as changed (its times move, a migration's
    /// pre-copy sends the change).
    pub(crate) fn empty_file(&self, inode: &Inode, f: &RegularFile) -> Result<()> {
        let old = f.size();
        f.truncate(&self.limits, 0)?;
        self.data_changed(inode, 0, old);
        Ok(())
    }

    /// Frees `inode` if nothing can reach it any more.
    pub(crate) fn evict_if_dead(&self, inode: &Inode) {
        let (bytes, inodes) = self.table.evict_if_dead(inode);
        self.uncharge_meta(bytes);
        if inodes != 0 {
            self.limits.uncharge_inode();
        }
    }

    pub(crate) fn do_link(
        &self,
        ino: Ino,
        new_parent: Ino,
        new_name: &OsStr,
    ) -> Result<Arc<Inode>> {
        check_name(new_name)?;
        let inode = self.table.get(ino)?;
        if inode.kind() == FileKind::Directory {
            return Err(Errno::EPERM);
        }
        let pinode = self.table.get(new_parent)?;
        let mut dir = pinode.dir()?.write();
        if dir.removed {
            return Err(Errno::ENOENT);
        }
        if dir.get(new_name).is_some() {
            return Err(Errno::EEXIST);
        }
        pinode.check_writable()?;
        inode.check_changeable()?;
        // An unlinked inode gets no name again, but for an O_TMPFILE one's first.
        if inode.nlink.load(Ordering::SeqCst) == 0
            && inode.flags.fetch_and(!iflags::LINKABLE, Ordering::AcqRel) & iflags::LINKABLE == 0
        {
            return Err(Errno::ENOENT);
        }
        // As tmpfs: every name beyond the first is charged as an inode (an O_TMPFILE's
        // first name is the one it was charged for).
        let extra = inode.nlink.load(Ordering::SeqCst) > 0;
        if extra {
            self.limits.charge_inode()?;
        }
        dir.insert(new_name, inode.ino, inode.kind());
        inode.nlink.fetch_add(1, Ordering::SeqCst);
        inode.inc_lookup(1);
        let now = Timestamp::now();
        inode.set_ctime(now);
        pinode.touch_modified(now);
        Ok(inode)
    }

    pub(crate) fn do_unlink(&self, parent: Ino, name: &OsStr) -> Result<()> {
        let pinode = self.table.get(parent)?;
        let victim = {
            let mut dir = pinode.dir()?.write();
            let slot = dir.get(name).ok_or(Errno::ENOENT)?;
            if slot.kind == FileKind::Directory {
                return Err(Errno::EISDIR);
            }
            let victim = self.table.get(slot.ino)?;
            pinode.check_changeable()?;
            victim.check_changeable()?;
            dir.remove(name);
            self.link_removed(&victim);
            let now = Timestamp::now();
            victim.set_ctime(now);
            pinode.touch_modified(now);
            victim
        };
        self.evict_if_dead(&victim);
        Ok(())
    }

    pub(crate) fn do_rmdir(&self, parent: Ino, name: &OsStr) -> Result<()> {
        match name.as_bytes() {
            b"." => return Err(Errno::EINVAL),
            b".." => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let _rename = self.rename_lock.lock();
        let pinode = self.table.get(parent)?;
        let victim = {
            let mut dir = pinode.dir()?.write();
            let slot = dir.get(name).ok_or(Errno::ENOENT)?;
            if slot.kind != FileKind::Directory {
                return Err(Errno::ENOTDIR);
            }
            let victim = self.table.get(slot.ino)?;
            pinode.check_changeable()?;
            victim.check_changeable()?;
            {
                let mut vdir = victim.dir()?.write();
                if !vdir.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
                vdir.removed = true;
                sync_nlink_locked(&victim, &vdir);
            }
            dir.remove(name);
            sync_nlink_locked(&pinode, &dir);
            let now = Timestamp::now();
            victim.set_ctime(now);
            pinode.touch_modified(now);
            victim
        };
        crate::reclaim::pages_freed(DIRECTORY_MEMORY);
        self.evict_if_dead(&victim);
        Ok(())
    }

    /// RENAME. With `RENAME_WHITEOUT` the source name is left to a whiteout, a 0:0
    /// character device with mode 0 owned by the caller (as `shmem_whiteout` makes it).
    /// Steps: check the flags and names, lock both parents (in inode-number order, under
    /// `rename_lock`), check what may move where, then exchange or move.
    pub(crate) fn do_rename(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        let how = RenameHow::of(flags)?;
        check_name(new_name)?;
        if name.as_bytes() == b"." || name.as_bytes() == b".." {
            return Err(Errno::EBUSY);
        }
        let _rename = self.rename_lock.lock();
        let pinode = self.table.get(parent)?;
        let npinode = self.table.get(new_parent)?;
        pinode.dir()?;
        npinode.dir()?;
        // Lock the parents in inode-number order.
        let (mut pguard, mut nguard);
        let same = parent == new_parent;
        if same {
            pguard = Some(pinode.dir()?.write());
            nguard = None;
        } else if parent < new_parent {
            pguard = Some(pinode.dir()?.write());
            nguard = Some(npinode.dir()?.write());
        } else {
            nguard = Some(npinode.dir()?.write());
            pguard = Some(pinode.dir()?.write());
        }
        let pdir = pguard.as_deref_mut().expect("locked");
        let ndir = nguard.as_deref_mut();

        let src = pdir.get(name).ok_or(Errno::ENOENT)?;
        let dst = match &ndir {
            Some(d) => d.get(new_name),
            None => pdir.get(new_name),
        };
        if ndir.as_ref().is_some_and(|d| d.removed) {
            return Err(Errno::ENOENT);
        }
        if let Some(d) = dst {
            if d.ino == src.ino {
                // Same inode (same name, or two links of one file): nothing to do.
                return if how.exchange || !how.noreplace {
                    Ok(())
                } else {
                    Err(Errno::EEXIST)
                };
            }
        }
        let src_inode = self.table.get(src.ino)?;
        let dst_inode = match dst {
            Some(d) => Some(self.table.get(d.ino)?),
            None => None,
        };
        if let Some(nd) = ndir.as_deref() {
            self.check_not_below_itself_locked(how, (parent, &*pdir), (new_parent, nd), src, dst)?;
        }
        pinode.check_changeable()?;
        src_inode.check_changeable()?;
        npinode.check_writable()?;
        if let Some(d) = &dst_inode {
            npinode.check_changeable()?;
            d.check_changeable()?;
        }
        let mut r = Renaming {
            parent,
            new_parent,
            pdir,
            ndir,
            name,
            new_name,
            src,
            src_inode: &src_inode,
            now: Timestamp::now(),
        };
        match (how.exchange, dst, &dst_inode) {
            (true, Some(d), Some(d_inode)) => r.exchange_locked((d, d_inode))?,
            (true, _, _) => return Err(Errno::ENOENT),
            (false, dst, dst_inode) => {
                let dst = dst.zip(dst_inode.as_ref());
                self.move_locked(caller, &pinode, how, &mut r, dst)?;
            }
        }
        let now = r.now;
        sync_nlink_locked(&pinode, r.pdir);
        pinode.touch_modified(now);
        if let Some(nd) = r.ndir {
            sync_nlink_locked(&npinode, nd);
            npinode.touch_modified(now);
        }
        drop(pguard);
        drop(nguard);
        if let (false, Some(victim)) = (how.exchange, dst_inode) {
            self.evict_if_dead(&victim);
        }
        Ok(())
    }

    /// A directory may not move below itself (nor, in an exchange, the other one below
    /// the first's place). `pdir`, `ndir`: the two parents, locked by the caller.
    fn check_not_below_itself_locked(
        &self,
        how: RenameHow,
        (parent, pdir): (Ino, &Directory),
        (new_parent, ndir): (Ino, &Directory),
        src: Slot,
        dst: Option<Slot>,
    ) -> Result<()> {
        let ancestors = |start: Ino| -> Result<Vec<Ino>> {
            let mut chain = Vec::new();
            let mut cur = start;
            while cur != ROOT_INO && chain.len() < 1 << 20 {
                chain.push(cur);
                cur = if cur == parent {
                    pdir.parent
                } else if cur == new_parent {
                    ndir.parent
                } else {
                    self.table.get(cur)?.dir()?.read().parent
                };
            }
            Ok(chain)
        };
        if src.kind == FileKind::Directory && ancestors(new_parent)?.contains(&src.ino) {
            return Err(Errno::EINVAL);
        }
        if let Some(d) = dst.filter(|d| how.exchange && d.kind == FileKind::Directory) {
            if ancestors(parent)?.contains(&d.ino) {
                return Err(Errno::EINVAL);
            }
        }
        Ok(())
    }

    /// The move of a RENAME that is not an exchange: the target, if any, is replaced (it
    /// must be of the same kind, a directory empty), a whiteout is left if asked for.
    fn move_locked(
        &self,
        caller: &Caller,
        pinode: &Arc<Inode>,
        how: RenameHow,
        r: &mut Renaming<'_, '_>,
        dst: Option<(Slot, &Arc<Inode>)>,
    ) -> Result<()> {
        if let Some((d, _)) = dst {
            if how.noreplace {
                return Err(Errno::EEXIST);
            }
            match (
                r.src.kind == FileKind::Directory,
                d.kind == FileKind::Directory,
            ) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                _ => {}
            }
        }
        let whiteout = match how.whiteout {
            true => Some(self.make_inode(
                caller,
                pinode,
                NewInode {
                    mode: libc::S_IFCHR,
                    umask: Some(0),
                    data: NodeData::Special {
                        kind: FileKind::CharDevice,
                        rdev: 0,
                    },
                },
            )?),
            false => None,
        };
        if let Some((d, victim)) = dst {
            if d.kind == FileKind::Directory {
                let mut vdir = victim.dir()?.write();
                if !vdir.is_empty() {
                    if let Some(w) = &whiteout {
                        self.evict_if_dead(w);
                    }
                    return Err(Errno::ENOTEMPTY);
                }
                vdir.removed = true;
                sync_nlink_locked(victim, &vdir);
                crate::reclaim::pages_freed(DIRECTORY_MEMORY);
            } else {
                self.link_removed(victim);
            }
            victim.set_ctime(r.now);
        }
        let src = r.src;
        if r.ndir.is_none() && dst.is_none() {
            // Within one directory, to a new name: the entry keeps its place.
            r.pdir.rename_in_place(r.name, r.new_name);
        } else {
            r.pdir.remove(r.name);
            let target = r.ndir.as_deref_mut().unwrap_or(&mut *r.pdir);
            if dst.is_some() {
                target.replace(r.new_name, src.ino, src.kind);
            } else {
                target.insert(r.new_name, src.ino, src.kind);
            }
        }
        if let Some(w) = whiteout {
            w.nlink.store(1, Ordering::SeqCst);
            r.pdir.insert(r.name, w.ino, w.kind());
        }
        if r.ndir.is_some() && src.kind == FileKind::Directory {
            r.src_inode.dir()?.write().parent = r.new_parent;
        }
        r.src_inode.set_ctime(r.now);
        Ok(())
    }
}

/// What a RENAME's flags ask for.
#[derive(Clone, Copy)]
struct RenameHow {
    exchange: bool,
    noreplace: bool,
    whiteout: bool,
}

impl RenameHow {
    /// The flags of a RENAME, or `EINVAL` for unknown flags and ones that exclude each other.
    fn of(flags: u32) -> Result<RenameHow> {
        let how = RenameHow {
            exchange: flags & rename_flags::EXCHANGE != 0,
            noreplace: flags & rename_flags::NOREPLACE != 0,
            whiteout: flags & rename_flags::WHITEOUT != 0,
        };
        let known = rename_flags::EXCHANGE | rename_flags::NOREPLACE | rename_flags::WHITEOUT;
        if flags & !known != 0 || (how.exchange && (how.noreplace || how.whiteout)) {
            return Err(Errno::EINVAL);
        }
        Ok(how)
    }
}

/// A RENAME under way, its parents locked: `ndir` is the new parent's directory when it
/// differs from the old one's (`pdir`).
struct Renaming<'g, 'i> {
    parent: Ino,
    new_parent: Ino,
    pdir: &'g mut Directory,
    ndir: Option<&'g mut Directory>,
    name: &'i OsStr,
    new_name: &'i OsStr,
    src: Slot,
    src_inode: &'i Arc<Inode>,
    now: Timestamp,
}

impl Renaming<'_, '_> {
    /// RENAME_EXCHANGE: the two names swap inodes (and directories their parents).
    fn exchange_locked(&mut self, (dst, dst_inode): (Slot, &Arc<Inode>)) -> Result<()> {
        let src = self.src;
        self.pdir.replace(self.name, dst.ino, dst.kind);
        match self.ndir.as_deref_mut() {
            Some(nd) => nd.replace(self.new_name, src.ino, src.kind),
            None => self.pdir.replace(self.new_name, src.ino, src.kind),
        };
        if self.ndir.is_some() {
            if src.kind == FileKind::Directory {
                self.src_inode.dir()?.write().parent = self.new_parent;
            }
            if dst.kind == FileKind::Directory {
                dst_inode.dir()?.write().parent = self.parent;
            }
        }
        self.src_inode.set_ctime(self.now);
        dst_inode.set_ctime(self.now);
        Ok(())
    }
}
