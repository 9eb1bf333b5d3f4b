//! Moving a filesystem to another server process: a VM's live migration, where the device's
//! whole state travels with the guest (vhost-user's device state transfer).
//!
//! The state is a stream of frames, each a little-endian `u32` length and that many bytes,
//! so that a reader never holds more than one frame ([`MAX_FRAME`]) and a truncated or
//! corrupt stream is an error, never a guess. The stream starts with [`MAGIC`] and the
//! format's [`VERSION`]; what the frames hold is the writer's business (the transport's
//! session, then the backend's [`Migrate`] records).

use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;

/// The first bytes of every state stream.
pub const MAGIC: &[u8; 12] = b"memofs-state";
/// The stream format this memofs writes; a reader refuses what it does not read (an older
/// reader, a newer stream).
pub const VERSION: u32 = 2;
/// The oldest format this memofs reads: format 1 lacks only records format 2 added (a mem
/// file's pages allocated past its end).
pub const OLDEST_VERSION: u32 = 1;
/// The largest frame: a 1 MiB chunk of file data with room to spare.
pub const MAX_FRAME: usize = 2 << 20;

/// How a backend exporting a host directory names, in the state, the host files the guest
/// holds, for the destination to find them again (virtiofsd's `--migration-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FindBy {
    /// By path under the export: any destination that sees the same tree finds them.
    #[default]
    Paths,
    /// By file handle: the same filesystem only, and the destination needs
    /// `CAP_DAC_READ_SEARCH`; but a file deleted while open is found too.
    FileHandles,
}

/// What the destination does with a host file the guest holds that it cannot find again
/// (virtiofsd's `--migration-on-error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// The state is refused: the migration fails and the VM runs on at the source.
    #[default]
    Abort,
    /// The VM moves: the node stays known to the guest under its id, every request on it (or
    /// on a handle of it) answers `EIO`, and FORGET and RELEASE let go of it as usual.
    GuestError,
}

/// The choices about migration a mount makes (virtiofsd's `--migration-*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Choices {
    /// How the source names host files.
    pub find_by: FindBy,
    /// The destination checks that each path leads to the very host file the source held
    /// (their file handles agree: the same filesystem only).
    pub verify_handles: bool,
    /// What the destination does with a file it cannot find again.
    pub on_error: OnError,
}

/// A backend whose whole state can be written out and rebuilt elsewhere.
pub trait Migrate: Send + Sync {
    /// Writes every inode, name, byte of data, extended attribute, lookup count and open
    /// count to `out`. The caller has stopped every request for the duration: the backend
    /// sees no change while it writes.
    fn save(&self, out: &mut FrameWriter<'_>) -> io::Result<()>;
    /// Rebuilds what [`Migrate::save`] wrote into this backend, which must be new (nothing
    /// but its root). Reads frames up to and including the backend's last one.
    fn load(&self, input: &mut FrameReader<'_>) -> io::Result<()>;
    /// Sending data ahead of the state ([`Precopy`]), for a backend that holds data of its
    /// own; `None` for one whose files stay where they are.
    fn precopy(&self) -> Option<&dyn Precopy> {
        None
    }
}

/// Pre-copy: a backend's file data sent to the server its VM moves to while the VM still
/// runs, over a channel of the two servers' own, so that the state [`Migrate::save`] writes
/// in the stopped phase holds the metadata and only the data changed since it was sent.
pub trait Precopy: Send + Sync {
    /// Source: sends every file's data on `out`, then what changes, round after round,
    /// until `stop` is set; `round_done` is called after each round with the bytes it sent.
    /// On success the next [`Migrate::save`] writes only what `out` did not carry, and names
    /// what it did ([`Sent`]); on failure it writes everything.
    fn send(
        &self,
        out: &mut dyn Write,
        stop: &AtomicBool,
        round_done: &mut dyn FnMut(u64),
    ) -> io::Result<Sent>;
    /// Destination: takes what a source sends on `input` until its end, kept aside for the
    /// [`Migrate::load`] whose state names it.
    fn receive(&self, input: &mut dyn Read) -> io::Result<Sent>;
}

/// What a pre-copy channel carried, as the source's state names it and the destination
/// checks before it takes the data: the session, the frames sent, and a digest of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// A number the source drew for the channel.
    pub session: [u8; 16],
    /// Frames sent.
    pub frames: u64,
    /// BLAKE3 of every frame sent, in order.
    pub digest: [u8; 32],
}

/// An error for a stream that is not what its reader expects.
pub fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("state stream: {what}"))
}

/// Writes frames.
pub struct FrameWriter<'a> {
    out: &'a mut dyn Write,
    /// Frames written, for the reader's error messages and the caller's report.
    pub frames: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl<'a> FrameWriter<'a> {
    /// Starts a stream on `out`: the magic and the version.
    pub fn start(out: &'a mut dyn Write) -> io::Result<FrameWriter<'a>> {
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        Ok(FrameWriter {
            out,
            frames: 0,
            bytes: (MAGIC.len() + 4) as u64,
        })
    }

    /// One frame of `bytes`.
    pub fn frame(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() > MAX_FRAME {
            return Err(invalid(format!("a frame of {} bytes", bytes.len())));
        }
        self.out.write_all(&(bytes.len() as u32).to_le_bytes())?;
        self.out.write_all(bytes)?;
        self.frames += 1;
        self.bytes += 4 + bytes.len() as u64;
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads frames, one at a time into one buffer.
pub struct FrameReader<'a> {
    input: &'a mut dyn Read,
    buf: Vec<u8>,
    /// Frames read so far.
    pub frames: u64,
}

impl<'a> FrameReader<'a> {
    /// Checks the magic and the version at the start of `input`.
    pub fn start(input: &'a mut dyn Read) -> io::Result<FrameReader<'a>> {
        let mut head = [0u8; MAGIC.len() + 4];
        input
            .read_exact(&mut head)
            .map_err(|e| invalid(format!("no header ({e})")))?;
        if &head[..MAGIC.len()] != MAGIC {
            return Err(invalid("not a memofs state stream"));
        }
        let version = u32::from_le_bytes(head[MAGIC.len()..].try_into().expect("4 bytes"));
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(invalid(format!(
                "format {version}, this memofs reads formats {OLDEST_VERSION} to {VERSION}"
            )));
        }
        Ok(FrameReader {
            input,
            buf: Vec::new(),
            frames: 0,
        })
    }

    /// The next frame; an error at the end of the stream or past [`MAX_FRAME`].
    pub fn frame(&mut self) -> io::Result<&[u8]> {
        let mut len = [0u8; 4];
        self.input
            .read_exact(&mut len)
            .map_err(|e| invalid(format!("ends before frame {} ({e})", self.frames + 1)))?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(invalid(format!(
                "frame {} claims {len} bytes (at most {MAX_FRAME})",
                self.frames + 1
            )));
        }
        self.buf.resize(len, 0);
        self.input
            .read_exact(&mut self.buf)
            .map_err(|e| invalid(format!("frame {} cut short ({e})", self.frames + 1)))?;
        self.frames += 1;
        Ok(&self.buf)
    }

    /// Checks that nothing follows the last frame.
    pub fn finish(self) -> io::Result<()> {
        let mut one = [0u8; 1];
        match self.input.read(&mut one)? {
            0 => Ok(()),
            _ => Err(invalid(format!("bytes after frame {}", self.frames))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_named() {
        let mut bytes = Vec::new();
        {
            let mut w = FrameWriter::start(&mut bytes).unwrap();
            w.frame(b"one").unwrap();
            w.frame(&[]).unwrap();
            w.frame(&vec![7u8; 1000]).unwrap();
            assert!(w.frame(&vec![0u8; MAX_FRAME + 1]).is_err());
        }
        let mut input = &bytes[..];
        let mut r = FrameReader::start(&mut input).unwrap();
        assert_eq!(r.frame().unwrap(), b"one");
        assert_eq!(r.frame().unwrap(), b"");
        assert_eq!(r.frame().unwrap().len(), 1000);
        assert!(
            r.frame().is_err(),
            "the end is an error where a frame is expected"
        );

        let mut cut = &bytes[..bytes.len() - 1];
        let mut r = FrameReader::start(&mut cut).unwrap();
        r.frame().unwrap();
        r.frame().unwrap();
        let e = r.frame().unwrap_err().to_string();
        assert!(e.contains("frame 3 cut short"), "{e}");

        let mut huge = bytes[..16].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut input = &huge[..];
        let e = FrameReader::start(&mut input).unwrap().frame().unwrap_err();
        assert!(e.to_string().contains("claims"), "{e}");

        let mut other = b"something else entirely".to_vec();
        let mut input = &other[..];
        assert!(FrameReader::start(&mut input).is_err());
        other[..MAGIC.len()].copy_from_slice(MAGIC);
        other[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&9u32.to_le_bytes());
        let mut input = &other[..];
        let e = FrameReader::start(&mut input).err().unwrap().to_string();
        assert!(e.contains("format 9"), "{e}");
    }
}
