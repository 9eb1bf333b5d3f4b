//! The guest's ids and the host's ([`memofs_core::idmap`]): a request's caller and the
//! owners a `chown` sets come in as the guest's and are translated to the host's before the
//! backend sees them; every owner a reply shows goes out as the guest's. ACLs, which name
//! ids inside their values, are refused meanwhile ([`crate::xattrs`]).

use memofs_core::idmap::IdMaps;
use memofs_core::{Attr, Caller, Result, SetAttr};

/// The caller as the host knows it; `EPERM` for an id a rule forbids.
pub(crate) fn host_caller(ids: &IdMaps, c: &Caller) -> Result<Caller> {
    Ok(Caller {
        uid: ids.uid.to_host(c.uid)?,
        gid: ids.gid.to_host(c.gid)?,
        pid: c.pid,
    })
}

/// The owners a SETATTR sets, as the host's.
pub(crate) fn host_setattr(ids: &IdMaps, set: &mut SetAttr) -> Result<()> {
    if let Some(uid) = set.uid.as_mut() {
        *uid = ids.uid.to_host(*uid)?;
    }
    if let Some(gid) = set.gid.as_mut() {
        *gid = ids.gid.to_host(*gid)?;
    }
    Ok(())
}

/// `attr` with the guest's owners.
pub(crate) fn guest_attr(ids: &IdMaps, attr: &Attr) -> Attr {
    Attr {
        uid: ids.uid.to_guest(attr.uid),
        gid: ids.gid.to_guest(attr.gid),
        ..*attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memofs_core::Errno;

    fn ids() -> IdMaps {
        let mut ids = IdMaps::default();
        ids.uid.push("map:1000:101000:10").unwrap();
        ids.uid.push("forbid-guest:7:1").unwrap();
        ids.gid.push("squash-guest:0:50:100").unwrap();
        ids
    }

    #[test]
    fn callers_and_chowns_become_the_hosts_and_owners_the_guests() {
        let ids = ids();
        let c = host_caller(
            &ids,
            &Caller {
                uid: 1001,
                gid: 3,
                pid: 9,
            },
        )
        .unwrap();
        assert_eq!((c.uid, c.gid, c.pid), (101_001, 50, 9));
        assert_eq!(
            host_caller(
                &ids,
                &Caller {
                    uid: 7,
                    gid: 0,
                    pid: 1
                }
            ),
            Err(Errno::EPERM)
        );
        let mut set = SetAttr {
            uid: Some(1002),
            gid: Some(200),
            ..SetAttr::default()
        };
        host_setattr(&ids, &mut set).unwrap();
        assert_eq!((set.uid, set.gid), (Some(101_002), Some(200)));
        let t = memofs_core::Timestamp::default();
        let a = Attr {
            ino: 5,
            generation: 1,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: memofs_core::FileKind::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 101_003,
            gid: 50,
            rdev: 0,
            blksize: 4096,
            mount_root: false,
        };
        let g = guest_attr(&ids, &a);
        assert_eq!((g.uid, g.gid), (1003, 50));
    }
}
