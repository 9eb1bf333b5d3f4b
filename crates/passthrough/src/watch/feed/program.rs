//! The programs a feed runs: which `weed` is trusted to run with the server's privilege,
//! and where their complaints go.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Child;

/// The `weed` program: the one serving the mount at `mount_point` (its process names the
/// mount point in `-dir=`), else the first on `PATH` (its absolute entries); only one
/// [`trusted`], by the path it resolves to (no symbolic link on the way can be pointed
/// elsewhere later), or why none is.
pub(super) fn weed_of(mount_point: &Path) -> Result<PathBuf, String> {
    let dir = mount_point.as_os_str().as_bytes();
    let names_dir = |args: &[&[u8]]| {
        args.iter().enumerate().any(|(i, a)| {
            let value = a
                .strip_prefix(b"-dir=")
                .or_else(|| a.strip_prefix(b"--dir="));
            let flag = *a == b"-dir" || *a == b"--dir";
            value == Some(dir) || (flag && args.get(i + 1) == Some(&dir))
        })
    };
    let serves = |args: &[&[u8]]| args.contains(&b"mount".as_slice()) && names_dir(args);
    let mut refused = Vec::new();
    let mut pick = |candidate: PathBuf| match trusted(&candidate) {
        Ok(resolved) => Some(resolved),
        Err(why) => {
            refused.push(why);
            None
        }
    };
    let serving = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name();
            pid.as_bytes()
                .iter()
                .all(u8::is_ascii_digit)
                .then_some(())?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let exe = std::fs::read_link(e.path().join("exe")).ok()?;
            (exe.file_name() == Some(OsStr::new("weed")) && serves(&args)).then_some(exe)
        });
    let on_path = std::env::var_os("PATH")
        .unwrap_or_default()
        .as_bytes()
        .split(|&b| b == b':')
        .map(|d| Path::new(OsStr::from_bytes(d)).join("weed"))
        .filter(|p| p.is_absolute() && p.is_file())
        .collect::<Vec<_>>();
    if let Some(found) = serving.chain(on_path).find_map(&mut pick) {
        return Ok(found);
    }
    Err(match refused.is_empty() {
        true => "no weed program: neither the mount's own process nor PATH has one".into(),
        false => format!("no weed program to trust: {}", refused.join("; ")),
    })
}

/// Whether the server may run `program`: it, and every directory above it, belongs to
/// root or to the server's own user and no one else can write it (a directory others may
/// write only with the sticky bit, which keeps them from replacing what they do not own).
/// Otherwise another user could put their own program in its place, to be run with the
/// server's privilege. The path it resolves to, if so.
pub(super) fn trusted(program: &Path) -> Result<PathBuf, String> {
    let canonical = |p: &Path| {
        p.canonicalize()
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    // The program itself, and, where the name given is a symbolic link elsewhere, the
    // directory that holds the link.
    let resolved = canonical(program)?;
    owned_safely(&resolved)?;
    if let Some(dir) = program.parent().filter(|d| !d.as_os_str().is_empty()) {
        let dir = canonical(dir)?;
        if Some(dir.as_path()) != resolved.parent() {
            owned_safely(&dir)?;
        }
    }
    Ok(resolved)
}

/// `path` and every directory above it: see [`trusted`].
fn owned_safely(path: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for p in path.ancestors() {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let others_write = meta.mode() & 0o022 != 0;
        let sticky_dir = meta.is_dir() && meta.mode() & libc::S_ISVTX != 0;
        if meta.uid() != 0 && meta.uid() != me {
            return Err(format!(
                "{} belongs to user {} (not root or the server's)",
                p.display(),
                meta.uid()
            ));
        }
        if others_write && !sticky_dir {
            return Err(format!(
                "{} may be written by others than its owner",
                p.display()
            ));
        }
    }
    Ok(())
}

/// The most lines of one program's standard error that reach the log: a program that
/// keeps complaining is not allowed to fill it.
const STDERR_LINES: usize = 20;

/// The longest line of a program's standard error that is logged; the rest of the line
/// is dropped.
const LINE: usize = 1024;

/// Sends what `child` writes to standard error to the server's log (at most
/// [`STDERR_LINES`] lines, each at most [`LINE`] bytes), from a thread that ends with the
/// program; the rest is read and dropped.
pub(super) fn log_stderr(child: &mut Child, what: String) {
    let Some(err) = child.stderr.take() else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("memofs-feed-err".into())
        .spawn(move || {
            let mut lines = 0;
            let mut line = Vec::new();
            let mut err = BufReader::new(err);
            loop {
                let (done, used) = match err.fill_buf() {
                    Ok([]) | Err(_) => return,
                    Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                        Some(at) => (true, &buf[..at + 1]),
                        None => (false, buf),
                    },
                };
                let room = LINE.saturating_sub(line.len());
                line.extend_from_slice(&used[..used.len().min(room)]);
                let n = used.len();
                err.consume(n);
                if !done {
                    continue;
                }
                lines += 1;
                if lines <= STDERR_LINES {
                    let text = String::from_utf8_lossy(&line);
                    log::warn!("passthrough: change feed {what}: {}", text.trim_end());
                } else if lines == STDERR_LINES + 1 {
                    log::warn!("passthrough: change feed {what}: further messages not logged");
                }
                line.clear();
            }
        });
    if let Err(e) = spawned {
        log::warn!("passthrough: change feed: its messages are lost (thread: {e})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_programs_no_other_user_can_replace_are_trusted() {
        let dir = std::env::temp_dir().join(format!("memofs-feed-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let weed = dir.join("weed");
        std::fs::write(&weed, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&weed, std::fs::Permissions::from_mode(0o755)).unwrap();
        let resolved = weed.canonicalize().unwrap();
        assert_eq!(
            trusted(&weed),
            Ok(resolved.clone()),
            "the server's own, in a sticky /tmp"
        );
        std::fs::set_permissions(&weed, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(trusted(&weed).unwrap_err().contains("written by others"));
        std::fs::set_permissions(&weed, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            trusted(&weed).unwrap_err().contains("written by others"),
            "a directory anyone may write without the sticky bit: the program can be replaced"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(trusted(&weed), Ok(resolved));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&weed, Some(65534), None).unwrap();
            assert!(trusted(&weed)
                .unwrap_err()
                .contains("belongs to user 65534"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
