//! Inode flags (`chattr`, `lsattr`, `FS_IOC_*` ioctls) on the mem backend as on kernel tmpfs:
//! immutable, append-only, no-dump and no-atime are kept and enforced, no-dump and no-atime
//! are inherited, other flags are `EOPNOTSUPP`.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

use memofs_e2e::sys::{self, Ts};
use memofs_e2e::{assert_errno, is_root, ok, skip, tool, which, Mount};

const SYNC: u32 = 0x08;
const IMMUTABLE: u32 = 0x10;
const APPEND: u32 = 0x20;
const NODUMP: u32 = 0x40;
const NOATIME: u32 = 0x80;
const XFLAG_IMMUTABLE: u32 = 0x08;
const XFLAG_NODUMP: u32 = 0x80;

macro_rules! need_mount {
    ($($opt:expr),*) => {{
        if !is_root() {
            skip!(Root, "needs root to mount and for CAP_LINUX_IMMUTABLE");
        }
        Mount::mem(&["size=64m" $(, $opt)*])
    }};
}

fn open_rw(p: &Path, append: bool) -> std::io::Result<fs::File> {
    OpenOptions::new().write(true).append(append).open(p)
}

#[test]
fn immutable_files_refuse_every_change() {
    let m = need_mount!();
    let f = m.join("f");
    ok!(fs::write(&f, b"data"));
    let before = ok!(open_rw(&f, false));
    ok!(sys::set_flags(&f, IMMUTABLE));
    assert_eq!(ok!(sys::get_flags(&f)), IMMUTABLE);
    assert_errno!(open_rw(&f, false), libc::EPERM);
    assert_errno!(open_rw(&f, true), libc::EPERM);
    assert_errno!(sys::truncate(&f, 0), libc::EPERM);
    assert_errno!(
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)),
        libc::EPERM
    );
    assert_errno!(sys::chown(&f, 1, 1), libc::EPERM);
    assert_errno!(sys::utimensat(&f, Ts::Now, Ts::Now, 0), libc::EPERM);
    assert_errno!(sys::setxattr(&f, "user.k", b"v", 0), libc::EPERM);
    assert_errno!(fs::hard_link(&f, m.join("g")), libc::EPERM);
    assert_errno!(fs::rename(&f, m.join("g")), libc::EPERM);
    assert_errno!(fs::remove_file(&f), libc::EPERM);
    assert_eq!(ok!(fs::read(&f)), b"data", "reading is fine");
    // A descriptor opened before the flag keeps writing, as on tmpfs.
    ok!(before.write_all_at(b"D", 0));
    drop(before);
    assert_eq!(ok!(fs::read(&f)), b"Data");
    ok!(sys::set_flags(&f, 0));
    ok!(fs::remove_file(&f));
}

#[test]
fn immutable_directories_keep_their_entries() {
    let m = need_mount!();
    let d = m.join("d");
    ok!(fs::create_dir(&d));
    ok!(fs::write(d.join("in"), b"x"));
    ok!(sys::set_flags(&d, IMMUTABLE));
    assert_errno!(fs::write(d.join("new"), b""), libc::EPERM);
    assert_errno!(fs::create_dir(d.join("sub")), libc::EPERM);
    assert_errno!(fs::remove_file(d.join("in")), libc::EPERM);
    assert_errno!(fs::rename(d.join("in"), m.join("out")), libc::EPERM);
    ok!(fs::write(d.join("in"), b"y"), "its files are not immutable");
    ok!(sys::set_flags(&d, 0));
    ok!(fs::remove_file(d.join("in")));
}

#[test]
fn append_only_files_take_only_appends() {
    let m = need_mount!();
    let f = m.join("log");
    ok!(fs::write(&f, b"one\n"));
    ok!(sys::set_flags(&f, APPEND));
    assert_errno!(open_rw(&f, false), libc::EPERM);
    assert_errno!(sys::truncate(&f, 0), libc::EPERM);
    {
        let a = ok!(open_rw(&f, true));
        assert_errno!(a.set_len(0), libc::EPERM);
        ok!(std::io::Write::write_all(&mut &a, b"two\n"));
    }
    assert_eq!(ok!(fs::read(&f)), b"one\ntwo\n");
    ok!(
        sys::utimensat(&f, Ts::Now, Ts::Now, 0),
        "touching is allowed"
    );
    assert_errno!(sys::utimensat(&f, Ts::At(1, 0), Ts::Omit, 0), libc::EPERM);
    assert_errno!(fs::remove_file(&f), libc::EPERM);
    assert_errno!(fs::rename(&f, m.join("g")), libc::EPERM);
    // An append-only directory takes new entries and keeps them.
    let d = m.join("d");
    ok!(fs::create_dir(&d));
    ok!(sys::set_flags(&d, APPEND));
    ok!(fs::write(d.join("new"), b""));
    assert_errno!(fs::remove_file(d.join("new")), libc::EPERM);
    ok!(sys::set_flags(&d, 0));
    ok!(sys::set_flags(&f, 0));
}

#[test]
fn nodump_and_noatime_are_inherited_and_others_refused() {
    let m = need_mount!();
    let d = m.join("d");
    ok!(fs::create_dir(&d));
    ok!(sys::set_flags(&d, NODUMP | NOATIME));
    ok!(fs::write(d.join("f"), b""));
    ok!(fs::create_dir(d.join("sub")));
    assert_eq!(ok!(sys::get_flags(d.join("f"))), NODUMP | NOATIME);
    assert_eq!(ok!(sys::get_flags(d.join("sub"))), NODUMP | NOATIME);
    assert_errno!(sys::set_flags(d.join("f"), SYNC), libc::EOPNOTSUPP);
    assert_eq!(ok!(sys::fsgetxattr(d.join("f"))), [0xc0, 0, 0, 0, 0]);
    ok!(sys::fssetxattr(
        d.join("f"),
        XFLAG_IMMUTABLE | XFLAG_NODUMP,
        0
    ));
    assert_eq!(ok!(sys::get_flags(d.join("f"))), IMMUTABLE | NODUMP);
    assert_errno!(
        sys::fssetxattr(d.join("f"), XFLAG_NODUMP, 4096),
        libc::EOPNOTSUPP
    );
    ok!(sys::set_flags(d.join("f"), 0));
    // Only files and directories have flags.
    ok!(sys::mkfifo(m.join("fifo"), 0o600));
    assert_errno!(sys::get_flags(m.join("fifo")), libc::ENOTTY);
}

#[test]
fn noatime_flag_keeps_atime_whatever_the_mount_says() {
    let m = need_mount!("strictatime");
    let f = m.join("f");
    ok!(fs::write(&f, b"data"));
    let old = sys::now().0 - 7200;
    let read_atime = || {
        ok!(sys::utimensat(&f, Ts::At(old, 0), Ts::At(old, 0), 0));
        let mut buf = Vec::new();
        ok!(ok!(fs::File::open(&f)).read_to_end(&mut buf));
        ok!(fs::metadata(&f)).atime()
    };
    ok!(sys::set_flags(&f, NOATIME));
    assert_eq!(read_atime(), old, "+A: a read leaves atime");
    ok!(sys::set_flags(&f, 0));
    assert_ne!(read_atime(), old, "-A: strictatime updates atime");
}

#[test]
fn chattr_and_lsattr() {
    let m = need_mount!();
    if which("chattr").is_none() || which("lsattr").is_none() {
        skip!(
            Tool("chattr"),
            "chattr/lsattr are not installed (Debian package e2fsprogs)"
        );
    }
    let f = m.join("f");
    ok!(fs::write(&f, b""));
    let run = |args: &[&str]| tool(args, &f);
    run(&["chattr", "+i", "+d"]);
    let shown = run(&["lsattr"]);
    let attrs = shown.split_whitespace().next().unwrap_or("");
    assert!(attrs.contains('i') && attrs.contains('d'), "{shown}");
    run(&["chattr", "-i", "-d"]);
    assert_eq!(ok!(sys::get_flags(&f)), 0);
}
