//! One descriptor chain: the request read out of guest memory, the reply written back.
//!
//! A guest controls every byte here: the descriptors (addresses, lengths, flags, where the
//! chain goes next) and the request in them. `virtio-queue`'s `Reader` and `Writer` check
//! every descriptor against the memory the VMM shared before a byte moves (a chain reaching
//! outside it is refused whole; one longer than the queue, or looping, ends where the queue's
//! bound cuts it); this module bounds what a request may make the server read
//! ([`MAX_REQUEST`]) and what it may ask to be given back (the guest_fs refuses sizes past the
//! largest READ), answers a malformed request with an error when its header could be read,
//! and never writes more than the chain's writable part holds.
//!
//! A reply goes straight into the chain's writable part ([`GuestReply`]): its header and
//! then each part the request layer hands over, so a READ's data is copied once, from where
//! the backend holds it, into the guest's buffers, with no reply buffer between: the page
//! store's own pages are copied; a host file (or the mem backend's kernel-backed data) is
//! read with `preadv` straight into the guest memory the chain's descriptors name.

use std::io::{Read, Write};
use std::ops::Deref;

use vm_memory::bitmap::BitmapSlice;
use vm_memory::{Permissions, VolatileSlice};
use zerocopy::IntoBytes;

use memofs_core::{Backend, Errno};
use memofs_proto::abi;
use memofs_proto::encode::{Encoder, ReplySink};
use memofs_proto::init::MAX_WRITE;
use memofs_request::{FdSource, ReplyOut};
use virtio_queue::DescriptorChain;
use vm_memory::GuestMemory;

use crate::guest::{header, GuestFs, OUT_HEADER};
use crate::guest_io::{self, GuestPayload};

/// The largest request read out of a chain: the largest WRITE the guest may send (INIT
/// tells it [`MAX_WRITE`]) with its header and arguments. Anything longer is refused
/// with `EINVAL` without reading it.
pub const MAX_REQUEST: usize = MAX_WRITE as usize + 4096;

const IN_HEADER: usize = std::mem::size_of::<abi::fuse_in_header>();
/// A WRITE's header and arguments, before its data.
const WRITE_ARGS: usize = IN_HEADER + std::mem::size_of::<abi::fuse_write_in>();

/// Buffers one queue's requests reuse.
#[derive(Default)]
pub struct Buffers {
    request: Vec<u8>,
    scratch: Vec<u8>,
}

/// Serves the request in `chain` (in the guest memory the chain holds); returns the bytes
/// written into its writable part, for the used ring (0 for a request that takes no reply,
/// or a chain that could not be read).
pub fn serve<B: Backend, M: GuestMemory, MM: Deref<Target = M> + Clone>(
    guest_fs: &GuestFs<B>,
    chain: DescriptorChain<MM>,
    bufs: &mut Buffers,
) -> u32 {
    let descs = chain.clone();
    let mem = descs.memory();
    let (mut reader, mut writer) = match (chain.clone().reader(mem), chain.writer(mem)) {
        (Ok(r), Ok(w)) => (r, w),
        (Err(e), _) | (_, Err(e)) => {
            log::warn!("descriptor chain refused: {e}");
            return 0;
        }
    };
    let Buffers { request, scratch } = bufs;
    let mut reply = GuestReply::new(&mut writer);
    match read_request(&mut reader, request) {
        Ok(left) => {
            let h = header(request).expect("read_request read a whole header");
            if h.opcode == abi::opcode::READ {
                let writable = descs.clone().writable().map(|d| (d.addr(), d.len()));
                reply.data = guest_io::slices(mem, writable, Permissions::Write);
            }
            let room = reply.writer.room();
            let body = &request[IN_HEADER..];
            if left == 0 {
                guest_fs.answer(&h, body, None, room, scratch, &mut reply);
                return reply.written;
            }
            // A WRITE's data, left in guest memory after the arguments read.
            let readable = descs.clone().readable().map(|d| (d.addr(), d.len()));
            let payload = guest_io::slices(mem, readable, Permissions::Read)
                .and_then(|s| GuestPayload::new(&s, request.len(), left));
            match payload {
                Some(p) => guest_fs.answer(&h, body, Some(&p), room, scratch, &mut reply),
                None => Encoder::new(h.unique, scratch, &mut reply).error(Errno::EINVAL),
            }
        }
        Err(Some((unique, e))) => Encoder::new(unique, scratch, &mut reply).error(e),
        Err(None) => return 0,
    }
    reply.written
}

/// Reads a request into `buf`: its header's `len` bytes, but for a WRITE only up to its
/// data, whose length it returns (the data stays in guest memory, see [`GuestPayload`]).
/// `Err(Some)` for a request to answer with an error (its header read, the rest malformed
/// or too long), `Err(None)` for one that cannot be answered (no whole header).
fn read_request(reader: &mut impl Read, buf: &mut Vec<u8>) -> Result<usize, Option<(u64, Errno)>> {
    buf.clear();
    buf.resize(IN_HEADER, 0);
    if reader.read_exact(buf).is_err() {
        log::warn!("request shorter than its header: not answered");
        return Err(None);
    }
    let h = header(buf).ok_or(None)?;
    let len = h.len as usize;
    if !(IN_HEADER..=MAX_REQUEST).contains(&len) {
        log::warn!("request length {len} (opcode {}) refused", h.opcode);
        return Err(Some((h.unique, Errno::EINVAL)));
    }
    let read = if h.opcode == abi::opcode::WRITE {
        len.min(WRITE_ARGS)
    } else {
        len
    };
    buf.resize(read, 0);
    if reader.read_exact(&mut buf[IN_HEADER..]).is_err() {
        log::warn!(
            "request shorter than its length {len} (opcode {})",
            h.opcode
        );
        return Err(Some((h.unique, Errno::EINVAL)));
    }
    Ok(len - read)
}

/// One reply, written into the chain's writable part as it is sent: one that does not fit
/// is replaced by an `EINVAL` error (the guest gave too little room for what it asked); a
/// chain that fails part-way (its memory gone) counts as nothing written. A request has
/// one reply: a second `send` is ignored.
struct GuestReply<'w, 'm, W: WriteRoom, B: BitmapSlice> {
    writer: &'w mut W,
    /// For a READ, the chain's writable memory, where a descriptor is read straight into.
    data: Option<Vec<VolatileSlice<'m, B>>>,
    /// Bytes written, for the used ring; 0 until sent.
    written: u32,
    sent: bool,
}

impl<'w, W: WriteRoom, B: BitmapSlice> GuestReply<'w, '_, W, B> {
    fn new(writer: &'w mut W) -> Self {
        GuestReply {
            writer,
            data: None,
            written: 0,
            sent: false,
        }
    }

    fn write(&mut self, h: &abi::fuse_out_header, parts: &[&[u8]]) -> std::io::Result<()> {
        self.writer.write_all(h.as_bytes())?;
        for p in parts {
            self.writer.write_all(p)?;
        }
        Ok(())
    }
}

impl<W: WriteRoom, B: BitmapSlice> ReplySink for GuestReply<'_, '_, W, B> {
    fn send(&mut self, unique: u64, error: i32, parts: &[&[u8]]) {
        if std::mem::replace(&mut self.sent, true) {
            log::warn!("a second reply to request {unique} dropped");
            return;
        }
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let room = self.writer.room();
        let (h, parts) = if OUT_HEADER + body <= room {
            (abi::fuse_out_header::reply(unique, error, body), parts)
        } else {
            log::warn!(
                "reply of {} bytes for {room} of room: refused",
                OUT_HEADER + body
            );
            (
                abi::fuse_out_header::reply(unique, -Errno::EINVAL.0, 0),
                &[][..],
            )
        };
        if h.len as usize > room || self.write(&h, parts).is_err() {
            return;
        }
        self.written = h.len;
    }

    /// READ from a descriptor: the bytes go with `preadv` into the chain's memory after the
    /// header's room, then the header goes in front of them.
    fn data_from_fd(&mut self, unique: u64, source: &mut FdSource<'_>) -> bool {
        let Some(slices) = self.data.take() else {
            return false;
        };
        let Some(space) = self.writer.room().checked_sub(OUT_HEADER) else {
            return false;
        };
        if self.sent {
            return false;
        }
        let r = source(&mut |fd, offset, len| {
            guest_io::pread_into(&slices, OUT_HEADER, fd, offset, len.min(space))
        });
        match r {
            None => false,
            Some(Ok(n)) => {
                self.sent = true;
                let h = abi::fuse_out_header::reply(unique, 0, n);
                if self.writer.write_all(h.as_bytes()).is_ok() {
                    self.written = h.len;
                }
                true
            }
            Some(Err(e)) => {
                self.send(unique, -e.0, &[]);
                true
            }
        }
    }
}

/// A writer that says how much it can take.
trait WriteRoom: Write {
    fn room(&self) -> usize;
}

impl<B: vm_memory::bitmap::BitmapSlice> WriteRoom for virtio_queue::Writer<'_, B> {
    fn room(&self) -> usize {
        self.available_bytes()
    }
}
