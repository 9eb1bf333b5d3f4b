//! `memofs stats`: live counters of a mount.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::ExitCode;

use crate::{fail, EXIT_FAILURE, EXIT_USAGE};

pub fn main(args: &[String]) -> ExitCode {
    let mut json = false;
    let mut target = None;
    for a in args {
        match a.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("usage: memofs stats [--json] MOUNTPOINT");
                return ExitCode::SUCCESS;
            }
            s if s.starts_with('-') => {
                return fail(EXIT_USAGE, format!("stats: unknown flag '{s}'"))
            }
            s if target.is_none() => target = Some(s.to_string()),
            _ => return fail(EXIT_USAGE, "stats: too many arguments"),
        }
    }
    let Some(target) = target else {
        return fail(EXIT_USAGE, "stats: missing MOUNTPOINT");
    };
    let dev = match std::fs::metadata(Path::new(&target)) {
        Ok(m) => m.dev(),
        Err(e) => return fail(EXIT_FAILURE, format!("cannot stat {target}: {e}")),
    };
    let doc = match memofs_fuse::control::fetch(dev) {
        Ok(d) => d,
        Err(e) => {
            return fail(
                EXIT_FAILURE,
                format!("{target} is not a live memofs mount ({e})"),
            )
        }
    };
    if json {
        println!("{doc}");
    } else {
        print!("{}", render(&doc));
    }
    ExitCode::SUCCESS
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
