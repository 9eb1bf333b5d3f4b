//! Extended attribute name mapping between a guest and the host (`memofs virtiofsd
//! --xattrmap`), with virtiofsd's rule syntax and meaning, so that, for example, a guest's
//! `security.selinux` can live on the host as `trusted.virtiofs.security.selinux` without
//! touching the host's own label.
//!
//! A map is a list of rules; the first rule that matches a name applies. Each rule starts
//! with its separator (any character but white space), which then ends each field:
//! `:TYPE:SCOPE:KEY:PREPEND:`, white space allowed between rules.
//!
//! - SCOPE `client` matches names a request brings (GETXATTR, SETXATTR, REMOVEXATTR) that
//!   start with KEY; `server` matches names the backend lists (LISTXATTR) that start with
//!   PREPEND; `all` both.
//! - TYPE `prefix`: a request's name gets PREPEND in front; a listed name loses PREPEND.
//!   `ok`: the name passes unchanged. `bad`: a request is refused with `EPERM`, a listed
//!   name hidden. `unsupported`: the same with `EOPNOTSUPP`.
//! - `:map:KEY:PREPEND:`, which may only be the last rule, stands for `:prefix:all:KEY:PREPEND:`,
//!   then (KEY not empty) `:bad:all:PREPEND:KEY:` (a guest may not name the mapped names
//!   directly, and the host's own KEY names are hidden) and `:ok:all:::`, or (KEY empty)
//!   `:bad:all:::`.
//!
//! A request's name no rule matches is refused (`EPERM`); a listed name no rule matches is
//! hidden.

use std::borrow::Cow;

use crate::{Errno, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Prefix,
    Ok,
    Bad,
    Unsupported,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    kind: Kind,
    client: bool,
    server: bool,
    key: Vec<u8>,
    prepend: Vec<u8>,
}

/// A parsed `--xattrmap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrMap {
    rules: Vec<Rule>,
}

impl XattrMap {
    /// Parses `spec`; an error names the rule (counted from 1) and what is wrong with it.
    pub fn parse(spec: &str) -> std::result::Result<XattrMap, String> {
        let mut rules = Vec::new();
        let mut rest = spec.trim_start();
        let mut n = 0;
        while let Some(sep) = rest.chars().next() {
            n += 1;
            let bad = |why: &str| format!("rule {n}: {why}");
            rest = &rest[sep.len_utf8()..];
            let mut field = |what: &str| match rest.split_once(sep) {
                Some((f, after)) => {
                    rest = after;
                    Ok(f)
                }
                None => Err(bad(&format!(
                    "ends before its {what} does (each field ends with '{sep}')"
                ))),
            };
            let kind = field("type")?;
            if kind == "map" {
                let (key, prepend) = (field("key")?, field("prepend")?);
                if !rest.trim().is_empty() {
                    return Err(bad("a map rule must be the last rule"));
                }
                rules.extend(expand_map(key.as_bytes(), prepend.as_bytes()));
                break;
            }
            let kind = match kind {
                "prefix" => Kind::Prefix,
                "ok" => Kind::Ok,
                "bad" => Kind::Bad,
                "unsupported" => Kind::Unsupported,
                other => {
                    return Err(bad(&format!(
                        "unknown type '{other}' (prefix, ok, bad, unsupported, map)"
                    )))
                }
            };
            let (client, server) = match field("scope")? {
                "client" => (true, false),
                "server" => (false, true),
                "all" => (true, true),
                other => {
                    return Err(bad(&format!(
                        "unknown scope '{other}' (client, server, all)"
                    )))
                }
            };
            let (key, prepend) = (field("key")?, field("prepend")?);
            rules.push(Rule {
                kind,
                client,
                server,
                key: key.as_bytes().to_vec(),
                prepend: prepend.as_bytes().to_vec(),
            });
            rest = rest.trim_start();
        }
        if rules.is_empty() {
            return Err("no rules".into());
        }
        Ok(XattrMap { rules })
    }

    /// The host's name for the name `name` a request brings: `EPERM` or `EOPNOTSUPP` where
    /// a rule refuses it, `EPERM` where none matches.
    pub fn to_host<'a>(&self, name: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        let rule = self
            .rules
            .iter()
            .find(|r| r.client && name.starts_with(&r.key));
        match rule.map(|r| (r.kind, r)) {
            Some((Kind::Ok, _)) => Ok(Cow::Borrowed(name)),
            Some((Kind::Prefix, r)) => Ok(Cow::Owned([&r.prepend[..], name].concat())),
            Some((Kind::Unsupported, _)) => Err(Errno::EOPNOTSUPP),
            Some((Kind::Bad, _)) | None => Err(Errno::EPERM),
        }
    }

    /// The guest's name for the name `name` the backend lists, or `None` if it is hidden.
    pub fn to_guest<'a>(&self, name: &'a [u8]) -> Option<&'a [u8]> {
        let rule = self
            .rules
            .iter()
            .find(|r| r.server && name.starts_with(&r.prepend))?;
        match rule.kind {
            Kind::Ok => Some(name),
            Kind::Prefix => Some(&name[rule.prepend.len()..]),
            Kind::Bad | Kind::Unsupported => None,
        }
    }

    /// A LISTXATTR answer (names each ending in NUL) as the guest is shown it.
    pub fn list_to_guest(&self, list: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(list.len());
        for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            if let Some(guest) = self.to_guest(name) {
                if !guest.is_empty() {
                    out.extend_from_slice(guest);
                    out.push(0);
                }
            }
        }
        out
    }
}

/// The rules `:map:KEY:PREPEND:` stands for.
fn expand_map(key: &[u8], prepend: &[u8]) -> Vec<Rule> {
    let rule = |kind, key: &[u8], prepend: &[u8]| Rule {
        kind,
        client: true,
        server: true,
        key: key.to_vec(),
        prepend: prepend.to_vec(),
    };
    let mut rules = vec![rule(Kind::Prefix, key, prepend)];
    if key.is_empty() {
        rules.push(rule(Kind::Bad, b"", b""));
    } else {
        rules.push(rule(Kind::Bad, prepend, key));
        rules.push(rule(Kind::Ok, b"", b""));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(m: &XattrMap, name: &str) -> Result<String> {
        m.to_host(name.as_bytes())
            .map(|n| String::from_utf8(n.into_owned()).unwrap())
    }

    #[test]
    fn a_guests_selinux_label_lives_under_trusted_and_the_hosts_stays_hidden() {
        let m = XattrMap::parse(":map:security.selinux:trusted.virtiofs.:").unwrap();
        assert_eq!(
            host(&m, "security.selinux").unwrap(),
            "trusted.virtiofs.security.selinux"
        );
        assert_eq!(host(&m, "user.x").unwrap(), "user.x");
        // The guest may not name the mapped names itself.
        assert_eq!(host(&m, "trusted.virtiofs.x"), Err(Errno::EPERM));
        let list = b"security.selinux\0trusted.virtiofs.security.selinux\0user.x\0";
        assert_eq!(m.list_to_guest(list), b"security.selinux\0user.x\0");
    }

    #[test]
    fn rules_apply_in_order_with_any_separator_and_white_space_between() {
        let m = XattrMap::parse(
            " /prefix/all/trusted./user.virtiofs./
              /bad/server//trusted./
              /unsupported/client/security.//
              /ok/all/// ",
        )
        .unwrap();
        assert_eq!(host(&m, "trusted.a").unwrap(), "user.virtiofs.trusted.a");
        assert_eq!(host(&m, "security.b"), Err(Errno::EOPNOTSUPP));
        assert_eq!(host(&m, "user.c").unwrap(), "user.c");
        let list = b"user.virtiofs.trusted.a\0trusted.host\0user.c\0";
        assert_eq!(m.list_to_guest(list), b"trusted.a\0user.c\0");
        let all = XattrMap::parse(":map::user.virtiofs.:").unwrap();
        assert_eq!(
            host(&all, "security.x").unwrap(),
            "user.virtiofs.security.x"
        );
        assert_eq!(all.list_to_guest(b"user.virtiofs.a\0user.b\0"), b"a\0");
    }

    #[test]
    fn a_name_no_rule_matches_is_refused_and_hidden() {
        let m = XattrMap::parse(":ok:client:user.::").unwrap();
        assert_eq!(host(&m, "trusted.x"), Err(Errno::EPERM));
        assert_eq!(m.list_to_guest(b"user.a\0"), b"");
    }

    #[test]
    fn malformed_maps_are_refused_with_the_rule_and_reason() {
        for (spec, says) in [
            ("", "no rules"),
            (":prefix:all:a", "rule 1: ends before its key does"),
            (":map:a:b", "rule 1: ends before its prepend does"),
            (":ok:all:::  :swap:all:::", "rule 2: unknown type 'swap'"),
            (":ok:both:::", "rule 1: unknown scope 'both'"),
            (
                ":map:a:b: :ok:all:::",
                "rule 1: a map rule must be the last rule",
            ),
            (":ok:all::", "rule 1: ends before its prepend does"),
        ] {
            let e = XattrMap::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec:?}: {e}");
        }
    }
}
