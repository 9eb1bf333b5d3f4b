//! `memofs-steps`: the FUSE requests each step of a small real workload costs on this kernel,
//! counted by the server (`memofs stats`), for the table of requests per kernel in
//! docs/performance.md. The VM runner runs it in each guest (scripts/vm/steps.txt).
//!
//! On a mem-backend mount with the default options, as root: a tree of 40 directories of 25
//! small text files is unpacked with `tar`, listed with `find`, sized with `du`, searched with
//! `grep -r`, committed with `git` (where the guest has it) and checked with `git status` (the
//! second run counted: warm), then removed with `rm -rf`. Before every step but the warm
//! `git status` the kernel drops its caches (`drop_caches`), so the step starts cold.
//!
//! Prints one line per step: the requests the caller waited for (all but FORGET,
//! BATCH_FORGET, RELEASE, RELEASEDIR and INTERRUPT, which the kernel sends without waiting),
//! then each request type's count; then the INIT capabilities the kernel offered and memofs
//! did not take. Exit status 2 if it could not measure (not root, no
//! mount), 1 if a step failed. A measurement, not a test.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode};

use memofs_e2e::checks::stats_json;
use memofs_e2e::{is_root, Mount};

/// Requests the kernel sends without waiting for the answer.
const UNWAITED: &[&str] = &[
    "FORGET",
    "BATCH_FORGET",
    "RELEASE",
    "RELEASEDIR",
    "INTERRUPT",
];

/// Request counts by type, from `memofs stats --json`'s `requests` object.
fn requests(mnt: &Path) -> Result<BTreeMap<String, u64>, String> {
    let doc = stats_json(mnt)?;
    let body = doc
        .split_once("\"requests\":{")
        .map(|(_, rest)| rest)
        .ok_or("no requests in the stats")?;
    let mut counts = BTreeMap::new();
    // Each entry: "NAME":{"count":N,...}
    for part in body.split("},").take_while(|p| !p.starts_with('}')) {
        let Some((name, rest)) = part.trim_start_matches('{').split_once("\":{\"count\":") else {
            break;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        counts.insert(
            name.trim_matches('"').to_string(),
            digits.parse().unwrap_or(0),
        );
        if rest.contains("}}") {
            break;
        }
    }
    Ok(counts)
}

fn drop_caches() {
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
}

/// Runs `cmd` in `dir` (output discarded); whether it succeeded.
fn run(dir: &Path, cmd: &[&str]) -> bool {
    Command::new(cmd[0])
        .args(&cmd[1..])
        .current_dir(dir)
        .env("HOME", "/tmp")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tree: 40 directories of 25 files of a few lines each.
fn make_tree(root: &Path) -> std::io::Result<()> {
    for d in 0..40 {
        let dir = root.join(format!("dir{d:02}"));
        fs::create_dir_all(&dir)?;
        for f in 0..25 {
            let text = format!("file {d}/{f}\nsome words to search for\nneedle{}\n", d * f);
            fs::write(dir.join(format!("file{f:02}.txt")), text.repeat(20))?;
        }
    }
    Ok(())
}

/// Prints the requests of one step: the difference of two counts.
fn report(step: &str, before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) {
    let mut delta: Vec<(&String, u64)> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(k, v)| *v > 0 && k.as_str() != "IOCTL" && k.as_str() != "STATFS")
        .collect();
    delta.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let waited: u64 = delta
        .iter()
        .filter(|(k, _)| !UNWAITED.contains(&k.as_str()))
        .map(|(_, v)| v)
        .sum();
    let each: Vec<String> = delta.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("steps {step}: {waited} waited; {}", each.join(", "));
}

fn main() -> ExitCode {
    if !is_root() {
        eprintln!("memofs-steps: needs root (it mounts memofs and drops caches)");
        return ExitCode::from(2);
    }
    let src = Mount::tmpfs(&["size=64m"]);
    let m = match Mount::try_memofs(&[]) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("memofs-steps: cannot mount: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = make_tree(&src.join("tree")) {
        eprintln!("memofs-steps: cannot make the tree: {e}");
        return ExitCode::from(2);
    }
    let tarball = src.join("tree.tar");
    let tar = tarball.to_str().expect("utf-8 path");
    if !run(src.path(), &["tar", "-cf", tar, "tree"]) {
        eprintln!("memofs-steps: cannot make the tarball");
        return ExitCode::from(2);
    }
    let git = Command::new("git").arg("--version").output().is_ok();
    let git_setup: &[&[&str]] = &[
        &["git", "-c", "init.templateDir=", "init", "-q"],
        &["git", "add", "-A"],
        &[
            "git",
            "-c",
            "user.name=m",
            "-c",
            "user.email=m@m",
            "commit",
            "-qm",
            "tree",
        ],
    ];
    let mut steps: Vec<(&str, Vec<Vec<&str>>, bool)> = vec![
        ("untar", vec![vec!["tar", "-xf", tar]], true),
        ("find", vec![vec!["find", "tree"]], true),
        ("du", vec![vec!["du", "-s", "tree"]], true),
        (
            "grep -r",
            vec![vec!["grep", "-r", "-c", "needle42", "tree"]],
            true,
        ),
    ];
    if git {
        steps.push((
            "git status (warm)",
            vec![vec!["git", "status", "--short"]],
            false,
        ));
    }
    steps.push(("rm -rf", vec![vec!["rm", "-rf", "tree"]], true));
    let mut failed = false;
    for (step, cmds, cold) in steps {
        if step.starts_with("git status") {
            let tree = m.join("tree");
            if !git_setup.iter().all(|c| run(&tree, c)) || !run(&tree, &["git", "status"]) {
                eprintln!("memofs-steps: git could not set up the tree");
                failed = true;
                continue;
            }
        }
        if cold {
            drop_caches();
        }
        let before = requests(m.path());
        let dir = if step.starts_with("git") {
            m.join("tree")
        } else {
            m.path().to_path_buf()
        };
        let ok = cmds.iter().all(|c| run(&dir, c));
        let after = requests(m.path());
        match (ok, before, after) {
            (true, Ok(b), Ok(a)) => report(step, &b, &a),
            (ok, b, a) => {
                eprintln!("memofs-steps: {step} failed (ran: {ok}; stats: {b:?} {a:?})");
                failed = true;
            }
        }
    }
    if !git {
        println!("steps git status (warm): no git in this guest");
    }
    if let Ok(doc) = stats_json(m.path()) {
        let offered = doc
            .split_once("\"init_offered_not_taken\":\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map_or("(not reported)", |(v, _)| v);
        println!("steps kernel offers, memofs does not take: {offered}");
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
