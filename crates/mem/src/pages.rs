//! A page-store file's pages: a range map from chunk number to a chunk of [`CHUNK_PAGES`]
//! page slots; an absent chunk or slot is a hole and reads as zeros.
//!
//! Every operation over a range walks the chunks present in it (`BTreeMap::range`), so it
//! costs what is allocated there (plus what it allocates), never the length it was asked
//! for: counting, punching, seeking and reading a petabyte of holes is a few map lookups.
//! A chunk exists only while it holds a page.

use std::collections::BTreeMap;

/// Page size of the store.
pub const PAGE_SIZE: u64 = 4096;
/// Pages per chunk.
pub const CHUNK_PAGES: u64 = 64;

/// What a hole reads as.
static ZEROS: [u8; PAGE_SIZE as usize] = [0; PAGE_SIZE as usize];

/// One page of data.
pub type Page = Box<[u8; PAGE_SIZE as usize]>;

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

    fn slot(&self, idx: u64) -> &Option<Page> {
        &self.pages[(idx % CHUNK_PAGES) as usize]
    }

    fn slot_mut(&mut self, idx: u64) -> &mut Option<Page> {
        &mut self.pages[(idx % CHUNK_PAGES) as usize]
    }
}

/// The page indexes of chunk `key` inside `[first, last]`, as an inclusive range.
fn clip(key: u64, first: u64, last: u64) -> std::ops::RangeInclusive<u64> {
    first.max(key * CHUNK_PAGES)..=last.min(key * CHUNK_PAGES + CHUNK_PAGES - 1)
}

/// A file's pages: nothing but a null pointer while it has none, since most files are
/// small and many empty (an empty file costs the server only its inode and name).
#[derive(Default)]
pub struct Pages(Option<Box<Chunks>>);

/// The pages of a file that has some.
#[derive(Default)]
struct Chunks {
    chunks: BTreeMap<u64, Box<Chunk>>,
    count: u64,
}

/// What a file without pages reads as.
static NONE: Chunks = Chunks {
    chunks: BTreeMap::new(),
    count: 0,
};

impl Pages {
    fn chunks(&self) -> &Chunks {
        self.0.as_deref().unwrap_or(&NONE)
    }

    /// Runs `f` on the pages, where it may add some.
    fn adding<R>(&mut self, f: impl FnOnce(&mut Chunks) -> R) -> R {
        f(self.0.get_or_insert_with(Box::default))
    }

    /// Runs `f` on the pages, where it may remove some; frees the map once it is empty.
    fn removing<R: Default>(&mut self, f: impl FnOnce(&mut Chunks) -> R) -> R {
        let Some(chunks) = self.0.as_deref_mut() else {
            return R::default();
        };
        let r = f(chunks);
        if chunks.count == 0 {
            self.0 = None;
        }
        r
    }

    /// Pages allocated.
    pub fn count(&self) -> u64 {
        self.chunks().count
    }

    /// The page at `idx`, if allocated.
    pub fn get(&self, idx: u64) -> Option<&Page> {
        self.chunks().get(idx)
    }

    /// Allocated pages among `[first, last]`.
    pub fn present_in(&self, first: u64, last: u64) -> u64 {
        self.chunks().present_in(first, last)
    }

    /// Absent pages among `[first, last]`.
    pub fn missing(&self, first: u64, last: u64) -> u64 {
        self.chunks().missing(first, last)
    }

    /// Allocates every absent page of `[first, last]` (zeroed); returns how many.
    pub fn allocate(&mut self, first: u64, last: u64) -> u64 {
        self.adding(|c| c.allocate(first, last))
    }

    /// Frees the pages of `[first, last]`; returns how many were allocated.
    pub fn free(&mut self, first: u64, last: u64) -> u64 {
        self.removing(|c| c.free(first, last))
    }

    /// Zeroes bytes `[start, end)` of allocated pages, allocating nothing.
    pub fn zero(&mut self, start: u64, end: u64) {
        self.removing(|c| c.zero(start, end))
    }

    /// Copies `data` in at byte `offset`, allocating pages as needed; returns how many it
    /// allocated.
    pub fn store(&mut self, offset: u64, data: &[u8]) -> u64 {
        self.adding(|c| c.store(offset, data))
    }

    /// Frees the pages wholly inside `[start, end)` and zeroes the parts of the others;
    /// returns how many pages were freed.
    pub fn punch(&mut self, start: u64, end: u64) -> u64 {
        self.removing(|c| c.punch(start, end))
    }

    /// The first allocated page in `[from, last]`.
    pub fn next_present(&self, from: u64, last: u64) -> Option<u64> {
        self.chunks().next_present(from, last)
    }

    /// The first absent page in `[from, last]`.
    pub fn next_absent(&self, from: u64, last: u64) -> Option<u64> {
        self.chunks().next_absent(from, last)
    }

    /// Appends bytes `[start, end)` to `buf`, zeros for holes.
    pub fn read(&self, start: u64, end: u64, buf: &mut Vec<u8>) {
        self.chunks().read(start, end, buf)
    }

    /// Appends slices covering bytes `[start, end)` to `parts`: of the pages where they
    /// are allocated, of a page of zeros in holes.
    pub fn slices<'a>(&'a self, start: u64, end: u64, parts: &mut Vec<&'a [u8]>) {
        let chunks = self.chunks();
        for (idx, off, n) in segments(start, end) {
            parts.push(match chunks.get(idx) {
                Some(p) => &p[off..off + n],
                None => &ZEROS[off..off + n],
            });
        }
    }

    /// Drops every page; returns how many there were.
    pub fn clear(&mut self) -> u64 {
        self.0.take().map_or(0, |c| c.count)
    }
}

impl Chunks {
    /// Page `idx`, if allocated.
    pub fn get(&self, idx: u64) -> Option<&Page> {
        self.chunks.get(&(idx / CHUNK_PAGES))?.slot(idx).as_ref()
    }

    /// Pages allocated in `[first, last]`.
    pub fn present_in(&self, first: u64, last: u64) -> u64 {
        self.chunks
            .range(first / CHUNK_PAGES..=last / CHUNK_PAGES)
            .map(|(&key, chunk)| {
                let span = clip(key, first, last);
                if span.end() - span.start() + 1 == CHUNK_PAGES {
                    u64::from(chunk.present)
                } else {
                    span.filter(|&i| chunk.slot(i).is_some()).count() as u64
                }
            })
            .sum()
    }

    /// Pages absent in `[first, last]`.
    pub fn missing(&self, first: u64, last: u64) -> u64 {
        (last - first + 1) - self.present_in(first, last)
    }

    /// Allocates every absent page in `[first, last]` (already charged, so the range is as
    /// large as what it adds plus what is there); returns how many were added.
    pub fn allocate(&mut self, first: u64, last: u64) -> u64 {
        let mut added = 0;
        for key in first / CHUNK_PAGES..=last / CHUNK_PAGES {
            let chunk = self.chunks.entry(key).or_insert_with(Chunk::new);
            for idx in clip(key, first, last) {
                let slot = chunk.slot_mut(idx);
                if slot.is_none() {
                    *slot = Some(new_page());
                    chunk.present += 1;
                    added += 1;
                }
            }
        }
        self.count += added;
        added
    }

    /// Frees every page in `[first, last]`; returns how many were freed.
    pub fn free(&mut self, first: u64, last: u64) -> u64 {
        if first > last {
            return 0;
        }
        let keys: Vec<u64> = self
            .chunks
            .range(first / CHUNK_PAGES..=last / CHUNK_PAGES)
            .map(|(k, _)| *k)
            .collect();
        let mut freed = 0;
        for key in keys {
            let chunk = self.chunks.get_mut(&key).expect("key from range");
            for idx in clip(key, first, last) {
                if chunk.slot_mut(idx).take().is_some() {
                    chunk.present -= 1;
                    freed += 1;
                }
            }
            if chunk.present == 0 {
                self.chunks.remove(&key);
            }
        }
        self.count -= freed;
        freed
    }

    /// Zeroes `[start, end)` inside allocated pages (holes are zero already).
    pub fn zero(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (first, last) = (start / PAGE_SIZE, (end - 1) / PAGE_SIZE);
        for (&key, chunk) in self
            .chunks
            .range_mut(first / CHUNK_PAGES..=last / CHUNK_PAGES)
        {
            let span = clip(key, first, last);
            let lo = start.max(span.start() * PAGE_SIZE);
            let hi = end.min((span.end() + 1) * PAGE_SIZE);
            for (idx, off, n) in segments(lo, hi) {
                if let Some(p) = chunk.slot_mut(idx) {
                    p[off..off + n].fill(0);
                }
            }
        }
    }

    /// Copies `data` to `offset`, creating absent pages (already charged); returns how many
    /// were added.
    pub fn store(&mut self, offset: u64, data: &[u8]) -> u64 {
        let mut src = data;
        let mut added = 0;
        for (idx, off, n) in segments(offset, offset + data.len() as u64) {
            let chunk = self
                .chunks
                .entry(idx / CHUNK_PAGES)
                .or_insert_with(Chunk::new);
            let slot = chunk.slot_mut(idx);
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
        self.count += added;
        added
    }

    /// Frees whole pages inside `[start, end)` and zeroes the partial ends; returns how many
    /// pages were freed.
    pub fn punch(&mut self, start: u64, end: u64) -> u64 {
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

    /// The first allocated page in `[from, last]`.
    pub fn next_present(&self, from: u64, last: u64) -> Option<u64> {
        for (&key, chunk) in self.chunks.range(from / CHUNK_PAGES..) {
            let span = clip(key, from, last);
            if span.is_empty() {
                return None;
            }
            if let Some(i) = span.into_iter().find(|&i| chunk.slot(i).is_some()) {
                return Some(i);
            }
        }
        None
    }

    /// The first hole page in `[from, last]`: walks only the run of allocated chunks that
    /// starts at `from`.
    pub fn next_absent(&self, from: u64, last: u64) -> Option<u64> {
        let mut idx = from;
        for (&key, chunk) in self.chunks.range(from / CHUNK_PAGES..) {
            if idx > last || key * CHUNK_PAGES > idx {
                break; // past the range, or `idx` lies in a chunk with no page
            }
            if chunk.present < CHUNK_PAGES as u32 {
                if let Some(i) = clip(key, idx, last).find(|&i| chunk.slot(i).is_none()) {
                    return Some(i);
                }
            }
            idx = (key + 1) * CHUNK_PAGES;
        }
        (idx <= last).then_some(idx)
    }

    /// Appends the bytes of `[start, end)` to `buf`, holes as zeros filled a run at a time.
    pub fn read(&self, start: u64, end: u64, buf: &mut Vec<u8>) {
        if start >= end {
            return;
        }
        let chunk_bytes = CHUNK_PAGES * PAGE_SIZE;
        let zeros = |buf: &mut Vec<u8>, n: u64| buf.resize(buf.len() + n as usize, 0);
        let mut pos = start;
        for (&key, chunk) in self
            .chunks
            .range(start / chunk_bytes..=(end - 1) / chunk_bytes)
        {
            let chunk_start = key * chunk_bytes;
            if chunk_start > pos {
                zeros(buf, chunk_start - pos);
                pos = chunk_start;
            }
            let chunk_end = (chunk_start + chunk_bytes).min(end);
            for (idx, off, n) in segments(pos, chunk_end) {
                match chunk.slot(idx) {
                    Some(p) => buf.extend_from_slice(&p[off..off + n]),
                    None => zeros(buf, n as u64),
                }
            }
            pos = chunk_end;
        }
        zeros(buf, end - pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: u64 = CHUNK_PAGES;
    /// The last page a file may have.
    const LAST: u64 = i64::MAX as u64 / PAGE_SIZE;

    /// Pages at the given indexes, each filled with its index's low byte + 1.
    fn with(idxs: &[u64]) -> Pages {
        let mut p = Pages::default();
        for &i in idxs {
            p.store(
                i * PAGE_SIZE,
                &[(i as u8).wrapping_add(1); PAGE_SIZE as usize],
            );
        }
        p
    }

    #[test]
    fn slices_read_what_read_copies() {
        let p = with(&[0, 1, 3, CHUNK - 1, CHUNK, 2 * CHUNK + 5]);
        let end = (2 * CHUNK + 7) * PAGE_SIZE;
        for (start, stop) in [
            (0, end),
            (100, 5 * PAGE_SIZE + 3),
            (2 * PAGE_SIZE + 7, 2 * PAGE_SIZE + 9),
            ((CHUNK - 1) * PAGE_SIZE - 1, (CHUNK + 1) * PAGE_SIZE + 1),
            (end - 1, end),
        ] {
            let mut copied = Vec::new();
            p.read(start, stop, &mut copied);
            let mut parts = Vec::new();
            p.slices(start, stop, &mut parts);
            assert_eq!(parts.concat(), copied, "[{start}, {stop})");
            assert!(parts.iter().all(|s| s.len() <= PAGE_SIZE as usize));
        }
        let (none, mut parts) = (Pages::default(), Vec::new());
        none.slices(0, 3 * PAGE_SIZE, &mut parts);
        assert_eq!(parts.concat(), vec![0; 3 * PAGE_SIZE as usize]);
    }

    #[test]
    fn counts_walk_chunks_not_pages() {
        let p = with(&[0, 1, 63, 64, 5 * CHUNK + 3, LAST]);
        assert_eq!(p.present_in(0, LAST), 6);
        assert_eq!(p.present_in(1, 63), 2);
        assert_eq!(p.present_in(2, 62), 0);
        assert_eq!(p.present_in(64, 64), 1);
        assert_eq!(p.missing(0, LAST), LAST + 1 - 6);
        assert_eq!(p.missing(0, 127), 124);
        assert_eq!(p.chunks().chunks.len(), 4);
    }

    #[test]
    fn seeking_finds_data_and_holes_across_huge_gaps() {
        let p = with(&[3, 4, LAST - 1]);
        assert_eq!(p.next_present(0, LAST), Some(3));
        assert_eq!(p.next_present(5, LAST), Some(LAST - 1));
        assert_eq!(p.next_present(5, LAST - 2), None);
        assert_eq!(p.next_present(LAST, LAST), None);
        assert_eq!(p.next_absent(0, LAST), Some(0));
        assert_eq!(p.next_absent(3, LAST), Some(5));
        assert_eq!(p.next_absent(LAST - 1, LAST), Some(LAST));
        assert_eq!(p.next_absent(LAST - 1, LAST - 1), None);
        // A run of full chunks, then a chunk missing entirely.
        let full: Vec<u64> = (0..3 * CHUNK).collect();
        let p = with(&full);
        assert_eq!(p.next_absent(10, LAST), Some(3 * CHUNK));
        assert_eq!(p.next_absent(10, 3 * CHUNK - 1), None);
        // A full chunk followed by a partly filled one.
        let mut run: Vec<u64> = (0..CHUNK).collect();
        run.extend([CHUNK, CHUNK + 1]);
        assert_eq!(with(&run).next_absent(0, LAST), Some(CHUNK + 2));
        assert_eq!(Pages::default().next_absent(7, 7), Some(7));
        assert_eq!(Pages::default().next_present(0, LAST), None);
    }

    #[test]
    fn punch_and_free_drop_emptied_chunks() {
        let mut p = with(&[0, 1, 2, 200, LAST]);
        assert_eq!(p.punch(PAGE_SIZE / 2, LAST * PAGE_SIZE), 3);
        assert_eq!(p.count(), 2);
        assert_eq!(p.get(0).unwrap()[..PAGE_SIZE as usize / 2], [1; 2048]);
        assert_eq!(p.get(0).unwrap()[PAGE_SIZE as usize / 2..], [0; 2048]);
        assert!(p.get(LAST).is_some());
        assert_eq!(p.chunks().chunks.len(), 2);
        assert_eq!(p.free(0, LAST), 2);
        assert!(p.0.is_none(), "an emptied map is freed");
        assert_eq!(p.count(), 0);
    }

    #[test]
    fn reads_fill_holes_and_keep_data() {
        let p = with(&[1, CHUNK + 1]);
        let mut buf = Vec::new();
        let start = PAGE_SIZE - 3;
        let end = (CHUNK + 2) * PAGE_SIZE + 5;
        p.read(start, end, &mut buf);
        assert_eq!(buf.len() as u64, end - start);
        let at = |off: u64| buf[(off - start) as usize];
        assert_eq!(at(start), 0);
        assert_eq!(at(PAGE_SIZE), 2);
        assert_eq!(at(2 * PAGE_SIZE - 1), 2);
        assert_eq!(at(2 * PAGE_SIZE), 0);
        assert_eq!(at((CHUNK + 1) * PAGE_SIZE), (CHUNK as u8) + 2);
        assert_eq!(at(end - 1), 0);
        let ones = buf.iter().filter(|b| **b != 0).count() as u64;
        assert_eq!(ones, 2 * PAGE_SIZE);
    }

    #[test]
    fn allocate_fills_only_absent_slots() {
        let mut p = with(&[5]);
        assert_eq!(p.allocate(0, CHUNK + 1), CHUNK + 1);
        assert_eq!(p.count(), CHUNK + 2);
        assert_eq!(p.get(5).unwrap()[0], 6, "existing data kept");
        assert_eq!(p.get(CHUNK + 1).unwrap()[0], 0);
        assert_eq!(p.clear(), CHUNK + 2);
        assert!(p.0.is_none(), "an emptied map is freed");
    }
}
