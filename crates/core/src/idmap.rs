//! Translation of user and group ids between a guest and the host (`memofs virtiofsd
//! --translate-uid`, `--translate-gid`), with virtiofsd's syntax and meaning.
//!
//! Each rule is `TYPE:A:B:COUNT` (or `forbid-guest:A:COUNT`) and works in one direction or
//! both:
//!
//! | type | guest → host | host → guest |
//! |---|---|---|
//! | `map:GUEST:HOST:COUNT` | the range, one to one | the range back |
//! | `guest:GUEST:HOST:COUNT` | the range, one to one | — |
//! | `host:HOST:GUEST:COUNT` | — | the range, one to one |
//! | `squash-guest:GUEST:HOST:COUNT` | every id of the range to `HOST` | — |
//! | `squash-host:HOST:GUEST:COUNT` | — | every id of the range to `GUEST` |
//! | `forbid-guest:GUEST:COUNT` | refused (`EPERM`) | — |
//!
//! An id no rule of a direction covers stays as it is. The rules of one direction may not
//! overlap. A rule of count 0 covers no id (virtiofsd takes it too). Guest to host applies to the ids a request comes with (the caller, a `chown`);
//! host to guest to the owners every reply shows.

use crate::{Errno, Result};

/// What a rule does to an id in its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The same offset in a range starting here.
    Range(u32),
    /// This one id.
    Squash(u32),
    /// Refused.
    Forbid,
}

/// One rule in one direction: ids `[start, start + count)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    start: u32,
    count: u64,
    target: Target,
}

impl Rule {
    fn covers(&self, id: u32) -> bool {
        id >= self.start && u64::from(id - self.start) < self.count
    }

    fn overlaps(&self, other: &Rule) -> bool {
        let (a0, a1) = (u64::from(self.start), u64::from(self.start) + self.count);
        let (b0, b1) = (u64::from(other.start), u64::from(other.start) + other.count);
        a0 < b1 && b0 < a1
    }
}

/// The rules for one kind of id (users or groups), both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap {
    to_host: Vec<Rule>,
    to_guest: Vec<Rule>,
}

impl IdMap {
    /// Adds the rule `spec` (see the module documentation); an error names the rule and
    /// what is wrong with it.
    pub fn push(&mut self, spec: &str) -> std::result::Result<(), String> {
        let bad = |why: &str| format!("'{spec}': {why}");
        let mut parts = spec.split(':');
        let kind = parts.next().unwrap_or_default();
        let numbers = parts
            .map(|n| {
                n.parse::<u32>()
                    .map_err(|_| bad(&format!("'{n}' is not an id or count")))
            })
            .collect::<std::result::Result<Vec<u32>, String>>()?;
        let want = if kind == "forbid-guest" { 2 } else { 3 };
        if numbers.len() != want {
            return Err(bad(&format!(
                "{kind} takes {want} numbers after the type, separated by ':'"
            )));
        }
        let count = u64::from(numbers[want - 1]);
        if count == 0 {
            // An empty range, as virtiofsd takes it (Incus writes `forbid-guest:0:0` before a
            // map that starts at 0): it covers no id.
            return Ok(());
        }
        let fits = |base: u32| u64::from(base) + count <= 1 << 32;
        let (a, b) = (numbers[0], numbers.get(1).copied().unwrap_or(0));
        // A rule for ids from `start`: its range, and a target range, must end by the
        // largest id.
        let rule = |start: u32, target: Target| {
            let target_fits = match target {
                Target::Range(to) => fits(to),
                Target::Squash(_) | Target::Forbid => true,
            };
            if !fits(start) || !target_fits {
                return Err(bad("the range goes past the largest id"));
            }
            Ok(Some(Rule {
                start,
                count,
                target,
            }))
        };
        let (to_host, to_guest) = match kind {
            "map" => (rule(a, Target::Range(b))?, rule(b, Target::Range(a))?),
            "guest" => (rule(a, Target::Range(b))?, None),
            "host" => (None, rule(a, Target::Range(b))?),
            "squash-guest" => (rule(a, Target::Squash(b))?, None),
            "squash-host" => (None, rule(a, Target::Squash(b))?),
            "forbid-guest" => (rule(a, Target::Forbid)?, None),
            other => {
                return Err(bad(&format!(
                    "unknown type '{other}' (map, guest, host, squash-guest, squash-host, \
                     forbid-guest)"
                )))
            }
        };
        for (rule, rules, dir) in [
            (to_host, &self.to_host, "guest-to-host"),
            (to_guest, &self.to_guest, "host-to-guest"),
        ] {
            if rule.is_some_and(|r| rules.iter().any(|o| o.overlaps(&r))) {
                return Err(bad(&format!("its {dir} range overlaps an earlier rule's")));
            }
        }
        self.to_host.extend(to_host);
        self.to_guest.extend(to_guest);
        Ok(())
    }

    /// Whether every id stays as it is.
    pub fn is_identity(&self) -> bool {
        self.to_host.is_empty() && self.to_guest.is_empty()
    }

    /// The host id for guest id `id`; `EPERM` where a rule forbids it.
    pub fn to_host(&self, id: u32) -> Result<u32> {
        apply(&self.to_host, id).ok_or(Errno::EPERM)
    }

    /// The guest id for host id `id`.
    pub fn to_guest(&self, id: u32) -> u32 {
        apply(&self.to_guest, id).unwrap_or(id)
    }
}

/// `id` through the rule covering it (itself if none); `None` if that rule forbids it.
fn apply(rules: &[Rule], id: u32) -> Option<u32> {
    match rules.iter().find(|r| r.covers(id)) {
        None => Some(id),
        Some(r) => match r.target {
            Target::Range(base) => Some(base + (id - r.start)),
            Target::Squash(to) => Some(to),
            Target::Forbid => None,
        },
    }
}

/// User and group id translation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMaps {
    /// User ids.
    pub uid: IdMap,
    /// Group ids.
    pub gid: IdMap,
}

impl IdMaps {
    /// Whether every id stays as it is.
    pub fn is_identity(&self) -> bool {
        self.uid.is_identity() && self.gid.is_identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &[&str]) -> IdMap {
        let mut m = IdMap::default();
        for r in rules {
            m.push(r).unwrap();
        }
        m
    }

    #[test]
    fn map_goes_both_ways_and_leaves_other_ids() {
        let m = map(&["map:1000:100000:10"]);
        assert_eq!(m.to_host(1000), Ok(100_000));
        assert_eq!(m.to_host(1009), Ok(100_009));
        assert_eq!(m.to_host(1010), Ok(1010));
        assert_eq!(m.to_guest(100_005), 1005);
        assert_eq!(m.to_guest(5), 5);
    }

    #[test]
    fn one_way_rules_squash_and_forbid() {
        let m = map(&[
            "squash-guest:0:1000:1000",
            "host:1000:0:1",
            "forbid-guest:5000:10",
        ]);
        assert_eq!(m.to_host(0), Ok(1000));
        assert_eq!(m.to_host(999), Ok(1000));
        assert_eq!(m.to_guest(1000), 0);
        assert_eq!(m.to_host(5009), Err(Errno::EPERM));
        assert_eq!(m.to_host(5010), Ok(5010));
        let s = map(&["squash-host:0:65534:4294967295"]);
        assert_eq!(s.to_guest(12), 65534);
        assert_eq!(s.to_host(12), Ok(12));
    }

    #[test]
    fn a_range_may_end_at_the_largest_id_and_no_further() {
        let m = map(&["map:1:0:4294967295"]);
        assert_eq!(m.to_host(u32::MAX), Ok(u32::MAX - 1));
        assert_eq!(m.to_guest(0), 1);
        assert!(IdMap::default().push("map:2:0:4294967295").is_err());
        assert!(IdMap::default().push("map:0:0:4294967296").is_err());
    }

    #[test]
    fn malformed_rules_are_refused_with_the_rule_and_reason() {
        let mut m = IdMap::default();
        for (spec, why) in [
            ("map:1:2", "takes 3 numbers"),
            ("forbid-guest:1:2:3", "takes 2 numbers"),
            ("swap:1:2:3", "unknown type 'swap'"),
            ("map:x:2:3", "'x' is not an id"),
            ("guest:4294967295:0:2", "past the largest id"),
            ("map:-1:0:1", "'-1' is not an id"),
        ] {
            let e = m.push(spec).unwrap_err();
            assert!(e.contains(spec) && e.contains(why), "{spec}: {e}");
        }
        m.push("map:0:1000:10").unwrap();
        m.push("forbid-guest:0:0").unwrap();
        let e = m.push("guest:5:0:1").unwrap_err();
        assert!(e.contains("guest-to-host range overlaps"), "{e}");
        let e = m.push("host:1005:7:1").unwrap_err();
        assert!(e.contains("host-to-guest range overlaps"), "{e}");
        m.push("host:2000:7:1").unwrap();
    }
}
