//! `Backend` for the mem filesystem: decoding arguments into the kind modules' operations.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use memofs_core::{
    Attr, Backend, BackendUsage, Caller, Capabilities, DirEntry, Errno, FileKind, Ino, Opened,
    Result, SetAttr, StatFs, TimeSet, Timestamp, NAME_MAX,
};

use crate::inode::{Inode, NodeData};
use crate::regular::{RegularFile, PAGE_SIZE};
use crate::symlink::Symlink;
use crate::MemFs;

impl MemFs {
    fn open_file(&self, inode: &Arc<Inode>, flags: i32) -> Result<Opened> {
        let file = inode.file()?;
        // Linux truncates even for O_RDONLY|O_TRUNC (the kernel checked write permission).
        if flags & libc::O_TRUNC != 0 {
            file.truncate(&self.limits, 0)?;
            inode.touch_modified(Timestamp::now());
        }
        if let Some(k) = file.kernel() {
            k.open()?;
        }
        inode.inc_open();
        Ok(Opened {
            fh: flags as u32 as u64,
        })
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

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.table.get(ino)?.attr())
    }

    fn setattr(&self, _caller: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr> {
        let inode = self.table.get(ino)?;
        let now = Timestamp::now();
        if let Some(size) = set.size {
            // As tmpfs: a truncate updates mtime and ctime even when the size stays.
            inode.file()?.truncate(&self.limits, size)?;
            inode.touch_modified(now);
        }
        {
            let mut meta = inode.meta.lock();
            if let Some(mode) = set.mode {
                meta.mode = (meta.mode & libc::S_IFMT) | (mode & 0o7777);
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
        inode.set_ctime(set.ctime.unwrap_or(now));
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
        let mode = mode & !(umask & 0o777);
        let data = match FileKind::from_mode(mode) {
            Some(FileKind::Regular) => NodeData::File(self.new_regular()?),
            Some(
                FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice,
            ) => NodeData::Special,
            Some(FileKind::Directory) => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        };
        let special = matches!(
            FileKind::from_mode(mode),
            Some(FileKind::CharDevice | FileKind::BlockDevice)
        );
        Ok(self
            .create_node(
                caller,
                parent,
                name,
                mode,
                if special { rdev } else { 0 },
                data,
            )?
            .attr())
    }

    fn mkdir(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        let mode = libc::S_IFDIR | (mode & 0o7777 & !(umask & 0o777));
        Ok(self
            .create_node(caller, parent, name, mode, 0, NodeData::new_dir(parent))?
            .attr())
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
        let data = NodeData::Symlink(Symlink::new(t));
        Ok(self
            .create_node(caller, parent, name, libc::S_IFLNK | 0o777, 0, data)?
            .attr())
    }

    fn rename(
        &self,
        _caller: &Caller,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<()> {
        self.do_rename(parent, name, new_parent, new_name, flags)
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
        let mode = libc::S_IFREG | (mode & 0o7777 & !(umask & 0o777));
        match self.create_node(
            caller,
            parent,
            name,
            mode,
            0,
            NodeData::File(self.new_regular()?),
        ) {
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

    fn read(&self, ino: Ino, _fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        let inode = self.table.get(ino)?;
        inode.file()?.read(offset, size, buf)?;
        inode.touch_atime(&self.atime);
        Ok(())
    }

    fn write(&self, ino: Ino, _fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let inode = self.table.get(ino)?;
        let n = inode.file()?.write(&self.limits, offset, data)?;
        inode.touch_modified(Timestamp::now());
        Ok(n)
    }

    fn release(&self, ino: Ino, _fh: u64) -> Result<()> {
        let inode = self.table.get(ino)?;
        if let Some(k) = inode.file().ok().and_then(|f| f.kernel()) {
            k.close();
        }
        self.table.close(&inode);
        self.evict_if_dead(&inode);
        Ok(())
    }

    fn fsync(&self, ino: Ino, _fh: u64, _datasync: bool) -> Result<()> {
        self.table.get(ino).map(|_| ())
    }

    fn opendir(&self, _caller: &Caller, ino: Ino, _flags: i32) -> Result<Opened> {
        self.table.get(ino)?.dir()?;
        Ok(Opened::default())
    }

    fn readdir(
        &self,
        ino: Ino,
        _fh: u64,
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
        inode.touch_atime(&self.atime);
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
        _caller: &Caller,
        ino: Ino,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let inode = self.table.get(ino)?;
        let name = name.as_bytes();
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

    fn removexattr(&self, _caller: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        let inode = self.table.get(ino)?;
        let freed = inode.xattrs.lock().remove(name.as_bytes())?;
        self.uncharge_meta(freed);
        inode.set_ctime(Timestamp::now());
        Ok(())
    }

    fn fallocate(&self, ino: Ino, _fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let inode = self.table.get(ino)?;
        inode
            .file()?
            .fallocate(&self.limits, offset, length, mode)?;
        if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 || mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
            inode.touch_modified(Timestamp::now());
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
        }
    }

    fn with_backing_fd(&self, ino: Ino, _fh: u64, use_fd: &mut dyn FnMut(BorrowedFd<'_>)) -> bool {
        let Ok(inode) = self.table.get(ino) else {
            return false;
        };
        let file = inode.file().ok().and_then(|f| f.kernel()?.data_file());
        match file {
            Some(file) => {
                use_fd(file.as_fd());
                true
            }
            None => false,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backing_fds: self.store.is_some(),
            sole_writer: true,
            posix_acl: false,
        }
    }
}
