//! Live migration: the device's whole state, written out by the server a VM leaves and
//! read in by the one it arrives at (vhost-user's device state transfer,
//! `VHOST_USER_PROTOCOL_F_DEVICE_STATE`).
//!
//! The VMM stops every queue (`GET_VRING_BASE`; each queue's thread finishes the chain in
//! hand first), then hands the source a pipe to write the state into and the destination
//! the other end to read it from (`SET_DEVICE_STATE_FD`), and asks each how it went
//! (`CHECK_DEVICE_STATE`). The transfer runs on a thread of its own, while the queues stay
//! quiet. The stream ([`memofs_core::migrate`]) carries the guest's mount (its INIT's
//! arguments and answer, so the destination's request layer starts as the source's did)
//! and then the backend's own state: for the mem backend, every file, so that the
//! filesystem itself travels with the VM; for a shared directory, what the guest holds of
//! it, found again there by path or file handle.

use std::io::{self, BufReader, BufWriter, Read, Write};

use memofs_core::migrate::{invalid, FrameReader, FrameWriter};
use memofs_core::Backend;

use crate::guest::GuestFs;

/// Writes `fs`'s state to `out`.
pub(crate) fn save<B: Backend>(fs: &GuestFs<B>, out: impl Write) -> io::Result<()> {
    let backend = fs.backend().migration().ok_or_else(unsupported)?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut w = FrameWriter::start(&mut out)?;
    match fs.saved_session() {
        Some((init, reply)) => {
            w.frame(&[1])?;
            w.frame(&init)?;
            w.frame(&reply)?;
        }
        None => w.frame(&[0])?,
    }
    backend.save(&mut w)?;
    let (frames, bytes) = (w.frames, w.bytes);
    w.flush()?;
    out.into_inner().map_err(|e| e.into_error())?;
    log::info!("state saved: {frames} frames, {bytes} bytes");
    Ok(())
}

/// Reads the state `save` wrote into `fs`, which must be new.
pub(crate) fn load<B: Backend>(fs: &GuestFs<B>, input: impl Read) -> io::Result<()> {
    let backend = fs.backend().migration().ok_or_else(unsupported)?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let mut r = FrameReader::start(&mut input)?;
    let session = match r.frame()? {
        [0] => None,
        [1] => {
            let init = r.frame()?.to_vec();
            let reply = r.frame()?.to_vec();
            Some((init, reply))
        }
        _ => return Err(invalid("the guest's mount is neither there nor absent")),
    };
    backend.load(&mut r)?;
    let frames = r.frames;
    r.finish()?;
    if let Some((init, reply)) = session {
        fs.resume_session(&init, &reply).map_err(io::Error::other)?;
    }
    log::info!("state loaded: {frames} frames");
    Ok(())
}

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this backend cannot move with its VM",
    )
}
