//! What the machine can still hold: the bound every allocation meets besides `size=`.
//!
//! The rule: a request fails with `ENOSPC`, before it allocates anything, when it needs more
//! memory than the kernel reports available at that moment (`MemAvailable + SwapFree` in
//! `/proc/meminfo`, plus page-store memory the server freed and still holds for reuse), less
//! a reserve of 1/16 of `MemTotal` left for the rest of the machine and the server's own
//! metadata. So a request for a petabyte fails at once instead of growing the server until
//! the kernel's OOM killer ends it (and every file with it); with `size=0` this is the only
//! bound.
//!
//! Reading `/proc/meminfo` costs microseconds, so it is not read per charge: a look grants
//! a *headroom* of at most [`LOOK_EVERY`] bytes, which charges draw down (one atomic
//! subtraction, made only when a request thread takes a new batch of `size=` reserve, see
//! [`crate::limits`]); the next look comes when it runs out. Frees do not add headroom: the
//! next look sees them.

use std::sync::atomic::{AtomicU64, Ordering};

use memofs_core::{Errno, Result};
use parking_lot::Mutex;

/// Most bytes charged between two looks at the machine's free memory.
pub const LOOK_EVERY: u64 = 256 << 20;

/// Share of `MemTotal` never handed out (1/16).
const RESERVE_SHARE: u64 = 16;

/// Where free memory is measured: the machine, or a fixed figure for tests.
enum Probe {
    System,
    Fixed(u64),
}

/// The machine's remaining room, as seen by allocations.
pub struct Machine {
    probe: Probe,
    /// Bytes that may still be charged before the next look.
    headroom: AtomicU64,
    /// Held while looking, so that one thread reads `/proc/meminfo` at a time.
    look: Mutex<()>,
}

/// The fields of `/proc/meminfo` the rule uses, in bytes.
#[derive(Debug, Default, PartialEq, Eq)]
struct MemInfo {
    total: u64,
    available: u64,
    swap_free: u64,
}

fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut info = MemInfo::default();
    let mut seen = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let field = match words.next() {
            Some("MemTotal:") => &mut info.total,
            Some("MemAvailable:") => &mut info.available,
            Some("SwapFree:") => &mut info.swap_free,
            _ => continue,
        };
        let kib: u64 = words.next()?.parse().ok()?;
        *field = kib.checked_mul(1024)?;
        seen += 1;
    }
    (seen == 3).then_some(info)
}

impl MemInfo {
    /// Bytes the rule lets allocations take, `freed` being memory the server holds for reuse.
    fn room(&self, freed: u64) -> u64 {
        (self.available + self.swap_free + freed).saturating_sub(self.total / RESERVE_SHARE)
    }
}

impl Machine {
    /// The machine this process runs on.
    pub fn system() -> Machine {
        Machine::with_probe(Probe::System)
    }

    /// A machine that always has `room` bytes free (for tests).
    pub fn fixed(room: u64) -> Machine {
        Machine::with_probe(Probe::Fixed(room))
    }

    fn with_probe(probe: Probe) -> Machine {
        Machine {
            probe,
            headroom: AtomicU64::new(0),
            look: Mutex::new(()),
        }
    }

    /// Bytes allocations may take now (a fresh look). A machine whose `/proc/meminfo`
    /// cannot be read or parsed is not bounded (logged once).
    pub fn room(&self) -> u64 {
        match self.probe {
            Probe::Fixed(room) => room,
            Probe::System => {
                let info = std::fs::read_to_string("/proc/meminfo")
                    .ok()
                    .and_then(|t| parse_meminfo(&t));
                match info {
                    Some(info) => info.room(crate::reclaim::bytes_held()),
                    None => {
                        static WARNED: std::sync::Once = std::sync::Once::new();
                        WARNED.call_once(|| {
                            log::warn!(
                                "/proc/meminfo unreadable: allocations bounded by size= only"
                            )
                        });
                        u64::MAX
                    }
                }
            }
        }
    }

    fn draw(&self, n: u64) -> bool {
        self.headroom
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| h.checked_sub(n))
            .is_ok()
    }

    /// Takes `n` bytes of the machine's room for a charge, or fails with `ENOSPC` (taking
    /// nothing) when the machine cannot hold them.
    pub fn take(&self, n: u64) -> Result<()> {
        if n == 0 || self.draw(n) {
            return Ok(());
        }
        let _look = self.look.lock();
        // Another thread may have looked while this one waited.
        if self.draw(n) {
            return Ok(());
        }
        let room = self.room();
        let left = room.checked_sub(n);
        self.headroom
            .store(left.unwrap_or(room).min(LOOK_EVERY), Ordering::Release);
        left.map(|_| ()).ok_or(Errno::ENOSPC)
    }

    /// Fails with `ENOSPC` when the machine cannot hold `n` more bytes now; takes nothing
    /// (for memory the kernel allocates, which the next look sees by itself).
    pub fn check(&self, n: u64) -> Result<()> {
        if n <= self.room() {
            Ok(())
        } else {
            Err(Errno::ENOSPC)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       1600 kB\nMemFree:  5 kB\nMemAvailable:    800 kB\n\
                    SwapTotal: 0 kB\nSwapFree:        16 kB\n";
        let info = parse_meminfo(text).unwrap();
        assert_eq!(
            info,
            MemInfo {
                total: 1600 << 10,
                available: 800 << 10,
                swap_free: 16 << 10
            }
        );
        // 816 KiB free and 100 KiB held for reuse, less 1/16 of 1600 KiB.
        assert_eq!(info.room(100 << 10), (816 + 100 - 100) << 10);
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None, "fields missing");
        assert_eq!(
            parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB\nSwapFree: 0 kB\n"),
            None
        );
        assert!(parse_meminfo(&std::fs::read_to_string("/proc/meminfo").unwrap()).is_some());
    }

    #[test]
    fn a_request_beyond_the_room_fails_whole_and_takes_nothing() {
        let m = Machine::fixed(10 * LOOK_EVERY);
        assert_eq!(m.take(u64::MAX), Err(Errno::ENOSPC));
        assert_eq!(m.take(10 * LOOK_EVERY + 1), Err(Errno::ENOSPC));
        m.take(10 * LOOK_EVERY).unwrap();
        m.take(1).unwrap();
        assert_eq!(m.check(10 * LOOK_EVERY + 1), Err(Errno::ENOSPC));
        m.check(10 * LOOK_EVERY).unwrap();
    }

    #[test]
    fn headroom_is_drawn_down_between_looks() {
        let m = Machine::fixed(1 << 40);
        m.take(4096).unwrap();
        assert_eq!(m.headroom.load(Ordering::Relaxed), LOOK_EVERY);
        m.take(LOOK_EVERY - 4096).unwrap();
        assert_eq!(m.headroom.load(Ordering::Relaxed), 4096);
        // Running out makes the next charge look again.
        m.take(8192).unwrap();
        assert_eq!(m.headroom.load(Ordering::Relaxed), LOOK_EVERY);
        let small = Machine::fixed(3 * 4096);
        small.take(2 * 4096).unwrap();
        assert_eq!(small.headroom.load(Ordering::Relaxed), 4096);
    }

    #[test]
    fn the_system_probe_sees_less_than_the_whole_machine() {
        let m = Machine::system();
        let room = m.room();
        let total = parse_meminfo(&std::fs::read_to_string("/proc/meminfo").unwrap())
            .unwrap()
            .total;
        assert!(room > 0 && room < u64::MAX, "room {room}");
        assert_eq!(
            m.take(1 << 62),
            Err(Errno::ENOSPC),
            "an exabyte-scale charge"
        );
        assert!(total > 0);
    }
}
