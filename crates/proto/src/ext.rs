//! Request extensions: what the kernel appends to a request's arguments when INIT asked
//! for it, `fuse_in_header.total_extlen` 8-byte units of them.

use std::mem::size_of;

use memofs_core::{Errno, Result};
use memofs_request::Label;
use zerocopy::FromBytes;

use crate::abi;
use crate::decode::name;

/// The security label in the extensions `ext` of a request that makes a node (after its
/// arguments, `fuse_in_header.total_extlen` 8-byte units, each extension a
/// `fuse_ext_header` whose `size` counts itself). Only the security context extension is
/// asked for, and only with `FUSE_SECURITY_CTX`: a `fuse_secctx_header` (an extension header
/// whose type, 0 to 31, is the number of contexts: 0 where no security module gave one),
/// then per context a `fuse_secctx` (the value's size), the attribute's NUL-terminated name
/// and the value. Linux sends at most one context; anything else (more contexts, the
/// supplementary groups extension, type 32, which is never asked for) is refused.
pub(crate) fn label(mut ext: &[u8], security_ctx: bool) -> Result<Option<Label<'_>>> {
    let mut label = None;
    let mut seen = false;
    while !ext.is_empty() {
        let (h, _) = abi::fuse_ext_header::read_from_prefix(ext).map_err(|_| Errno::EINVAL)?;
        let size = h.size as usize;
        if size < size_of::<abi::fuse_ext_header>() || size > ext.len() {
            return Err(Errno::EINVAL);
        }
        let body = &ext[size_of::<abi::fuse_ext_header>()..size];
        match h.ext_type {
            0 if security_ctx && !seen => {}
            1 if security_ctx && !seen => label = Some(security_context(body)?),
            _ => return Err(Errno::EINVAL),
        }
        seen = true;
        ext = &ext[size..];
    }
    Ok(label)
}

/// One security context: `fuse_secctx`, the name, the value (padding may follow).
fn security_context(body: &[u8]) -> Result<Label<'_>> {
    let (c, rest) = abi::fuse_secctx::read_from_prefix(body).map_err(|_| Errno::EINVAL)?;
    let (name, rest) = name(rest)?;
    let value = rest.get(..c.size as usize).ok_or(Errno::EINVAL)?;
    if name.is_empty() || value.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(Label { name, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use zerocopy::IntoBytes;

    /// A security context extension with `contexts` (name, value), padded to 8 bytes as
    /// Linux sends it.
    fn secctx(contexts: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, value) in contexts {
            let c = abi::fuse_secctx {
                size: value.len() as u32,
                padding: 0,
            };
            body.extend_from_slice(c.as_bytes());
            body.extend_from_slice(name);
            body.push(0);
            body.extend_from_slice(value);
        }
        while (body.len() + 8) % 8 != 0 {
            body.push(0);
        }
        let h = abi::fuse_ext_header {
            size: (body.len() + 8) as u32,
            ext_type: contexts.len() as u32,
        };
        [h.as_bytes(), &body].concat()
    }

    #[test]
    fn a_security_context_is_read_with_its_name_and_value() {
        let ext = secctx(&[(b"security.selinux", b"system_u:object_r:tmp_t:s0\0")]);
        assert_eq!(ext.len() % 8, 0);
        assert_eq!(
            label(&ext, true),
            Ok(Some(Label {
                name: OsStr::new("security.selinux"),
                value: b"system_u:object_r:tmp_t:s0\0",
            }))
        );
        // No security module gave one: a header with no context.
        assert_eq!(label(&secctx(&[]), true), Ok(None));
        assert_eq!(label(&[], true), Ok(None));
    }

    #[test]
    fn malformed_or_unasked_extensions_are_refused() {
        let one = secctx(&[(b"security.selinux", b"ctx")]);
        // Not asked for at INIT.
        assert_eq!(label(&one, false), Err(Errno::EINVAL));
        // Two security context extensions, or two contexts in one.
        assert_eq!(
            label(&[one.clone(), one.clone()].concat(), true),
            Err(Errno::EINVAL)
        );
        let two = secctx(&[(b"security.selinux", b"a"), (b"security.smack", b"b")]);
        assert_eq!(label(&two, true), Err(Errno::EINVAL));
        // Supplementary groups (type 32) are never asked for.
        let mut groups = one.clone();
        groups[4..8].copy_from_slice(&32u32.to_ne_bytes());
        assert_eq!(label(&groups, true), Err(Errno::EINVAL));
        // Sizes that do not fit: below the header, past the end, a value past its extension.
        for size in [0u32, 4, one.len() as u32 + 8] {
            let mut bad = one.clone();
            bad[..4].copy_from_slice(&size.to_ne_bytes());
            assert_eq!(label(&bad, true), Err(Errno::EINVAL), "size {size}");
        }
        let mut long_value = one.clone();
        long_value[8..12].copy_from_slice(&1000u32.to_ne_bytes());
        assert_eq!(label(&long_value, true), Err(Errno::EINVAL));
        // A name without its NUL, an empty name, an empty value; a cut header.
        let c = abi::fuse_secctx {
            size: 1,
            padding: 0,
        };
        let h = abi::fuse_ext_header {
            size: 32,
            ext_type: 1,
        };
        let no_nul = [h.as_bytes(), c.as_bytes(), b"security.selinuxx"].concat();
        assert_eq!(label(&no_nul, true), Err(Errno::EINVAL));
        let empty = secctx(&[(b"security.selinux", b"")]);
        assert_eq!(label(&empty, true), Err(Errno::EINVAL));
        assert_eq!(label(&secctx(&[(b"", b"v")]), true), Err(Errno::EINVAL));
        assert_eq!(label(&one[..6], true), Err(Errno::EINVAL));
    }
}
