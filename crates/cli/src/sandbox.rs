//! The sandbox of `memofs virtiofsd`, as virtiofsd's: what a server serving an untrusted
//! guest can reach of the host if the guest finds a bug in it.
//!
//! Modes (`--sandbox`):
//! - `namespace` (the default): the server runs in a child process in new PID, mount,
//!   network and IPC namespaces (and a user namespace of its own where it is not root),
//!   whose root is the shared directory (`pivot_root`), or an empty directory for the mem
//!   backend. It sees no other file, process or network of the host.
//! - `chroot`: the same child, `chroot(2)`ed into the shared directory (or an empty one),
//!   without namespaces (for hosts where they cannot be made).
//! - `none`: the server runs as started, in the host's namespaces.
//!
//! With `namespace` and `chroot` the process the VMM started stays outside as a supervisor:
//! it forwards stop signals to the server, removes the socket files when the server ends
//! (the server no longer sees them) and exits with its status. The server dies with it.
//!
//! In every mode the server then keeps only the capabilities its backend needs (none for
//! the mem backend; virtiofsd's set for a shared directory, changed with `--modcaps`), may
//! gain no privilege (`no_new_privs`), and runs under a seccomp filter that allows only the
//! system calls it makes (`--seccomp`, see [`crate::seccomp`]).
//!
//! Everything here runs before the server starts its first thread: namespaces, the root,
//! capabilities and (without `TSYNC`) seccomp apply to the calling thread, and threads
//! started later inherit them.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use caps::{CapSet, Capability, CapsHashSet};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{chdir, chroot, fork, pivot_root, ForkResult, Pid};

/// `--sandbox`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxMode {
    /// New namespaces, `pivot_root` into the shared directory.
    Namespace,
    /// `chroot` into the shared directory.
    Chroot,
    /// As started.
    None,
}

impl SandboxMode {
    /// `--sandbox`'s value (default `namespace`).
    pub fn parse(s: Option<&str>) -> Result<SandboxMode, String> {
        match s {
            None | Some("namespace") => Ok(SandboxMode::Namespace),
            Some("chroot") => Ok(SandboxMode::Chroot),
            Some("none") => Ok(SandboxMode::None),
            Some(other) => Err(format!(
                "--sandbox={other}: the modes are namespace (the default), chroot and none"
            )),
        }
    }
}

/// The capabilities a shared directory's server keeps (virtiofsd's): to act as each
/// guest user (`SETUID`, `SETGID`), on any file as the host would let that user
/// (`CHOWN`, `DAC_OVERRIDE`, `DAC_READ_SEARCH` (also: open file handles again), `FOWNER`,
/// `FSETID`, `MKNOD`, `SETFCAP`). Not `SYS_ADMIN` (`trusted.*` attributes, mounts) nor
/// `LINUX_IMMUTABLE` (`chattr +i`): a guest's root is not the host's.
const SHARED_DIR_CAPS: [Capability; 9] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_MKNOD,
    Capability::CAP_SETFCAP,
];

/// The capabilities the server keeps: none for the mem backend (it reaches no host file),
/// [`SHARED_DIR_CAPS`] for a shared directory (without `CAP_DAC_READ_SEARCH` where it opens
/// no file handles: `--inode-file-handles=never`, as virtiofsd), changed by `--modcaps`
/// (virtiofsd's syntax: `+name` adds, `-name` removes, `:`-separated, names with or without
/// `cap_`).
pub fn kept_caps(
    shared_dir: bool,
    file_handles: bool,
    modcaps: Option<&str>,
) -> Result<CapsHashSet, String> {
    let mut set: CapsHashSet = if shared_dir {
        SHARED_DIR_CAPS.into_iter().collect()
    } else {
        CapsHashSet::new()
    };
    if !file_handles {
        set.remove(&Capability::CAP_DAC_READ_SEARCH);
    }
    for item in modcaps.into_iter().flat_map(|m| m.split(':')) {
        let (add, name) = match item.split_at_checked(1) {
            Some(("+", name)) => (true, name),
            Some(("-", name)) => (false, name),
            _ => return Err(format!("--modcaps: {item:?} is not +NAME or -NAME")),
        };
        let upper = name.to_ascii_uppercase();
        let full = if upper.starts_with("CAP_") {
            upper
        } else {
            format!("CAP_{upper}")
        };
        let cap: Capability = full
            .parse()
            .map_err(|_| format!("--modcaps: no capability {name:?}"))?;
        if add {
            set.insert(cap);
        } else {
            set.remove(&cap);
        }
    }
    Ok(set)
}

/// The ids a plain user's sandbox maps into its user namespace (virtiofsd's `--uid-map` and
/// `--gid-map`, `:NAMESPACE_ID:HOST_ID:COUNT:`, the separator any character): written by
/// newuidmap and newgidmap, the setuid helpers that let a user map the subordinate ids
/// `/etc/subuid` and `/etc/subgid` grant it (libvirt's session mode passes its user's own id
/// as 0 and the subordinate range from 1). Without them only the user's own ids are mapped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceIds {
    uid: Vec<[u32; 3]>,
    gid: Vec<[u32; 3]>,
}

impl NamespaceIds {
    /// `--uid-map` and `--gid-map` rules, for a sandbox in `mode`; as virtiofsd, only for
    /// a server that is not root, in the namespace sandbox.
    pub fn parse(
        uid: &[String],
        gid: &[String],
        mode: SandboxMode,
    ) -> Result<NamespaceIds, String> {
        let rules = |given: &[String], flag: &str| -> Result<Vec<[u32; 3]>, String> {
            given
                .iter()
                .map(|r| Self::rule(r).map_err(|e| format!("{flag}={r}: {e}")))
                .collect()
        };
        let ids = NamespaceIds {
            uid: rules(uid, "--uid-map")?,
            gid: rules(gid, "--gid-map")?,
        };
        let given = !ids.uid.is_empty() || !ids.gid.is_empty();
        if given && (mode != SandboxMode::Namespace || nix::unistd::geteuid().is_root()) {
            return Err(
                "--uid-map and --gid-map map the ids of a plain user's sandbox (the namespace \
                 sandbox, not as root): root's sandbox keeps the host's ids"
                    .into(),
            );
        }
        Ok(ids)
    }

    /// One rule: `:NS:HOST:COUNT:` with any non-digit separator, used throughout.
    fn rule(r: &str) -> Result<[u32; 3], String> {
        let sep = r.chars().next().ok_or("empty")?;
        if sep.is_ascii_digit() {
            return Err("it starts with its separator, e.g. :0:1000:1:".into());
        }
        let fields: Vec<&str> = r[sep.len_utf8()..]
            .trim_end_matches(sep)
            .split(sep)
            .collect();
        let nums: Vec<u32> = fields
            .iter()
            .map(|f| {
                f.parse()
                    .map_err(|_| format!("{f:?} is not an id or a count"))
            })
            .collect::<Result<_, _>>()?;
        match nums[..] {
            [ns, host, count] if count > 0 && ns.checked_add(count - 1).is_some() => {
                Ok([ns, host, count])
            }
            [_, _, _] => Err("the range is empty or past the last id".into()),
            _ => Err("say :NAMESPACE_ID:HOST_ID:COUNT:".into()),
        }
    }

    fn is_empty(&self) -> bool {
        self.uid.is_empty() && self.gid.is_empty()
    }
}

/// Enters the namespaces of `namespace` mode, or only forks for `chroot`: returns in the
/// child that serves; the parent supervises it and exits with its status. `unprivileged`:
/// the server is not root, and makes a user namespace of its own, mapping `ids` (its own
/// ids where none are given). `on_end` runs in the parent once the child has ended
/// (removing the socket files the child no longer sees).
pub fn enter(
    mode: SandboxMode,
    unprivileged: bool,
    ids: &NamespaceIds,
    on_end: impl FnOnce(),
) -> Result<(), String> {
    match mode {
        SandboxMode::None => return Ok(()),
        SandboxMode::Chroot if unprivileged => {
            return Err(
                "--sandbox=chroot needs root (chroot(2) takes CAP_SYS_CHROOT); as a \
                        user, --sandbox=namespace makes a user namespace instead"
                    .into(),
            )
        }
        _ => {}
    }
    if mode == SandboxMode::Namespace {
        let mut flags = CloneFlags::CLONE_NEWPID;
        if unprivileged {
            flags |= CloneFlags::CLONE_NEWUSER;
        }
        // The helpers map ids from outside the new namespace: a child started first, told
        // when the namespace exists.
        let mapper = match ids.is_empty() {
            true => None,
            false => Some(IdMapper::start(ids)?),
        };
        unshare(flags).map_err(|e| {
            format!(
                "--sandbox=namespace: cannot make new namespaces ({e}){}; --sandbox=chroot or \
                 none runs without them",
                if unprivileged {
                    ": unprivileged user namespaces may be off (kernel.unprivileged_userns_clone)"
                } else {
                    ""
                }
            )
        })?;
        match mapper {
            Some(m) => m.finish()?,
            None if unprivileged => map_own_ids()?,
            None => {}
        }
    }
    // SAFETY: no thread has been started (see the module documentation): the child is a
    // whole copy of this single-threaded process and may do anything the parent could.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            // The server ends with its supervisor (the process the VMM watches).
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            Ok(())
        }
        Ok(ForkResult::Parent { child }) => {
            let code = supervise(child);
            on_end();
            std::process::exit(code);
        }
        Err(e) => Err(format!("--sandbox: cannot start the server process: {e}")),
    }
}

/// A user namespace's `uid_map` and `gid_map` that map this process's own ids (all an
/// unprivileged process may map without help).
fn map_own_ids() -> Result<(), String> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| format!("--sandbox=namespace: cannot write /proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))
}

/// A child that runs newuidmap and newgidmap on this process once it is in its new user
/// namespace (a setuid helper run inside it would not gain the privilege it needs).
struct IdMapper {
    child: Pid,
    go: OwnedFd,
}

impl IdMapper {
    /// Starts the child, which waits for [`IdMapper::finish`].
    fn start(ids: &NamespaceIds) -> Result<IdMapper, String> {
        let (wait, go) = nix::unistd::pipe().map_err(|e| format!("--uid-map: {e}"))?;
        let target = nix::unistd::getpid();
        // SAFETY: single-threaded here (see the module documentation); the child only reads
        // a pipe, runs two programs and exits.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(go);
                let mut byte = [0u8];
                let told = nix::unistd::read(&wait, &mut byte).is_ok_and(|n| n == 1);
                let ok = told
                    && Self::run("newuidmap", target, &ids.uid)
                    && Self::run("newgidmap", target, &ids.gid);
                std::process::exit(if ok { 0 } else { 1 });
            }
            Ok(ForkResult::Parent { child }) => Ok(IdMapper { child, go }),
            Err(e) => Err(format!("--uid-map: cannot start the mapping helper: {e}")),
        }
    }

    /// Runs `tool` for `target` with `rules`; none: the user's own id mapped to itself, as
    /// without either option (and as virtiofsd does).
    fn run(tool: &str, target: Pid, rules: &[[u32; 3]]) -> bool {
        if rules.is_empty() {
            let (file, own) = match tool {
                "newuidmap" => ("uid_map", nix::unistd::getuid().as_raw()),
                _ => ("gid_map", nix::unistd::getgid().as_raw()),
            };
            let proc = format!("/proc/{target}");
            let setgroups =
                file == "uid_map" || std::fs::write(format!("{proc}/setgroups"), "deny").is_ok();
            return setgroups
                && std::fs::write(format!("{proc}/{file}"), format!("{own} {own} 1")).is_ok();
        }
        let mut cmd = std::process::Command::new(tool);
        cmd.arg(target.to_string());
        for r in rules {
            cmd.args(r.iter().map(u32::to_string));
        }
        match cmd.output() {
            Ok(out) if out.status.success() => true,
            Ok(out) => {
                eprintln!(
                    "memofs: {tool}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                false
            }
            Err(e) => {
                eprintln!("memofs: {tool}: {e} (apt-get install uidmap)");
                false
            }
        }
    }

    /// The namespace exists: the child maps the ids; returns once it has.
    fn finish(self) -> Result<(), String> {
        nix::unistd::write(&self.go, &[1]).map_err(|e| format!("--uid-map: {e}"))?;
        match waitpid(self.child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            _ => Err(
                "--uid-map/--gid-map: newuidmap or newgidmap refused the map (see above; \
                 the ranges must be the user's own id or in /etc/subuid and /etc/subgid)"
                    .into(),
            ),
        }
    }
}

/// The parent's loop: stop signals go to the child; returns the child's exit code. A child
/// that ended before SIGCHLD was blocked here is found by the first `waitpid`.
fn supervise(child: Pid) -> i32 {
    let mut set = crate::daemon::stop_signals();
    set.add(Signal::SIGCHLD);
    let _ = set.thread_block();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) => {}
            Err(_) => return 1,
        }
        match set.wait() {
            Ok(Signal::SIGCHLD) | Err(_) => {}
            Ok(sig) => {
                let _ = kill(child, sig);
            }
        }
    }
}

/// The root the server keeps: in `namespace` mode, new mount, network and IPC namespaces
/// whose root is `shared_dir` (or an empty directory); in `chroot` mode, `chroot` into it.
/// `before` runs while the host's files are still there (with the new PID namespace's own
/// `/proc` in `namespace` mode): the backend opens what it keeps open across. A
/// `read_only` shared directory is bound read-only in `namespace` mode, the mounts below it
/// too (in `chroot` mode the root is the host's directory itself, which stays as it is).
pub fn confine(
    mode: SandboxMode,
    shared_dir: Option<&Path>,
    read_only: bool,
    before: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    match mode {
        SandboxMode::None => before(),
        SandboxMode::Chroot => {
            before()?;
            match shared_dir {
                Some(dir) => chroot(dir).map_err(|e| format!("--sandbox=chroot: {e}"))?,
                None => chroot_empty()?,
            }
            chdir("/").map_err(|e| format!("--sandbox=chroot: {e}"))
        }
        SandboxMode::Namespace => {
            let ns = |what: &str, e: nix::errno::Errno| format!("--sandbox=namespace: {what}: {e}");
            unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWIPC)
                .map_err(|e| ns("new mount, network and IPC namespaces", e))?;
            // Nothing mounted here reaches the host's namespace.
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_SLAVE | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| ns("making / a slave", e))?;
            // The new PID namespace's own /proc (the host's shows the host's processes).
            mount(
                Some("proc"),
                "/proc",
                Some("proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(|e| ns("mounting /proc", e))?;
            before()?;
            let root = match shared_dir {
                Some(dir) => {
                    mount(
                        Some(dir),
                        dir,
                        None::<&str>,
                        MsFlags::MS_BIND | MsFlags::MS_REC,
                        None::<&str>,
                    )
                    .map_err(|e| ns("binding the shared directory", e))?;
                    if read_only {
                        bind_read_only(dir).map_err(|e| ns("binding it read-only", e))?;
                    }
                    dir.to_path_buf()
                }
                None => {
                    // An empty tmpfs nobody can write, over /proc (whose instance the
                    // backend holds open already).
                    mount(
                        Some("tmpfs"),
                        "/proc",
                        Some("tmpfs"),
                        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                        Some("size=4k,nr_inodes=1,mode=0555"),
                    )
                    .map_err(|e| ns("mounting an empty root", e))?;
                    "/proc".into()
                }
            };
            chdir(&root).map_err(|e| ns("entering the new root", e))?;
            pivot_root(".", ".").map_err(|e| ns("pivot_root", e))?;
            // The old root sits on top of the new one: detach it.
            umount2(".", MntFlags::MNT_DETACH).map_err(|e| ns("detaching the host's root", e))?;
            chdir("/").map_err(|e| ns("entering the new root", e))
        }
    }
}

/// Makes the mount at `dir` read-only, and every mount below it, and private, so that no
/// mount the host makes there later arrives writable (`mount_setattr` with `AT_RECURSIVE`,
/// Linux 5.12). Before that, a bind remount makes the top mount read-only only, and a
/// warning says so.
fn bind_read_only(dir: &Path) -> Result<(), nix::errno::Errno> {
    let fd: OwnedFd = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let done = memofs_passthrough::make_read_only(fd.as_fd(), true)
        .map_err(|e| nix::errno::Errno::from_raw(e.0));
    match done {
        Ok(()) => Ok(()),
        Err(e @ (nix::errno::Errno::ENOSYS | nix::errno::Errno::EPERM)) => {
            log::warn!(
                "--readonly: the shared directory's mounts below it stay writable in the \
                 sandbox (mount_setattr: {e}; it needs Linux 5.12)"
            );
            mount(
                None::<&str>,
                dir,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
        }
        Err(e) => Err(e),
    }
}

/// `chroot` into an empty directory that no longer has a name: nothing can be created in
/// it, and nothing is left behind.
fn chroot_empty() -> Result<(), String> {
    let err = |what: &str, e: nix::errno::Errno| format!("--sandbox=chroot: {what}: {e}");
    let template = std::env::temp_dir().join("memofs-sandbox-XXXXXX");
    let dir = nix::unistd::mkdtemp(&template).map_err(|e| err("an empty directory", e))?;
    let fd: OwnedFd = nix::fcntl::open(
        &dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| err("an empty directory", e))?;
    let _ = std::fs::remove_dir(&dir);
    nix::unistd::fchdir(fd.as_fd()).map_err(|e| err("entering it", e))?;
    chroot(".").map_err(|e| err("chroot", e))
}

/// Keeps only `keep` of this thread's capabilities (effective, permitted, inheritable and
/// the bounding set; none ambient), and sets `no_new_privs`: nothing the server runs could
/// gain more. Threads started later inherit this.
pub fn restrict(keep: &CapsHashSet) -> Result<(), String> {
    let err =
        |what: &str, e: caps::errors::CapsError| format!("dropping capabilities ({what}): {e}");
    // Without CAP_SETPCAP (a plain user outside a namespace of its own) the bounding set
    // stays: with no_new_privs, nothing the server runs could gain what it bounds.
    let setpcap = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false);
    for cap in caps::all() {
        if setpcap
            && !keep.contains(&cap)
            && caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false)
        {
            caps::drop(None, CapSet::Bounding, cap).map_err(|e| err("bounding set", e))?;
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| err("ambient", e))?;
    let permitted = caps::read(None, CapSet::Permitted).map_err(|e| err("reading", e))?;
    let kept: CapsHashSet = keep.intersection(&permitted).copied().collect();
    caps::set(None, CapSet::Inheritable, &CapsHashSet::new()).map_err(|e| err("inheritable", e))?;
    caps::set(None, CapSet::Effective, &kept).map_err(|e| err("effective", e))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(|e| err("permitted", e))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_virtiofsd_names_them() {
        assert_eq!(SandboxMode::parse(None), Ok(SandboxMode::Namespace));
        assert_eq!(SandboxMode::parse(Some("chroot")), Ok(SandboxMode::Chroot));
        assert_eq!(SandboxMode::parse(Some("none")), Ok(SandboxMode::None));
        assert!(SandboxMode::parse(Some("jail"))
            .unwrap_err()
            .contains("namespace"));
    }

    #[test]
    fn modcaps_adds_and_removes_from_the_backend_s_set() {
        let mem = kept_caps(false, true, None).unwrap();
        assert!(mem.is_empty(), "the mem backend reaches no host file");
        let shared = kept_caps(true, true, None).unwrap();
        assert_eq!(shared.len(), 9);
        assert!(!shared.contains(&Capability::CAP_SYS_ADMIN));
        let no_handles = kept_caps(true, false, None).unwrap();
        assert_eq!(no_handles.len(), 8);
        assert!(!no_handles.contains(&Capability::CAP_DAC_READ_SEARCH));
        let changed =
            kept_caps(true, true, Some("+sys_admin:-mknod:+CAP_LINUX_IMMUTABLE")).unwrap();
        assert!(changed.contains(&Capability::CAP_SYS_ADMIN));
        assert!(changed.contains(&Capability::CAP_LINUX_IMMUTABLE));
        assert!(!changed.contains(&Capability::CAP_MKNOD));
        assert!(kept_caps(true, true, Some("sys_admin")).is_err(), "no sign");
        assert!(kept_caps(true, true, Some("+no_such_cap")).is_err());
    }
}
