//! Times through the passthrough backend: what SETATTR writes to the host file and what
//! GETATTR reads back, to the nanosecond, before 1970 and after 2262. The export is a tmpfs
//! of its own (whose range is the kernel's whole `timespec64`; ext4's ends in 2446).

mod common;

use std::os::unix::fs::MetadataExt;

use common::{n, setup_tmpfs};
use memofs_core::time::EDGE_TIMES;
use memofs_core::{Backend, Caller, SetAttr, TimeSet, Timestamp, ROOT_INO};
use memofs_passthrough::PassthroughConfig;

#[test]
fn times_reach_the_host_and_come_back_exactly() {
    let Some((_tmp, export, _mounted, fs)) = setup_tmpfs("times", PassthroughConfig::default())
    else {
        memofs_e2e::skip!(Root, "mounting a tmpfs export needs root");
    };
    let (attr, o) = fs
        .create(&Caller::ROOT, ROOT_INO, n("f"), 0o644, 0, libc::O_RDWR)
        .unwrap();
    for &(sec, nsec) in &EDGE_TIMES {
        let t = Timestamp::from_timespec(sec, nsec);
        let set = SetAttr {
            atime: Some(TimeSet::At(t)),
            mtime: Some(TimeSet::At(t)),
            ..SetAttr::default()
        };
        let a = fs.setattr(&Caller::ROOT, attr.ino, &set).unwrap();
        assert_eq!(a.atime.to_timespec(), (sec, nsec), "atime answered");
        assert_eq!(a.mtime.to_timespec(), (sec, nsec), "mtime answered");
        let host = std::fs::metadata(export.join("f")).unwrap();
        assert_eq!(
            (
                host.atime(),
                host.atime_nsec(),
                host.mtime(),
                host.mtime_nsec()
            ),
            (sec, i64::from(nsec), sec, i64::from(nsec)),
            "what the host file holds"
        );
        let a = fs.getattr(attr.ino).unwrap();
        assert_eq!(
            (a.atime.to_timespec(), a.mtime.to_timespec()),
            ((sec, nsec), (sec, nsec)),
            "read back"
        );
    }
    fs.release(attr.ino, o.fh).unwrap();
}
