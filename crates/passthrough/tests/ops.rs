//! Every `Backend` operation of the passthrough backend on a temporary host directory,
//! checked against the host with std::fs.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{n, names, read_all, setup, setup_with, walk, USER};
use memofs_core::atime::AtimeMode;
use memofs_core::{
    rename_flags, AtimePolicy, Backend, Caller, Errno, FileKind, SetAttr, TimeSet, Timestamp,
    ROOT_INO,
};
use memofs_passthrough::{PassthroughConfig, PassthroughFs, SetupError};

const ROOT: Caller = Caller::ROOT;

#[test]
fn setup_errors_are_clear() {
    let tmp = common::TempDir::new("setup");
    let missing = tmp.join("missing");
    match PassthroughFs::new(&missing, PassthroughConfig::default()) {
        Err(e @ SetupError::SourceMissing(_)) => assert!(e.to_string().contains("does not exist")),
        r => panic!("{:?}", r.err()),
    }
    std::fs::write(tmp.join("file"), b"x").unwrap();
    match PassthroughFs::new(&tmp.join("file"), PassthroughConfig::default()) {
        Err(e @ SetupError::NotADirectory(_)) => assert!(e.to_string().contains("not a directory")),
        r => panic!("{:?}", r.err()),
    }
    let fs = PassthroughFs::new(tmp.path(), PassthroughConfig::default()).unwrap();
    assert!(fs.config().max_open_fds > 0);
}

#[test]
fn lookup_getattr_match_host_and_count_references() {
    let (_t, export, fs) = setup("lookup");
    std::fs::write(export.join("f"), b"hello").unwrap();
    let root = fs.getattr(ROOT_INO).unwrap();
    assert_eq!((root.ino, root.kind), (ROOT_INO, FileKind::Directory));
    let a = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    let host = std::fs::metadata(export.join("f")).unwrap();
    assert_eq!(a.ino, host.ino(), "inode numbers pass through");
    assert_eq!((a.size, a.kind, a.nlink), (5, FileKind::Regular, 1));
    assert_eq!(
        a.mtime,
        Timestamp::from_timespec(host.mtime(), host.mtime_nsec() as u32)
    );
    assert_eq!(fs.lookups(a.ino), 1);
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap().ino, a.ino);
    assert_eq!(fs.lookups(a.ino), 2);
    fs.forget(a.ino, 1);
    assert_eq!(fs.getattr(a.ino).unwrap().size, 5);
    fs.forget(a.ino, 1);
    assert_eq!(fs.lookups(a.ino), 0);
    assert_eq!(fs.getattr(a.ino), Err(Errno::ESTALE));
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("nope")), Err(Errno::ENOENT));
    // The root is never forgotten.
    fs.forget(ROOT_INO, 100);
    assert!(fs.getattr(ROOT_INO).is_ok());
}

#[test]
fn forgotten_inodes_close_their_descriptors() {
    let (_t, export, fs) = setup("fds");
    for i in 0..50 {
        std::fs::write(export.join(format!("f{i}")), b"").unwrap();
    }
    let base = fs.open_fds();
    let inos: Vec<_> = (0..50)
        .map(|i| fs.lookup(&ROOT, ROOT_INO, n(&format!("f{i}"))).unwrap().ino)
        .collect();
    assert_eq!(fs.open_fds(), base + 50);
    for ino in inos {
        fs.forget(ino, 1);
    }
    // They close on the reaper thread, soon.
    let start = std::time::Instant::now();
    while fs.open_fds() != base {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{} descriptors still open",
            fs.open_fds() - base
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A budget of `n` descriptors.
fn budget(n: usize) -> PassthroughConfig {
    PassthroughConfig {
        max_open_fds: n,
        ..PassthroughConfig::default()
    }
}

/// Takes `CAP_DAC_READ_SEARCH` out of this thread's effective capabilities (other threads
/// keep theirs): file handles can no longer be opened, as for a server that is not root.
fn drop_read_search_on_this_thread() {
    const CAP_DAC_READ_SEARCH: u32 = 2;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset read and write one header and two data structs of the v3 layout.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
            0
        );
        data[0].effective &= !(1 << CAP_DAC_READ_SEARCH);
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
            0
        );
    }
}

#[test]
fn without_handles_a_spent_budget_refuses_with_enfile() {
    // A thread of its own, which loses what a server that is not root lacks.
    std::thread::spawn(budget_refuses_without_handles)
        .join()
        .unwrap();
}

fn budget_refuses_without_handles() {
    drop_read_search_on_this_thread();
    let (_t, export, fs) = setup_with("budget", budget(3));
    assert!(!fs.closes_inode_fds());
    for i in 0..3 {
        std::fs::write(export.join(format!("f{i}")), b"").unwrap();
    }
    let a = fs.lookup(&ROOT, ROOT_INO, n("f0")).unwrap();
    let b = fs.lookup(&ROOT, ROOT_INO, n("f1")).unwrap();
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("f2")), Err(Errno::ENFILE));
    // Known inodes need no new descriptor.
    assert!(fs.lookup(&ROOT, ROOT_INO, n("f1")).is_ok());
    assert_eq!(fs.open(&ROOT, a.ino, libc::O_RDONLY), Err(Errno::ENFILE));
    fs.forget(b.ino, 2);
    assert!(fs.open(&ROOT, a.ino, libc::O_RDONLY).is_ok());
}

#[test]
fn a_tree_many_times_the_budget_is_served_by_closing_cold_descriptors() {
    if !common::is_root() {
        memofs_e2e::skip!(Root, "opening file handles needs CAP_DAC_READ_SEARCH");
    }
    const BUDGET: usize = 12;
    let (_t, export, fs) = setup_with("evict", budget(BUDGET));
    if !fs.closes_inode_fds() {
        let why = "file handles cannot be opened here (CAP_DAC_READ_SEARCH, or the filesystem)";
        memofs_e2e::skip!(Kernel("open_by_handle_at"), "{why}");
    }
    for d in 0..10 {
        std::fs::create_dir(export.join(format!("d{d}"))).unwrap();
        for f in 0..20 {
            std::fs::write(export.join(format!("d{d}/f{f}")), format!("{d}/{f}")).unwrap();
        }
    }
    let mut files = Vec::new();
    for d in 0..10 {
        let dir = fs.lookup(&ROOT, ROOT_INO, n(&format!("d{d}"))).unwrap();
        for f in 0..20 {
            let a = fs.lookup(&ROOT, dir.ino, n(&format!("f{f}"))).unwrap();
            files.push((dir.ino, d, f, a.ino));
            assert!(fs.open_fds() <= BUDGET, "{} descriptors", fs.open_fds());
        }
    }
    // Every inode still answers, as the host's own file, through descriptors opened again.
    for &(_, d, f, ino) in &files {
        let host = std::fs::metadata(export.join(format!("d{d}/f{f}"))).unwrap();
        assert_eq!(fs.getattr(ino).unwrap().size, host.len());
        let value = format!("v{d}.{f}");
        fs.setxattr(&ROOT, ino, n("user.k"), value.as_bytes(), 0)
            .unwrap();
        assert!(fs.open_fds() <= BUDGET);
    }
    for &(_, d, f, ino) in &files {
        assert_eq!(
            fs.getxattr(ino, n("user.k")).unwrap(),
            format!("v{d}.{f}").as_bytes(),
            "each value went to its own file"
        );
        assert_eq!(read_all(&fs, ino), format!("{d}/{f}").as_bytes());
        assert_eq!(
            fs.lookups(ino),
            1,
            "closing a descriptor keeps the reference"
        );
    }
    let (closed, reopened) = fs.fds_closed_and_reopened();
    assert!(
        closed > 100 && reopened > 100,
        "{closed} closed, {reopened} reopened"
    );
    // Names change through evicted directories; a hard link keeps one inode.
    let (d0, d9) = (files[0].0, files[199].0);
    let linked = fs.link(&ROOT, files[0].3, d9, n("link")).unwrap();
    assert_eq!(linked.ino, files[0].3);
    fs.rename(&ROOT, d0, n("f1"), d9, n("moved"), 0).unwrap();
    assert!(export.join("d9/moved").exists() && !export.join("d0/f1").exists());
    fs.unlink(&ROOT, d9, n("link")).unwrap();
    for f in 2..20 {
        fs.unlink(&ROOT, d0, n(&format!("f{f}"))).unwrap();
    }
    fs.unlink(&ROOT, d0, n("f0")).unwrap();
    fs.rmdir(&ROOT, ROOT_INO, n("d0")).unwrap();
    assert!(!export.join("d0").exists());
    assert!(fs.open_fds() <= BUDGET);
}

#[test]
fn open_inodes_keep_their_descriptors_and_a_budget_of_them_refuses() {
    if !common::is_root() {
        memofs_e2e::skip!(Root, "opening file handles needs CAP_DAC_READ_SEARCH");
    }
    // The root, and f0 with an open handle: its descriptor and the handle's.
    let (_t, export, fs) = setup_with("pinned", budget(3));
    if !fs.closes_inode_fds() {
        let why = "file handles cannot be opened here (CAP_DAC_READ_SEARCH, or the filesystem)";
        memofs_e2e::skip!(Kernel("open_by_handle_at"), "{why}");
    }
    for i in 0..3 {
        std::fs::write(export.join(format!("f{i}")), b"").unwrap();
    }
    let a = fs.lookup(&ROOT, ROOT_INO, n("f0")).unwrap();
    let o = fs.open(&ROOT, a.ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("f1")), Err(Errno::ENFILE));
    fs.release(a.ino, o.fh).unwrap();
    // Closed now: f0's descriptor may go for f1's, and f1's for f2's.
    let b = fs.lookup(&ROOT, ROOT_INO, n("f1")).unwrap();
    let c = fs.lookup(&ROOT, ROOT_INO, n("f2")).unwrap();
    for ino in [a.ino, b.ino, c.ino] {
        assert!(fs.getattr(ino).is_ok());
    }
}

/// An ext4 image mounted at `at` (root only), detached when dropped: a filesystem that
/// gives a deleted file's inode number to the next new file.
struct Ext4(std::path::PathBuf);

impl Ext4 {
    /// `None` (with the reason) where mkfs.ext4 or a loop device is not available.
    fn mount(image: &std::path::Path, at: &std::path::Path) -> Result<Ext4, String> {
        let run = |cmd: &mut std::process::Command| match cmd.output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr))),
            Err(e) => Err(format!("{cmd:?}: {e}")),
        };
        std::fs::File::create(image)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        run(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(image))?;
        run(std::process::Command::new("mount")
            .args(["-o", "loop"])
            .arg(image)
            .arg(at))?;
        std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o777)).unwrap();
        Ok(Ext4(at.to_path_buf()))
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_host_inode_number_reused_while_its_descriptor_was_closed_is_a_new_inode() {
    if !common::is_root() {
        memofs_e2e::skip!(
            Root,
            "mounting an ext4 image and opening file handles need root"
        );
    }
    let tmp = common::TempDir::new("reuse");
    let export = tmp.join("export");
    std::fs::create_dir(&export).unwrap();
    let _ext4 = match Ext4::mount(&tmp.join("image"), &export) {
        Ok(m) => m,
        Err(why) => memofs_e2e::skip!(Tool("mkfs.ext4"), "{why}"),
    };
    let fs = PassthroughFs::new(&export, budget(4)).unwrap();
    if !fs.closes_inode_fds() {
        let why = "file handles cannot be opened here (CAP_DAC_READ_SEARCH)";
        memofs_e2e::skip!(Kernel("open_by_handle_at"), "{why}");
    }
    std::fs::write(export.join("old"), b"old").unwrap();
    let old = fs.lookup(&ROOT, ROOT_INO, n("old")).unwrap();
    // Enough other lookups to close old's descriptor.
    for i in 0..8 {
        std::fs::write(export.join(format!("other{i}")), b"").unwrap();
        fs.lookup(&ROOT, ROOT_INO, n(&format!("other{i}"))).unwrap();
    }
    let old_host = std::fs::metadata(export.join("old")).unwrap().ino();
    std::fs::remove_file(export.join("old")).unwrap();
    std::fs::write(export.join("new"), b"new file").unwrap();
    let new_host = std::fs::metadata(export.join("new")).unwrap().ino();
    assert_eq!(new_host, old_host, "ext4 gives the number to the next file");
    let new = fs.lookup(&ROOT, ROOT_INO, n("new")).unwrap();
    assert_ne!(new.ino, old.ino, "a new file is a new inode");
    assert_eq!(new.size, 8);
    assert_eq!(read_all(&fs, new.ino), b"new file");
    assert_eq!(
        fs.getattr(old.ino),
        Err(Errno::ESTALE),
        "the deleted file is gone"
    );
    assert_eq!(fs.lookups(new.ino), 1);
    fs.forget(old.ino, 1);
    // Forgetting the old entry leaves the new one found by its host identity.
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("new")).unwrap().ino, new.ino);
}

#[test]
fn forgetting_everything_empties_the_table_but_the_root() {
    let (_t, export, fs) = setup("forget-all");
    std::fs::write(export.join("f"), b"x").unwrap();
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    assert_eq!(fs.lookups(f.ino), 2);
    fs.forget_all();
    assert_eq!(fs.lookups(f.ino), 0);
    assert_eq!(fs.getattr(f.ino), Err(Errno::ESTALE));
    assert!(fs.getattr(ROOT_INO).is_ok(), "the root stays");
    assert_eq!(fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap().size, 1);
}

#[test]
fn hard_links_share_one_inode() {
    let (_t, export, fs) = setup("hardlink");
    std::fs::write(export.join("a"), b"x").unwrap();
    std::fs::hard_link(export.join("a"), export.join("b")).unwrap();
    let a = fs.lookup(&ROOT, ROOT_INO, n("a")).unwrap();
    let b = fs.lookup(&ROOT, ROOT_INO, n("b")).unwrap();
    assert_eq!(a.ino, b.ino);
    assert_eq!(fs.lookups(a.ino), 2);
    assert_eq!(b.nlink, 2);
}

#[test]
fn create_write_read_fsync_release() {
    let (_t, export, fs) = setup("io");
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, n("f"), 0o640, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!(
        (attr.kind, attr.perm, attr.size),
        (FileKind::Regular, 0o640, 0)
    );
    assert_eq!(fs.lookups(attr.ino), 1);
    assert_eq!(fs.write(attr.ino, o.fh, 3, b"abc").unwrap(), 3);
    let mut buf = Vec::new();
    fs.read(attr.ino, o.fh, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"\0\0\0abc");
    fs.read(attr.ino, o.fh, 4, 1, &mut buf).unwrap();
    assert_eq!(buf, b"b");
    fs.read(attr.ino, o.fh, 100, 10, &mut buf).unwrap();
    assert!(buf.is_empty());
    fs.fsync(attr.ino, o.fh, false).unwrap();
    fs.fsync(attr.ino, o.fh, true).unwrap();
    // What fsync acknowledged is in the host file.
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"\0\0\0abc");
    fs.release(attr.ino, o.fh).unwrap();
    assert_eq!(fs.read(attr.ino, o.fh, 0, 1, &mut buf), Err(Errno::EBADF));
    assert_eq!(fs.release(attr.ino, o.fh), Err(Errno::EBADF));
    assert_eq!(fs.open_handles(), 0);
}

#[test]
fn create_exclusive_and_racing_host_create() {
    let (_t, export, fs) = setup("excl");
    std::fs::write(export.join("f"), b"host").unwrap();
    // The kernel thought `f` was missing: without O_EXCL the existing file opens.
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, n("f"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    assert_eq!(attr.size, 4);
    fs.release(attr.ino, o.fh).unwrap();
    let excl = libc::O_RDWR | libc::O_EXCL;
    assert_eq!(
        fs.create(&ROOT, ROOT_INO, n("f"), 0o600, 0, excl)
            .map(|_| ()),
        Err(Errno::EEXIST)
    );
    std::fs::create_dir(export.join("d")).unwrap();
    assert_eq!(
        fs.create(&ROOT, ROOT_INO, n("d"), 0o600, 0, libc::O_RDWR)
            .map(|_| ()),
        Err(Errno::EISDIR)
    );
    assert_eq!(fs.lookups(attr.ino), 1);
}

#[test]
fn open_honours_trunc_and_kind_and_appends_land_where_the_kernel_says() {
    let (_t, export, fs) = setup("open");
    std::fs::write(export.join("f"), b"0123456789").unwrap();
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    let o = fs
        .open(&ROOT, f.ino, libc::O_WRONLY | libc::O_APPEND)
        .unwrap();
    // The kernel places appends and sends their offset; a write-back of a mapped page
    // through an O_APPEND handle must still land at its own offset.
    fs.write(f.ino, o.fh, 10, b"X").unwrap();
    fs.write(f.ino, o.fh, 0, b"Y").unwrap();
    fs.release(f.ino, o.fh).unwrap();
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"Y123456789X");
    let flags = libc::O_WRONLY | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CREAT;
    let o = fs.open(&ROOT, f.ino, flags).unwrap();
    fs.release(f.ino, o.fh).unwrap();
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"");
    assert_eq!(fs.open(&ROOT, ROOT_INO, libc::O_RDONLY), Err(Errno::EISDIR));
    assert_eq!(fs.opendir(&ROOT, f.ino, 0), Err(Errno::ENOTDIR));
}

#[test]
fn setattr_chmod_chown_truncate_utimens() {
    let (_t, export, fs) = setup("setattr");
    let (attr, o) = fs
        .create(&ROOT, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.write(attr.ino, o.fh, 0, b"hello world").unwrap();
    let set = SetAttr {
        mode: Some(0o4711),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&ROOT, attr.ino, &set).unwrap().perm, 0o4711);
    let set = SetAttr {
        uid: Some(1234),
        gid: Some(5678),
        ..SetAttr::default()
    };
    let a = fs.setattr(&ROOT, attr.ino, &set).unwrap();
    assert_eq!((a.uid, a.gid), (1234, 5678));
    // Truncate through the handle, then without one.
    let set = SetAttr {
        size: Some(5),
        fh: Some(o.fh),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&ROOT, attr.ino, &set).unwrap().size, 5);
    let set = SetAttr {
        size: Some(2),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&ROOT, attr.ino, &set).unwrap().size, 2);
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"he");
    let t = Timestamp::from_timespec(1_000_000, 123);
    let set = SetAttr {
        atime: Some(TimeSet::At(t)),
        mtime: Some(TimeSet::Now),
        ..SetAttr::default()
    };
    let before = Timestamp::now();
    let a = fs.setattr(&ROOT, attr.ino, &set).unwrap();
    assert_eq!(a.atime, t);
    assert!(a.mtime >= Timestamp(before.0 - 20_000_000));
    let host = std::fs::metadata(export.join("f")).unwrap();
    assert_eq!((host.atime(), host.atime_nsec()), (1_000_000, 123));
    // Only the atime: mtime untouched.
    let set = SetAttr {
        atime: Some(TimeSet::At(Timestamp::from_timespec(5, 0))),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&ROOT, attr.ino, &set).unwrap().mtime, a.mtime);
    let dir_trunc = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&ROOT, ROOT_INO, &dir_trunc), Err(Errno::EISDIR));
    fs.release(attr.ino, o.fh).unwrap();
}

#[test]
fn mkdir_mknod_symlink_readlink_unlink_rmdir() {
    let (_t, export, fs) = setup("nodes");
    let d = fs.mkdir(&ROOT, ROOT_INO, n("d"), 0o750, 0).unwrap();
    assert_eq!((d.kind, d.perm), (FileKind::Directory, 0o750));
    assert!(export.join("d").is_dir());
    let fifo = fs
        .mknod(&ROOT, d.ino, n("p"), libc::S_IFIFO | 0o600, 0, 0)
        .unwrap();
    assert_eq!(fifo.kind, FileKind::Fifo);
    let reg = fs
        .mknod(&ROOT, d.ino, n("r"), libc::S_IFREG | 0o600, 0, 0)
        .unwrap();
    assert_eq!(reg.kind, FileKind::Regular);
    // /dev/null's numbers, FUSE-encoded (major 1, minor 3).
    let dev = fs
        .mknod(
            &ROOT,
            d.ino,
            n("null"),
            libc::S_IFCHR | 0o600,
            0,
            (1 << 8) | 3,
        )
        .unwrap();
    assert_eq!((dev.kind, dev.rdev), (FileKind::CharDevice, (1 << 8) | 3));
    assert_eq!(
        std::fs::metadata(export.join("d/null")).unwrap().rdev(),
        libc::makedev(1, 3)
    );
    // The server never opens devices or FIFOs.
    assert_eq!(fs.open(&ROOT, dev.ino, libc::O_RDWR), Err(Errno::ENXIO));
    assert_eq!(fs.open(&ROOT, fifo.ino, libc::O_RDONLY), Err(Errno::ENXIO));
    let l = fs
        .symlink(&ROOT, d.ino, n("l"), n("../target text"))
        .unwrap();
    assert_eq!(l.kind, FileKind::Symlink);
    assert_eq!(fs.readlink(l.ino).unwrap(), b"../target text");
    assert_eq!(fs.readlink(reg.ino), Err(Errno::EINVAL));
    assert_eq!(names(&fs, d.ino), ["l", "null", "p", "r"]);
    assert_eq!(fs.rmdir(&ROOT, ROOT_INO, n("d")), Err(Errno::ENOTEMPTY));
    assert_eq!(fs.unlink(&ROOT, ROOT_INO, n("d")), Err(Errno::EISDIR));
    for name in ["l", "null", "p", "r"] {
        fs.unlink(&ROOT, d.ino, n(name)).unwrap();
    }
    assert_eq!(fs.unlink(&ROOT, d.ino, n("r")), Err(Errno::ENOENT));
    fs.rmdir(&ROOT, ROOT_INO, n("d")).unwrap();
    assert!(!export.join("d").exists());
    // Still known to the kernel: attributes come from the pinned host inode.
    assert_eq!(fs.getattr(reg.ino).unwrap().nlink, 0);
    assert_eq!(
        fs.mkdir(&ROOT, ROOT_INO, n("x"), 0o755, 0).and(fs.mkdir(
            &ROOT,
            ROOT_INO,
            n("x"),
            0o755,
            0
        )),
        Err(Errno::EEXIST)
    );
}

#[test]
fn unlinked_open_file_stays_readable() {
    let (_t, export, fs) = setup("unlinked");
    let (a, o) = fs
        .create(&ROOT, ROOT_INO, n("f"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    fs.write(a.ino, o.fh, 0, b"still here").unwrap();
    fs.unlink(&ROOT, ROOT_INO, n("f")).unwrap();
    assert!(!export.join("f").exists());
    let mut buf = Vec::new();
    fs.read(a.ino, o.fh, 0, 100, &mut buf).unwrap();
    assert_eq!(buf, b"still here");
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 0);
    // No new name for an unlinked file.
    assert_eq!(
        fs.link(&ROOT, a.ino, ROOT_INO, n("back")),
        Err(Errno::ENOENT)
    );
}

#[test]
fn rename_with_flags_and_link() {
    let (_t, export, fs) = setup("rename");
    std::fs::write(export.join("a"), b"A").unwrap();
    std::fs::write(export.join("b"), b"B").unwrap();
    let d = fs.mkdir(&ROOT, ROOT_INO, n("d"), 0o755, 0).unwrap();
    assert_eq!(
        fs.rename(
            &ROOT,
            ROOT_INO,
            n("a"),
            ROOT_INO,
            n("b"),
            rename_flags::NOREPLACE
        ),
        Err(Errno::EEXIST)
    );
    fs.rename(
        &ROOT,
        ROOT_INO,
        n("a"),
        ROOT_INO,
        n("b"),
        rename_flags::EXCHANGE,
    )
    .unwrap();
    assert_eq!(std::fs::read(export.join("a")).unwrap(), b"B");
    fs.rename(&ROOT, ROOT_INO, n("a"), d.ino, n("moved"), 0)
        .unwrap();
    assert_eq!(std::fs::read(export.join("d/moved")).unwrap(), b"B");
    assert_eq!(
        fs.rename(&ROOT, ROOT_INO, n("b"), d.ino, n("x"), 1 << 20),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(&ROOT, ROOT_INO, n("zz"), d.ino, n("x"), 0),
        Err(Errno::ENOENT)
    );
    let b = fs.lookup(&ROOT, ROOT_INO, n("b")).unwrap();
    let l = fs.link(&ROOT, b.ino, d.ino, n("hard")).unwrap();
    assert_eq!((l.ino, l.nlink), (b.ino, 2));
    assert_eq!(fs.lookups(b.ino), 2);
    assert_eq!(std::fs::read(export.join("d/hard")).unwrap(), b"A");
    assert_eq!(fs.link(&ROOT, b.ino, d.ino, n("hard")), Err(Errno::EEXIST));
    assert_eq!(
        fs.link(&ROOT, d.ino, ROOT_INO, n("dirlink")),
        Err(Errno::EPERM)
    );
}

/// The root's entries, seven per READDIR, each call resuming from the last offset taken, as
/// the kernel does.
fn list_in_steps(fs: &PassthroughFs, fh: u64) -> Vec<String> {
    let mut seen = Vec::new();
    let mut offset = 0;
    loop {
        let mut got = 0;
        fs.readdir(ROOT_INO, fh, offset, false, &mut |e| {
            if got == 7 {
                return false;
            }
            got += 1;
            offset = e.offset;
            seen.push(e.name.to_string_lossy().into_owned());
            true
        })
        .unwrap();
        if got == 0 {
            return seen;
        }
    }
}

#[test]
fn readdir_offsets_resume_and_plus_counts_lookups() {
    let (_t, export, fs) = setup("readdir");
    let mut want = HashSet::new();
    for i in 0..300 {
        let name = format!("entry-with-a-longish-name-{i:04}");
        std::fs::write(export.join(&name), b"").unwrap();
        want.insert(name);
    }
    let o = fs.opendir(&ROOT, ROOT_INO, 0).unwrap();
    let seen = list_in_steps(&fs, o.fh);
    assert_eq!(seen.len(), 302, "no entry lost or repeated");
    let set: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(set.len(), 302);
    assert!(set.contains(".") && set.contains(".."));
    // Without a handle (fh 0: OPENDIR declined), each call opens a stream of its own and
    // resumes from the offset the same way.
    assert_eq!(list_in_steps(&fs, 0), seen);
    // A rewind (offset 0) starts over.
    let mut first = None;
    fs.readdir(ROOT_INO, o.fh, 0, false, &mut |e| {
        first = Some(e.name.clone());
        false
    })
    .unwrap();
    assert!(first.is_some());
    fs.releasedir(ROOT_INO, o.fh).unwrap();

    // READDIRPLUS: accepted entries carry attributes and a reference; the refused one not.
    let o = fs.opendir(&ROOT, ROOT_INO, 0).unwrap();
    let mut taken = Vec::new();
    let mut refused = None;
    fs.readdir(ROOT_INO, o.fh, 0, true, &mut |e| {
        if taken.len() == 10 {
            refused = Some(e.ino);
            return false;
        }
        taken.push(e.clone());
        true
    })
    .unwrap();
    for e in &taken {
        match e.name.to_str().unwrap() {
            "." | ".." => assert!(e.attr.is_none()),
            name => {
                assert!(want.contains(name));
                let attr = e.attr.unwrap();
                assert_eq!((attr.ino, attr.kind), (e.ino, FileKind::Regular));
                assert_eq!(fs.lookups(e.ino), 1);
            }
        }
    }
    assert_eq!(fs.lookups(refused.unwrap()), 0);
    fs.releasedir(ROOT_INO, o.fh).unwrap();
}

#[test]
fn plain_readdir_inode_numbers_match_stat() {
    let (_t, export, fs) = setup("dino");
    std::fs::write(export.join("f"), b"").unwrap();
    std::fs::create_dir(export.join("d")).unwrap();
    let o = fs.opendir(&ROOT, ROOT_INO, 0).unwrap();
    let mut entries = Vec::new();
    fs.readdir(ROOT_INO, o.fh, 0, false, &mut |e| {
        entries.push(e.clone());
        true
    })
    .unwrap();
    for e in entries {
        let name = e.name.to_str().unwrap();
        if name == "." || name == ".." {
            assert_eq!(e.ino, ROOT_INO);
            continue;
        }
        let a = fs.lookup(&ROOT, ROOT_INO, &e.name).unwrap();
        assert_eq!((e.ino, e.kind), (a.ino, a.kind), "{name}");
    }
}

#[test]
fn statfs_and_usage() {
    let (_t, export, fs) = setup("statfs");
    let s = fs.statfs().unwrap();
    // SAFETY: a zeroed statvfs is valid for the call to fill.
    let mut host: libc::statvfs = unsafe { std::mem::zeroed() };
    let path = std::ffi::CString::new(export.to_str().unwrap()).unwrap();
    // SAFETY: path is NUL-terminated and host has room for a statvfs.
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut host) }, 0);
    assert_eq!((s.blocks, s.bsize as u64), (host.f_blocks, host.f_frsize));
    assert!(s.namelen >= 255);
    let u = fs.usage();
    // As `df -i` shows them (other processes may make files there meanwhile: the count
    // is compared loosely, the limit exactly).
    assert_eq!(u.inodes_limit, host.f_files, "inodes as df -i shows them");
    assert!(u.inodes_used > 0 && u.inodes_used <= u.inodes_limit);
    assert!(u.descriptors_used >= 1 && u.descriptors_used < u.descriptors_limit);
    assert!(u.bytes_used > 0 && u.bytes_used <= u.bytes_limit);
}

#[test]
fn xattrs_on_files_dirs_and_symlinks() {
    let (_t, export, fs) = setup("xattr");
    std::fs::write(export.join("f"), b"").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", export.join("l")).unwrap();
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    fs.setxattr(&ROOT, f.ino, n("user.k"), b"v1", 0).unwrap();
    assert_eq!(fs.getxattr(f.ino, n("user.k")).unwrap(), b"v1");
    assert_eq!(
        fs.setxattr(&ROOT, f.ino, n("user.k"), b"v", libc::XATTR_CREATE),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        fs.setxattr(&ROOT, f.ino, n("user.n"), b"v", libc::XATTR_REPLACE),
        Err(Errno::ENODATA)
    );
    assert!(fs
        .listxattr(f.ino)
        .unwrap()
        .split(|&b| b == 0)
        .any(|s| s == b"user.k"));
    fs.removexattr(&ROOT, f.ino, n("user.k")).unwrap();
    assert_eq!(fs.getxattr(f.ino, n("user.k")), Err(Errno::ENODATA));
    assert_eq!(
        fs.removexattr(&ROOT, f.ino, n("user.k")),
        Err(Errno::ENODATA)
    );
    fs.setxattr(&ROOT, ROOT_INO, n("user.d"), b"dir", 0)
        .unwrap();
    assert_eq!(fs.getxattr(ROOT_INO, n("user.d")).unwrap(), b"dir");
    // A symlink's own attributes, never its target's.
    let l = fs.lookup(&ROOT, ROOT_INO, n("l")).unwrap();
    assert_eq!(
        fs.setxattr(&ROOT, l.ino, n("user.x"), b"v", 0),
        Err(Errno::EPERM)
    );
    fs.setxattr(&ROOT, l.ino, n("trusted.x"), b"link", 0)
        .unwrap();
    assert_eq!(fs.getxattr(l.ino, n("trusted.x")).unwrap(), b"link");
    assert_eq!(
        xattr_of("/etc/passwd", "trusted.x"),
        Err(libc::ENODATA),
        "the target is untouched"
    );
}

fn xattr_of(path: &str, name: &str) -> Result<Vec<u8>, i32> {
    let p = std::ffi::CString::new(path).unwrap();
    let k = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: both strings are NUL-terminated and buf holds 256 bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), k.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

#[test]
fn fallocate_lseek_copy_file_range() {
    let (_t, export, fs) = setup("alloc");
    let (a, o) = fs
        .create(&ROOT, ROOT_INO, n("a"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    fs.fallocate(a.ino, o.fh, 0, 1 << 20, 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().size, 1 << 20);
    fs.fallocate(
        a.ino,
        o.fh,
        0,
        1 << 20,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    fs.write(a.ino, o.fh, 512 * 1024, b"data").unwrap();
    let data = fs.lseek(a.ino, o.fh, 0, libc::SEEK_DATA).unwrap();
    assert!(data <= 512 * 1024 && data > 0, "{data}");
    let hole = fs.lseek(a.ino, o.fh, data, libc::SEEK_HOLE).unwrap();
    assert!(hole > 512 * 1024);
    assert_eq!(
        fs.lseek(a.ino, o.fh, 2 << 20, libc::SEEK_DATA),
        Err(Errno::ENXIO)
    );
    let (b, ob) = fs
        .create(&ROOT, ROOT_INO, n("b"), 0o600, 0, libc::O_RDWR)
        .unwrap();
    let copied = fs
        .copy_file_range(a.ino, o.fh, 512 * 1024, b.ino, ob.fh, 10, 4)
        .unwrap();
    assert_eq!(copied, 4);
    assert_eq!(&std::fs::read(export.join("b")).unwrap()[10..], b"data");
    assert_eq!(read_all(&fs, b.ino).len(), 14);
}

#[test]
fn host_errors_keep_their_errno() {
    let (_t, export, fs) = setup("errno");
    std::fs::create_dir(export.join("d")).unwrap();
    std::fs::write(export.join("d/f"), b"").unwrap();
    let d = walk(&fs, "d").unwrap();
    let f = walk(&fs, "d/f").unwrap();
    assert_eq!(fs.lookup(&ROOT, d.ino, n("missing")), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(&ROOT, f.ino, n("x")), Err(Errno::ENOTDIR));
    assert_eq!(
        fs.mkdir(&ROOT, ROOT_INO, n("d"), 0o755, 0),
        Err(Errno::EEXIST)
    );
    assert_eq!(fs.rmdir(&ROOT, ROOT_INO, n("d")), Err(Errno::ENOTEMPTY));
    assert_eq!(fs.rmdir(&ROOT, d.ino, n("f")), Err(Errno::ENOTDIR));
    assert_eq!(fs.getattr(999_999_999), Err(Errno::ESTALE));
    let long = "x".repeat(256);
    assert_eq!(
        fs.lookup(&ROOT, ROOT_INO, n(&long)),
        Err(Errno::ENAMETOOLONG)
    );
    assert_eq!(
        fs.mkdir(&ROOT, ROOT_INO, n(&long), 0o755, 0),
        Err(Errno::ENAMETOOLONG)
    );
}

#[test]
fn noatime_policy_opens_with_o_noatime() {
    let config = PassthroughConfig {
        atime: AtimePolicy {
            mode: AtimeMode::Noatime,
            nodiratime: false,
        },
        ..PassthroughConfig::default()
    };
    let (_t, export, fs) = setup_with("noatime", config);
    std::fs::write(export.join("f"), b"data").unwrap();
    let old = Timestamp::from_timespec(1_000, 0);
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    let set = SetAttr {
        atime: Some(TimeSet::At(old)),
        ..SetAttr::default()
    };
    fs.setattr(&ROOT, f.ino, &set).unwrap();
    assert_eq!(read_all(&fs, f.ino), b"data");
    assert_eq!(
        fs.getattr(f.ino).unwrap().atime,
        old,
        "the read left atime alone"
    );
    // A caller that does not own the file still opens it (the server may use O_NOATIME).
    let o = fs.open(&USER, f.ino, libc::O_RDONLY).unwrap();
    fs.release(f.ino, o.fh).unwrap();
}

#[test]
fn backing_fd_is_the_handles_descriptor() {
    let (_t, export, fs) = setup("backing");
    std::fs::write(export.join("f"), b"abc").unwrap();
    let f = fs.lookup(&ROOT, ROOT_INO, n("f")).unwrap();
    let o = fs.open(&ROOT, f.ino, libc::O_RDWR).unwrap();
    let mut seen = None;
    assert!(fs.with_backing_fd(f.ino, o.fh, &mut |fd| {
        let file = std::fs::File::from(fd.try_clone_to_owned().unwrap());
        seen = Some(file.metadata().unwrap());
    }));
    let meta = seen.expect("the descriptor was lent");
    assert_eq!(meta.ino(), f.ino);
    assert!(meta.permissions().mode() & 0o777 != 0);
    let mut called = false;
    assert!(!fs.with_backing_fd(f.ino, 12345, &mut |_| called = true));
    assert!(!called, "no descriptor for an unknown handle");
}

#[test]
fn release_all_closes_every_handle_and_what_only_they_kept() {
    let (_t, export, fs) = setup("release-all");
    let baseline = fs.open_fds();
    let d = fs.mkdir(&ROOT, ROOT_INO, n("d"), 0o755, 0).unwrap();
    let _dir = fs.opendir(&ROOT, d.ino, libc::O_RDONLY).unwrap();
    for i in 0..50 {
        let name = format!("f{i}");
        let (attr, o) = fs
            .create(&ROOT, ROOT_INO, n(&name), 0o644, 0, libc::O_RDWR)
            .unwrap();
        fs.write(attr.ino, o.fh, 0, b"data").unwrap();
        fs.unlink(&ROOT, ROOT_INO, n(&name)).unwrap();
    }
    assert!(fs.open_fds() >= baseline + 100, "{}", fs.open_fds());
    fs.release_all();
    fs.forget_all();
    // Reaped off the request thread: wait for it.
    let start = std::time::Instant::now();
    while fs.open_fds() != baseline && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(fs.open_fds(), baseline, "every descriptor given back");
    assert_eq!(
        std::fs::read_dir(&export).unwrap().count(),
        1,
        "only d is left"
    );
}

#[test]
fn names_change_at_any_depth() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let (_t, export, fs) = setup("deep");
    // 5000 nested directories, made on the host one level at a time.
    let depth = 5000;
    let mut dir = std::fs::File::open(&export).unwrap();
    for _ in 0..depth {
        // SAFETY: mkdirat and openat on a live descriptor with a NUL-terminated name; the
        // new descriptor is owned at once.
        let next = unsafe {
            assert_eq!(libc::mkdirat(dir.as_raw_fd(), c"d".as_ptr(), 0o755), 0);
            let fd = libc::openat(
                dir.as_raw_fd(),
                c"d".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            assert!(fd >= 0);
            OwnedFd::from_raw_fd(fd)
        };
        dir = std::fs::File::from(next);
    }
    let mut ino = ROOT_INO;
    for _ in 0..depth {
        ino = fs.lookup(&ROOT, ino, n("d")).unwrap().ino;
    }
    let (attr, o) = fs
        .create(&ROOT, ino, n("bottom"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    fs.release(attr.ino, o.fh).unwrap();
    fs.mkdir(&ROOT, ino, n("deeper"), 0o755, 0).unwrap();
    fs.unlink(&ROOT, ino, n("bottom")).unwrap();
}
