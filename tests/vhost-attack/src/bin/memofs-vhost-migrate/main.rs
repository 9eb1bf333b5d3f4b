//! memofs-vhost-migrate: a guest's filesystem moved from one server to another mid-stream,
//! as a VMM live-migrates a VM (vhost-user device state transfer).
//!
//! Two servers start from the same command line; the guest (a vhost-user frontend sharing
//! its memory with both) mounts the first, fills it (`--files` small files in 100
//! directories, `--mib` MiB in 8 large files), leaves work in flight (a file open and half
//! written, a file unlinked while open, a directory listing half read), and then migrates:
//! both queues stopped, the first server's state piped into the second, the queues started
//! there where they stopped. Every request after that must answer as the first server would
//! have: the same attributes for every node id the guest holds, the listing going on where
//! it was, the open files working, every byte's checksum, the same usage in `memofs stats`,
//! and no more memory than the first server used.
//!
//! A server exporting a shared directory (`--shared-dir @SHARE@`: both servers export the
//! same one) moves only what the guest holds: each file is found again on the destination.
//! By path (virtiofsd's `find-paths`, the default), a file deleted while open has none: the
//! first migration must fail and the guest go on at the source, where the file is closed;
//! a second migration, to another new server, must then succeed. By file handle, it moves.
//!
//! Usage: `memofs-vhost-migrate [--files N] [--mib N] -- SERVER ARGS...` (`@SOCKET@` is
//! replaced by each server's socket, `@SHARE@` by the shared directory). Prints `PASS name` / `FAIL name: why` lines and
//! `migrate: N passed, N failed`; exits 1 if anything failed.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use memofs_vhost_attack::guest::Guest;
use memofs_vhost_attack::server::{rss_kib, start, stop, Report};

mod ops;
mod world;

/// Large files, each `mib / BIG_FILES` MiB.
const BIG_FILES: usize = 8;
pub(crate) const MIB: usize = 1 << 20;

struct Options {
    files: usize,
    mib: usize,
    server: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        files: 10_000,
        mib: 1024,
        server: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{what} takes a number"))
        };
        match a.as_str() {
            "--files" => o.files = num("--files")?,
            "--mib" => o.mib = num("--mib")?,
            "--" => {
                o.server = args.by_ref().collect();
                break;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.server.is_empty() || o.mib / BIG_FILES * BIG_FILES != o.mib {
        return Err(format!(
            "usage: memofs-vhost-migrate [--files N] [--mib N, a multiple of {BIG_FILES}] -- SERVER ARGS... (@SOCKET@)"
        ));
    }
    Ok(o)
}

/// A stream of bytes that depends on `seed` and the position: what a large file holds.
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let mut x = seed ^ (offset / 8 + i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// FNV-1a, folded over a file's bytes in order.
pub(crate) fn fold(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}
pub(crate) const FNV: u64 = 0xcbf2_9ce4_8422_2325;

/// What a small file holds.
fn small(i: usize) -> Vec<u8> {
    let line = format!("small file {i}\n");
    line.repeat(1 + (i * 37) % 600).into_bytes()
}

/// `usage.bytes_used` and `usage.inodes_used` from `memofs stats --json` of a server.
fn usage(memofs: &str, socket: &Path) -> Result<(u64, u64), String> {
    let out = std::process::Command::new(memofs)
        .args(["stats", "--json"])
        .arg(socket)
        .output()
        .map_err(|e| format!("memofs stats: {e}"))?;
    let doc = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Result<u64, String> {
        let at = doc
            .find(&format!("\"{name}\":"))
            .ok_or_else(|| format!("memofs stats said no {name}: {doc}"))?;
        let digits: String = doc[at + name.len() + 3..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().map_err(|_| format!("{name} in {doc}"))
    };
    Ok((field("bytes_used")?, field("inodes_used")?))
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("memofs-vhost-migrate: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("memofs-migrate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("memofs-vhost-migrate: {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let mut report = Report::default();
    let share = dir.join("share");
    let (a, mut b) = (dir.join("sock-a"), dir.join("sock-b"));
    let mut servers: Vec<(Child, PathBuf)> = Vec::new();
    let shared = o.server.iter().any(|a| a.starts_with("--shared-dir"));
    let by_path = shared && !o.server.iter().any(|a| a.contains("file-handles"));
    let run = (|| -> Result<(), String> {
        std::fs::create_dir(&share).map_err(|e| format!("{}: {e}", share.display()))?;
        for socket in [&a, &b] {
            servers.push((start(&o.server, socket, &share)?, socket.clone()));
        }
        let mut g = Guest::connect(&a).map_err(|e| format!("connecting: {e}"))?;
        g.init().map_err(|e| format!("INIT: {e}"))?;
        let t = Instant::now();
        let mut world = world::build(&o, &mut g)?;
        println!(
            "built {} nodes, {} MiB in {:.1} s",
            world.nodes(),
            o.mib,
            t.elapsed().as_secs_f64()
        );
        if by_path {
            report.check(
                "a-file-deleted-while-open-stops-a-migration-by-path",
                match g.migrate(&b) {
                    Err(_) => Ok("the guest goes on at the source".into()),
                    Ok(()) => Err("it migrated without the deleted file".into()),
                },
            );
            report.check(
                "the-source-serves-on-after-a-failed-migration",
                world::unlinked_reads(&mut g, &world),
            );
            world::forget_unlinked(&mut g, &mut world);
            b = dir.join("sock-c");
            servers.push((start(&o.server, &b, &share)?, b.clone()));
            servers.swap(1, 2);
        }
        report.check(
            "every-page-the-server-writes-during-precopy-is-logged",
            world::logged_while_precopy(&mut g, &mut world),
        );
        let memofs = &o.server[0];
        let used = if shared { (0, 0) } else { usage(memofs, &a)? };
        let rss = rss_kib(servers[0].0.id());
        let t = Instant::now();
        g.migrate(&b).map_err(|e| format!("migrating: {e}"))?;
        println!("migrated in {:.1} s", t.elapsed().as_secs_f64());
        report.check("the-source-ends-when-its-vmm-goes", {
            let deadline = Instant::now() + Duration::from_secs(10);
            let src = &mut servers[0].0;
            while !matches!(src.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            match src.try_wait() {
                Ok(Some(_)) => Ok(String::new()),
                _ => Err("still running 10 s after the VMM left".into()),
            }
        });
        // A shared directory's usage is its host filesystem's, which others change too.
        if !shared {
            report.check(
                "the-same-usage-arrives",
                (|| {
                    let now = usage(memofs, &b)?;
                    (now == used)
                        .then_some(format!("{} bytes, {} inodes", used.0, used.1))
                        .ok_or(format!("source {used:?}, destination {now:?}"))
                })(),
            );
        }
        report.check("no-more-memory-than-the-source", {
            let dst = rss_kib(servers[1].0.id());
            if dst <= rss + rss / 10 + 32 * 1024 {
                Ok(format!("source {rss} KiB, destination {dst} KiB"))
            } else {
                Err(format!("source {rss} KiB, destination {dst} KiB"))
            }
        });
        for (name, check) in world::CHECKS {
            report.check(name, check(&mut g, &world));
        }
        Ok(())
    })();
    if let Err(e) = run {
        report.check("setup", Err(e));
    }
    for (mut server, socket) in servers {
        stop(&mut server, &socket);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "migrate: {} passed, {} failed",
        report.passed, report.failed
    );
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
