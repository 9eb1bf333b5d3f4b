//! virtiofsd's older `-o` forms, which libvirt writes when `--print-capabilities` lacks
//! `separate-options` and Kata's runtime-rs passes by default (`-o announce_submounts`), as the
//! options they stand for; whatever else `-o` lists is memofs's own options.
//!
//! The forms (virtiofsd 1.14's `parse_compat`): `source=DIR` (`,,` a comma inside it, as
//! libvirt escapes one), `cache=auto|always|none|metadata` (`none` is `never`),
//! `sandbox=namespace|chroot`, `xattrmap=`, `modcaps=`, `loglevel=debug|info|warn|err`; the
//! flags `xattr`, `no_xattr`, `readdirplus`, `writeback`, `no_writeback`, `allow_direct_io`,
//! `no_allow_direct_io`, `announce_submounts`, `killpriv_v2`, `posix_acl`, `no_posix_acl`,
//! `security_label`, `no_security_label`, and `no_posix_lock`, `no_flock` (what memofs does:
//! locks stay in the guest's kernel). `no_readdirplus`, `no_killpriv_v2`, `posix_lock` and
//! `flock` are refused with the reason, as their new forms are.

use crate::cli::VirtiofsdArgs;

/// `args` with the older forms of its `-o` lists moved into the options they stand for
/// (an option given in its new form wins), and the rest of the lists: memofs's options.
pub fn merged(args: &VirtiofsdArgs) -> Result<(VirtiofsdArgs, Vec<String>), String> {
    let mut a = args.clone();
    let mut ours = Vec::new();
    for o in args.options.iter().flat_map(|l| split_escaped(l)) {
        let fill = |field: &mut Option<String>, value: &str| {
            field.get_or_insert_with(|| value.to_string());
        };
        match o.split_once('=') {
            Some(("source", dir)) => {
                a.shared_dir.get_or_insert_with(|| dir.into());
            }
            Some(("cache", "none")) => fill(&mut a.cache, "never"),
            Some(("cache", mode)) => fill(&mut a.cache, mode),
            Some(("sandbox", mode)) => fill(&mut a.sandbox, mode),
            Some(("xattrmap", map)) => fill(&mut a.xattrmap, map),
            Some(("modcaps", caps)) => fill(&mut a.modcaps, caps),
            Some(("loglevel", level)) => fill(&mut a.log_level, log_level(level)?),
            None => match o.as_str() {
                "xattr" => ours.push("xattr=on".into()),
                "no_xattr" => ours.push("xattr=off".into()),
                "writeback" => a.writeback = true,
                "allow_direct_io" => a.allow_direct_io = true,
                "announce_submounts" => a.announce_submounts = true,
                "killpriv_v2" => a.killpriv_v2 = true,
                "posix_acl" => fill(&mut a.posix_acl, "always"),
                "no_posix_acl" => fill(&mut a.posix_acl, "never"),
                "security_label" => fill(&mut a.security_label, "always"),
                "no_security_label" => fill(&mut a.security_label, "never"),
                // What memofs does anyway, as virtiofsd's defaults.
                "readdirplus" | "no_writeback" | "no_allow_direct_io" | "no_posix_lock"
                | "no_flock" => {}
                "no_readdirplus" => return Err(refused(&o, crate::virtiofsd::NO_READDIRPLUS)),
                "no_killpriv_v2" => return Err(refused(&o, crate::virtiofsd::NO_KILLPRIV)),
                "posix_lock" | "flock" => return Err(refused(&o, REMOTE_LOCKS)),
                _ => ours.push(o),
            },
            _ => ours.push(o),
        }
    }
    Ok((a, ours))
}

/// Why `-o posix_lock` and `-o flock` are refused (virtiofsd 1.14 refuses them too).
const REMOTE_LOCKS: &str = "locks the server would take on the host for the guest \
    (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS); memofs leaves locks to the guest's kernel, as \
    virtiofsd does, so processes outside the guest never see them: leave it out or say \
    no_posix_lock, no_flock";

fn refused(o: &str, why: &str) -> String {
    format!("-o {o} is not supported: {why}")
}

/// virtiofsd's `loglevel=` as `--log-level` spells it.
fn log_level(level: &str) -> Result<&'static str, String> {
    match level {
        "debug" => Ok("debug"),
        "info" => Ok("info"),
        "warn" => Ok("warn"),
        "err" => Ok("error"),
        other => Err(format!("-o loglevel={other}: say debug, info, warn or err")),
    }
}

/// `list` split at single commas; `,,` is a comma inside an item.
fn split_escaped(list: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ',' if chars.peek() == Some(&',') => {
                chars.next();
                items.last_mut().expect("never empty").push(',');
            }
            ',' => items.push(String::new()),
            c => items.last_mut().expect("never empty").push(c),
        }
    }
    items.retain(|i| !i.is_empty());
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtiofsd::setup::tests::args;

    #[test]
    fn libvirts_older_line_becomes_the_options_it_stands_for() {
        let a = args(&[
            "-o",
            "source=/srv/a,,b,cache=none,sandbox=chroot,xattr,no_flock,no_posix_lock",
            "-o",
            "negative_timeout=30,announce_submounts,no_xattr,loglevel=err,writeback",
        ]);
        let (m, ours) = merged(&a).unwrap();
        assert_eq!(
            m.shared_dir.as_deref(),
            Some(std::path::Path::new("/srv/a,b"))
        );
        assert_eq!(m.cache.as_deref(), Some("never"));
        assert_eq!(m.sandbox.as_deref(), Some("chroot"));
        assert_eq!(m.log_level.as_deref(), Some("error"));
        assert!(m.announce_submounts && m.writeback);
        assert_eq!(ours, ["xattr=on", "negative_timeout=30", "xattr=off"]);
    }

    #[test]
    fn a_new_form_wins_over_an_old_one() {
        let a = args(&[
            "--cache",
            "always",
            "-o",
            "cache=none,posix_acl,security_label",
        ]);
        let (m, _) = merged(&a).unwrap();
        assert_eq!(m.cache.as_deref(), Some("always"));
        assert_eq!(m.posix_acl.as_deref(), Some("always"));
        assert_eq!(m.security_label.as_deref(), Some("always"));
    }

    #[test]
    fn what_virtiofsd_refuses_is_refused_with_the_reason() {
        for (o, says) in [
            ("flock", "memofs leaves locks to the guest's kernel"),
            ("posix_lock", "no_posix_lock"),
            ("no_readdirplus", "READDIRPLUS"),
            ("no_killpriv_v2", "clears setuid"),
            ("loglevel=loud", "say debug, info, warn or err"),
        ] {
            let e = merged(&args(&["-o", o])).unwrap_err();
            assert!(e.contains(says), "{o}: {e}");
        }
    }
}
