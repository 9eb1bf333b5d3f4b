//! What moves or changes file data through a handle: READ, WRITE, FALLOCATE, LSEEK,
//! COPY_FILE_RANGE, and the ioctls.

use std::cell::RefCell;

use memofs_core::ops::FdRead;
use memofs_core::{Backend, Caller, Errno, Ino, Invalidator, Result};

use super::{answer, Server};
use crate::privs::privileged;
use crate::reply::ReplyOut;
use crate::request::{Op, WriteData};
use crate::stats::Event;

thread_local! {
    /// Each request thread reuses one read buffer: no allocation per READ.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// And one for WRITE data copied out of where the transport left it.
    static WRITE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl<B: Backend> Server<B> {
    /// WRITE's bytes to the backend. Bytes the transport left where the sender put them (a
    /// guest's memory) are written from there straight to the backend's file where it has
    /// one, and copied out first where it has not.
    /// `cached`: the kernel's write-back of its cached pages under the writeback cache
    /// ([`Backend::write_cached`]).
    fn write(
        &self,
        ino: Ino,
        fh: u64,
        offset: u64,
        data: WriteData<'_>,
        cached: bool,
    ) -> Result<u32> {
        let b = &*self.backend;
        let write = |d: &[u8]| match cached {
            true => b.write_cached(ino, fh, offset, d),
            false => b.write(ino, fh, offset, d),
        };
        let p = match data {
            WriteData::Bytes(d) => return write(d),
            WriteData::Elsewhere(p) => p,
        };
        if let Some(r) = b.write_to_fd(ino, fh, offset, &mut |fd, at| p.write_at(fd, at)) {
            return r;
        }
        WRITE_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.clear();
            p.copy_into(&mut buf)?;
            write(&buf)
        })
    }

    /// READ, WRITE, IOCTL, FALLOCATE, LSEEK and COPY_FILE_RANGE.
    pub(super) fn data(&self, ino: Ino, caller: &Caller, op: &Op<'_>, out: &mut dyn ReplyOut) {
        let b = &*self.backend;
        match *op {
            // Read by the transport straight to where it goes, where both sides can.
            Op::Read { fh, offset, size }
                if out.data_from_fd(&mut |read: &mut FdRead<'_>| {
                    b.read_from_fd(ino, fh, offset, size, read)
                }) => {}
            Op::Read { fh, offset, size } => READ_BUF.with(|buf| {
                let mut buf = buf.borrow_mut();
                let mut out = Some(out);
                let r = b.read_with(ino, fh, offset, size, &mut buf, &mut |parts| {
                    if let Some(out) = out.take() {
                        out.data_parts(parts);
                    }
                });
                if let (Err(e), Some(out)) = (r, out) {
                    out.error(e);
                }
            }),
            Op::Write {
                fh,
                offset,
                data,
                kill_suidgid,
                cached,
            } => {
                let r = self.kill_privs(kill_suidgid, caller, ino).and_then(|()| {
                    // Without the writeback cache, mapped writes arrive as cached pages
                    // too, and the kernel stamps nothing (S_NOCMTIME).
                    let keeps_times = cached && self.granted.writeback;
                    self.write(ino, fh, offset, data, keeps_times)
                });
                if cached && r.is_err() {
                    self.writeback_failed(ino);
                }
                answer(out, r, |out, n| out.written(n));
            }
            Op::Ioctl {
                cmd: crate::ioctl::CONTROL_ADDRESS,
                ..
            } => answer(out, self.control_address(caller), |out, a| out.ioctl(0, &a)),
            Op::Ioctl { cmd, input, .. } => {
                let r = crate::ioctl::ioctl(b, caller, ino, cmd, input);
                if r.is_ok() && crate::ioctl::modifies(cmd) {
                    // chattr moved ctime, which nothing the kernel does on an ioctl tells it.
                    self.attrs_changed(ino);
                }
                answer(out, r, |out, v| out.ioctl(0, &v))
            }
            Op::Fallocate {
                fh,
                offset,
                length,
                mode,
            } => {
                let r = self
                    .kill_privs(!privileged(caller), caller, ino)
                    .and_then(|()| b.fallocate(ino, fh, offset, length, mode));
                answer(out, r, |out, ()| out.empty());
            }
            // Under the writeback cache the kernel asks without writing its dirty pages back
            // first, so where the data and holes are is known to the kernel, not here:
            // ENOSYS makes it answer from its own size from then on (the whole file data,
            // as `lseek(2)` allows).
            Op::Lseek { .. } if self.granted.writeback => {
                answer(out, Err(Errno::ENOSYS), |_, ()| {})
            }
            Op::Lseek { fh, offset, whence } => {
                let r = u64::try_from(offset)
                    .map_err(|_| Errno::ENXIO)
                    .and_then(|off| b.lseek(ino, fh, off, whence));
                answer(out, r, |out, off| out.offset(off));
            }
            Op::CopyFileRange {
                fh_in,
                offset_in,
                ino_out,
                fh_out,
                offset_out,
                len,
            } => {
                let r = self
                    .kill_privs(!privileged(caller), caller, ino_out)
                    .and_then(|()| {
                        b.copy_file_range(ino, fh_in, offset_in, ino_out, fh_out, offset_out, len)
                    });
                answer(out, r, |out, n| out.written(n.min(u32::MAX as u64) as u32));
            }
            // Not of this family (see `Server::dispatch`).
            _ => out.error(Errno::ENOSYS),
        }
    }

    /// The kernel's writeback of cached pages of `ino` failed (a full mount's `ENOSPC`):
    /// the kernel reports the error at the writer's next `fsync` or `close`, but would go
    /// on serving the pages it could not store as if they were the file's. They are dropped
    /// (dirty pages of later writes are written back first), so that what a reader sees is
    /// what the backend holds. Queued, not sent: the kernel waits for this WRITE's answer
    /// before it can drop those pages.
    fn writeback_failed(&self, ino: Ino) {
        self.stats.event(Event::WritebackFailed);
        if let Some(inv) = &self.invalidator {
            inv.inode(ino);
        }
    }

    /// Where the control socket listens, when it has no file of its own (see
    /// [`Server::set_control_address`]): for root and the server's user only.
    fn control_address(&self, caller: &Caller) -> Result<Vec<u8>> {
        // SAFETY: geteuid has no preconditions.
        let own = unsafe { libc::geteuid() };
        if caller.uid != 0 && caller.uid != own {
            return Err(Errno::EACCES);
        }
        let name = self.control_address.get().ok_or(Errno::ENOTTY)?;
        let mut answer = name.clone();
        answer.resize(crate::ioctl::CONTROL_ADDRESS_SIZE, 0);
        Ok(answer)
    }
}
