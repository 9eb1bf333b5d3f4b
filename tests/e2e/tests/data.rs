//! Extended attributes, fallocate, SEEK_DATA/SEEK_HOLE and copy_file_range.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{symlink, FileExt};

use memofs_e2e::{assert_bytes_eq, assert_errno, ok, pattern, require_mount, sys, Mount};

const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

macro_rules! need_mount {
    () => {{
        require_mount!();
        Mount::mem(&["size=64m"])
    }};
}

fn rw(m: &Mount, name: &str) -> File {
    ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(m.join(name)))
}

#[test]
fn xattr_set_get_list_remove() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b""));
    assert_eq!(
        ok!(sys::listxattr(&p)),
        Vec::<String>::new(),
        "a new file has no xattrs"
    );
    ok!(sys::setxattr(&p, "user.a", b"1", 0));
    assert_eq!(ok!(sys::getxattr(&p, "user.a")), b"1");
    assert_eq!(ok!(sys::listxattr(&p)), ["user.a"]);
    // Flags.
    assert_errno!(
        sys::setxattr(&p, "user.a", b"x", XATTR_CREATE),
        libc::EEXIST,
        "XATTR_CREATE on an existing name"
    );
    assert_errno!(
        sys::setxattr(&p, "user.b", b"x", XATTR_REPLACE),
        libc::ENODATA,
        "XATTR_REPLACE on a missing name"
    );
    assert_errno!(
        sys::getxattr(&p, "user.b"),
        libc::ENODATA,
        "XATTR_REPLACE must not create"
    );
    ok!(sys::setxattr(&p, "user.a", b"22", XATTR_REPLACE));
    ok!(sys::setxattr(&p, "user.b", b"333", XATTR_CREATE));
    assert_eq!(ok!(sys::getxattr(&p, "user.a")), b"22");
    // Missing names.
    assert_errno!(sys::getxattr(&p, "user.missing"), libc::ENODATA);
    assert_errno!(sys::removexattr(&p, "user.missing"), libc::ENODATA);
    // Sizes: 0 asks for the length, too small gives ERANGE.
    assert_eq!(
        ok!(sys::getxattr_sized(&p, "user.b", 0)).0,
        3,
        "getxattr(size 0) returns the value length"
    );
    assert_errno!(
        sys::getxattr_sized(&p, "user.b", 2),
        libc::ERANGE,
        "getxattr into a 2-byte buffer"
    );
    assert_eq!(ok!(sys::getxattr_sized(&p, "user.b", 3)).1, b"333");
    let list_len = "user.a\0user.b\0".len();
    assert_eq!(
        ok!(sys::listxattr_sized(&p, 0)).0,
        list_len,
        "listxattr(size 0) returns the list length"
    );
    assert_errno!(
        sys::listxattr_sized(&p, 5),
        libc::ERANGE,
        "listxattr into a 5-byte buffer"
    );
    let (n, raw) = ok!(sys::listxattr_sized(&p, list_len));
    assert_eq!(n, list_len);
    let mut names: Vec<&[u8]> = raw.split(|&b| b == 0).filter(|s| !s.is_empty()).collect();
    names.sort();
    assert_eq!(names, [b"user.a".as_slice(), b"user.b"]);
    // Empty values and binary values.
    ok!(sys::setxattr(&p, "user.empty", b"", 0));
    assert_eq!(ok!(sys::getxattr(&p, "user.empty")), b"");
    let bin = pattern(9, 16 * 1024);
    ok!(sys::setxattr(&p, "user.bin", &bin, 0));
    assert_bytes_eq(
        &ok!(sys::getxattr(&p, "user.bin")),
        &bin,
        "16 KiB binary xattr",
    );
    ok!(sys::setxattr(&p, "user.nul", b"a\0b\0", 0));
    assert_eq!(ok!(sys::getxattr(&p, "user.nul")), b"a\0b\0");
    // Remove.
    for n in ["user.a", "user.b", "user.empty", "user.bin", "user.nul"] {
        ok!(sys::removexattr(&p, n));
    }
    assert_eq!(ok!(sys::listxattr(&p)), Vec::<String>::new());
    assert_eq!(ok!(sys::listxattr_sized(&p, 0)).0, 0);
}

#[test]
fn xattr_namespaces_and_limits() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b""));
    ok!(sys::setxattr(&p, "trusted.t", b"T", 0), "trusted.* as root");
    ok!(sys::setxattr(&p, "security.s", b"S", 0), "security.*");
    ok!(sys::setxattr(&p, "user.u", b"U", 0));
    assert_eq!(
        ok!(sys::listxattr(&p)),
        ["security.s", "trusted.t", "user.u"]
    );
    assert_eq!(ok!(sys::getxattr(&p, "trusted.t")), b"T");
    assert_eq!(ok!(sys::getxattr(&p, "security.s")), b"S");
    assert_errno!(
        sys::setxattr(&p, "bogus.x", b"v", 0),
        libc::EOPNOTSUPP,
        "unknown namespace"
    );
    assert_errno!(
        sys::setxattr(&p, "noprefix", b"v", 0),
        libc::EOPNOTSUPP,
        "name without a namespace"
    );
    assert_errno!(
        sys::getxattr(&p, "bogus.x"),
        libc::EOPNOTSUPP,
        "get in an unknown namespace"
    );
    assert_errno!(
        sys::setxattr(&p, &format!("user.{}", "n".repeat(251)), b"v", 0),
        libc::ERANGE,
        "256-byte name"
    );
    ok!(
        sys::setxattr(&p, &format!("user.{}", "n".repeat(250)), b"v", 0),
        "255-byte name"
    );
    assert_errno!(
        sys::setxattr(&p, "user.big", &vec![0u8; 65537], 0),
        libc::E2BIG,
        "value over 64 KiB"
    );
    // Many names.
    for i in 0..100 {
        ok!(sys::setxattr(
            &p,
            &format!("user.k{i:03}"),
            format!("v{i}").as_bytes(),
            0
        ));
    }
    let names = ok!(sys::listxattr(&p));
    assert_eq!(
        names.iter().filter(|n| n.starts_with("user.k")).count(),
        100
    );
    for i in (0..100).step_by(13) {
        assert_eq!(
            ok!(sys::getxattr(&p, &format!("user.k{i:03}"))),
            format!("v{i}").as_bytes()
        );
    }
}

#[test]
fn xattr_on_directories_links_and_special_files() {
    let m = need_mount!();
    ok!(fs::create_dir(m.join("d")));
    ok!(sys::setxattr(m.join("d"), "user.dir", b"D", 0));
    assert_eq!(ok!(sys::getxattr(m.join("d"), "user.dir")), b"D");
    // Hard links share xattrs.
    ok!(fs::write(m.join("a"), b""));
    ok!(fs::hard_link(m.join("a"), m.join("b")));
    ok!(sys::setxattr(m.join("a"), "user.shared", b"S", 0));
    assert_eq!(ok!(sys::getxattr(m.join("b"), "user.shared")), b"S");
    // Through a symlink (followed) vs on the symlink itself.
    ok!(symlink("a", m.join("l")));
    assert_eq!(
        ok!(sys::getxattr(m.join("l"), "user.shared")),
        b"S",
        "getxattr follows symlinks"
    );
    assert_errno!(
        sys::lsetxattr(m.join("l"), "user.x", b"v", 0),
        libc::EPERM,
        "user.* on a symlink"
    );
    assert_eq!(ok!(sys::llistxattr(m.join("l"))), Vec::<String>::new());
    ok!(
        sys::lsetxattr(m.join("l"), "trusted.onlink", b"L", 0),
        "trusted.* on a symlink itself"
    );
    assert_eq!(ok!(sys::lgetxattr(m.join("l"), "trusted.onlink")), b"L");
    assert_errno!(
        sys::getxattr(m.join("a"), "trusted.onlink"),
        libc::ENODATA,
        "the target does not have it"
    );
    // user.* on a FIFO is refused.
    ok!(sys::mkfifo(m.join("p"), 0o644));
    assert_errno!(
        sys::setxattr(m.join("p"), "user.x", b"v", 0),
        libc::EPERM,
        "user.* on a FIFO"
    );
    // xattrs survive rename and are gone with the file.
    ok!(fs::rename(m.join("a"), m.join("c")));
    assert_eq!(ok!(sys::getxattr(m.join("c"), "user.shared")), b"S");
    ok!(fs::remove_file(m.join("c")));
    ok!(fs::remove_file(m.join("b")));
    ok!(fs::write(m.join("b"), b""));
    assert_eq!(
        ok!(sys::listxattr(m.join("b"))),
        Vec::<String>::new(),
        "a new file with an old name has no xattrs"
    );
}

#[test]
fn fallocate_modes() {
    let m = need_mount!();
    let f = rw(&m, "f");
    ok!(sys::fallocate(&f, 0, 0, 100_000));
    assert_eq!(
        ok!(f.metadata()).len(),
        100_000,
        "fallocate mode 0 extends the size"
    );
    assert!(ok!(sys::pread_full(&f, 0, 200_000)).iter().all(|&b| b == 0));
    ok!(sys::fallocate(
        &f,
        libc::FALLOC_FL_KEEP_SIZE,
        100_000,
        50_000
    ));
    assert_eq!(ok!(f.metadata()).len(), 100_000, "KEEP_SIZE keeps the size");
    // Within the file: no change to data.
    let data = vec![0xAAu8; 65536];
    ok!(f.write_all_at(&data, 0));
    ok!(sys::fallocate(&f, 0, 0, 65536));
    assert_bytes_eq(
        &ok!(sys::pread_full(&f, 0, 65536)),
        &data,
        "fallocate over data keeps it",
    );
    // Punch holes: aligned, unaligned, beyond the end.
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    ok!(sys::fallocate(&f, punch, 4096, 8192));
    ok!(sys::fallocate(&f, punch, 100, 50));
    ok!(sys::fallocate(&f, punch, 65000, 100)); // straddles the end of the 0xAA run
    ok!(sys::fallocate(&f, punch, 500_000, 4096));
    assert_eq!(ok!(f.metadata()).len(), 100_000, "punching keeps the size");
    let mut want = vec![0u8; 100_000];
    want[..65536].copy_from_slice(&data);
    want[4096..12288].fill(0);
    want[100..150].fill(0);
    want[65000..65100].fill(0);
    assert_bytes_eq(
        &ok!(sys::pread_full(&f, 0, 200_000)),
        &want,
        "after punching holes",
    );
    // Writing into a punched hole works again.
    ok!(f.write_all_at(b"refill", 5000));
    want[5000..5006].copy_from_slice(b"refill");
    assert_bytes_eq(
        &ok!(sys::pread_full(&f, 0, 200_000)),
        &want,
        "after refilling a hole",
    );
    // Errors decided by the VFS and by tmpfs.
    assert_errno!(
        sys::fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, 10),
        libc::EOPNOTSUPP,
        "PUNCH_HOLE without KEEP_SIZE"
    );
    assert_errno!(sys::fallocate(&f, 0, 0, 0), libc::EINVAL, "zero length");
    let ro = ok!(File::open(m.join("f")));
    assert_errno!(
        sys::fallocate(&ro, 0, 0, 10),
        libc::EBADF,
        "fallocate on an O_RDONLY descriptor"
    );
    // ZERO_RANGE: tmpfs refuses it; if supported it must zero.
    match sys::fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 0, 16) {
        Ok(()) => assert!(
            ok!(sys::pread_full(&f, 0, 16)).iter().all(|&b| b == 0),
            "ZERO_RANGE must zero"
        ),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "ZERO_RANGE: {e}"),
    }
    // Directories.
    let d = ok!(File::open(m.path()));
    assert!(
        sys::fallocate(&d, 0, 0, 10).is_err(),
        "fallocate on a directory must fail"
    );
}

#[test]
fn seek_data_and_seek_hole() {
    // Holes as the server keeps them (`seek_under_the_writeback_cache_sees_unwritten_data`
    // has the writeback cache's answers).
    require_mount!();
    let m = Mount::mem(&["size=64m", "writeback=off"]);
    let f = rw(&m, "sparse");
    const K64: i64 = 64 * 1024;
    const M1: i64 = 1 << 20;
    ok!(f.write_all_at(&vec![1u8; K64 as usize], 0));
    ok!(f.write_all_at(&vec![2u8; K64 as usize], M1 as u64));
    ok!(f.set_len(2 * M1 as u64));
    let seek = |off: i64, whence: i32| sys::lseek(&f, off, whence);
    assert_eq!(ok!(seek(0, libc::SEEK_DATA)), 0);
    assert_eq!(
        ok!(seek(0, libc::SEEK_HOLE)),
        K64,
        "first hole after the first 64 KiB"
    );
    assert_eq!(ok!(seek(100, libc::SEEK_HOLE)), K64);
    assert_eq!(ok!(seek(K64, libc::SEEK_DATA)), M1, "next data at 1 MiB");
    assert_eq!(
        ok!(seek(K64 + 5, libc::SEEK_HOLE)),
        K64 + 5,
        "SEEK_HOLE inside a hole stays put"
    );
    assert_eq!(ok!(seek(M1, libc::SEEK_HOLE)), M1 + K64);
    assert_errno!(
        seek(M1 + K64, libc::SEEK_DATA),
        libc::ENXIO,
        "no data after the last extent"
    );
    assert_eq!(ok!(seek(M1 + K64, libc::SEEK_HOLE)), M1 + K64);
    assert_errno!(
        seek(2 * M1, libc::SEEK_DATA),
        libc::ENXIO,
        "SEEK_DATA at EOF"
    );
    assert_errno!(
        seek(2 * M1, libc::SEEK_HOLE),
        libc::ENXIO,
        "SEEK_HOLE at EOF"
    );
    assert_errno!(
        seek(3 * M1, libc::SEEK_HOLE),
        libc::ENXIO,
        "SEEK_HOLE past EOF"
    );
    // Punching the second extent leaves no data after 64 KiB.
    ok!(sys::fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        M1 as u64,
        K64 as u64
    ));
    assert_errno!(
        seek(K64, libc::SEEK_DATA),
        libc::ENXIO,
        "SEEK_DATA after punching the last extent"
    );
    // A file with no holes: the only hole is the implicit one at EOF.
    let g = rw(&m, "dense");
    ok!(g.write_all_at(&vec![3u8; 100_000], 0));
    assert_eq!(ok!(sys::lseek(&g, 0, libc::SEEK_HOLE)), 100_000);
    assert_eq!(ok!(sys::lseek(&g, 99_999, libc::SEEK_DATA)), 99_999);
}

/// Under the writeback cache, data may still be in the kernel's dirty pages, which the kernel
/// does not write back before asking the server where data is; so it answers itself, from
/// its own size: the whole file is data, the only hole is at the end.
#[test]
fn seek_under_the_writeback_cache_sees_unwritten_data() {
    require_mount!();
    let m = Mount::memofs(&["size=64m", "passthrough=off", "writeback=on"]);
    let f = rw(&m, "f");
    const M1: i64 = 1 << 20;
    ok!(f.write_all_at(&[5u8; 4096], M1 as u64));
    assert_eq!(ok!(sys::lseek(&f, 0, libc::SEEK_HOLE)), M1 + 4096);
    assert_eq!(ok!(sys::lseek(&f, 4096, libc::SEEK_DATA)), 4096);
    assert_errno!(sys::lseek(&f, M1 + 4096, libc::SEEK_DATA), libc::ENXIO);
    assert_eq!(
        sys::pread_full(&f, M1 as u64, 4096).ok(),
        Some(vec![5u8; 4096])
    );
}

#[test]
fn copy_file_range_copies_and_checks_ranges() {
    let m = need_mount!();
    let src = rw(&m, "src");
    let data = pattern(5, 300_000);
    ok!(src.write_all_at(&data, 0));
    let dst = rw(&m, "dst");
    ok!(dst.write_all_at(b"0123456789", 0));
    let (mut oi, mut oo) = (50_000i64, 10i64);
    let mut left = 100_000usize;
    while left > 0 {
        let n = ok!(sys::copy_file_range(&src, &mut oi, &dst, &mut oo, left));
        assert!(
            n > 0,
            "copy_file_range returned 0 with {left} bytes of source left"
        );
        left -= n;
    }
    assert_eq!(
        (oi, oo),
        (150_000, 100_010),
        "offsets advanced by the bytes copied"
    );
    let mut want = b"0123456789".to_vec();
    want.extend_from_slice(&data[50_000..150_000]);
    assert_bytes_eq(
        &ok!(fs::read(m.join("dst"))),
        &want,
        "destination after copy_file_range",
    );
    assert_bytes_eq(&ok!(fs::read(m.join("src"))), &data, "source unchanged");
    // At or past the source's end: nothing copied.
    let (mut oi, mut oo) = (300_000i64, 0i64);
    assert_eq!(
        ok!(sys::copy_file_range(&src, &mut oi, &dst, &mut oo, 100)),
        0
    );
    // Overlapping ranges in one file are refused.
    let (mut oi, mut oo) = (0i64, 10i64);
    assert_errno!(
        sys::copy_file_range(&src, &mut oi, &src, &mut oo, 1000),
        libc::EINVAL,
        "overlapping copy in one file"
    );
    // Non-overlapping copy within one file works.
    let (mut oi, mut oo) = (0i64, 400_000i64);
    let n = ok!(sys::copy_file_range(&src, &mut oi, &src, &mut oo, 1000));
    assert!(n > 0);
    assert_bytes_eq(
        &ok!(sys::pread_full(&src, 400_000, n)),
        &data[..n],
        "copy within one file",
    );
    // A write-only source or a read-only destination.
    let ro = ok!(File::open(m.join("dst")));
    let (mut oi, mut oo) = (0i64, 0i64);
    assert_errno!(
        sys::copy_file_range(&src, &mut oi, &ro, &mut oo, 10),
        libc::EBADF,
        "read-only destination"
    );
}
