//! The command line, declared once with clap: parsing, `--help`, the man pages and the shell
//! completions all come from [`command`].
//!
//! Besides `memofs SUBCOMMAND ...`, two spellings that mount(8) uses are understood:
//! - `memofs SOURCE MOUNTPOINT -o OPTS`: what mount.fuse3 runs for `mount -t fuse.memofs`;
//! - `mount.memofs SOURCE MOUNTPOINT [-sfnv] [-t TYPE] [-o OPTS]` (or `mount.fuse.memofs`):
//!   mount(8)'s helper protocol for `mount -t memofs`, where `-f` means "fake" (check, do
//!   not mount).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use memofs_core::options::{markdown_table, option_docs};

/// memofs: a userspace filesystem server mounted through FUSE.
#[derive(Parser, Debug)]
#[command(
    name = "memofs",
    version,
    about = "memofs: a userspace filesystem server mounted through FUSE",
    long_about = "memofs: a userspace filesystem server mounted through FUSE.\n\n\
        Without SOURCE (or with SOURCE 'memofs' or 'none') it serves an in-memory, tmpfs-like \
        filesystem; with a SOURCE directory it exports that directory (passthrough backend).",
    after_help = "mount(8) forms: 'mount -t memofs SOURCE DIR -o OPTS', 'mount -t fuse.memofs \
        SOURCE DIR -o OPTS' and the same in /etc/fstab.",
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount memofs at MOUNTPOINT; returns once the mount is live, the server runs on in the
    /// background
    Mount(MountArgs),
    /// Unmount a memofs mount (also cleans up after a server that died)
    #[command(visible_alias = "unmount")]
    Umount(UmountArgs),
    /// Show a mount's settings, kernel features, counters and request latencies
    Stats(StatsArgs),
    /// Make the kernel forget every name it caches for a mount (for changes the server
    /// cannot see)
    Invalidate(TargetArgs),
    /// Serve memofs to a virtual machine as a vhost-user-fs device (virtio-fs), taking
    /// virtiofsd's command line
    Virtiofsd(Box<VirtiofsdArgs>),
    /// Before live-migrating a VM whose memofs device keeps its files (the mem backend):
    /// send the files' data ahead to the destination's server (started with
    /// --migration-listen), so that the VM stops only for what changed since
    Migrate(MigrateArgs),
    /// Replace a mount's server with a new executable (after installing a new release),
    /// keeping every file, open file, lookup and lock: the mount pauses for the handover
    Upgrade(UpgradeArgs),
    /// Take over a mount from the server process this one replaced (run by that process
    /// through `memofs upgrade`; not for use by hand)
    #[command(hide = true)]
    Resume(ResumeArgs),
    /// Write the man pages, shell completions and option table into DIR (used by `make install`)
    #[command(hide = true)]
    Generate {
        /// Where to write man/, completions/ and options.md
        dir: PathBuf,
    },
}

/// `memofs virtiofsd`: virtiofsd's command line, and memofs's `-o` options.
#[derive(Args, Debug, Clone, Default)]
#[command(
    override_usage = "memofs virtiofsd --socket-path PATH [--shared-dir DIR] [-o OPT[,OPT...]]\n       memofs virtiofsd --fd FD [...]\n       memofs-virtiofsd ... (the same, under virtiofsd's own name)"
)]
pub struct VirtiofsdArgs {
    /// The vhost-user socket to listen on; the VMM connects to it (--socket: the same)
    #[arg(long = "socket-path", alias = "socket", value_name = "PATH")]
    pub socket_path: Option<PathBuf>,
    /// A vhost-user socket already listening, as an inherited descriptor (libvirt's way)
    #[arg(long = "fd", value_name = "FD")]
    pub fd: Option<i32>,
    /// Export this host directory (the passthrough backend); without it, an in-memory
    /// filesystem (the mem backend)
    #[arg(long = "shared-dir", value_name = "DIR")]
    pub shared_dir: Option<PathBuf>,
    /// How long the guest may keep names and attributes: never, auto (1 s) or always (1 h);
    /// default always for the mem backend, auto for a shared directory
    #[arg(long = "cache", value_name = "never|auto|always|metadata")]
    pub cache: Option<String>,
    /// memofs options (as `memofs mount -o`; those of a host mount only are refused), and
    /// virtiofsd's older -o forms: source=DIR, cache=MODE, sandbox=, xattrmap=, modcaps=,
    /// loglevel=, xattr, no_xattr, writeback, allow_direct_io, announce_submounts,
    /// killpriv_v2, posix_acl, security_label, no_posix_lock, no_flock
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// Serve the request queues' chains on a pool of N worker threads shared by the queues
    /// (0, the default: each queue's own thread answers its chains in turn)
    #[arg(long = "thread-pool-size", value_name = "N")]
    pub thread_pool_size: Option<usize>,
    /// What the server sees of the host: namespace (the default: new namespaces whose root
    /// is the shared directory, or an empty one), chroot (chroot into it), none
    #[arg(long = "sandbox", value_name = "namespace|chroot|none")]
    pub sandbox: Option<String>,
    /// The seccomp filter: kill (the default: any system call the server does not make ends
    /// it), log, trap (report and refuse), none
    #[arg(long = "seccomp", value_name = "kill|log|trap|none")]
    pub seccomp: Option<String>,
    /// Change the capabilities the server keeps (none for the mem backend; chown,
    /// dac_override, dac_read_search, fowner, fsetid, setgid, setuid, mknod, setfcap for a
    /// shared directory): +NAME adds, -NAME removes, e.g. +sys_admin:-mknod
    #[arg(long = "modcaps", value_name = "+CAP:-CAP...")]
    pub modcaps: Option<String>,
    /// Make the socket 0660 and owned by this group (default 0600: only the server's user
    /// may connect)
    #[arg(long = "socket-group", value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Tell the guest which directories are mount points of other filesystems, each then
    /// with a device number of its own in the guest (the default, as virtiofsd's)
    #[arg(long = "announce-submounts", overrides_with = "no_announce_submounts")]
    pub announce_submounts: bool,
    /// Do not: the guest sees the files of mounts below the shared directory with the
    /// shared directory's device number
    #[arg(long = "no-announce-submounts", overrides_with = "announce_submounts")]
    pub no_announce_submounts: bool,
    /// Extended attributes (the default here; `-o no_xattr` or `-o xattr=off` turns them off)
    #[arg(long = "xattr")]
    pub xattr: bool,
    /// POSIX ACLs: never (the default, as virtiofsd's), auto (where the backend keeps them)
    /// or always (the flag without a value: fail to start without them)
    #[arg(long = "posix-acl", value_name = "never|auto|always", require_equals = true, num_args = 0..=1, default_missing_value = "always")]
    pub posix_acl: Option<String>,
    /// Let the server clear setuid, setgid and capabilities on writes and truncates
    /// (FUSE_HANDLE_KILLPRIV_V2; always on)
    #[arg(long = "killpriv-v2")]
    pub killpriv_v2: bool,
    /// Raise the server's descriptor limit to N (default: as started)
    #[arg(long = "rlimit-nofile", value_name = "N")]
    pub rlimit_nofile: Option<u64>,
    /// Stay in the foreground (the server always does)
    #[arg(short = 'f')]
    pub foreground: bool,
    /// Translate user ids between guest and host, as TYPE:A:B:COUNT (virtiofsd's rules:
    /// map, guest, host, squash-guest, squash-host; forbid-guest:A:COUNT); repeatable
    #[arg(long = "translate-uid", value_name = "TYPE:A:B:COUNT")]
    pub translate_uid: Vec<String>,
    /// The same for group ids
    #[arg(long = "translate-gid", value_name = "TYPE:A:B:COUNT")]
    pub translate_gid: Vec<String>,
    /// Map extended attribute names between guest and host with virtiofsd's rules, e.g.
    /// ':map:security.selinux:trusted.virtiofs.:' (docs/guide.md)
    #[arg(long = "xattrmap", value_name = "RULES")]
    pub xattrmap: Option<String>,
    /// Label each new file with the security context the guest's kernel sends (SELinux's
    /// security.selinux; FUSE_SECURITY_CTX), under the name --xattrmap gives it; a file that
    /// cannot be labelled is not made. never (the default), auto (where the guest's kernel
    /// sends labels) or always (the flag without a value: the guest's mount fails without
    /// them). Setting security.* or trusted.* names on the host takes CAP_SYS_ADMIN
    /// (--modcaps=+sys_admin)
    #[arg(long = "security-label", value_name = "never|auto|always", require_equals = true, num_args = 0..=1, default_missing_value = "always")]
    pub security_label: Option<String>,
    /// Share read-only (as -o ro): every request that would change something is refused
    /// (EROFS)
    #[arg(long = "readonly")]
    pub readonly: bool,
    /// With --shared-dir, how a migrating guest's files are found again on the destination:
    /// by their paths under the shared directory (find-paths, the default) or by their file
    /// handles (file-handles: the same filesystem, root on the destination)
    #[arg(long = "migration-mode", value_name = "find-paths|file-handles", value_parser = ["find-paths", "file-handles"])]
    pub migration_mode: Option<String>,
    /// With --shared-dir, what a file the guest holds that cannot be found again on the
    /// destination does: abort the migration (the default: the VM runs on at the source), or
    /// guest-error (the VM moves; the guest gets EIO for what it does with that file)
    #[arg(long = "migration-on-error", value_name = "abort|guest-error", value_parser = ["abort", "guest-error"])]
    pub migration_on_error: Option<String>,
    /// With --shared-dir and find-paths, the destination checks that each path leads to the
    /// very file the source held (their file handles agree: the same filesystem only)
    #[arg(long = "migration-verify-handles")]
    pub migration_verify_handles: bool,
    /// With --shared-dir, check each path at the source right before the state is sent
    /// (what memofs always does)
    #[arg(long = "migration-confirm-paths")]
    pub migration_confirm_paths: bool,
    /// How much to log to standard error: off, error, warn, info, debug or trace (as
    /// virtiofsd; MEMOFS_LOG and -o debug also set it)
    #[arg(long = "log-level", value_name = "LEVEL", value_parser = ["off", "error", "warn", "info", "debug", "trace"])]
    pub log_level: Option<String>,
    /// Debug messages (virtiofsd's -d; as --log-level debug)
    #[arg(short = 'd')]
    pub debug: bool,
    /// Print the vhost-user backend capabilities QEMU and libvirt ask for, and exit
    #[arg(long = "print-capabilities")]
    pub print_capabilities: bool,
    /// Send messages to the system log (/dev/log) instead of standard error
    #[arg(long = "syslog")]
    pub syslog: bool,
    /// Mem backend: take the file data a source server sends ahead of a live migration
    /// (`memofs migrate`) on this TCP address, HOST:PORT, so that the VM's state carries only
    /// what changed since
    #[arg(long = "migration-listen", value_name = "HOST:PORT")]
    pub migration_listen: Option<String>,
    /// Let a guest's O_DIRECT opens reach the host file as O_DIRECT (without it the flag is
    /// dropped, as virtiofsd does)
    #[arg(long = "allow-direct-io")]
    pub allow_direct_io: bool,
    /// Let a guest's O_NOATIME opens reach the backend (without it the flag is dropped, as
    /// virtiofsd does)
    #[arg(long = "preserve-noatime")]
    pub preserve_noatime: bool,
    /// With --shared-dir, how inodes are held: never (an O_PATH descriptor each, and no
    /// CAP_DAC_READ_SEARCH), prefer (the default: descriptors, and file handles to open cold
    /// ones again where the filesystem has them), mandatory (fail where it has none)
    #[arg(long = "inode-file-handles", value_name = "never|prefer|mandatory", require_equals = true, value_parser = ["never", "prefer", "mandatory", "fallback"])]
    pub inode_file_handles: Option<String>,
    /// The guest's writeback cache: writes gather in the guest's page cache and reach the
    /// server later, up to 1 MiB at a time (a failed one is reported at the next fsync or
    /// close)
    #[arg(long = "writeback")]
    pub writeback: bool,
    /// The tag the device's configuration space names, for a VMM that asks the device for it
    /// (QEMU names the tag itself, with tag= on vhost-user-fs-pci)
    #[arg(long = "tag", value_name = "TAG")]
    pub tag: Option<String>,
    /// As a plain user, map ids of the sandbox's user namespace to host ids:
    /// :NAMESPACE_UID:HOST_UID:COUNT: (repeatable; newuidmap does it)
    #[arg(long = "uid-map", value_name = ":NS:HOST:COUNT:")]
    pub uid_map: Vec<String>,
    /// The same for group ids (newgidmap)
    #[arg(long = "gid-map", value_name = ":NS:HOST:COUNT:")]
    pub gid_map: Vec<String>,
}

/// `memofs mount`.
#[derive(Args, Debug, Clone, Default)]
#[command(override_usage = "memofs mount [-o OPT[,OPT...]] [-f] [--fake] [SOURCE] MOUNTPOINT")]
pub struct MountArgs {
    /// Mount options, comma-separated (repeatable); listed below
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// Stay in the foreground (Ctrl-C or SIGTERM unmounts)
    #[arg(short = 'f', long = "foreground")]
    pub foreground: bool,
    /// Check the arguments and options, print what would be mounted, mount nothing
    #[arg(long = "fake")]
    pub fake: bool,
    /// Mount even where something is mounted already, covering it (as mount(8) does)
    #[arg(long = "over")]
    pub over: bool,
    /// [SOURCE] MOUNTPOINT: SOURCE is a directory to export (passthrough backend), or
    /// 'memofs', 'none', 'memofs:NAME' (or nothing) for the in-memory backend
    #[arg(value_name = "PATH", num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
}

impl MountArgs {
    /// The passthrough SOURCE, if any, and the mount point.
    pub fn source_and_mountpoint(&self) -> (Option<&Path>, &Path) {
        match self.paths.as_slice() {
            [m] => (None, m),
            [s, m] if is_mem_source(s) => (None, m),
            [s, m] => (Some(s), m),
            _ => unreachable!("clap takes one or two paths"),
        }
    }

    /// The arguments of `memofs mount -f ...` that serve these (for the background server).
    pub fn foreground_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["mount".into(), "-f".into()];
        if self.over {
            args.push("--over".into());
        }
        for o in &self.options {
            args.push("-o".into());
            args.push(o.into());
        }
        args.push("--".into());
        args.extend(self.paths.iter().map(|p| p.clone().into_os_string()));
        args
    }
}

/// SOURCE names that mean the in-memory backend: `memofs`, `none` (as for tmpfs in fstab),
/// or `memofs:NAME`, a name of the user's choosing that tells mounts apart in the mount table.
fn is_mem_source(s: &Path) -> bool {
    s == Path::new("memofs")
        || s == Path::new("none")
        || s.to_str()
            .and_then(|s| s.strip_prefix("memofs:"))
            .is_some_and(|name| !name.is_empty())
}

/// `memofs migrate`.
#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The vhost-user socket of the device the VM runs on now (--socket-path)
    pub socket: PathBuf,
    /// Where the destination's server listens (its --migration-listen), HOST:PORT
    pub to: String,
}

/// `memofs upgrade`.
#[derive(Args, Debug)]
pub struct UpgradeArgs {
    /// The executable to serve the mount from now on (default: this memofs)
    #[arg(long = "bin", value_name = "PATH")]
    pub bin: Option<PathBuf>,
    /// The mount point
    pub mountpoint: PathBuf,
}

/// `memofs resume`.
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The descriptor holding the state the old server wrote
    #[arg(
        long = "state-fd",
        value_name = "FD",
        required_unless_present = "check"
    )]
    pub state_fd: Option<i32>,
    /// Exit 0 if this executable reads handover states of format N, else say why not
    #[arg(long = "check", value_name = "N")]
    pub check: Option<u32>,
    /// This is the old executable again, because the new one could not take over (why)
    #[arg(long = "fallback", value_name = "WHY")]
    pub fallback: Option<String>,
    /// The old executable, to go back to if the state cannot be read
    #[arg(long = "old-exe", value_name = "FD")]
    pub old_exe: Option<i32>,
    /// The mount point the state is of (for the process list: `ps`, `pgrep`)
    pub mountpoint: Option<PathBuf>,
}

/// `memofs umount`.
#[derive(Args, Debug)]
pub struct UmountArgs {
    /// Detach now even if busy; the kernel finishes when the last user leaves
    #[arg(short = 'l', long = "lazy")]
    pub lazy: bool,
    /// The mount point
    pub mountpoint: PathBuf,
}

/// `memofs stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Print the server's JSON document instead of the table
    #[arg(long)]
    pub json: bool,
    /// Print what changed every SECS seconds (default 1) instead of the totals once
    #[arg(long, short = 'w', value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
    pub watch: Option<String>,
    /// With --watch: stop after N reports
    #[arg(long, short = 'n', value_name = "N", requires = "watch")]
    pub count: Option<u64>,
    /// The mount point
    pub mountpoint: Option<PathBuf>,
}

impl StatsArgs {
    /// The mount point and the watch interval in seconds. `--watch MOUNTPOINT` (a value that
    /// is no number, and no other mount point) watches every second.
    pub fn resolve(&self) -> Result<(PathBuf, Option<f64>), String> {
        let interval = match (&self.watch, &self.mountpoint) {
            (None, _) => None,
            (Some(v), None) if v.parse::<f64>().is_err() => {
                return Ok((PathBuf::from(v), Some(1.0)));
            }
            (Some(v), _) => match v.parse::<f64>() {
                Ok(s) if s.is_finite() && (0.01..=86_400.0).contains(&s) => Some(s),
                _ => {
                    return Err(format!(
                        "--watch takes seconds between 0.01 and 86400, not '{v}'"
                    ))
                }
            },
        };
        match &self.mountpoint {
            Some(m) => Ok((m.clone(), interval)),
            None => Err(
                "missing MOUNTPOINT (usage: memofs stats [--json] [--watch [SECS] \
                         [--count N]] MOUNTPOINT)"
                    .into(),
            ),
        }
    }
}

/// A subcommand that takes only a mount point.
#[derive(Args, Debug)]
pub struct TargetArgs {
    /// The mount point
    pub mountpoint: PathBuf,
}

/// The `-o` options' table, for `memofs mount --help` and the man page.
fn options_help() -> String {
    let docs = option_docs();
    let width = docs.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let mut s = String::from("Options (-o):\n");
    for d in docs {
        s.push_str(&format!(
            "  {:<width$}  {} [default: {}]\n",
            d.name, d.help, d.default
        ));
    }
    s.push_str("\nUnmount with: memofs umount MOUNTPOINT (or umount(8)).");
    s
}

/// The whole command definition, with the option table on `mount`.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommand("mount", |c| c.after_help(options_help()))
}

/// Parses a command line (`args[0]` is the program name). Understands the mount(8) forms
/// described in the module documentation.
pub fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    let program = args
        .first()
        .map(|a| Path::new(a).file_name().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let mut cmd = command();
    let args = if program == "mount.memofs" || program == "mount.fuse.memofs" {
        helper_args(&cmd, &args[1..])?
    } else if program == "memofs-virtiofsd" {
        // virtiofsd's name: its command line is the virtiofsd subcommand's.
        let mut all: Vec<OsString> = vec!["memofs".into(), "virtiofsd".into()];
        all.extend(args.into_iter().skip(1));
        all
    } else {
        mount_fuse_form(&cmd, args)
    };
    if args.get(1).is_some_and(|a| a == "virtiofsd") {
        let virtiofsd = cmd.find_subcommand("virtiofsd").expect("declared");
        if let Some(msg) = crate::virtiofsd::refused_option(virtiofsd, &args[2..]) {
            return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, msg));
        }
    }
    let matches = cmd.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// `memofs SOURCE MOUNTPOINT ...` (mount.fuse3's call) becomes `memofs mount SOURCE
/// MOUNTPOINT ...`; anything else is left for clap.
fn mount_fuse_form(command: &clap::Command, mut args: Vec<OsString>) -> Vec<OsString> {
    let first = match args.get(1).and_then(|a| a.to_str()) {
        Some(a) => a.to_owned(),
        None => return args,
    };
    let known = command
        .get_subcommands()
        .any(|s| s.get_name() == first || s.get_all_aliases().any(|a| a == first));
    let positionals = args[1..]
        .iter()
        .filter(|a| !a.to_string_lossy().starts_with('-'))
        .count();
    if !known && !first.starts_with('-') && positionals >= 2 {
        args.insert(1, "mount".into());
    }
    args
}

/// mount(8)'s helper arguments `SOURCE DIR [-sfnv] [-t TYPE] [-N NS] [-o OPTS]` as
/// `memofs mount` arguments.
fn helper_args(cmd: &clap::Command, args: &[OsString]) -> Result<Vec<OsString>, clap::Error> {
    let usage = |msg: String| {
        cmd.clone().error(
            clap::error::ErrorKind::InvalidValue,
            format!("{msg} (usage: mount.memofs SOURCE DIR [-sfnv] [-t TYPE] [-o OPTS])"),
        )
    };
    // mount(8) stacks mounts, and hands a helper `nosuid` and `nodev` but never their
    // defaults: without them, root's mount allows set-user-ID files and devices, as tmpfs.
    let mut out: Vec<OsString> = vec!["memofs".into(), "mount".into(), "--over".into()];
    if nix::unistd::geteuid().is_root() {
        out.extend(["-o".into(), "suid,dev".into()]);
    }
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.to_str() {
            Some("-o") => {
                let v = it.next().ok_or_else(|| usage("-o needs a value".into()))?;
                out.push("-o".into());
                out.push(v.clone());
            }
            Some("-t") => {
                it.next().ok_or_else(|| usage("-t needs a type".into()))?;
            }
            Some("-N") => {
                return Err(usage(
                    "-N (another mount namespace) is not supported".into(),
                ))
            }
            Some(flags) if flags.starts_with('-') && flags.len() > 1 => {
                for f in flags[1..].chars() {
                    match f {
                        // sloppy, no mtab, verbose: nothing to do.
                        's' | 'n' | 'v' => {}
                        'f' => out.push("--fake".into()),
                        other => return Err(usage(format!("unknown flag -{other}"))),
                    }
                }
            }
            _ => paths.push(arg.clone()),
        }
    }
    if paths.len() != 2 {
        return Err(usage("SOURCE and DIR are both needed".into()));
    }
    out.push("--".into());
    out.extend(paths);
    Ok(out)
}

/// Writes man pages (`DIR/man/man1`), completions (`DIR/completions/{bash,zsh,fish}`) and the
/// README's option table (`DIR/options.md`).
pub fn generate(dir: &Path) -> std::io::Result<()> {
    use clap_complete::Shell;
    let man = dir.join("man/man1");
    std::fs::create_dir_all(&man)?;
    let cmd = command();
    clap_mangen::generate_to(cmd.clone(), &man)?;
    let comp = dir.join("completions");
    for (shell, sub) in [
        (Shell::Bash, "bash"),
        (Shell::Zsh, "zsh"),
        (Shell::Fish, "fish"),
    ] {
        let d = comp.join(sub);
        std::fs::create_dir_all(&d)?;
        clap_complete::generate_to(shell, &mut cmd.clone(), "memofs", &d)?;
    }
    std::fs::write(dir.join("options.md"), markdown_table())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Cli, clap::Error> {
        parse(args.iter().map(OsString::from).collect())
    }

    fn mount_args(args: &[&str]) -> MountArgs {
        match parse_strs(args).unwrap().command {
            Command::Mount(m) => m,
            other => panic!("not a mount: {other:?}"),
        }
    }

    #[test]
    fn the_readme_option_table_is_the_codes() {
        let table = markdown_table();
        assert!(
            include_str!("../../../README.md").contains(&table),
            "README.md's option table differs from the code's; put this in its place \
             (`memofs generate DIR` writes it to DIR/options.md):\n{table}"
        );
    }

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn mount_with_and_without_source() {
        let m = mount_args(&["memofs", "mount", "-o", "size=1g", "-o", "noatime", "/mnt"]);
        assert_eq!(m.options, ["size=1g", "noatime"]);
        assert_eq!(m.source_and_mountpoint(), (None, Path::new("/mnt")));
        let m = mount_args(&["memofs", "mount", "-f", "/srv/data", "/mnt"]);
        assert!(m.foreground);
        assert_eq!(
            m.source_and_mountpoint(),
            (Some(Path::new("/srv/data")), Path::new("/mnt"))
        );
        for mem in ["memofs", "none"] {
            let m = mount_args(&["memofs", "mount", mem, "/mnt"]);
            assert_eq!(m.source_and_mountpoint(), (None, Path::new("/mnt")));
        }
    }

    #[test]
    fn mount_fuse3_form() {
        let m = mount_args(&["memofs", "memofs", "/mnt", "-o", "rw,size=1g,dev,suid"]);
        assert_eq!(m.options, ["rw,size=1g,dev,suid"]);
        assert_eq!(m.source_and_mountpoint(), (None, Path::new("/mnt")));
        let m = mount_args(&["/usr/bin/memofs", "/srv", "/mnt"]);
        assert_eq!(m.source_and_mountpoint().0, Some(Path::new("/srv")));
        // A lone unknown word stays an error.
        assert!(parse_strs(&["memofs", "bogus"]).is_err());
    }

    #[test]
    fn mount_helper_form() {
        let m = mount_args(&[
            "/sbin/mount.memofs",
            "none",
            "/mnt",
            "-n",
            "-o",
            "rw,noauto,x-systemd.automount",
            "-t",
            "memofs",
        ]);
        // As root, mount(8)'s defaults come first, so that the options given override them.
        let own = ["rw,noauto,x-systemd.automount"];
        match nix::unistd::geteuid().is_root() {
            true => assert_eq!(m.options, ["suid,dev", own[0]]),
            false => assert_eq!(m.options, own),
        }
        assert!(!m.fake && !m.foreground && m.over, "mount(8) stacks mounts");
        let m = mount_args(&["mount.fuse.memofs", "/srv", "/mnt", "-sfv"]);
        assert!(m.fake, "-f is mount(8)'s fake");
        assert_eq!(m.source_and_mountpoint().0, Some(Path::new("/srv")));
        for bad in [
            &["mount.memofs", "/mnt"][..],
            &["mount.memofs", "a", "/mnt", "-x"],
            &["mount.memofs", "a", "/mnt", "-o"],
            &["mount.memofs", "a", "/mnt", "-N", "1"],
        ] {
            assert!(parse_strs(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn foreground_args_round_trip() {
        let m = mount_args(&["memofs", "mount", "-o", "size=1g", "-f", "/src", "/mnt"]);
        let mut again: Vec<OsString> = vec!["memofs".into()];
        again.extend(m.foreground_args());
        match parse(again).unwrap().command {
            Command::Mount(n) => {
                assert_eq!(n.options, m.options);
                assert_eq!(n.paths, m.paths);
                assert!(n.foreground);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stats_watch_takes_an_optional_interval() {
        let s = |args: &[&str]| match parse_strs(args).unwrap().command {
            Command::Stats(s) => s.resolve(),
            other => panic!("{other:?}"),
        };
        let mnt = PathBuf::from("/mnt");
        assert_eq!(s(&["memofs", "stats", "/mnt"]), Ok((mnt.clone(), None)));
        assert_eq!(
            s(&["memofs", "stats", "--watch", "/mnt"]),
            Ok((mnt.clone(), Some(1.0)))
        );
        assert_eq!(
            s(&["memofs", "stats", "--watch", "0.5", "-n", "3", "/mnt"]),
            Ok((mnt.clone(), Some(0.5)))
        );
        assert!(s(&["memofs", "stats", "--watch", "0", "/mnt"]).is_err());
        assert!(parse_strs(&["memofs", "stats", "--watch", "-1", "/mnt"]).is_err());
        assert!(s(&["memofs", "stats", "--json"]).is_err());
        assert!(parse_strs(&["memofs", "stats", "-n", "3", "/mnt"]).is_err());
    }
}
