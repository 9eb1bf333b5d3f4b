"""Targets on a distributed filesystem, each on a test bed of `scripts/dfs/` with two client
mounts of one volume as machines A and B, started fresh for each mount of a target and
stopped with it:

- `seaweedfs`: machine A's own mount of a SeaweedFS cluster on loopback (master, volume and
  filer; bind-mounted on the target's mount point);
- `memofs-sw[:ARGS]`: memofs's passthrough backend exporting it (`memofs mount [ARGS] A MNT`),
  by default following the filer's change stream;
- `juicefs`: machine A's own mount of a JuiceFS volume (SQLite metadata, local objects), an
  engine with no change stream;
- `memofs-jfs[:ARGS]`: memofs exporting that mount, on its timeout-only path.

All name machine B as their peer, where the `dfs` workload makes its changes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .targets import Memofs, Target, TargetError
from .tools import REPO

BEDS = REPO / "scripts" / "dfs"


class Cluster:
    """The test bed of `engine` in `dir`: started by `start`, everything it started ended by
    `stop`."""

    def __init__(self, engine: str, dir: Path):
        self.engine, self.dir = engine, dir
        self.script = BEDS / f"{engine}.sh"

    def start(self) -> None:
        r = subprocess.run(["bash", str(self.script), "start", str(self.dir)],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            self.stop()
            raise TargetError(f"the {self.engine} bed did not start: {r.stderr.strip()[-500:]}")

    def stop(self) -> None:
        subprocess.run(["bash", str(self.script), "stop", str(self.dir)], capture_output=True,
                       timeout=120)

    def machine(self, m: str) -> Path:
        return self.dir / m


class _OnCluster:
    """What every kind shares: a bed of `engine` per mount, machine B as the peer."""

    engine = ""
    cluster: Cluster | None = None

    def check(self) -> None:
        if not (BEDS / f"{self.engine}.sh").exists():
            raise TargetError(f"no {BEDS / self.engine}.sh")

    def _start_cluster(self) -> Path:
        self.cluster = Cluster(self.engine, self._mkdir(f"{self.kind}-cluster-"))
        self.cluster.start()
        return self.cluster.machine("a")

    def peer(self) -> Path | None:
        return self.cluster.machine("b") if self.cluster else None

    def _stop_server(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            try:
                self.cluster.dir.rmdir()
            except OSError:
                pass
            self.cluster = None


class _EngineMount(_OnCluster, Target):
    """Machine A's own mount, bind-mounted on the target's mount point."""

    fstype = "fuse"

    def _mount(self, mnt: Path) -> None:
        a = self._start_cluster()
        r = subprocess.run(["mount", "--bind", str(a), str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TargetError(f"mount --bind of machine A failed: {r.stderr.strip()}")


class _MemofsOver(_OnCluster, Memofs):
    """memofs's passthrough backend exporting machine A's mount."""

    def check(self) -> None:
        _OnCluster.check(self)
        Memofs.check(self)

    def _mount(self, mnt: Path) -> None:
        a = self._start_cluster()
        self._run_mount([self.binary(), "mount", *self.args, str(a), str(mnt)])


class SeaweedFs(_EngineMount):
    kind, engine = "seaweedfs", "seaweedfs"
    summary = ("machine A's own SeaweedFS mount (`weed mount`), of a fresh cluster on loopback "
               "with machine B beside it")


class MemofsSeaweedFs(_MemofsOver):
    kind, engine = "memofs-sw", "seaweedfs"
    summary = ("memofs's passthrough backend exporting machine A's SeaweedFS mount of a fresh "
               "cluster (`memofs mount [ARGS] A MNT`)")


class JuiceFs(_EngineMount):
    kind, engine = "juicefs", "juicefs"
    summary = ("machine A's own JuiceFS mount (`juicefs mount`) of a fresh volume (SQLite "
               "metadata, local objects) with machine B beside it")


class MemofsJuiceFs(_MemofsOver):
    kind, engine = "memofs-jfs", "juicefs"
    summary = ("memofs's passthrough backend exporting machine A's JuiceFS mount of a fresh "
               "volume (`memofs mount [ARGS] A MNT`; no change stream: 1 s timeouts)")
