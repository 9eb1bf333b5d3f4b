//! The fake world the request layer is tested in: a backend and a kernel that record what
//! they are asked, and a reply recorder.

// Each test binary uses a part of this world.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memofs_core::options::parse_options;
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_core::{
    Attr, Backend, BackendUsage, Caller, Capabilities, DirEntry, Entry, Errno, FileKind, Ino,
    Opened, Result, SetAttr, StatFs, Timestamp,
};
use memofs_request::kernel::BackingWrites;
use memofs_request::{Granted, Handled, Kernel, Op, OpenOut, ReplyOut, Request, Server, Stats};

/// One call a fake saw, as text.
pub type Log = Arc<Mutex<Vec<String>>>;

pub fn attr(ino: Ino, perm: u16) -> Attr {
    Attr {
        ino,
        generation: 1,
        size: 0,
        blocks: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        ctime: Timestamp::default(),
        crtime: Timestamp::default(),
        kind: if ino == 1 {
            FileKind::Directory
        } else {
            FileKind::Regular
        },
        perm,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        mount_root: false,
    }
}

/// A backend of a root directory and file 2 (`f`), recording what it is asked.
pub struct Fake {
    pub log: Log,
    pub perms: Mutex<HashMap<Ino, u16>>,
    pub xattrs: Mutex<Vec<(OsString, Vec<u8>)>>,
    pub lends_fd: bool,
    /// Declared as the only writer (a mem-like backend).
    pub sole_writer: bool,
    /// Reports every name change made behind the kernel's back (a watched export).
    pub names_reported: bool,
    /// Reports every data change made behind the kernel's back (a change feed).
    pub data_reported: AtomicBool,
    /// What the next change of a mode fails with, if anything.
    pub refuse_chmod: Mutex<Option<Errno>>,
    /// What the next WRITE fails with.
    pub refuse_write: Mutex<Option<Errno>>,
    /// What `keeps_backing` answers.
    pub keeps_backing: AtomicBool,
    /// Opens ask for FLUSH at close, which fails with this if set.
    pub flushes: Mutex<Option<Result<()>>>,
    /// FSYNC takes this long.
    pub fsync_takes: Mutex<Duration>,
    /// Opens say the file is append-only.
    pub append_only: AtomicBool,
    /// The inodes whose attributes the request layer said it gave the kernel.
    pub sent: Mutex<Vec<Ino>>,
    /// File sizes (0 where not set).
    pub sizes: Mutex<HashMap<Ino, u64>>,
    /// Names whose miss the source may not have caught up with (not to be kept).
    pub lagging: Mutex<Vec<OsString>>,
    pub dev_null: std::fs::File,
}

impl Fake {
    pub fn new(lends_fd: bool) -> Arc<Fake> {
        Arc::new(Fake {
            log: Log::default(),
            perms: Mutex::new(HashMap::from([(1, 0o755), (2, 0o6755)])),
            xattrs: Mutex::new(Vec::new()),
            lends_fd,
            sole_writer: true,
            names_reported: false,
            data_reported: AtomicBool::new(false),
            refuse_chmod: Mutex::new(None),
            refuse_write: Mutex::new(None),
            keeps_backing: AtomicBool::new(false),
            flushes: Mutex::new(None),
            fsync_takes: Mutex::new(Duration::ZERO),
            append_only: AtomicBool::new(false),
            sent: Mutex::new(Vec::new()),
            sizes: Mutex::new(HashMap::new()),
            lagging: Mutex::new(Vec::new()),
            dev_null: std::fs::File::open("/dev/null").unwrap(),
        })
    }

    /// A backend others write to as well (a passthrough export), which reports their name
    /// changes or not.
    pub fn shared(names_reported: bool) -> Arc<Fake> {
        let mut fake = Arc::into_inner(Fake::new(false)).unwrap();
        fake.sole_writer = false;
        fake.names_reported = names_reported;
        Arc::new(fake)
    }

    pub fn note(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }

    pub fn attr_of(&self, ino: Ino) -> Result<Attr> {
        let perm = *self.perms.lock().unwrap().get(&ino).ok_or(Errno::ENOENT)?;
        let size = self.sizes.lock().unwrap().get(&ino).copied().unwrap_or(0);
        Ok(Attr {
            size,
            ..attr(ino, perm)
        })
    }

    pub fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Backend for Fake {
    fn miss_may_be_kept(&self, _parent: Ino, name: &OsStr) -> bool {
        !self.lagging.lock().unwrap().iter().any(|n| n == name)
    }

    fn lookup(&self, _c: &Caller, _parent: Ino, name: &OsStr) -> Result<Attr> {
        match name.as_bytes() {
            b"f" => self.attr_of(2),
            _ => Err(Errno::ENOENT),
        }
    }
    fn forget(&self, ino: Ino, n: u64) {
        self.note(format!("forget {ino} {n}"));
    }
    fn forget_all(&self) {
        self.note("forget all".to_string());
    }
    fn release_all(&self) {
        self.note("release all".to_string());
    }
    fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.attr_of(ino)
    }
    fn setattr(&self, _c: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr> {
        if let Some(mode) = set.mode {
            if let Some(e) = self.refuse_chmod.lock().unwrap().take() {
                return Err(e);
            }
            self.note(format!("chmod {ino} {mode:o}"));
            self.perms.lock().unwrap().insert(ino, mode as u16);
        }
        self.attr_of(ino)
    }
    fn readlink(&self, _ino: Ino) -> Result<Vec<u8>> {
        Err(Errno::EINVAL)
    }
    fn mknod(
        &self,
        _c: &Caller,
        _p: Ino,
        _n: &OsStr,
        mode: u32,
        umask: u32,
        _r: u32,
    ) -> Result<Attr> {
        self.note(format!("mknod {mode:o} umask {umask:o}"));
        self.attr_of(2)
    }
    fn mkdir(&self, _c: &Caller, _p: Ino, _n: &OsStr, mode: u32, umask: u32) -> Result<Attr> {
        self.note(format!("mkdir {mode:o} umask {umask:o}"));
        self.attr_of(1)
    }
    fn unlink(&self, _c: &Caller, p: Ino, n: &OsStr) -> Result<()> {
        self.note(format!("unlink {p} {}", n.to_string_lossy()));
        Ok(())
    }
    fn rmdir(&self, _c: &Caller, p: Ino, n: &OsStr) -> Result<()> {
        self.note(format!("rmdir {p} {}", n.to_string_lossy()));
        Ok(())
    }
    fn symlink(&self, _c: &Caller, _p: Ino, _n: &OsStr, _t: &OsStr) -> Result<Attr> {
        Err(Errno::EPERM)
    }
    fn rename(
        &self,
        _c: &Caller,
        _p: Ino,
        _n: &OsStr,
        _np: Ino,
        _nn: &OsStr,
        _f: u32,
    ) -> Result<()> {
        Ok(())
    }
    fn link(&self, _c: &Caller, ino: Ino, _np: Ino, _nn: &OsStr) -> Result<Attr> {
        self.attr_of(ino)
    }
    fn open(&self, _c: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        self.note(format!("open {ino} {flags:o}"));
        Ok(Opened {
            fh: 40 + ino,
            flush: self.flushes.lock().unwrap().is_some(),
            append_only: self.append_only.load(Ordering::Relaxed),
        })
    }
    fn flush(&self, ino: Ino, _fh: u64) -> Result<()> {
        self.note(format!("flush {ino}"));
        (*self.flushes.lock().unwrap()).unwrap_or(Ok(()))
    }
    fn create(
        &self,
        _c: &Caller,
        _p: Ino,
        _n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        self.note(format!("create {mode:o} umask {umask:o} flags {flags:o}"));
        let opened = Opened {
            fh: 42,
            ..Opened::default()
        };
        Ok((self.attr_of(2)?, opened))
    }
    fn read(&self, _ino: Ino, _fh: u64, _o: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.resize(size.min(3) as usize, b'x');
        Ok(())
    }
    fn write(&self, _ino: Ino, _fh: u64, _o: u64, data: &[u8]) -> Result<u32> {
        if let Some(e) = self.refuse_write.lock().unwrap().take() {
            return Err(e);
        }
        Ok(data.len() as u32)
    }
    fn release(&self, ino: Ino, _fh: u64) -> Result<()> {
        self.note(format!("release {ino}"));
        Ok(())
    }
    fn fsync(&self, ino: Ino, _fh: u64, datasync: bool) -> Result<()> {
        self.note(format!("fsync {ino} {datasync}"));
        std::thread::sleep(*self.fsync_takes.lock().unwrap());
        Ok(())
    }
    fn opendir(&self, _c: &Caller, _ino: Ino, _f: i32) -> Result<Opened> {
        Ok(Opened {
            fh: 7,
            ..Opened::default()
        })
    }
    fn readdir(
        &self,
        _ino: Ino,
        _fh: u64,
        offset: u64,
        plus: bool,
        sink: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        if offset == 0 {
            let e = DirEntry {
                ino: 2,
                offset: 1,
                kind: FileKind::Regular,
                name: "f".into(),
                attr: plus.then(|| attr(2, 0o644)),
            };
            sink(&e);
        }
        Ok(())
    }
    fn releasedir(&self, _ino: Ino, _fh: u64) -> Result<()> {
        Ok(())
    }
    fn statfs(&self) -> Result<StatFs> {
        Err(Errno::ENOSYS)
    }
    fn setxattr(&self, _c: &Caller, _ino: Ino, name: &OsStr, value: &[u8], _f: i32) -> Result<()> {
        self.xattrs
            .lock()
            .unwrap()
            .push((name.into(), value.to_vec()));
        Ok(())
    }
    fn getxattr(&self, _ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        let x = self.xattrs.lock().unwrap();
        x.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or(Errno::ENODATA)
    }
    fn listxattr(&self, _ino: Ino) -> Result<Vec<u8>> {
        let x = self.xattrs.lock().unwrap();
        Ok(x.iter()
            .flat_map(|(n, _)| n.as_bytes().iter().copied().chain([0]))
            .collect())
    }
    fn removexattr(&self, _c: &Caller, ino: Ino, name: &OsStr) -> Result<()> {
        self.note(format!("removexattr {ino} {}", name.to_string_lossy()));
        let mut x = self.xattrs.lock().unwrap();
        let before = x.len();
        x.retain(|(n, _)| n != name);
        if x.len() == before {
            return Err(Errno::ENODATA);
        }
        Ok(())
    }
    fn fallocate(&self, _ino: Ino, _fh: u64, _o: u64, _l: u64, _m: i32) -> Result<()> {
        Ok(())
    }
    fn lseek(&self, _ino: Ino, _fh: u64, offset: u64, _w: i32) -> Result<u64> {
        Ok(offset)
    }
    fn copy_file_range(
        &self,
        _i: Ino,
        _fi: u64,
        _oi: u64,
        _io: Ino,
        _fo: u64,
        _oo: u64,
        len: u64,
    ) -> Result<u64> {
        Ok(len)
    }
    fn usage(&self) -> BackendUsage {
        BackendUsage::default()
    }
    fn with_backing_fd(&self, _ino: Ino, _fh: u64, use_fd: &mut dyn FnMut(BorrowedFd<'_>)) -> bool {
        if self.lends_fd {
            use_fd(self.dev_null.as_fd());
        }
        self.lends_fd
    }
    fn keeps_backing(&self, _ino: Ino) -> bool {
        self.keeps_backing.load(Ordering::Relaxed)
    }
    fn get_flags(&self, _ino: Ino) -> Result<u32> {
        Ok(0x10)
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backing_fds: self.lends_fd,
            sole_writer: self.sole_writer,
            posix_acl: true,
            unseen_writers: false,
            atime_elsewhere: false,
        }
    }
    fn name_changes_reported(&self) -> bool {
        self.names_reported
    }
    fn data_changes_reported(&self) -> bool {
        self.data_reported.load(Ordering::Relaxed)
    }
    fn attr_sent(&self, attr: &Attr) {
        self.sent.lock().unwrap().push(attr.ino);
    }
}

/// A kernel connection that records notifications and hands out backing ids (5, 6, ...).
#[derive(Default)]
pub struct FakeKernel {
    pub log: Log,
    registered: AtomicU32,
    /// What the next registrations fail with (errno values, first first).
    pub refusals: Arc<Mutex<Vec<i32>>>,
    /// The privilege the last registration asked for.
    pub writes: Arc<Mutex<Option<BackingWrites>>>,
}

impl Kernel for FakeKernel {
    fn open_backing(&self, _fd: BorrowedFd<'_>, writes: BackingWrites) -> io::Result<u32> {
        self.log.lock().unwrap().push("open_backing".into());
        *self.writes.lock().unwrap() = Some(writes);
        let mut refusals = self.refusals.lock().unwrap();
        if !refusals.is_empty() {
            return Err(io::Error::from_raw_os_error(refusals.remove(0)));
        }
        Ok(5 + self.registered.fetch_add(1, Ordering::Relaxed))
    }
    fn close_backing(&self, id: u32) -> io::Result<()> {
        self.log.lock().unwrap().push(format!("close_backing {id}"));
        Ok(())
    }
    fn inval_entry(&self, _p: Ino, _n: &OsStr, _e: bool) -> io::Result<()> {
        Ok(())
    }
    fn delete(&self, _p: Ino, _c: Ino, _n: &OsStr) -> io::Result<()> {
        Ok(())
    }
    fn inval_inode(&self, ino: Ino, _o: i64, _l: i64) -> io::Result<()> {
        self.log.lock().unwrap().push(format!("inval_inode {ino}"));
        Ok(())
    }
    fn inc_epoch(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Every reply, recorded.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Error(Errno),
    Empty,
    Entry(Entry),
    Attr(Attr, Duration),
    Opened(OpenOut),
    Created(Entry, OpenOut),
    Data(Vec<u8>),
    Written(u32),
    Size(u32),
    Other,
    Dir(Vec<(OsString, Option<Entry>)>),
}

#[derive(Default)]
pub struct Recorder {
    pub replies: Vec<Reply>,
    pub dir: Vec<(OsString, Option<Entry>)>,
    /// Directory entries it has room for (`None`: all).
    pub room: Option<usize>,
}

impl ReplyOut for Recorder {
    fn error(&mut self, e: Errno) {
        self.replies.push(Reply::Error(e));
    }
    fn empty(&mut self) {
        self.replies.push(Reply::Empty);
    }
    fn entry(&mut self, e: &Entry) {
        self.replies.push(Reply::Entry(*e));
    }
    fn attr(&mut self, a: &Attr, ttl: Duration) {
        self.replies.push(Reply::Attr(*a, ttl));
    }
    fn statx(&mut self, a: &Attr, _iflags: Option<u32>, ttl: Duration) {
        self.replies.push(Reply::Attr(*a, ttl));
    }
    fn opened(&mut self, o: &OpenOut) {
        self.replies.push(Reply::Opened(*o));
    }
    fn created(&mut self, e: &Entry, o: &OpenOut) {
        self.replies.push(Reply::Created(*e, *o));
    }
    fn data(&mut self, d: &[u8]) {
        self.replies.push(Reply::Data(d.to_vec()));
    }
    fn written(&mut self, n: u32) {
        self.replies.push(Reply::Written(n));
    }
    fn xattr_size(&mut self, n: u32) {
        self.replies.push(Reply::Size(n));
    }
    fn statfs(&mut self, _s: &StatFs) {
        self.replies.push(Reply::Other);
    }
    fn offset(&mut self, _o: u64) {
        self.replies.push(Reply::Other);
    }
    fn ioctl(&mut self, _r: i32, out: &[u8]) {
        self.replies.push(Reply::Data(out.to_vec()));
    }
    fn dirent(&mut self, e: &DirEntry, plus: Option<&Entry>) -> bool {
        if self.room.is_some_and(|room| self.dir.len() >= room) {
            return false;
        }
        self.dir.push((e.name.clone(), plus.copied()));
        true
    }
    fn dir_done(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        self.replies.push(Reply::Dir(dir));
    }
}

pub const USER: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 9,
};

pub struct Setup {
    pub server: Server<Fake>,
    pub fake: Arc<Fake>,
    pub kernel: Log,
    /// What the kernel's next backing registrations fail with.
    pub refusals: Arc<Mutex<Vec<i32>>>,
    /// The privilege the kernel's last backing registration was asked for.
    pub writes: Arc<Mutex<Option<BackingWrites>>>,
}

pub fn setup(opts: &[&str], lends_fd: bool, granted: Granted) -> Setup {
    setup_with(opts, Fake::new(lends_fd), granted)
}

pub fn setup_with(opts: &[&str], fake: Arc<Fake>, granted: Granted) -> Setup {
    setup_planned(opts, fake, granted, |_| {})
}

/// [`setup_with`], with the plan changed by `edit` (for what no mount option says).
pub fn setup_planned(
    opts: &[&str],
    fake: Arc<Fake>,
    granted: Granted,
    edit: impl FnOnce(&mut MountPlan),
) -> Setup {
    let o = parse_options(opts, 8 << 30).unwrap();
    let mut plan = MountPlan::new(&o, BackendKind::Mem, true);
    plan.adopt(fake.capabilities());
    edit(&mut plan);
    let mut server = Server::new(fake.clone(), plan, Arc::new(Stats::new()));
    let kernel = Arc::new(FakeKernel::default());
    let log = kernel.log.clone();
    let refusals = kernel.refusals.clone();
    let writes = kernel.writes.clone();
    server.start(granted, kernel).unwrap();
    Setup {
        server,
        fake,
        kernel: log,
        refusals,
        writes,
    }
}

impl Setup {
    pub fn ask(&self, nodeid: Ino, caller: Caller, op: Op<'_>) -> Reply {
        self.ask_labelled(nodeid, caller, op, None)
    }

    /// [`Setup::ask`] for a request that carries the security label of the node it makes.
    pub fn ask_labelled(
        &self,
        nodeid: Ino,
        caller: Caller,
        op: Op<'_>,
        label: Option<memofs_request::Label<'_>>,
    ) -> Reply {
        let mut rec = Recorder::default();
        let req = Request {
            unique: 1,
            nodeid,
            caller,
            op,
            label,
        };
        let wants = req.op.wants_reply();
        match self.server.handle(&req, &mut rec) {
            Handled::Done => {}
            Handled::Blocking(job) => rec.replies.push(match job() {
                Ok(()) => Reply::Empty,
                Err(e) => Reply::Error(e),
            }),
        }
        assert_eq!(
            rec.replies.len(),
            wants as usize,
            "exactly one reply when one is due"
        );
        rec.replies.pop().unwrap_or(Reply::Other)
    }

    /// The kernel log, once the notification thread has had time to send what was queued.
    pub fn kernel_log_eventually(&self, want: &str) -> bool {
        (0..200).any(|_| {
            if self.kernel.lock().unwrap().iter().any(|s| s == want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
            false
        })
    }
}

pub fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}
