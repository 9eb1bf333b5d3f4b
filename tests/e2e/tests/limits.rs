//! statfs, and the `size=` and `nr_inodes=` limits: ENOSPC with earlier data intact.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{symlink, FileExt};
use std::time::Duration;

use memofs_e2e::checks::{eventually, mem_total_bytes, rss_bytes};
use memofs_e2e::{
    assert_bytes_eq, assert_errno, ok, pattern, require_mount, sys, Mount, FUSE_SUPER_MAGIC,
    TMPFS_MAGIC,
};

fn used_bytes(m: &Mount, before: &libc::statfs) -> u64 {
    let now = ok!(sys::statfs(m.path()));
    before.f_bfree.saturating_sub(now.f_bfree) * sys::block_size(&now)
}

#[test]
fn statfs_reflects_size_and_nr_inodes() {
    require_mount!();
    let m = Mount::mem(&["size=64m", "nr_inodes=1000"]);
    let s = ok!(sys::statfs(m.path()));
    let want_type = if m.is_memofs() {
        FUSE_SUPER_MAGIC
    } else {
        TMPFS_MAGIC
    };
    assert_eq!(s.f_type as i64, want_type, "f_type {:#x}", s.f_type);
    let bs = sys::block_size(&s);
    let total = s.f_blocks * bs;
    assert!(
        total.abs_diff(64 << 20) < bs,
        "f_blocks×f_frsize = {total}, want 64 MiB"
    );
    assert!(
        s.f_bfree * bs + (64 << 10) >= total,
        "a new mount is (nearly) empty: bfree {} of {}",
        s.f_bfree,
        s.f_blocks
    );
    assert_eq!(s.f_bavail, s.f_bfree, "no reserved blocks");
    assert_eq!(s.f_files, 1000, "f_files is nr_inodes");
    assert_eq!(s.f_ffree, 999, "the root directory takes one inode");
    assert_eq!(s.f_namelen, 255);
    // Usage follows writes and deletes.
    ok!(fs::write(m.join("four"), vec![1u8; 4 << 20]));
    let used = used_bytes(&m, &s);
    assert!(
        (4 << 20..(4 << 20) + (64 << 10)).contains(&used),
        "4 MiB written, statfs shows {used} bytes used"
    );
    for i in 0..10 {
        ok!(fs::write(m.join(format!("e{i}")), b""));
    }
    let s2 = ok!(sys::statfs(m.path()));
    assert_eq!(s.f_ffree - s2.f_ffree, 11, "11 files take 11 inodes");
    ok!(fs::remove_file(m.join("four")));
    for i in 0..10 {
        ok!(fs::remove_file(m.join(format!("e{i}"))));
    }
    // The release may reach the server a moment after the last close (FUSE RELEASE/FORGET are
    // asynchronous): poll for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s3 = ok!(sys::statfs(m.path()));
        if (s3.f_bfree, s3.f_ffree) == (s.f_bfree, s.f_ffree) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "space and inodes not given back 10 s after deleting: (bfree, ffree) = {:?}, want {:?}",
            (s3.f_bfree, s3.f_ffree),
            (s.f_bfree, s.f_ffree)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn size_suffixes_and_percent() {
    require_mount!();
    for (opt, bytes) in [
        ("size=1g", 1u64 << 30),
        ("size=524288k", 512 << 20),
        ("size=10%", mem_total_bytes() / 10),
    ] {
        let m = Mount::mem(&[opt]);
        let s = ok!(sys::statfs(m.path()));
        let total = s.f_blocks * sys::block_size(&s);
        let tolerance = (bytes / 1000).max(sys::block_size(&s));
        assert!(
            total.abs_diff(bytes) <= tolerance,
            "{opt}: statfs total {total} bytes, want about {bytes}"
        );
    }
}

/// Write `chunk`-sized pieces to one file until ENOSPC; returns the bytes acknowledged.
fn fill_file(m: &Mount, name: &str, chunk: usize, seed: u64) -> (Vec<u8>, std::io::Error) {
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(m.join(name)));
    let mut acked = Vec::new();
    for i in 0.. {
        let piece = pattern(seed + i, chunk);
        match f.write_at(&piece, acked.len() as u64) {
            Ok(n) => acked.extend_from_slice(&piece[..n]),
            Err(e) => return (acked, e),
        }
        assert!(
            acked.len() < 64 << 20,
            "no ENOSPC after 64 MiB on a size-limited mount"
        );
    }
    unreachable!()
}

#[test]
fn enospc_when_size_is_reached_keeps_earlier_data() {
    require_mount!();
    // Write-time ENOSPC, as on tmpfs: the writeback cache defers it to fsync and close
    // (`enospc_under_the_writeback_cache_reaches_every_writer`).
    let m = Mount::mem(&["size=1m", "writeback=off"]);
    let (acked, err) = fill_file(&m, "fill", 64 * 1024 + 17, 100);
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "the write past size=1m failed with {err}, want ENOSPC"
    );
    assert!(
        (512 << 10..=1 << 20).contains(&acked.len()),
        "size=1m accepted {} bytes before ENOSPC (want between 512 KiB and 1 MiB)",
        acked.len()
    );
    assert_eq!(
        ok!(fs::metadata(m.join("fill"))).len(),
        acked.len() as u64,
        "size equals the acknowledged bytes"
    );
    assert_bytes_eq(
        &ok!(fs::read(m.join("fill"))),
        &acked,
        "content after ENOSPC",
    );
    // Further writes keep failing; small files cannot be created with data either.
    assert!(
        fs::write(m.join("more"), vec![1u8; 256 << 10]).is_err(),
        "a 256 KiB write into a full mount must fail"
    );
    assert_bytes_eq(
        &ok!(fs::read(m.join("fill"))),
        &acked,
        "content after the second failure",
    );
    // fallocate beyond the space left fails and does not change the size.
    let g = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(m.join("falloc")));
    assert_errno!(
        sys::fallocate(&g, 0, 0, 2 << 20),
        libc::ENOSPC,
        "fallocate of 2 MiB on size=1m"
    );
    assert_eq!(
        ok!(g.metadata()).len(),
        0,
        "a failed fallocate leaves the size alone"
    );
    drop(g);
    // Deleting frees the space, once the kernel forgets the inodes. It queues each FORGET
    // before unlink(2) returns, but when requests are queued too it may send up to eight
    // of them first (Linux's `forget_batch`), so a write right after the unlink can still
    // find the space taken. Wait for the FORGETs through the control socket, which sends
    // no FUSE request that could go first.
    ok!(fs::remove_file(m.join("fill")));
    let _ = fs::remove_file(m.join("more"));
    eventually(
        "the deleted files' space is freed",
        Duration::from_secs(5),
        || {
            let used = memofs_e2e::checks::stats_usage(m.path()).map(|u| u.bytes_used);
            (used.as_ref().is_ok_and(|&u| u < 300 << 10), used)
        },
    );
    let again = pattern(7, 700 << 10);
    ok!(
        fs::write(m.join("again"), &again),
        "writing 700 KiB after freeing the space"
    );
    assert_bytes_eq(
        &ok!(fs::read(m.join("again"))),
        &again,
        "content written after freeing",
    );
}

/// Data accepted before `ENOSPC` on `m`: one file written in 64 KiB pieces; after it is
/// deleted and its space back, 4 KiB pages written 256 KiB apart into a file of 1 GiB
/// (sparse: under `huge=within_size` each takes a large folio); then files of 5 000 bytes.
fn accepted_before_enospc(m: &Mount) -> (usize, usize, usize) {
    let (acked, err) = fill_file(m, "big", 64 << 10, 3);
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let space_back = |name: &str| {
        ok!(fs::remove_file(m.join(name)));
        eventually("the space back", Duration::from_secs(5), || {
            let s = ok!(sys::statfs(m.path()));
            (s.f_bfree * 10 >= s.f_blocks * 9, (s.f_bfree, s.f_blocks))
        });
    };
    space_back("big");
    let sparse = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(m.join("sparse")));
    ok!(sparse.set_len(1 << 30));
    let mut pages = 0;
    loop {
        match sparse.write_at(&[7u8; 4096], pages as u64 * (256 << 10)) {
            Ok(4096) => pages += 1,
            Ok(n) => panic!("a short write of {n} bytes"),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        assert!(pages < 4096, "no ENOSPC in a 1 GiB file on a size=8m mount");
    }
    drop(sparse);
    space_back("sparse");
    let mut files = 0;
    loop {
        match fs::write(m.join(format!("s{files}")), pattern(files as u64, 5000)) {
            Ok(()) => files += 1,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                return (acked.len(), pages, files);
            }
        }
        assert!(files < 100_000, "no ENOSPC on a size-limited mount");
    }
}

/// `size=` holds at the same amount of data as on a kernel tmpfs of the same `size=` and
/// `huge=` (large folios count whole, as tmpfs counts them).
#[test]
fn enospc_comes_at_the_data_a_tmpfs_of_the_same_settings_holds() {
    require_mount!();
    for huge in ["huge=never", "huge=within_size"] {
        let m = Mount::mem(&["size=8m", huge, "writeback=off"]);
        if huge != "huge=never" {
            if let Some(need) = memofs_e2e::checks::not_kernel_backed(&m) {
                memofs_e2e::skip!(need, "huge= applies to kernel-backed data only");
            }
        }
        let t = Mount::tmpfs(&["size=8m", huge]);
        let (ours, theirs) = (accepted_before_enospc(&m), accepted_before_enospc(&t));
        eprintln!("{huge}: memofs {ours:?}, tmpfs {theirs:?}");
        let close = |a: usize, b: usize, slack: usize| a.abs_diff(b) <= slack;
        assert!(
            close(ours.0, theirs.0, 64 << 10)
                && close(ours.1, theirs.1, 1)
                && close(ours.2, theirs.2, 16),
            "{huge}: memofs took {} bytes in one file, {} sparse pages and {} files of \
             5 000 bytes; a tmpfs of the same settings {}, {} and {}",
            ours.0,
            ours.1,
            ours.2,
            theirs.0,
            theirs.1,
            theirs.2
        );
    }
}

#[test]
fn enospc_across_many_files() {
    require_mount!();
    let m = Mount::mem(&["size=2m", "writeback=off"]);
    let mut written = Vec::new();
    let mut failed = None;
    for i in 0..1000u64 {
        let data = pattern(i, 10_000);
        match fs::write(m.join(format!("f{i}")), &data) {
            Ok(()) => written.push((i, data)),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("2 MiB filled with 10 kB files without ENOSPC");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    assert!(
        written.len() >= 100,
        "only {} files of 10 kB fit in size=2m",
        written.len()
    );
    for (i, data) in &written {
        assert_bytes_eq(
            &ok!(fs::read(m.join(format!("f{i}")))),
            data,
            &format!("file f{i}"),
        );
    }
    for (i, _) in &written {
        ok!(fs::remove_file(m.join(format!("f{i}"))));
    }
    // The partially written file that hit ENOSPC may remain; everything else comes back
    // once the kernel has sent the FORGETs (asynchronous: with io_uring they even travel on
    // another channel than the statfs).
    eventually("space back after deleting", Duration::from_secs(5), || {
        let s = ok!(sys::statfs(m.path()));
        let bs = sys::block_size(&s);
        (
            s.f_bfree * bs + (64 << 10) >= s.f_blocks * bs,
            (s.f_bfree, s.f_blocks),
        )
    });
}

/// Under the writeback cache (the page store's default) `write(2)` only fills the kernel's
/// cache; a full mount's `ENOSPC` comes when the kernel writes back, and reaches the writer
/// at its `fsync` or `close`. Eight writers of 3 MiB each fill a 12 MiB mount: some must
/// fail, every one that saw no error must find all its data stored, and no reader ever sees
/// bytes the server did not store (the pages that failed are dropped from the kernel's
/// cache, so a read served by the cache and one served by the server agree).
#[test]
fn enospc_under_the_writeback_cache_reaches_every_writer() {
    require_mount!();
    // noatime: the kernel keeps a file's pages across opens, so only the server's dropping
    // them makes the failed pages go.
    let m = Mount::memofs(&["size=12m", "passthrough=off", "noatime"]);
    if !memofs_e2e::checks::writeback(&m) {
        memofs_e2e::skip!(
            memofs_e2e::skip::Need::Config("writeback_cache"),
            "the kernel did not grant the writeback cache"
        );
    }
    const LEN: usize = 3 << 20;
    let results: Vec<(usize, Result<(), String>)> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let p = m.join(format!("w{w}"));
                s.spawn(move || {
                    let data = pattern(1000 + w as u64, LEN);
                    let f = OpenOptions::new()
                        .create(true)
                        .truncate(true)
                        .write(true)
                        .open(&p);
                    let f = f.map_err(|e| format!("open: {e}"))?;
                    for (i, page) in data.chunks(4096).enumerate() {
                        f.write_at(page, (i * 4096) as u64)
                            .map_err(|e| format!("write at {}: {e}", i * 4096))?;
                    }
                    f.sync_all().map_err(|e| format!("fsync: {e}"))?;
                    sys::close(f).map_err(|e| format!("close: {e}"))
                })
            })
            .collect();
        writers
            .into_iter()
            .enumerate()
            .map(|(w, h)| (w, h.join().expect("writer thread")))
            .collect()
    });
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    eprintln!("writers: {results:?}");
    assert!(
        !failed.is_empty(),
        "24 MiB written into size=12m and every fsync and close succeeded"
    );
    for (_, r) in &failed {
        let e = r.as_ref().unwrap_err();
        assert!(
            e.contains("No space left on device") && !e.starts_with("write"),
            "a writer failed otherwise than with ENOSPC at fsync or close: {e}"
        );
    }
    for (w, r) in &results {
        let p = m.join(format!("w{w}"));
        let want = pattern(1000 + *w as u64, LEN);
        let f = ok!(fs::File::open(&p));
        // What the kernel's cache serves, and what the server holds (O_DIRECT reads bypass
        // the cache): they agree once the failed pages are dropped (queued after the
        // failed WRITE is answered).
        let direct = ok!(sys::open(&p, libc::O_RDONLY | libc::O_DIRECT, 0));
        eventually(
            &format!("w{w}: cached and stored data agree"),
            Duration::from_secs(10),
            || {
                let cached = ok!(sys::pread_full(&f, 0, LEN));
                let stored = ok!(sys::pread_full(&direct, 0, LEN));
                (cached == stored, (cached.len(), stored.len()))
            },
        );
        let stored = ok!(sys::pread_full(&direct, 0, LEN));
        if r.is_ok() {
            assert_bytes_eq(&stored, &want, &format!("w{w}, which saw no error"));
        }
        // Each page holds what its writer wrote there, or zeros where nothing was stored.
        for (i, (got, put)) in stored.chunks(4096).zip(want.chunks(4096)).enumerate() {
            assert!(
                got == put || got.iter().all(|&b| b == 0),
                "w{w}: page {i} holds bytes nobody wrote there"
            );
        }
    }
    assert!(
        memofs_e2e::checks::counter(&m, "writebacks_failed") > 0,
        "no failed writeback was counted"
    );
    // The space comes back: after deleting everything, 10 MiB fit and are stored.
    for w in 0..8 {
        ok!(fs::remove_file(m.join(format!("w{w}"))));
    }
    eventually("the space back", Duration::from_secs(5), || {
        let s = ok!(sys::statfs(m.path()));
        (s.f_bfree * 10 >= s.f_blocks * 9, (s.f_bfree, s.f_blocks))
    });
    let again = pattern(5, 10 << 20);
    let f = ok!(fs::File::create(m.join("again")));
    ok!(f.write_all_at(&again, 0));
    ok!(f.sync_all(), "fsync of 10 MiB after freeing the space");
    ok!(sys::close(f), "close of 10 MiB after freeing the space");
    assert_bytes_eq(&ok!(fs::read(m.join("again"))), &again, "rewritten data");
}

/// A file that outgrows the space under the writeback cache: `fsync` reports `ENOSPC`, and
/// the pages the server could not store leave the kernel's cache, so a read through the
/// cache returns what a read that bypasses it (`O_DIRECT`) returns: the stored first part,
/// zeros after it. (noatime: the kernel would keep the pages across opens.)
#[test]
fn failed_writeback_leaves_no_unstored_bytes_in_the_cache() {
    require_mount!();
    let m = Mount::memofs(&["size=1m", "passthrough=off", "noatime", "writeback=on"]);
    let p = m.join("f");
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&p));
    ok!(f.write_all_at(&[7u8; 2 << 20], 0));
    assert_errno!(
        f.sync_all(),
        libc::ENOSPC,
        "fsync of 2 MiB written into size=1m"
    );
    drop(f);
    let f = ok!(fs::File::open(&p));
    let direct = ok!(sys::open(&p, libc::O_RDONLY | libc::O_DIRECT, 0));
    eventually(
        "the cache serves what the server stored",
        Duration::from_secs(10),
        || {
            let cached = ok!(sys::pread_full(&f, 0, 2 << 20));
            let stored = ok!(sys::pread_full(&direct, 0, 2 << 20));
            let sevens = |d: &[u8]| d.iter().filter(|&&b| b == 7).count();
            (cached == stored, (sevens(&cached), sevens(&stored)))
        },
    );
    let stored = ok!(sys::pread_full(&direct, 0, 2 << 20));
    assert!(
        stored.iter().all(|&b| b == 0 || b == 7) && stored.contains(&7),
        "the stored part is the data written, the rest zeros"
    );
}

#[test]
fn enospc_when_nr_inodes_is_reached() {
    require_mount!();
    let m = Mount::mem(&["size=16m", "nr_inodes=20"]);
    let mut made = 0;
    let err = loop {
        match fs::write(m.join(format!("f{made}")), b"x") {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
        assert!(made <= 20, "more than 20 files with nr_inodes=20");
    };
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "creating past nr_inodes: {err}"
    );
    assert_eq!(made, 19, "nr_inodes=20 allows the root and 19 more");
    assert_errno!(
        fs::create_dir(m.join("d")),
        libc::ENOSPC,
        "mkdir at the inode limit"
    );
    assert_errno!(
        symlink("t", m.join("l")),
        libc::ENOSPC,
        "symlink at the inode limit"
    );
    assert_errno!(
        sys::mkfifo(m.join("p"), 0o644),
        libc::ENOSPC,
        "mkfifo at the inode limit"
    );
    assert_eq!(ok!(sys::statfs(m.path())).f_ffree, 0);
    // Existing files still work, and deleting one makes room for one.
    ok!(fs::write(m.join("f0"), b"rewritten"));
    assert_eq!(ok!(fs::read(m.join("f0"))), b"rewritten");
    ok!(fs::remove_file(m.join("f3")));
    // The inode is freed when the kernel forgets it (FORGET is asynchronous, and another
    // request thread may serve the next CREATE first): wait for statfs to show the room.
    eventually(
        "an inode given back after unlink",
        Duration::from_secs(10),
        || {
            let free = ok!(sys::statfs(m.path())).f_ffree;
            (free == 1, free)
        },
    );
    ok!(fs::create_dir(m.join("d")));
    assert_errno!(fs::write(m.join("one-more"), b""), libc::ENOSPC);
}

#[test]
fn deleted_and_truncated_data_gives_server_memory_back() {
    require_mount!();
    // The server's page store (not kernel-backed data): its RSS is the data.
    let m = Mount::memofs(&["passthrough=off"]);
    let pid = m.server_pid().expect("memofs server pid");
    const MIB: u64 = 1 << 20;
    let base = rss_bytes(pid);
    let data = pattern(11, (64 * MIB) as usize);
    ok!(fs::write(m.join("big"), &data));
    ok!(fs::write(m.join("cut"), &data));
    assert!(
        rss_bytes(pid) >= base + 120 * MIB,
        "128 MiB written should be resident in the server (base {base}, now {})",
        rss_bytes(pid)
    );
    ok!(fs::remove_file(m.join("big")));
    ok!(ok!(OpenOptions::new().write(true).open(m.join("cut"))).set_len(4096));
    // Freeing follows the kernel's asynchronous RELEASE/FORGET: poll. Up to TRIM_AFTER
    // (16 MiB) of freed pages may wait for the next trim, which waits for 0.5 s without frees.
    eventually(
        "server RSS back within 48 MiB of its start after freeing 124 MiB",
        Duration::from_secs(10),
        || {
            let now = rss_bytes(pid);
            (now <= base + 48 * MIB, (base, now))
        },
    );
    assert_bytes_eq(
        &ok!(fs::read(m.join("cut"))),
        &data[..4096],
        "the kept head of the truncated file",
    );
}

/// Directories created and removed give their memory back to the system, as files do.
#[test]
fn removed_directories_give_server_memory_back() {
    require_mount!();
    let m = Mount::memofs(&[]);
    let pid = m.server_pid().expect("memofs server pid");
    const MIB: u64 = 1 << 20;
    let (groups, per_group) = (100, 1000);
    let base = rss_bytes(pid);
    for g in 0..groups {
        let top = m.join(format!("g{g}"));
        ok!(fs::create_dir(&top));
        for d in 0..per_group {
            ok!(fs::create_dir(top.join(format!("directory-{d}"))));
        }
    }
    let full = rss_bytes(pid);
    assert!(
        full >= base + 32 * MIB,
        "100 000 directories take server memory (base {base}, now {full})"
    );
    for g in 0..groups {
        let top = m.join(format!("g{g}"));
        for d in 0..per_group {
            ok!(fs::remove_dir(top.join(format!("directory-{d}"))));
        }
        ok!(fs::remove_dir(&top));
    }
    eventually(
        "server RSS back near its start after removing every directory",
        Duration::from_secs(15),
        || {
            let now = rss_bytes(pid);
            (now <= base + (full - base) / 4, (base, full, now))
        },
    );
}

/// Unlinking a file nobody has open gives its space back before `unlink(2)` returns, as on
/// tmpfs (xfstests' generic/015 runs `df` right after `rm`), in both data modes; a file still
/// open keeps its data for its descriptors.
#[test]
fn unlink_of_a_closed_file_frees_its_space_at_once() {
    require_mount!();
    const LEN: usize = 4 << 20;
    for opts in [&["size=8m"][..], &["size=8m", "passthrough=off"]] {
        let m = Mount::mem(opts);
        let free = || {
            let s = ok!(sys::statfs(m.path()));
            s.f_bfree * s.f_bsize as u64
        };
        let write = |name: &str, seed: u64| {
            let mut f = ok!(fs::File::create(m.join(name)));
            ok!(std::io::Write::write_all(&mut f, &pattern(seed, LEN)));
            ok!(f.sync_all());
        };
        let empty = free();
        write("open", 1);
        let held = ok!(fs::File::open(m.join("open")));
        ok!(fs::remove_file(m.join("open")));
        assert_bytes_eq(
            &ok!(sys::pread_full(&held, 0, LEN)),
            &pattern(1, LEN),
            "an unlinked file still open keeps its data",
        );
        drop(held);
        eventually("the last close frees it", Duration::from_secs(5), || {
            (free() + (256 << 10) >= empty, free())
        });
        write("closed", 2);
        assert!(free() + (3 << 20) < empty, "{opts:?}: the data was charged");
        ok!(fs::remove_file(m.join("closed")));
        let after = free();
        assert!(
            after + (256 << 10) >= empty,
            "{opts:?}: {after} bytes free right after the unlink, {empty} before the write"
        );
    }
}
