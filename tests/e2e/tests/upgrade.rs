//! `memofs upgrade`: a new executable takes a live mem mount over, and what processes on the
//! mount hold goes on as if nothing happened: files and their inode numbers, open files and
//! their offsets, an unlinked open file, a shared mapping, a directory listing half read, a
//! `flock`. An upgrade that cannot happen leaves the old server serving.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use memofs_e2e::cli::run_with_timeout;
use memofs_e2e::map::Map;
use memofs_e2e::{memofs_bin, ok, pattern, require_mount, skip, Mount, TempDir};

/// `memofs upgrade MNT [--bin BIN]`: its output, and whether it succeeded.
fn upgrade(m: &Mount, bin: Option<&Path>) -> (bool, String) {
    let mut cmd = std::process::Command::new(memofs_bin());
    cmd.arg("upgrade").arg(m.path());
    if let Some(bin) = bin {
        cmd.arg("--bin").arg(bin);
    }
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    (out.success(), format!("{}{}", out.stdout, out.stderr))
}

/// The names of a directory descriptor's next `getdents64` batch of at most `max` bytes (a
/// small buffer: the listing goes on where it stopped, as `ls` of a large directory).
fn next_names(dir: &File, max: usize) -> Vec<String> {
    ok!(memofs_e2e::sys::getdents(dir, max))
        .into_iter()
        .map(|d| String::from_utf8_lossy(&d.name).into_owned())
        .collect()
}

/// What a process on the mount holds across the upgrades.
struct Held {
    reader: File,
    appender: File,
    unlinked: File,
    mapped: Map,
    listing: File,
    listed: Vec<String>,
    locked: File,
}

const ENTRIES: usize = 400;

fn populate(m: &Mount) -> Held {
    ok!(fs::create_dir(m.join("d")));
    for i in 0..ENTRIES {
        ok!(fs::write(
            m.join(format!("d/entry-{i:04}")),
            pattern(i as u64, i % 3000)
        ));
    }
    ok!(fs::write(m.join("data"), pattern(7, 1 << 20)));
    ok!(fs::hard_link(m.join("data"), m.join("data-link")));
    ok!(std::os::unix::fs::symlink("data", m.join("sym")));
    ok!(fs::write(m.join("log"), b"first\n"));
    let mut reader = ok!(File::open(m.join("data")));
    let mut first = vec![0u8; 1000];
    ok!(reader.read_exact(&mut first));
    let appender = ok!(OpenOptions::new().append(true).open(m.join("log")));
    let mut unlinked = ok!(OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.join("gone")));
    ok!(unlinked.write_all(b"still here"));
    ok!(fs::remove_file(m.join("gone")));
    let map_file = ok!(OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.join("mapped")));
    ok!(map_file.set_len(8192));
    let mapped = ok!(Map::shared(&map_file, 0, 8192));
    let listing = ok!(File::open(m.join("d")));
    let listed = next_names(&listing, 1024);
    assert!(
        !listed.is_empty() && listed.len() < ENTRIES,
        "{}",
        listed.len()
    );
    let locked = ok!(File::open(m.join("log")));
    // SAFETY: flock on an open descriptor.
    assert_eq!(unsafe { libc::flock(locked.as_raw_fd(), libc::LOCK_EX) }, 0);
    Held {
        reader,
        appender,
        unlinked,
        mapped,
        listing,
        listed,
        locked,
    }
}

/// Every name's inode number and size ("log" grows).
fn inodes(m: &Mount) -> Vec<(String, u64, u64)> {
    let mut all = Vec::new();
    for rel in ["data", "data-link", "mapped", "d"] {
        let md = ok!(fs::symlink_metadata(m.join(rel)));
        all.push((rel.to_string(), md.ino(), md.len()));
    }
    for e in ok!(fs::read_dir(m.join("d"))) {
        let e = ok!(e);
        let md = ok!(e.metadata());
        all.push((
            e.file_name().to_string_lossy().into_owned(),
            md.ino(),
            md.len(),
        ));
    }
    all.sort();
    all
}

fn check_after(m: &Mount, held: &mut Held, round: usize) {
    // The open file reads on from its offset.
    let mut next = vec![0u8; 1000];
    ok!(held.reader.read_exact(&mut next));
    let want = pattern(7, 1 << 20);
    let at = 1000 * (round + 1);
    assert!(
        next == want[at..at + 1000],
        "round {round}: the offset moved"
    );
    // The appender appends, the unlinked file is still there.
    ok!(held
        .appender
        .write_all(format!("round {round}\n").as_bytes()));
    let mut gone = String::new();
    ok!(held.unlinked.seek(SeekFrom::Start(0)));
    ok!(held.unlinked.read_to_string(&mut gone));
    assert_eq!(gone, "still here");
    // The mapping writes through to the file, and reads what is written to it.
    held.mapped.bytes()[round] = b'A' + round as u8;
    let seen = ok!(fs::read(m.join("mapped")));
    assert_eq!(
        seen[round],
        b'A' + round as u8,
        "round {round}: mapped write"
    );
    // The lock is still held.
    let other = ok!(File::open(m.join("log")));
    // SAFETY: flock on an open descriptor.
    let r = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(r, -1, "round {round}: the flock was lost");
    let _ = &held.locked;
}

fn an_upgrade_keeps(opts: &[&str]) {
    let mut all = vec!["size=256m", "io_uring=off"];
    all.extend_from_slice(opts);
    let m = Mount::memofs(&all);
    let mut held = populate(&m);
    let before = inodes(&m);
    let pid = m.server_pid();
    for round in 0..3 {
        let (ok, out) = upgrade(&m, None);
        assert!(ok && out.contains("is served by"), "{out}\n{}", m.log());
        check_after(&m, &mut held, round);
    }
    assert_eq!(m.server_pid(), pid);
    assert!(pid.is_some_and(memofs_e2e::checks::process_alive));
    // The listing goes on where it stopped: every name once.
    let mut names = std::mem::take(&mut held.listed);
    loop {
        let more = next_names(&held.listing, 1024);
        if more.is_empty() {
            break;
        }
        names.extend(more);
    }
    names.retain(|n| n != "." && n != "..");
    names.sort();
    let want: Vec<String> = (0..ENTRIES).map(|i| format!("entry-{i:04}")).collect();
    assert_eq!(names, want, "the listing across the upgrades");
    let after = inodes(&m);
    let changed: Vec<_> = after.iter().filter(|a| !before.contains(a)).collect();
    assert!(
        changed.is_empty() && after.len() == before.len(),
        "inode numbers or sizes changed: {changed:?}"
    );
    for i in (0..ENTRIES).step_by(37) {
        let got = ok!(fs::read(m.join(format!("d/entry-{i:04}"))));
        assert!(got == pattern(i as u64, i % 3000), "entry {i}");
    }
    let log = ok!(fs::read_to_string(m.join("log")));
    assert_eq!(log, "first\nround 0\nround 1\nround 2\n");
    assert_eq!(ok!(fs::read_link(m.join("sym"))), Path::new("data"));
    // New files after the upgrades, and the mount still unmounts cleanly (on drop).
    ok!(fs::write(m.join("after"), b"new"));
    assert_eq!(ok!(fs::read(m.join("after"))), b"new");
}

#[test]
fn an_upgrade_keeps_files_and_what_processes_hold() {
    require_mount!();
    an_upgrade_keeps(&[]);
}

#[test]
fn an_upgrade_keeps_the_server_s_own_data() {
    require_mount!();
    an_upgrade_keeps(&["passthrough=off"]);
}

#[test]
fn an_upgrade_that_cannot_happen_leaves_the_server_serving() {
    require_mount!();
    let m = Mount::memofs(&["size=64m", "io_uring=off"]);
    ok!(fs::write(m.join("f"), b"kept"));
    let dir = TempDir::new("memofs-e2e-upgrade-");
    // Not a memofs: refused before anything changes hands.
    let (ok, out) = upgrade(&m, Some(Path::new("/bin/true")));
    assert!(!ok && out.contains("not a memofs"), "{out}");
    // A memofs that takes the state and cannot serve it: the old executable again.
    let wrapper = dir.path().join("memofs-broken");
    let script = format!(
        "#!/bin/sh\ncase \"$2\" in --state-fd) shift; exec '{}' resume --fallback 'a planted failure' \"$@\";; esac\nexec '{}' \"$@\"\n",
        memofs_bin().display(),
        memofs_bin().display()
    );
    ok!(fs::write(&wrapper, script));
    ok!(fs::set_permissions(
        &wrapper,
        fs::Permissions::from_mode(0o755)
    ));
    let (ok, out) = upgrade(&m, Some(&wrapper));
    assert!(
        !ok && out.contains("a planted failure") && out.contains("serves on"),
        "{out}"
    );
    assert_eq!(ok!(fs::read(m.join("f"))), b"kept", "after the fallback");
    ok!(fs::write(m.join("g"), b"written"));
    let (ok, out) = upgrade(&m, None);
    assert!(ok, "{out}");
    assert_eq!(ok!(fs::read(m.join("f"))), b"kept");
}

#[test]
fn an_export_is_refused_and_serves_on() {
    require_mount!();
    let src = TempDir::new("memofs-e2e-upgrade-src-");
    ok!(fs::write(src.path().join("f"), b"host"));
    let m =
        Mount::try_memofs_source(src.path(), &["io_uring=off"]).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = upgrade(&m, None);
    assert!(!ok && out.contains("export"), "{out}");
    assert_eq!(ok!(fs::read(m.join("f"))), b"host");
}

#[test]
fn a_mount_on_io_uring_rings_is_refused_and_serves_on() {
    require_mount!();
    let m = Mount::memofs(&["size=16m", "io_uring=auto"]);
    let stats = memofs_e2e::memofs(&["stats", &m.path().to_string_lossy()]);
    let rings = stats.stdout.lines().any(|l| {
        l.trim_start()
            .strip_prefix("transport")
            .is_some_and(|t| t.trim_start().starts_with("io_uring:"))
    });
    if !rings {
        skip!(
            Config("io_uring"),
            "requests come through /dev/fuse in this run (the io_uring run has the rings)"
        );
    }
    ok!(fs::write(m.join("f"), b"kept"));
    let (ok, out) = upgrade(&m, None);
    assert!(!ok && out.contains("io_uring"), "{out}");
    assert_eq!(ok!(fs::read(m.join("f"))), b"kept");
}
