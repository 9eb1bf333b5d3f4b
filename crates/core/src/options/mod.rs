//! `-o` mount options: parsing, validation, defaults and their documentation.
//!
//! Each option is declared once, in the table of `table.rs`: the names it is spelled with,
//! which backend takes it, its default and help text, and how it is parsed. The parser
//! ([`parse_options`]), `memofs mount --help` and the man page ([`option_docs`]) and the
//! backend checks ([`scope_of`]) are all read from that table, so none can drift from the
//! others.

mod table;

pub use table::{markdown_table, option_docs, scope_of, OptionDoc, Scope};

use std::fmt;
use std::time::Duration;

use crate::atime::{AtimeMode, AtimePolicy};
use crate::cache::CachePolicy;

/// An `auto|on|off` choice of something the host may not offer: `-o passthrough=` (the
/// kernel's FUSE passthrough for file data), `-o io_uring=` (requests through
/// FUSE-over-io_uring ring entries instead of `/dev/fuse` reads) and `-o cpu_latency=` (a CPU
/// latency request while requests stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Where the host offers it (passthrough: Linux 6.9+ and root; io_uring: Linux 6.14+
    /// with `fuse.enable_uring` set; cpu_latency: `/dev/cpu_dma_latency` can be opened, which
    /// takes root, and a cpuidle driver heeds it).
    Auto,
    /// Required: the mount fails where the host does not offer it.
    On,
    /// Never.
    Off,
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Want::Auto => "auto",
            Want::On => "on",
            Want::Off => "off",
        })
    }
}

/// `-o direct_io=`: which opens bypass the kernel's page cache (`FOPEN_DIRECT_IO`), so
/// that each `read(2)` is one READ of its own size copied once into the reader's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirectIo {
    /// None: the kernel caches file data (and reads ahead 128 KiB at a time).
    #[default]
    Off,
    /// Read-only opens of regular files of at least
    /// [`crate::cache::DIRECT_READ_SIZE`], other than those that load a program: one
    /// copy per byte where a cached open pays two and cuts each `read(2)` into 128 KiB
    /// READs, at the price of a round trip per `read(2)` and no page cache kept for them.
    Large,
    /// Every open: every read and write reaches the server.
    All,
}

impl DirectIo {
    /// The value's name in `-o direct_io=`.
    pub fn name(self) -> &'static str {
        match self {
            DirectIo::Off => "off",
            DirectIo::Large => "large",
            DirectIo::All => "all",
        }
    }
}

/// `-o watch=`: how the passthrough backend learns about changes made on the host, behind
/// the kernel's back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WatchMode {
    /// fanotify if the host allows it, else inotify.
    #[default]
    Auto,
    /// fanotify only (no watcher if unavailable).
    Fanotify,
    /// inotify only.
    Inotify,
    /// No watcher: host-side changes show up when cached entries and attributes expire
    /// (or after `memofs invalidate`).
    Off,
}

/// `-o changes=`: a feed of changes made where no watcher on this host sees them (on another
/// machine, for a source on a distributed filesystem), naming the paths changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ChangeFeed {
    /// The engine's own change stream where memofs recognises the source's filesystem
    /// (SeaweedFS); none elsewhere.
    #[default]
    Auto,
    /// None: what others change shows when cache timeouts expire.
    Off,
    /// SeaweedFS's filer metadata stream; refused where the source is no SeaweedFS mount.
    SeaweedFs,
    /// A program whose standard output names changed paths, one per line, relative to the
    /// exported directory (a line that starts with `"` is a JSON string).
    Exec(std::path::PathBuf),
}

/// `-o huge=`: large folios for kernel-backed file data, as tmpfs's `huge=` (the private
/// tmpfs holding the mem backend's file data is mounted with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugeMode {
    /// Base pages only.
    Never,
    /// Large folios where a write or fault lies inside the file's size (sized by the write,
    /// up to 2 MiB): sequentially written files get them, sparse writes do not.
    WithinSize,
    /// Large folios wherever possible, also beyond the file's size.
    Always,
    /// Only in mappings given `madvise(MADV_HUGEPAGE)`.
    Advise,
}

impl HugeMode {
    /// The spelling tmpfs's `huge=` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            HugeMode::Never => "never",
            HugeMode::WithinSize => "within_size",
            HugeMode::Always => "always",
            HugeMode::Advise => "advise",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<HugeMode> {
        [
            HugeMode::Never,
            HugeMode::WithinSize,
            HugeMode::Always,
            HugeMode::Advise,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }
}

/// Mount flags handed to the kernel as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFlag {
    /// `ro`
    ReadOnly,
    /// `nosuid`
    NoSuid,
    /// `nodev`
    NoDev,
    /// `noexec`
    NoExec,
    /// `sync`
    Sync,
    /// `dirsync`
    DirSync,
}

/// Everything `-o` can set, resolved to values.
#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// Byte limit for data and xattrs (mem backend); 0 = unlimited.
    pub size: u64,
    /// Inode limit (mem backend); 0 = unlimited.
    pub nr_inodes: u64,
    /// Root directory permission bits (mem backend).
    pub mode: u32,
    /// Root directory owner; `None` = the mounting user.
    pub uid: Option<u32>,
    /// Root directory group; `None` = the mounting user's group.
    pub gid: Option<u32>,
    /// Let other users access the mount.
    pub allow_other: bool,
    /// The source name shown in `/proc/mounts`; `None`: the mount's SOURCE.
    pub fsname: Option<String>,
    /// The directory to export (`source=`, as libfuse's passthrough examples take it); the
    /// SOURCE argument then only names the mount.
    pub source: Option<std::path::PathBuf>,
    /// Kernel cache timeouts.
    pub cache: CachePolicy,
    /// Whether `cache=` or a timeout was given (else the backend may choose the preset).
    pub cache_given: bool,
    /// atime rule.
    pub atime: AtimePolicy,
    /// Whether an atime option was given (else the backend may choose the rule).
    pub atime_given: bool,
    /// Kernel writeback cache for regular files.
    pub writeback: Want,
    /// Which opens bypass the page cache.
    pub direct_io: DirectIo,
    /// Extended attributes served (`xattr=off`: every xattr request answered `ENOSYS`).
    pub xattr: bool,
    /// Request threads, each on its own cloned `/dev/fuse` queue.
    pub threads: usize,
    /// How long the reading request thread polls for the next request before it sleeps.
    pub busy_poll: Duration,
    /// Kernel passthrough for file data.
    pub passthrough: Want,
    /// FUSE-over-io_uring.
    pub io_uring: Want,
    /// A CPU latency request (idle CPUs stay awake) while requests stream.
    pub cpu_latency: Want,
    /// Host-change watcher (passthrough backend).
    pub watch: WatchMode,
    /// Feed of changes made on other machines (passthrough backend).
    pub changes: ChangeFeed,
    /// Large folios for kernel-backed file data (mem backend).
    pub huge: HugeMode,
    /// Flags for the kernel mount.
    pub kernel_flags: Vec<KernelFlag>,
    /// Log every request to stderr.
    pub debug: bool,
}

/// A rejected option, with a message a user can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    /// The option as given.
    pub option: String,
    /// What is wrong and what is accepted.
    pub reason: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid mount option '{}': {}", self.option, self.reason)
    }
}

impl std::error::Error for OptionError {}

/// Default `size=`: half of RAM, as tmpfs.
pub const DEFAULT_SIZE_PERCENT: u64 = 50;
/// Default root `mode=`, as tmpfs mounted by root.
pub const DEFAULT_ROOT_MODE: u32 = 0o1777;
/// Default atime rule.
pub const DEFAULT_ATIME: AtimeMode = AtimeMode::Relatime;
/// Default for `huge=`: tmpfs's own, so the same files take the memory they take on a
/// default tmpfs (large folios make sparse and scattered writes take up to 512 times the
/// pages written; docs/performance.md has the measurements).
pub const DEFAULT_HUGE: HugeMode = HugeMode::Never;
/// Kernel flags every mount starts with, as FUSE mounts conventionally do (`dev` and `suid`
/// lift them).
pub const DEFAULT_KERNEL_FLAGS: [KernelFlag; 2] = [KernelFlag::NoSuid, KernelFlag::NoDev];
/// Default `busy_poll=`, in microseconds (the value Linux suggests for its socket busy
/// polling, `net.core.busy_poll`).
pub const DEFAULT_BUSY_POLL_US: u64 = 50;
/// Longest `busy_poll=` accepted, in microseconds.
pub const MAX_BUSY_POLL_US: u64 = 10_000;
/// Most request threads `threads=` accepts.
pub const MAX_THREADS: usize = 64;

/// Default `threads=`: one per CPU, at least two.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2)
}

/// Default `nr_inodes=`: half the number of RAM pages, as tmpfs.
pub fn default_nr_inodes(ram_bytes: u64) -> u64 {
    ram_bytes / 4096 / 2
}

pub(crate) fn percent_of(ram_bytes: u64, percent: u64) -> u64 {
    ((ram_bytes as u128 * percent as u128) / 100).min(u64::MAX as u128) as u64
}

pub(crate) fn err(option: &str, reason: impl Into<String>) -> OptionError {
    OptionError {
        option: option.to_string(),
        reason: reason.into(),
    }
}

/// Parses a count or byte size with an optional k/m/g/t (binary) suffix.
pub fn parse_size(value: &str) -> Option<u64> {
    let v = value.trim();
    let (digits, mult) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&v[..i], 1 << 20),
        (i, 'g' | 'G') => (&v[..i], 1 << 30),
        (i, 't' | 'T') => (&v[..i], 1 << 40),
        _ => (v, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

pub(crate) fn parse_seconds(option: &str, value: &str) -> Result<Duration, OptionError> {
    let s: f64 = value
        .parse()
        .map_err(|_| err(option, "expected seconds, e.g. 0, 1.5 or 3600"))?;
    if !s.is_finite() || !(0.0..=1e9).contains(&s) {
        return Err(err(option, "seconds must be between 0 and 1e9"));
    }
    Ok(Duration::from_secs_f64(s))
}

pub(crate) fn parse_u32(option: &str, value: &str, radix: u32) -> Result<u32, OptionError> {
    u32::from_str_radix(value, radix).map_err(|_| {
        err(
            option,
            if radix == 8 {
                "expected an octal number, e.g. 1777"
            } else {
                "expected a number"
            },
        )
    })
}

pub(crate) fn parse_switch(option: &str, value: &str) -> Result<bool, OptionError> {
    match value {
        "on" | "1" | "yes" | "true" => Ok(true),
        "off" | "0" | "no" | "false" => Ok(false),
        _ => Err(err(option, "expected on or off")),
    }
}

/// Parses `-o` option lists (each comma-separated) for a machine with `ram_bytes` of RAM.
/// Later options override earlier ones; explicit timeouts override the `cache=` preset.
/// Every option is declared once, in the table (`table.rs`).
pub fn parse_options<S: AsRef<str>>(
    lists: &[S],
    ram_bytes: u64,
) -> Result<MountOptions, OptionError> {
    let mut p = table::Parsing::new(ram_bytes);
    for list in lists {
        for text in list.as_ref().split(',') {
            if text.is_empty() {
                continue;
            }
            let (key, value) = match text.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (text, None),
            };
            let spec = table::find(key)
                .ok_or_else(|| err(text, "unknown option (see 'memofs mount --help')"))?;
            (spec.apply)(&mut p, &table::Given { text, key, value })?;
        }
    }
    p.finish()
}

/// The first option of `-o` lists that means nothing to a virtio-fs device (`memofs
/// virtiofsd`), with why: each option's declaration says whether it means there what it
/// means on a mount (`table.rs`). Unknown options are left to [`parse_options`].
pub fn virtiofs_refusal<S: AsRef<str>>(lists: &[S]) -> Option<String> {
    lists
        .iter()
        .flat_map(|l| l.as_ref().split(','))
        .filter(|t| !t.is_empty())
        .find_map(|text| {
            let (key, value) = match text.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (text, None),
            };
            let why = (table::find(key)?.virtio)(&table::Given { text, key, value })?;
            Some(format!("-o {text} is refused over virtio-fs: {why}"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAM: u64 = 8 << 30;

    #[test]
    fn options_that_mean_nothing_to_a_guest_are_refused_naming_themselves() {
        assert_eq!(virtiofs_refusal(&["size=1g,noatime,ro,cache=auto"]), None);
        assert_eq!(
            virtiofs_refusal(&["passthrough=off,io_uring=auto,writeback=on"]),
            None
        );
        assert_eq!(virtiofs_refusal(&["watch=auto,changes=off"]), None);
        for (given, says) in [
            ("watch=fanotify", "no notifications"),
            ("changes=seaweedfs", "no notifications"),
            ("threads=4", "--thread-pool-size"),
            ("busy_poll=50", "thread sleeps"),
            ("allow_other", "guest's kernel mounts with allow_other"),
            ("default_permissions", "guest's kernel checks permissions"),
            ("fsname=x", "tag"),
            ("nosuid", "guest's own mount"),
            ("sync", "guest's own mount"),
            ("passthrough=on", "backing files"),
            ("io_uring=on", "virtqueues"),
            ("cpu_latency=on", "request threads only"),
            ("nofail", "mount(8)"),
            ("x-systemd.automount", "mount(8)"),
        ] {
            let msg = virtiofs_refusal(&[format!("size=1g,{given}")]).expect(given);
            assert!(msg.starts_with(&format!("-o {given} ")), "{msg}");
            assert!(msg.contains(says), "{given}: {msg}");
        }
    }

    #[test]
    fn cache_metadata_keeps_names_for_long_and_no_file_data() {
        let o = parse_options(&["cache=metadata"], RAM).unwrap();
        assert_eq!(o.cache.attr_timeout, std::time::Duration::from_secs(3600));
        assert_eq!(o.direct_io, DirectIo::All);
        let o = parse_options(&["cache=always"], RAM).unwrap();
        assert_eq!(o.direct_io, DirectIo::Off);
        let o = parse_options(&["direct_io=large", "writeback=on"], RAM).unwrap();
        assert_eq!(
            o.direct_io,
            DirectIo::Large,
            "direct reads keep the writeback cache"
        );
        assert_eq!(
            parse_options(&["direct_io"], RAM).unwrap().direct_io,
            DirectIo::All
        );
        let e = parse_options(&["direct_io=some"], RAM)
            .unwrap_err()
            .to_string();
        assert!(e.contains("off, large or all"), "{e}");
        let e = parse_options(&["cache=metadata", "writeback=on"], RAM)
            .unwrap_err()
            .to_string();
        assert!(e.contains("direct writes never move them"), "{e}");
        let e = parse_options(&["cache=sometimes"], RAM)
            .unwrap_err()
            .to_string();
        assert!(e.contains("never, auto, always or metadata"), "{e}");
    }

    #[test]
    fn defaults_match_the_docs() {
        let o = parse_options::<&str>(&[], RAM).unwrap();
        assert_eq!(o.size, RAM / 2);
        assert_eq!(o.nr_inodes, RAM / 4096 / 2);
        assert_eq!(o.mode, 0o1777);
        assert_eq!(o.atime.mode, AtimeMode::Relatime);
        let docs = option_docs();
        let get = |n: &str| {
            docs.iter()
                .find(|d| d.name.starts_with(n))
                .unwrap()
                .default
                .clone()
        };
        assert_eq!(get("size="), "50%");
        assert_eq!(
            get("entry_timeout"),
            format!("{}", o.cache.entry_timeout.as_secs())
        );
        assert_eq!(
            get("negative_timeout"),
            format!("{}", o.cache.negative_timeout.as_secs())
        );
        assert_eq!(get("cache="), o.cache.mode.name());
        assert_eq!(get("huge="), o.huge.as_str());
    }

    /// Each documented default, given as an option, leaves the defaults as they are; a
    /// documented `off` is a flag that changes them. Only defaults that depend on the machine
    /// or the caller are described in words.
    #[test]
    fn every_documented_default_is_the_parsers() {
        let base = parse_options::<&str>(&[], RAM).unwrap();
        let described = [
            "RAM pages / 2",
            "mounting user",
            "mounting group",
            "CPUs (at least 2)",
            "SOURCE",
        ];
        for d in option_docs() {
            let first = d.name.split([',', '|']).next().unwrap().trim();
            let (key, valued) = match first.split_once('=') {
                Some((key, _)) => (key, true),
                None => (first, false),
            };
            let given = match (d.default.as_str(), valued) {
                (text, _) if described.contains(&text) => continue,
                ("-" | "always on", false) => continue,
                ("off", false) => {
                    let set = parse_options(&[key], RAM).unwrap();
                    assert_ne!(set, base, "`{key}` is documented as off by default");
                    continue;
                }
                (value, true) => format!("{key}={value}"),
                (value, false) => value.to_string(),
            };
            let mut o = parse_options(&[given.as_str()], RAM)
                .unwrap_or_else(|e| panic!("the documented default `{given}` does not parse: {e}"));
            // Giving the default preset still counts as giving one.
            o.cache_given = false;
            o.atime_given = false;
            assert_eq!(o, base, "`{given}` is documented as the default but is not");
        }
    }

    #[test]
    fn sizes_and_percentages() {
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999t"), None);
        let o = parse_options(&["size=25%,nr_inodes=1k"], RAM).unwrap();
        assert_eq!(o.size, RAM / 4);
        assert_eq!(o.nr_inodes, 1024);
    }

    #[test]
    fn watch_modes() {
        assert_eq!(parse_options(&[""; 0], RAM).unwrap().watch, WatchMode::Auto);
        for (v, m) in [
            ("auto", WatchMode::Auto),
            ("fanotify", WatchMode::Fanotify),
            ("inotify", WatchMode::Inotify),
            ("off", WatchMode::Off),
        ] {
            let o = parse_options(&[format!("watch={v}")], RAM).unwrap();
            assert_eq!(o.watch, m);
        }
    }

    #[test]
    fn huge_modes() {
        assert_eq!(parse_options(&[""; 0], RAM).unwrap().huge, DEFAULT_HUGE);
        for m in [
            HugeMode::Never,
            HugeMode::WithinSize,
            HugeMode::Always,
            HugeMode::Advise,
        ] {
            let o = parse_options(&[format!("huge={}", m.as_str())], RAM).unwrap();
            assert_eq!(o.huge, m);
        }
    }

    #[test]
    fn timeouts_and_presets() {
        let o = parse_options(&["cache=never", "negative_dentry_timeout=2.5"], RAM).unwrap();
        assert_eq!(o.cache.entry_timeout, Duration::ZERO);
        assert_eq!(o.cache.negative_timeout, Duration::from_millis(2500));
        let o = parse_options(&["negative_timeout=0,cache=auto"], RAM).unwrap();
        assert_eq!(o.cache.negative_timeout, Duration::ZERO);
        assert_eq!(o.cache.attr_timeout, Duration::from_secs(1));
    }

    #[test]
    fn bad_options_name_the_option() {
        for bad in [
            "bogus",
            "size=",
            "size=12q",
            "size=x%",
            "nr_inodes=-3",
            "mode=9",
            "mode=77777",
            "uid=root",
            "cache=sometimes",
            "entry_timeout=-1",
            "entry_timeout=nan",
            "negative_timeout=abc",
            "threads=0",
            "threads=1000",
            "busy_poll=fast",
            "busy_poll=20000",
            "busy_poll",
            "writeback=maybe",
            "passthrough=yes",
            "watch=dnotify",
            "io_uring=yes",
            "cpu_latency=0",
            "cpu_latency",
            "huge=yes",
            "huge",
            "noatime=1",
            "allow_other=1",
            "fsname=a b",
            "size",
        ] {
            let e = parse_options(&[bad], RAM).unwrap_err();
            assert_eq!(e.option, bad, "{bad}");
            assert!(e.to_string().contains(bad));
        }
    }

    #[test]
    fn busy_poll_in_microseconds() {
        let d = parse_options::<&str>(&[], RAM).unwrap();
        assert_eq!(d.busy_poll, Duration::from_micros(DEFAULT_BUSY_POLL_US));
        let o = parse_options(&["busy_poll=0"], RAM).unwrap();
        assert_eq!(o.busy_poll, Duration::ZERO);
        let o = parse_options(&["busy_poll=200"], RAM).unwrap();
        assert_eq!(o.busy_poll, Duration::from_micros(200));
    }

    #[test]
    fn auto_on_off_choices() {
        let d = parse_options::<&str>(&[], RAM).unwrap();
        assert_eq!((d.io_uring, d.cpu_latency), (Want::Auto, Want::Auto));
        let o = parse_options(&["cpu_latency=off,io_uring=on"], RAM).unwrap();
        assert_eq!((o.io_uring, o.cpu_latency), (Want::On, Want::Off));
        let o = parse_options(&["cpu_latency=on"], RAM).unwrap();
        assert_eq!(o.cpu_latency, Want::On);
    }

    #[test]
    fn kernel_flags_toggle() {
        let fstab = parse_options(
            &["defaults,noauto,nofail,_netdev,users,x-systemd.automount,comment=a,size=1m"],
            RAM,
        )
        .unwrap();
        assert_eq!(
            fstab.size,
            1 << 20,
            "mount(8)'s options are ignored, the rest kept"
        );
        assert!(parse_options(&["xsystemd"], RAM).is_err());
        let o = parse_options(&["ro,nosuid,rw,dev"], RAM).unwrap();
        assert_eq!(o.kernel_flags, vec![KernelFlag::NoSuid]);
        let d = parse_options::<&str>(&[], RAM).unwrap();
        assert_eq!(d.kernel_flags, DEFAULT_KERNEL_FLAGS.to_vec());
    }
}
