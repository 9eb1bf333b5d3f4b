//! Hard links, symlinks, FIFOs, sockets and device nodes.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use memofs_e2e::{assert_errno, ok, require_mount, sys, Mount};

macro_rules! need_mount {
    () => {{
        require_mount!();
        Mount::mem(&["size=64m"])
    }};
}

fn lstat(p: &Path) -> fs::Metadata {
    ok!(fs::symlink_metadata(p), "lstat {}", p.display())
}

#[test]
fn hard_links_share_inode_and_data() {
    let m = need_mount!();
    ok!(fs::write(m.join("a"), b"shared"));
    ok!(fs::create_dir(m.join("d")));
    ok!(fs::hard_link(m.join("a"), m.join("d/b")));
    ok!(fs::hard_link(m.join("d/b"), m.join("c")));
    let (a, b, c) = (
        lstat(&m.join("a")),
        lstat(&m.join("d/b")),
        lstat(&m.join("c")),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 3));
    assert_eq!((c.ino(), c.nlink()), (a.ino(), 3));
    // Writes through one name are seen through the others.
    let f = ok!(OpenOptions::new().write(true).open(m.join("c")));
    ok!(std::os::unix::fs::FileExt::write_all_at(&f, b"SH", 0));
    drop(f);
    assert_eq!(ok!(fs::read(m.join("d/b"))), b"SHared");
    // chmod through one name changes all.
    ok!(sys::chmod(m.join("a"), 0o600));
    assert_eq!(lstat(&m.join("d/b")).mode() & 0o7777, 0o600);
    ok!(fs::remove_file(m.join("a")));
    assert_eq!(lstat(&m.join("c")).nlink(), 2);
    ok!(fs::remove_file(m.join("c")));
    assert_eq!(lstat(&m.join("d/b")).nlink(), 1);
    assert_eq!(ok!(fs::read(m.join("d/b"))), b"SHared");
    // Errors.
    assert_errno!(
        fs::hard_link(m.join("d"), m.join("dirlink")),
        libc::EPERM,
        "link to a directory"
    );
    assert_errno!(fs::hard_link(m.join("missing"), m.join("x")), libc::ENOENT);
    assert_errno!(fs::hard_link(m.join("d/b"), m.join("d")), libc::EEXIST);
    ok!(fs::write(m.join("e"), b""));
    assert_errno!(fs::hard_link(m.join("d/b"), m.join("e")), libc::EEXIST);
    let other = Mount::tmpfs(&["size=1m"]);
    assert_errno!(fs::hard_link(m.join("d/b"), other.join("x")), libc::EXDEV);
}

#[test]
fn hard_link_to_symlink_and_special_files() {
    let m = need_mount!();
    ok!(symlink("target-text", m.join("s")));
    ok!(sys::link_nofollow(m.join("s"), m.join("s2")));
    let (s, s2) = (lstat(&m.join("s")), lstat(&m.join("s2")));
    assert!(
        s2.file_type().is_symlink(),
        "linkat without AT_SYMLINK_FOLLOW links the symlink itself"
    );
    assert_eq!((s.ino(), s.nlink()), (s2.ino(), 2));
    assert_eq!(ok!(fs::read_link(m.join("s2"))), Path::new("target-text"));
    ok!(sys::mkfifo(m.join("p"), 0o600));
    ok!(fs::hard_link(m.join("p"), m.join("p2")));
    assert_eq!(lstat(&m.join("p2")).nlink(), 2);
    assert!(lstat(&m.join("p2")).file_type().is_fifo());
}

#[test]
fn symlinks() {
    let m = need_mount!();
    ok!(fs::create_dir(m.join("dir")));
    ok!(fs::write(m.join("dir/file"), b"via link"));
    ok!(symlink("dir/file", m.join("rel")));
    ok!(symlink("../dir", m.join("dir/up")));
    let md = lstat(&m.join("rel"));
    assert!(md.file_type().is_symlink());
    assert_eq!(
        md.len(),
        "dir/file".len() as u64,
        "symlink size is the target length"
    );
    assert_eq!(md.mode() & 0o777, 0o777, "symlinks have mode 0777");
    assert_eq!(ok!(fs::read_link(m.join("rel"))), Path::new("dir/file"));
    assert_eq!(ok!(fs::read(m.join("rel"))), b"via link");
    assert_eq!(
        ok!(fs::metadata(m.join("rel"))).len(),
        8,
        "stat follows the link"
    );
    assert_eq!(
        ok!(fs::read(m.join("dir/up/up/up/file"))),
        b"via link",
        "links in the middle of paths"
    );
    // Dangling links.
    ok!(symlink("nowhere/at/all", m.join("dangling")));
    assert_errno!(fs::metadata(m.join("dangling")), libc::ENOENT);
    assert!(lstat(&m.join("dangling")).file_type().is_symlink());
    // open(O_CREAT) through a dangling link creates its target.
    ok!(symlink("created-through-link", m.join("creator")));
    ok!(fs::write(m.join("creator"), b"made"));
    assert_eq!(ok!(fs::read(m.join("created-through-link"))), b"made");
    // Loops and O_NOFOLLOW.
    ok!(symlink("loop2", m.join("loop1")));
    ok!(symlink("loop1", m.join("loop2")));
    assert_errno!(File::open(m.join("loop1")), libc::ELOOP);
    assert_errno!(
        sys::open(m.join("rel"), libc::O_RDONLY | libc::O_NOFOLLOW, 0),
        libc::ELOOP
    );
    // readlink on a non-link.
    assert_errno!(fs::read_link(m.join("dir/file")), libc::EINVAL);
    // Existing name.
    assert_errno!(symlink("x", m.join("rel")), libc::EEXIST);
    // Long targets: up to 4095 bytes work.
    let long = "t/".repeat(2047) + "x"; // 4095 bytes
    assert_eq!(long.len(), 4095);
    ok!(
        symlink(&long, m.join("long")),
        "symlink with a 4095-byte target"
    );
    assert_eq!(ok!(fs::read_link(m.join("long"))).as_os_str().len(), 4095);
    assert_eq!(lstat(&m.join("long")).len(), 4095);
    assert_errno!(
        symlink("y".repeat(4096), m.join("toolong")),
        libc::ENAMETOOLONG
    );
    // Odd but valid targets.
    ok!(symlink("with space/and\nnewline", m.join("odd")));
    assert_eq!(
        ok!(fs::read_link(m.join("odd"))),
        Path::new("with space/and\nnewline")
    );
}

#[test]
fn symlink_ownership_and_lchown() {
    let m = need_mount!();
    // In a directory of root's own: in the sticky, world-writable root, following a link that
    // belongs to someone else is refused where fs.protected_symlinks is 1 (Debian's kernels).
    ok!(fs::create_dir(m.join("d")));
    ok!(sys::chmod(m.join("d"), 0o755));
    let (link, target) = (m.join("d/l"), m.join("d/t"));
    ok!(symlink("t", &link));
    ok!(sys::lchown(&link, 1234, 5678));
    let md = lstat(&link);
    assert_eq!(
        (md.uid(), md.gid()),
        (1234, 5678),
        "lchown changes the link itself"
    );
    ok!(fs::write(&target, b""));
    ok!(sys::chown(&link, 42, 43));
    let t = lstat(&target);
    assert_eq!((t.uid(), t.gid()), (42, 43), "chown follows the link");
    assert_eq!(lstat(&link).uid(), 1234);
}

#[test]
fn fifo_passes_data() {
    let m = need_mount!();
    let p = m.join("fifo");
    ok!(sys::mkfifo(&p, 0o640));
    let md = lstat(&p);
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o777, 0o640 & !sys::umask());
    assert_eq!(md.len(), 0);
    // Open both ends without blocking (reader first, non-blocking), then pass data.
    let mut reader = ok!(sys::open(&p, libc::O_RDONLY | libc::O_NONBLOCK, 0));
    let mut writer = ok!(OpenOptions::new().write(true).open(&p));
    ok!(writer.write_all(b"through the pipe"));
    drop(writer);
    let mut got = Vec::new();
    ok!(reader.read_to_end(&mut got));
    assert_eq!(got, b"through the pipe");
    // A writer with no reader gets ENXIO in non-blocking mode. Another test thread that forks
    // while the reader is open holds a copy of it until its exec: wait that out.
    drop(reader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut opened = sys::open(&p, libc::O_WRONLY | libc::O_NONBLOCK, 0);
    while opened.is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        opened = sys::open(&p, libc::O_WRONLY | libc::O_NONBLOCK, 0);
    }
    assert_errno!(opened, libc::ENXIO);
    // mknod(S_IFIFO) makes the same kind of file.
    ok!(sys::mknod(m.join("fifo2"), libc::S_IFIFO | 0o600, 0));
    assert!(lstat(&m.join("fifo2")).file_type().is_fifo());
}

#[test]
fn unix_socket_bound_in_the_mount() {
    let m = need_mount!();
    let p = m.join("sock");
    let listener = ok!(UnixListener::bind(&p));
    let md = lstat(&p);
    assert!(md.file_type().is_socket(), "bind creates a socket file");
    let mut client = ok!(UnixStream::connect(&p));
    let (mut server, _) = ok!(listener.accept());
    ok!(client.write_all(b"ping"));
    let mut buf = [0u8; 4];
    ok!(server.read_exact(&mut buf));
    assert_eq!(&buf, b"ping");
    assert_errno!(UnixListener::bind(&p), libc::EADDRINUSE);
    // mknod(S_IFSOCK) too; opening a socket file fails with ENXIO.
    ok!(sys::mknod(m.join("sock2"), libc::S_IFSOCK | 0o600, 0));
    assert!(lstat(&m.join("sock2")).file_type().is_socket());
    assert_errno!(File::open(m.join("sock2")), libc::ENXIO);
}

#[test]
fn device_nodes() {
    let m = need_mount!();
    let null_dev = sys::makedev(1, 3);
    ok!(sys::mknod(m.join("null"), libc::S_IFCHR | 0o666, null_dev));
    let md = lstat(&m.join("null"));
    assert!(md.file_type().is_char_device());
    assert_eq!(md.rdev(), null_dev, "char device numbers");
    assert_eq!(md.mode() & 0o777, 0o666 & !sys::umask());
    let loop_dev = sys::makedev(7, 200);
    ok!(sys::mknod(m.join("blk"), libc::S_IFBLK | 0o600, loop_dev));
    let md = lstat(&m.join("blk"));
    assert!(md.file_type().is_block_device());
    assert_eq!(md.rdev(), loop_dev, "block device numbers");
    let big = sys::makedev(300, 70000); // needs the full 32-bit dev_t encoding
    ok!(sys::mknod(m.join("big"), libc::S_IFCHR | 0o600, big));
    assert_eq!(
        lstat(&m.join("big")).rdev(),
        big,
        "large major/minor survive"
    );
    // A regular file through mknod.
    ok!(sys::mknod(m.join("reg"), libc::S_IFREG | 0o644, 0));
    assert!(lstat(&m.join("reg")).file_type().is_file());
    assert_errno!(
        sys::mknod(m.join("null"), libc::S_IFCHR | 0o600, null_dev),
        libc::EEXIST
    );
    // Renames and links of device nodes keep the numbers.
    ok!(fs::rename(m.join("blk"), m.join("blk2")));
    assert_eq!(lstat(&m.join("blk2")).rdev(), loop_dev);
}
