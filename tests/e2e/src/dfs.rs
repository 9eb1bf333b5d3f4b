//! A distributed filesystem's test bed (`scripts/dfs/ENGINE.sh`): a cluster on loopback with
//! two client mounts of one volume, machines A and B, for the tests of memofs over it.

use std::path::PathBuf;
use std::process::Command;

use crate::TempDir;

/// The test bed, stopped (mounts and processes) when dropped, whatever happened.
pub struct Cluster {
    engine: &'static str,
    dir: PathBuf,
    _base: TempDir,
}

impl Cluster {
    fn script(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../../scripts/dfs/{}.sh", self.engine))
    }

    /// Starts the bed of `engine` (`seaweedfs` or `juicefs`).
    pub fn start(engine: &'static str) -> Result<Cluster, String> {
        let base = TempDir::new("memofs-e2e-dfs-");
        let dir = base.path().join("cluster");
        let cluster = Cluster {
            engine,
            dir,
            _base: base,
        };
        let out = Command::new("bash")
            .arg(cluster.script())
            .arg("start")
            .arg(&cluster.dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(cluster)
    }

    /// Machine `m`'s mount (`a` or `b`).
    pub fn machine(&self, m: &str) -> PathBuf {
        self.dir.join(m)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(self.script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}
