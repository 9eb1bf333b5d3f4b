//! `memofs migrate SOCKET HOST:PORT`: before a VM whose memofs device keeps its files (the mem
//! backend) is live-migrated, its server sends the files' data to the destination's server,
//! which listens there (`memofs virtiofsd --migration-listen HOST:PORT`), and goes on sending
//! what changes until the VMM asks for the device's state, which then carries only what
//! changed since. This command connects to the destination and hands the connection to the
//! server through its control socket; it returns once every file's data went once: the VMM
//! may migrate then.

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::process::ExitCode;

use crate::cli::MigrateArgs;
use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

pub fn main(args: &MigrateArgs) -> ExitCode {
    if !args.socket.exists() {
        return fail(
            EXIT_USAGE,
            format!(
                "{}: no such vhost-user socket (the --socket-path of the device's server)",
                args.socket.display()
            ),
        );
    }
    let started = std::time::Instant::now();
    let channel = match TcpStream::connect(&args.to) {
        Ok(c) => c,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!(
                    "cannot reach the destination's server at {}: {e} (is it started with \
                     --migration-listen {}?)",
                    args.to, args.to
                ),
            )
        }
    };
    let _ = channel.set_nodelay(true);
    let answer = match memofs_control::ahead::send_ahead(&args.socket, channel.as_fd()) {
        Ok(a) => a,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("{}: its server did not answer: {e}", args.socket.display()),
            )
        }
    };
    match serde_json::from_str::<memofs_control::AheadDoc>(&answer) {
        Ok(doc) => {
            println!(
                "sent {:.1} MiB of file data in {:.1} s; the server goes on sending what \
                 changes until the VM migrates",
                doc.bytes as f64 / (1 << 20) as f64,
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(_) => match serde_json::from_str::<memofs_control::ErrorDoc>(&answer) {
            Ok(e) => fail(EXIT_FAILURE, e.error),
            Err(_) => fail(EXIT_FAILURE, answer.trim()),
        },
    }
}
