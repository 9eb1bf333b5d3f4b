//! Inode flags (`chattr`, `lsattr`, `FS_IOC_*` ioctls) on the mem backend as on kernel tmpfs:
//! immutable, append-only, no-dump and no-atime are kept and enforced, no-dump and no-atime
//! are inherited, other flags are `EOPNOTSUPP`.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

use memofs_e2e::checks::opens_released;
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
    // The opens above were served through the kernel's passthrough; beside one still open
    // the kernel refuses the opens of an append-only file (see `a_user_can_only_append`).
    opens_released(&m);
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

/// An open from before `chattr +a` that the kernel serves through FUSE passthrough keeps
/// the file's later opens out while it stays open: those are served through the server (to
/// keep writers appending), and the kernel refuses to mix the two on one inode (`EIO`,
/// docs/guide.md). Once it is closed they work; where file data is not kernel-backed they
/// always do.
#[test]
fn an_open_from_before_chattr_a_keeps_new_opens_out_until_closed() {
    let m = need_mount!();
    let f = m.join("log");
    ok!(fs::write(&f, b"one\n"));
    let early = ok!(fs::File::open(&f));
    ok!(sys::set_flags(&f, APPEND));
    let append = open_rw(&f, true);
    if memofs_e2e::checks::not_kernel_backed(&m).is_none() {
        assert_errno!(append, libc::EIO);
        assert_errno!(fs::File::open(&f), libc::EIO);
    } else {
        ok!(append);
    }
    drop(early);
    opens_released(&m);
    ok!(std::io::Write::write_all(
        &mut ok!(open_rw(&f, true)),
        b"two\n"
    ));
    assert_eq!(ok!(fs::read(&f)), b"one\ntwo\n");
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

/// Maps the first page of `f` shared and writable and writes a byte through the mapping.
fn write_through_shared_mapping(f: &fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping of one page of an open file; nothing else refers to it, and it
    // is unmapped before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        *(p as *mut u8) = b'X';
        libc::munmap(p, 4096);
    }
    Ok(())
}

/// What a plain user may do to an append-only file anyone may write (`p`, holding
/// `before`), while another process holds it open for reading: append to it, as on tmpfs;
/// and neither overwrite it through a shared writable mapping (tmpfs refuses the mapping
/// with `EACCES`, a FUSE mount with `ENODEV`) nor through a descriptor whose `O_APPEND` was
/// cleared (tmpfs refuses the `fcntl` with `EPERM`; on a FUSE mount, where the kernel cannot
/// know the flag, the write fails with `EPERM` on the mem backend and is placed at the end
/// on an export, by the host). Returns what the file holds then.
///
/// Every open of `p` before this must be released: opens of an append-only file are served
/// through the server, and the kernel refuses those (`EIO`) while an open through its
/// passthrough, from before the flag was set, is still there (docs/guide.md).
fn a_user_can_only_append(m: &Mount, p: &Path, before: &[u8]) -> Vec<u8> {
    opens_released(m);
    let _reader = ok!(fs::File::open(p), "a reader's open of the append-only file");
    use std::os::fd::AsRawFd;
    let (p, before) = (p.to_path_buf(), before.to_vec());
    memofs_e2e::user::as_user(4001, 4001, &[], move || {
        {
            let mut a = ok!(open_rw(&p, true));
            ok!(
                std::io::Write::write_all(&mut a, b"+user\n"),
                "a user's append"
            );
        }
        let mut want = before.clone();
        want.extend_from_slice(b"+user\n");
        assert_eq!(ok!(fs::read(&p)), want);
        // O_RDWR | O_APPEND (append implies write).
        let rw = ok!(OpenOptions::new().read(true).append(true).open(&p));
        let mapped = write_through_shared_mapping(&rw);
        assert!(
            matches!(
                mapped.as_ref().map_err(|e| e.raw_os_error()),
                Err(Some(libc::EACCES | libc::ENODEV))
            ),
            "a shared writable mapping of an append-only file: {mapped:?}"
        );
        // SAFETY: F_SETFL on a descriptor this closure owns, with flags without O_APPEND.
        let cleared = unsafe { libc::fcntl(rw.as_raw_fd(), libc::F_SETFL, 0) };
        if cleared != 0 {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EPERM)
            );
        } else {
            match rw.write_at(b"OVER", 0) {
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
                Ok(n) => {
                    assert_eq!(n, 4);
                    want.extend_from_slice(b"OVER");
                }
            }
        }
        assert_eq!(ok!(fs::read(&p)), want, "nothing was overwritten");
        want
    })
}

#[test]
fn append_only_files_take_a_users_appends_and_nothing_else() {
    let m = need_mount!("allow_other");
    let f = m.join("shared.log");
    ok!(fs::write(&f, vec![b'a'; 5000]));
    ok!(fs::set_permissions(&f, fs::Permissions::from_mode(0o666)));
    ok!(sys::set_flags(&f, APPEND));
    let now = a_user_can_only_append(&m, &f, &[b'a'; 5000]);
    assert!(!now.ends_with(b"OVER"), "the mem backend refuses the write");
    ok!(sys::set_flags(&f, 0));
}

#[test]
fn append_only_host_files_take_a_users_appends_through_an_export_and_nothing_else() {
    if !is_root() {
        skip!(Root, "needs root to mount and for CAP_LINUX_IMMUTABLE");
    }
    let host = Mount::tmpfs(&["size=16m", "mode=1777"]);
    let h = host.join("shared.log");
    ok!(fs::write(&h, vec![b'a'; 5000]));
    ok!(fs::set_permissions(&h, fs::Permissions::from_mode(0o666)));
    if let Err(e) = sys::set_flags(&h, APPEND) {
        skip!(
            Kernel("tmpfs_append_only"),
            "the host tmpfs takes no chattr +a ({e})"
        );
    }
    let m =
        Mount::try_memofs_source(host.path(), &["allow_other"]).unwrap_or_else(|e| panic!("{e}"));
    let v = m.join("shared.log");
    let mut now = a_user_can_only_append(&m, &v, &[b'a'; 5000]);
    // Appended on the host meanwhile: a user's next append through the mount lands after it.
    ok!(ok!(OpenOptions::new().append(true).open(&h)).write_all_at(b"host\n", 0));
    memofs_e2e::user::as_user(4001, 4001, &[], move || {
        let mut a = ok!(open_rw(&v, true));
        ok!(std::io::Write::write_all(&mut a, b"+again\n"));
    });
    now.extend_from_slice(b"host\n+again\n");
    assert_eq!(ok!(fs::read(&h)), now, "every append at the end");
    ok!(sys::set_flags(&h, 0));
}
