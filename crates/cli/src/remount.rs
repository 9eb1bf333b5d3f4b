//! `mount -o remount,OPTS DIR` of a memofs mount. mount(8) runs the helper with `remount`
//! among the options and the mount's current flags merged in (`ro,nosuid,relatime,remount,
//! user_id=0,...`), so the options say the whole state wanted, not a change.
//!
//! What each kind of option does:
//! - the kernel's flags (`ro`/`rw`, `nosuid`, `nodev`, `noexec`, `sync`, `dirsync`) change
//!   the kernel's mount (`mount(2)` with `MS_REMOUNT`, which takes root);
//! - the atime rule (`strictatime`, `relatime`, `noatime`, `nodiratime`) is the server's
//!   (the kernel leaves atime to FUSE servers) and the mount's flags show it: the mem
//!   backend changes it live, for the server's accesses and for the kernel's to
//!   kernel-backed data (the private tmpfs's mount flag); a read-only mount moves no atime,
//!   so `ro` and `rw` reach the server too;
//! - `size=` and `nr_inodes=` change on the live server (the mem backend's limits);
//! - what the kernel shows of the FUSE connection (`user_id=`, `group_id=`,
//!   `default_permissions`, `allow_other`, ...) and mount(8)'s own options must stay as
//!   they are, as must every other option: each one that would change is refused by name.
//!
//! The server is asked first, so a refusal leaves the mount as it was.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use memofs_control::{RemountDoc, REMOUNT};
use memofs_core::options::{parse_options, KernelFlag, MountOptions};
use memofs_core::{AtimePolicy, Backend};
use memofs_request::Server;

use crate::cli::MountArgs;
use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

/// The kernel's flags a remount sets, with the `mount(2)` bit each sets (`clears`: the word
/// clears it).
const FLAGS: [(&str, libc::c_ulong, bool); 11] = [
    ("ro", libc::MS_RDONLY, false),
    ("rw", libc::MS_RDONLY, true),
    ("nosuid", libc::MS_NOSUID, false),
    ("suid", libc::MS_NOSUID, true),
    ("nodev", libc::MS_NODEV, false),
    ("dev", libc::MS_NODEV, true),
    ("noexec", libc::MS_NOEXEC, false),
    ("exec", libc::MS_NOEXEC, true),
    ("sync", libc::MS_SYNCHRONOUS, false),
    ("async", libc::MS_SYNCHRONOUS, true),
    ("dirsync", libc::MS_DIRSYNC, false),
];

/// The atime words, as the kernel's mount flags show the server's rule, with the `mount(2)`
/// bit each sets (`clears`: the word clears it).
const ATIME: [(&str, libc::c_ulong, bool); 6] = [
    ("strictatime", libc::MS_STRICTATIME, false),
    ("relatime", libc::MS_RELATIME, false),
    ("atime", libc::MS_RELATIME, false),
    ("noatime", libc::MS_NOATIME, false),
    ("nodiratime", libc::MS_NODIRATIME, false),
    ("diratime", libc::MS_NODIRATIME, true),
];

/// What the kernel shows of a FUSE connection among the mount's options: fixed for its life.
const CONNECTION: [&str; 6] = [
    "user_id",
    "group_id",
    "default_permissions",
    "allow_other",
    "max_read",
    "blksize",
];

/// Whether the options ask for a remount.
pub fn asked(options: &[String]) -> bool {
    words(options).any(|w| w == "remount")
}

fn words(options: &[String]) -> impl Iterator<Item = &str> {
    options
        .iter()
        .flat_map(|l| l.split(','))
        .filter(|w| !w.is_empty())
}

/// The kernel's flags after `words`, starting from `flags`, with the atime mode always named
/// (the mount table shows no word for `strictatime`, and a remount that names no mode gets
/// `relatime`).
fn kernel_flags(mut flags: libc::c_ulong, words: &[&str]) -> libc::c_ulong {
    const ATIME_MODES: libc::c_ulong = libc::MS_STRICTATIME | libc::MS_RELATIME | libc::MS_NOATIME;
    for w in words {
        if let Some((_, bit, clears)) = FLAGS.iter().find(|(n, ..)| n == w) {
            flags = if *clears { flags & !bit } else { flags | bit };
        } else if let Some((_, bit, clears)) = ATIME.iter().find(|(n, ..)| n == w) {
            if *bit & ATIME_MODES != 0 {
                flags &= !ATIME_MODES;
            }
            flags = if *clears { flags & !bit } else { flags | bit };
        }
    }
    if flags & ATIME_MODES == 0 {
        flags |= libc::MS_STRICTATIME;
    }
    flags
}

/// `memofs mount -o remount,OPTS [SOURCE] DIR` (mount(8)'s helper call).
pub fn main(args: &MountArgs) -> ExitCode {
    let (_, dir) = args.source_and_mountpoint();
    let path = match dir.canonicalize() {
        Ok(p) => p,
        Err(e) => return fail(EXIT_FAILURE, format!("{}: {e}", dir.display())),
    };
    let mount = memofs_core::mountinfo::mounts()
        .ok()
        .and_then(|all| all.into_iter().rev().find(|m| m.mount_point == path));
    let mount = match mount {
        Some(m) if m.fstype == format!("fuse.{}", memofs_fuse::mount::SUBTYPE) => m,
        _ => {
            return fail(
                EXIT_FAILURE,
                format!("remount: {} is not a memofs mount", path.display()),
            )
        }
    };
    let words: Vec<&str> = words(&args.options).collect();
    let now = kernel_flags(0, &mount.options.split(',').collect::<Vec<_>>());
    let wanted = kernel_flags(now, &words);
    // Only root remounts the kernel's mount (and a plain user's mount shows the kernel's
    // default atime rule whatever the server's: see `memofs_fuse::mount`).
    if wanted != now && !nix::unistd::geteuid().is_root() {
        return fail(
            EXIT_FAILURE,
            format!(
                "remount of {}: changing the kernel's flags or the atime rule of a mount takes root",
                path.display()
            ),
        );
    }
    // The mount's flags show the server's atime rule, and mount(8) hands them back: they
    // go to the server only where they would change it.
    let atime_bits = ATIME.iter().fold(0, |m, (_, bit, _)| m | bit);
    let atime_changes = (now ^ wanted) & atime_bits != 0;
    let mut server = Vec::new();
    for w in &words {
        let key = w.split('=').next().unwrap_or(w);
        if CONNECTION.contains(&key) {
            let shown = mount.super_options.split(',').any(|o| o == *w);
            if !shown {
                return fail(
                    EXIT_USAGE,
                    format!("remount: '{w}' cannot change on a live mount (it is set when the kernel's FUSE connection is made)"),
                );
            }
        } else if ATIME.iter().any(|(n, ..)| n == w) {
            if atime_changes {
                server.push(*w);
            }
        } else {
            // A read-only mount moves no atime: `ro` and `rw` reach the server where they
            // change the mount.
            let ro_changes = (*w == "ro" || *w == "rw") && (now ^ wanted) & libc::MS_RDONLY != 0;
            let kernel_flag = FLAGS.iter().any(|(n, ..)| n == w);
            if ro_changes || (*w != "remount" && !kernel_flag) {
                server.push(*w);
            }
        }
    }
    if !server.is_empty() {
        let command = format!("{REMOUNT} {}", server.join(","));
        let answer = memofs_control::request(mount.dev, &path, &command)
            .map_err(|e| format!("cannot reach the server of {}: {e}", path.display()))
            .and_then(|a| match serde_json::from_str::<RemountDoc>(&a) {
                Ok(_) => Ok(()),
                Err(_) => {
                    Err(serde_json::from_str::<memofs_control::ErrorDoc>(&a).map_or(a, |e| e.error))
                }
            });
        if let Err(e) = answer {
            return fail(EXIT_USAGE, format!("remount of {}: {e}", path.display()));
        }
    }
    if wanted == now {
        return ExitCode::SUCCESS;
    }
    match remount_kernel(&path, wanted) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The server took the new rule for a mount that stays as it was: give it the
            // mount's own words back (a server that refuses them keeps the new rule).
            if server
                .iter()
                .any(|w| *w == "ro" || *w == "rw" || ATIME.iter().any(|(n, ..)| n == w))
            {
                let back = mount_words(&mount.options);
                let _ = memofs_control::request(mount.dev, &path, &format!("{REMOUNT} {back}"));
            }
            fail(
                EXIT_FAILURE,
                format!(
                    "remount of {}: the kernel refused the mount's new flags: {e}",
                    path.display()
                ),
            )
        }
    }
}

/// The atime rule and `ro`/`rw` of a mount's options as the kernel shows them, as words
/// that say the whole rule (the kernel shows no word for `strictatime` or `diratime`).
fn mount_words(options: &str) -> String {
    let has = |w: &str| options.split(',').any(|o| o == w);
    let mode = ["noatime", "relatime"]
        .into_iter()
        .find(|w| has(w))
        .unwrap_or("strictatime");
    let dir = if has("nodiratime") {
        "nodiratime"
    } else {
        "diratime"
    };
    let ro = if has("ro") { "ro" } else { "rw" };
    format!("{ro},{mode},{dir}")
}

/// `mount(2)` with `MS_REMOUNT` and the whole set of flags wanted (those left out clear).
fn remount_kernel(path: &Path, flags: libc::c_ulong) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `target` is a live NUL-terminated string; the other pointers may be null for
    // a remount.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | flags,
            std::ptr::null(),
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The server's side of `remount`: the options the mount was made with, and those of each
/// remount since, as one list (later ones win, as in a first mount).
pub struct Live<B: Backend> {
    server: Arc<Server<B>>,
    options: Mutex<Vec<String>>,
    ram: u64,
}

impl<B: Backend> Live<B> {
    pub fn new(server: Arc<Server<B>>, options: Vec<String>, ram: u64) -> Live<B> {
        Live {
            server,
            options: Mutex::new(options),
            ram,
        }
    }

    /// The options in effect: the mount's, then each remount's.
    pub fn options(&self) -> Vec<String> {
        self.options
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn parse(&self, lists: &[String]) -> Result<MountOptions, String> {
        parse_options(lists, self.ram).map_err(|e| e.to_string())
    }

    /// Takes `opts` (comma-separated) if everything they change may change live: what
    /// changed, as options.
    pub fn remount(&self, opts: &str) -> Result<String, String> {
        let mut current = self.options.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.parse(&current)?;
        let mut lists = current.clone();
        lists.push(opts.to_string());
        let new = self.parse(&lists)?;
        let refused: Vec<&str> = opts
            .split(',')
            .filter(|w| {
                let mut one = current.clone();
                one.push(w.to_string());
                self.parse(&one).is_ok_and(|o| !same_but_live(&now, &o))
            })
            .collect();
        if !refused.is_empty() {
            return Err(format!(
                "{} cannot change on a live mount (size=, nr_inodes=, the atime rule and the kernel's flags can): unmount and mount again",
                refused.join(", ")
            ));
        }
        let changed = self.apply(&now, &new)?;
        current.push(opts.to_string());
        Ok(changed)
    }

    /// What `o` makes of the mount: read-only or not, and the atime rule it names (`true`),
    /// else the mount's own (which the backend may have chosen: `noatime` over a network
    /// filesystem, the host mount's rule for an export).
    fn state(&self, o: &MountOptions) -> (bool, AtimePolicy, bool) {
        let ro = o.kernel_flags.contains(&KernelFlag::ReadOnly);
        match o.atime_given {
            true => (ro, o.atime, true),
            false => (
                ro,
                self.server.plan().atime,
                self.server.plan().atime_given(),
            ),
        }
    }

    /// Puts in effect what changes from `now` to `new`: the read-only flag and the atime
    /// rule, then the limits; a step refused takes back the one before it. What changed,
    /// as options.
    fn apply(&self, now: &MountOptions, new: &MountOptions) -> Result<String, String> {
        let server = &self.server;
        let (before, after) = (self.state(now), self.state(new));
        let mut changed = Vec::new();
        if after != before {
            server.remount(after.0, after.1, after.2)?;
            if after.0 != before.0 {
                changed.push(if after.0 { "ro" } else { "rw" }.to_string());
            }
            if after.1 != before.1 {
                changed.push(after.1.describe());
            }
        }
        if (new.size, new.nr_inodes) != (now.size, now.nr_inodes) {
            if let Err(e) = server.backend().set_limits(new.size, new.nr_inodes) {
                if after != before {
                    let _ = server.remount(before.0, before.1, before.2);
                }
                return Err(e);
            }
            changed.push(format!("size={},nr_inodes={}", new.size, new.nr_inodes));
        }
        Ok(changed.join(","))
    }
}

/// Whether `new` differs from `now` in nothing but what a remount changes live. An option
/// given again with its value is no change.
fn same_but_live(now: &MountOptions, new: &MountOptions) -> bool {
    let mut probe = new.clone();
    probe.size = now.size;
    probe.nr_inodes = now.nr_inodes;
    probe.kernel_flags = now.kernel_flags.clone();
    probe.atime = now.atime;
    probe.atime_given = now.atime_given;
    probe.cache_given = now.cache_given;
    &probe == now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_s_words_say_its_whole_rule() {
        assert_eq!(mount_words("rw,nosuid,relatime"), "rw,relatime,diratime");
        assert_eq!(
            mount_words("ro,noatime,nodiratime"),
            "ro,noatime,nodiratime"
        );
        assert_eq!(mount_words("rw,nodev"), "rw,strictatime,diratime");
    }

    #[test]
    fn flags_are_the_whole_state_wanted() {
        let now = kernel_flags(0, &["rw", "nosuid", "relatime"]);
        assert_eq!(now, libc::MS_NOSUID | libc::MS_RELATIME);
        let ro = kernel_flags(now, &["ro", "nosuid", "remount", "user_id=0"]);
        assert_eq!(ro, libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_RELATIME);
        let back = kernel_flags(ro, &["rw", "suid", "noatime"]);
        assert_eq!(back, libc::MS_NOATIME);
        let strict = kernel_flags(back, &["strictatime", "nodiratime"]);
        assert_eq!(strict, libc::MS_STRICTATIME | libc::MS_NODIRATIME);
        assert_eq!(kernel_flags(strict, &["diratime"]), libc::MS_STRICTATIME);
        // A strictatime mount, as the mount table shows it: no mode word.
        assert_eq!(
            kernel_flags(0, &["rw", "nodiratime"]),
            libc::MS_STRICTATIME | libc::MS_NODIRATIME
        );
    }

    #[test]
    fn only_live_options_change() {
        let o = |s: &str| parse_options(&["size=1g", s], 1 << 34).unwrap();
        let now = o("");
        assert!(same_but_live(&now, &o("size=2g,nr_inodes=10,ro,nosuid")));
        assert!(
            same_but_live(&now, &o("relatime")),
            "the rule in force, said again"
        );
        assert!(same_but_live(&now, &o("noatime,nodiratime")));
        assert!(!same_but_live(&now, &o("cache=never")));
        assert!(!same_but_live(&now, &o("mode=700")));
    }
}
