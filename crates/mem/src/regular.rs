//! Regular files: the page store.
//!
//! A file's data is a map of pages ([`crate::pages`]) whose range operations cost what is
//! allocated, not the length asked for. Pages carry no lock or reference count: the file's
//! one `RwLock` is taken shared by readers (which never block each other) and exclusively
//! by writers of that file only. A write counts the pages it will add,
//! reserves them against `size=` in one step, and only then copies data, so `ENOSPC` leaves
//! the file exactly as it was.
//!
//! Invariant: bytes past the end of file inside an allocated page are zero (truncation
//! zeroes the tail it cuts), so extending a file never exposes old data.
//!
//! Freed pages go back to the C allocator, and from there to the kernel shortly after (see
//! [`crate::reclaim`]), so deleting or truncating files shrinks the server's RSS.

use memofs_core::ops::{FdRead, FdWrite};
use memofs_core::{Errno, Result};
use parking_lot::RwLock;

use crate::kernel_data::KernelFile;
use crate::limits::Limits;
use crate::pages::Pages;
pub use crate::pages::PAGE_SIZE;
use crate::reclaim::{pages_allocated, pages_freed};

/// Largest file size (as the VFS's `MAX_LFS_FILESIZE`).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

#[derive(Default)]
struct FileData {
    size: u64,
    pages: Pages,
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

    /// Reads up to `len` bytes at `offset` into `buf` (cleared first); `noatime`: the read
    /// moves no atime (kernel-backed data keeps its own, see [`KernelFile::read`]).
    pub fn read(&self, offset: u64, len: u32, buf: &mut Vec<u8>, noatime: bool) -> Result<()> {
        match self {
            RegularFile::Pages(p) => {
                p.read(offset, len, buf);
                Ok(())
            }
            RegularFile::Kernel(k) => k.read(offset, len, buf, noatime),
        }
    }

    /// Reads up to `len` bytes at `offset` and hands them to `send`: the page store's own
    /// pages, held for the call; kernel-backed data through `buf` (`noatime` as for
    /// [`RegularFile::read`]).
    pub fn read_with(
        &self,
        offset: u64,
        len: u32,
        buf: &mut Vec<u8>,
        noatime: bool,
        send: &mut dyn FnMut(&[&[u8]]),
    ) -> Result<()> {
        match self {
            RegularFile::Pages(p) => {
                p.read_with(offset, len, send);
                Ok(())
            }
            RegularFile::Kernel(k) => {
                k.read(offset, len, buf, noatime)?;
                send(&[buf]);
                Ok(())
            }
        }
    }

    /// Kernel-backed data: `read` reads up to `len` bytes at `offset` of the data file (see
    /// [`memofs_core::Backend::read_from_fd`]; `noatime` as for [`RegularFile::read`]);
    /// `None` for the page store.
    pub fn read_from_fd(
        &self,
        offset: u64,
        len: u32,
        noatime: bool,
        read: &mut FdRead<'_>,
    ) -> Option<Result<usize>> {
        match self {
            RegularFile::Pages(_) => None,
            RegularFile::Kernel(k) => Some(k.read_from_fd(offset, len, noatime, read)),
        }
    }

    /// WRITE's bytes written by `write` straight into kernel-backed data; `None` for the
    /// page store (its pages are no descriptor's).
    pub fn write_from(&self, offset: u64, write: &mut FdWrite<'_>) -> Option<Result<u32>> {
        match self {
            RegularFile::Pages(_) => None,
            RegularFile::Kernel(k) => Some(k.write_from(offset, write)),
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
            RegularFile::Kernel(k) => k.fallocate(limits.machine(), offset, len, mode),
        }
    }

    /// Makes `[offset, offset + len)` read as zeros and extends the file to cover it,
    /// without allocating the range (what a copied hole becomes).
    pub fn zero_range(&self, limits: &Limits, offset: u64, len: u64) -> Result<()> {
        match self {
            RegularFile::Pages(p) => p.zero_range(limits, offset, len),
            RegularFile::Kernel(k) => k.zero_range(offset, len),
        }
    }

    /// Pages allocated past the end of the file, as (offset, length) ranges (see
    /// [`PageFile::allocated_past_end`]).
    ///
    /// A kernel-backed file's tmpfs tells no place for them (`SEEK_DATA` stops at the end):
    /// the room its blocks take beyond its data before the end is given as one range just
    /// past the end, which is what a reader can tell of it (the blocks, the room taken).
    pub fn allocated_past_end(&self) -> Vec<(u64, u64)> {
        match self {
            RegularFile::Pages(p) => p.allocated_past_end(),
            RegularFile::Kernel(k) => {
                let (size, blocks) = k.size_and_blocks();
                let ranges = crate::precopy::data_ranges(self, 0, size).unwrap_or_default();
                let within: u64 = ranges
                    .iter()
                    .map(|&(from, to)| to.div_ceil(PAGE_SIZE) - from / PAGE_SIZE)
                    .sum::<u64>()
                    * PAGE_SIZE;
                match (blocks * 512).checked_sub(within) {
                    Some(past) if past > 0 => vec![(size.div_ceil(PAGE_SIZE) * PAGE_SIZE, past)],
                    _ => Vec::new(),
                }
            }
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

/// The end of `[offset, offset + len)`, or `EFBIG` past the largest file size.
fn range_end(offset: u64, len: u64) -> Result<u64> {
    offset
        .checked_add(len)
        .filter(|e| *e <= MAX_FILE_SIZE)
        .ok_or(Errno::EFBIG)
}

impl PageFile {
    /// Size in bytes and 512-byte blocks allocated.
    pub fn size_and_blocks(&self) -> (u64, u64) {
        let d = self.data.read();
        (d.size, d.pages.count() * (PAGE_SIZE / 512))
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
        d.pages.read(offset, end, buf);
    }

    /// Hands up to `len` bytes at `offset` to `send` as slices of the pages themselves (a
    /// shared zero page for holes), under the file's read lock: no copy.
    pub fn read_with(&self, offset: u64, len: u32, send: &mut dyn FnMut(&[&[u8]])) {
        let d = self.data.read();
        let end = d.size.min(offset.saturating_add(len as u64));
        let mut parts = Vec::new();
        if offset < end {
            d.pages.slices(offset, end, &mut parts);
        }
        send(&parts);
    }

    /// Writes `data` at `offset`. All or nothing: `ENOSPC` or `EFBIG` leave the file
    /// unchanged. Returns the bytes written.
    pub fn write(&self, limits: &Limits, offset: u64, data: &[u8]) -> Result<u32> {
        let mut d = self.data.write();
        if data.is_empty() {
            return Ok(0);
        }
        let end = range_end(offset, data.len() as u64)?;
        let (first, last) = (offset / PAGE_SIZE, last_page(offset, data.len() as u64));
        let added = d.pages.missing(first, last) * PAGE_SIZE;
        limits.charge_bytes(added)?;
        d.pages.store(offset, data);
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
            freed = d.pages.free(keep, MAX_FILE_SIZE / PAGE_SIZE) * PAGE_SIZE;
            limits.uncharge_bytes(freed);
            d.pages.zero(size, keep * PAGE_SIZE);
        }
        d.size = size;
        drop(d);
        pages_freed(freed);
        Ok(())
    }

    /// fallocate(2): mode 0, `FALLOC_FL_KEEP_SIZE`, `FALLOC_FL_PUNCH_HOLE | KEEP_SIZE`.
    /// Allocation charges every page it adds before adding any (`ENOSPC` leaves the file
    /// as it was); both cost what the range holds and adds, not its length.
    pub fn fallocate(&self, limits: &Limits, offset: u64, len: u64, mode: i32) -> Result<()> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = range_end(offset, len)?;
        match mode {
            0 | KEEP => {
                let mut d = self.data.write();
                let (first, last) = (offset / PAGE_SIZE, last_page(offset, len));
                let added = d.pages.missing(first, last) * PAGE_SIZE;
                limits.charge_bytes(added)?;
                d.pages.allocate(first, last);
                if mode == 0 {
                    d.size = d.size.max(end);
                }
                drop(d);
                pages_allocated(added);
                Ok(())
            }
            m if m == PUNCH | KEEP => {
                self.clear(limits, offset, end, false);
                Ok(())
            }
            m if m & PUNCH != 0 => Err(Errno::EINVAL),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }

    /// Makes `[offset, end)` read as zeros by punching it, and with `extend` grows the file
    /// to `end` if it is shorter, in one step under the file's lock.
    fn clear(&self, limits: &Limits, offset: u64, end: u64, extend: bool) {
        let mut d = self.data.write();
        let freed = d.pages.punch(offset, end) * PAGE_SIZE;
        if extend {
            d.size = d.size.max(end);
        }
        drop(d);
        limits.uncharge_bytes(freed);
        pages_freed(freed);
    }

    /// Makes `[offset, offset + len)` a hole and extends the file to cover it (a copied
    /// hole). Frees what was there; allocates nothing.
    pub fn zero_range(&self, limits: &Limits, offset: u64, len: u64) -> Result<()> {
        let end = range_end(offset, len)?;
        self.clear(limits, offset, end, true);
        Ok(())
    }

    /// `SEEK_DATA` / `SEEK_HOLE` from `offset`: allocated pages are data, the rest holes,
    /// and the end of file is a hole. Walks chunks, not pages.
    pub fn seek(&self, offset: u64, whence: i32) -> Result<u64> {
        let d = self.data.read();
        if offset >= d.size {
            return Err(Errno::ENXIO);
        }
        let (from, last) = (offset / PAGE_SIZE, (d.size - 1) / PAGE_SIZE);
        let at = |i: u64| (i * PAGE_SIZE).max(offset);
        match whence {
            libc::SEEK_DATA => d.pages.next_present(from, last).map(at).ok_or(Errno::ENXIO),
            libc::SEEK_HOLE => Ok(d.pages.next_absent(from, last).map_or(d.size, at)),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The pages allocated past the end of the file (`fallocate` with `FALLOC_FL_KEEP_SIZE`),
    /// as (offset, length) ranges: they read as nothing, and count against `size=`.
    pub fn allocated_past_end(&self) -> Vec<(u64, u64)> {
        let d = self.data.read();
        let mut out = Vec::new();
        let mut at = d.size.div_ceil(PAGE_SIZE);
        while let Some(first) = d.pages.next_present(at, u64::MAX / PAGE_SIZE) {
            let end = d
                .pages
                .next_absent(first, u64::MAX / PAGE_SIZE)
                .unwrap_or(u64::MAX / PAGE_SIZE);
            out.push((first * PAGE_SIZE, (end - first) * PAGE_SIZE));
            at = end;
        }
        out
    }

    /// Drops every page, returning the bytes freed (the caller uncharges them).
    pub fn release_all(&self) -> u64 {
        let freed = self.data.write().pages.clear() * PAGE_SIZE;
        pages_freed(freed);
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(f: &RegularFile) -> Vec<u8> {
        let mut buf = Vec::new();
        f.read(0, u32::MAX, &mut buf, false).unwrap();
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
