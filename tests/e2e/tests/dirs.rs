//! Directories: mkdir/rmdir and link counts, rename in all its forms, readdir with stable
//! offsets while the directory changes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use memofs_e2e::{assert_errno, ok, require_mount, sys, Mount, Rng};

const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;

macro_rules! need_mount {
    () => {{
        require_mount!();
        Mount::mem(&["size=256m"])
    }};
}

fn nlink(p: &Path) -> u64 {
    ok!(fs::symlink_metadata(p), "lstat {}", p.display()).nlink()
}

fn ino(p: &Path) -> u64 {
    ok!(fs::symlink_metadata(p), "lstat {}", p.display()).ino()
}

#[test]
fn mkdir_rmdir_and_link_counts() {
    let m = need_mount!();
    let root = m.path();
    let r0 = nlink(root);
    assert_eq!(r0, 2, "empty root directory has nlink 2");
    ok!(fs::create_dir(m.join("d")));
    assert_eq!(nlink(&m.join("d")), 2);
    assert_eq!(
        nlink(root),
        r0 + 1,
        "a subdirectory adds a link to its parent"
    );
    ok!(fs::create_dir(m.join("d/e")));
    ok!(fs::write(m.join("d/file"), b""));
    assert_eq!(
        nlink(&m.join("d")),
        3,
        "files do not add links to their directory"
    );
    assert_eq!(ino(&m.join("d/e/..")), ino(&m.join("d")));
    assert_eq!(ino(&m.join("d/.")), ino(&m.join("d")));
    assert_errno!(fs::remove_dir(m.join("d")), libc::ENOTEMPTY);
    assert_errno!(fs::remove_dir(m.join("d/file")), libc::ENOTDIR);
    assert_errno!(fs::remove_file(m.join("d/e")), libc::EISDIR);
    assert_errno!(fs::remove_dir(m.join("d/e/.")), libc::EINVAL);
    assert_errno!(fs::remove_dir(m.join("d/missing")), libc::ENOENT);
    assert_errno!(fs::create_dir(m.join("d")), libc::EEXIST);
    assert_errno!(fs::create_dir(m.join("d/file")), libc::EEXIST);
    assert_errno!(fs::create_dir(m.join("nope/x")), libc::ENOENT);
    assert_errno!(fs::create_dir(m.join("d/file/x")), libc::ENOTDIR);
    ok!(fs::remove_dir(m.join("d/e")));
    assert_eq!(nlink(&m.join("d")), 2);
    ok!(fs::remove_file(m.join("d/file")));
    ok!(fs::remove_dir(m.join("d")));
    assert_eq!(nlink(root), r0);
    assert_errno!(fs::metadata(m.join("d")), libc::ENOENT);
    // mkdir honours the mode (minus umask) and the sticky/setgid bits given.
    let c = sys::cpath(m.join("m"));
    // SAFETY: every pointer passed is a NUL-terminated CString alive for the whole call.
    assert_eq!(unsafe { libc::mkdir(c.as_ptr(), 0o1700) }, 0);
    assert_eq!(ok!(fs::metadata(m.join("m"))).mode() & 0o7777, 0o1700);
}

#[test]
fn removed_directory_is_empty_and_unusable() {
    let m = need_mount!();
    ok!(fs::create_dir(m.join("gone")));
    let d = ok!(sys::open_dir(m.join("gone")));
    ok!(fs::remove_dir(m.join("gone")));
    assert_eq!(
        ok!(d.metadata()).nlink(),
        0,
        "fstat of a removed directory has nlink 0"
    );
    let c = sys::cpath("x");
    // SAFETY: the directory descriptor belongs to a live File; `c` is a CString alive for the call.
    let r = unsafe {
        libc::openat(
            std::os::unix::io::AsRawFd::as_raw_fd(&d),
            c.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        )
    };
    assert_eq!(r, -1, "creating in a removed directory must fail");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOENT)
    );
}

#[test]
fn rename_file_over_file() {
    let m = need_mount!();
    ok!(fs::write(m.join("a"), b"AAA"));
    ok!(fs::write(m.join("b"), b"BBB"));
    ok!(fs::hard_link(m.join("b"), m.join("b2")));
    let ino_a = ino(&m.join("a"));
    assert_eq!(nlink(&m.join("b2")), 2);
    ok!(fs::rename(m.join("a"), m.join("b")));
    assert_errno!(fs::metadata(m.join("a")), libc::ENOENT);
    assert_eq!(ok!(fs::read(m.join("b"))), b"AAA");
    assert_eq!(ino(&m.join("b")), ino_a, "rename keeps the inode");
    assert_eq!(nlink(&m.join("b2")), 1, "the replaced file lost a link");
    assert_eq!(ok!(fs::read(m.join("b2"))), b"BBB");
    assert_eq!(ok!(sys::list(m.path())), ["b", "b2"]);
    // Across directories, replacing a file there.
    ok!(fs::create_dir(m.join("sub")));
    ok!(fs::write(m.join("sub/t"), b"old"));
    ok!(fs::rename(m.join("b"), m.join("sub/t")));
    assert_eq!(ok!(fs::read(m.join("sub/t"))), b"AAA");
    assert_eq!(ok!(sys::list(m.join("sub"))), ["t"]);
    // Two names of one inode: rename is a successful no-op and both names remain (POSIX).
    ok!(fs::hard_link(m.join("sub/t"), m.join("t2")));
    ok!(fs::rename(m.join("sub/t"), m.join("t2")));
    assert!(
        m.join("sub/t").exists() && m.join("t2").exists(),
        "rename between hard links of one file"
    );
    assert_eq!(nlink(&m.join("t2")), 2);
    // Rename onto itself.
    ok!(fs::rename(m.join("t2"), m.join("t2")));
    assert_eq!(ok!(fs::read(m.join("t2"))), b"AAA");
}

#[test]
fn rename_directories_and_link_counts() {
    let m = need_mount!();
    for d in ["p1", "p2", "p1/d", "p2/empty"] {
        ok!(fs::create_dir(m.join(d)));
    }
    ok!(fs::write(m.join("p1/d/inner"), b"in"));
    let (p1, p2) = (m.join("p1"), m.join("p2"));
    assert_eq!((nlink(&p1), nlink(&p2)), (3, 3));
    let d_ino = ino(&m.join("p1/d"));
    // A directory over an empty directory in another parent.
    ok!(fs::rename(m.join("p1/d"), m.join("p2/empty")));
    assert_eq!(ino(&m.join("p2/empty")), d_ino);
    assert_eq!(ok!(fs::read(m.join("p2/empty/inner"))), b"in");
    assert_eq!(
        nlink(&p1),
        2,
        "old parent lost the subdirectory's '..' link"
    );
    assert_eq!(nlink(&p2), 3, "new parent: one subdir replaced by another");
    assert_eq!(
        ino(&m.join("p2/empty/..")),
        ino(&p2),
        "'..' of the moved directory is its new parent"
    );
    // Moving a directory to a new name in another parent.
    ok!(fs::rename(m.join("p2/empty"), m.join("p1/back")));
    assert_eq!((nlink(&p1), nlink(&p2)), (3, 2));
    assert_eq!(ino(&m.join("p1/back/..")), ino(&p1));
    assert_eq!(nlink(&m.join("p1/back")), 2);
    // Same parent, new name: counts unchanged.
    ok!(fs::rename(m.join("p1/back"), m.join("p1/renamed")));
    assert_eq!(nlink(&p1), 3);
    assert_eq!(ok!(sys::list(&p1)), ["renamed"]);
}

#[test]
fn rename_error_cases() {
    let m = need_mount!();
    for d in ["d", "d/sub", "full", "empty"] {
        ok!(fs::create_dir(m.join(d)));
    }
    ok!(fs::write(m.join("full/x"), b""));
    ok!(fs::write(m.join("f"), b"file"));
    assert_errno!(
        fs::rename(m.join("d"), m.join("full")),
        libc::ENOTEMPTY,
        "dir over non-empty dir"
    );
    assert_errno!(
        fs::rename(m.join("f"), m.join("empty")),
        libc::EISDIR,
        "file over dir"
    );
    assert_errno!(
        fs::rename(m.join("d"), m.join("f")),
        libc::ENOTDIR,
        "dir over file"
    );
    assert_errno!(
        fs::rename(m.join("d"), m.join("d/sub/into")),
        libc::EINVAL,
        "dir into its own subdir"
    );
    assert_errno!(
        fs::rename(m.join("d"), m.join("d/sub")),
        libc::EINVAL,
        "dir onto its own subdir"
    );
    assert_errno!(fs::rename(m.join("missing"), m.join("y")), libc::ENOENT);
    assert_errno!(fs::rename(m.join("f"), m.join("nodir/y")), libc::ENOENT);
    assert_errno!(fs::rename(m.join("f"), m.join("f/y")), libc::ENOTDIR);
    // Nothing moved.
    assert_eq!(ok!(sys::list(m.path())), ["d", "empty", "f", "full"]);
    assert_eq!(ok!(sys::list(m.join("d"))), ["sub"]);
    assert_eq!(ok!(fs::read(m.join("f"))), b"file");
    // Renaming across file systems.
    let other = Mount::tmpfs(&["size=1m"]);
    assert_errno!(fs::rename(m.join("f"), other.join("f")), libc::EXDEV);
}

#[test]
fn rename_noreplace() {
    let m = need_mount!();
    ok!(fs::write(m.join("a"), b"A"));
    ok!(fs::write(m.join("b"), b"B"));
    assert_errno!(
        sys::renameat2(m.join("a"), m.join("b"), RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(
        (ok!(fs::read(m.join("a"))), ok!(fs::read(m.join("b")))),
        (b"A".to_vec(), b"B".to_vec())
    );
    ok!(sys::renameat2(m.join("a"), m.join("c"), RENAME_NOREPLACE));
    assert_eq!(ok!(sys::list(m.path())), ["b", "c"]);
    ok!(fs::create_dir(m.join("d")));
    assert_errno!(
        sys::renameat2(m.join("d"), m.join("b"), RENAME_NOREPLACE),
        libc::EEXIST
    );
    ok!(sys::renameat2(m.join("d"), m.join("e"), RENAME_NOREPLACE));
    assert_eq!(ok!(sys::list(m.path())), ["b", "c", "e"]);
}

#[test]
fn rename_exchange() {
    let m = need_mount!();
    for d in ["p1", "p2", "p2/dir"] {
        ok!(fs::create_dir(m.join(d)));
    }
    ok!(fs::write(m.join("p1/file"), b"F"));
    ok!(fs::write(m.join("p2/dir/inside"), b"I"));
    let (f_ino, d_ino) = (ino(&m.join("p1/file")), ino(&m.join("p2/dir")));
    let (p1, p2) = (m.join("p1"), m.join("p2"));
    assert_eq!((nlink(&p1), nlink(&p2)), (2, 3));
    ok!(sys::renameat2(
        m.join("p1/file"),
        m.join("p2/dir"),
        RENAME_EXCHANGE
    ));
    assert_eq!(
        ino(&m.join("p1/file")),
        d_ino,
        "p1/file is now the directory"
    );
    assert_eq!(ino(&m.join("p2/dir")), f_ino, "p2/dir is now the file");
    assert!(ok!(fs::metadata(m.join("p1/file"))).is_dir());
    assert_eq!(ok!(fs::read(m.join("p1/file/inside"))), b"I");
    assert_eq!(ok!(fs::read(m.join("p2/dir"))), b"F");
    assert_eq!(
        (nlink(&p1), nlink(&p2)),
        (3, 2),
        "parents' link counts follow the directory"
    );
    assert_eq!(ino(&m.join("p1/file/..")), ino(&p1));
    // Two files in one directory.
    ok!(fs::write(m.join("x"), b"X"));
    ok!(fs::write(m.join("y"), b"Y"));
    ok!(sys::renameat2(m.join("x"), m.join("y"), RENAME_EXCHANGE));
    assert_eq!(
        (ok!(fs::read(m.join("x"))), ok!(fs::read(m.join("y")))),
        (b"Y".to_vec(), b"X".to_vec())
    );
    // Errors.
    assert_errno!(
        sys::renameat2(m.join("x"), m.join("missing"), RENAME_EXCHANGE),
        libc::ENOENT
    );
    assert_errno!(
        sys::renameat2(m.join("x"), m.join("y"), RENAME_EXCHANGE | RENAME_NOREPLACE),
        libc::EINVAL
    );
    assert_errno!(
        sys::renameat2(m.join("p1"), m.join("p1/file/inside"), RENAME_EXCHANGE),
        libc::EINVAL
    );
    assert_errno!(
        sys::renameat2(m.join("x"), m.join("y"), 1 << 10),
        libc::EINVAL,
        "unknown rename flag"
    );
    assert_eq!(
        (ok!(fs::read(m.join("x"))), ok!(fs::read(m.join("y")))),
        (b"Y".to_vec(), b"X".to_vec())
    );
}

#[test]
fn rename_keeps_open_descriptors_working() {
    let m = need_mount!();
    ok!(fs::create_dir(m.join("a")));
    ok!(fs::write(m.join("a/f"), b"one"));
    let f = ok!(fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.join("a/f")));
    let dir = ok!(sys::open_dir(m.join("a")));
    ok!(fs::rename(m.join("a"), m.join("b")));
    ok!(fs::rename(m.join("b/f"), m.join("g")));
    std::os::unix::fs::FileExt::write_all_at(&f, b"two", 3).unwrap();
    assert_eq!(ok!(fs::read(m.join("g"))), b"onetwo");
    assert!(ok!(dir.metadata()).is_dir());
    assert_eq!(ok!(sys::list(m.join("b"))), Vec::<String>::new());
    // A symlink keeps its target text through renames.
    ok!(symlink("g", m.join("l")));
    ok!(fs::rename(m.join("l"), m.join("b/l")));
    assert_eq!(ok!(fs::read_link(m.join("b/l"))), Path::new("g"));
}

/// Fail (rather than loop forever) when readdir keeps returning entries long after the
/// directory should have been exhausted.
fn guard_runaway(returned: usize, limit: usize) {
    assert!(
        returned <= limit,
        "readdir does not terminate: {returned} entries returned from a directory that never held more than {} (offsets not stable?)",
        limit / 2
    );
}

/// `getdents64` with a small buffer until the end, returning (name, d_off) in order.
fn read_all(dir: &File, bufsize: usize) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    loop {
        let batch = ok!(sys::getdents(dir, bufsize));
        if batch.is_empty() {
            return out;
        }
        guard_runaway(out.len(), 2_000);
        out.extend(
            batch
                .into_iter()
                .map(|d| (String::from_utf8_lossy(&d.name).into_owned(), d.off)),
        );
    }
}

#[test]
fn readdir_types_inodes_and_dots() {
    let m = need_mount!();
    ok!(fs::write(m.join("file"), b""));
    ok!(fs::create_dir(m.join("dir")));
    ok!(symlink("file", m.join("link")));
    ok!(sys::mkfifo(m.join("fifo"), 0o644));
    let d = ok!(sys::open_dir(m.path()));
    let entries: Vec<sys::Dirent> = {
        let mut v = Vec::new();
        loop {
            let b = ok!(sys::getdents(&d, 4096));
            if b.is_empty() {
                break;
            }
            v.extend(b);
        }
        v
    };
    let by_name: BTreeMap<String, &sys::Dirent> = entries
        .iter()
        .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e))
        .collect();
    assert_eq!(
        entries.len(),
        6,
        "'.', '..' and four entries, each once: {:?}",
        by_name.keys()
    );
    assert_eq!(
        by_name.keys().cloned().collect::<Vec<_>>(),
        [".", "..", "dir", "fifo", "file", "link"]
    );
    for (name, dt) in [
        ("file", libc::DT_REG),
        ("dir", libc::DT_DIR),
        ("link", libc::DT_LNK),
        ("fifo", libc::DT_FIFO),
    ] {
        let e = by_name[name];
        assert!(
            e.kind == dt || e.kind == libc::DT_UNKNOWN,
            "d_type of {name}: {} want {dt}",
            e.kind
        );
        assert_eq!(e.ino, ino(&m.join(name)), "d_ino of {name} matches st_ino");
    }
    assert_eq!(
        by_name["."].ino,
        ino(m.path()),
        "d_ino of '.' is the directory's st_ino"
    );
    assert_ne!(
        by_name[".."].ino, 0,
        "d_ino of '..' is not 0 (glibc treats 0 as a deleted entry)"
    );
    let offs: BTreeSet<i64> = entries.iter().map(|e| e.off).collect();
    assert_eq!(offs.len(), entries.len(), "every d_off differs");
}

#[test]
fn readdir_seek_to_saved_offsets() {
    let m = need_mount!();
    let dir = m.join("d");
    ok!(fs::create_dir(&dir));
    for i in 0..300 {
        ok!(fs::write(dir.join(format!("entry-{i:03}")), b""));
    }
    let f = ok!(sys::open_dir(&dir));
    let all = read_all(&f, 512);
    assert_eq!(all.len(), 302);
    for k in [0usize, 1, 2, 57, 150, 299, 300] {
        ok!(sys::lseek(&f, all[k].1, libc::SEEK_SET));
        let rest: Vec<String> = read_all(&f, 512).into_iter().map(|e| e.0).collect();
        let want: Vec<String> = all[k + 1..].iter().map(|e| e.0.clone()).collect();
        assert_eq!(
            rest, want,
            "continuing from the d_off of entry #{k} ({})",
            all[k].0
        );
    }
    // Delete entries before and after a saved position; continuing from it yields exactly the
    // later entries that survive.
    let k = 150;
    let mut rng = Rng::new(7);
    let mut deleted = BTreeSet::new();
    for (i, (name, _)) in all.iter().enumerate() {
        if name.starts_with("entry-") && (i <= k || rng.chance(1, 3)) && rng.chance(1, 2) {
            ok!(fs::remove_file(dir.join(name)));
            deleted.insert(name.clone());
        }
    }
    ok!(sys::lseek(&f, all[k].1, libc::SEEK_SET));
    // Whether deleted entries still show up is unspecified (POSIX); drop them before comparing.
    let rest: Vec<String> = read_all(&f, 512)
        .into_iter()
        .map(|e| e.0)
        .filter(|n| !deleted.contains(n))
        .collect();
    let want: Vec<String> = all[k + 1..]
        .iter()
        .map(|e| e.0.clone())
        .filter(|n| !deleted.contains(n))
        .collect();
    assert_eq!(
        rest,
        want,
        "continuing from a saved d_off after deleting {} entries",
        deleted.len()
    );
    // Rewinding lists the current content, including a new entry.
    ok!(fs::write(dir.join("zz-new"), b""));
    ok!(sys::lseek(&f, 0, libc::SEEK_SET));
    let now: BTreeSet<String> = read_all(&f, 512).into_iter().map(|e| e.0).collect();
    let mut want: BTreeSet<String> = all
        .iter()
        .map(|e| e.0.clone())
        .filter(|n| !deleted.contains(n))
        .collect();
    want.insert("zz-new".into());
    assert_eq!(now, want, "listing after rewind");
}

#[test]
fn readdir_big_directory_while_changing() {
    let m = need_mount!();
    let dir = m.join("big");
    ok!(fs::create_dir(&dir));
    let n = 1000;
    const MAX_CREATED: usize = 300;
    let originals: Vec<String> = (0..n)
        .map(|i| format!("file-{i:04}-{}", "x".repeat(i % 40)))
        .collect();
    for name in &originals {
        ok!(fs::write(dir.join(name), b""));
    }
    let mut rng = Rng::new(1234);
    let f = ok!(sys::open_dir(&dir));
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut deleted_unseen = BTreeSet::new();
    let mut alive: BTreeSet<String> = originals.iter().cloned().collect();
    let mut created = 0;
    loop {
        let batch = ok!(sys::getdents(&f, 1024));
        if batch.is_empty() {
            break;
        }
        guard_runaway(seen.values().sum(), 2 * (n + 2 + MAX_CREATED));
        for e in batch {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            // (An entry deleted before readdir reached it may or may not be returned: POSIX
            // leaves that open, so it is not checked.)
            *seen.entry(name.clone()).or_default() += 1;
            // Delete what was just seen half of the time.
            if alive.contains(&name) && rng.chance(1, 2) {
                ok!(fs::remove_file(dir.join(&name)));
                alive.remove(&name);
            }
        }
        // Delete a few not yet seen and create a few new ones.
        for _ in 0..3 {
            let unseen: Vec<&String> = alive.iter().filter(|n| !seen.contains_key(*n)).collect();
            if unseen.is_empty() {
                break;
            }
            let victim = unseen[rng.below(unseen.len() as u64) as usize].clone();
            ok!(fs::remove_file(dir.join(&victim)));
            alive.remove(&victim);
            deleted_unseen.insert(victim);
        }
        for _ in 0..2 {
            if created == MAX_CREATED {
                break;
            }
            let name = format!("new-{created}");
            created += 1;
            ok!(fs::write(dir.join(&name), b""));
            alive.insert(name);
        }
    }
    let dups: Vec<_> = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(n, c)| format!("{n}×{c}"))
        .collect();
    assert!(dups.is_empty(), "entries returned more than once: {dups:?}");
    let missed: Vec<_> = originals
        .iter()
        .filter(|n| !deleted_unseen.contains(*n) && !seen.contains_key(*n))
        .collect();
    assert!(
        missed.is_empty(),
        "{} entries present throughout were never returned: {:?}",
        missed.len(),
        missed
    );
    assert!(seen.contains_key(".") && seen.contains_key(".."));
    // A fresh listing shows exactly what is alive.
    let now: BTreeSet<String> = ok!(sys::list(&dir)).into_iter().collect();
    assert_eq!(now, alive);
}

#[test]
fn readdir_while_renaming_within_the_directory() {
    let m = need_mount!();
    let dir = m.join("r");
    ok!(fs::create_dir(&dir));
    for i in 0..400 {
        ok!(fs::write(dir.join(format!("e{i}")), b""));
    }
    let f = ok!(sys::open_dir(&dir));
    let mut seen = BTreeMap::<String, usize>::new();
    let mut untouched: BTreeSet<String> = (0..400).map(|i| format!("e{i}")).collect();
    let mut k = 0;
    loop {
        let batch = ok!(sys::getdents(&f, 600));
        if batch.is_empty() {
            break;
        }
        guard_runaway(seen.values().sum(), 2 * 402);
        for e in batch {
            *seen
                .entry(String::from_utf8_lossy(&e.name).into_owned())
                .or_default() += 1;
        }
        // Rename two untouched entries (seen or not) to new names.
        for _ in 0..2 {
            if let Some(n) = untouched.iter().nth(k % 7).cloned() {
                untouched.remove(&n);
                ok!(fs::rename(dir.join(&n), dir.join(format!("{n}-renamed"))));
            }
            k += 1;
        }
    }
    let dups: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
    assert!(dups.is_empty(), "duplicates: {dups:?}");
    let missed: Vec<_> = untouched
        .iter()
        .filter(|n| !seen.contains_key(*n))
        .collect();
    assert!(
        missed.is_empty(),
        "never-renamed entries missed: {missed:?}"
    );
}
