//! The control socket behind `memofs stats` and `memofs invalidate`.
//!
//! Each mount listens on the abstract Unix socket `memofs-stats:<st_dev of the mount>`. A
//! client writes one command (`stats` or `invalidate`), shuts down its sending side, and
//! gets one JSON document back. The name needs no file on disk (so nothing is left behind
//! when the server dies) and is found from the mount point alone. Reading counters sums
//! per-thread slots: it never stops the request threads. `invalidate` (drop every name the
//! kernel caches) is refused unless the caller is root or the server's own user.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

use memofs_core::{BackendUsage, CachePolicy};

use memofs_request::invalidate::Invalidated;
use memofs_request::Stats;

/// Connects to the control socket of the mount whose root has device `dev`.
fn connect(dev: u64) -> io::Result<UnixStream> {
    let addr = SocketAddr::from_abstract_name(socket_name(dev).as_bytes())?;
    UnixStream::connect_addr(&addr)
}

/// The process id of the server of the mount whose root has device `dev` (the process that
/// listens on its control socket), or `None` if it cannot be told.
pub fn server_pid(dev: u64) -> Option<i32> {
    peer_cred(&connect(dev).ok()?).map(|c| c.pid)
}

/// Abstract socket name for the mount whose root has device `dev`.
pub fn socket_name(dev: u64) -> String {
    format!("memofs-stats:{dev}")
}

/// Everything `memofs stats` reports, and what `memofs invalidate` acts on.
pub struct StatsSource {
    /// What `invalidate` runs (the mount's notification sender).
    pub invalidate: Box<dyn Fn() -> Invalidated + Send + Sync>,
    /// Which kernel features the mount found and uses, read on demand (name, what).
    pub features: Box<dyn Fn() -> Vec<(String, String)> + Send + Sync>,
    /// Request counters.
    pub stats: Arc<Stats>,
    /// Effective cache policy.
    pub policy: CachePolicy,
    /// Backend usage, read on demand.
    pub usage: Box<dyn Fn() -> BackendUsage + Send + Sync>,
    /// Other settings worth showing (name, value).
    pub settings: Vec<(String, String)>,
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl StatsSource {
    /// The JSON document served.
    pub fn to_json(&self) -> String {
        let snap = self.stats.snapshot();
        let ops: Vec<String> = snap
            .ops
            .iter()
            .map(|(n, c, p50, p99)| {
                format!(
                    "{}:{{\"count\":{c},\"p50_ns\":{p50},\"p99_ns\":{p99}}}",
                    json_str(n)
                )
            })
            .collect();
        let events: Vec<String> = snap
            .events
            .iter()
            .map(|(n, v)| format!("{}:{v}", json_str(n)))
            .collect();
        let u = (self.usage)();
        let p = &self.policy;
        let pairs = |list: &[(String, String)]| {
            list.iter()
                .map(|(k, v)| format!("{}:{}", json_str(k), json_str(v)))
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "{{\"requests\":{{{}}},\"events\":{{{}}},\"cache\":{{\"mode\":{},\"entry_timeout\":{},\"attr_timeout\":{},\"negative_timeout\":{}}},\"usage\":{{\"bytes_used\":{},\"bytes_limit\":{},\"inodes_used\":{},\"inodes_limit\":{}}},\"settings\":{{{}}},\"features\":{{{}}}}}",
            ops.join(","),
            events.join(","),
            json_str(p.mode.name()),
            p.entry_timeout.as_secs_f64(),
            p.attr_timeout.as_secs_f64(),
            p.negative_timeout.as_secs_f64(),
            u.bytes_used,
            u.bytes_limit,
            u.inodes_used,
            u.inodes_limit,
            pairs(&self.settings),
            pairs(&(self.features)())
        )
    }
}

/// Credentials of the process at the other end of `conn`.
fn peer_cred(conn: &UnixStream) -> Option<libc::ucred> {
    // SAFETY: `cred` is a properly sized ucred the call fills; `len` holds its size.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let r = libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        );
        (r == 0).then_some(cred)
    }
}

/// Uid of the process at the other end of `conn`.
fn peer_uid(conn: &UnixStream) -> Option<u32> {
    peer_cred(conn).map(|c| c.uid)
}

impl StatsSource {
    /// The answer to one command from a client with uid `peer`.
    fn answer(&self, command: &str, peer: Option<u32>) -> String {
        match command.trim() {
            "" | "stats" => self.to_json(),
            "invalidate" => {
                // SAFETY: geteuid has no preconditions.
                let own = unsafe { libc::geteuid() };
                if peer.is_some_and(|uid| uid == 0 || uid == own) {
                    invalidated_json(&(self.invalidate)())
                } else {
                    "{\"error\":\"only root or the mount's owner may invalidate\"}".into()
                }
            }
            other => format!(
                "{{\"error\":{}}}",
                json_str(&format!("unknown command '{other}'"))
            ),
        }
    }
}

/// The answer to `invalidate`: `ok` is whether anything was invalidated; `not_done` says
/// what could not be.
fn invalidated_json(done: &Invalidated) -> String {
    let mut out = format!(
        "{{\"ok\":{},\"epoch\":{},\"names\":{}",
        done.did_something(),
        done.epoch,
        done.names
    );
    if let Some(what) = &done.not_done {
        out.push_str(&format!(",\"not_done\":{}", json_str(what)));
    }
    out.push('}');
    out
}

/// Starts the control socket for the mount with device `dev` on a background thread.
pub fn serve(dev: u64, source: StatsSource) -> io::Result<()> {
    let addr = SocketAddr::from_abstract_name(socket_name(dev).as_bytes())?;
    // A server that just lost its mount (same device number) may not have exited yet.
    let mut tries = 0;
    let listener = loop {
        match UnixListener::bind_addr(&addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            r => break r?,
        }
    };
    std::thread::Builder::new()
        .name("memofs-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                let mut command = Vec::new();
                let _ = (&mut conn).take(64).read_to_end(&mut command);
                let command = String::from_utf8_lossy(&command);
                let _ = conn.write_all(source.answer(&command, peer_uid(&conn)).as_bytes());
            }
        })?;
    Ok(())
}

/// Sends `command` to the mount with device `dev` and returns its JSON answer.
pub fn request(dev: u64, command: &str) -> io::Result<String> {
    let mut conn = connect(dev)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.write_all(command.as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    conn.read_to_string(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_section_and_escapes() {
        let src = StatsSource {
            invalidate: Box::new(|| unreachable!()),
            features: Box::new(|| vec![("fuse_passthrough".into(), "yes".into())]),
            stats: Arc::new(Stats::new()),
            policy: CachePolicy::default(),
            usage: Box::new(BackendUsage::default),
            settings: vec![("fsname".into(), "a\"b".into())],
        };
        src.stats
            .record(memofs_request::Kind::Lookup, std::time::Instant::now());
        let j = src.to_json();
        assert!(j.contains("\"LOOKUP\":{\"count\":1"), "{j}");
        assert!(j.contains("\"negative_timeout\":3600"), "{j}");
        assert!(j.contains("\"fsname\":\"a\\\"b\""), "{j}");
        assert!(
            j.contains("\"features\":{\"fuse_passthrough\":\"yes\"}"),
            "{j}"
        );
    }

    #[test]
    fn serve_and_fetch_round_trip() {
        let dev = 0xdead_0000_0000 + std::process::id() as u64;
        let src = StatsSource {
            invalidate: Box::new(|| Invalidated {
                epoch: false,
                names: 0,
                not_done: Some("no epoch".into()),
            }),
            features: Box::new(Vec::new),
            stats: Arc::new(Stats::new()),
            policy: CachePolicy::default(),
            usage: Box::new(|| BackendUsage {
                bytes_used: 42,
                ..Default::default()
            }),
            settings: vec![],
        };
        serve(dev, src).unwrap();
        assert!(request(dev, "stats").unwrap().contains("\"bytes_used\":42"));
        assert_eq!(
            request(dev, "invalidate").unwrap(),
            "{\"ok\":false,\"epoch\":false,\"names\":0,\"not_done\":\"no epoch\"}"
        );
        assert!(request(dev, "bogus")
            .unwrap()
            .contains("unknown command 'bogus'"));
    }
}
