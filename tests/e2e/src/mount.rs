//! Mounting memofs or a kernel tmpfs on a fresh directory, and always unmounting it again.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{memofs_bin, run_with_timeout};
use crate::sys;

/// `f_type` of every FUSE mount.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
/// `f_type` of tmpfs.
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// How long a mount may take to appear.
const MOUNT_DEADLINE: Duration = Duration::from_secs(10);
/// How long an unmounted server may take to exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(10);

/// A directory made with `mkdtemp`, removed (with its contents) on drop unless something is
/// still mounted inside it.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh directory under `$MEMOFS_E2E_TMPDIR` (default `/tmp`).
    pub fn new(prefix: &str) -> TempDir {
        let base = std::env::var_os("MEMOFS_E2E_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/tmp".into());
        let template = sys::cpath(base.join(format!("{prefix}XXXXXX")));
        let mut raw = template.into_bytes_with_nul();
        // SAFETY: `raw` is a writable, NUL-terminated template that mkdtemp fills in place.
        let p = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
        assert!(
            !p.is_null(),
            "mkdtemp in {}: {}",
            base.display(),
            io::Error::last_os_error()
        );
        raw.pop();
        let path = PathBuf::from(String::from_utf8(raw).expect("utf-8 temp path"));
        // mkdtemp makes it 0700; other users (see `user::as_user`) must reach mounts inside.
        let _ = sys::chmod(&path, 0o755);
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let busy = mounts()
            .iter()
            .any(|m| m.mount_point.starts_with(&self.path));
        if busy {
            eprintln!(
                "memofs-e2e: leaving {} in place: something is still mounted in it",
                self.path.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug)]
pub struct MountInfo {
    /// `major:minor` of the mounted file system.
    pub dev: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,...`).
    pub mount_options: String,
    /// File system type (`fuse.memofs`, `tmpfs`, ...).
    pub fstype: String,
    /// Mount source (`memofs`, `tmpfs`, ...).
    pub source: String,
    /// Per-superblock options.
    pub super_options: String,
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount of this process's namespace.
pub fn mounts() -> Vec<MountInfo> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(MountInfo {
                dev: l.get(2)?.to_string(),
                mount_point: PathBuf::from(unescape(l.get(4)?)),
                mount_options: l.get(5)?.to_string(),
                fstype: r.first()?.to_string(),
                source: unescape(r.get(1)?),
                super_options: r.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// The topmost mount at exactly `p`, if any (reads mountinfo only: never blocks on a hung FUSE
/// server).
pub fn mountinfo_for(p: &Path) -> Option<MountInfo> {
    mounts().into_iter().rev().find(|m| m.mount_point == p)
}

/// Whether something is mounted at exactly `p`.
pub fn is_mounted(p: &Path) -> bool {
    mountinfo_for(p).is_some()
}

/// Make sure nothing is mounted at `p` any more: `memofs umount`, then `umount -l`. For tests
/// that mount through the command line themselves.
pub fn ensure_unmounted(p: &Path) {
    for _ in 0..4 {
        if !is_mounted(p) {
            return;
        }
        let mut cmd = Command::new(memofs_bin());
        cmd.arg("umount").arg(p);
        if !run_with_timeout(cmd, Duration::from_secs(20)).success() {
            let mut cmd = Command::new("umount");
            cmd.arg("-l").arg(p);
            run_with_timeout(cmd, Duration::from_secs(20));
        }
    }
}

/// Unmounts (see [`ensure_unmounted`]) whatever is mounted at a path when dropped.
pub struct UnmountGuard(pub PathBuf);

impl Drop for UnmountGuard {
    fn drop(&mut self) {
        ensure_unmounted(&self.0);
    }
}

/// Whether `m` looks like a memofs mount in mountinfo.
pub fn is_memofs_info(m: &MountInfo) -> bool {
    m.fstype == "fuse.memofs" || (m.fstype.starts_with("fuse") && m.source == "memofs")
}

fn child_of(k: &mut Kind) -> Option<&mut Child> {
    match k {
        Kind::Memofs { child, .. } => child.as_mut(),
        Kind::Tmpfs => None,
    }
}

enum Kind {
    Memofs { child: Option<Child>, log: PathBuf },
    Tmpfs,
}

/// A mounted file system on a fresh directory; dropping it unmounts it, also while a test
/// panics.
pub struct Mount {
    kind: Kind,
    mnt: PathBuf,
    opts: Vec<String>,
    // Last: removed after the unmount in `drop`.
    base: TempDir,
}

/// Whether `MEMOFS_E2E_REFERENCE=tmpfs` asks to run semantic tests against kernel tmpfs.
pub fn reference_is_tmpfs() -> bool {
    std::env::var("MEMOFS_E2E_REFERENCE")
        .map(|v| v == "tmpfs")
        .unwrap_or(false)
}

/// The subset of memofs options kernel tmpfs understands with the same meaning.
fn tmpfs_equivalent(opts: &[&str]) -> Vec<String> {
    const SAME: &[&str] = &[
        "size",
        "nr_inodes",
        "mode",
        "uid",
        "gid",
        "strictatime",
        "relatime",
        "noatime",
        "nodiratime",
        "ro",
        "rw",
        "nosuid",
        "suid",
        "nodev",
        "dev",
        "noexec",
        "exec",
        "sync",
        "async",
        "dirsync",
    ];
    opts.iter()
        .filter(|o| SAME.contains(&o.split('=').next().unwrap_or("")))
        .map(|o| o.to_string())
        .collect()
}

impl Mount {
    /// The mem backend of memofs with these `-o` options (or, with
    /// `MEMOFS_E2E_REFERENCE=tmpfs`, a kernel tmpfs with the equivalent ones). Panics with the
    /// server's output if it does not mount.
    pub fn mem(opts: &[&str]) -> Mount {
        if reference_is_tmpfs() {
            return Mount::tmpfs(
                &tmpfs_equivalent(opts)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
        }
        Mount::memofs(opts)
    }

    /// memofs (never substituted), panicking if it does not mount.
    pub fn memofs(opts: &[&str]) -> Mount {
        Mount::try_memofs(opts).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start `memofs mount -f -o OPTS DIR` on a fresh directory and poll until the mount is live.
    pub fn try_memofs(opts: &[&str]) -> Result<Mount, String> {
        let base = TempDir::new("memofs-e2e-");
        let mnt = base.path().join("mnt");
        fs::create_dir(&mnt).map_err(|e| format!("mkdir {}: {e}", mnt.display()))?;
        Mount::start_memofs(base, mnt, None, opts, None)
    }

    /// Like [`Mount::try_memofs`] on a given, existing mount point (which is left in place).
    pub fn try_memofs_on(mnt: &Path, opts: &[&str]) -> Result<Mount, String> {
        Mount::start_memofs(
            TempDir::new("memofs-e2e-log-"),
            mnt.to_path_buf(),
            None,
            opts,
            None,
        )
    }

    /// The passthrough backend: `memofs mount -f -o OPTS SOURCE DIR` on a fresh directory.
    pub fn try_memofs_source(source: &Path, opts: &[&str]) -> Result<Mount, String> {
        let base = TempDir::new("memofs-e2e-");
        let mnt = base.path().join("mnt");
        fs::create_dir(&mnt).map_err(|e| format!("mkdir {}: {e}", mnt.display()))?;
        Mount::start_memofs(base, mnt, Some(source), opts, None)
    }

    /// The passthrough backend, its server started with `RLIMIT_NOFILE` at `nofile` (soft
    /// and hard), so that its descriptor budget is `nofile` minus the reserved descriptors.
    pub fn try_memofs_source_nofile(
        source: &Path,
        opts: &[&str],
        nofile: u64,
    ) -> Result<Mount, String> {
        let base = TempDir::new("memofs-e2e-");
        let mnt = base.path().join("mnt");
        fs::create_dir(&mnt).map_err(|e| format!("mkdir {}: {e}", mnt.display()))?;
        Mount::start_memofs(base, mnt, Some(source), opts, Some(nofile))
    }

    fn start_memofs(
        base: TempDir,
        mnt: PathBuf,
        source: Option<&Path>,
        opts: &[&str],
        nofile: Option<u64>,
    ) -> Result<Mount, String> {
        let bin = memofs_bin();
        let log = base.path().join("server.log");
        let logf = fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&bin);
        cmd.arg("mount").arg("-f");
        // MEMOFS_E2E_OPTS: options every memofs mount starts with (the test's own come
        // after and win), e.g. `passthrough=off` to run the suite on the server page store.
        let mut all: Vec<String> = std::env::var("MEMOFS_E2E_OPTS")
            .map(|v| {
                v.split(',')
                    .filter(|o| !o.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        all.extend(opts.iter().map(|o| o.to_string()));
        if !all.is_empty() {
            cmd.arg("-o").arg(all.join(","));
        }
        if let Some(src) = source {
            cmd.arg(src);
        }
        cmd.arg(&mnt)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        if let Some(n) = nofile {
            let limit = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: the closure runs in the forked child before exec and only calls
            // setrlimit, which is async-signal-safe, on a value it owns.
            unsafe {
                cmd.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut m = Mount {
            kind: Kind::Memofs {
                child: Some(child),
                log,
            },
            mnt,
            opts: opts.iter().map(|s| s.to_string()).collect(),
            base,
        };
        m.wait_live()?;
        Ok(m)
    }

    /// A kernel tmpfs with these options (`mount -t tmpfs -o OPTS tmpfs DIR`).
    pub fn tmpfs(opts: &[&str]) -> Mount {
        let base = TempDir::new("memofs-e2e-tmpfs-");
        let mnt = base.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mount point");
        let mut cmd = Command::new("mount");
        cmd.arg("-t").arg("tmpfs");
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts.join(","));
        }
        cmd.arg("memofs-e2e").arg(&mnt);
        let out = run_with_timeout(cmd, Duration::from_secs(30));
        assert!(
            out.success(),
            "mount -t tmpfs -o {} failed: {}",
            opts.join(","),
            out.stderr
        );
        Mount {
            kind: Kind::Tmpfs,
            mnt,
            opts: opts.iter().map(|s| s.to_string()).collect(),
            base,
        }
    }

    fn wait_live(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(info) = mountinfo_for(&self.mnt) {
                if let Ok(s) = sys::statfs(&self.mnt) {
                    if s.f_type == FUSE_SUPER_MAGIC {
                        let _ = info;
                        return Ok(());
                    }
                }
            }
            if let Kind::Memofs {
                child: Some(child), ..
            } = &mut self.kind
            {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "memofs mount -f -o {} {} exited with {status} before the mount appeared; output:\n{}",
                        self.opts.join(","),
                        self.mnt.display(),
                        self.log()
                    ));
                }
            }
            if start.elapsed() > MOUNT_DEADLINE {
                return Err(format!(
                    "memofs did not mount {} within {:?}; output:\n{}",
                    self.mnt.display(),
                    MOUNT_DEADLINE,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// A path inside the mount.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.join(rel)
    }

    /// A scratch directory outside the mount, removed with it.
    pub fn scratch(&self) -> &Path {
        self.base.path()
    }

    /// Whether this is memofs (rather than the tmpfs reference).
    pub fn is_memofs(&self) -> bool {
        matches!(self.kind, Kind::Memofs { .. })
    }

    /// The options it was mounted with.
    pub fn options(&self) -> &[String] {
        &self.opts
    }

    /// Pid of the memofs server started in the foreground.
    pub fn server_pid(&self) -> Option<u32> {
        match &self.kind {
            Kind::Memofs { child: Some(c), .. } => Some(c.id()),
            _ => None,
        }
    }

    /// Send a signal to the server.
    pub fn signal_server(&self, sig: i32) {
        let pid = self.server_pid().expect("no memofs server");
        // SAFETY: kill takes only integers.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }

    /// Wait for the server to exit (up to `limit`).
    pub fn wait_server(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let Kind::Memofs {
            child: Some(child), ..
        } = &mut self.kind
        else {
            return None;
        };
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        match &self.kind {
            Kind::Memofs { log, .. } => fs::read_to_string(log).unwrap_or_default(),
            Kind::Tmpfs => String::new(),
        }
    }

    /// Whether the mount point is still mounted (mountinfo only).
    pub fn is_mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }

    fn lazy_unmount(&self) {
        if let Some(info) = mountinfo_for(&self.mnt) {
            if info.fstype.starts_with("fuse") {
                // Abort the connection first so nothing can hang on a stuck server.
                if let Some((maj, min)) = info.dev.split_once(':') {
                    if maj == "0" {
                        let _ = fs::write(format!("/sys/fs/fuse/connections/{min}/abort"), "1");
                    }
                }
            }
            let mut cmd = Command::new("umount");
            cmd.arg("-l").arg(&self.mnt);
            let out = run_with_timeout(cmd, Duration::from_secs(20));
            if !out.success() {
                eprintln!(
                    "memofs-e2e: umount -l {} failed: {}",
                    self.mnt.display(),
                    out.stderr
                );
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let mnt = self.mnt.clone();
        match &mut self.kind {
            Kind::Tmpfs => {
                if is_mounted(&mnt) {
                    let mut cmd = Command::new("umount");
                    cmd.arg(&mnt);
                    let out = run_with_timeout(cmd, Duration::from_secs(20));
                    if !out.success() {
                        eprintln!(
                            "memofs-e2e: umount {} failed ({}); detaching",
                            mnt.display(),
                            out.stderr.trim()
                        );
                    }
                }
            }
            Kind::Memofs { .. } => {
                if is_mounted(&mnt) {
                    let mut cmd = Command::new(memofs_bin());
                    cmd.arg("umount").arg(&mnt);
                    let out = run_with_timeout(cmd, Duration::from_secs(20));
                    if !out.success() {
                        eprintln!(
                            "memofs-e2e: memofs umount {} failed ({:?}): {}",
                            mnt.display(),
                            out.status,
                            out.stderr.trim()
                        );
                    }
                }
                if is_mounted(&mnt) {
                    // `memofs umount` failed: abort the connection and detach, so the server's
                    // request loop ends.
                    self.lazy_unmount();
                }
                if let Some(c) = child_of(&mut self.kind) {
                    let start = Instant::now();
                    let status = loop {
                        match c.try_wait() {
                            Ok(Some(st)) => break Some(st),
                            Ok(None) if start.elapsed() < EXIT_DEADLINE => {
                                std::thread::sleep(Duration::from_millis(10))
                            }
                            _ => break None,
                        }
                    };
                    match status {
                        Some(st) if st.success() => {}
                        Some(st) => {
                            eprintln!("memofs-e2e: server for {} exited with {st}", mnt.display())
                        }
                        None => {
                            eprintln!(
                                "memofs-e2e: server for {} still running after unmount; killing it",
                                mnt.display()
                            );
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                    }
                }
                if std::thread::panicking() {
                    let log = self.log();
                    if !log.trim().is_empty() {
                        let tail: Vec<&str> = log.lines().rev().take(40).collect();
                        eprintln!("---- memofs server output (last lines) ----");
                        for l in tail.iter().rev() {
                            eprintln!("{l}");
                        }
                        eprintln!("----");
                    }
                }
            }
        }
        if is_mounted(&mnt) {
            self.lazy_unmount();
        }
    }
}
