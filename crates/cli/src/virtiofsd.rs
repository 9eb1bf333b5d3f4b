//! `memofs virtiofsd` (also run as `memofs-virtiofsd`): memofs served to a virtual machine as
//! a vhost-user-fs device, with virtiofsd's command line so that a VMM or libvirt domain that
//! names virtiofsd can name memofs instead.

use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use memofs_control::StatsSource;
use memofs_core::idmap::IdMaps;
use memofs_core::migrate::{Choices, FindBy};
use memofs_core::options::{parse_options, MountOptions, Want};
use memofs_core::plan::{BackendKind, MountPlan};
use memofs_core::xattrmap::XattrMap;
use memofs_core::Backend;
use memofs_mem::MemFs;
use memofs_passthrough::PassthroughFs;
use memofs_request::invalidate::Invalidated;
use memofs_request::Stats;
use memofs_virtiofs::Listener;
use memofs_virtiofs::{GuestFs, VirtioFs};

use crate::cli::VirtiofsdArgs;
use crate::vhost_socket::{self, SocketFile};
use crate::{backends, daemon, fail, mount, sandbox, seccomp, EXIT_FAILURE, EXIT_USAGE};

/// What `--print-capabilities` prints: the vhost-user backend description QEMU and libvirt
/// read (docs/interop/vhost-user.json): a device of type `fs` that can migrate
/// (`migrate-precopy`: libvirt then lets a domain with it migrate; QEMU asks the device
/// itself, which offers the state transfer for the mem backend only).
pub const CAPABILITIES: &str =
    "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\"\n  ]\n}";

/// `-o` items in virtiofsd's older form, taken apart from memofs's own options.
#[derive(Debug, Default, PartialEq)]
struct Legacy {
    source: Option<PathBuf>,
    cache: Option<String>,
    sandbox: Option<String>,
    xattrmap: Option<String>,
    security_label: bool,
    /// Remote locks asked for (`posix_lock`, `flock`).
    remote_locks: Vec<String>,
}

/// Splits the `-o` lists into memofs options and virtiofsd's older forms (`source=DIR`, where
/// `,,` stands for a comma as libvirt writes it; `cache=`; `sandbox=`; `xattrmap=`;
/// `security_label`; `xattr` and `no_xattr`, memofs's `xattr=on|off`; `posix_lock` and
/// `flock`, remote locks, which [`setup`] takes only where they change nothing; and what
/// memofs does anyway: `no_posix_lock`, `no_flock`, locks kept by the guest's kernel).
fn split_options(lists: &[String]) -> (Vec<String>, Legacy) {
    let mut legacy = Legacy::default();
    let mut ours = Vec::new();
    for o in lists.iter().flat_map(|l| split_escaped(l)) {
        match o.split_once('=') {
            Some(("source", dir)) => legacy.source = Some(dir.into()),
            Some(("cache", mode)) => legacy.cache = Some(mode.into()),
            Some(("sandbox", mode)) => legacy.sandbox = Some(mode.into()),
            Some(("xattrmap", map)) => legacy.xattrmap = Some(map.into()),
            None if o == "security_label" => legacy.security_label = true,
            None if o == "xattr" => ours.push("xattr=on".into()),
            None if o == "no_xattr" => ours.push("xattr=off".into()),
            None if o == "posix_lock" || o == "flock" => legacy.remote_locks.push(o),
            None if o == "no_posix_lock" || o == "no_flock" => {}
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

/// The listening socket: a path (locked, and a stale socket file there replaced), or a
/// descriptor the caller passed.
fn listener(args: &VirtiofsdArgs) -> Result<(Listener, Option<SocketFile>), (u8, String)> {
    match (&args.socket_path, args.fd) {
        (Some(path), None) => {
            let group = match &args.socket_group {
                Some(g) => Some(vhost_socket::group(g).map_err(|e| (EXIT_USAGE, e))?),
                None => None,
            };
            let (listener, file) =
                vhost_socket::bind(path, group).map_err(|e| (EXIT_FAILURE, e))?;
            Ok((Listener::from(listener), Some(file)))
        }
        (None, Some(fd)) => {
            if fd <= 2 || !is_socket(fd) {
                return Err((EXIT_USAGE, format!("--fd {fd} is not an inherited socket")));
            }
            if args.socket_group.is_some() {
                return Err((
                    EXIT_USAGE,
                    "--socket-group names the group of a socket file, and --fd has none".into(),
                ));
            }
            // SAFETY: `fd` is an open socket the caller handed to this process for the
            // listener to own; nothing else in the process uses it.
            Ok((unsafe { Listener::from_raw_fd(fd) }, None))
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

/// What the command line asks for, checked before anything is set up.
struct Setup {
    opts: MountOptions,
    source: Option<PathBuf>,
    sandbox: sandbox::SandboxMode,
    seccomp: seccomp::SeccompMode,
    caps: caps::CapsHashSet,
    ids: IdMaps,
    acl: Want,
    xattrs: Option<XattrMap>,
    /// `--security-label` (or `-o security_label`).
    security_label: bool,
    migration: Choices,
}

/// virtiofsd's options memofs does not take, each with why (docs/guide.md has the table of
/// all of them).
const REFUSED: &[(&str, &str)] = &[
    ("--tag", "the tag is the VMM's to set (QEMU: tag= on vhost-user-fs-pci); this device has no configuration space of its own"),
    ("--uid-map", "the namespace sandbox maps only the server's own ids; --translate-uid gives guest ids other host ids"),
    ("--gid-map", "the namespace sandbox maps only the server's own ids; --translate-gid gives guest ids other host ids"),
    ("--inode-file-handles", "memofs keeps a descriptor per inode and reopens cold ones from their file handles where it can (docs/guide.md)"),
    ("--allow-mmap", "shared mappings are refused only where -o direct_io asks (and on append-only files)"),
    ("--no-readdirplus", "directories are always listed with READDIRPLUS"),
    ("--writeback", "the writeback cache is off over virtio-fs: pages whose writeback failed could not be dropped from the guest's cache"),
    ("--allow-direct-io", "the guest's O_DIRECT opens are served as its other opens"),
    ("--no-killpriv-v2", "the server always clears setuid, setgid and capabilities itself (FUSE_HANDLE_KILLPRIV_V2)"),
    ("--preserve-noatime", "a guest's O_NOATIME reaches the backend as it is"),
    ("--syslog", "messages go to standard error (--log-level), which a service manager keeps"),
];

/// The first option of `args` (a `virtiofsd` command line after the subcommand) that memofs
/// refuses, as the message to print. `virtiofsd` is the subcommand's declaration, which says
/// which options take the next argument as their value.
pub fn refused_option(virtiofsd: &clap::Command, args: &[std::ffi::OsString]) -> Option<String> {
    let takes_value = |a: &str| {
        let (long, short) = match a.strip_prefix("--") {
            Some(l) => (Some(l), None),
            None => (
                None,
                a.strip_prefix('-').and_then(|s| s.parse::<char>().ok()),
            ),
        };
        virtiofsd.get_arguments().any(|arg| {
            let named = long.is_some_and(|l| {
                arg.get_long() == Some(l) || arg.get_all_aliases().is_some_and(|x| x.contains(&l))
            }) || short.is_some_and(|s| arg.get_short() == Some(s));
            named && arg.get_action().takes_values()
        })
    };
    let mut value_next = false;
    for a in args.iter().map_while(|a| a.to_str().filter(|a| *a != "--")) {
        if std::mem::take(&mut value_next) {
            continue;
        }
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        if let Some((flag, why)) = REFUSED.iter().find(|(flag, _)| *flag == name) {
            return Some(format!("{flag} is not supported: {why}"));
        }
        // The value of an option that takes one is not an option.
        value_next = !a.contains('=') && takes_value(a);
    }
    None
}

/// `--translate-uid` and `--translate-gid`, checked.
fn id_maps(args: &VirtiofsdArgs) -> Result<IdMaps, String> {
    let mut ids = IdMaps::default();
    for (rules, map, flag) in [
        (&args.translate_uid, &mut ids.uid, "--translate-uid"),
        (&args.translate_gid, &mut ids.gid, "--translate-gid"),
    ] {
        for rule in rules {
            map.push(rule).map_err(|e| format!("{flag} {e}"))?;
        }
    }
    Ok(ids)
}

/// The `--migration-*` options: how a shared directory's files are found again where the
/// VM arrives. Without `--shared-dir` the files themselves move and there is nothing to
/// choose.
fn migration(args: &VirtiofsdArgs, shared: bool) -> Result<Choices, String> {
    let given = args.migration_mode.is_some()
        || args.migration_on_error.is_some()
        || args.migration_verify_handles
        || args.migration_confirm_paths;
    if given && !shared {
        return Err(
            "the --migration-* options choose how a --shared-dir's files are found \
                    again on the destination; without --shared-dir the files themselves move \
                    with the VM"
                .into(),
        );
    }
    if args.migration_on_error.as_deref() == Some("guest-error") {
        return Err(
            "--migration-on-error=guest-error is not supported: a file that cannot \
                    be found again fails the migration, and the VM runs on at the source \
                    (abort)"
                .into(),
        );
    }
    let find_by = match args.migration_mode.as_deref() {
        Some("file-handles") => FindBy::FileHandles,
        _ => FindBy::Paths,
    };
    if find_by == FindBy::FileHandles && args.migration_verify_handles {
        return Err(
            "--migration-verify-handles checks the paths of find-paths; \
                    file-handles finds the very files already"
                .into(),
        );
    }
    Ok(Choices {
        find_by,
        verify_handles: args.migration_verify_handles,
    })
}

/// `--posix-acl=`: never (without the flag, as virtiofsd), auto or always; always cannot be
/// had with translated ids.
fn acl(args: &VirtiofsdArgs, ids: &IdMaps) -> Result<Want, String> {
    let want = match args.posix_acl.as_deref() {
        None | Some("never") => Want::Off,
        Some("auto") => Want::Auto,
        Some("always") => Want::On,
        Some(other) => return Err(format!("--posix-acl={other}: say never, auto or always")),
    };
    if want == Want::On && !ids.is_identity() {
        return Err(
            "--posix-acl cannot be used with --translate-uid or --translate-gid: an ACL \
                    names ids inside its value, which are not translated"
                .into(),
        );
    }
    Ok(want)
}

fn setup(args: &VirtiofsdArgs) -> Result<Setup, (u8, String)> {
    let usage = |e: String| (EXIT_USAGE, e);
    if args.thread_pool_size.is_some_and(|n| n > 0) {
        return Err(usage(
            "--thread-pool-size is not supported but as 0: each request queue is served on a \
             thread of its own"
                .into(),
        ));
    }
    let (mut options, legacy) = split_options(&args.options);
    if args.readonly {
        options.push("ro".into());
    }
    let source = args.shared_dir.clone().or(legacy.source);
    // The guest cannot be told of host changes: a shared directory gets short timeouts
    // unless asked otherwise; the mem backend, which only the guest changes, keeps names.
    match args.cache.clone().or(legacy.cache) {
        Some(mode) => options.push(format!("cache={mode}")),
        None if source.is_some() => options.push("cache=auto".into()),
        None => {}
    }
    let opts = parse_options(&options, mount::ram_bytes()).map_err(|e| usage(e.to_string()))?;
    if let Some(msg) = backends::foreign_option(&options, source.is_some()) {
        return Err(usage(msg));
    }
    if let (Some(lock), Some(_)) = (legacy.remote_locks.first(), &source) {
        return Err(usage(format!(
            "-o {lock}: memofs keeps locks in the guest's kernel (it does not ask for \
             FUSE_POSIX_LOCKS or FUSE_FLOCK_LOCKS), so processes on the host would not see \
             the guest's locks; leave it out"
        )));
    }
    let sandbox =
        sandbox::SandboxMode::parse(args.sandbox.as_deref().or(legacy.sandbox.as_deref()))
            .map_err(usage)?;
    let seccomp = seccomp::SeccompMode::parse(args.seccomp.as_deref()).map_err(usage)?;
    let caps = sandbox::kept_caps(source.is_some(), args.modcaps.as_deref()).map_err(usage)?;
    let ids = id_maps(args).map_err(usage)?;
    let acl = acl(args, &ids).map_err(usage)?;
    let migration = migration(args, source.is_some()).map_err(usage)?;
    let xattrs = match args.xattrmap.as_deref().or(legacy.xattrmap.as_deref()) {
        Some(map) => Some(XattrMap::parse(map).map_err(|e| usage(format!("--xattrmap: {e}")))?),
        None => None,
    };
    let security_label = args.security_label || legacy.security_label;
    if !opts.xattr {
        let needs = [
            (args.xattr, "--xattr"),
            (xattrs.is_some(), "--xattrmap"),
            (security_label, "--security-label"),
            (acl != Want::Off, "--posix-acl"),
        ];
        if let Some((_, what)) = needs.iter().find(|(asked, _)| *asked) {
            return Err(usage(format!(
                "{what} needs extended attributes, which -o no_xattr (xattr=off) turns off"
            )));
        }
    }
    let source = match source {
        Some(dir) => Some(backends::check_source(&dir, None).map_err(|e| (EXIT_FAILURE, e))?),
        None => None,
    };
    Ok(Setup {
        opts,
        source,
        sandbox,
        seccomp,
        caps,
        ids,
        acl,
        xattrs,
        security_label,
        migration,
    })
}

pub fn main(args: &VirtiofsdArgs) -> ExitCode {
    daemon::block_stop_signals();
    if args.print_capabilities {
        println!("{CAPABILITIES}");
        return ExitCode::SUCCESS;
    }
    let setup = match setup(args) {
        Ok(s) => s,
        Err((code, msg)) => return fail(code, msg),
    };
    let debug = args.debug.then_some("debug");
    mount::init_logging(
        debug
            .or(args.log_level.as_deref())
            .unwrap_or(mount::log_level(&setup.opts)),
    );
    let kind = match setup.source {
        Some(_) => BackendKind::Passthrough,
        None => BackendKind::Mem,
    };
    let mut plan = MountPlan::new(&setup.opts, kind, backends::privileged());
    plan.ids = setup.ids.clone();
    plan.acl = setup.acl;
    plan.xattrs = setup.xattrs.clone();
    plan.announce_submounts = args.announce_submounts;
    plan.security_label = setup.security_label;
    plan.migration = setup.migration;
    if let Some(n) = args.rlimit_nofile {
        let set = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n);
        if let Err(e) = set {
            return fail(EXIT_FAILURE, format!("--rlimit-nofile {n}: {e}"));
        }
    }
    if let Err(e) = plan.without_notifications() {
        return fail(EXIT_USAGE, e);
    }
    let (listener, socket) = match listener(args) {
        Ok(l) => l,
        Err((code, msg)) => return fail(code, msg),
    };
    // Past here a sandboxed server runs in a child; this process waits for it and then
    // removes the socket files, which the child no longer sees.
    let unprivileged = !nix::unistd::geteuid().is_root();
    if let Err(e) = sandbox::enter(setup.sandbox, unprivileged, || {
        if let Some(s) = &socket {
            s.remove();
        }
    }) {
        return fail(EXIT_FAILURE, e);
    }
    // The control socket is bound while the host's files are in sight, answered from inside.
    let control = socket
        .as_ref()
        .and_then(|s| match memofs_control::bind_device(s.path()) {
            Ok(c) => Some(c),
            Err(e) => {
                log::warn!("memofs stats will not work for this device: {e}");
                None
            }
        });
    let served = match &setup.source {
        Some(src) => confined(&setup, || backends::passthrough(src, &mut plan, VMM_FDS))
            .map(|(b, s)| serve(b, s, plan, listener, control, &setup, socket)),
        None => confined(&setup, || backends::mem(&setup.opts, &mut plan))
            .map(|(b, s)| serve(b, s, plan, listener, control, &setup, socket)),
    };
    served.unwrap_or_else(|e| fail(EXIT_FAILURE, e))
}

/// Descriptors left for the VMM's: a guest memory region for each of the memory slots
/// offered (509, vhost-user-backend's), two events per queue, the connection.
const VMM_FDS: usize = 509 + 2 * (1 + memofs_virtiofs::REQUEST_QUEUES) + 64;

/// Builds the backend with `build` inside the sandbox's root (while the host's files are
/// still in sight), then keeps only what the server needs: its capabilities, no new
/// privileges, the seccomp filter.
fn confined<B: Backend + ConfinedBackend>(
    setup: &Setup,
    build: impl FnOnce() -> backends::Built<B>,
) -> backends::Built<B> {
    let mut built = None;
    sandbox::confine(setup.sandbox, setup.source.as_deref(), || {
        built = Some(build()?);
        Ok(())
    })?;
    let (backend, settings) = built.expect("confine runs the build or fails");
    if setup.sandbox != sandbox::SandboxMode::None {
        backend.without_host_paths()?;
    }
    sandbox::restrict(&setup.caps)?;
    seccomp::install(setup.seccomp)?;
    Ok((backend, settings))
}

/// What a backend must do once the host's paths are gone (a sandbox's root).
trait ConfinedBackend {
    fn without_host_paths(&self) -> Result<(), String>;
}

impl ConfinedBackend for MemFs {
    fn without_host_paths(&self) -> Result<(), String> {
        Ok(())
    }
}

impl ConfinedBackend for PassthroughFs {
    fn without_host_paths(&self) -> Result<(), String> {
        self.work_without_host_paths()
            .map_err(|e| format!("--sandbox: cannot work in /proc/self/fd: {e}"))
    }
}

#[allow(clippy::too_many_arguments)]
fn serve<B: Backend + 'static>(
    backend: Arc<B>,
    backend_settings: Vec<(String, String)>,
    plan: MountPlan,
    listener: Listener,
    control: Option<(std::os::unix::net::UnixListener, memofs_control::Control)>,
    setup: &Setup,
    socket: Option<SocketFile>,
) -> ExitCode {
    if plan.acl == Want::On && !plan.posix_acl {
        return fail(
            EXIT_FAILURE,
            "--posix-acl=always: this backend keeps no POSIX ACLs here",
        );
    }
    let guest_fs = GuestFs::new(backend.clone(), plan, Arc::new(Stats::default()));
    let mut settings = backends::plan_settings(guest_fs.plan());
    settings.push(("transport".into(), "virtio-fs (vhost-user-fs)".into()));
    settings.push(("sandbox".into(), describe(setup)));
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
    let control = control.and_then(|(listener, control)| {
        match memofs_control::answer_device(listener, source) {
            Ok(()) => Some(control),
            Err(e) => {
                log::warn!("memofs stats will not work for this device: {e}");
                None
            }
        }
    });
    // Where the server still sees the host's files (no sandbox) it removes its sockets
    // itself; a sandboxed one leaves that to its supervisor, since those paths now name
    // files of the shared directory.
    let sandboxed = setup.sandbox != sandbox::SandboxMode::None;
    let ends = Arc::new(std::sync::Mutex::new((control, socket)));
    let on_stop = ends.clone();
    // A stop signal (a service manager's) ends the server with its sockets removed.
    daemon::on_stop_signal(move |_| {
        end(&on_stop, sandboxed);
        std::process::exit(0);
    });
    let device = match VirtioFs::new(guest_fs) {
        Ok(d) => Arc::new(d),
        Err(e) => return fail(EXIT_FAILURE, format!("cannot set up the device: {e}")),
    };
    let served = memofs_virtiofs::serve(device, listener);
    end(&ends, sandboxed);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_FAILURE, e),
    }
}

type Ends = std::sync::Mutex<(Option<memofs_control::Control>, Option<SocketFile>)>;

/// The server's sockets go: removed here, or (`sandboxed`) only closed, their files left to
/// the supervisor.
fn end(ends: &Ends, sandboxed: bool) {
    let (control, socket) = &mut *ends.lock().unwrap_or_else(|e| e.into_inner());
    let control = control.take();
    let socket = socket.take();
    match (sandboxed, control) {
        (true, Some(c)) => c.close_only(),
        (_, control) => drop(control),
    }
    if let (false, Some(s)) = (sandboxed, &socket) {
        s.remove();
    }
}

/// The sandbox, as `memofs stats` shows it.
fn describe(setup: &Setup) -> String {
    let mut caps: Vec<String> = setup
        .caps
        .iter()
        .map(|c| c.to_string().trim_start_matches("CAP_").to_lowercase())
        .collect();
    caps.sort();
    format!(
        "{:?}, seccomp {:?}, capabilities: {}",
        setup.sandbox,
        setup.seccomp,
        if caps.is_empty() {
            "none".into()
        } else {
            caps.join(" ")
        }
    )
    .to_lowercase()
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
            "negative_timeout=30,no_posix_lock,security_label,flock,no_xattr".to_string(),
        ];
        let (ours, legacy) = split_options(&lists);
        assert_eq!(ours, ["xattr=on", "negative_timeout=30", "xattr=off"]);
        assert_eq!(
            legacy,
            Legacy {
                source: Some("/srv/a,b".into()),
                cache: Some("always".into()),
                sandbox: Some("chroot".into()),
                xattrmap: None,
                security_label: true,
                remote_locks: vec!["flock".into()],
            }
        );
    }

    #[test]
    fn no_xattr_turns_extended_attributes_off_and_refuses_what_needs_them() {
        let xattr = |extra: &[&str]| setup(&args(extra)).map(|s| s.opts.xattr).map_err(|e| e.1);
        assert_eq!(xattr(&[]), Ok(true));
        assert_eq!(xattr(&["--xattr"]), Ok(true));
        assert_eq!(xattr(&["-o", "no_xattr"]), Ok(false));
        assert_eq!(xattr(&["-o", "xattr=off"]), Ok(false));
        for (extra, what) in [
            (&["-o", "no_xattr", "--xattr"][..], "--xattr needs"),
            (
                &["-o", "no_xattr", "--security-label"][..],
                "--security-label needs",
            ),
            (
                &["-o", "no_xattr,xattrmap=:map::user.vm.:"][..],
                "--xattrmap needs",
            ),
            (&["-o", "no_xattr", "--posix-acl"][..], "--posix-acl needs"),
        ] {
            let e = xattr(extra).unwrap_err();
            assert!(e.contains(what), "{extra:?}: {e}");
        }
    }

    #[test]
    fn remote_locks_are_refused_only_where_the_host_shares_the_files() {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        let ok = |extra: &[&str]| setup(&args(extra)).map(|_| ()).map_err(|e| e.1);
        assert_eq!(ok(&["-o", "posix_lock,flock"]), Ok(()));
        assert_eq!(
            ok(&["--shared-dir", dir, "-o", "no_posix_lock,no_flock"]),
            Ok(())
        );
        let e = ok(&["--shared-dir", dir, "-o", "flock"]).unwrap_err();
        assert!(
            e.contains("-o flock: memofs keeps locks in the guest's kernel"),
            "{e}"
        );
    }

    fn args(extra: &[&str]) -> VirtiofsdArgs {
        use clap::Parser;
        let mut argv = vec!["memofs", "virtiofsd", "--socket-path", "/tmp/x.sock"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Virtiofsd(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_shared_directorys_files_are_found_by_path_unless_asked_otherwise() {
        let choices = |extra: &[&str]| {
            let mut argv = vec!["--shared-dir", "/"];
            argv.extend_from_slice(extra);
            setup(&args(&argv)).map(|s| s.migration).map_err(|e| e.1)
        };
        assert_eq!(choices(&[]), Ok(Choices::default()));
        let paths = Choices {
            find_by: FindBy::Paths,
            verify_handles: true,
        };
        let verify = ["--migration-mode=find-paths", "--migration-verify-handles"];
        assert_eq!(choices(&verify), Ok(paths));
        let on_error = ["--migration-on-error", "abort", "--migration-confirm-paths"];
        assert_eq!(choices(&on_error), Ok(Choices::default()));
        let handles = choices(&["--migration-mode", "file-handles"]).map(|c| c.find_by);
        assert_eq!(handles, Ok(FindBy::FileHandles));
        let both = [
            "--migration-mode=file-handles",
            "--migration-verify-handles",
        ];
        assert!(choices(&both).is_err_and(|e| e.contains("finds the very files")));
    }

    #[test]
    fn acls_are_off_unless_asked_for_as_with_virtiofsd() {
        let want = |extra: &[&str]| setup(&args(extra)).map(|s| s.acl).map_err(|e| e.1);
        assert_eq!(want(&[]), Ok(Want::Off));
        assert_eq!(want(&["--posix-acl"]), Ok(Want::On));
        assert_eq!(want(&["--posix-acl=auto"]), Ok(Want::Auto));
        assert_eq!(want(&["--posix-acl=never"]), Ok(Want::Off));
    }

    #[test]
    fn readonly_and_translated_ids_reach_the_setup_and_bad_ones_are_refused() {
        let s = setup(&args(&[
            "--readonly",
            "--translate-uid",
            "map:1000:101000:5",
            "-o",
            "xattrmap=:map:security.:trusted.vm.:",
        ]))
        .unwrap();
        assert!(s.xattrs.is_some());
        assert!(s
            .opts
            .kernel_flags
            .contains(&memofs_core::options::KernelFlag::ReadOnly));
        assert_eq!(s.ids.uid.to_host(1004), Ok(101_004));
        assert!(s.ids.gid.is_identity());
        for (extra, says) in [
            (
                &["--translate-gid", "map:1:2"][..],
                "--translate-gid 'map:1:2'",
            ),
            (
                &["--posix-acl", "--translate-uid", "squash-guest:0:1000:10"][..],
                "--posix-acl cannot be used",
            ),
            (&["--posix-acl=sometimes"][..], "say never, auto or always"),
            (
                &["--xattrmap", ":ok:all:::swap"][..],
                "--xattrmap: rule 2: ends before its type",
            ),
            (
                &["--thread-pool-size", "4"][..],
                "--thread-pool-size is not supported",
            ),
            (
                &["--migration-mode", "file-handles"][..],
                "without --shared-dir the files themselves move",
            ),
            (
                &[
                    "--shared-dir",
                    "/nowhere",
                    "--migration-on-error=guest-error",
                ][..],
                "guest-error is not supported",
            ),
        ] {
            match setup(&args(extra)) {
                Err((code, msg)) => {
                    assert_eq!(code, EXIT_USAGE);
                    assert!(msg.contains(says), "{extra:?}: {msg}");
                }
                Ok(_) => panic!("{extra:?} was taken"),
            }
        }
    }

    #[test]
    fn virtiofsds_options_memofs_does_not_take_are_refused_with_a_reason() {
        let refused = |argv: &[&str]| {
            crate::cli::parse(argv.iter().map(Into::into).collect())
                .err()
                .map(|e| e.to_string())
        };
        for (argv, says) in [
            (
                &["memofs", "virtiofsd", "--socket-path", "/s", "--tag=fs"][..],
                "--tag is not supported: the tag is the VMM's",
            ),
            (
                &[
                    "memofs-virtiofsd",
                    "--socket-path",
                    "/s",
                    "--gid-map",
                    ":0:1:1:",
                ][..],
                "--gid-map is not supported",
            ),
            (
                &["memofs", "virtiofsd", "--uid-map", ":0:100000:65536:"][..],
                "--uid-map is not supported",
            ),
        ] {
            let msg = refused(argv).unwrap_or_else(|| panic!("{argv:?} was taken"));
            assert!(msg.contains(says), "{argv:?}: {msg}");
        }
        let taken = [
            "memofs",
            "virtiofsd",
            "--socket",
            "/s",
            "--posix-acl=never",
            "-f",
            "--killpriv-v2",
            "--thread-pool-size=0",
            "--no-announce-submounts",
            "--security-label",
        ];
        assert!(refused(&taken).is_none(), "{:?}", refused(&taken));
        // An option's value is not an option.
        let cmd = crate::cli::command();
        let virtiofsd = cmd.find_subcommand("virtiofsd").expect("declared");
        let first = |argv: &[&str]| {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            refused_option(virtiofsd, &argv)
        };
        let values = [
            "--socket-path",
            "--tag",
            "--cache=always",
            "-o",
            "--xattrmap",
        ];
        assert_eq!(first(&values), None);
        // A flag that takes no value is followed by an option.
        let msg = first(&["--xattr", "--tag", "fs"]).expect("--tag refused");
        assert!(msg.starts_with("--tag is not supported"), "{msg}");
    }

    #[test]
    fn capabilities_name_an_fs_device_that_migrates() {
        assert!(CAPABILITIES.contains("\"type\": \"fs\""));
        assert!(CAPABILITIES.contains("\"migrate-precopy\""));
    }
}
