//! Kernel-backed file data: each regular file's bytes live in an internal file of a private
//! kernel tmpfs, which the transport hands to the kernel with FUSE passthrough so reads,
//! writes and mmap never reach the server.
//!
//! The private tmpfs is mounted with the mount's `size=` (so the kernel enforces it, even
//! against writes the server never sees), opened, and detached at once: it has no path, and
//! its files are `O_TMPFILE` files with no name, internal inodes nobody can look up. It is
//! mounted with the mount's atime rule, so reads the kernel serves from it keep atime as the
//! rule says; the file's atime, mtime and size are reported from it. Needs `CAP_SYS_ADMIN`
//! (root), like FUSE passthrough itself.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use memofs_core::atime::AtimeMode;
use memofs_core::{AtimePolicy, Errno, Result, Timestamp};

/// The private tmpfs holding file data.
pub struct BackingStore {
    root: OwnedFd,
}

fn cstr(s: &[u8]) -> CString {
    CString::new(s).expect("no NUL in mount arguments")
}

impl BackingStore {
    /// Mounts and detaches a private tmpfs of `size` bytes (0 = unlimited) for at most
    /// `nr_inodes` files (0 = unlimited).
    pub fn new(size: u64, nr_inodes: u64, atime: AtimePolicy) -> io::Result<BackingStore> {
        let dir = std::env::temp_dir().join(format!(
            "memofs-data-{}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir(&dir)?;
        let result = Self::mount_and_detach(&dir, size, nr_inodes, atime);
        let _ = std::fs::remove_dir(&dir);
        result
    }

    fn mount_and_detach(
        dir: &std::path::Path,
        size: u64,
        nr_inodes: u64,
        atime: AtimePolicy,
    ) -> io::Result<BackingStore> {
        let target = cstr(dir.as_os_str().as_bytes());
        let data = cstr(format!("size={size},nr_inodes={nr_inodes},mode=0700").as_bytes());
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
        // SAFETY: `target` is a valid path; the result is checked before use.
        let fd = unsafe {
            libc::open(
                target.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        let open_err = io::Error::last_os_error();
        // SAFETY: `target` is a valid path; MNT_DETACH leaves open descriptors working.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        if fd < 0 {
            return Err(open_err);
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(BackingStore {
            root: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// A new, empty, nameless file.
    pub fn new_file(&self) -> io::Result<File> {
        let dot = cstr(b".");
        // SAFETY: `root` is an open directory fd and `dot` a valid path.
        let fd = unsafe {
            libc::openat(
                self.root.as_raw_fd(),
                dot.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
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

/// One regular file's data in the private tmpfs. Size, blocks and mtime are the kernel's;
/// writes through passthrough update them without the server seeing the request.
pub struct KernelFile {
    file: File,
}

fn stat(file: &File) -> Result<libc::stat> {
    // SAFETY: `st` is a zeroed stat buffer the call fills; `file` is open.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(file.as_raw_fd(), &mut st) != 0 {
            return Err(Errno::last());
        }
        Ok(st)
    }
}

impl KernelFile {
    /// Wraps a file from [`BackingStore::new_file`].
    pub fn new(file: File) -> KernelFile {
        KernelFile { file }
    }

    /// The descriptor the kernel uses for passthrough.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Size and 512-byte blocks.
    pub fn size_and_blocks(&self) -> (u64, u64) {
        stat(&self.file).map_or((0, 0), |st| (st.st_size as u64, st.st_blocks as u64))
    }

    /// Access, data modification and status change times of the data file.
    pub fn times(&self) -> Option<[Timestamp; 3]> {
        let st = stat(&self.file).ok()?;
        Some([
            Timestamp::from_timespec(st.st_atime, st.st_atime_nsec as u32),
            Timestamp::from_timespec(st.st_mtime, st.st_mtime_nsec as u32),
            Timestamp::from_timespec(st.st_ctime, st.st_ctime_nsec as u32),
        ])
    }

    /// Sets the data file's atime and/or mtime (utimensat on the FUSE file).
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
        // SAFETY: `times` is a valid two-element array; the fd is open.
        if unsafe { libc::futimens(self.file.as_raw_fd(), times.as_ptr()) } != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` into `buf` (cleared first).
    pub fn read(&self, offset: u64, len: u32, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        let left = self.size_and_blocks().0.saturating_sub(offset);
        buf.resize(left.min(len as u64) as usize, 0);
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(done);
        Ok(())
    }

    /// Writes at `offset` (at the end when `append`); short at `size=`, as tmpfs.
    pub fn write(&self, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        let offset = if append {
            self.size_and_blocks().0
        } else {
            offset
        };
        Ok(self.file.write_at(data, offset)? as u32)
    }

    /// Sets the size.
    pub fn truncate(&self, size: u64) -> Result<()> {
        Ok(self.file.set_len(size)?)
    }

    /// fallocate(2), as the kernel's tmpfs supports it.
    pub fn fallocate(&self, offset: u64, len: u64, mode: i32) -> Result<()> {
        // SAFETY: plain syscall on an open fd with integer arguments.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset as i64, len as i64) } != 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// `SEEK_DATA` / `SEEK_HOLE`.
    pub fn seek(&self, offset: u64, whence: i32) -> Result<u64> {
        // SAFETY: plain syscall on an open fd with integer arguments.
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), offset as i64, whence) };
        if r < 0 {
            return Err(Errno::last());
        }
        Ok(r as u64)
    }
}

/// A few bits of entropy for the temporary directory name (collisions are retried by the
/// caller failing on `create_dir`).
fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn store_enforces_its_size_and_has_no_path() {
        if !is_root() {
            eprintln!("SKIP: needs root to mount a private tmpfs");
            return;
        }
        let store = BackingStore::new(1 << 20, 16, AtimePolicy::default()).unwrap();
        let mut f = store.new_file().unwrap();
        let big = vec![7u8; 2 << 20];
        let written = f.write(&big).unwrap();
        assert_eq!(written, 1 << 20, "the kernel stops the write at size=");
        assert!(f.write(&big).is_err());
        let (total, free) = store.usage().unwrap();
        assert_eq!((total, free), (1 << 20, 0));
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains("memofs-data"),
            "the private tmpfs must not stay attached"
        );
    }
}
