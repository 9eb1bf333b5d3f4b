//! `Backend` for the mem filesystem: decoding arguments into the kind modules' operations.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use triomphe::Arc;

use memofs_core::ops::{FdRead, FdWrite};
use memofs_core::{
    inode_flags, Attr, Backend, BackendUsage, Caller, Capabilities, DirEntry, Errno, FileKind, Ino,
    Opened, Result, SetAttr, StatFs, TimeSet, Timestamp, NAME_MAX,
};

use crate::acl::{self, Acl, AclType};
use crate::inode::{Inode, NodeData};
use crate::namespace::NewInode;
use crate::regular::{RegularFile, PAGE_SIZE};
use crate::symlink::Symlink;
use crate::{iflags, xattr, MemFs};

/// Marks the handle of an open of an append-only file for writing (handles are the open
/// flags otherwise): its writes must append.
const APPEND_ONLY_OPEN: u64 = 1 << 63;

/// Whether a read through the handle `fh` (which carries its open's flags) moves atime: not
/// for an `O_NOATIME` open, as on tmpfs.
fn moves_atime(fh: u64) -> bool {
    fh as u32 as i32 & libc::O_NOATIME == 0
}

impl MemFs {
    /// `f` of regular file `ino` and its data, for the operations that move data through a
    /// descriptor where there is one (`None` from `f`: there is none).
    fn with_regular<T>(
        &self,
        ino: Ino,
        f: impl FnOnce(&Inode, &RegularFile) -> Option<Result<T>>,
    ) -> Option<Result<T>> {
        match self.table.get(ino) {
            Ok(inode) => match inode.file() {
                Ok(file) => f(&inode, file),
                Err(e) => Some(Err(e)),
            },
            Err(e) => Some(Err(e)),
        }
    }

    /// WRITE. Through an open of an append-only file, only at the end (`O_APPEND` cleared
    /// with `fcntl` makes the kernel send other offsets, which tmpfs would have refused at
    /// the `fcntl`). `stamp`: mtime and ctime become now.
    fn write_stamped(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        data: &[u8],
        stamp: bool,
    ) -> Result<u32> {
        let inode = self.table.get(ino)?;
        if fh & APPEND_ONLY_OPEN != 0 && offset != inode.attr().size {
            return Err(Errno::EPERM);
        }
        let n = inode.file()?.write(&self.limits, offset, data)?;
        let end = offset + u64::from(n);
        match stamp {
            true => self.data_changed(&inode, offset, end),
            false => self.data_dirtied(inode.ino, offset, end),
        }
        Ok(n)
    }

    fn open_file(&self, inode: &Arc<Inode>, flags: i32) -> Result<Opened> {
        let file = inode.file()?;
        inode.check_open(flags)?;
        if !inode.open_if_reachable() {
            // The file lost its last name before this open reached it.
            return Err(Errno::ENOENT);
        }
        // Linux truncates even for O_RDONLY|O_TRUNC (the kernel checked write permission).
        if flags & libc::O_TRUNC != 0 {
            if let Err(e) = self.empty_file(inode, file) {
                self.table.close(inode);
                return Err(e);
            }
        }
        if let Some(k) = file.kernel() {
            k.open();
        }
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let append_only = inode.iflags() & inode_flags::APPEND != 0;
        let marker = if append_only && writing {
            APPEND_ONLY_OPEN
        } else {
            0
        };
        Ok(Opened {
            fh: flags as u32 as u64 | marker,
            flush: false,
            append_only,
        })
    }

    /// A regular file to create (and open at once) with `mode` under the caller's `umask`.
    fn new_file_spec(&self, mode: u32, umask: u32) -> Result<NewInode> {
        Ok(NewInode {
            mode: libc::S_IFREG | (mode & 0o7777),
            umask: Some(umask),
            data: NodeData::File(self.new_regular(true)?),
        })
    }

    /// Sets (`value` = `Some`) or removes an ACL, with what that does to the mode (see
    /// [`crate::acl`]). As for tmpfs: a default ACL is for directories only (`EACCES`,
    /// but removing one from anything else succeeds), removing an absent ACL succeeds, and
    /// `XATTR_CREATE`/`XATTR_REPLACE` do not apply.
    fn set_acl(
        &self,
        caller: &Caller,
        inode: &Inode,
        ty: AclType,
        value: Option<&[u8]>,
    ) -> Result<()> {
        let acl = match value {
            Some(v) => Acl::from_xattr(v)?,
            None => None,
        };
        if ty == AclType::Default && inode.kind() != FileKind::Directory {
            return match acl {
                Some(_) => Err(Errno::EACCES),
                None => Ok(()),
            };
        }
        inode.check_changeable()?;
        let in_group = ty == AclType::Default || {
            let gid = inode.meta.lock().gid;
            caller.in_group(gid)
        };
        let mut meta = inode.meta.lock();
        let mut mode = meta.mode;
        let mut keep = acl;
        if ty == AclType::Access {
            if let Some(a) = &keep {
                let (m, not_equiv) = a.equiv_mode(mode);
                mode = m;
                keep = keep.filter(|_| not_equiv);
            }
            // posix_acl_update_mode: set by someone outside the file's group.
            if !in_group {
                mode &= !libc::S_ISGID;
            }
        }
        let value = keep.map(|a| a.to_xattr());
        {
            let name = ty.name();
            let mut x = inode.xattrs.lock();
            let old = x.value(name).map_or(0, |v| xattr::cost(name, v));
            let new = value.as_ref().map_or(0, |v| xattr::cost(name, v));
            if new > old {
                self.charge_meta(new - old)?;
            } else {
                self.uncharge_meta(old - new);
            }
            match &value {
                Some(v) => x.set(name, v),
                None => {
                    let _ = x.remove(name);
                }
            }
        }
        meta.mode = mode;
        drop(meta);
        inode.set_ctime(Timestamp::now());
        Ok(())
    }
}

/// Rewrites `inode`'s access ACL, if any, for its new mode (`posix_acl_chmod`); the
/// caller holds the `meta` lock, so the ACL's size does not change.
fn chmod_acl(inode: &Inode, mode: u32) {
    let mut x = inode.xattrs.lock();
    if let Some(Ok(Some(mut a))) = x.value(acl::ACCESS).map(Acl::from_xattr) {
        a.chmod(mode);
        x.set(acl::ACCESS, &a.to_xattr());
    }
}

impl Backend for MemFs {
    fn lookup(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<Attr> {
        let inode = self.find(parent, name)?;
        inode.inc_lookup(1);
        Ok(inode.attr())
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        if let Ok(inode) = self.table.get(ino) {
            if self.table.forget(&inode, nlookup) {
                self.evict_if_dead(&inode);
            }
        }
    }

    fn forget_all(&self) {
        for inode in self.table.all() {
            self.table.forget_every(&inode);
            self.evict_if_dead(&inode);
        }
    }

    fn release_all(&self) {
        for inode in self.table.all() {
            if self.table.close_all(&inode) > 0 {
                if let Some(k) = inode.kernel_file() {
                    k.close_all();
                }
                self.evict_if_dead(&inode);
            }
        }
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.table.get(ino)?.attr())
    }

    fn setattr(&self, _caller: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let inode = self.table.get(ino)?;
        inode.check_setattr(set)?;
        let now = set.ctime.unwrap_or_else(Timestamp::now);
        if let Some(size) = set.size {
            // As tmpfs: a truncate updates mtime and ctime even when the size stays.
            let file = inode.file()?;
            let old = file.size();
            file.truncate(&self.limits, size)?;
            // What a file grows by is a hole; only what it loses changes.
            self.data_changed(&inode, size, old);
            inode.touch_modified(now);
        }
        {
            let mut meta = inode.meta.lock();
            if let Some(mode) = set.mode {
                meta.mode = (meta.mode & libc::S_IFMT) | (mode & 0o7777);
                chmod_acl(&inode, meta.mode);
            }
            if let Some(uid) = set.uid {
                meta.uid = uid;
            }
            if let Some(gid) = set.gid {
                meta.gid = gid;
            }
        }
        let resolve = |t: TimeSet| match t {
            TimeSet::Now => now,
            TimeSet::At(t) => t,
        };
        let (atime, mtime) = (set.atime.map(resolve), set.mtime.map(resolve));
        if let Some(t) = atime {
            inode.set_atime(t);
        }
        if let Some(t) = mtime {
            inode.set_mtime(t);
        }
        if let (NodeData::File(RegularFile::Kernel(k)), true) =
            (&inode.data, atime.is_some() || mtime.is_some())
        {
            k.set_times(atime, mtime)?;
        }
        inode.set_ctime(now);
        Ok(inode.attr())
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        match &self.table.get(ino)?.data {
            NodeData::Symlink(s) => Ok(s.target().to_vec()),
            _ => Err(Errno::EINVAL),
        }
    }

    fn mknod(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<Attr> {
        let data = match FileKind::from_mode(mode) {
            Some(FileKind::Regular) => NodeData::File(self.new_regular(false)?),
            Some(kind @ (FileKind::CharDevice | FileKind::BlockDevice)) => {
                NodeData::Special { kind, rdev }
            }
            Some(kind @ (FileKind::Fifo | FileKind::Socket)) => NodeData::Special { kind, rdev: 0 },
            Some(FileKind::Directory) => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        let spec = NewInode {
            mode,
            umask: Some(umask),
            data,
        };
        Ok(self.create_node(caller, parent, name, spec)?.attr())
    }

    fn mkdir(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        let spec = NewInode {
            mode: libc::S_IFDIR | (mode & 0o7777),
            umask: Some(umask),
            data: NodeData::new_dir(parent),
        };
        Ok(self.create_node(caller, parent, name, spec)?.attr())
    }

    fn unlink(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<()> {
        self.do_unlink(parent, name)
    }

    fn rmdir(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<()> {
        self.do_rmdir(parent, name)
    }

    fn symlink(&self, caller: &Caller, parent: Ino, name: &OsStr, target: &OsStr) -> Result<Attr> {
        let t = target.as_bytes();
        if t.is_empty() {
            return Err(Errno::ENOENT);
        }
        if t.len() >= PAGE_SIZE as usize {
            return Err(Errno::ENAMETOOLONG);
        }
        let spec = NewInode {
            mode: libc::S_IFLNK | 0o777,
            umask: None,
            data: NodeData::Symlink(Symlink::new(t)),
        };
        Ok(self.create_node(caller, parent, name, spec)?.attr())
    }

    fn rename(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        self.do_rename(caller, parent, name, new_parent, new_name, flags)
    }

    fn link(&self, _caller: &Caller, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr> {
        Ok(self.do_link(ino, new_parent, new_name)?.attr())
    }

    fn open(&self, _caller: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        let inode = self.table.get(ino)?;
        self.open_file(&inode, flags)
    }

    fn create(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        let spec = self.new_file_spec(mode, umask)?;
        match self.create_node(caller, parent, name, spec) {
            Ok(inode) => {
                let opened = self.open_file(&inode, flags & !libc::O_TRUNC)?;
                Ok((inode.attr(), opened))
            }
            Err(Errno::EEXIST) if flags & libc::O_EXCL == 0 => {
                // Lost a race with another creator: open what is there, as open(2) would.
                let inode = self.find(parent, name)?;
                let opened = self.open_file(&inode, flags)?;
                inode.inc_lookup(1);
                Ok((inode.attr(), opened))
            }
            Err(e) => Err(e),
        }
    }

    fn tmpfile(
        &self,
        caller: &Caller,
        parent: Ino,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        let spec = self.new_file_spec(mode, umask)?;
        let linkable = flags & libc::O_EXCL == 0;
        let inode = self.create_unnamed(caller, parent, spec, linkable)?;
        let open_flags = flags & !(libc::O_TMPFILE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        match self.open_file(&inode, open_flags) {
            Ok(opened) => Ok((inode.attr(), opened)),
            Err(e) => {
                self.forget(inode.ino, 1);
                Err(e)
            }
        }
    }

    fn read(&self, ino: Ino, fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        let inode = self.table.get(ino)?;
        inode.file()?.read(offset, size, buf, !moves_atime(fh))?;
        if moves_atime(fh) {
            inode.touch_atime(&self.atime.load());
        }
        Ok(())
    }

    fn read_with(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        buf: &mut Vec<u8>,
        send: &mut dyn FnMut(&[&[u8]]),
    ) -> Result<()> {
        let inode = self.table.get(ino)?;
        // atime moves before the reply goes out: a GETATTR the reader sends once it has its
        // data must find it moved.
        let noatime = !moves_atime(fh);
        inode
            .file()?
            .read_with(offset, size, buf, noatime, &mut |parts| {
                if !noatime {
                    inode.touch_atime(&self.atime.load());
                }
                send(parts)
            })
    }

    /// READ of kernel-backed data, read from its data file where it goes; the page store's
    /// data is served by `read_with`.
    fn read_from_fd(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        read: &mut FdRead<'_>,
    ) -> Option<Result<usize>> {
        self.with_regular(ino, |inode, file| {
            let r = file.read_from_fd(offset, size, !moves_atime(fh), read)?;
            // atime moves before the reply goes out, as for `read_with`.
            if r.is_ok() && moves_atime(fh) {
                inode.touch_atime(&self.atime.load());
            }
            Some(r)
        })
    }

    fn write(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_stamped(ino, fh, offset, data, true)
    }

    /// [`Backend::write`] without moving the page store's times (a kernel-backed file's
    /// data file stamps itself).
    fn write_cached(&self, ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_stamped(ino, fh, offset, data, false)
    }

    /// WRITE into kernel-backed data from where the bytes lie (a guest's memory), with
    /// [`Backend::write`]'s checks and times.
    fn write_to_fd(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        write: &mut FdWrite<'_>,
    ) -> Option<Result<u32>> {
        self.with_regular(ino, |inode, file| {
            if fh & APPEND_ONLY_OPEN != 0 && offset != inode.attr().size {
                return Some(Err(Errno::EPERM));
            }
            let r = file.write_from(offset, write)?;
            if let Ok(n) = r {
                self.data_changed(inode, offset, offset + u64::from(n));
            }
            Some(r)
        })
    }

    fn release(&self, ino: Ino, _fh: u64) -> Result<()> {
        let inode = self.table.get(ino)?;
        if let Some(k) = inode.kernel_file() {
            k.close();
        }
        self.table.close(&inode);
        self.free_if_unreachable(&inode);
        self.evict_if_dead(&inode);
        Ok(())
    }

    fn fsync(&self, ino: Ino, _fh: u64, _datasync: bool) -> Result<()> {
        self.table.get(ino).map(|_| ())
    }

    /// A directory's handle carries whether its open was `O_NOATIME` (listing it then moves
    /// no atime, as on tmpfs).
    fn opendir(&self, _caller: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        self.table.get(ino)?.dir()?;
        Ok(Opened {
            fh: (flags & libc::O_NOATIME) as u32 as u64,
            ..Opened::default()
        })
    }

    fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        plus: bool,
        sink: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        let inode = self.table.get(ino)?;
        {
            let dir = inode.dir()?.read();
            let dots = [(1u64, ".", ino), (2, "..", dir.parent)];
            for (off, name, dino) in dots {
                if offset < off {
                    let e = DirEntry {
                        ino: dino,
                        offset: off,
                        kind: FileKind::Directory,
                        name: name.into(),
                        attr: None,
                    };
                    if !sink(&e) {
                        return Ok(());
                    }
                }
            }
            for (cookie, name, slot) in dir.entries_after(offset) {
                let child = if plus {
                    self.table.get(slot.ino).ok()
                } else {
                    None
                };
                let attr = child.as_ref().map(|c| c.attr());
                let e = DirEntry {
                    ino: slot.ino,
                    offset: cookie,
                    kind: slot.kind,
                    name: name.to_os_string(),
                    attr,
                };
                if !sink(&e) {
                    break;
                }
                if let Some(c) = child {
                    c.inc_lookup(1);
                }
            }
        }
        if moves_atime(fh) {
            inode.touch_atime(&self.atime.load());
        }
        Ok(())
    }

    fn releasedir(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }

    fn statfs(&self) -> Result<StatFs> {
        let l = &self.limits;
        let (blocks, free) = match &self.store {
            // File data is limited (and counted) by the kernel-backed store.
            Some(store) => {
                // Metadata is in there too, as the ballast.
                let (total, free) = store.usage()?;
                (total / PAGE_SIZE, free / PAGE_SIZE)
            }
            None => {
                let blocks = l.bytes_limit() / PAGE_SIZE;
                (blocks, blocks.saturating_sub(l.bytes().div_ceil(PAGE_SIZE)))
            }
        };
        let ffree = l.inodes_limit().saturating_sub(l.inodes());
        Ok(StatFs {
            blocks,
            bfree: free,
            bavail: free,
            files: l.inodes_limit(),
            ffree,
            bsize: PAGE_SIZE as u32,
            namelen: NAME_MAX as u32,
        })
    }

    fn setxattr(
        &self,
        caller: &Caller,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let inode = self.table.get(ino)?;
        let name = name.as_bytes();
        if let Some(ty) = AclType::of(name) {
            return self.set_acl(caller, &inode, ty, Some(value));
        }
        xattr::check_name(name)?;
        inode.check_changeable()?;
        {
            let mut x = inode.xattrs.lock();
            let (old, new) = x.plan_set(name, value, flags)?;
            if new > old {
                self.charge_meta(new - old)?;
            } else {
                self.uncharge_meta(old - new);
            }
            x.set(name, value);
        }
        inode.set_ctime(Timestamp::now());
        Ok(())
    }

    fn getxattr(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        let inode = self.table.get(ino)?;
        let x = inode.xattrs.lock();
        x.get(name.as_bytes()).map(|v| v.to_vec())
    }

    fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        Ok(self.table.get(ino)?.xattrs.lock().list())
    }

    fn removexattr(&self, caller: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        let inode = self.table.get(ino)?;
        let name = name.as_bytes();
        if let Some(ty) = AclType::of(name) {
            return self.set_acl(caller, &inode, ty, None);
        }
        xattr::check_name(name)?;
        inode.check_changeable()?;
        let freed = inode.xattrs.lock().remove(name)?;
        self.uncharge_meta(freed);
        inode.set_ctime(Timestamp::now());
        Ok(())
    }

    fn fallocate(&self, ino: Ino, _fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let inode = self.table.get(ino)?;
        inode.check_fallocate(mode)?;
        inode
            .file()?
            .fallocate(&self.limits, offset, length, mode)?;
        // Allocating keeps what the range reads (zeros where it was a hole); punching and
        // zeroing change it.
        let cleared = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        if cleared || mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            let end = if cleared {
                offset.saturating_add(length)
            } else {
                offset
            };
            self.data_changed(&inode, offset, end);
        }
        Ok(())
    }

    fn lseek(&self, ino: Ino, _fh: u64, offset: u64, whence: i32) -> Result<u64> {
        self.table.get(ino)?.file()?.seek(offset, whence)
    }

    fn copy_file_range(
        &self,
        ino_in: Ino,
        _fh_in: u64,
        offset_in: u64,
        ino_out: Ino,
        _fh_out: u64,
        offset_out: u64,
        len: u64,
    ) -> Result<u64> {
        self.table.get(ino_out)?.check_writable()?;
        self.copy_range(ino_in, offset_in, ino_out, offset_out, len)
    }

    fn usage(&self) -> BackendUsage {
        let kernel_bytes = self
            .store
            .as_ref()
            .and_then(|s| s.usage().ok())
            .map_or(0, |(total, free)| total - free);
        BackendUsage {
            // The private tmpfs holds file data and the ballast standing for metadata.
            bytes_used: if self.store.is_some() {
                kernel_bytes
            } else {
                self.limits.bytes()
            },
            bytes_limit: self.limits.bytes_limit(),
            inodes_used: self.limits.inodes(),
            inodes_limit: self.limits.inodes_limit(),
            ..BackendUsage::default()
        }
    }

    fn with_backing_fd(&self, ino: Ino, _fh: u64, use_fd: &mut dyn FnMut(BorrowedFd<'_>)) -> bool {
        let Ok(inode) = self.table.get(ino) else {
            return false;
        };
        let file = inode.kernel_file().and_then(|k| k.data_file());
        match file {
            Some(file) => {
                use_fd(file.as_fd());
                true
            }
            None => false,
        }
    }

    /// A kernel-backed file keeps its data file until its inode goes; an unlinked one
    /// lets the registration go at once so that its data is freed with the last close.
    fn keeps_backing(&self, ino: Ino) -> bool {
        self.table.get(ino).is_ok_and(|inode| {
            inode.nlink.load(Ordering::Relaxed) > 0 && inode.kernel_file().is_some()
        })
    }

    fn migration(&self) -> Option<&dyn memofs_core::migrate::Migrate> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backing_fds: self.store.is_some(),
            sole_writer: true,
            posix_acl: true,
            unseen_writers: false,
            atime_elsewhere: false,
        }
    }

    fn set_atime(
        &self,
        atime: memofs_core::AtimePolicy,
        _: bool,
    ) -> std::result::Result<(), String> {
        self.change_atime(atime)
    }
    fn directories_known(&self) -> Vec<Ino> {
        self.known_directories()
    }
    fn set_limits(&self, size: u64, nr_inodes: u64) -> std::result::Result<(), String> {
        self.change_limits(size, nr_inodes)
    }

    fn get_flags(&self, ino: Ino) -> Result<u32> {
        let inode = self.table.get(ino)?;
        match inode.kind() {
            FileKind::Regular | FileKind::Directory => Ok(inode.visible_flags()),
            _ => Err(Errno::ENOTTY),
        }
    }

    /// As tmpfs: immutable, append-only, no-dump and no-atime; anything else is
    /// `EOPNOTSUPP`. ctime changes even when the flags do not.
    fn set_flags(&self, _caller: &Caller, ino: Ino, flags: u32) -> Result<()> {
        let inode = self.table.get(ino)?;
        if !matches!(inode.kind(), FileKind::Regular | FileKind::Directory) {
            return Err(Errno::ENOTTY);
        }
        if flags & !iflags::SUPPORTED != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let meta = inode.meta.lock();
        let noatime = flags & inode_flags::NOATIME != 0;
        if let (true, NodeData::File(RegularFile::Kernel(k))) =
            (noatime != inode.noatime(), &inode.data)
        {
            // The kernel updates the data file's atime itself.
            k.set_noatime(noatime)?;
        }
        inode.set_visible_flags(flags);
        drop(meta);
        inode.set_ctime(Timestamp::now());
        Ok(())
    }
}
