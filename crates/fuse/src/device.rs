//! A FUSE connection's `/dev/fuse` descriptors: reading requests, writing replies and
//! notifications, cloning per-thread queues, and registering passthrough backing files.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use memofs_core::Ino;
use memofs_request::kernel::BackingWrites;
use memofs_request::Kernel;
use zerocopy::IntoBytes;

use memofs_proto::abi::{self, dev_ioc, notify};
use memofs_proto::encode::ReplySink;

/// Opens `/dev/fuse` (close-on-exec).
pub fn open_dev_fuse() -> io::Result<OwnedFd> {
    // SAFETY: a valid NUL-terminated path; the result is checked before it is owned.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new descriptor on the same connection as `session` with a request queue of its own
/// (`FUSE_DEV_IOC_CLONE`): a thread reading it gets requests and sends replies without
/// sharing a queue lock with the other threads.
pub fn clone_queue(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let fd = open_dev_fuse()?;
    let mut src = session.as_raw_fd() as u32;
    // SAFETY: CLONE reads a u32 descriptor number from the pointer, which is live.
    if unsafe { libc::ioctl(fd.as_raw_fd(), dev_ioc::CLONE as _, &mut src) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Most parts one reply is written with (a READ of a 1 MiB request from page-sized pieces
/// has 256, and `writev` takes up to `IOV_MAX`, 1024); a reply in more is copied together.
const MAX_PARTS: usize = 512;

/// Writes one message (a `fuse_out_header` and `parts`) to `fd` with `writev`: the kernel
/// takes a message whole from one write.
fn write_message(fd: RawFd, unique: u64, error: i32, parts: &[&[u8]]) -> io::Result<()> {
    if parts.len() > MAX_PARTS {
        return write_message(fd, unique, error, &[&parts.concat()]);
    }
    let header = abi::fuse_out_header::reply(unique, error, parts.iter().map(|p| p.len()).sum());
    let all = std::iter::once(header.as_bytes()).chain(parts.iter().copied());
    let iovec = |part: &[u8]| libc::iovec {
        iov_base: part.as_ptr() as *mut libc::c_void,
        iov_len: part.len(),
    };
    let mut small = [iovec(&[]); 4];
    let mut large = Vec::new();
    let iov: &[libc::iovec] = if parts.len() < small.len() {
        let mut n = 0;
        for (slot, part) in small.iter_mut().zip(all.filter(|p| !p.is_empty())) {
            *slot = iovec(part);
            n += 1;
        }
        &small[..n]
    } else {
        large.extend(all.filter(|p| !p.is_empty()).map(iovec));
        &large
    };
    // SAFETY: every iovec points into a live slice borrowed for this call.
    let written = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as libc::c_int) };
    if written < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Replies written straight to one queue's descriptor.
pub struct FdSink<'a>(pub BorrowedFd<'a>);

impl ReplySink for FdSink<'_> {
    fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
        if error != 0 {
            log::debug!("reply {unique}: errno {}", -error);
        }
        match write_message(self.0.as_raw_fd(), unique, error, parts) {
            Ok(()) => {}
            // The request was interrupted or the connection is gone: nobody waits.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => {}
            Err(e) => log::warn!("reply to request {unique} failed: {e}"),
        }
    }
}

/// The kernel side of a connection, on a duplicate of its session descriptor.
pub struct Connection {
    fd: OwnedFd,
}

impl Connection {
    /// For the connection `session` belongs to.
    pub fn new(session: BorrowedFd<'_>) -> io::Result<Connection> {
        Ok(Connection {
            fd: session.try_clone_to_owned()?,
        })
    }

    /// The session descriptor's duplicate.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    fn notify(&self, code: i32, parts: &[&[u8]]) -> io::Result<()> {
        write_message(self.fd.as_raw_fd(), 0, code, parts)
    }
}

/// `CAP_FSETID`: writes keep setuid and setgid.
const CAP_FSETID: u32 = 4;

/// `struct __user_cap_header_struct` (capability ABI version 3).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

impl CapHeader {
    /// The calling thread (capabilities belong to threads: `pid` 0), ABI version 3.
    fn this_thread() -> CapHeader {
        CapHeader {
            version: 0x2008_0522,
            pid: 0,
        }
    }
}

/// `struct __user_cap_data_struct`; version 3 takes two (capabilities 0-31, 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's capabilities.
fn thread_caps() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader::this_thread();
    let mut data = [CapData::default(); 2];
    // SAFETY: capget fills the two-element data array version 3 names from a live header.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

/// Sets the calling thread's capabilities.
fn set_thread_caps(data: &[CapData; 2]) -> io::Result<()> {
    let mut header = CapHeader::this_thread();
    // SAFETY: capset reads the header and two data elements, all live, for this thread.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` with `CAP_FSETID` out of the calling thread's effective set (it stays
/// permitted, and is restored after), so credentials taken meanwhile lack it.
fn without_fsetid<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let saved = thread_caps()?;
    if saved[0].effective & (1 << CAP_FSETID) == 0 {
        return f();
    }
    let mut dropped = saved;
    dropped[0].effective &= !(1 << CAP_FSETID);
    set_thread_caps(&dropped)?;
    let r = f();
    let restored = set_thread_caps(&saved);
    let value = r?;
    restored?;
    Ok(value)
}

impl Kernel for Connection {
    /// The kernel does the backing file's I/O with the credentials of the thread that
    /// registers it; for [`BackingWrites::Unprivileged`] they lack `CAP_FSETID`.
    fn open_backing(&self, fd: BorrowedFd<'_>, writes: BackingWrites) -> io::Result<u32> {
        let map = abi::fuse_backing_map {
            fd: fd.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        let register = || {
            // SAFETY: BACKING_OPEN reads a fuse_backing_map from the pointer, which is live.
            let id = unsafe { libc::ioctl(self.fd.as_raw_fd(), dev_ioc::BACKING_OPEN as _, &map) };
            if id < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(id as u32)
        };
        match writes {
            BackingWrites::Server => register(),
            BackingWrites::Unprivileged => without_fsetid(register),
        }
    }

    fn close_backing(&self, id: u32) -> io::Result<()> {
        // SAFETY: BACKING_CLOSE reads a u32 from the pointer, which is live.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), dev_ioc::BACKING_CLOSE as _, &id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn inval_entry(&self, parent: Ino, name: &OsStr, expire_only: bool) -> io::Result<()> {
        let out = abi::fuse_notify_inval_entry_out {
            parent,
            namelen: name.len() as u32,
            flags: if expire_only { notify::EXPIRE_ONLY } else { 0 },
        };
        self.notify(
            notify::INVAL_ENTRY,
            &[out.as_bytes(), name.as_bytes(), b"\0"],
        )
    }

    fn delete(&self, parent: Ino, child: Ino, name: &OsStr) -> io::Result<()> {
        let out = abi::fuse_notify_delete_out {
            parent,
            child,
            namelen: name.len() as u32,
            padding: 0,
        };
        self.notify(notify::DELETE, &[out.as_bytes(), name.as_bytes(), b"\0"])
    }

    fn inval_inode(&self, ino: Ino, offset: i64, len: i64) -> io::Result<()> {
        let out = abi::fuse_notify_inval_inode_out {
            ino,
            off: offset,
            len,
        };
        self.notify(notify::INVAL_INODE, &[out.as_bytes()])
    }

    fn inc_epoch(&self) -> io::Result<()> {
        self.notify(notify::INC_EPOCH, &[])
    }
}
