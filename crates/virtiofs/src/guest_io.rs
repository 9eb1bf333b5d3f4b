//! File I/O straight between a host descriptor and guest memory, no buffer between: a
//! READ's data read with `preadv` into its chain's writable descriptors, a WRITE's written
//! with `pwritev` from its readable ones ([`GuestPayload`]).
//!
//! Every slice here comes from `GuestMemory::get_slices` for a descriptor of the chain,
//! which checks it against the memory the VMM shared (as `virtio-queue`'s `Reader` and
//! `Writer` do), so the iovecs name nothing but guest memory.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use vm_memory::bitmap::{BitmapSlice, WithBitmapSlice};
use vm_memory::{GuestAddress, GuestMemory, Permissions, VolatileSlice};

use memofs_request::Payload;

/// The most iovecs one `preadv` or `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// The guest memory of descriptors `descs` (address, length), in order, each checked as
/// `perm` allows; `None` if any is not guest memory.
pub(crate) fn slices<'m, M, B>(
    mem: &'m M,
    descs: impl Iterator<Item = (GuestAddress, u32)>,
    perm: Permissions,
) -> Option<Vec<VolatileSlice<'m, B>>>
where
    M: GuestMemory,
    M::Bitmap: WithBitmapSlice<'m, S = B>,
    B: BitmapSlice,
{
    let mut out = Vec::new();
    for (addr, len) in descs {
        for s in mem.get_slices(addr, len as usize, perm).ok()? {
            out.push(s.ok()?);
        }
    }
    Some(out)
}

/// Up to `len` bytes of `slices`, from `skip` bytes into them (fewer where they end).
fn window<'m, B: BitmapSlice>(
    slices: &[VolatileSlice<'m, B>],
    skip: usize,
    len: usize,
) -> io::Result<Vec<VolatileSlice<'m, B>>> {
    let mut parts = Vec::new();
    let (mut skip, mut left) = (skip, len);
    for s in slices {
        if left == 0 {
            break;
        }
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        let n = (s.len() - skip).min(left);
        parts.push(s.subslice(skip, n).map_err(io::Error::other)?);
        skip = 0;
        left -= n;
    }
    Ok(parts)
}

/// Runs `call` (a `preadv` or `pwritev` of `fd`) over the memory `bases` names (pointer and
/// length of each part, kept mapped by the caller), from `offset` of the file, until every
/// byte moved, the file ended or an error came after none did; how many moved.
fn vectored(
    bases: &[(*mut u8, usize)],
    fd: BorrowedFd<'_>,
    offset: u64,
    call: unsafe extern "C" fn(i32, *const libc::iovec, i32, libc::off_t) -> isize,
) -> io::Result<usize> {
    let total: usize = bases.iter().map(|b| b.1).sum();
    let mut done = 0;
    while done < total {
        let mut iov = Vec::with_capacity(bases.len().min(IOV_MAX));
        let mut past = done;
        for &(base, len) in bases {
            if past >= len {
                past -= len;
                continue;
            }
            if iov.len() == IOV_MAX {
                break;
            }
            // SAFETY: `past < len`, so the pointer stays inside the part.
            let base = unsafe { base.add(past) };
            iov.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: len - past,
            });
            past = 0;
        }
        let at = offset
            .checked_add(done as u64)
            .and_then(|at| libc::off_t::try_from(at).ok())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: every iovec lies inside guest memory the caller keeps mapped for the call
        // (see `bases`), and `iov.len()` is their number.
        let n = unsafe { call(fd.as_raw_fd(), iov.as_ptr(), iov.len() as i32, at) };
        match n {
            0 => break,
            n if n > 0 => done += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => {}
                    _ if done > 0 => break,
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(done)
}

/// Reads up to `len` bytes at `offset` of `fd` into `slices`, from `skip` bytes into them;
/// how many it read (short at the file's end, or where the slices end). What was written is
/// marked dirty in the VMM's log.
pub(crate) fn pread_into<B: BitmapSlice>(
    slices: &[VolatileSlice<'_, B>],
    skip: usize,
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let parts = window(slices, skip, len)?;
    let guards: Vec<_> = parts.iter().map(|p| p.ptr_guard_mut()).collect();
    let bases: Vec<_> = guards.iter().map(|g| (g.as_ptr(), g.len())).collect();
    let done = vectored(&bases, fd, offset, libc::preadv)?;
    let mut marked = 0;
    for p in &parts {
        if marked >= done {
            break;
        }
        let n = p.len().min(done - marked);
        p.bitmap().mark_dirty(0, n);
        marked += n;
    }
    Ok(done)
}

/// A WRITE's data left in the guest's memory: the request's readable memory after its
/// arguments, written to the backend's file from there ([`Payload`]).
pub(crate) struct GuestPayload<'m, B: BitmapSlice> {
    parts: Vec<VolatileSlice<'m, B>>,
    len: usize,
}

impl<'m, B: BitmapSlice> GuestPayload<'m, B> {
    /// The `len` bytes of `slices` after the first `skip`; `None` if they hold fewer.
    pub(crate) fn new(
        slices: &[VolatileSlice<'m, B>],
        skip: usize,
        len: usize,
    ) -> Option<GuestPayload<'m, B>> {
        let parts = window(slices, skip, len).ok()?;
        (parts.iter().map(|p| p.len()).sum::<usize>() == len).then_some(GuestPayload { parts, len })
    }
}

impl<B: BitmapSlice> Payload for GuestPayload<'_, B> {
    fn len(&self) -> usize {
        self.len
    }

    /// The pages are faulted into this process first: the host kernel copies a write's
    /// data with page faults disabled, and guest memory this process has not touched yet
    /// is not in its page tables; a copy that comes up short makes the filesystem zero the
    /// rest of its page cache folio and copy again after the fault (ext4 spent most of a
    /// guest's large write doing that).
    fn write_at(&self, fd: BorrowedFd<'_>, offset: u64) -> io::Result<usize> {
        let guards: Vec<_> = self.parts.iter().map(|p| p.ptr_guard()).collect();
        let bases: Vec<_> = guards
            .iter()
            .map(|g| (g.as_ptr().cast_mut(), g.len()))
            .collect();
        // The step at which guest memory is faulted in.
        let page = memofs_core::page_size() as usize;
        for &(base, len) in &bases {
            for at in (0..len).step_by(page).chain(len.checked_sub(1)) {
                // SAFETY: `at < len`: inside the part, mapped while `guards` live.
                unsafe { std::ptr::read_volatile(base.add(at)) };
            }
        }
        // `pwritev` only reads through the pointers.
        vectored(&bases, fd, offset, libc::pwritev)
    }

    fn copy_into(&self, buf: &mut Vec<u8>) -> io::Result<()> {
        for p in &self.parts {
            let start = buf.len();
            buf.resize(start + p.len(), 0);
            p.copy_to(&mut buf[start..]);
        }
        Ok(())
    }
}
