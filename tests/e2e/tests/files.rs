//! Regular files: create flags, reads and writes at any offset, sparse files, truncate,
//! unlinking open files, fsync, O_TMPFILE, name lengths.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::time::Duration;

use memofs_e2e::checks::{eventually, not_kernel_backed, settled};
use memofs_e2e::{assert_bytes_eq, assert_errno, ok, pattern, require_mount, skip, sys, Mount};

macro_rules! need_mount {
    () => {{
        require_mount!();
        Mount::mem(&["size=256m"])
    }};
}

#[test]
fn create_write_read_back() {
    let m = need_mount!();
    let p = m.join("f");
    let data = pattern(1, 300_000);
    ok!(fs::write(&p, &data));
    assert_bytes_eq(&ok!(fs::read(&p)), &data, "read back");
    let md = ok!(fs::metadata(&p));
    assert!(md.is_file());
    assert_eq!(md.len(), data.len() as u64);
    assert_eq!(md.nlink(), 1);
    // Overwrite a part in the middle.
    let f = ok!(OpenOptions::new().write(true).open(&p));
    ok!(f.write_all_at(b"HELLO", 1000));
    drop(f);
    let mut want = data.clone();
    want[1000..1005].copy_from_slice(b"HELLO");
    assert_bytes_eq(&ok!(fs::read(&p)), &want, "after overwrite");
}

#[test]
fn create_mode_respects_umask_and_excl() {
    let m = need_mount!();
    let p = m.join("x");
    let f = ok!(sys::open(
        &p,
        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
        0o640
    ));
    drop(f);
    assert_eq!(ok!(fs::metadata(&p)).mode() & 0o7777, 0o640 & !sys::umask());
    assert_errno!(
        sys::open(&p, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600),
        libc::EEXIST
    );
    // O_CREAT without O_EXCL opens the existing file and keeps its mode.
    drop(ok!(sys::open(&p, libc::O_CREAT | libc::O_WRONLY, 0o600)));
    assert_eq!(ok!(fs::metadata(&p)).mode() & 0o7777, 0o640 & !sys::umask());
    // O_EXCL also fails on a dangling symlink, and does not create its target.
    ok!(std::os::unix::fs::symlink("nowhere", m.join("dangling")));
    assert_errno!(
        sys::open(
            m.join("dangling"),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o600
        ),
        libc::EEXIST
    );
    assert!(!m.join("nowhere").exists());
    // Opening a missing file without O_CREAT.
    assert_errno!(File::open(m.join("missing")), libc::ENOENT);
}

#[test]
fn o_trunc_and_o_append() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b"0123456789"));
    drop(ok!(OpenOptions::new().write(true).truncate(true).open(&p)));
    assert_eq!(ok!(fs::metadata(&p)).len(), 0, "O_TRUNC");
    assert_eq!(ok!(fs::read(&p)), b"");

    ok!(fs::write(&p, b"abc"));
    let mut f = ok!(OpenOptions::new().append(true).open(&p));
    ok!(f.write_all(b"def"));
    ok!(f.seek(SeekFrom::Start(0)));
    ok!(f.write_all(b"ghi"));
    drop(f);
    assert_eq!(
        ok!(fs::read(&p)),
        b"abcdefghi",
        "O_APPEND writes go to the end whatever the offset"
    );

    // O_APPEND also applies when another descriptor made the file grow.
    let mut a = ok!(OpenOptions::new().append(true).open(&p));
    let b = ok!(OpenOptions::new().write(true).open(&p));
    ok!(b.write_all_at(b"0123456789ABCDEF", 0));
    ok!(a.write_all(b"!"));
    drop((a, b));
    assert_eq!(ok!(fs::read(&p)), b"0123456789ABCDEF!");

    // O_TRUNC on a read-only open of an empty file is fine; on a non-empty file it truncates.
    drop(ok!(sys::open(&p, libc::O_RDONLY | libc::O_TRUNC, 0)));
    assert_eq!(
        ok!(fs::metadata(&p)).len(),
        0,
        "O_RDONLY|O_TRUNC truncates (Linux)"
    );
}

#[test]
fn sparse_files_read_zeros() {
    let m = need_mount!();
    let p = m.join("sparse");
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&p));
    ok!(f.write_all_at(b"end", 1_000_000));
    assert_eq!(ok!(f.metadata()).len(), 1_000_003);
    let all = ok!(sys::pread_full(&f, 0, 2_000_000));
    assert_eq!(all.len(), 1_000_003);
    assert!(
        all[..1_000_000].iter().all(|&b| b == 0),
        "hole reads as zeros"
    );
    assert_eq!(&all[1_000_000..], b"end");
    // Reading at and past the end returns nothing.
    assert_eq!(ok!(sys::pread_full(&f, 1_000_003, 10)), b"");
    assert_eq!(ok!(sys::pread_full(&f, 5_000_000, 10)), b"");
    // Unaligned writes into the hole leave zeros around them.
    ok!(f.write_all_at(b"mid", 4095));
    let around = ok!(sys::pread_full(&f, 4090, 12));
    assert_eq!(around, [0, 0, 0, 0, 0, b'm', b'i', b'd', 0, 0, 0, 0]);
}

#[test]
fn huge_sparse_offsets() {
    // A file far larger than size= is fine as long as little of it is written, as on tmpfs.
    let m = need_mount!();
    let p = m.join("huge");
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&p));
    let off = 5u64 << 30; // beyond 4 GiB and beyond size=256m
    ok!(f.write_all_at(b"far", off));
    assert_eq!(ok!(f.metadata()).len(), off + 3);
    assert_eq!(ok!(sys::pread_full(&f, off - 2, 5)), b"\0\0far");
    assert_eq!(ok!(sys::pread_full(&f, 3 << 30, 4096)), vec![0u8; 4096]);
    ok!(f.set_len(1 << 40));
    assert_eq!(ok!(fs::metadata(&p)).len(), 1 << 40);
    assert_eq!(ok!(sys::pread_full(&f, (1 << 40) - 10, 100)), vec![0u8; 10]);
}

#[test]
fn truncate_up_and_down() {
    let m = need_mount!();
    let p = m.join("t");
    let data = pattern(2, 20_000);
    ok!(fs::write(&p, &data));
    ok!(sys::truncate(&p, 5000));
    assert_bytes_eq(&ok!(fs::read(&p)), &data[..5000], "after truncate down");
    // Growing again must not bring the old bytes back.
    ok!(sys::truncate(&p, 20_000));
    let got = ok!(fs::read(&p));
    assert_eq!(got.len(), 20_000);
    assert_bytes_eq(&got[..5000], &data[..5000], "kept part");
    assert!(
        got[5000..].iter().all(|&b| b == 0),
        "bytes past the old truncation point read zeros"
    );
    // Truncate within a page through an open descriptor (ftruncate), then extend by writing.
    let f = ok!(OpenOptions::new().read(true).write(true).open(&p));
    ok!(f.set_len(10));
    ok!(f.write_all_at(b"X", 100));
    let got = ok!(sys::pread_full(&f, 0, 200));
    assert_eq!(got.len(), 101);
    assert_bytes_eq(&got[..10], &data[..10], "head");
    assert!(
        got[10..100].iter().all(|&b| b == 0),
        "gap after ftruncate+write reads zeros"
    );
    ok!(f.set_len(0));
    assert_eq!(ok!(f.metadata()).len(), 0);
    assert_errno!(sys::truncate(&p, -1), libc::EINVAL);
    assert_errno!(sys::truncate(m.path(), 0), libc::EISDIR);
}

#[test]
fn read_write_at_many_offsets_match_a_model() {
    let m = need_mount!();
    let p = m.join("model");
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&p));
    let mut model: Vec<u8> = Vec::new();
    let mut rng = memofs_e2e::Rng::new(42);
    for i in 0..400 {
        let off = rng.below(600_000) as usize;
        let len = rng.range(1, 70_000) as usize;
        let chunk = pattern(i, len);
        ok!(f.write_all_at(&chunk, off as u64));
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&chunk);
        if i % 7 == 0 {
            let roff = rng.below(model.len() as u64 + 10) as usize;
            let rlen = rng.range(1, 100_000) as usize;
            let got = ok!(sys::pread_full(&f, roff as u64, rlen));
            let want = &model[roff.min(model.len())..(roff + rlen).min(model.len())];
            assert_bytes_eq(
                &got,
                want,
                &format!("pread({roff}, {rlen}) after {i} writes"),
            );
        }
    }
    assert_bytes_eq(&ok!(fs::read(&p)), &model, "whole file");
}

#[test]
fn unlinked_open_file_stays_readable() {
    let m = need_mount!();
    let p = m.join("doomed");
    let data = pattern(3, 100_000);
    ok!(fs::write(&p, &data));
    let mut f = ok!(OpenOptions::new().read(true).write(true).open(&p));
    let other = ok!(File::open(&p));
    ok!(fs::remove_file(&p));
    assert!(!p.exists());
    assert_errno!(fs::metadata(&p), libc::ENOENT);
    let md = ok!(f.metadata());
    assert_eq!(md.nlink(), 0, "fstat of an unlinked file");
    assert_eq!(md.len(), data.len() as u64);
    let mut got = Vec::new();
    ok!(f.read_to_end(&mut got));
    assert_bytes_eq(&got, &data, "read after unlink");
    // Writes and truncates through the descriptor keep working.
    ok!(f.write_all_at(b"tail", 100_000));
    ok!(f.set_len(100_004));
    drop(f);
    assert_bytes_eq(
        &ok!(sys::pread_full(&other, 99_998, 10)),
        &[&data[99_998..], b"tail".as_slice()].concat(),
        "second fd",
    );
    // A new file with the same name is a different file.
    ok!(fs::write(&p, b"new"));
    assert_eq!(ok!(fs::read(&p)), b"new");
    assert_eq!(ok!(sys::pread_full(&other, 0, 3)), &data[..3]);
    assert_ne!(ok!(other.metadata()).ino(), ok!(fs::metadata(&p)).ino());
}

#[test]
fn unlinked_open_file_space_is_released_on_last_close() {
    let m = need_mount!();
    let p = m.join("big");
    let before = ok!(sys::statfs(m.path()));
    ok!(fs::write(&p, vec![7u8; 8 << 20]));
    let f = ok!(File::open(&p));
    ok!(fs::remove_file(&p));
    let held = ok!(sys::statfs(m.path()));
    let bs = sys::block_size(&held);
    assert!(
        before.f_bfree.saturating_sub(held.f_bfree) * bs >= 8 << 20,
        "8 MiB of an unlinked but open file is still accounted for (free before {} after {} blocks)",
        before.f_bfree,
        held.f_bfree
    );
    drop(f);
    // The release on last close may reach the server asynchronously (FUSE RELEASE): poll.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let after = ok!(sys::statfs(m.path()));
        if (before.f_bfree.saturating_sub(after.f_bfree)) * bs < 1 << 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "space of an unlinked file not released after its last close: {} blocks still used",
            before.f_bfree - after.f_bfree
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn fsync_fdatasync_and_dir_fsync() {
    let m = need_mount!();
    let p = m.join("s");
    let mut f = ok!(File::create(&p));
    ok!(f.write_all(b"data"));
    ok!(f.sync_all());
    ok!(f.sync_data());
    let d = ok!(File::open(m.path()));
    ok!(d.sync_all());
    assert_eq!(
        // SAFETY: the descriptor belongs to a live File; the call takes only integers.
        unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&d)) },
        0,
        "syncfs"
    );
    assert_eq!(ok!(fs::read(&p)), b"data");
}

#[test]
fn name_length_limits() {
    let m = need_mount!();
    let n255 = "a".repeat(255);
    let n256 = "b".repeat(256);
    let p = m.join(&n255);
    ok!(fs::write(&p, b"x"), "create a 255-byte name");
    assert_eq!(ok!(fs::read(&p)), b"x");
    assert!(
        ok!(sys::list(m.path())).contains(&n255),
        "255-byte name listed"
    );
    ok!(
        fs::create_dir(m.join("d".repeat(255))),
        "mkdir a 255-byte name"
    );
    ok!(
        fs::rename(&p, m.join("c".repeat(255))),
        "rename to a 255-byte name"
    );
    assert_errno!(
        fs::write(m.join(&n256), b"x"),
        libc::ENAMETOOLONG,
        "create a 256-byte name"
    );
    assert_errno!(
        fs::create_dir(m.join(&n256)),
        libc::ENAMETOOLONG,
        "mkdir a 256-byte name"
    );
    assert_errno!(
        fs::metadata(m.join(&n256)),
        libc::ENAMETOOLONG,
        "stat a 256-byte name"
    );
    assert_errno!(
        fs::rename(m.join("c".repeat(255)), m.join(&n256)),
        libc::ENAMETOOLONG,
        "rename to a 256-byte name"
    );
    assert_errno!(
        std::os::unix::fs::symlink("t", m.join(&n256)),
        libc::ENAMETOOLONG,
        "symlink named 256 bytes"
    );
    // Long names that FUSE would still pass to the server (up to 1024 bytes) are refused too.
    assert_errno!(
        fs::write(m.join("e".repeat(1000)), b"x"),
        libc::ENAMETOOLONG,
        "create a 1000-byte name"
    );
    assert!(
        !ok!(sys::list(m.path())).iter().any(|n| n.len() > 255),
        "nothing over 255 bytes was created"
    );
    // Names may hold any byte but '/' and NUL.
    let odd = std::ffi::OsStr::new(std::str::from_utf8(b"new\nline \x01\x7f").unwrap());
    ok!(fs::write(m.join(odd), b"odd"));
    let raw = std::ffi::OsString::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff\xfe"),
    );
    ok!(fs::write(m.join(&raw), b"bin"));
    assert_eq!(ok!(fs::read(m.join(&raw))), b"bin");
    let names: Vec<_> = ok!(fs::read_dir(m.path()))
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.contains(&raw) && names.iter().any(|n| n == odd),
        "odd names listed: {names:?}"
    );
}

/// Whatever the transport offers, an O_TMPFILE open leaves no name behind.
#[test]
fn o_tmpfile_leaves_no_name() {
    let m = need_mount!();
    match sys::open(m.path(), libc::O_TMPFILE | libc::O_RDWR, 0o600) {
        Ok(_) => {}
        // The transport without FUSE_TMPFILE: the kernel answers EOPNOTSUPP (README).
        Err(e) if m.is_memofs() && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
        Err(e) => panic!("open(O_TMPFILE): {e}"),
    }
    assert_eq!(ok!(sys::list(m.path())), Vec::<String>::new());
}

#[test]
fn o_tmpfile_then_link() {
    let m = need_mount!();
    let f = match sys::open(m.path(), libc::O_TMPFILE | libc::O_RDWR, 0o600) {
        Ok(f) => f,
        Err(e) => panic!("open(O_TMPFILE) on the mount: {e} (tmpfs supports it)"),
    };
    assert_eq!(
        ok!(sys::list(m.path())),
        Vec::<String>::new(),
        "an O_TMPFILE has no name"
    );
    ok!(f.write_all_at(b"anonymous", 0));
    let md = ok!(f.metadata());
    assert_eq!(md.nlink(), 0);
    assert_eq!(md.len(), 9);
    assert_eq!(md.mode() & 0o777, 0o600);
    ok!(sys::link_fd(&f, m.join("named")), "linkat of an O_TMPFILE");
    assert_eq!(ok!(fs::read(m.join("named"))), b"anonymous");
    assert_eq!(ok!(f.metadata()).nlink(), 1);
    assert_eq!(
        ok!(f.metadata()).ino(),
        ok!(fs::metadata(m.join("named"))).ino()
    );
    // With O_EXCL the file may never be linked.
    let g = ok!(sys::open(
        m.path(),
        libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL,
        0o600
    ));
    assert!(
        sys::link_fd(&g, m.join("never")).is_err(),
        "linking an O_TMPFILE|O_EXCL file must fail"
    );
    assert!(!m.join("never").exists());
}

#[test]
fn read_only_and_write_only_descriptors() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b"content"));
    let r = ok!(File::open(&p));
    assert_errno!(r.write_at(b"x", 0), libc::EBADF, "write on an O_RDONLY fd");
    let w = ok!(OpenOptions::new().write(true).open(&p));
    let mut buf = [0u8; 4];
    assert_errno!(
        w.read_at(&mut buf, 0),
        libc::EBADF,
        "read on an O_WRONLY fd"
    );
    // Writing to a directory is refused.
    assert_errno!(OpenOptions::new().write(true).open(m.path()), libc::EISDIR);
    assert_errno!(
        sys::open(m.join("f/x"), libc::O_CREAT | libc::O_WRONLY, 0o644),
        libc::ENOTDIR
    );
    // O_DIRECTORY on a file.
    assert_errno!(
        sys::open(&p, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        libc::ENOTDIR
    );
    // Reading a directory.
    let d = ok!(File::open(m.path()));
    assert_errno!(d.read_at(&mut buf, 0), libc::EISDIR);
}

#[test]
fn permissions_bits_survive_and_exec_works() {
    let m = need_mount!();
    let p = m.join("script.sh");
    ok!(fs::write(&p, b"#!/bin/sh\necho hello-from-memofs\n"));
    ok!(fs::set_permissions(&p, fs::Permissions::from_mode(0o755)));
    assert_eq!(ok!(fs::metadata(&p)).mode() & 0o7777, 0o755);
    // Through the runner that waits out ETXTBSY: another test thread that forks while
    // fs::write's descriptor is open holds a copy of it until its exec.
    let out = memofs_e2e::run(
        p.to_str().expect("utf-8 path"),
        &[],
        None,
        std::time::Duration::from_secs(30),
    );
    assert!(
        out.success(),
        "{}",
        out.describe("exec a script on the mount")
    );
    assert_eq!(out.stdout.trim(), "hello-from-memofs");
    // Without execute permission exec fails with EACCES even for root.
    ok!(fs::set_permissions(&p, fs::Permissions::from_mode(0o644)));
    assert_errno!(
        std::process::Command::new(&p).output(),
        libc::EACCES,
        "exec a 0644 file"
    );
}

#[test]
fn many_small_files() {
    let m = need_mount!();
    for i in 0..500 {
        ok!(fs::write(
            m.join(format!("f{i}")),
            format!("file number {i}")
        ));
    }
    for i in (0..500).step_by(7) {
        assert_eq!(
            ok!(fs::read_to_string(m.join(format!("f{i}")))),
            format!("file number {i}")
        );
    }
    assert_eq!(ok!(sys::list(m.path())).len(), 500);
}

#[test]
fn close_costs_no_round_trip() {
    require_mount!();
    // Neither backend acts on close, so files are opened with FOPEN_NOFLUSH: close(2) sends
    // no FLUSH.
    let m = Mount::memofs(&["writeback=off"]);
    for i in 0..20 {
        let mut f = ok!(File::create(m.join(format!("f{i}"))));
        ok!(f.write_all(b"data"));
        drop(f);
        drop(ok!(File::open(m.join(format!("f{i}")))));
    }
    assert!(settled(&m, "RELEASE") >= 40, "the opens reached the server");
    assert_eq!(settled(&m, "FLUSH"), 0, "close(2) sent FLUSH requests");
    // Under the writeback cache the kernel writes back at close and sends FLUSH whatever
    // the open said, until the server answers ENOSYS once. (Each close of a descriptor
    // flushes, also a copy a child forked by another test thread closes at its exec, so
    // the first closes may send more than one before the answer.)
    let wb = Mount::memofs(&["writeback=on"]);
    let write = |from: usize| {
        for i in from..from + 20 {
            let mut f = ok!(File::create(wb.join(format!("f{i}"))));
            ok!(f.write_all(b"data"));
            ok!(sys::close(f), "close under the writeback cache");
        }
    };
    write(0);
    let flushes = settled(&wb, "FLUSH");
    assert!(flushes >= 1, "writeback cache: FLUSH at close");
    write(20);
    assert_eq!(
        settled(&wb, "FLUSH"),
        flushes,
        "writeback cache: no FLUSH after the first was answered ENOSYS"
    );
    assert!(
        settled(&wb, "WRITE") >= 40,
        "each close wrote its file back"
    );
    for i in 0..40 {
        assert_eq!(ok!(fs::read(wb.join(format!("f{i}")))), b"data");
    }
}

/// Reopening a kernel-backed file reuses the backing registration its last close kept: the
/// data, a truncate made while nothing held it open and an append through a later open are
/// all seen, and an unlinked file's space comes back.
#[test]
fn reopened_files_reuse_their_kept_backing_registration() {
    require_mount!();
    let m = Mount::memofs(&["size=8m"]);
    if let Some(need) = not_kernel_backed(&m) {
        skip!(need, "file data is not kernel-backed on this mount");
    }
    let p = m.join("f");
    let data = pattern(3, 1 << 20);
    ok!(fs::write(&p, &data));
    for _ in 0..5 {
        assert_bytes_eq(&ok!(fs::read(&p)), &data, "reopened");
    }
    // However the RELEASE of one open and the next OPEN interleave (RELEASE is answered
    // after close(2) returns), the file was registered once.
    let registered = settled(&m, "backings_registered");
    assert_eq!(registered, 1, "a file written once and read five times");
    ok!(sys::truncate(&p, 100));
    assert_bytes_eq(&ok!(fs::read(&p)), &data[..100], "truncated while closed");
    ok!(OpenOptions::new()
        .append(true)
        .open(&p)
        .and_then(|mut f| f.write_all(b"tail")));
    let mut want = data[..100].to_vec();
    want.extend_from_slice(b"tail");
    assert_bytes_eq(&ok!(fs::read(&p)), &want, "appended through a reopen");
    // 6 of the 8 MiB, read once more after the write, then unlinked: the space returns
    // (the FORGET that lets the registration go is answered on its own thread).
    let big = m.join("big");
    ok!(fs::write(&big, pattern(4, 6 << 20)));
    ok!(fs::read(&big));
    ok!(fs::remove_file(&big));
    eventually(
        "space of an unlinked file freed",
        Duration::from_secs(10),
        || {
            let st = ok!(sys::statfs(m.path()));
            let free = st.f_bfree * sys::block_size(&st);
            (free >= 6 << 20, free)
        },
    );
    ok!(fs::write(m.join("again"), pattern(5, 6 << 20)));
}

/// A program running from the mount keeps its text: `open(O_RDONLY | O_TRUNC)` of it fails
/// with ETXTBSY (the kernel's answer, which it gives only after OPEN has returned) and the file
/// keeps every byte, through the mount and, for the passthrough backend, on the host.
#[test]
fn a_running_program_is_not_truncated() {
    require_mount!();
    let host = Mount::tmpfs(&[]);
    let mounts = [
        ("mem", Mount::memofs(&[]), None),
        (
            "passthrough",
            Mount::try_memofs_source(host.path(), &[]).unwrap_or_else(|e| panic!("{e}")),
            Some(host.path().to_path_buf()),
        ),
    ];
    let program = ok!(fs::read("/bin/sleep"));
    for (backend, m, source) in &mounts {
        let p = m.join("sleep");
        ok!(fs::write(&p, &program));
        ok!(fs::set_permissions(&p, fs::Permissions::from_mode(0o755)));
        // spawn() returns once the exec has happened; ETXTBSY here is a copy of fs::write's
        // descriptor that a child forked by another test thread holds until its own exec.
        let mut child = None;
        eventually("the copied program starts", Duration::from_secs(10), || {
            match std::process::Command::new(&p).arg("60").spawn() {
                Ok(c) => {
                    child = Some(c);
                    (true, String::new())
                }
                Err(e) => (false, e.to_string()),
            }
        });
        let mut child = child.expect("started");
        let truncating = sys::open(&p, libc::O_RDONLY | libc::O_TRUNC, 0);
        let writing = sys::open(&p, libc::O_WRONLY, 0);
        let _ = child.kill();
        let _ = child.wait();
        assert_errno!(truncating, libc::ETXTBSY, "{backend}: O_RDONLY|O_TRUNC");
        assert_errno!(writing, libc::ETXTBSY, "{backend}: O_WRONLY");
        assert_bytes_eq(
            &ok!(fs::read(&p)),
            &program,
            &format!("{backend}: the mount"),
        );
        if let Some(src) = source {
            assert_bytes_eq(
                &ok!(fs::read(src.join("sleep"))),
                &program,
                &format!("{backend}: the host"),
            );
        }
        // Once the program has ended, the file truncates again.
        eventually(
            "a truncating open after the program ended",
            Duration::from_secs(10),
            || match sys::open(&p, libc::O_RDONLY | libc::O_TRUNC, 0) {
                Ok(_) => (true, String::new()),
                Err(e) => (false, e.to_string()),
            },
        );
        assert_eq!(ok!(fs::metadata(&p)).len(), 0, "{backend}: truncated");
    }
}
