//! `memofs stats` (live counters of a mount) and `memofs invalidate` (drop every name the
//! kernel caches for it), both over the mount's control socket.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;

use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

/// Sends `command` to the server of the mount at `target`; its JSON answer, or the exit
/// code of a failure already reported.
fn ask(target: &str, command: &str) -> Result<String, ExitCode> {
    let dev = match std::fs::metadata(Path::new(target)) {
        Ok(m) => m.dev(),
        Err(e) => return Err(fail(EXIT_FAILURE, format!("cannot stat {target}: {e}"))),
    };
    memofs_fuse::control::request(dev, command).map_err(|e| {
        fail(
            EXIT_FAILURE,
            format!("{target} is not a live memofs mount ({e})"),
        )
    })
}

/// Parses `[FLAGS] MOUNTPOINT`; `flags` are the accepted flags, returned when given.
fn parse<'a>(
    cmd: &str,
    usage: &str,
    flags: &[&str],
    args: &'a [String],
) -> Result<(Vec<&'a str>, &'a str), ExitCode> {
    let mut given = Vec::new();
    let mut target = None;
    for a in args {
        match a.as_str() {
            "-h" | "--help" => {
                println!("usage: {usage}");
                return Err(ExitCode::SUCCESS);
            }
            f if flags.contains(&f) => given.push(f),
            s if s.starts_with('-') => {
                return Err(fail(EXIT_USAGE, format!("{cmd}: unknown flag '{s}'")))
            }
            s if target.is_none() => target = Some(s),
            _ => return Err(fail(EXIT_USAGE, format!("{cmd}: too many arguments"))),
        }
    }
    match target {
        Some(t) => Ok((given, t)),
        None => Err(fail(EXIT_USAGE, format!("{cmd}: missing MOUNTPOINT"))),
    }
}

pub fn main(args: &[String]) -> ExitCode {
    let (flags, target) = match parse(
        "stats",
        "memofs stats [--json] MOUNTPOINT",
        &["--json"],
        args,
    ) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let doc = match ask(target, "stats") {
        Ok(d) => d,
        Err(code) => return code,
    };
    if flags.contains(&"--json") {
        println!("{doc}");
    } else {
        print!("{}", render(&doc));
    }
    ExitCode::SUCCESS
}

/// `memofs invalidate MOUNTPOINT`: the kernel forgets every cached name (positive and
/// negative) of the mount, for changes the server cannot see (e.g. made on another machine
/// to a network filesystem under a passthrough export). Where the kernel cannot be told that
/// at once (no `FUSE_NOTIFY_INC_EPOCH` before Linux 6.16), the server drops what it can name
/// and this says what it could not do; the exit status is non-zero if nothing was dropped.
pub fn invalidate_main(args: &[String]) -> ExitCode {
    let (_, target) = match parse("invalidate", "memofs invalidate MOUNTPOINT", &[], args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let answer = match ask(target, "invalidate") {
        Ok(a) => a,
        Err(code) => return code,
    };
    if let Some(msg) = string_field(&answer, "error") {
        return fail(EXIT_FAILURE, format!("invalidate {target}: {msg}"));
    }
    let names = number_field(&answer, "names").unwrap_or(0);
    let not_done = string_field(&answer, "not_done");
    if answer.contains("\"ok\":true") {
        if let Some(what) = not_done {
            eprintln!(
                "memofs invalidate: dropped the {names} cached misses the server knows; {what}"
            );
        }
        return ExitCode::SUCCESS;
    }
    fail(
        EXIT_FAILURE,
        format!(
            "invalidate {target}: nothing was invalidated: {}",
            not_done.as_deref().unwrap_or("the server did not say why")
        ),
    )
}

/// The string value of `"key":"..."` in a flat JSON answer (escapes left as they are).
fn string_field(doc: &str, key: &str) -> Option<String> {
    let rest = doc.split_once(&format!("\"{key}\":\""))?.1;
    let mut out = String::new();
    let mut escaped = false;
    for c in rest.chars() {
        match (escaped, c) {
            (false, '\\') => escaped = true,
            (false, '"') => return Some(out),
            (_, c) => {
                out.push(c);
                escaped = false;
            }
        }
    }
    None
}

/// The number value of `"key":N` in a flat JSON answer.
fn number_field(doc: &str, key: &str) -> Option<u64> {
    let rest = doc.split_once(&format!("\"{key}\":"))?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A readable rendering of the JSON document: one `key value` line per leaf.
fn render(doc: &str) -> String {
    let mut out = String::new();
    let mut path: Vec<String> = Vec::new();
    let mut key = String::new();
    let mut token = String::new();
    let mut in_str = false;
    let mut escaped = false;
    let flush = |out: &mut String, path: &[String], key: &str, value: &str| {
        if !value.is_empty() {
            let mut name = path.join(".");
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(key);
            out.push_str(&format!("{name:<40} {value}\n"));
        }
    };
    for c in doc.chars() {
        if in_str {
            match (escaped, c) {
                (true, c) => {
                    token.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                (false, c) => token.push(c),
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            ':' => key = std::mem::take(&mut token),
            '{' => {
                if !key.is_empty() {
                    path.push(std::mem::take(&mut key));
                }
            }
            ',' | '}' => {
                flush(&mut out, &path, &key, token.trim());
                token.clear();
                key.clear();
                if c == '}' {
                    path.pop();
                }
            }
            c => token.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_answer_fields() {
        let a = "{\"ok\":true,\"epoch\":false,\"names\":12,\"not_done\":\"a \\\"b\\\"\"}";
        assert_eq!(number_field(a, "names"), Some(12));
        assert_eq!(string_field(a, "not_done").as_deref(), Some("a \"b\""));
        assert_eq!(string_field(a, "error"), None);
    }

    #[test]
    fn renders_nested_keys() {
        let r = render("{\"requests\":{\"LOOKUP\":{\"count\":3}},\"cache\":{\"mode\":\"always\"}}");
        assert!(r.contains("requests.LOOKUP.count"), "{r}");
        assert!(
            r.lines()
                .any(|l| l.starts_with("cache.mode") && l.ends_with("always")),
            "{r}"
        );
    }
}
