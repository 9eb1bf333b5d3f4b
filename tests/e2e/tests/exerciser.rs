//! File exerciser (fsx-style): one file, an in-memory model of its bytes, and a long random
//! sequence of writes (small and large, across page boundaries, beyond end of file, with
//! `O_APPEND`), truncates up and down, `fallocate` (mode 0, `KEEP_SIZE`,
//! `PUNCH_HOLE|KEEP_SIZE`), `mmap` reads and `MAP_SHARED` writes with `msync`, fsync and
//! close/reopen cycles. Every read, mapping and size is checked against the model.
//!
//! Environment: `MEMOFS_LONG=1` runs 1 000 000 operations instead of 100 000;
//! `MEMOFS_FSX_SEED=N` picks another sequence; `MEMOFS_FSX_OPS=N` sets the count.
//! The mem-backend test follows `MEMOFS_E2E_OPTS` (kernel-backed data or `passthrough=off`).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use memofs_e2e::checks::{export_tmpfs, scaled};
use memofs_e2e::map::Map;
use memofs_e2e::{first_difference, require_mount, sys, Mount, Rng};

const PAGE: u64 = 4096;
/// Largest file the exerciser makes: 64 pages keeps whole-file checks cheap.
const MAX_SIZE: u64 = 64 * PAGE;

#[derive(Clone, Debug)]
enum Op {
    Write { off: u64, len: usize },
    Read { off: u64, len: usize },
    Truncate { size: u64 },
    Falloc { mode: i32, off: u64, len: u64 },
    MapRead { off: u64, len: usize },
    MapWrite { off: u64, len: usize },
    Fsync,
    Reopen { append: bool },
    CheckAll,
}

/// A length: mostly small, sometimes up to several pages.
fn length(rng: &mut Rng) -> u64 {
    match rng.weighted(&[70, 25, 5]) {
        0 => rng.range(1, 64),
        1 => rng.range(1, PAGE + 100),
        _ => rng.range(PAGE, 4 * PAGE),
    }
}

/// An offset: often next to a page boundary, sometimes anywhere up to the size limit.
fn offset(rng: &mut Rng, size: u64) -> u64 {
    match rng.weighted(&[40, 40, 20]) {
        0 => (rng.below(MAX_SIZE / PAGE) * PAGE + rng.below(16)).saturating_sub(8),
        1 => rng.below(size.max(1) + PAGE),
        _ => rng.below(MAX_SIZE),
    }
}

/// The next operation for a file of `size` bytes (`append`: writes go to its end).
fn gen(rng: &mut Rng, size: u64, append: bool) -> Op {
    let room = |off: u64, len: u64| len.min(MAX_SIZE.saturating_sub(off)).max(1);
    match rng.weighted(&[30, 28, 4, 3, 3, 4, 5, 5, 1, 1, 1]) {
        0 if append && size + 64 > MAX_SIZE => Op::Truncate {
            size: rng.below(size),
        },
        0 => {
            let off = offset(rng, size).min(MAX_SIZE - 1);
            let end = if append { size } else { off };
            Op::Write {
                off,
                len: room(end, length(rng)) as usize,
            }
        }
        1 => Op::Read {
            off: offset(rng, size),
            len: length(rng) as usize,
        },
        2 => Op::Truncate {
            size: if rng.chance(1, 2) {
                rng.below(size + 1)
            } else {
                rng.below(MAX_SIZE)
            },
        },
        k @ 3..=5 => {
            let off = offset(rng, size).min(MAX_SIZE - 1);
            Op::Falloc {
                mode: [
                    0,
                    libc::FALLOC_FL_KEEP_SIZE,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                ][k - 3],
                off,
                len: room(off, length(rng)),
            }
        }
        k @ 6..=7 if size > 0 => {
            let off = rng.below(size);
            let len = length(rng).min(size - off) as usize;
            // Mapped writes only through a descriptor without O_APPEND: see
            // `mmap_write_through_an_o_append_descriptor` for why.
            if k == 6 || append {
                Op::MapRead { off, len }
            } else {
                Op::MapWrite { off, len }
            }
        }
        8 => Op::Fsync,
        9 => Op::Reopen {
            append: rng.chance(1, 5),
        },
        _ => Op::CheckAll,
    }
}

/// The file under test and its model.
struct Fsx {
    path: PathBuf,
    file: File,
    append: bool,
    model: Vec<u8>,
    rng: Rng,
    seed: u64,
    history: VecDeque<String>,
    /// Ops of each kind that were checked (for the summary).
    reads_checked: u64,
}

fn open(path: &Path, append: bool) -> File {
    let mut o = OpenOptions::new();
    o.read(true).write(true).create(true).mode(0o644);
    if append {
        o.append(true);
    }
    o.open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

impl Fsx {
    fn new(path: PathBuf, seed: u64) -> Fsx {
        Fsx {
            file: open(&path, false),
            path,
            append: false,
            model: Vec::new(),
            rng: Rng::new(seed),
            seed,
            history: VecDeque::new(),
            reads_checked: 0,
        }
    }

    /// Fail with everything needed to reproduce: seed, op index, op, and the last operations.
    fn fail(&self, i: u64, op: &Op, why: String) -> ! {
        panic!(
            "exerciser mismatch: seed {}, op {i}: {op:?}: {why}\nlast operations:\n{}\n\
             reproduce: MEMOFS_FSX_SEED={} MEMOFS_FSX_OPS={}",
            self.seed,
            self.history.iter().cloned().collect::<Vec<_>>().join("\n"),
            self.seed,
            i + 1
        )
    }

    /// Compare `got`, read at `off`, with the model.
    fn compare(&self, i: u64, op: &Op, what: &str, off: u64, got: &[u8]) {
        let end = (off as usize + got.len()).min(self.model.len());
        let want = self.model.get(off as usize..end).unwrap_or(&[]);
        if let Some(d) = first_difference(got, want) {
            self.fail(
                i,
                op,
                format!(
                    "{what}: first differing byte at file offset {} (got {:?}, want {:?}); {} bytes read, {} expected, model size {}",
                    off + d as u64,
                    got.get(d),
                    want.get(d),
                    got.len(),
                    want.len(),
                    self.model.len()
                ),
            );
        }
    }

    fn model_write(&mut self, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    fn step(&mut self, i: u64) {
        let op = gen(&mut self.rng, self.model.len() as u64, self.append);
        self.history.push_back(format!("{i}: {op:?}"));
        if self.history.len() > 20 {
            self.history.pop_front();
        }
        let ok = |r: std::io::Result<()>, s: &Self, what: &str| {
            if let Err(e) = r {
                s.fail(i, &op, format!("{what} failed: {e}"));
            }
        };
        match op {
            Op::Write { off, len } => {
                let mut data = vec![0u8; len];
                self.rng.fill(&mut data);
                ok(self.file.write_all_at(&data, off), self, "pwrite");
                let at = if self.append {
                    self.model.len() as u64
                } else {
                    off
                };
                self.model_write(at, &data);
            }
            Op::Read { off, len } => {
                let got = sys::pread_full(&self.file, off, len)
                    .unwrap_or_else(|e| self.fail(i, &op, format!("pread failed: {e}")));
                self.compare(i, &op, "pread", off, &got);
                self.reads_checked += 1;
            }
            Op::Truncate { size } => {
                ok(self.file.set_len(size), self, "ftruncate");
                self.model.resize(size as usize, 0);
            }
            Op::Falloc { mode, off, len } => {
                ok(
                    sys::fallocate(&self.file, mode, off, len),
                    self,
                    "fallocate",
                );
                let end = ((off + len) as usize).min(MAX_SIZE as usize);
                if mode == 0 && end > self.model.len() {
                    self.model.resize(end, 0);
                } else if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                    let end = end.min(self.model.len());
                    if (off as usize) < end {
                        self.model[off as usize..end].fill(0);
                    }
                }
            }
            Op::MapRead { off, len } => {
                let mut map = Map::shared(&self.file, off, len)
                    .unwrap_or_else(|e| self.fail(i, &op, format!("mmap failed: {e}")));
                let got = map.bytes().to_vec();
                drop(map);
                self.compare(i, &op, "mmap read", off, &got);
                self.reads_checked += 1;
            }
            Op::MapWrite { off, len } => {
                let mut data = vec![0u8; len];
                self.rng.fill(&mut data);
                let mut map = Map::shared(&self.file, off, len)
                    .unwrap_or_else(|e| self.fail(i, &op, format!("mmap failed: {e}")));
                map.bytes().copy_from_slice(&data);
                ok(map.msync(), self, "msync");
                drop(map);
                self.model_write(off, &data);
            }
            Op::Fsync => ok(self.file.sync_all(), self, "fsync"),
            Op::Reopen { append } => {
                self.file = open(&self.path, append);
                self.append = append;
                self.check_all(i, &op);
            }
            Op::CheckAll => self.check_all(i, &op),
        }
        let size = self
            .file
            .metadata()
            .unwrap_or_else(|e| self.fail(i, &op, format!("fstat failed: {e}")))
            .len();
        if size != self.model.len() as u64 {
            self.fail(
                i,
                &op,
                format!("st_size {size}, model size {}", self.model.len()),
            );
        }
    }

    fn check_all(&mut self, i: u64, op: &Op) {
        let got = sys::pread_full(&self.file, 0, self.model.len() + PAGE as usize)
            .unwrap_or_else(|e| self.fail(i, op, format!("whole-file read failed: {e}")));
        if got.len() != self.model.len() {
            self.fail(
                i,
                op,
                format!(
                    "whole file is {} bytes, model {}",
                    got.len(),
                    self.model.len()
                ),
            );
        }
        self.compare(i, op, "whole-file read", 0, &got);
        self.reads_checked += 1;
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Run the exerciser on `dir/fsx` and check the file once more after the last operation.
fn exercise(dir: &Path, test: &str, default_seed: u64, default_ops: u64) {
    let seed = env_u64("MEMOFS_FSX_SEED").unwrap_or(default_seed);
    let ops = env_u64("MEMOFS_FSX_OPS").unwrap_or(default_ops);
    let start = std::time::Instant::now();
    let mut fsx = Fsx::new(dir.join("fsx"), seed);
    for i in 0..ops {
        fsx.step(i);
    }
    fsx.check_all(ops, &Op::CheckAll);
    // A fresh descriptor (new open: the page cache may be dropped) sees the same bytes.
    fsx.step_reopen_check(ops);
    eprintln!(
        "{test}: {ops} operations (seed {seed}) match the model in {:.1?}: {} reads checked, final size {}",
        start.elapsed(),
        fsx.reads_checked,
        fsx.model.len()
    );
}

impl Fsx {
    fn step_reopen_check(&mut self, i: u64) {
        let op = Op::Reopen { append: false };
        drop(std::mem::replace(&mut self.file, open(&self.path, false)));
        self.check_all(i, &op);
    }
}

#[test]
fn exerciser_mem() {
    require_mount!();
    let m = Mount::memofs(&["size=64m"]);
    exercise(m.path(), "exerciser_mem", 11, scaled(100_000, 1_000_000));
}

#[test]
fn exerciser_passthrough_backend() {
    require_mount!();
    let (_host, m) = export_tmpfs("export", &["size=64m"], &[]);
    exercise(
        m.path(),
        "exerciser_passthrough_backend",
        12,
        scaled(100_000, 1_000_000),
    );
}

/// The model itself, against kernel tmpfs: if this fails, the exerciser is wrong, not memofs.
#[test]
fn exerciser_model_agrees_with_tmpfs() {
    require_mount!();
    let t = Mount::tmpfs(&["size=64m"]);
    exercise(
        t.path(),
        "exerciser_model_agrees_with_tmpfs",
        13,
        scaled(20_000, 200_000),
    );
}

/// A page written through a `MAP_SHARED` mapping stays at its offset even when the descriptor
/// that was mapped is `O_APPEND` (the kernel's writeback sends an explicit offset).
#[test]

fn mmap_write_through_an_o_append_descriptor() {
    require_mount!();
    let (_host, exported) = export_tmpfs("export", &["size=64m"], &[]);
    let mem = Mount::memofs(&["size=64m"]);
    for dir in [mem.path(), exported.path()] {
        let p = dir.join("f");
        std::fs::write(&p, vec![b'a'; 10_000]).unwrap();
        let f = open(&p, true);
        let mut map = Map::shared(&f, 4096 + 100, 10).unwrap();
        map.bytes().copy_from_slice(b"bbbbbbbbbb");
        map.msync().unwrap();
        drop(map);
        drop(f);
        let mut want = vec![b'a'; 10_000];
        want[4196..4206].copy_from_slice(b"bbbbbbbbbb");
        memofs_e2e::assert_bytes_eq(
            &std::fs::read(&p).unwrap(),
            &want,
            &format!("{}: after an mmap write through O_APPEND", p.display()),
        );
    }
}
