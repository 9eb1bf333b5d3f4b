//! The request layer against a fake backend and a fake kernel: no root, no mount.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memofs_core::options::parse_options;
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_core::{
    Attr, Backend, BackendUsage, Caller, Capabilities, DirEntry, Entry, Errno, FileKind, Ino,
    Opened, Result, SetAttr, StatFs, Timestamp,
};
use memofs_request::{Granted, Handled, Kernel, Op, OpenOut, ReplyOut, Request, Server, Stats};

/// One call a fake saw, as text.
type Log = Arc<Mutex<Vec<String>>>;

fn attr(ino: Ino, perm: u16) -> Attr {
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
    }
}

/// A backend of a root directory and file 2 (`f`), recording what it is asked.
struct Fake {
    log: Log,
    perms: Mutex<HashMap<Ino, u16>>,
    xattrs: Mutex<Vec<(OsString, Vec<u8>)>>,
    lends_fd: bool,
    /// Declared as the only writer (a mem-like backend).
    sole_writer: bool,
    /// Reports every name change made behind the kernel's back (a watched export).
    names_reported: bool,
    dev_null: std::fs::File,
}

impl Fake {
    fn new(lends_fd: bool) -> Arc<Fake> {
        Arc::new(Fake {
            log: Log::default(),
            perms: Mutex::new(HashMap::from([(1, 0o755), (2, 0o6755)])),
            xattrs: Mutex::new(Vec::new()),
            lends_fd,
            sole_writer: true,
            names_reported: false,
            dev_null: std::fs::File::open("/dev/null").unwrap(),
        })
    }

    /// A backend others write to as well (a passthrough export), which reports their name
    /// changes or not.
    fn shared(names_reported: bool) -> Arc<Fake> {
        let mut fake = Arc::into_inner(Fake::new(false)).unwrap();
        fake.sole_writer = false;
        fake.names_reported = names_reported;
        Arc::new(fake)
    }

    fn note(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }

    fn attr_of(&self, ino: Ino) -> Result<Attr> {
        let perm = *self.perms.lock().unwrap().get(&ino).ok_or(Errno::ENOENT)?;
        Ok(attr(ino, perm))
    }

    fn calls(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Backend for Fake {
    fn lookup(&self, _c: &Caller, _parent: Ino, name: &OsStr) -> Result<Attr> {
        match name.as_bytes() {
            b"f" => self.attr_of(2),
            _ => Err(Errno::ENOENT),
        }
    }
    fn forget(&self, ino: Ino, n: u64) {
        self.note(format!("forget {ino} {n}"));
    }
    fn getattr(&self, ino: Ino) -> Result<Attr> {
        self.attr_of(ino)
    }
    fn setattr(&self, _c: &Caller, ino: Ino, set: &SetAttr) -> Result<Attr> {
        if let Some(mode) = set.mode {
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
    fn unlink(&self, _c: &Caller, _p: Ino, _n: &OsStr) -> Result<()> {
        Ok(())
    }
    fn rmdir(&self, _c: &Caller, _p: Ino, _n: &OsStr) -> Result<()> {
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
        Ok(Opened { fh: 40 + ino })
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
        Ok((self.attr_of(2)?, Opened { fh: 42 }))
    }
    fn read(&self, _ino: Ino, _fh: u64, _o: u64, size: u32, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.resize(size.min(3) as usize, b'x');
        Ok(())
    }
    fn write(&self, _ino: Ino, _fh: u64, _o: u64, data: &[u8]) -> Result<u32> {
        Ok(data.len() as u32)
    }
    fn release(&self, ino: Ino, _fh: u64) -> Result<()> {
        self.note(format!("release {ino}"));
        Ok(())
    }
    fn fsync(&self, ino: Ino, _fh: u64, datasync: bool) -> Result<()> {
        self.note(format!("fsync {ino} {datasync}"));
        Ok(())
    }
    fn opendir(&self, _c: &Caller, _ino: Ino, _f: i32) -> Result<Opened> {
        Ok(Opened { fh: 7 })
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
        Err(Errno::ENODATA)
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
    fn get_flags(&self, _ino: Ino) -> Result<u32> {
        Ok(0x10)
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            backing_fds: self.lends_fd,
            sole_writer: self.sole_writer,
            posix_acl: true,
        }
    }
    fn name_changes_reported(&self) -> bool {
        self.names_reported
    }
}

/// A kernel connection that records notifications and hands out backing ids.
#[derive(Default)]
struct FakeKernel {
    log: Log,
}

impl Kernel for FakeKernel {
    fn open_backing(&self, _fd: BorrowedFd<'_>) -> io::Result<u32> {
        self.log.lock().unwrap().push("open_backing".into());
        Ok(5)
    }
    fn close_backing(&self, id: u32) -> io::Result<()> {
        self.log.lock().unwrap().push(format!("close_backing {id}"));
        Ok(())
    }
    fn inval_entry(&self, _p: Ino, _n: &OsStr) -> io::Result<()> {
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
enum Reply {
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
struct Recorder {
    replies: Vec<Reply>,
    dir: Vec<(OsString, Option<Entry>)>,
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
    fn statx(&mut self, a: &Attr, ttl: Duration) {
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
        self.dir.push((e.name.clone(), plus.copied()));
        true
    }
    fn dir_done(&mut self) {
        let dir = std::mem::take(&mut self.dir);
        self.replies.push(Reply::Dir(dir));
    }
}

const USER: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 9,
};

struct Setup {
    server: Server<Fake>,
    fake: Arc<Fake>,
    kernel: Log,
}

fn setup(opts: &[&str], lends_fd: bool, granted: Granted) -> Setup {
    setup_with(opts, Fake::new(lends_fd), granted)
}

fn setup_with(opts: &[&str], fake: Arc<Fake>, granted: Granted) -> Setup {
    let o = parse_options(opts, 8 << 30).unwrap();
    let mut plan = MountPlan::new(&o, BackendKind::Mem, true);
    plan.adopt(fake.capabilities());
    let mut server = Server::new(fake.clone(), plan, Arc::new(Stats::new()));
    let kernel = Arc::new(FakeKernel::default());
    let log = kernel.log.clone();
    server.start(granted, kernel).unwrap();
    Setup {
        server,
        fake,
        kernel: log,
    }
}

impl Setup {
    fn ask(&self, nodeid: Ino, caller: Caller, op: Op<'_>) -> Reply {
        let mut rec = Recorder::default();
        let req = Request {
            unique: 1,
            nodeid,
            caller,
            op,
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
    fn kernel_log_eventually(&self, want: &str) -> bool {
        (0..200).any(|_| {
            if self.kernel.lock().unwrap().iter().any(|s| s == want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
            false
        })
    }
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn a_miss_is_a_negative_entry_unless_negative_caching_is_off() {
    let s = setup(&[], false, Granted::default());
    match s.ask(1, USER, Op::Lookup { name: name("nope") }) {
        Reply::Entry(e) => {
            assert_eq!(e.attr, None);
            assert_eq!(e.entry_timeout, Duration::from_secs(3600));
        }
        r => panic!("{r:?}"),
    }
    let snap = s.server.stats().snapshot();
    assert!(snap.events.contains(&("negative_entries", 1)));
    assert_eq!((snap.ops[0].name, snap.ops[0].count), ("LOOKUP", 1));
    let s = setup(&["negative_timeout=0"], false, Granted::default());
    assert_eq!(
        s.ask(1, USER, Op::Lookup { name: name("nope") }),
        Reply::Error(Errno::ENOENT)
    );
    match s.ask(1, USER, Op::Lookup { name: name("f") }) {
        Reply::Entry(e) => assert_eq!(e.attr.map(|a| a.ino), Some(2)),
        r => panic!("{r:?}"),
    }
}

#[test]
fn the_umask_reaches_the_backend_only_when_the_kernel_left_it() {
    for (dont_mask, want) in [(false, "umask 0"), (true, "umask 22")] {
        let granted = Granted {
            dont_mask,
            ..Granted::default()
        };
        let s = setup(&[], false, granted);
        s.ask(
            1,
            USER,
            Op::Mkdir {
                name: name("d"),
                mode: 0o777,
                umask: 0o22,
            },
        );
        assert_eq!(s.fake.calls(), [format!("mkdir 777 {want}")]);
    }
}

#[test]
fn writeback_opens_write_only_files_read_write_and_append_reaches_the_backend() {
    let granted = Granted {
        writeback: true,
        ..Granted::default()
    };
    let s = setup(&[], false, granted);
    let flags = libc::O_WRONLY | libc::O_APPEND;
    match s.ask(
        2,
        USER,
        Op::Open {
            flags,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => assert!(o.noflush && o.backing_id.is_none() && !o.direct_io),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        s.fake.calls(),
        [format!("open 2 {:o}", libc::O_RDWR | libc::O_APPEND)]
    );
}

#[test]
fn a_flagged_write_clears_setuid_and_tells_the_kernel() {
    let s = setup(&[], false, Granted::default());
    let op = Op::Write {
        fh: 42,
        offset: 0,
        data: b"abc",
        kill_suidgid: true,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Written(3));
    let calls = s.fake.calls();
    assert_eq!(calls[0], "chmod 2 755");
    assert_eq!(calls[1], "removexattr 2 security.capability");
    assert!(s.kernel_log_eventually("inval_inode 2"));
    // An unflagged write by root leaves the bits alone.
    s.fake.perms.lock().unwrap().insert(2, 0o4755);
    let op = Op::Write {
        fh: 42,
        offset: 0,
        data: b"abc",
        kill_suidgid: false,
    };
    s.ask(2, Caller::ROOT, op);
    assert_eq!(s.fake.calls().len(), 2);
    // fallocate by an unprivileged caller carries no flag but must clear them too.
    let op = Op::Fallocate {
        fh: 42,
        offset: 0,
        length: 10,
        mode: 0,
    };
    assert_eq!(s.ask(2, USER, op), Reply::Empty);
    assert_eq!(s.fake.calls()[2], "chmod 2 755");
}

#[test]
fn trusted_xattrs_are_listed_to_privileged_callers_only() {
    let s = setup(&[], false, Granted::default());
    for n in ["user.a", "trusted.secret", "security.b"] {
        let op = Op::Setxattr {
            name: name(n),
            value: b"v",
            flags: 0,
            acl_kill_sgid: false,
        };
        assert_eq!(s.ask(2, Caller::ROOT, op), Reply::Empty);
    }
    assert_eq!(
        s.ask(2, USER, Op::Listxattr { size: 100 }),
        Reply::Data(b"user.a\0security.b\0".to_vec())
    );
    assert_eq!(s.ask(2, USER, Op::Listxattr { size: 0 }), Reply::Size(18));
    assert_eq!(
        s.ask(2, Caller::ROOT, Op::Listxattr { size: 0 }),
        Reply::Size(33)
    );
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Getxattr {
                name: name("user.a"),
                size: 0
            }
        ),
        Reply::Size(1)
    );
    let op = Op::Setxattr {
        name: name("user.long"),
        value: b"0123456789",
        flags: 0,
        acl_kill_sgid: false,
    };
    s.ask(2, USER, op);
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Getxattr {
                name: name("user.long"),
                size: 4
            }
        ),
        Reply::Error(Errno::ERANGE)
    );
}

#[test]
fn one_backing_id_per_inode_across_opens() {
    let granted = Granted {
        passthrough: true,
        ..Granted::default()
    };
    let s = setup(&[], true, granted);
    for _ in 0..2 {
        match s.ask(
            2,
            Caller::ROOT,
            Op::Open {
                flags: libc::O_RDONLY,
                kill_suidgid: false,
            },
        ) {
            Reply::Opened(o) => assert_eq!(o.backing_id, Some(5)),
            r => panic!("{r:?}"),
        }
    }
    assert_eq!(*s.kernel.lock().unwrap(), ["open_backing"]);
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(s.kernel.lock().unwrap().len(), 1);
    s.ask(2, Caller::ROOT, Op::Release { fh: 42 });
    assert_eq!(
        *s.kernel.lock().unwrap(),
        ["open_backing", "close_backing 5"]
    );
    // Without passthrough granted, the same backend's opens go through the server.
    let s = setup(&["direct_io"], true, Granted::default());
    match s.ask(
        2,
        Caller::ROOT,
        Op::Open {
            flags: libc::O_RDONLY,
            kill_suidgid: false,
        },
    ) {
        Reply::Opened(o) => assert!(o.backing_id.is_none() && o.direct_io),
        r => panic!("{r:?}"),
    }
}

#[test]
fn fsync_runs_off_the_request_thread_and_forgets_get_no_reply() {
    let s = setup(&[], false, Granted::default());
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Fsync {
                fh: 42,
                datasync: true
            }
        ),
        Reply::Empty
    );
    s.ask(2, USER, Op::Forget { nlookup: 3 });
    s.ask(
        0,
        USER,
        Op::BatchForget {
            forgets: &[[2, 1], [3, 4]],
        },
    );
    assert_eq!(
        s.fake.calls(),
        ["fsync 2 true", "forget 2 3", "forget 2 1", "forget 3 4"]
    );
}

#[test]
fn readdirplus_entries_carry_the_policy_timeouts() {
    let s = setup(&["attr_timeout=5"], false, Granted::default());
    match s.ask(
        1,
        USER,
        Op::Readdir {
            fh: 7,
            offset: 0,
            size: 4096,
            plus: true,
        },
    ) {
        Reply::Dir(d) => {
            let e = d[0].1.unwrap();
            assert_eq!(
                (e.entry_timeout, e.attr_timeout),
                (Duration::from_secs(3600), Duration::from_secs(5))
            );
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn inode_flags_through_the_fileattr_ioctls() {
    let s = setup(&[], false, Granted::default());
    let getflags = 0x8008_6601;
    match s.ask(
        2,
        USER,
        Op::Ioctl {
            fh: 1,
            cmd: getflags,
            input: &[],
            out_size: 4,
        },
    ) {
        Reply::Data(d) => assert_eq!(d, 0x10u32.to_ne_bytes()),
        r => panic!("{r:?}"),
    }
    let fsgetxattr = 0x801c_581f;
    match s.ask(
        2,
        USER,
        Op::Ioctl {
            fh: 1,
            cmd: fsgetxattr,
            input: &[],
            out_size: 28,
        },
    ) {
        Reply::Data(d) => assert_eq!(&d[..4], &0x8u32.to_ne_bytes()),
        r => panic!("{r:?}"),
    }
    assert_eq!(
        s.ask(
            2,
            USER,
            Op::Ioctl {
                fh: 1,
                cmd: 0x5401,
                input: &[],
                out_size: 0
            }
        ),
        Reply::Error(Errno::ENOTTY)
    );
}

#[test]
fn listings_stay_in_the_kernel_only_where_every_change_is_seen() {
    let opendir = || Op::Opendir { flags: 0 };
    let kept = |r: Reply| match r {
        Reply::Opened(o) => {
            assert_eq!(o.keep_cache, o.cache_dir, "{o:?}");
            o.cache_dir
        }
        Reply::Error(Errno::ENOSYS) => true,
        r => panic!("OPENDIR answered {r:?}"),
    };
    // The only writer: OPENDIR is declined once and the kernel keeps every listing.
    let s = setup(&["noatime"], false, Granted::default());
    assert_eq!(s.ask(1, USER, opendir()), Reply::Error(Errno::ENOSYS));
    // Others write too, and their name changes are reported: kept per open.
    let s = setup_with(&["noatime"], Fake::shared(true), Granted::default());
    assert!(kept(s.ask(1, USER, opendir())));
    // ... unless a listing could move the directory's atime now (relatime, atime not after
    // mtime), or every listing must (strictatime).
    let s = setup_with(&["relatime"], Fake::shared(true), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
    let s = setup_with(&["strictatime"], Fake::shared(true), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
    // Changes nobody reports: never kept.
    let s = setup_with(&["noatime"], Fake::shared(false), Granted::default());
    assert!(!kept(s.ask(1, USER, opendir())));
}

#[test]
fn unsupported_opcodes_are_enosys() {
    let s = setup(&[], false, Granted::default());
    assert_eq!(
        s.ask(1, USER, Op::Unsupported { opcode: 31 }),
        Reply::Error(Errno::ENOSYS)
    );
}

#[test]
fn a_chown_clears_privileges_of_non_directories_only() {
    let s = setup(&[], false, Granted::default());
    let chown = SetAttr {
        uid: Some(5),
        ..SetAttr::default()
    };
    s.ask(
        2,
        USER,
        Op::Setattr {
            set: chown,
            kill_suidgid: false,
        },
    );
    assert_eq!(
        s.fake.calls(),
        ["chmod 2 755", "removexattr 2 security.capability"]
    );
    s.fake.perms.lock().unwrap().insert(1, 0o6777);
    s.ask(
        1,
        USER,
        Op::Setattr {
            set: chown,
            kill_suidgid: false,
        },
    );
    assert_eq!(s.fake.calls().len(), 2, "a directory keeps its set-id bits");
    // chown(f, -1, -1) sets nothing and still counts as a chown.
    s.fake.perms.lock().unwrap().insert(2, 0o4755);
    let nothing = SetAttr {
        fh: Some(42),
        ..SetAttr::default()
    };
    match s.ask(
        2,
        USER,
        Op::Setattr {
            set: nothing,
            kill_suidgid: false,
        },
    ) {
        Reply::Attr(a, _) => assert_eq!(a.perm, 0o755),
        r => panic!("{r:?}"),
    }
}
