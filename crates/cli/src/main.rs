//! `memofs`: mount, unmount and inspect memofs filesystems.

mod backends;
mod daemon;
mod mount;
mod stats;
mod umount;

use std::process::ExitCode;

/// Exit status for usage and option errors (as mount(8)).
pub const EXIT_USAGE: u8 = 2;
/// Exit status for runtime failures.
pub const EXIT_FAILURE: u8 = 1;

const USAGE: &str = "\
usage: memofs mount [-o OPT[,OPT...]] [-f] [SOURCE] MOUNTPOINT
       memofs umount [-l] MOUNTPOINT
       memofs stats [--json] MOUNTPOINT
       memofs invalidate MOUNTPOINT
       memofs --version | --help

memofs is a userspace filesystem server mounted through FUSE. With no SOURCE, 'mount'
serves the in-memory (tmpfs-like) backend. 'memofs mount --help' lists every -o option.";

/// Prints `memofs: MSG` on stderr and returns `code`.
pub fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("memofs: {msg}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(EXIT_USAGE);
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "mount" => mount::main(rest),
        "umount" | "unmount" => umount::main(rest),
        "stats" => stats::main(rest),
        "invalidate" => stats::invalidate_main(rest),
        "--version" | "-V" | "version" => {
            println!("memofs {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        "--help" | "-h" | "help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => fail(EXIT_USAGE, format!("unknown command '{other}'\n{USAGE}")),
    }
}
