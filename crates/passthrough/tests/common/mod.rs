//! Shared helpers of the in-process passthrough tests: a temporary export directory, a
//! backend over it, and a recording invalidator.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memofs_core::{Attr, Backend, Caller, Ino, Invalidator, ROOT_INO};
use memofs_passthrough::{PassthroughConfig, PassthroughFs};
use parking_lot::Mutex;

/// A user that is not root.
pub const USER: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 1,
};

/// A fresh directory under /tmp, removed (with its contents) on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("memofs-pt-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An export of a fresh temporary directory containing `export/`, with the default
/// configuration; the export is world-writable so non-root callers can create in it.
pub fn setup(tag: &str) -> (TempDir, PathBuf, PassthroughFs) {
    setup_with(tag, PassthroughConfig::default())
}

pub fn setup_with(tag: &str, config: PassthroughConfig) -> (TempDir, PathBuf, PassthroughFs) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new(tag);
    let export = tmp.join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fs = PassthroughFs::new(&export, config).unwrap();
    (tmp, export, fs)
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid only reads the process's effective user id.
    unsafe { libc::geteuid() == 0 }
}

/// A tmpfs mounted for a test (root only), detached when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a fresh tmpfs on the existing directory `at`; `None` if that is not allowed.
    pub fn mount(at: &Path) -> Option<Tmpfs> {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0777", "memofs-test"])
            .arg(at)
            .status()
            .ok()?;
        status.success().then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Like [`setup_with`], with the export a tmpfs of its own (so the export is its
/// filesystem's root); `None` where a tmpfs cannot be mounted.
pub fn setup_tmpfs(
    tag: &str,
    config: PassthroughConfig,
) -> Option<(TempDir, PathBuf, Tmpfs, PassthroughFs)> {
    let tmp = TempDir::new(tag);
    let export = tmp.join("export");
    std::fs::create_dir(&export).unwrap();
    let mounted = Tmpfs::mount(&export)?;
    let fs = PassthroughFs::new(&export, config).unwrap();
    Some((tmp, export, mounted, fs))
}

pub fn n(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Looks up a `/`-separated relative path component by component, as the kernel would.
pub fn walk(fs: &PassthroughFs, path: &str) -> memofs_core::Result<Attr> {
    let mut attr = fs.getattr(ROOT_INO)?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        attr = fs.lookup(&Caller::ROOT, attr.ino, n(part))?;
    }
    Ok(attr)
}

/// Names listed by plain READDIR, without `.` and `..`, sorted.
pub fn names(fs: &PassthroughFs, dir: Ino) -> Vec<String> {
    let o = fs.opendir(&Caller::ROOT, dir, 0).unwrap();
    let mut out = Vec::new();
    fs.readdir(dir, o.fh, 0, false, &mut |e| {
        out.push(e.name.to_string_lossy().into_owned());
        true
    })
    .unwrap();
    fs.releasedir(dir, o.fh).unwrap();
    out.retain(|s| s != "." && s != "..");
    out.sort();
    out
}

/// Reads a whole file through a fresh read-only handle.
pub fn read_all(fs: &PassthroughFs, ino: Ino) -> Vec<u8> {
    let o = fs.open(&Caller::ROOT, ino, libc::O_RDONLY).unwrap();
    let mut buf = Vec::new();
    fs.read(ino, o.fh, 0, 1 << 20, &mut buf).unwrap();
    fs.release(ino, o.fh).unwrap();
    buf
}

/// Polls `cond` every few milliseconds until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a [`Recorder`] was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Entry(Ino, String),
    Deleted(Ino, Ino, String),
    Inode(Ino),
    Everything,
}

/// An invalidator that records every report.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<(Instant, Report)>>);

impl Recorder {
    pub fn has(&self, want: impl Fn(&Report) -> bool) -> bool {
        self.0.lock().iter().any(|(_, r)| want(r))
    }

    pub fn clear(&self) {
        self.0.lock().clear();
    }
}

impl Invalidator for Recorder {
    fn entry(&self, parent: Ino, name: &OsStr) {
        let r = Report::Entry(parent, name.to_string_lossy().into_owned());
        self.0.lock().push((Instant::now(), r));
    }
    fn deleted(&self, parent: Ino, child: Ino, name: &OsStr) {
        let r = Report::Deleted(parent, child, name.to_string_lossy().into_owned());
        self.0.lock().push((Instant::now(), r));
    }
    fn inode(&self, ino: Ino) {
        self.0.lock().push((Instant::now(), Report::Inode(ino)));
    }
    fn everything(&self) {
        self.0.lock().push((Instant::now(), Report::Everything));
    }
}
