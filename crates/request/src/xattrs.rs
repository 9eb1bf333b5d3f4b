//! Extended attribute names as the kernel names them and as the backend keeps them: ACL
//! names refused where the plan refuses ACLs ([`MountPlan::acls_refused`]), and the rest
//! through the mount's name map ([`memofs_core::xattrmap`]), if it has one.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use memofs_core::plan::MountPlan;
use memofs_core::{Errno, Result};

use crate::privs::CAPS;

/// The backend's name for the name `name` a request brings; `EOPNOTSUPP` for an ACL the
/// plan refuses, `EPERM` or `EOPNOTSUPP` where the map refuses it.
pub(crate) fn host_name<'a>(plan: &MountPlan, name: &'a OsStr) -> Result<Cow<'a, OsStr>> {
    if plan.acls_refused() && name.as_bytes().starts_with(b"system.posix_acl_") {
        return Err(Errno::EOPNOTSUPP);
    }
    match &plan.xattrs {
        None => Ok(Cow::Borrowed(name)),
        Some(map) => Ok(match map.to_host(name.as_bytes())? {
            Cow::Borrowed(b) => Cow::Borrowed(OsStr::from_bytes(b)),
            Cow::Owned(v) => Cow::Owned(OsString::from_vec(v)),
        }),
    }
}

/// A LISTXATTR answer of the backend as the kernel is shown it.
pub(crate) fn guest_list(plan: &MountPlan, list: Vec<u8>) -> Vec<u8> {
    match &plan.xattrs {
        None => list,
        Some(map) => map.list_to_guest(&list),
    }
}

/// The backend's name for file capabilities, or `None` if the map refuses the name (then a
/// guest can have set none).
pub(crate) fn caps_name(plan: &MountPlan) -> Option<OsString> {
    host_name(plan, OsStr::new(CAPS)).ok().map(Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::xattrmap::XattrMap;

    #[test]
    fn names_go_through_the_map_and_acls_are_refused_where_the_plan_says() {
        let opts = memofs_core::options::parse_options::<&str>(&[], 1 << 30).unwrap();
        let mut plan = MountPlan::new(&opts, memofs_core::plan::BackendKind::Mem, true);
        let acl = OsStr::new("system.posix_acl_access");
        assert_eq!(host_name(&plan, acl).unwrap(), Cow::Borrowed(acl));
        assert_eq!(caps_name(&plan).unwrap(), CAPS);
        plan.ids.uid.push("map:0:1000:1").unwrap();
        assert_eq!(host_name(&plan, acl), Err(Errno::EOPNOTSUPP));
        plan.xattrs = Some(XattrMap::parse(":map:security.:trusted.vm.:").unwrap());
        assert_eq!(
            host_name(&plan, OsStr::new("security.selinux")).unwrap(),
            OsStr::new("trusted.vm.security.selinux")
        );
        assert_eq!(
            host_name(&plan, OsStr::new("trusted.vm.x")),
            Err(Errno::EPERM)
        );
        assert_eq!(caps_name(&plan).unwrap(), "trusted.vm.security.capability");
        let list = b"trusted.vm.security.capability\0security.selinux\0user.a\0".to_vec();
        assert_eq!(guest_list(&plan, list), b"security.capability\0user.a\0");
        plan.xattrs = Some(XattrMap::parse(":bad:client:security.:::ok:all:::").unwrap());
        assert_eq!(caps_name(&plan), None);
    }
}
