"""Targets on a distributed filesystem: a SeaweedFS cluster on loopback
(`scripts/dfs/seaweedfs.sh`: master, volume and filer, and two `weed mount`s of one filer as
machines A and B), started fresh for each mount of a target and stopped with it.

- `seaweedfs`: machine A's own mount (bind-mounted on the target's mount point);
- `memofs-sw[:ARGS]`: memofs's passthrough backend exporting machine A's mount
  (`memofs mount [ARGS] A MNT`), by default following the filer's change stream.

Both name machine B as their peer, where the `dfs` workload makes its changes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .targets import Memofs, Target, TargetError
from .tools import REPO

SCRIPT = REPO / "scripts" / "dfs" / "seaweedfs.sh"


class Cluster:
    """The test bed in `dir`: started by `start`, everything it started ended by `stop`."""

    def __init__(self, dir: Path):
        self.dir = dir

    def start(self) -> None:
        r = subprocess.run(["bash", str(SCRIPT), "start", str(self.dir)], capture_output=True,
                           text=True, timeout=180)
        if r.returncode != 0:
            self.stop()
            raise TargetError(f"the SeaweedFS cluster did not start: {r.stderr.strip()[-500:]}")

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.dir)], capture_output=True,
                       timeout=120)

    def machine(self, m: str) -> Path:
        return self.dir / m


class _OnCluster:
    """What both kinds share: a cluster per mount, machine B as the peer."""

    cluster: Cluster | None = None

    def _start_cluster(self) -> Path:
        self.cluster = Cluster(self._mkdir(f"{self.kind}-cluster-"))
        self.cluster.start()
        return self.cluster.machine("a")

    def peer(self) -> Path | None:
        return self.cluster.machine("b") if self.cluster else None

    def _stop_cluster(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            try:
                self.cluster.dir.rmdir()
            except OSError:
                pass
            self.cluster = None


class SeaweedFs(_OnCluster, Target):
    kind, fstype = "seaweedfs", "fuse"
    summary = ("machine A's own SeaweedFS mount (`weed mount`), of a fresh cluster on loopback "
               "with machine B beside it")

    def check(self) -> None:
        if not SCRIPT.exists():
            raise TargetError(f"no {SCRIPT}")

    def _mount(self, mnt: Path) -> None:
        a = self._start_cluster()
        r = subprocess.run(["mount", "--bind", str(a), str(mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TargetError(f"mount --bind of machine A failed: {r.stderr.strip()}")

    def _stop_server(self) -> None:
        self._stop_cluster()


class MemofsSeaweedFs(_OnCluster, Memofs):
    kind = "memofs-sw"
    summary = ("memofs's passthrough backend exporting machine A's SeaweedFS mount of a fresh "
               "cluster (`memofs mount [ARGS] A MNT`)")

    def _mount(self, mnt: Path) -> None:
        a = self._start_cluster()
        self._run_mount([self.binary(), "mount", *self.args, str(a), str(mnt)])

    def _stop_server(self) -> None:
        self._stop_cluster()
