//! Security labels of new nodes (`--security-label`) against a fake backend.

use memofs_core::xattrmap::XattrMap;
use memofs_core::Errno;
use memofs_request::{Granted, Label, Op};

mod common;
use common::*;

fn labelling() -> Setup {
    setup_planned(&[], Fake::new(false), Granted::default(), |plan| {
        plan.security_label = memofs_core::options::Want::On;
        plan.xattrs = Some(XattrMap::parse(":map:security.:trusted.vm.:").unwrap());
    })
}

fn create() -> Op<'static> {
    Op::Create {
        name: name("new"),
        mode: 0o644,
        umask: 0,
        flags: libc::O_RDWR,
    }
}

#[test]
fn a_new_file_is_labelled_under_the_mapped_name() {
    let s = labelling();
    let label = Label {
        name: name("security.selinux"),
        value: b"system_u:object_r:tmp_t:s0\0",
    };
    let r = s.ask_labelled(1, USER, create(), Some(label));
    assert!(matches!(r, Reply::Created(..)), "{r:?}");
    assert_eq!(
        *s.fake.xattrs.lock().unwrap(),
        [(
            "trusted.vm.security.selinux".into(),
            b"system_u:object_r:tmp_t:s0\0".to_vec()
        )]
    );
    // Without a label (no security module gave one) nothing is set.
    let r = s.ask_labelled(1, USER, create(), None);
    assert!(matches!(r, Reply::Created(..)), "{r:?}");
    assert_eq!(s.fake.xattrs.lock().unwrap().len(), 1);
}

#[test]
fn a_node_that_cannot_be_labelled_is_not_left_behind() {
    let s = labelling();
    // File capabilities are no label: set with the server's privilege they would grant them.
    let caps = Label {
        name: name("security.capability"),
        value: b"\x01\0\0\x02",
    };
    assert_eq!(
        s.ask_labelled(1, USER, create(), Some(caps)),
        Reply::Error(Errno::EINVAL)
    );
    let calls = s.fake.calls();
    let undo: Vec<_> = calls
        .iter()
        .skip_while(|c| !c.starts_with("create"))
        .skip(1)
        .cloned()
        .collect();
    assert_eq!(
        undo,
        ["release 2", "unlink 1 new", "forget 2 1"],
        "{calls:?}"
    );
    assert!(s.fake.xattrs.lock().unwrap().is_empty());
    // A name outside `security.` is refused the same way; a directory is removed as one.
    let user = Label {
        name: name("user.x"),
        value: b"v",
    };
    let mkdir = Op::Mkdir {
        name: name("d"),
        mode: 0o755,
        umask: 0,
    };
    assert_eq!(
        s.ask_labelled(1, USER, mkdir, Some(user)),
        Reply::Error(Errno::EINVAL)
    );
    let calls = s.fake.calls();
    assert!(
        calls.ends_with(&["rmdir 1 d".into(), "forget 1 1".into()]),
        "{calls:?}"
    );
}
