//! Every `-o` option, declared once: spellings, scope, default, help and parser.

use std::time::Duration;

use super::{
    err, parse_seconds, parse_size, parse_switch, parse_u32, percent_of, ChangeFeed, DirectIo,
    HugeMode, KernelFlag, MountOptions, OptionError, Want, WatchMode, DEFAULT_BUSY_POLL_US,
    DEFAULT_HUGE, DEFAULT_KERNEL_FLAGS, DEFAULT_ROOT_MODE, DEFAULT_SIZE_PERCENT, MAX_BUSY_POLL_US,
    MAX_THREADS,
};
use crate::atime::{AtimeMode, AtimePolicy};
use crate::cache::{CacheMode, CachePolicy, DEFAULT_CACHE_MODE};

/// Which mounts take an option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every mount.
    Any,
    /// Only the mem backend (no SOURCE directory).
    Mem,
    /// Only the passthrough backend (a SOURCE directory).
    Passthrough,
    /// mount(8), fstab and systemd options: accepted and ignored.
    Mount8,
}

/// One option as given: the whole text, its key and its value after `=`.
pub struct Given<'a> {
    pub text: &'a str,
    pub key: &'a str,
    pub value: Option<&'a str>,
}

impl Given<'_> {
    /// The value, which this option needs.
    fn need(&self) -> Result<&str, OptionError> {
        self.value.ok_or_else(|| {
            err(
                self.text,
                format!("'{}' needs a value ({}=...)", self.key, self.key),
            )
        })
    }

    /// No value: this option is a flag.
    fn flag(&self) -> Result<(), OptionError> {
        match self.value {
            None => Ok(()),
            Some(_) => Err(err(self.text, format!("'{}' takes no value", self.key))),
        }
    }

    /// One of `choices` (spelling, value).
    fn choice<T: Copy>(&self, choices: &[(&str, T)]) -> Result<T, OptionError> {
        let v = self.need()?;
        choices
            .iter()
            .find(|(name, _)| *name == v)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                err(self.text, format!("expected one of {}", names.join(", ")))
            })
    }
}

/// The options being parsed, and the timeouts given apart from the `cache=` preset.
pub(super) struct Parsing {
    o: MountOptions,
    ram_bytes: u64,
    cache_mode: Option<CacheMode>,
    entry: Option<Duration>,
    attr: Option<Duration>,
    negative: Option<Duration>,
}

impl Parsing {
    /// Every option at its default, for a machine with `ram_bytes` of RAM.
    pub fn new(ram_bytes: u64) -> Parsing {
        Parsing {
            o: MountOptions {
                size: percent_of(ram_bytes, DEFAULT_SIZE_PERCENT),
                nr_inodes: super::default_nr_inodes(ram_bytes),
                mode: DEFAULT_ROOT_MODE,
                uid: None,
                gid: None,
                allow_other: false,
                fsname: None,
                source: None,
                cache: CachePolicy::default(),
                cache_given: false,
                atime: AtimePolicy {
                    mode: super::DEFAULT_ATIME,
                    nodiratime: false,
                },
                atime_given: false,
                writeback: Want::Auto,
                direct_io: DirectIo::Off,
                xattr: true,
                threads: super::default_threads(),
                busy_poll: Duration::from_micros(DEFAULT_BUSY_POLL_US),
                passthrough: Want::Auto,
                io_uring: Want::Auto,
                cpu_latency: Want::Auto,
                watch: WatchMode::Auto,
                changes: ChangeFeed::Auto,
                huge: DEFAULT_HUGE,
                kernel_flags: DEFAULT_KERNEL_FLAGS.to_vec(),
                debug: false,
            },
            ram_bytes,
            cache_mode: None,
            entry: None,
            attr: None,
            negative: None,
        }
    }

    /// The options, with the timeouts resolved against the preset; refuses `writeback=on`
    /// with `direct_io` (also from `cache=metadata`): under the writeback cache the kernel
    /// keeps a file's mtime and ctime itself, and a direct write never moves them.
    pub fn finish(mut self) -> Result<MountOptions, OptionError> {
        if self.o.writeback == Want::On && self.o.direct_io == DirectIo::All {
            return Err(err(
                "writeback=on",
                "not with direct_io (or cache=metadata): under the writeback cache the kernel \
                 keeps files' mtime and ctime itself, and direct writes never move them",
            ));
        }
        self.o.cache_given = self.cache_mode.is_some()
            || self.entry.is_some()
            || self.attr.is_some()
            || self.negative.is_some();
        self.o.cache = CachePolicy::derive(self.cache_mode, self.entry, self.attr, self.negative);
        Ok(self.o)
    }
}

/// One option's declaration.
pub(super) struct Spec {
    /// How `--help` writes it, e.g. `size=BYTES|N%`.
    syntax: &'static str,
    /// The keys it is spelled with (aliases and negations included).
    names: &'static [&'static str],
    /// Key prefixes it also takes (`x-` for mount(8)'s `x-*`).
    prefixes: &'static [&'static str],
    scope: Scope,
    /// The default, as a user would write it.
    default: fn() -> String,
    help: &'static str,
    /// Why the option, as given, means nothing to a virtio-fs device (`memofs virtiofsd`),
    /// where it does not; `None` where it means there what it means on a mount.
    pub virtio: fn(&Given<'_>) -> Option<&'static str>,
    /// Parses the option into the options being built.
    pub apply: fn(&mut Parsing, &Given<'_>) -> Result<(), OptionError>,
}

/// An option with the same meaning over virtio-fs.
const SAME: fn(&Given<'_>) -> Option<&'static str> = |_| None;
/// Options of the host mount that a virtio-fs guest's kernel sets for itself.
const GUEST_MOUNTS: fn(&Given<'_>) -> Option<&'static str> = |_| {
    Some(
        "a virtio-fs guest's kernel mounts with allow_other and default_permissions itself: \
         every user of the guest may use the mount, and the guest's kernel checks permissions",
    )
};

/// `why`, unless the option says `off` (or `auto`, which is off over virtio-fs).
fn only_off(g: &Given<'_>, why: &'static str) -> Option<&'static str> {
    match g.value {
        Some("off") | Some("auto") => None,
        _ => Some(why),
    }
}

fn off() -> String {
    "off".into()
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s == s.trunc() {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

const AUTO_ON_OFF: [(&str, Want); 3] = [("auto", Want::Auto), ("on", Want::On), ("off", Want::Off)];

/// mount(8), fstab and systemd options besides `comment=` and `x-*`.
const MOUNT8_NAMES: [&str; 12] = [
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner", "group",
    "loud", "comment",
];

/// Every option. `memofs mount --help` lists them in this order.
pub(super) static OPTIONS: &[Spec] = &[
    Spec {
        syntax: "size=BYTES|N%",
        names: &["size"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || format!("{DEFAULT_SIZE_PERCENT}%"),
        help: "limit on file data (in 4 KiB pages), xattrs and symlink targets (k/m/g/t suffixes, % of RAM, 0 = only the machine's memory)",
        apply: |p, g| {
            let v = g.need()?;
            p.o.size = if let Some(pct) = v.strip_suffix('%') {
                let pct: u64 = pct
                    .parse()
                    .map_err(|_| err(g.text, "expected a percentage, e.g. 50%"))?;
                if pct > 10_000 {
                    return Err(err(g.text, "percentage too large"));
                }
                percent_of(p.ram_bytes, pct)
            } else {
                parse_size(v).ok_or_else(|| {
                    err(
                        g.text,
                        "expected bytes with an optional k/m/g/t suffix, or a percentage of RAM",
                    )
                })?
            };
            Ok(())
        },
    },
    Spec {
        syntax: "nr_inodes=N",
        names: &["nr_inodes"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || "RAM pages / 2".into(),
        help: "limit on inodes (k/m/g suffixes, 0 = unlimited)",
        apply: |p, g| {
            p.o.nr_inodes = parse_size(g.need()?)
                .ok_or_else(|| err(g.text, "expected a count with an optional k/m/g suffix"))?;
            Ok(())
        },
    },
    Spec {
        syntax: "mode=OCTAL",
        names: &["mode"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || format!("{DEFAULT_ROOT_MODE:o}"),
        help: "permission bits of the root directory",
        apply: |p, g| {
            let m = parse_u32(g.text, g.need()?, 8)?;
            if m > 0o7777 {
                return Err(err(g.text, "mode must be at most 7777"));
            }
            p.o.mode = m;
            Ok(())
        },
    },
    Spec {
        syntax: "uid=N",
        names: &["uid"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || "mounting user".into(),
        help: "owner of the root directory",
        apply: |p, g| {
            p.o.uid = Some(parse_u32(g.text, g.need()?, 10)?);
            Ok(())
        },
    },
    Spec {
        syntax: "gid=N",
        names: &["gid"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || "mounting group".into(),
        help: "group of the root directory",
        apply: |p, g| {
            p.o.gid = Some(parse_u32(g.text, g.need()?, 10)?);
            Ok(())
        },
    },
    Spec {
        syntax: "allow_other",
        names: &["allow_other"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: GUEST_MOUNTS,
        default: off,
        help: "let other users use the mount (permissions still apply)",
        apply: |p, g| {
            g.flag()?;
            p.o.allow_other = true;
            Ok(())
        },
    },
    Spec {
        syntax: "default_permissions",
        names: &["default_permissions"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: GUEST_MOUNTS,
        default: || "always on".into(),
        help: "the kernel checks permissions (accepted for compatibility)",
        apply: |_, g| g.flag(),
    },
    Spec {
        syntax: "fsname=NAME",
        names: &["fsname"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |_| Some("a guest's mount table shows the tag as the source (QEMU's tag=, or --tag)"),
        default: || "SOURCE".into(),
        help: "source name shown in /proc/mounts (default: the SOURCE given, the export's path, or memofs)",
        apply: |p, g| {
            let v = g.need()?;
            if v.is_empty()
                || v.contains(|c: char| c.is_whitespace() || c == ',' || c.is_control())
            {
                return Err(err(
                    g.text,
                    "fsname must be non-empty, without spaces or commas",
                ));
            }
            p.o.fsname = Some(v.to_string());
            Ok(())
        },
    },
    Spec {
        syntax: "source=DIR",
        names: &["source"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |_| Some("the shared directory is --shared-dir"),
        default: || "SOURCE".into(),
        help: "export DIR (passthrough backend); the SOURCE argument then only names the mount, as for libfuse's passthrough servers",
        apply: |p, g| {
            let v = g.need()?;
            if v.is_empty() {
                return Err(err(g.text, "source= needs a directory"));
            }
            p.o.source = Some(v.into());
            Ok(())
        },
    },
    Spec {
        syntax: "cache=never|auto|always|metadata",
        names: &["cache"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || DEFAULT_CACHE_MODE.name().into(),
        help: "preset for the three timeouts below (never 0 s, auto 1 s, always 3600 s; metadata: always's, and direct_io)",
        apply: |p, g| {
            let mode = CacheMode::parse(g.need()?)
                .ok_or_else(|| err(g.text, "expected never, auto, always or metadata"))?;
            p.cache_mode = Some(mode);
            if mode == CacheMode::Metadata {
                p.o.direct_io = DirectIo::All;
            }
            Ok(())
        },
    },
    Spec {
        syntax: "entry_timeout=SECS",
        names: &["entry_timeout"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || secs(CachePolicy::default().entry_timeout),
        help: "how long the kernel caches names (fractions allowed)",
        apply: |p, g| {
            p.entry = Some(parse_seconds(g.text, g.need()?)?);
            Ok(())
        },
    },
    Spec {
        syntax: "attr_timeout=SECS",
        names: &["attr_timeout"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || secs(CachePolicy::default().attr_timeout),
        help: "how long the kernel caches attributes",
        apply: |p, g| {
            p.attr = Some(parse_seconds(g.text, g.need()?)?);
            Ok(())
        },
    },
    Spec {
        syntax: "negative_timeout=SECS",
        names: &["negative_timeout", "negative_dentry_timeout"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || secs(CachePolicy::default().negative_timeout),
        help: "how long the kernel caches misses (alias negative_dentry_timeout; 0 = reply ENOENT)",
        apply: |p, g| {
            p.negative = Some(parse_seconds(g.text, g.need()?)?);
            Ok(())
        },
    },
    Spec {
        syntax: "strictatime|relatime|noatime",
        names: &["strictatime", "relatime", "noatime", "atime"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || "relatime".into(),
        help: "when reads and readdir update atime",
        apply: |p, g| {
            g.flag()?;
            p.o.atime.mode = match g.key {
                "strictatime" => AtimeMode::Strict,
                "noatime" => AtimeMode::Noatime,
                _ => AtimeMode::Relatime,
            };
            p.o.atime_given = true;
            Ok(())
        },
    },
    Spec {
        syntax: "nodiratime",
        names: &["nodiratime", "diratime"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: off,
        help: "never update directories' atime",
        apply: |p, g| {
            g.flag()?;
            p.o.atime.nodiratime = g.key == "nodiratime";
            p.o.atime_given = true;
            Ok(())
        },
    },
    Spec {
        syntax: "writeback=auto|on|off",
        names: &["writeback", "writeback_cache"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || "auto".into(),
        help: "kernel writeback cache: writes gather in the kernel's page cache and reach the server up to 1 MiB at a time, a full mount's ENOSPC then at fsync or close; auto: on for the mem backend's page store, off with passthrough, for host exports and over virtio-fs; on is refused with direct_io",
        apply: |p, g| {
            p.o.writeback = match g.value {
                None => Want::On,
                Some("auto") => Want::Auto,
                Some(v) if parse_switch(g.text, v)? => Want::On,
                Some(_) => Want::Off,
            };
            Ok(())
        },
    },
    Spec {
        syntax: "direct_io=off|large|all",
        names: &["direct_io"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: off,
        help: "bypass the kernel page cache. all (also bare direct_io): every read and write reaches the server; large: read-only opens of files of 1 MiB or more, other than program loads, so each read(2) is one request copied once (writes stay cached; a read(2) of a few KiB then costs a round trip)",
        apply: |p, g| {
            p.o.direct_io = match g.value {
                None | Some("all") => DirectIo::All,
                Some("large") => DirectIo::Large,
                Some("off") => DirectIo::Off,
                Some(_) => return Err(err(g.text, "expected off, large or all")),
            };
            Ok(())
        },
    },
    Spec {
        syntax: "xattr=on|off",
        names: &["xattr"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: || "on".into(),
        help: "extended attributes; off answers each kind of xattr request ENOSYS once, after which the kernel fails it with EOPNOTSUPP itself and asks no more: no POSIX ACLs, no security labels, and no request for a file's security.capability before each chown and first write (what virtiofsd does without --xattr)",
        apply: |p, g| {
            p.o.xattr = match g.value {
                None => true,
                Some(v) => parse_switch(g.text, v)?,
            };
            Ok(())
        },
    },
    Spec {
        syntax: "threads=N",
        names: &["threads"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |_| Some("a guest's requests come on its queues, each served by a thread of its own; --thread-pool-size=N serves them on a pool of N workers"),
        default: || "CPUs (at least 2)".into(),
        help: "request threads, each with its own cloned /dev/fuse queue (those one caller does not need wait aside)",
        apply: |p, g| {
            let n: usize = g
                .need()?
                .parse()
                .map_err(|_| err(g.text, "expected a number of threads"))?;
            if n == 0 || n > MAX_THREADS {
                return Err(err(
                    g.text,
                    format!("threads must be between 1 and {MAX_THREADS}"),
                ));
            }
            p.o.threads = n;
            Ok(())
        },
    },
    Spec {
        syntax: "busy_poll=USEC",
        names: &["busy_poll"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |_| Some("only the /dev/fuse and io_uring request threads poll; a virtio-fs queue's thread sleeps until the guest kicks it"),
        default: || DEFAULT_BUSY_POLL_US.to_string(),
        help: "after an answer, the request thread polls this long for the next request before it sleeps (on /dev/fuse the one reading thread, over io_uring each queue's thread), while requests keep coming that fast and at least one poll in four finds one (0: never; at most 10000)",
        apply: |p, g| {
            let us: u64 = g
                .need()?
                .parse()
                .map_err(|_| err(g.text, "expected microseconds (0: never poll)"))?;
            if us > MAX_BUSY_POLL_US {
                return Err(err(
                    g.text,
                    format!("busy_poll is at most {MAX_BUSY_POLL_US} microseconds"),
                ));
            }
            p.o.busy_poll = Duration::from_micros(us);
            Ok(())
        },
    },
    Spec {
        syntax: "passthrough=auto|on|off",
        names: &["passthrough"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |g| only_off(g, "a guest's kernel takes no backing files: FUSE passthrough is for host mounts (passthrough=off keeps the mem backend's data in the server's page store)"),
        default: || "auto".into(),
        help: "kernel FUSE passthrough for file data",
        apply: |p, g| {
            p.o.passthrough = g.choice(&AUTO_ON_OFF)?;
            Ok(())
        },
    },
    Spec {
        syntax: "io_uring=auto|on|off",
        names: &["io_uring"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |g| only_off(g, "FUSE-over-io_uring is for host mounts: a guest's requests come on its virtqueues"),
        default: || "auto".into(),
        help: "requests through FUSE-over-io_uring where the kernel offers it (Linux 6.14+ with fuse.enable_uring=Y, a host-wide choice memofs never makes itself); on fails with how to enable it",
        apply: |p, g| {
            p.o.io_uring = g.choice(&AUTO_ON_OFF)?;
            Ok(())
        },
    },
    Spec {
        syntax: "cpu_latency=auto|on|off",
        names: &["cpu_latency"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |g| only_off(g, "the CPU latency request is made by the /dev/fuse and io_uring request threads only"),
        default: || "auto".into(),
        help: "while requests stream (and 10-20 ms after), ask the kernel to keep idle CPUs awake (a CPU latency request of 0 through /dev/cpu_dma_latency, which takes root), so waking the caller an answer is for costs no return from a sleeping CPU; idle CPUs then stay in their shallowest state (polling, on x86); auto asks where a cpuidle driver would heed it; on fails where it cannot be asked",
        apply: |p, g| {
            p.o.cpu_latency = g.choice(&AUTO_ON_OFF)?;
            Ok(())
        },
    },
    Spec {
        syntax: "huge=never|within_size|always|advise",
        names: &["huge"],
        prefixes: &[],
        scope: Scope::Mem,
        virtio: SAME,
        default: || DEFAULT_HUGE.as_str().into(),
        help: "large folios for kernel-backed file data, as tmpfs's huge= (mem backend)",
        apply: |p, g| {
            p.o.huge = HugeMode::parse(g.need()?)
                .ok_or_else(|| err(g.text, "expected never, within_size, always or advise"))?;
            Ok(())
        },
    },
    Spec {
        syntax: "watch=auto|fanotify|inotify|off",
        names: &["watch"],
        prefixes: &[],
        scope: Scope::Passthrough,
        virtio: |g| only_off(g, "virtio-fs carries no notifications to the guest, so host changes show when the cache timeouts run out (--cache=auto or never); auto and off watch nothing there"),
        default: || "auto".into(),
        help: "passthrough backend: how host-side changes are seen (auto: fanotify, else inotify)",
        apply: |p, g| {
            p.o.watch = g.choice(&[
                ("auto", WatchMode::Auto),
                ("fanotify", WatchMode::Fanotify),
                ("inotify", WatchMode::Inotify),
                ("off", WatchMode::Off),
            ])?;
            Ok(())
        },
    },
    Spec {
        syntax: "changes=auto|off|seaweedfs|exec:PROGRAM",
        names: &["changes"],
        prefixes: &[],
        scope: Scope::Passthrough,
        virtio: |g| only_off(g, "virtio-fs carries no notifications to the guest, so changes made elsewhere show when the cache timeouts run out (--cache=auto or never); auto and off follow no feed there"),
        default: || "auto".into(),
        help: "passthrough backend: a feed of changes made on other machines (auto: the engine's own stream where memofs knows it, SeaweedFS; exec: a program printing changed paths)",
        apply: |p, g| {
            let v = g.need()?;
            p.o.changes = match v {
                "auto" => ChangeFeed::Auto,
                "off" => ChangeFeed::Off,
                "seaweedfs" => ChangeFeed::SeaweedFs,
                _ => match v.strip_prefix("exec:") {
                    Some(program) if program.starts_with('/') => {
                        ChangeFeed::Exec(program.into())
                    }
                    _ => {
                        return Err(err(
                            g.text,
                            "expected auto, off, seaweedfs or exec:/absolute/path/of/a/program",
                        ))
                    }
                },
            };
            Ok(())
        },
    },
    Spec {
        syntax: "ro, nosuid, nodev, noexec, sync, dirsync",
        names: &[
            "ro", "rw", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "sync", "async",
            "dirsync",
        ],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |g| match g.key { "ro" | "rw" => None, _ => Some("a flag of the guest's own mount (mount -t virtiofs -o nosuid,nodev,noexec,sync TAG DIR): the guest's kernel applies it, not the server") },
        default: || "nosuid,nodev".into(),
        help: "kernel mount flags (rw, suid, dev, exec, async undo them)",
        apply: |p, g| {
            g.flag()?;
            let (f, on) = match g.key {
                "ro" => (KernelFlag::ReadOnly, true),
                "rw" => (KernelFlag::ReadOnly, false),
                "nosuid" => (KernelFlag::NoSuid, true),
                "suid" => (KernelFlag::NoSuid, false),
                "nodev" => (KernelFlag::NoDev, true),
                "dev" => (KernelFlag::NoDev, false),
                "noexec" => (KernelFlag::NoExec, true),
                "exec" => (KernelFlag::NoExec, false),
                "sync" => (KernelFlag::Sync, true),
                "async" => (KernelFlag::Sync, false),
                _ => (KernelFlag::DirSync, true),
            };
            p.o.kernel_flags.retain(|x| *x != f);
            if on {
                p.o.kernel_flags.push(f);
            }
            Ok(())
        },
    },
    Spec {
        syntax: "remount",
        names: &["remount"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: |_| Some("a guest remounts its own mount (mount -o remount TAG)"),
        default: || "-".into(),
        help: "change a live mount (mount -o remount,OPTS DIR): its kernel flags (ro, rw, nosuid, nodev, noexec, sync, dirsync), the atime rule, size= and nr_inodes=; any other option must keep its value",
        apply: |_, g| {
            Err(err(
                g.text,
                "remount changes a live memofs mount: mount -o remount,OPTS DIR",
            ))
        },
    },
    Spec {
        syntax: "defaults, noauto, nofail, _netdev, x-*",
        names: &MOUNT8_NAMES,
        prefixes: &["x-"],
        scope: Scope::Mount8,
        virtio: |_| Some("a mount(8), fstab or systemd option: memofs virtiofsd is not started by mount(8)"),
        default: || "-".into(),
        help: "mount(8), fstab and systemd options (also auto, user, users, nouser, owner, group, comment=): accepted and ignored",
        apply: |_, _| Ok(()),
    },
    Spec {
        syntax: "debug",
        names: &["debug"],
        prefixes: &[],
        scope: Scope::Any,
        virtio: SAME,
        default: off,
        help: "log every request to stderr (use with -f)",
        apply: |p, g| {
            g.flag()?;
            p.o.debug = true;
            Ok(())
        },
    },
];

/// The declaration of the option spelled `key`.
pub(super) fn find(key: &str) -> Option<&'static Spec> {
    OPTIONS
        .iter()
        .find(|s| s.names.contains(&key) || s.prefixes.iter().any(|p| key.starts_with(p)))
}

/// Which mounts take the option spelled `key` (`None`: no such option).
pub fn scope_of(key: &str) -> Option<Scope> {
    find(key).map(|s| s.scope)
}

/// One documented option.
#[derive(Clone, Debug)]
pub struct OptionDoc {
    /// Spelling, e.g. `size=BYTES`.
    pub name: &'static str,
    /// The default, as a user would write it.
    pub default: String,
    /// What it does.
    pub help: &'static str,
    /// Which mounts take it.
    pub scope: Scope,
}

/// Every `-o` option with its default, for `--help` and the man page.
pub fn option_docs() -> Vec<OptionDoc> {
    OPTIONS
        .iter()
        .map(|s| OptionDoc {
            name: s.syntax,
            default: (s.default)(),
            help: s.help,
            scope: s.scope,
        })
        .collect()
}

/// The option table as Markdown: the README's table is this text (a test checks it).
pub fn markdown_table() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut t = String::from("| option | default | meaning |\n|---|---|---|\n");
    for d in option_docs() {
        let name = cell(d.name);
        let (default, help) = (cell(&d.default), cell(d.help));
        t.push_str(&format!("| `{name}` | {default} | {help} |\n"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_is_declared_once() {
        let mut seen = std::collections::HashSet::new();
        for s in OPTIONS {
            for n in s.names {
                assert!(seen.insert(*n), "{n} is declared twice");
            }
        }
    }

    #[test]
    fn every_syntax_names_a_declared_key() {
        for s in OPTIONS {
            let first = s.syntax.split(['=', '|', ',']).next().unwrap().trim();
            assert!(
                find(first).is_some(),
                "{} does not parse its own first key",
                s.syntax
            );
        }
    }

    #[test]
    fn scopes() {
        assert_eq!(scope_of("size"), Some(Scope::Mem));
        assert_eq!(scope_of("watch"), Some(Scope::Passthrough));
        assert_eq!(scope_of("negative_dentry_timeout"), Some(Scope::Any));
        assert_eq!(scope_of("x-systemd.automount"), Some(Scope::Mount8));
        assert_eq!(scope_of("bogus"), None);
    }
}
