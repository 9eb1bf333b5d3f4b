//! The POSIX conformance suite, pjdfstest (the Rust port, `scripts/setup.sh` installs it), on
//! kernel tmpfs and on memofs: the mem backend with kernel-backed data (default), with the
//! server page store (`passthrough=off`), and the passthrough backend exporting a fresh tmpfs,
//! all mounted with `allow_other` (the suite acts as other users). Fails, listing them, on
//! every test case that tmpfs passes and a memofs target fails, skips or does not reach;
//! cases tmpfs does not pass are not compared. No list of expected failures. Then memofs
//! over a distributed filesystem (machine A of a SeaweedFS bed, then of a JuiceFS one)
//! against the engine's own mount: the cases the engine itself does not pass are listed,
//! the others must pass through
//! memofs too.
//!
//! Not run by plain `cargo test` (`test = false`): `make conformance` runs it, as
//! `cargo test -p memofs-e2e --test conformance`. It prints one summary line per target and
//! ends with `conformance: N passed, N failed, N skipped` (cases times targets; when the
//! suite cannot run at all, one skipped). pjdfstest's full output for each target is kept in
//! `target/conformance/TARGET.txt`.
//!
//! Environment: `PJDFSTEST` (the binary; default: `pjdfstest` on `PATH`, else
//! `$CARGO_HOME/bin`), and the e2e harness's `MEMOFS_BIN`, `MEMOFS_E2E_TMPDIR`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use memofs_e2e::cli::run_with_timeout;
use memofs_e2e::conformance::{compare, parse, Outcome, Run};
use memofs_e2e::dfs::Cluster;
use memofs_e2e::{is_root, which, Mount, TempDir};

/// How long one pjdfstest run may take (it takes seconds; this bounds a hang).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// The users and groups the suite switches to, as `pjdfstest.toml` names them (Debian's
/// base-passwd has both).
const DUMMY_USERS: &[(&str, &str)] = &[("nobody", "nogroup"), ("daemon", "daemon")];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pjdfstest binary, if installed.
fn pjdfstest() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PJDFSTEST") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    which("pjdfstest").or_else(|| {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        let p = home.join("bin/pjdfstest");
        p.is_file().then_some(p)
    })
}

/// The gid of a group in `/etc/group`, and the primary gid of a user in `/etc/passwd`.
fn id_from(file: &str, name: &str, field: usize) -> Option<String> {
    fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then(|| f.get(field).map(|s| s.to_string()))?
    })
}

/// Why the suite cannot run here, if it cannot.
/// Why the suite cannot run here, with the capability that is missing (as the e2e summary
/// names them: `tests/e2e/src/skip.rs`).
fn cannot_run() -> Option<(&'static str, String)> {
    if !is_root() {
        return Some((
            "root",
            "needs root (to mount, and pjdfstest switches users)".into(),
        ));
    }
    if !Path::new("/dev/fuse").exists() {
        return Some(("dev_fuse", "/dev/fuse is missing (modprobe fuse)".into()));
    }
    if pjdfstest().is_none() {
        return Some((
            "tool:pjdfstest",
            "pjdfstest is not installed (scripts/setup.sh installs it; or set PJDFSTEST)".into(),
        ));
    }
    for (user, group) in DUMMY_USERS {
        let ugid = id_from("/etc/passwd", user, 3);
        if ugid.is_none() || ugid != id_from("/etc/group", group, 2) {
            return Some((
                "tool:pjdfstest",
                format!(
                    "pjdfstest needs user {user} with primary group {group} (see tests/e2e/pjdfstest.toml)"
                ),
            ));
        }
    }
    None
}

/// One pjdfstest run in `dir` (of the cases matching `patterns`, or all), its output kept
/// in `log`.
fn run_suite(dir: &Path, secondary: &Path, log: &Path, patterns: &[&str]) -> Result<Run, String> {
    let mut cmd = Command::new(pjdfstest().expect("checked by cannot_run"));
    cmd.arg("-c")
        .arg(manifest_dir().join("pjdfstest.toml"))
        .arg("-p")
        .arg(dir)
        .arg("-s")
        .arg(secondary)
        .args(patterns)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0");
    let out = run_with_timeout(cmd, RUN_LIMIT);
    let _ = fs::write(log, format!("{}{}", out.stdout, out.stderr));
    let run = parse(&out.stdout);
    if run.cases.is_empty() {
        return Err(out.describe("pjdfstest reported no test case"));
    }
    if out.status.is_none() {
        eprintln!("conformance: pjdfstest was killed after {RUN_LIMIT:?}");
    }
    Ok(run)
}

/// Test cases counted over the targets.
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// The memofs targets: a name (the log file's), a description, and how to mount it (the
/// first mount of the list is the one tested).
type Target = (
    &'static str,
    &'static str,
    fn() -> Result<Vec<Mount>, String>,
);

const TARGETS: &[Target] = &[
    (
        "mem",
        "memofs mem backend, default (kernel-backed data)",
        || Ok(vec![Mount::try_memofs(&["allow_other"])?]),
    ),
    (
        "mem-pagestore",
        "memofs mem backend, passthrough=off (page store)",
        || {
            Ok(vec![Mount::try_memofs(&[
                "allow_other",
                "passthrough=off",
            ])?])
        },
    ),
    (
        "passthrough",
        "memofs passthrough backend (export of a fresh tmpfs)",
        || {
            // The export comes first in the list: a Vec drops front to back, so it is
            // unmounted before the tmpfs it exports.
            let host = Mount::tmpfs(&[]);
            let export = Mount::try_memofs_source(host.path(), &["allow_other"])?;
            Ok(vec![export, host])
        },
    ),
];

/// One comparison: a reference run and where the targets' cases are counted.
struct Against<'a> {
    reference: &'a Run,
    reference_name: &'static str,
    baseline_pass: usize,
    logs: &'a Path,
    secondary: &'a Path,
    total: &'a mut Tally,
    failures: &'a mut Vec<String>,
}

impl Against<'_> {
    /// Runs the suite on the target `mount` makes (`name` names its log), and counts every
    /// case the reference passes and it does not as a failure, after a second try alone.
    fn target(&mut self, name: &str, what: &str, mount: &dyn Fn() -> Result<Vec<Mount>, String>) {
        let start = Instant::now();
        // Mounted only while pjdfstest runs (dropping the mounts unmounts them).
        let result = mount()
            .map_err(|e| format!("did not mount: {e}"))
            .and_then(|mounts| {
                let log = self.logs.join(format!("{name}.txt"));
                run_suite(mounts[0].path(), self.secondary, &log, &[])
            });
        let run = match result {
            Ok(r) => r,
            Err(e) => {
                println!("conformance: {what}: FAILED: {e}");
                self.total.failed += self.baseline_pass;
                self.failures
                    .push(format!("{what}: {}", e.lines().next().unwrap_or("")));
                return;
            }
        };
        let mut c = compare(self.reference, &run);
        // A case that fails once is run again alone, on a fresh mount: one that passes then
        // is reported as intermittent (named in the output, counted as passed), one that
        // fails again is a failure.
        let mut intermittent = Vec::new();
        c.regressions.retain(|r| {
            let again = mount().and_then(|mounts| {
                let log = self
                    .logs
                    .join(format!("{name}-again-{}.txt", r.case.replace("::", "-")));
                run_suite(mounts[0].path(), self.secondary, &log, &[&r.case])
            });
            let passed = again.is_ok_and(|a| a.cases.get(&r.case) == Some(&Outcome::Pass));
            if passed {
                intermittent.push(r.clone());
            }
            !passed
        });
        c.passed += intermittent.len();
        println!(
            "conformance: {what}: {} passed, {} failed of the {} {} passes ({:.1} s){}",
            c.passed,
            c.regressions.len(),
            self.baseline_pass,
            self.reference_name,
            start.elapsed().as_secs_f64(),
            if c.better.is_empty() {
                String::new()
            } else {
                format!(
                    "; passes {} that {} does not: {}",
                    c.better.len(),
                    self.reference_name,
                    c.better.join(", ")
                )
            }
        );
        for r in &intermittent {
            println!("    INTERMITTENT (failed, then passed alone on a fresh mount): {r}");
        }
        for r in &c.regressions {
            println!("    {r}");
            self.failures.push(format!("{what}: {}", r.case));
        }
        self.total.passed += c.passed;
        self.total.failed += c.regressions.len();
        self.total.skipped += c.not_compared;
    }
}

/// The distributed filesystems compared: the bed's engine (`scripts/dfs/ENGINE.sh`) and its
/// name.
const ENGINES: &[(&str, &str)] = &[("seaweedfs", "SeaweedFS"), ("juicefs", "JuiceFS")];

/// memofs's passthrough backend over a distributed filesystem (machine A of `engine`'s bed,
/// `scripts/dfs/ENGINE.sh`), compared with the engine's own mount rather than tmpfs: a
/// case the engine itself does not pass is the engine's, listed and not compared. Each run
/// gets a fresh directory of A.
fn over_a_distributed_filesystem(
    (engine, name): (&'static str, &'static str),
    logs: &Path,
    secondary: &Path,
    total: &mut Tally,
    failures: &mut Vec<String>,
) {
    let what = format!("memofs over {name} (machine A)");
    let cluster = match Cluster::start(engine) {
        Ok(c) => c,
        Err(e) => {
            let need = format!("tool:{engine}");
            if memofs_e2e::summary::Policy::from_env().requires(&need) {
                println!("conformance: {what}: FAILED: the bed did not start: {e}");
                total.failed += 1;
                failures.push(format!("{what}: the bed did not start"));
            } else {
                println!("conformance: {what}: SKIPPED ({need}): the bed did not start: {e}");
                total.skipped += 1;
            }
            return;
        }
    };
    let a = cluster.machine("a");
    let made = std::cell::Cell::new(0);
    let fresh = || -> Result<PathBuf, String> {
        made.set(made.get() + 1);
        let dir = a.join(format!("run{}", made.get()));
        fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(dir)
    };
    let start = Instant::now();
    let reference = match fresh()
        .and_then(|own| run_suite(&own, secondary, &logs.join(format!("{engine}.txt")), &[]))
    {
        Ok(r) => r,
        Err(e) => {
            println!("conformance: {what}: FAILED: {name}'s own mount did not run: {e}");
            total.failed += 1;
            failures.push(format!("{what}: {name}'s own run"));
            return;
        }
    };
    let own: Vec<&String> = reference
        .cases
        .iter()
        .filter(|(_, o)| **o != Outcome::Pass)
        .map(|(case, _)| case)
        .collect();
    let passes = reference.cases.len() - own.len();
    println!(
        "conformance: {name}'s own mount (baseline): {passes} of {} cases pass ({:.1} s); \
         it does not pass these {}, which are not compared:",
        reference.cases.len(),
        start.elapsed().as_secs_f64(),
        own.len()
    );
    for case in &own {
        let why = match &reference.cases[*case] {
            Outcome::Skip(reason) => format!("skipped ({})", reason.trim()),
            _ => "fails".to_string(),
        };
        println!("    {name} {why}: {case}");
    }
    let mut against = Against {
        reference: &reference,
        reference_name: name,
        baseline_pass: passes,
        logs,
        secondary,
        total,
        failures,
    };
    against.target(&format!("{engine}-memofs"), &what, &|| {
        Ok(vec![Mount::try_memofs_source(&fresh()?, &["allow_other"])?])
    });
}

fn main() -> ExitCode {
    if let Some((need, why)) = cannot_run() {
        // A skip fails the run unless the machine is declared to lack the capability
        // (`make test E2E_LACKS=...`), as for every other e2e test.
        if memofs_e2e::summary::Policy::from_env().requires(need) {
            println!("conformance: FAILED: cannot run ({need} is required): {why}");
            println!("conformance: 0 passed, 1 failed, 0 skipped");
            return ExitCode::FAILURE;
        }
        println!("conformance: SKIPPED ({need}): {why}");
        println!("conformance: 0 passed, 0 failed, 1 skipped");
        return ExitCode::SUCCESS;
    }
    let logs = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../target"))
        .join("conformance");
    let _ = fs::create_dir_all(&logs);
    let logs = logs.canonicalize().unwrap_or(logs);
    if let Ok(v) = std::env::var("MEMOFS_E2E_OPTS") {
        println!("conformance: every memofs mount also gets MEMOFS_E2E_OPTS={v}");
    }
    // A directory on another file system, for the cross-device (EXDEV) cases.
    let secondary = TempDir::new("memofs-conformance-secondary-");

    let start = Instant::now();
    let reference = {
        let tmpfs = Mount::tmpfs(&[]);
        match run_suite(tmpfs.path(), secondary.path(), &logs.join("tmpfs.txt"), &[]) {
            Ok(r) => r,
            Err(e) => {
                println!("conformance: FAILED: the tmpfs baseline did not run: {e}");
                println!("conformance: 0 passed, 1 failed, 0 skipped");
                return ExitCode::FAILURE;
            }
        }
    };
    let baseline_pass = reference
        .cases
        .values()
        .filter(|o| **o == Outcome::Pass)
        .count();
    println!(
        "conformance: kernel tmpfs (baseline): {baseline_pass} of {} cases pass{}; the others are not compared ({:.1} s)",
        reference.cases.len(),
        if reference.complete { "" } else { " (run incomplete)" },
        start.elapsed().as_secs_f64()
    );

    let mut total = Tally {
        passed: 0,
        failed: 0,
        skipped: 0,
    };
    let mut failures = Vec::new();
    let mut against = Against {
        reference: &reference,
        reference_name: "tmpfs",
        baseline_pass,
        logs: &logs,
        secondary: secondary.path(),
        total: &mut total,
        failures: &mut failures,
    };
    for (name, what, mount) in TARGETS {
        against.target(name, what, &|| mount());
    }
    for engine in ENGINES {
        over_a_distributed_filesystem(*engine, &logs, secondary.path(), &mut total, &mut failures);
    }

    if !failures.is_empty() {
        println!(
            "conformance: FAILED where kernel tmpfs passes (pjdfstest's output per target: {}):",
            logs.display()
        );
        for f in &failures {
            println!("    {f}");
        }
    }
    println!(
        "conformance: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.skipped
    );
    if total.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
