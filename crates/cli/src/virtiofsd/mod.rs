//! `memofs virtiofsd` (also run as `memofs-virtiofsd`): memofs served to a virtual machine as
//! a vhost-user-fs device, with virtiofsd's command line so that a VMM or libvirt domain that
//! names virtiofsd can name memofs instead. [`setup`] checks the command line (virtiofsd's
//! older `-o` forms in [`legacy`]); this module sets the server up and serves.

mod legacy;
mod setup;
mod syslog;

use std::process::ExitCode;
use std::sync::Arc;

use memofs_control::StatsSource;
use memofs_core::options::Want;
use memofs_core::plan::MountPlan;
use memofs_core::Backend;
use memofs_mem::MemFs;
use memofs_passthrough::PassthroughFs;
use memofs_request::invalidate::Invalidated;
use memofs_request::Stats;
use memofs_virtiofs::Listener;
use memofs_virtiofs::{GuestFs, Incoming, VirtioFs};

use crate::cli::VirtiofsdArgs;
use crate::vhost_socket::SocketFile;
use crate::{backends, daemon, fail, logging, sandbox, seccomp, EXIT_FAILURE, EXIT_USAGE};

use setup::{listener, setup, Setup};
pub use setup::{refused_option, NO_KILLPRIV, NO_READDIRPLUS};

/// What `--print-capabilities` prints: the vhost-user backend description QEMU and libvirt
/// read (docs/interop/vhost-user.json), with virtiofsd 1.14's features, each of which memofs
/// has: `migrate-precopy` (the device state moves with its VM through QEMU 8.2 and later, its
/// writes into guest memory logged meanwhile; libvirt lets such a domain migrate),
/// `posix-acl-negotiation-mode` and `security-label-negotiation-mode` (`--posix-acl=` and
/// `--security-label=` take never, auto and always; Incus then says auto), and
/// `separate-options` (the `--shared-dir DIR` form; libvirt otherwise writes the older `-o`).
pub const CAPABILITIES: &str = "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\",\n    \"posix-acl-negotiation-mode\",\n    \"security-label-negotiation-mode\",\n    \"separate-options\"\n  ]\n}";

/// What the server logs once it listens, as virtiofsd logs it: a VMM manager that starts
/// the server waits for this line on its standard error (Kata's runtime-rs).
const READY: &str = "Waiting for vhost-user socket connection...";

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
    if setup.syslog {
        if let Err(e) = syslog::init(&setup.log_level) {
            return fail(EXIT_FAILURE, e);
        }
    } else {
        logging::to_stderr(&setup.log_level);
    }
    let mut plan = setup.plan();
    if let Some(n) = setup.rlimit_nofile {
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
    // Bound here, in the host's network namespace, which the sandbox leaves.
    let incoming = match &setup.migration_listen {
        Some(addr) => match std::net::TcpListener::bind(addr) {
            Ok(l) => Some(Incoming::Tcp(l)),
            Err(e) => return fail(EXIT_FAILURE, format!("--migration-listen {addr}: {e}")),
        },
        None => None,
    };
    // Past here a sandboxed server runs in a child; this process waits for it and then
    // removes the socket files, which the child no longer sees.
    let unprivileged = !nix::unistd::geteuid().is_root();
    if let Err(e) = sandbox::enter(setup.sandbox, unprivileged, &setup.namespace_ids, || {
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
    let sockets = Sockets {
        listener,
        control,
        socket,
        incoming,
    };
    let served = match &setup.source {
        Some(src) => confined(&setup, || backends::passthrough(src, &mut plan, VMM_FDS))
            .map(|(b, s)| serve(b, s, plan, sockets, &setup)),
        None => confined(&setup, || backends::mem(&setup.opts, &mut plan, None))
            .map(|(b, s)| serve(b, s, plan, sockets, &setup)),
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
    let read_only = setup.plan().read_only();
    sandbox::confine(setup.sandbox, setup.source.as_deref(), read_only, || {
        built = Some(build()?);
        Ok(())
    })?;
    let (backend, settings) = built.expect("confine runs the build or fails");
    if setup.sandbox != sandbox::SandboxMode::None {
        backend.without_host_paths()?;
    }
    sandbox::restrict(&setup.caps)?;
    seccomp::install(setup.seccomp, setup.opens_handles())?;
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

/// The sockets a server serves on, made while it still sees the host.
struct Sockets {
    /// The vhost-user socket.
    listener: Listener,
    /// `memofs stats`'s, bound to a file named after the vhost-user socket's.
    control: Option<(std::os::unix::net::UnixListener, memofs_control::Control)>,
    /// The vhost-user socket's file.
    socket: Option<SocketFile>,
    /// Where a source's data sent ahead of a migration arrives (`--migration-listen`).
    incoming: Option<Incoming>,
}

fn serve<B: Backend + 'static>(
    backend: Arc<B>,
    backend_settings: Vec<(String, String)>,
    plan: MountPlan,
    sockets: Sockets,
    setup: &Setup,
) -> ExitCode {
    let Sockets {
        listener,
        control,
        socket,
        incoming,
    } = sockets;
    if plan.acl == Want::On && !plan.posix_acl {
        return fail(
            EXIT_FAILURE,
            "--posix-acl=always: this backend keeps no POSIX ACLs here",
        );
    }
    let guest_fs = GuestFs::new(backend.clone(), plan, Arc::new(Stats::default()));
    let device = match VirtioFs::new(guest_fs, setup.device.clone()) {
        Ok(d) => Arc::new(d),
        Err(e) => return fail(EXIT_FAILURE, format!("cannot set up the device: {e}")),
    };
    if let Some(incoming) = incoming {
        if let Err(e) = device.receive_ahead(incoming) {
            return fail(EXIT_FAILURE, format!("--migration-listen: {e}"));
        }
    }
    let guest_fs = device.guest_fs();
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
        send_ahead: send_ahead(&device),
        remount: None,
        upgrade: None,
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
    log::info!("{READY}");
    let served = memofs_virtiofs::serve(device, listener);
    end(&ends, sandboxed);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_FAILURE, e),
    }
}

/// `memofs migrate`'s hand-over, for a device whose files move with its VM.
fn send_ahead<B: Backend + 'static>(
    device: &Arc<VirtioFs<B>>,
) -> Option<memofs_control::SendAhead> {
    device.guest_fs().backend().migration()?.precopy()?;
    let device = device.clone();
    Some(Box::new(move |channel| {
        device.send_ahead(channel).map_err(|e| e.to_string())
    }))
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
    fn capabilities_are_virtiofsds_features() {
        let doc: serde_json::Value = serde_json::from_str(CAPABILITIES).unwrap();
        assert_eq!(doc["type"], "fs");
        let features: Vec<&str> = doc["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(
            features,
            [
                "migrate-precopy",
                "posix-acl-negotiation-mode",
                "security-label-negotiation-mode",
                "separate-options"
            ]
        );
    }
}
