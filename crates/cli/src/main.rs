//! `memofs`: mount, unmount and inspect memofs filesystems. The command line is declared in
//! [`cli`]; each subcommand has its module.

mod backends;
mod cli;
mod daemon;
mod logging;
mod migrate;
mod mount;
mod remount;
mod resume;
mod sandbox;
mod seccomp;
mod stats;
mod umount;
mod upgrade;
mod vhost_socket;
mod virtiofsd;

use std::process::ExitCode;

use cli::Command;

/// Exit status for usage and option errors (as mount(8)).
pub const EXIT_USAGE: u8 = 2;
/// Exit status for runtime failures.
pub const EXIT_FAILURE: u8 = 1;

/// Prints `memofs: MSG` on stderr and returns `code`.
pub fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("memofs: {msg}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let cli = match cli::parse(std::env::args_os().collect()) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match &cli.command {
        Command::Mount(args) => mount::main(args),
        Command::Umount(args) => umount::main(args),
        Command::Stats(args) => stats::main(args),
        Command::Invalidate(args) => stats::invalidate_main(args),
        Command::Virtiofsd(args) => virtiofsd::main(args),
        Command::Migrate(args) => migrate::main(args),
        Command::Upgrade(args) => upgrade::main(args),
        Command::Resume(args) => resume::main(args),
        Command::Generate { dir } => match cli::generate(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(
                EXIT_FAILURE,
                format!("cannot write into {}: {e}", dir.display()),
            ),
        },
    }
}
