//! Concurrency stress: several workers (forked processes, or threads) apply random create,
//! write, read, rename, unlink, mkdir, rmdir, link, setxattr and truncate operations to the
//! same few names in overlapping directories. Afterwards the tree must be consistent: every
//! file reads back `st_size` bytes made only of whole, well-placed records (each write writes
//! self-describing 64-byte records, so torn, misplaced or corrupted data is caught), link counts
//! match the names found, `rm -rf` works, and the mem backend's usage returns to its baseline.
//!
//! Environment: `MEMOFS_LONG=1` runs 25 times more operations per worker;
//! `MEMOFS_STRESS_SEED=N` changes the operation mix (the seed is printed on failure).
//!
//! Forked workers only make raw syscalls on data prepared before the fork (no allocation, no
//! locks), which is what is safe in the child of a multi-threaded process.

use std::ffi::CString;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use memofs_e2e::checks::{check_tree, export_tmpfs, rm_rf, scaled, stats_usage, Usage};
use memofs_e2e::tree::{self, Detail};
use memofs_e2e::{errno_name, require_mount, Mount, Rng};

const WORKERS: usize = 4;
const DIRS: &[&str] = &["d0", "d1", "d0/e", "d1/e"];
const FILES: &[&str] = &["f0", "f1", "f2", "f3", "f4"];
const REC: usize = 64;
const MAX_WRITE: usize = 4096;
const MAGIC: &[u8; 4] = b"MEMO";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Create,
    Write,
    Read,
    Rename,
    Unlink,
    Mkdir,
    Rmdir,
    Link,
    Setxattr,
    Truncate,
}

const KINDS: [Kind; 10] = [
    Kind::Create,
    Kind::Write,
    Kind::Read,
    Kind::Rename,
    Kind::Unlink,
    Kind::Mkdir,
    Kind::Rmdir,
    Kind::Link,
    Kind::Setxattr,
    Kind::Truncate,
];
const WEIGHTS: [u32; 10] = [10, 20, 12, 10, 8, 6, 6, 8, 6, 6];

/// One prepared operation: paths as C strings, so a forked child needs no allocation.
struct Op {
    kind: Kind,
    a: CString,
    b: CString,
    off: u64,
    len: usize,
}

/// What one worker did: plain integers, copied through a pipe from a forked child.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Report {
    ok: [u32; 10],
    failed: [u32; 10],
    unexpected: u32,
    first_unexpected: [(u32, i32); 8],
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 64-byte record written at file offset `pos` by operation `op` of `worker`: a header
/// naming its own position, and filler derived from the header.
fn record(worker: u32, op: u32, pos: u64, out: &mut [u8]) {
    out[0..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&worker.to_le_bytes());
    out[8..12].copy_from_slice(&op.to_le_bytes());
    out[12..16].copy_from_slice(&[0; 4]);
    out[16..24].copy_from_slice(&pos.to_le_bytes());
    let key = pos ^ ((worker as u64) << 32 | op as u64);
    for (i, chunk) in out[24..REC].chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&splitmix(key.wrapping_add(i as u64)).to_le_bytes());
    }
}

/// Every 64-byte block of a file is zeros or a whole record written for that position.
fn verify_records(_: &Path, data: &[u8]) -> Result<(), String> {
    if !data.len().is_multiple_of(REC) {
        return Err(format!("size {} is not a multiple of {REC}", data.len()));
    }
    let mut want = [0u8; REC];
    for (i, block) in data.chunks(REC).enumerate() {
        let pos = (i * REC) as u64;
        if block.iter().all(|&b| b == 0) {
            continue;
        }
        let worker = u32::from_le_bytes(block[4..8].try_into().unwrap());
        let op = u32::from_le_bytes(block[8..12].try_into().unwrap());
        record(worker, op, pos, &mut want);
        if block != want {
            return Err(format!(
                "block at {pos} is neither zeros nor the record for that position: {:02x?}",
                block
            ));
        }
    }
    Ok(())
}

fn prepare(root: &Path, seed: u64, n: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut dir_names: Vec<&str> = vec![""];
    dir_names.extend_from_slice(DIRS);
    let file = |rng: &mut Rng| {
        let d = rng.pick(&dir_names);
        let f = rng.pick(FILES);
        root.join(d).join(f)
    };
    (0..n)
        .map(|_| {
            let kind = KINDS[rng.weighted(&WEIGHTS)];
            let a = match kind {
                Kind::Mkdir | Kind::Rmdir => root.join(rng.pick(DIRS)),
                Kind::Rename if rng.chance(1, 4) => root.join(rng.pick(DIRS)),
                _ => file(&mut rng),
            };
            let b = match kind {
                Kind::Rename if rng.chance(1, 4) => root.join(rng.pick(DIRS)),
                Kind::Rename | Kind::Link => file(&mut rng),
                _ => root.to_path_buf(),
            };
            let (off, len) = match kind {
                Kind::Write => (
                    REC as u64 * rng.below(1024),
                    REC * rng.range(1, (MAX_WRITE / REC) as u64) as usize,
                ),
                Kind::Truncate => (REC as u64 * rng.below(1100), 0),
                Kind::Setxattr => (0, rng.range(1, 200) as usize),
                _ => (0, 0),
            };
            Op {
                kind,
                a: memofs_e2e::sys::cpath(a),
                b: memofs_e2e::sys::cpath(b),
                off,
                len,
            }
        })
        .collect()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

fn expected(kind: Kind, e: i32) -> bool {
    matches!(
        e,
        libc::ENOENT | libc::EEXIST | libc::ENOTEMPTY | libc::ENOTDIR | libc::EISDIR | libc::EINVAL
    ) || (kind == Kind::Link && e == libc::EPERM)
}

/// Open `p`, run `f` on the descriptor, close it: -1 (errno set) if any step fails.
fn with_fd(p: &CString, flags: i32, f: impl FnOnce(i32) -> isize) -> isize {
    // SAFETY: `p` is a valid C string; the descriptor is closed before returning.
    unsafe {
        let fd = libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644);
        if fd < 0 {
            return -1;
        }
        let r = f(fd);
        let saved = errno();
        if libc::close(fd) != 0 && r >= 0 {
            return -1;
        }
        if r < 0 {
            *libc::__errno_location() = saved;
        }
        r
    }
}

/// Run `ops` as worker `worker`: raw syscalls only (safe after fork), no allocation.
fn run_ops(worker: u32, ops: &[Op]) -> Report {
    let mut rep = Report::default();
    let mut buf = [0u8; MAX_WRITE];
    for (i, op) in ops.iter().enumerate() {
        let (a, b) = (op.a.as_ptr(), op.b.as_ptr());
        let r: isize = match op.kind {
            Kind::Create => with_fd(&op.a, libc::O_CREAT | libc::O_WRONLY, |_| 0),
            Kind::Write => {
                for (k, rec) in buf[..op.len].chunks_mut(REC).enumerate() {
                    record(worker, i as u32, op.off + (k * REC) as u64, rec);
                }
                // SAFETY: `buf` is a live stack array of at least `op.len` bytes.
                with_fd(&op.a, libc::O_WRONLY, |fd| unsafe {
                    libc::pwrite(fd, buf.as_ptr().cast(), op.len, op.off as i64)
                })
            }
            Kind::Read => with_fd(&op.a, libc::O_RDONLY, |fd| loop {
                // SAFETY: reading at most `buf.len()` bytes into the live stack array `buf`.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break n;
                }
            }),
            // SAFETY (this arm and the four below): `a` and `b` are valid C strings owned by
            // `ops`, alive for the whole call.
            Kind::Rename => unsafe { libc::rename(a, b) as isize },
            // SAFETY: as above.
            Kind::Unlink => unsafe { libc::unlink(a) as isize },
            // SAFETY: as above.
            Kind::Mkdir => unsafe { libc::mkdir(a, 0o755) as isize },
            // SAFETY: as above.
            Kind::Rmdir => unsafe { libc::rmdir(a) as isize },
            // SAFETY: as above.
            Kind::Link => unsafe { libc::link(a, b) as isize },
            // SAFETY: `a` and the name are valid C strings; `buf` holds at least `op.len` bytes.
            Kind::Setxattr => unsafe {
                libc::setxattr(a, c"user.stress".as_ptr(), buf.as_ptr().cast(), op.len, 0) as isize
            },
            // SAFETY: `a` is a valid C string owned by `ops`.
            Kind::Truncate => unsafe { libc::truncate(a, op.off as i64) as isize },
        };
        let k = op.kind as usize;
        if r >= 0 {
            rep.ok[k] += 1;
            continue;
        }
        rep.failed[k] += 1;
        let e = errno();
        if !expected(op.kind, e) {
            if let Some(slot) = rep.first_unexpected.get_mut(rep.unexpected as usize) {
                *slot = (i as u32, e);
            }
            rep.unexpected += 1;
        }
    }
    rep
}

/// Run each worker's operations in a forked child; collect the reports.
fn run_processes(all: &[Vec<Op>], limit: Duration) -> Vec<Report> {
    let mut children = Vec::new();
    for (w, ops) in all.iter().enumerate() {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a two-element array for pipe2 to fill. (Close-on-exec keeps the
        // pipe out of programs other tests start; forked workers do not exec.)
        assert_eq!(
            unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
            0,
            "pipe2"
        );
        // SAFETY: the child only makes raw syscalls on memory prepared before the fork, then
        // leaves with _exit (no destructors, no atexit handlers, no test-harness code).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let rep = std::panic::catch_unwind(|| run_ops(w as u32, ops));
            // SAFETY: the report is plain integers; it is written whole or the child fails.
            unsafe {
                let Ok(rep) = rep else { libc::_exit(101) };
                let size = std::mem::size_of::<Report>();
                let n = libc::write(fds[1], (&rep as *const Report).cast(), size);
                libc::_exit(if n == size as isize { 0 } else { 102 });
            }
        }
        // SAFETY: the parent keeps only the read end.
        unsafe { libc::close(fds[1]) };
        children.push((pid, fds[0]));
    }
    let deadline = Instant::now() + limit;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (i, &(pid, _)) in children.iter().enumerate() {
            let mut st = 0;
            // SAFETY: `pid` is our child; `st` receives its status.
            if statuses[i].is_none() && unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid
            {
                statuses[i] = Some(st);
            }
        }
        if Instant::now() > deadline {
            for (&(pid, _), st) in children.iter().zip(&statuses) {
                if st.is_none() {
                    // SAFETY: `pid` is our own child, not yet reaped (so not reused).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            panic!("stress workers still running after {limit:?}: the server may be hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    children
        .iter()
        .zip(&statuses)
        .enumerate()
        .map(|(w, (&(_, rfd), st))| {
            let st = st.unwrap();
            assert!(
                libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
                "worker process {w} ended with status {st:#x}"
            );
            let mut rep = Report::default();
            let size = std::mem::size_of::<Report>();
            // SAFETY: reading at most `size` bytes into a plain-integer struct of that size.
            let n = unsafe { libc::read(rfd, (&mut rep as *mut Report).cast(), size) };
            // SAFETY: closing our own read end.
            unsafe { libc::close(rfd) };
            assert_eq!(n, size as isize, "report of worker {w}");
            rep
        })
        .collect()
}

fn run_threads(all: &[Vec<Op>]) -> Vec<Report> {
    std::thread::scope(|s| {
        let hs: Vec<_> = all
            .iter()
            .enumerate()
            .map(|(w, ops)| s.spawn(move || run_ops(w as u32, ops)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Workers {
    Processes,
    Threads,
}

/// Prepare, run and summarize a stress run in `root/work`; returns the work directory.
fn stress(root: &Path, how: Workers, test: &str, default_seed: u64) -> std::path::PathBuf {
    let seed = std::env::var("MEMOFS_STRESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_seed);
    let per_worker = scaled(10_000, 250_000) as usize;
    let work = root.join("work");
    fs::create_dir(&work).unwrap();
    for d in DIRS {
        fs::create_dir(work.join(d)).unwrap();
    }
    let all: Vec<Vec<Op>> = (0..WORKERS)
        .map(|w| prepare(&work, seed * 1000 + w as u64, per_worker))
        .collect();
    let start = Instant::now();
    let reports = match how {
        Workers::Processes => run_processes(&all, Duration::from_secs(scaled(120, 1800))),
        Workers::Threads => run_threads(&all),
    };
    let mut ok = [0u32; 10];
    let mut failed = [0u32; 10];
    for (w, r) in reports.iter().enumerate() {
        for k in 0..KINDS.len() {
            ok[k] += r.ok[k];
            failed[k] += r.failed[k];
        }
        let shown = (r.unexpected as usize).min(r.first_unexpected.len());
        let list: Vec<String> = r.first_unexpected[..shown]
            .iter()
            .map(|&(i, e)| format!("op {i} ({:?}): {}", all[w][i as usize].kind, errno_name(e)))
            .collect();
        assert!(
            r.unexpected == 0,
            "{test} (seed {seed}): worker {w} got {} unexpected errors, first: {list:?}",
            r.unexpected
        );
    }
    let mix: Vec<String> = KINDS
        .iter()
        .enumerate()
        .map(|(k, kind)| format!("{kind:?} {}/{}", ok[k], ok[k] + failed[k]))
        .collect();
    eprintln!(
        "{test}: {WORKERS} workers x {per_worker} operations (seed {seed}) in {:.1?}; succeeded/tried: {}",
        start.elapsed(),
        mix.join(", ")
    );
    // The mix must really exercise every kind (else the test proves little).
    for (k, kind) in KINDS.iter().enumerate() {
        assert!(ok[k] > 0, "{test}: no {kind:?} ever succeeded");
    }
    let sum = check_tree(&work, &mut verify_records).unwrap_or_else(|p| {
        panic!(
            "{test} (seed {seed}): inconsistent tree after the run:\n{}",
            p.join("\n")
        )
    });
    assert!(sum.files > 0, "{test}: no file left to check");
    eprintln!("{test}: consistent: {sum:?}");
    work
}

fn wait_for_usage(m: &Mount, baseline: Usage) {
    memofs_e2e::checks::eventually(
        "memofs stats usage back to its baseline after rm -rf",
        Duration::from_secs(10),
        || {
            let u = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
            (u == baseline, (u, baseline))
        },
    );
}

fn stress_mem(how: Workers, opts: &[&str], test: &str, seed: u64) {
    require_mount!();
    let m = Mount::memofs(opts);
    let baseline = stats_usage(m.path()).unwrap_or_else(|e| panic!("{e}"));
    let work = stress(m.path(), how, test, seed);
    rm_rf(&work);
    wait_for_usage(&m, baseline);
}

#[test]
fn stress_processes_mem() {
    stress_mem(
        Workers::Processes,
        &["size=256m"],
        "stress_processes_mem",
        1,
    );
}

#[test]
fn stress_threads_mem_cache_never() {
    stress_mem(
        Workers::Threads,
        &["size=256m", "cache=never"],
        "stress_threads_mem_cache_never",
        2,
    );
}

#[test]
fn stress_processes_passthrough_backend() {
    require_mount!();
    let (host, m) = export_tmpfs("export", &["size=256m"], &[]);
    let work = stress(
        m.path(),
        Workers::Processes,
        "stress_processes_passthrough_backend",
        3,
    );
    // The host directory holds exactly what the mount shows.
    let d = Detail {
        nlink: true,
        content: true,
        xattrs: true,
        ..Detail::default()
    };
    let host_work = host.join("export/work");
    let (seen, real) = (
        tree::describe(&work, d).unwrap(),
        tree::describe(&host_work, d).unwrap(),
    );
    let diff = tree::diff(&seen, &real, "the mount", "the host");
    assert!(
        diff.is_empty(),
        "mount and host differ:\n{}",
        diff.join("\n")
    );
    if let Err(p) = check_tree(&host_work, &mut verify_records) {
        panic!("host tree inconsistent:\n{}", p.join("\n"));
    }
    rm_rf(&work);
    assert!(
        fs::symlink_metadata(&host_work).is_err(),
        "rm -rf through the mount left the host directory"
    );
}
