//! Reading a feed's output: the changed paths it names, in either [`Format`].
//!
//! A SeaweedFS feed is replaced now and then by a program that starts from a moment the
//! last one had read already (see [`super::RENEW`]): the events the last program printed
//! come again, and are skipped by their time (`tsNs`, the filer's nanoseconds), matched
//! exactly, so that only what was missed is delivered (an event older than one already
//! read, after the filer's clock stepped back, is not taken for one read).

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use serde::Deserialize;

use super::Format;

/// A path a feed names (components below the export root), and whether a name changed
/// there (created, deleted, renamed, replaced) or only what it holds (attributes, data).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Changed {
    pub(crate) path: Vec<OsString>,
    pub(crate) name: bool,
    /// For a name change, whether the feed says the name is there now (created, renamed
    /// to) or gone (deleted, renamed away); `None` where it does not say.
    pub(crate) now: Option<bool>,
}

/// A path's components below the export root, from a path relative to it (a leading `/`
/// allowed); `None` for one that climbs (`..`).
fn components(path: &[u8]) -> Option<Vec<OsString>> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(OsString::from_vec(c.to_vec())),
        }
    }
    Some(out)
}

/// Turns a feed's output, as it arrives, into paths.
pub(crate) struct Parser {
    format: Format,
    pending: Vec<u8>,
    /// The event times (SeaweedFS) the running program printed, and the last one's.
    times: Times,
}

/// The event times a SeaweedFS feed's programs printed: those the running one did, and
/// those of the one it replaced, which are skipped.
#[derive(Default)]
struct Times {
    read: HashSet<u64>,
    skip: HashSet<u64>,
}

/// The most event times remembered of one program (a minute of a busy filer's events):
/// past it, a replacement delivers again what was not remembered, which costs only
/// invalidations.
const MAX_TIMES: usize = 1 << 20;

/// One SeaweedFS filer event: what is read of it.
#[derive(Deserialize)]
struct FilerEvent {
    #[serde(default)]
    directory: String,
    #[serde(rename = "eventNotification")]
    notification: Option<Notification>,
    /// When the filer logged it, in nanoseconds (a decimal string, or a number).
    #[serde(rename = "tsNs", default)]
    ts_ns: Option<serde_json::Value>,
}

impl FilerEvent {
    fn time(&self) -> Option<u64> {
        match self.ts_ns.as_ref()? {
            serde_json::Value::String(s) => s.parse().ok(),
            v => v.as_u64(),
        }
    }
}

#[derive(Deserialize)]
struct Notification {
    #[serde(rename = "oldEntry")]
    old: Option<FilerEntry>,
    #[serde(rename = "newEntry")]
    new: Option<FilerEntry>,
    #[serde(rename = "newParentPath", default)]
    new_parent: String,
}

#[derive(Deserialize)]
struct FilerEntry {
    #[serde(default)]
    name: String,
    attributes: Option<FilerAttributes>,
}

#[derive(Deserialize)]
struct FilerAttributes {
    /// The object's number, as a decimal string.
    inode: Option<String>,
}

impl FilerEntry {
    fn inode(&self) -> Option<&str> {
        self.attributes.as_ref()?.inode.as_deref()
    }
}

/// The most a feed may leave unparsed (one event or line): past it the output is dropped.
const MAX_PENDING: usize = 16 << 20;

impl Parser {
    pub(crate) fn new(format: Format) -> Parser {
        Parser {
            format,
            pending: Vec::new(),
            times: Times::default(),
        }
    }

    /// A new program's output follows (a partial event of the last one is dropped). One
    /// that `replaces` a working program skips the events that program printed; one
    /// started after a program ended (when everything is invalidated anyway) skips none.
    pub(crate) fn restart(&mut self, replaces: bool) {
        self.pending.clear();
        self.times.skip = match replaces {
            true => std::mem::take(&mut self.times.read),
            false => HashSet::new(),
        };
        self.times.read.clear();
    }

    /// Takes `bytes` of output; appends the changes it completes to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<Changed>) {
        self.pending.extend_from_slice(bytes);
        let used = match &self.format {
            Format::Lines => self.lines(out),
            Format::SeaweedFs { prefix } => {
                seaweedfs_events(&self.pending, prefix, &mut self.times, out)
            }
        };
        self.pending.drain(..used);
        if self.pending.len() > MAX_PENDING {
            log::warn!(
                "passthrough: change feed: {} bytes without an end: dropped",
                self.pending.len()
            );
            self.pending.clear();
        }
    }

    fn lines(&self, out: &mut Vec<Changed>) -> usize {
        let mut used = 0;
        while let Some(end) = self.pending[used..].iter().position(|&b| b == b'\n') {
            let line = self.pending[used..used + end].trim_ascii_end();
            used += end + 1;
            let path = match line.first() {
                None => continue,
                Some(b'"') => match serde_json::from_slice::<String>(line) {
                    Ok(s) => s.into_bytes(),
                    Err(e) => {
                        log::warn!("passthrough: change feed: a bad line ({e})");
                        continue;
                    }
                },
                Some(_) => line.to_vec(),
            };
            match components(&path) {
                Some(path) => out.push(Changed {
                    path,
                    name: true,
                    now: None,
                }),
                None => log::warn!("passthrough: change feed: a path with `..` ignored"),
            }
        }
        used
    }
}

/// Reads the complete events at the start of `bytes`, appending the changes below `prefix`
/// each makes (the old and the new name; one path and no name change for an update in
/// place of the same object), except for events at the times `times` skips; returns
/// the bytes consumed.
fn seaweedfs_events(
    bytes: &[u8],
    prefix: &str,
    times: &mut Times,
    out: &mut Vec<Changed>,
) -> usize {
    let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<FilerEvent>();
    let mut used = 0;
    loop {
        match stream.next() {
            None => return bytes.len(),
            Some(Ok(event)) => {
                used = stream.byte_offset();
                if let Some(t) = event.time() {
                    if times.read.len() < MAX_TIMES {
                        times.read.insert(t);
                    }
                    if times.skip.contains(&t) {
                        continue;
                    }
                }
                let Some(n) = event.notification else {
                    continue;
                };
                let new_dir = match n.new_parent.is_empty() {
                    true => &event.directory,
                    false => &n.new_parent,
                };
                let old = n
                    .old
                    .as_ref()
                    .map(|e| (join(&event.directory, &e.name), e.inode()));
                let new = n.new.as_ref().map(|e| (join(new_dir, &e.name), e.inode()));
                let in_place = matches!((&old, &new), (Some(o), Some(n)) if o == n);
                // The old path is gone, unless the new one is the same (replaced); the new
                // one is there.
                let replaced = matches!((&old, &new), (Some(o), Some(n)) if o.0 == n.0);
                let old = old.filter(|_| !replaced).map(|o| (o, false));
                let new = new.map(|n| (n, true));
                for ((p, _), there) in [old, new].into_iter().flatten() {
                    let Some(path) = below(&p, prefix).and_then(|r| components(r.as_bytes()))
                    else {
                        continue;
                    };
                    let c = Changed {
                        path,
                        name: !in_place,
                        now: (!in_place).then_some(there),
                    };
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
            Some(Err(e)) if e.is_eof() => return used,
            Some(Err(e)) => {
                // Skip to the next object that starts a line.
                log::warn!("passthrough: change feed: a bad event ({e})");
                return match bytes[used + 1..].windows(2).position(|w| w == b"\n{") {
                    Some(at) => used + 1 + at + 1,
                    None => bytes.len(),
                };
            }
        }
    }
}

/// `dir/name`; `dir` itself for an empty name (an event about the directory).
fn join(dir: &str, name: &str) -> String {
    match (name.is_empty(), dir.ends_with('/')) {
        (true, _) => dir.to_string(),
        (false, true) => format!("{dir}{name}"),
        (false, false) => format!("{dir}/{name}"),
    }
}

/// `path` relative to `prefix`, if it is `prefix` or below it.
fn below<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    if prefix == "/" {
        return Some(path);
    }
    match path.strip_prefix(prefix)? {
        "" => Some(""),
        rest => rest.strip_prefix('/'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// Each change as its path, with `=` in front where no name changed.
    fn parse(format: Format, chunks: &[&[u8]]) -> Vec<String> {
        let mut p = Parser::new(format);
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out);
        }
        out.iter()
            .map(|c| {
                let path = c
                    .path
                    .iter()
                    .map(|s| s.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                if c.name {
                    path
                } else {
                    format!("={path}")
                }
            })
            .collect()
    }

    #[test]
    fn lines_name_paths_below_the_export_across_reads() {
        let got = parse(
            Format::Lines,
            &[b"a/b\n/c\n\n\"odd\\nname\"\n../up\nd", b"/e\n"],
        );
        assert_eq!(got, ["a/b", "c", "odd\nname", "d/e"]);
    }

    /// Events as `weed filer.meta.tail` prints them (trimmed), split mid-object.
    #[test]
    fn seaweedfs_events_name_old_and_new_paths_below_the_prefix() {
        let create = br#"{"directory": "/sub", "eventNotification": {"oldEntry": null,
            "newEntry": {"name": "f", "isDirectory": false}, "newParentPath": "/sub"},
            "tsNs": "1"}"#;
        let rename = br#"
{"directory": "/sub/d", "eventNotification": {"oldEntry": {"name": "f"},
 "newEntry": {"name": "g"}, "newParentPath": "/sub/e"}}
{"directory": "/sub", "eventNotification": {"oldEntry": {"name": "gone"}, "newEntry": null}}
{"directory": "/other", "eventNotification": {"oldEntry": null, "newEntry": {"name": "x"}}}
{"directory": "/", "eventNotification": {"oldEntry": {"name": "sub", "attributes": {"inode": "7"}},
 "newEntry": {"name": "sub", "attributes": {"inode": "7"}}}}
{"directory": "/sub", "eventNotification": {"oldEntry": {"name": "r", "attributes": {"inode": "1"}},
 "newEntry": {"name": "r", "attributes": {"inode": "2"}}, "newParentPath": "/sub"}}
"#;
        let (a, b) = create.split_at(40);
        let got = parse(
            Format::SeaweedFs {
                prefix: "/sub".into(),
            },
            &[a, b, rename],
        );
        assert_eq!(got, ["f", "d/f", "e/g", "gone", "=", "r"]);
        let all = parse(
            Format::SeaweedFs { prefix: "/".into() },
            &[br#"{"directory": "/", "eventNotification": {"oldEntry": null, "newEntry": {"name": "x"}}} garbage {"#, b"\n{\"directory\": \"/y\"}"],
        );
        assert_eq!(all, ["x"]);
    }

    #[test]
    fn seaweedfs_events_say_which_names_are_gone() {
        let events = br#"
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "a"}, "newEntry": {"name": "b"}}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "c"}, "newEntry": null}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "r", "attributes": {"inode": "1"}},
 "newEntry": {"name": "r", "attributes": {"inode": "2"}}}}
{"directory": "/d", "eventNotification": {"oldEntry": {"name": "u", "attributes": {"inode": "3"}},
 "newEntry": {"name": "u", "attributes": {"inode": "3"}}}}
"#;
        let mut out = Vec::new();
        seaweedfs_events(events, "/", &mut Times::default(), &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.path.join(OsStr::new("/")), c.name, c.now))
            .collect();
        let want = [
            ("d/a", true, Some(false)),
            ("d/b", true, Some(true)),
            ("d/c", true, Some(false)),
            ("d/r", true, Some(true)),
            ("d/u", false, None),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(p, name, now)| (OsString::from(p), name, now))
            .collect();
        assert_eq!(got, want);
    }

    /// A program that replaces a working one replays what that one printed: only events it
    /// did not print are changes, whatever their times (an older one, after the filer's
    /// clock stepped back, included); a partial event of the last program is dropped. After
    /// a program ended, nothing is skipped.
    #[test]
    fn a_replacement_replays_only_what_was_not_read() {
        let event = |ts: &str, name: &str| {
            format!(
                r#"{{"directory": "/", "eventNotification": {{"oldEntry": null, "newEntry": {{"name": "{name}"}}}}, "tsNs": {ts}}}"#
            )
            .into_bytes()
        };
        let names = |p: &mut Parser, events: &[(&str, &str)]| {
            let mut out = Vec::new();
            for (ts, name) in events {
                p.push(&event(ts, name), &mut out);
            }
            out.iter()
                .map(|c| c.path[0].to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        let mut p = Parser::new(Format::SeaweedFs { prefix: "/".into() });
        assert_eq!(names(&mut p, &[("\"10\"", "a"), ("20", "b")]), ["a", "b"]);
        p.push(b"{\"directory\": \"/\", ", &mut Vec::new());
        p.restart(true);
        let replay = [("\"10\"", "a"), ("20", "b"), ("\"30\"", "c"), ("5", "d")];
        assert_eq!(names(&mut p, &replay), ["c", "d"], "a and b were read");
        p.restart(true);
        assert_eq!(
            names(&mut p, &[("20", "b"), ("30", "c"), ("40", "e")]),
            ["e"],
            "b, skipped by the last program, was read by it too"
        );
        p.restart(false);
        assert_eq!(names(&mut p, &[("40", "e")]), ["e"], "after an end");
    }
}
