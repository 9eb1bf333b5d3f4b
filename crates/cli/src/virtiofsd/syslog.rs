//! `--syslog`: messages to the system log instead of standard error, as virtiofsd sends
//! them: facility `user`, the program's name and process id as the ident
//! (`memofs-virtiofsd[PID]` when started under virtiofsd's name), each record at its level.
//!
//! The socket is connected before the sandbox (which hides `/dev/log`) and kept. Where the
//! host has no system log socket the server does not start: virtiofsd would send its messages
//! to UDP port 514 of the loopback address, where nothing may listen, and they would be lost.

use std::path::Path;

/// Sends this process's log records at `level` and above to the system log.
pub fn init(level: &str) -> Result<(), String> {
    let program = std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "memofs".into());
    let formatter = syslog::Formatter3164 {
        facility: syslog::Facility::LOG_USER,
        hostname: None,
        process: program,
        pid: std::process::id(),
    };
    let logger = syslog::unix(formatter).map_err(|e| {
        format!(
            "--syslog: no system log to send messages to (/dev/log, /var/run/syslog, \
             /var/run/log: {e}); start a syslog daemon, or leave --syslog out to log to \
             standard error"
        )
    })?;
    let max: log::LevelFilter = level
        .parse()
        .map_err(|_| format!("--syslog: no log level {level:?}"))?;
    let logger = crate::logging::RateLimited::new(syslog::BasicLogger::new(logger));
    log::set_boxed_logger(Box::new(logger)).map_err(|e| format!("--syslog: {e}"))?;
    log::set_max_level(max);
    Ok(())
}
