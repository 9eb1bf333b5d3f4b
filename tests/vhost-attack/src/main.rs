//! memofs-vhost-attack: a malicious virtio-fs guest, from outside the server's process.
//!
//! It is a vhost-user frontend (the VMM's side) on the real socket of a real server: it
//! shares guest memory (a memfd), sets up the queues as QEMU does, and then plays a hostile
//! guest: requests no kernel sends ([`attacks`]), descriptor chains and rings no driver lays
//! out, 500 000 READDIRs of the root, and mutated requests by the thousand ([`fuzz`]); and
//! it looks from the server's root at where the server works ([`confined`]). After
//! each attack the server must still answer a valid request; at the end its memory must not
//! have grown past a bound, and a canary file beside the shared directory and a secret
//! elsewhere must be untouched. The last attack closes the socket in the middle of requests:
//! the server must end without a crash.
//!
//! Usage: `memofs-vhost-attack [--mutations N] [--readdirs N] [--seed S] -- SERVER ARGS...`,
//! where `@SOCKET@` and `@SHARE@` in the server's arguments are replaced by the socket path
//! and the shared directory made for the run. Prints `PASS name` / `FAIL name: why` lines and
//! `attack: N passed, N failed`; exits 1 if anything failed.

mod attacks;
mod confined;
mod fuzz;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use memofs_proto::abi::{self, opcode};
use zerocopy::{FromZeros, IntoBytes};

use memofs_vhost_attack::guest::{self, Guest, REQ};
use memofs_vhost_attack::server::{fds, rss_kib, start, stop, Report};

struct Options {
    mutations: usize,
    readdirs: usize,
    seed: u64,
    server: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        mutations: 20_000,
        readdirs: 500_000,
        seed: 1,
        server: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{what} takes a number"))
        };
        match a.as_str() {
            "--mutations" => o.mutations = num("--mutations")? as usize,
            "--readdirs" => o.readdirs = num("--readdirs")? as usize,
            "--seed" => o.seed = num("--seed")?,
            "--" => {
                o.server = args.by_ref().collect();
                break;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.server.is_empty() {
        return Err("usage: memofs-vhost-attack [--mutations N] [--readdirs N] [--seed S] -- SERVER ARGS... (@SOCKET@, @SHARE@)".into());
    }
    Ok(o)
}

/// The run's files: the shared directory, a canary beside it, a secret elsewhere.
struct Scene {
    dir: PathBuf,
    share: PathBuf,
    canary: PathBuf,
    secret: PathBuf,
}

impl Scene {
    fn new() -> std::io::Result<Scene> {
        let base = std::env::temp_dir();
        let dir = base.join(format!("memofs-attack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("share"))?;
        std::fs::write(dir.join("canary"), b"canary\n")?;
        let secret = base.join(format!("memofs-attack-secret-{}", std::process::id()));
        std::fs::write(&secret, b"secret\n")?;
        Ok(Scene {
            share: dir.join("share"),
            canary: dir.join("canary"),
            dir,
            secret,
        })
    }

    /// What must not change: the canary's and the secret's contents and times, and the
    /// names beside the shared directory.
    fn state(&self) -> String {
        let file = |p: &Path| {
            let m = std::fs::metadata(p).map(|m| {
                use std::os::unix::fs::MetadataExt;
                (
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                    m.mode(),
                )
            });
            format!("{:?} {:?}", std::fs::read(p).ok(), m.ok())
        };
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.retain(|n| !n.starts_with("sock"));
        names.sort();
        format!(
            "{} | {} | {names:?}",
            file(&self.canary),
            file(&self.secret)
        )
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.secret);
    }
}

fn main() -> ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("memofs-vhost-attack: {e}");
            return ExitCode::from(2);
        }
    };
    let scene = match Scene::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memofs-vhost-attack: {e}");
            return ExitCode::from(2);
        }
    };
    let before = scene.state();
    let mut report = Report::default();
    for (name, run) in attacks::ATTACKS {
        report.check(
            name,
            session(&o, &scene, |g, _| run(g).map(|()| String::new())),
        );
    }
    report.check(
        "works-inside-its-sandbox",
        session(&o, &scene, confined::check),
    );
    report.check("reboots-leave-nothing-behind", session(&o, &scene, reboots));
    report.check(
        "readdir-at-offset-0-repeated",
        session(&o, &scene, |g, pid| readdir_memory(&o, g, pid)),
    );
    report.check(
        "mutated-requests",
        session(&o, &scene, |g, pid| mutations(&o, g, pid)),
    );
    report.check("vmm-gone-mid-request", vmm_gone(&o, &scene));
    report.check("nothing-outside-changed", {
        let after = scene.state();
        if after == before {
            Ok(String::new())
        } else {
            Err(format!("before: {before}; after: {after}"))
        }
    });
    finish(report)
}

fn finish(report: Report) -> ExitCode {
    println!("attack: {} passed, {} failed", report.passed, report.failed);
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One attack on a server of its own: started, connected to and mounted (INIT) as a guest
/// would; `attack` runs with the guest and the server's pid; then the server must still be
/// there and answer a valid request, and it is stopped.
fn session(
    o: &Options,
    scene: &Scene,
    attack: impl FnOnce(&mut Guest, u32) -> Result<String, String>,
) -> Result<String, String> {
    let socket = scene.dir.join("sock");
    let mut server = start(&o.server, &socket, &scene.share)?;
    let result = (|| {
        let mut g = Guest::connect(&socket).map_err(|e| format!("connecting: {e}"))?;
        g.init().map_err(|e| format!("INIT: {e}"))?;
        let note = attack(&mut g, server.id())?;
        if let Ok(Some(status)) = server.try_wait() {
            return Err(format!("the server ended: {status}"));
        }
        if !g.answers() {
            return Err("no answer to a valid GETATTR afterwards".into());
        }
        Ok(note)
    })();
    stop(&mut server, &socket);
    result
}

/// READDIR of the root at offset 0, again and again: memory stays put.
fn readdir_memory(o: &Options, g: &mut Guest, pid: u32) -> Result<String, String> {
    let warm = readdirs(g, 20_000);
    let rss0 = rss_kib(pid);
    let answered = readdirs(g, o.readdirs);
    let grown = rss_kib(pid).saturating_sub(rss0);
    if answered + warm < o.readdirs + 20_000 {
        Err(format!("{answered} of {} answered", o.readdirs))
    } else if grown > 1024 {
        Err(format!(
            "{} READDIRs grew the server by {grown} KiB",
            o.readdirs
        ))
    } else {
        Ok(format!("{} READDIRs, {grown} KiB more", o.readdirs))
    }
}

/// Mutated requests by the thousand: every chain comes back, memory stays bounded.
fn mutations(o: &Options, g: &mut Guest, pid: u32) -> Result<String, String> {
    let mut rng = fuzz::Rng::new(o.seed);
    let rss0 = rss_kib(pid);
    let back = fuzz::run(g, &mut rng, o.mutations);
    let grown = rss_kib(pid).saturating_sub(rss0);
    // A mutated request may have been a DESTROY: a guest's kernel mounts again after one.
    let _ = g.init();
    if back < o.mutations {
        Err(format!(
            "{} of {} chains came back (seed {})",
            back, o.mutations, o.seed
        ))
    } else if grown > 64 << 10 {
        Err(format!("the server grew by {grown} KiB (seed {})", o.seed))
    } else {
        Ok(format!(
            "{back} requests, seed {}, {grown} KiB more",
            o.seed
        ))
    }
}

/// The VMM goes away in the middle of requests: the server ends, cleanly.
fn vmm_gone(o: &Options, scene: &Scene) -> Result<String, String> {
    let socket = scene.dir.join("sock");
    let mut server = start(&o.server, &socket, &scene.share)?;
    let ended = (|| {
        let mut g = Guest::connect(&socket).map_err(|e| format!("connecting: {e}"))?;
        g.init().map_err(|e| format!("INIT: {e}"))?;
        let req = g.fuse(
            opcode::GETATTR,
            1,
            abi::fuse_getattr_in::new_zeroed().as_bytes(),
        );
        let _ = g.batch(REQ, &vec![req; 64], 4096, Duration::from_millis(1));
        drop(g);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match server.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(String::new()),
                Ok(Some(s)) => return Err(format!("ended with {s}")),
                _ if Instant::now() > deadline => {
                    return Err("still running 10 s after the VMM left".to_string())
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    })();
    stop(&mut server, &socket);
    ended
}

/// A guest that reboots 20 times (a new INIT each time, as a rebooted kernel sends) while it
/// holds files open that it has deleted and written: after the last, the server holds as
/// many descriptors and as much memory as after the first (within 5%).
fn reboots(g: &mut Guest, pid: u32) -> Result<String, String> {
    let mut after_first = (0, 0);
    for round in 0..20 {
        g.init().map_err(|e| format!("INIT {round}: {e}"))?;
        for i in 0..8 {
            let name = format!("held{i}");
            let (node, fh) = g
                .create(&name)
                .map_err(|e| format!("CREATE in round {round}: {e}"))?;
            let w = abi::fuse_write_in {
                fh,
                size: 128 << 10,
                ..FromZeros::new_zeroed()
            };
            let mut body = w.as_bytes().to_vec();
            body.extend(vec![round as u8; 128 << 10]);
            g.call(opcode::WRITE, node, &body, 4096);
            g.call(opcode::UNLINK, 1, format!("{name}\0").as_bytes(), 4096);
        }
        if round == 0 {
            // Measured at the second INIT: the first boot's files are then released.
            g.init().map_err(|e| format!("INIT: {e}"))?;
            after_first = (fds(pid), rss_kib(pid));
        }
    }
    g.init().map_err(|e| format!("INIT: {e}"))?;
    let last = (fds(pid), rss_kib(pid));
    let within = |a: u64, b: u64| b <= a + a / 20;
    if within(after_first.0, last.0) && within(after_first.1, last.1) {
        Ok(format!(
            "{} descriptors, {} KiB after the first; {} and {} KiB after the last",
            after_first.0, after_first.1, last.0, last.1
        ))
    } else {
        Err(format!(
            "{} descriptors, {} KiB after the first reboot; {} and {} KiB after the 20th",
            after_first.0, after_first.1, last.0, last.1
        ))
    }
}

/// `n` READDIRs of the root at offset 0, in batches; returns how many were answered.
fn readdirs(g: &mut Guest, n: usize) -> usize {
    // The root opened as a guest's kernel opens it (a server that declines OPENDIR lists
    // through handle 0).
    let open = abi::fuse_open_in::new_zeroed();
    let fh = match g.call(opcode::OPENDIR, 1, open.as_bytes(), 4096) {
        Some((0, body)) if body.len() >= 8 => {
            u64::from_le_bytes(body[..8].try_into().expect("8 bytes"))
        }
        _ => 0,
    };
    let r = abi::fuse_read_in {
        fh,
        size: 4096,
        ..FromZeros::new_zeroed()
    };
    let mut done = 0;
    let mut answered = 0;
    while done < n {
        let k = 128.min(n - done);
        let reqs: Vec<Vec<u8>> = (0..k)
            .map(|_| g.fuse(opcode::READDIR, 1, r.as_bytes()))
            .collect();
        // Room for the header and the listing's 4096 bytes, as a guest's kernel gives it.
        let replies = g.batch(REQ, &reqs, 4096 + 16, Duration::from_secs(10));
        if replies.iter().all(Option::is_none) {
            // The queue is silent: nothing more would come back.
            break;
        }
        answered += replies
            .iter()
            .flatten()
            .filter(|reply| guest::split_reply(reply).is_some_and(|(e, _)| e == 0))
            .count();
        done += k;
    }
    answered
}
