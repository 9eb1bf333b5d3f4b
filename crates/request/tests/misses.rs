//! Misses the backend says its source may not have caught up with are not kept.

use memofs_core::Errno;
use memofs_request::{Granted, Op};

mod common;
use common::*;

#[test]
fn a_miss_of_a_name_made_elsewhere_a_moment_ago_is_not_kept() {
    let s = setup(&[], false, Granted::default());
    s.fake.lagging.lock().unwrap().push("lagging".into());
    assert_eq!(
        s.ask(
            1,
            USER,
            Op::Lookup {
                name: name("lagging")
            }
        ),
        Reply::Error(Errno::ENOENT),
        "a plain ENOENT: the kernel asks again at the next lookup"
    );
    match s.ask(
        1,
        USER,
        Op::Lookup {
            name: name("other"),
        },
    ) {
        Reply::Entry(e) => assert_eq!(e.attr, None, "a negative entry"),
        r => panic!("{r:?}"),
    }
}
