//! Building the backend a mount serves: mem (no SOURCE) or passthrough (a SOURCE directory).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memofs_core::options::{scope_of, MountOptions, Scope, WatchMode};
use memofs_core::plan::{MountPlan, Passthrough};
use memofs_core::Backend;
use memofs_mem::kernel_data::BackingStore;
use memofs_mem::{MemConfig, MemFs};
use memofs_passthrough::{PassthroughConfig, PassthroughFs, WatchMechanism};

/// Whether the server may use what only the host's root may (FUSE passthrough, which the
/// kernel allows to `CAP_SYS_ADMIN` in the initial user namespace): root, and not inside a
/// user namespace (a rootless container's root), where the private tmpfs would mount but
/// its files could not be passed through, and the page store with the writeback cache serves
/// data better than the server copying through a kernel file.
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::fs::read_to_string("/proc/self/uid_map").is_ok_and(|m| whole_id_range(&m))
}

/// Whether a `uid_map` maps every id to itself, as the initial user namespace's does.
fn whole_id_range(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// A backend ready to mount, with the settings `memofs stats` shows for it.
pub type Built<B> = Result<(Arc<B>, Vec<(String, String)>), String>;

/// The first option in `-o` lists that the chosen backend does not take, with a message:
/// mem-only options with a SOURCE, passthrough-only ones without.
pub fn foreign_option(lists: &[String], has_source: bool) -> Option<String> {
    let (foreign, msg) = if has_source {
        (Scope::Mem, "only the mem backend (no SOURCE) takes it")
    } else {
        (
            Scope::Passthrough,
            "only the passthrough backend (with a SOURCE directory) takes it",
        )
    };
    lists
        .iter()
        .flat_map(|l| l.split(','))
        .find(|o| scope_of(o.split('=').next().unwrap_or("")) == Some(foreign))
        .map(|o| format!("invalid mount option '{o}': {msg}"))
}

/// Checks a passthrough SOURCE before anything is mounted (and, given the mount point, that
/// it is not the mount point itself); returns it canonical.
pub fn check_source(source: &Path, mountpoint: Option<&Path>) -> Result<PathBuf, String> {
    let meta =
        std::fs::metadata(source).map_err(|e| format!("source {}: {e}", source.display()))?;
    if !meta.is_dir() {
        return Err(format!("source {} is not a directory", source.display()));
    }
    let src = source
        .canonicalize()
        .map_err(|e| format!("source {}: {e}", source.display()))?;
    if mountpoint.is_some_and(|m| m.canonicalize().is_ok_and(|m| m == src)) {
        return Err(format!(
            "source {} is the mount point itself; export it at another directory",
            src.display()
        ));
    }
    Ok(src)
}

/// The plan's settings as `memofs stats` lists them.
pub fn plan_settings(plan: &MountPlan) -> Vec<(String, String)> {
    plan.describe()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// The passthrough backend exporting `source`, leaving `reserved_fds` descriptors below the
/// process's limit for what else the process holds.
pub fn passthrough(
    source: &Path,
    plan: &mut MountPlan,
    reserved_fds: usize,
) -> Built<PassthroughFs> {
    let config = PassthroughConfig {
        atime: plan.atime_in_effect(),
        apply_atime: plan.atime_given(),
        watch: plan.watch,
        changes: plan.changes.clone(),
        reserved_fds,
        migration: plan.migration,
        direct_io: plan.host_direct_io,
        file_handles: plan.file_handles,
        read_only: plan.read_only(),
        ..Default::default()
    };
    let fs = PassthroughFs::new(source, config).map_err(|e| e.to_string())?;
    plan.adopt(fs.capabilities());
    let settings = vec![
        ("source".into(), source.display().to_string()),
        ("private_mount".into(), fs.private_mount().to_string()),
    ];
    Ok((Arc::new(fs), settings))
}

/// `memofs stats` lines for the host kernel features the passthrough backend uses, each with
/// its fallback.
pub fn passthrough_features(fs: &PassthroughFs) -> Vec<(String, String)> {
    let watch = watch_line(
        fs.config().watch,
        fs.watch_mechanism(),
        fs.watches_whole_filesystem(),
    );
    let open_tree = if fs.private_mount() {
        "yes: the server works on a private copy of the source's mount"
    } else {
        "no (needs root; Linux 5.2+): the server works on the host's mount"
    };
    let fchmodat2 = if fs.uses_fchmodat2() {
        "yes"
    } else {
        "no (needs Linux 6.6+): chmod goes through /proc/self/fd"
    };
    let feed = match fs.change_feed() {
        Some(cmd) => format!("yes: {cmd}"),
        None => "none: changes made on other machines show when cache timeouts expire".into(),
    };
    vec![
        ("host_change_watch".into(), watch),
        ("change_feed".into(), feed),
        ("open_tree".into(), open_tree.into()),
        ("fchmodat2".into(), fchmodat2.into()),
    ]
}

/// The `host_change_watch` line: the mechanism in use, and whether `watch=` asked for it or
/// it is what was left when the one asked for (or preferred) was unavailable.
fn watch_line(asked: WatchMode, used: Option<WatchMechanism>, whole_fs: bool) -> String {
    let why = match (asked, used) {
        (WatchMode::Auto, Some(WatchMechanism::Fanotify)) => "watch=auto's first choice",
        (WatchMode::Auto, _) => "watch=auto's fallback: fanotify directory events unavailable",
        (WatchMode::Off, _) => "as asked by watch=off",
        (_, None) => "the mechanism watch= asked for is unavailable",
        _ => "as asked by watch=",
    };
    let what = match used {
        Some(WatchMechanism::Fanotify) if whole_fs => {
            "fanotify directory events, one mark on the whole filesystem"
        }
        Some(WatchMechanism::Fanotify) => {
            "fanotify directory events, a mark per directory the kernel holds"
        }
        Some(WatchMechanism::Inotify) => "inotify (the server's own writes are reported too)",
        None => "none: host changes show when the cache timeouts run out",
    };
    format!("{what} ({why})")
}

/// The mem backend; `adopt`: on the private tmpfs of file data another server process
/// handed over (`memofs upgrade`), `None` where that process kept file data itself.
pub fn mem(
    opts: &MountOptions,
    plan: &mut MountPlan,
    adopt: Option<Option<BackingStore>>,
) -> Built<MemFs> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let config = MemConfig {
        size_limit: opts.size,
        inode_limit: opts.nr_inodes,
        root_mode: opts.mode,
        root_uid: opts.uid.unwrap_or(uid),
        root_gid: opts.gid.unwrap_or(gid),
        atime: plan.atime_in_effect(),
        kernel_data: plan.kernel_data,
        huge: plan.huge,
    };
    let fs = match adopt {
        Some(Some(store)) => Ok(MemFs::adopting(config, store)),
        Some(None) if plan.kernel_data => Err(std::io::Error::other(
            "the server that handed over kept file data itself",
        )),
        _ => MemFs::new(config),
    };
    let fs = match fs {
        Ok(fs) => fs,
        Err(e) if plan.passthrough == Passthrough::Required => {
            return Err(format!(
                "passthrough=on needs a private kernel tmpfs for file data, which failed: {e}"
            ));
        }
        Err(e) => {
            log::warn!("file data stays in the server (no kernel-backed store: {e})");
            plan.without_kernel_data();
            MemFs::new(MemConfig {
                kernel_data: false,
                ..config
            })
            .map_err(|e| e.to_string())?
        }
    };
    plan.adopt(fs.capabilities());
    Ok((Arc::new(fs), Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_initial_user_namespace_maps_every_id() {
        assert!(whole_id_range("         0          0 4294967295\n"));
        assert!(!whole_id_range("         0       1000          1\n"));
        assert!(!whole_id_range("         0     100000      65536\n"));
        assert!(!whole_id_range(""));
    }

    #[test]
    fn the_watch_line_says_whether_it_was_asked_for_or_fallen_back_to() {
        let inotify = Some(WatchMechanism::Inotify);
        let line = watch_line(WatchMode::Inotify, inotify, false);
        assert!(line.contains("as asked by watch="), "{line}");
        assert!(!line.contains("fallback"), "{line}");
        let line = watch_line(WatchMode::Auto, inotify, false);
        assert!(
            line.contains("fallback: fanotify directory events unavailable"),
            "{line}"
        );
        let line = watch_line(WatchMode::Auto, Some(WatchMechanism::Fanotify), true);
        assert!(
            line.contains("whole filesystem") && line.contains("first choice"),
            "{line}"
        );
        let line = watch_line(WatchMode::Fanotify, None, false);
        assert!(
            line.starts_with("none") && line.contains("unavailable"),
            "{line}"
        );
        let line = watch_line(WatchMode::Off, None, false);
        assert!(line.contains("watch=off"), "{line}");
    }
}
