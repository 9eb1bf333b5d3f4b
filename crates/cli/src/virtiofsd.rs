//! `memofs virtiofsd` (also run as `memofs-virtiofsd`): memofs served to a virtual machine as
//! a vhost-user-fs device, with virtiofsd's command line so that a VMM or libvirt domain that
//! names virtiofsd can name memofs instead.

use std::os::fd::{FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use memofs_control::StatsSource;
use memofs_core::options::parse_options;
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_core::Backend;
use memofs_request::invalidate::Invalidated;
use memofs_request::Stats;
use memofs_virtiofs::Listener;
use memofs_virtiofs::{GuestFs, VirtioFs};

use crate::cli::VirtiofsdArgs;
use crate::{backends, daemon, fail, mount, EXIT_FAILURE, EXIT_USAGE};

/// What `--print-capabilities` prints: the vhost-user backend description QEMU and libvirt
/// read (docs/interop/vhost-user.json): a device of type `fs`, no optional features.
pub const CAPABILITIES: &str = "{\n  \"type\": \"fs\",\n  \"features\": []\n}";

/// `-o` items in virtiofsd's older form, taken apart from memofs's own options.
#[derive(Debug, Default, PartialEq)]
struct Legacy {
    source: Option<PathBuf>,
    cache: Option<String>,
}

/// Splits the `-o` lists into memofs options and virtiofsd's older forms (`source=DIR`, where
/// `,,` stands for a comma as libvirt writes it; `cache=`; and what memofs has no use for:
/// `sandbox=`, `xattr`, `no_xattr`, `posix_lock`, `no_posix_lock`, `flock`, `no_flock`).
fn split_options(lists: &[String]) -> (Vec<String>, Legacy) {
    let mut legacy = Legacy::default();
    let mut ours = Vec::new();
    for o in lists.iter().flat_map(|l| split_escaped(l)) {
        match o.split_once('=') {
            Some(("source", dir)) => legacy.source = Some(dir.into()),
            Some(("cache", mode)) => legacy.cache = Some(mode.into()),
            Some(("sandbox", _)) => {}
            None if matches!(
                o.as_str(),
                "xattr" | "no_xattr" | "posix_lock" | "no_posix_lock" | "flock" | "no_flock"
            ) => {}
            _ => ours.push(o),
        }
    }
    (ours, legacy)
}

/// `list` split at single commas; `,,` is a comma inside an item.
fn split_escaped(list: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ',' if chars.peek() == Some(&',') => {
                chars.next();
                items.last_mut().expect("never empty").push(',');
            }
            ',' => items.push(String::new()),
            c => items.last_mut().expect("never empty").push(c),
        }
    }
    items.retain(|i| !i.is_empty());
    items
}

/// The listening socket: a path (a stale socket file there is replaced), or a descriptor
/// the caller passed.
fn listener(args: &VirtiofsdArgs) -> Result<Listener, (u8, String)> {
    match (&args.socket_path, args.fd) {
        (Some(path), None) => {
            // A socket a live server listens on stays; a stale one is replaced.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err((
                    EXIT_FAILURE,
                    format!("{} is in use: another server listens on it", path.display()),
                ));
            }
            Listener::new(path, true).map_err(|e| {
                (
                    EXIT_FAILURE,
                    format!("cannot listen on {}: {e}", path.display()),
                )
            })
        }
        (None, Some(fd)) => {
            if fd <= 2 || !is_socket(fd) {
                return Err((EXIT_USAGE, format!("--fd {fd} is not an inherited socket")));
            }
            // SAFETY: `fd` is an open socket the caller handed to this process for the
            // listener to own; nothing else in the process uses it.
            Ok(unsafe { Listener::from_raw_fd(fd) })
        }
        (Some(_), Some(_)) => Err((EXIT_USAGE, "give --socket-path or --fd, not both".into())),
        (None, None) => Err((
            EXIT_USAGE,
            "a vhost-user socket is needed: --socket-path PATH or --fd FD".into(),
        )),
    }
}

fn is_socket(fd: RawFd) -> bool {
    daemon::fstat_raw(fd).is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

pub fn main(args: &VirtiofsdArgs) -> ExitCode {
    daemon::block_stop_signals();
    if args.print_capabilities {
        println!("{CAPABILITIES}");
        return ExitCode::SUCCESS;
    }
    if args.readonly {
        return fail(
            EXIT_USAGE,
            "--readonly is not supported: mount read-only in the guest (mount -o ro)",
        );
    }
    let (mut options, legacy) = split_options(&args.options);
    let source = args.shared_dir.clone().or(legacy.source);
    // The guest cannot be told of host changes: a shared directory gets short timeouts
    // unless asked otherwise; the mem backend, which only the guest changes, keeps names.
    match args.cache.clone().or(legacy.cache) {
        Some(mode) => options.push(format!("cache={mode}")),
        None if source.is_some() => options.push("cache=auto".into()),
        None => {}
    }
    let opts = match parse_options(&options, mount::ram_bytes()) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    if let Some(msg) = backends::foreign_option(&options, source.is_some()) {
        return fail(EXIT_USAGE, msg);
    }
    let source = match source {
        Some(dir) => match backends::check_source(&dir, None) {
            Ok(s) => Some(s),
            Err(e) => return fail(EXIT_FAILURE, e),
        },
        None => None,
    };
    let listener = match listener(args) {
        Ok(l) => l,
        Err((code, msg)) => return fail(code, msg),
    };
    let debug = args.debug.then_some("debug");
    mount::init_logging(
        debug
            .or(args.log_level.as_deref())
            .unwrap_or(mount::log_level(&opts)),
    );
    if let Some(mode) = &args.sandbox {
        log::info!("--sandbox={mode}: every host access is confined to the shared directory");
    }
    let privileged = backends::privileged();
    let kind = match source {
        Some(_) => BackendKind::Passthrough,
        None => BackendKind::Mem,
    };
    let mut plan = MountPlan::new(&opts, kind, privileged);
    plan.without_notifications();
    let served = match &source {
        Some(src) => backends::passthrough(src, &mut plan)
            .map(|(b, s)| serve(b, s, plan, listener, args.socket_path.as_deref())),
        None => backends::mem(&opts, &mut plan)
            .map(|(b, s)| serve(b, s, plan, listener, args.socket_path.as_deref())),
    };
    served.unwrap_or_else(|e| fail(EXIT_FAILURE, e))
}

fn serve<B: Backend + 'static>(
    backend: Arc<B>,
    backend_settings: Vec<(String, String)>,
    plan: MountPlan,
    listener: Listener,
    socket: Option<&Path>,
) -> ExitCode {
    let guest_fs = GuestFs::new(backend.clone(), plan, Arc::new(Stats::default()));
    let mut settings = backends::plan_settings(guest_fs.plan());
    settings.push(("transport".into(), "virtio-fs (vhost-user-fs)".into()));
    settings.extend(backend_settings);
    let source = StatsSource {
        invalidate: Box::new(|| Invalidated {
            epoch: false,
            names: 0,
            not_done: Some(NO_NOTIFICATIONS.into()),
        }),
        features: Box::new(|| vec![("notifications".into(), NO_NOTIFICATIONS.into())]),
        stats: guest_fs.stats().clone(),
        policy: guest_fs.plan().cache,
        usage: Box::new(move || backend.usage()),
        settings,
    };
    // `memofs stats SOCKET` reaches the device through a control socket named after the
    // vhost-user socket file (none for an inherited --fd, which has no file to name).
    let control = socket.and_then(|path| match memofs_control::serve_device(path, source) {
        Ok(c) => Some(c),
        Err(e) => {
            log::warn!("memofs stats will not work for this device: {e}");
            None
        }
    });
    // A stop signal (a service manager's) ends the server with its sockets removed.
    let control = Arc::new(std::sync::Mutex::new(control));
    let on_stop = control.clone();
    let vhost_socket = socket.map(Path::to_path_buf);
    daemon::on_stop_signal(move |_| {
        drop(on_stop.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(path) = vhost_socket {
            let _ = std::fs::remove_file(path);
        }
        std::process::exit(0);
    });
    let device = match VirtioFs::new(guest_fs) {
        Ok(d) => Arc::new(d),
        Err(e) => return fail(EXIT_FAILURE, format!("cannot set up the device: {e}")),
    };
    let served = memofs_virtiofs::serve(device, listener);
    drop(control.lock().unwrap_or_else(|e| e.into_inner()).take());
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_FAILURE, e),
    }
}

/// Why `memofs invalidate` cannot act on a virtio-fs device, and what stands in for it.
const NO_NOTIFICATIONS: &str = "none: virtio-fs carries no notifications to the guest \
    (upstream Linux has no notification queue); the cache timeouts end what the guest keeps";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtiofsds_older_options_are_taken_apart_from_memofs_options() {
        let lists = vec![
            "source=/srv/a,,b,cache=always,xattr,sandbox=chroot".to_string(),
            "negative_timeout=30,no_posix_lock".to_string(),
        ];
        let (ours, legacy) = split_options(&lists);
        assert_eq!(ours, vec!["negative_timeout=30".to_string()]);
        assert_eq!(
            legacy,
            Legacy {
                source: Some("/srv/a,b".into()),
                cache: Some("always".into()),
            }
        );
    }

    #[test]
    fn capabilities_name_an_fs_device() {
        assert!(CAPABILITIES.contains("\"type\": \"fs\""));
    }
}
