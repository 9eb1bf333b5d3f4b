//! A virtio-fs guest from outside a server's process: a vhost-user frontend (the VMM's side)
//! on the real socket of a real server ([`guest`]), and what the programs built on it share
//! ([`server`]): `memofs-vhost-attack` plays a hostile guest, `memofs-vhost-migrate` moves a
//! guest's filesystem from one server to another mid-stream.

pub mod guest;

/// Starting, watching and stopping the server under test.
pub mod server {
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// The server process, started with the run's socket and shared directory.
    pub fn start(server: &[String], socket: &Path, share: &Path) -> Result<Child, String> {
        let args: Vec<String> = server
            .iter()
            .map(|a| {
                a.replace("@SOCKET@", &socket.display().to_string())
                    .replace("@SHARE@", &share.display().to_string())
            })
            .collect();
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args[0]))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not listen on {} within 10 s",
                    args[0],
                    socket.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(child)
    }

    /// The child processes of `pid` (of each of its threads).
    pub fn children(pid: u32) -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// `of(pid)` summed over `pid` and its descendants (a sandboxed server serves from a child).
    pub fn over_tree(pid: u32, of: &dyn Fn(u32) -> u64) -> u64 {
        let children: u64 = children(pid)
            .into_iter()
            .map(|child| over_tree(child, of))
            .sum();
        of(pid) + children
    }

    /// Resident memory of `pid` and its descendants, in KiB.
    pub fn rss_kib(pid: u32) -> u64 {
        over_tree(pid, &|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                })
                .unwrap_or(0)
        })
    }

    /// Descriptors held by `pid` and its descendants.
    pub fn fds(pid: u32) -> u64 {
        over_tree(pid, &|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
        })
    }

    /// Stops a server and waits for its socket to go.
    pub fn stop(server: &mut Child, socket: &Path) {
        // SIGTERM first, as a service manager stops it, so that it removes its files.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(server.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(server.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = server.kill();
        let _ = server.wait();
        let _ = std::fs::remove_file(socket);
    }

    /// Counts results and prints them.
    #[derive(Default)]
    pub struct Report {
        /// Checks passed.
        pub passed: usize,
        /// Checks failed.
        pub failed: usize,
    }

    impl Report {
        pub fn check(&mut self, name: &str, r: Result<String, String>) {
            match r {
                Ok(note) if note.is_empty() => println!("PASS {name}"),
                Ok(note) => println!("PASS {name} ({note})"),
                Err(why) => {
                    println!("FAIL {name}: {why}");
                    self.failed += 1;
                    return;
                }
            }
            self.passed += 1;
        }
    }
}
