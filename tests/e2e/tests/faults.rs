//! Faults: the server killed with SIGKILL while writers are busy (ENOTCONN without hanging,
//! `memofs umount` recovers, a new mount works), fsynced data of the passthrough backend
//! surviving that kill on the host, repeated fill-to-ENOSPC/free cycles at `size=` and
//! `nr_inodes=` (clean failures, earlier data intact, nothing leaked), and host errors under the
//! passthrough backend (read-only and full file systems mounted below SOURCE) coming back as
//! the same errno while the server keeps working.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{symlink, FileExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memofs_e2e::checks::{eventually, export_tmpfs, process_alive};
use memofs_e2e::cli::run_with_timeout;
use memofs_e2e::{
    assert_bytes_eq, assert_errno, is_mounted, memofs, ok, pattern, require_mount, sys,
    with_timeout, Mount, TempDir, UnmountGuard,
};

/// How long any single call on a dead mount may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(10);

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

/// A thread creating, writing and closing files in `dir` until a call fails; it counts the
/// files completed and returns the error that stopped it.
fn busy_writer(dir: PathBuf, done: Arc<AtomicU64>) -> std::thread::JoinHandle<std::io::Error> {
    std::thread::spawn(move || {
        let chunk = pattern(1, 64 << 10);
        for i in 0.. {
            let r = File::create(dir.join(format!("w{}", i % 64)))
                .and_then(|mut f| f.write_all(&chunk).and_then(|_| f.sync_all()));
            if let Err(e) = r {
                return e;
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
        unreachable!()
    })
}

#[test]
fn sigkill_under_load_gives_enotconn_and_umount_recovers() {
    require_mount!();
    let base = TempDir::new("memofs-e2e-faults-");
    let mnt = base.path().join("mnt");
    ok!(fs::create_dir(&mnt));
    let _guard = UnmountGuard(mnt.clone());
    let mut m = Mount::try_memofs_on(&mnt, &["size=256m"]).unwrap_or_else(|e| panic!("{e}"));
    // Load: a writer thread, and a separate shell process writing files in a loop.
    let done = Arc::new(AtomicU64::new(0));
    let writer = busy_writer(mnt.clone(), done.clone());
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(r#"i=0; while :; do head -c 65536 /dev/zero > "$1/sh.$((i % 50))" || exit 3; i=$((i+1)); done"#)
        .arg("sh")
        .arg(&mnt)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sh");
    eventually("both writers busy", HANG, || {
        let n = done.load(Ordering::Relaxed);
        (n >= 20 && mnt.join("sh.10").exists(), n)
    });
    m.signal_server(libc::SIGKILL);
    assert!(m.wait_server(HANG).is_some(), "server survived SIGKILL");
    // The writer stops with a connection error instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(writer.join().unwrap()));
    let err = rx
        .recv_timeout(HANG)
        .expect("the writer thread hangs after the server was killed");
    // A request in flight when the server dies ends with ECONNABORTED; with the io_uring
    // transport one being delivered to a ring entry while the ring's thread dies may end
    // with ECANCELED instead.
    assert!(
        [libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED].contains(&errno_of(&err)),
        "writer stopped with {err}, want ENOTCONN, ECONNABORTED or ECANCELED"
    );
    let mut shell_status = None;
    eventually("the shell writer ends", HANG, || {
        shell_status = shell.try_wait().unwrap();
        (shell_status.is_some(), ())
    });
    let _ = shell.kill();
    assert_eq!(
        shell_status.and_then(|s| s.code()),
        Some(3),
        "the shell loop ends because a redirection into the dead mount fails"
    );
    // Calls that must reach the server (a stat answered from the kernel's attribute cache may
    // still succeed, as on any FUSE mount).
    for what in ["lookup of a new name", "create", "readdir"] {
        let p = mnt.clone();
        let res = with_timeout(HANG, move || match what {
            "create" => fs::write(p.join("new"), b"x"),
            "readdir" => fs::read_dir(&p).map(drop),
            _ => fs::metadata(p.join("never-looked-up")).map(drop),
        })
        .unwrap_or_else(|| panic!("{what} hangs on the dead mount"));
        assert_errno!(
            res,
            libc::ENOTCONN,
            "{what} on a mount whose server was killed"
        );
    }
    let out = memofs(&["umount", mnt.to_str().unwrap()]);
    assert!(
        out.success(),
        "{}",
        out.describe("memofs umount of the dead mount")
    );
    assert!(!is_mounted(&mnt), "memofs umount left the dead mount");
    drop(m);
    let m2 = Mount::try_memofs_on(&mnt, &["size=64m"]).unwrap_or_else(|e| panic!("{e}"));
    let data = pattern(2, 100_000);
    ok!(fs::write(m2.join("again"), &data));
    assert_bytes_eq(&ok!(fs::read(m2.join("again"))), &data, "after remounting");
    assert_eq!(
        ok!(sys::list(m2.path())),
        vec!["again"],
        "a fresh mount starts empty"
    );
}

/// A writer keeps a file open under the writeback cache when the server is killed: the
/// kernel takes its writes into the page cache without asking the (dead) connection, so they
/// may go on succeeding, and only `fsync` reports the loss. `memofs umount` clears the mount
/// anyway: the mount is busy and its server gone, so it detaches it and names who holds it.
#[test]
fn umount_clears_a_dead_mount_a_writer_still_holds() {
    require_mount!();
    let base = TempDir::new("memofs-e2e-faults-");
    let mnt = base.path().join("mnt");
    ok!(fs::create_dir(&mnt));
    let _guard = UnmountGuard(mnt.clone());
    let mut m = Mount::try_memofs_on(&mnt, &["writeback=on", "passthrough=off"])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut f = ok!(File::create(mnt.join("log")));
    ok!(f.write_all(b"before\n"));
    m.signal_server(libc::SIGKILL);
    assert!(m.wait_server(HANG).is_some(), "server survived SIGKILL");
    // What the writer sees is the kernel's: each write either lands in the page cache or
    // fails with ENOTCONN; it never hangs. The loss shows at fsync at the latest.
    let f = with_timeout(HANG, move || {
        let _ = f.write_all(b"after\n");
        f
    })
    .expect("a write into the dead mount hangs");
    let synced = with_timeout(HANG, move || (f.sync_all(), f)).expect("fsync hangs");
    assert!(synced.0.is_err(), "fsync on a dead mount reported success");
    let held = synced.1;
    let out = memofs(&["umount", mnt.to_str().unwrap()]);
    assert!(
        out.success(),
        "{}",
        out.describe("memofs umount of a dead, held mount")
    );
    assert!(!is_mounted(&mnt), "memofs umount left the dead mount");
    let me = format!("{} (", std::process::id());
    assert!(
        out.stderr.contains("server is gone") && out.stderr.contains(&me),
        "the message names the holder: {}",
        out.stderr
    );
    drop(held);
    drop(m);
}

#[test]
fn fsynced_data_survives_a_server_kill_on_the_passthrough_backend() {
    require_mount!();
    let (host, mut m) = export_tmpfs("export", &["size=256m"], &[]);
    // (file index, bytes acknowledged by fsync) after every successful fsync.
    let acked: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    const CHUNK: usize = 16 << 10;
    const PER_FILE: u64 = 8;
    let (dir, log) = (m.path().to_path_buf(), acked.clone());
    let writer = std::thread::spawn(move || -> std::io::Error {
        for i in 0u64.. {
            let f = match File::create(dir.join(format!("f{i}"))) {
                Ok(f) => f,
                Err(e) => return e,
            };
            log.lock().unwrap().push(0);
            for c in 0..PER_FILE {
                let r = f
                    .write_all_at(&pattern(i * 100 + c, CHUNK), c * CHUNK as u64)
                    .and_then(|_| f.sync_all());
                if let Err(e) = r {
                    return e;
                }
                log.lock().unwrap()[i as usize] = (c + 1) * CHUNK as u64;
            }
        }
        unreachable!()
    });
    eventually("the writer has fsynced 40 files", HANG, || {
        let n = acked.lock().unwrap().len();
        (n > 40, n)
    });
    m.signal_server(libc::SIGKILL);
    assert!(m.wait_server(HANG).is_some(), "server survived SIGKILL");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(writer.join().unwrap()));
    let err = rx
        .recv_timeout(HANG)
        .expect("the writer hangs after the kill");
    eprintln!("writer stopped with: {err}");
    let acked = acked.lock().unwrap().clone();
    for (i, &len) in acked.iter().enumerate() {
        let p = host.join(format!("export/f{i}"));
        let got = ok!(fs::read(&p), "f{i} (created through the mount) on the host");
        assert!(
            got.len() as u64 >= len,
            "f{i}: {} bytes on the host, {len} were fsynced",
            got.len()
        );
        let want: Vec<u8> = (0..len / CHUNK as u64)
            .flat_map(|c| pattern(i as u64 * 100 + c, CHUNK))
            .collect();
        assert_bytes_eq(
            &got[..len as usize],
            &want,
            &format!("fsynced bytes of f{i} on the host"),
        );
    }
    eprintln!(
        "{} files, {} fsynced bytes intact on the host",
        acked.len(),
        acked.iter().sum::<u64>()
    );
}

/// Fill `dir` from two threads with files written in odd-sized chunks until both meet
/// ENOSPC; returns (path, acknowledged bytes) of every file.
fn fill_concurrently(dir: &Path, cycle: u64) -> Vec<(PathBuf, Vec<u8>)> {
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let dir = dir.to_path_buf();
            std::thread::spawn(move || {
                let mut files = Vec::new();
                for i in 0.. {
                    let p = dir.join(format!("c{cycle}t{t}f{i}"));
                    let f = match OpenOptions::new().create_new(true).write(true).open(&p) {
                        Ok(f) => f,
                        Err(e) if errno_of(&e) == libc::ENOSPC => return files,
                        Err(e) => panic!("create {}: {e}", p.display()),
                    };
                    let mut acked = Vec::new();
                    for c in 0..4 {
                        let piece = pattern(cycle * 1_000_000 + t * 10_000 + i * 10 + c, 65_537);
                        match f.write_at(&piece, acked.len() as u64) {
                            Ok(n) => acked.extend_from_slice(&piece[..n]),
                            Err(e) if errno_of(&e) == libc::ENOSPC => {
                                files.push((p, acked));
                                return files;
                            }
                            Err(e) => panic!("write {}: {e}", p.display()),
                        }
                    }
                    files.push((p, acked));
                }
                unreachable!()
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

#[test]
fn enospc_fill_and_free_cycles_at_size_keep_data_and_leak_nothing() {
    require_mount!();
    // Write-time ENOSPC: under the writeback cache it comes at fsync or close
    // (limits.rs, `enospc_under_the_writeback_cache_reaches_every_writer`).
    let m = Mount::mem(&["size=4m", "writeback=off"]);
    let empty = ok!(sys::statfs(m.path()));
    let mut totals = Vec::new();
    for cycle in 0..3u64 {
        let files = fill_concurrently(m.path(), cycle);
        let total: usize = files.iter().map(|(_, d)| d.len()).sum();
        assert!(
            total <= 4 << 20,
            "cycle {cycle}: {total} bytes accepted by size=4m"
        );
        for (p, data) in &files {
            assert_bytes_eq(
                &ok!(fs::read(p)),
                data,
                &format!("cycle {cycle}: {}", p.display()),
            );
        }
        // A full mount refuses more data, cleanly.
        assert_errno!(
            fs::write(m.join("more"), vec![7u8; 1 << 20]),
            libc::ENOSPC,
            "cycle {cycle}: 1 MiB into a full mount"
        );
        let _ = fs::remove_file(m.join("more"));
        for (p, _) in &files {
            ok!(fs::remove_file(p));
        }
        eventually(&format!("cycle {cycle}: space given back"), HANG, || {
            let s = sys::statfs(m.path()).unwrap();
            (
                (s.f_bfree, s.f_ffree) == (empty.f_bfree, empty.f_ffree),
                (s.f_bfree, s.f_ffree),
            )
        });
        totals.push(total);
    }
    eprintln!("bytes accepted per fill cycle: {totals:?}");
    assert!(
        totals[0] >= 3 << 20,
        "size=4m took only {} bytes",
        totals[0]
    );
    for t in &totals[1..] {
        assert!(
            t.abs_diff(totals[0]) <= 4 * 65_537,
            "a later cycle accepted {t} bytes, the first {}: space leaks or appears",
            totals[0]
        );
    }
}

#[test]
fn enospc_fill_and_free_cycles_at_nr_inodes() {
    require_mount!();
    let m = Mount::mem(&["size=64m", "nr_inodes=64"]);
    for cycle in 0..3 {
        let mut made = Vec::new();
        let err = loop {
            let p = m.join(format!("n{cycle}-{}", made.len()));
            let r = match made.len() % 3 {
                0 => fs::write(&p, format!("{}", p.display())),
                1 => fs::create_dir(&p),
                _ => symlink("target", &p),
            };
            match r {
                Ok(()) => made.push(p),
                Err(e) => break e,
            }
            assert!(made.len() < 64, "more than 63 inodes besides the root");
        };
        assert_errno!(
            Err::<(), _>(err),
            libc::ENOSPC,
            "cycle {cycle}: past nr_inodes=64"
        );
        assert_eq!(
            made.len(),
            63,
            "cycle {cycle}: nr_inodes=64 holds the root and 63 more"
        );
        for p in made.iter().step_by(3) {
            assert_eq!(
                ok!(fs::read_to_string(p)),
                format!("{}", p.display()),
                "earlier data intact"
            );
        }
        for (k, p) in made.iter().enumerate() {
            ok!(if k % 3 == 1 {
                fs::remove_dir(p)
            } else {
                fs::remove_file(p)
            });
        }
        eventually(&format!("cycle {cycle}: inodes given back"), HANG, || {
            let s = sys::statfs(m.path()).unwrap();
            (s.f_ffree == 63, s.f_ffree)
        });
    }
}

/// A tmpfs mounted at a given path, detached on drop.
struct SubMount(PathBuf);

impl SubMount {
    fn new(at: PathBuf, opts: &str) -> SubMount {
        ok!(fs::create_dir_all(&at));
        let mut cmd = Command::new("mount");
        cmd.args(["-t", "tmpfs", "-o", opts, "memofs-e2e-sub"])
            .arg(&at);
        let out = run_with_timeout(cmd, Duration::from_secs(30));
        assert!(
            out.success(),
            "{}",
            out.describe("mount a tmpfs below SOURCE")
        );
        SubMount(at)
    }

    fn remount_ro(&self) {
        let mut cmd = Command::new("mount");
        cmd.args(["-o", "remount,ro"]).arg(&self.0);
        let out = run_with_timeout(cmd, Duration::from_secs(30));
        assert!(out.success(), "{}", out.describe("remount read-only"));
    }
}

impl Drop for SubMount {
    fn drop(&mut self) {
        let mut cmd = Command::new("umount");
        cmd.arg("-l").arg(&self.0);
        run_with_timeout(cmd, Duration::from_secs(30));
    }
}

#[test]
fn host_errors_pass_through_and_the_server_survives() {
    require_mount!();
    let host = Mount::tmpfs(&["size=64m"]);
    let src = host.join("export");
    let ro = SubMount::new(src.join("ro"), "size=1m");
    ok!(fs::write(src.join("ro/existing"), b"kept"));
    ro.remount_ro();
    let _tiny = SubMount::new(src.join("tiny"), "size=64k");
    let m = Mount::try_memofs_source(&src, &[]).unwrap_or_else(|e| panic!("{e}"));
    let pid = m.server_pid().unwrap();
    let alive_and_working = |after: &str| {
        assert!(process_alive(pid), "the server died after {after}");
        let p = m.join(format!("probe-{}", after.len()));
        ok!(
            fs::write(&p, after),
            "a write at the export root after {after}"
        );
        assert_eq!(ok!(fs::read_to_string(&p)), after);
    };
    let r = |n: &str| m.join("ro").join(n);
    assert_eq!(
        ok!(fs::read(r("existing"))),
        b"kept",
        "reading on the read-only host fs"
    );
    type Call<'a> = Box<dyn Fn() -> std::io::Result<()> + 'a>;
    let ro_calls: Vec<(&str, Call)> = vec![
        ("create", Box::new(|| fs::write(r("new"), b"x"))),
        ("mkdir", Box::new(|| fs::create_dir(r("d")))),
        (
            "open for writing",
            Box::new(|| OpenOptions::new().write(true).open(r("existing")).map(drop)),
        ),
        ("truncate", Box::new(|| sys::truncate(r("existing"), 0))),
        ("unlink", Box::new(|| fs::remove_file(r("existing")))),
        ("rename", Box::new(|| fs::rename(r("existing"), r("moved")))),
        ("chmod", Box::new(|| sys::chmod(r("existing"), 0o600))),
        (
            "setxattr",
            Box::new(|| sys::setxattr(r("existing"), "user.k", b"v", 0)),
        ),
        ("symlink", Box::new(|| symlink("t", r("l")))),
        ("mknod", Box::new(|| sys::mkfifo(r("p"), 0o644))),
    ];
    for (what, call) in &ro_calls {
        assert_errno!(call(), libc::EROFS, "{what} on a read-only fs below SOURCE");
        alive_and_working(what);
    }
    assert_eq!(ok!(fs::read(r("existing"))), b"kept");
    // A full host file system: the write stops with ENOSPC, what was accepted is intact.
    let big = m.join("tiny/big");
    let f = ok!(File::create(&big));
    let mut acked = Vec::new();
    let err = loop {
        let piece = pattern(acked.len() as u64, 10_000);
        match f.write_at(&piece, acked.len() as u64) {
            Ok(n) => acked.extend_from_slice(&piece[..n]),
            Err(e) => break e,
        }
        assert!(acked.len() < 1 << 20, "no ENOSPC from a 64 KiB host tmpfs");
    };
    drop(f);
    assert_errno!(
        Err::<(), _>(err),
        libc::ENOSPC,
        "writing past a full host fs"
    );
    alive_and_working("ENOSPC");
    assert_bytes_eq(
        &ok!(fs::read(&big)),
        &acked,
        "accepted bytes through the mount",
    );
    assert_bytes_eq(
        &ok!(fs::read(src.join("tiny/big"))),
        &acked,
        "accepted bytes on the host",
    );
    // Across host file systems: EXDEV, as on the host.
    assert_errno!(
        fs::rename(&big, m.join("moved")),
        libc::EXDEV,
        "rename across host mounts"
    );
    assert_errno!(
        fs::hard_link(&big, m.join("linked")),
        libc::EXDEV,
        "link across host mounts"
    );
    alive_and_working("EXDEV");
    // Freeing the space makes writes succeed again.
    ok!(fs::remove_file(&big));
    let again = pattern(9, 40_000);
    eventually("space back on the host fs", HANG, || {
        (fs::write(m.join("tiny/again"), &again).is_ok(), ())
    });
    assert_bytes_eq(
        &ok!(fs::read(src.join("tiny/again"))),
        &again,
        "written after freeing",
    );
}
