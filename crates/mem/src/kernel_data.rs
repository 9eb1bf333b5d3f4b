//! Kernel-backed file data: each regular file's bytes live in an internal file of a private
//! kernel tmpfs, which the transport hands to the kernel with FUSE passthrough so reads,
//! writes and mmap never reach the server.
//!
//! The private tmpfs is mounted with the mount's `size=` (so the kernel enforces it, even
//! against writes the server never sees), copied (`open_tree`), and detached at once: it has
//! no path in any mount table (the server keeps the copy, whose flags a remount may still
//! change: [`BackingStore::set_atime`]), and its files, named by a counter under the one
//! directory descriptor the server keeps, are internal files nobody else can look up. The server holds a data file open only
//! while its memofs file is open and the data file was used (descriptors stay bounded by open
//! files, not by files); the kernel's registration of it as a FUSE passthrough backing file may
//! outlive the last close (memofs-request's `backing` module), holding the kernel's reference,
//! not one of the server's descriptors. It is unlinked when its inode goes. The tmpfs is
//! mounted with the mount's atime rule, so reads the kernel serves from it keep atime as the
//! rule says; the file's atime, mtime and size are reported from it. It is also mounted with
//! the mount's `huge=` (default `never`, as tmpfs; `within_size` gives large folios sized by
//! the write wherever the file's size covers them, so a sequentially written file costs the
//! kernel one folio per write instead of one page per 4 KiB, at the price of whole folios for
//! sparse writes). Needs `CAP_SYS_ADMIN` (root), like FUSE passthrough itself.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memofs_core::atime::AtimeMode;
use memofs_core::ops::{FdRead, FdWrite};
use memofs_core::options::HugeMode;
use memofs_core::{AtimePolicy, AtomicTimestamp, Errno, Result, Timestamp};
use parking_lot::Mutex;

use crate::machine::Machine;

/// The private tmpfs's root directory, shared by every data file.
struct StoreRoot {
    fd: OwnedFd,
    /// Data files' ctimes up to this are not changes: they were made by loading a state
    /// stream (see [`BackingStore::loaded`]), which keeps the ctime it carries instead.
    loaded_until: AtomicTimestamp,
}

impl std::ops::Deref for StoreRoot {
    type Target = OwnedFd;
    fn deref(&self) -> &OwnedFd {
        &self.fd
    }
}

/// The private tmpfs holding file data.
pub struct BackingStore {
    root: Arc<StoreRoot>,
    next_name: AtomicU64,
    /// Pages allocated to stand for the server's own charges (xattrs, symlink targets), so
    /// that they and file data share the one `size=` the kernel enforces.
    ballast: Mutex<(File, u64)>,
}

fn cstr(s: &[u8]) -> CString {
    CString::new(s).expect("no NUL in mount arguments")
}

impl BackingStore {
    /// Mounts and detaches a private tmpfs of `size` bytes (0 = unlimited) for at most
    /// `nr_inodes` files (0 = unlimited).
    pub fn new(
        size: u64,
        nr_inodes: u64,
        atime: AtimePolicy,
        huge: HugeMode,
    ) -> io::Result<BackingStore> {
        let dir = std::env::temp_dir().join(format!(
            "memofs-data-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir(&dir)?;
        let result = Self::mount_and_detach(&dir, size, nr_inodes, atime, huge);
        let _ = std::fs::remove_dir(&dir);
        result
    }

    fn mount_and_detach(
        dir: &std::path::Path,
        size: u64,
        nr_inodes: u64,
        atime: AtimePolicy,
        huge: HugeMode,
    ) -> io::Result<BackingStore> {
        let target = cstr(dir.as_os_str().as_bytes());
        let data = cstr(
            format!(
                "size={size},nr_inodes={nr_inodes},mode=0700,huge={}",
                huge.as_str()
            )
            .as_bytes(),
        );
        let (src, fstype) = (cstr(b"memofs-data"), cstr(b"tmpfs"));
        let atime_flag = match atime.mode {
            AtimeMode::Strict => libc::MS_STRICTATIME,
            AtimeMode::Relatime => libc::MS_RELATIME,
            AtimeMode::Noatime => libc::MS_NOATIME,
        };
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | atime_flag;
        // SAFETY: every pointer is a valid NUL-terminated string alive for the call.
        if unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                flags,
                data.as_ptr().cast(),
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The server keeps a detached copy of the mount, not the mount itself: a copy belongs
        // to an anonymous mount namespace, where `mount_setattr` can still change its atime
        // rule (`set_atime`); a mount detached by `umount2` is in none.
        let copy = std::fs::File::open(dir).and_then(|d| {
            match memofs_core::mount_api::clone_tree(std::os::fd::AsFd::as_fd(&d), false) {
                // Without `open_tree` (before Linux 5.2, or under valgrind) the mount itself
                // is kept: it serves the same, and `set_atime` is refused.
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(d.into()),
                r => r,
            }
        });
        // SAFETY: `target` is a valid path; MNT_DETACH leaves open descriptors working.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let fd = copy?;
        let root = Arc::new(StoreRoot {
            fd,
            // No data file is older than 1970: nothing loaded.
            loaded_until: AtomicTimestamp::new(Timestamp::default()),
        });
        let ballast = open_at(&root, &cstr(b"ballast"), libc::O_CREAT | libc::O_EXCL)
            .map_err(io::Error::from)?;
        Ok(BackingStore {
            root,
            next_name: AtomicU64::new(0),
            ballast: Mutex::new((ballast, 0)),
        })
    }

    /// What another server process needs to take this store over ([`BackingStore::adopt`]):
    /// its root, the next data file's number, and up to when data-file ctimes stand for a
    /// load.
    pub fn handover(&self) -> io::Result<(OwnedFd, u64, Timestamp)> {
        Ok((
            self.root.fd.try_clone()?,
            self.next_name.load(Ordering::Relaxed),
            self.root.loaded_until.load(),
        ))
    }

    /// The store another server process handed over ([`BackingStore::handover`]): `root`
    /// must be the root of a private tmpfs with its ballast, as [`BackingStore::new`] made it.
    pub fn adopt(root: OwnedFd, next_name: u64, loaded_until: Timestamp) -> io::Result<Self> {
        let ballast = open_at(&root, &cstr(b"ballast"), 0).map_err(io::Error::from)?;
        let pages = ballast.metadata()?.len().div_ceil(memofs_core::page_size());
        Ok(BackingStore {
            root: Arc::new(StoreRoot {
                fd: root,
                loaded_until: AtomicTimestamp::new(loaded_until),
            }),
            next_name: AtomicU64::new(next_name),
            ballast: Mutex::new((ballast, pages)),
        })
    }

    /// The existing data file number `id` (named by a handed-over state); `EINVAL` for a
    /// number this store never gave. The file is not looked at until it is used (a
    /// handover of many files would stat each): it is opened as every data file is, by
    /// name without following links, in a tmpfs only the server reaches.
    pub fn existing_file(&self, id: u64) -> Result<KernelFile> {
        if id >= self.next_name.load(Ordering::Relaxed) {
            return Err(Errno::EINVAL);
        }
        Ok(KernelFile {
            root: self.root.clone(),
            open: Mutex::new(Open {
                id_count: id,
                held: None,
            }),
        })
    }

    /// Gives the private tmpfs the atime rule `p`, for every data file, open or not: the
    /// kernel applies a mount's rule at each access.
    pub fn set_atime(&self, p: AtimePolicy) -> io::Result<()> {
        memofs_core::mount_api::set_attrs(
            self.root.fd.as_fd(),
            memofs_core::mount_api::atime_attrs(p),
            0,
            false,
        )
    }

    /// Gives the private tmpfs new limits (0 = unlimited), as `mount -o remount,size=`
    /// would: the kernel refuses them below what is in use. The mount is detached, which
    /// only the new mount API reconfigures (`fspick` on its root, `fsconfig`).
    pub fn resize(&self, size: u64, nr_inodes: u64) -> io::Result<()> {
        // From include/uapi/linux/mount.h (not in the libc crate).
        const FSPICK_CLOEXEC: libc::c_uint = 0x1;
        const FSPICK_EMPTY_PATH: libc::c_uint = 0x8;
        const FSCONFIG_SET_STRING: libc::c_uint = 1;
        const FSCONFIG_CMD_RECONFIGURE: libc::c_uint = 7;
        // SAFETY: `root` is open; the empty path is a NUL-terminated string.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_fspick,
                self.root.as_raw_fd(),
                c"".as_ptr(),
                FSPICK_CLOEXEC | FSPICK_EMPTY_PATH,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by fspick and is owned by nothing else.
        let fc = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let set = |cmd: libc::c_uint, key: Option<&CString>, value: Option<&CString>| {
            let ptr = |c: Option<&CString>| c.map_or(std::ptr::null(), |c| c.as_ptr());
            // SAFETY: `fc` is an open filesystem context; key and value are NUL-terminated
            // strings alive for the call, or null where the command takes none.
            match unsafe {
                libc::syscall(
                    libc::SYS_fsconfig,
                    fc.as_raw_fd(),
                    cmd,
                    ptr(key),
                    ptr(value),
                    0,
                )
            } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        };
        let (size, nr_inodes) = (
            cstr(size.to_string().as_bytes()),
            cstr(nr_inodes.to_string().as_bytes()),
        );
        set(FSCONFIG_SET_STRING, Some(&cstr(b"size")), Some(&size))?;
        set(
            FSCONFIG_SET_STRING,
            Some(&cstr(b"nr_inodes")),
            Some(&nr_inodes),
        )?;
        set(FSCONFIG_CMD_RECONFIGURE, None, None)
    }

    /// A new, empty data file. With `to_open` the descriptor that created it stays held for
    /// the [`KernelFile::open`] that follows (a create opens what it made: one `openat`
    /// instead of a create, a close and an open).
    pub fn new_file(&self, to_open: bool) -> Result<KernelFile> {
        let id = self.next_name.fetch_add(1, Ordering::Relaxed);
        if id > Open::MAX_ID {
            return Err(Errno::ENOSPC);
        }
        let file = open_at(
            &self.root,
            DataName::new(id).as_cstr(),
            libc::O_CREAT | libc::O_EXCL,
        )?;
        Ok(KernelFile {
            root: self.root.clone(),
            open: Mutex::new(Open {
                id_count: id,
                held: to_open.then(|| Arc::new(file)),
            }),
        })
    }

    /// A state stream was loaded, its last data file's ctime `until`: data-file ctimes up to
    /// it stand for the load, not for a change, and the memofs files keep the ctimes the
    /// stream carried.
    pub fn loaded(&self, until: Timestamp) {
        self.root.loaded_until.store(until);
    }

    /// Makes the ballast hold `bytes` (rounded up to pages) of the private tmpfs: `ENOSPC`
    /// when file data already uses the room.
    pub fn set_ballast(&self, bytes: u64) -> Result<()> {
        let mut b = self.ballast.lock();
        let page = memofs_core::page_size();
        let pages = bytes.div_ceil(page);
        if pages > b.1 {
            // SAFETY: plain syscall on an open fd with integer arguments.
            let r = unsafe {
                libc::fallocate(
                    b.0.as_raw_fd(),
                    0,
                    (b.1 * page) as i64,
                    ((pages - b.1) * page) as i64,
                )
            };
            if r != 0 {
                let e = Errno::last();
                let _ = b.0.set_len(b.1 * page);
                return Err(e);
            }
        } else if pages < b.1 {
            b.0.set_len(pages * page)?;
        }
        b.1 = pages;
        Ok(())
    }

    /// Usage of the private tmpfs, as `(total bytes, free bytes)`.
    pub fn usage(&self) -> io::Result<(u64, u64)> {
        // SAFETY: `st` is a zeroed statfs buffer the call fills; `root` is open.
        let st = unsafe {
            let mut st: libc::statfs = std::mem::zeroed();
            if libc::fstatfs(self.root.as_raw_fd(), &mut st) != 0 {
                return Err(io::Error::last_os_error());
            }
            st
        };
        let bs = st.f_bsize as u64;
        Ok((st.f_blocks * bs, st.f_bfree * bs))
    }
}

/// A data file's name, its number in decimal, built on the stack when needed so that a file
/// stores 6 bytes instead of a heap string.
struct DataName([u8; 21]);

impl DataName {
    fn new(id: u64) -> DataName {
        // u64::MAX has 20 digits; the 21st byte stays the NUL terminator.
        let mut buf = [0u8; 21];
        write!(&mut buf[..20], "{id}").expect("a u64 has at most 20 digits");
        DataName(buf)
    }

    fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.0).expect("a NUL ends the digits")
    }
}

fn open_at(root: &OwnedFd, name: &CStr, extra: i32) -> Result<File> {
    // SAFETY: `root` is an open directory fd and `name` a NUL-terminated single component.
    let fd = unsafe {
        libc::openat(
            root.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | extra,
            0o600,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// One regular file's data in the private tmpfs. Size, blocks and mtime are the kernel's;
/// writes through passthrough update them without the server seeing the request.
///
/// 32 bytes, as every empty file has one: the data file's number and the open count share
/// one word, in the padding of the lock that guards the held descriptor.
pub struct KernelFile {
    root: Arc<StoreRoot>,
    open: Mutex<Open>,
}

/// A data file's number, and what its memofs file's opens hold.
struct Open {
    /// The number naming the data file (see [`DataName`]; never changes, never reused) in
    /// the low [`Open::ID_BITS`], the opens of the memofs file above, counted up to
    /// [`Open::MAX_COUNT`]: past it the descriptor may be let go while opens remain, and
    /// is opened again by name when next needed.
    id_count: u64,
    /// The data file's descriptor, held from its first use while there are opens (an open
    /// served by a kept backing registration never needs it).
    held: Option<Arc<File>>,
}

impl Open {
    const ID_BITS: u32 = 48;
    /// 2^48 data files: 9 years of a million creates a second.
    const MAX_ID: u64 = (1 << Self::ID_BITS) - 1;
    const MAX_COUNT: u64 = (1 << (64 - Self::ID_BITS)) - 1;

    fn id(&self) -> u64 {
        self.id_count & Self::MAX_ID
    }

    fn count(&self) -> u64 {
        self.id_count >> Self::ID_BITS
    }

    fn set_count(&mut self, count: u64) {
        self.id_count = self.id() | (count.min(Self::MAX_COUNT) << Self::ID_BITS);
    }
}

impl Drop for KernelFile {
    fn drop(&mut self) {
        let name = self.name();
        // SAFETY: `root` is an open directory fd and `name` a NUL-terminated component.
        unsafe { libc::unlinkat(self.root.as_raw_fd(), name.as_cstr().as_ptr(), 0) };
    }
}

impl KernelFile {
    fn name(&self) -> DataName {
        DataName::new(self.open.lock().id())
    }

    /// The data file's number in its store.
    pub fn number(&self) -> u64 {
        self.open.lock().id()
    }

    /// The memofs file was opened: a descriptor of the data file, once one is needed,
    /// stays held until the matching [`KernelFile::close`].
    pub fn open(&self) {
        let mut open = self.open.lock();
        let count = open.count() + 1;
        open.set_count(count);
    }

    /// Every open is gone: the held descriptor goes.
    pub fn close_all(&self) {
        let mut open = self.open.lock();
        open.set_count(0);
        open.held = None;
    }

    /// One open of the memofs file was released.
    pub fn close(&self) {
        let mut open = self.open.lock();
        let count = open.count().saturating_sub(1);
        open.set_count(count);
        if count == 0 {
            open.held = None;
        }
    }

    /// The data file: the held descriptor, or a fresh one, held if the file is open.
    fn file(&self) -> Result<Arc<File>> {
        let mut open = self.open.lock();
        if let Some(f) = &open.held {
            return Ok(f.clone());
        }
        let name = DataName::new(open.id());
        let f = Arc::new(open_at(&self.root, name.as_cstr(), 0)?);
        if open.count() > 0 {
            open.held = Some(f.clone());
        }
        Ok(f)
    }

    /// The data file's descriptor, for FUSE passthrough: the one held while the memofs file
    /// is open (no duplicate).
    pub fn data_file(&self) -> Option<Arc<File>> {
        self.file().ok()
    }

    /// The held descriptor, if the file is open.
    fn held(&self) -> Option<Arc<File>> {
        self.open.lock().held.clone()
    }

    /// `stat` of the data file: through the held descriptor while the file is open (no
    /// path walk), by name otherwise.
    fn stat(&self) -> Result<libc::stat> {
        let held = self.held();
        let name = self.name();
        // SAFETY: `st` is a zeroed stat buffer the call fills; the descriptor is open, or
        // `root` is open and `name` a NUL-terminated component.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            let rc = match &held {
                Some(f) => libc::fstat(f.as_raw_fd(), &mut st),
                None => libc::fstatat(
                    self.root.as_raw_fd(),
                    name.as_cstr().as_ptr(),
                    &mut st,
                    libc::AT_SYMLINK_NOFOLLOW,
                ),
            };
            if rc != 0 {
                return Err(Errno::last());
            }
            Ok(st)
        }
    }

    /// Size, 512-byte blocks and (atime, mtime, ctime) of the data file, from one `stat`.
    pub fn attrs(&self) -> Option<(u64, u64, [Timestamp; 3])> {
        let st = self.stat().ok()?;
        let ctime = Timestamp::from_timespec(st.st_ctime, st.st_ctime_nsec as u32);
        let times = [
            Timestamp::from_timespec(st.st_atime, st.st_atime_nsec as u32),
            Timestamp::from_timespec(st.st_mtime, st.st_mtime_nsec as u32),
            match ctime <= self.root.loaded_until.load() {
                true => Timestamp::MIN,
                false => ctime,
            },
        ];
        Some((st.st_size as u64, st.st_blocks as u64, times))
    }

    /// The data file's own ctime (what [`KernelFile::attrs`] may leave out).
    pub fn data_ctime(&self) -> Option<Timestamp> {
        let st = self.stat().ok()?;
        Some(Timestamp::from_timespec(
            st.st_ctime,
            st.st_ctime_nsec as u32,
        ))
    }

    /// Size and 512-byte blocks.
    pub fn size_and_blocks(&self) -> (u64, u64) {
        self.attrs()
            .map_or((0, 0), |(size, blocks, _)| (size, blocks))
    }

    /// Access, data modification and status change times of the data file.
    pub fn times(&self) -> Option<[Timestamp; 3]> {
        self.attrs().map(|(_, _, times)| times)
    }

    /// Sets the data file's atime and/or mtime (utimensat on the memofs file).
    pub fn set_times(&self, atime: Option<Timestamp>, mtime: Option<Timestamp>) -> Result<()> {
        let ts = |t: Option<Timestamp>| match t {
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            Some(t) => {
                let (sec, nsec) = t.to_timespec();
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec as _,
                }
            }
        };
        let times = [ts(atime), ts(mtime)];
        let held = self.held();
        let name = self.name();
        // SAFETY: `times` is a valid two-element array; the descriptor is open, or `root`
        // is open and `name` a NUL-terminated component.
        let rc = unsafe {
            match &held {
                Some(f) => libc::futimens(f.as_raw_fd(), times.as_ptr()),
                None => libc::utimensat(
                    self.root.as_raw_fd(),
                    name.as_cstr().as_ptr(),
                    times.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                ),
            }
        };
        if rc != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// Sets or clears `FS_NOATIME_FL` on the data file, so that the kernel, which serves
    /// its reads, leaves its atime alone as `chattr +A` asks.
    pub fn set_noatime(&self, on: bool) -> Result<()> {
        const NOATIME: libc::c_int = memofs_core::inode_flags::NOATIME as libc::c_int;
        let file = self.file()?;
        let mut flags: libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS writes one int to the pointer; the descriptor is open.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
            return Err(Errno::last());
        }
        flags = if on {
            flags | NOATIME
        } else {
            flags & !NOATIME
        };
        // SAFETY: FS_IOC_SETFLAGS reads one int from the pointer; the descriptor is open.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) } != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` into `buf` (cleared first). The data file's atime
    /// moves by its tmpfs's rule, unless `noatime` (an `O_NOATIME` open's read: through a
    /// descriptor of its own opened `O_NOATIME`).
    pub fn read(&self, offset: u64, len: u32, buf: &mut Vec<u8>, noatime: bool) -> Result<()> {
        buf.clear();
        let left = self.size_and_blocks().0.saturating_sub(offset);
        buf.resize(left.min(len as u64) as usize, 0);
        let file = self.reader(noatime)?;
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(())
    }

    /// Hands `read` the data file, `offset` and the bytes there are to read there (at most
    /// `len`, none past the size this file has); what it read (`noatime` as for
    /// [`KernelFile::read`]).
    pub fn read_from_fd(
        &self,
        offset: u64,
        len: u32,
        noatime: bool,
        read: &mut FdRead<'_>,
    ) -> Result<usize> {
        let left = self.size_and_blocks().0.saturating_sub(offset);
        let file = self.reader(noatime)?;
        Ok(read(file.as_fd(), offset, left.min(len as u64) as usize)?)
    }

    /// The descriptor a read goes through: the data file's, or for a read that moves no
    /// atime one opened `O_NOATIME` for it alone.
    fn reader(&self, noatime: bool) -> Result<Arc<File>> {
        match noatime {
            false => self.file(),
            true => Ok(Arc::new(open_at(
                &self.root,
                self.name().as_cstr(),
                libc::O_NOATIME,
            )?)),
        }
    }

    /// Writes at `offset`; short at `size=`, as tmpfs.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<u32> {
        Ok(self.file()?.write_at(data, offset)? as u32)
    }

    /// WRITE's bytes written at `offset` by `write`, from where they lie (as [`Self::write`]).
    pub fn write_from(&self, offset: u64, write: &mut FdWrite<'_>) -> Result<u32> {
        let file = self.file()?;
        Ok(write(file.as_fd(), offset)? as u32)
    }

    /// Sets the size.
    pub fn truncate(&self, size: u64) -> Result<()> {
        Ok(self.file()?.set_len(size)?)
    }

    /// fallocate(2), as the kernel's tmpfs supports it. An allocation the machine cannot
    /// hold fails with `ENOSPC` first (see [`crate::machine`]): the kernel would allocate
    /// it page by page, and a private tmpfs mounted with `size=0` has no limit of its own.
    pub fn fallocate(&self, machine: &Machine, offset: u64, len: u64, mode: i32) -> Result<()> {
        let file = self.file()?;
        if mode & libc::FALLOC_FL_PUNCH_HOLE == 0 {
            let end = offset.saturating_add(len);
            let page = memofs_core::page_size();
            let pages = end.div_ceil(page) - offset / page;
            let need = pages.saturating_mul(page);
            if machine.check(need).is_err() {
                // Only what is not allocated yet needs room.
                let held = allocated_in(&file, offset, end)?;
                machine.check(need.saturating_sub(held))?;
            }
        }
        fallocate(&file, mode, offset, len)
    }

    /// Makes `[offset, offset + len)` a hole and extends the file to cover it (a copied
    /// hole), allocating at most the last page.
    pub fn zero_range(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Ok(());
        }
        let file = self.file()?;
        fallocate(
            &file,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )?;
        // A zero byte written at the end extends the file only if it is shorter, in one
        // step (a concurrent write past `end` is never cut back); it lies inside the hole.
        if file.metadata()?.len() < end {
            file.write_at(&[0], end - 1)?;
        }
        Ok(())
    }

    /// `SEEK_DATA` / `SEEK_HOLE`.
    pub fn seek(&self, offset: u64, whence: i32) -> Result<u64> {
        lseek(&*self.file()?, offset, whence)
    }
}

fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(Errno::EFBIG);
    };
    // SAFETY: plain syscall on an open fd with integer arguments.
    if unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) } != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn lseek(file: &File, offset: u64, whence: i32) -> Result<u64> {
    let offset = i64::try_from(offset).map_err(|_| Errno::ENXIO)?;
    // SAFETY: plain syscall on an open fd with integer arguments.
    let r = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(r as u64)
}

/// Bytes of data the kernel holds in `[start, end)` of `file` (inside its size): one
/// `SEEK_DATA`/`SEEK_HOLE` pair per allocated extent, however long the range.
fn allocated_in(file: &File, start: u64, end: u64) -> Result<u64> {
    let (mut pos, mut held) = (start, 0);
    while pos < end {
        let data = match lseek(file, pos, libc::SEEK_DATA) {
            Ok(d) if d < end => d,
            Ok(_) | Err(Errno::ENXIO) => break,
            Err(e) => return Err(e),
        };
        let hole = lseek(file, data, libc::SEEK_HOLE)?.min(end);
        held += hole - data;
        pos = hole;
    }
    Ok(held)
}

/// A few bits of entropy for the temporary directory name (a collision makes `create_dir`
/// fail, and the mount with it).
fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
#[path = "kernel_data_tests.rs"]
mod tests;
