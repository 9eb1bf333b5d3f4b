//! `memofs-e2e-summary DIR [SUITE]`: the closing summary of `make e2e` (SUITE `e2e`, the
//! default) or `make unit` (`unit`); see `memofs_e2e::summary`.
//! DIR holds, per run NAME, what `scripts/e2e.sh` left: `NAME.log` (the `cargo test` output),
//! `NAME.status` (its exit status) and `NAME.skips` (the skip records, absent when nothing
//! skipped). Prints per run and per capability, then `e2e: N passed, N failed, N skipped`;
//! exit status 1 if anything failed, a required capability was skipped, or DIR holds no run.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use memofs_e2e::summary::{summarize, Policy, RunInput};

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: memofs-e2e-summary DIR [SUITE]");
        return ExitCode::from(2);
    };
    let dir = Path::new(&dir);
    let suite = std::env::args().nth(2).unwrap_or_else(|| "e2e".into());
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".status").map(str::to_string)
            })
            .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.is_empty() {
        println!("{suite}: no run found in {}", dir.display());
        println!("{suite}: 0 passed, 1 failed, 0 skipped");
        return ExitCode::FAILURE;
    }
    let read = |name: &str, ext: &str| fs::read_to_string(dir.join(format!("{name}.{ext}")));
    let runs: Vec<RunInput> = names
        .iter()
        .map(|name| RunInput {
            name: name.clone(),
            log: read(name, "log").unwrap_or_default(),
            status: read(name, "status")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            skips: read(name, "skips").unwrap_or_default(),
        })
        .collect();
    let policy = Policy {
        suite,
        ..Policy::from_env()
    };
    let report = summarize(&runs, &policy);
    for l in &report.lines {
        println!("{l}");
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
