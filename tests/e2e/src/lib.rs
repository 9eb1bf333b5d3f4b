//! End-to-end harness for memofs: start the real `memofs` binary on a fresh mount point, or a
//! kernel tmpfs to compare against, and unmount it again whatever happens to the test.
//!
//! * [`Mount`]: a mounted file system (memofs or tmpfs) that always unmounts on drop.
//! * [`cli`]: run the `memofs` command line with a time limit and capture its output.
//! * [`sys`]: thin `io::Result` wrappers over the syscalls std does not offer.
//! * [`user`]: run a closure with the credentials of another user (per-thread).
//! * [`rng`]: a small deterministic PRNG, so a seed reproduces a run.
//! * [`tree`]: walk a tree and describe it, for comparisons.
//! * [`conformance`]: pjdfstest's output per test case, compared with kernel tmpfs's.
//! * [`dfs`]: a distributed filesystem's test bed, machines A and B.
//! * [`skip`]: the [`skip!`] macro: a test that cannot run names what it lacks and is counted
//!   as skipped by [`summary`] (`make e2e`'s closing line), never as passed.
//! * [`checks`]: helpers of the reliability tests (polling, `memofs stats` usage, server RSS,
//!   tree consistency, `*at()` calls).
//!
//! Environment:
//! * `MEMOFS_BIN`: the binary to test (default `<workspace>/target/debug/memofs`, then release).
//! * `MEMOFS_E2E_REFERENCE=tmpfs`: run the semantic tests against kernel tmpfs instead of memofs,
//!   to check the tests themselves.
//! * `MEMOFS_E2E_TMPDIR`: where mount points are made (default `/tmp`).
//! * `MEMOFS_E2E_SKIPS`, `MEMOFS_E2E_WITHOUT`: where skips are recorded, and capabilities to
//!   act as if missing (see [`skip`]).
//! * `MEMOFS_LONG=1`: the long versions of the reliability tests (`stress`, `exerciser`,
//!   `hostile`; see the top of each file).

pub mod checks;
pub mod cli;
pub mod conformance;
pub mod dfs;
pub mod diffops;
pub mod map;
pub mod mount;
pub mod rng;
pub mod skip;
pub mod summary;
pub mod sys;
pub mod tree;
pub mod user;

pub use cli::{memofs, memofs_bin, run, CliOutput};
pub use mount::{
    ensure_unmounted, is_memofs_info, is_mounted, mountinfo_for, Mount, MountInfo, TempDir,
    UnmountGuard, FUSE_SUPER_MAGIC, TMPFS_MAGIC,
};
pub use rng::Rng;
pub use sys::{errno_name, Errno};

/// Assert that an `io::Result` failed with the given errno.
#[macro_export]
macro_rules! assert_errno {
    ($res:expr, $errno:expr) => {
        $crate::assert_errno!($res, $errno, "{}", stringify!($res))
    };
    ($res:expr, $errno:expr, $($what:tt)+) => {{
        let want: i32 = $errno;
        match $res {
            Ok(v) => panic!(
                "{}: expected {} but the call succeeded ({:?})",
                format!($($what)+),
                $crate::errno_name(want),
                v
            ),
            Err(e) => {
                let got = e.raw_os_error().unwrap_or(-1);
                assert!(
                    got == want,
                    "{}: expected {} but got {} ({})",
                    format!($($what)+),
                    $crate::errno_name(want),
                    $crate::errno_name(got),
                    e
                );
            }
        }
    }};
}

/// Unwrap an `io::Result`, naming the call on failure.
#[macro_export]
macro_rules! ok {
    ($res:expr) => {
        match $res {
            Ok(v) => v,
            Err(e) => panic!("{} failed: {} ({})", stringify!($res), $crate::errno_name(e.raw_os_error().unwrap_or(-1)), e),
        }
    };
    ($res:expr, $($what:tt)+) => {
        match $res {
            Ok(v) => v,
            Err(e) => panic!("{} failed: {} ({})", format!($($what)+), $crate::errno_name(e.raw_os_error().unwrap_or(-1)), e),
        }
    };
}

/// Whether this process runs as root (all tests need it to mount), and
/// `MEMOFS_E2E_WITHOUT` does not list `root`.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    !skip::simulated_missing(skip::Need::Root) && unsafe { libc::geteuid() == 0 }
}

/// Run `f` in a thread and give up waiting after `limit` (the thread is left behind): for calls
/// that might hang on a broken mount.
pub fn with_timeout<T: Send + 'static>(
    limit: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// Find an executable on `PATH` (none if `MEMOFS_E2E_WITHOUT` lists `tool:NAME`).
pub fn which(tool: &str) -> Option<std::path::PathBuf> {
    if std::env::var("MEMOFS_E2E_WITHOUT").is_ok_and(|l| skip::listed(&l, &format!("tool:{tool}")))
    {
        return None;
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Runs the tool `args[0]` with the other `args` and `path`, and returns what it printed;
/// panics with its error output if it fails.
pub fn tool(args: &[&str], path: &std::path::Path) -> String {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{args:?} {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A byte pattern that differs from position to position and from seed to seed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut v = vec![0u8; len];
    r.fill(&mut v);
    v
}

/// Index of the first difference between two byte strings, for readable failures.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or(if a.len() != b.len() {
            Some(a.len().min(b.len()))
        } else {
            None
        })
}

/// Assert two byte strings are equal, reporting lengths and the first differing offset.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = first_difference(got, want) {
        panic!(
            "{what}: content differs at offset {i} (got {} bytes, want {}): got {:?}.., want {:?}..",
            got.len(),
            want.len(),
            &got[i..got.len().min(i + 16)],
            &want[i..want.len().min(i + 16)]
        );
    }
}
