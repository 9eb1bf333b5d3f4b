//! Skipped tests: a test that cannot run names what it lacks, says so on stderr (past libtest's
//! output capture, so it shows in every run) and, when `MEMOFS_E2E_SKIPS` names a file, appends
//! a record there. libtest itself has no runtime skip (the test returns and counts as passed),
//! so `make e2e` joins these records with libtest's counts ([`crate::summary`]) and counts the
//! test as skipped, or as failed where the capability is required. The crates' own tests use
//! the same records (a dev-dependency), and `make unit` counts them the same way.
//!
//! Environment:
//! * `MEMOFS_E2E_SKIPS`: the file records are appended to (one line each: capability, test,
//!   reason, tab-separated; safe from parallel test threads and several test binaries).
//! * `MEMOFS_E2E_WITHOUT`: capabilities to act as if missing (comma-separated ids or `prefix:*`
//!   patterns: `root`, `dev_fuse`, `fuse_passthrough`, `fanotify`, `tool:NAME`), to see what a
//!   host without them skips.

use std::fmt;
use std::io::Write;

/// What a skipped test lacks. [`Need::id`] is what summaries count by and what
/// `MEMOFS_E2E_REQUIRE` / `MEMOFS_E2E_LACKS` / `MEMOFS_E2E_WITHOUT` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Root (to mount, to switch users): `root`.
    Root,
    /// A usable `/dev/fuse`: `dev_fuse`.
    DevFuse,
    /// FUSE passthrough granted by the kernel (Linux 6.9+): `fuse_passthrough`.
    FusePassthrough,
    /// fanotify directory events (Linux 5.9+): `fanotify`.
    Fanotify,
    /// Making a mount namespace (`unshare -m`): `mount_namespace`.
    MountNamespace,
    /// A program or installed component: `tool:NAME`.
    Tool(&'static str),
    /// A kernel interface: `kernel:NAME`.
    Kernel(&'static str),
    /// A resource limit the test can work within: `limit:NAME`.
    Limit(&'static str),
    /// Not applicable under this run's configuration (its options, the tmpfs reference):
    /// `config:NAME`. Never a missing capability of the host.
    Config(&'static str),
}

impl Need {
    /// The capability's id, e.g. `root` or `tool:git`.
    pub fn id(&self) -> String {
        match self {
            Need::Root => "root".into(),
            Need::DevFuse => "dev_fuse".into(),
            Need::FusePassthrough => "fuse_passthrough".into(),
            Need::Fanotify => "fanotify".into(),
            Need::MountNamespace => "mount_namespace".into(),
            Need::Tool(n) => format!("tool:{n}"),
            Need::Kernel(n) => format!("kernel:{n}"),
            Need::Limit(n) => format!("limit:{n}"),
            Need::Config(n) => format!("config:{n}"),
        }
    }

    /// What the capability is, for a skip given without a reason of its own.
    pub fn describe(&self) -> String {
        match self {
            Need::Root => "needs root".into(),
            Need::DevFuse => "needs /dev/fuse".into(),
            Need::FusePassthrough => "needs FUSE passthrough".into(),
            Need::Fanotify => "needs fanotify directory events".into(),
            Need::MountNamespace => "needs a mount namespace".into(),
            Need::Tool(n) => format!("{n} not installed"),
            Need::Kernel(n) => format!("the kernel lacks {n}"),
            Need::Limit(n) => format!("outside the {n} limit"),
            Need::Config(n) => format!("does not apply here ({n})"),
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}

/// Whether `id` matches one of the comma-separated ids or `prefix:*` patterns in `list`.
pub fn listed(list: &str, id: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => !prefix.is_empty() && id.starts_with(prefix),
            None => p == id,
        })
}

/// Whether `MEMOFS_E2E_WITHOUT` asks to act as if `need` were missing.
pub fn simulated_missing(need: Need) -> bool {
    std::env::var("MEMOFS_E2E_WITHOUT").is_ok_and(|l| listed(&l, &need.id()))
}

/// What this process lacks to mount memofs (root, then a usable `/dev/fuse`), if anything.
pub fn cannot_mount() -> Option<Need> {
    if !crate::is_root() {
        return Some(Need::Root);
    }
    if simulated_missing(Need::DevFuse)
        || std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .is_err()
    {
        return Some(Need::DevFuse);
    }
    None
}

/// Whether this run's `MEMOFS_E2E_OPTS` turn FUSE passthrough off.
pub fn passthrough_off_by_options() -> bool {
    std::env::var("MEMOFS_E2E_OPTS").is_ok_and(|o| o.split(',').any(|o| o == "passthrough=off"))
}

/// The running test's name: libtest runs each test on a thread named after it (a binary
/// without libtest's harness is named alone).
fn test_name(binary: &str) -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => format!("{binary}::{n}"),
        _ => binary.to_string(),
    }
}

/// One record line: capability, test, reason (tabs and line breaks in the reason become spaces).
pub fn record_line(need: Need, test: &str, reason: &str) -> String {
    let reason: String = reason
        .chars()
        .map(|c| {
            if c == '\t' || c == '\n' || c == '\r' {
                ' '
            } else {
                c
            }
        })
        .collect();
    format!("{}\t{test}\t{}\n", need.id(), reason.trim())
}

/// Report the running test as skipped (see the module docs); `module` is the caller's
/// `module_path!()`. The [`skip!`](crate::skip!) macro calls this and returns.
pub fn report(module: &str, need: Need, reason: &str) {
    let binary = module.split("::").next().unwrap_or(module);
    let test = test_name(binary);
    let reason = if reason.is_empty() {
        need.describe()
    } else {
        reason.to_string()
    };
    // Straight to the stderr stream: libtest captures only the print macros.
    let _ =
        std::io::stderr().write_all(format!("SKIP {test}: lacks {need}: {reason}\n").as_bytes());
    if let Some(file) = std::env::var_os("MEMOFS_E2E_SKIPS") {
        // One write of one line to a file opened for appending: whole lines, whatever runs
        // alongside.
        let line = record_line(need, &test, &reason);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "cannot record the skip of {test} in {}: {e}",
                std::path::Path::new(&file).display()
            );
        }
    }
}

/// Skip the running test: name what it lacks (a [`Need`](crate::skip::Need), variants usable
/// unqualified) and optionally why (format arguments), report it, and return from the function.
#[macro_export]
macro_rules! skip {
    ($need:expr) => {{
        #[allow(unused_imports)]
        use $crate::skip::Need::*;
        $crate::skip::report(module_path!(), $need, "");
        return;
    }};
    ($need:expr, $($arg:tt)+) => {{
        #[allow(unused_imports)]
        use $crate::skip::Need::*;
        $crate::skip::report(module_path!(), $need, &format!($($arg)+));
        return;
    }};
}

/// Skip the running test unless this process can mount memofs (root and `/dev/fuse`).
#[macro_export]
macro_rules! require_mount {
    () => {
        if let Some(need) = $crate::skip::cannot_mount() {
            $crate::skip!(need);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_patterns() {
        assert_eq!(Need::Tool("git").id(), "tool:git");
        assert_eq!(
            Need::Config("passthrough_off").id(),
            "config:passthrough_off"
        );
        assert!(listed("root,dev_fuse", "dev_fuse"));
        assert!(listed(" root , tool:* ", "tool:git"));
        assert!(!listed("root,tool:*", "kernel:x"));
        assert!(!listed("rootless", "root"));
        assert!(!listed("*", "root"), "a bare * is not a pattern");
        assert!(!listed("", "root"));
    }

    #[test]
    fn record_lines_are_one_line_of_three_fields() {
        let l = record_line(Need::Root, "files::t", "needs\troot\nto mount ");
        assert_eq!(l, "root\tfiles::t\tneeds root to mount\n");
    }
}
