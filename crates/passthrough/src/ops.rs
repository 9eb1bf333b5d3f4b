//! `Backend` for the passthrough filesystem: argument decoding onto the concern modules.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use memofs_core::ops::{FdRead, FdWrite};
use memofs_core::{
    Attr, Backend, BackendUsage, Caller, Capabilities, DirEntry, Errno, FileKind, Ino, Invalidator,
    Opened, Result, SetAttr, StatFs, ROOT_INO,
};

use crate::sys;
use crate::PassthroughFs;

impl Backend for PassthroughFs {
    fn set_atime(
        &self,
        atime: memofs_core::AtimePolicy,
        named: bool,
    ) -> std::result::Result<(), String> {
        self.change_atime(atime, named)
    }
    fn set_read_only(&self, read_only: bool) -> std::result::Result<(), String> {
        self.change_read_only(read_only)
    }
    fn directories_known(&self) -> Vec<Ino> {
        let all = self.table.all().into_iter();
        all.filter(|i| i.kind == FileKind::Directory)
            .map(|i| i.ino)
            .collect()
    }
    fn lookup(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<Attr> {
        self.lookup_any(parent, name)
    }

    /// Not a name a change feed reported made a moment ago (see [`crate::settling`]).
    fn miss_may_be_kept(&self, parent: Ino, name: &OsStr) -> bool {
        !self.table.settling.is_expected(parent, name.as_bytes())
    }

    fn forget(&self, ino: Ino, nlookup: u64) {
        self.table.forget(ino, nlookup);
    }

    fn forget_all(&self) {
        for inode in self.table.all() {
            self.table.forget(inode.ino, u64::MAX);
        }
        for (ino, _) in self.table.lost() {
            self.table.forget(ino, u64::MAX);
        }
    }

    fn release_all(&self) {
        self.files.clear();
        self.dirs.clear();
    }

    fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.attr(&*self.table.get(ino)?)
    }

    fn setattr(&self, _caller: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr> {
        self.set_attr(&*self.table.get(ino)?, set)
    }

    fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.table.get(ino)?;
        if inode.kind != memofs_core::FileKind::Symlink {
            return Err(Errno::EINVAL);
        }
        sys::at::readlink_fd(inode.fd()?.as_fd())
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
        self.mknod_node(caller, parent, name, mode, umask, rdev)
    }

    fn mkdir(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        self.mkdir_node(caller, parent, name, mode, umask)
    }

    fn unlink(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<()> {
        self.remove(parent, name, 0)
    }

    fn rmdir(&self, _caller: &Caller, parent: Ino, name: &OsStr) -> Result<()> {
        self.remove(parent, name, libc::AT_REMOVEDIR)
    }

    fn symlink(&self, caller: &Caller, parent: Ino, name: &OsStr, target: &OsStr) -> Result<Attr> {
        self.symlink_node(caller, parent, name, target)
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
        self.rename_entry(parent, name, new_parent, new_name, flags)
    }

    fn link(&self, _caller: &Caller, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr> {
        self.link_node(ino, new_parent, new_name)
    }

    fn open(&self, _caller: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        self.open_file(ino, flags)
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
        self.create_file(caller, parent, name, mode, umask, flags)
    }

    fn tmpfile(
        &self,
        caller: &Caller,
        parent: Ino,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        self.tmpfile_file(caller, parent, mode, umask, flags)
    }

    fn read(&self, _ino: Ino, fh: u64, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        self.read_file(fh, offset, size, buf)
    }

    fn read_from_fd(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        size: u32,
        read: &mut FdRead<'_>,
    ) -> Option<Result<usize>> {
        let file = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        Some(
            self.host_fd(&file)
                .and_then(|fd| read(fd, offset, size as usize).map_err(Errno::from)),
        )
    }

    fn write(&self, _ino: Ino, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_file(fh, offset, data)
    }

    fn write_to_fd(
        &self,
        _ino: Ino,
        fh: u64,
        offset: u64,
        write: &mut FdWrite<'_>,
    ) -> Option<Result<u32>> {
        let file = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        Some(
            self.host_fd(&file)
                .and_then(|fd| write(fd, offset).map(|n| n as u32).map_err(Errno::from)),
        )
    }

    /// What a `close(2)` of the host file would report: a duplicate of its descriptor closed
    /// (the host filesystem writes back and reports as at any close; the handle stays open).
    fn flush(&self, _ino: Ino, fh: u64) -> Result<()> {
        let file = self.file(fh)?;
        match file.fd.get() {
            Some(fd) => sys::io::close_dup(fd.as_fd()),
            // Never opened: nothing to report.
            None => Ok(()),
        }
    }

    fn release(&self, _ino: Ino, fh: u64) -> Result<()> {
        self.files.release(fh)
    }

    fn fsync(&self, _ino: Ino, fh: u64, datasync: bool) -> Result<()> {
        let file = self.file(fh)?;
        sys::io::fsync(self.host_fd(&file)?, datasync)
    }

    /// Makes everything written through the export durable on the host: `syncfs(2)` of the
    /// filesystem the export root is on (and of none mounted below it).
    fn syncfs(&self) -> Result<()> {
        let root = self.table.root();
        let fd = sys::at::openat(root.fd()?.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)?;
        sys::io::syncfs(fd.as_fd())
    }

    /// Makes the directory's entries durable on the host (after creates, renames, unlinks).
    fn fsyncdir(&self, ino: Ino, _fh: u64, datasync: bool) -> Result<()> {
        let inode = self.table.get(ino)?;
        let fd = sys::at::openat(
            inode.fd()?.as_fd(),
            c".",
            libc::O_RDONLY | libc::O_DIRECTORY,
        )?;
        sys::io::fsync(fd.as_fd(), datasync)
    }

    fn opendir(&self, caller: &Caller, ino: Ino, _flags: i32) -> Result<Opened> {
        self.open_dir(caller, ino)
    }

    fn readdir(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        plus: bool,
        sink: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        self.read_dir(ino, fh, offset, plus, sink)
    }

    fn releasedir(&self, _ino: Ino, fh: u64) -> Result<()> {
        self.dirs.release(fh)
    }

    fn statfs(&self) -> Result<StatFs> {
        let st = sys::io::fstatfs(self.table.root().fd()?.as_fd())?;
        Ok(StatFs {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            // The transport reports one size as both block and fragment size; block counts
            // are in fragments.
            bsize: st.f_frsize as u32,
            namelen: st.f_namelen as u32,
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
        self.set_xattr(caller, ino, name, value, flags)
    }

    fn getxattr(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        self.get_xattr(ino, name)
    }

    fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        self.list_xattr(ino)
    }

    fn removexattr(&self, caller: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        self.remove_xattr(caller, ino, name)
    }

    fn fallocate(&self, _ino: Ino, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let file = self.file(fh)?;
        sys::io::fallocate(self.host_fd(&file)?, mode, offset, length)
    }

    fn lseek(&self, _ino: Ino, fh: u64, offset: u64, whence: i32) -> Result<u64> {
        let file = self.file(fh)?;
        sys::io::lseek(self.host_fd(&file)?, offset, whence)
    }

    fn copy_file_range(
        &self,
        _ino_in: Ino,
        fh_in: u64,
        offset_in: u64,
        _ino_out: Ino,
        fh_out: u64,
        offset_out: u64,
        len: u64,
    ) -> Result<u64> {
        self.copy_range(fh_in, offset_in, fh_out, offset_out, len)
    }

    /// The export's filesystem's space and inodes (as `df` and `df -i` show them), and the
    /// host descriptors the server holds against its budget.
    fn usage(&self) -> BackendUsage {
        let st = self
            .table
            .root()
            .fd()
            .and_then(|fd| sys::io::fstatfs(fd.as_fd()));
        let (bytes_used, bytes_limit, inodes_used, inodes_limit) = match st {
            Ok(st) => {
                let frag = st.f_frsize as u64;
                (
                    st.f_blocks.saturating_sub(st.f_bfree) * frag,
                    st.f_blocks * frag,
                    st.f_files.saturating_sub(st.f_ffree),
                    st.f_files,
                )
            }
            Err(_) => (0, 0, 0, 0),
        };
        BackendUsage {
            bytes_used,
            bytes_limit,
            inodes_used,
            inodes_limit,
            descriptors_used: self.budget.used() as u64,
            descriptors_limit: self.budget.max() as u64,
            descriptors_reopened: self.pins.reopened.load(Ordering::Relaxed),
        }
    }

    /// Lends the handle's own descriptor, for FUSE passthrough; none of a filesystem the
    /// kernel refused a file of (a deferred open stays deferred).
    fn with_backing_fd(&self, ino: Ino, fh: u64, use_fd: &mut dyn FnMut(BorrowedFd<'_>)) -> bool {
        if self.lends_no_backing(ino) {
            return false;
        }
        match self.files.get(fh) {
            Ok(file) => match self.host_fd(&file) {
                Ok(fd) => {
                    use_fd(fd);
                    true
                }
                Err(_) => false,
            },
            Err(_) => false,
        }
    }

    fn get_flags(&self, ino: Ino) -> Result<u32> {
        self.inode_flags(&*self.table.get(ino)?)
    }

    fn set_flags(&self, _caller: &Caller, ino: Ino, flags: u32) -> Result<()> {
        self.set_inode_flags(&*self.table.get(ino)?, flags)
    }

    fn migration(&self) -> Option<&dyn memofs_core::migrate::Migrate> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        // The host keeps ACLs and applies their rules; with FUSE_POSIX_ACL the kernel also
        // enforces them on the mount, where otherwise only the mode bits would count. A
        // host filesystem without ACLs answers EOPNOTSUPP for the root's.
        let acl = OsStr::new("system.posix_acl_access");
        let host_acls = !matches!(self.get_xattr(ROOT_INO, acl), Err(Errno::EOPNOTSUPP));
        Capabilities {
            backing_fds: true,
            sole_writer: false,
            posix_acl: host_acls,
            // A change feed reports what other machines change.
            unseen_writers: self.export.remote && self.feed_spec.is_none(),
            // The filesystem underneath keeps atime itself (see `Capabilities`).
            atime_elsewhere: self.export.remote,
        }
    }

    fn attr_sent(&self, attr: &Attr) {
        if let Ok(inode) = self.table.get(attr.ino) {
            *inode.told.lock() = Some(crate::inode::Told::of(attr));
        }
    }

    /// A regular file with other hard links may change through a name outside the export,
    /// which only a watcher that marks the whole filesystem sees.
    fn attr_unseen_changes(&self, attr: &Attr) -> bool {
        attr.kind == FileKind::Regular && attr.nlink > 1 && !self.watching.load(Ordering::Acquire)
    }

    /// A watcher that marks the whole filesystem sees every name change on it, and a change
    /// feed every one made elsewhere; both report each with an invalidation of the directory
    /// (which drops a listing the kernel keeps).
    fn name_changes_reported(&self) -> bool {
        self.watching.load(Ordering::Acquire) || self.following.load(Ordering::Acquire)
    }

    fn backing_refused(&self, ino: Ino) {
        if let Ok(inode) = self.table.get(ino) {
            let mut devs = self.unlendable.write();
            if !devs.contains(&inode.host.dev) {
                log::info!(
                    "passthrough: the kernel takes no file of host device {} as a backing file: its file data goes through the server",
                    inode.host.dev
                );
                devs.push(inode.host.dev);
            }
        }
    }

    /// The feed names every file whose data changed, wherever it was written (the engine
    /// publishes each change that reaches it).
    fn data_changes_reported(&self) -> bool {
        self.opens_deferred()
    }

    fn sees_every_change(&self) -> bool {
        self.export.sealed && self.watching.load(Ordering::Acquire)
    }

    fn attach_invalidator(&self, invalidator: Arc<dyn Invalidator>) {
        self.start_watcher(invalidator);
    }
}
