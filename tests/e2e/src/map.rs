//! Memory mappings of files under test, unmapped on drop.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

const PAGE: u64 = 4096;

/// A read-write mapping of `len` bytes from file offset `off` (any alignment).
pub struct Map {
    base: *mut u8,
    map_len: usize,
    skip: usize,
}

// SAFETY: the mapping is plain memory owned by this object; threads that share it only
// read and write bytes, as tests of concurrent mappings do.
unsafe impl Send for Map {}

impl Map {
    /// A `MAP_SHARED` mapping: writes reach the file.
    pub fn shared(f: &File, off: u64, len: usize) -> io::Result<Map> {
        Map::new(f, off, len, libc::MAP_SHARED)
    }

    /// A `MAP_PRIVATE` mapping: writes stay in this mapping (copy on write).
    pub fn private(f: &File, off: u64, len: usize) -> io::Result<Map> {
        Map::new(f, off, len, libc::MAP_PRIVATE)
    }

    fn new(f: &File, off: u64, len: usize, kind: i32) -> io::Result<Map> {
        let start = off / PAGE * PAGE;
        let skip = (off - start) as usize;
        let map_len = skip + len;
        // SAFETY: a fresh mapping of an open descriptor; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                kind,
                f.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map {
            base: p.cast(),
            map_len,
            skip,
        })
    }

    /// The mapped bytes of the requested range (the caller keeps them inside the file, so
    /// no SIGBUS).
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `map_len` bytes long and lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(self.skip), self.map_len - self.skip)
        }
    }

    /// `msync(MS_SYNC)` of the whole mapping.
    pub fn msync(&self) -> io::Result<()> {
        // SAFETY: syncing exactly the range this object mapped.
        if unsafe { libc::msync(self.base.cast(), self.map_len, libc::MS_SYNC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range this object mapped, once.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}
