//! Attributes: chmod, chown, utimensat with nanoseconds/UTIME_NOW/UTIME_OMIT, which operations
//! update mtime/ctime, atime rules, inode numbers and st_blocks.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use memofs_e2e::sys::{self, ns, Ts};
use memofs_e2e::{assert_errno, ok, require_mount, Mount};

macro_rules! need_mount {
    ($($opt:expr),*) => {{
        require_mount!();
        Mount::mem(&["size=64m" $(, $opt)*])
    }};
}

fn lstat(p: &Path) -> fs::Metadata {
    ok!(fs::symlink_metadata(p), "lstat {}", p.display())
}

/// (atime, mtime, ctime) in nanoseconds.
fn times(p: &Path) -> (i128, i128, i128) {
    let m = lstat(p);
    (
        ns((m.atime(), m.atime_nsec())),
        ns((m.mtime(), m.mtime_nsec())),
        ns((m.ctime(), m.ctime_nsec())),
    )
}

#[test]
fn chmod_every_bit() {
    let m = need_mount!();
    ok!(fs::write(m.join("f"), b""));
    ok!(fs::create_dir(m.join("d")));
    for mode in [0o0, 0o7777, 0o4755, 0o2750, 0o1777, 0o644, 0o400] {
        for name in ["f", "d"] {
            ok!(sys::chmod(m.join(name), mode));
            let md = lstat(&m.join(name));
            assert_eq!(md.mode() & 0o7777, mode, "chmod {mode:o} {name}");
            assert_eq!(md.is_dir(), name == "d", "chmod keeps the file type");
        }
    }
    // fchmod.
    let f = ok!(File::open(m.join("f")));
    assert_eq!(
        // SAFETY: the descriptor belongs to a live File; the call takes only integers.
        unsafe { libc::fchmod(std::os::unix::io::AsRawFd::as_raw_fd(&f), 0o640) },
        0
    );
    assert_eq!(lstat(&m.join("f")).mode() & 0o7777, 0o640);
    assert_errno!(sys::chmod(m.join("missing"), 0o644), libc::ENOENT);
}

#[test]
fn chown_by_root_and_setid_clearing() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b""));
    ok!(sys::chown(&p, 1000, 2000));
    assert_eq!((lstat(&p).uid(), lstat(&p).gid()), (1000, 2000));
    ok!(sys::chown(&p, u32::MAX, 3000));
    assert_eq!(
        (lstat(&p).uid(), lstat(&p).gid()),
        (1000, 3000),
        "chown(-1, gid) keeps the owner"
    );
    ok!(sys::chown(&p, 4000, u32::MAX));
    assert_eq!(
        (lstat(&p).uid(), lstat(&p).gid()),
        (4000, 3000),
        "chown(uid, -1) keeps the group"
    );
    // chown of a regular file clears set-user-ID, and set-group-ID when group-executable, even
    // for root.
    ok!(sys::chmod(&p, 0o6755));
    ok!(sys::chown(&p, 5000, 5000));
    assert_eq!(
        lstat(&p).mode() & 0o7777,
        0o0755,
        "chown clears S_ISUID and S_ISGID (g+x)"
    );
    ok!(sys::chmod(&p, 0o2644));
    ok!(sys::chown(&p, 6000, 6000));
    assert_eq!(
        lstat(&p).mode() & 0o7777,
        0o2644,
        "S_ISGID without g+x is kept"
    );
    // Directories keep their bits.
    ok!(fs::create_dir(m.join("d")));
    ok!(sys::chmod(m.join("d"), 0o3775));
    ok!(sys::chown(m.join("d"), 7000, 7000));
    assert_eq!(
        lstat(&m.join("d")).mode() & 0o7777,
        0o3775,
        "chown keeps a directory's S_ISGID/sticky"
    );
}

#[test]
fn utimensat_nanoseconds_now_and_omit() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b"x"));
    ok!(sys::utimensat(
        &p,
        Ts::At(1_000_000_000, 123_456_789),
        Ts::At(1_500_000_000, 987_654_321),
        0
    ));
    let md = lstat(&p);
    assert_eq!(
        (md.atime(), md.atime_nsec()),
        (1_000_000_000, 123_456_789),
        "atime to the nanosecond"
    );
    assert_eq!(
        (md.mtime(), md.mtime_nsec()),
        (1_500_000_000, 987_654_321),
        "mtime to the nanosecond"
    );
    // UTIME_OMIT leaves a time alone.
    ok!(sys::utimensat(&p, Ts::Omit, Ts::At(1_600_000_000, 1), 0));
    let md = lstat(&p);
    assert_eq!(
        (md.atime(), md.atime_nsec()),
        (1_000_000_000, 123_456_789),
        "atime kept with UTIME_OMIT"
    );
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_600_000_000, 1));
    ok!(sys::utimensat(&p, Ts::At(1_100_000_000, 5), Ts::Omit, 0));
    let md = lstat(&p);
    assert_eq!(
        (md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()),
        (1_100_000_000, 5, 1_600_000_000, 1)
    );
    // UTIME_NOW sets the current time (bounded by clock readings around the call; the kernel's
    // coarse clock may lag the fine one by a tick, hence the slack below).
    let before = ns(sys::now()) - 50_000_000;
    ok!(sys::utimensat(&p, Ts::Now, Ts::Omit, 0));
    let after = ns(sys::now()) + 50_000_000;
    let (a, mt, _) = times(&p);
    assert!(
        before <= a && a <= after,
        "UTIME_NOW atime {a} not within [{before}, {after}]"
    );
    assert_eq!(mt, ns((1_600_000_000, 1)));
    ok!(sys::utimensat(&p, Ts::Omit, Ts::Now, 0));
    let (_, mt, c) = times(&p);
    assert!(before <= mt && mt <= after + 50_000_000, "UTIME_NOW mtime");
    assert!(c >= before, "utimensat sets ctime to now");
    // Times before 1970 and far in the future.
    ok!(sys::utimensat(
        &p,
        Ts::At(-1_000_000, 0),
        Ts::At(4_102_444_800, 999_999_999),
        0
    ));
    let md = lstat(&p);
    assert_eq!(md.atime(), -1_000_000, "negative (pre-1970) atime");
    assert_eq!(
        (md.mtime(), md.mtime_nsec()),
        (4_102_444_800, 999_999_999),
        "year-2100 mtime"
    );
    // Invalid nanoseconds.
    assert_errno!(
        sys::utimensat(&p, Ts::At(0, 1_000_000_000), Ts::Omit, 0),
        libc::EINVAL
    );
    // On a symlink itself.
    ok!(symlink("f", m.join("l")));
    ok!(sys::utimensat(
        m.join("l"),
        Ts::At(10, 0),
        Ts::At(20, 0),
        libc::AT_SYMLINK_NOFOLLOW
    ));
    assert_eq!(
        lstat(&m.join("l")).mtime(),
        20,
        "utimensat(AT_SYMLINK_NOFOLLOW) on the link"
    );
    assert_ne!(lstat(&p).mtime(), 20, "...not on its target");
}

/// Which of a file's times an operation must have set to "now".
#[derive(Clone, Copy, Debug)]
struct Expect {
    mtime: bool,
    ctime: bool,
}

const M_C: Expect = Expect {
    mtime: true,
    ctime: true,
};
const C_ONLY: Expect = Expect {
    mtime: false,
    ctime: true,
};
const NONE: Expect = Expect {
    mtime: false,
    ctime: false,
};

/// Set up with `setup`, wait for the clock to move on, run `op`, then check which times of each
/// checked path moved past the mark.
fn check_times(
    m: &Mount,
    what: &str,
    setup: impl Fn(&Mount),
    op: impl Fn(&Mount),
    checks: &[(&str, Expect)],
) {
    setup(m);
    let mark = sys::now();
    sys::wait_clock_past(mark);
    let before: Vec<_> = checks
        .iter()
        .map(|(p, _)| {
            fs::symlink_metadata(m.join(p))
                .map(|_| times(&m.join(p)))
                .ok()
        })
        .collect();
    op(m);
    for ((p, want), b) in checks.iter().zip(before) {
        let (bm, bc) = b.map_or((None, None), |(_, m, c)| (Some(m), Some(c)));
        let (_, am, ac) = times(&m.join(p));
        let mark = ns(mark);
        assert_eq!(
            am > mark,
            want.mtime,
            "{what}: mtime of {p:?} {} (before {bm:?}, after {am})",
            if want.mtime {
                "must be updated"
            } else {
                "must not change"
            }
        );
        assert_eq!(
            ac > mark,
            want.ctime,
            "{what}: ctime of {p:?} {} (before {bc:?}, after {ac})",
            if want.ctime {
                "must be updated"
            } else {
                "must not change"
            }
        );
    }
}

/// A truncate to the size a file has leaves the times the kernel shows (moved, or under the
/// writeback cache kept) and the server's the same: they do not jump once the kernel has
/// forgotten the file and asks the server again.
#[test]
fn a_same_size_truncate_leaves_kernel_and_server_the_same_times() {
    let m = need_mount!();
    let (by_path, by_fd) = (m.join("path"), m.join("fd"));
    for p in [&by_path, &by_fd] {
        ok!(fs::write(p, b"0123456789"));
    }
    sys::wait_clock_past(sys::now());
    ok!(sys::truncate(&by_path, 10));
    ok!(OpenOptions::new()
        .write(true)
        .open(&by_fd)
        .and_then(|f| f.set_len(10)));
    let seen = [times(&by_path), times(&by_fd)];
    // FORGET and BATCH_FORGET requests, counted together.
    let before = memofs_e2e::checks::settled(&m, "FORGET");
    // The kernel drops the mount's names at their next use, and with them the inodes
    // nobody holds: the next stat asks the server afresh.
    memofs_e2e::cli::memofs(&["invalidate", m.path().to_str().unwrap()]).assert_success();
    for (p, seen) in [&by_path, &by_fd].into_iter().zip(seen) {
        let (_, mtime, ctime) = times(p);
        assert_eq!(
            (mtime, ctime),
            (seen.1, seen.2),
            "mtime and ctime of {p:?}, kernel's then server's"
        );
    }
    assert!(
        memofs_e2e::checks::settled(&m, "FORGET") > before,
        "the kernel kept the inodes, so the times came from its cache"
    );
}

#[test]
fn operations_update_mtime_and_ctime() {
    let m = need_mount!();
    let file = |name: &'static str| move |m: &Mount| ok!(fs::write(m.join(name), b"0123456789"));
    let dir = |name: &'static str| move |m: &Mount| ok!(fs::create_dir_all(m.join(name)));
    check_times(
        &m,
        "write",
        file("w"),
        |m| {
            ok!(OpenOptions::new()
                .write(true)
                .open(m.join("w"))
                .and_then(|f| std::os::unix::fs::FileExt::write_all_at(&f, b"x", 3)))
        },
        &[("w", M_C)],
    );
    check_times(
        &m,
        "truncate",
        file("t"),
        |m| ok!(sys::truncate(m.join("t"), 2)),
        &[("t", M_C)],
    );
    // As tmpfs: a truncate moves mtime and ctime even when the size stays. Under the
    // writeback cache the kernel keeps a file's times itself and moves them only when the
    // size changes, as ext4 and XFS do (POSIX asks for it only then).
    let same_size = if memofs_e2e::checks::writeback(&m) {
        NONE
    } else {
        M_C
    };
    check_times(
        &m,
        "truncate to same size",
        file("t2"),
        |m| ok!(sys::truncate(m.join("t2"), 10)),
        &[("t2", same_size)],
    );
    check_times(
        &m,
        "O_TRUNC",
        file("ot"),
        |m| {
            drop(ok!(OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(m.join("ot"))))
        },
        &[("ot", M_C)],
    );
    check_times(
        &m,
        "chmod",
        file("c"),
        |m| ok!(sys::chmod(m.join("c"), 0o600)),
        &[("c", C_ONLY)],
    );
    check_times(
        &m,
        "chown",
        file("o"),
        |m| ok!(sys::chown(m.join("o"), 1, 1)),
        &[("o", C_ONLY)],
    );
    check_times(
        &m,
        "setxattr",
        file("x"),
        |m| ok!(sys::setxattr(m.join("x"), "user.k", b"v", 0)),
        &[("x", C_ONLY)],
    );
    check_times(
        &m,
        "read",
        file("r"),
        |m| {
            let mut s = String::new();
            ok!(ok!(File::open(m.join("r"))).read_to_string(&mut s));
        },
        &[("r", NONE)],
    );
    check_times(
        &m,
        "create",
        dir("d1"),
        |m| ok!(fs::write(m.join("d1/new"), b"")),
        &[("d1", M_C)],
    );
    check_times(
        &m,
        "mkdir",
        dir("d2"),
        |m| ok!(fs::create_dir(m.join("d2/sub"))),
        &[("d2", M_C)],
    );
    check_times(
        &m,
        "rmdir",
        dir("d3/sub"),
        |m| ok!(fs::remove_dir(m.join("d3/sub"))),
        &[("d3", M_C)],
    );
    check_times(
        &m,
        "symlink",
        dir("d4"),
        |m| ok!(symlink("t", m.join("d4/l"))),
        &[("d4", M_C)],
    );
    check_times(
        &m,
        "link",
        |m| {
            ok!(fs::create_dir(m.join("d5")));
            ok!(fs::write(m.join("d5/a"), b""));
        },
        |m| ok!(fs::hard_link(m.join("d5/a"), m.join("d5/b"))),
        &[("d5", M_C), ("d5/a", C_ONLY)],
    );
    check_times(
        &m,
        "unlink",
        |_| {},
        |m| ok!(fs::remove_file(m.join("d5/b"))),
        &[("d5", M_C), ("d5/a", C_ONLY)],
    );
    check_times(
        &m,
        "rename within a directory",
        |m| {
            ok!(fs::create_dir(m.join("d6")));
            ok!(fs::write(m.join("d6/a"), b""));
        },
        |m| ok!(fs::rename(m.join("d6/a"), m.join("d6/b"))),
        &[("d6", M_C), ("d6/b", C_ONLY)],
    );
    check_times(
        &m,
        "rename across directories",
        |m| {
            ok!(fs::create_dir_all(m.join("d7/src")));
            ok!(fs::create_dir(m.join("d7/dst")));
            ok!(fs::write(m.join("d7/src/f"), b""));
            ok!(fs::write(m.join("d7/other"), b""));
        },
        |m| ok!(fs::rename(m.join("d7/src/f"), m.join("d7/dst/f"))),
        &[
            ("d7/src", M_C),
            ("d7/dst", M_C),
            ("d7/dst/f", C_ONLY),
            ("d7/other", NONE),
        ],
    );
    check_times(
        &m,
        "utimensat",
        file("u"),
        |m| ok!(sys::utimensat(m.join("u"), Ts::At(5, 0), Ts::At(5, 0), 0)),
        &[("u", C_ONLY)],
    );
}

#[test]
fn atime_relatime_default() {
    let m = need_mount!();
    let p = m.join("f");
    ok!(fs::write(&p, b"some data"));
    // atime older than mtime: a read updates it (relatime).
    ok!(sys::utimensat(
        &p,
        Ts::At(1_000_000_000, 0),
        Ts::At(1_100_000_000, 0),
        0
    ));
    let mark = sys::now();
    let mut s = String::new();
    ok!(ok!(File::open(&p)).read_to_string(&mut s));
    let (a, _, _) = times(&p);
    assert!(
        a >= ns(mark) - 50_000_000,
        "relatime: reading a file whose atime <= mtime updates atime (atime {a})"
    );
    // An atime newer than both mtime and ctime (here: an hour ahead) and less than a day old is
    // left alone.
    let now = sys::now();
    let recent = (now.0 + 3600, now.1);
    ok!(sys::utimensat(
        &p,
        Ts::At(recent.0, recent.1),
        Ts::At(1_100_000_000, 0),
        0
    ));
    sys::wait_clock_past(now);
    ok!(ok!(File::open(&p)).read_to_string(&mut s));
    assert_eq!(
        times(&p).0,
        ns(recent),
        "relatime: a recent atime newer than mtime is not updated by a read"
    );
    // Directories: listing updates atime the same way.
    ok!(fs::create_dir(m.join("d")));
    ok!(sys::utimensat(
        m.join("d"),
        Ts::At(1_000_000_000, 0),
        Ts::At(1_100_000_000, 0),
        0
    ));
    ok!(sys::list(m.join("d")));
    assert!(
        times(&m.join("d")).0 >= ns(mark) - 50_000_000,
        "relatime: readdir updates an old directory atime"
    );
}

#[test]
fn atime_noatime_and_strictatime() {
    require_mount!();
    for (opt, updates) in [("noatime", false), ("strictatime", true)] {
        let m = Mount::mem(&["size=16m", opt]);
        let p = m.join("f");
        ok!(fs::write(&p, b"data"));
        // atime newer than mtime and ctime (an hour ahead): only strictatime updates it (to now,
        // which is before the value set).
        let now = sys::now();
        let t = (now.0 + 3600, now.1);
        ok!(sys::utimensat(
            &p,
            Ts::At(t.0, t.1),
            Ts::At(1_000_000_000, 0),
            0
        ));
        sys::wait_clock_past(now);
        let mut s = String::new();
        ok!(ok!(File::open(&p)).read_to_string(&mut s));
        let a = times(&p).0;
        assert_eq!(
            a != ns(t),
            updates,
            "{opt}: atime after a read was {a}, set to {}",
            ns(t)
        );
    }
    // nodiratime: directories keep their atime, files do not.
    let m = Mount::mem(&["size=16m", "nodiratime"]);
    ok!(fs::create_dir(m.join("d")));
    ok!(fs::write(m.join("d/f"), b"x"));
    for p in ["d", "d/f"] {
        ok!(sys::utimensat(
            m.join(p),
            Ts::At(1_000_000_000, 0),
            Ts::At(1_100_000_000, 0),
            0
        ));
    }
    ok!(sys::list(m.join("d")));
    ok!(fs::read(m.join("d/f")));
    assert_eq!(
        times(&m.join("d")).0,
        ns((1_000_000_000, 0)),
        "nodiratime: readdir leaves the directory atime"
    );
    assert!(
        times(&m.join("d/f")).0 > ns((1_100_000_000, 0)),
        "nodiratime: file atime still follows relatime"
    );
}

#[test]
fn inode_numbers_unique_and_not_reused_while_open() {
    let m = need_mount!();
    let p = m.join("victim");
    ok!(fs::write(&p, b"v"));
    let held = ok!(File::open(&p));
    let victim = ok!(held.metadata()).ino();
    ok!(fs::remove_file(&p));
    let mut inos = BTreeSet::from([victim, lstat(m.path()).ino()]);
    let mut by_name = std::collections::BTreeMap::new();
    for i in 0..300 {
        let q = m.join(format!("n{i}"));
        match i % 3 {
            0 => ok!(fs::write(&q, b"")),
            1 => ok!(fs::create_dir(&q)),
            _ => ok!(symlink("x", &q)),
        }
        let ino = lstat(&q).ino();
        assert_ne!(
            ino, victim,
            "inode {victim} of an unlinked but open file was handed to {q:?}"
        );
        assert!(inos.insert(ino), "inode {ino} given to two live files");
        by_name.insert(i, ino);
        if i % 10 == 9 {
            // Churn: free some numbers so a recycling allocator would get the chance.
            for j in i - 9..i - 6 {
                let q = m.join(format!("n{j}"));
                if lstat(&q).is_dir() {
                    ok!(fs::remove_dir(&q));
                } else {
                    ok!(fs::remove_file(&q));
                }
                inos.remove(&by_name[&j]);
            }
        }
    }
    assert_eq!(ok!(held.metadata()).ino(), victim);
    // Hard links share, renames keep.
    ok!(fs::write(m.join("a"), b""));
    let a = lstat(&m.join("a")).ino();
    ok!(fs::rename(m.join("a"), m.join("b")));
    assert_eq!(lstat(&m.join("b")).ino(), a);
}

#[test]
fn block_counts_follow_allocation() {
    let m = need_mount!();
    ok!(fs::write(m.join("dense"), vec![1u8; 1 << 20]));
    let dense = lstat(&m.join("dense"));
    assert!(
        dense.blocks() * 512 >= 1 << 20,
        "a dense 1 MiB file reports st_blocks {}",
        dense.blocks()
    );
    assert!(dense.blksize() > 0);
    let f = ok!(OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(m.join("sparse")));
    ok!(std::os::unix::fs::FileExt::write_all_at(&f, b"x", 1 << 30));
    let sparse = lstat(&m.join("sparse"));
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "a 1 GiB file with one written byte reports st_blocks {} (should count only what is stored)",
        sparse.blocks()
    );
}

#[test]
fn statx_reports_the_birth_time() {
    let m = need_mount!();
    let before = sys::now();
    ok!(fs::write(m.join("f"), b""));
    let born = ok!(sys::btime(m.join("f"))).expect("statx has STATX_BTIME");
    // File times come from the coarse clock, which may lag `now` by a tick.
    assert!(
        (born.0 - before.0).abs() <= 2,
        "birth time is the creation's: {born:?}"
    );
    ok!(sys::utimensat(m.join("f"), Ts::At(1, 0), Ts::At(1, 0), 0));
    assert_eq!(
        ok!(sys::btime(m.join("f"))),
        Some(born),
        "utimensat leaves it"
    );
}
