//! What a `memofs virtiofsd` command line asks for, checked before anything is set up: the
//! listening socket, the backend's options and the sandbox, each option of virtiofsd's with
//! virtiofsd 1.14's meaning or refused with the reason.

use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;

use memofs_core::idmap::IdMaps;
use memofs_core::migrate::{Choices, FindBy, OnError};
use memofs_core::options::{parse_options, virtiofs_refusal, MountOptions, Want};
use memofs_core::plan::{BackendKind, FileHandles, MountPlan};
use memofs_core::xattrmap::XattrMap;
use memofs_virtiofs::{DeviceOptions, Listener};

use crate::cli::VirtiofsdArgs;
use crate::sandbox::{self, NamespaceIds};
use crate::vhost_socket::{self, SocketFile};
use crate::{backends, daemon, mount, seccomp, EXIT_FAILURE, EXIT_USAGE};

use super::legacy;

/// What the command line asks for.
pub struct Setup {
    pub opts: MountOptions,
    pub source: Option<PathBuf>,
    pub sandbox: sandbox::SandboxMode,
    pub seccomp: seccomp::SeccompMode,
    pub caps: caps::CapsHashSet,
    /// The sandbox's user namespace maps (`--uid-map`, `--gid-map`), as a plain user.
    pub namespace_ids: NamespaceIds,
    pub ids: IdMaps,
    pub acl: Want,
    pub xattrs: Option<XattrMap>,
    /// `--security-label` (or `-o security_label`).
    pub security_label: Want,
    pub migration: Choices,
    /// The device's thread pool and tag.
    pub device: DeviceOptions,
    /// `--syslog`.
    pub syslog: bool,
    /// The log level: `-d`, `--log-level`, `-o loglevel=`, `-o debug`, else `info` (as
    /// virtiofsd: its readiness line is an info message).
    pub log_level: String,
    /// `--allow-direct-io`: a guest's `O_DIRECT` reaches the host file.
    pub direct_io: bool,
    /// `--preserve-noatime`: a guest's `O_NOATIME` reaches the backend.
    pub noatime_opens: bool,
    /// `--inode-file-handles`.
    pub file_handles: FileHandles,
    pub announce_submounts: bool,
    pub rlimit_nofile: Option<u64>,
    /// `--migration-listen`: where data sent ahead of a migration arrives.
    pub migration_listen: Option<String>,
}

impl Setup {
    /// Whether the server opens file handles: a shared directory's inodes, unless
    /// `--inode-file-handles=never` (the seccomp filter allows `open_by_handle_at` then
    /// only).
    pub fn opens_handles(&self) -> bool {
        self.source.is_some() && self.file_handles != FileHandles::Never
    }

    /// The mount plan: the options', and the device's own choices.
    pub fn plan(&self) -> MountPlan {
        let kind = match self.source {
            Some(_) => BackendKind::Passthrough,
            None => BackendKind::Mem,
        };
        let mut plan = MountPlan::new(&self.opts, kind, backends::privileged());
        plan.ids = self.ids.clone();
        plan.acl = self.acl;
        plan.xattrs = self.xattrs.clone();
        plan.announce_submounts = self.announce_submounts;
        plan.security_label = self.security_label;
        plan.migration = self.migration;
        plan.noatime_opens = self.noatime_opens;
        plan.host_direct_io = self.direct_io;
        plan.file_handles = self.file_handles;
        plan
    }
}

/// Why `--no-readdirplus` (and `-o no_readdirplus`) is refused.
pub const NO_READDIRPLUS: &str = "directories are always listed with READDIRPLUS";
/// Why `--no-killpriv-v2` (and `-o no_killpriv_v2`) is refused.
pub const NO_KILLPRIV: &str =
    "the server always clears setuid, setgid and capabilities itself (FUSE_HANDLE_KILLPRIV_V2)";

/// virtiofsd's options memofs does not take, each with why (docs/guide.md has the table of
/// all of them).
const REFUSED: &[(&str, &str)] = &[
    (
        "--allow-mmap",
        "shared mappings are refused only where -o direct_io asks (and on append-only files)",
    ),
    ("--no-readdirplus", NO_READDIRPLUS),
    ("--no-killpriv-v2", NO_KILLPRIV),
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
            named && arg.get_action().takes_values() && !arg.is_require_equals_set()
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

/// The listening socket: a path (locked, and a stale socket file there replaced), or a
/// descriptor the caller passed.
pub fn listener(args: &VirtiofsdArgs) -> Result<(Listener, Option<SocketFile>), (u8, String)> {
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
/// VM arrives, and what one that cannot be found does. Without `--shared-dir` the files
/// themselves move and there is nothing to choose.
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
    let on_error = match args.migration_on_error.as_deref() {
        Some("guest-error") => OnError::GuestError,
        _ => OnError::Abort,
    };
    Ok(Choices {
        find_by,
        verify_handles: args.migration_verify_handles,
        on_error,
    })
}

/// A `never|auto|always` negotiation mode (`--posix-acl=`, `--security-label=`); `flag`
/// names it in the message.
fn mode(value: Option<&str>, flag: &str) -> Result<Want, String> {
    match value {
        None | Some("never") => Ok(Want::Off),
        Some("auto") => Ok(Want::Auto),
        Some("always") => Ok(Want::On),
        Some(other) => Err(format!("{flag}={other}: say never, auto or always")),
    }
}

/// `--posix-acl=`: never (without the flag, as virtiofsd), auto or always; none of them
/// with translated ids (as virtiofsd).
fn acl(args: &VirtiofsdArgs, ids: &IdMaps) -> Result<Want, String> {
    let want = mode(args.posix_acl.as_deref(), "--posix-acl")?;
    if want != Want::Off && !ids.is_identity() {
        return Err(format!(
            "--posix-acl={} cannot be used with --translate-uid or --translate-gid: an ACL \
             names ids inside its value, which are not translated",
            args.posix_acl.as_deref().unwrap_or_default()
        ));
    }
    Ok(want)
}

/// `--inode-file-handles=`: prefer without it (virtiofsd's default; `fallback` is its old
/// name), and the capability it needs checked against `--modcaps`.
fn file_handles(args: &VirtiofsdArgs, shared: bool) -> Result<FileHandles, String> {
    let mode = match args.inode_file_handles.as_deref() {
        None | Some("prefer") | Some("fallback") => FileHandles::Prefer,
        Some("never") => FileHandles::Never,
        Some(_) => FileHandles::Mandatory,
    };
    if args.inode_file_handles.is_some() && !shared {
        return Err(
            "--inode-file-handles chooses how a --shared-dir's inodes are held; the mem \
             backend has no host inodes"
                .into(),
        );
    }
    if mode == FileHandles::Never && args.migration_mode.as_deref() == Some("file-handles") {
        return Err(
            "--migration-mode=file-handles opens files by their handles, which \
             --inode-file-handles=never leaves out"
                .into(),
        );
    }
    Ok(mode)
}

/// The log level asked for: `-d` (debug), `--log-level`, `-o loglevel=` (in `args` after
/// the older forms are merged), `-o debug`; else info.
fn log_level(args: &VirtiofsdArgs, opts: &MountOptions) -> String {
    match (args.debug, &args.log_level) {
        (true, _) => "debug".into(),
        (false, Some(level)) => level.clone(),
        (false, None) if opts.debug => "debug".into(),
        (false, None) => "info".into(),
    }
}

/// Checks the command line.
pub fn setup(given: &VirtiofsdArgs) -> Result<Setup, (u8, String)> {
    let usage = |e: String| (EXIT_USAGE, e);
    let (args, mut options) = legacy::merged(given).map_err(usage)?;
    if let Some(msg) = virtiofs_refusal(&options) {
        return Err(usage(msg));
    }
    if args.readonly {
        options.push("ro".into());
    }
    if args.writeback {
        options.push("writeback=on".into());
    }
    let source = args.shared_dir.clone();
    // The guest cannot be told of host changes: a shared directory gets short timeouts
    // unless asked otherwise; the mem backend, which only the guest changes, keeps names.
    match args.cache.clone() {
        Some(mode) => options.push(format!("cache={mode}")),
        None if source.is_some() => options.push("cache=auto".into()),
        None => {}
    }
    let opts = parse_options(&options, mount::ram_bytes()).map_err(|e| usage(e.to_string()))?;
    if let Some(msg) = backends::foreign_option(&options, source.is_some()) {
        return Err(usage(msg));
    }
    let sandbox = sandbox::SandboxMode::parse(args.sandbox.as_deref()).map_err(usage)?;
    let seccomp = seccomp::SeccompMode::parse(args.seccomp.as_deref()).map_err(usage)?;
    let file_handles = file_handles(&args, source.is_some()).map_err(usage)?;
    let caps = sandbox::kept_caps(
        source.is_some(),
        file_handles != FileHandles::Never,
        args.modcaps.as_deref(),
    )
    .map_err(usage)?;
    let namespace_ids =
        NamespaceIds::parse(&args.uid_map, &args.gid_map, sandbox).map_err(usage)?;
    let ids = id_maps(&args).map_err(usage)?;
    let acl = acl(&args, &ids).map_err(usage)?;
    let security_label = mode(args.security_label.as_deref(), "--security-label").map_err(usage)?;
    let migration = migration(&args, source.is_some()).map_err(usage)?;
    let xattrs = match args.xattrmap.as_deref() {
        Some(map) => Some(XattrMap::parse(map).map_err(|e| usage(format!("--xattrmap: {e}")))?),
        None => None,
    };
    if !opts.xattr {
        let needs = [
            (args.xattr, "--xattr"),
            (xattrs.is_some(), "--xattrmap"),
            (security_label != Want::Off, "--security-label"),
            (acl != Want::Off, "--posix-acl"),
        ];
        if let Some((_, what)) = needs.iter().find(|(asked, _)| *asked) {
            return Err(usage(format!(
                "{what} needs extended attributes, which -o no_xattr (xattr=off) turns off"
            )));
        }
    }
    let tag = match &args.tag {
        Some(t) => Some(t.parse().map_err(|e| usage(format!("--tag {t:?}: {e}")))?),
        None => None,
    };
    if args.migration_listen.is_some() && source.is_some() {
        return Err(usage(
            "--migration-listen takes a mem backend's files sent ahead of its VM; a \
             --shared-dir's files stay where they are"
                .into(),
        ));
    }
    let source = match source {
        Some(dir) => Some(backends::check_source(&dir, None).map_err(|e| (EXIT_FAILURE, e))?),
        None => None,
    };
    Ok(Setup {
        log_level: log_level(&args, &opts),
        opts,
        source,
        sandbox,
        seccomp,
        caps,
        namespace_ids,
        ids,
        acl,
        xattrs,
        security_label,
        migration,
        device: DeviceOptions {
            thread_pool: args.thread_pool_size.unwrap_or(0),
            tag,
        },
        syslog: args.syslog,
        direct_io: args.allow_direct_io,
        noatime_opens: args.preserve_noatime,
        file_handles,
        announce_submounts: !args.no_announce_submounts,
        rlimit_nofile: args.rlimit_nofile,
        migration_listen: args.migration_listen.clone(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `memofs virtiofsd --socket-path /tmp/x.sock` and `extra`, parsed.
    pub(crate) fn args(extra: &[&str]) -> VirtiofsdArgs {
        use clap::Parser;
        let mut argv = vec!["memofs", "virtiofsd", "--socket-path", "/tmp/x.sock"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Virtiofsd(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    fn refused(extra: &[&str]) -> String {
        match setup(&args(extra)) {
            Err((code, msg)) => {
                assert_eq!(code, EXIT_USAGE, "{extra:?}: {msg}");
                msg
            }
            Ok(_) => panic!("{extra:?} was taken"),
        }
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
            assert!(refused(extra).contains(what), "{extra:?}");
        }
    }

    #[test]
    fn remote_locks_are_refused_as_virtiofsd_refuses_them() {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        let ok = |extra: &[&str]| setup(&args(extra)).map(|_| ()).map_err(|e| e.1);
        assert_eq!(
            ok(&["--shared-dir", dir, "-o", "no_posix_lock,no_flock"]),
            Ok(())
        );
        for extra in [
            &["-o", "posix_lock"][..],
            &["--shared-dir", dir, "-o", "flock"],
        ] {
            let e = ok(extra).unwrap_err();
            assert!(
                e.contains("memofs leaves locks to the guest's kernel"),
                "{e}"
            );
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
            on_error: OnError::Abort,
        };
        let verify = ["--migration-mode=find-paths", "--migration-verify-handles"];
        assert_eq!(choices(&verify), Ok(paths));
        let on_error = ["--migration-on-error", "abort", "--migration-confirm-paths"];
        assert_eq!(choices(&on_error), Ok(Choices::default()));
        let guest = choices(&["--migration-on-error=guest-error"]).map(|c| c.on_error);
        assert_eq!(guest, Ok(OnError::GuestError));
        let handles = choices(&["--migration-mode", "file-handles"]).map(|c| c.find_by);
        assert_eq!(handles, Ok(FindBy::FileHandles));
        let both = [
            "--migration-mode=file-handles",
            "--migration-verify-handles",
        ];
        assert!(choices(&both).is_err_and(|e| e.contains("finds the very files")));
        let never = [
            "--migration-mode=file-handles",
            "--inode-file-handles=never",
        ];
        assert!(choices(&never).is_err_and(|e| e.contains("leaves out")));
    }

    #[test]
    fn negotiation_modes_are_off_unless_asked_for_as_with_virtiofsd() {
        let acl = |extra: &[&str]| setup(&args(extra)).map(|s| s.acl).map_err(|e| e.1);
        assert_eq!(acl(&[]), Ok(Want::Off));
        assert_eq!(acl(&["--posix-acl"]), Ok(Want::On));
        assert_eq!(acl(&["--posix-acl=auto"]), Ok(Want::Auto));
        assert_eq!(acl(&["--posix-acl=never"]), Ok(Want::Off));
        let label = |extra: &[&str]| {
            setup(&args(extra))
                .map(|s| s.security_label)
                .map_err(|e| e.1)
        };
        assert_eq!(label(&[]), Ok(Want::Off));
        assert_eq!(label(&["--security-label"]), Ok(Want::On));
        assert_eq!(label(&["--security-label=auto"]), Ok(Want::Auto));
        assert!(refused(&["--security-label=maybe"]).contains("say never, auto or always"));
    }

    #[test]
    fn device_and_data_path_options_reach_the_setup() {
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        let s = setup(&args(&[
            "--shared-dir",
            dir,
            "--thread-pool-size",
            "4",
            "--tag=myfs",
            "--allow-direct-io",
            "--preserve-noatime",
            "--inode-file-handles=never",
            "--syslog",
            "--writeback",
        ]))
        .unwrap();
        assert_eq!(s.device.thread_pool, 4);
        assert_eq!(s.device.tag, Some("myfs".parse().unwrap()));
        assert!(s.direct_io && s.noatime_opens && s.syslog);
        assert_eq!(s.opts.writeback, Want::On);
        assert_eq!(s.file_handles, FileHandles::Never);
        assert!(!s.caps.contains(&caps::Capability::CAP_DAC_READ_SEARCH));
        assert!(!s.opens_handles());
        let s = setup(&args(&["--shared-dir", dir])).unwrap();
        assert_eq!(
            (s.device.thread_pool, s.file_handles),
            (0, FileHandles::Prefer)
        );
        assert!(!s.direct_io && !s.noatime_opens && !s.syslog);
        assert!(s.caps.contains(&caps::Capability::CAP_DAC_READ_SEARCH));
        assert!(s.opens_handles());
        assert!(!setup(&args(&[])).unwrap().opens_handles());
        assert_eq!(s.log_level, "info");
        assert!(
            s.announce_submounts,
            "announced unless asked not to, as virtiofsd 1.14"
        );
        let s = setup(&args(&["--shared-dir", dir, "--no-announce-submounts"])).unwrap();
        assert!(!s.announce_submounts);
        assert!(refused(&["--tag", &"x".repeat(37)]).contains("1 to 36 bytes"));
        assert!(refused(&["--inode-file-handles=prefer"]).contains("no host inodes"));
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
                "--posix-acl=always cannot be used",
            ),
            (&["--posix-acl=sometimes"][..], "say never, auto or always"),
            (
                &["--xattrmap", ":ok:all:::swap"][..],
                "--xattrmap: rule 2: ends before its type",
            ),
            (
                &["--migration-mode", "file-handles"][..],
                "without --shared-dir the files themselves move",
            ),
            (
                &["-o", "threads=4"][..],
                "-o threads=4 is refused over virtio-fs",
            ),
            (&["-o", "allow_other"][..], "-o allow_other is refused"),
        ] {
            assert!(refused(extra).contains(says), "{extra:?}");
        }
    }

    #[test]
    fn virtiofsds_options_memofs_does_not_take_are_refused_with_a_reason() {
        let refused = |argv: &[&str]| {
            crate::cli::parse(argv.iter().map(Into::into).collect())
                .err()
                .map(|e| e.to_string())
        };
        let msg = refused(&["memofs", "virtiofsd", "--socket-path", "/s", "--allow-mmap"])
            .expect("--allow-mmap refused");
        assert!(msg.contains("--allow-mmap is not supported"), "{msg}");
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
            "--tag",
            "fs",
            "--syslog",
            "--uid-map=:0:1000:1:",
        ];
        assert!(refused(&taken).is_none(), "{:?}", refused(&taken));
        // An option's value is not an option.
        let cmd = crate::cli::command();
        let virtiofsd = cmd.find_subcommand("virtiofsd").expect("declared");
        let first = |argv: &[&str]| {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            refused_option(virtiofsd, &argv)
        };
        assert_eq!(first(&["--socket-path", "--allow-mmap"]), None);
        // A flag that takes no value, or one whose value must follow `=`, is followed by an
        // option.
        for lead in ["--xattr", "--posix-acl"] {
            let msg = first(&[lead, "--allow-mmap"]).expect("--allow-mmap refused");
            assert!(msg.starts_with("--allow-mmap is not supported"), "{msg}");
        }
    }
}
