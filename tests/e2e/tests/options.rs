//! What mount options do once mounted: root mode and owner, ro, nosuid/nodev/noexec,
//! sync/dirsync, defaults, and that data stays right under every cache setting.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::process::Command;

use memofs_e2e::skip::Need;
use memofs_e2e::{
    assert_bytes_eq, assert_errno, mountinfo_for, ok, pattern, require_mount, skip, sys, Mount,
};

fn flags(m: &Mount) -> Vec<String> {
    let i = mountinfo_for(m.path()).expect("mountinfo entry");
    i.mount_options
        .split(',')
        .chain(i.super_options.split(','))
        .map(String::from)
        .collect()
}

#[test]
fn defaults_root_directory() {
    require_mount!();
    let m = Mount::mem(&[]);
    let md = ok!(fs::metadata(m.path()));
    assert_eq!(
        md.mode() & 0o7777,
        0o1777,
        "default root mode is 1777 (as tmpfs)"
    );
    assert_eq!(
        (md.uid(), md.gid()),
        (0, 0),
        "root belongs to the mounting user"
    );
    let s = ok!(sys::statfs(m.path()));
    let total = s.f_blocks * sys::block_size(&s);
    let ram = memofs_e2e::checks::mem_total_bytes();
    assert!(
        total.abs_diff(ram / 2) <= ram / 100,
        "default size is 50% of RAM: {total} vs RAM {ram}"
    );
    assert!(!flags(&m).contains(&"ro".to_string()));
}

#[test]
fn mode_uid_gid_of_the_root() {
    require_mount!();
    let m = Mount::mem(&["mode=0710", "uid=123", "gid=456"]);
    let md = ok!(fs::metadata(m.path()));
    assert_eq!(md.mode() & 0o7777, 0o710, "mode=0710");
    assert_eq!((md.uid(), md.gid()), (123, 456), "uid=123,gid=456");
    assert!(md.is_dir());
}

#[test]
fn read_only_mount() {
    require_mount!();
    let m = Mount::mem(&["ro"]);
    assert!(
        flags(&m).contains(&"ro".to_string()),
        "mountinfo shows ro: {:?}",
        flags(&m)
    );
    assert_errno!(
        fs::write(m.join("f"), b"x"),
        libc::EROFS,
        "create on a ro mount"
    );
    assert_errno!(
        fs::create_dir(m.join("d")),
        libc::EROFS,
        "mkdir on a ro mount"
    );
    assert_errno!(
        sys::setxattr(m.path(), "user.x", b"v", 0),
        libc::EROFS,
        "setxattr on a ro mount"
    );
    assert_errno!(
        sys::chmod(m.path(), 0o755),
        libc::EROFS,
        "chmod on a ro mount"
    );
    assert_eq!(ok!(sys::list(m.path())), Vec::<String>::new());
}

#[test]
fn nosuid_nodev_noexec_sync_dirsync_flags() {
    require_mount!();
    let m = Mount::mem(&["nosuid", "nodev", "noexec", "sync", "dirsync"]);
    let f = flags(&m);
    for want in ["nosuid", "nodev", "noexec", "sync", "dirsync"] {
        assert!(f.iter().any(|x| x == want), "mountinfo lacks {want}: {f:?}");
    }
    let p = m.join("script");
    ok!(fs::write(&p, b"#!/bin/sh\necho hi\n"));
    ok!(fs::set_permissions(&p, fs::Permissions::from_mode(0o755)));
    assert_errno!(
        Command::new(&p).output(),
        libc::EACCES,
        "exec on a noexec mount"
    );
    ok!(sys::mknod(
        m.join("null"),
        libc::S_IFCHR | 0o666,
        sys::makedev(1, 3)
    ));
    assert_errno!(
        fs::File::open(m.join("null")),
        libc::EACCES,
        "opening a device node on a nodev mount"
    );
    // Data still flows with sync.
    ok!(fs::write(m.join("s"), b"synchronous"));
    assert_eq!(ok!(fs::read(m.join("s"))), b"synchronous");
}

#[test]
fn exec_and_dev_when_asked() {
    require_mount!();
    let m = Mount::mem(&["exec", "dev", "suid"]);
    let f = flags(&m);
    assert!(!f.iter().any(|x| x == "noexec"), "exec: mountinfo {f:?}");
    assert!(!f.iter().any(|x| x == "nodev"), "dev: mountinfo {f:?}");
    let p = m.join("script");
    ok!(fs::write(&p, b"#!/bin/sh\necho hi\n"));
    ok!(fs::set_permissions(&p, fs::Permissions::from_mode(0o755)));
    // Through the runner that waits out ETXTBSY (a fork elsewhere in the test process may
    // hold fs::write's descriptor for a moment).
    let out = memofs_e2e::run(
        p.to_str().expect("utf-8 path"),
        &[],
        None,
        std::time::Duration::from_secs(30),
    );
    assert!(out.success(), "{}", out.describe("exec on an exec mount"));
    assert_eq!(out.stdout.trim(), "hi");
    ok!(sys::mknod(
        m.join("null"),
        libc::S_IFCHR | 0o666,
        sys::makedev(1, 3)
    ));
    let null = ok!(
        fs::OpenOptions::new().write(true).open(m.join("null")),
        "open a char device on a dev mount"
    );
    ok!(null.write_all_at(b"discarded", 0));
}

/// Overlapping writes and reads through two descriptors plus truncates: the data must be right
/// whatever the caching mode.
fn exercise_data(m: &Mount) {
    let p = m.join("data");
    let a = ok!(fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&p));
    let b = ok!(fs::OpenOptions::new().read(true).write(true).open(&p));
    let mut model = vec![0u8; 0];
    let mut r = memofs_e2e::Rng::new(77);
    for i in 0..300u64 {
        let off = r.below(1 << 20) as usize;
        let len = r.range(1, 100_000) as usize;
        let data = pattern(i, len);
        let f = if i % 2 == 0 { &a } else { &b };
        ok!(f.write_all_at(&data, off as u64));
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        if i % 25 == 24 {
            let cut = r.below(model.len() as u64 + 1) as usize;
            ok!(b.set_len(cut as u64));
            model.truncate(cut);
        }
        if i % 10 == 0 {
            let other = if i % 2 == 0 { &b } else { &a };
            let got = ok!(sys::pread_full(other, off as u64, len));
            let end = (off + len).min(model.len());
            assert_bytes_eq(
                &got,
                &model[off.min(end)..end],
                &format!(
                    "{:?}: read back via the other descriptor at step {i}",
                    m.options()
                ),
            );
        }
    }
    drop((a, b));
    assert_bytes_eq(
        &ok!(fs::read(&p)),
        &model,
        &format!("{:?}: whole file", m.options()),
    );
    assert_eq!(ok!(fs::metadata(&p)).len(), model.len() as u64);
}

#[test]
fn data_is_right_under_every_cache_mode() {
    require_mount!();
    for opts in [
        &["cache=never"][..],
        &["cache=auto"],
        &["cache=always"],
        &["cache=metadata"],
        &["writeback=on"],
        &["direct_io"],
        &["direct_io=large", "passthrough=off"],
        &["threads=1"],
        &["entry_timeout=0", "attr_timeout=0", "negative_timeout=0"],
    ] {
        let m = Mount::mem(opts);
        exercise_data(&m);
    }
}

/// `cache=metadata` (virtiofsd's): names and attributes kept as under `always`, file data
/// not at all: each read of a file served through the server reaches it.
#[test]
fn cache_metadata_keeps_attributes_and_no_file_data() {
    require_mount!();
    let m = Mount::mem(&["cache=metadata", "passthrough=off"]);
    ok!(fs::write(m.join("f"), vec![7u8; 8192]));
    ok!(fs::metadata(m.join("f")));
    let counter = |name| memofs_e2e::checks::settled(&m, name);
    let (reads, getattrs) = (counter("READ"), counter("GETATTR"));
    for _ in 0..5 {
        assert_eq!(ok!(fs::read(m.join("f"))).len(), 8192);
        ok!(fs::metadata(m.join("f")));
    }
    assert!(
        counter("READ") >= reads + 5,
        "every read reached the server"
    );
    assert_eq!(counter("GETATTR"), getattrs, "attributes were kept");
}

/// `direct_io=large` (the server's page store, as without root): a read-only open of a
/// large file reads each `read(2)` as one READ, straight from the server, even what a
/// cached writer still holds dirty; its shared mappings work; writes stay cached and move
/// the file's times.
#[test]
fn direct_io_large_reads_each_read_as_one_request() {
    require_mount!();
    let m = Mount::mem(&["direct_io=large", "passthrough=off"]);
    let p = m.join("big");
    let data = pattern(7, 4 << 20);
    ok!(fs::write(&p, &data));
    let counter = |name| memofs_e2e::checks::settled(&m, name);
    let reads = counter("READ");
    let f = ok!(fs::File::open(&p));
    // Page-aligned, as dd's: an unaligned MiB spans 257 pages, one more than a READ holds.
    #[derive(Clone, Copy)]
    #[repr(C, align(4096))]
    struct Page([u8; 4096]);
    let mut pages = vec![Page([0; 4096]); 256];
    // SAFETY: 256 contiguous 4096-byte pages are 1 MiB of initialised bytes, borrowed once.
    let buf: &mut [u8] =
        unsafe { std::slice::from_raw_parts_mut(pages.as_mut_ptr().cast(), 1 << 20) };
    for i in 0..4u64 {
        ok!(f.read_exact_at(buf, i << 20));
        assert_bytes_eq(buf, &data[(i as usize) << 20..][..1 << 20], "direct read");
    }
    // Cached, the file just written would be read from the page cache: no READ at all.
    assert_eq!(counter("READ"), reads + 4, "one READ per read(2)");

    // A shared mapping of the direct open.
    let len = data.len();
    // SAFETY: maps `len` bytes of an open file read-only; unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: the mapping is `len` readable bytes, alive until munmap.
    let mapped = unsafe { std::slice::from_raw_parts(map as *const u8, len) }.to_vec();
    // SAFETY: `map` came from mmap with this length.
    unsafe { libc::munmap(map, len) };
    assert_bytes_eq(&mapped, &data, "shared mapping");

    // What a cached writer has not written back yet, a direct read sees.
    let w = ok!(fs::OpenOptions::new().write(true).open(&p));
    ok!(w.write_all_at(b"dirty", 3 << 20));
    let mut five = [0u8; 5];
    ok!(f.read_exact_at(&mut five, 3 << 20));
    assert_eq!(&five, b"dirty");

    // The writer's writes move the times (they go through the kernel's cache).
    let old = filetime_past(&p);
    ok!(w.write_all_at(b"again", 0));
    let md = ok!(fs::metadata(&p));
    assert!(md.mtime() > old && md.ctime() > old, "times moved");

    // A small file is read through the page cache: read twice, one READ at most.
    ok!(fs::write(m.join("small"), b"small"));
    let reads = counter("READ");
    for _ in 0..2 {
        assert_eq!(ok!(fs::read(m.join("small"))), b"small");
    }
    assert!(counter("READ") <= reads + 1, "small files stay cached");
}

/// Sets `p`'s times an hour back; returns that time in seconds.
fn filetime_past(p: &std::path::Path) -> i64 {
    let past = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
        - 3600;
    let f = ok!(fs::File::options().write(true).open(p));
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(past as u64);
    ok!(f.set_times(fs::FileTimes::new().set_modified(t).set_accessed(t)));
    past
}

#[test]
fn append_under_every_cache_mode() {
    require_mount!();
    for opts in [
        &["cache=never"][..],
        &["cache=always"],
        &["writeback=on"],
        &["direct_io"],
    ] {
        let m = Mount::mem(opts);
        let p = m.join("log");
        ok!(fs::write(&p, b"head"));
        let mut want = b"head".to_vec();
        let f = ok!(fs::OpenOptions::new().append(true).open(&p));
        for i in 0..50u64 {
            let chunk = pattern(i, 1 + (i as usize * 997) % 9000);
            // pwrite on an O_APPEND descriptor appends on Linux, whatever the offset.
            ok!(f.write_all_at(&chunk, 3));
            want.extend_from_slice(&chunk);
        }
        drop(f);
        assert_bytes_eq(
            &ok!(fs::read(&p)),
            &want,
            &format!("O_APPEND writes with {opts:?}"),
        );
    }
}

#[test]
fn size_limit_applies_with_writeback() {
    require_mount!();
    let m = Mount::mem(&["size=1m", "writeback=on"]);
    // The ENOSPC may come from write() or, with the writeback cache, only from fsync() on the
    // same descriptor; it must come from one of them.
    let mut f = ok!(fs::File::create(m.join("big")));
    let res = std::io::Write::write_all(&mut f, &vec![1u8; 2 << 20]).and_then(|_| f.sync_all());
    assert_errno!(
        res,
        libc::ENOSPC,
        "writing 2 MiB into size=1m with the writeback cache"
    );
}

/// Large folios the kernel handed to shmem (tmpfs) files so far, attempts that fell back
/// included, from the per-size counters (Linux 6.11+); `None` without them.
fn shmem_large_folio_attempts() -> Option<u64> {
    let dir = fs::read_dir("/sys/kernel/mm/transparent_hugepage").ok()?;
    let mut total = None;
    for e in dir.flatten() {
        for counter in ["shmem_alloc", "shmem_fallback"] {
            let p = e.path().join("stats").join(counter);
            if let Ok(v) = fs::read_to_string(&p) {
                *total.get_or_insert(0) += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    total
}

#[test]
fn huge_reaches_the_kernel_data_store() {
    require_mount!();
    if shmem_large_folio_attempts().is_none() {
        skip!(
            Kernel("shmem_folio_stats"),
            "this kernel has no per-size shmem folio counters"
        );
    }
    let m = Mount::memofs(&["huge=within_size"]);
    if let Some(need) = memofs_e2e::checks::not_kernel_backed(&m) {
        skip!(need, "file data is not kernel-backed on this mount");
    }
    let doc = memofs_e2e::checks::stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(doc.contains(r#""huge":"within_size""#), "{doc}");
    let before = shmem_large_folio_attempts().unwrap_or(0);
    let data = pattern(7, 8 << 20);
    let f = ok!(fs::File::create(m.join("big")));
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        ok!(f.write_all_at(chunk, (i as u64) << 20));
    }
    ok!(f.sync_all());
    let after = shmem_large_folio_attempts().unwrap_or(0);
    assert!(
        after > before,
        "1 MiB writes to a huge=within_size mount asked for no large folio ({before} → {after})"
    );
    assert_bytes_eq(&ok!(fs::read(m.join("big"))), &data, "data in large folios");
}

/// Busy polls (hits and misses) of a mount after 2000 back-to-back GETATTRs.
fn busy_polls_after_getattrs(opts: &[&str]) -> (u64, u64) {
    let m = Mount::memofs(opts);
    ok!(fs::write(m.join("f"), b"x"));
    for _ in 0..2000 {
        // attr_timeout=0: every stat is a GETATTR round trip.
        ok!(fs::metadata(m.join("f")));
    }
    let hits = memofs_e2e::checks::settled(&m, "busy_poll_hits");
    (hits, memofs_e2e::checks::counter(&m, "busy_poll_misses"))
}

#[test]
fn busy_poll_catches_back_to_back_requests_and_zero_turns_it_off() {
    require_mount!();
    // One caller whose next request follows each answer within microseconds: the reading
    // thread's poll sees most of them arrive (not all: a preempted caller misses a window).
    // One thread (more would park and rejoin by the machine's CPU count) and a window wide
    // enough for a loaded machine: this checks the wiring, not the default window. Busy
    // polling is the /dev/fuse channel's, so the mount uses it whatever the suite's options.
    let (hits, misses) = busy_polls_after_getattrs(&[
        "attr_timeout=0",
        "threads=1",
        "busy_poll=1000",
        "io_uring=off",
    ]);
    assert!(
        hits > 100,
        "2000 back-to-back GETATTRs: busy polling saw {hits} arrive ({misses} windows missed)"
    );
    let (hits, misses) =
        busy_polls_after_getattrs(&["attr_timeout=0", "busy_poll=0", "io_uring=off"]);
    assert_eq!((hits, misses), (0, 0), "busy_poll=0 still polled");
}

#[test]
fn ring_queues_poll_for_back_to_back_requests_too() {
    require_mount!();
    // The suite's io_uring run mounts with io_uring=on; in the others requests come through
    // /dev/fuse, which the test above covers.
    let probe = Mount::memofs(&[]);
    let doc = memofs_e2e::checks::stats_json(probe.path()).unwrap_or_else(|e| panic!("{e}"));
    drop(probe);
    if !doc.contains(r#""transport":"io_uring"#) {
        skip!(
            Need::Config("io_uring_off"),
            "requests come through /dev/fuse in this run"
        );
    }
    // A queue's thread polls its completion queue after each answer while requests keep
    // coming: most of 2000 back-to-back GETATTRs arrive during a poll.
    let (hits, misses) = busy_polls_after_getattrs(&["attr_timeout=0", "busy_poll=1000"]);
    assert!(
        hits > 100,
        "2000 back-to-back GETATTRs through a ring: polling saw {hits} arrive ({misses} windows missed)"
    );
    let (hits, misses) = busy_polls_after_getattrs(&["attr_timeout=0", "busy_poll=0"]);
    assert_eq!((hits, misses), (0, 0), "busy_poll=0 still polled a ring");
}

#[test]
fn cpu_latency_is_asked_for_while_requests_stream_and_dropped_after() {
    require_mount!();
    if fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .is_err()
    {
        // Without the device (or root to open it), `on` refuses to mount and says why.
        match Mount::try_memofs(&["cpu_latency=on"]) {
            Ok(_) => panic!("cpu_latency=on mounted without /dev/cpu_dma_latency"),
            Err(e) => assert!(e.contains("/dev/cpu_dma_latency"), "{e}"),
        }
        skip!(
            Need::Kernel("cpu_dma_latency"),
            "/dev/cpu_dma_latency cannot be opened here"
        );
    }
    // Back-to-back GETATTRs (attr_timeout=0) until the mount has set the request: its
    // governor thread writes it a moment after the stream begins, and counts it once written.
    let m = Mount::memofs(&["cpu_latency=on", "attr_timeout=0"]);
    ok!(fs::write(m.join("f"), b"x"));
    let counter = |name| memofs_e2e::checks::counter(&m, name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while counter("cpu_latency_holds") == 0 {
        for _ in 0..50 {
            ok!(fs::metadata(m.join("f")));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a stream of GETATTRs never set the CPU latency request"
        );
    }
    // Quiet now (whatever `memofs stats` asks of the mount comes tens of milliseconds
    // apart): the request is dropped within two windows.
    while counter("cpu_latency_drops") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the CPU latency request was never dropped"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let off = Mount::memofs(&["cpu_latency=off"]);
    let doc = memofs_e2e::checks::stats_json(off.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(doc.contains("not asked (cpu_latency=off)"), "{doc}");
}

/// `xattr=off`: every xattr call through the mount fails `EOPNOTSUPP`, and once the server
/// has answered a kind of xattr request `ENOSYS` the kernel asks no more, not even for the
/// `security.capability` it looks up before each chown (and a file's first write), which a
/// default mount answers once per file.
#[test]
fn xattr_off_refuses_xattrs_and_spares_the_capability_lookups() {
    require_mount!();
    for (opts, off) in [(&["xattr=off"][..], true), (&[][..], false)] {
        let m = Mount::mem(opts);
        for i in 0..20 {
            let p = m.join(format!("f{i}"));
            fs::write(&p, b"x").unwrap();
            sys::chown(&p, 0, 0).unwrap();
        }
        let gets = memofs_e2e::checks::settled(&m, "GETXATTR");
        if !off {
            assert!(gets >= 20, "{opts:?}: 20 chowns sent {gets} GETXATTRs");
            continue;
        }
        assert!(gets <= 1, "{opts:?}: 20 chowns sent {gets} GETXATTRs");
        let f = m.join("f0");
        assert_errno!(sys::getxattr(&f, "user.a"), libc::EOPNOTSUPP, "getxattr");
        assert_errno!(
            sys::setxattr(&f, "user.a", b"v", 0),
            libc::EOPNOTSUPP,
            "setxattr"
        );
        assert_errno!(sys::listxattr(&f), libc::EOPNOTSUPP, "listxattr");
        assert_errno!(
            sys::removexattr(&f, "user.a"),
            libc::EOPNOTSUPP,
            "removexattr"
        );
        for _ in 0..10 {
            let _ = sys::getxattr(&f, "user.a");
            let _ = sys::setxattr(&f, "user.a", b"v", 0);
        }
        for op in ["GETXATTR", "SETXATTR", "LISTXATTR", "REMOVEXATTR"] {
            let n = memofs_e2e::checks::settled(&m, op);
            assert!(
                n <= 1,
                "{op}: {n} requests after the kernel was told ENOSYS"
            );
        }
    }
}
