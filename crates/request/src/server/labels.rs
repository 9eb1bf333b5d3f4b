//! Security labels of new nodes (`FUSE_SECURITY_CTX`, a guest's `--security-label`).
//!
//! Where the plan asks for them, the kernel sends with each request that makes a node the
//! label its security module chose (SELinux: `security.selinux`). The node is labelled as
//! soon as the backend has made it, with the server's own privilege, as Linux labels a new
//! inode whatever its creator may set, and under the name the mount's attribute map gives
//! it (`--xattrmap`, e.g. `trusted.virtiofs.security.selinux` on the host). A node that
//! cannot be labelled is removed again and the request fails with the error, so no
//! unlabelled node is left where the guest's policy expects one, as virtiofsd does.
//!
//! Only a `security.` attribute is a label, and never `security.capability`: a label set
//! with the server's privilege must not grant file capabilities.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use memofs_core::{Attr, Backend, Caller, Errno, FileKind, Ino, Result};

use super::Server;
use crate::privs::CAPS;
use crate::request::Label;

/// The server itself, for what the kernel does on a request's behalf without asking for
/// the caller's permission.
const SERVER: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 0,
};

/// Whether `name` may be set as a label.
fn is_label(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b"security.") && name != CAPS
}

impl<B: Backend> Server<B> {
    /// Labels `made`, a node just made in `parent` (as `name`; none for O_TMPFILE; opened
    /// as `fh` for CREATE and TMPFILE), with `label`. On failure the node is given back:
    /// its open released, its name removed, the lookup the reply would have given forgotten.
    pub(super) fn label_new(
        &self,
        parent: Ino,
        name: Option<&OsStr>,
        (made, fh): (&Attr, Option<u64>),
        label: Option<&Label<'_>>,
    ) -> Result<()> {
        let Some(label) = label else {
            return Ok(());
        };
        let r = if is_label(label.name) {
            crate::xattrs::host_name(&self.plan, label.name).and_then(|host| {
                self.backend
                    .setxattr(&SERVER, made.ino, &host, label.value, 0)
            })
        } else {
            Err(Errno::EINVAL)
        };
        if let Err(e) = r {
            log::debug!(
                "a new node could not be labelled {:?} ({e}): it is removed again",
                label.name
            );
            let b = &*self.backend;
            if let Some(fh) = fh {
                let _ = b.release(made.ino, fh);
            }
            if let Some(name) = name {
                let _ = match made.kind {
                    FileKind::Directory => b.rmdir(&SERVER, parent, name),
                    _ => b.unlink(&SERVER, parent, name),
                };
            }
            self.forget(made.ino, 1);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_security_attributes_but_capabilities() {
        assert!(is_label(OsStr::new("security.selinux")));
        assert!(is_label(OsStr::new("security.SMACK64")));
        assert!(!is_label(OsStr::new("security.capability")));
        assert!(!is_label(OsStr::new("trusted.overlay.opaque")));
        assert!(!is_label(OsStr::new("user.x")));
    }
}
