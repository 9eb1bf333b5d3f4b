//! memofs over a distributed filesystem: SeaweedFS on loopback (`scripts/dfs/seaweedfs.sh`),
//! two client mounts of one filer standing for two machines, A and B; memofs's passthrough
//! backend exports A. Changes made on B produce no event on this host, so memofs must not
//! keep what it caches past a short timeout there: a name B creates after memofs answered a
//! miss for it, and one B deletes, show through memofs within that timeout (1 s, `cache=auto`,
//! chosen by memofs for such a source) and a little slack.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memofs_e2e::checks::stats_json;
use memofs_e2e::{ok, require_mount, skip, Mount, TempDir};

/// How late a change on machine B may show through memofs on A: the 1 s timeout memofs
/// chooses for such a source, and slack for a loaded machine.
const BOUND: Duration = Duration::from_secs(3);

/// The test bed, stopped (mounts and processes) when dropped, whatever happened.
struct Cluster {
    dir: PathBuf,
    _base: TempDir,
}

impl Cluster {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dfs/seaweedfs.sh")
    }

    fn start() -> Result<Cluster, String> {
        let base = TempDir::new("memofs-e2e-dfs-");
        let dir = base.path().join("cluster");
        let cluster = Cluster { dir, _base: base };
        let out = Command::new("bash")
            .arg(Cluster::script())
            .arg("start")
            .arg(&cluster.dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(cluster)
    }

    fn machine(&self, m: &str) -> PathBuf {
        self.dir.join(m)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(Cluster::script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// How long until `cond` holds, polled every 20 ms, or `None` after [`BOUND`] and a second.
fn seen_within(cond: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < BOUND + Duration::from_secs(1) {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

#[test]
fn changes_made_on_another_machine_show_through_memofs_within_its_timeout() {
    require_mount!();
    if std::env::var("MEMOFS_E2E_OPTS").is_ok_and(|o| !o.is_empty()) {
        skip!(
            Config("dfs_default_options"),
            "the cluster test runs with memofs's default options only"
        );
    }
    let cluster = match Cluster::start() {
        Ok(c) => c,
        Err(e) => skip!(Tool("seaweedfs"), "no SeaweedFS cluster here: {e}"),
    };
    let (a, b) = (cluster.machine("a"), cluster.machine("b"));
    let m = Mount::try_memofs_source(&a, &[]).unwrap_or_else(|e| panic!("{e}"));
    let doc = stats_json(m.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        doc.contains(r#""negative_timeout":1.0"#),
        "memofs keeps misses on a FUSE source for 1 s: {doc}"
    );
    // Through memofs, seen on B.
    ok!(fs::write(
        m.join("from-memofs"),
        b"written on A through memofs"
    ));
    assert!(
        seen_within(
            || fs::read(b.join("from-memofs")).is_ok_and(|d| d == b"written on A through memofs")
        )
        .is_some(),
        "B never saw a file written through memofs on A"
    );
    // Made on B after memofs answered a miss; then deleted on B after memofs answered a hit.
    let mut worst = Duration::ZERO;
    for i in 0..10 {
        let name = format!("from-b-{i}");
        assert!(!exists(&m.join(&name)));
        ok!(fs::write(b.join(&name), b"made on B"));
        let seen = seen_within(|| exists(&m.join(&name)))
            .unwrap_or_else(|| panic!("{name}, made on B, never showed through memofs"));
        assert_eq!(ok!(fs::read(m.join(&name))), b"made on B");
        ok!(fs::remove_file(b.join(&name)));
        let gone = seen_within(|| !exists(&m.join(&name)))
            .unwrap_or_else(|| panic!("{name}, deleted on B, never went from memofs"));
        worst = worst.max(seen).max(gone);
    }
    assert!(
        worst <= BOUND,
        "a change on B took {worst:?} to show through memofs (bound {BOUND:?})"
    );
    drop(m);
}
