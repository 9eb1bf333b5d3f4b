//! Live migration: the device's whole state, written out by the server a VM leaves and
//! read in by the one it arrives at (vhost-user's device state transfer,
//! `VHOST_USER_PROTOCOL_F_DEVICE_STATE`).
//!
//! The VMM stops every queue (`GET_VRING_BASE`; each queue's thread finishes the chain in
//! hand first), then hands the source a pipe to write the state into and the destination
//! the other end to read it from (`SET_DEVICE_STATE_FD`), and asks each how it went
//! (`CHECK_DEVICE_STATE`). The transfer runs on a thread of its own, while the queues stay
//! quiet. The stream ([`memofs_core::migrate`]) carries the settings a guest can tell
//! apart (a destination with others refuses the state), the guest's mount (its INIT's
//! arguments and answer, so the destination's request layer starts as the source's did,
//! and the opens it holds to execute files, which keep those files from being truncated)
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
    w.frame(fs.guest_settings().as_bytes())?;
    match fs.saved_session() {
        Some((init, reply, exec_opens)) => {
            w.frame(&[1])?;
            w.frame(&init)?;
            w.frame(&reply)?;
            let mut opens = Vec::with_capacity(exec_opens.len() * 20);
            for (ino, fh, n) in exec_opens {
                opens.extend(ino.to_le_bytes());
                opens.extend(fh.to_le_bytes());
                opens.extend(n.to_le_bytes());
            }
            w.frame(&opens)?;
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
    let theirs = String::from_utf8_lossy(r.frame()?).into_owned();
    fs.check_settings(&theirs).map_err(io::Error::other)?;
    let session = match r.frame()? {
        [0] => None,
        [1] => {
            let init = r.frame()?.to_vec();
            let reply = r.frame()?.to_vec();
            let opens = r.frame()?;
            if opens.len() % 20 != 0 {
                return Err(invalid("the exec opens are cut"));
            }
            let exec_opens: Vec<_> = opens
                .chunks_exact(20)
                .map(|e| {
                    let word = |at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap());
                    let n = u32::from_le_bytes(e[16..20].try_into().unwrap());
                    (word(0), word(8), n.min(MAX_EXEC_OPENS))
                })
                .collect();
            Some((init, reply, exec_opens))
        }
        _ => return Err(invalid("the guest's mount is neither there nor absent")),
    };
    backend.load(&mut r)?;
    let frames = r.frames;
    r.finish()?;
    if let Some((init, reply, exec_opens)) = session {
        fs.resume_session(&init, &reply, &exec_opens)
            .map_err(io::Error::other)?;
    }
    log::info!("state loaded: {frames} frames");
    Ok(())
}

/// Exec opens of one handle past this are a corrupt stream (each costs the reader a step).
const MAX_EXEC_OPENS: u32 = 1 << 16;

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this backend cannot move with its VM",
    )
}
