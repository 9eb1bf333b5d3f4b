//! `memofs stats` (a mount's settings, kernel features, usage and request counters, once or
//! as rates over time) and `memofs invalidate` (drop every name the kernel caches for it),
//! both over the mount's control socket.

use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use memofs_control::{ErrorDoc, InvalidateDoc, StatsDoc, UsageDoc};

use crate::cli::{StatsArgs, TargetArgs};
use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

/// Sends `command` to the server of the mount at `target`; its JSON answer, or the exit
/// code of a failure already reported.
fn ask(target: &Path, command: &str) -> Result<String, ExitCode> {
    let shown = target.display();
    let meta = match std::fs::metadata(target) {
        Ok(m) => m,
        Err(e) => return Err(fail(EXIT_FAILURE, format!("cannot stat {shown}: {e}"))),
    };
    // A socket is a virtio-fs device's vhost-user socket (`memofs virtiofsd`).
    let answer = match meta.file_type().is_socket() {
        true => memofs_control::request_device(target, command),
        false => memofs_control::request(meta.dev(), target, command),
    };
    answer.map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => fail(
            EXIT_FAILURE,
            format!("{shown}: only root and the mount's owner may reach its server ({e})"),
        ),
        _ => fail(
            EXIT_FAILURE,
            format!("{shown} is not a live memofs mount ({e})"),
        ),
    })
}

/// The `stats` document of the mount at `target`.
fn fetch(target: &Path) -> Result<(String, StatsDoc), ExitCode> {
    let raw = ask(target, "stats")?;
    match serde_json::from_str(&raw) {
        Ok(doc) => Ok((raw, doc)),
        Err(e) => Err(fail(
            EXIT_FAILURE,
            format!(
                "{}: unreadable answer from the server ({e})",
                target.display()
            ),
        )),
    }
}

pub fn main(args: &StatsArgs) -> ExitCode {
    let (target, watch) = match args.resolve() {
        Ok(r) => r,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let (raw, doc) = match fetch(&target) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let Some(interval) = watch else {
        if args.json {
            println!("{raw}");
        } else {
            print!("{}", render(&target, &doc));
        }
        return ExitCode::SUCCESS;
    };
    let interval = Duration::from_secs_f64(interval);
    let mut last = (Instant::now(), doc);
    let mut reports = 0u64;
    if !args.json {
        println!("{}", watch_header());
    }
    while args.count.is_none_or(|n| reports < n) {
        std::thread::sleep(interval);
        let (raw, doc) = match fetch(&target) {
            Ok(d) => d,
            Err(code) => return code,
        };
        let now = Instant::now();
        if args.json {
            println!("{raw}");
        } else {
            println!("{}", watch_line(&last.1, &doc, now - last.0));
        }
        last = (now, doc);
        reports += 1;
    }
    ExitCode::SUCCESS
}

/// `memofs invalidate MOUNTPOINT`: the kernel forgets every cached name (positive and
/// negative) of the mount, for changes the server cannot see (e.g. made on another machine
/// to a network filesystem under a passthrough export). Where the kernel cannot be told that
/// at once (no `FUSE_NOTIFY_INC_EPOCH` before Linux 6.16), the server drops what it can name
/// and this says what it could not do; the exit status is non-zero if nothing was dropped.
pub fn invalidate_main(args: &TargetArgs) -> ExitCode {
    let target = args.mountpoint.display();
    let answer = match ask(&args.mountpoint, "invalidate") {
        Ok(a) => a,
        Err(code) => return code,
    };
    if let Ok(ErrorDoc { error }) = serde_json::from_str(&answer) {
        return fail(EXIT_FAILURE, format!("invalidate {target}: {error}"));
    }
    let done: InvalidateDoc = match serde_json::from_str(&answer) {
        Ok(d) => d,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("invalidate {target}: unreadable answer ({e})"),
            )
        }
    };
    if done.ok {
        if let Some(what) = done.not_done {
            eprintln!(
                "memofs invalidate: dropped the {} cached misses the server knows; {what}",
                done.names
            );
        }
        return ExitCode::SUCCESS;
    }
    fail(
        EXIT_FAILURE,
        format!(
            "invalidate {target}: nothing was invalidated: {}",
            done.not_done
                .as_deref()
                .unwrap_or("the server did not say why")
        ),
    )
}

/// `s` with control characters escaped: what the server sends is shown, never obeyed by
/// the terminal.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Bytes with a binary unit.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A latency in nanoseconds, with a unit and three significant digits at most.
fn latency(ns: u64) -> String {
    if ns == 0 {
        return "-".into();
    }
    let (v, unit) = match ns {
        n if n < 1_000 => return format!("{n} ns"),
        n if n < 1_000_000 => (n as f64 / 1e3, "µs"),
        n if n < 1_000_000_000 => (n as f64 / 1e6, "ms"),
        n => (n as f64 / 1e9, "s"),
    };
    let decimals = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.decimals$} {unit}")
}

/// `part` of `whole` as a percentage.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Use against a limit, or "no limit".
fn of_limit(used: String, used_n: u64, limit: u64, limit_text: String) -> String {
    if limit == 0 {
        format!("{used} (no limit)")
    } else {
        format!("{used} of {limit_text} ({})", percent(used_n, limit))
    }
}

/// Seconds without needless decimals.
fn secs(s: f64) -> String {
    format!("{s} s")
}

/// The table `memofs stats MOUNTPOINT` prints.
fn render(target: &Path, doc: &StatsDoc) -> String {
    let mut out = String::new();
    let what = match std::fs::metadata(target).is_ok_and(|m| m.file_type().is_socket()) {
        true => "memofs virtio-fs device at",
        false => "memofs mount at",
    };
    let _ = writeln!(out, "{what} {}\n", target.display());
    section(&mut out, "Usage", &usage_rows(&doc.usage));
    let c = &doc.cache;
    section(
        &mut out,
        "Kernel cache",
        &[
            ("cache".into(), c.mode.clone()),
            ("names (entry_timeout)".into(), secs(c.entry_timeout)),
            ("attributes (attr_timeout)".into(), secs(c.attr_timeout)),
            ("misses (negative_timeout)".into(), secs(c.negative_timeout)),
        ],
    );
    let pairs = |m: &std::collections::BTreeMap<String, String>| -> Vec<(String, String)> {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    section(&mut out, "Settings", &pairs(&doc.settings));
    section(&mut out, "Kernel features", &pairs(&doc.features));
    // The events shown here are left out of "Other events".
    let shown = std::cell::RefCell::new(Vec::new());
    let ev = |name: &'static str| {
        shown.borrow_mut().push(name);
        doc.events.get(name).copied().unwrap_or(0)
    };
    section(
        &mut out,
        "Lookups (a negative entry lets the kernel answer a miss itself)",
        &lookup_rows(ev),
    );
    requests_table(&mut out, doc);
    let events: Vec<(String, String)> = doc
        .events
        .iter()
        .filter(|(k, v)| **v > 0 && !shown.borrow().contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    if events.is_empty() {
        let _ = writeln!(out, "Other events\n  none yet");
    } else {
        section(&mut out, "Other events", &events);
    }
    out
}

/// A titled section of `name  value` rows, the names in one column (nothing if empty).
fn section(out: &mut String, title: &str, rows: &[(String, String)]) {
    if rows.is_empty() {
        return;
    }
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "{title}");
    for (k, v) in rows {
        let _ = writeln!(out, "  {:<width$}  {}", printable(k), printable(v));
    }
    out.push('\n');
}

/// Space, inodes and (for a host export) descriptors, each against its limit.
fn usage_rows(u: &UsageDoc) -> Vec<(String, String)> {
    let mut rows = vec![
        (
            "space".into(),
            of_limit(
                bytes(u.bytes_used),
                u.bytes_used,
                u.bytes_limit,
                bytes(u.bytes_limit),
            ),
        ),
        (
            "inodes".into(),
            of_limit(
                u.inodes_used.to_string(),
                u.inodes_used,
                u.inodes_limit,
                u.inodes_limit.to_string(),
            ),
        ),
    ];
    if u.descriptors_limit > 0 {
        let (held, limit) = (u.descriptors_used, u.descriptors_limit);
        let mut text = of_limit(held.to_string(), held, limit, limit.to_string());
        if u.descriptors_reopened > 0 {
            let n = u.descriptors_reopened;
            text += &format!(", {n} closed when cold and opened again");
        }
        rows.push(("host descriptors".into(), text));
    }
    rows
}

/// Lookups found and missing, negative entries and invalidations, from the event
/// counters `ev` reads.
fn lookup_rows(ev: impl Fn(&'static str) -> u64) -> Vec<(String, String)> {
    let (hits, misses) = (ev("lookup_hits"), ev("lookup_misses"));
    vec![
        (
            "found".into(),
            format!("{hits} ({})", percent(hits, hits + misses)),
        ),
        (
            "missing".into(),
            format!("{misses} ({})", percent(misses, hits + misses)),
        ),
        (
            "answered with a negative entry".into(),
            format!(
                "{} ({} of misses)",
                ev("negative_entries"),
                percent(ev("negative_entries"), misses)
            ),
        ),
        (
            "invalidations sent".into(),
            format!(
                "{} names, {} inodes, {} epoch increments ({} by fallback), {} refused",
                ev("inval_entry"),
                ev("inval_inode"),
                ev("inc_epoch"),
                ev("inval_fallback"),
                ev("inval_failed")
            ),
        ),
    ]
}

/// The requests answered, busiest first, with their share and latencies.
fn requests_table(out: &mut String, doc: &StatsDoc) {
    let mut ops: Vec<_> = doc.requests.iter().filter(|(_, o)| o.count > 0).collect();
    ops.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
    let total: u64 = ops.iter().map(|(_, o)| o.count).sum();
    let _ = writeln!(
        out,
        "Requests ({total} answered; latency from arrival to reply, percentiles interpolated)"
    );
    if !ops.is_empty() {
        let w = ops.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(7);
        let _ = writeln!(
            out,
            "  {:<w$}  {:>12}  {:>7}  {:>10}  {:>10}  {:>10}",
            "request", "count", "share", "mean", "median", "p99"
        );
        for (name, o) in ops {
            let _ = writeln!(
                out,
                "  {:<w$}  {:>12}  {:>7}  {:>10}  {:>10}  {:>10}",
                printable(name),
                o.count,
                percent(o.count, total),
                latency(o.mean_ns),
                latency(o.p50_ns),
                latency(o.p99_ns)
            );
        }
    }
    out.push('\n');
}

/// The column titles of `--watch`.
fn watch_header() -> String {
    format!(
        "{:>10}  {:>10}  {:>12}  busiest requests (per second)",
        "requests/s", "events/s", "space used"
    )
}

/// One `--watch` line: rates between two documents taken `elapsed` apart.
fn watch_line(before: &StatsDoc, after: &StatsDoc, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let mut deltas: Vec<(&str, u64)> = after
        .requests
        .iter()
        .map(|(n, o)| {
            let was = before.requests.get(n).map_or(0, |b| b.count);
            (n.as_str(), o.count.saturating_sub(was))
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    deltas.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total: u64 = deltas.iter().map(|(_, d)| d).sum();
    let events: u64 = after
        .events
        .iter()
        .map(|(n, v)| v.saturating_sub(before.events.get(n).copied().unwrap_or(0)))
        .sum();
    let busiest: Vec<String> = deltas
        .iter()
        .take(4)
        .map(|(n, d)| format!("{n} {:.0}", *d as f64 / secs))
        .collect();
    format!(
        "{:>10.0}  {:>10.0}  {:>12}  {}",
        total as f64 / secs,
        events as f64 / secs,
        bytes(after.usage.bytes_used),
        busiest.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_control::OpDoc;

    fn doc(lookups: u64, bytes_used: u64) -> StatsDoc {
        let mut d = StatsDoc::default();
        d.requests.insert(
            "LOOKUP".into(),
            OpDoc {
                count: lookups,
                mean_ns: 20_500,
                p50_ns: 16_383,
                p99_ns: 1_048_575,
            },
        );
        d.requests.insert("GETATTR".into(), OpDoc::default());
        d.events.insert("lookup_misses".into(), lookups / 2);
        d.events.insert("negative_entries".into(), lookups / 2);
        d.events.insert("busy_poll_hits".into(), 3);
        d.usage.bytes_used = bytes_used;
        d.usage.bytes_limit = 1 << 30;
        d.settings.insert("fsname".into(), "memofs".into());
        d
    }

    #[test]
    fn units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(latency(16_383), "16.4 µs");
        assert_eq!(latency(999), "999 ns");
        assert_eq!(latency(2_500), "2.50 µs");
        assert_eq!(latency(2_000_000_000), "2.00 s");
        assert_eq!(latency(0), "-");
        assert_eq!(percent(1, 8), "12.5%");
        assert_eq!(percent(1, 0), "-");
    }

    #[test]
    fn the_table_names_units_and_skips_idle_requests() {
        let t = render(Path::new("/mnt"), &doc(10, 3 << 20));
        assert!(t.contains("3.0 MiB of 1.0 GiB (0.3%)"), "{t}");
        assert!(
            t.lines().any(|l| l.contains("LOOKUP")
                && l.contains("100.0%")
                && l.contains("20.5 µs")
                && l.contains("16.4 µs")
                && l.contains("1.05 ms")),
            "{t}"
        );
        assert!(!t.contains("GETATTR"), "idle requests are left out: {t}");
        assert!(
            t.contains("answered with a negative entry  5 (100.0% of misses)"),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.contains("busy_poll_hits") && l.ends_with('3')),
            "{t}"
        );
        assert!(t.contains("Requests (10 answered"), "{t}");
    }

    #[test]
    fn control_characters_from_the_server_are_escaped() {
        let mut d = doc(1, 0);
        d.settings
            .insert("source".into(), "/srv\u{1b}[2J\nfake line".into());
        let t = render(Path::new("/mnt"), &d);
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(t.contains("/srv\\u{1b}[2J\\nfake line"), "{t}");
    }

    #[test]
    fn watch_lines_are_rates() {
        let line = watch_line(&doc(10, 0), &doc(210, 1 << 20), Duration::from_secs(2));
        assert!(line.contains("LOOKUP 100"), "{line}");
        assert!(line.trim_start().starts_with("100"), "{line}");
        assert!(line.contains("1.0 MiB"), "{line}");
    }

    #[test]
    fn the_json_document_round_trips() {
        let d = doc(3, 7);
        let back: StatsDoc = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}
