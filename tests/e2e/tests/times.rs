//! Times over the range kernel tmpfs keeps (its seconds are 64-bit): years 1 to 9999 and
//! beyond 2262 to the nanosecond, and fractions of a second before 1970, on the mem backend
//! and through the passthrough backend to a tmpfs host file.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use memofs_e2e::sys::{self, Ts};
use memofs_e2e::{is_root, ok, skip, Mount};

/// Seconds of 0001-01-01, 2500-01-01 and 9999-12-31 23:59:59 UTC.
const YEAR_1: i64 = -62_135_596_800;
const YEAR_2500: i64 = 16_725_225_600;
const YEAR_9999: i64 = 253_402_300_799;

/// `(seconds, nanoseconds)` as `timespec` has them: years past 2262 (where 64-bit
/// nanoseconds end) and 9999, whole seconds back to year 1, and fractions of a second
/// before 1970: -0.5 s (what `touch -d '1969-12-31 23:59:59.5 UTC'` sets), -1 ns, and more.
const TIMES: [(i64, i64); 9] = [
    (YEAR_2500, 0),
    (YEAR_2500, 123_456_789),
    (YEAR_9999, 999_999_999),
    (YEAR_1, 0),
    (-1_000_000, 0),
    (-1, 500_000_000),
    (-1, 999_999_999),
    (-86_401, 123_456_789),
    (YEAR_1, 1),
];

/// Sets each time as atime and mtime of a file under `dir`, and reads it back.
fn round_trip(dir: &Path, cases: &[(i64, i64)]) {
    let p = dir.join("t");
    ok!(fs::write(&p, b"x"));
    for (i, &(sec, nsec)) in cases.iter().enumerate() {
        // atime and mtime set apart, so neither can be read for the other.
        let (osec, onsec) = cases[(i + 1) % cases.len()];
        ok!(sys::utimensat(
            &p,
            Ts::At(sec, nsec),
            Ts::At(osec, onsec),
            0
        ));
        let md = ok!(fs::symlink_metadata(&p));
        assert_eq!(
            (md.atime(), md.atime_nsec()),
            (sec, nsec),
            "atime set to ({sec}, {nsec})"
        );
        assert_eq!(
            (md.mtime(), md.mtime_nsec()),
            (osec, onsec),
            "mtime set to ({osec}, {onsec})"
        );
    }
}

fn mem() -> Option<Mount> {
    is_root().then(|| Mount::mem(&["size=64m"]))
}

/// A tmpfs host directory exported through the passthrough backend: `(host, mount)`.
fn export() -> Option<(Mount, Mount)> {
    is_root().then(|| memofs_e2e::checks::export_tmpfs("export", &["size=64m"], &[]))
}

#[test]
fn times_round_trip_on_the_mem_backend() {
    let Some(m) = mem() else {
        skip!(Root, "needs root to mount")
    };
    round_trip(m.path(), &TIMES);
}

#[test]
fn times_reach_the_host_through_passthrough() {
    let Some((host, m)) = export() else {
        skip!(Root, "needs root to mount")
    };
    round_trip(m.path(), &TIMES);
    let md = ok!(fs::metadata(host.join("export/t")));
    let (sec, nsec) = TIMES[TIMES.len() - 1];
    assert_eq!(
        (md.atime(), md.atime_nsec()),
        (sec, nsec),
        "the host file's atime"
    );
}

/// A new file's four times come from one clock reading: its birth time is no later than its
/// atime, mtime and ctime (xfstests' generic/423), in both data modes (kernel-backed data
/// takes atime and mtime from its data file, stamped by the kernel's coarser clock).
#[test]
fn birth_is_no_later_than_the_other_times() {
    memofs_e2e::require_mount!();
    for opts in [&["size=16m"][..], &["size=16m", "passthrough=off"]] {
        let m = Mount::mem(opts);
        for i in 0..50 {
            let path = m.join(format!("f{i}"));
            ok!(fs::write(&path, b"x"));
            let born = ok!(sys::btime(&path)).expect("statx reports a birth time");
            let st = ok!(fs::metadata(&path));
            let born = (born.0, born.1 as i64);
            for (what, t) in [
                ("atime", (st.atime(), st.atime_nsec())),
                ("mtime", (st.mtime(), st.mtime_nsec())),
                ("ctime", (st.ctime(), st.ctime_nsec())),
            ] {
                assert!(
                    born <= t,
                    "{opts:?} f{i}: btime {born:?} after {what} {t:?}"
                );
            }
        }
    }
}
