//! Differential test: one seeded random sequence of operations applied to memofs and to a kernel
//! tmpfs; every result (value or errno, bytes read, attributes, listings, xattrs) must agree,
//! step by step, and whole-tree snapshots must agree every few steps.
//!
//! The name space is tiny (four names, three levels) so that collisions and errors are common.
//! Not compared: inode numbers, timestamps, st_blocks, st_dev, directory sizes (POSIX leaves a
//! directory's st_size to the file system).
//!
//! Knobs: `MEMOFS_DIFF_SEED=N` (seed), `MEMOFS_DIFF_OPS=N` (operations per test).

use std::fs;

use memofs_e2e::diffops::{existing, work_root, Gen, Op, Res, Side, Val, SLOTS};
use memofs_e2e::sys;
use memofs_e2e::tree::{self, Detail};
use memofs_e2e::{require_mount, Mount, Rng};

const SNAPSHOT_EVERY: usize = 50;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Compare one step: the operation's result and the attributes of the paths it touched.
fn step(a: &mut Side, b: &mut Side, op: &Op) -> (String, Option<String>) {
    let (ra, rb) = (Res(a.apply(op)), Res(b.apply(op)));
    let line = format!("{op:?} => {ra:?} | {rb:?}");
    if ra != rb {
        let mut why = format!("op {op:?}\n  memofs: {ra:?}\n  tmpfs:  {rb:?}");
        if let (Ok(Val::Data(x)), Ok(Val::Data(y))) = (&ra.0, &rb.0) {
            if let Some(i) = memofs_e2e::first_difference(x, y) {
                let end = |v: &Vec<u8>| v.len().min(i + 16);
                why += &format!(
                    "\n  first difference at byte {i}: memofs {:?}, tmpfs {:?}",
                    &x[i.min(x.len())..end(x)],
                    &y[i.min(y.len())..end(y)]
                );
            }
        }
        return (line, Some(why));
    }
    for p in op.touched() {
        let (sa, sb) = (Res(a.stat(p, false)), Res(b.stat(p, false)));
        if sa != sb {
            return (
                line,
                Some(format!(
                    "after op {op:?}\n  lstat {p:?}: memofs {sa:?}, tmpfs {sb:?}"
                )),
            );
        }
    }
    (line, None)
}

const DETAIL: Detail = Detail {
    nlink: true,
    dir_size: false,
    mtime: false,
    content: true,
    xattrs: true,
};

/// Compare the whole trees.
fn snapshot(a: &Side, b: &Side) -> Option<String> {
    let ta = match tree::describe(&a.root, DETAIL) {
        Ok(t) => t,
        Err(e) => return Some(format!("walking memofs failed: {e}")),
    };
    let tb = tree::describe(&b.root, DETAIL).expect("walking tmpfs");
    let d = tree::diff(&ta, &tb, "memofs", "tmpfs");
    (!d.is_empty()).then(|| format!("tree snapshot differs:\n  {}", d.join("\n  ")))
}

/// Empty both file systems and close every descriptor, for replaying a shorter sequence.
fn reset(s: &mut Side) -> std::io::Result<()> {
    s.slots.iter_mut().for_each(|f| *f = None);
    for e in fs::read_dir(&s.root)? {
        let p = e?.path();
        if fs::symlink_metadata(&p)?.is_dir() {
            fs::remove_dir_all(&p)?;
        } else {
            fs::remove_file(&p)?;
        }
    }
    sys::chmod(&s.root, 0o1777)?;
    for n in sys::listxattr(&s.root)? {
        sys::removexattr(&s.root, &n)?;
    }
    Ok(())
}

/// Replay `ops` on emptied file systems; the first mismatch, if any, with the step log.
fn replay(
    a: &mut Side,
    b: &mut Side,
    ops: &[Op],
) -> Result<Option<(usize, String, Vec<String>)>, String> {
    reset(a).map_err(|e| format!("cannot empty memofs: {e}"))?;
    reset(b).map_err(|e| format!("cannot empty tmpfs: {e}"))?;
    let mut log = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (line, bad) = step(a, b, op);
        log.push(format!("{i}: {line}"));
        if let Some(why) = bad {
            return Ok(Some((i, why, log)));
        }
    }
    Ok(snapshot(a, b).map(|why| (ops.len(), why, log)))
}

/// Greedily drop chunks of operations while the shorter sequence still shows a difference.
fn shrink(a: &mut Side, b: &mut Side, mut ops: Vec<Op>) -> Option<(Vec<Op>, String, Vec<String>)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut best = match replay(a, b, &ops) {
        Ok(Some((i, why, log))) => {
            ops.truncate(i + 1);
            (why, log)
        }
        _ => return None, // not reproducible on a reused mount
    };
    let mut chunk = ops.len().div_ceil(2);
    while chunk >= 1 && std::time::Instant::now() < deadline {
        let mut start = 0;
        let mut removed_any = false;
        while start < ops.len() && std::time::Instant::now() < deadline {
            let mut candidate = ops.clone();
            let end = (start + chunk).min(candidate.len());
            candidate.drain(start..end);
            match replay(a, b, &candidate) {
                Ok(Some((i, why, log))) => {
                    candidate.truncate(i + 1);
                    ops = candidate;
                    best = (why, log);
                    removed_any = true;
                }
                Ok(None) => start += chunk,
                Err(_) => return Some((ops, best.0, best.1)),
            }
        }
        if !removed_any || chunk == 1 {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    Some((ops, best.0, best.1))
}

/// Which memofs backend to compare with tmpfs.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Mem,
    /// The passthrough backend exporting a directory of another tmpfs.
    PassthroughOverTmpfs,
}

fn run(test: &str, opts: &[&str], default_seed: u64, default_ops: usize) {
    run_on(Backend::Mem, test, opts, default_seed, default_ops)
}

fn run_on(backend: Backend, test: &str, opts: &[&str], default_seed: u64, default_ops: usize) {
    require_mount!();
    let seed = env_u64("MEMOFS_DIFF_SEED").unwrap_or(default_seed);
    let ops = env_u64("MEMOFS_DIFF_OPS").map_or(default_ops, |n| n as usize);
    // Declared before the sides so that descriptors close before the unmounts.
    let host = Mount::tmpfs(&["size=256m", "mode=1777"]);
    let mem = match backend {
        Backend::Mem => {
            let mut mem_opts = vec!["size=256m"];
            mem_opts.extend_from_slice(opts);
            Mount::memofs(&mem_opts)
        }
        Backend::PassthroughOverTmpfs => {
            Mount::try_memofs_source(host.path(), opts).unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let tmp = Mount::tmpfs(&["size=256m", "mode=1777"]);
    let mut a = Side {
        root: work_root(mem.path()),
        slots: (0..SLOTS).map(|_| None).collect(),
    };
    let mut b = Side {
        root: work_root(tmp.path()),
        slots: (0..SLOTS).map(|_| None).collect(),
    };
    let mut gen = Gen {
        rng: Rng::new(seed),
    };
    let mut history: Vec<String> = Vec::new();
    let mut done: Vec<Op> = Vec::new();
    for i in 0..ops {
        let op = gen.op(&existing(&b.root));
        let (line, mut bad) = step(&mut a, &mut b, &op);
        history.push(format!("{i}: {line}"));
        done.push(op);
        if bad.is_none() && (i % SNAPSHOT_EVERY == SNAPSHOT_EVERY - 1 || i + 1 == ops) {
            bad = snapshot(&a, &b);
        }
        let Some(why) = bad else { continue };
        let start = history.len().saturating_sub(25);
        let mut msg = format!(
            "memofs differs from tmpfs: test {test}, options {opts:?}, seed {seed}, step {i}\n{why}\n\
             last operations (step: op => memofs result | tmpfs result):\n{}\n\
             reproduce: MEMOFS_DIFF_SEED={seed} MEMOFS_DIFF_OPS={} cargo test -p memofs-e2e --test differential -- --exact {test}",
            history[start..].join("\n"),
            i + 1
        );
        let log_path = std::env::temp_dir().join(format!("memofs-diff-{test}-seed{seed}.log"));
        if fs::write(&log_path, history.join("\n") + "\n").is_ok() {
            msg += &format!("\nfull operation log: {}", log_path.display());
        }
        if std::env::var("MEMOFS_DIFF_SHRINK").map_or(true, |v| v != "0") {
            match shrink(&mut a, &mut b, done.clone()) {
                Some((small, why, log)) => msg += &format!(
                    "\nshrunk to {} operations (replayed on emptied mounts), which end in:\n{why}\n{}",
                    small.len(),
                    log.join("\n")
                ),
                None => msg += "\n(the difference did not reproduce when replayed on emptied mounts: it depends on earlier state or caching)",
            }
        }
        panic!("{msg}");
    }
    eprintln!("{test}: {ops} operations with seed {seed} agree");
}

#[test]
fn differential_default_options() {
    run("differential_default_options", &[], 1, 3000);
}

#[test]
fn differential_passthrough_backend() {
    run_on(
        Backend::PassthroughOverTmpfs,
        "differential_passthrough_backend",
        &[],
        6,
        1500,
    );
}

#[test]
fn differential_cache_never() {
    run("differential_cache_never", &["cache=never"], 2, 1000);
}

#[test]
fn differential_cache_always() {
    run("differential_cache_always", &["cache=always"], 3, 1000);
}

#[test]
fn differential_writeback() {
    run("differential_writeback", &["writeback=on"], 4, 1000);
}

#[test]
fn differential_direct_io() {
    run("differential_direct_io", &["direct_io"], 5, 1000);
}

/// Sanity check of the differential machinery itself: two tmpfs mounts must always agree.
#[test]
fn differential_harness_tmpfs_vs_tmpfs() {
    require_mount!();
    let (x, y) = (Mount::tmpfs(&["size=64m"]), Mount::tmpfs(&["size=64m"]));
    let mut a = Side {
        root: work_root(x.path()),
        slots: (0..SLOTS).map(|_| None).collect(),
    };
    let mut b = Side {
        root: work_root(y.path()),
        slots: (0..SLOTS).map(|_| None).collect(),
    };
    let mut gen = Gen { rng: Rng::new(99) };
    let mut errors = 0;
    for step in 0..500 {
        let op = gen.op(&existing(&b.root));
        let (ra, rb) = (Res(a.apply(&op)), Res(b.apply(&op)));
        assert!(
            ra == rb,
            "tmpfs vs tmpfs differ at step {step}: {op:?}: {ra:?} vs {rb:?}"
        );
        errors += ra.0.is_err() as usize;
    }
    assert!(
        (50..450).contains(&errors),
        "the generator should mix successes and errors ({errors} errors in 500)"
    );
    drop((a, b));
}
