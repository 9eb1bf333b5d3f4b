//! Helpers shared by the reliability tests (`stress`, `exerciser`, `faults`, `hostile`):
//! polling for asynchronous effects, `memofs stats` usage and counters, server memory and
//! RAM, a passthrough export of a fresh tmpfs, whole-tree consistency checks, and `*at()`
//! calls for deep trees.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sys;
use crate::{memofs, Mount};

/// Whether `MEMOFS_LONG=1` asks for the long versions of the reliability tests.
pub fn long_run() -> bool {
    std::env::var("MEMOFS_LONG").is_ok_and(|v| v == "1")
}

/// `short` normally, `long` with `MEMOFS_LONG=1`.
pub fn scaled(short: u64, long: u64) -> u64 {
    if long_run() {
        long
    } else {
        short
    }
}

/// Poll `cond` every 20 ms until it holds; panic with `what` and the last state after `limit`.
/// For effects that are asynchronous by design (FUSE RELEASE/FORGET, host watchers).
#[track_caller]
pub fn eventually<S: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> (bool, S),
) {
    let deadline = Instant::now() + limit;
    loop {
        let (done, state) = cond();
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {limit:?}; last state: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `usage` section of `memofs stats --json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Bytes charged against `size=` (data, xattrs, symlink targets).
    pub bytes_used: u64,
    /// `size=` in bytes (0 = unlimited).
    pub bytes_limit: u64,
    /// Inodes in use (the root counts).
    pub inodes_used: u64,
    /// `nr_inodes=` (0 = unlimited).
    pub inodes_limit: u64,
    /// Host descriptors the server holds (a passthrough export).
    pub descriptors_used: u64,
    /// Its descriptor budget (0: it holds none).
    pub descriptors_limit: u64,
    /// Descriptors closed when cold and opened again.
    pub descriptors_reopened: u64,
}

/// The number at the start of `s`.
fn leading_u64(s: &str) -> Option<u64> {
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

fn json_u64(doc: &str, key: &str) -> Option<u64> {
    let at = doc.find(&format!("\"{key}\":"))? + key.len() + 3;
    leading_u64(&doc[at..])
}

/// The counter `name` of `memofs stats` (an opcode like `LOOKUP`, whose value is an object
/// with a `count`, or an event like `negative_entries`); 0 when absent.
pub fn counter(m: &Mount, name: &str) -> u64 {
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    let Some(at) = doc.find(&format!("\"{name}\":")) else {
        return 0;
    };
    let rest = &doc[at + name.len() + 3..];
    leading_u64(rest.strip_prefix("{\"count\":").unwrap_or(rest)).unwrap_or(0)
}

/// Why file data on `m` is not kernel-backed (no data file lent to the kernel through FUSE
/// passthrough), if it is not: this run's options turn passthrough off, or the kernel did
/// not grant it.
pub fn not_kernel_backed(m: &Mount) -> Option<crate::skip::Need> {
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    if doc.contains(r#""file_data":"kernel tmpfs""#) {
        None
    } else if crate::skip::passthrough_off_by_options() {
        Some(crate::skip::Need::Config("passthrough_off"))
    } else {
        Some(crate::skip::Need::FusePassthrough)
    }
}

/// Whether `m` is memofs with the kernel's writeback cache granted.
pub fn writeback(m: &Mount) -> bool {
    m.is_memofs()
        && stats_json(m.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .contains(r#""writeback":"true""#)
}

/// `counter` once it stops moving: the server counts a request just after replying to it,
/// so the count of the last request may land a moment after the syscall returned.
pub fn settled(m: &Mount, name: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = counter(m, name);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = counter(m, name);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Waits until the kernel has released every file it opened on `m` (RELEASEs as many as
/// OPENs, CREATEs and TMPFILEs), for at most 20 s; panics if it never does. A descriptor
/// outlives its `close(2)` while a child another thread just forked still shares it (until
/// that child's exec); a test whose next open depends on earlier opens being gone waits here.
/// An OPEN the server refused is counted but never released: call it before any open that
/// is meant to fail.
pub fn opens_released(m: &Mount) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let opened = ["OPEN", "CREATE", "TMPFILE"]
            .iter()
            .map(|op| counter(m, op))
            .sum::<u64>();
        let released = counter(m, "RELEASE");
        if released >= opened {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{opened} opens, {released} releases after 20 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `memofs stats --json MOUNTPOINT`, raw.
pub fn stats_json(mnt: &Path) -> Result<String, String> {
    let out = memofs(&["stats", "--json", mnt.to_str().expect("utf-8 mount point")]);
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(out.describe("memofs stats --json"))
    }
}

/// Usage counters of a live memofs mount.
pub fn stats_usage(mnt: &Path) -> Result<Usage, String> {
    let doc = stats_json(mnt)?;
    let get = |k: &str| json_u64(&doc, k).ok_or_else(|| format!("no {k} in {doc}"));
    Ok(Usage {
        bytes_used: get("bytes_used")?,
        bytes_limit: get("bytes_limit")?,
        inodes_used: get("inodes_used")?,
        inodes_limit: get("inodes_limit")?,
        descriptors_used: get("descriptors_used")?,
        descriptors_limit: get("descriptors_limit")?,
        descriptors_reopened: get("descriptors_reopened")?,
    })
}

/// The `key:  N kB` field of a `/proc` file, in bytes.
fn proc_kb_field(path: &str, key: &str) -> u64 {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{key} in {path}"))
        * 1024
}

/// Resident set size of a process, in bytes (`VmRSS` of `/proc/PID/status`).
pub fn rss_bytes(pid: u32) -> u64 {
    proc_kb_field(&format!("/proc/{pid}/status"), "VmRSS")
}

/// The machine's RAM, in bytes (`MemTotal` of `/proc/meminfo`).
pub fn mem_total_bytes() -> u64 {
    proc_kb_field("/proc/meminfo", "MemTotal")
}

/// Whether a process still exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The passthrough backend exporting `sub` (created) of a fresh host tmpfs:
/// `(host tmpfs, memofs mount)`. Drop the memofs mount first (declare it last).
pub fn export_tmpfs(sub: &str, host_opts: &[&str], opts: &[&str]) -> (Mount, Mount) {
    let host = Mount::tmpfs(host_opts);
    let src = host.join(sub);
    fs::create_dir_all(&src).expect("make the exported directory");
    sys::chmod(&src, 0o1777).expect("chmod the exported directory");
    let m = Mount::try_memofs_source(&src, opts).unwrap_or_else(|e| panic!("{e}"));
    (host, m)
}

/// A memofs mount of either backend, for tests that run on both (fields drop in order: the
/// memofs mount before the tmpfs its passthrough export lives on).
pub struct BackendMount {
    /// `mem` or `passthrough`.
    pub name: &'static str,
    /// The memofs mount.
    pub m: Mount,
    /// The host tmpfs a passthrough mount exports.
    pub host: Option<Mount>,
}

/// The two memofs backends, each on an `allow_other` mount: the mem backend with
/// `mem_opts`, and the passthrough backend exporting `export` on a fresh 64 MiB tmpfs.
pub fn both_backends(mem_opts: &[&str]) -> Vec<BackendMount> {
    let mut opts = vec!["allow_other"];
    opts.extend_from_slice(mem_opts);
    let (host, exported) = export_tmpfs("export", &["size=64m"], &["allow_other"]);
    vec![
        BackendMount {
            name: "mem",
            m: Mount::memofs(&opts),
            host: None,
        },
        BackendMount {
            name: "passthrough",
            m: exported,
            host: Some(host),
        },
    ]
}

/// `rm -rf PATH` with the system tool (which handles any depth), asserting success.
#[track_caller]
pub fn rm_rf(p: &Path) {
    let out = crate::run(
        "rm",
        &["-rf", "--", p.to_str().expect("utf-8 path")],
        None,
        Duration::from_secs(120),
    );
    assert!(out.success(), "{}", out.describe("rm -rf"));
    assert!(
        fs::symlink_metadata(p).is_err(),
        "{} still exists after rm -rf",
        p.display()
    );
}

/// What [`check_tree`] found.
#[derive(Debug, Default)]
pub struct TreeSummary {
    /// Regular files (distinct inodes).
    pub files: usize,
    /// Directories, the root included.
    pub dirs: usize,
    /// Names of regular files (hard links counted).
    pub file_names: usize,
    /// Bytes read from regular files (each inode once).
    pub bytes: u64,
}

/// Checks one regular file's content (path, bytes read); `Err` explains what is wrong.
pub type ContentCheck<'a> = dyn FnMut(&Path, &[u8]) -> Result<(), String> + 'a;

/// Walk `root` (without following symlinks) and check the invariants of a quiet tree: every
/// regular file reads back exactly `st_size` bytes (and `verify` accepts its content), every
/// regular file's `st_nlink` equals the names found for its inode, and every directory's
/// `st_nlink` is 2 plus its subdirectories. Returns the problems found, one line each.
pub fn check_tree(root: &Path, verify: &mut ContentCheck) -> Result<TreeSummary, Vec<String>> {
    let mut problems = Vec::new();
    let mut names: BTreeMap<u64, (u64, Vec<PathBuf>)> = BTreeMap::new();
    let mut sum = TreeSummary::default();
    // Walk with *at() calls on directory descriptors: one LOOKUP per entry whatever the depth
    // (with cache=never a path walk would look up every component again).
    let mut stack = vec![(root.to_path_buf(), Dir::open(root))];
    while let Some((dir_path, dir)) = stack.pop() {
        sum.dirs += 1;
        let mut complain = |what: String| problems.push(format!("{}{what}", dir_path.display()));
        let dir = match dir {
            Ok(d) => d,
            Err(e) => {
                complain(format!(": open: {e}"));
                continue;
            }
        };
        let entries = match dir.entries() {
            Ok(e) => e,
            Err(e) => {
                complain(format!(": readdir: {e}"));
                continue;
            }
        };
        let mut subdirs = 0;
        for name in entries {
            let shown = String::from_utf8_lossy(&name).into_owned();
            let st = match dir.stat(&name) {
                Ok(st) => st,
                Err(e) => {
                    complain(format!("/{shown}: listed but lstat fails: {e}"));
                    continue;
                }
            };
            let p = dir_path.join(&shown);
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    subdirs += 1;
                    stack.push((p, dir.sub(&name)));
                }
                libc::S_IFREG => {
                    sum.file_names += 1;
                    let slot = names
                        .entry(st.st_ino)
                        .or_insert((st.st_nlink as u64, Vec::new()));
                    slot.1.push(p.clone());
                    if slot.1.len() > 1 {
                        continue;
                    }
                    let data = dir.openat(&name, libc::O_RDONLY, 0).and_then(|f| {
                        let mut v = Vec::new();
                        io::Read::read_to_end(&mut &f, &mut v).map(|_| v)
                    });
                    match data {
                        Ok(data) => {
                            sum.files += 1;
                            sum.bytes += data.len() as u64;
                            if data.len() as i64 != st.st_size {
                                complain(format!(
                                    "/{shown}: st_size {} but {} bytes read",
                                    st.st_size,
                                    data.len()
                                ));
                            }
                            if let Err(why) = verify(&p, &data) {
                                complain(format!("/{shown}: {why}"));
                            }
                        }
                        Err(e) => complain(format!("/{shown}: unreadable: {e}")),
                    }
                }
                libc::S_IFLNK | libc::S_IFIFO | libc::S_IFSOCK => {}
                other => complain(format!("/{shown}: unexpected type {other:o}")),
            }
        }
        match dir.stat(b".") {
            Ok(st) if st.st_nlink != 2 + subdirs => complain(format!(
                ": directory st_nlink {} but {subdirs} subdirectories (want {})",
                st.st_nlink,
                2 + subdirs
            )),
            Ok(_) => {}
            Err(e) => complain(format!(": lstat: {e}")),
        }
    }
    for (ino, (nlink, paths)) in &names {
        if *nlink != paths.len() as u64 {
            problems.push(format!(
                "inode {ino}: st_nlink {nlink} but {} names found: {paths:?}",
                paths.len()
            ));
        }
    }
    if problems.is_empty() {
        Ok(sum)
    } else {
        Err(problems)
    }
}

/// An open directory or file for `*at()` calls.
pub struct Dir(pub File);

fn at_result(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cname(name: &[u8]) -> std::ffi::CString {
    std::ffi::CString::new(name).expect("name with NUL")
}

impl Dir {
    /// Open a directory by path.
    pub fn open(p: &Path) -> io::Result<Dir> {
        sys::open_dir(p).map(Dir)
    }

    /// `openat(self, name, flags, mode)`.
    pub fn openat(&self, name: &[u8], flags: i32, mode: u32) -> io::Result<File> {
        let n = cname(name);
        // SAFETY: `n` is a valid C string and the descriptor is open for the call.
        let fd = at_result(unsafe {
            libc::openat(
                self.0.as_raw_fd(),
                n.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: `fd` was just returned by openat and nothing else owns it.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// The directory `name` below this one.
    pub fn sub(&self, name: &[u8]) -> io::Result<Dir> {
        self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map(Dir)
    }

    /// `mkdirat(self, name, mode)`.
    pub fn mkdir(&self, name: &[u8], mode: u32) -> io::Result<()> {
        let n = cname(name);
        // SAFETY: as in `openat`.
        at_result(unsafe { libc::mkdirat(self.0.as_raw_fd(), n.as_ptr(), mode as libc::mode_t) })
            .map(drop)
    }

    /// `mknodat(self, name, mode, 0)` (regular files, FIFOs, sockets).
    pub fn mknod(&self, name: &[u8], mode: u32) -> io::Result<()> {
        let n = cname(name);
        // SAFETY: as in `openat`.
        at_result(unsafe { libc::mknodat(self.0.as_raw_fd(), n.as_ptr(), mode as libc::mode_t, 0) })
            .map(drop)
    }

    /// `fstatat(self, name, AT_SYMLINK_NOFOLLOW)`.
    pub fn stat(&self, name: &[u8]) -> io::Result<libc::stat> {
        let n = cname(name);
        // SAFETY: zeroed `stat` is a valid buffer the call fills; `n` is a valid C string.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            at_result(libc::fstatat(
                self.0.as_raw_fd(),
                n.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ))?;
            Ok(st)
        }
    }

    /// Names in the directory (without `.` and `..`), read with `getdents64`.
    pub fn entries(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        loop {
            let batch = sys::getdents(&self.0, 32 << 10)?;
            if batch.is_empty() {
                return Ok(out);
            }
            out.extend(
                batch
                    .into_iter()
                    .map(|e| e.name)
                    .filter(|n| n != b"." && n != b".."),
            );
        }
    }

    /// `unlinkat(self, name, flags)` (`libc::AT_REMOVEDIR` for directories).
    pub fn unlink(&self, name: &[u8], flags: i32) -> io::Result<()> {
        let n = cname(name);
        // SAFETY: as in `openat`.
        at_result(unsafe { libc::unlinkat(self.0.as_raw_fd(), n.as_ptr(), flags) }).map(drop)
    }
}
