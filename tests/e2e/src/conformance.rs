//! The POSIX conformance suite (pjdfstest, the Rust port from crates.io) against kernel tmpfs:
//! reading its output per test case and finding every case tmpfs passes and a target does not.
//!
//! pjdfstest prints one line per test case, `NAME <spaces> RESULT`, where RESULT is `ok`,
//! `FAILED`, `skipped`, `failed as expected` or `PASSED UNEXPECTEDLY` (the last two only with
//! an `expected_failures` list, which this project does not use). The lines indented by a tab
//! that follow a case say why it failed or was skipped. A run ends with a `Summary:` line.

use std::collections::BTreeMap;
use std::fmt;

/// What pjdfstest said about one test case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `ok`.
    Pass,
    /// `FAILED` (or any result other than `ok` and `skipped`), with the indented lines after it.
    Fail(String),
    /// `skipped`, with the reason pjdfstest gave.
    Skip(String),
}

/// One pjdfstest run.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Every test case it reported, by name.
    pub cases: BTreeMap<String, Outcome>,
    /// Whether the run reached its `Summary:` line (it did not crash or get killed midway).
    pub complete: bool,
}

/// Removes ANSI colour sequences (`ESC [ ... m`), in case colour is forced on.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The result words pjdfstest prints after a case name.
const RESULTS: &[&str] = &[
    "PASSED UNEXPECTEDLY",
    "failed as expected",
    "FAILED",
    "skipped",
    "ok",
];

/// Splits `NAME <spaces> RESULT` into its two parts, if the line is a case line.
fn case_line(line: &str) -> Option<(&str, &'static str)> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    let result: &'static str = RESULTS.iter().find(|r| line.ends_with(*r))?;
    let name = line[..line.len() - result.len()].trim_end();
    if name.len() + 1 > line.len() - result.len() || name.contains(char::is_whitespace) {
        return None;
    }
    name.contains("::").then_some((name, result))
}

/// Reads pjdfstest's standard output.
pub fn parse(output: &str) -> Run {
    let mut run = Run::default();
    let mut current: Option<(String, &'static str, Vec<String>)> = None;
    let finish = |run: &mut Run, c: Option<(String, &'static str, Vec<String>)>| {
        if let Some((name, result, detail)) = c {
            let detail = detail.join("\n");
            let outcome = match result {
                "ok" => Outcome::Pass,
                "skipped" => Outcome::Skip(detail),
                _ => Outcome::Fail(detail),
            };
            run.cases.insert(name, outcome);
        }
    };
    for raw in output.lines() {
        let line = strip_ansi(raw);
        let line = line.trim_end();
        if line.starts_with("Summary:") {
            finish(&mut run, current.take());
            run.complete = true;
        } else if let Some((name, result)) = case_line(line) {
            finish(&mut run, current.take());
            current = Some((name.to_string(), result, Vec::new()));
        } else if line.starts_with('\t') {
            if let Some((_, _, detail)) = current.as_mut() {
                detail.push(line.trim().to_string());
            }
        }
    }
    finish(&mut run, current);
    run
}

/// A case the reference passes and the target does not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regression {
    /// The test case.
    pub case: String,
    /// What the target did instead.
    pub got: Outcome,
}

impl fmt::Display for Regression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, detail) = match &self.got {
            Outcome::Fail(d) => ("FAILED", d.as_str()),
            Outcome::Skip(d) => ("skipped", d.as_str()),
            Outcome::Pass => ("ok", ""),
        };
        write!(f, "{} {what}", self.case)?;
        for l in detail.lines().filter(|l| !l.is_empty()) {
            write!(f, "\n        {l}")?;
        }
        Ok(())
    }
}

/// How a target compares with the reference run.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Cases both pass.
    pub passed: usize,
    /// Cases the reference passes and the target fails, skips or never reached.
    pub regressions: Vec<Regression>,
    /// Cases the reference does not pass (failed or skipped there): not compared.
    pub not_compared: usize,
    /// Cases the target passes and the reference does not.
    pub better: Vec<String>,
}

/// Compares a target's run with the reference's, case by case.
pub fn compare(reference: &Run, target: &Run) -> Comparison {
    let mut c = Comparison::default();
    for (name, want) in &reference.cases {
        let got = target.cases.get(name);
        if *want != Outcome::Pass {
            c.not_compared += 1;
            if got == Some(&Outcome::Pass) {
                c.better.push(name.clone());
            }
            continue;
        }
        match got {
            Some(Outcome::Pass) => c.passed += 1,
            Some(other) => c.regressions.push(Regression {
                case: name.clone(),
                got: other.clone(),
            }),
            None => c.regressions.push(Regression {
                case: name.clone(),
                got: Outcome::Fail(if target.complete {
                    "not reported by this run".into()
                } else {
                    "not reached: the run ended before this case".into()
                }),
            }),
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
chmod::change_perm::regular                                           ok
rename::write_access_required_subdir                                  FAILED
\tassertion failed: matches!(rename(&a, &b), Ok(_) | Err(Errno::EACCES))
link::link_count_max                                                  skipped
\tCannot get value for LINK_MAX: filesystem limit is unknown
\u{1b}[34mopen::eexist\u{1b}[0m                                       \u{1b}[32mok\u{1b}[0m

Summary: 1 failed, 1 skipped, 2 passed, 0 expected failures, 4 total
";

    #[test]
    fn parses_each_result_and_its_detail() {
        let run = parse(SAMPLE);
        assert!(run.complete);
        assert_eq!(run.cases.len(), 4);
        assert_eq!(run.cases["chmod::change_perm::regular"], Outcome::Pass);
        assert_eq!(
            run.cases["open::eexist"],
            Outcome::Pass,
            "colour is ignored"
        );
        assert_eq!(
            run.cases["rename::write_access_required_subdir"],
            Outcome::Fail(
                "assertion failed: matches!(rename(&a, &b), Ok(_) | Err(Errno::EACCES))".into()
            )
        );
        assert_eq!(
            run.cases["link::link_count_max"],
            Outcome::Skip("Cannot get value for LINK_MAX: filesystem limit is unknown".into())
        );
    }

    #[test]
    fn a_run_without_summary_is_incomplete() {
        let run = parse("chmod::a   ok\nchmod::b   FAILED\n\tboom\n");
        assert!(!run.complete);
        assert_eq!(run.cases["chmod::b"], Outcome::Fail("boom".into()));
    }

    #[test]
    fn lines_that_are_not_cases_are_ignored() {
        let run = parse("Error: Some tests have failed\nthread 'main' panicked at x.rs:1 ok\n");
        assert!(run.cases.is_empty());
    }

    #[test]
    fn only_cases_the_reference_passes_are_compared() {
        let reference = parse(SAMPLE);
        let target = parse(
            "chmod::change_perm::regular   FAILED\n\tmode 0644 != 0600\n\
             rename::write_access_required_subdir   ok\n\
             link::link_count_max   skipped\n\tno\n\
             Summary: 1 failed\n",
        );
        let c = compare(&reference, &target);
        assert_eq!(c.passed, 0);
        assert_eq!(c.not_compared, 2);
        assert_eq!(c.better, vec!["rename::write_access_required_subdir"]);
        let cases: Vec<&str> = c.regressions.iter().map(|r| r.case.as_str()).collect();
        assert_eq!(cases, ["chmod::change_perm::regular", "open::eexist"]);
        assert_eq!(
            c.regressions[0].to_string(),
            "chmod::change_perm::regular FAILED\n        mode 0644 != 0600"
        );
        assert_eq!(
            c.regressions[1].got,
            Outcome::Fail("not reported by this run".into())
        );
    }

    #[test]
    fn a_skip_where_the_reference_passes_counts_against_the_target() {
        let reference = parse("a::b   ok\nSummary:\n");
        let target = parse("a::b   skipped\n\tguard\n");
        let c = compare(&reference, &target);
        assert_eq!(c.regressions.len(), 1);
        assert_eq!(c.regressions[0].got, Outcome::Skip("guard".into()));
    }
}
