//! The host capabilities the suite is expected to exercise, each checked where memofs uses it
//! (FUSE passthrough on a default mount, fanotify in the passthrough backend's watcher), and
//! the skip mechanism itself: a test that cannot run is reported as skipped, naming what it
//! lacks, and `make e2e` fails when that capability is required (`memofs_e2e::skip`,
//! `memofs_e2e::summary`).

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;

use memofs_e2e::checks::stats_json;
use memofs_e2e::skip::{passthrough_off_by_options, simulated_missing, Need};
use memofs_e2e::{ok, require_mount, skip, Mount, TempDir};

/// The string value of `"key":"..."` in `memofs stats --json` output.
fn json_str<'a>(doc: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":\"");
    doc.split_once(&pat)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or("(absent)", |(v, _)| v)
}

#[test]
fn default_mounts_get_fuse_passthrough() {
    require_mount!();
    if passthrough_off_by_options() {
        skip!(
            Config("passthrough_off"),
            "MEMOFS_E2E_OPTS turns FUSE passthrough off"
        );
    }
    if simulated_missing(Need::FusePassthrough) {
        skip!(FusePassthrough, "MEMOFS_E2E_WITHOUT lists it");
    }
    let m = Mount::memofs(&[]);
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    if json_str(&doc, "passthrough_granted") != "true" {
        skip!(
            FusePassthrough,
            "the kernel did not grant it (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH); memofs stats: {}",
            json_str(&doc, "fuse_passthrough")
        );
    }
}

/// Whether this host gives fanotify directory events as the watcher asks for them.
fn fanotify_works() -> Result<(), String> {
    if simulated_missing(Need::Fanotify) {
        return Err("MEMOFS_E2E_WITHOUT lists it".into());
    }
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_REPORT_DFID_NAME;
    // SAFETY: plain call with integer arguments.
    let fd = unsafe { libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_CLOEXEC) as u32) };
    if fd < 0 {
        return Err(format!(
            "fanotify_init(FAN_REPORT_DFID_NAME): {} (needs Linux 5.9+)",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just returned by fanotify_init and is owned by nothing else.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

#[test]
fn the_passthrough_backend_watches_the_host_with_fanotify() {
    require_mount!();
    if let Err(why) = fanotify_works() {
        skip!(Fanotify, "{why}");
    }
    // Declared first, dropped last: the export is unmounted before the tmpfs it exports.
    let host = Mount::tmpfs(&["size=16m"]);
    let m = Mount::try_memofs_source(host.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    let watch = json_str(&doc, "host_change_watch");
    assert!(
        watch.starts_with("fanotify"),
        "fanotify works on this host, but the passthrough backend watches with: {watch}\n\
         server output:\n{}",
        m.log()
    );
}

/// Run by `skips_are_counted_and_required_ones_fail` with root simulated missing; on its own,
/// a plain mount that serves a file.
#[test]
fn a_mount_serves_a_file() {
    require_mount!();
    let m = Mount::memofs(&[]);
    ok!(fs::write(m.join("f"), b"x"));
    assert_eq!(ok!(fs::read(m.join("f"))), b"x");
}

/// `text` with every line indented, so that quoted libtest output is not read as this run's.
fn quoted(text: &str) -> String {
    text.lines().map(|l| format!("  | {l}\n")).collect()
}

/// `memofs-e2e-summary DIR` with `lacks` declared missing; its output and success.
fn summary(dir: &Path, lacks: &str) -> (String, bool) {
    let out = ok!(Command::new(env!("CARGO_BIN_EXE_memofs-e2e-summary"))
        .arg(dir)
        .env_remove("MEMOFS_E2E_REQUIRE")
        .env("MEMOFS_E2E_LACKS", lacks)
        .output());
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
    )
}

#[test]
fn skips_are_counted_and_required_ones_fail() {
    // One run as scripts/e2e.sh leaves it: this binary running one test with root simulated
    // missing, its output, exit status and skip records.
    let dir = TempDir::new("memofs-e2e-skips-");
    let log = ok!(fs::File::create(dir.path().join("probe.log")));
    let status = ok!(Command::new(ok!(std::env::current_exe()))
        .args(["--exact", "a_mount_serves_a_file", "--test-threads=1"])
        .env("MEMOFS_E2E_WITHOUT", "root")
        .env("MEMOFS_E2E_SKIPS", dir.path().join("probe.skips"))
        .stdout(ok!(log.try_clone()))
        .stderr(log)
        .status());
    let code = status.code().unwrap_or(-1);
    ok!(fs::write(dir.path().join("probe.status"), code.to_string()));
    let output = ok!(fs::read_to_string(dir.path().join("probe.log")));
    assert!(
        output.contains("SKIP capabilities::a_mount_serves_a_file: lacks root: needs root\n"),
        "the skip is said in the test's output, with the test's name:\n{}",
        quoted(&output)
    );

    // Root required (the default): the skipped test counts as failed, and the run fails.
    let (text, success) = summary(dir.path(), "");
    assert!(
        !success && text.ends_with("\ne2e: 0 passed, 1 failed, 0 skipped\n"),
        "a skipped required capability must fail the summary:\n{}",
        quoted(&text)
    );
    assert!(
        text.contains("E2E_LACKS=root"),
        "the failure says how to declare what the machine lacks:\n{}",
        quoted(&text)
    );

    // Root declared lacking: skipped, not passed, and the run succeeds.
    let (text, success) = summary(dir.path(), "root");
    assert!(
        success && text.ends_with("\ne2e: 0 passed, 0 failed, 1 skipped\n"),
        "a skip of a capability declared lacking counts as skipped:\n{}",
        quoted(&text)
    );
    assert!(
        text.contains("SKIP capabilities::a_mount_serves_a_file (lacks root): needs root")
            && text.contains("e2e skipped per capability: root 1"),
        "the summary names the test and counts its capability:\n{}",
        quoted(&text)
    );
}
