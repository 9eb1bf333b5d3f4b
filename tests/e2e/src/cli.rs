//! Running the `memofs` command line (and other tools) with a time limit, capturing output.
//!
//! Output goes to files rather than pipes: a server that daemonizes keeps the descriptors it
//! inherited, and reading a pipe to its end would then wait for the server to exit.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::mount::TempDir;

/// Default time limit for one command.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// What a finished command did.
#[derive(Debug)]
pub struct CliOutput {
    /// How it ended (`None` if it was killed for running past its limit).
    pub status: Option<ExitStatus>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// The command, for messages.
    pub command: String,
}

impl CliOutput {
    /// Exit code, if it exited normally.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Exited with status 0.
    pub fn success(&self) -> bool {
        self.code() == Some(0)
    }

    /// Panic with everything known unless it exited with status 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.success(),
            "{}",
            self.describe("expected exit status 0")
        );
        self
    }

    /// A multi-line description for failure messages.
    pub fn describe(&self, what: &str) -> String {
        format!(
            "{what}: `{}` ended with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            match self.status {
                Some(s) => s.to_string(),
                None => "a timeout (killed)".into(),
            },
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// The memofs binary: `$MEMOFS_BIN`, else `<workspace>/target/debug/memofs`, else release.
/// Panics with instructions when none exists.
pub fn memofs_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MEMOFS_BIN") {
        return PathBuf::from(p);
    }
    let ws = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ws.join("target"));
    for profile in ["debug", "release"] {
        let p = target.join(profile).join("memofs");
        if p.is_file() {
            return p.canonicalize().unwrap_or(p);
        }
    }
    panic!(
        "memofs binary not found under {}/{{debug,release}}: run `cargo build -p memofs` first, or set MEMOFS_BIN",
        target.display()
    );
}

/// Run a command with stdin from /dev/null, killing it after `limit`.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> CliOutput {
    let dir = TempDir::new("memofs-e2e-out-");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let command = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).expect("stdout file"))
        .stderr(fs::File::create(&err_path).expect("stderr file"));
    // A program the test has just written can be busy for a moment: another test thread that
    // forks while the writer's descriptor is open holds a copy of it until its exec.
    let spawned = Instant::now();
    let spawn = loop {
        match cmd.spawn() {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY)
                    && spawned.elapsed() < Duration::from_secs(2) =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => break other,
        }
    };
    let mut child = match spawn {
        Ok(c) => c,
        Err(e) => {
            return CliOutput {
                status: None,
                stdout: String::new(),
                stderr: format!("cannot start: {e}"),
                command,
            }
        }
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let read = |p: &PathBuf| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
    CliOutput {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
        command,
    }
}

/// Run `memofs ARGS...` with the default time limit.
pub fn memofs(args: &[&str]) -> CliOutput {
    let mut cmd = Command::new(memofs_bin());
    cmd.args(args);
    run_with_timeout(cmd, CLI_TIMEOUT)
}

/// Run any program with arguments, in a directory, with a time limit.
pub fn run(
    program: &str,
    args: &[&str],
    cwd: Option<&std::path::Path>,
    limit: Duration,
) -> CliOutput {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    run_with_timeout(cmd, limit)
}

/// Run a shell snippet (`sh -c`) with a time limit.
pub fn sh(script: &str, cwd: Option<&std::path::Path>, limit: Duration) -> CliOutput {
    run("sh", &["-c", script], cwd, limit)
}
