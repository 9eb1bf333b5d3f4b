//! Regular files: the page store.
//!
//! A file's data is a range map from chunk number to a chunk of `CHUNK_PAGES` page slots;
//! an absent chunk or slot is a hole and reads as zeros. Pages carry no lock or reference
//! count: the file's one `RwLock` is taken shared by readers (which never block each other)
//! and exclusively by writers of that file only. A write counts the pages it will add,
//! reserves them against `size=` in one step, and only then copies data, so `ENOSPC` leaves
//! the file exactly as it was.
//!
//! Invariant: bytes past the end of file inside an allocated page are zero (truncation
//! zeroes the tail it cuts), so extending a file never exposes old data.
//!
//! Freed pages go back to the C allocator, and from there to the kernel shortly after (see
//! [`crate::reclaim`]), so deleting or truncating files shrinks the server's RSS.

use std::collections::BTreeMap;

use memofs_core::{Errno, Result};
use parking_lot::RwLock;

use crate::backing::KernelFile;
use crate::limits::Limits;
use crate::reclaim::{pages_allocated, pages_freed};

/// Page size of the store.
pub const PAGE_SIZE: u64 = 4096;
const CHUNK_PAGES: u64 = 64;
/// Largest file size (as the VFS's `MAX_LFS_FILESIZE`).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

type Page = Box<[u8; PAGE_SIZE as usize]>;

fn new_page() -> Page {
    vec![0u8; PAGE_SIZE as usize]
        .into_boxed_slice()
        .try_into()
        .expect("page size")
}

/// A new page holding `bytes` at `off`, zero elsewhere; a full page is copied without
/// zeroing first.
fn page_with(off: usize, bytes: &[u8]) -> Page {
    if bytes.len() == PAGE_SIZE as usize {
        return bytes
            .to_vec()
            .into_boxed_slice()
            .try_into()
            .expect("page size");
    }
    let mut p = new_page();
    p[off..off + bytes.len()].copy_from_slice(bytes);
    p
}

/// Splits `[start, end)` at page boundaries: `(page index, offset in page, length)`.
fn segments(start: u64, end: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let mut pos = start;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let off = (pos % PAGE_SIZE) as usize;
        let n = (PAGE_SIZE - off as u64).min(end - pos) as usize;
        let seg = (pos / PAGE_SIZE, off, n);
        pos += n as u64;
        Some(seg)
    })
}

struct Chunk {
    pages: [Option<Page>; CHUNK_PAGES as usize],
    present: u32,
}

impl Chunk {
    fn new() -> Box<Chunk> {
        Box::new(Chunk {
            pages: std::array::from_fn(|_| None),
            present: 0,
        })
    }
}

#[derive(Default)]
struct FileData {
    size: u64,
    chunks: BTreeMap<u64, Box<Chunk>>,
    pages: u64,
}

impl FileData {
    fn page(&self, idx: u64) -> Option<&Page> {
        self.chunks.get(&(idx / CHUNK_PAGES))?.pages[(idx % CHUNK_PAGES) as usize].as_ref()
    }

    fn page_mut(&mut self, idx: u64) -> Option<&mut Page> {
        self.chunks.get_mut(&(idx / CHUNK_PAGES))?.pages[(idx % CHUNK_PAGES) as usize].as_mut()
    }

    /// Pages absent in `[first, last]`.
    fn missing(&self, first: u64, last: u64) -> u64 {
        (first..=last).filter(|&i| self.page(i).is_none()).count() as u64
    }

    /// Allocates every absent page in `[first, last]` (already charged).
    fn allocate(&mut self, first: u64, last: u64) {
        for idx in first..=last {
            let chunk = self
                .chunks
                .entry(idx / CHUNK_PAGES)
                .or_insert_with(Chunk::new);
            let slot = &mut chunk.pages[(idx % CHUNK_PAGES) as usize];
            if slot.is_none() {
                *slot = Some(new_page());
                chunk.present += 1;
                self.pages += 1;
            }
        }
    }

    /// Frees every page in `[first, last]`; returns how many were freed.
    fn free(&mut self, first: u64, last: u64) -> u64 {
        if first > last {
            return 0;
        }
        let mut freed = 0;
        let keys: Vec<u64> = self
            .chunks
            .range(first / CHUNK_PAGES..=last / CHUNK_PAGES)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let chunk = self.chunks.get_mut(&key).expect("key from range");
            let lo = first.max(key * CHUNK_PAGES);
            let hi = last.min(key * CHUNK_PAGES + CHUNK_PAGES - 1);
            for idx in lo..=hi {
                if chunk.pages[(idx % CHUNK_PAGES) as usize].take().is_some() {
                    chunk.present -= 1;
                    freed += 1;
                }
            }
            if chunk.present == 0 {
                self.chunks.remove(&key);
            }
        }
        self.pages -= freed;
        freed
    }

    /// Zeroes `[start, end)` inside existing pages (holes are zero already).
    fn zero(&mut self, start: u64, end: u64) {
        for (idx, off, n) in segments(start, end) {
            if let Some(p) = self.page_mut(idx) {
                p[off..off + n].fill(0);
            }
        }
    }

    /// Copies `data` to `offset`, creating absent pages (already charged).
    fn store(&mut self, offset: u64, data: &[u8]) {
        let mut src = data;
        let mut added = 0;
        for (idx, off, n) in segments(offset, offset + data.len() as u64) {
            let chunk = self
                .chunks
                .entry(idx / CHUNK_PAGES)
                .or_insert_with(Chunk::new);
            let slot = &mut chunk.pages[(idx % CHUNK_PAGES) as usize];
            match slot {
                Some(p) => p[off..off + n].copy_from_slice(&src[..n]),
                None => {
                    *slot = Some(page_with(off, &src[..n]));
                    chunk.present += 1;
                    added += 1;
                }
            }
            src = &src[n..];
        }
        self.pages += added;
    }

    /// Frees whole pages inside `[start, end)` and zeroes the partial ends.
    fn punch(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let first_whole = start.div_ceil(PAGE_SIZE);
        let end_whole = end / PAGE_SIZE; // exclusive
        if first_whole >= end_whole {
            self.zero(start, end);
            return 0;
        }
        self.zero(start, first_whole * PAGE_SIZE);
        self.zero(end_whole * PAGE_SIZE, end);
        self.free(first_whole, end_whole - 1)
    }
}

/// A regular file's contents: in the server's page store, or in a kernel-backed file.
pub enum RegularFile {
    /// Pages kept by the server.
    Pages(PageFile),
    /// Data kept by the kernel (see [`crate::backing`]).
    Kernel(KernelFile),
}

impl Default for RegularFile {
    fn default() -> Self {
        RegularFile::Pages(PageFile::default())
    }
}

impl RegularFile {
    /// An empty file in the page store.
    pub fn new() -> RegularFile {
        RegularFile::default()
    }

    /// Size in bytes and 512-byte blocks allocated.
    pub fn size_and_blocks(&self) -> (u64, u64) {
        match self {
            RegularFile::Pages(p) => p.size_and_blocks(),
            RegularFile::Kernel(k) => k.size_and_blocks(),
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size_and_blocks().0
    }

    /// Reads up to `len` bytes at `offset` into `buf` (cleared first).
    pub fn read(&self, offset: u64, len: u32, buf: &mut Vec<u8>) -> Result<()> {
        match self {
            RegularFile::Pages(p) => {
                p.read(offset, len, buf);
                Ok(())
            }
            RegularFile::Kernel(k) => k.read(offset, len, buf),
        }
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, limits: &Limits, offset: u64, data: &[u8]) -> Result<u32> {
        match self {
            RegularFile::Pages(p) => p.write(limits, offset, data),
            RegularFile::Kernel(k) => k.write(offset, data),
        }
    }

    /// Sets the size.
    pub fn truncate(&self, limits: &Limits, size: u64) -> Result<()> {
        match self {
            RegularFile::Pages(p) => p.truncate(limits, size),
            RegularFile::Kernel(k) => k.truncate(size),
        }
    }

    /// fallocate(2).
    pub fn fallocate(&self, limits: &Limits, offset: u64, len: u64, mode: i32) -> Result<()> {
        match self {
            RegularFile::Pages(p) => p.fallocate(limits, offset, len, mode),
            RegularFile::Kernel(k) => k.fallocate(offset, len, mode),
        }
    }

    /// `SEEK_DATA` / `SEEK_HOLE`.
    pub fn seek(&self, offset: u64, whence: i32) -> Result<u64> {
        match self {
            RegularFile::Pages(p) => p.seek(offset, whence),
            RegularFile::Kernel(k) => k.seek(offset, whence),
        }
    }

    /// Drops the data, returning the page-store bytes freed (kernel-backed data is freed
    /// by the kernel when the file closes).
    pub fn release_all(&self) -> u64 {
        match self {
            RegularFile::Pages(p) => p.release_all(),
            RegularFile::Kernel(_) => 0,
        }
    }

    /// The kernel-backed file, if the data lives there.
    pub fn kernel(&self) -> Option<&KernelFile> {
        match self {
            RegularFile::Pages(_) => None,
            RegularFile::Kernel(k) => Some(k),
        }
    }
}

/// A regular file's contents in the server's page store.
#[derive(Default)]
pub struct PageFile {
    data: RwLock<FileData>,
}

/// Last page index touched by `[offset, offset + len)`, `len > 0`.
fn last_page(offset: u64, len: u64) -> u64 {
    (offset + len - 1) / PAGE_SIZE
}

impl PageFile {
    /// Size in bytes and 512-byte blocks allocated.
    pub fn size_and_blocks(&self) -> (u64, u64) {
        let d = self.data.read();
        (d.size, d.pages * (PAGE_SIZE / 512))
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.data.read().size
    }

    /// Reads up to `len` bytes at `offset` into `buf` (cleared first).
    pub fn read(&self, offset: u64, len: u32, buf: &mut Vec<u8>) {
        buf.clear();
        let d = self.data.read();
        if offset >= d.size {
            return;
        }
        let end = d.size.min(offset.saturating_add(len as u64));
        buf.reserve((end - offset) as usize);
        for (idx, off, n) in segments(offset, end) {
            match d.page(idx) {
                Some(p) => buf.extend_from_slice(&p[off..off + n]),
                None => buf.resize(buf.len() + n, 0),
            }
        }
    }

    /// Writes `data` at `offset`. All or nothing: `ENOSPC` or `EFBIG` leave the file
    /// unchanged. Returns the bytes written.
    pub fn write(&self, limits: &Limits, offset: u64, data: &[u8]) -> Result<u32> {
        let mut d = self.data.write();
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let (first, last) = (offset / PAGE_SIZE, last_page(offset, data.len() as u64));
        let added = d.missing(first, last) * PAGE_SIZE;
        limits.charge_bytes(added)?;
        d.store(offset, data);
        d.size = d.size.max(end);
        drop(d);
        pages_allocated(added);
        Ok(data.len() as u32)
    }

    /// Sets the size; shrinking frees pages past the end and zeroes the cut tail.
    pub fn truncate(&self, limits: &Limits, size: u64) -> Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut d = self.data.write();
        let mut freed = 0;
        if size < d.size {
            let keep = size.div_ceil(PAGE_SIZE);
            freed = d.free(keep, u64::MAX / PAGE_SIZE) * PAGE_SIZE;
            limits.uncharge_bytes(freed);
            d.zero(size, keep * PAGE_SIZE);
        }
        d.size = size;
        drop(d);
        pages_freed(freed);
        Ok(())
    }

    /// fallocate(2): mode 0, `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE | KEEP_SIZE`.
    pub fn fallocate(&self, limits: &Limits, offset: u64, len: u64, mode: i32) -> Result<()> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let mut d = self.data.write();
        match mode {
            0 | KEEP => {
                let (first, last) = (offset / PAGE_SIZE, last_page(offset, len));
                let added = d.missing(first, last) * PAGE_SIZE;
                limits.charge_bytes(added)?;
                d.allocate(first, last);
                if mode == 0 {
                    d.size = d.size.max(end);
                }
                drop(d);
                pages_allocated(added);
                Ok(())
            }
            m if m == PUNCH | KEEP => {
                let freed = d.punch(offset, end) * PAGE_SIZE;
                limits.uncharge_bytes(freed);
                drop(d);
                pages_freed(freed);
                Ok(())
            }
            m if m & PUNCH != 0 => Err(Errno::EINVAL),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    /// `SEEK_DATA` / `SEEK_HOLE` from `offset`: allocated pages are data, the rest holes,
    /// and the end of file is a hole.
    pub fn seek(&self, offset: u64, whence: i32) -> Result<u64> {
        let d = self.data.read();
        if offset >= d.size {
            return Err(Errno::ENXIO);
        }
        let last = (d.size - 1) / PAGE_SIZE;
        let want_data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        let found = (offset / PAGE_SIZE..=last).find(|&i| d.page(i).is_some() == want_data);
        match (found, want_data) {
            (Some(i), _) => Ok((i * PAGE_SIZE).max(offset)),
            (None, true) => Err(Errno::ENXIO),
            (None, false) => Ok(d.size),
        }
    }

    /// Drops every page, returning the bytes freed (the caller uncharges them).
    pub fn release_all(&self) -> u64 {
        let mut d = self.data.write();
        let freed = d.pages * PAGE_SIZE;
        d.chunks.clear();
        d.pages = 0;
        drop(d);
        pages_freed(freed);
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(f: &RegularFile) -> Vec<u8> {
        let mut buf = Vec::new();
        f.read(0, u32::MAX, &mut buf).unwrap();
        buf
    }

    #[test]
    fn sparse_write_reads_zeros_in_holes() {
        let l = Limits::new(0, 0);
        let f = RegularFile::new();
        f.write(&l, 10_000, b"abc").unwrap();
        let data = read_all(&f);
        assert_eq!(data.len(), 10_003);
        assert!(data[..10_000].iter().all(|b| *b == 0));
        assert_eq!(&data[10_000..], b"abc");
        assert_eq!(l.bytes(), PAGE_SIZE);
        assert_eq!(f.size_and_blocks(), (10_003, 8));
    }

    #[test]
    fn truncate_down_then_up_exposes_zeros_and_frees_pages() {
        let l = Limits::new(0, 0);
        let f = RegularFile::new();
        f.write(&l, 0, &[7u8; 3 * PAGE_SIZE as usize]).unwrap();
        f.truncate(&l, 100).unwrap();
        assert_eq!(l.bytes(), PAGE_SIZE);
        f.truncate(&l, 5000).unwrap();
        let data = read_all(&f);
        assert!(data[..100].iter().all(|b| *b == 7));
        assert!(data[100..].iter().all(|b| *b == 0));
    }

    #[test]
    fn enospc_leaves_the_file_unchanged() {
        let l = Limits::new(2 * PAGE_SIZE, 0);
        let f = RegularFile::new();
        f.write(&l, 0, b"keep").unwrap();
        let big = vec![1u8; 2 * PAGE_SIZE as usize];
        assert_eq!(f.write(&l, 1, &big), Err(Errno::ENOSPC));
        assert_eq!(read_all(&f), b"keep");
        assert_eq!(l.bytes(), PAGE_SIZE);
        assert_eq!(f.write(&l, 4, b"x"), Ok(1));
        assert_eq!(read_all(&f), b"keepx");
    }

    #[test]
    fn punch_hole_and_seek() {
        let l = Limits::new(0, 0);
        let f = RegularFile::new();
        f.write(&l, 0, &[9u8; 4 * PAGE_SIZE as usize]).unwrap();
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        f.fallocate(&l, PAGE_SIZE - 10, PAGE_SIZE + 20, mode)
            .unwrap();
        let data = read_all(&f);
        assert_eq!(data.len(), 4 * PAGE_SIZE as usize);
        assert!(data[PAGE_SIZE as usize - 10..2 * PAGE_SIZE as usize + 10]
            .iter()
            .all(|b| *b == 0));
        assert_eq!(data[PAGE_SIZE as usize - 11], 9);
        assert_eq!(data[2 * PAGE_SIZE as usize + 10], 9);
        assert_eq!(l.bytes(), 3 * PAGE_SIZE);
        // Page 1 is a hole now.
        assert_eq!(f.seek(0, libc::SEEK_HOLE), Ok(PAGE_SIZE));
        assert_eq!(f.seek(PAGE_SIZE, libc::SEEK_DATA), Ok(2 * PAGE_SIZE));
        assert_eq!(f.seek(3 * PAGE_SIZE, libc::SEEK_HOLE), Ok(4 * PAGE_SIZE));
        assert_eq!(f.seek(4 * PAGE_SIZE, libc::SEEK_DATA), Err(Errno::ENXIO));
        assert_eq!(
            f.fallocate(&l, 0, 1, libc::FALLOC_FL_PUNCH_HOLE),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            f.fallocate(&l, 0, 1, libc::FALLOC_FL_ZERO_RANGE),
            Err(Errno::EOPNOTSUPP)
        );
    }

    #[test]
    fn fallocate_extends_unless_keep_size() {
        let l = Limits::new(0, 0);
        let f = RegularFile::new();
        f.fallocate(&l, 0, 10_000, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        assert_eq!(f.size(), 0);
        f.fallocate(&l, 0, 10_000, 0).unwrap();
        assert_eq!(f.size(), 10_000);
        assert_eq!(l.bytes(), 3 * PAGE_SIZE);
        assert_eq!(f.release_all(), 3 * PAGE_SIZE);
        assert_eq!(f.write(&l, MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
    }
}
