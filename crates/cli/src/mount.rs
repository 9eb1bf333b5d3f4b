//! `memofs mount`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use memofs_control::StatsSource;
use memofs_core::options::{parse_options, MountOptions};
use memofs_core::plan::{BackendKind, MountPlan};

use crate::backends;
use crate::cli::MountArgs;
use crate::daemon;
use crate::upgrade::{HandOver, Handover};
use crate::{fail, EXIT_FAILURE, EXIT_USAGE};
use memofs_core::Backend;

/// Total RAM, for `size=N%` and the tmpfs-like defaults.
pub(crate) fn ram_bytes() -> u64 {
    // SAFETY: sysinfo fills the zeroed struct we pass; nothing else is touched.
    unsafe {
        let mut si: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut si) == 0 {
            return si.totalram as u64 * si.mem_unit as u64;
        }
    }
    8 << 30
}

pub fn main(args: &MountArgs) -> ExitCode {
    if crate::remount::asked(&args.options) {
        return crate::remount::main(args);
    }
    let opts = match parse_options(&args.options, ram_bytes()) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let (given, mountpoint) = args.source_and_mountpoint();
    let source = opts.source.as_deref().or(given);
    if let Some(msg) = backends::foreign_option(&args.options, source.is_some()) {
        return fail(EXIT_USAGE, msg);
    }
    let export = match source.map(|src| backends::check_source(src, Some(mountpoint))) {
        Some(Ok(src)) => Some(src),
        Some(Err(e)) => return fail(EXIT_FAILURE, e),
        None => None,
    };
    let mountpoint = match memofs_fuse::preflight(mountpoint, args.over) {
        Ok(m) => m,
        Err(e) => return fail(EXIT_FAILURE, e),
    };
    if args.fake {
        let backend = match source {
            Some(src) => format!("exporting {}", src.display()),
            None => "in-memory".into(),
        };
        println!(
            "memofs: would mount at {} ({backend}); options are valid",
            mountpoint.display()
        );
        return ExitCode::SUCCESS;
    }
    let ready_fd = daemon::ReadyPipe::from_env();
    if !args.foreground && ready_fd.is_none() {
        return daemon::spawn_background(&args.foreground_args());
    }
    daemon::block_stop_signals();
    if ready_fd.is_some() {
        daemon::detach_session();
    }
    crate::logging::to_stderr(log_level(&opts));
    let kind = match source {
        Some(_) => BackendKind::Passthrough,
        None => BackendKind::Mem,
    };
    let mut plan = plan_for(args, &opts, kind, export.as_deref());
    let at = (mountpoint.as_path(), args);
    let built = match source {
        Some(src) => {
            backends::passthrough(src, &mut plan, memofs_passthrough::RESERVED_FDS).map(|(b, s)| {
                let fs = b.clone();
                let features = Box::new(move || backends::passthrough_features(&fs));
                serve(b, s, features, plan, at, Start::Mount(ready_fd))
            })
        }
        None => backends::mem(&opts, &mut plan, None)
            .map(|(b, s)| serve(b, s, Box::new(Vec::new), plan, at, Start::Mount(ready_fd))),
    };
    built.unwrap_or_else(|e| fail(EXIT_FAILURE, e))
}

/// The plan of the mount `args` ask for, with `opts` parsed from them, of backend `kind`
/// (exporting `export`, canonical).
pub(crate) fn plan_for(
    args: &MountArgs,
    opts: &MountOptions,
    kind: BackendKind,
    export: Option<&Path>,
) -> MountPlan {
    let mut plan = MountPlan::new(opts, kind, backends::privileged());
    if opts.fsname.is_none() {
        let export = export.filter(|_| opts.source.is_none());
        plan.fsname = shown_source(args, export);
    }
    plan
}

/// How a server comes to serve its mount.
pub(crate) enum Start {
    /// It mounts; `memofs mount`'s ready pipe, where it waits in the background.
    Mount(Option<daemon::ReadyPipe>),
    /// It takes a live mount over from the executable it replaced (`memofs upgrade`).
    Resume(Box<crate::resume::Taking>),
}

/// What the mount table shows as the source without `fsname=`: the export's path (`export`,
/// `None` where `source=` gave it), or the SOURCE argument as given (`memofs`, `none`,
/// `memofs:NAME`, the name of a `source=` export), as kernel filesystems show theirs;
/// `memofs` where that cannot be an option's value.
fn shown_source(args: &MountArgs, export: Option<&Path>) -> String {
    let given = match (export, args.paths.as_slice()) {
        (Some(path), _) => path.to_string_lossy().into_owned(),
        (None, [source, _]) => source.to_string_lossy().into_owned(),
        _ => return "memofs".into(),
    };
    match given.contains(|c: char| c.is_whitespace() || c == ',' || c.is_control()) {
        true => "memofs".into(),
        false => given,
    }
}

/// The level `-o debug` asks for.
pub(crate) fn log_level(opts: &MountOptions) -> &'static str {
    if opts.debug {
        "debug"
    } else {
        "warn"
    }
}

/// Host kernel features a backend uses, for `memofs stats`.
type BackendFeatures = Box<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

pub(crate) fn serve<B: HandOver>(
    backend: Arc<B>,
    backend_settings: Vec<(String, String)>,
    backend_features: BackendFeatures,
    plan: MountPlan,
    (mountpoint, args): (&Path, &MountArgs),
    start: Start,
) -> ExitCode {
    let cache = plan.cache;
    let mounted = match &start {
        Start::Mount(_) => {
            memofs_fuse::mount(backend.clone(), mountpoint, plan).map_err(|e| e.to_string())
        }
        Start::Resume(taking) => taking.connect(backend.clone(), mountpoint, plan),
    };
    let mounted = match mounted {
        Ok(m) => m,
        Err(e) => return start.failed(e, None),
    };
    let live = Arc::new(crate::remount::Live::new(
        mounted.server().clone(),
        args.options.clone(),
        ram_bytes(),
    ));
    let session = match mounted.session() {
        Ok(s) => s,
        Err(e) => return start.failed(format!("cannot keep the connection: {e}"), None),
    };
    let handover = Arc::new(Handover {
        backend: backend.clone(),
        server: mounted.server().clone(),
        live: live.clone(),
        session,
        paths: args.paths.clone(),
        pause: OnceLock::new(),
    });
    let source = control_source(
        &mounted,
        backend,
        (backend_settings, backend_features),
        cache,
    );
    let source = StatsSource {
        remount: Some(Box::new(move |opts| live.remount(opts))),
        upgrade: Some(Box::new({
            let handover = handover.clone();
            move |conn, exe| handover.run(conn, exe)
        })),
        ..source
    };
    // The control socket, removed when the server ends.
    let control = start_control(&mounted, mountpoint, source);
    let unmounter = mounted.unmounter();
    daemon::on_stop_signal(move |_sig| unmounter.unmount());
    let serving = match mounted.serve() {
        Ok(s) => s,
        Err(e) => return start.failed(format!("cannot serve the mount: {e}"), Some(mountpoint)),
    };
    if let Some(pause) = serving.pause() {
        let _ = handover.pause.set(pause);
    }
    start.serving(mountpoint);
    let result = serving.wait();
    drop(control);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_FAILURE, format!("server stopped: {e}")),
    }
}

impl Start {
    /// The server cannot serve: a new mount ends (unmounted, if `mounted` at), a server
    /// taking over goes back to the old executable.
    fn failed(self, why: String, mounted: Option<&Path>) -> ExitCode {
        match self {
            Start::Resume(taking) => taking.fall_back(why),
            Start::Mount(_) => {
                if let Some(m) = mounted {
                    let _ = memofs_fuse::mount::unmount(m, true);
                }
                fail(EXIT_FAILURE, why)
            }
        }
    }

    /// The mount is served: whoever waits for that is told.
    fn serving(self, mountpoint: &Path) {
        match self {
            Start::Mount(Some(pipe)) => pipe.report(),
            Start::Mount(None) => eprintln!(
                "memofs: mounted at {} (unmount with: memofs umount {})",
                mountpoint.display(),
                mountpoint.display()
            ),
            Start::Resume(taking) => taking.report(),
        }
    }
}

/// What `memofs stats` and `memofs invalidate` read of the mount (no remount, no upgrade).
fn control_source<B: Backend>(
    mounted: &memofs_fuse::KernelMount<B>,
    backend: Arc<B>,
    (backend_settings, backend_features): (Vec<(String, String)>, BackendFeatures),
    cache: memofs_core::CachePolicy,
) -> StatsSource {
    let mut settings = backends::plan_settings(mounted.plan());
    let granted = mounted.granted();
    settings.push((
        "passthrough_granted".into(),
        granted.passthrough.to_string(),
    ));
    settings.extend(backend_settings);
    let invalidator = mounted.invalidator();
    let notify = invalidator.clone();
    let transport = mounted.features();
    StatsSource {
        invalidate: Box::new(move || invalidator.invalidate_all()),
        features: Box::new(move || {
            let mut lines = transport.clone();
            lines.extend(notify.features());
            lines.extend(backend_features());
            lines
        }),
        stats: mounted.stats(),
        policy: cache,
        usage: Box::new(move || backend.usage()),
        settings,
        send_ahead: None,
        remount: None,
        upgrade: None,
    }
}

/// The mount's control socket (`None`, with a warning, where it cannot listen).
fn start_control<B: Backend>(
    mounted: &memofs_fuse::KernelMount<B>,
    mountpoint: &Path,
    source: StatsSource,
) -> Option<memofs_control::Control> {
    let dev = memofs_fuse::mountinfo::dev_of(mountpoint)?;
    match memofs_control::serve(dev, source) {
        Ok(c) => {
            if let Some(name) = c.abstract_name() {
                mounted.set_control_address(name);
            }
            Some(c)
        }
        Err(e) => {
            log::warn!("memofs stats will not work for this mount: {e}");
            None
        }
    }
}
