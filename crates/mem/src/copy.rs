//! `copy_file_range` in the mem backend: data is copied, holes stay holes.
//!
//! The source range is walked with `SEEK_DATA`/`SEEK_HOLE`, so a copy costs what the source
//! holds there: its data is read and written in pieces of [`COPY_CHUNK`], and each hole
//! becomes a hole in the destination (punched, the file extended over it), allocating
//! nothing. Copying a petabyte of holes is a few map lookups. One call copies at most
//! [`MAX_COPY`] bytes; a shorter count than asked is what `copy_file_range(2)` allows, and
//! callers loop.

use memofs_core::{Errno, Ino, Result};

use crate::regular::{RegularFile, MAX_FILE_SIZE, PAGE_SIZE};
use crate::MemFs;

/// Largest piece of data read and written at once.
const COPY_CHUNK: u64 = 1 << 20;

/// Most bytes one call copies: the largest multiple of the page size that the 32-bit count
/// of a FUSE reply holds (Linux clamps its requests the same way).
pub const MAX_COPY: u64 = u32::MAX as u64 & !(PAGE_SIZE - 1);

/// One copy between two files.
struct Copy<'a> {
    fs: &'a MemFs,
    src: &'a RegularFile,
    dst: &'a RegularFile,
    /// Source offset reached; everything before it is copied.
    pos: u64,
    /// Source end of the copy.
    end: u64,
    /// Destination offset minus source offset (wrapping: the destination may lie before).
    shift: u64,
    buf: Vec<u8>,
}

impl Copy<'_> {
    fn out(&self, src_off: u64) -> u64 {
        src_off.wrapping_add(self.shift)
    }

    /// Copies until the end or the source's end of file; `pos` says how far it got.
    fn run(&mut self) -> Result<()> {
        loop {
            let limit = self.end.min(self.src.size());
            if self.pos >= limit {
                return Ok(());
            }
            let data = match self.src.seek(self.pos, libc::SEEK_DATA) {
                Ok(d) => d.min(limit),
                Err(Errno::ENXIO) => limit,
                Err(e) => return Err(e),
            };
            if data > self.pos {
                self.dst
                    .zero_range(&self.fs.limits, self.out(self.pos), data - self.pos)?;
                self.pos = data;
                continue;
            }
            let hole = self.src.seek(self.pos, libc::SEEK_HOLE)?.min(limit);
            while self.pos < hole {
                let n = (hole - self.pos).min(COPY_CHUNK) as u32;
                self.src.read(self.pos, n, &mut self.buf, false)?;
                if self.buf.is_empty() {
                    return Ok(()); // the source shrank meanwhile
                }
                let written = self
                    .dst
                    .write(&self.fs.limits, self.out(self.pos), &self.buf)?;
                self.pos += u64::from(written);
                if (written as usize) < self.buf.len() {
                    return Ok(());
                }
            }
        }
    }
}

impl MemFs {
    /// COPY_FILE_RANGE: copies up to `len` bytes (at most [`MAX_COPY`], and not past the
    /// source's end), returning how many. An error after some bytes were copied ends the
    /// copy short instead.
    pub(crate) fn copy_range(
        &self,
        ino_in: Ino,
        offset_in: u64,
        ino_out: Ino,
        offset_out: u64,
        len: u64,
    ) -> Result<u64> {
        let (src, dst) = (self.table.get(ino_in)?, self.table.get(ino_out)?);
        let (src_file, dst_file) = (src.file()?, dst.file()?);
        let len = len
            .min(src_file.size().saturating_sub(offset_in))
            .min(MAX_COPY);
        if len == 0 {
            return Ok(0);
        }
        if offset_out
            .checked_add(len)
            .is_none_or(|e| e > MAX_FILE_SIZE)
        {
            return Err(Errno::EFBIG);
        }
        // As the kernel: no overlapping ranges within one file.
        if ino_in == ino_out && offset_in < offset_out + len && offset_out < offset_in + len {
            return Err(Errno::EINVAL);
        }
        let mut copy = Copy {
            fs: self,
            src: src_file,
            dst: dst_file,
            pos: offset_in,
            end: offset_in + len,
            shift: offset_out.wrapping_sub(offset_in),
            buf: Vec::new(),
        };
        let result = copy.run();
        let done = copy.pos - offset_in;
        if done > 0 {
            src.touch_atime(&self.atime.load());
            self.data_changed(&dst, offset_out, offset_out + done);
        }
        match result {
            Err(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::{Backend, Caller, ROOT_INO};

    use crate::MemConfig;

    const C: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 1,
    };

    fn file(fs: &MemFs, name: &str) -> Ino {
        let (attr, _) = fs
            .create(&C, ROOT_INO, name.as_ref(), 0o644, 0, libc::O_RDWR)
            .unwrap();
        attr.ino
    }

    #[test]
    fn holes_are_copied_as_holes_and_data_as_data() {
        let fs = MemFs::new(MemConfig::default()).unwrap();
        let (a, b) = (file(&fs, "a"), file(&fs, "b"));
        let far = 1u64 << 40;
        fs.write(a, 0, 4096, b"one").unwrap();
        fs.write(a, 0, far, b"two").unwrap();
        // The destination's old data inside a copied hole must read as zeros after.
        fs.write(b, 0, 1 << 20, &[7u8; 8192]).unwrap();
        let used = fs.usage().bytes_used;
        let n = fs.copy_file_range(a, 0, 0, b, 0, 0, far + 3).unwrap();
        assert_eq!(n, MAX_COPY, "one call copies at most MAX_COPY");
        let mut buf = Vec::new();
        fs.read(b, 0, 4096, 3, &mut buf).unwrap();
        assert_eq!(buf, b"one");
        fs.read(b, 0, 1 << 20, 8192, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0), "old data in a copied hole");
        assert_eq!(fs.getattr(b).unwrap().size, MAX_COPY);
        assert!(
            fs.usage().bytes_used <= used,
            "holes allocate nothing: {} > {used}",
            fs.usage().bytes_used
        );
        // The rest of the file, in later calls: the end is data again.
        let mut at = n;
        while at < far + 3 {
            let n = fs
                .copy_file_range(a, 0, at, b, 0, at, far + 3 - at)
                .unwrap();
            assert!(n > 0);
            at += n;
        }
        fs.read(b, 0, far, 3, &mut buf).unwrap();
        assert_eq!(buf, b"two");
        assert_eq!(fs.getattr(b).unwrap().size, far + 3);
        assert_eq!(fs.copy_file_range(a, 0, far + 3, b, 0, 0, 10), Ok(0));
    }

    #[test]
    fn copies_check_ranges_as_the_kernel_does() {
        let fs = MemFs::new(MemConfig::default()).unwrap();
        let a = file(&fs, "a");
        fs.write(a, 0, 0, &[1u8; 10_000]).unwrap();
        assert_eq!(
            fs.copy_file_range(a, 0, 0, a, 0, 5_000, 6_000),
            Err(Errno::EINVAL),
            "overlapping ranges in one file"
        );
        assert_eq!(fs.copy_file_range(a, 0, 0, a, 0, 5_000, 5_000), Ok(5_000));
        assert_eq!(
            fs.copy_file_range(a, 0, 0, a, 0, MAX_FILE_SIZE - 10, 100),
            Err(Errno::EFBIG)
        );
        // A copy to an earlier offset.
        assert_eq!(fs.copy_file_range(a, 0, 9_000, a, 0, 100, 5_000), Ok(1_000));
    }
}
