//! Tests of [`super`] (`lib.rs`), kept apart for the length of the module.
use super::*;

#[test]
fn a_socket_is_private_when_bind_creates_it_whatever_the_umask() {
    let dir = std::env::temp_dir().join(format!("memofs-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    // SAFETY: umask only sets this process's file mode mask (restored below).
    let old = unsafe { libc::umask(0) };
    let listener = bind_private(&path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let _listener = listener.unwrap();
    let mode = std::fs::symlink_metadata(&path).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600, "no moment when others may connect");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_has_every_section_and_escapes() {
    let src = StatsSource {
        invalidate: Box::new(|| unreachable!()),
        features: Box::new(|| vec![("fuse_passthrough".into(), "yes".into())]),
        stats: Arc::new(Stats::new()),
        policy: CachePolicy::default(),
        usage: Box::new(BackendUsage::default),
        settings: vec![("fsname".into(), "a\"b".into())],
        send_ahead: None,
        remount: None,
        upgrade: None,
    };
    src.stats
        .record(memofs_request::Kind::Lookup, std::time::Instant::now());
    let j = to_json(&src.doc());
    assert!(j.contains("\"LOOKUP\":{\"count\":1"), "{j}");
    assert!(j.contains("\"negative_timeout\":3600"), "{j}");
    assert!(j.contains("\"fsname\":\"a\\\"b\""), "{j}");
    assert!(
        j.contains("\"features\":{\"fuse_passthrough\":\"yes\"}"),
        "{j}"
    );
}

#[test]
fn serve_and_fetch_round_trip() {
    let dev = 0xdead_0000_0000 + std::process::id() as u64;
    let src = StatsSource {
        invalidate: Box::new(|| Invalidated {
            epoch: false,
            names: 0,
            not_done: Some("no epoch".into()),
        }),
        features: Box::new(Vec::new),
        stats: Arc::new(Stats::new()),
        policy: CachePolicy::default(),
        usage: Box::new(|| BackendUsage {
            bytes_used: 42,
            ..Default::default()
        }),
        settings: vec![],
        send_ahead: None,
        remount: None,
        upgrade: None,
    };
    let control = serve(dev, src).unwrap();
    let Listening::File(path, _) = &control.at else {
        panic!("a socket file")
    };
    let mode = std::fs::metadata(path).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600, "private from the start");
    assert!(request(dev, Path::new("/"), "stats")
        .unwrap()
        .contains("\"bytes_used\":42"));
    assert_eq!(
        request(dev, Path::new("/"), "invalidate").unwrap(),
        "{\"ok\":false,\"epoch\":false,\"names\":0,\"not_done\":\"no epoch\"}"
    );
    assert!(request(dev, Path::new("/"), "bogus")
        .unwrap()
        .contains("unknown command 'bogus'"));
    let Listening::File(path, _) = &control.at else {
        panic!("root and a user with a runtime directory get a socket file")
    };
    let path = path.clone();
    drop(control);
    assert!(!path.exists(), "the socket goes with the server");
    assert!(request(dev, Path::new("/"), "stats").is_err());
}
