//! The summary of `make e2e` and `make unit` (`scripts/e2e.sh`, `scripts/unit.sh`, binary
//! `memofs-e2e-summary`): for each run, libtest's counts from the `cargo test` output joined
//! with the skip records of [`crate::skip`], per capability, and a closing line such as
//! `e2e: N passed, N failed, N skipped` (the suite's name first).
//!
//! A skipped test returned early and libtest counted it as passed, so it is taken off the
//! passed count. It counts as skipped, or as failed when its capability is required: the
//! required set (`MEMOFS_E2E_REQUIRE`, default [`DEFAULT_REQUIRED`]) minus what the machine is
//! declared to lack (`MEMOFS_E2E_LACKS`, from `make test E2E_LACKS=...`). libtest's ignored
//! tests count as skipped (capability `ignored`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::skip::listed;

/// The capabilities a run must not skip unless declared lacking: everything the CI machine
/// has. Only `config:*` (a test that does not apply to a run's options) may be skipped there.
pub const DEFAULT_REQUIRED: &str =
    "root,dev_fuse,fuse_passthrough,fanotify,mount_namespace,tool:*,kernel:*,limit:*";

/// Which skipped capabilities fail a run.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Ids and `prefix:*` patterns that must not be skipped.
    pub required: String,
    /// Ids and patterns declared missing on this machine (taken out of `required`).
    pub lacks: String,
    /// The suite's name, first on every line (`e2e`, `unit`).
    pub suite: String,
}

impl Policy {
    /// From `MEMOFS_E2E_REQUIRE` and `MEMOFS_E2E_LACKS`.
    pub fn from_env() -> Policy {
        Policy {
            required: std::env::var("MEMOFS_E2E_REQUIRE")
                .unwrap_or_else(|_| DEFAULT_REQUIRED.to_string()),
            lacks: std::env::var("MEMOFS_E2E_LACKS").unwrap_or_default(),
            suite: "e2e".into(),
        }
    }

    /// Whether skipping `id` fails the run.
    pub fn requires(&self, id: &str) -> bool {
        listed(&self.required, id) && !listed(&self.lacks, id)
    }
}

/// libtest's counts in one `cargo test` output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
    /// Test binaries that started and printed no `test result:` line (crashed, killed).
    pub unfinished: Vec<String>,
}

/// The test binary a cargo `Running` line names: `target/debug/deps/files-0123abcd` → `files`.
fn binary_of(running: &str) -> String {
    let path = running
        .rsplit_once('(')
        .map(|(_, p)| p.trim_end_matches(')'))
        .unwrap_or(running);
    let file = path.rsplit('/').next().unwrap_or(path);
    match file.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => file.to_string(),
    }
}

/// The number before `word` in a `test result:` line (`...; 3 failed; ...`).
fn count_of(line: &str, word: &str) -> Option<usize> {
    line.split([';', '.'])
        .map(str::trim)
        .find_map(|part| part.strip_suffix(word)?.trim().parse().ok())
}

/// libtest's counts in the combined output of `cargo test` (or of one test binary).
pub fn parse_log(text: &str) -> Counts {
    let mut c = Counts::default();
    let mut open: Option<String> = None;
    for line in text.lines() {
        // cargo's status lines, right-aligned in 12 columns.
        if let Some(running) = line.strip_prefix("     Running ") {
            c.unfinished.extend(open.replace(binary_of(running)));
        } else if let Some(krate) = line.strip_prefix("   Doc-tests ") {
            c.unfinished
                .extend(open.replace(format!("{} (doc tests)", krate.trim())));
        } else if let Some(rest) = line.strip_prefix("test result: ") {
            c.passed += count_of(rest, "passed").unwrap_or(0);
            c.failed += count_of(rest, "failed").unwrap_or(0);
            c.ignored += count_of(rest, "ignored").unwrap_or(0);
            open = None;
        }
    }
    c.unfinished.extend(open);
    c
}

/// One skip record (see [`crate::skip::record_line`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub need: String,
    pub test: String,
    pub reason: String,
}

/// The records of a skip file; a line that is not a record is returned as an error.
pub fn parse_skips(text: &str) -> (Vec<Skip>, Vec<String>) {
    let mut skips = Vec::new();
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.splitn(3, '\t');
        match (f.next(), f.next(), f.next()) {
            (Some(need), Some(test), Some(reason)) if !need.is_empty() && !test.is_empty() => skips
                .push(Skip {
                    need: need.to_string(),
                    test: test.to_string(),
                    reason: reason.to_string(),
                }),
            _ => bad.push(line.to_string()),
        }
    }
    (skips, bad)
}

/// What one run left behind: its name, `cargo test` output, exit status and skip records.
#[derive(Clone, Debug)]
pub struct RunInput {
    pub name: String,
    pub log: String,
    pub status: Option<i32>,
    pub skips: String,
}

/// The summary: the lines to print (the closing line last) and the totals.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub lines: Vec<String>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Report {
    /// Whether the runs count as a success.
    pub fn ok(&self) -> bool {
        self.failed == 0
    }
}

/// Summarize the runs under `policy`.
pub fn summarize(runs: &[RunInput], policy: &Policy) -> Report {
    let mut r = Report::default();
    // Capability → (skipped, counted as failed).
    let mut per_need: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for run in runs {
        let counts = parse_log(&run.log);
        let (skips, bad) = parse_skips(&run.skips);
        let mut lines = Vec::new();
        let mut failed = counts.failed;
        let mut skipped = counts.ignored;
        if counts.ignored > 0 {
            let e = per_need.entry("ignored".into()).or_default();
            if policy.requires("ignored") {
                failed += counts.ignored;
                skipped -= counts.ignored;
                e.1 += counts.ignored;
            } else {
                e.0 += counts.ignored;
            }
        }
        for b in &counts.unfinished {
            failed += 1;
            lines.push(format!(
                "  FAIL {b}: the test binary ended without a result"
            ));
        }
        for l in &bad {
            failed += 1;
            lines.push(format!("  FAIL unreadable skip record: {l:?}"));
        }
        for s in &skips {
            let e = per_need.entry(s.need.clone()).or_default();
            if policy.requires(&s.need) {
                failed += 1;
                e.1 += 1;
                lines.push(format!(
                    "  FAIL {} (skipped, lacks {}, which is required): {}",
                    s.test, s.need, s.reason
                ));
            } else {
                skipped += 1;
                e.0 += 1;
                lines.push(format!(
                    "  SKIP {} (lacks {}): {}",
                    s.test, s.need, s.reason
                ));
            }
        }
        if skips.len() > counts.passed {
            failed += 1;
            lines.push(format!(
                "  FAIL {} skips recorded but only {} tests passed: records from another run?",
                skips.len(),
                counts.passed
            ));
        }
        let passed = counts.passed.saturating_sub(skips.len());
        match run.status {
            Some(0) => {}
            _ if failed > 0 => {}
            Some(s) => {
                failed += 1;
                lines.push(format!(
                    "  FAIL cargo test exited with status {s} and no test failed (build error?)"
                ));
            }
            None => {
                failed += 1;
                lines.push("  FAIL cargo test left no exit status".to_string());
            }
        }
        r.lines.push(format!(
            "{} {}: {passed} passed, {failed} failed, {skipped} skipped",
            policy.suite, run.name
        ));
        r.lines.extend(lines);
        r.passed += passed;
        r.failed += failed;
        r.skipped += skipped;
    }
    if !per_need.is_empty() {
        let mut l = format!("{} skipped per capability:", policy.suite);
        for (need, (skipped, failed)) in &per_need {
            let _ = write!(l, " {need} {}", skipped + failed);
            if *failed > 0 {
                let _ = write!(l, " (required: counted as failed)");
            }
            l.push(';');
        }
        l.pop();
        r.lines.push(l);
    }
    let lacks = if policy.lacks.trim().is_empty() {
        "none"
    } else {
        policy.lacks.trim()
    };
    r.lines.push(format!(
        "{} required capabilities: {}; declared lacking (E2E_LACKS): {lacks}",
        policy.suite, policy.required
    ));
    let missing: Vec<&str> = per_need
        .iter()
        .filter(|(_, (_, failed))| *failed > 0)
        .map(|(n, _)| n.as_str())
        .collect();
    if !missing.is_empty() {
        r.lines.push(format!(
            "{0}: tests were skipped for lack of required capabilities ({1}); on a machine \
             without them run `make test E2E_LACKS={1}` to have them reported as skipped",
            policy.suite,
            missing.join(",")
        ));
    }
    r.lines.push(format!(
        "{}: {} passed, {} failed, {} skipped",
        policy.suite, r.passed, r.failed, r.skipped
    ));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
   Compiling memofs-e2e v0.1.0 (/w/tests/e2e)
     Running unittests src/lib.rs (target/debug/deps/memofs_e2e-127e658e22a98773)

running 2 tests
test skip::tests::a ... ok
test skip::tests::b ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/files.rs (target/debug/deps/files-f8a168562249a1b4)

running 4 tests
test a ... ok
test b ... SKIP files::b: lacks root: needs root
ok
test c ... ignored
test d ... FAILED

failures:

---- d stdout ----
  | test result: ok. 99 passed; 0 failed; 0 ignored (quoted output is not counted)

test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.00s

     Running tests/mmap.rs (target/debug/deps/mmap-0123456789abcdef)

running 3 tests
test x ... ok
error: test failed, to rerun pass `-p memofs-e2e --test mmap`
   Doc-tests memofs_e2e

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

    fn policy(required: &str, lacks: &str) -> Policy {
        Policy {
            required: required.into(),
            lacks: lacks.into(),
            suite: "e2e".into(),
        }
    }

    fn run(log: &str, status: i32, skips: &str) -> RunInput {
        RunInput {
            name: "default".into(),
            log: log.into(),
            status: Some(status),
            skips: skips.into(),
        }
    }

    #[test]
    fn logs_are_counted_per_binary_and_crashed_binaries_found() {
        let c = parse_log(LOG);
        assert_eq!((c.passed, c.failed, c.ignored), (4, 1, 1));
        assert_eq!(c.unfinished, vec!["mmap".to_string()]);
        assert_eq!(
            binary_of("tests/a_b.rs (target/debug/deps/a_b-00ff)"),
            "a_b"
        );
    }

    #[test]
    fn skip_records_are_parsed_and_bad_lines_kept() {
        let (s, bad) = parse_skips("root\tfiles::b\tneeds root\n\nnonsense\ntool:git\tr::g\t\n");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].need, "root");
        assert_eq!(s[0].test, "files::b");
        assert_eq!(s[1].need, "tool:git");
        assert_eq!(bad, vec!["nonsense".to_string()]);
    }

    #[test]
    fn skipped_tests_leave_the_passed_count() {
        let log = "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured\n";
        let skips = "config:passthrough_off\topt::huge\tpassthrough=off\ntool:git\tr::git\tgit not installed\n";
        let r = summarize(&[run(log, 0, skips)], &policy("root", ""));
        assert_eq!((r.passed, r.failed, r.skipped), (3, 0, 2));
        assert!(r.ok());
        assert_eq!(
            r.lines.last().unwrap(),
            "e2e: 3 passed, 0 failed, 2 skipped"
        );
        assert!(r
            .lines
            .contains(&"e2e skipped per capability: config:passthrough_off 1; tool:git 1".into()));
    }

    #[test]
    fn a_required_capability_skipped_fails_unless_declared_lacking() {
        let log = "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured\n";
        let skips = "root\tfiles::a\tneeds root\nroot\tfiles::b\tneeds root\n";
        let r = summarize(&[run(log, 0, skips)], &policy(DEFAULT_REQUIRED, ""));
        assert_eq!((r.passed, r.failed, r.skipped), (1, 2, 0));
        assert!(!r.ok());
        assert!(r.lines.iter().any(|l| l.contains("E2E_LACKS=root")));
        let r = summarize(&[run(log, 0, skips)], &policy(DEFAULT_REQUIRED, "root"));
        assert_eq!((r.passed, r.failed, r.skipped), (1, 0, 2));
        assert!(r.ok());
        // Patterns: tool:* requires every tool.
        let r = summarize(
            &[run(log, 0, "tool:git\tr::g\tgit not installed\n")],
            &policy("tool:*", ""),
        );
        assert_eq!(r.failed, 1);
    }

    #[test]
    fn failures_crashes_and_bad_exits_count() {
        let r = summarize(&[run(LOG, 101, "")], &policy("", ""));
        // d failed, mmap ended without a result; c was ignored.
        assert_eq!((r.passed, r.failed, r.skipped), (4, 2, 1));
        // A build error: no tests, a failed exit.
        let r = summarize(
            &[run("error[E0425]: cannot find value\n", 101, "")],
            &policy("", ""),
        );
        assert_eq!(r.failed, 1);
        // More records than passed tests cannot be right.
        let r = summarize(
            &[run(
                "test result: ok. 0 passed; 0 failed; 0 ignored\n",
                0,
                "root\tf::a\tx\n",
            )],
            &policy("", ""),
        );
        assert!(!r.ok());
    }

    #[test]
    fn runs_add_up() {
        let log = "test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured\n";
        let mut off = run(log, 0, "config:passthrough_off\to::h\toff\n");
        off.name = "passthrough-off".into();
        let r = summarize(&[run(log, 0, ""), off], &policy(DEFAULT_REQUIRED, ""));
        assert_eq!(r.lines[0], "e2e default: 4 passed, 0 failed, 0 skipped");
        assert_eq!(
            r.lines[1],
            "e2e passthrough-off: 3 passed, 0 failed, 1 skipped"
        );
        assert_eq!(
            r.lines.last().unwrap(),
            "e2e: 7 passed, 0 failed, 1 skipped"
        );
    }
}
