//! Tests of [`super`] (`kernel_data.rs`), kept apart for the length of the module.
use super::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn an_open_count_past_its_bits_stays_at_the_top_and_keeps_the_number() {
    let mut open = Open {
        id_count: Open::MAX_ID,
        held: None,
    };
    open.set_count(Open::MAX_COUNT + 10);
    assert_eq!((open.id(), open.count()), (Open::MAX_ID, Open::MAX_COUNT));
    open.set_count(3);
    assert_eq!((open.id(), open.count()), (Open::MAX_ID, 3));
}

#[test]
fn data_names_are_the_decimal_number() {
    for id in [0, 7, 10, 4096, 1234567890, Open::MAX_ID] {
        assert_eq!(
            DataName::new(id).as_cstr().to_str().unwrap(),
            id.to_string()
        );
    }
}

#[test]
fn store_enforces_its_size_and_has_no_path() {
    if !is_root() {
        memofs_e2e::skip!(Root, "mounting a private tmpfs needs root");
    }
    let store = BackingStore::new(1 << 20, 16, AtimePolicy::default(), HugeMode::Never).unwrap();
    let f = store.new_file(false).unwrap();
    let big = vec![7u8; 2 << 20];
    let written = f.write(0, &big).unwrap();
    assert_eq!(written, 1 << 20, "the kernel stops the write at size=");
    assert!(f.write(written as u64, &big).is_err());
    let (total, free) = store.usage().unwrap();
    assert_eq!((total, free), (1 << 20, 0));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains("memofs-data"),
        "the private tmpfs must not stay attached"
    );
    // Dropping the file frees its data; closed files hold no descriptor.
    drop(f);
    assert_eq!(store.usage().unwrap().1, 1 << 20);
    let g = store.new_file(true).unwrap();
    assert!(
        g.open.lock().held.is_some(),
        "a file made to be opened keeps its descriptor"
    );
    g.open();
    g.write(0, b"x").unwrap();
    assert_eq!(g.size_and_blocks().0, 1, "stat through the held descriptor");
    g.close();
    g.close();
    assert!(g.open.lock().held.is_none());
    g.write(0, b"still works without a held descriptor")
        .unwrap();
    assert_eq!(g.size_and_blocks().0, 37);
    assert!(g.open.lock().held.is_none(), "a closed file holds nothing");
    // An open holds no descriptor until the data file is used, then keeps it.
    g.open();
    assert!(g.open.lock().held.is_none());
    let lent = g.data_file().unwrap();
    assert!(Arc::ptr_eq(&lent, &g.data_file().unwrap()));
    g.close();
    assert!(g.open.lock().held.is_none());
}
