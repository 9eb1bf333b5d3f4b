//! `memofs-visibility [ROUNDS]`: how long a change made on the host takes to show through a
//! passthrough export whose kernel caches last an hour (3600 s entry, attribute and negative
//! timeouts). Each round caches the kernel's answer first (a miss, or a hit), changes the
//! host directory directly, and polls through the mount until the change shows:
//! - create: a name whose miss is cached appears;
//! - delete: a cached name disappears;
//! - rename: a cached name disappears and the cached miss of its new name turns into a hit.
//!
//! Prints the median and the maximum per kind, or that the change never showed within 20 s,
//! then the mount's invalidation counters. Exit status 1 if a change never showed, 2 if it
//! could not measure (not root, no mount). A measurement, not a test: the pass/fail tests
//! assert visibility only (tests/e2e/tests/passthrough.rs).

use std::fs;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use memofs_e2e::checks::stats_json;
use memofs_e2e::{is_root, Mount};

/// How long a change may take before it counts as never shown.
const LIMIT: Duration = Duration::from_secs(20);

const LONG: &[&str] = &[
    "negative_timeout=3600",
    "entry_timeout=3600",
    "attr_timeout=3600",
];

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// Polls `shown` until it holds: the time it took, or `None` past [`LIMIT`].
fn time_until(start: Instant, mut shown: impl FnMut() -> bool) -> Option<Duration> {
    loop {
        if shown() {
            return Some(start.elapsed());
        }
        if start.elapsed() > LIMIT {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() -> ExitCode {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    if !is_root() {
        eprintln!("memofs-visibility: needs root (it mounts a tmpfs and a passthrough export)");
        return ExitCode::from(2);
    }
    let host = Mount::tmpfs(&["size=16m"]);
    let m = match Mount::try_memofs_source(host.path(), LONG) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("memofs-visibility: cannot mount: {e}");
            return ExitCode::from(2);
        }
    };
    let kinds = ["create", "delete", "rename"];
    let mut times: Vec<Vec<Option<Duration>>> = vec![Vec::new(); kinds.len()];
    for i in 0..rounds {
        // create: cache the miss, then create on the host.
        let name = format!("created-{i}");
        assert!(!exists(&m.join(&name)) && !exists(&m.join(&name)));
        let t = Instant::now();
        fs::write(host.join(&name), b"x").expect("create on the host");
        times[0].push(time_until(t, || exists(&m.join(&name))));
        // delete: cache the hit, then delete on the host.
        let name = format!("deleted-{i}");
        fs::write(host.join(&name), b"x").expect("create on the host");
        while !exists(&m.join(&name)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        fs::remove_file(host.join(&name)).expect("delete on the host");
        times[1].push(time_until(t, || !exists(&m.join(&name))));
        // rename: cache the old name's hit and the new name's miss, then rename on the host.
        let (from, to) = (format!("from-{i}"), format!("to-{i}"));
        fs::write(host.join(&from), b"x").expect("create on the host");
        while !exists(&m.join(&from)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!exists(&m.join(&to)));
        let t = Instant::now();
        fs::rename(host.join(&from), host.join(&to)).expect("rename on the host");
        times[2].push(time_until(t, || {
            !exists(&m.join(&from)) && exists(&m.join(&to))
        }));
    }
    let mut stale = false;
    for (kind, t) in kinds.iter().zip(&times) {
        let mut seen: Vec<Duration> = t.iter().flatten().copied().collect();
        seen.sort();
        let never = t.len() - seen.len();
        stale |= never > 0;
        match (seen.get(seen.len() / 2), seen.last()) {
            (Some(median), Some(max)) => println!(
                "visibility {kind}: median {}, max {} ({} rounds{})",
                ms(*median),
                ms(*max),
                t.len(),
                if never > 0 {
                    format!(", {never} never shown within {LIMIT:?}")
                } else {
                    String::new()
                }
            ),
            _ => println!(
                "visibility {kind}: never shown within {LIMIT:?} ({} rounds)",
                t.len()
            ),
        }
    }
    if let Ok(doc) = stats_json(m.path()) {
        let events = doc
            .split_once("\"events\":{")
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or("", |(e, _)| e);
        let features = doc
            .split_once("\"features\":{")
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or("", |(f, _)| f);
        let wanted = |kv: &&str| kv.starts_with("\"inval") || kv.starts_with("\"inc_epoch");
        println!(
            "stats: {}",
            events
                .split(',')
                .filter(wanted)
                .collect::<Vec<_>>()
                .join(" ")
        );
        if !features.is_empty() {
            println!("features: {features}");
        }
    }
    if stale {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
