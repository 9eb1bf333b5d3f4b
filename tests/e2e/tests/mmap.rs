//! Shared and private mappings, `msync`, and concurrent mmap writers and `write()` callers
//! seeing each other's data, as on tmpfs (in both data modes: kernel-backed and page store).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Barrier};

use memofs_e2e::map::Map;
use memofs_e2e::{assert_bytes_eq, ok, pattern, require_mount, Mount};

const PAGE: usize = 4096;
const PAGES: usize = 64;

fn rw(m: &Mount, name: &str) -> File {
    ok!(OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(m.join(name)))
}

/// What page `i` holds after round `r`: mapped writers take even pages, `pwrite` odd ones.
fn page_data(i: usize, r: usize) -> Vec<u8> {
    pattern((i * 1000 + r) as u64, PAGE)
}

#[test]
fn concurrent_mapped_and_write_callers_see_each_other() {
    require_mount!();
    let m = Mount::mem(&["size=64m"]);
    let f = rw(&m, "shared");
    ok!(f.set_len((PAGES * PAGE) as u64));
    const ROUNDS: usize = 20;
    let barrier = Arc::new(Barrier::new(2));
    // One thread writes even pages through a shared mapping (its own descriptor and
    // mapping), the other writes odd pages with pwrite(2), round after round; after each
    // round both check the other's pages through their own view.
    let mapper = {
        let (file, barrier) = (rw(&m, "shared"), barrier.clone());
        std::thread::spawn(move || {
            let mut map = Map::shared(&file, 0, PAGES * PAGE).unwrap();
            for r in 0..ROUNDS {
                for i in (0..PAGES).step_by(2) {
                    map.bytes()[i * PAGE..(i + 1) * PAGE].copy_from_slice(&page_data(i, r));
                }
                barrier.wait();
                for i in (1..PAGES).step_by(2) {
                    let got = &map.bytes()[i * PAGE..(i + 1) * PAGE];
                    assert!(
                        got == page_data(i, r),
                        "mapping misses pwrite of page {i}, round {r}"
                    );
                }
                barrier.wait();
            }
            map.msync().unwrap();
        })
    };
    let writer = {
        let (file, barrier) = (rw(&m, "shared"), barrier.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; PAGE];
            for r in 0..ROUNDS {
                for i in (1..PAGES).step_by(2) {
                    file.write_all_at(&page_data(i, r), (i * PAGE) as u64)
                        .unwrap();
                }
                barrier.wait();
                for i in (0..PAGES).step_by(2) {
                    file.read_exact_at(&mut buf, (i * PAGE) as u64).unwrap();
                    assert!(
                        buf == page_data(i, r),
                        "read misses mapped write of page {i}, round {r}"
                    );
                }
                barrier.wait();
            }
        })
    };
    let (a, b) = (mapper.join(), writer.join());
    a.expect("mapping thread");
    b.expect("pwrite thread");
    // After msync and unmap, a fresh open reads every page's last version.
    drop(f);
    let all = ok!(std::fs::read(m.join("shared")));
    for i in 0..PAGES {
        assert_bytes_eq(
            &all[i * PAGE..(i + 1) * PAGE],
            &page_data(i, ROUNDS - 1),
            &format!("page {i} after the run"),
        );
    }
}

#[test]
fn private_mappings_copy_on_write() {
    require_mount!();
    let m = Mount::mem(&["size=64m"]);
    let f = rw(&m, "p");
    let base = pattern(5, 4 * PAGE);
    ok!(f.write_all_at(&base, 0));
    let mut private = ok!(Map::private(&f, 0, 4 * PAGE));
    let mut shared = ok!(Map::shared(&f, 0, 4 * PAGE));
    // A private write stays private.
    private.bytes()[..4].copy_from_slice(b"mine");
    assert_eq!(
        &shared.bytes()[..4],
        &base[..4],
        "a private write leaked to a shared map"
    );
    let mut head = [0u8; 4];
    ok!(f.read_exact_at(&mut head, 0));
    assert_eq!(&head, &base[..4], "a private write reached the file");
    // A page the private mapping never wrote still shows the file's current data.
    ok!(f.write_all_at(b"file", (2 * PAGE) as u64));
    assert_eq!(&private.bytes()[2 * PAGE..2 * PAGE + 4], b"file");
    // A shared write, after msync, is in the file; the private copy keeps its own page.
    shared.bytes()[PAGE..PAGE + 6].copy_from_slice(b"shared");
    ok!(shared.msync());
    let mut got = [0u8; 6];
    ok!(f.read_exact_at(&mut got, PAGE as u64));
    assert_eq!(&got, b"shared");
    assert_eq!(&private.bytes()[..4], b"mine");
}

/// mtime and ctime as `stat -c '%Y %Z'` asks for them: statx for those two alone (a mask
/// with atime, or the birth time, makes FUSE fetch fresh attributes whenever a read or a
/// mapping marked atime stale).
fn stat_times(p: &std::path::Path) -> ((i64, u32), (i64, u32)) {
    let path = memofs_e2e::sys::cpath(p);
    let mut st = std::mem::MaybeUninit::<libc::statx>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` has room for a struct statx.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            0,
            libc::STATX_MTIME | libc::STATX_CTIME,
            st.as_mut_ptr(),
        )
    };
    assert_eq!(
        r,
        0,
        "statx {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: statx succeeded and filled `st`.
    let st = unsafe { st.assume_init() };
    let t = |t: libc::statx_timestamp| (t.tv_sec, t.tv_nsec);
    (t(st.stx_mtime), t(st.stx_ctime))
}

/// A write through a shared mapping moves the file's mtime and ctime, and `stat` after the
/// writer is done shows them, although the kernel caches attributes for as long as the
/// default `cache=always` allows (xfstests' generic/215). In both data modes: the kernel's
/// own writes to a passthrough backing file tell the kernel nothing.
#[test]
fn mapped_writes_move_mtime_and_ctime_seen_by_stat() {
    require_mount!();
    use memofs_e2e::sys::{self, Ts};
    for opts in [&["size=16m"][..], &["size=16m", "passthrough=off"]] {
        let m = Mount::mem(opts);
        let path = m.join("mapped");
        ok!(std::fs::write(&path, vec![0u8; PAGE]));
        // An hour ago: any time the write sets is later, without waiting for the clock.
        let past = Ts::At(sys::now().0 - 3600, 0);
        ok!(sys::utimensat(&path, past, past, 0));
        let (mtime, ctime) = stat_times(&path);
        sys::wait_clock_past((ctime.0, ctime.1 as i64));
        {
            let f = rw(&m, "mapped");
            let mut map = ok!(Map::shared(&f, 0, PAGE));
            map.bytes()[0] = 1;
            // While the mapping lives, as on tmpfs.
            let (mtime1, _) = stat_times(&path);
            assert!(
                mtime1 > mtime,
                "{opts:?}: mtime stayed {mtime:?} while mapped"
            );
        }
        let (mtime2, ctime2) = stat_times(&path);
        assert!(mtime2 > mtime, "{opts:?}: mtime stayed {mtime:?}");
        assert!(ctime2 > ctime, "{opts:?}: ctime stayed {ctime:?}");
        assert_eq!(ok!(std::fs::read(&path))[0], 1);
    }
}
