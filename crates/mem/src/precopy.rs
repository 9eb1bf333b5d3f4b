//! Pre-copy ([`memofs_core::migrate::Precopy`]): the files' data sent to the server a VM
//! moves to while the VM still runs, so that the state QEMU carries while the VM is stopped
//! holds the metadata and only the data changed since.
//!
//! Source: [`MemFs::send`] marks every chunk of file data ([`CHUNK`] bytes) as to be sent,
//! then sends rounds: each takes the chunks marked so far and sends each one's content as it
//! is then (its hole cleared, its data). Every change of data marks its chunks again
//! ([`MemFs::data_changed`], after the change is made: a chunk read while being written is
//! sent again). Told to stop (the VM is stopped and its state is about to be saved: nothing
//! writes any more), it ends the channel, and the chunks still marked go in the state
//! ([`MemFs::take_precopy`]).
//!
//! Destination: [`MemFs::receive`] writes each chunk into a file of its own per inode, kept
//! aside, and remembers what the channel carried ([`Sent`]: its session, frames and
//! digest). The load whose state names that channel waits for it, takes each regular file's
//! data from there, lays the state's chunks over it and cuts it to its size; whatever is
//! left aside (files deleted meanwhile) goes ([`MemFs::take_staged`]).
//!
//! A channel is believed only as far as the state, which comes through the VMM, says: data
//! from another channel, or altered on the way, gives another digest, and the load fails.
//!
//! # Lock order
//! `Precopy::dirty`, `Precopy::sent` and `Precopy::staged` are leaf locks; no file's lock is
//! held while taking one.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use memofs_core::migrate::{invalid, FrameReader, FrameWriter, Sent};
use memofs_core::{Errno, Ino};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::inode::NodeData;
use crate::regular::RegularFile;
use crate::MemFs;

/// Bytes of file data per chunk: the unit changes are tracked and sent in.
pub(crate) const CHUNK: u64 = 1 << 20;

/// How long a load waits for the channel its state names to finish arriving.
const ARRIVAL: Duration = Duration::from_secs(120);

/// One frame of the channel.
#[derive(Serialize, Deserialize, Debug)]
enum Message {
    /// The first: the channel's session.
    Hello { session: [u8; 16] },
    /// Data of inode `ino` at `offset`: the next frame's bytes.
    Data { ino: Ino, offset: u64 },
    /// Inode `ino` holds nothing in `[offset, offset + len)` but what `Data` puts there.
    Clear { ino: Ino, offset: u64, len: u64 },
    /// The last: how many frames came before it.
    End { frames: u64 },
}

/// The pre-copy state of one filesystem.
#[derive(Default)]
pub(crate) struct Precopy {
    /// A send is under way: data changes are marked.
    active: AtomicBool,
    /// Chunks not at the destination as they are now, per inode.
    dirty: Mutex<HashMap<Ino, BTreeSet<u64>>>,
    /// What the last send carried, once it ended well (for the next save).
    sent: Mutex<Option<Sent>>,
    /// Destination: what arrived.
    staged: Mutex<Staged>,
    arrived: Condvar,
}

/// Data received, per inode, and what the channel carried once it ended.
#[derive(Default)]
struct Staged {
    session: [u8; 16],
    files: HashMap<Ino, RegularFile>,
    received: Option<Sent>,
}

/// The frames of a channel, counted and digested as they go.
struct Digest {
    hasher: blake3::Hasher,
    frames: u64,
}

impl Digest {
    fn new() -> Digest {
        Digest {
            hasher: blake3::Hasher::new(),
            frames: 0,
        }
    }

    fn add(&mut self, frame: &[u8]) {
        self.hasher.update(&(frame.len() as u64).to_le_bytes());
        self.hasher.update(frame);
        self.frames += 1;
    }

    fn sent(&self, session: [u8; 16]) -> Sent {
        Sent {
            session,
            frames: self.frames,
            digest: *self.hasher.finalize().as_bytes(),
        }
    }
}

/// The chunks `[start, end)` covers.
fn chunks(start: u64, end: u64) -> std::ops::Range<u64> {
    start / CHUNK..end.div_ceil(CHUNK)
}

fn errno(what: &str, e: Errno) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// A session number no other channel has (from the kernel's random numbers: a sandboxed
/// server has no /dev/urandom).
fn session() -> io::Result<[u8; 16]> {
    let mut s = [0u8; 16];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::getrandom(s.as_mut_ptr().cast(), s.len(), 0) };
    match n {
        16 => Ok(s),
        _ => Err(io::Error::last_os_error()),
    }
}

impl MemFs {
    /// Bytes `[start, end)` of `inode`'s data changed: its times move, and a pre-copy under
    /// way sends those chunks again.
    pub(crate) fn data_changed(&self, inode: &crate::inode::Inode, start: u64, end: u64) {
        inode.touch_modified(memofs_core::Timestamp::now());
        self.data_dirtied(inode.ino, start, end);
    }

    /// `[start, end)` of `ino` changed, its times stay: a running pre-copy sends it again.
    pub(crate) fn data_dirtied(&self, ino: Ino, start: u64, end: u64) {
        if self.precopy.active.load(Ordering::Acquire) && start < end {
            let mut dirty = self.precopy.dirty.lock();
            dirty.entry(ino).or_default().extend(chunks(start, end));
        }
    }

    /// What the save writes of a pre-copy that ended well: what the channel carried, and
    /// the chunks it did not carry as they are now. Pre-copy is over either way.
    pub(crate) fn take_precopy(&self) -> Option<(Sent, HashMap<Ino, BTreeSet<u64>>)> {
        let sent = self.precopy.sent.lock().take();
        self.precopy.active.store(false, Ordering::Release);
        let dirty = std::mem::take(&mut *self.precopy.dirty.lock());
        sent.map(|s| (s, dirty))
    }

    /// Waits for the channel `want` names to have arrived whole.
    pub(crate) fn await_staged(&self, want: &Sent) -> io::Result<()> {
        let deadline = Instant::now() + ARRIVAL;
        let mut staged = self.precopy.staged.lock();
        while staged.received.as_ref() != Some(want) {
            if staged.received.is_some() && staged.session == want.session {
                return Err(io::Error::other(
                    "the pre-copy channel carried other data than the source sent",
                ));
            }
            if self
                .precopy
                .arrived
                .wait_until(&mut staged, deadline)
                .timed_out()
            {
                return Err(io::Error::other(format!(
                    "the pre-copy channel the state names did not arrive within {} s",
                    ARRIVAL.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// The data received for `ino`, taken out of the staging.
    pub(crate) fn take_staged(&self, ino: Ino) -> Option<RegularFile> {
        self.precopy.staged.lock().files.remove(&ino)
    }

    /// Drops whatever is still aside.
    pub(crate) fn drop_staged(&self) {
        let files = std::mem::take(&mut self.precopy.staged.lock().files);
        for (_, f) in files {
            self.limits.uncharge_bytes(f.release_all());
        }
    }

    /// Marks every chunk of every file's data as to be sent (holes are not: a new
    /// channel's destination starts from empty files).
    fn mark_all(&self) -> io::Result<()> {
        for inode in self.table.all() {
            let NodeData::File(f) = &inode.data else {
                continue;
            };
            let marks: BTreeSet<u64> = extents(f, 0, f.size())?
                .into_iter()
                .flat_map(|(offset, len)| chunks(offset, offset + len))
                .collect();
            if !marks.is_empty() {
                self.precopy
                    .dirty
                    .lock()
                    .entry(inode.ino)
                    .or_default()
                    .extend(marks);
            }
        }
        Ok(())
    }

    /// Sends chunk `chunk` of `file` (inode `ino`): its data in `pieces`, as it is now.
    fn send_chunk(
        w: &mut FrameWriter<'_>,
        digest: &mut Digest,
        (ino, file): (Ino, &RegularFile),
        (chunk, pieces): (u64, &[(u64, u64)]),
        data: &mut Vec<u8>,
    ) -> io::Result<u64> {
        put(
            w,
            digest,
            &Message::Clear {
                ino,
                offset: chunk * CHUNK,
                len: CHUNK,
            },
        )?;
        let mut sent = 0;
        for &(offset, len) in pieces {
            data.clear();
            file.read(offset, len as u32, data, true)
                .map_err(|e| errno("reading data", e))?;
            if data.is_empty() {
                continue;
            }
            put(w, digest, &Message::Data { ino, offset })?;
            digest.add(data);
            w.frame(data)?;
            sent += data.len() as u64;
        }
        Ok(sent)
    }

    /// One round: every chunk marked now, sent; those left when `stop` came are marked
    /// again. The bytes of data sent.
    fn round(
        &self,
        w: &mut FrameWriter<'_>,
        digest: &mut Digest,
        stop: &AtomicBool,
    ) -> io::Result<u64> {
        let mut round: Vec<(Ino, BTreeSet<u64>)> = std::mem::take(&mut *self.precopy.dirty.lock())
            .into_iter()
            .collect();
        round.sort_unstable_by_key(|(ino, _)| *ino);
        let (mut bytes, mut data) = (0, Vec::with_capacity(CHUNK as usize));
        let mut left = round.into_iter();
        while let Some((ino, chunks)) = left.next() {
            // A file gone since sends nothing (the destination drops what it has of it).
            let Ok(inode) = self.table.get(ino) else {
                continue;
            };
            let Ok(file) = inode.file() else {
                continue;
            };
            let mut todo = chunk_extents(file, &chunks)?.into_iter();
            while let Some((chunk, pieces)) = todo.next() {
                if stop.load(Ordering::Acquire) {
                    let rest = std::iter::once(chunk).chain(todo.map(|(c, _)| c));
                    let mut dirty = self.precopy.dirty.lock();
                    dirty.entry(ino).or_default().extend(rest);
                    for (ino, rest) in left {
                        dirty.entry(ino).or_default().extend(rest);
                    }
                    return Ok(bytes);
                }
                bytes += Self::send_chunk(w, digest, (ino, file), (chunk, &pieces), &mut data)?;
            }
        }
        Ok(bytes)
    }

    fn send_rounds(
        &self,
        out: &mut dyn Write,
        stop: &AtomicBool,
        round_done: &mut dyn FnMut(u64),
    ) -> io::Result<Sent> {
        let session = session()?;
        self.precopy.active.store(true, Ordering::Release);
        self.mark_all()?;
        let mut w = FrameWriter::start(out)?;
        let mut digest = Digest::new();
        put(&mut w, &mut digest, &Message::Hello { session })?;
        while !stop.load(Ordering::Acquire) {
            let bytes = self.round(&mut w, &mut digest, stop)?;
            w.flush()?;
            round_done(bytes);
            if bytes == 0 {
                // Nothing changed: look again shortly.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let end = postcard::to_allocvec(&Message::End {
            frames: digest.frames,
        })
        .map_err(invalid)?;
        w.frame(&end)?;
        w.flush()?;
        Ok(digest.sent(session))
    }

    fn stage(&self, digest: &mut Digest, m: Message, r: &mut FrameReader<'_>) -> io::Result<()> {
        match m {
            Message::Data { ino, offset } => {
                let data = r.frame()?;
                digest.add(data);
                let mut staged = self.precopy.staged.lock();
                let file = match staged.files.entry(ino) {
                    std::collections::hash_map::Entry::Occupied(f) => f.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => v.insert(
                        self.new_regular(false)
                            .map_err(|e| errno("a data file", e))?,
                    ),
                };
                let n = file
                    .write(&self.limits, offset, data)
                    .map_err(|e| errno("staging data", e))?;
                if n as usize != data.len() {
                    return Err(io::Error::other("staging data: no room"));
                }
                Ok(())
            }
            Message::Clear { ino, offset, len } => {
                let staged = self.precopy.staged.lock();
                if let Some(f) = staged.files.get(&ino) {
                    clear(f, &self.limits, offset, len)?;
                }
                Ok(())
            }
            other => Err(invalid(format!("pre-copy: unexpected {other:?}"))),
        }
    }

    fn receive_frames(&self, input: &mut dyn Read) -> io::Result<Sent> {
        let mut r = FrameReader::start(input)?;
        let mut digest = Digest::new();
        let first = r.frame()?.to_vec();
        digest.add(&first);
        let Ok(Message::Hello { session }) = postcard::from_bytes(&first) else {
            return Err(invalid("pre-copy: no hello"));
        };
        {
            // A new channel replaces whatever an earlier one left.
            let mut staged = self.precopy.staged.lock();
            if staged.session != session {
                let files = std::mem::take(&mut staged.files);
                staged.session = session;
                staged.received = None;
                drop(staged);
                for (_, f) in files {
                    self.limits.uncharge_bytes(f.release_all());
                }
            }
        }
        loop {
            let frame = r.frame()?.to_vec();
            let m: Message =
                postcard::from_bytes(&frame).map_err(|e| invalid(format!("pre-copy: {e}")))?;
            if let Message::End { frames } = m {
                if frames != digest.frames {
                    return Err(invalid("pre-copy: frames lost"));
                }
                let sent = digest.sent(session);
                let mut staged = self.precopy.staged.lock();
                staged.received = Some(sent);
                self.precopy.arrived.notify_all();
                return Ok(sent);
            }
            digest.add(&frame);
            self.stage(&mut digest, m, &mut r)?;
        }
    }
}

impl memofs_core::migrate::Precopy for MemFs {
    fn send(
        &self,
        out: &mut dyn Write,
        stop: &AtomicBool,
        round_done: &mut dyn FnMut(u64),
    ) -> io::Result<Sent> {
        *self.precopy.sent.lock() = None;
        match self.send_rounds(out, stop, round_done) {
            Ok(sent) => {
                *self.precopy.sent.lock() = Some(sent);
                Ok(sent)
            }
            Err(e) => {
                self.take_precopy();
                Err(e)
            }
        }
    }

    fn receive(&self, input: &mut dyn Read) -> io::Result<Sent> {
        self.receive_frames(input)
    }
}

/// Writes message `m` as a frame, counted in `digest`.
fn put(w: &mut FrameWriter<'_>, digest: &mut Digest, m: &Message) -> io::Result<()> {
    let bytes = postcard::to_allocvec(m).map_err(invalid)?;
    digest.add(&bytes);
    w.frame(&bytes)
}

/// Pieces of a file's data, as (offset, length).
pub(crate) type Pieces = Vec<(u64, u64)>;

/// The data extents of `f` within `[start, end)`, as (offset, length) of at most [`CHUNK`].
pub(crate) fn extents(f: &RegularFile, start: u64, end: u64) -> io::Result<Pieces> {
    let mut out = Vec::new();
    for (from, to) in data_ranges(f, start, end)? {
        let mut off = from;
        while off < to {
            let len = (to - off).min(CHUNK);
            out.push((off, len));
            off += len;
        }
    }
    Ok(out)
}

/// The data extents of `f` in each chunk of `chunks`, cut at the chunks' bounds, chunk by
/// chunk in order: found in one pass over the chunks' span, as `SEEK_HOLE` walks a file's
/// data up to its next hole whatever range was asked (chunk by chunk, a long extent would
/// be walked once per chunk).
pub(crate) fn chunk_extents(
    f: &RegularFile,
    chunks: &BTreeSet<u64>,
) -> io::Result<Vec<(u64, Pieces)>> {
    let (Some(&first), Some(&last)) = (chunks.first(), chunks.last()) else {
        return Ok(Vec::new());
    };
    let ranges = data_ranges(f, first * CHUNK, ((last + 1) * CHUNK).min(f.size()))?;
    let mut next = 0;
    let mut out = Vec::with_capacity(chunks.len());
    for &chunk in chunks {
        let (start, end) = (chunk * CHUNK, (chunk + 1) * CHUNK);
        while next < ranges.len() && ranges[next].1 <= start {
            next += 1;
        }
        let pieces = ranges[next..]
            .iter()
            .take_while(|(from, _)| *from < end)
            .map(|&(from, to)| (from.max(start), to.min(end) - from.max(start)))
            .collect();
        out.push((chunk, pieces));
    }
    Ok(out)
}

/// The data of `f` within `[start, end)`, as (start, end) ranges.
pub(crate) fn data_ranges(f: &RegularFile, start: u64, end: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let from = match f.seek(at, libc::SEEK_DATA) {
            Ok(o) if o < end => o,
            Ok(_) | Err(Errno::ENXIO) => break,
            Err(e) => return Err(errno("finding data", e)),
        };
        let to = f
            .seek(from, libc::SEEK_HOLE)
            .map_err(|e| errno("finding a hole", e))?
            .min(end);
        out.push((from, to));
        at = to.max(from + 1);
    }
    Ok(out)
}

/// Makes `[offset, offset + len)` of `f` a hole (its size stays).
pub(crate) fn clear(
    f: &RegularFile,
    limits: &crate::limits::Limits,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let size = f.size();
    if offset >= size {
        return Ok(());
    }
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    f.fallocate(limits, offset, len.min(size - offset), mode)
        .map_err(|e| errno("clearing data", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    /// Chunk by chunk, as `chunk_extents` must answer in one pass.
    fn one_by_one(f: &RegularFile, chunk: u64) -> Vec<(u64, u64)> {
        let end = ((chunk + 1) * CHUNK).min(f.size());
        data_ranges(f, chunk * CHUNK, end)
            .unwrap()
            .into_iter()
            .map(|(from, to)| (from, to - from))
            .collect()
    }

    #[test]
    fn chunk_extents_are_each_chunks_data_cut_at_its_bounds() {
        let l = Limits::new(0, 0);
        let f = RegularFile::new();
        let page = 4096u64;
        // Data across the bound of chunks 0 and 1, a hole to the middle of chunk 2, a page
        // there, chunk 3 a hole, the last page of chunk 4, and the file ending in chunk 5.
        f.write(&l, 0, &vec![1u8; (CHUNK + CHUNK / 2) as usize])
            .unwrap();
        f.write(&l, 2 * CHUNK + CHUNK / 2, &[2u8; 4096]).unwrap();
        f.write(&l, 5 * CHUNK - page, &[3u8; 4096]).unwrap();
        f.truncate(&l, 5 * CHUNK + page).unwrap();
        for set in 0u32..64 {
            let chunks: BTreeSet<u64> = (0..6).filter(|c| set & (1 << c) != 0).collect();
            let got = chunk_extents(&f, &chunks).unwrap();
            let want: Vec<_> = chunks.iter().map(|&c| (c, one_by_one(&f, c))).collect();
            assert_eq!(got, want, "chunks {chunks:?}");
        }
        let all: BTreeSet<u64> = (0..6).collect();
        assert_eq!(
            chunk_extents(&f, &all).unwrap(),
            vec![
                (0, vec![(0, CHUNK)]),
                (1, vec![(CHUNK, CHUNK / 2)]),
                (2, vec![(2 * CHUNK + CHUNK / 2, page)]),
                (3, vec![]),
                (4, vec![(5 * CHUNK - page, page)]),
                (5, vec![]),
            ]
        );
    }
}
